"""Run many recorded runs in parallel, within a time budget, on this machine or a dask cluster.

A :class:`Task` is one run: the record it will write (its ``path``) and a picklable function
``fn(payload, device=..., deadline=...)`` that computes and writes that record. The runs of every
study are tasks of this one kind, so one scheduler serves every paper. What it promises (workers
and their threads, the budget, locks, whole records, a dead worker's retry, packs, dask):
docs/profiles-and-scheduler.md, "The scheduler", and docs/scale-out-dask.md.
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import json
import logging
import multiprocessing as mp
import os
import re
import socket
import threading
import time
import uuid
import warnings
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from tqdm.auto import tqdm

from .errors import BudgetExhausted, ConfigError
from .files import not_writable, pid_alive
from .gpu import release_cached_memory

__all__ = ["BudgetExhausted", "Task", "Summary", "schedule", "execute", "execute_pack", "PackCost", "sum_cost_s", "pack_tasks", "use_packs",
           "ends_before", "SAFETY", "MAX_PACK", "GPU_WORKERS", "acquire", "release", "lock_path", "lock_is_stale",
           "lock_stale_reason", "recorded", "status_table", "worker_env", "default_workers", "check_workers"]


@dataclass(frozen=True)
class Task:
    """One run to compute: ``fn(payload, device=, deadline=)`` writes the record at ``path``.
    A pack (:func:`pack_tasks`) is a task with ``members``, its runs: its ``fn`` takes a list of
    their payloads and writes each one's record at its path."""

    key: str
    path: Path
    fn: Callable[..., Any]
    payload: Any
    label: str = ""
    priority: Any = 0  # lower runs first (a number or a tuple; a study's headline table first)
    cost_s: float | None = None  # estimated seconds, for the budget (None: unknown)
    members: tuple["Task", ...] = ()  # a pack's runs (empty: a run)

    @property
    def run_keys(self) -> list[str]:
        """The keys of the runs this task computes: its members', or its own."""
        return [m.key for m in self.members] or [self.key]


@dataclass
class Summary:
    """What a scheduler call did, by task key."""

    recorded: list[str] = field(default_factory=list)  # finished now or found finished
    computed: list[str] = field(default_factory=list)  # of those, computed by this call
    paused: list[str] = field(default_factory=list)  # stopped at the deadline, checkpointed
    pending: list[str] = field(default_factory=list)  # not started: the budget did not allow
    needs_gpu: list[str] = field(default_factory=list)  # not started: a GPU's work, on a CPU (the study's call)
    failed: dict[str, str] = field(default_factory=dict)
    still_locked: dict[str, str] = field(default_factory=dict)  # of pending: still locked by another process (who)
    elapsed_s: float = 0.0
    left_estimated_s: float = 0.0  # the estimated cost of the runs left to compute (those with an estimate)
    left_unestimated: int = 0  # runs left to compute without an estimate

    def __str__(self) -> str:
        text = (f"{len(self.recorded)} recorded ({len(self.computed)} computed now), {len(self.paused)} paused "
                f"at the budget (checkpointed), {len(self.pending)} pending, {len(self.failed)} failed "
                f"in {self.elapsed_s:.0f} s")
        if self.needs_gpu:
            text += f", {len(self.needs_gpu)} left for a GPU"
        if self.still_locked:
            text += f" ({len(self.still_locked)} of the pending still locked by another process)"
        if self.paused or self.pending:
            text += "; run again to continue"
        return text


# --------------------------------------------------------------------------- records


def recorded(task: Task) -> bool:
    """Whether ``task``'s run has a whole record at its path (:func:`vflkit.records.record_problem`);
    a file there that is not one is moved aside (``.bad``, numbered) with a warning."""
    from .records import move_aside, record_problem

    problem = record_problem(task.path, key=task.key)
    if problem is None:
        return True
    if task.path.exists():
        try:
            move_aside(task.path, problem)
        except FileNotFoundError:  # another scheduler moved it first
            pass
    return False


