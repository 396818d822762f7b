"""Benchmark: what the VFL machinery costs. ``python -m vflkit.ops.bench`` (or ``make bench``).

Samples per second of a SplitNN step through vflkit's parties, channel and ledger against the
same models as one plain PyTorch model and against split learning written by hand; ``--packed``:
K runs one after another against one packed step (and its CUDA-graph replay); ``--multi-vfl``:
where a Multi-VFL round's CPU seconds go; and VFedMH's secure aggregation's share of a step.
Inputs are random tensors of MNIST's shape. What each prints and the target: docs/benchmark.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

#: VFedMH with its secure ring forced to one backend (``VFedMH.ring_backend``; the "vfedmh"
#: row takes the default, "auto": numpy on the CPU, torch on a GPU), side by side.
RING_ROWS: dict[str, str] = {"vfedmh, ring in torch": "torch", "vfedmh, ring in numpy": "numpy"}

#: The methods of the batch-by-batch trainer, VFedMH without its mask prefetch and VFedMH
#: with each ring backend.
METHODS: dict[str, tuple[str, dict]] = {
    "local": ("local", {}), "splitnn": ("splitnn", {}), "agg_vfl": ("agg_vfl", {}), "c_vfl": ("c_vfl", {}),
    "vfedmh": ("vfedmh", {}), "vfedmh, masks on demand": ("vfedmh", {"mask_prefetch": False}),
    **{label: ("vfedmh", {}) for label in RING_ROWS},
}


def _parser() -> argparse.ArgumentParser:
    """The command line, defined before the heavy imports below."""
    parser = argparse.ArgumentParser(prog="python -m vflkit.ops.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn", "lenet"], help="party models to time")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS), metavar="METHOD",
                        help=f"methods to time (default all; quote a name with spaces): {', '.join(METHODS)}")
    parser.add_argument("--batch", type=int, default=128, help="samples per step")
    parser.add_argument("--repeats", type=int, default=100, help="timed steps per setting")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda[:N]")
    parser.add_argument("--packed", action="store_true",
                        help="samples/s of K runs one after another vs packed (vflkit.training.split)")
    parser.add_argument("--pack-size", type=int, default=4, help="K, the runs per pack (with --packed)")
    parser.add_argument("--json", type=Path, default=None,
                        help="with --packed: also write the rows here (a GPU's file under results/device/ gives the "
                             "cost model its seconds per operation)")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block (with --packed)")
    parser.add_argument("--multi-vfl", action="store_true",
                        help="CPU seconds of a Multi-VFL quick-profile round and where they go, one torch thread")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (with --multi-vfl)")
    parser.add_argument("--matrix", type=Path, default=None, metavar="FILE",
                        help="the GPU measurement matrix (stacking x pack size x precision x graphs; docs/benchmark.md), "
                             "its rows written to FILE as each finishes")
    parser.add_argument("--budget-s", type=float, default=None, help="with --matrix: start no cell after this many seconds")
    parser.add_argument("--worker", choices=["overhead", "methods"], help=argparse.SUPPRESS)
    return parser


if __name__ == "__main__":
    # `python -m vflkit.ops.bench --help` (or a bad argument) answers here, before the imports below
    # load torch and the methods: seconds, a minute on a loaded machine
    _parser().parse_args()

import torch
import torch.nn.functional as F

from ..comm import Channel, Party
from ..data import ImageData
from ..errors import ConfigError
from ..files import write_json
from ..methods import METHODS as METHOD_CLASSES, RunConfig, get_method
from ..partition import strips
from ..secure import DeferredChecks, benchmark_masking
from ..methods.multi_vfl import MultiVFL, MultiVFLConfig
from ..studies.multi_vfl import configs
from ..training import counting
from ..training.graphs import WARMUP_STEPS, capture, graph_blocker
from ..training.multi_owner import RoundPack
from ..training.split import Pack, PACKED_STEPS, precision_context, use_precision


def _setup(model: str, n_parties: int, batch: int, n: int, embedding_dim: int, seed: int = 0, *,
           method: str = "splitnn", device: str = "cpu", options: dict | None = None, precision: str = "fp32"):
    torch.manual_seed(seed)
    dev = torch.device(device)
    x = torch.randint(0, 256, (n, 1, 28, 28), dtype=torch.uint8)
    y = torch.randint(0, 10, (n,), device=dev)
    part = strips(n_parties, image_shape=(1, 28, 28), axis="width")
    pieces = [p.contiguous().to(dev) for p in part.split(x)]
    channel = Channel()

    def transform(t: torch.Tensor) -> torch.Tensor:
        return (t.float() / 255 - 0.1307) / 0.3081

    parties = [Party("active" if k == 0 else f"passive_{k}", channel=channel, features={"train": pieces[k]},
                     labels={"train": y} if k == 0 else None, transform=transform, device=dev)
               for k in range(n_parties)]
    cfg = RunConfig(paper="demo", dataset="mnist", method=method, models=(model,) * n_parties,
                    n_parties=n_parties, batch_size=batch, embedding_dim=embedding_dim, options=options or {},
                    precision=precision)
    vfl = get_method(method)(cfg, parties, num_classes=10)
    vfl.setup()
    use_precision(cfg, vfl)  # as the trainer sets a run up (bf16: channels_last convolution weights)
    return vfl, pieces, y, transform


def _why(exc: BaseException) -> str:
    """What a failed setting of the benchmark notes in its row."""
    return f"{type(exc).__name__}: {exc}"[:300]


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(device) if device.startswith("cuda") else f"CPU ({os.cpu_count()} cores)"


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def bench_overhead(model: str = "cnn", *, n_parties: int = 4, batch: int = 128, repeats: int = 100,
                   embedding_dim: int = 128, device: str = "cpu") -> dict[str, float]:
    """Samples/s of a SplitNN step through vflkit vs the same models as one plain model."""
    n = batch * 8
    method, pieces, y, transform = _setup(model, n_parties, batch, n, embedding_dim, device=device)
    state = {"i": 0}

    def next_ids() -> torch.Tensor:
        state["i"] = (state["i"] + 1) % (n // batch)
        return torch.arange(state["i"] * batch, (state["i"] + 1) * batch)  # ids live on the CPU, as in training

    def vfl_step() -> None:
        method.train_step(next_ids())
        _sync(device)

    # The plain baseline: the very same modules and optimizers, no parties, no channel.
    bottoms = [p.models["bottom"] for p in method.parties]
    top = method.active.models["top"]
    optims = [p.optimizers["local"] for p in method.parties]

    def plain_step() -> None:
        ids = next_ids()
        for o in optims:
            o.zero_grad(set_to_none=True)
        e = torch.cat([b(transform(x[ids])) for b, x in zip(bottoms, pieces)], dim=1)
        F.cross_entropy(top(e), y[ids]).backward()
        for o in optims:
            o.step()
        _sync(device)

    def split_by_hand_step() -> None:
        # Split learning's own cost without vflkit: each passive graph cut at the embedding and
        # back-propagated on its own, the cut-layer gradient copied, the loss read.
        ids = next_ids()
        for o in optims:
            o.zero_grad(set_to_none=True)
        es = [b(transform(x[ids])) for b, x in zip(bottoms, pieces)]
        cut = [es[0]] + [e.detach().clone().requires_grad_() for e in es[1:]]
        loss = F.cross_entropy(top(torch.cat(cut, dim=1)), y[ids])
        loss.backward()
        # the passive graphs are disjoint: one autograd call for all (as vflkit's methods do)
        torch.autograd.backward(es[1:], [c.grad.clone() for c in cut[1:]])
        for o in optims:
            o.step()
        _sync(device)

    steps = {"vfl": vfl_step, "plain": plain_step, "split": split_by_hand_step}
    # Alternate the steps one by one so that drifts in machine load hit all alike.
    for _ in range(3):
        for f in steps.values():
            f()
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(repeats):
        for k, f in steps.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    t = {k: statistics.median(v) for k, v in times.items()}
    return {"model": model, "batch": batch, "plain_samples_per_s": batch / t["plain"],
            "split_samples_per_s": batch / t["split"], "vfl_samples_per_s": batch / t["vfl"],
            "overhead_pct": 100 * (t["vfl"] - t["plain"]) / t["vfl"],
            "vflkit_overhead_pct": 100 * (t["vfl"] - t["split"]) / t["vfl"], "step_ms": 1e3 * t["vfl"]}


@contextlib.contextmanager
def _gpu_utilisation(device: str) -> Iterator[list[float]]:
    """The GPU's utilisation (per cent) while the body runs, sampled from ``nvidia-smi`` every 0.2 s
    (none where there is no nvidia-smi)."""
    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.2):
            out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip():
                samples.append(float(out.stdout.split()[0]))

    thread = threading.Thread(target=sample, daemon=True)
    if device.startswith("cuda") and shutil.which("nvidia-smi") is not None:
        thread.start()
    try:
        yield samples
    finally:
        stop.set()
        if thread.is_alive():
            thread.join()


def bench_methods(models: list[str], *, methods: dict[str, tuple[str, dict]] | None = None, batch: int = 128,
                  steps: int = 30, blocks: int = 3, device: str = "cpu") -> list[dict[str, float | str | None]]:
    """Samples/s of each method's training step (as the trainer runs it: losses and the checks
    a step leaves on the device read back once per block, not per step) for each model, and
    the GPU's utilisation meanwhile on CUDA. Median over ``blocks`` blocks of ``steps`` steps."""
    rows = []
    for label, (name, options) in (methods or METHODS).items():
        for model in models:
            vfl, *_ = _setup(model, 4, batch, batch * 8, 128, method=name, device=device, options=options)
            if label in RING_ROWS:
                vfl.ring_backend = RING_ROWS[label]
            checks = DeferredChecks()
            vfl.defer_checks(checks)
            order = torch.arange(batch * 8)  # sample ids stay on the CPU (as in the trainer): no sync to check them
            vfl.train_step(order[:batch])  # warm-up (allocations, kernels' first launch)
            _sync(device)
            times = []
            with _gpu_utilisation(device) as util:
                for _ in range(blocks):
                    t0 = time.perf_counter()
                    losses = [vfl.train_step(order[(i % 8) * batch:(i % 8 + 1) * batch]) for i in range(steps)]
                    torch.stack([v for lo in losses for v in lo.values()]).sum().item()  # one read, as the trainer
                    checks.run()
                    _sync(device)
                    times.append((time.perf_counter() - t0) / steps)
            rows.append({"method": label, "model": model, "samples_per_s": batch / statistics.median(times),
                         "gpu_util_pct": statistics.mean(util) if util else None})
    return rows


