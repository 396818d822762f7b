"""Superseded by ``python -m vflkit.launcher`` (issue 40), which plans every study's pending GPU
runs into deadline-bounded windows and runs them through the study engine; this name forwards
there. The former ``calibrate``, ``launch`` and ``pool`` (VFedMH's CIFAR-10 Table II only) are in
this file's history (commit b797ebe); a window's benchmark now writes a rate file instead."""

import sys

from vflkit.launcher import main

if __name__ == "__main__":
    sys.exit(main())