# --------------------------------------------------------------------------- locks

#: A lock's holder refreshes it (its modification time) this often while it computes ...
HEARTBEAT_S = 30.0
#: ... and a lock without a refresh for this long is abandoned, whoever names it: a lost node of
#: a cluster, a stopped process, a pid that now belongs to another process.
LOCK_STALE_S = 10 * 60.0

_held: dict[str, str] = {}  # lock path -> the token this process wrote into it
_held_lock = threading.Lock()
_heartbeat: threading.Thread | None = None


def lock_path(record: Path) -> Path:
    """The lock file of a run: beside its record, never committed."""
    return record.with_name(record.name + ".lock")


@functools.lru_cache(maxsize=1)
def _boot_time() -> float | None:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def process_start(pid: int) -> float | None:
    """When process ``pid`` started, in seconds since the epoch (Linux; None where unknown).
    A pid names one process only from that time on: after a crash, a reboot or a container
    restart the same number may belong to any other process."""
    boot = _boot_time()
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime, in clock ticks since boot
        return None if boot is None else boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def lock_stale_reason(path: Path, *, max_age_s: float = LOCK_STALE_S) -> str | None:
    """Why the lock at ``path`` is stale, or None while it is held, the one judgement of a lock: no
    refresh for ``max_age_s`` (on any host); on this host, its process gone or its pid now another
    process's (one started after the lock was taken); unreadable for over a minute (a lock is
    written whole in microseconds)."""
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return "it is gone"
    except OSError as exc:
        return f"it cannot be read ({exc})"
    try:
        info = json.loads(path.read_text())
        if not isinstance(info, dict):
            raise ValueError("not a JSON object")
    except FileNotFoundError:
        return "it is gone"
    except (OSError, ValueError):
        # being written right now (an empty file for a moment) counts as held, unless old
        return f"it is unreadable and {age:.0f} s old" if age > 60 else None
    if age > max_age_s:
        return f"its holder has not refreshed it for {age:.0f} s"
    if info.get("host") == socket.gethostname():
        pid = info.get("pid")
        if not isinstance(pid, int) or isinstance(pid, bool) or not pid_alive(pid):
            return f"its process {pid} is gone"
        started = process_start(pid)
        if started is not None:
            taken = info.get("started", info.get("time"))
            # the holder started before it took the lock; 2 s for the boot time's rounding
            if not isinstance(taken, (int, float)) or (abs(started - taken) > 2 if "started" in info
                                                        else started > taken + 2):
                return f"its pid {pid} belongs to another process now"
    return None


def lock_is_stale(path: Path, *, max_age_s: float = LOCK_STALE_S) -> bool:
    """True when the lock is stale (:func:`lock_stale_reason`)."""
    return lock_stale_reason(path, max_age_s=max_age_s) is not None


def lock_holder(path: Path) -> str:
    """Who holds a lock, for a message: ``pid 123 on host h, refreshed 12 s ago``."""
    try:
        info = json.loads(path.read_text())
        age = time.time() - path.stat().st_mtime
        return f"pid {info.get('pid')} on host {info.get('host')}, refreshed {age:.0f} s ago"
    except (OSError, ValueError, AttributeError):
        return "an unreadable lock"


def _refresh_held() -> None:
    """Refresh every lock this process holds (its mtime), each only while it is still ours."""
    with _held_lock:
        held = dict(_held)
    for name, token in held.items():
        try:
            if json.loads(Path(name).read_text()).get("token") == token:
                os.utime(name)
        except (OSError, ValueError, AttributeError):
            pass


def _beat() -> None:
    while True:
        time.sleep(HEARTBEAT_S)
        _refresh_held()


def _start_heartbeat() -> None:
    global _heartbeat
    with _held_lock:
        if _heartbeat is None or not _heartbeat.is_alive():
            _heartbeat = threading.Thread(target=_beat, name="vflkit-lock-heartbeat", daemon=True)
            _heartbeat.start()


