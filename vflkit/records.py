"""The one record store and the one run loop of every paper.

A run's key names its record, ``<results>/<profile>/<paper>/<key>.json``; :func:`run_together`
trains with the trainer it is handed and writes, atomically, one envelope for every family::

    {key, profile, config, environment, finished, wall_time_s, peak_memory_mb,
     peak_memory_kind, diverged, **result}

(and :data:`RECEIVED` in a record made on another machine). No method or trainer is imported here,
so the plotting layer can read records without the runner. More: docs/records-and-claims.md.
"""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import subprocess
import tempfile
import time
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import torch
from tqdm.auto import tqdm

from . import __version__
from .config import (check_device_name, check_paper, check_record_profile, project_root, registered_data_digest,
                     resolve_device, results_dir)
from .errors import ConfigError, DiskSpaceError, DivergenceError, RecordWriteError
from . import files as _files
from .files import TMP_MARK, clean_stale_tmp
from .training import FAMILIES

#: Envelope fields the run loop writes; a trainer's result may not use these names (except
#: ``wall_time_s`` and ``diverged``, which a trainer that resumes or stops early reports itself).
ENVELOPE: tuple[str, ...] = ("key", "profile", "config", "environment", "finished", "wall_time_s",
                             "peak_memory_mb", "peak_memory_kind", "diverged")
#: The mark a record made on another machine carries once :func:`vflkit.ops.windows.receive` took it
#: in (not part of the envelope, key or config): ``{"from": <machine>, "at": <as "finished" is written>}``.
RECEIVED = "received"


class Run(Protocol):
    """What the record store needs of a run config (a :class:`~vflkit.config.KeyedRun` gives
    ``key`` and ``to_dict``)."""

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


def git_state() -> dict[str, Any]:
    """The checkout's commit and whether vflkit's own files differ from it (``vflkit_modified``:
    a run made with uncommitted changes to the package names a commit whose code it did not run)."""
    here = Path(__file__).resolve().parent
    out: dict[str, Any] = {}
    if os.environ.get("VFLKIT_GIT_COMMIT"):
        # a copy of the tree without .git (e.g. shipped to a rented GPU) names its commit here;
        # whoever ships it vouches that the copy is that commit's vflkit/
        return {"git_commit": os.environ["VFLKIT_GIT_COMMIT"],
                "vflkit_modified": os.environ.get("VFLKIT_GIT_MODIFIED", "1") != "0"}
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


