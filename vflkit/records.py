"""The one record store and the one run loop of every paper.

A run is any frozen config with ``paper``, ``seed``, ``key`` and ``to_dict()`` (the
:class:`Run` protocol): :class:`~vflkit.methods.base.RunConfig` for the batch-by-batch split
and aggregation methods, :class:`~vflkit.methods.multi_vfl.MultiVFLConfig` for Multi-VFL,
:class:`~vflkit.training.one_shot.OneShotRun` for the one-shot methods. Its key names its
record: ``<results>/<profile>/<paper>/<key>.json``, so a rerun finds finished runs and skips
them, and an interrupted study resumes at the first run without a record.

:func:`run_one` trains a run with the trainer it is handed (one per protocol family, in
:mod:`vflkit.training`, each ``train(run, *, device, checkpoint, progress, on_divergence) ->
result``) and wraps the result in one envelope for every family::

    {key, profile, config, environment, finished, wall_time_s, peak_memory_mb,
     peak_memory_kind, diverged, **result}

written atomically. This module imports no method and no trainer (they are handed in), so
the plotting layer (:mod:`vflkit.report`) can read records without pulling in the runner.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import time
from pathlib import Path
from typing import Any, Iterable, Protocol

import torch
from tqdm.auto import tqdm

from . import __version__
from .config import check_paper, check_profile, project_root, resolve_device, results_dir
from .errors import ConfigError

#: Envelope fields the run loop writes; a trainer's result may not use these names (except
#: ``wall_time_s`` and ``diverged``, which a trainer that resumes or stops early reports itself).
ENVELOPE: tuple[str, ...] = ("key", "profile", "config", "environment", "finished", "wall_time_s",
                             "peak_memory_mb", "peak_memory_kind", "diverged")


class Run(Protocol):
    """What the record store needs of a run config."""

    paper: str
    seed: int

    @property
    def key(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...


class Trainer(Protocol):
    """One protocol family's training: a run in, its results (a JSON-able dict) out."""

    def __call__(self, run: Any, *, device: torch.device, checkpoint: Path | None = None,
                 progress: bool = True, on_divergence: str = "raise",
                 deadline: float | None = None) -> dict[str, Any]: ...


# --------------------------------------------------------------------------- environment


