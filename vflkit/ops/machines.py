"""The time-limited GPU machines a window is a job on, the launcher's settings its command line
names, and the check of what a bare machine lacks: nothing heavy is imported, so
``python -m vflkit.ops.launcher --help`` stays quick and ``check`` runs where torch is missing."""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..scheduler import GPU_WORKERS


@dataclass(frozen=True)
class Machine:
    """The limits of one kind of time-limited GPU machine, as a plan needs them: how long a job
    holds it, how it is reached (calls of a limited length, each carrying the working tree and at
    most ``carry_bytes`` beside it, each returning at most ``return_files`` files), and what its
    start and each call cost. A job runs one window."""

    name: str
    job_s: float  # one job's time: every call, the machine's start and its give-back together
    give_back_s: float  # what a window leaves for handing the machine back (or its idle reclaim)
    min_start_left_s: float  # no machine starts with less of a job's time left
    call_limit_s: float  # one call's command may run this long
    carry_bytes: int  # what travels with one call: the working tree plus the carried paths
    return_files: int  # files that come back from one call's $OUT
    command_chars: int  # a call's command line, at most
    start_s: float  # a bare machine's start, before the first call's command runs
    call_overhead_s: float  # each call's own cost besides its command: transfers there and back

    @property
    def deadline_s(self) -> float:
        """A window's default length: a job's time less its give-back."""
        return self.job_s - self.give_back_s


#: Named machines. ``short-calls``: a quarter-hour job reached by ten-minute calls that carry
#: 64 MiB (a shared accelerator pool); ``notebook``: a notebook-hosted GPU session of a few
#: hours whose cells are the calls; ``preemptible``: an hour on a spot instance reached over ssh;
#: ``wall-time``: a cluster job with a wall-time limit, its files on a shared disk.
MACHINES: dict[str, Machine] = {m.name: m for m in (
    Machine("short-calls", job_s=15 * 60, give_back_s=60, min_start_left_s=4 * 60, call_limit_s=600,
            carry_bytes=64 * 2**20, return_files=8, command_chars=2000, start_s=120.0, call_overhead_s=45.0),
    Machine("notebook", job_s=4 * 3600, give_back_s=120, min_start_left_s=10 * 60, call_limit_s=3600,
            carry_bytes=2**30, return_files=1000, command_chars=100_000, start_s=180.0, call_overhead_s=60.0),
    Machine("preemptible", job_s=3600, give_back_s=120, min_start_left_s=5 * 60, call_limit_s=3600,
            carry_bytes=8 * 2**30, return_files=10_000, command_chars=100_000, start_s=300.0, call_overhead_s=30.0),
    Machine("wall-time", job_s=4 * 3600, give_back_s=300, min_start_left_s=0, call_limit_s=4 * 3600,
            carry_bytes=64 * 2**30, return_files=10**6, command_chars=100_000, start_s=300.0, call_overhead_s=30.0),
)}
#: The machine a plan is made for unless told otherwise (``--machine``).
DEFAULT_MACHINE = MACHINES["short-calls"]
#: Processes sharing the GPU (lanes), as the prices assume by default.
DEFAULT_WORKERS = GPU_WORKERS
#: ``--include-slow-cpu``'s default: a CPU-sized run estimated above this many CPU-minutes is
#: worth a window (C-VFL's paper runs on MNIST and FashionMNIST).
SLOW_CPU_MIN = 30.0
#: The machine's own folder for data, records and logs: outside the working tree, which every
#: call replaces, and kept while the machine stays warm between calls.
DEFAULT_WORK = "/tmp/vflkit-gpu"
#: Where the carried files sit in the working tree (ignored by git; named in each call's carry).
CARRY_DIR = ".launch"
#: The Python packages a run imports (the project's dependencies that training touches).
CHECK_PACKAGES = ("torch", "torchvision", "numpy", "pandas", "scipy", "sklearn", "cryptography", "tqdm", "PIL")
#: Packages a bare GPU machine's image may lack (a stock PyTorch image has no cryptography,
#: which vflkit.secure imports, nor its cffi and pycparser): their wheels ride with each
#: window's first call, so a machine without network can still import them.
DEVICE_LACKS = ("cryptography", "cffi", "pycparser")
#: The device kinds the plan knows, as the cost model names them.
DEVICE_KINDS = {"h100": "cuda", "h200": "cuda", "cpu": "cpu"}


def check_packages(out: Path | None = None, names: Sequence[str] = CHECK_PACKAGES) -> list[str]:
    """The packages of ``names`` this Python cannot import (written to ``out/packages.json``)."""
    missing = []
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    info = {"python": sys.version.split()[0], "missing": missing}
    try:
        import torch

        info.update(torch=torch.__version__, cuda=torch.cuda.is_available(),
                    gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    except ImportError:
        pass
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "packages.json").write_text(json.dumps(info, indent=1))
    print("[launcher] packages:", json.dumps(info))
    return missing