#: One method per step of :data:`vflkit.training.split.PACKED_STEPS`, the first registered with it
#: (its subclasses that keep the step, PyVertical say, would time the same code).
PACKED_METHODS = tuple(next(n for n, cls in METHOD_CLASSES.items() if cls.step is step) for step in PACKED_STEPS)


def bench_packed(models: list[str], *, methods: Sequence[str] = PACKED_METHODS, pack_size: int = 4,
                 batch: int = 128, steps: int = 10, blocks: int = 3,
                 stackings: Sequence[str] = ("auto", "grouped", "vmap", "loop"),
                 device: str = "cpu", precision: str = "fp32") -> list[dict[str, float | str]]:
    """Samples/s of ``pack_size`` runs (seeds 0..K-1) trained step by step one after another
    (``alone``), and of the same runs as one packed step per way of stacking them
    (:data:`vflkit.training.split.STACKINGS`; ``auto``: as the trainer stacks them on this
    device); medians over ``blocks`` blocks of ``steps`` steps, alternated block by block so that
    drifts in machine load hit all alike. ``graphs``: the trainer's pack (``auto``) with its step
    captured and replayed (:mod:`vflkit.training.graphs`: CUDA graphs on a GPU; on a CPU the
    tape, a stand-in with no speed-up), where it can be. ``precision``: as
    :attr:`~vflkit.methods.RunConfig.precision` (bf16: autocast, channels_last); a stacking it
    refuses (bf16 with vmap) is the row's ``<stacking>_error``, not the end of the benchmark."""

    rows = []
    for name in methods:
        for model in models:
            runs = [_setup(model, 4, batch, batch * 8, 128, seed=k, method=name, device=device, precision=precision)[0]
                    for k in range(pack_size)]
            with precision_context(runs[0].config, torch.device(device)):
                rows.append(_bench_pack(runs, name, model, pack_size=pack_size, batch=batch, steps=steps, blocks=blocks,
                                        stackings=stackings, device=device))
    return rows


