"""Paper-profile runs on a borrowed GPU machine that has no data files and no network.

A lent GPU comes for short windows: a few commands of at most ten minutes, a bare machine each
time, and at most 64 MiB carried per command. This script is what runs there:

``unpack DIR...``  append the CIFAR-10 chunks carried in ``DIR`` to the machine's work folder;
                   once all are there, decompress and check the sha256 of the uint8 arrays
                   against :data:`CIFAR10_SHA256` (computed here from the verified PNG tree).
``calibrate``      seconds per training step of each Table II method and ResNet, one process,
                   then throughput of several processes sharing the GPU (chooses ``--workers``).
``launch``         start a detached pool (``setsid``) that trains the pending runs in priority
                   order, ``--workers`` at a time; runs checkpoint every epoch and resume.
``collect``        wait up to ``--wait`` seconds, then copy the finished records and a status
                   table to ``$OUT`` (what comes back to the project).

``pack`` (run on a machine with the data) writes the chunks: ``uint8`` images and labels of
``vflkit.data.load_dataset('cifar10')`` concatenated, compressed with zstd, cut to fit the
carry limit. The arrays are checked bit for bit against the verified load, so the GPU trains on
exactly the data the CPU runs verify.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: sha256 of x_train | y_train | x_test | y_test (uint8, C order) of the verified CIFAR-10 load.
CIFAR10_SHA256 = "77168ae812aa23afdaa0f13b32b412e881003005446c56d16afb62116ef67be2"
SHAPES = {"x_train": (50000, 3, 32, 32), "y_train": (50000,), "x_test": (10000, 3, 32, 32), "y_test": (10000,)}
# outside the repository: each command re-sends the working tree, this folder stays while warm
WORK = Path(os.environ.get("VFL_GPU_WORK", Path.home() / "vflkit-gpu"))


def pack(out: Path, sizes: list[int]) -> None:
    import zstandard

    from vflkit.data import load_dataset

    d = load_dataset("cifar10", progress=False)
    blob = b"".join(a.numpy().astype(np.uint8).tobytes() for a in (d.x_train, d.y_train, d.x_test, d.y_test))
    assert hashlib.sha256(blob).hexdigest() == CIFAR10_SHA256, "the verified load changed"
    z = zstandard.ZstdCompressor(level=17, threads=-1).compress(blob)
    start = 0
    for i, size in enumerate(sizes + [len(z)]):
        (out / f"gpu{i + 1}").mkdir(parents=True, exist_ok=True)
        (out / f"gpu{i + 1}" / f"part.{i:02d}").write_bytes(z[start:start + size])
        start += size


def cifar10():
    """The unpacked, checked CIFAR-10 as vflkit's ImageData (statistics as vflkit's loader gives)."""
    import torch

    from vflkit.data import CIFAR10_CLASSES, ImageData

    raw = np.fromfile(WORK / "cifar10.u8", dtype=np.uint8)
    parts, at = {}, 0
    for name, shape in SHAPES.items():
        n = int(np.prod(shape))
        parts[name] = torch.from_numpy(raw[at:at + n].reshape(shape).copy())
        at += n
    return ImageData("cifar10", parts["x_train"], parts["y_train"].long(), parts["x_test"], parts["y_test"].long(),
                     CIFAR10_CLASSES, mean=(0.4914, 0.4822, 0.4465), std=(0.2470, 0.2435, 0.2616))


def unpack(dirs: list[Path]) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    for d in dirs:
        for part in sorted(d.glob("part.*")):
            (WORK / part.name).write_bytes(part.read_bytes())
            print("stored", part.name, part.stat().st_size)
    parts = sorted(WORK.glob("part.*"))
    if len(parts) < 3:
        print(f"{len(parts)} of 3 chunks here")
        return
    import zstandard

    z = b"".join(p.read_bytes() for p in parts)
    blob = zstandard.ZstdDecompressor(max_window_size=2**31).decompressobj().decompress(z)
    digest = hashlib.sha256(blob).hexdigest()
    if digest != CIFAR10_SHA256:
        sys.exit(f"CIFAR-10 chunks do not match: sha256 {digest}")
    (WORK / "cifar10.u8").write_bytes(blob)
    print("CIFAR-10 unpacked and verified", len(blob))


def _register() -> None:
    from vflkit.data import register_dataset

    if (WORK / "cifar10.u8").exists():
        register_dataset(cifar10(), replace=True)


def pending_configs(which: str, methods: list[str] | None = None):
    """The runs to do, headline table first (VFedMH Table II, CIFAR-10, ResNets, seed 0)."""
    from vflkit.studies import vfedmh

    seeds = [0] if which == "table2_seed0" else [1, 2]
    groups = vfedmh.configs("paper", seeds=seeds)
    runs = [c for c in groups["table2"] if c.dataset == "cifar10" and set(c.models) <= set(vfedmh.RESNETS)]
    # VFedMH (the headline row) first, then shortest first, so that runs keep finishing while
    # the window lasts. Minutes per 20-epoch run on one H100, one process at a time, from
    # `calibrate` (2026-11-22): C-VFL's Q = 10 local iterations make it 28-53 min, last.
    # (the calibration's minutes live with the study that reports them: vfedmh.H100_MINUTES)
    runs = [c for c in runs if methods is None or c.method in methods]

    def cost(c) -> tuple[bool, float]:
        key = (c.method, "resnet" if c.method == "vfedmh" else c.models[0])
        return c.method != "vfedmh", vfedmh.H100_MINUTES.get(key, 99.0)

    return sorted(runs, key=cost)


def _worker(config_dict: dict, log: str) -> None:
    import torch

    from vflkit.methods import RunConfig
    from vflkit.training.split import run

    torch.set_num_threads(1)
    _register()
    cfg = RunConfig.from_dict(config_dict)
    with open(log, "a") as f:
        sys.stderr = f
        t = time.time()
        rec = run(cfg, profile="paper", device=os.environ.get("VFL_GPU_DEVICE", "cuda"), results=WORK / "results", on_divergence="record")
        print(f"done {cfg.key} {cfg.method} {cfg.models} in {time.time() - t:.0f}s "
              f"{ {k: v['test_accuracy'] for k, v in rec['final'].items()} }", file=f, flush=True)


def pool(which: str, workers: int, methods: list[str] | None) -> None:
    import multiprocessing as mp

    configs = pending_configs(which, methods)
    ctx = mp.get_context("spawn")
    logs = WORK / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with ctx.Pool(workers, maxtasksperchild=1) as p:
        jobs = [p.apply_async(_worker, (c.to_dict(), str(logs / f"{c.key}.log"))) for c in configs]
        for j in jobs:
            try:
                j.get()
            except Exception as exc:  # one failed run must not stop the others
                print("run failed:", repr(exc), flush=True)


def calibrate(steps: int) -> None:
    import torch

    from vflkit.data import ImageData, register_dataset
    from vflkit.training.split import run

    g = torch.Generator().manual_seed(0)
    fake = ImageData("cifar10", torch.randint(0, 256, (128 * steps, 3, 32, 32), dtype=torch.uint8, generator=g),
                     torch.randint(0, 10, (128 * steps,), generator=g), torch.randint(0, 256, (512, 3, 32, 32), dtype=torch.uint8),
                     torch.randint(0, 10, (512,)), tuple("abcdefghij"), (0.5,) * 3, (0.25,) * 3)
    register_dataset(fake, replace=True)
    rows = []
    for c in pending_configs("table2_seed0"):
        c = c.replace(n_train=None, n_test=None, epochs=2)
        t0 = time.time()
        rec = run(c, profile="smoke", device="cuda", results=WORK / "calib", progress=False, force=True)
        ep = [r["elapsed_s"] for r in rec["history"] if r["model"] == rec["history"][0]["model"]]
        per_step = (ep[1] - ep[0]) / steps  # epoch 2 alone: no warm-up
        rows.append({"method": c.method, "models": "/".join(sorted(set(c.models))), "s_per_step": per_step,
                     "est_epoch_s": per_step * 391, "est_run_20ep_min": per_step * 391 * 20 / 60,
                     "peak_mb": rec["peak_memory_mb"]})
        print(rows[-1], flush=True)
    (WORK / "calibration.json").write_text(json.dumps(rows, indent=1))


def collect(wait: float, out: Path) -> None:
    deadline = time.time() + wait
    results = WORK / "results" / "paper" / "vfedmh"
    while time.time() < deadline:
        alive = subprocess.run(["pgrep", "-f", "gpu_runs.py pool"], capture_output=True).returncode == 0
        if not alive:
            break
        time.sleep(10)
    out.mkdir(parents=True, exist_ok=True)
    import tarfile

    with tarfile.open(out / "records.tar.gz", "w:gz") as tar:
        for p in sorted(results.glob("*.json")):
            tar.add(p, arcname=f"paper/vfedmh/{p.name}")
        for p in sorted((WORK / "logs").glob("*.log")):
            tar.add(p, arcname=f"logs/{p.name}")
        if (WORK / "calibration.json").exists():
            tar.add(WORK / "calibration.json", arcname="calibration.json")
    for p in sorted((WORK / "logs").glob("*.log")):
        text = p.read_text(errors="replace").replace("\r", "\n").strip().splitlines()
        print(p.stem, "|", text[-1][-160:] if text else "")
    print("records:", len(list(results.glob("*.json"))), "checkpoints:", len(list(results.glob("*.ckpt.pt"))))
    subprocess.run("nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv", shell=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack"); p.add_argument("out", type=Path); p.add_argument("--sizes", type=int, nargs="+", required=True)
    p = sub.add_parser("unpack"); p.add_argument("dirs", type=Path, nargs="*")
    p = sub.add_parser("calibrate"); p.add_argument("--steps", type=int, default=20)
    for name in ("launch", "pool"):
        p = sub.add_parser(name); p.add_argument("--which", default="table2_seed0"); p.add_argument("--workers", type=int, default=8); p.add_argument("--methods", nargs="*")
    p = sub.add_parser("collect"); p.add_argument("--wait", type=float, default=0); p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    a = ap.parse_args()
    if a.cmd == "pack":
        pack(a.out, a.sizes)
    elif a.cmd == "unpack":
        unpack(a.dirs)
    elif a.cmd == "calibrate":
        calibrate(a.steps)
    elif a.cmd == "launch":
        import shutil

        # the pool runs from a copy: each command re-sends the working tree under it
        code = WORK / "code"
        shutil.rmtree(code, ignore_errors=True)
        repo = Path(__file__).resolve().parents[1]
        shutil.copytree(repo / "vflkit", code / "vflkit")
        shutil.copytree(repo / "scripts", code / "scripts")
        env = os.environ.copy()
        env["PYTHONPATH"] = os.pathsep.join([str(code), env.get("PYTHONPATH", "")])
        log = open(WORK / "pool.log", "a")
        extra = ["--methods", *a.methods] if a.methods else []
        subprocess.Popen([sys.executable, str(code / "scripts" / "gpu_runs.py"), "pool", "--which", a.which,
                          "--workers", str(a.workers), *extra],
                         stdout=log, stderr=log, start_new_session=True, env=env, cwd=code)
        print("pool started")
    elif a.cmd == "pool":
        pool(a.which, a.workers, a.methods)
    elif a.cmd == "collect":
        collect(a.wait, a.out)


if __name__ == "__main__":
    main()
