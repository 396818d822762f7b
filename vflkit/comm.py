"""Parties, the one channel between them, and the ledger that counts what crosses it.

Every tensor that moves from one simulated party to another goes through :class:`Channel`.
The channel copies and detaches what it carries, so a receiver can never back-propagate into
the sender's graph nor alias the sender's memory: gradients reach a party only as a message of
kind ``"gradient"``. Each message is recorded in a :class:`Ledger` with its sender, receiver,
kind, bytes as sent, epoch, step and phase (training or evaluation). The ledger sums bytes,
messages and communication rounds per party and epoch, and prices a run under a
:class:`NetworkModel` (bandwidth and latency per link) for EASTER's Figs 4-5 and Table VII,
over parallel per-party links or a shared uplink; :meth:`Ledger.per_link` keeps the traffic per
link so that :func:`price_links` can price a finished run under any network, latency class or
device mix (:func:`training_time`) without retraining.

A *communication round* is one phase of the protocol: messages that can travel at once
because none of them depends on another. The ledger reads the phases off the order in which
messages were sent (:meth:`Ledger.rounds`): within one step, a message opens a new round when its
sender has received a message in the current round (what it sends may depend on what it got);
otherwise it travels in the current round. VFedMH (Fig. 3) counts four per step (blinded
embeddings up, global embedding down, predictions up, losses down); split learning, Agg_VFL and
C-VFL count two (up, then down; C-VFL's down phase carries embeddings, the server model and
the labels at once). No method has to announce its phases, and a protocol that sends two kinds
in one phase is not counted twice.
"""

from __future__ import annotations

from collections import defaultdict, deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
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

#: What a record's ``rounds`` figures count; trainers store it as ``comm["rounds_counted_as"]``.
#: Records without it counted one round per (epoch, step, kind) and are brought to this count
#: by ``scripts/migrate_records.py`` where their figures allow it.
ROUNDS_COUNTED_AS = "protocol_phases"


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


def wire_copy(payload: Any) -> Any:
    """What the receiver gets: a detached copy, so no autograd graph or memory is shared.

    A bfloat16 tensor (from a model under bf16 autocast, ``RunConfig.precision="bf16"``) is
    widened to float32, exactly: the precision is the computation's, not the protocol's, so
    messages and their ledger are those of an fp32 run.
    """
    if isinstance(payload, torch.Tensor):
        return payload.detach().float() if payload.dtype == torch.bfloat16 else payload.detach().clone()
    if isinstance(payload, dict):
        return {k: wire_copy(v) for k, v in payload.items()}
    if isinstance(payload, (list, tuple)):
        return type(payload)(wire_copy(v) for v in payload)
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
        self._round_cache: list[int] = []
        # per (epoch, step, phase): (current round, parties that received in it)
        self._round_state: dict[tuple[int, int, str], tuple[int, set[str]]] = {}

    def add(self, sender: str, receiver: str, kind: str, nbytes: int, epoch: int, step: int, phase: str) -> None:
        """Record one message."""
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
        """The round of every message, counted from 0 within its (epoch, step, phase).

        Messages are taken in the order they were sent. A message opens a new round when its
        sender has received a message in the current round of its step (it may depend on it);
        otherwise it joins the current round. So "passive parties send up, the active party
        answers each" is two rounds however many parties and message kinds take part.
        """
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
        return {
            "bytes": int(df["nbytes"].sum()),
            "messages": int(len(df)),
            "rounds": int(len(df.drop_duplicates(["epoch", "step", "round"]))),
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
                "rounds": df.drop_duplicates(["epoch", "step", "round"]).groupby("epoch").size(),
            }
        )

    def per_party(self, *, phase: str | None = "train", by_epoch: bool = False) -> pd.DataFrame:
        """Bytes and messages each party sent and received (optionally per epoch), and the
        rounds it took part in (over the whole run, or per epoch with ``by_epoch``)."""
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
        both = pd.concat([sent[["epoch", "party", "step", "round"]], recv[["epoch", "party", "step", "round"]]])
        rounds = both.drop_duplicates().groupby(keys + ["party"]).size() if not both.empty else 0
        out["rounds"] = rounds if isinstance(rounds, int) else rounds.reindex(out.index).fillna(0).astype("int64")
        return out

    def per_kind(self, *, phase: str | None = "train") -> pd.DataFrame:
        """Bytes and messages per message kind."""
        df = self.frame(phase=phase)
        g = df.groupby("kind")
        return pd.DataFrame({"bytes": g["nbytes"].sum(), "messages": g.size()})

    def per_link(self, *, phase: str | None = "train") -> pd.DataFrame:
        """Traffic per (epoch, round, kind, sender, receiver), where ``round`` is the phase's
        position in its step (:meth:`rounds`): messages, bytes and the number of steps it
        occurred in. Small enough to keep in a run record, and enough to price the run under
        any network afterwards (:func:`price_links`)."""
        df = self.frame(phase=phase)
        cols = ["epoch", "round", "kind", "sender", "receiver", "messages", "bytes", "steps"]
        if df.empty:
            return pd.DataFrame(columns=cols)
        g = df.groupby(["epoch", "round", "kind", "sender", "receiver"])
        out = pd.DataFrame({"messages": g.size(), "bytes": g["nbytes"].sum(), "steps": g["step"].nunique()})
        return out.reset_index()[cols]

    def price(self, network: "NetworkModel", *, phase: str | None = "train",
              topology: str = "parallel") -> float:
        """Seconds the run's communication takes under ``network`` (exact, message by message).

        Rounds (protocol phases, :meth:`rounds`) happen one after another; every message pays
        its link's latency plus its bytes over the link's bandwidth. ``topology="parallel"``:
        within a round, different links
        carry their messages at once and one link back to back, so a round lasts as long as its
        busiest link. ``topology="shared_uplink"``: all of a round's transfers queue on one
        shared link (the active party's NIC), so a round lasts the sum over its messages.
        """
        _check_topology(topology)
        df = self.frame(phase=phase)
        if df.empty:
            return 0.0
        seconds = [
            network.seconds(s, r, b)
            for s, r, b in zip(df["sender"], df["receiver"], df["nbytes"])
        ]
        df = df.assign(seconds=seconds)
        if topology == "shared_uplink":
            return float(df["seconds"].sum())
        per_link = df.groupby(["epoch", "step", "round", "sender", "receiver"])["seconds"].sum()
        return float(per_link.groupby(level=["epoch", "step", "round"]).max().sum())


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


