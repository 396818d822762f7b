"""Run many recorded runs in parallel, within a time budget, on this machine or a dask cluster.

A :class:`Task` is one run: the record it will write (its ``path``) and a picklable function
``fn(payload, device=..., deadline=...)`` that computes and writes that record. The runs of every
study are tasks of this one kind, so one scheduler serves every paper.

- **Parallel.** ``workers`` processes (default: one per core on a CPU, several per GPU) with
  their torch threads and OpenMP wait policy set deliberately (see :func:`worker_env`). A
  worker computes run after run (``runs_per_worker``: ``None``, as many as it is given): a
  fresh process per run spends seconds importing torch and decoding its dataset, as long as many
  quick runs take (README: 403 s against 1174 s on 70 short runs). Each record's peak memory is still its own run's (the process's peak
  resident set is reset when a run starts, see :func:`vflkit.records._reset_peak_rss`).
- **Budget.** With ``budget_minutes`` no run is started after the deadline, nor one that its
  estimated cost says would not finish, and runs in flight get a ``deadline``: they checkpoint
  at the end of the last epoch that fits and stop (:class:`BudgetExhausted`). A later call
  resumes them from their checkpoints.
- **Nothing computed twice.** A run holds a lock file beside its record while it computes; a
  second scheduler (another ``make study``) finding it locked waits for the record instead of
  computing it. A lock whose process is gone (killed, lost machine) is stale and taken over.
- **Scale-out** on dask.distributed: ``executor="dask"`` starts a ``LocalCluster``; any other
  ``"tcp://host:port"`` address connects to a running scheduler (e.g. one dask-jobqueue started
  on SLURM or PBS). Records go to one shared results folder that every worker can write.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from tqdm.auto import tqdm

from .errors import BudgetExhausted, ConfigError
from .files import pid_alive

__all__ = ["BudgetExhausted", "Task", "Summary", "schedule", "execute", "acquire", "release", "lock_path",
           "lock_is_stale", "status_table", "worker_env", "default_workers"]


@dataclass(frozen=True)
class Task:
    """One run to compute: ``fn(payload, device=, deadline=)`` writes the record at ``path``."""

    key: str
    path: Path
    fn: Callable[..., Any]
    payload: Any
    label: str = ""
    priority: Any = 0  # lower runs first (a number or a tuple; a study's headline table first)
    cost_s: float | None = None  # estimated seconds, for the budget (None: unknown)


@dataclass
class Summary:
    """What a scheduler call did, by task key."""

    recorded: list[str] = field(default_factory=list)  # finished now or found finished
    computed: list[str] = field(default_factory=list)  # of those, computed by this call
    paused: list[str] = field(default_factory=list)  # stopped at the deadline, checkpointed
    pending: list[str] = field(default_factory=list)  # not started: the budget did not allow
    needs_gpu: list[str] = field(default_factory=list)  # not started: a GPU's work, on a CPU (the study's call)
    failed: dict[str, str] = field(default_factory=dict)
    elapsed_s: float = 0.0
    left_estimated_s: float = 0.0  # the estimated cost of the runs left to compute (those with an estimate)
    left_unestimated: int = 0  # runs left to compute without an estimate

    def __str__(self) -> str:
        text = (f"{len(self.recorded)} recorded ({len(self.computed)} computed now), {len(self.paused)} paused "
                f"at the budget (checkpointed), {len(self.pending)} pending, {len(self.failed)} failed "
                f"in {self.elapsed_s:.0f} s")
        if self.needs_gpu:
            text += f", {len(self.needs_gpu)} left for a GPU"
        if self.paused or self.pending:
            text += "; run again to continue"
        return text


# --------------------------------------------------------------------------- locks


def lock_path(record: Path) -> Path:
    """The lock file of a run: beside its record, never committed."""
    return record.with_name(record.name + ".lock")


def lock_is_stale(path: Path, *, max_age_s: float = 7 * 24 * 3600) -> bool:
    """True when the lock's process is gone (same host), or it is unreadable or very old."""
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        # being written right now (an empty file for a moment) counts as held, unless old
        try:
            return time.time() - path.stat().st_mtime > 60
        except OSError:
            return True
    if info.get("host") == socket.gethostname():
        return not pid_alive(int(info.get("pid", -1)))
    return time.time() - float(info.get("time", 0)) > max_age_s