def _bench_pack(runs: list[Any], name: str, model: str, *, pack_size: int, batch: int, steps: int, blocks: int,
                stackings: Sequence[str], device: str) -> dict[str, float | str]:
    """One row of :func:`bench_packed`, under the runs' precision."""
    precision = runs[0].config.precision
    failed: dict[str, str] = {}
    ways = {s: {"stacking": s} for s in stackings}
    if name == "c_vfl":  # its alike parties stacked (the default) against each party apart
        ways["vmap_apart"] = {"stacking": "vmap", "group_parties": False}
    packs = {}
    for label, how in ways.items():  # each stacks its own copy of the runs
        try:
            packs[label] = Pack(runs, **how)
        except ConfigError as exc:
            failed[f"{label}_error"] = _why(exc)
    backend = "cuda" if torch.device(device).type == "cuda" else "tape"
    graphed = Pack(runs)  # as the trainer stacks it on this device
    if graph_blocker(graphed, backend) is None:
        capture(graphed, backend)
        packs["graphs"] = graphed
    order = torch.arange(batch * 8)  # ids on the CPU for a run alone, as in the trainer
    packed_order = order.to(device).expand(pack_size, -1)  # a pack's [K, N] on its device

    def alone(i: int) -> None:
        ids = order[(i % 8) * batch:(i % 8 + 1) * batch]
        losses = [run.train_step(ids) for run in runs]
        torch.stack([v for lo in losses for v in lo.values()]).sum()

    def together(pack: Pack) -> Callable[[int], None]:
        return lambda i: pack.train_step(packed_order[:, (i % 8) * batch:(i % 8 + 1) * batch])

    steps_of = {"alone": alone, **{s: together(p) for s, p in packs.items()}}
    for label, f in list(steps_of.items()):  # warm-up (allocations, first calls; a graph's capture)
        try:
            for i in range(WARMUP_STEPS + 1 if label == "graphs" else 1):
                f(i)
        # not yet run on a GPU: a failed capture must not end the benchmark
        except Exception as exc:  # noqa: BLE001
            if label != "graphs":
                raise
            failed["graphs_error"] = _why(exc)
            del steps_of[label]
    times: dict[str, list[float]] = {k: [] for k in steps_of}
    for _ in range(blocks):
        for label, f in steps_of.items():
            _sync(device)
            t0 = time.perf_counter()
            for i in range(steps):
                f(i)
            _sync(device)
            times[label].append(time.perf_counter() - t0)
    row: dict[str, float | str] = {"method": name, "model": model, "pack_size": pack_size, "precision": precision,
                                   **failed}
    if "graphs" in steps_of:
        try:
            row.update(graphs_check(name, model, pack_size=pack_size, batch=batch, device=device, precision=precision))
        except Exception as exc:  # noqa: BLE001 (as the capture above)
            row["graphs_error"] = _why(exc)
    row.update({f"{k}_samples_per_s": pack_size * batch * steps / statistics.median(v) for k, v in times.items()})
    return {**row, **step_cost(name, model, batch, pack_size=pack_size)}


