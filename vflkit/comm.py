"""Parties, the one channel between them, and the ledger that counts what crosses it.

Every tensor that moves from one simulated party to another goes through :class:`Channel`,
which copies and detaches it: a receiver can never back-propagate into the sender's graph nor
alias its memory, and gradients reach a party only as a message of kind ``"gradient"``. Each
message is recorded in a :class:`Ledger` (sender, receiver, kind, bytes as sent, epoch, step,
phase), which sums bytes, messages and communication rounds per party and epoch, and keeps the
traffic per link so that :mod:`vflkit.network` can price a finished run under any network.
A *communication round* is one phase of the protocol, read off the order of the messages
(:meth:`Ledger.rounds`; each method's count: docs/reliability-and-threat-model.md).
"""

from __future__ import annotations

from collections import defaultdict, deque
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import pandas as pd
import torch

from .errors import ConfigError, PartitionError, check_choice
from .network import NetworkModel, check_topology
from .partition import sample_ids

#: Message kinds the channel accepts. A typo is an error rather than a new category in a plot.
KINDS: tuple[str, ...] = (
    "embedding",  # local embedding / cut-layer activations (blinded or plain)
    "global_embedding",  # VFedMH/EASTER: aggregated embedding returned to the parties
    "gradient",  # gradient with respect to something the receiver sent
    "prediction",  # local predictions / logits
    "loss",  # loss values (VFedMH returns each party's loss)
    "model_weights",  # model parameters or updates (Multi-VFL server, AdptVFedConv transfer)
    "public_key",  # key agreement for blinding factors
    "representation",  # one-shot representations (APC-VFL, VFedTrans)
    "feature_map",  # AdptVFedConv hidden feature maps
    "masked_matrix",  # FedSVD masked matrices
    "mask",  # FedSVD orthogonal masks / key-generator output
    "labels",  # batch labels, only where a protocol shares them (C-VFL's local iterations)
)

PHASES: tuple[str, ...] = ("train", "eval", "setup")

#: What a record's ``rounds`` figures count; trainers store it as ``comm["rounds_counted_as"]``
#: (older records: ``scripts/migrate_records.py``).
ROUNDS_COUNTED_AS = "protocol_phases"


def payload_nbytes(payload: Any) -> int:
    """Bytes a payload occupies on the wire unencoded: a tensor ``numel * element_size``, bytes
    their length, a Python number 8, dicts/lists/tuples the sum of their items."""
    if isinstance(payload, torch.Tensor):
        return payload.numel() * payload.element_size()
    if isinstance(payload, (bytes, bytearray)):
        return len(payload)
    if isinstance(payload, (int, float)):
        return 8
    if isinstance(payload, dict):
        return sum(payload_nbytes(v) for v in payload.values())
    if isinstance(payload, (list, tuple)):
        return sum(payload_nbytes(v) for v in payload)
    raise TypeError(f"cannot size a payload of type {type(payload).__name__}; send tensors, bytes, numbers "
                    "or dicts/lists of them, or pass nbytes= explicitly")