# --------------------------------------------------------------------------- network pricing
#
# EASTER prices communication under networks it never describes fully (Figs 4-5, Table VII).
# Choices, where the paper is silent:
# * every message pays its link's one-way latency plus bytes / bandwidth (a transfer is a
#   request the receiver must see before the protocol moves on: no pipelining across rounds);
# * "parallel": the active party talks to every passive party at once over independent links,
#   so a round lasts as long as its busiest link (``Ledger.price``'s original semantics);
# * "shared_uplink": the active party's one network interface carries the round's transfers
#   one after another (all passive uploads queue on it, and so do its downloads), so a round
#   lasts the sum over its transfers. Each transfer still runs at its own link's speed (the
#   slower of the two ends), so every extra slow device adds its own time: the only mode in
#   which Table VII's time can rise with each low-performance device (7.18 -> 20.94 -> 26.56
#   -> 35.87 min on MNIST); under "parallel" 1, 2 or 3 slow devices cost the same.

#: Network topologies of :meth:`Ledger.price` and :func:`price_links`.
TOPOLOGIES: tuple[str, ...] = ("parallel", "shared_uplink")

#: EASTER Fig. 5's latency classes, one-way milliseconds (Sec. V-C: low 1-30, medium 30-50,
#: high 50-100), at its fixed 50 Mbps.
LATENCY_CLASSES: dict[str, tuple[float, float]] = {
    "low": (1.0, 30.0), "medium": (30.0, 50.0), "high": (50.0, 100.0),
}
#: EASTER Fig. 5's bandwidth (Mbps).
FIG5_BANDWIDTH_MBPS = 50.0


def _check_topology(topology: str) -> None:
    if topology not in TOPOLOGIES:
        raise ConfigError(f"Invalid topology {topology!r}; choose one of {', '.join(TOPOLOGIES)}")


def latency_range(latency_class: str) -> tuple[float, float]:
    """(low, high) one-way milliseconds of one of :data:`LATENCY_CLASSES`."""
    try:
        return LATENCY_CLASSES[latency_class]
    except KeyError:
        raise ConfigError(f"Invalid latency class {latency_class!r}; choose one of "
                          f"{', '.join(LATENCY_CLASSES)}") from None


