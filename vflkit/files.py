"""Files written whole or not at all: records, checkpoints, tables and figures.

A reader (a notebook, a second study, a resumed run) must never see half a file: a kill
mid-write, or two processes writing the same table at once, would otherwise leave a truncated
or mixed file that later loads as if it were whole. Each file is written to a temporary name
beside it, flushed to disk, then renamed over the target (atomic on POSIX and Windows).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .config import RESULTS_ENV
from .errors import ConfigError, DiskSpaceError

#: Temporary files carry this marker, the writer's pid and thread: ``.<name>.tmp<pid>-<thread>``.
TMP_MARK = ".tmp"


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write ``path``'s content to; on success it is flushed to disk
    and renamed to ``path``, on error removed (the old ``path``, if any, is left untouched)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}-{threading.get_ident()}")
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def dumps(data: Any, *, compact: bool = False) -> str:
    """``data`` as key-sorted JSON: indented, or ``compact`` (no whitespace, as run records are
    written: they travel with the tree)."""
    if compact:
        return json.dumps(data, sort_keys=True, separators=(",", ":"))
    return json.dumps(data, indent=1, sort_keys=True)


def write_json(path: str | Path, data: Any, *, compact: bool = False) -> None:
    """Write ``data`` as key-sorted JSON (:func:`dumps`), atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(dumps(data, compact=compact))


def clean_stale_tmp(folder: str | Path) -> list[Path]:
    """Remove temporary files in ``folder`` left by writers that no longer run (one that cannot be
    removed is left); returns them."""
    removed = []
    for tmp in Path(folder).glob(f".*{TMP_MARK}*"):
        pid = tmp.name.rsplit(TMP_MARK, 1)[-1].split("-")[0]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            continue
        removed.append(tmp)
    return removed


def move_aside(path: str | Path, suffix: str = ".bad") -> Path:
    """Move ``path`` to ``<name><suffix>`` (``.2``, ``.3``, ... when taken: evidence is never
    overwritten, and the name is claimed with a hard link, so two processes cannot pick one);
    returns where it went."""
    path = Path(path)
    for n in range(1, 10_000):
        target = path.with_name(f"{path.name}{suffix}" + (f".{n}" if n > 1 else ""))
        if target.exists():
            continue
        try:
            os.link(path, target)
        except FileExistsError:
            continue
        except OSError:  # a file system without hard links: a plain rename (the name was free)
            os.replace(path, target)
            return target
        path.unlink(missing_ok=True)
        return target
    raise OSError(f"cannot move {path} aside: {suffix} names up to 9999 are taken")


def check_free_space(folder: str | Path, need_bytes: int, what: str) -> None:
    """A :class:`~vflkit.errors.DiskSpaceError` unless ``folder``'s file system has ``need_bytes``
    free for ``what`` (a writability probe alone passes on a full disk)."""
    folder = Path(folder)
    probe = folder
    while not probe.exists() and probe != probe.parent:  # a folder not made yet: its nearest parent
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return  # cannot tell (e.g. a file system that does not say): the write itself will
    if free < need_bytes:
        raise DiskSpaceError(
            f"{what} needs about {_mb(need_bytes)} free in {folder}, but only {_mb(free)} is free there; "
            "free some space or point VFLKIT_RESULTS (or results=) to a folder on a disk with room")


def not_writable(folder: str | Path, exc: OSError) -> Exception:
    """The ConfigError for a results folder that cannot be written (the same for the record
    store and the scheduler's locks)."""
    return ConfigError(
        f"the results folder {folder} is not writable ({exc.strerror or exc}); set {RESULTS_ENV} "
        "to a writable folder (or pass results=) before training")


def _mb(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (an OSError, or torch's RuntimeError from a short write) says the disk is full."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    return "No space left on device" in text or "unexpected pos" in text


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