def graphs_check(method: str, model: str, *, pack_size: int, batch: int, device: str,
                 replays: int = 3, precision: str = "fp32") -> dict[str, float]:
    """The largest parameter difference between a pack captured and replayed
    (:mod:`vflkit.training.graphs`) and the same pack stepped eagerly on the same seeds and
    batches (``graphs_max_abs_diff``), beside a second eager pack's (``eager_max_abs_diff``: the
    eager step's own noise); :func:`vflkit.ops.windows.graphs_verdict` reads them."""

    def build() -> Pack:
        return Pack([_setup(model, 4, batch, batch * 8, 128, seed=k, method=method, device=device,
                            precision=precision)[0] for k in range(pack_size)])  # as the trainer stacks it here

    eager, again, graphed = build(), build(), build()
    capture(graphed, "cuda" if torch.device(device).type == "cuda" else "tape")
    order = torch.arange(batch * 8, device=device).expand(pack_size, -1)
    for i in range(WARMUP_STEPS + 1 + replays):
        ids = order[:, (i % 8) * batch:(i % 8 + 1) * batch]
        for pack in (eager, again, graphed):
            pack.train_step(ids)

    def distance(other: Pack) -> float:
        with torch.no_grad():
            return max(float((t - other.models[key].params[name]).abs().max())
                       for key, stacked in eager.models.items() for name, t in stacked.params.items())

    return {"graphs_max_abs_diff": distance(graphed), "eager_max_abs_diff": distance(again)}


def step_cost(method: str, model: str, batch: int, pack_size: int | None = None) -> dict[str, float]:
    """One run's training step in the benchmark's setting: the torch operations it dispatches
    and its FLOPs (:mod:`vflkit.training.counting`); with ``pack_size``, also the operations of
    one vmapped packed step of that many runs (C-VFL's with its parties apart too)."""

    setting = counting.bench_setting(method, model, batch)
    out = {"ops_per_step": float(counting.count_step_ops(setting)), "flops_per_step": counting.step_flops(setting)}
    if pack_size:
        out["packed_ops_per_step"] = float(counting.count_step_ops(setting, pack=pack_size))
        if method == "c_vfl":
            out["packed_apart_ops_per_step"] = float(counting.count_step_ops(setting, pack=pack_size, group_parties=False))
    return out


def _random_images(config: Any, seed: int) -> ImageData:
    """Random images of MNIST's shape, enough of every class for ``config``'s label owners
    (Table 3's splits); a Multi-VFL round's cost does not depend on pixel values."""
    g = torch.Generator().manual_seed(seed)
    n_train, n_test = 10 * config.samples_per_owner * config.n_label_owners, config.n_test or 10_000
    return ImageData("random", torch.randint(0, 256, (n_train, 1, 28, 28), dtype=torch.uint8, generator=g),
                     torch.arange(n_train) % 10, torch.randint(0, 256, (n_test, 1, 28, 28), dtype=torch.uint8, generator=g),
                     torch.arange(n_test) % 10, tuple(str(i) for i in range(10)), (0.1307,), (0.3081,))


