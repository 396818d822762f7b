"""The old runner against the scheduler, back to back, on the quick profile's short runs.

``python scripts/time_scheduler.py OUT`` computes the same slice three times, each into its own
empty results folder under ``OUT``, and prints the wall times as JSON:

- ``serial``: one process, the runs one after another through each family's ``run_many`` with
  torch's default threads (what ``make study`` did before the scheduler);
- ``fresh``: :func:`vflkit.scheduler.schedule` with 2 workers of one thread and a fresh process
  per run (``runs_per_worker=1``);
- ``reused``: the same with each worker computing run after run (the default).

The slice is Multi-VFL's and APC-VFL's quick runs: short runs, where starting a process costs
the most. Run it on a quiet machine: anything else running shifts all three.
"""
import json
import subprocess
import sys
import time
from pathlib import Path

COMMON = """
from pathlib import Path
from vflkit import study
from vflkit.studies import multi_vfl, apc_vfl
def selected():
    return {'multi_vfl': multi_vfl.configs('quick'), 'apc_vfl': apc_vfl.configs('quick')}
"""
SERIAL = COMMON + """
from vflkit.training import multi_owner, one_shot
sel = selected()
multi_owner.run_many(sel['multi_vfl'], profile='quick', device='cpu', results=Path({out!r}), progress=False)
one_shot.run_many(sel['apc_vfl'], profile='quick', device='cpu', results=Path({out!r}), progress=False)
"""
SCHEDULED = COMMON + """
from vflkit.scheduler import schedule
if __name__ == '__main__':  # spawned workers import this file again
    keys = {{p: {{c.key for c in cs}} for p, cs in selected().items()}}
    tasks = [t for p in keys for t in study.study_tasks(p, 'quick', results=Path({out!r})) if t.key in keys[p]]
    print(schedule(tasks, device='cpu', workers=2, progress=False, runs_per_worker={rpw}))
"""


def main(root: Path) -> dict[str, float]:
    root.mkdir(parents=True, exist_ok=True)
    scripts = {"serial": SERIAL.format(out=str(root / "serial")),
               "fresh": SCHEDULED.format(out=str(root / "fresh"), rpw=1),
               "reused": SCHEDULED.format(out=str(root / "reused"), rpw=None)}
    out: dict[str, float] = {}
    for name, code in scripts.items():
        (root / f"{name}.py").write_text(code)
        start = time.perf_counter()
        subprocess.run([sys.executable, str(root / f"{name}.py")], check=True)
        out[f"{name}_s"] = round(time.perf_counter() - start, 1)
        out[f"{name}_records"] = len(list((root / name).rglob("*.json")))
    for name in ("fresh", "reused"):
        out[f"speedup_{name}_vs_serial"] = round(out["serial_s"] / out[f"{name}_s"], 2)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/time_scheduler.py OUT   (an empty folder for the three result sets)")
    print(json.dumps(main(Path(sys.argv[1]))))