def _create(path: Path) -> bool:
    """Create the lock at ``path`` if there is none (O_EXCL: of several creators one wins)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    except OSError as exc:
        raise not_writable(path.parent, exc) from None
    token = uuid.uuid4().hex
    with os.fdopen(fd, "w") as f:
        json.dump({"pid": os.getpid(), "host": socket.gethostname(), "time": time.time(),
                   "started": process_start(os.getpid()), "token": token}, f)
    with _held_lock:
        _held[str(path)] = token
    _start_heartbeat()
    return True


def _take_over(path: Path) -> bool:
    """Replace a stale lock with ours; False if another process holds the lock meanwhile.

    Two takers of one stale lock must not both win. A taker first creates a marker
    (``<lock>.takeover``, O_EXCL: one at a time), then judges the lock again and replaces it
    under the marker: a taker delayed since its first judgement finds the previous taker's
    fresh lock and leaves it. A marker left by a taker that died is removed after a minute.
    """
    marker = path.with_name(path.name + ".takeover")
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        try:
            if time.time() - marker.stat().st_mtime > 60:
                marker.unlink(missing_ok=True)
        except OSError:
            pass
        return False
    except OSError as exc:
        raise not_writable(path.parent, exc) from None
    try:
        if lock_stale_reason(path) is None:
            return False
        path.unlink(missing_ok=True)
        return _create(path)
    finally:
        marker.unlink(missing_ok=True)


def acquire(record: Path) -> bool:
    """Take the run's lock; False if another live process holds it. A stale lock
    (:func:`lock_stale_reason`) is taken over, by one process only. While held, the lock is
    refreshed every :data:`HEARTBEAT_S` by a thread of this process. A results folder that
    cannot be written is the ConfigError :func:`vflkit.records.run_one` gives."""
    path = lock_path(record)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise not_writable(path.parent, exc) from None
    if _create(path):
        return True
    if lock_stale_reason(path) is None:
        return False
    return _take_over(path)


def release(record: Path) -> None:
    """Drop the run's lock (only ours: a lock is released by the process that took it)."""
    path = lock_path(record)
    with _held_lock:
        token = _held.pop(str(path), None)
    try:
        info = json.loads(path.read_text())
        if (info.get("token") == token if token is not None else
                info.get("pid") == os.getpid() and info.get("host") == socket.gethostname()):
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


# --------------------------------------------------------------------------- workers


def worker_env(threads: int) -> dict[str, str]:
    """Environment of a worker process: passive OpenMP waiting and a fixed thread count, so that
    ``workers x threads`` stays at the core count (spinning threads burn the cores the others need)."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}


def _init_worker(threads: int, parent: int | None = None) -> None:
    os.environ.update(worker_env(threads))
    import torch

    torch.set_num_threads(threads)
    if parent is not None:
        _exit_with_parent(parent)


def _exit_with_parent(parent: int, poll_s: float = 1.0) -> None:
    """End this worker when the scheduler that started it is gone, rather than train on unattended
    with code the checkout may change under it; its checkpoint and stale lock let the run resume."""
    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os._exit(75)  # EX_TEMPFAIL: nothing was written since the last checkpoint

    threading.Thread(target=watch, name="vflkit-parent-watch", daemon=True).start()


def execute(task: Task, device: str, deadline: float | None, threads: int | None = None) -> tuple[str, str]:
    """Compute one run in this process, under its lock (:func:`execute_pack` of a pack of one).
    Returns (key, status): ``done``, ``recorded`` (found finished), ``locked`` (another process
    computes it), ``paused`` (deadline reached, checkpointed)."""
    return execute_pack(replace(task, members=(task,)), device, deadline, threads)[0]


def execute_pack(task: Task, device: str, deadline: float | None, threads: int | None = None) -> list[tuple[str, str]]:
    """Compute a pack's runs in this process, each under its own lock, as :func:`execute` does
    one run; its members' (key, status), in order. A run found recorded or locked by another
    process is left out of the pack; a lone run left computes alone. A pack the deadline stops
    (checkpointed: :func:`vflkit.training.split.train`) is ``paused``, all its runs."""
    if threads is not None:  # on dask workers: set here, the worker process is long-lived
        _init_worker(threads)
    out: dict[str, str] = {}
    mine: list[Task] = []
    try:
        for m in task.members:
            if recorded(m):
                out[m.key] = "recorded"
            elif not acquire(m.path):
                out[m.key] = "locked"
            elif recorded(m):  # finished between our check and our lock
                release(m.path)
                out[m.key] = "recorded"
            else:
                mine.append(m)
        if len(mine) == 1:
            try:
                mine[0].fn(mine[0].payload, device=device, deadline=deadline)
                out[mine[0].key] = "done"
            except BudgetExhausted:
                out[mine[0].key] = "paused"
        elif mine:
            try:
                task.fn([m.payload for m in mine], device=device, deadline=deadline)
                out.update((m.key, "done") for m in mine)
            except BudgetExhausted:  # the pack checkpointed its runs and stopped, as one run does
                out.update((m.key, "paused") for m in mine)
    finally:
        for m in mine:
            release(m.path)
        release_cached_memory(device)
    return [(m.key, out[m.key]) for m in task.members]


def run_task(task: Task, device: str, deadline: float | None, threads: int | None = None) -> list[tuple[str, str]]:
    """:func:`execute_pack` of a pack, or of a run as a pack of one: each run's (key, status)."""
    return execute_pack(task if task.members else replace(task, members=(task,)), device, deadline, threads)


