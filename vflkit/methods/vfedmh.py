"""VFedMH: vertical federated learning for training multiple heterogeneous models.

Wang, Gai, Yu, Zhu, Choo, Xiao, "VFedMH: Vertical Federated Learning for Training Multiple
Heterogeneous Models", Algorithm 1, Eqs. (5)-(8).

Every party k holds its own model, an embedding network h(θ_k) and a prediction network p(θ_k).
A step's four communication rounds (blinded embeddings, their mean E, predictions, losses) and
each party's update: docs/engine.md, "VFedMH's step". Each party updates θ_k with its own loss
only (line 13): no party's parameters receive gradient from another party's loss.

Algorithm 1 writes "send L_k"; a scalar loss cannot be differentiated by its receiver, so the
round-4 message carries ∂L_k/∂R_k beside the value (B x classes floats, counted by the
ledger as kind ``loss``). Test accuracy of party k's model is collaborative inference: the
test global embedding, built by the same protocol, through p(θ_k, ·).
"""

from __future__ import annotations

import secrets
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from ..comm import Party
from ..errors import ConfigError
from ..secure import BlindingKeys, DeferredChecks, FixedPointRing, IdentityKey, KeyDirectory, aggregate, blind
from .base import VFLMethod, backward_each

#: Masks are indexed by (round, step); a per-party counter of blinded tensors gives each
#: training and evaluation batch a fresh pair (2**20 batches per round index).
_STEPS_PER_ROUND = 2**20


