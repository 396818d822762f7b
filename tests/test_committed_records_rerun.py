"""Each study's committed records are what its methods compute today: the cheapest committed
quick record of each study's own method is computed again from its config and compared.

nbval only re-reads committed records, so without this test a change that alters what a method
computes (a protocol step, an optimiser, a partition) would leave every committed table standing.
The ledger is deterministic and must match exactly; scores must match to float precision on the
CPU the record names, and within a small tolerance elsewhere (other CPUs take other SIMD kernels,
whose rounding training amplifies).
"""

import json
from pathlib import Path

import pytest
import torch

from vflkit.config import project_root
from vflkit.records import _cpu_name
from vflkit.study import STUDY_FAMILY, compute

#: Per study, the method whose records are rerun (None: every record of the study is its own
#: method's).
METHOD = {"vfedmh": "vfedmh", "easter": "easter", "multi_vfl": None, "apc_vfl": "apc_vfl_mse",
          "adptvfedconv": None}
#: Scores within this of the record on another CPU (fractions: 0.03 = 3 accuracy points).
OTHER_CPU_TOLERANCE = 0.03


def _cheapest(paper: str) -> dict:
    """The committed quick record of ``paper``'s own method that took the least time."""
    recs = [json.loads(p.read_text()) for p in sorted((project_root() / "results" / "quick" / paper).glob("*.json"))]
    recs = [r for r in recs if METHOD[paper] is None or r["config"].get("method") == METHOD[paper]]
    assert recs, f"no committed quick record of {paper}"
    return min(recs, key=lambda r: (r["wall_time_s"], r["key"]))


def _scores(record: dict) -> dict[str, float]:
    """Every final score of a record, flattened (the families name them differently)."""
    out: dict[str, float] = {}

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[prefix] = float(value)

    for key in ("final", "final_accuracy", "best_accuracy"):
        if key in record:
            walk(key, record[key])
    return out


@pytest.mark.parametrize("paper", sorted(METHOD))
def test_a_committed_record_is_computed_again(paper: str, tmp_path: Path) -> None:
    committed = _cheapest(paper)
    threads = torch.get_num_threads()
    torch.set_num_threads(committed["environment"]["torch_threads"])  # a reduction's order depends on it
    try:
        compute({"family": STUDY_FAMILY[paper], "config": committed["config"], "profile": committed["profile"],
                 "results": str(tmp_path)}, device="cpu", deadline=None)
    finally:
        torch.set_num_threads(threads)
    (path,) = (tmp_path / committed["profile"] / paper).glob(f"*{committed['key']}*.json")
    again = json.loads(path.read_text())
    assert again["key"] == committed["key"]
    for ledger in ("comm", "ledger_per_kind", "costs"):
        if ledger in committed:
            assert again[ledger] == committed[ledger], f"{paper}: the ledger ({ledger}) differs from the record's"
    want, got = _scores(committed), _scores(again)
    assert want and set(got) == set(want), (paper, sorted(want), sorted(got))
    same_cpu = _cpu_name() == committed["environment"]["cpu"]
    tolerance = 1e-6 if same_cpu else OTHER_CPU_TOLERANCE
    off = {k: (want[k], got[k]) for k in want if abs(want[k] - got[k]) > tolerance}
    assert not off, (f"{paper} ({committed['key']}, recorded at {committed['environment']['git_commit']} on "
                     f"{committed['environment']['cpu']}): scores moved beyond {tolerance}: {off}")