def class_link(latency_class: str, bandwidth_mbps: float = FIG5_BANDWIDTH_MBPS) -> Link:
    """A link at the midpoint of a latency class (15.5, 40 or 75 ms) and ``bandwidth_mbps``:
    the deterministic stand-in for per-round draws (:func:`price_links` with ``latency_ms``)."""
    lo, hi = latency_range(latency_class)
    return Link(bandwidth_mbps=bandwidth_mbps, latency_ms=(lo + hi) / 2)


@dataclass(frozen=True)
class Device:
    """A party's machine (EASTER Table VII): its network link and how much slower than a
    high-performance device it computes (``compute_factor`` multiplies its compute time)."""

    link: Link = field(default_factory=Link)
    compute_factor: float = 1.0

    def __post_init__(self) -> None:
        if not self.compute_factor > 0:
            raise ConfigError(f"compute_factor must be > 0, got {self.compute_factor!r}")


#: Table VII's "high-performance device (high bandwidth, low latency)": the paper gives no
#: numbers; 50 Mbps (its Fig. 5 bandwidth) at the low latency class's midpoint, 15.5 ms.
HIGH_DEVICE = Device(Link(bandwidth_mbps=50.0, latency_ms=15.5), compute_factor=1.0)
#: Table VII's "low-performance device (low bandwidth, high latency)": 10 Mbps at the high
#: latency class's midpoint, 75 ms. The paper defines the classes by network only; "low
#: performance" suggests slower compute too, so ours computes 2x slower (a mid-range laptop
#: CPU against a workstation). Set ``compute_factor=1`` for the paper's network-only reading.
LOW_DEVICE = Device(Link(bandwidth_mbps=10.0, latency_ms=75.0), compute_factor=2.0)


def device_mix(passive: Sequence[str], n_low: int, *, active: str = "active",
               high: Device = HIGH_DEVICE, low: Device = LOW_DEVICE) -> dict[str, Device]:
    """Devices for Table VII's rows: the active party and the first passive parties high, the
    last ``n_low`` passive parties low ((A, B, C) = 111, 110, 100, 000 for n_low = 0..3).

    The active party is always high (it is the label owner's server; the paper's A, B, C are
    "the client devices", which we read as the passive parties).
    """
    passive = list(passive)
    if not 0 <= n_low <= len(passive):
        raise ConfigError(f"n_low={n_low} low-performance devices among {len(passive)} passive parties")
    mix = {active: high}
    for k, name in enumerate(passive):
        mix[name] = low if k >= len(passive) - n_low else high
    return mix


def device_network(devices: dict[str, Device], *, default: Link | None = None) -> NetworkModel:
    """The :class:`NetworkModel` of a device mix: every party's link is its device's (a link
    between two parties runs at the slower end's speed, see :meth:`NetworkModel.link`)."""
    return NetworkModel(default=default or Link(), parties={n: d.link for n, d in devices.items()})


def _link_rows(links: Any) -> pd.DataFrame:
    df = links if isinstance(links, pd.DataFrame) else pd.DataFrame(list(links))
    need = {"epoch", "kind", "sender", "receiver", "messages", "bytes", "steps"}
    missing = sorted(need - set(df.columns))
    if missing:
        raise ConfigError(f"per-link rows need columns {sorted(need)}; missing {missing} "
                          "(rows come from Ledger.per_link or a record's comm.per_link)")
    return df


