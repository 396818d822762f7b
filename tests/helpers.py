"""Shared by the tests that kill a training process: start it, SIGKILL it at its first checkpoint."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def kill_at_first_checkpoint(code: str, ckpt: Path, record: Path, *, timeout_s: float = 300) -> None:
    """Run ``code`` in a fresh one-thread interpreter and SIGKILL it (no chance to clean up) as
    soon as ``ckpt`` exists; the run must not have written ``record`` by then."""
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + timeout_s
    while not ckpt.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    assert ckpt.exists(), "the run wrote no checkpoint before it ended"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not record.exists(), "the run finished before it was killed"
