"""Network pricing: what a run's communication costs under a network of links.

A run's :class:`~vflkit.comm.Ledger` records every message; this module prices that traffic
afterwards, without retraining (:func:`price_links`), under EASTER's networks (Figs 4-5, Table VII).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from .errors import ConfigError


@dataclass(frozen=True)
class Link:
    """A network link: bandwidth in megabits per second and one-way latency in milliseconds.

    The default, 50 Mbps, is the bandwidth EASTER fixes for its latency study (Fig. 5)."""

    bandwidth_mbps: float = 50.0
    latency_ms: float = 10.0

    def __post_init__(self) -> None:
        if self.bandwidth_mbps <= 0 or self.latency_ms < 0:
            raise ConfigError(f"invalid link {self}: bandwidth must be > 0 Mbps and latency >= 0 ms")


@dataclass
class NetworkModel:
    """Links between parties: a default, overridden per party (a slow device slows every link
    it is on; EASTER Table VII) or per pair of parties (in either direction)."""

    default: Link = field(default_factory=Link)
    parties: dict[str, Link] = field(default_factory=dict)
    pairs: dict[tuple[str, str], Link] = field(default_factory=dict)

    def link(self, a: str, b: str) -> Link:
        """The pair's own link, else the slower of the two parties' links, else the default."""
        pair = self.pairs.get((a, b), self.pairs.get((b, a)))
        if pair is not None:
            return pair
        candidates = [self.parties[p] for p in (a, b) if p in self.parties]
        if not candidates:
            return self.default
        return Link(bandwidth_mbps=min(c.bandwidth_mbps for c in candidates),
                    latency_ms=max(c.latency_ms for c in candidates))

    def seconds(self, sender: str, receiver: str, nbytes: int) -> float:
        link = self.link(sender, receiver)
        return link.latency_ms / 1e3 + nbytes * 8 / (link.bandwidth_mbps * 1e6)


# --------------------------------------------------------------------------- network pricing
#
# EASTER prices communication under networks it never describes fully (Figs 4-5, Table VII).
# Choices, where the paper is silent:
# * every message pays its link's one-way latency plus bytes / bandwidth (a transfer is a
#   request the receiver must see before the protocol moves on: no pipelining across rounds);
# * "parallel": the active party talks to every passive party at once over independent links,
#   so a round lasts as long as its busiest link;
# * "shared_uplink": the active party's one network interface carries the round's transfers
#   one after another (all passive uploads queue on it, and so do its downloads), so a round
#   lasts the sum over its transfers. Each transfer still runs at its own link's speed (the
#   slower of the two ends), so every extra slow device adds its own time: the only mode in
#   which Table VII's time can rise with each low-performance device (7.18 -> 20.94 -> 26.56
#   -> 35.87 min on MNIST); under "parallel" 1, 2 or 3 slow devices cost the same.

#: Network topologies of :meth:`~vflkit.comm.Ledger.price` and :func:`price_links`.
TOPOLOGIES: tuple[str, ...] = ("parallel", "shared_uplink")

#: EASTER Fig. 5's latency classes, one-way milliseconds (Sec. V-C: low 1-30, medium 30-50,
#: high 50-100), at its fixed 50 Mbps.
LATENCY_CLASSES: dict[str, tuple[float, float]] = {
    "low": (1.0, 30.0), "medium": (30.0, 50.0), "high": (50.0, 100.0),
}
#: EASTER Fig. 5's bandwidth (Mbps).
FIG5_BANDWIDTH_MBPS = 50.0


def check_topology(topology: str) -> None:
    if topology not in TOPOLOGIES:
        raise ConfigError(f"Invalid topology {topology!r}; choose one of {', '.join(TOPOLOGIES)}")


def latency_range(latency_class: str) -> tuple[float, float]:
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
    """Devices for Table VII's rows: the last ``n_low`` passive parties low, the others high
    ((A, B, C) = 111, 110, 100, 000 for n_low = 0..3), and the active party always high (the
    paper's A, B, C are "the client devices", which we read as the passive parties)."""
    passive = list(passive)
    if not 0 <= n_low <= len(passive):
        raise ConfigError(f"n_low={n_low} low-performance devices among {len(passive)} passive parties")
    return {active: high, **{name: low if k >= len(passive) - n_low else high for k, name in enumerate(passive)}}


def device_network(devices: dict[str, Device], *, default: Link | None = None) -> NetworkModel:
    """The :class:`NetworkModel` of a device mix: every party's link is its device's (a link
    between two parties runs at the slower end's speed, see :meth:`NetworkModel.link`)."""
    return NetworkModel(default=default or Link(), parties={n: d.link for n, d in devices.items()})


def link_rows(links: Any) -> pd.DataFrame:
    """Per-link traffic as a frame, from :meth:`vflkit.comm.Ledger.per_link`'s frame or a record's
    ``comm["per_link"]``: pandas' split orient (``{"columns": [...], "data": [[...]]}``) or a list
    of row dicts. The one reader of that field."""
    if isinstance(links, pd.DataFrame):
        df = links
    elif isinstance(links, dict) and "columns" in links:
        df = pd.DataFrame(links.get("data", []), columns=links["columns"])
    else:
        df = pd.DataFrame(list(links))
    need = {"epoch", "kind", "sender", "receiver", "messages", "bytes", "steps"}
    missing = sorted(need - set(df.columns))
    if missing:
        raise ConfigError(f"per-link rows need columns {sorted(need)}; missing {missing} "
                          "(rows come from Ledger.per_link or a record's comm.per_link)")
    return df


def price_links(links: Any, network: NetworkModel, *, topology: str = "parallel",
                until_epoch: int | None = None, latency_ms: tuple[float, float] | str | None = None,
                seed: int = 0, rounds: dict[str, str] | None = None) -> float:
    """Seconds of communication of per-link traffic (:func:`link_rows`) under ``network`` and
    ``topology`` (as :meth:`Ledger.price`), without retraining; epochs 1..``until_epoch`` only
    if given (communication to convergence, Figs 4-5).

    ``latency_ms``, a latency class or a ``(low, high)`` range in ms, draws every latency i.i.d.
    uniform from it (seeded; Fig. 5): one draw per round under "parallel", one per queued
    transfer under "shared_uplink". ``rounds`` maps kinds that travel in one round to the
    round's name, for rows without a ``round`` column (C-VFL: ``{"model_weights": "embedding",
    "labels": "embedding"}``; default: one round per kind per step).

    A step's round on one link is priced as that link's epoch total divided by the steps it
    occurred in: :meth:`Ledger.price` exactly when each step of an epoch sends the same traffic
    pattern (every protocol here; only the last, smaller batch differs, and transmission time
    is linear in bytes) and links of a round share their steps.
    """
    check_topology(topology)
    df = link_rows(links)
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


def training_time(links: Any, devices: dict[str, Device], *, step_seconds: float | dict[str, float],
                  steps_per_epoch: int, topology: str = "parallel", until_epoch: int | None = None,
                  default: Link | None = None, **price_options: Any) -> dict[str, float]:
    """Table VII's seconds for one device mix: compute (:func:`compute_seconds`) plus
    communication (:func:`price_links` under :func:`device_network`) of per-link rows ``links``."""
    df = link_rows(links)
    epochs = int(df["epoch"].max()) if until_epoch is None and not df.empty else int(until_epoch or 0)
    comm = price_links(df, device_network(devices, default=default), topology=topology,
                       until_epoch=until_epoch, **price_options)
    compute = compute_seconds(step_seconds, steps_per_epoch * epochs, devices)
    return {"compute_s": compute, "communication_s": comm, "total_s": compute + comm}


def sweep(links: Any, *, until_epoch: int | None = None, bandwidths: Sequence[float] = (), latency_ms: float = 10.0,
          latency_classes: Sequence[str] = (), class_bandwidth_mbps: float = FIG5_BANDWIDTH_MBPS,
          draws: int = 1) -> pd.DataFrame:
    """Seconds of communication of per-link rows ``links`` (:func:`price_links`, parallel links):
    under each of ``bandwidths`` at ``latency_ms``, then under each of ``latency_classes`` at
    ``class_bandwidth_mbps`` (the mean over ``draws`` seeded draws per round). One row each:
    ``bandwidth_mbps``, ``latency`` ("10 ms" or the class) and ``seconds``."""
    df = link_rows(links)
    rows = [{"bandwidth_mbps": bw, "latency": f"{latency_ms:g} ms",
             "seconds": price_links(df, NetworkModel(Link(bw, latency_ms)), until_epoch=until_epoch)}
            for bw in bandwidths]
    net = NetworkModel(Link(class_bandwidth_mbps, 0.0))
    for cls in latency_classes:
        drawn = [price_links(df, net, until_epoch=until_epoch, latency_ms=cls, seed=d) for d in range(draws)]
        rows.append({"bandwidth_mbps": class_bandwidth_mbps, "latency": cls, "seconds": float(np.mean(drawn))})
    return pd.DataFrame(rows, columns=["bandwidth_mbps", "latency", "seconds"])


def record_time(record: dict[str, Any], devices: dict[str, Device], *, until_epoch: int,
                topology: str = "parallel") -> dict[str, float]:
    """:func:`training_time` of a run ``record`` to ``until_epoch`` on ``devices``: its per-link
    traffic, and as ``step_seconds`` its measured wall time to that epoch over the steps it took
    (one simulated step runs every party)."""
    links = link_rows(record["comm"]["per_link"])
    steps = int(links[links["epoch"] == 1]["steps"].max())
    step_s = max(h["elapsed_s"] for h in record["history"] if h["epoch"] == until_epoch) / (steps * until_epoch)
    return training_time(links, devices, step_seconds=step_s, steps_per_epoch=steps, topology=topology,
                         until_epoch=until_epoch)


def price_record(record: dict[str, Any], network: NetworkModel, **options: Any) -> float:
    """:func:`price_links` on a run record's ``comm["per_link"]`` rows."""
    rows = record.get("comm", {}).get("per_link")
    if rows is None:
        raise ConfigError("this record has no comm.per_link rows; re-run it with a runner that stores "
                          "Ledger.per_link() to price it per link")
    return price_links(rows, network, **options)
