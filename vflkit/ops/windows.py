"""The time-limited GPU launcher's library: every pending GPU run of every study planned into
windows on a bare machine (:func:`plan`, :func:`prepare`, :func:`dry_run`) and run there through
the engine (:func:`start`, :func:`lane`, :func:`collect`; :func:`receive` here). How a window
works: docs/own-gpu.md, "On a time-limited GPU"; the command line: :mod:`vflkit.ops.launcher`."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import logging
import lzma
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import torch

from . import pricing
from .machines import (CARRY_DIR, DEFAULT_MACHINE, DEFAULT_WORK, DEFAULT_WORKERS, DEVICE_KINDS, DEVICE_LACKS,
                       Machine, check_packages)
from .. import claims, studies
from ..config import data_root as default_root, project_root
from ..data import CIFAR10_CLASSES, ImageData, load_dataset, register_dataset
from ..errors import ConfigError, DatasetCorruptError, check_choice
from ..files import pid_alive, write_json
from ..records import (RECEIVED, BadRecord, check_record, checkpoint_path, git_state, is_valid_record, read_record,
                       record_path, record_roots, write_json_atomic)
from ..scheduler import MAX_PACK, SAFETY, Task, ends_before, lock_is_stale, lock_path
from ..study import compute, estimate_costs, run_class, study_tasks
from ..training import split as trainer
from ..training.checkpoint import read as read_checkpoint
from ..training.counting import run_flops, uncounted
from ..training.split import GRAPHS_ENV, compute_pack

#: The planning stages, a line each (:func:`plan`; the command line shows them on stderr).
_log = logging.getLogger(__name__)

#: The working tree is counted in blocks of this size (a file of 1 byte takes one): see :func:`tree_bytes`.
TREE_BLOCK = 4096
#: Room left for the last call's return before the deadline.
RETURN_MARGIN_S = 60.0
#: A lane's process imports torch, builds its CUDA context and loads its data before a run.
LANE_START_S = 30.0
#: A window's first call benchmarks the GPU before the lanes start: at most this long, its rows
#: written as they are measured; C-VFL first, as its seed packs are most of the GPU work left.
BENCH_S = 150.0
BENCH_SETTINGS = "--methods c_vfl local splitnn agg_vfl --models mlp cnn resnet18"
#: That benchmark's command (``{device}`` filled in); ``receive`` files its JSON under results/device/.
BENCH_COMMAND = ("timeout {s} python3 -m vflkit.ops.bench --device {device} --packed --pack-size 3 --steps 10 "
                 + BENCH_SETTINGS + " --json {work}/bench.json > {work}/bench.txt 2>&1; touch {work}/bench.done")
#: A window's lanes capture their packs in CUDA graphs only when every captured setting of its
#: benchmark ends within GRAPHS_MAX_DIFF of the eager pack's parameters (or twice the eager
#: step's own noise) and the median setting gains GRAPHS_MIN_GAIN (:func:`graphs_verdict`).
GRAPHS_MAX_DIFF = 1e-4
GRAPHS_MIN_GAIN = 1.1


def graphs_verdict(bench_json: Path) -> tuple[bool, str]:
    """Whether a window's lanes capture their packs in CUDA graphs, and why, from the rows of its
    benchmark (``python -m vflkit.ops.bench --packed --json``; :func:`vflkit.ops.bench.graphs_check`)."""
    try:
        rows = json.loads(bench_json.read_text())["bench_packed"]["rows"]
    except (OSError, ValueError, KeyError, TypeError):
        return False, f"no benchmark rows in {bench_json.name}: the packs run eagerly"
    failed = [f"{r['method']} {r['model']}" for r in rows if "graphs_error" in r]
    if failed:
        return False, f"a capture failed in the benchmark ({', '.join(failed)}): the packs run eagerly"
    timed = [r for r in rows if r.get("graphs_samples_per_s") and "graphs_max_abs_diff" in r]
    if not timed:
        return False, "the benchmark timed no captured step: the packs run eagerly"
    off = [f"{r['method']} {r['model']} by {float(r['graphs_max_abs_diff']):.1e}" for r in timed
           if not float(r["graphs_max_abs_diff"]) <= max(GRAPHS_MAX_DIFF, 2 * float(r.get("eager_max_abs_diff", 0)))]
    if off:  # NaN is off too
        return False, f"captured steps differ from the eager pack ({', '.join(off)}): the packs run eagerly"
    worst = max(float(r["graphs_max_abs_diff"]) for r in timed)
    gain = statistics.median(pricing.captured_gain(r) for r in timed)
    if gain < GRAPHS_MIN_GAIN:
        return False, (f"captured steps ran {gain:.2f}x the eager pack's rate (< {GRAPHS_MIN_GAIN}x): "
                       "the packs run eagerly")
    return True, (f"captured steps equal the eager pack's (max |dW| {worst:.1e}) at {gain:.2f}x its rate "
                  f"(median of {len(timed)} settings): the packs run in CUDA graphs")


def expect_graphs(device_kind: str, root: Path | None = None) -> tuple[str | None, str]:
    """The GPU kind whose CUDA-graphs gains a plan prices packs with, and why: ``device_kind``
    where its committed benchmarks timed captured steps and each passes :func:`graphs_verdict`."""
    if device_kind == "cpu":
        return None, "packs priced eagerly: no CUDA graphs on a CPU"
    benches = [path for path, kind, doc in pricing.benchmarks(str(root or pricing.committed_root()))
               if kind == device_kind and any(r.get("graphs_samples_per_s") for r in doc["bench_packed"]["rows"])]
    if not benches:
        return None, f"packs priced eagerly: no committed {device_kind} benchmark timed CUDA graphs"
    verdicts = [(p.name, *graphs_verdict(p)) for p in benches]
    off = [f"{name}: {why}" for name, on, why in verdicts if not on]
    if off:
        return None, "packs priced eagerly: " + "; ".join(off)
    return device_kind, ("packs priced with CUDA graphs, at the gains measured in "
                         + ", ".join(name for name, _, _ in verdicts))


def bench_wait_s(n_data_calls: int) -> float:
    """How long a window's lanes wait for its benchmark: all of it when the first call starts
    them, else what the data calls' transfers (beside which it runs detached) do not cover."""
    return max(0.0, BENCH_S - max(n_data_calls - 1, 0) * (DEFAULT_MACHINE.call_overhead_s + 20.0))