# --------------------------------------------------------------------------- packs

#: A pack starts only if its estimate times this ends before the deadline: the estimates are a
#: factor 1.5 off for half the runs (:mod:`vflkit.ops.pricing`), and under a budget a pack that
#: pauses goes on unpacked. The launcher plans its windows with the same margin (a time-limited
#: GPU machine's checkpoints are lost with it).
SAFETY = 1.5
#: At most this many runs in one pack (the scheduler's and the launcher's).
MAX_PACK = 8
#: Worker processes per GPU by default: a small-model run leaves most of a GPU idle.
GPU_WORKERS = 8
def ends_before(need_s: float, deadline: float | None) -> bool:
    """Whether work that needs ``need_s`` seconds, started now, ends before ``deadline`` (epoch
    seconds; None: no deadline)."""
    return deadline is None or time.time() + need_s <= deadline


def use_packs(pack: bool | str, device: str) -> bool:
    """Whether the scheduler packs on ``device``: ``pack`` (True or False), or with "auto" on a
    CUDA device only (where it pays: ``python -m vflkit.ops.bench --packed``). Else a ConfigError."""
    if not (pack is True or pack is False or pack == "auto"):
        raise ConfigError(f"Invalid pack {pack!r}; choose True, False or 'auto' (pack on a CUDA device only)")
    return str(device).startswith("cuda") if pack == "auto" else bool(pack)


#: How a pack is priced from its runs' prices (seconds each, None: unknown) and its first run's
#: config: the caller's (:func:`vflkit.ops.pricing.pack_cost_s`); by default their sum, what the
#: runs take one after another.
PackCost = Callable[[Sequence["float | None"], Any], "float | None"]


def sum_cost_s(costs: Sequence[float | None], config: Any = None) -> float | None:
    """A pack's seconds as its runs' one after another; None if one is unknown."""
    return None if not costs or None in costs else float(sum(costs))  # type: ignore[arg-type]


