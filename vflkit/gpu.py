"""What a CUDA machine needs around the training processes: why CUDA is missing, sharing one GPU
among several worker processes (CUDA MPS), and giving back a worker's cached memory.

Light on purpose (the standard library; torch only inside functions): the configuration checks,
the scheduler and the command lines import it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

#: The oldest NVIDIA driver series each CUDA major version's wheels run on (NVIDIA's CUDA toolkit
#: release notes, "minimum required driver version" for Linux; minor-version compatibility).
MIN_DRIVER = {"13": "580", "12": "525", "11": "450"}


def driver_version() -> str | None:
    """The NVIDIA driver's version as ``nvidia-smi`` reports it, or None without one."""
    if not shutil.which("nvidia-smi"):
        return None
    out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, check=False)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def cuda_unavailable_message(device: str) -> str:
    """Why ``device`` cannot be used, naming the driver this torch wheel needs and what to do."""
    import torch

    cuda = torch.version.cuda
    if cuda is None:
        return (f"device {device!r} was asked for, but this torch ({torch.__version__}) is a CPU build; "
                "install a CUDA build of the pinned torch (see constraints.txt), or use device='auto' or 'cpu'.")
    need = MIN_DRIVER.get(cuda.split(".")[0])
    have = driver_version()
    found = f"nvidia-smi reports driver {have}" if have else "no NVIDIA driver was found (no nvidia-smi)"
    return (f"device {device!r} was asked for, but CUDA is not available here: this torch ({torch.__version__}) "
            f"is built for CUDA {cuda}" + (f", which needs an NVIDIA driver of the R{need} series or newer" if need else "")
            + f"; {found}. Install that driver, or a torch wheel built for your driver's CUDA version "
            "(https://pytorch.org/get-started/previous-versions/), or use device='auto' or 'cpu'.")


def release_cached_memory(device: str) -> None:
    """Give the CUDA caching allocator's unused blocks back to the driver, so that a long-lived
    worker does not keep the cache of its largest run while its siblings need the memory."""
    if str(device).startswith("cuda"):
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()


@contextlib.contextmanager
def shared_gpu(workers: int, device: str) -> Iterator[str]:
    """Run the body with CUDA MPS serving the worker processes when several share one GPU, so
    their kernels run side by side instead of taking turns; yields one line saying what was done
    or why not. A daemon already running (the default pipe directory, or one the environment
    names) is used as it is and left running; one started here is stopped at the end. Worker
    processes must start inside the body (they read the pipe directory from the environment)."""
    if not str(device).startswith("cuda") or workers < 2:
        yield ""
        return
    if os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or Path("/tmp/nvidia-mps/control").exists():
        yield "MPS: a running daemon serves the workers"
        return
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        yield ("MPS not started (no nvidia-cuda-mps-control on PATH): the workers time-slice the GPU; "
               "fewer workers (--workers) or starting MPS yourself overlaps them")
        return
    work = Path(tempfile.mkdtemp(prefix="vflkit-mps-"))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(work / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(work / "log")}
    for d in env.values():
        Path(d).mkdir()
    started = subprocess.run([control, "-d"], env={**os.environ, **env}, capture_output=True, text=True, check=False)
    if started.returncode != 0:
        yield (f"MPS not started ({(started.stderr or started.stdout).strip() or 'the daemon refused'}): "
               "the workers time-slice the GPU")
        return
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield f"MPS started for {workers} workers (stopped at the end)"
    finally:
        subprocess.run([control], input="quit\n", env={**os.environ, **env}, capture_output=True, text=True,
                       check=False)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(work, ignore_errors=True)