#: At most this many packs ride in a window's reserve (:attr:`Window.reserve`).
RESERVE_MAX = 24
#: The machine's Python (python3 there) and the platforms its wheels may be built for.
DEVICE_PYTHON = "3.12"
WHEEL_PLATFORMS = ("manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_27_x86_64",
                   "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
#: Placeholder FLOP/s for a family the prices cannot cover, until a GPU measures it: an
#: assumption, named as a placeholder wherever the plan prints its rates.
PLACEHOLDER_RATES = {"multi_owner": 1.3e12}
#: The packed CIFAR-10's size (uint8 arrays, xz: in the standard library, no wheel to carry)
#: until ``pack`` has run.
CIFAR10_PACKED_BYTES_ESTIMATE = 152 * 2**20
#: sha256 of x_train | y_train | x_test | y_test (uint8, C order) of the verified CIFAR-10 load.
CIFAR10_SHA256 = "77168ae812aa23afdaa0f13b32b412e881003005446c56d16afb62116ef67be2"
CIFAR10_SHAPES = {"x_train": (50000, 3, 32, 32), "y_train": (50000,), "x_test": (10000, 3, 32, 32), "y_test": (10000,)}
CIFAR10_PACKED = "cifar10.u8.xz"
#: The files each dataset is read from, relative to the data root (CIFAR-10: the packed arrays).
_IDX = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz")
DATA_FILES: dict[str, tuple[str, ...]] = {"mnist": tuple(f"MNIST/raw/{n}" for n in _IDX),
                                          "fashion_mnist": tuple(f"FashionMNIST/raw/{n}" for n in _IDX),
                                          "cifar10": (CIFAR10_PACKED,)}


# --------------------------------------------------------------------------- runs, packs, windows


@dataclass(frozen=True)
class GpuRun:
    """One pending GPU run of a study, with what the plan needs of it."""

    key: str
    paper: str
    family: str
    label: str
    config: dict[str, Any]
    priority: Any  # the study's own order (its run_priority)
    artefacts: tuple[str, ...] = ()  # the paper's tables and figures drawn from it
    cost_s: float | None = None  # seconds on the GPU while DEFAULT_WORKERS share it
    cost_source: str = ""  # the study's estimate's source ("seeds", "ops", ...), "rate file", "placeholder", "study"
    open_clauses: int = 0  # clauses of its artefacts now judged not testable
    value: float = math.inf  # lower is planned first (value_order)
    cpu_cost_s: float | None = None  # set for a CPU-sized run taken in as slow (pending_gpu_runs)

    @property
    def dataset(self) -> str:
        return str(self.config.get("dataset", ""))

    @property
    def slow_cpu(self) -> bool:
        return self.cpu_cost_s is not None

    @property
    def precision_check(self) -> bool:
        """A run of another precision than the default: a study's bf16 check."""
        return self.config.get("precision", "fp32") != "fp32"

    @property
    def leads(self) -> bool:
        """Planned before every other run (:func:`value_order`)."""
        return (self.slow_cpu and self.open_clauses > 0) or self.precision_check


@dataclass
class Pack:
    """Runs that one lane trains together: as one batched pack where a packed trainer takes them
    (``packed``), else one after the other in the same process."""

    key: str
    runs: list[GpuRun]
    packed: bool = False
    speedup: float = 1.0  # the packed trainer's measured gain (1: none assumed)
    by_ops: bool = False  # priced by its op counts (pricing.pack_ratio), where no speedup is measured
    graphs: str | None = None  # the GPU kind whose CUDA-graphs gain prices it (:func:`expect_graphs`)

    @property
    def ratio(self) -> float | None:
        """A packed step's time over one run's alone, for a pack of this many runs (op counts),
        over the captured step's measured gain where the pack is priced with graphs."""
        if not (self.packed and self.by_ops and self.runs):
            return None
        config = trainer.packable_config(self.runs[0].family, self.runs[0].config)
        ratio = pricing.pack_ratio(config, k=len(self.runs))
        if ratio is not None and self.graphs and type(config).__name__ == "RunConfig":  # split family benchmarked
            ratio /= pricing.graphs_gain(config.method, config.models, self.graphs) or 1.0
        return ratio

    @property
    def cost_s(self) -> float:
        ratio = self.ratio
        if ratio is not None:
            return max(r.cost_s or 0.0 for r in self.runs) * ratio
        return sum(r.cost_s or 0.0 for r in self.runs) / (self.speedup if self.packed else 1.0)

    @property
    def gain(self) -> float:
        """The runs' time one after another over the pack's (what the lanes' ``speedup`` reads)."""
        total = sum(r.cost_s or 0.0 for r in self.runs)
        return total / self.cost_s if self.packed and self.cost_s > 0 and total > 0 else self.speedup

    @property
    def datasets(self) -> set[str]:
        return {r.dataset for r in self.runs if r.dataset}


@dataclass
class Call:
    """One device call of a window: what it carries and the command it runs."""

    index: int
    carries: list[str]  # paths under the working tree (the call's ``carry``)
    carry_bytes: int
    command: str
    wait_s: float  # how long its collect waits for records
    est_s: float  # its estimated length, overheads included
    starts: bool = False


@dataclass
class Window:
    """One time-limited GPU job: its lanes (packs per process), its calls, and its timing."""

    index: int
    deadline_s: float
    lanes: list[list[Pack]]
    datasets: set[str] = field(default_factory=set)
    start_s: float = 0.0  # when the lanes start, from the window's first call
    calls: list[Call] = field(default_factory=list)
    #: Packs on the window's data that it does not plan, in value order, for lanes done early (:func:`lane`).
    reserve: list[Pack] = field(default_factory=list)

    @property
    def runs(self) -> list[GpuRun]:
        return [r for lane in self.lanes for p in lane for r in p.runs]

    @property
    def work_s(self) -> float:
        """The longest lane, with SAFETY and each lane's start."""
        return max((LANE_START_S + sum(p.cost_s * SAFETY for p in lane) for lane in self.lanes if lane), default=0.0)

    @property
    def end_s(self) -> float:
        return self.start_s + self.work_s + RETURN_MARGIN_S

    @property
    def slack_s(self) -> float:
        return self.deadline_s - self.end_s


@dataclass
class Plan:
    """Every pending GPU run, planned into windows or listed as not fitting one (with why)."""

    profile: str
    device_kind: str
    deadline_s: float
    workers: int
    windows: list[Window]
    not_fitting: list[tuple[GpuRun, str]]
    recorded: list[str]  # GPU runs skipped: a whole record exists
    rates: dict[str, tuple[float, str]]  # family -> (FLOP/s, source)
    chunk_room: int  # bytes a call may carry beside the tree
    wheels_bytes: int = 0  # the wheels riding with each window's first call
    machine: Machine = DEFAULT_MACHINE  # the kind of machine each window is a job on

    @property
    def planned(self) -> list[GpuRun]:
        return [r for w in self.windows for r in w.runs]

    def to_dict(self) -> dict[str, Any]:
        """The plan as the lanes read it (``plan.json``, carried to the machine)."""
        return {"profile": self.profile, "device_kind": self.device_kind, "deadline_s": self.deadline_s,
                "workers": self.workers,
                "windows": [{"index": w.index, "start_s": w.start_s, "datasets": sorted(w.datasets),
                             "lanes": [[_pack_dict(p) for p in lane] for lane in w.lanes],
                             "reserve": [_pack_dict(p) for p in w.reserve]}
                            for w in self.windows],
                "not_fitting": [{"key": r.key, "label": r.label, "cost_s": r.cost_s, "why": why}
                                for r, why in self.not_fitting]}


def _pack_dict(p: Pack) -> dict[str, Any]:
    """A pack as ``plan.json`` carries it to the lanes."""
    return {"key": p.key, "packed": p.packed, "speedup": p.gain,
            # a window whose benchmark turns graphs off gates the pack at its eager gain
            "eager_speedup": dataclasses.replace(p, graphs=None).gain if p.graphs else p.gain,
            "runs": [{"key": r.key, "paper": r.paper, "family": r.family, "label": r.label, "config": r.config,
                      "cost_s": r.cost_s} for r in p.runs]}


# --------------------------------------------------------------------------- pending runs


def has_record(run: Any, profile: str, roots: Sequence[Path]) -> bool:
    """Whether ``run`` has a whole record under ``profile`` in one of ``roots``
    (:func:`vflkit.records.check_record`)."""
    for root in roots:
        path = record_path(run, profile, root)
        if path.exists():
            try:
                check_record(path, run, profile)
                return True
            except BadRecord:
                continue  # not this run's record: the engine moves it aside when it runs
    return False


def pending_gpu_runs(profile: str = "paper", *, results: Path | None = None,
                     papers: Sequence[str] | None = None, slow_cpu_min: float | None = None
                     ) -> tuple[list[GpuRun], list[str]]:
    """The GPU runs (a study's ``needs_gpu``) of every registered study (or of ``papers``)
    without a whole record in :func:`vflkit.records.record_roots` (or ``results``), and the keys of
    those with one. With ``slow_cpu_min``, also the CPU-sized runs estimated above that many
    CPU-minutes (``cpu_cost_s``), but none a CPU scheduler holds locked or has checkpointed."""
    roots = [Path(results)] if results is not None else record_roots()
    pending: list[GpuRun] = []
    recorded: list[str] = []
    for study in studies.studies():
        if papers is not None and study.name not in papers:
            continue
        tasks = study_tasks(study.name, profile, results=roots[0])
        cls = run_class(study.family)
        cpu_cost: dict[str, float] = {}
        if slow_cpu_min is not None:
            # costed only where no root holds the record (estimate_costs looks in the first)
            here = [t for t in tasks if not t.payload["needs_gpu"]
                    and not (lock_path(t.path).exists() and not lock_is_stale(lock_path(t.path)))
                    and not checkpoint_path(t.path).exists()
                    and not has_record(cls.from_dict(t.payload["config"]), profile, roots)]
            cpu_cost = {t.key: t.cost_s for t in estimate_costs(here, "cpu")
                        if t.cost_s is not None and t.cost_s > slow_cpu_min * 60}
        tasks = [t for t in tasks if t.payload["needs_gpu"] or t.key in cpu_cost]
        if not tasks:
            continue
        of: dict[str, list[str]] = {}
        for art in study.artefacts:
            for r in study.artefact_runs(art, profile):
                of.setdefault(r.key, []).append(art.label)
        for t in tasks:
            run = cls.from_dict(t.payload["config"])
            if t.key not in cpu_cost and has_record(run, profile, roots):
                recorded.append(t.key)
                continue
            pending.append(GpuRun(key=t.key, paper=study.name, family=study.family, label=t.label,
                                  config=t.payload["config"], priority=t.priority,
                                  artefacts=tuple(of.get(t.key, ())), cpu_cost_s=cpu_cost.get(t.key)))
    return pending, recorded


# --------------------------------------------------------------------------- costs


def load_rate_file(path: Path | None) -> dict[str, Any]:
    """A measured rate file (``--rates``; its fields: docs/own-gpu.md, "A rate file")."""
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"rate file {path} cannot be read ({exc}); give --rates an existing rate file") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"rate file {path} is not valid JSON ({exc.msg} at line {exc.lineno}); fix it or leave "
                          "--rates out") from None
    if not isinstance(data, dict):
        raise ConfigError(f"rate file {path} holds a JSON {type(data).__name__}, not an object of rates (see "
                          "load_rate_file); fix it or leave --rates out")
    unknown = sorted(set(data) - {"device", "workers", "flop_per_s", "minutes_factor", "pack_speedup", "note"})
    if unknown:
        raise ConfigError(f"rate file {path}: unknown field(s) {', '.join(unknown)}; known: device, workers, "
                          "flop_per_s, minutes_factor, pack_speedup, note")
    return data


def cost_runs(runs: Sequence[GpuRun], device_kind: str = "h100", *, rate_file: Mapping[str, Any] | None = None,
              lanes: int | None = None) -> tuple[list[GpuRun], dict[str, tuple[float, str]]]:
    """``runs`` with their estimated seconds on ``device_kind`` (``lanes`` sharing the GPU) and
    each estimate's source, and the FLOP/s used per family: the order of sources is in
    docs/own-gpu.md, "How a plan prices a run". No FLOP price is faster than the best rate
    measured on that GPU kind."""
    kind = DEVICE_KINDS[device_kind]
    measured = dict((rate_file or {}).get("flop_per_s", {}))
    factor = dict((rate_file or {}).get("minutes_factor", {}))
    used: dict[str, tuple[float, str]] = {}
    for fam in sorted({r.family for r in runs}):
        if fam in measured:
            used[fam] = (float(measured[fam]), "rate file")
        elif (got := pricing.rate(kind, fam)) is not None:
            used[fam] = (got, "committed records")
        elif fam in PLACEHOLDER_RATES:
            used[fam] = (PLACEHOLDER_RATES[fam], "placeholder")
    tasks = [Task(key=r.key, path=Path(os.devnull), fn=print, payload={"family": r.family, "config": r.config})
             for r in runs]
    engine = {t.key: t for t in estimate_costs(tasks, device_kind, lanes=lanes)}
    best = pricing.best_rate(device_kind) if device_kind in pricing.GPU_KINDS else None
    out: list[GpuRun] = []
    no_flops: dict[str, list[int]] = {}
    for i, r in enumerate(runs):
        cost, source = None, ""
        run = run_class(r.family).from_dict(r.config)
        if r.family in measured or engine[r.key].cost_s is None:
            flops = run_flops(run) if uncounted(run) is None else None
            if flops is not None and r.family in used:
                cost, source = max(flops / used[r.family][0], flops / best if best else 0.0), used[r.family][1]
        else:
            cost, source = engine[r.key].cost_s, str(engine[r.key].payload.get("cost_source"))
        if cost is None:
            no_flops.setdefault(r.paper, []).append(i)
        out.append(dataclasses.replace(r, cost_s=cost, cost_source=source))
    for paper, idx in no_flops.items():
        study = studies.get(paper)
        # the one estimator the report and --status print (for these runs: the study's own rule)
        minutes = pricing.price(study, [run_class(out[i].family).from_dict(out[i].config) for i in idx],
                              kind=device_kind if device_kind in pricing.GPU_KINDS else pricing.REFERENCE_GPU)["h100_min"]
        for i, m in zip(idx, minutes):
            if m == m and m is not None:  # not NaN
                f = float(factor.get(out[i].family, 1.0))
                out[i] = dataclasses.replace(out[i], cost_s=float(m) * 60 * f, cost_source="study")
    return out, used