def bench_multi_vfl(*, rounds: int = 3, scenario: str = "4niid", server_optimizer: str = "fedadam",
                    seed: int = 0, overrides: dict[str, Any] | None = None) -> dict[str, float]:
    """CPU seconds (process time: load inflates it less than the wall clock) of one Multi-VFL
    quick-profile round of ``scenario`` and ``server_optimizer`` on random images of MNIST's
    shape, medians of ``rounds`` rounds after a warm-up (``overrides``: as in the study's
    ``configs``): its training, its evaluation as one message (as before
    :data:`~vflkit.methods.multi_vfl.EVAL_CHUNK`) and in chunks, one split step against the same
    models as one plain model, and the round's training with its label-owner chains packed
    (:class:`~vflkit.training.multi_owner.RoundPack`, vmapped and looped)."""

    config, = [c for c in configs("quick", seeds=[seed], overrides=overrides)
               if (c.dataset, c.scenario, c.server_optimizer) == ("mnist", scenario, server_optimizer)]
    data = _random_images(config, seed)
    method = MultiVFL(config, data, device="cpu")
    method.setup()
    packs = {s: MultiVFL(config, data, device="cpu") for s in ("vmap", "loop")}
    for m in packs.values():
        m.setup()
    held = {s: RoundPack([m], stacking=s) for s, m in packs.items()}
    packed = {s: [] for s in packs}
    # a round's split steps: every label owner's batches (its chains step together)
    per_round = sum(len(method.round_order(k, 1)[1]) for k in range(config.n_label_owners))
    n_test = config.n_test
    train, whole, chunked = [], [], []
    for r in range(1, rounds + 2):
        t0 = time.process_time()
        method.round(r)
        t1 = time.process_time()
        method.evaluate(eval_chunk=n_test)
        t2 = time.process_time()
        method.evaluate()
        t3 = time.process_time()
        for stacking in packs:
            t4 = time.process_time()
            held[stacking].round(r)
            packed[stacking].append(time.process_time() - t4)
        if r == 1:  # warm-up: first calls, allocations
            packed = {s: [] for s in packs}
            continue
        train.append(t1 - t0), whole.append(t2 - t1), chunked.append(t3 - t2)

    # the same step as plain PyTorch: label owner 1 and the data owners' copies 1, one batch
    lo = method.label_owners[0]
    bottoms, top = [d.models["copy_1"] for d in method.data_owners], lo.models["top"]
    order, sizes = method.round_order(0, 1)
    ids = order[:sizes[0]]
    xs, y = [d.features("train", ids=ids) for d in method.data_owners], lo.labels("train", ids=ids)
    opt = torch.optim.SGD([p for m in (*bottoms, top) for p in m.parameters()], lr=config.local_lr)

    def plain_step() -> None:
        opt.zero_grad(set_to_none=True)
        acts = [m(x) for m, x in zip(bottoms, xs)]
        cut = [a.detach().requires_grad_(True) for a in acts]
        F.cross_entropy(top(torch.cat(cut, dim=2)), y).backward()
        for a, c in zip(acts, cut):
            a.backward(c.grad)
        opt.step()

    plain_step()
    t0 = time.process_time()
    for _ in range(per_round):
        plain_step()
    plain = (time.process_time() - t0) / per_round
    t, w, c = (statistics.median(v) for v in (train, whole, chunked))
    step = t / per_round  # the round's training per split step, its server's aggregation included
    return {"steps_per_round": per_round, "step_s": step, "plain_step_s": plain,
            "train_s": t, "other_train_s": t - per_round * step,
            "eval_whole_s": w, "eval_chunked_s": c, "round_before_s": t + w, "round_after_s": t + c,
            "n_test": n_test, "batch_size": config.batch_size,
            **{f"train_packed_{k}_s": statistics.median(v) for k, v in packed.items()}}