def pack_tasks(tasks: Sequence[Task], *, budgeted: bool = False, max_size: int = MAX_PACK,
               pack_cost: PackCost = sum_cost_s) -> list[Task]:
    """``tasks`` with the runs that :func:`vflkit.training.split.group_packs` groups (a study's
    runs that differ in seed and dataset alone) replaced by one task per pack of at most
    ``max_size``, at the place of its first run: its fn :func:`vflkit.training.split.compute_pack`,
    its ``cost_s`` ``pack_cost`` of its runs', its priority its first run's. A run with a
    checkpoint packs only with runs checkpointed after the same epoch or round; one whose
    checkpoint cannot be read is not packed, nor, with ``budgeted``, one without an estimate."""
    from .records import checkpoint_path
    from .training import split as packed
    from .training.checkpoint import saved_progress

    # one pack writes one profile, one folder; its runs resume from one epoch or round (None: none)
    by_place: dict[tuple[str, str, Any], list[tuple[Any, Task]]] = {}
    for t in tasks:
        if t.members or not isinstance(t.payload, dict) or (budgeted and t.cost_s is None):
            continue
        done = None
        if checkpoint_path(t.path).exists():
            done = saved_progress(checkpoint_path(t.path))
            if done is None:  # unreadable: alone, the run moves it aside and says so
                continue
        config = packed.packable_config(str(t.payload.get("family", "")), t.payload.get("config") or {})
        if config is not None and "profile" in t.payload and "results" in t.payload:
            by_place.setdefault((t.payload["profile"], str(t.payload["results"]), done), []).append((config, t))
    pack_of: dict[str, Task] = {}  # run key -> its pack
    for candidates in by_place.values():
        task_of = {id(c): t for c, t in candidates}
        groups, _ = packed.group_packs([c for c, _ in candidates], max_size=max_size)
        for group in groups:
            if len(group) < 2:
                continue
            members = tuple(task_of[id(c)] for c in group)
            pack = Task(key=f"pack:{members[0].key}x{len(members)}", path=members[0].path, fn=packed.compute_pack,
                        payload=[m.payload for m in members], priority=members[0].priority,
                        label=f"{members[0].label} and {len(members) - 1} more runs, packed",
                        cost_s=pack_cost([m.cost_s for m in members], group[0]), members=members)
            pack_of.update((m.key, pack) for m in members)
    out: list[Task] = []
    for t in tasks:
        pack = pack_of.get(t.key)
        if pack is None:
            out.append(t)
        elif pack.members[0] is t:
            out.append(pack)
    return out


def default_workers(device: str) -> int:
    """One per core on a CPU (each with one torch thread: measured faster than fewer,
    multi-threaded workers for these small models); 8 per GPU, where a small-model run leaves
    most of the GPU idle between its kernel launches."""
    if str(device).startswith("cuda"):
        import torch

        return GPU_WORKERS * max(1, torch.cuda.device_count())
    return max(1, os.cpu_count() or 1)


def check_workers(workers: Any, device: str, executor: str = "local") -> int:
    """The number of parallel runs: ``workers``, or :func:`default_workers` for None. Anything
    but a whole number >= 1 is a ConfigError (0 included: say None for the default). More
    than four times the default on this machine (its own pool or dask LocalCluster) only
    oversubscribes it: capped there, with a warning. A remote dask cluster is not capped."""
    if workers is None:
        return default_workers(device)
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be a whole number >= 1 (or None for one per core, 8 per GPU), got {workers!r}")
    cap = 4 * default_workers(device)
    if executor in ("local", "serial", "dask") and workers > cap:
        warnings.warn(f"workers={workers} would oversubscribe this machine; using {cap} "
                      f"(4 x the default of {default_workers(device)} for {device})", stacklevel=3)
        return cap
    return workers


def _dask_client(executor: str, workers: int, threads: int):
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError as exc:  # pragma: no cover - dask is a dependency
        raise ConfigError("executor='dask' needs dask.distributed: pip install 'dask[distributed]'") from exc
    if executor == "dask":
        # the dashboard (bokeh, pinned) on a free port, so that two studies never clash over one
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=":0", env=worker_env(threads))
        client = Client(cluster)
    else:
        cluster = None
        try:
            client = Client(executor, timeout=30)
        except (OSError, TimeoutError) as exc:  # a wrong address: say which and what to check
            raise ConfigError(f"could not reach a dask scheduler at {executor!r} ({exc}); check the address "
                              "(tcp://host:port of a running `dask scheduler`), or use --executor local") from None
    print(f"[scheduler] dask dashboard: {dashboard_link(client)}", flush=True)
    return client, cluster