# --------------------------------------------------------------------------- value


def open_clauses(profile: str = "paper", papers: Sequence[str] | None = None) -> dict[tuple[str, str], int]:
    """Per (paper, artefact): how many of its claims' clauses the records of ``profile`` leave
    not testable (:func:`vflkit.claims.evaluate`). Reads every record: tens of seconds."""
    out: dict[tuple[str, str], int] = {}
    for study in studies.studies():
        if (papers is not None and study.name not in papers) or not study.claims:
            continue
        table = claims.evaluate(study.claims, profile)
        for art, n in table[table.status == claims.NOT_TESTABLE].groupby("artefact").size().items():
            out[(study.name, str(art))] = int(n)
    return out


def value_order(runs: Sequence[GpuRun], opened: Mapping[tuple[str, str], int]) -> list[GpuRun]:
    """``runs`` in the order that moves the most verdicts first, ``opened`` from :func:`open_clauses`:
    the rule in docs/own-gpu.md, "How a plan orders, places and gates the runs"."""
    def ranked(rs_all: Sequence[GpuRun]) -> list[GpuRun]:
        out: list[GpuRun] = []
        for paper, group in itertools.groupby(sorted(rs_all, key=lambda r: r.paper), key=lambda r: r.paper):
            rs = sorted(group, key=lambda r: r.priority)
            n_open = max(sum(n for (p, _), n in opened.items() if p == paper), 1)
            # no open clause: after every run that has one (an offset beyond any real value)
            out += [dataclasses.replace(r, value=spent / n_open + (0.0 if r.open_clauses else 1e12))
                    for r, spent in zip(rs, itertools.accumulate(r.cost_s or 0.0 for r in rs))]
        return sorted(out, key=lambda r: (r.value, r.key))

    marked = [dataclasses.replace(r, open_clauses=sum(opened.get((r.paper, a), 0) for a in r.artefacts)) for r in runs]
    checks = [r for r in marked if r.precision_check]
    leading = [r for r in marked if r.leads and not r.precision_check]
    return ranked(checks) + ranked(leading) + ranked([r for r in marked if not r.leads])


# --------------------------------------------------------------------------- packs


def pack_key(run: GpuRun) -> tuple[str, Any]:
    """The group a run packs with: ("packed", :func:`vflkit.training.split.pack_key` of its
    config) where it packs, else ("serial", its family, method, dataset and party models)."""
    config = trainer.packable_config(run.family, run.config)  # None: a plan's stand-in, another family
    key = trainer.pack_key(config) if config is not None else None
    if key is not None:
        return ("packed", key)
    c = run.config
    models = c.get("models")
    return ("serial", (run.family, c.get("method", c.get("variant", "")), run.dataset,
                       tuple(models) if isinstance(models, (list, tuple)) else models))


def group_packs(runs: Sequence[GpuRun], *, max_cost_s: float | Callable[[set[str]], float], max_runs: int = MAX_PACK,
                speedup: float | None = None, graphs: str | None = None) -> list[Pack]:
    """``runs`` (in value order) grouped by :func:`pack_key` into packs of at most ``max_runs``
    runs whose :attr:`Pack.cost_s` times :data:`SAFETY` stays within ``max_cost_s`` (seconds, or a
    function of the pack's datasets), in the order of their most valuable run; a run that alone
    exceeds it gets a pack of its own. ``speedup`` and ``graphs``: as :class:`Pack` takes them."""
    open_packs: dict[Any, Pack] = {}
    packs: list[Pack] = []
    make = functools.partial(Pack, speedup=speedup or 1.0, by_ops=speedup is None, graphs=graphs)
    for r in runs:
        kind, key = pack_key(r)
        p = open_packs.get(key)
        grown = make(key="", runs=[*(p.runs if p else []), r], packed=kind == "packed")
        room = max_cost_s(grown.datasets) if callable(max_cost_s) else max_cost_s
        limit = trainer.pack_limit(trainer.packable_config(r.family, r.config), max_runs) if kind == "packed" \
            else max_runs
        if p is None or len(p.runs) >= (limit or max_runs) or grown.cost_s * SAFETY > room:
            p = make(key=f"{kind}:{len(packs)}", runs=[], packed=kind == "packed")
            open_packs[key] = p
            packs.append(p)
        p.runs.append(r)
    return packs


# --------------------------------------------------------------------------- data and calls


def wheels_size(folder: Path) -> int:
    """Bytes of the wheels in ``folder`` (0 when there are none: the first call then installs none)."""
    return sum(f.stat().st_size for f in folder.glob("*.whl")) if folder.is_dir() else 0


def download_wheels(dest: Path, names: Sequence[str] = DEVICE_LACKS) -> int:
    """Download the machine's wheels of ``names`` at the versions installed here (the machine runs
    what the tests here ran); their bytes. Any other wheel in ``dest`` is removed first: two
    versions of one package stop the install."""
    try:
        pins = [f"{n}=={version(n)}" for n in names]
    except PackageNotFoundError as exc:
        raise ConfigError(f"{exc.name} is not installed here: install the project's dependencies "
                          "(pip install -e .) before prepare, whose wheels take its versions") from exc
    dest.mkdir(parents=True, exist_ok=True)
    keep = {p.split("==")[0].replace("-", "_") + "-" + p.split("==")[1] for p in pins}
    for old in dest.glob("*.whl"):
        if "-".join(old.name.split("-")[:2]) not in keep:
            old.unlink()
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           DEVICE_PYTHON, "--implementation", "cp", *(a for pl in WHEEL_PLATFORMS for a in ("--platform", pl)),
           "-d", str(dest), *pins]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise ConfigError(f"pip could not download the machine's wheels ({', '.join(pins)}): "
                          f"{done.stderr.strip()[-400:]}\nPrepare where pip reaches PyPI, or put those wheels in "
                          f"{dest} by hand, or pass --no-wheels (then every run that imports vflkit.secure "
                          "fails on the machine)")
    return wheels_size(dest)