def price_links(
    links: Any,
    network: NetworkModel,
    *,
    topology: str = "parallel",
    until_epoch: int | None = None,
    latency_ms: tuple[float, float] | str | None = None,
    seed: int = 0,
    rounds: dict[str, str] | None = None,
) -> float:
    """Seconds of communication of per-link traffic (:meth:`Ledger.per_link` rows, or a
    record's ``comm["per_link"]``) under ``network``, without retraining.

    Parameters
    ----------
    links
        Rows with epoch, kind, sender, receiver, messages, bytes, steps (DataFrame or dicts).
    network, topology
        As :meth:`Ledger.price`.
    until_epoch
        Price epochs 1..``until_epoch`` only (communication to convergence, Figs 4-5).
    latency_ms
        None: each link's own latency. A latency class name or a ``(low, high)`` range in ms:
        every latency is drawn i.i.d. uniform from it instead (seeded by ``seed``; Fig. 5):
        one draw per round under "parallel" (the round waits for one network delay), one per
        transfer under "shared_uplink" (each queued transfer waits for its own).
    rounds
        Kinds that travel in one round, mapped to the round's name, for rows without a
        ``round`` column (written before the ledger counted protocol phases: C-VFL sends
        embeddings, ``model_weights`` and ``labels`` down together: ``{"model_weights":
        "embedding", "labels": "embedding"}``). Default: the rows' ``round`` column (the
        phases of :meth:`Ledger.rounds`) when they have one, else one round per kind per step.

    A step's round on one link is priced as that link's epoch total divided by the steps it
    occurred in; this equals :meth:`Ledger.price` exactly when each step of an epoch sends the
    same traffic pattern (every protocol here; only the last, smaller batch differs, and
    transmission time is linear in bytes) and links of a round share their steps.
    """
    _check_topology(topology)
    df = _link_rows(links)
    if until_epoch is not None:
        df = df[df["epoch"] <= until_epoch]
    if df.empty:
        return 0.0
    if rounds is not None or "round" not in df:
        df = df.assign(round=df["kind"].map(lambda k: (rounds or {}).get(k, k)))
    g = df.groupby(["epoch", "round", "sender", "receiver"])
    per = pd.DataFrame({"messages": g["messages"].sum(), "bytes": g["bytes"].sum(),
                        "steps": g["steps"].max()}).reset_index()
    links_ = [network.link(a, b) for a, b in zip(per["sender"], per["receiver"])]
    per["latency_s"] = [link.latency_ms / 1e3 for link in links_]
    per["transfer_s"] = [b * 8 / (link.bandwidth_mbps * 1e6) for b, link in zip(per["bytes"], links_)]
    if latency_ms is None:
        per["seconds"] = per["messages"] * per["latency_s"] + per["transfer_s"]
        if topology == "shared_uplink":
            return float(per["seconds"].sum())
        per["per_step"] = per["seconds"] / per["steps"]
        by_round = per.groupby(["epoch", "round"]).agg(per_step=("per_step", "max"), steps=("steps", "max"))
        return float((by_round["per_step"] * by_round["steps"]).sum())
    lo, hi = latency_range(latency_ms) if isinstance(latency_ms, str) else map(float, latency_ms)
    if not 0 <= lo <= hi:
        raise ConfigError(f"latency range must satisfy 0 <= low <= high, got {(lo, hi)}")
    rng = np.random.default_rng(seed)
    if topology == "shared_uplink":
        n = int(per["messages"].sum())
        return float(per["transfer_s"].sum() + rng.uniform(lo, hi, size=n).sum() / 1e3)
    per["per_step"] = per["transfer_s"] / per["steps"]
    per["msgs_per_step"] = per["messages"] / per["steps"]
    by_round = per.groupby(["epoch", "round"]).agg(per_step=("per_step", "max"), steps=("steps", "max"),
                                                   msgs=("msgs_per_step", "max"))
    n_rounds = int(by_round["steps"].sum())
    # One draw per round; a link sending m messages in the round waits m network delays.
    draws = rng.uniform(lo, hi, size=n_rounds) / 1e3
    latency = float(np.sum(draws * np.repeat(by_round["msgs"].to_numpy(), by_round["steps"].to_numpy())))
    return float((by_round["per_step"] * by_round["steps"]).sum()) + latency


def compute_seconds(step_seconds: float | dict[str, float], n_steps: int,
                    devices: dict[str, Device]) -> float:
    """Compute time of ``n_steps`` synchronous steps on heterogeneous devices.

    Model (the paper gives none): within a step the parties compute at once and the protocol
    waits for the slowest, so a step takes ``max_k t_k * compute_factor_k``, where t_k is party
    k's own compute time per step on a high-performance device. ``step_seconds`` gives the t_k
    per party, or one number: the measured time of a whole simulated step, in which our single
    process runs the C parties one after another, split evenly (t_k = T / C). Barriers inside a
    step (the active party waits for embeddings, then for predictions) are not modelled, so this
    is a lower bound when slow and fast parties alternate on the critical path.
    """
    if n_steps < 0:
        raise ConfigError(f"n_steps must be >= 0, got {n_steps}")
    if isinstance(step_seconds, dict):
        unknown = sorted(set(step_seconds) - set(devices))
        if unknown:
            raise ConfigError(f"compute times for parties without a device: {unknown}")
        per_party = {name: float(step_seconds.get(name, 0.0)) for name in devices}
    else:
        per_party = {name: float(step_seconds) / len(devices) for name in devices}
    return n_steps * max(per_party[n] * d.compute_factor for n, d in devices.items())


