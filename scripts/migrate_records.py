"""Bring committed records up to date: the one envelope of :mod:`vflkit.records` (issue 10),
rounds counted as protocol phases (issue 13), and a compact encoding (issue 40).

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

Second (issue 13), the ``rounds`` figures. Records written before the ledger counted protocol
phases (:meth:`vflkit.comm.Ledger.rounds`) counted one round per (epoch, step, kind), and their
per-party rounds counted one epoch's. Each such record is brought to the new count from its own
figures and config, exactly, and marked (``comm.rounds_counted_as = "protocol_phases"`` and
``comm.rounds_migrated_from``); a record already marked is left alone, so the script can run
again on records that old code keeps writing. Per family, what changes (everything else is
already the same under both counts):

- split trainer (``vfedmh``, ``demo``): C-VFL's step is 2 phases where 3 kinds were counted, so
  its training rounds are 2/3 of the old; every party of these star protocols takes part in
  every phase, so a party's rounds are the run's training rounds; VFedMH's evaluation (every
  batch of an epoch at one step) is 1 + 2 x batches rounds per evaluated epoch where 3 kinds
  were counted (the next batch's embeddings travel with this batch's predictions), the number
  of batches read off its messages (3 per passive party and batch); VFedMH's key set-up is 2
  phases (keys up, key sets down) where 1 kind was counted;
- Multi-VFL: label owner k's update to the server travels in the same phase as the data
  owners' first embeddings to label owner k+1 (the old count split them), so a round has
  K - 1 fewer rounds; per-party rounds were one global round's (identical in every round) and
  are multiplied by the rounds run. A record that diverged stopped inside a round and is not
  migrated (reported);
- APC-VFL: one-shot messages, aligned SplitNN and FedSVD count the same under both rules.

A record whose figures do not have the shape these rules assume is reported and left as it is.

Third (issue 40: every byte of the committed tree travels to a time-limited GPU machine beside the
data, under a transfer limit), the encoding: ``comm.per_link`` as columns and rows (``{"columns",
"data"}``, what the split trainer now writes; a dict per row was most of a record's bytes), and the
whole record as compact JSON (the record store's format now; indentation was a third of the bytes).
The values are the same: the rows keep their order and numbers, in the ledger's column order (a
record from before the ledger's ``round`` column keeps the columns it has).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

from vflkit.comm import ROUNDS_COUNTED_AS
from vflkit.config import project_root
from vflkit.files import dumps
from vflkit.methods import RunConfig
from vflkit.methods.multi_vfl import MultiVFLConfig
from vflkit.network import link_rows
from vflkit.records import ENVELOPE, write_json_atomic
from vflkit.training.one_shot import OneShotRun
from vflkit.training.tiles import TilesRun

RUN_CLASSES = {"vfedmh": RunConfig, "demo": RunConfig, "easter": RunConfig, "multi_vfl": MultiVFLConfig,
               "apc_vfl": OneShotRun, "adptvfedconv": TilesRun}


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


#: Split-trainer methods whose training and evaluation rounds are the same under both counts.
SAME_COUNT = {"local", "splitnn", "pyvertical", "agg_vfl", "homo_aggvfl", "heter_aggvfl"}
#: VFedMH's protocol: 4 phases a step (as 4 kinds), but evaluation and key set-up change.
VFEDMH_FAMILY = {"vfedmh", "homo_vfedmh", "easter"}
MIGRATED_FROM = "one round per (epoch, step, kind); per-party rounds of one epoch (scripts/migrate_records.py)"


def _exact(numerator: int, denominator: int, what: str) -> int:
    if denominator <= 0 or numerator % denominator:
        raise ValueError(f"{what}: {numerator} / {denominator} is not a whole number")
    return numerator // denominator


def _split_rounds(comm: dict[str, Any], config: dict[str, Any]) -> None:
    """The split trainer's figures (see the module docstring), in place."""
    method, n_passive = config["method"], int(config["n_parties"]) - 1
    if method not in SAME_COUNT | VFEDMH_FAMILY | {"c_vfl"}:
        raise ValueError(f"no rule for method {method!r}")
    per_epoch = comm["per_epoch"]
    if sum(r["rounds"] for r in per_epoch) != comm["total"]["rounds"]:
        raise ValueError("per-epoch rounds do not add up to the total")
    one_epoch_old = max((r["rounds"] for r in per_epoch), default=0)
    if method == "c_vfl":
        for r in per_epoch:
            r["rounds"] = 2 * _exact(r["rounds"], 3, "C-VFL's rounds of an epoch (3 kinds a step)")
    comm["total"]["rounds"] = sum(r["rounds"] for r in per_epoch)
    for row in comm["per_party"]:
        if row["rounds"] != one_epoch_old:
            raise ValueError(f"{row['party']} took part in {row['rounds']} rounds, not one epoch's {one_epoch_old}")
        row["rounds"] = comm["total"]["rounds"]
    if method in VFEDMH_FAMILY:
        ev = comm["eval_total"]
        if ev["messages"]:
            epochs = _exact(ev["rounds"], 3, "VFedMH's evaluation rounds (3 kinds an epoch)")
            batches = _exact(ev["messages"], epochs * 3 * n_passive, "VFedMH's evaluation batches")
            ev["rounds"] = epochs * (1 + 2 * batches)
        setup = comm["setup_total"]
        if setup["messages"]:
            if setup["messages"] != 2 * n_passive or setup["rounds"] != 1:
                raise ValueError(f"key set-up of {setup['messages']} messages in {setup['rounds']} rounds")
            setup["rounds"] = 2


