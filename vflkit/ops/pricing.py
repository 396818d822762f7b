"""Prices of runs: the counts of their steps (:mod:`vflkit.training.counting`) times the rates
measured on each kind of device (the committed records; ``results/device/``: a study's
calibration runs, :attr:`vflkit.studies.base.Study.calibration`, and the packed benchmark). On a
GPU a run is launch-bound: its operations (:data:`OP_COUNTS`) times the seconds per operation of
that GPU kind, never faster than :func:`best_rate`, slowed by :func:`slowdown` of the lanes
sharing it; on the CPU its FLOPs over :func:`rate`. The model: docs/own-gpu.md.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np
import pandas as pd
import torch

from .. import studies
from ..config import project_root
from ..scheduler import GPU_WORKERS, MAX_PACK
from ..training import counting, run_class
from ..training.counting import run_flops, step_key, uncounted
from ..training.split import group_packs  # the stacked trainer's grouping: the one place named here

#: The committed op counts under ``results/`` (``python -m vflkit.ops.pricing --count-ops``).
OP_COUNTS = "device/op-counts.json"
#: The GPU kinds measurements are told apart by, and the one a bare ``cuda`` is priced as.
GPU_KINDS: tuple[str, ...] = ("h100", "h200")
REFERENCE_GPU = "h100"
#: Records shorter than this are left out of the CPU rates: their time is mostly what the FLOP
#: count does not see (loading, evaluation, key agreement).
MIN_WALL_S = 60.0
#: The pack an op count is taken at, and the methods whose packed step the op table counts.
PACK_COUNTED = 3
PACKED_COUNTED: tuple[str, ...] = ("c_vfl",)
#: The pack sizes a Multi-VFL round is counted at (others: on the line through their neighbours).
MULTI_VFL_COUNTED_K: tuple[int, ...] = (1, 2, 8, 42)
#: :func:`estimate`'s and :func:`price`'s sources: op counts; FLOPs (the FLOP floor too); the study's rule.
FROM_OPS, FROM_FLOPS, FROM_STUDY = "ops", "flops", "study"
#: What the GPU prices are, said wherever they are printed.
GPU_LABEL = ("estimated from the torch operations of a training step (results/" + OP_COUNTS + ") at the "
             "seconds per operation measured on that GPU kind alone, never faster than the best FLOP/s measured "
             "on it (results/device/); from FLOPs at the kind's calibrated rate where a run has no op count; not "
             "measured on a whole run")


def committed_root() -> Path:
    """The committed records: the project's ``results/``."""
    return project_root() / "results"


def root_with(name: str, root: Path | None = None) -> Path | None:
    """The results folder that holds the file ``name``: ``root``, else the working directory's
    checkout's, else this package's; None where none does."""
    roots = [root] if root is not None else [committed_root(), Path(__file__).resolve().parents[2] / "results"]
    return next((r for r in roots if (r / name).is_file()), None)


def gpu_kind(name: str) -> str | None:
    """The GPU kind (:data:`GPU_KINDS`) of a device name; None for another device."""
    return next((k for k in GPU_KINDS if k in name.lower()), None)


# --------------------------------------------------------------------------- committed op counts


@functools.cache
def _op_table(path: str) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {"steps": {}, "packed": {}, "rounds": {}, "eval": {}}
    multi = doc.get("multi_owner", {})
    return {"steps": {r["setting"]: int(r["ops"]) for r in doc.get("steps", [])},
            "packed": {r["setting"]: int(r["packed_ops"]) for r in doc.get("steps", []) if r.get("packed_ops")},
            "rounds": {(r["dataset"], r["n_data_owners"], r["n_label_owners"], r["k"]):
                       {f: float(r[f]) for f in ("per_step", "fixed", "eval_per_message") if f in r}
                       for r in multi.get("rounds", [])},
            "eval": {(r["dataset"], r["n_data_owners"]): float(r["per_message"]) for r in multi.get("eval", [])}}