class VFedMH(VFLMethod):
    """VFedMH (Algorithm 1); models may differ between parties.

    Options
    -------
    blinding : bool, default True
        Blind passive embeddings with Diffie-Hellman blinding factors (Eqs. 4-6). False sends
        plain float embeddings (for the with/without comparison only).
    scheme : {"x25519", "ffdh"}, default "x25519"
        Key agreement of :class:`vflkit.secure.BlindingKeys`.
    authenticate_keys : bool, default False
        Sign each passive party's key-agreement public key with its Ed25519 identity key and
        have its peers verify the signature against a directory set up before training
        (:class:`vflkit.secure.KeyDirectory`), so an active party that relays keys of its own
        (or replays old ones) is refused with SecurityError instead of unmasking embeddings.
        The masks, hence training, are the same either way; each relayed key grows by a 64-byte
        signature, which the setup phase of the ledger counts. Off by default so that records
        made without it keep their ledgers (see the module docstring of :mod:`vflkit.secure`).
    scale_bits : int, default 16
        Fixed-point fraction bits of the ring the masks live in.
    mask_prefetch : bool, default True
        Generate each passive party's next blinding factor on a background thread while the
        current step trains (:meth:`vflkit.secure.BlindingKeys.prefetch`): the same masks,
        off the critical path. False computes each on demand (the benchmark compares both).
    embedding_gradient : {"share", "full"}, default "share"
        What party k's embedding network h(θ_k) receives of ∂L_k/∂E. "share": ∂L_k/∂E / C, the
        exact gradient of its own loss through Eq. 7's mean (the letter of the paper). "full":
        ∂L_k/∂E itself, as an implementation that hands each party "the gradient of the global
        embedding" does; with plain SGD it trains h at C times the share's rate. The paper does
        not say which its code does; the studies run both (the 1/C comparison).
    """

    name = "vfedmh"
    defaults = {"blinding": True, "scheme": "x25519", "scale_bits": 16, "mask_prefetch": True,
                "embedding_gradient": "share", "authenticate_keys": False}
    #: The values of the ``embedding_gradient`` option.
    EMBEDDING_GRADIENTS: tuple[str, ...] = ("share", "full")
    #: Where the ring arithmetic runs: "torch" on the embeddings' device (a GPU step then
    #: never waits for the host), "numpy" on the host (the reference), or "auto": torch on an
    #: accelerator, numpy on the CPU, where the host is the device (its reads wait for nothing)
    #: and numpy's single uint64 operations beat torch's split 64-bit arithmetic. Both give the
    #: same record bit for bit (tests/test_secure.py trains with each), so it is no option and in no key.
    ring_backend: ClassVar[str] = "auto"

    @classmethod
    def check_option_values(cls, options: dict[str, Any]) -> None:
        """``authenticate_keys`` needs ``blinding``: without it no key is exchanged, and a
        record saying its keys were authenticated would claim what nothing did."""
        merged = {**cls.defaults, **options}
        if merged["authenticate_keys"] and not merged["blinding"]:
            raise ConfigError("authenticate_keys=True signs blinding's key exchange, and blinding=False exchanges no "
                              "key; turn blinding on, or leave authenticate_keys off")

    def build(self) -> None:
        if self.options["embedding_gradient"] not in self.EMBEDDING_GRADIENTS:
            raise ConfigError(f"Invalid embedding_gradient {self.options['embedding_gradient']!r}; choose one of "
                              f"{', '.join(self.EMBEDDING_GRADIENTS)}")
        for party in self.parties:
            party.models["model"] = self.party_model(party)
            party.optimizers["local"] = self.make_optimizer(party, party.models["model"].parameters())
        self.ring = FixedPointRing(scale_bits=int(self.options["scale_bits"]))
        # authenticate_keys: the passive parties' identity keys and the directory of their public
        # halves, made at the first setup() (before any key is relayed), and the count of key
        # agreements, which makes each agreement's bundles valid for that agreement only
        self._identities: dict[int, IdentityKey] = {}
        self._directory: KeyDirectory | None = None
        self._agreements = 0

    def allow_insecure(self) -> bool:
        """Whether blinding may run with a single passive party (r_1 = 0: its embedding is
        seen in the clear). Never for VFedMH; EASTER's Table VI (C = 2) opts in explicitly."""
        return False

    def setup(self) -> None:
        """Key generation and blinding-factor set-up (Sec. IV-C): every passive party sends
        its public key to the active party, which forwards each one the others' keys. With
        ``authenticate_keys`` the keys travel signed and each party verifies its peers' keys
        against the key directory before agreeing."""
        if not self.options["blinding"]:
            return
        directory = self._key_directory() if self.options["authenticate_keys"] else None
        agreement = self._agreements
        self._agreements += 1
        for number, p in enumerate(self.passive, start=1):
            keys = BlindingKeys(number, scheme=self.options["scheme"])
            p.state["keys"] = keys
            p.state["mask_counter"] = 0
            if directory is None:
                p.send(self.active, "public_key", keys.public_key())
            else:
                p.send(self.active, "public_key",
                       keys.signed_public_key(self._identities[number], run=directory.run, agreement=agreement))
        public = {number: self.active.recv(p, "public_key") for number, p in enumerate(self.passive, start=1)}
        for number, p in enumerate(self.passive, start=1):
            self.active.send(p, "public_key", {j: pk for j, pk in public.items() if j != number})
        for p in self.passive:
            p.state["keys"].agree(p.recv(self.active, "public_key"), allow_insecure=self.allow_insecure(),
                                  directory=directory, agreement=agreement)

    def _key_directory(self) -> KeyDirectory:
        """The passive parties' identity keys and their directory, made once per method: what
        happens before training and outside the channel (a PKI or a pre-shared directory), so none
        of it is sent or counted; the active party relays keys but has no say in which identities
        vouch for them. The run identifier is the config's key plus a random nonce, so a resumed
        run (a new method) refuses the bundles of the run it resumes."""
        if self._directory is None:
            self._identities = {n: IdentityKey(n) for n in range(1, len(self.passive) + 1)}
            self._directory = KeyDirectory({n: ik.public_key() for n, ik in self._identities.items()},
                                           run=f"{self.config.key}/{secrets.token_hex(8)}")
        return self._directory

    def _backend(self, device: torch.device) -> str:
        """The ring backend for embeddings on ``device`` (see :attr:`ring_backend`)."""
        if self.ring_backend != "auto":
            return self.ring_backend
        return "numpy" if device.type == "cpu" else "torch"

    def _blinded(self, p: Party, embedding: torch.Tensor, checks: DeferredChecks | None) -> torch.Tensor:
        c = p.state["mask_counter"]
        p.state["mask_counter"] = c + 1
        keys = p.state["keys"]
        out = blind(embedding.detach(), keys, ring=self.ring, round=c // _STEPS_PER_ROUND,
                    step=c % _STEPS_PER_ROUND, checks=checks, backend=self._backend(embedding.device))
        if self.options["mask_prefetch"]:
            # the next batch is most likely the same shape (a miss costs only the wasted work);
            # pinned for a GPU, so that its copy there does not wait
            keys.prefetch(out.shape, round=(c + 1) // _STEPS_PER_ROUND, step=(c + 1) % _STEPS_PER_ROUND,
                          pin_memory=out.device.type == "cuda")
        return out

    def _global_embedding(self, ids: torch.Tensor, split: str,
                          checks: DeferredChecks | None = None) -> dict[str, torch.Tensor]:
        """Rounds 1-2: local embeddings up (blinded), the global embedding E down. Returns each
        party's own E_k (with its graph when training); each party's copy of E is left in
        ``party.state["E"]``; the ring's checks go to ``checks`` (None: read at once, raising here)."""
        a = self.active
        own: dict[str, torch.Tensor] = {}
        for p in self.passive:
            e = p.models["model"].embed(p.features(split, ids=ids))
            own[p.name] = e
            p.send(a, "embedding", self._blinded(p, e, checks) if self.options["blinding"] else e)
        e_a = a.models["model"].embed(a.features(split, ids=ids))
        own[a.name] = e_a
        received = [a.recv(p, "embedding") for p in self.passive]
        if self.options["blinding"]:
            e = aggregate(e_a.detach(), received, ring=self.ring, n_parties=len(self.parties),
                          allow_insecure=self.allow_insecure(), checks=checks, backend=self._backend(e_a.device))
        else:
            e = (e_a.detach() + torch.stack(received).sum(0)) / len(self.parties)
        a.state["E"] = e
        for p in self.passive:
            a.send(p, "global_embedding", e)
            p.state["E"] = p.recv(a, "global_embedding")
        return own

    def train_step(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        a = self.active
        for party in self.parties:
            party.optimizers["local"].zero_grad(set_to_none=True)
        # the ring's checks are left for the trainer when it asked for them (self.checks), so
        # that the step reads nothing back from the device
        own = self._global_embedding(ids, "train", self.checks)
        # Round 3: every party predicts from its copy of E.
        for party in self.parties:
            e_in = party.state.pop("E").requires_grad_(True)
            party.state["E_in"] = e_in
            party.state["R"] = party.models["model"].predict(e_in)
            if party is not a:
                party.send(a, "prediction", party.state["R"])
        # Round 4: the active party computes each party's loss with its labels.
        y = a.labels("train", ids=ids)
        losses: dict[str, torch.Tensor] = {}
        for p in self.passive:
            r = a.recv(p, "prediction").requires_grad_(True)
            loss = F.cross_entropy(r, y)
            (grad_r,) = torch.autograd.grad(loss, r)
            a.send(p, "loss", {"value": loss.detach(), "grad_prediction": grad_r})
            losses[p.name] = loss.detach()
        loss_a = F.cross_entropy(a.state["R"], y)
        losses[a.name] = loss_a.detach()
        # Line 13: each party updates with its own loss only: ∂L_k/∂R_k back through p(θ_k, ·)
        # to its copy of E, then its share ∂L_k/∂E / C back through h(θ_k, ·). Every party's
        # graph is its own (E arrived detached), so one autograd call per stage does all parties.
        c = len(self.parties) if self.options["embedding_gradient"] == "share" else 1
        backward_each([(loss_a, None)] + [(p.state["R"], p.recv(a, "loss")["grad_prediction"]) for p in self.passive])
        backward_each([(own[party.name], party.state["E_in"].grad / c) for party in self.parties])
        for party in self.parties:
            party.state.pop("E_in")
            party.state.pop("R")
            party.optimizers["local"].step()
        return losses

    @torch.no_grad()
    def predict(self, ids: torch.Tensor, split: str = "test") -> dict[str, torch.Tensor]:
        a = self.active
        self._global_embedding(ids, split)
        out: dict[str, torch.Tensor] = {}
        for party in self.parties:
            r = party.models["model"].predict(party.state.pop("E"))
            if party is not a:
                party.send(a, "prediction", r)
                r = a.recv(party, "prediction")
            out[party.name] = r
        return out

    def trained_models(self) -> dict[str, str]:
        return {p.name: self.config.party_value("models", k) for k, p in enumerate(self.parties)}


class HomoVFedMH(VFedMH):
    """Homo_VFedMH (Table III): VFedMH with the same architecture at every party."""

    name = "homo_vfedmh"
    model_mix = "homogeneous"
