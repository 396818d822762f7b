"""Time the commands a newcomer runs, each on a fresh clone of the committed tree, and write
what was measured to ``results/device/command-times.json``, which ``make report`` shows in the
README (`vflkit.reproduction.readme_times`): wall seconds, the machine (CPU, cores, load), the
commit, and pytest's closing line. Nothing is estimated; run it on a quiet machine.

    python scripts/time_commands.py            # make study, then make test
    python scripts/time_commands.py test       # one of them
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "device" / "command-times.json"


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_command(target: str) -> dict:
    """``make <target>`` in a fresh clone of HEAD: its wall seconds, exit status and closing line."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "checkout"  # not "vflkit": a test relativises paths at the package name
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        done = subprocess.run(["make", target], cwd=clone, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True).stdout
    tail = [line for line in done.stdout.splitlines() if re.search(r"\d+ passed", line)]
    if done.returncode:  # what failed, where the timing is kept (not committed then: fix it first)
        log = OUT.with_name(f"command-times-{target}.log")
        log.write_text(done.stdout[-20000:] + done.stderr[-5000:])
        print(f"make {target} failed: its output's tail is in {log}", file=sys.stderr)
    return {"command": f"make {target}", "seconds": round(seconds), "exit_status": done.returncode,
            "closing_line": tail[-1].strip("= ") if tail else "", "tree_clean_after": not dirty.strip(),
            "commit": commit, "when": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "load_average_at_start": round(load, 1)}}


def main(argv: list[str]) -> int:
    targets = argv or ["study", "test"]
    found = json.loads(OUT.read_text()) if OUT.exists() else {"what": __doc__.split("\n\n")[0], "commands": {}}
    for target in targets:
        row = time_command(target)
        found["commands"][f"make {target}"] = row
        print(json.dumps(row), flush=True)
        if row["exit_status"]:
            print(f"make {target} failed (exit {row['exit_status']})", file=sys.stderr)
    OUT.write_text(json.dumps(found, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
