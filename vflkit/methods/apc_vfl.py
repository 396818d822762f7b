"""APC-VFL: Active Participant Centric VFL (Irureta et al. 2025), and its Ablation.

Four steps (Fig. 3, Sec. 4): ① every participant trains a local SELU autoencoder on all its
own samples (g1A at the active, g1P at the passive participant); the passive participant sends
the representations g1P(X) of the aligned samples to the active participant, the *only*
message of the protocol; ② the active participant trains the joint autoencoder g2A on the
concatenation [g1A(X_A), g1P(X_P)] of the aligned samples; ③ it trains the final autoencoder
g3A on all its samples with the distillation loss of Eq. 5 pulling g3A(x) towards the joint
representation g2A(.) wherever x is aligned; ④ a classifier is trained on g3A(X_active).

:class:`Ablation` is g3A trained without the distillation term, on the active participant's
data alone (Sec. 6): it overrides the one hook :meth:`APCVFL.teacher_representations`.
"""

from __future__ import annotations

import copy
import hashlib
from collections import OrderedDict
from typing import Any, ClassVar

import torch

from ..comm import Party
from ..errors import ConfigError, check_choice
from ..models import SeluAutoencoder, apc_vfl_autoencoder
from .oneshot import DISTILL_LOSSES, OneShotMethod, train_autoencoder

#: Width of the final encoder's latent when no teacher fixes it (g3A in Table 3).
G3_LATENT = 256

#: Autoencoders this process has trained without a teacher (g1P, g1A, g2A, the Ablation's g3A),
#: by a fingerprint of all that determines them (initial weights, training rows, hyperparameters,
#: random stream): a worker trains the g1P, g1A and g2A that one cell's MSE and MAE runs (and
#: every aligned count's g1A) share once. Reuse is exact and the record says so
#: (``history[model]["reused"]``); every message is still sent and counted.
_TRAINED: OrderedDict[str, tuple[dict[str, torch.Tensor], dict[str, Any]]] = OrderedDict()
_TRAINED_MAX = 32  # a few hundred kB each


def _fingerprint(model: torch.nn.Module, x: torch.Tensor, settings: dict[str, Any]) -> str:
    h = hashlib.sha256(repr(sorted(settings.items())).encode())
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    x = torch.as_tensor(x, dtype=torch.float32).detach().cpu().contiguous()
    h.update(repr(tuple(x.shape)).encode())
    h.update(x.numpy().tobytes())
    return h.hexdigest()