def training_time(
    links: Any,
    devices: dict[str, Device],
    *,
    step_seconds: float | dict[str, float],
    steps_per_epoch: int,
    topology: str = "parallel",
    until_epoch: int | None = None,
    default: Link | None = None,
    **price_options: Any,
) -> dict[str, float]:
    """Table VII's time for one device mix: compute (:func:`compute_seconds`) plus
    communication (:func:`price_links` under :func:`device_network`), in seconds.

    ``links`` are per-link rows; epochs are counted from them (or ``until_epoch``)."""
    df = _link_rows(links)
    epochs = int(df["epoch"].max()) if until_epoch is None and not df.empty else int(until_epoch or 0)
    comm = price_links(df, device_network(devices, default=default), topology=topology,
                       until_epoch=until_epoch, **price_options)
    compute = compute_seconds(step_seconds, steps_per_epoch * epochs, devices)
    return {"compute_s": compute, "communication_s": comm, "total_s": compute + comm}


def price_record(record: dict[str, Any], network: NetworkModel, **options: Any) -> float:
    """:func:`price_links` on a run record's ``comm["per_link"]`` rows (the runner must store
    ``Ledger.per_link()`` there; older records hold only per-epoch totals and cannot be priced
    per link)."""
    rows = record.get("comm", {}).get("per_link")
    if rows is None:
        raise ConfigError("this record has no comm.per_link rows; re-run it with a runner that stores "
                          "Ledger.per_link() to price it per link")
    return price_links(rows, network, **options)


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
        wire = wire_copy(payload)
        size = payload_nbytes(wire) if nbytes is None else int(nbytes)  # as it travels
        self.ledger.add(sender, receiver, kind, size, self.epoch, self.step, self.phase)
        self._boxes[(sender, receiver, kind)].append(wire)

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
        #: Set (by :func:`checked_batches`) while every batch it is asked for by sample id was cut
        #: from ids already checked on the host by :meth:`check_ids`: the per-batch checks, which
        #: read the index back (a blocking sync when it lives on a GPU), are then skipped.
        self.prechecked = False
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

    @property
    def transform(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """What a batch of its features goes through on the way to its device."""
        return self._transform

    def aligned(self, split: str = "train") -> bool:
        """Whether its sample ids of ``split`` are its rows (0..N-1 in order, as an aligned
        image party's): a batch of ids then indexes its data directly."""
        return self._lookup[split] is None

    def held_features(self, split: str = "train") -> torch.Tensor:
        """Its features of ``split`` as it holds them: untransformed, where they were given."""
        return self._features[split]

    def held_labels(self, split: str = "train") -> torch.Tensor:
        """Its labels of ``split`` as it holds them; only a party that holds labels may call this."""
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
        # ids under checked_batches were checked by check_ids; rows never are (check_ids takes ids)
        if not (self.prechecked and rows is None) and index.numel() and int(index.min()) < 0:
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
        if self.prechecked:  # every id was found by check_ids: no per-batch read back
            return order[pos]
        if not torch.equal(sorted_ids[pos], ids):
            missing = ids[sorted_ids[pos] != ids][:5].tolist()
            raise PartitionError(f"{self.name} does not hold sample ids {missing} of {split}")
        return order[pos]

    def check_ids(self, split: str, ids: torch.Tensor) -> None:
        """Check once, on the host, that this party holds every sample id of ``ids`` (e.g. an
        epoch's batch order): batches cut from it may then be taken under :func:`checked_batches`
        without the per-batch checks, which would read a device index back at every batch."""
        ids = ids.cpu()  # a host tensor: the check reads values, and must not stall a device
        prechecked, self.prechecked = self.prechecked, False  # this is the check: never skipped
        try:
            rows = self._rows(split, ids, None)
        finally:
            self.prechecked = prechecked
        held = self.n_samples(split)
        if rows.numel() and int(rows.max()) >= held:
            bad = ids[rows >= held][:5].tolist()
            raise PartitionError(f"{self.name} does not hold sample ids {bad} of {split}")

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


def _to_device(payload: Any, device: torch.device) -> Any:
    if isinstance(payload, torch.Tensor):
        return payload.to(device)
    if isinstance(payload, dict):
        return {k: _to_device(v, device) for k, v in payload.items()}
    if isinstance(payload, (list, tuple)):
        return type(payload)(_to_device(v, device) for v in payload)
    return payload