def dashboard_link(client: Any) -> str:
    """The dashboard of ``client``'s scheduler, a LocalCluster's or a remote ``tcp://`` one's:
    dask's own link (the scheduler's host and the port its dashboard serves), or a sentence
    saying there is none (a scheduler started without bokeh, or with ``--no-dashboard``)."""
    try:
        services = client.scheduler_info().get("services", {})
    except Exception:  # noqa: BLE001 - an answer about a link must not end a study
        services = {}
    if "dashboard" not in services:
        return "none (the scheduler serves no dashboard: start it with bokeh installed)"
    return client.dashboard_link


def dask_key(task: Task) -> str:
    """The dask key of ``task``: its label as a name the dashboard groups by (dask's
    ``key_split`` keeps the words before the hex digest), then the run's key, so the task
    stream and the progress bars name the runs (``vfedmh_c_vfl_mnist_0-<key>``), not ``run``."""
    name = re.sub(r"[^A-Za-z0-9]+", "_", task.label or "run").strip("_").lower() or "run"
    return f"{name[:80]}-{task.key}"


#: distributed's loggers that report the expected end of a cluster as trouble: a worker process
#: that takes longer than the nanny's 4 s to exit after importing torchvision ("still alive
#: after 4.0 seconds, killing"), a worker's heartbeat racing the scheduler's close
#: (CommClosedError). Quiet while a finished study closes its cluster, never while it runs.
_SHUTDOWN_LOGGERS = ("distributed", "distributed.nanny", "distributed.core", "distributed.worker",
                     "distributed.scheduler", "distributed.comm", "distributed.batched", "distributed.client",
                     "distributed.deploy", "distributed.process")


def _quiet_dask_logs() -> None:
    """Silence :data:`_SHUTDOWN_LOGGERS` in this process (run in each worker before it closes)."""
    for name in _SHUTDOWN_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def close_dask(client: Any, cluster: Any) -> None:
    """Close a study's dask client, then its LocalCluster (workers before the scheduler), with
    the expected shutdown messages silenced: a LocalCluster's workers are ours and go quiet
    first; a remote cluster's workers are not ours, so only this process's client is quietened."""
    saved = {name: logging.getLogger(name).level for name in _SHUTDOWN_LOGGERS}
    try:
        if cluster is not None:
            try:
                client.run(_quiet_dask_logs)
            except Exception:  # noqa: BLE001 - a worker already gone needs no quieting
                pass
        _quiet_dask_logs()
        client.close()
        if cluster is not None:
            cluster.close()
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


# --------------------------------------------------------------------------- the scheduler


