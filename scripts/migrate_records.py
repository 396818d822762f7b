"""One-off: bring committed records into the one envelope of :mod:`vflkit.records` (issue 10).

``python scripts/migrate_records.py [RESULTS]`` (default: the project's ``results/``) rewrites
every ``<profile>/<paper>/<key>.json`` so that it has the envelope every family now writes:
``key, profile, config, environment, finished, wall_time_s, peak_memory_mb, peak_memory_kind,
diverged`` and then the family's results. Nothing is retrained and no number changes:

- the file's key is checked against its config (the config is rebuilt with its family's run
  class, so a record that no longer matches its config is an error, not silently kept);
- a field the old format did not record is added as ``null`` (APC-VFL's records have no
  ``finished`` time and no peak memory; nobody measured them), never invented;
- the top-level ``seed`` of the Multi-VFL and APC-VFL records is dropped: it repeats
  ``config.seed``.

Running it again changes nothing (it says how many files it rewrote).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from vflkit.config import project_root
from vflkit.methods import RunConfig
from vflkit.methods.multi_vfl import MultiVFLConfig
from vflkit.records import ENVELOPE, write_json_atomic
from vflkit.training.one_shot import OneShotRun

RUN_CLASSES = {"vfedmh": RunConfig, "demo": RunConfig, "multi_vfl": MultiVFLConfig, "apc_vfl": OneShotRun}


def migrate(record: dict[str, Any], *, profile: str, paper: str, key: str) -> dict[str, Any]:
    """``record`` in the common envelope (a new dict; ``record`` is not changed)."""
    run = RUN_CLASSES[paper].from_dict(record["config"])
    if run.key != key:
        raise ValueError(f"{profile}/{paper}/{key}.json: its config's key is {run.key}")
    out = dict(record)
    if out.setdefault("key", key) != key or out.setdefault("profile", profile) != profile:
        raise ValueError(f"{profile}/{paper}/{key}.json names key {out['key']!r}, profile {out['profile']!r}")
    if "seed" in out:
        if out["seed"] != record["config"]["seed"]:
            raise ValueError(f"{profile}/{paper}/{key}.json: seed {out['seed']} is not its config's")
        del out["seed"]
    out.setdefault("finished", None)
    out.setdefault("diverged", None)
    out.setdefault("peak_memory_mb", None)
    if "peak_memory_kind" not in out:
        device = out["environment"].get("device", "cpu")
        out["peak_memory_kind"] = (None if out["peak_memory_mb"] is None
                                   else "cuda_max_allocated" if device.startswith("cuda") else "process_max_rss")
    missing = [k for k in ENVELOPE if k not in out]
    if missing:
        raise ValueError(f"{profile}/{paper}/{key}.json lacks {missing}")
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else project_root() / "results"
    changed = total = 0
    for path in sorted(root.glob("*/*/*.json")):
        profile, paper = path.parent.parent.name, path.parent.name
        record = json.loads(path.read_text())
        new = migrate(record, profile=profile, paper=paper, key=path.stem)
        total += 1
        if new != record:
            write_json_atomic(path, new)
            changed += 1
    print(f"{changed} of {total} records rewritten under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
