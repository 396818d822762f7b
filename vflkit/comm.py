"""Parties, the one channel between them, and the ledger that counts what crosses it.

Every tensor that moves from one simulated party to another goes through :class:`Channel`.
The channel copies and detaches what it carries, so a receiver can never back-propagate into
the sender's graph nor alias the sender's memory: gradients reach a party only as a message of
kind ``"gradient"``. Each message is recorded in a :class:`Ledger` with its sender, receiver,
kind, bytes as sent, epoch, step and phase (training or evaluation). The ledger sums bytes,
messages and communication rounds per party and epoch, and prices a run under a
:class:`NetworkModel` (bandwidth and latency per link) for EASTER's Figs 4-5 and Table VII.

A *communication round* is one exchange phase of the protocol: all messages of one kind sent
at one training step. VFedMH (Fig. 3) counts four per step (blinded embeddings up, global
embedding down, predictions up, losses down); split learning counts two (embeddings up,
gradients down).
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd
import torch

from .errors import ConfigError, PartitionError
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


def payload_nbytes(payload: Any) -> int:
    """Bytes a payload occupies on the wire when sent without further encoding.

    Tensors count ``numel * element_size`` (float32: 4 bytes per entry, int64 ring elements: 8),
    ``bytes`` their length, Python numbers 8, and dicts/lists/tuples the sum of their items.
    """
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
    raise TypeError(
        f"cannot size a payload of type {type(payload).__name__}; send tensors, bytes, numbers "
        "or dicts/lists of them, or pass nbytes= explicitly"
    )


def _wire_copy(payload: Any) -> Any:
    """What the receiver gets: a detached copy, so no autograd graph or memory is shared."""
    if isinstance(payload, torch.Tensor):
        return payload.detach().clone()
    if isinstance(payload, dict):
        return {k: _wire_copy(v) for k, v in payload.items()}
    if isinstance(payload, (list, tuple)):
        return type(payload)(_wire_copy(v) for v in payload)
    return payload


class Ledger:
    """Every message a run sent, with sums per party, epoch and kind.

    One row per message: sender, receiver, kind, bytes as sent, epoch, step and phase. Rows are
    kept as plain tuples (a VFedMH run sends hundreds of thousands of messages) and turned into
    a :class:`pandas.DataFrame` on demand.
    """

    columns = ("sender", "receiver", "kind", "nbytes", "epoch", "step", "phase")

    def __init__(self) -> None:
        self._rows: list[tuple[str, str, str, int, int, int, str]] = []

    def add(self, sender: str, receiver: str, kind: str, nbytes: int, epoch: int, step: int, phase: str) -> None:
        """Record one message."""
        self._rows.append((sender, receiver, kind, nbytes, epoch, step, phase))

    def __len__(self) -> int:
        return len(self._rows)

    def frame(self, *, phase: str | None = "train") -> pd.DataFrame:
        """All messages as a DataFrame (one row each); ``phase=None`` keeps every phase."""
        df = pd.DataFrame(self._rows, columns=list(self.columns))
        return df if phase is None else df[df["phase"] == phase].reset_index(drop=True)

    def totals(self, *, phase: str | None = "train") -> dict[str, int]:
        """Total bytes, messages and communication rounds."""
        df = self.frame(phase=phase)
        return {
            "bytes": int(df["nbytes"].sum()),
            "messages": int(len(df)),
            "rounds": int(len(df.drop_duplicates(["epoch", "step", "kind"]))),
        }

    def per_epoch(self, *, phase: str | None = "train") -> pd.DataFrame:
        """Bytes, messages and rounds per epoch (rows indexed by epoch)."""
        df = self.frame(phase=phase)
        if df.empty:
            return pd.DataFrame(columns=["bytes", "messages", "rounds"])
        grouped = df.groupby("epoch")
        return pd.DataFrame(
            {
                "bytes": grouped["nbytes"].sum(),
                "messages": grouped.size(),
                "rounds": grouped.apply(
                    lambda g: len(g.drop_duplicates(["step", "kind"])), include_groups=False
                ),
            }
        )

    def per_party(self, *, phase: str | None = "train", by_epoch: bool = False) -> pd.DataFrame:
        """Bytes and messages each party sent and received (optionally per epoch), and the
        rounds it took part in."""
        df = self.frame(phase=phase)
        keys = ["epoch"] if by_epoch else []
        sent = df.rename(columns={"sender": "party"})
        recv = df.rename(columns={"receiver": "party"})
        out = pd.DataFrame(
            {
                "bytes_sent": sent.groupby(keys + ["party"])["nbytes"].sum(),
                "bytes_received": recv.groupby(keys + ["party"])["nbytes"].sum(),
                "messages_sent": sent.groupby(keys + ["party"]).size(),
                "messages_received": recv.groupby(keys + ["party"]).size(),
            }
        ).fillna(0).astype("int64")
        both = pd.concat([sent[keys + ["party", "step", "kind"]], recv[keys + ["party", "step", "kind"]]])
        rounds = both.drop_duplicates().groupby(keys + ["party"]).size() if not both.empty else 0
        out["rounds"] = rounds if isinstance(rounds, int) else rounds.reindex(out.index).fillna(0).astype("int64")
        return out

    def per_kind(self, *, phase: str | None = "train") -> pd.DataFrame:
        """Bytes and messages per message kind."""
        df = self.frame(phase=phase)
        g = df.groupby("kind")
        return pd.DataFrame({"bytes": g["nbytes"].sum(), "messages": g.size()})

    def price(self, network: "NetworkModel", *, phase: str | None = "train") -> float:
        """Seconds the run's communication takes under ``network``.

        Rounds happen one after another. Within a round, different links carry their messages
        in parallel and one link carries its messages back to back, so a round lasts as long as
        its busiest link: latency plus bytes over bandwidth, summed over that link's messages.
        """
        df = self.frame(phase=phase)
        if df.empty:
            return 0.0
        seconds = [
            network.seconds(s, r, b)
            for s, r, b in zip(df["sender"], df["receiver"], df["nbytes"])
        ]
        df = df.assign(seconds=seconds)
        per_link = df.groupby(["epoch", "step", "kind", "sender", "receiver"])["seconds"].sum()
        return float(per_link.groupby(level=["epoch", "step", "kind"]).max().sum())


@dataclass(frozen=True)
class Link:
    """A network link: bandwidth in megabits per second and one-way latency in milliseconds.

    The default, 50 Mbps, is the bandwidth EASTER fixes for its latency study (Fig. 5)."""

    bandwidth_mbps: float = 50.0
    latency_ms: float = 10.0

    def __post_init__(self) -> None:
        if self.bandwidth_mbps <= 0 or self.latency_ms < 0:
            raise ConfigError(
                f"invalid link {self}: bandwidth must be > 0 Mbps and latency >= 0 ms"
            )


@dataclass
class NetworkModel:
    """Links between parties: a default, overridden per party (a slow device slows every link
    it is on; EASTER Table VII) or per pair of parties (in either direction)."""

    default: Link = field(default_factory=Link)
    parties: dict[str, Link] = field(default_factory=dict)
    pairs: dict[tuple[str, str], Link] = field(default_factory=dict)

    def link(self, a: str, b: str) -> Link:
        """The link between parties ``a`` and ``b``: the pair's own, else the slower of the two
        parties' links, else the default."""
        if (a, b) in self.pairs:
            return self.pairs[(a, b)]
        if (b, a) in self.pairs:
            return self.pairs[(b, a)]
        candidates = [self.parties[p] for p in (a, b) if p in self.parties]
        if not candidates:
            return self.default
        return Link(
            bandwidth_mbps=min(c.bandwidth_mbps for c in candidates),
            latency_ms=max(c.latency_ms for c in candidates),
        )

    def seconds(self, sender: str, receiver: str, nbytes: int) -> float:
        """Time to send ``nbytes`` from ``sender`` to ``receiver``."""
        link = self.link(sender, receiver)
        return link.latency_ms / 1e3 + nbytes * 8 / (link.bandwidth_mbps * 1e6)


