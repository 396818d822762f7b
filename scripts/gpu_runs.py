"""Superseded by ``python -m vflkit.ops.launcher`` (issue 40), which plans every study's pending GPU
runs into deadline-bounded windows and runs them through the study engine; this name forwards
there. The former ``calibrate``, ``launch`` and ``pool`` (VFedMH's CIFAR-10 Table II only) are in
this file's history (``git log --follow scripts/gpu_runs.py``). Measured rates reach the plan
as a rate file (``plan --rates FILE``, format in ``vflkit.ops.windows.load_rate_file``), written by
hand: no tool writes one yet."""

import sys

from vflkit.ops.launcher import main

if __name__ == "__main__":
    sys.exit(main())