class APCVFL(OneShotMethod):
    """APC-VFL with the distillation loss ``distill_loss`` and weight ``lam``.

    Parameters
    ----------
    lam : float, default 0.01
        lambda of Eq. 5 (Appendix B: 0.01 in every experiment).
    distill_loss : {"mse", "mae"}, default "mse"
        Eq. 5's distance; Fig. 5 shows both.
    **kwargs
        :class:`~vflkit.methods.oneshot.OneShotMethod`'s.
    """

    name: ClassVar[str] = "apc_vfl"

    def __init__(self, *, lam: float = 0.01, distill_loss: str = "mse", **kwargs) -> None:
        super().__init__(**kwargs)
        check_choice("distillation loss", distill_loss, DISTILL_LOSSES)
        if not lam >= 0:
            raise ConfigError(f"lam must be >= 0, got {lam!r}")
        self.lam, self.distill_loss = float(lam), distill_loss
        self.g3: torch.nn.Module | None = None

    def _train(self, key: str, model: torch.nn.Module, x: torch.Tensor, offset: int, **extra) -> torch.nn.Module:
        settings = {"epochs": self.epochs, "patience": self.patience, "lr": self.lr, "batch_size": self.batch_size,
                    "val_fraction": self.val_fraction, "stream": self.seed * 1000 + offset}
        memo = None if extra else _fingerprint(model, x, settings)  # a teacher makes g3A the run's own
        if memo in _TRAINED:
            state, history = _TRAINED[memo]
            _TRAINED.move_to_end(memo)
            model.load_state_dict(state)
            model.eval()  # as train_autoencoder leaves it
            self.history[key] = {**history, "reused": True}
            return model
        self.history[key] = train_autoencoder(
            model, x, epochs=self.epochs, patience=self.patience, lr=self.lr,
            batch_size=self.batch_size, val_fraction=self.val_fraction,
            generator=self.generator(offset), **extra)
        if memo is not None:
            _TRAINED[memo] = (copy.deepcopy(model.state_dict()), dict(self.history[key]))
            while len(_TRAINED) > _TRAINED_MAX:
                _TRAINED.popitem(last=False)
        return model

    def _build(self, which: str, offset: int, **sizes: int) -> torch.nn.Module:
        torch.manual_seed(self.seed * 1000 + offset)  # each model's own initialisation
        return apc_vfl_autoencoder(which, **sizes)

    @staticmethod
    def _own_rows(party: Party, ids: torch.Tensor) -> torch.Tensor:
        """Positions of ``ids`` in ``party``'s own rows (it looks up its own ids only)."""
        own = party.ids["train"]
        order = torch.argsort(own)
        return order[torch.searchsorted(own[order], ids)]

    def teacher_representations(self, active: Party, passive: Party) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Steps ① and ②: ``(rows, z)``, the active participant's own row of each aligned sample
        and ``g2A``'s latent for it; None when there is nothing to distil (the Ablation)."""
        aligned = self.aligned_ids(active, passive)
        if aligned.numel() == 0:
            raise ConfigError("APC-VFL needs at least one aligned sample (Sec. 3: D_A is non-empty)")
        active.channel.at(epoch=0, step=0, phase="train")

        # ① at the passive participant: g1P on all its samples, then the single message.
        x_p = passive.features("train")
        g1p = self._build("g1P", 1, p=x_p.shape[1])
        self._train("g1P", g1p, x_p, 1)
        with torch.no_grad():
            z_p = g1p.encode(passive.features("train", ids=aligned))
        passive.send(active, "representation", z_p.float())

        # ① at the active participant: g1A on all its samples.
        x_a = active.features("train")
        g1a = self._build("g1A", 2, a=x_a.shape[1])
        self._train("g1A", g1a, x_a, 2)
        rows = self._own_rows(active, aligned)
        z_p_recv = active.recv(passive, "representation")
        with torch.no_grad():
            joint = torch.cat([g1a.encode(x_a[rows]), z_p_recv], dim=1)

        # ② the joint autoencoder on the aligned samples.
        g2 = self._build("g2A", 3)
        if joint.shape[1] != g2.layers[0]:
            raise ConfigError(f"g2A expects {g2.layers[0]} joint dimensions, got {joint.shape[1]}")
        self._train("g2A", g2, joint, 3)
        with torch.no_grad():
            z = g2.encode(joint)
        # Kept by the party that trained each (used only by APCVFLJoint's scoring).
        passive.models["g1P"], active.models["g1A"], active.models["g2A"] = g1p, g1a, g2
        return rows, z

    def fit(self, active: Party, passive: Party) -> None:
        """Steps ①-③; step ④ (the classifier) is the study's, on :meth:`transform`'s output."""
        teacher = self.teacher_representations(active, passive)
        x_a = active.features("train")
        latent = G3_LATENT if teacher is None else int(teacher[1].shape[1])
        if latent == G3_LATENT:
            g3 = self._build("g3A", 4, a=x_a.shape[1])
        else:  # a teacher of another width (VFedTrans's FedSVD): g3A's depth, the teacher's width
            torch.manual_seed(self.seed * 1000 + 4)
            g3 = SeluAutoencoder([x_a.shape[1], 256, latent])
        extra = {} if teacher is None else {
            "teacher": teacher[1], "teacher_rows": teacher[0], "lam": self.lam,
            "distill_loss": self.distill_loss}
        self._train("g3A", g3, x_a, 4, **extra)
        self.g3 = g3
        self._fitted = True

    def _transform(self, x_active: torch.Tensor) -> torch.Tensor:
        return self.g3.encode(x_active)


class Ablation(APCVFL):
    """APC-VFL's Ablation: g3A trained on the active participant's data alone (no teacher,
    no message), isolating what the non-linear encoder adds without federation."""

    name: ClassVar[str] = "ablation"

    def teacher_representations(self, active: Party, passive: Party) -> None:
        return None


class APCVFLJoint(APCVFL):
    """APC-VFL adjusted for fully aligned data (Sec. 6, Fig. 4), the Table 2 comparison.

    No unaligned samples means nothing to distil, so step ③ is skipped and the classifier is
    trained on the joint representation g2A([g1A(x_A), g1P(x_P)]). Training costs the one
    message of aligned training representations; scoring new samples needs the passive
    participant's representations of them too (sent in the ``"eval"`` phase, not part of the
    training footprint, as in the paper's Table 2).
    """

    name: ClassVar[str] = "apc_vfl_joint"

    def fit(self, active: Party, passive: Party) -> None:
        rows, z = self.teacher_representations(active, passive)
        self._rows_train, self._z_train = rows, z
        self._fitted = True

    @torch.no_grad()
    def joint_features(self, active: Party, passive: Party, split: str) -> torch.Tensor:
        """g2A's joint representation of every sample of ``split`` (in the active
        participant's row order); for a split other than "train" the passive participant
        sends the representations of those samples first."""
        if not self._fitted:
            raise ConfigError("APCVFLJoint.joint_features called before fit(active, passive)")
        if split == "train":
            out = torch.empty_like(self._z_train)
            out[self._rows_train] = self._z_train
            return out
        active.channel.at(phase="eval")
        ids = active.ids[split]
        passive.send(active, "representation", passive.models["g1P"].encode(passive.features(split, ids=ids)))
        joint = torch.cat([active.models["g1A"].encode(active.features(split)),
                           active.recv(passive, "representation")], dim=1)
        return active.models["g2A"].encode(joint)

    def _transform(self, x_active: torch.Tensor) -> torch.Tensor:
        raise ConfigError("APCVFLJoint scores samples with joint_features(active, passive, split)")


def footprint_apc_vfl(n_aligned: int, z_p: int = 256) -> int:
    """Eq. 6: bytes of the one exchange, |D_A| * z_p * 4 (float32 representations of width z_p)."""
    return n_aligned * z_p * 4


__all__ = ["APCVFL", "APCVFLJoint", "Ablation", "G3_LATENT", "footprint_apc_vfl"]