class Channel:
    """The only way information crosses between simulated parties.

    ``send`` copies and detaches the payload, records it in the ledger and puts it in the
    receiver's mailbox; ``recv`` takes the oldest message of that kind from that sender. The
    clock (epoch, step, phase) is set by the training loop with :meth:`at`.
    """

    def __init__(self, ledger: Ledger | None = None) -> None:
        self.ledger = ledger if ledger is not None else Ledger()
        self._boxes: dict[tuple[str, str, str], deque[Any]] = defaultdict(deque)
        self.epoch = 0
        self.step = 0
        self.phase = "train"

    def at(self, *, epoch: int | None = None, step: int | None = None, phase: str | None = None) -> "Channel":
        """Set the clock that stamps the next messages; returns the channel."""
        if phase is not None and phase not in PHASES:
            raise ConfigError(f"Invalid phase {phase!r}; choose one of {', '.join(PHASES)}")
        self.epoch = self.epoch if epoch is None else epoch
        self.step = self.step if step is None else step
        self.phase = self.phase if phase is None else phase
        return self

    def send(self, sender: str, receiver: str, kind: str, payload: Any, *, nbytes: int | None = None) -> None:
        """Send ``payload``; ``nbytes`` overrides its size when it travels encoded or compressed."""
        if kind not in KINDS:
            raise ConfigError(f"Invalid message kind {kind!r}; choose one of {', '.join(KINDS)}")
        if sender == receiver:
            raise ConfigError(f"party {sender!r} tried to send a {kind} to itself")
        size = payload_nbytes(payload) if nbytes is None else int(nbytes)
        self.ledger.add(sender, receiver, kind, size, self.epoch, self.step, self.phase)
        self._boxes[(sender, receiver, kind)].append(_wire_copy(payload))

    def recv(self, receiver: str, sender: str, kind: str) -> Any:
        """Take the oldest ``kind`` message from ``sender`` addressed to ``receiver``."""
        box = self._boxes.get((sender, receiver, kind))
        if not box:
            raise RuntimeError(
                f"{receiver} expected a {kind} message from {sender}, but none was sent "
                f"(epoch {self.epoch}, step {self.step}); the protocol is out of order"
            )
        return box.popleft()

    def pending(self) -> int:
        """Messages sent but not yet received (a finished protocol step leaves none)."""
        return sum(len(b) for b in self._boxes.values())


