"""Files written whole or not at all: records, checkpoints, tables and figures.

A reader (a notebook, a second study, a resumed run) must never see half a file: a kill
mid-write, or two processes writing the same table at once, would otherwise leave a truncated
or mixed file that later loads as if it were whole. Each file is written to a temporary name
beside it, flushed to disk, then renamed over the target (atomic on POSIX and Windows).
"""

from __future__ import annotations

import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

#: Temporary files carry this marker, the writer's pid and thread: ``.<name>.tmp<pid>-<thread>``.
TMP_MARK = ".tmp"


def _tmp_for(path: Path) -> Path:
    return path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}-{threading.get_ident()}")


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write ``path``'s content to; on success it is flushed to disk
    and renamed to ``path``, on error removed (the old ``path``, if any, is left untouched)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_for(path)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented, key-sorted JSON, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))


def clean_stale_tmp(folder: str | Path) -> list[Path]:
    """Remove temporary files in ``folder`` left by writers that no longer run; returns them."""
    removed = []
    for tmp in Path(folder).glob(f".*{TMP_MARK}*"):
        pid = tmp.name.rsplit(TMP_MARK, 1)[-1].split("-")[0]
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