def tree_bytes(root: Path | None = None) -> int:
    """What the working tree sends with every call: the files git does not ignore, each counted in
    whole :data:`TREE_BLOCK` blocks, as a transfer limit counted in blocks counts them."""
    root = root or project_root()
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, check=True).stdout.decode()
    return sum(-(-(root / p).stat().st_size // TREE_BLOCK) * TREE_BLOCK
               for p in out.split("\0") if p and (root / p).is_file())


def data_files(datasets: Iterable[str], data_root: Path | None = None, packed: Path | None = None
               ) -> list[tuple[str, str, int, bool]]:
    """(dataset, file, bytes, measured) of what ``datasets`` need on the machine (:data:`DATA_FILES`;
    CIFAR-10's from ``packed``, :func:`pack_cifar10`'s folder, else :data:`CIFAR10_PACKED_BYTES_ESTIMATE`)."""
    root = data_root or default_root()
    out = []
    for ds in sorted(datasets):
        if ds not in DATA_FILES:
            raise ConfigError(f"no GPU data files known for dataset {ds!r}; known: {', '.join(DATA_FILES)}")
        for name in DATA_FILES[ds]:
            path = (packed if ds == "cifar10" and packed is not None else root) / name
            if path.is_file():
                out.append((ds, name, path.stat().st_size, True))
            elif ds == "cifar10":
                out.append((ds, name, CIFAR10_PACKED_BYTES_ESTIMATE, False))
            else:
                raise ConfigError(f"{path} is missing: the GPU runs on {ds} need it carried. Set VFLKIT_DATA to the "
                                  f"folder that holds {name} (torchvision's layout, see data/README.md; a "
                                  f"smoke run on {ds} without VFLKIT_OFFLINE=1 downloads it there), then "
                                  f"prepare again")
    return out


def chunk_files(files: Sequence[tuple[str, str, int, bool]], room: int, *, first_room: int | None = None
                ) -> list[list[tuple[str, int, int]]]:
    """``files`` cut into chunks of at most ``room`` bytes (the first, which shares its call with
    the wheels: ``first_room``), one per call: each a list of (file, offset, length) pieces."""
    first_room = room if first_room is None else first_room
    if room <= 0 or first_room < 0:
        raise ConfigError("the working tree leaves no room to carry data beside it (64 MiB a call)")
    chunks: list[list[tuple[str, int, int]]] = [[]]
    free = first_room
    for _, name, size, _ in files:
        at = 0
        while at < size:
            if free == 0:
                chunks.append([])
                free = room
            n = min(free, size - at)
            chunks[-1].append((name, at, n))
            at += n
            free -= n
    return [c for c in chunks if c]


def _carry_name(window: int, call: int) -> str:
    return f"{CARRY_DIR}/w{window}c{call}"


def provenance() -> str:
    """The variables that name, on the machine (whose copy has no ``.git``), the commit the calls
    carry and whether ``vflkit/`` differs from it (:func:`vflkit.records.git_state`)."""
    state = git_state()
    if "git_commit" not in state:
        return ""
    return (f" VFLKIT_GIT_COMMIT={shlex.quote(str(state['git_commit']))}"
            f" VFLKIT_GIT_MODIFIED={int(bool(state.get('vflkit_modified', True)))}")


def window_calls(window: Window, chunks: list[list[tuple[str, int, int]]], *, wheels_bytes: int,
                 tree: int, device: str = "cuda", work: str = DEFAULT_WORK,
                 machine: Machine = DEFAULT_MACHINE) -> list[Call]:
    """The calls of ``window``, as docs/own-gpu.md, "On a time-limited GPU", lists them."""
    prefix = (f"export PYTHONUNBUFFERED=1 VFLKIT_DATA={work}/data VFLKIT_RESULTS={work}/results{provenance()}; ")
    # the wheels install under the machine's work folder: kept between calls while it stays warm
    wheel = (f"python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "
             f"{work}/site {CARRY_DIR}/whl/*.whl && export PYTHONPATH={work}/site:$PYTHONPATH || exit; ")
    site = f"export PYTHONPATH={work}/site:$PYTHONPATH; "
    w, calls, t = window.index, [], machine.start_s
    n_data = max(len(chunks), 1)
    for i in range(n_data):
        first, starts = i == 0, i == n_data - 1
        carries = [f"{CARRY_DIR}/plan.json"] + ([f"{CARRY_DIR}/whl"] if wheels_bytes else []) if first else []
        cmd = prefix + (wheel if first and wheels_bytes else site)
        gpu = device.startswith("cuda")
        if first:
            cmd += "python3 -m vflkit.ops.launcher check --out $OUT || exit; "
        bench = BENCH_COMMAND.format(s=int(BENCH_S), device=device, work=work)
        if first and gpu:  # before the lanes where this call starts them (they must not share the GPU with it),
            # else beside the data calls' transfers, detached so it outlives this call
            cmd += f"mkdir -p {work}; " + (f"{bench}; " if starts else
                                           f"setsid nohup sh -c {shlex.quote(bench)} > /dev/null 2>&1 & ")
        bench_s = bench_wait_s(n_data) if gpu and starts else 0.0
        if gpu and starts and not first and bench_s:
            cmd += (f"for i in $(seq {int(bench_s)}); do [ -e {work}/bench.done ] && break; sleep 1; done; ")
        if chunks:
            carries.append(_carry_name(w, i + 1))
            cmd += f"python3 -m vflkit.ops.launcher unpack {_carry_name(w, i + 1)} --work {work} || exit; "
        size = sum(n for ch in chunks[i:i + 1] for _, _, n in ch) + (wheels_bytes if first else 0)
        wait = 0.0
        if starts:
            cmd += (f"python3 -m vflkit.ops.launcher start {CARRY_DIR}/plan.json --window {w} --work {work} "
                    f"--device {device} --deadline-in "
                    f"{int(window.deadline_s - t - bench_s - RETURN_MARGIN_S)}; ")
            window.start_s = t + 20.0 + bench_s  # the call's own commands before the lanes start
            wait = min(machine.call_limit_s - 60.0, window.work_s)
        cmd += f"python3 -m vflkit.ops.launcher collect --work {work} --out $OUT --wait {int(wait)}"
        est = machine.call_overhead_s + 20.0 + wait + bench_s
        calls.append(Call(index=i + 1, carries=carries, carry_bytes=size + tree, command=cmd, wait_s=wait,
                          est_s=est, starts=starts))
        t += est
    end = window.deadline_s - RETURN_MARGIN_S if window.reserve else window.start_s + window.work_s
    while t < end:
        wait = min(machine.call_limit_s - 60.0, end - t)
        cmd = (prefix + site + f"python3 -m vflkit.ops.launcher collect --work {work} --out $OUT --wait {int(wait) + 1}"
               + " --stop-mps-when-idle")
        calls.append(Call(index=len(calls) + 1, carries=[], carry_bytes=tree, command=cmd, wait_s=wait,
                          est_s=machine.call_overhead_s + wait))
        t += machine.call_overhead_s + wait
    return calls


# --------------------------------------------------------------------------- the plan


def plan(deadline_s: float, device_kind: str = "h100", *, profile: str = "paper", workers: int = DEFAULT_WORKERS,
         results: Path | None = None, papers: Sequence[str] | None = None, rate_file: Path | None = None,
         opened: Mapping[tuple[str, str], int] | None = None, tree: int | None = None,
         data_root: Path | None = None, packed_data: Path | None = None,
         wheels_bytes: int | None = None, runs: Sequence[GpuRun] | None = None,
         slow_cpu_min: float | None = None, machine: Machine = DEFAULT_MACHINE) -> Plan:
    """Every pending GPU run laid into windows of ``deadline_s`` seconds each (from a window's
    first call to the end of its last), or listed as needing a longer job, with why: the rules in
    docs/own-gpu.md, "How a plan orders, places and gates the runs". ``slow_cpu_min``: as
    :func:`pending_gpu_runs` takes it. ``opened`` (default :func:`open_clauses`), ``runs`` (costed)
    and ``wheels_bytes`` (default: those :func:`prepare` left in ``.launch/whl``) reuse a caller's."""
    if wheels_bytes is None:
        wheels_bytes = wheels_size(project_root() / CARRY_DIR / "whl")
    if not (isinstance(deadline_s, (int, float)) and math.isfinite(deadline_s) and deadline_s > 0):
        shown = f"{deadline_s / 60:g} minutes" if isinstance(deadline_s, (int, float)) else repr(deadline_s)
        raise ConfigError(f"a window's deadline must be a positive time, got {shown} (--deadline-min); "
                          f"give the machine's window length, e.g. {DEFAULT_MACHINE.deadline_s / 60:g}")
    for name in papers or ():
        studies.get(name)  # an unknown name (a typo) is an error listing the registered studies
    check_choice("device kind", device_kind, DEVICE_KINDS)
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    rates_in = load_rate_file(rate_file)
    recorded: list[str] = []
    t0 = time.perf_counter()
    if runs is None:
        runs, recorded = pending_gpu_runs(profile, results=results, papers=papers, slow_cpu_min=slow_cpu_min)
        _log.info("%d pending runs of the %s profile found (%.0f s)", len(runs), profile, time.perf_counter() - t0)
    # runs that come priced (a caller's own estimate) keep their price
    t0 = time.perf_counter()
    fresh, used = cost_runs([r for r in runs if r.cost_s is None], device_kind, rate_file=rates_in, lanes=workers)
    _log.info("%d runs priced on %s (%.0f s)", len(fresh), device_kind, time.perf_counter() - t0)
    costed = [r for r in runs if r.cost_s is not None] + fresh
    if opened is None:
        t0 = time.perf_counter()
        opened = open_clauses(profile, papers)
        _log.info("the claims each run could decide read from the records (%.0f s)", time.perf_counter() - t0)
    ordered = value_order(costed, opened)
    tree = tree_bytes() if tree is None else tree
    room = machine.carry_bytes - tree - 2**20  # a MiB for the plan and the call's own files
    not_fitting: list[tuple[GpuRun, str]] = [(r, "no cost estimate: neither its FLOPs, its seeds nor its study "
                                                 "price it, so no window can promise it ends before the deadline")
                                             for r in ordered if r.cost_s is None]
    ordered = [r for r in ordered if r.cost_s is not None]

    def chunks_of(datasets: set[str]) -> list[list[tuple[str, int, int]]]:
        return chunk_files(data_files(datasets, data_root, packed_data), room, first_room=room - wheels_bytes)

    @functools.cache
    def usable_of(datasets: frozenset[str]) -> float:
        n = max(len(chunks_of(set(datasets))), 1) if datasets else 1
        # every data call but the starting one, and the first call's GPU benchmark, run before the lanes start
        bench = bench_wait_s(n) if device_kind != "cpu" else 0.0
        start_s = machine.start_s + (n - 1) * (machine.call_overhead_s + 20.0) + 20.0 + bench
        return deadline_s - start_s - RETURN_MARGIN_S - LANE_START_S

    def usable(datasets: set[str]) -> float:
        return usable_of(frozenset(datasets))

    speedup = float(rates_in["pack_speedup"]) if "pack_speedup" in rates_in else None
    graphs, why = expect_graphs(device_kind)
    _log.info("%s", why)
    # a pack is sized to a window that carries its datasets' data calls (MNIST's runs pack with
    # FashionMNIST's), else a pack that fits an empty window is refused whole below
    packs = group_packs(ordered, max_cost_s=usable, speedup=speedup, graphs=graphs if speedup is None else None)
    windows: list[Window] = []
    left = list(packs)
    for p in list(left):  # a pack that alone outlasts an empty window never fits one
        room_s = usable(p.datasets)
        if p.cost_s * SAFETY > room_s:
            left.remove(p)
            for r in p.runs:
                not_fitting.append((r, f"does not fit a window: {r.cost_s / 60:.1f} min estimated "
                                       f"({r.cost_source}), x{SAFETY} safety > {max(room_s, 0) / 60:.1f} usable "
                                       f"minutes of a {deadline_s / 60:.0f}-minute window, and it cannot go on in "
                                       f"the next window (its checkpoint never leaves the GPU machine); it fits "
                                       f"once the rate is {r.cost_s * SAFETY / max(room_s, 1):.1f}x today's"))
    while left:
        win = Window(index=len(windows) + 1, deadline_s=deadline_s, lanes=[[] for _ in range(workers)])
        ends = [0.0] * workers
        for p in list(left):
            ds = win.datasets | p.datasets
            lane = min(range(workers), key=lambda i: ends[i])
            if max(ends[lane] + p.cost_s * SAFETY, max(ends)) <= usable(ds):
                win.lanes[lane].append(p)
                ends[lane] += p.cost_s * SAFETY
                win.datasets = ds
                left.remove(p)
        if not win.runs:  # cannot happen after the filter above; guards an endless loop
            raise RuntimeError("a pack fits no window although it fits an empty one")
        win.lanes = [lane for lane in win.lanes if lane]
        windows.append(win)
    for w in windows:
        mine = {id(p) for lane in w.lanes for p in lane}
        w.reserve = [p for p in packs if id(p) not in mine and p.datasets <= w.datasets][:RESERVE_MAX]
        w.calls = window_calls(w, chunks_of(w.datasets) if w.datasets else [], wheels_bytes=wheels_bytes, tree=tree,
                               device=DEVICE_KINDS[device_kind], machine=machine)
    _log.info("%d windows laid out, %d runs left for a GPU of one's own", len(windows), len(not_fitting))
    return Plan(profile=profile, device_kind=device_kind, deadline_s=deadline_s, workers=workers, windows=windows,
                not_fitting=not_fitting, recorded=recorded, rates=used, chunk_room=room,
                wheels_bytes=wheels_bytes, machine=machine)


def own_gpu_s(runs: Sequence[GpuRun], workers: int) -> tuple[float, float]:
    """(run-seconds, wall seconds) of ``runs`` on a GPU of one's own, grouped into the packs the
    engine trains (:func:`group_packs`, no deadline): the packs' sum, and the longest of
    ``workers`` lanes (longest pack first, on the lane that frees first). Unestimated runs count 0."""
    packs = [c for p in group_packs(runs, max_cost_s=math.inf)  # a serial pack's runs may take lanes of their own
             for c in ([p.cost_s] if p.packed else [r.cost_s or 0.0 for r in p.runs])]
    ends = [0.0] * max(workers, 1)
    for cost in sorted(packs, reverse=True):
        i = min(range(len(ends)), key=ends.__getitem__)
        ends[i] += cost
    return sum(packs), max(ends)


def rate_names(p: Plan) -> list[str]:
    """What the plan's estimates assumed: the launch-bound model's seconds per op and sharing
    slowdown, and each FLOP/s rate used with what it is (measured, a rate file's, a placeholder)."""
    kind = DEVICE_KINDS[p.device_kind]
    used = {(r.family, r.cost_source) for r in p.planned + [r for r, _ in p.not_fitting]}
    out = []
    gpu = p.device_kind if p.device_kind in pricing.GPU_KINDS else pricing.REFERENCE_GPU
    per_op, best = pricing.op_seconds(gpu), pricing.best_rate(gpu)
    if any(src in (pricing.FROM_OPS, pricing.FROM_FLOPS) for _, src in used) and per_op and best:
        out.append(f"GPU runs: launch-bound, {1e6 * per_op:.1f} us per operation on one {gpu.upper()} alone, never "
                   f"faster than {best / 1e12:.1f} TFLOP/s (the best measured on it), x{pricing.slowdown(p.workers):.1f} "
                   f"while {p.workers} processes share the GPU")
    for fam, (r, src) in sorted(p.rates.items()):
        if not any(f == fam and s in ("committed records", "placeholder", "rate file", "flops") for f, s in used):
            continue  # no run of this family was priced by its FLOP rate
        if src == "committed records":
            n = len(pricing.record_rates().get((kind, fam), []))
            what = f"measured: the median of {n} committed {kind} records of the {fam} family"
        elif src == "placeholder":
            what = "a placeholder, not measured: an assumption until a window measures it"
        else:
            what = src
        out.append(f"{fam} {r / 1e12:.2f} TFLOP/s per process while {p.workers} share the GPU ({what})")
    return out


def plan_table(p: Plan) -> str:
    """The plan: each window's calls and packs (where each ends against the deadline), the runs
    that need a longer job with why, then windows needed, own-GPU hours and the rates assumed."""
    lines = [f"{'window':>6} {'call':>4} {'runs':>5} {'est min':>8} {'carry MiB':>9}  what"]
    for w in p.windows:
        for c in w.calls:
            what = ("start lanes; " if c.starts else "") + ("carry " + ", ".join(c.carries) + "; " if c.carries else "")
            what += f"collect {c.wait_s / 60:.1f} min"
            runs = len(w.runs) if c.starts else 0
            lines.append(f"{w.index:>6} {c.index:>4} {runs:>5} {c.est_s / 60:>8.1f} {c.carry_bytes / 2**20:>9.1f}  {what}")
        lanes = ", ".join(str(sum(len(pk.runs) for pk in lane)) for lane in w.lanes)
        lines.append(f"{'':>6} window {w.index}: {len(w.runs)} runs in {len(w.lanes)} lanes ({lanes}), data "
                     f"{'/'.join(sorted(w.datasets)) or 'none'}, ends at {w.end_s / 60:.1f} min, slack "
                     f"{w.slack_s / 60:.1f} min of {w.deadline_s / 60:.0f}")
        for i, lane in enumerate(w.lanes):
            at = w.start_s + LANE_START_S
            for pk in lane:
                at += pk.cost_s * SAFETY
                how = (f"packed x{len(pk.runs)}" if pk.packed and len(pk.runs) > 1
                       else "alone" if len(pk.runs) == 1 else f"{len(pk.runs)} one by one")
                lines.append(f"{'':>6}   lane {i} {pk.key} ({how}): {pk.cost_s / 60:.1f} min est, x{SAFETY} ends at "
                             f"{at / 60:.1f} of {w.deadline_s / 60:.0f} min: "
                             + "; ".join(f"{r.label} {(r.cost_s or 0) / 60:.1f} min" for r in pk.runs))
        if w.reserve:
            n = sum(len(pk.runs) for pk in w.reserve)
            lines.append(f"{'':>6}   reserve: {len(w.reserve)} packs ({n} runs) on its data, "
                         f"{min(pk.cost_s for pk in w.reserve) / 60:.1f}-{max(pk.cost_s for pk in w.reserve) / 60:.1f} "
                         "min est each, started by a lane whose own are done when the window's measured speed "
                         "ends one before the deadline; first: " + "; ".join(r.label for r in w.reserve[0].runs))
    if p.not_fitting:
        lines.append("[launcher] needs a longer session (own GPU):")
    for r, why in p.not_fitting:
        est = "no estimate" if r.cost_s is None else f"{r.cost_s / 60:.1f} min ({r.cost_source})"
        lines.append(f"  {r.label} ({r.key}): {est}: {why}")
    total = sum(r.cost_s or 0 for r in p.planned)
    slow = [r for r in p.planned if r.slow_cpu]
    lines.append(f"[launcher] {len(p.planned)} runs planned into {len(p.windows)} windows of "
                 f"{p.deadline_s / 60:.0f} min ({total / 3600:.1f} run-hours at {p.workers} processes sharing"
                 + (f"; {len(slow)} of them CPU-sized runs taken in as slow, {sum(r.cpu_cost_s or 0 for r in slow) / 3600:.1f}"
                    " CPU-hours here" if slow else "") + f"), {len(p.recorded)} skipped (recorded)")
    m = p.machine
    if p.windows:
        lines.append(f"[launcher] windows needed for what fits: {len(p.windows)}, one per {m.name} job (a job has "
                     f"{m.job_s / 60:.0f} min, the machine's start included; {m.give_back_s / 60:.0f} min is left "
                     "to give it back)")
    if p.deadline_s > m.deadline_s or p.deadline_s < m.min_start_left_s:
        lines.append(f"[launcher] warning: a {p.deadline_s / 60:.0f}-minute window does not match the {m.name} "
                     f"machine's limits ({m.job_s / 60:.0f} min a job, less {m.give_back_s / 60:.0f} to give it back; "
                     f"no start under {m.min_start_left_s / 60:.0f} min): these windows need a longer job")
    own = [r for r, _ in p.not_fitting]
    if own:
        run_s, wall_s = own_gpu_s(own, p.workers)
        unpriced = sum(r.cost_s is None for r in own)
        lines.append(f"[launcher] own-GPU hours for the rest: {len(own)} runs, {run_s / 3600:.1f} run-hours at "
                     f"{p.workers} processes sharing, about {wall_s / 3600:.1f} h of one GPU with {p.workers} lanes "
                     f"(x{SAFETY} safety: {wall_s * SAFETY / 3600:.1f} h)"
                     + (f"; {unpriced} of them without an estimate, counted as 0" if unpriced else ""))
    for line in rate_names(p) or ["none"]:
        lines.append(f"[launcher] rate assumed: {line}")
    if any(r.cost_source == "flops" for r in slow):
        lines.append("[launcher] note: the CPU-sized runs' GPU minutes are their FLOPs over that rate, which large "
                     "models set; a small model's step is set by its kernels, not its FLOPs, so these are the least "
                     "certain estimates of the plan, and a pack that outruns its estimate is lost whole: a first "
                     "window's rate file (--rates) should measure them")
    return "\n".join(lines)


# --------------------------------------------------------------------------- on the machine


def write_chunks(files: Sequence[tuple[str, str, int, bool]], chunks: list[list[tuple[str, int, int]]],
                 src: Mapping[str, Path], dest: Path, window: int) -> list[Path]:
    """Cut ``files`` (read from ``src``: file name -> path) into the carried folders of
    ``window``'s calls, each with a manifest of its pieces and every whole file's sha256 and size."""
    digests = {name: hashlib.sha256(src[name].read_bytes()).hexdigest() for _, name, _, _ in files}
    sizes = {name: src[name].stat().st_size for _, name, _, _ in files}
    folders = []
    for i, chunk in enumerate(chunks):
        folder = dest / f"w{window}c{i + 1}"
        folder.mkdir(parents=True, exist_ok=True)
        pieces = []
        for j, (name, at, n) in enumerate(chunk):
            with open(src[name], "rb") as f:
                f.seek(at)
                (folder / f"piece{j}").write_bytes(f.read(n))
            pieces.append({"file": name, "offset": at, "length": n, "piece": f"piece{j}"})
        manifest = {"pieces": pieces, "sha256": digests, "bytes": sizes}
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=1))
        folders.append(folder)
    return folders