def bench_multi_vfl_pack(pack_size: int, *, device: str = "cpu", profile: str = "paper",
                         stackings: Sequence[str] = ("loop", "vmap", "grouped"),
                         overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Wall seconds of one round of ``pack_size`` Multi-VFL runs (``profile``'s MNIST 4niid FedAdam
    run, seeds 0..K-1, random images) packed as one computation (:class:`RoundPack`) per way of
    stacking them, after a warm-up round; a stacking the pack refuses is the row's ``<stacking>_error``."""
    cfgs = [c for c in configs(profile, seeds=range(pack_size), overrides=overrides)
            if (c.dataset, c.scenario, c.server_optimizer) == ("mnist", "4niid", "fedadam")]
    data = _random_images(cfgs[0], 0)
    row: dict[str, Any] = {"method": MultiVFLConfig.paper, "model": f"{profile} profile", "pack_size": pack_size}
    for stacking in stackings:
        runs = [MultiVFL(c, data, device=device) for c in cfgs]
        for m in runs:
            m.setup()
        try:
            pack = RoundPack(runs, stacking=stacking)
        except ConfigError as exc:
            row[f"{stacking}_error"] = _why(exc)
            continue
        pack.round(1)  # warm-up: first calls, allocations
        _sync(device)
        t0 = time.perf_counter()
        pack.round(2)
        _sync(device)
        row[f"{stacking}_round_s"] = time.perf_counter() - t0
    return row


#: The GPU measurement matrix (``--matrix``, docs/benchmark.md): the pack settings the pricing
#: rests on, C-VFL's first (its seed packs are most of the GPU work left), then Multi-VFL's packs.
#: Precision "fp32" is PyTorch's default (cuDNN convolutions in TF32 on a GPU), "bf16" autocast
#: with channels_last weights (:attr:`~vflkit.methods.RunConfig.precision`).
MATRIX_CASES: tuple[tuple[str, str], ...] = (("c_vfl", "resnet18"), ("splitnn", "resnet18"), ("c_vfl", "resnet50"))
MATRIX_PACK_SIZES: tuple[int, ...] = (3, 12, 24)
MATRIX_PRECISIONS: tuple[str, ...] = ("fp32", "bf16")


def bench_matrix(out: Path, *, device: str, cases: Sequence[tuple[str, str]] = MATRIX_CASES,
                 pack_sizes: Sequence[int] = MATRIX_PACK_SIZES, precisions: Sequence[str] = MATRIX_PRECISIONS,
                 multi_vfl_sizes: Sequence[int] = MATRIX_PACK_SIZES, batch: int = 128, steps: int = 10,
                 budget_s: float | None = None, multi_vfl: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every cell of the matrix (case x precision x pack size: :func:`bench_packed`'s row, one
    block of ``steps`` steps per stacking, graphs on and off; then Multi-VFL's packs), ``out``
    rewritten after each cell so that a machine taken back mid-way keeps every finished row. A
    cell that fails (a pack beyond the device's memory) is a row with its ``error``; no cell
    starts once ``budget_s`` is spent. ``multi_vfl``: :func:`bench_multi_vfl_pack`'s keywords."""
    start, cuda = time.monotonic(), torch.device(device).type == "cuda"
    cells = [(m, model, p, k) for m, model in cases for p in precisions for k in pack_sizes]
    cells += [(MultiVFLConfig.paper, None, "fp32", k) for k in multi_vfl_sizes]
    doc: dict[str, Any] = {"device": _device_name(device), "torch": torch.__version__,
                           "matrix": {"batch": batch, "steps": steps, "rows": []}}
    rows = doc["matrix"]["rows"]
    for method, model, precision, k in cells:
        if budget_s is not None and time.monotonic() - start >= budget_s:
            doc["matrix"]["stopped"] = f"the budget of {budget_s:.0f} s was spent: {len(cells) - len(rows)} cells not run"
            write_json(out, doc)
            break
        try:
            row, = ([bench_multi_vfl_pack(k, device=device, **(multi_vfl or {}))] if model is None else
                    bench_packed([model], methods=[method], pack_size=k, batch=batch, steps=steps, blocks=1,
                                 stackings=("loop", "vmap", "grouped"), device=device, precision=precision))
        except Exception as exc:  # noqa: BLE001 -- out of memory at K = 24, say: the next cell still runs
            row = {"method": method, "model": model, "pack_size": k, "error": _why(exc)}
        rows.append({**row, "precision": precision, "elapsed_s": round(time.monotonic() - start, 1)})
        write_json(out, doc)
        print(json.dumps(rows[-1]), flush=True)
        if cuda:  # the next cell's packs start from an empty cache
            torch.cuda.empty_cache()
    return rows


#: Thread settings compared side by side; each runs in its own process, since OpenMP reads
#: its environment once, when torch is imported.
SETTINGS: dict[str, dict[str, str]] = {
    "2 threads, OpenMP default wait": {"OMP_NUM_THREADS": "2"},
    "2 threads, OMP_WAIT_POLICY=PASSIVE": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"},
    "1 thread, OMP_WAIT_POLICY=PASSIVE": {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"},
}

TARGET_PCT = 10.0


def _one_setting(models: list[str], batch: int, repeats: int, device: str = "cpu") -> list[dict[str, float]]:
    t = benchmark_masking(n_passive=3, shape=(batch, 128), repeats=max(10, repeats // 3))
    # one step's secure aggregation: 3 passive parties blind their embeddings (in parallel in a real
    # deployment, one after another here), then the active party sums and decodes
    mask_ms = 3 * t["blind_ms"] + t["aggregate_ms"]
    rows = [bench_overhead(model, batch=batch, repeats=repeats, device=device) for model in models]
    return [{**r, "masking_share_pct": 100 * mask_ms / (r["step_ms"] + mask_ms), "masking_ms": mask_ms} for r in rows]


def _in_process(env: dict[str, str], args: list[str]) -> Any:
    """Run one part of the benchmark in a fresh process with ``env`` (OpenMP reads its
    environment once, when torch is imported) and return what it printed as JSON."""
    out = subprocess.run([sys.executable, "-m", "vflkit.ops.bench", *args], env={**os.environ, **env},
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: no CUDA device is visible to torch {torch.__version__}; "
                         "run the benchmark on the CPU (--device cpu) or on a machine with a GPU")
    if args.worker == "overhead":  # one setting, in a process of its own: print JSON for the parent
        print(json.dumps(_one_setting(args.models, args.batch, args.repeats, args.device)))
        return
    if args.worker == "methods":
        print(json.dumps(bench_methods(args.models, methods={m: METHODS[m] for m in args.methods},
                                       batch=args.batch, device=args.device)))
        return
    cuda = args.device.startswith("cuda")
    where = _device_name(args.device)
    if args.matrix:
        bench_matrix(args.matrix, device=args.device, batch=args.batch, steps=args.steps, budget_s=args.budget_s)
        return
    if args.packed:
        _print_packed(args, where)
        return
    if args.multi_vfl:
        _print_multi_vfl(args)
        return
    print(f"torch {torch.__version__}, {where}; batch {args.batch}, 4 parties on 28x7 "
          "MNIST strips, embedding 128; medians of steps alternated plain / by hand / vflkit")
    print("samples/s of one training step; overhead = share of a vflkit step not spent by the plain model")
    common = ["--batch", str(args.batch), "--device", args.device, "--models", *args.models]
    settings = {"CUDA": {}} if cuda else SETTINGS
    results = {name: _in_process(env, ["--worker", "overhead", "--repeats", str(args.repeats), *common])
               for name, env in settings.items()}
    header = (f"{'setting':<36} {'model':<6} {'plain':>8} {'by hand':>8} {'vflkit':>8} "
              f"{'overhead':>9} {'of which vflkit':>16} {'masking share':>14}")
    print(header, "-" * len(header), sep="\n")
    for name, rows in results.items():
        for r in rows:
            print(f"{name:<36} {r['model']:<6} {r['plain_samples_per_s']:>8.0f} {r['split_samples_per_s']:>8.0f} "
                  f"{r['vfl_samples_per_s']:>8.0f} {r['overhead_pct']:>8.1f}% {r['vflkit_overhead_pct']:>15.1f}% "
                  f"{r['masking_share_pct']:>13.1f}%")
    mask_ms = next(iter(results.values()))[0]["masking_ms"]
    print(f"secure aggregation of one step (3 passive parties, {args.batch}x128 embeddings): {mask_ms:.2f} ms")
    for name, rows in results.items():
        w = max(r["overhead_pct"] for r in rows)  # a negative overhead shows as such
        print(f"worst overhead, {name}: {w:.1f}% (target <= {TARGET_PCT:.0f}%: {'met' if w <= TARGET_PCT else 'NOT met'})")

    # Every method as the trainer runs it, in the setting a scheduler worker uses.
    worker_env = {} if cuda else SETTINGS["1 thread, OMP_WAIT_POLICY=PASSIVE"]
    rows = _in_process(worker_env, ["--worker", "methods", "--methods", *args.methods, *common])
    print()
    print(f"samples/s per method and model ({'CUDA' if cuda else '1 thread, OMP_WAIT_POLICY=PASSIVE: a scheduler worker'}"
          f"; blocks of 30 steps, losses read once per block)")
    models = list(dict.fromkeys(r["model"] for r in rows))
    head = f"{'method':<26}" + "".join(f"{m:>10}" for m in models) + (f"{'GPU util':>10}" if cuda else "")
    print(head, "-" * len(head), sep="\n")
    for method in dict.fromkeys(r["method"] for r in rows):
        mine = [r for r in rows if r["method"] == method]
        line = f"{method:<26}" + "".join(f"{r['samples_per_s']:>10.0f}" for r in mine)
        if cuda:
            utils = [r["gpu_util_pct"] for r in mine if r["gpu_util_pct"] is not None]
            line += f"{statistics.mean(utils):>9.0f}%" if utils else f"{'n/a':>10}"
        print(line)


def _print_multi_vfl(args: argparse.Namespace) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a scheduler worker runs it
    try:
        r = bench_multi_vfl(rounds=args.rounds)
    finally:
        torch.set_num_threads(threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, CPU ({os.cpu_count()} cores), 1 thread, load average {load:.1f}; "
          f"Multi-VFL quick round (MNIST shape, 4niid, FedAdam): {r['steps_per_round']:.0f} split steps of "
          f"{r['batch_size']}, {r['n_test']} test images; CPU seconds, medians of {args.rounds} rounds")
    step, plain = r["step_s"], r["plain_step_s"]
    print(f"split step {1e3 * step:.0f} ms, the same models as plain PyTorch {1e3 * plain:.0f} ms "
          f"(parties, channel, ledger: {100 * (step - plain) / step:.1f} % of a step)")
    print(f"{'':<34} {'before':>8} {'now':>8}")
    print(f"{'training (split steps)':<34} {r['steps_per_round'] * step:>8.2f} {r['steps_per_round'] * step:>8.2f}")
    print(f"{'training (aggregation, averaging)':<34} {r['other_train_s']:>8.2f} {r['other_train_s']:>8.2f}")
    print(f"{'evaluation':<34} {r['eval_whole_s']:>8.2f} {r['eval_chunked_s']:>8.2f}")
    print(f"{'round':<34} {r['round_before_s']:>8.2f} {r['round_after_s']:>8.2f}   "
          f"({r['round_before_s'] / r['round_after_s']:.2f}x)")
    print("training with the 5 label-owner chains packed (multi_vfl.RoundPack): "
          + ", ".join(f"{k} {r[f'train_packed_{k}_s']:.2f} s ({r['train_s'] / r[f'train_packed_{k}_s']:.2f}x)"
                      for k in ("vmap", "loop")))


def _print_packed(args: argparse.Namespace, where: str) -> None:
    methods = [m for m in args.methods if m in PACKED_METHODS] or list(PACKED_METHODS)
    print(f"torch {torch.__version__}, {where}, {torch.get_num_threads()} threads; batch {args.batch} per run, "
          f"4 parties on 28x7 MNIST strips, embedding 128; K = {args.pack_size} runs (seeds 0..{args.pack_size - 1})")
    print("samples/s of all K runs: stepped one after another (alone) vs one packed step, as the trainer stacks it "
          "here (auto), grouped, vmapped or looped over the stacked slices (vflkit.training.split.STACKINGS); medians of 3 "
          f"blocks of {args.steps} steps, alternated; ops: torch operations one run's step dispatches, "
          "us/op: a step alone over them (launch-bound when steady across models); TFLOP/s of all K runs")
    print("C-VFL's packs stack its alike parties too (vmap, loop); 'apart': vmapped with each party apart. "
          "packed ops: one vmapped step's; its us/op: the vmapped step over them; graphs: the trainer's pack (auto) "
          "captured and replayed, against it eager (vflkit.training.graphs: CUDA graphs on a GPU, on a CPU the tape, which does "
          "not speed up); max |dW|: its parameters against the eager pack's after the same steps (0: same)")
    head = (f"{'method':<10} {'model':<8} {'alone':>10} {'auto':>10} {'grouped':>10} {'vmap':>10} {'loop':>10} "
            f"{'apart':>10} {'auto/alone':>11} {'grouped/alone':>14} {'vmap/alone':>11} {'loop/alone':>11} {'ops':>7} "
            f"{'us/op':>6} {'packed ops':>10} {'us/op':>6} {'TFLOP/s alone':>14} {'auto':>6} {'graphs':>10} "
            f"{'graphs/auto':>12} {'TFLOP/s graphs':>15} {'max |dW|':>9}")
    print(head, "-" * len(head), sep="\n", flush=True)
    rows = []
    for method in methods:
        for model in args.models:  # a row as soon as it is measured: C-VFL's takes a while
            r, = bench_packed([model], methods=[method], pack_size=args.pack_size, batch=args.batch,
                              steps=args.steps, device=args.device)
            rows.append(r)
            a, v, lo = r["alone_samples_per_s"], r["vmap_samples_per_s"], r["loop_samples_per_s"]
            au, gr = r["auto_samples_per_s"], r["grouped_samples_per_s"]
            apart = f"{r['vmap_apart_samples_per_s']:>10.0f}" if "vmap_apart_samples_per_s" in r else f"{'-':>10}"
            us = 1e6 * args.batch / a / r["ops_per_step"]
            us_packed = 1e6 * args.pack_size * args.batch / v / r["packed_ops_per_step"]
            tf = r["flops_per_step"] / args.batch / 1e12
            g = r.get("graphs_samples_per_s")
            dw = r.get("graphs_max_abs_diff", float("nan"))
            # '-': not capturable (graph_blocker), or its capture failed
            graphed = (f"{g:>10.0f} {g / au:>11.2f}x {g * tf:>15.3f} {dw:>9.1e}" if g else
                       f"{'-':>10} {'-':>12} {'-':>15} {'-':>9}")
            if "graphs_error" in r:
                graphed += f"  graphs failed: {r['graphs_error']}"
            print(f"{method:<10} {model:<8} {a:>10.0f} {au:>10.0f} {gr:>10.0f} {v:>10.0f} {lo:>10.0f} {apart} "
                  f"{au / a:>10.2f}x {gr / a:>13.2f}x {v / a:>10.2f}x {lo / a:>10.2f}x "
                  f"{r['ops_per_step']:>7.0f} {us:>6.1f} {r['packed_ops_per_step']:>10.0f} {us_packed:>6.1f} "
                  f"{a * tf:>14.3f} {au * tf:>6.3f} {graphed}", flush=True)
            if args.json:  # rewritten (atomically) after every row: a benchmark cut short keeps what it measured
                write_json(args.json, {"device": where, "torch": torch.__version__,
                                       "bench_packed": {"batch": args.batch, "pack_size": args.pack_size, "parties": 4,
                                                        "input": "28x7 MNIST strips", "embedding": 128, "rows": rows}})


if __name__ == "__main__":
    main()