def acquire(record: Path) -> bool:
    """Take the run's lock; False if another live process holds it. A stale lock is taken over."""
    path = lock_path(record)
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not lock_is_stale(path):
                return False
            # rename first so that of two processes taking over, only one removes the lock
            stale = path.with_name(f"{path.name}.stale{os.getpid()}")
            try:
                os.replace(path, stale)
                stale.unlink()
            except OSError:
                return False
            continue
        with os.fdopen(fd, "w") as f:
            json.dump({"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}, f)
        return True
    return False


def release(record: Path) -> None:
    """Drop the run's lock (only ours: a lock is released by the process that took it)."""
    path = lock_path(record)
    try:
        info = json.loads(path.read_text())
        if info.get("pid") == os.getpid() and info.get("host") == socket.gethostname():
            path.unlink()
    except (OSError, ValueError):
        pass


# --------------------------------------------------------------------------- workers


def worker_env(threads: int) -> dict[str, str]:
    """Environment of a worker process.

    Several torch processes on few cores oversubscribe them when OpenMP threads spin-wait for
    work (``OMP_WAIT_POLICY`` active): each process burns the cores the others need. Passive
    waiting plus a fixed thread count per worker keeps ``workers x threads`` at the core count.
    """
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "PASSIVE"}


def _init_worker(threads: int, parent: int | None = None) -> None:
    os.environ.update(worker_env(threads))
    import torch

    torch.set_num_threads(threads)
    if parent is not None:
        _exit_with_parent(parent)


def _exit_with_parent(parent: int, poll_s: float = 1.0) -> None:
    """End this worker when the scheduler that started it is gone (killed, or its terminal
    closed): a pool worker would otherwise train on, unattended, with the code it imported,
    while the checkout may change under it. Its run's checkpoint and stale lock let the next
    scheduler resume the run."""
    import threading

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os._exit(75)  # EX_TEMPFAIL: nothing was written since the last checkpoint

    threading.Thread(target=watch, name="vflkit-parent-watch", daemon=True).start()


def execute(task: Task, device: str, deadline: float | None, threads: int | None = None) -> tuple[str, str]:
    """Compute one task in this process, under its lock. Returns (key, status):
    ``done``, ``recorded`` (found finished), ``locked`` (another process computes it),
    ``paused`` (deadline reached, checkpointed)."""
    if threads is not None:  # on dask workers: set here, the worker process is long-lived
        _init_worker(threads)
    if task.path.exists():
        return task.key, "recorded"
    if not acquire(task.path):
        return task.key, "locked"
    try:
        if task.path.exists():  # finished between our check and our lock
            return task.key, "recorded"
        try:
            task.fn(task.payload, device=device, deadline=deadline)
        except BudgetExhausted:
            return task.key, "paused"
        return task.key, "done"
    finally:
        release(task.path)


def default_workers(device: str) -> int:
    """One per core on a CPU (each with one torch thread: measured faster than fewer,
    multi-threaded workers for these small models); 8 per GPU, where a small-model run leaves
    most of the GPU idle between its kernel launches."""
    if str(device).startswith("cuda"):
        import torch

        return 8 * max(1, torch.cuda.device_count())
    return max(1, os.cpu_count() or 1)


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
        print(f"[scheduler] dask dashboard: {client.dashboard_link}", flush=True)
        return client, cluster
    return Client(executor), None


# --------------------------------------------------------------------------- the scheduler


def schedule(
    tasks: Iterable[Task],
    *,
    device: str = "cpu",
    workers: int | None = None,
    threads: int = 1,
    budget_minutes: float | None = None,
    executor: str = "local",
    progress: bool = True,
    poll_s: float = 2.0,
    runs_per_worker: int | None = None,
) -> Summary:
    """Compute every task without a record, in priority order, ``workers`` at a time.

    ``runs_per_worker``: how many runs a local worker process computes before it is replaced
    (``None``: no limit; ``1``: a fresh process per run).

    ``executor``: ``"local"`` (a process pool here), ``"serial"`` (this process, one at a time:
    debugging), ``"dask"`` (a dask LocalCluster) or a dask scheduler address.
    """
    if budget_minutes is not None and not budget_minutes > 0:
        raise ConfigError(f"budget_minutes must be a positive number of minutes, got {budget_minutes!r}")
    if runs_per_worker is not None and not (isinstance(runs_per_worker, int) and runs_per_worker >= 1):
        raise ConfigError(f"runs_per_worker must be a whole number >= 1 or None, got {runs_per_worker!r}")
    if executor not in ("local", "serial", "dask") and not str(executor).startswith(("tcp://", "tls://", "inproc://")):
        raise ConfigError(f"Invalid executor {executor!r}; choose local, serial, dask or a dask scheduler address")
    start = time.time()
    deadline = start + budget_minutes * 60 if budget_minutes is not None else None
    tasks = sorted({t.key: t for t in tasks}.values(), key=lambda t: t.priority)
    workers = workers or default_workers(device)
    summary = Summary()
    todo = []
    for t in tasks:
        (summary.recorded if t.path.exists() else todo).append(t.key if t.path.exists() else t)
    by_key = {t.key: t for t in tasks}
    bar = tqdm(total=len(tasks), initial=len(summary.recorded), desc="runs", disable=not progress)
    waiting: list[Task] = []  # locked by another process: wait for its record

    def fits(t: Task) -> bool:
        # Past the deadline nothing starts, estimated or not: a run without an estimate would
        # still train one epoch before its deadline check pauses it, and every such run would
        # overrun the budget by an epoch (measured: an hour of C-VFL epochs after a budget).
        if deadline is None:
            return True
        now = time.time()
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

    client = cluster = pool = None
    try:
        if executor == "serial":
            for t in todo:
                if not fits(t):
                    summary.pending.append(t.key)
                    continue
                finish(*execute(t, device, deadline))
            todo = []
        else:
            if executor == "local":
                pool = cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"),
                                              initializer=_init_worker, initargs=(threads, os.getpid()),
                                              max_tasks_per_child=runs_per_worker)
                submit = lambda t: pool.submit(execute, t, device, deadline)  # noqa: E731
            else:
                client, cluster = _dask_client(executor, workers, threads)
                submit = lambda t: client.submit(execute, t, device, deadline, threads, pure=False, key=f"run-{t.key}")  # noqa: E731
            running: dict[Any, str] = {}
            queue = list(todo)
            while queue or running:
                while queue and len(running) < workers:
                    t = queue.pop(0)
                    if not fits(t):
                        summary.pending.append(t.key)
                        continue
                    running[submit(t)] = t.key
                postfix(len(running), len(queue))
                if not running:
                    break
                done, _ = cf.wait(list(running), return_when=cf.FIRST_COMPLETED) if pool else _dask_wait(running)
                for fut in done:
                    key = running.pop(fut)
                    try:
                        finish(*fut.result())
                    except Exception as exc:  # one broken run must not stop the others
                        summary.failed[key] = f"{type(exc).__name__}: {exc}"
            todo = []
        # runs another process was computing: wait for their records, or take over stale locks
        while waiting:
            postfix(0)
            time.sleep(poll_s)
            for t in list(waiting):
                if t.path.exists():
                    waiting.remove(t)
                    finish(t.key, "recorded")
                elif not lock_path(t.path).exists() or lock_is_stale(lock_path(t.path)):
                    waiting.remove(t)
                    if fits(t):
                        finish(*execute(t, device, deadline))
                    else:
                        summary.pending.append(t.key)
                elif deadline is not None and time.time() > deadline:
                    waiting.remove(t)
                    summary.pending.append(t.key)
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    summary.elapsed_s = time.time() - start
    return summary


def _dask_wait(running: dict[Any, str]):
    from dask.distributed import wait

    result = wait(list(running), return_when="FIRST_COMPLETED")
    return result.done, result.not_done


def status_table(tasks: Sequence[Task]):
    """One row per task: label, recorded / running (a live process holds its lock) /
    checkpointed / pending, and its estimated minutes."""
    import pandas as pd

    rows = []
    for t in tasks:
        ckpt = t.path.with_name(t.path.stem + ".ckpt.pt")
        lock = lock_path(t.path)
        state = ("recorded" if t.path.exists() else "running" if lock.exists() and not lock_is_stale(lock)
                 else "checkpointed" if ckpt.exists() else "pending")
        rows.append({"run": t.label or t.key, "key": t.key, "status": state,
                     "estimated_min": None if t.cost_s is None else round(t.cost_s / 60, 1)})
    return pd.DataFrame(rows, columns=["run", "key", "status", "estimated_min"])