def _cpu_name() -> str:
    """The CPU's model name (Linux), else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_state() -> dict[str, Any]:
    """The checkout's commit and whether vflkit's own files differ from it.

    ``vflkit_modified`` is what tells a reader whether the committed code produced a record: a
    run made with uncommitted changes to the package names the commit it started from, not
    the code it ran. Changes outside ``vflkit/`` (notebooks, results) do not affect a run.
    """
    here = Path(__file__).resolve().parent
    out: dict[str, Any] = {}
    if os.environ.get("VFLKIT_GIT_COMMIT"):
        # a copy of the tree without .git (e.g. shipped to a rented GPU) names its commit here;
        # whoever ships it vouches that the copy is that commit's vflkit/
        out["git_commit"] = os.environ["VFLKIT_GIT_COMMIT"]
        out["vflkit_modified"] = os.environ.get("VFLKIT_GIT_MODIFIED", "1") != "0"
        return out
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here,
                                capture_output=True, text=True, timeout=5)
        if commit.returncode == 0:
            out["git_commit"] = commit.stdout.strip()
            status = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=here,
                                    capture_output=True, text=True, timeout=5)
            if status.returncode == 0:
                out["vflkit_modified"] = bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def environment_info(device: torch.device) -> dict[str, Any]:
    """Device, CPU, library versions and the code's commit, for the record.

    The CPU is part of it because the same seeded run gives different numbers on different
    CPUs: PyTorch's and MKL's kernels are chosen per instruction set (AVX2, AVX-512) and round
    differently, and training amplifies the difference (measured on the APC-VFL autoencoders).
    """
    import numpy
    import torchvision

    info: dict[str, Any] = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
        "cpu": _cpu_name(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "numpy": numpy.__version__,
        "vflkit": __version__,
    }
    info.update(_git_state())
    return info


# --------------------------------------------------------------------------- the store


def record_path(run: Run, profile: str, root: Path | None = None) -> Path:
    """Where the record of ``run`` under ``profile`` lives: ``<root>/<profile>/<paper>/<key>.json``."""
    return (root or results_dir()) / check_profile(profile) / check_paper(run.paper) / f"{run.key}.json"


def checkpoint_path(record: Path) -> Path:
    """Where a run's checkpoint lives: beside its record (``<key>.ckpt.pt``); it is never
    committed and is deleted once the record is written."""
    return record.with_name(record.stem + ".ckpt.pt")


def load_record(run: Run, profile: str, root: Path | None = None) -> dict[str, Any] | None:
    """The finished record of ``run``, or None."""
    path = record_path(run, profile, root)
    if not path.exists():
        return None
    with open(path) as f:
        return json.load(f)


def load_recorded(runs: Iterable[Run], *, profile: str) -> list[dict[str, Any]]:
    """The records an earlier run of ``profile`` wrote for ``runs``; nothing is trained.

    A notebook shows the committed records of a profile it is not running (e.g. the quick
    profile's results beside a smoke run) with this. They are looked for under
    ``VFLKIT_RESULTS`` and then under the project's own ``results/``, where the committed ones
    stay when ``VFLKIT_RESULTS`` points a trial run elsewhere. A missing record is an error
    that says how to make it.
    """
    check_profile(profile)
    runs = list(runs)
    first_missing: list[Path] | None = None
    for root in dict.fromkeys([results_dir(), project_root() / "results"]):
        paths = [record_path(r, profile, root) for r in runs]
        missing = [p for p in paths if not p.exists()]
        if not missing:
            break
        first_missing = first_missing or missing
    else:
        raise ConfigError(
            f"{len(first_missing)} of {len(runs)} runs of the {profile!r} profile have no record "
            f"(first: {first_missing[0]}); run the notebook with profile={profile!r} "
            f"(or `make study PROFILE={profile}`) to make them"
        )
    records = []
    for p in paths:
        with open(p) as f:
            records.append(json.load(f))
    return records


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` through a temporary file, flushed to disk before the rename
    that publishes it: a reader never sees half a record, even after a crash."""
    from .files import write_json

    write_json(path, data)


def json_default(obj: Any) -> Any:
    """numpy and torch scalars as Python numbers."""
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


# --------------------------------------------------------------------------- the run loop


def _peak_memory(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "process_max_rss"


def run_one(run: Run, *, train: Trainer, profile: str, device: str | torch.device = "auto",
            results: Path | None = None, force: bool = False, progress: bool = True,
            on_divergence: str = "raise", deadline: float | None = None) -> dict[str, Any]:
    """Train ``run`` with ``train`` (or load its finished record) and return the record.

    ``on_divergence``: ``"raise"`` lets a trainer's :class:`~vflkit.errors.DivergenceError`
    stop the study; ``"record"`` asks the trainer to stop the run there, evaluate what it has
    and say where it diverged (``record["diverged"]``). A trainer that keeps a checkpoint
    (``checkpoint``, beside the record) resumes from it; the checkpoint is deleted once the
    record is written. ``deadline`` (a ``time.time()`` value, from the scheduler's budget): a
    trainer that checkpoints stops at the end of the last epoch that ends before it and raises
    :class:`~vflkit.errors.BudgetExhausted`; rerunning resumes.
    """
    if on_divergence not in ("raise", "record"):
        raise ConfigError(f"Invalid on_divergence {on_divergence!r}; choose raise or record")
    path = record_path(run, profile, results)
    if path.exists() and not force:
        with open(path) as f:
            return json.load(f)
    dev = resolve_device(device)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    ckpt = checkpoint_path(path)
    if force:
        ckpt.unlink(missing_ok=True)
    start = time.perf_counter()
    result = dict(train(run, device=dev, checkpoint=ckpt, progress=progress, on_divergence=on_divergence,
                        deadline=deadline))
    wall = time.perf_counter() - start
    clash = sorted(set(result) & (set(ENVELOPE) - {"wall_time_s", "diverged"}))
    if clash:
        raise RuntimeError(f"the trainer's result uses the envelope's names {clash}")
    peak, kind = _peak_memory(dev)
    record = {
        "key": run.key,
        "profile": profile,
        "config": run.to_dict(),
        "environment": environment_info(dev),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        # a resumed run counts the time before the interruption too (the trainer knows it)
        "wall_time_s": result.pop("wall_time_s", wall),
        "peak_memory_mb": peak,
        "peak_memory_kind": kind,
        "diverged": result.pop("diverged", None),
        **result,
    }
    record = json.loads(json.dumps(record, default=json_default))
    write_json_atomic(path, record)
    ckpt.unlink(missing_ok=True)
    return record


def run_many(runs: Iterable[Run], *, train: Trainer, profile: str, device: str | torch.device = "auto",
             results: Path | None = None, progress: bool = True, on_divergence: str = "raise",
             desc: str = "runs") -> list[dict[str, Any]]:
    """Run every run in order, skipping those with a record; returns all records."""
    runs = list(runs)
    done = sum(record_path(r, profile, results).exists() for r in runs)
    return [run_one(r, train=train, profile=profile, device=device, results=results, progress=progress,
                    on_divergence=on_divergence)
            for r in tqdm(runs, desc=f"{desc} ({done} of {len(runs)} already recorded)", disable=not progress)]


__all__ = ["ENVELOPE", "Run", "Trainer", "checkpoint_path", "environment_info", "json_default", "load_record",
           "load_recorded", "record_path", "run_many", "run_one", "write_json_atomic"]