def _multi_vfl_rounds(comm: dict[str, Any], record: dict[str, Any]) -> None:
    """Multi-VFL's figures (see the module docstring), in place."""
    if record.get("diverged"):
        raise ValueError("the run diverged inside a round: its last round's rounds cannot be derived")
    k = int(record["config"]["n_label_owners"])
    per_round = comm["per_round"]
    if sum(r["rounds"] for r in per_round) != comm["total"]["rounds"]:
        raise ValueError("per-round rounds do not add up to the total")
    for r in per_round:
        r["rounds"] -= k - 1
        if r["rounds"] < 2:
            raise ValueError(f"round {r['round']} would have {r['rounds']} rounds")
    comm["total"]["rounds"] = sum(r["rounds"] for r in per_round)
    for row in comm["per_party"]:
        row["rounds"] *= len(per_round)


def count_rounds_as_phases(record: dict[str, Any], *, paper: str) -> dict[str, Any]:
    """``record`` with its rounds counted as protocol phases (a new dict; ``record`` is not
    changed). A record already so counted is returned as it is; one the rules do not fit
    raises ValueError."""
    comm = record.get("comm")  # AdptVFedConv's records count bytes and messages, no rounds
    if comm is None or comm.get("rounds_counted_as") == ROUNDS_COUNTED_AS:
        return record
    out = copy.deepcopy(record)
    comm = out["comm"]
    if paper in ("vfedmh", "demo", "easter"):
        _split_rounds(comm, out["config"])
    elif paper == "multi_vfl":
        _multi_vfl_rounds(comm, out)
    elif paper != "apc_vfl":  # APC-VFL's counts are the same under both rules
        raise ValueError(f"no rule for the records of {paper!r}")
    comm["rounds_counted_as"] = ROUNDS_COUNTED_AS
    comm["rounds_migrated_from"] = MIGRATED_FROM
    return out


#: ``comm.per_link``'s columns, in the order :meth:`vflkit.comm.Ledger.per_link` writes them.
LINK_COLUMNS = ("epoch", "round", "kind", "sender", "receiver", "messages", "bytes", "steps")


def links_as_columns(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with ``comm.per_link`` as columns and rows (a new dict; ``record`` is not
    changed), as the split trainer writes it now; a record without per-link rows, or with them
    so already, is returned as it is."""
    comm = record.get("comm")
    links = comm.get("per_link") if isinstance(comm, dict) else None
    if not isinstance(links, list):
        return record
    out = copy.deepcopy(record)
    frame = link_rows(links) if links else None
    if frame is None:  # no traffic (Local): what an empty ledger writes
        out["comm"]["per_link"] = {"columns": list(LINK_COLUMNS), "data": []}
        return out
    if set(frame.columns) - set(LINK_COLUMNS):  # records before "round" have one column fewer
        raise ValueError(f"per_link columns {sorted(frame.columns)} are not the ledger's {list(LINK_COLUMNS)}")
    out["comm"]["per_link"] = frame[[c for c in LINK_COLUMNS if c in frame.columns]].to_dict(orient="split",
                                                                                          index=False)
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else project_root() / "results"
    changed = total = 0
    failed: list[str] = []
    for path in sorted(root.glob("*/*/*.json")):
        profile, paper = path.parent.parent.name, path.parent.name
        record = json.loads(path.read_text())
        new = migrate(record, profile=profile, paper=paper, key=path.stem)
        try:
            new = count_rounds_as_phases(new, paper=paper)
        except ValueError as exc:  # left as it is, and said
            failed.append(f"{path.relative_to(root)}: {exc}")
        new = links_as_columns(new)
        total += 1
        if new != record or path.read_text() != dumps(new, compact=True):
            write_json_atomic(path, new)
            changed += 1
    print(f"{changed} of {total} records rewritten under {root}")
    for line in failed:
        print(f"rounds not migrated: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