def _covered(spans: Sequence[Sequence[int]], size: int) -> bool:
    """Whether the (offset, length) ``spans`` together cover bytes 0..``size``."""
    end = 0
    for at, n in sorted(spans):
        if at > end:
            return False
        end = max(end, at + n)
    return end >= size


def _spans(path: Path) -> list[list[int]]:
    """The (offset, length) spans of a ``.part`` written so far; none if unknown (a file cut
    short by a kill: the file is then judged by its sha256 alone, as if never complete)."""
    try:
        got = json.loads(path.read_text())
        return [[int(at), int(n)] for at, n in got]
    except (OSError, ValueError, TypeError):
        return []


def unpack(folder: Path, work: Path) -> list[str]:
    """Write a carried chunk's pieces into ``work/data``; returns the files now complete. A file
    whose pieces are all there that fails its sha256, or a manifest that is not whole, is a
    :class:`~vflkit.errors.DatasetCorruptError` naming it (docs/own-gpu.md, "What travels")."""
    if not folder.is_dir():
        raise ConfigError(f"no carried chunk at {folder}: name the chunk folder the call carries (its carry lists it)")
    data = work / "data"
    again = ("carry the window's chunks again from its first call (here: `python -m vflkit.ops.launcher prepare` "
             "rewrites them)")
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        pieces = [(str(p["file"]), int(p["offset"]), int(p["length"]), str(p["piece"])) for p in manifest["pieces"]]
        digests = {str(k): str(v) for k, v in dict(manifest["sha256"]).items()}
        sizes = {str(k): int(v) for k, v in dict(manifest.get("bytes", {})).items()}
        for name in [n for n, *_ in pieces] + list(digests) + [piece for *_, piece in pieces]:
            if Path(name).is_absolute() or ".." in Path(name).parts:  # written under work/data only
                raise ValueError(f"the name {name!r} leads outside its folder")
        if any(at < 0 or n < 0 for _, at, n, _ in pieces):
            raise ValueError("a piece's offset or length is negative")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        why = (f"{exc.msg} at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError)
               else f"{type(exc).__name__}: {exc}")
        raise DatasetCorruptError(f"the carried chunk's {folder / 'manifest.json'} is not a whole manifest ({why}); "
                                  f"{again}") from None
    done = []
    for name, at, n, piece in pieces:
        path = data / (name + ".part")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            blob = (folder / piece).read_bytes()
        except OSError as exc:
            raise DatasetCorruptError(f"the carried chunk {folder.name} lacks its piece {piece} of {name} "
                                      f"({exc.strerror}); {again}") from None
        with open(path, "r+b" if path.exists() else "wb") as f:
            f.seek(at)
            f.write(blob)
        spans = data / (name + ".part.spans")
        spans.write_text(json.dumps(_spans(spans) + [[at, len(blob)]]))
    for name, digest in digests.items():
        part, spans = data / (name + ".part"), data / (name + ".part.spans")
        if not part.exists():
            continue
        whole = hashlib.sha256(part.read_bytes()).hexdigest() == digest
        if not whole and name in sizes and _covered(_spans(spans), sizes[name]):
            part.unlink()  # every piece is there and it is wrong: never taken as whole, nor added to
            spans.unlink()
            raise DatasetCorruptError(f"{name}, reassembled up to the carried chunk {folder.name}, does not match "
                                      f"its sha256: a piece was damaged on the way; removed it; {again}")
        if whole:
            part.replace(data / name)
            spans.unlink(missing_ok=True)
            done.append(name)
    if (data / CIFAR10_PACKED).exists() and not (data / "cifar10.u8").exists():
        blob = lzma.decompress((data / CIFAR10_PACKED).read_bytes())
        if hashlib.sha256(blob).hexdigest() != CIFAR10_SHA256:
            (data / CIFAR10_PACKED).unlink()  # a bad copy must not be taken as whole by the next call
            raise SystemExit("CIFAR-10's unpacked arrays do not match their sha256: the carried chunks are not "
                             "the verified load. Here, run `python -m vflkit.ops.launcher pack DIR` and `prepare "
                             "--packed DIR` again, then carry the new chunks (every call of the window again)")
        (data / "cifar10.u8").write_bytes(blob)
    print(f"[launcher] unpacked {folder.name}: complete now {', '.join(done) or 'nothing yet'}")
    return done