def op_table(root: Path | None = None) -> dict[str, Any]:
    r = root_with(OP_COUNTS, root)
    return _op_table(str(r / OP_COUNTS)) if r else _op_table("")


def step_ops(run: Any, root: Path | None = None) -> int | None:
    """The committed op count of split-family run ``run``'s training step; None without one."""
    return op_table(root)["steps"].get(step_key(run)) if type(run).__name__ == "RunConfig" else None


def _round_ops(run: Any, k: int, root: Path | None) -> float | None:
    """Operations of one round of ``k`` Multi-VFL runs like ``run`` packed (k = 1: alone),
    evaluation messages included; None without the counts of its shapes."""
    table = op_table(root)
    shape = (run.dataset, run.n_data_owners, run.n_label_owners)
    rounds = {kk: v for (ds, do, lo, kk), v in table["rounds"].items() if (ds, do, lo) == shape}
    evaluation = table["eval"].get((run.dataset, run.n_data_owners))
    if 1 not in rounds or evaluation is None or k < 1:
        return None
    if k in rounds:
        packed = rounds[k]
    else:
        counted = sorted((kk, v) for kk, v in rounds.items() if kk > 1)
        if len(counted) < 2:
            return None
        i = next((i for i, (kk, _) in enumerate(counted) if kk > k), len(counted) - 1)
        (k1, a), (k2, b) = counted[max(i - 1, 0)], counted[max(i, 1)]
        packed = {f: a[f] + (b[f] - a[f]) * (k - k1) / (k2 - k1) for f in a if f in b}
    n = run.local_steps or math.ceil(run.samples_per_owner / run.batch_size) * run.local_epochs
    messages = math.ceil((run.n_test or 10_000) / counting.MULTI_VFL_EVAL_BATCH) / run.eval_every
    per_message = packed.get("eval_per_message", k * evaluation) if k > 1 else evaluation
    return packed["fixed"] + n * packed["per_step"] + messages * per_message


def run_ops(run: Any, root: Path | None = None) -> float | None:
    """The torch operations a whole run dispatches, from the committed counts; None without."""
    if type(run).__name__ == "MultiVFLConfig":
        per = _round_ops(run, 1, root)
        return None if per is None else per * run.rounds
    ops, n = step_ops(run, root), counting.steps(run) if uncounted(run) is None else None
    return None if ops is None or n is None else float(ops * n)


def pack_ratio(run: Any, root: Path | None = None, k: int = PACK_COUNTED) -> float | None:
    """The time of one packed step of ``k`` runs like ``run`` over one step of ``run`` alone, as
    launch-bound runs (their counted operations); None where the table has no packed count."""
    if type(run).__name__ == "MultiVFLConfig":
        one, packed = _round_ops(run, 1, root), _round_ops(run, k, root)
        return packed / one if one and packed else None
    packed, ops = op_table(root)["packed"].get(step_key(run)), step_ops(run, root)
    return packed / ops if packed and ops else None


def pack_cost_s(costs: Sequence[float | None], config: Any) -> float | None:
    """A pack's seconds from its runs' (the scheduler's ``pack_cost``): its longest run's time
    times :func:`pack_ratio` for a pack of that many where counted, else their sum."""
    if not costs or None in costs:
        return None
    ratio = pack_ratio(config, k=len(costs))
    return max(costs) * ratio if ratio is not None else float(sum(costs))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- GPU measurements


class Measured(NamedTuple):
    """One timed thing on a GPU, per unit (a step, a round, an epoch); ``ops`` None where uncounted;
    ``alone``: one process on the GPU; ``source``: "calibration", "bench", "packed" or "stopped"."""

    kind: str
    run: Any
    seconds: float
    flops: float
    ops: float | None
    alone: bool
    source: str