class Party:
    """A participant: it owns its feature slice, sample ids, models and optimizers, and the
    labels if it is the active party (or a label owner). It talks to others only through the
    channel.

    Parameters
    ----------
    name
        Unique name, e.g. ``"active"``, ``"passive_1"``, ``"label_owner_3"``, ``"server"``.
    channel
        The run's channel.
    features
        Its own feature slice per split, e.g. ``{"train": uint8 [N, C, h, w], "test": ...}``.
    labels
        Labels per split; only the party that holds them (default None).
    ids
        Its own sample ids per split (default ``arange(N)``): rows are addressed by id, so
        parties with different sample sets index their own data.
    transform
        Applied to a batch of its features on the way to the device (e.g. uint8 -> normalised
        float32); default: identity.
    device
        Where its models and batches live (default CPU).
    """

    def __init__(
        self,
        name: str,
        *,
        channel: Channel,
        features: dict[str, torch.Tensor] | None = None,
        labels: dict[str, torch.Tensor] | None = None,
        ids: dict[str, torch.Tensor] | None = None,
        transform: Callable[[torch.Tensor], torch.Tensor] | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.name = name
        self.channel = channel
        self.device = torch.device(device)
        self._features = dict(features or {})
        self._labels = dict(labels or {})
        self._transform = transform or (lambda x: x)
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
                raise PartitionError(
                    f"{name}: {len(self.ids[split])} sample ids for {len(x)} {split} rows; give one id per row"
                )
        # id -> row lookup per split: None when the ids are 0..N-1 in order (fully aligned
        # parties: an id is its own row); else sorted ids and their rows, for searchsorted
        # (no Python dict over samples).
        self._lookup: dict[str, tuple[torch.Tensor, torch.Tensor] | None] = {}
        for split, own in self.ids.items():
            if torch.equal(own, torch.arange(len(own))):
                self._lookup[split] = None
            else:
                order = torch.argsort(own)
                self._lookup[split] = (own[order], order)
        self.models: dict[str, torch.nn.Module] = {}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        #: Scratch space for what a party keeps between protocol steps (e.g. its embedding's
        #: graph while it waits for the gradient message).
        self.state: dict[str, Any] = {}

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample of this party's features."""
        x = self._features.get("train", next(iter(self._features.values()), None))
        if x is None:
            raise PartitionError(f"{self.name} holds no features")
        return tuple(x.shape[1:])

    def __repr__(self) -> str:
        shapes = {s: tuple(x.shape) for s, x in self._features.items()}
        return f"Party({self.name!r}, features={shapes}, holds_labels={self.holds_labels})"

    @property
    def holds_labels(self) -> bool:
        """Whether this party owns labels (the active party / a label owner)."""
        return bool(self._labels)

    def n_samples(self, split: str = "train") -> int:
        """How many samples of ``split`` this party holds."""
        return len(self._features[split]) if split in self._features else len(self._labels[split])

    def _rows(self, split: str, ids: torch.Tensor | None, rows: torch.Tensor | None) -> torch.Tensor:
        if rows is None and ids is None:
            raise ValueError("give either rows= (positions) or ids= (sample ids)")
        what, index = ("rows", rows) if rows is not None else ("sample ids", ids)
        # A bool tensor would act as a mask and a negative index would count from the end:
        # both silently select other samples, so only non-negative integers pass. Indexing
        # checks the upper end (see _take).
        if index.dtype in (torch.bool, torch.uint8) or index.is_floating_point() or index.is_complex():
            raise PartitionError(f"{self.name}: {what} must be an integer tensor, got {index.dtype}")
        if index.numel() and int(index.min()) < 0:
            bad = index[index < 0][:5].tolist()
            raise PartitionError(f"{self.name} does not hold {what} {bad} of {split}: they are negative")
        if rows is not None:
            return rows
        lookup = self._lookup[split]
        if lookup is None:
            return ids
        sorted_ids, order = lookup
        pos = torch.searchsorted(sorted_ids, ids).clamp(max=len(sorted_ids) - 1)
        if not torch.equal(sorted_ids[pos], ids):
            missing = ids[sorted_ids[pos] != ids][:5].tolist()
            raise PartitionError(f"{self.name} does not hold sample ids {missing} of {split}")
        return order[pos]

    def features(self, split: str = "train", *, rows: torch.Tensor | None = None,
                 ids: torch.Tensor | None = None) -> torch.Tensor:
        """A batch of this party's own features, transformed and on its device."""
        x = self._features[split]
        batch = x if rows is None and ids is None else self._take(x, split, ids, rows)
        return self._transform(batch.to(self.device, non_blocking=True))

    def _take(self, x: torch.Tensor, split: str, ids: torch.Tensor | None, rows: torch.Tensor | None) -> torch.Tensor:
        index = self._rows(split, ids, rows).to(x.device)
        try:
            return x[index]
        except IndexError:
            bad = index[(index < 0) | (index >= len(x))][:5].tolist()
            raise PartitionError(f"{self.name} does not hold sample ids {bad} of {split}") from None

    def labels(self, split: str = "train", *, rows: torch.Tensor | None = None,
               ids: torch.Tensor | None = None) -> torch.Tensor:
        """A batch of this party's own labels; only a party that holds labels may call this."""
        if not self._labels:
            raise PermissionError(f"{self.name} holds no labels; only the active party does")
        y = self._labels[split]
        if rows is None and ids is None:
            return y.to(self.device)
        return self._take(y, split, ids, rows).to(self.device)

    def send(self, receiver: str | "Party", kind: str, payload: Any, *, nbytes: int | None = None) -> None:
        """Send to another party through the channel."""
        to = receiver.name if isinstance(receiver, Party) else receiver
        self.channel.send(self.name, to, kind, payload, nbytes=nbytes)

    def recv(self, sender: str | "Party", kind: str) -> Any:
        """Receive from another party through the channel (payload moved to this device)."""
        frm = sender.name if isinstance(sender, Party) else sender
        payload = self.channel.recv(self.name, frm, kind)
        return _to_device(payload, self.device)


def _to_device(payload: Any, device: torch.device) -> Any:
    if isinstance(payload, torch.Tensor):
        return payload.to(device)
    if isinstance(payload, dict):
        return {k: _to_device(v, device) for k, v in payload.items()}
    if isinstance(payload, (list, tuple)):
        return type(payload)(_to_device(v, device) for v in payload)
    return payload