def pack_cifar10(out: Path) -> Path:
    """Write CIFAR-10's uint8 arrays (the verified load, sha256-checked) xz-compressed to
    ``out/`` :data:`CIFAR10_PACKED` (here, where the data is; minutes)."""
    d = load_dataset("cifar10", progress=False)
    blob = b"".join(a.numpy().astype(np.uint8).tobytes() for a in (d.x_train, d.y_train, d.x_test, d.y_test))
    if hashlib.sha256(blob).hexdigest() != CIFAR10_SHA256:
        raise SystemExit("the verified CIFAR-10 load changed: its sha256 is not CIFAR10_SHA256")
    out.mkdir(parents=True, exist_ok=True)
    (out / CIFAR10_PACKED).write_bytes(lzma.compress(blob, preset=9))
    return out / CIFAR10_PACKED


def register_cifar10(work: Path) -> None:
    """Make the unpacked CIFAR-10 arrays what ``load_dataset('cifar10')`` returns here."""
    raw_path = work / "data" / "cifar10.u8"
    if not raw_path.exists():
        return
    raw = np.fromfile(raw_path, dtype=np.uint8)
    parts, at = {}, 0
    for name, shape in CIFAR10_SHAPES.items():
        n = int(np.prod(shape))
        parts[name] = torch.from_numpy(raw[at:at + n].reshape(shape).copy())
        at += n
    register_dataset(ImageData("cifar10", parts["x_train"], parts["y_train"].long(), parts["x_test"],
                               parts["y_test"].long(), CIFAR10_CLASSES, mean=(0.4914, 0.4822, 0.4465),
                               std=(0.2470, 0.2435, 0.2616)), replace=True)


def mps_commands(work: str) -> tuple[str, str]:
    """Start and stop of the CUDA MPS daemon, so that several lane processes share the GPU's
    multiprocessors instead of time-slicing it (:func:`vflkit.gpu.shared_gpu` says why)."""
    env = f"CUDA_MPS_PIPE_DIRECTORY={work}/mps-pipe CUDA_MPS_LOG_DIRECTORY={work}/mps-log"
    return (f"mkdir -p {work}/mps-pipe {work}/mps-log && {env} nvidia-cuda-mps-control -d",
            f"echo quit | {env} nvidia-cuda-mps-control")


def start(plan_path: Path, window: int, *, work: Path, device: str, deadline_in: float,
          stand_in: bool = False) -> list[int]:
    """Start ``window``'s lanes, one per lane of the plan, as detached processes (they outlive the
    call), under MPS when several share a GPU, in CUDA graphs when :func:`graphs_verdict` says so;
    their pids."""
    spec = json.loads(plan_path.read_text())["windows"][window - 1]
    work.mkdir(parents=True, exist_ok=True)
    deadline = time.time() + deadline_in
    (work / "window.json").write_text(json.dumps({"window": window, "deadline": deadline}))
    n = len(spec["lanes"])
    env = dict(os.environ)
    if device.startswith("cuda") and GRAPHS_ENV not in env:  # a setting given on the command line wins
        on, why = graphs_verdict(work / "bench.json")
        if on:
            env[GRAPHS_ENV] = "auto"
        print(f"[launcher] {why}")
    if device.startswith("cuda") and n > 1:
        on, _ = mps_commands(str(work))
        if shutil.which("nvidia-cuda-mps-control"):
            subprocess.run(on, shell=True, check=False)
            env.update(CUDA_MPS_PIPE_DIRECTORY=f"{work}/mps-pipe", CUDA_MPS_LOG_DIRECTORY=f"{work}/mps-log")
            print("[launcher] MPS started")
        else:
            print("[launcher] no nvidia-cuda-mps-control here: the lanes time-slice the GPU")
    # the lanes run a copy of the code: every call replaces the working tree under them
    code = work / "code"
    shutil.rmtree(code, ignore_errors=True)
    shutil.copytree(Path(__file__).resolve().parents[1], code / "vflkit")  # the whole package
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(code), env.get("PYTHONPATH", "")) if p)
    (work / "logs").mkdir(exist_ok=True)
    pids = []
    for lane in range(n):
        cmd = [sys.executable, "-m", "vflkit.ops.launcher", "lane", str(plan_path.resolve()), "--window", str(window),
               "--lane", str(lane), "--work", str(work), "--device", device, "--deadline", str(deadline)]
        log = open(work / "logs" / f"lane{lane}.log", "a")
        pids.append(subprocess.Popen(cmd + ["--stand-in"] * stand_in, stdout=log, stderr=subprocess.STDOUT, env=env,
                                     cwd=code, start_new_session=True).pid)
    (work / "lanes.json").write_text(json.dumps(pids))
    print(f"[launcher] window {window}: {n} lanes started, deadline in {deadline_in:.0f} s")
    return pids


def stand_in_run(run: Mapping[str, Any]) -> dict[str, Any]:
    """The rehearsal's stand-in for a planned run: its study's smoke-profile run on the planned
    run's dataset, else its first smoke run moved onto it (a window carries only its planned
    runs' data); a planned run of another precision (a bf16 check) keeps it."""
    tasks = study_tasks(run["paper"], "smoke")
    dataset = run.get("config", {}).get("dataset")
    task = next((t for t in tasks if t.payload["config"].get("dataset") == dataset), tasks[0])
    config = dict(task.payload["config"])
    precision = run.get("config", {}).get("precision", "fp32")
    kept = {"precision": precision} if precision != "fp32" else {}
    if (dataset and config.get("dataset") != dataset) or kept:
        try:
            moved = run_class(task.payload["family"]).from_dict({**config, "dataset": dataset or config["dataset"],
                                                                 **kept})
            return {**run, "key": moved.key, "config": moved.to_dict(), "profile": "smoke"}
        except Exception:  # noqa: BLE001 (a run class that refuses the dataset: the smoke run as it is)
            pass
    return {**run, "key": task.key, "config": config, "profile": "smoke"}


def packed_need_s(pack: Mapping[str, Any], graphs: bool | None = None) -> float:
    """Seconds a lane must have left to start a packed pack of ``plan.json``: its runs' costs over
    its speed-up, times :data:`SAFETY`; at its eager gain where the window runs without CUDA graphs
    (``graphs``; by default whether :data:`vflkit.training.split.GRAPHS_ENV` is set)."""
    graphs = bool(os.environ.get(GRAPHS_ENV)) if graphs is None else graphs
    speedup = pack.get("speedup", 1.0) if graphs else pack.get("eager_speedup", pack.get("speedup", 1.0))
    return sum(r["cost_s"] or 0 for r in pack["runs"]) / float(speedup) * SAFETY


def left_to_do(run: Mapping[str, Any], results: Path) -> float:
    """The share of ``run`` (``plan.json``'s form) still to train: 1 less the epochs (or rounds) its
    checkpoint under ``results`` holds over the config's; 1 without a readable one."""
    path = checkpoint_path(record_path(run_class(run["family"]).from_dict(run["config"]), run["profile"], results))
    if not path.exists():
        return 1.0
    total = run["config"].get("epochs") or run["config"].get("rounds")
    try:
        state = read_checkpoint(path)
        done = state.get("epoch", state.get("round"))
    except Exception:  # noqa: BLE001 (unreadable: the engine moves it aside and starts afresh)
        return 1.0
    if not total or not isinstance(done, (int, float)):
        return 1.0
    return min(max(1.0 - float(done) / float(total), 0.0), 1.0)


