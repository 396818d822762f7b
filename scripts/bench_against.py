"""The benchmark of every method's training step, this tree against an earlier commit, side by
side in one run: ``python scripts/bench_against.py REV`` (e.g. ``HEAD~5`` or a tag).

REV is checked out into a temporary worktree (removed at the end); the two trees' benchmarks
(`vflkit.bench`'s per-method rows, in the setting a scheduler worker uses: one thread,
``OMP_WAIT_POLICY=PASSIVE``) run alternately, ``--rounds`` times, REV first in odd rounds and
this tree first in even ones: a drift in the machine's speed falls on both, and so does the
penalty of running second (with a fixed order the same code read a few percent slower second).
Each figure is the median over the rounds of samples per second; the ratio is the median of the
rounds' own ratios, this tree over REV (above 1: faster now), with their range beside it.
``REV=HEAD`` on a clean tree compares the code with itself: its range is the noise floor. Say which machine and
load the figures came from when you quote them (the first line prints the CPU and the load).
Other work on the machine moves the figures by tens of percent either way; where the machine
cannot be left quiet, pin the comparison to one core at a real-time priority (as root,
``chrt -f 50 taskset -c 1 python scripts/bench_against.py REV``; its children inherit both).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The worker's setting (vflkit.bench SETTINGS["1 thread, OMP_WAIT_POLICY=PASSIVE"]).
WORKER_ENV = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def _module(tree: Path) -> str:
    """The benchmark's module in ``tree`` (it moved into the operations wing)."""
    return "vflkit.ops.bench" if (tree / "vflkit" / "ops" / "bench.py").exists() else "vflkit.bench"


def _rows(tree: Path, args: argparse.Namespace) -> dict[tuple[str, str], float]:
    """One benchmark of ``tree``'s methods, in a fresh process importing that tree's vflkit."""
    env = {**os.environ, **WORKER_ENV, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", _module(tree), "--worker", "methods", "--device", "cpu",
           "--models", *args.models, "--methods", *args.methods]
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the benchmark failed in {tree.name}:\n{out.stderr[-2000:]}")
    return {(r["method"], r["model"]): r["samples_per_s"] for r in json.loads(out.stdout.strip().splitlines()[-1])}


def _machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU")
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} cores, load average {load} at the start"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/bench_against.py", description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the earlier commit (anything git rev-parse takes)")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the two benchmarks (default 3)")
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn", "lenet"])
    parser.add_argument("--methods", nargs="+", default=["local", "splitnn", "agg_vfl", "c_vfl", "vfedmh"])
    args = parser.parse_args(argv)
    rev = subprocess.run(["git", "rev-parse", "--short", args.rev], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    here = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "vflkit"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.strip()
    print(f"{_machine()}; this tree {here}{' (vflkit/ uncommitted changes)' if dirty else ''} against {rev}; "
          f"{args.rounds} rounds, the order alternated", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(before), rev], cwd=ROOT, check=True)
        try:
            runs: dict[str, list[dict[tuple[str, str], float]]] = {"before": [], "now": []}
            for r in range(args.rounds):
                for side in (("before", "now") if r % 2 == 0 else ("now", "before")):
                    runs[side].append(_rows(before if side == "before" else ROOT, args))
                print(f"round {r + 1} of {args.rounds} done", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, check=False)
    keys = [k for k in runs["now"][0] if k in runs["before"][0]]
    print(f"samples/s of one training step, median of {args.rounds} (1 thread, OMP_WAIT_POLICY=PASSIVE)")
    print(f"{'method':<10} {'model':<7} {rev:>10} {here:>10}  now/before  rounds' range")
    slower = []
    for key in keys:
        b = statistics.median(run[key] for run in runs["before"])
        n = statistics.median(run[key] for run in runs["now"])
        ratios = [now[key] / before[key] for now, before in zip(runs["now"], runs["before"])]
        ratio = statistics.median(ratios)
        print(f"{key[0]:<10} {key[1]:<7} {b:>10.0f} {n:>10.0f}  {ratio:>10.3f}  {min(ratios):.3f}-{max(ratios):.3f}")
        if ratio < 0.95:
            slower.append(f"{key[0]} {key[1]} ({ratio:.3f})")
    print("slower by more than 5 % now: " + (", ".join(slower) if slower else "none"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