def schedule(tasks: Iterable[Task], *, device: str = "cpu", workers: int | None = None, threads: int = 1,
             budget_minutes: float | None = None, executor: str = "local", progress: bool = True, poll_s: float = 2.0,
             runs_per_worker: int | None = None, lock_wait_minutes: float | None = None, pack: bool | str = "auto",
             pack_cost: PackCost = sum_cost_s) -> Summary:
    """Compute every task without a record, in priority order, ``workers`` at a time.

    ``pack``: train the runs that differ in seed and dataset alone as packs (:func:`pack_tasks`);
    "auto" on a CUDA device only (:func:`use_packs`), priced by ``pack_cost`` from its runs'
    ``cost_s``. ``runs_per_worker``: runs a local worker computes before it is replaced (``None``:
    no limit). ``executor``: ``"local"`` (a process pool here), ``"serial"`` (this process, one at
    a time), ``"dask"`` (a dask LocalCluster) or a dask scheduler address. A run another process
    holds the lock of is waited for while that lock stays fresh, with ``lock_wait_minutes`` at
    most that long, its holder reported every few minutes. The runs of a local worker that dies
    are retried once in a fresh pool; a run whose retry dies too is reported failed.
    """
    if budget_minutes is not None and not budget_minutes > 0:
        raise ConfigError(f"budget_minutes must be a positive number of minutes, got {budget_minutes!r}")
    if lock_wait_minutes is not None and not lock_wait_minutes >= 0:
        raise ConfigError(f"lock_wait_minutes must be a number of minutes >= 0, got {lock_wait_minutes!r}")
    if runs_per_worker is not None and not (isinstance(runs_per_worker, int) and runs_per_worker >= 1):
        raise ConfigError(f"runs_per_worker must be a whole number >= 1 or None, got {runs_per_worker!r}")
    if executor not in ("local", "serial", "dask") and not str(executor).startswith(("tcp://", "tls://", "inproc://")):
        raise ConfigError(f"Invalid executor {executor!r}; choose local, serial, dask or a dask scheduler address")
    workers = check_workers(workers, device, executor)
    packing = use_packs(pack, device)
    start = time.time()
    deadline = start + budget_minutes * 60 if budget_minutes is not None else None
    tasks = sorted({t.key: t for t in tasks}.values(), key=lambda t: t.priority)
    summary = Summary()
    todo = []
    for t in tasks:
        if recorded(t):
            summary.recorded.append(t.key)
        else:
            todo.append(t)
    if packing:
        todo = pack_tasks(todo, budgeted=deadline is not None, pack_cost=pack_cost)
    by_key = {t.key: t for t in tasks} | {t.key: t for t in todo if t.members}
    bar = tqdm(total=len(tasks), initial=len(summary.recorded), desc="runs", disable=not progress)
    waiting: list[Task] = []  # locked by another process: wait for its record

    def fits(t: Task) -> bool:
        # Past the deadline nothing starts, estimated or not: a run without an estimate would
        # still train one epoch before its deadline check pauses it, and every such run would
        # overrun the budget by an epoch (a C-VFL epoch of the paper profile can take an hour).
        if deadline is None:
            return True
        now = time.time()
        if t.members:  # a pack that pauses goes on unpacked: it starts only if it ends in time, with a margin
            return now < deadline and t.cost_s is not None and ends_before(t.cost_s * SAFETY, deadline)
        return now < deadline and (t.cost_s is None or now + t.cost_s <= deadline)

    def finish(key: str, status: str) -> None:
        if status in ("done", "recorded"):
            summary.recorded.append(key)
            if status == "done":
                summary.computed.append(key)
            bar.update(1)
        elif status == "paused":
            summary.paused.append(key)
        elif status == "locked":
            waiting.append(by_key[key])

    def postfix(running: int, pending: int = 0) -> None:
        bar.set_postfix(running=running, pending=pending, waiting=len(waiting), refresh=True)

    def new_pool() -> cf.ProcessPoolExecutor:
        return cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                                      initializer=_init_worker, initargs=(threads, os.getpid()),
                                      max_tasks_per_child=runs_per_worker)

    client = cluster = pool = None
    try:
        if executor == "serial":
            for t in todo:
                if not fits(t):
                    summary.pending.extend(t.run_keys)
                    continue
                for result in run_task(t, device, deadline):
                    finish(*result)
            todo = []
        else:
            generation = 0  # of the local pool: a broken pool is replaced once, by the first run it failed
            retried: set[str] = set()
            if executor == "local":
                pool = new_pool()
                submit = lambda t: pool.submit(run_task, t, device, deadline)  # noqa: E731
            else:
                client, cluster = _dask_client(executor, workers, threads)
                submit = lambda t: client.submit(run_task, t, device, deadline, threads, pure=False, key=dask_key(t))  # noqa: E731
            running: dict[Any, tuple[str, int]] = {}
            queue = list(todo)

            def worker_died(key: str, gen: int, exc: BaseException) -> None:
                nonlocal pool, generation
                if gen == generation:  # its pool is the current one: replace it
                    pool.shutdown(wait=False, cancel_futures=True)
                    pool, generation = new_pool(), generation + 1
                if key in retried:
                    summary.failed.update(dict.fromkeys(by_key[key].run_keys, (
                        f"the worker process computing it died twice (killed, or out of memory?): "
                        f"{type(exc).__name__}: {exc}")))
                else:  # a run in flight when a worker died: maybe the culprit, maybe not; once more
                    retried.add(key)
                    queue.insert(0, by_key[key])

            while queue or running:
                while queue and len(running) < workers:
                    t = queue.pop(0)
                    if not fits(t):
                        summary.pending.extend(t.run_keys)
                        continue
                    try:
                        running[submit(t)] = (t.key, generation)
                    except BrokenProcessPool as exc:  # broke since the last results were read
                        retried.discard(t.key)  # not started: no attempt spent
                        worker_died(t.key, generation, exc)
                postfix(len(running), len(queue))
                if not running:
                    break
                done, _ = cf.wait(list(running), return_when=cf.FIRST_COMPLETED) if pool else _dask_wait(running)
                for fut in done:
                    key, gen = running.pop(fut)
                    try:
                        for result in fut.result():
                            finish(*result)
                    except BrokenProcessPool as exc:
                        worker_died(key, gen, exc)
                    except Exception as exc:  # one broken run (or pack: its runs) must not stop the others
                        summary.failed.update(dict.fromkeys(by_key[key].run_keys, f"{type(exc).__name__}: {exc}"))
            todo = []
        # runs another process was computing: wait for their records, or take over stale locks
        wait_start = last_report = time.time()
        while waiting:
            postfix(0)
            time.sleep(poll_s)
            now = time.time()
            if progress and now - last_report > LOCK_REPORT_S:
                last_report = now
                tqdm.write(f"[scheduler] waiting for {len(waiting)} runs another process computes: " + "; ".join(
                    f"{t.key} ({lock_holder(lock_path(t.path))})" for t in waiting[:5]) + ("; ..." if len(waiting) > 5 else ""))
            for t in list(waiting):
                if recorded(t):
                    waiting.remove(t)
                    finish(t.key, "recorded")
                elif lock_is_stale(lock_path(t.path)):
                    waiting.remove(t)
                    if fits(t):
                        finish(*execute(t, device, deadline))
                    else:
                        summary.pending.append(t.key)
                elif deadline is not None and now > deadline:
                    waiting.remove(t)
                    summary.pending.append(t.key)
                elif lock_wait_minutes is not None and now - wait_start > lock_wait_minutes * 60:
                    waiting.remove(t)
                    summary.pending.append(t.key)
                    summary.still_locked[t.key] = lock_holder(lock_path(t.path))
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if client is not None:
            close_dask(client, cluster)
    summary.elapsed_s = time.time() - start
    return summary


