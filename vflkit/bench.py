"""Benchmark: what the VFL machinery costs. ``python -m vflkit.bench`` (or ``make bench``).

Prints samples per second of a SplitNN training step run through vflkit's parties, channel
and ledger, against the same party models trained as one plain PyTorch model (the bottoms on
their strips, concatenation, top model, one backward pass). The difference is the machinery.
A third column, split learning written by hand without vflkit (each party's graph cut at its
embedding and back-propagated separately), splits that difference into what split learning
costs anyway and what vflkit's parties, channel and ledger add. The target is an overhead of
at most 15 % of a step on CPU.

It also times VFedMH's secure aggregation for one step (fixed-point encoding, the blinding
factors of every passive party from AES-CTR mask streams, the ring sum) and prints its share
of a step. Inputs are random tensors of MNIST's shape: the benchmark needs no dataset.
"""

from __future__ import annotations

import argparse
import statistics
import time
import torch
import torch.nn.functional as F

from .comm import Channel, Party
from .methods import RunConfig
from .methods import get_method
from .partition import strips
from .secure import benchmark_masking


def _setup(model: str, n_parties: int, batch: int, n: int, embedding_dim: int, seed: int = 0):
    torch.manual_seed(seed)
    x = torch.randint(0, 256, (n, 1, 28, 28), dtype=torch.uint8)
    y = torch.randint(0, 10, (n,))
    part = strips(n_parties, image_shape=(1, 28, 28), axis="width")
    pieces = [p.contiguous() for p in part.split(x)]
    channel = Channel()

    def transform(t: torch.Tensor) -> torch.Tensor:
        return (t.float() / 255 - 0.1307) / 0.3081

    parties = [
        Party("active" if k == 0 else f"passive_{k}", channel=channel, features={"train": pieces[k]},
              labels={"train": y} if k == 0 else None, transform=transform)
        for k in range(n_parties)
    ]
    cfg = RunConfig(paper="demo", dataset="mnist", method="splitnn", models=(model,) * n_parties,
                    n_parties=n_parties, batch_size=batch, embedding_dim=embedding_dim)
    method = get_method("splitnn")(cfg, parties, num_classes=10)
    return method, pieces, y, transform


def bench_overhead(model: str = "cnn", *, n_parties: int = 4, batch: int = 128, repeats: int = 100,
                   embedding_dim: int = 128) -> dict[str, float]:
    """Samples/s of a SplitNN step through vflkit vs the same models as one plain model."""
    n = batch * 8
    method, pieces, y, transform = _setup(model, n_parties, batch, n, embedding_dim)
    state = {"i": 0}

    def next_ids() -> torch.Tensor:
        state["i"] = (state["i"] + 1) % (n // batch)
        return torch.arange(state["i"] * batch, (state["i"] + 1) * batch)

    def vfl_step() -> None:
        method.train_step(next_ids())

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
        for e, c in zip(es[1:], cut[1:]):
            e.backward(c.grad.clone())
        for o in optims:
            o.step()
        loss.item()

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
    return {
        "model": model,
        "batch": batch,
        "plain_samples_per_s": batch / t["plain"],
        "split_samples_per_s": batch / t["split"],
        "vfl_samples_per_s": batch / t["vfl"],
        "overhead_pct": 100 * (t["vfl"] - t["plain"]) / t["vfl"],
        "vflkit_overhead_pct": 100 * (t["vfl"] - t["split"]) / t["vfl"],
        "step_ms": 1e3 * t["vfl"],
    }


def bench_masking(*, n_passive: int = 3, batch: int = 128, embedding_dim: int = 128,
                  repeats: int = 30) -> dict[str, float]:
    """Milliseconds of one step's secure aggregation: every passive party blinds its
    embedding (in parallel in a real deployment, one after another here), then the active
    party sums and decodes."""
    t = benchmark_masking(n_passive=n_passive, shape=(batch, embedding_dim), repeats=repeats)
    return {"masking_ms": n_passive * t["blind_ms"] + t["aggregate_ms"]}


#: Thread settings compared side by side; each runs in its own process, since OpenMP reads
#: its environment once, when torch is imported.
SETTINGS: dict[str, dict[str, str]] = {
    "2 threads, OpenMP default wait": {"OMP_NUM_THREADS": "2"},
    "2 threads, OMP_WAIT_POLICY=PASSIVE": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"},
    "1 thread, OMP_WAIT_POLICY=PASSIVE": {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"},
}

TARGET_PCT = 10.0


def _one_setting(models: list[str], batch: int, repeats: int) -> list[dict[str, float]]:
    mask = bench_masking(batch=batch, repeats=max(10, repeats // 3))
    rows = []
    for model in models:
        r = bench_overhead(model, batch=batch, repeats=repeats)
        r["masking_share_pct"] = 100 * mask["masking_ms"] / (r["step_ms"] + mask["masking_ms"])
        r["masking_ms"] = mask["masking_ms"]
        rows.append(r)
    return rows


def main(argv: list[str] | None = None) -> None:
    import json
    import os
    import subprocess
    import sys

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn", "lenet"])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:  # one setting, in a process of its own: print JSON for the parent
        print(json.dumps(_one_setting(args.models, args.batch, args.repeats)))
        return
    print(f"torch {torch.__version__}, CPU ({os.cpu_count()} cores); batch {args.batch}, 4 parties on 28x7 "
          "MNIST strips, embedding 128; medians of steps alternated plain / by hand / vflkit")
    print("samples/s of one training step; overhead = share of a vflkit step not spent by the plain model")
    results = {}
    for name, env in SETTINGS.items():
        out = subprocess.run([sys.executable, "-m", "vflkit.bench", "--worker", "--batch", str(args.batch),
                              "--repeats", str(args.repeats), "--models", *args.models],
                             env={**os.environ, **env}, capture_output=True, text=True, check=True)
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
    header = (f"{'setting':<36} {'model':<6} {'plain':>8} {'by hand':>8} {'vflkit':>8} "
              f"{'overhead':>9} {'of which vflkit':>16} {'masking share':>14}")
    print(header)
    print("-" * len(header))
    worst: dict[str, float] = {}
    for name, rows in results.items():
        for r in rows:
            worst[name] = max(worst.get(name, 0.0), r["overhead_pct"])
            print(f"{name:<36} {r['model']:<6} {r['plain_samples_per_s']:>8.0f} {r['split_samples_per_s']:>8.0f} "
                  f"{r['vfl_samples_per_s']:>8.0f} {r['overhead_pct']:>8.1f}% {r['vflkit_overhead_pct']:>15.1f}% "
                  f"{r['masking_share_pct']:>13.1f}%")
    mask_ms = next(iter(results.values()))[0]["masking_ms"]
    print(f"secure aggregation of one step (3 passive parties, {args.batch}x128 embeddings): {mask_ms:.2f} ms")
    for name, w in worst.items():
        print(f"worst overhead, {name}: {w:.1f}% (target <= {TARGET_PCT:.0f}%: {'met' if w <= TARGET_PCT else 'NOT met'})")


if __name__ == "__main__":
    main()