def window_speed(work: Path) -> float | None:
    """How much longer than estimated the window's work takes: the largest ``took / est`` so far
    (``work/status/times<N>.json``; not the mean: a window's first packs share the GPU with fewer
    lanes than later ones), or ``None`` before one."""
    return max((took / est for rows in _status(work, "times*.json") for est, took in rows if est > 0), default=None)


def _status(work: Path, pattern: str) -> list[Any]:
    """The lanes' files ``work/status/<pattern>`` (one being replaced this instant is skipped)."""
    out = []
    for f in sorted((work / "status").glob(pattern)):
        try:
            out.append(json.loads(f.read_text()))
        except ValueError:
            pass
    return out


def _claim(work: Path, key: str) -> bool:
    """Take reserve pack ``key`` for this lane: True for the one lane whose file creation wins."""
    claims = work / "claims"
    claims.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(claims / key.replace(os.sep, "_").replace(":", "_"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def lane(plan_path: Path, window: int, lane_index: int, *, work: Path, device: str, deadline: float,
         stand_in: bool = False) -> dict[str, str]:
    """Train one lane's packs in order, then packs of the window's reserve, each start gated on
    ``deadline`` (epoch seconds) as docs/own-gpu.md, "How a plan orders, places and gates the runs",
    says; records land in ``work/results``. Each run's outcome by key (also ``work/status/lane<N>.json``)."""
    spec = json.loads(plan_path.read_text())
    profile = spec["profile"]
    win = spec["windows"][window - 1]
    packs = win["lanes"][lane_index] if lane_index < len(win["lanes"]) else []
    results = work / "results"
    outcome: dict[str, str] = {}
    times: list[tuple[float, float]] = []

    def note(key: str, what: str) -> None:
        outcome[key] = what
        write_json(work / "status" / f"lane{lane_index}.json", outcome)  # atomic: a reader never sees half

    def timed(est_s: float, took_s: float) -> None:
        """What a fresh run or pack took beside its estimate (:func:`window_speed` reads them)."""
        times.append((est_s, took_s))
        write_json(work / "status" / f"times{lane_index}.json", times)

    def fits(need_s: float) -> bool:
        """Whether ``need_s`` seconds at the plan's rate end before the deadline at the measured speed."""
        return ends_before(need_s * (window_speed(work) or 1.0), deadline)

    def estimate_s(run: Mapping[str, Any]) -> float:
        """``run``'s estimated seconds at the plan's rate, times what its checkpoint leaves (a stand-in runs whole)."""
        return (run["cost_s"] or 0) * (1.0 if stand_in else left_to_do(run, results))

    def packed(pack: Mapping[str, Any]) -> bool:
        return pack["packed"] and len(pack["runs"]) > 1 and not stand_in

    def need_s(pack: Mapping[str, Any]) -> float:
        """Seconds, with :data:`SAFETY`, a lane must have left to start ``pack``."""
        if packed(pack):
            return packed_need_s(pack)
        return sum(estimate_s({**r, "profile": profile}) * SAFETY for r in pack["runs"])

    def train(pack: Mapping[str, Any]) -> None:
        """One pack: packed where the plan packed it, else run by run, each start gated by ``fits``."""
        runs = [stand_in_run({**r, "profile": profile}) if stand_in else {**r, "profile": profile}
                for r in pack["runs"]]
        together = packed(pack)
        for unit in [runs] if together else [[r] for r in runs]:
            need = packed_need_s(pack) if together else estimate_s(unit[0]) * SAFETY
            if not stand_in and not fits(need):
                for r in unit:
                    note(r["key"], "not started: would not finish before the deadline")
                continue
            fresh = not any(_recorded(r, results) for r in unit)
            t0 = time.time()
            payloads = [{"family": r["family"], "config": r["config"], "profile": r["profile"],
                         "results": str(results)} for r in unit]
            try:
                if together:
                    compute_pack(payloads, device=device, deadline=deadline)
                else:
                    compute(payloads[0], device=device, deadline=deadline)
            except Exception as exc:  # noqa: BLE001 (a budget stop, a failure: the next run or pack goes on)
                for r in unit:
                    note(r["key"], f"{'failed: ' if together else ''}{type(exc).__name__}: {exc}")
                continue
            took = time.time() - t0
            for r in unit:
                note(r["key"], "recorded (packed)" if together else f"recorded in {took:.0f} s")
            if fresh and (together or _recorded(unit[0], results)):  # a run the deadline stopped measures no speed
                timed(need / SAFETY, took)

    register_cifar10(work)
    for pack in packs:
        train(pack)
    for pack in win.get("reserve", []):
        if time.time() >= deadline:
            break
        if not fits(need_s(pack)) or not _claim(work, pack["key"]):
            continue  # too long at the measured speed (a shorter one may still fit), or another lane's
        train(pack)
    return outcome


def _recorded(run: Mapping[str, Any], results: Path) -> bool:
    """Whether ``run`` (``plan.json``'s form, with its profile) has a whole record under
    ``results``; False for a config its run class refuses (computing it will say why)."""
    try:
        path = record_path(run_class(run["family"]).from_dict(run["config"]), run["profile"], results)
    except Exception:  # noqa: BLE001 (see above)
        return False
    return is_valid_record(path, key=run["key"])


def _lanes_alive(work: Path) -> bool:
    try:
        return any(pid_alive(int(p)) for p in json.loads((work / "lanes.json").read_text()))
    except (OSError, ValueError):
        return False


def collect(work: Path, out: Path, *, wait: float = 0.0, stop_mps: bool = False) -> Path:
    """Wait up to ``wait`` seconds while lanes run, then put every whole record of ``work/results``
    (``*.json``: a half-written one is a temporary file) into ``out/records.tar.gz``, one file back
    per call, beside the lanes' status."""
    end = time.time() + wait
    while time.time() < end and _lanes_alive(work):
        time.sleep(min(5.0, max(end - time.time(), 0.0)))
    if stop_mps and not _lanes_alive(work) and (work / "mps-pipe").exists():
        subprocess.run(mps_commands(str(work))[1], shell=True, check=False)
    out.mkdir(parents=True, exist_ok=True)
    results = work / "results"
    recs = sorted(results.glob("*/*/*.json")) if results.exists() else []
    status = {k: v for lane_status in _status(work, "lane*.json") for k, v in lane_status.items()}
    # the host names the machine the records were made on: receive marks each record with it
    (out / "status.json").write_text(json.dumps({"lanes_running": _lanes_alive(work), "host": platform.node(),
                                                 "runs": status}, indent=1))
    for name in ("bench.json", "bench.txt"):  # the window's GPU benchmark, as far as it got
        if (work / name).exists():
            shutil.copyfile(work / name, out / name)
    tar_path = out / "records.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        for p in recs:
            tar.add(p, arcname=str(p.relative_to(results)))
    print(f"[launcher] {len(recs)} records returned; lanes running: {_lanes_alive(work)}; "
          + ", ".join(f"{k[:10]} {v}" for k, v in sorted(status.items())))
    return tar_path


def _archive_members(tar_path: Path) -> list[tuple[str, bytes | None]]:
    """Every member of the records archive at ``tar_path`` as (name, bytes; None for what is not a
    file), read whole before anything is taken: one cut short or garbled is a ConfigError naming it."""
    try:
        with tarfile.open(tar_path) as tar:
            return [(m.name, tar.extractfile(m).read() if m.isfile() else None)  # type: ignore[union-attr]
                    for m in tar.getmembers()]
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        cut = isinstance(exc, EOFError) or "end of file" in str(exc).lower()
        detail = " ".join(str(exc).split(":")[0].split())  # tarfile's reasons run over several lines
        raise ConfigError(f"{tar_path} is {'cut short' if cut else 'not a whole tar.gz'} ({type(exc).__name__}: "
                          f"{detail}), so nothing of it was taken; fetch the call's files again (or run its "
                          "`collect` again on the machine, while it is warm) and receive them again") from None


def receive(files_at: Path, results: Path) -> tuple[list[str], list[str]]:
    """Take the records a call brought back (``records.tar.gz`` under ``files_at``) into
    ``results``, each checked as the record store checks it and marked :data:`vflkit.records.RECEIVED`
    (the host ``collect`` named, and when); the keys taken and the names refused. No such folder
    or archive, or an archive that is not whole, is a ConfigError."""
    taken, refused = [], []
    if not files_at.is_dir():
        raise ConfigError(f"{files_at} does not exist (or is not a folder); give the folder a call's files were "
                          "fetched to")
    tar_path = files_at / "records.tar.gz"
    if not tar_path.is_file():
        raise ConfigError(f"{files_at} holds no records.tar.gz (every call's `collect` writes one there): not a "
                          "call's files; give the folder they were fetched to")
    members = _archive_members(tar_path)
    keep_benchmark(files_at, results)
    mark = {"from": _collected_on(files_at), "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    for name, raw in members:
        if raw is None or not name.endswith(".json"):
            refused.append(name)
            continue
        parts = Path(name).parts
        if len(parts) < 3:  # not <profile>/<paper>/<key>.json: refused alone, the others go on
            refused.append(f"{name}: not at <profile>/<paper>/<key>.json")
            continue
        profile, paper, _ = parts[-3:]
        # checked from a file of its own, outside results/: nothing there is touched before
        with tempfile.TemporaryDirectory(prefix="vflkit-incoming-") as incoming:
            tmp = Path(incoming) / Path(name).name
            tmp.write_bytes(raw)
            try:
                rec = read_record(tmp)
                run = run_class(studies.get(paper).family).from_dict(rec["config"])
                check_record(tmp, run, profile)
                dest = record_path(run, profile, results)
                if dest.name != Path(name).name:
                    raise BadRecord(f"{name} is not at its run's path")
            except Exception as exc:  # noqa: BLE001 (any record that is not whole is refused)
                refused.append(f"{name}: {exc}")
                continue
        if not has_record(run, profile, [results]):
            dest.parent.mkdir(parents=True, exist_ok=True)
            # a record the GPU machine itself received keeps its first mark: where it was made
            write_json_atomic(dest, rec if RECEIVED in rec else {**rec, RECEIVED: mark})  # the store's own writer
        taken.append(rec["key"])
    return taken, refused


def _collected_on(files_at: Path) -> str:
    """The machine a call's files were collected on, as its ``status.json`` names it, or "unknown"."""
    try:
        host = json.loads((files_at / "status.json").read_text()).get("host")
    except (OSError, ValueError, AttributeError):
        host = None
    # a host name, as a machine gives it (at most 253 characters, printable): anything else is not one
    ok = isinstance(host, str) and 0 < len(host.strip()) <= 253 and host.isprintable()
    return host.strip() if ok else "unknown"  # type: ignore[union-attr]


def keep_benchmark(files_at: Path, results: Path) -> Path | None:
    """File the GPU benchmark a window's first call brought back (``bench.json``) as
    ``results/device/<gpu>-<date>-bench.json``, where :mod:`vflkit.ops.pricing` reads it; None if
    there is none, or it was made on no GPU the cost model knows."""
    src = files_at / "bench.json"
    try:
        doc = json.loads(src.read_text())
        kind = pricing.gpu_kind(str(doc["device"]))
        rows = doc["bench_packed"]["rows"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not kind or not rows:
        return None
    day = f"{kind}-{time.strftime('%Y-%m-%d')}-bench"
    # a second window the same day keeps the first's file
    dest = next(d for n in itertools.count(1)
                if not (d := results / "device" / (f"{day}.json" if n == 1 else f"{day}-{n}.json")).exists())
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_json(dest, doc)
    return dest


# --------------------------------------------------------------------------- preparing a window


def write_carry(p: Plan, carry: Path, *, data_root: Path | None = None, packed: Path | None = None,
                unpacked_ok: bool = False) -> list[dict[str, Any]]:
    """Write under ``carry`` (a real window's: ``.launch/``) ``plan.json`` and each window's data
    chunks (``w<N>c<M>/``), replacing an earlier plan's; the chunk list. CIFAR-10 travels packed
    (``packed``: :func:`pack_cifar10`'s folder); unpacked, it is an error unless ``unpacked_ok``."""
    root = data_root or default_root()
    carry.mkdir(parents=True, exist_ok=True)
    for old in [carry / "plan.json", *carry.glob("w*c*")]:
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink(missing_ok=True)
    (carry / "plan.json").write_text(json.dumps(p.to_dict()))
    chunk_list: list[dict[str, Any]] = []
    for w in p.windows:
        files = data_files(w.datasets, root, packed)
        chunks = chunk_files(files, p.chunk_room, first_room=p.chunk_room - p.wheels_bytes) if w.datasets else []
        chunk_list += [{"window": w.index, "call": i + 1, "file": name, "offset": at, "bytes": n}
                       for i, ch in enumerate(chunks) for name, at, n in ch]
        measured = [f for f in files if f[3]]
        if len(measured) < len(files):
            if not unpacked_ok:
                raise ConfigError(f"window {w.index} needs CIFAR-10, which is not packed: run `python -m "
                                  "vflkit.ops.launcher pack DIR` here (minutes), then prepare again with --packed DIR")
            chunks = chunk_files(measured, p.chunk_room, first_room=p.chunk_room - p.wheels_bytes)
        src = {name: (packed if ds == "cifar10" and packed is not None else root) / name for ds, name, _, _ in measured}
        if measured:
            write_chunks(measured, chunks, src, carry, w.index)
        if not unpacked_ok:  # what the calls carry is what was written: a call never finds a folder missing
            mine = f"{CARRY_DIR}/w{w.index}c"  # this window's chunk folders (_carry_name)
            wanted = {Path(c).name for call in w.calls for c in call.carries if c.startswith(mine)}
            written = {f.name for f in carry.glob(f"w{w.index}c*")}
            if wanted != written:
                raise ConfigError(f"window {w.index}: the calls carry {sorted(wanted)} but {sorted(written)} were "
                                  "written; plan and prepare with the same data (--packed) and wheels")
    return chunk_list


def call_sequence(p: Plan) -> str:
    """Each window's calls as they are to be made: the carry, a timeout and the command."""
    lines = []
    for w in p.windows:
        for c in w.calls:
            # the command: its collect's wait, plus two minutes for its own steps (torch's import,
            # the wheels' install, the unpacking) and for the records' tar
            timeout = min(p.machine.call_limit_s, int(c.wait_s + 120 + 0.999))
            lines.append(f"window {w.index} call {c.index}: carry={json.dumps(c.carries)} timeout_s={timeout}"
                         f"{' (starts the lanes)' if c.starts else ''}\n  {c.command}")
    return "\n".join(lines)


def prepare(deadline_s: float, device_kind: str = "h100", *, carry: Path | None = None, wheels: bool = True,
            packed: Path | None = None, data_root: Path | None = None, **plan_kw: Any) -> Plan:
    """Make a real window ready: the machine's wheels downloaded into ``carry/whl`` (default
    ``.launch/``; ``wheels=False``: none), the plan made for them (:func:`plan` with ``plan_kw``) and
    written (:func:`write_carry`)."""
    carry = carry or project_root() / CARRY_DIR
    if wheels:
        size = download_wheels(carry / "whl")
    else:
        shutil.rmtree(carry / "whl", ignore_errors=True)
        size = 0
    p = plan(deadline_s, device_kind, wheels_bytes=size, data_root=data_root, packed_data=packed, **plan_kw)
    write_carry(p, carry, data_root=data_root, packed=packed)
    return p


# --------------------------------------------------------------------------- the dry run


def dry_run(p: Plan, folder: Path, *, windows: int = 1, data_root: Path | None = None,
            execute: bool = True, python: str = sys.executable) -> dict[str, Any]:
    """Rehearse ``p`` on the CPU under ``folder`` (docs/own-gpu.md, ``dry-run``): with ``execute``,
    the first ``windows`` windows' calls run here (``python`` for ``python3``, each planned run by
    its :func:`stand_in_run`) and their records received into ``folder/results``. What it did."""
    folder.mkdir(parents=True, exist_ok=True)
    root = data_root or default_root()
    work = folder / "machine"
    carry = folder / "carry"
    chunk_list = write_carry(p, carry, data_root=root, unpacked_ok=True)
    on, off = mps_commands(DEFAULT_WORK)
    report: dict[str, Any] = {"windows": len(p.windows), "calls": [], "received": [], "refused": [],
                              "mps": {"start": on, "stop": off}}
    for w in p.windows:
        files = data_files(w.datasets, root)
        scripts = folder / f"window{w.index}"
        scripts.mkdir(exist_ok=True)
        for c in w.calls:
            (scripts / f"call{c.index}.sh").write_text(
                f"# window {w.index}, call {c.index}: carry {json.dumps(c.carries)}, ~{c.est_s / 60:.1f} min\n"
                + c.command + "\n")
            report["calls"].append({"window": w.index, "call": c.index, "chars": len(c.command),
                                    "carry_bytes": c.carry_bytes, "est_s": c.est_s})
        if not execute or w.index > windows:
            continue
        if "cifar10" in w.datasets and not any(f[0] == "cifar10" and f[3] for f in files):
            # CIFAR-10 is not packed here (``pack`` takes minutes): its PNG tree stands in for it
            (work / "data").mkdir(parents=True, exist_ok=True)
            if not (work / "data" / "cifar10-png").exists():
                (work / "data" / "cifar10-png").symlink_to(root / "cifar10-png")
        for c in w.calls:
            out = folder / "out" / f"w{w.index}c{c.index}"
            env = {**os.environ, "OUT": str(out), "PYTHONPATH": str(project_root())}
            # the GPU benchmark rehearsed on one small setting: the command, not the timing
            full = BENCH_COMMAND.format(s=int(BENCH_S), device="cuda", work=DEFAULT_WORK)
            small = full.replace(BENCH_SETTINGS, "--methods local --models mlp").replace("--steps 10", "--steps 1")
            cmd = (c.command.replace(full, small)
                   .replace("python3 -m pip install", "true ||").replace("python3", shlex.quote(python))
                   .replace(f"--work {DEFAULT_WORK}", f"--work {shlex.quote(str(work))}")
                   .replace(f"{CARRY_DIR}/", f"{shlex.quote(str(carry))}/").replace("--device cuda", "--device cpu")
                   .replace(f"={DEFAULT_WORK}/", f"={shlex.quote(str(work))}/")
                   .replace(DEFAULT_WORK, str(work)))  # the benchmark's files
            if c.starts:
                cmd = cmd.replace(" --deadline-in", " --stand-in --deadline-in")
            if "unpack" in cmd and not (carry / f"w{w.index}c{c.index}").exists():
                cmd = cmd.replace(f"{shlex.quote(python)} -m vflkit.ops.launcher unpack", "true")  # CIFAR-10 not packed
            # a rehearsal's collect waits for the stand-ins, not the planned minutes
            cmd = cmd.replace("--wait ", "--wait-cap 120 --wait ")
            done = subprocess.run(["bash", "-c", cmd], env=env, capture_output=True, text=True, cwd=project_root())
            try:
                got, bad = receive(out, folder / "results")
            except ConfigError as exc:  # the call brought no whole archive back: the rehearsal fails
                got, bad = [], [str(exc)]
            report["received"] += got
            report["refused"] += bad
            report["calls"][-len(w.calls) + c.index - 1].update(rc=done.returncode, tail=(done.stdout + done.stderr)[-600:])
    (folder / "chunks.json").write_text(json.dumps(chunk_list, indent=1))
    # a stand-in that failed in a lane (its data absent, an error) fails the rehearsal: the
    # calls themselves exit 0 whatever their lanes' runs did
    report["failed_runs"] = {k: v for lane_status in _status(work, "lane*.json") for k, v in lane_status.items()
                             if not v.startswith(("recorded", "not started"))}
    report["missing_packages"] = check_packages(folder)
    (folder / "dry_run.json").write_text(json.dumps(report, indent=1))
    return report