def benchmarks(root: str) -> tuple[tuple[Path, str | None, dict[str, Any]], ...]:
    """(file, GPU kind, document) of each packed benchmark under ``root/device/``, in name order."""
    out = []
    for path in sorted((Path(root) / "device").glob("*.json")):
        try:
            doc = json.loads(path.read_text())
            doc["bench_packed"]["rows"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.append((path, gpu_kind(str(doc.get("device", ""))), doc))
    return tuple(out)


def _calibration_runs() -> list[Any]:
    return [run for study in studies.studies() for run in study.calibration()]


def _matches(row: dict[str, Any], run: Any) -> bool:
    """Whether a measured ``row`` names ``run``: by key, or by method and party models."""
    if "key" in row:
        return row["key"] == run.key
    return (getattr(run, "method", None) == row.get("method")
            and "/".join(sorted(set(getattr(run, "models", ())))) == row.get("models"))


@functools.cache
def measurements(root: str) -> tuple[Measured, ...]:
    """Every GPU measurement under ``root/device/``: calibration rows (``s_per_step``, on the GPU
    the file is named after), packed benchmark rows (a step alone, the packed step's best column)
    and stopped runs (seconds per round or epoch, under ``processes_sharing``)."""
    out: list[Measured] = []
    calibration = _calibration_runs()
    for path in sorted((Path(root) / "device").glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, list):  # calibration rows: seconds per step of a study's calibration runs
            kind = gpu_kind(path.name)
            for row in doc:
                run = next((c for c in calibration if _matches(row, c)), None)
                if kind and run is not None and "s_per_step" in row:
                    out.append(Measured(kind, run, float(row["s_per_step"]), counting.step_flops(run),
                                        step_ops(run, Path(root)), True, "calibration"))
            continue
        kind = gpu_kind(str(doc.get("device", "")))
        if kind is None:
            continue
        bench = doc.get("bench_packed") or {}
        for row in bench.get("rows", []):
            run = counting.bench_setting(row["method"], row["model"], bench["batch"])
            flops, ops = counting.step_flops(run), step_ops(run, Path(root))
            out.append(Measured(kind, run, bench["batch"] / row["alone_samples_per_s"], flops, ops, True, "bench"))
            best = max((v for c, v in row.items() if c.endswith("_samples_per_s") and v), default=None)
            if best:  # the packed step: its samples of every run over the pack's FLOPs
                out.append(Measured(kind, run, bench["batch"] / best, flops, None, True, "packed"))
        for row in doc.get("stopped_runs", []):
            run = next((c for c in calibration if _matches(row, c)), None)
            if run is not None and row.get("done"):
                per = run_flops(run)
                units = run.rounds if row.get("unit") == "round" else getattr(run, "epochs", None)
                if per and units:
                    out.append(Measured(kind, run, row["elapsed_s"] / row["done"], per / units, None,
                                        row.get("processes_sharing", 1) == 1, "stopped"))
    return tuple(out)


def _measured(kind: str, root: Path | None = None) -> list[Measured]:
    r = root_with(OP_COUNTS, root) or committed_root()
    return [m for m in measurements(str(r)) if m.kind == kind]


def op_seconds(kind: str = REFERENCE_GPU, root: Path | None = None) -> float | None:
    """Seconds one dispatched operation takes on one GPU of ``kind`` alone: the median over that
    kind's counted measurements; None without one."""
    got = [m.seconds / m.ops for m in _measured(kind, root) if m.alone and m.ops]
    return statistics.median(got) if got else None


def best_rate(kind: str = REFERENCE_GPU, root: Path | None = None) -> float | None:
    """The most FLOP/s anything measured on ``kind`` reached (the FLOP floor's rate)."""
    return max((m.flops / m.seconds for m in _measured(kind, root)), default=None)


def flop_rate(kind: str = REFERENCE_GPU, root: Path | None = None) -> float | None:
    """FLOP/s of the calibration runs measured alone on ``kind``, pooled (their FLOPs over their
    seconds): the rate of a run without an op count."""
    got = [m for m in _measured(kind, root) if m.source == "calibration"]
    seconds = sum(m.seconds for m in got)
    return sum(m.flops for m in got) / seconds if seconds else None


def captured_gain(row: dict[str, Any]) -> float | None:
    """How many times faster a benchmark row's captured step ran than the same pack eager."""
    eager = row.get("auto_samples_per_s") or row.get("vmap_samples_per_s")
    return row["graphs_samples_per_s"] / eager if row.get("graphs_samples_per_s") and eager else None


def graphs_gain(method: str, models: Sequence[str], kind: str, root: Path | None = None) -> float | None:
    """The median CUDA-graphs gain the committed benchmarks measured for ``method`` with every
    party on ``models``' one architecture on ``kind``; None where none did."""
    if len(set(models)) != 1:
        return None
    r = root_with(OP_COUNTS, root) or committed_root()
    got = [g for _, k, doc in benchmarks(str(r)) if k == kind for row in doc["bench_packed"]["rows"]
           if row["method"] == method and row["model"] == next(iter(models)) and (g := captured_gain(row))]
    return statistics.median(got) if got else None


# --------------------------------------------------------------------------- sharing a GPU


def sharing_factors(root: Path | None = None) -> tuple[tuple[float, int], ...]:
    """(wall time over launch-bound time alone, processes sharing) of each committed ``cuda``
    record of a counted run, and of each stopped run a GPU job measured."""
    return _sharing(str(root or committed_root()))


@functools.cache
def _sharing(root: str) -> tuple[tuple[float, int], ...]:
    out = []
    for path in sorted(Path(root).glob("*/*/*.json")):
        try:
            text = path.read_text()
            if '"cuda' not in text:
                continue  # a CPU record (most of them): not parsed
            rec = json.loads(text)
            env = rec["environment"]
            kind = gpu_kind(str(env.get("device_name", "")))
            if kind is None or rec.get("diverged") or str(env["device"]).split(":")[0] != "cuda":
                continue
            alone = launch_bound_s(run_class("split").from_dict(rec["config"]), kind)
        except Exception:  # noqa: BLE001 (another family's record, or one of an older run class)
            continue
        if alone:
            out.append((float(rec["wall_time_s"]) / alone, int(env.get("processes_sharing", SHARED_LANES))))
    return tuple(out)


#: The processes a scheduler or the launcher runs on one GPU by default.
DEFAULT_LANES = GPU_WORKERS
#: The processes that shared the GPU where a record does not say (the committed ``cuda``
#: records were made by a scheduler's default workers per GPU, plus one).
SHARED_LANES = 9


def sharing_slowdown(root: Path | None = None) -> float | None:
    """How much longer a run took while :data:`SHARED_LANES` processes shared its GPU: the median
    :func:`sharing_factors`."""
    got = [f for f, _ in sharing_factors(root)]
    return statistics.median(got) if got else None


def slowdown(lanes: int | None, root: Path | None = None) -> float:
    """How much longer a run takes with ``lanes`` processes on its GPU: 1 alone, the measured
    :func:`sharing_slowdown` at :data:`SHARED_LANES`, linear between and beyond (never under 1);
    ``None``: the measured lane count."""
    measured = sharing_slowdown(root)
    if measured is None:
        return 1.0
    lanes = SHARED_LANES if lanes is None else lanes
    return max(1.0, 1.0 + (measured - 1.0) * (lanes - 1) / (SHARED_LANES - 1))


# --------------------------------------------------------------------------- prices


def launch_bound_s(run: Any, kind: str = REFERENCE_GPU, root: Path | None = None) -> float | None:
    """Seconds ``run`` trains on one GPU of ``kind`` alone as a launch-bound run: its operations
    (:func:`run_ops`) times :func:`op_seconds`; None without either."""
    ops, per = run_ops(run, root), op_seconds(kind, root)
    return None if ops is None or per is None else ops * per


def _flops(run: Any) -> float | None:
    """:func:`run_flops`, or None for a config the counter cannot build (simply unpriced)."""
    try:
        return run_flops(run)
    except Exception:  # noqa: BLE001
        return None


def alone(run: Any, kind: str = REFERENCE_GPU, root: Path | None = None) -> tuple[float, str] | None:
    """(seconds, source) ``run`` takes on one GPU of ``kind`` with nothing else on it: launch-bound
    where it has an op count, else its FLOPs at :func:`flop_rate`; never under its FLOPs over
    :func:`best_rate` (no price implies a rate the kind never reached). None without a price."""
    flops = _flops(run)
    floor = flops / best if flops and (best := best_rate(kind, root)) else 0.0
    if (s := launch_bound_s(run, kind, root)) is not None:
        return max(s, floor), FROM_OPS if s >= floor else FROM_FLOPS
    if flops and (r := flop_rate(kind, root)):
        return max(flops / r, floor), FROM_FLOPS
    return None


def estimate(run: Any, kind: str, family: str, lanes: int | None = None) -> tuple[float, str] | None:
    """(seconds, source) ``run`` should take on device kind ``kind`` (``cuda``: :data:`REFERENCE_GPU`)
    with ``lanes`` processes sharing a GPU (None: as the committed records were made); on the CPU
    its FLOPs over :func:`rate`. None without one."""
    kind = kind.split(":")[0]
    if kind != "cpu":
        got = alone(run, REFERENCE_GPU if kind == "cuda" else kind)
        return None if got is None else (got[0] * slowdown(lanes), got[1])
    flops = _flops(run)
    r = rate("cpu", family) if flops is not None else None
    return (flops / r, FROM_FLOPS) if r else None


def price(study: Any, runs: Sequence[Any], kind: str = REFERENCE_GPU) -> pd.DataFrame:
    """The pending ``runs`` of ``study`` priced, one row each: ``needs`` ("GPU"/"CPU", the
    study's ``needs_gpu``), ``h100_min`` (minutes on one GPU of ``kind`` alone, :func:`alone`),
    ``cpu_h``, ``source`` and ``h100_min_packed`` (its share of a pack). A run without a price
    takes the study's own rule, ``Study.pending_cost`` (``source`` "study"), or none."""
    cols = ["needs", "h100_min", "cpu_h", "source", "h100_min_packed"]
    rows: list[dict[str, Any]] = []
    rest: list[int] = []
    for i, run in enumerate(runs):
        gpu = bool(study.needs_gpu(run))
        got = alone(run, kind) if gpu else None
        rows.append({"needs": "GPU" if gpu else "CPU", "h100_min": np.nan if got is None else got[0] / 60,
                     "cpu_h": np.nan, "source": None if got is None else got[1]})
        if got is None:
            rest.append(i)
    if rest and study.pending_cost is not None:
        own = study.pending_cost([runs[i] for i in rest]).reset_index(drop=True)
        for j, i in enumerate(rest):
            got = own.iloc[j]
            priced = pd.notna(got["h100_min"]) or pd.notna(got["cpu_h"])
            rows[i] = {"needs": got["needs"], "h100_min": got["h100_min"], "cpu_h": got["cpu_h"],
                       "source": FROM_STUDY if priced else None}
    best = best_rate(kind)
    for i, share in packed_shares(runs).items():
        if rows[i]["source"] is not None and rows[i]["h100_min"] == rows[i]["h100_min"]:
            # a pack is priced no faster than the best FLOP/s measured on the kind, as a run alone
            floor = (_flops(runs[i]) or 0.0) / best / 60 if best else 0.0
            rows[i]["h100_min_packed"] = max(rows[i]["h100_min"] * share, floor)
    for row in rows:
        row.setdefault("h100_min_packed", row["h100_min"])
    return pd.DataFrame(rows, columns=cols)


def pending(study: Any, profile: str, **kwargs: Any) -> pd.DataFrame:
    """``study``'s pending runs of ``profile``, one row each, priced (:meth:`Study.pending
    <vflkit.studies.base.Study.pending>` with :func:`price`)."""
    return study.pending(profile, price=price, **kwargs)


def packed_shares(runs: Sequence[Any]) -> dict[int, float]:
    """Index -> the share of its time alone that ``runs[i]`` costs trained packed on a GPU:
    ``pack_ratio / k`` for a pack of k >= 2 whose packed step is counted; others are left out."""
    index = {id(r): i for i, r in enumerate(runs)}
    counted = [r for r in runs if pack_ratio(r) is not None]
    shares: dict[int, float] = {}
    for pack in group_packs(counted, max_size=MAX_PACK)[0]:
        ratio = pack_ratio(pack[0], k=len(pack)) if len(pack) >= 2 else None
        if ratio is not None:
            shares.update((index[id(r)], ratio / len(pack)) for r in pack)
    return shares


# --------------------------------------------------------------------------- CPU rates


def record_rates(root: Path | None = None) -> dict[tuple[str, str], list[float]]:
    """FLOP/s of every finished, not diverged record under ``root`` (default the committed ones)
    that ran at least :data:`MIN_WALL_S` and whose run is counted, by (device kind, family)."""
    family_of = {s.name: s.family for s in studies.studies()}
    rates: dict[tuple[str, str], list[float]] = {}
    for path in sorted((root or committed_root()).glob("*/*/*.json")):
        family = family_of.get(path.parent.name)
        if family not in ("split", "multi_owner"):
            continue  # no count, no rate: not worth reading
        stat = path.stat()
        got = counting.cached(f"record {path.resolve()} {stat.st_mtime_ns} {stat.st_size}",
                              lambda: _record_rate(path, family), save=False)
        if got is not None:
            rates.setdefault((got[0], family), []).append(got[1])
    counting.save_cache()
    return rates


def _record_rate(path: Path, family: str) -> tuple[str, float] | None:
    try:
        rec = json.loads(path.read_text())
        if rec.get("diverged") or float(rec.get("wall_time_s") or 0) < MIN_WALL_S:
            return None
        flops = run_flops(run_class(family).from_dict(rec["config"]))
        kind = str(rec["environment"]["device"]).split(":")[0]
    except Exception:  # noqa: BLE001 (a record of another version of its run class)
        return None
    return (kind, flops / float(rec["wall_time_s"])) if flops else None


@functools.cache
def _rates(root: str) -> dict[tuple[str, str], float]:
    return {k: statistics.median(v) for k, v in record_rates(Path(root)).items()}


def rate(kind: str, family: str, root: Path | None = None) -> float | None:
    """Measured FLOP/s of ``family``'s runs on device kind ``kind`` (``cpu``, ``cuda``): the
    median over the committed records; None without one."""
    return _rates(str(root or committed_root())).get((kind.split(":")[0], family))


# --------------------------------------------------------------------------- the op table


def write_op_counts(root: Path | None = None) -> Path:
    """Count every image setting of the split family's paper runs, the studies' calibration
    runs and the benchmark's, and Multi-VFL's rounds, and write :data:`OP_COUNTS` under ``root``
    (default the committed ``results/``). Minutes on a CPU."""
    root = root or committed_root()
    settings: dict[str, Any] = {}
    seeds: dict[str, set[int]] = {}
    for study in studies.studies():
        for run in (r for g in study.groups("paper").values() for r in g) if study.family == "split" else ():
            if run.dataset in counting.IMAGE_METADATA:
                settings.setdefault(step_key(run), run)
                seeds.setdefault(step_key(run), set()).add(run.seed)
    for run in _calibration_runs():
        if type(run).__name__ == "RunConfig":
            settings.setdefault(step_key(run), run)
    for method in ("local", "splitnn", "agg_vfl", "c_vfl"):
        for model in ("mlp", "cnn", "lenet", "resnet18"):
            run = counting.bench_setting(method, model, 128)
            settings.setdefault(step_key(run), run)
    rows = []
    for i, (key, run) in enumerate(sorted(settings.items())):
        rows.append({"setting": key, "ops": counting.count_step_ops(run)})
        if run.method in PACKED_COUNTED and len(seeds.get(key, ())) >= 2:
            rows[-1]["packed_ops"] = counting.count_step_ops(run, pack=PACK_COUNTED)
        print(f"[pricing] {i + 1}/{len(settings)} {run.method} {'/'.join(run.models)} {run.dataset}: {rows[-1]}",
              file=sys.stderr, flush=True)
    counting.forget_committed()
    for run in settings.values():  # FLOPs too (counting.COMMITTED): a fresh checkout prices without counting
        counting.step_flops(run)
    for study in studies.studies():
        for run in study.runs("paper") if study.family == "multi_owner" else ():
            counting.run_flops(run)
    record_rates(root)  # the committed records' settings too: their rates are read from their FLOPs
    multi: dict[str, list[dict[str, Any]]] = {"rounds": [], "eval": []}
    shapes = {(c.dataset, c.n_data_owners, c.n_label_owners)
              for study in studies.studies() if study.family == "multi_owner" for c in study.runs("paper")}
    for shape in sorted(shapes):
        for k in MULTI_VFL_COUNTED_K:
            got = counting.count_round(*shape, k=k)
            multi["rounds"].append({"dataset": shape[0], "n_data_owners": shape[1], "n_label_owners": shape[2],
                                    "k": k, **{f: float(c.ops) for f, c in got.items()}})
        per = counting.count_evaluation(shape[0], shape[1], n_test=counting.MULTI_VFL_EVAL_BATCH)
        multi["eval"].append({"dataset": shape[0], "n_data_owners": shape[1], "per_message": float(per.ops)})
    path = root / OP_COUNTS
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"what": "torch operations one training step dispatches, by split-family setting "
                                       f"(vflkit.training.counting at batch {counting.OP_COUNT_BATCH}); packed_ops: one "
                                       f"step of a pack of {PACK_COUNTED}; multi_owner: a Multi-VFL round's operations "
                                       "per batch step and once a round, alone and packed, and an evaluation message's; flops: "
                                       "FLOPs per sample of each setting's step and each Multi-VFL shape's round "
                                       "(python -m vflkit.ops.pricing --count-ops)",
                               "torch": torch.__version__, "steps": rows, "multi_owner": multi,
                               "flops": dict(sorted(counting.known_flops().items()))}, indent=1) + "\n")
    tmp.replace(path)
    _op_table.cache_clear()
    measurements.cache_clear()
    return path


__all__ = ["FROM_FLOPS", "FROM_OPS", "FROM_STUDY", "GPU_KINDS", "GPU_LABEL", "MIN_WALL_S", "OP_COUNTS",
           "REFERENCE_GPU", "SHARED_LANES", "DEFAULT_LANES", "Measured", "alone", "benchmarks", "best_rate", "captured_gain",
           "committed_root", "estimate", "flop_rate", "gpu_kind", "graphs_gain", "launch_bound_s",
           "measurements", "op_seconds", "op_table", "pack_cost_s", "pack_ratio", "packed_shares", "price",
           "rate", "record_rates", "root_with", "run_ops", "sharing_factors", "sharing_slowdown", "slowdown",
           "step_ops", "write_op_counts"]


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m vflkit.ops.pricing", description="the prices' committed inputs")
    ap.add_argument("--count-ops", action="store_true", help=f"write results/{OP_COUNTS} (minutes)")
    if ap.parse_args().count_ops:
        print(write_op_counts())
    else:
        ap.print_help()