def _map_tensors(payload: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``payload`` with ``fn`` on every tensor in it (dicts, lists, tuples); by hand, cheaper than a pytree map."""
    if isinstance(payload, torch.Tensor):
        return fn(payload)
    if isinstance(payload, dict):
        return {k: _map_tensors(v, fn) for k, v in payload.items()}
    if isinstance(payload, (list, tuple)):
        return type(payload)(_map_tensors(v, fn) for v in payload)
    return payload


def wire_copy(payload: Any) -> Any:
    """What the receiver gets: a detached copy, so no autograd graph or memory is shared. A
    bfloat16 tensor (bf16 autocast) is widened to float32, exactly: the precision is the
    computation's, not the protocol's, so messages and ledger are those of an fp32 run."""
    return _map_tensors(payload, lambda t: t.detach().float() if t.dtype == torch.bfloat16 else t.detach().clone())


class Ledger:
    """Every message a run sent, one row each (plain tuples: a VFedMH run sends hundreds of
    thousands; a :class:`pandas.DataFrame` on demand), with sums per party, epoch and kind."""

    columns = ("sender", "receiver", "kind", "nbytes", "epoch", "step", "phase")

    def __init__(self) -> None:
        self._rows: list[tuple[str, str, str, int, int, int, str]] = []
        self._round_cache: list[int] = []
        # per (epoch, step, phase): (current round, parties that received in it)
        self._round_state: dict[tuple[int, int, str], tuple[int, set[str]]] = {}

    def add(self, sender: str, receiver: str, kind: str, nbytes: int, epoch: int, step: int, phase: str) -> None:
        self._rows.append((sender, receiver, kind, nbytes, epoch, step, phase))

    def __len__(self) -> int:
        return len(self._rows)

    def restore(self, rows: Sequence[Sequence[Any]]) -> None:
        """Replace every row by ``rows`` (a checkpoint's ledger), in the order they were sent."""
        self._rows[:] = [tuple(r) for r in rows]
        self._round_cache, self._round_state = [], {}

    def sort_since(self, start: int, key: Callable[[tuple[str, str, str, int, int, int, str]], Any]) -> None:
        """Put the rows from position ``start`` on in the order ``key`` gives them (a stable
        sort): a trainer that computes a protocol's steps in another order than the protocol
        sends them (a packed round) writes the protocol's order, which :meth:`rounds` reads."""
        self._rows[start:] = sorted(self._rows[start:], key=key)
        if len(self._round_cache) > start:  # rounds already read from rows that moved
            self._round_cache, self._round_state = [], {}

    def rounds(self) -> list[int]:
        """The round of every message, counted from 0 within its (epoch, step, phase): a message
        opens a new round when its sender has received a message in the current round (what it
        sends may depend on what it got), else it travels in the current round. "Passive parties
        send up, the active party answers each" is two rounds however many parties and kinds."""
        if len(self._round_cache) > len(self._rows):  # rows replaced behind our back
            self._round_cache, self._round_state = [], {}
        for sender, receiver, _, _, epoch, step, phase in self._rows[len(self._round_cache):]:
            key = (epoch, step, phase)
            current, receivers = self._round_state.get(key, (0, set()))
            if sender in receivers:
                current, receivers = current + 1, set()
            receivers.add(receiver)
            self._round_state[key] = (current, receivers)
            self._round_cache.append(current)
        return self._round_cache

    def frame(self, *, phase: str | None = "train") -> pd.DataFrame:
        """All messages as a DataFrame (one row each, with its ``round``: :meth:`rounds`);
        ``phase=None`` keeps every phase."""
        df = pd.DataFrame(self._rows, columns=list(self.columns))
        df["round"] = pd.Series(self.rounds(), dtype="int64")
        return df if phase is None else df[df["phase"] == phase].reset_index(drop=True)

    def totals(self, *, phase: str | None = "train") -> dict[str, int]:
        """Total bytes, messages and communication rounds (protocol phases, :meth:`rounds`)."""
        df = self.frame(phase=phase)
        return {"bytes": int(df["nbytes"].sum()), "messages": int(len(df)),
                "rounds": int(len(df.drop_duplicates(["epoch", "step", "round"])))}

    def per_epoch(self, *, phase: str | None = "train") -> pd.DataFrame:
        """Bytes, messages and rounds per epoch (rows indexed by epoch)."""
        df = self.frame(phase=phase)
        if df.empty:
            return pd.DataFrame(columns=["bytes", "messages", "rounds"])
        grouped = df.groupby("epoch")
        return pd.DataFrame({"bytes": grouped["nbytes"].sum(), "messages": grouped.size(),
                             "rounds": df.drop_duplicates(["epoch", "step", "round"]).groupby("epoch").size()})

    def per_party(self, *, phase: str | None = "train", by_epoch: bool = False) -> pd.DataFrame:
        """Bytes and messages each party sent and received (optionally per epoch), and the
        rounds it took part in (over the whole run, or per epoch with ``by_epoch``)."""
        df = self.frame(phase=phase)
        keys = ["epoch"] if by_epoch else []
        sent = df.rename(columns={"sender": "party"})
        recv = df.rename(columns={"receiver": "party"})
        out = pd.DataFrame({"bytes_sent": sent.groupby(keys + ["party"])["nbytes"].sum(),
                            "bytes_received": recv.groupby(keys + ["party"])["nbytes"].sum(),
                            "messages_sent": sent.groupby(keys + ["party"]).size(),
                            "messages_received": recv.groupby(keys + ["party"]).size()}).fillna(0).astype("int64")
        both = pd.concat([sent[["epoch", "party", "step", "round"]], recv[["epoch", "party", "step", "round"]]])
        rounds = both.drop_duplicates().groupby(keys + ["party"]).size() if not both.empty else 0
        out["rounds"] = rounds if isinstance(rounds, int) else rounds.reindex(out.index).fillna(0).astype("int64")
        return out

    def per_kind(self, *, phase: str | None = "train") -> pd.DataFrame:
        df = self.frame(phase=phase)
        g = df.groupby("kind")
        return pd.DataFrame({"bytes": g["nbytes"].sum(), "messages": g.size()})

    def per_link(self, *, phase: str | None = "train") -> pd.DataFrame:
        """Traffic per (epoch, round, kind, sender, receiver), where ``round`` is the phase's
        position in its step (:meth:`rounds`): messages, bytes and the number of steps it
        occurred in. Small enough to keep in a run record, and enough to price the run under
        any network afterwards (:func:`vflkit.network.price_links`)."""
        df = self.frame(phase=phase)
        cols = ["epoch", "round", "kind", "sender", "receiver", "messages", "bytes", "steps"]
        if df.empty:
            return pd.DataFrame(columns=cols)
        g = df.groupby(["epoch", "round", "kind", "sender", "receiver"])
        out = pd.DataFrame({"messages": g.size(), "bytes": g["nbytes"].sum(), "steps": g["step"].nunique()})
        return out.reset_index()[cols]

    def price(self, network: NetworkModel, *, phase: str | None = "train",
              topology: str = "parallel") -> float:
        """Seconds the run's communication takes under ``network``, message by message: rounds
        one after another, every message its link's latency plus bytes over bandwidth; a round
        lasts as long as its busiest link (``"parallel"``) or the sum of its messages
        (``"shared_uplink"``: the active party's one interface; see :mod:`vflkit.network`)."""
        check_topology(topology)
        df = self.frame(phase=phase)
        if df.empty:
            return 0.0
        df = df.assign(seconds=[network.seconds(s, r, b)
                                for s, r, b in zip(df["sender"], df["receiver"], df["nbytes"])])
        if topology == "shared_uplink":
            return float(df["seconds"].sum())
        per_link = df.groupby(["epoch", "step", "round", "sender", "receiver"])["seconds"].sum()
        return float(per_link.groupby(level=["epoch", "step", "round"]).max().sum())


class Channel:
    """The only way information crosses between simulated parties: ``send`` copies and detaches
    the payload, records it in the ledger and puts it in the receiver's mailbox; ``recv`` takes
    the oldest message of that kind from that sender. The training loop sets the clock (:meth:`at`)."""

    def __init__(self, ledger: Ledger | None = None) -> None:
        self.ledger = ledger if ledger is not None else Ledger()
        self._boxes: dict[tuple[str, str, str], deque[Any]] = defaultdict(deque)
        self.epoch = 0
        self.step = 0
        self.phase = "train"

    def at(self, *, epoch: int | None = None, step: int | None = None, phase: str | None = None) -> "Channel":
        """Set the clock (epoch, step, phase) that stamps the next messages."""
        if phase is not None:
            check_choice("phase", phase, PHASES)
        self.epoch = self.epoch if epoch is None else epoch
        self.step = self.step if step is None else step
        self.phase = self.phase if phase is None else phase
        return self

    def send(self, sender: str, receiver: str, kind: str, payload: Any, *, nbytes: int | None = None) -> None:
        """Send ``payload``; ``nbytes`` overrides its size when it travels encoded or compressed."""
        check_choice("message kind", kind, KINDS)
        if sender == receiver:
            raise ConfigError(f"party {sender!r} tried to send a {kind} to itself")
        wire = wire_copy(payload)
        size = payload_nbytes(wire) if nbytes is None else int(nbytes)  # as it travels
        self.ledger.add(sender, receiver, kind, size, self.epoch, self.step, self.phase)
        self._boxes[(sender, receiver, kind)].append(wire)

    def recv(self, receiver: str, sender: str, kind: str) -> Any:
        box = self._boxes.get((sender, receiver, kind))
        if not box:
            raise RuntimeError(f"{receiver} expected a {kind} message from {sender}, but none was sent "
                               f"(epoch {self.epoch}, step {self.step}); the protocol is out of order")
        return box.popleft()

    def pending(self) -> int:
        """Messages sent but not yet received (a finished protocol step leaves none)."""
        return sum(len(b) for b in self._boxes.values())


class Party:
    """A participant (``"active"``, ``"passive_1"``, ``"label_owner_3"``, ``"server"``): it owns
    its feature slice per split (``{"train": uint8 [N, C, h, w], ...}``), its sample ids
    (default ``arange(N)``; rows are addressed by id, so parties with different samples index
    their own data), models and optimizers, and the labels if it holds them. It talks to others
    only through the channel. ``transform`` takes a batch of its features on the way to
    ``device`` (e.g. uint8 -> normalised float32).
    """

    def __init__(self, name: str, *, channel: Channel, features: dict[str, torch.Tensor] | None = None,
                 labels: dict[str, torch.Tensor] | None = None, ids: dict[str, torch.Tensor] | None = None,
                 transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 device: torch.device | str = "cpu") -> None:
        self.name = name
        self.channel = channel
        self.device = torch.device(device)
        self._features = dict(features or {})
        self._labels = dict(labels or {})
        self.transform: Callable[[torch.Tensor], torch.Tensor] = transform or (lambda x: x)
        held = {**self._labels, **self._features}
        unknown = sorted(set(ids or {}) - set(held))
        if unknown:
            raise PartitionError(f"{name}: sample ids given for split(s) {unknown} but it holds no features or "
                                 f"labels there (it holds {sorted(held)}); pass ids only for splits it holds")
        # Checked once here (integer, non-negative, unique): the per-batch lookups rely on it.
        self.ids = {split: sample_ids(ids[split], f"{name}'s {split} ids") if split in (ids or {})
                    else torch.arange(len(x)) for split, x in held.items()}
        for split, x in held.items():
            if len(self.ids[split]) != len(x):
                raise PartitionError(f"{name}: {len(self.ids[split])} sample ids for {len(x)} {split} rows; give one "
                                     "id per row")
        # id -> row lookup per split: None when the ids are 0..N-1 in order (an id is its own
        # row); else sorted ids and their rows, for searchsorted (no Python dict over samples)
        self._lookup: dict[str, tuple[torch.Tensor, torch.Tensor] | None] = {
            split: None if torch.equal(own, torch.arange(len(own))) else tuple(torch.sort(own))
            for split, own in self.ids.items()}
        self.models: dict[str, torch.nn.Module] = {}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        #: Set (by :func:`checked_batches`) while every batch it is asked for by sample id was cut
        #: from ids already checked on the host by :meth:`check_ids`: the per-batch checks, which
        #: read the index back (a blocking sync when it lives on a GPU), are then skipped.
        self.prechecked = False
        #: Scratch space for what a party keeps between protocol steps (e.g. its embedding's
        #: graph while it waits for the gradient message).
        self.state: dict[str, Any] = {}

    @property
    def input_shape(self) -> tuple[int, ...]:
        x = self._features.get("train", next(iter(self._features.values()), None))
        if x is None:
            raise PartitionError(f"{self.name} holds no features")
        return tuple(x.shape[1:])

    def __repr__(self) -> str:
        shapes = {s: tuple(x.shape) for s, x in self._features.items()}
        return f"Party({self.name!r}, features={shapes}, holds_labels={self.holds_labels})"

    @property
    def holds_labels(self) -> bool:
        return bool(self._labels)

    def aligned(self, split: str = "train") -> bool:
        """Whether its sample ids of ``split`` are its rows (0..N-1 in order, as an aligned
        image party's): a batch of ids then indexes its data directly."""
        return self._lookup[split] is None

    def held_features(self, split: str = "train") -> torch.Tensor:
        """Its features of ``split`` untransformed, where they were given."""
        return self._features[split]

    def held_labels(self, split: str = "train") -> torch.Tensor:
        """Its labels of ``split`` where they were given; only a party that holds labels may call this."""
        if not self._labels:
            raise PermissionError(f"{self.name} holds no labels; only the active party does")
        return self._labels[split]

    def hold(self, split: str = "train", *, features: torch.Tensor | None = None,
             labels: torch.Tensor | None = None) -> None:
        """Hold ``features`` and/or ``labels`` of ``split`` in place of those it holds, which they
        must equal (e.g. views of a pack's stacked copy, so the data is held once): a tensor of
        another shape or dtype is refused; the values are the caller's promise."""
        for what, new, store in (("features", features, self._features), ("labels", labels, self._labels)):
            if new is None:
                continue
            if split not in store:
                raise PartitionError(f"{self.name} holds no {what} of {split} to replace")
            old = store[split]
            if new.shape != old.shape or new.dtype != old.dtype:
                raise PartitionError(f"{self.name}: {what} of {split} are {tuple(old.shape)} {old.dtype}; "
                                     f"got {tuple(new.shape)} {new.dtype}")
            store[split] = new

    def n_samples(self, split: str = "train") -> int:
        return len(self._features[split]) if split in self._features else len(self._labels[split])

    def _rows(self, split: str, ids: torch.Tensor | None, rows: torch.Tensor | None,
              prechecked: bool | None = None) -> torch.Tensor:
        """Positions of ``rows`` or of sample ``ids`` (``prechecked``: default :attr:`prechecked`)."""
        if rows is None and ids is None:
            raise ValueError("give either rows= (positions) or ids= (sample ids)")
        what, index = ("rows", rows) if rows is not None else ("sample ids", ids)
        # A bool tensor would act as a mask and a negative index would count from the end:
        # both silently select other samples, so only non-negative integers pass. Indexing
        # checks the upper end (see _take).
        if index.dtype in (torch.bool, torch.uint8) or index.is_floating_point() or index.is_complex():
            raise PartitionError(f"{self.name}: {what} must be an integer tensor, got {index.dtype}")
        prechecked = self.prechecked if prechecked is None else prechecked
        # ids under checked_batches were checked by check_ids; rows never are (check_ids takes ids)
        if not (prechecked and rows is None) and index.numel() and int(index.min()) < 0:
            bad = index[index < 0][:5].tolist()
            raise PartitionError(f"{self.name} does not hold {what} {bad} of {split}: they are negative")
        if rows is not None:
            return rows
        lookup = self._lookup[split]
        if lookup is None:
            return ids
        # the lookup tables live on the host; an index on a device takes them there (no read back)
        sorted_ids, order = (t.to(ids.device) for t in lookup)
        pos = torch.searchsorted(sorted_ids, ids).clamp(max=len(sorted_ids) - 1)
        if prechecked:  # every id was found by check_ids: no per-batch read back
            return order[pos]
        if not torch.equal(sorted_ids[pos], ids):
            missing = ids[sorted_ids[pos] != ids][:5].tolist()
            raise PartitionError(f"{self.name} does not hold sample ids {missing} of {split}")
        return order[pos]

    def positions(self, split: str, ids: torch.Tensor) -> torch.Tensor:
        """Where this party holds the samples ``ids`` of ``split`` (rows of its features and
        labels), found and checked on the host (:meth:`check_ids`): a packed trainer takes the
        rows of many batches at once with them."""
        ids = ids.cpu()
        self.check_ids(split, ids)
        return self._rows(split, ids, None, prechecked=True)

    def check_ids(self, split: str, ids: torch.Tensor) -> None:
        """Check once, on the host, that this party holds every sample id of ``ids`` (e.g. an
        epoch's batch order): batches cut from it may then be taken under :func:`checked_batches`
        without the per-batch checks, which would read a device index back at every batch."""
        ids = ids.cpu()  # a host tensor: the check reads values, and must not stall a device
        rows = self._rows(split, ids, None, prechecked=False)  # this is the check: never skipped
        held = self.n_samples(split)
        if rows.numel() and int(rows.max()) >= held:
            bad = ids[rows >= held][:5].tolist()
            raise PartitionError(f"{self.name} does not hold sample ids {bad} of {split}")

    def features(self, split: str = "train", *, rows: torch.Tensor | None = None,
                 ids: torch.Tensor | None = None) -> torch.Tensor:
        """A batch of this party's own features, transformed and on its device."""
        x = self._features[split]
        batch = x if rows is None and ids is None else self._take(x, split, ids, rows)
        return self.transform(batch.to(self.device, non_blocking=True))

    def _take(self, x: torch.Tensor, split: str, ids: torch.Tensor | None, rows: torch.Tensor | None) -> torch.Tensor:
        index = self._rows(split, ids, rows).to(x.device)
        try:
            return x[index]
        except IndexError:
            bad = index[(index < 0) | (index >= len(x))][:5].tolist()
            raise PartitionError(f"{self.name} does not hold sample ids {bad} of {split}") from None

    def labels(self, split: str = "train", *, rows: torch.Tensor | None = None,
               ids: torch.Tensor | None = None) -> torch.Tensor:
        """A batch of this party's own labels (:meth:`held_labels`), on its device."""
        y = self.held_labels(split)
        return (y if rows is None and ids is None else self._take(y, split, ids, rows)).to(self.device)

    def send(self, receiver: str | "Party", kind: str, payload: Any, *, nbytes: int | None = None) -> None:
        to = receiver.name if isinstance(receiver, Party) else receiver
        self.channel.send(self.name, to, kind, payload, nbytes=nbytes)

    def recv(self, sender: str | "Party", kind: str) -> Any:
        """Receive from another party through the channel, the payload moved to this device."""
        frm = sender.name if isinstance(sender, Party) else sender
        return _map_tensors(self.channel.recv(self.name, frm, kind), lambda t: t.to(self.device))


@contextmanager
def checked_batches(parties: Sequence[Party]) -> Iterator[None]:
    """While inside, ``parties`` take batches without per-batch id checks (host reads); the
    caller must have checked the ids the batches are cut from with :meth:`Party.check_ids`
    (the split trainer does, once per epoch on the host copy of the batch order)."""
    before = [p.prechecked for p in parties]
    for p in parties:
        p.prechecked = True
    try:
        yield
    finally:
        for p, b in zip(parties, before):
            p.prechecked = b