def machine_info(device: torch.device) -> dict[str, str]:
    """The machine part of :func:`environment_info` (it sets a run's speed as well as its numbers)."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return {"device_name": name, "cpu": _cpu_name(), "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def environment_info(device: torch.device) -> dict[str, Any]:
    """Device, CPU, library versions and the code's commit, for the record. The CPU and the
    instruction set PyTorch dispatches to (``cpu_capability``; a VM may name its CPU only "AMD
    EPYC") are part of it because kernels chosen per instruction set round differently, so one
    seeded run differs between CPUs; pinning it (``ATEN_CPU_CAPABILITY``, ``ONEDNN_MAX_CPU_ISA``,
    recorded when set) reproduces a record on a CPU that has more."""
    import numpy
    import torchvision

    info: dict[str, Any] = {"device": str(device), **machine_info(device), "torch_threads": torch.get_num_threads(),
                            "python": platform.python_version(), "torch": torch.__version__,
                            "torchvision": torchvision.__version__, "numpy": numpy.__version__, "vflkit": __version__}
    if os.environ.get("ONEDNN_MAX_CPU_ISA"):
        info["onednn_max_cpu_isa"] = os.environ["ONEDNN_MAX_CPU_ISA"]
    if device.type == "cuda":
        # TF32 rounds matmul/convolution inputs to 10 mantissa bits on Ampere and later; PyTorch
        # allows it for convolutions by default, not for matmuls. Recorded, not changed: whether
        # it moves results beyond seed noise has not been measured here.
        info["tf32"] = {"matmul": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}
    info.update(git_state())
    return info


# --------------------------------------------------------------------------- the store


def record_path(run: Run, profile: str, root: str | Path | None = None) -> Path:
    """Where the record of ``run`` under ``profile`` lives: ``<root>/<profile>/<paper>/<key>.json``."""
    root = Path(root).expanduser() if root is not None else results_dir()
    return root / check_record_profile(profile) / check_paper(run.paper) / f"{run.key}.json"


def checkpoint_path(record: Path) -> Path:
    """Where a run's checkpoint lives: beside its record (``<key>.ckpt.pt``); it is never
    committed and is deleted once the record is written."""
    return record.with_name(record.stem + ".ckpt.pt")


class BadRecord(ConfigError):
    """A record file that is not the record of the run asked for (unreadable, not JSON, its
    envelope incomplete, or another run's key, config or profile)."""


def _canonical(value: Any) -> Any:
    return json.loads(json.dumps(value, default=json_default, sort_keys=True))


def _same_config(run: Run, config: Any) -> bool:
    """Whether a record's ``config`` is ``run``'s: rebuilt through the run's class where it has
    ``from_dict`` (so fields added since, at their defaults, still match), else compared as is."""
    from_dict = getattr(type(run), "from_dict", None)
    try:
        if from_dict is not None:
            return _canonical(from_dict(config).to_dict()) == _canonical(run.to_dict())
        return _canonical(config) == _canonical(run.to_dict())
    except Exception:  # a config the class refuses is not this run's
        return False


#: A record's final scores, one of which every trainer's result holds (the split, multi-owner and
#: one-shot trainers' ``final``, the tiles trainer's ``final_accuracy``): a file with the
#: envelope but neither is not a finished run's record (a hand edit, another tool's file).
FINAL_FIELDS: tuple[str, ...] = ("final", "final_accuracy")


def read_record(path: Path) -> dict[str, Any]:
    """The record at ``path`` if it is a whole record (valid JSON, the whole envelope and a final
    score), else :class:`BadRecord` saying what is wrong with it."""
    try:
        rec = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise BadRecord(f"{path} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRecord(f"{path} cannot be read ({exc})") from None
    if not isinstance(rec, dict):
        raise BadRecord(f"{path} holds a JSON {type(rec).__name__}, not a record")
    missing = [f for f in ENVELOPE if f not in rec]
    if missing:
        raise BadRecord(f"{path} lacks the record fields {missing}")
    if not any(f in rec for f in FINAL_FIELDS):
        raise BadRecord(f"{path} lacks the run's final scores ({' or '.join(FINAL_FIELDS)}): "
                        "not a finished run's record")
    if RECEIVED in rec:
        problem = received_problem(rec[RECEIVED])
        if problem:
            raise BadRecord(f"{path}: its {RECEIVED!r} mark {problem}")
    return rec


def received_problem(mark: Any) -> str | None:
    """What is wrong with a record's :data:`RECEIVED` mark, or None when it names a machine and a time."""
    if not isinstance(mark, dict) or set(mark) != {"from", "at"}:
        return f"must be {{'from': <machine>, 'at': <time>}}, got {mark!r}"
    if not isinstance(mark["from"], str) or not mark["from"].strip():
        return f"names no machine it came from ({mark['from']!r})"
    try:
        datetime.strptime(mark["at"], "%Y-%m-%dT%H:%M:%S%z")
    except (TypeError, ValueError):
        return f"gives no time it was received ({mark['at']!r}, not like 2026-11-26T00:00:00+0000)"
    return None


def record_problem(path: str | Path, *, key: str | None = None, profile: str | None = None) -> str | None:
    """What is wrong with the record at ``path`` (``"no record"`` when there is no file), or None
    when it is a whole record (of ``key`` and ``profile`` where given): the one test of "recorded"
    where the run config is not at hand (:func:`check_record` adds the config)."""
    path = Path(path)
    if not path.exists():
        return "no record"
    try:
        rec = read_record(path)
    except BadRecord as exc:
        return str(exc)
    if key is not None and rec["key"] != key:
        return f"{path} holds the record of key {rec['key']!r}, not {key!r}"
    if profile is not None and rec["profile"] != profile:
        return f"{path} is a record of profile {rec['profile']!r}, not {profile!r}"
    return None


def is_valid_record(path: str | Path, *, key: str | None = None, profile: str | None = None) -> bool:
    """Whether ``path`` holds a whole record (:func:`record_problem` finds nothing wrong)."""
    return record_problem(path, key=key, profile=profile) is None


def check_record(path: Path, run: Run, profile: str) -> dict[str, Any]:
    """The record at ``path`` if it is ``run``'s record under ``profile``, else :class:`BadRecord`
    saying what is wrong with it (never a bare JSONDecodeError)."""
    rec = read_record(path)
    if rec["key"] != run.key:
        raise BadRecord(f"{path} holds the record of key {rec['key']!r}, not of this run ({run.key!r})")
    if rec["profile"] != profile:
        raise BadRecord(f"{path} is a record of profile {rec['profile']!r}, not {profile!r}")
    if not _same_config(run, rec["config"]):
        raise BadRecord(f"{path} holds another run's config under this run's key")
    return rec


def move_aside(path: Path, reason: str, *, stacklevel: int = 2) -> Path:
    """Move a file that is not a record to ``<name>.bad`` (:func:`vflkit.files.move_aside`) with a
    warning that the run is recomputed."""
    bad = _files.move_aside(path, ".bad")
    warnings.warn(f"{reason}; moved it to {bad.name} and recomputing the run", stacklevel=stacklevel + 1)
    return bad


def load_record(run: Run, profile: str, root: str | Path | None = None) -> dict[str, Any] | None:
    """The finished record of ``run``, or None; a file there that is not its record is a
    :class:`BadRecord` error naming the file."""
    path = record_path(run, profile, root)
    if not path.exists():
        return None
    try:
        return check_record(path, run, profile)
    except BadRecord as exc:
        raise BadRecord(f"{exc}; delete it (or move it aside) and rerun to remake it") from None


def record_roots() -> list[Path]:
    """Where recorded runs are looked for: ``VFLKIT_RESULTS``, then the project's (committed) ``results/``."""
    return list(dict.fromkeys([results_dir(), project_root() / "results"]))


def load_available(runs: Iterable[Run], *, profile: str) -> list[dict[str, Any]]:
    """The records that exist for ``runs`` (each from the first of :func:`record_roots` that has it, checked by
    :func:`check_record`), the missing skipped; nothing is trained."""
    check_record_profile(profile)
    out = []
    for run in runs:
        for root in record_roots():
            path = record_path(run, profile, root)
            if path.exists():
                out.append(check_record(path, run, profile))
                break
    return out


def by_key(records: Iterable[dict[str, Any]] | Mapping[str, dict[str, Any]]) -> Mapping[str, dict[str, Any]]:
    """``records`` by their run's key (records by key already are returned as they are)."""
    return records if isinstance(records, Mapping) else {r["key"]: r for r in records}


def recorded(runs: Iterable[Run], records: Iterable[dict[str, Any]] | Mapping[str, dict[str, Any]]
             ) -> list[tuple[Any, dict[str, Any]]]:
    """(run, record) for each of ``runs`` that has one in ``records`` (a list, or by key), in the runs' order."""
    rec = by_key(records)
    return [(run, rec[run.key]) for run in runs if run.key in rec]


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` through a temporary file, flushed to disk before the rename
    that publishes it: a reader never sees half a record, even after a crash."""
    _files.write_json(path, data, compact=True)


def json_default(obj: Any) -> Any:
    """numpy and torch scalars as Python numbers."""
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


# --------------------------------------------------------------------------- the run loop


def _reset_peak_rss() -> bool:
    """Reset this process's peak resident set size (Linux's VmHWM), so the next reading is this
    run's alone; False where the kernel does not offer it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_rss_mb() -> float | None:
    """VmHWM of this process in MiB (None where /proc does not give it)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmHWM:\s+(\d+)\s+kB", status, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else None


def _peak_memory(device: torch.device, rss_reset: bool = False) -> tuple[float, str]:
    """This run's peak memory and what it measures: CUDA's allocated peak; on a CPU the process's
    peak resident set since the run started (where ``rss_reset``), else over its lifetime."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    peak = _peak_rss_mb() if rss_reset else None
    if peak is not None:
        return peak, "process_peak_rss_during_run"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "process_max_rss"


def commit_date(commit: str) -> datetime:
    """The committer date of ``commit`` in this checkout (for ``recompute_before``)."""
    here = Path(__file__).resolve().parent
    if not isinstance(commit, str) or not commit.strip() or commit.startswith("-"):
        raise ConfigError(f"recompute_before must be a commit hash or tag, got {commit!r}")
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%cI", commit, "--"], cwd=here,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ConfigError(f"recompute_before={commit!r} needs git to date the commit ({exc})") from None
    if out.returncode != 0 or not out.stdout.strip():
        raise ConfigError(f"recompute_before={commit!r} is not a commit of this checkout; "
                          "give a commit hash or tag that `git log` knows")
    return datetime.fromisoformat(out.stdout.strip())


def older_than(rec: dict[str, Any], when: datetime) -> bool:
    """Whether ``rec`` was finished before ``when`` (an undatable record counts as older)."""
    try:
        return datetime.strptime(rec["finished"], "%Y-%m-%dT%H:%M:%S%z") < when
    except (TypeError, ValueError):
        return True


#: Free space a run needs in its results folder before it starts: its record (at most a few
#: MiB) and its checkpoints (about 1 MiB for VFedMH's LeNets; larger models' checkpoints check
#: their own size again before each write, :func:`vflkit.training.checkpoint.save`).
MIN_FREE_BYTES = 64 * 2**20


def _check_writable(folder: Path, what: str = "a run") -> None:
    """A ConfigError naming ``folder`` unless records can be written there, and a
    :class:`~vflkit.errors.DiskSpaceError` unless it has :data:`MIN_FREE_BYTES` free."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # named like a temporary of this process, so that a kill right here leaves nothing
        # clean_stale_tmp would not remove
        probe = folder / f".write-probe{TMP_MARK}{os.getpid()}-0"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise _files.not_writable(folder, exc) from None
    _files.check_free_space(folder, MIN_FREE_BYTES, what)


def _write_record(path: Path, record: dict[str, Any], run: Run, profile: str) -> None:
    """Write a finished run's record; where that fails, write it under the temporary folder and
    raise a :class:`~vflkit.errors.RecordWriteError` that carries it and says where it is."""
    text = _files.dumps(record, compact=True)
    try:
        # the space the record takes, and a margin for the file system's own blocks
        _files.check_free_space(path.parent, len(text.encode()) + 2**20, f"the record of run {run.key}")
        write_json_atomic(path, record)
        return
    except OSError as exc:
        reason = str(exc) if isinstance(exc, DiskSpaceError) else f"{type(exc).__name__}: {exc}"
        failed = exc
    fallback = Path(tempfile.gettempdir()) / "vflkit-unsaved" / profile / run.paper / path.name
    try:
        fallback.parent.mkdir(parents=True, exist_ok=True)
        _files.write_json(fallback, record, compact=True)
    except OSError as exc:
        raise RecordWriteError(
            f"the run {run.key} finished but its record could not be written to {path} ({reason}), nor to "
            f"{fallback} ({exc.strerror or exc}); the record is in this error's .record: save it with "
            "vflkit.files.write_json(path, err.record)", record=record) from failed
    raise RecordWriteError(
        f"the run {run.key} finished but its record could not be written to {path} ({reason}); it was saved "
        f"to {fallback} instead: move that file to {path} once there is room (nothing needs retraining)",
        record=record, saved_to=str(fallback)) from failed


def _lookup(run: Run, *, profile: str, results: str | Path | None, force: bool, on_divergence: str,
            recompute_after: datetime | None) -> tuple[Path, dict[str, Any] | None]:
    """The record path of ``run`` and its reusable record, or None if it must be trained: a file
    that is not the run's record is moved aside (``.bad``) with a warning, one older than
    ``recompute_after`` is not reused, a diverged one is a DivergenceError under "raise". A
    dataset of your own is digested as it is now: one edited in place since is another run."""
    dataset = getattr(run, "dataset", None)
    if isinstance(dataset, str):
        registered_data_digest(dataset, recheck=True)
    path = record_path(run, profile, results)
    if path.parent.is_dir():
        clean_stale_tmp(path.parent)
    if force or not path.exists():
        return path, None
    try:
        rec = check_record(path, run, profile)
    except BadRecord as exc:
        move_aside(path, str(exc), stacklevel=4)  # the warning points at the caller of run_one
        return path, None
    if recompute_after is not None and older_than(rec, recompute_after):
        return path, None
    if rec.get("diverged") and on_divergence == "raise":
        where = rec["diverged"].get("message", rec["diverged"]) if isinstance(rec["diverged"], dict) else rec["diverged"]
        raise DivergenceError(
            f"the record {path} is of a run that diverged ({where}), made with on_divergence='record'; "
            "pass on_divergence='record' to use it, or force=True to recompute it")
    return path, rec


#: The results version of each protocol family (``environment["results_version"]`` of its records): raised
#: by one, by hand, in the commit that changes what its runs compute (docs/profiles-and-scheduler.md).
RESULTS_VERSION: dict[str, int] = {"split": 1, "multi_owner": 1, "one_shot": 1, "tiles": 1}
#: The version of the records made before ``results_version`` was recorded, and of a run whose
#: class is no family's (a run class of your own).
FIRST_RESULTS_VERSION = 1


def run_family(run: Run) -> str | None:
    """The protocol family (:data:`vflkit.training.FAMILIES`) whose run class ``run`` is, or
    None for a run class of no family."""
    spec = f"{type(run).__module__}:{type(run).__qualname__}"
    return next((name for name, fam in FAMILIES.items() if fam.run_class == spec), None)


def results_version(run: Run) -> int:
    """The current :data:`RESULTS_VERSION` of ``run``'s family (:data:`FIRST_RESULTS_VERSION` for
    a run class of no family)."""
    return RESULTS_VERSION.get(run_family(run) or "", FIRST_RESULTS_VERSION)


def recorded_results_version(rec: dict[str, Any]) -> int:
    """The results version a record was made at (:data:`FIRST_RESULTS_VERSION` before the field)."""
    return int((rec.get("environment") or {}).get("results_version", FIRST_RESULTS_VERSION))


def _warn_other_code(reused: list[tuple[Run, dict[str, Any]]]) -> None:
    """One warning for the reused records this code may not compute: those of another
    :data:`RESULTS_VERSION` than their family's now, and those made with uncommitted changes to
    ``vflkit/`` (others are reused silently: docs/profiles-and-scheduler.md)."""
    versions: dict[tuple[str, int, int], list[str]] = {}
    modified: list[str] = []
    for run, rec in reused:
        now, made = results_version(run), recorded_results_version(rec)
        if made != now:
            versions.setdefault((run_family(run) or type(run).__name__, made, now), []).append(str(rec.get("key")))
        elif (rec.get("environment") or {}).get("vflkit_modified"):
            modified.append(str(rec.get("key")))
    if not versions and not modified:
        return
    named = [k for keys in versions.values() for k in keys] + modified
    what = [f"{len(keys)} of the {family} family's results version {made} (now {now})"
            for (family, made, now), keys in sorted(versions.items())]
    if modified:
        what.append(f"{len(modified)} made with uncommitted changes to vflkit/")
    warnings.warn(
        f"{len(named)} of {len(reused)} reused records may not be what this code computes ({'; '.join(what)}: "
        f"{', '.join(named[:3])}{', ...' if len(named) > 3 else ''}); they are still used. This warning names only "
        "records of another results version (the family's computation changed since) or made from uncommitted "
        "code. Pass recompute_before=<commit> (or force=True) to remake them", stacklevel=3)


def run_one(run: Run, *, train: Trainer, profile: str, device: str | torch.device = "auto",
            results: str | Path | None = None, force: bool = False, progress: bool = True,
            on_divergence: str = "raise", deadline: float | None = None,
            recompute_before: str | None = None) -> dict[str, Any]:
    """Train ``run`` with ``train`` (or load its finished record) and return the record.
    ``on_divergence``: "raise" stops at a trainer's DivergenceError (and refuses a diverged record),
    "record" records where the run diverged; ``deadline`` (a ``time.time()``): a trainer that
    checkpoints stops before it (:class:`~vflkit.errors.BudgetExhausted`); ``recompute_before`` (a
    commit) recomputes the records finished before its date. Resuming, reuse: docs/records-and-claims.md."""
    _check_on_divergence(on_divergence)
    after = commit_date(recompute_before) if recompute_before is not None else None
    reused: list[tuple[Run, dict[str, Any]]] = []
    alone = _alone(train, progress=progress, on_divergence=on_divergence, deadline=deadline)
    rec = run_together([run], train_all=alone, profile=profile, device=device, results=results, force=force,
                       on_divergence=on_divergence, recompute_after=after, reused=reused)[0]
    _warn_other_code(reused)
    return rec


def _check_on_divergence(on_divergence: str) -> None:
    if on_divergence not in ("raise", "record"):
        raise ConfigError(f"Invalid on_divergence {on_divergence!r}; choose raise or record")


def _alone(train: Trainer, **options: Any) -> GroupTrainer:
    """``train`` as a :data:`GroupTrainer` of one run, called with ``options`` (progress, on_divergence, deadline)."""
    return lambda todo, dev, checkpoints: [train(todo[0], device=dev, checkpoint=checkpoints[0], **options)]


#: Several runs trained by one call (the packed trainer): the runs, the device and each run's
#: checkpoint path in; their results, in the runs' order, out.
GroupTrainer = Callable[[list[Run], torch.device, list[Path]], Sequence[dict[str, Any]]]


def run_together(runs: Sequence[Run], *, train_all: GroupTrainer, profile: str, device: str | torch.device = "auto",
                 results: str | Path | None = None, force: bool = False, on_divergence: str = "raise",
                 recompute_after: datetime | None = None,
                 reused: list[tuple[Run, dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """The records of ``runs``, in their order: those recorded are loaded (and appended to
    ``reused`` with their runs), the others trained by one call of ``train_all`` and each written
    under its own key; a diverged run's final scores (:data:`FINAL_FIELDS`) as NaN. What the runs of
    one call share, and what is refused: docs/records-and-claims.md."""
    _check_on_divergence(on_divergence)
    runs = list(runs)
    paths: dict[str, Path] = {}
    found: dict[str, dict[str, Any]] = {}
    for run in runs:
        paths[run.key], rec = _lookup(run, profile=profile, results=results, force=force,
                                      on_divergence=on_divergence, recompute_after=recompute_after)
        if rec is not None:
            found[run.key] = rec
            if reused is not None:
                reused.append((run, rec))
    todo = [r for r in runs if r.key not in found]
    if not todo:
        return [found[r.key] for r in runs]
    for run in todo:
        _check_writable(paths[run.key].parent, f"run {run.key}")
    dev = resolve_device(device)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    rss_reset = dev.type != "cuda" and _reset_peak_rss()
    checkpoints = [checkpoint_path(paths[r.key]) for r in todo]
    if force:
        for ckpt in checkpoints:
            ckpt.unlink(missing_ok=True)
    # as training starts: the checkout may change while a long run trains on the modules it imported
    environment = environment_info(dev)
    start = time.perf_counter()
    trained = [dict(result) for result in train_all(todo, dev, checkpoints)]
    wall = time.perf_counter() - start
    if len(trained) != len(todo):
        raise RuntimeError(f"the trainer returned {len(trained)} results for {len(todo)} runs")
    # every result is checked before any record is written: no half-written group
    for result in trained:
        clash = sorted(set(result) & ({*ENVELOPE, RECEIVED} - {"wall_time_s", "diverged"}))
        if clash:
            raise RuntimeError(f"the trainer's result uses the envelope's names {clash}")
    peak, kind = _peak_memory(dev, rss_reset)
    for result in (r for r in trained if r.get("diverged")):  # broken models: no score (the history keeps theirs)
        result.update({field: _no_score(result[field]) for field in FINAL_FIELDS if field in result})
    for run, result, ckpt in zip(todo, trained, checkpoints):
        record = {"key": run.key, "profile": profile, "config": run.to_dict(),
                  # what the family's code computes now: a later checkout tells a changed computation by it
                  "environment": {**environment, "results_version": results_version(run)},
                  "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  # a resumed run counts the time before the interruption too (the trainer knows it)
                  "wall_time_s": result.pop("wall_time_s", wall), "peak_memory_mb": peak, "peak_memory_kind": kind,
                  "diverged": result.pop("diverged", None), **result}
        record = json.loads(json.dumps(record, default=json_default))
        _write_record(paths[run.key], record, run, profile)
        ckpt.unlink(missing_ok=True)
        found[run.key] = record
    return [found[r.key] for r in runs]


def _no_score(value: Any) -> Any:
    """``value`` (a final score, or a dict of them, nested) with every number NaN."""
    if isinstance(value, dict):
        return {k: _no_score(v) for k, v in value.items()}
    return float("nan") if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def run_many(runs: Iterable[Run], *, train: Trainer, profile: str, device: str | torch.device = "auto",
             results: str | Path | None = None, progress: bool = True, on_divergence: str = "raise",
             desc: str = "runs", recompute_before: str | None = None,
             needs_gpu: Callable[[Any], bool] | None = None) -> list[dict[str, Any]]:
    """Run every run in order, skipping those with a record; returns their records. Every record
    is looked up and the folders checked for writability before any training. ``needs_gpu`` (a
    study's ``needs_gpu(run)``): off CUDA its runs are not trained (docs/records-and-claims.md)."""
    _check_on_divergence(on_divergence)
    check_record_profile(profile)
    check_device_name(device)
    runs = list(runs)
    after = commit_date(recompute_before) if recompute_before is not None else None
    gpu_here = needs_gpu is None or resolve_device(device).type == "cuda"
    todo, left, elsewhere = [], set(), {}
    for r in runs:
        path, found = _lookup(r, profile=profile, results=results, force=False, on_divergence=on_divergence,
                              recompute_after=after)
        if found is None and not gpu_here and needs_gpu(r):
            # e.g. the committed GPU records while ``results`` points a CPU trial elsewhere
            other = load_available([r], profile=profile)
            if other:
                elsewhere[r.key] = other[0]
            else:
                left.add(r.key)
        elif found is None:
            todo.append(path)
    runs = [r for r in runs if r.key not in left]
    if left and not runs:
        raise ConfigError(
            f"every run ({len(left)}) needs a GPU and none has a record: nothing to train or show on "
            f"{resolve_device(device)}. Run them on a GPU (device='cuda', or `python -m vflkit.study --device "
            "cuda`), or here anyway with `python -m vflkit.study --include-gpu-runs`")
    if left:
        warnings.warn(
            f"{len(left)} of {len(runs) + len(left)} runs need a GPU and have no record: not trained on "
            f"{resolve_device(device)}; the results show the other runs. Train them on a GPU (device='cuda', or "
            "`python -m vflkit.study --device cuda`), or here anyway with `python -m vflkit.study --include-gpu-runs`",
            stacklevel=3)
    for folder in dict.fromkeys(p.parent for p in todo):
        _check_writable(folder)
    reused: list[tuple[Run, dict[str, Any]]] = []
    # a bar only where something trains: a notebook would otherwise keep a "0%" bar of loads
    bar = progress and bool(todo)
    alone = _alone(train, progress=progress, on_divergence=on_divergence, deadline=None)
    out = [elsewhere.get(r.key) or run_together([r], train_all=alone, profile=profile, device=device, results=results,
                                                on_divergence=on_divergence, recompute_after=after, reused=reused)[0]
           for r in tqdm(runs, desc=f"{desc} ({len(runs) - len(todo)} of {len(runs)} already recorded)",
                         disable=not bar)]
    _warn_other_code(reused)
    return out


__all__ = ["ENVELOPE", "FINAL_FIELDS", "FIRST_RESULTS_VERSION", "MIN_FREE_BYTES", "RECEIVED", "RESULTS_VERSION",
           "BadRecord", "GroupTrainer", "Run", "check_record", "is_valid_record", "move_aside", "record_problem",
           "received_problem", "record_roots", "Trainer", "checkpoint_path", "environment_info", "json_default",
           "load_record", "load_available", "record_path", "recorded_results_version", "results_version", "run_family",
           "run_many", "run_one", "run_together", "write_json_atomic", "commit_date", "git_state", "older_than",
           "read_record"]