#: How often the scheduler says which runs it waits for, and who holds them.
LOCK_REPORT_S = 120.0


def _dask_wait(running: dict[Any, Any]):
    from dask.distributed import wait

    result = wait(list(running), return_when="FIRST_COMPLETED")
    return result.done, result.not_done


def status_table(tasks: Sequence[Task]):
    """One row per task: label, status (recorded / running: a live lock / broken: not a whole
    record / checkpointed / checkpoint unreadable / pending) and estimated minutes. Nothing is
    moved or written."""
    import pandas as pd

    from .records import checkpoint_path, record_problem

    def of_checkpoint(ckpt: Path) -> str:
        from .training.checkpoint import saved_progress  # torch: only where a checkpoint is there

        return "checkpointed" if saved_progress(ckpt) is not None else "checkpoint unreadable"

    rows = []
    for t in tasks:
        ckpt = checkpoint_path(t.path)
        lock = lock_path(t.path)
        valid = record_problem(t.path, key=t.key) is None
        state = ("recorded" if valid else "running" if lock.exists() and not lock_is_stale(lock)
                 else "broken" if t.path.exists() else of_checkpoint(ckpt) if ckpt.exists() else "pending")
        rows.append({"run": t.label or t.key, "key": t.key, "status": state,
                     "estimated_min": None if t.cost_s is None else round(t.cost_s / 60, 1)})
    return pd.DataFrame(rows, columns=["run", "key", "status", "estimated_min"])
