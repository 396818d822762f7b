"""Each study's committed records are what its methods compute today: the cheapest committed
quick record of each study's own method is computed again from its config and compared.

nbval only re-reads committed records, so without this test a change that alters what a method
computes (a protocol step, an optimiser, a partition) would leave every committed table standing.
The ledger is deterministic and must match exactly; scores must match to float precision on the
CPU the record names, and within a small tolerance elsewhere (other CPUs take other SIMD kernels,
whose rounding training amplifies). A CPU's name is not enough: a virtual machine calls hosts
with and without AVX-512 "AMD EPYC". So the rerun uses the instruction set the record was made
with, pinned in a fresh process where this CPU has more.

It is also what keeps each family's results version (``records.RESULTS_VERSION``, by which the
reuse warning tells records a changed computation made) honest: the record rerun here must be of
the current version, and a change that moves its numbers must raise the version.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vflkit.config import project_root
from vflkit.records import RESULTS_VERSION, _cpu_name, recorded_results_version
from vflkit.study import STUDY_FAMILY, compute

#: Per study, the method whose records are rerun (None: every record of the study is its own
#: method's).
METHOD = {"vfedmh": "vfedmh", "easter": "easter", "multi_vfl": None, "apc_vfl": "apc_vfl_mse",
          "adptvfedconv": None}
#: Scores within this of the record on another CPU (fractions: 0.03 = 3 accuracy points).
OTHER_CPU_TOLERANCE = 0.03
#: The instruction set of records made before ``cpu_capability`` was recorded. Measured on
#: 2026-11-25 on an AVX-512 "AMD EPYC": the committed quick records rerun exactly with PyTorch and
#: oneDNN pinned to AVX2, and not without (VFedMH's scores moved by up to 0.3 points).
RECORDS_BEFORE_THE_FIELD = "AVX2"
#: x86 levels PyTorch dispatches to, lowest first, and oneDNN's limit for each.
LEVELS = {"DEFAULT": "SSE41", "AVX2": "AVX2", "AVX512": "AVX512_CORE"}


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


def _compute_as_recorded(record: dict, payload: dict) -> bool:
    """Compute ``payload`` with the record's torch threads and instruction set: in this process
    where this CPU dispatches to the record's, else in a fresh one with PyTorch and oneDNN
    pinned to it. False where this CPU lacks that instruction set (the numbers cannot match)."""
    env = record["environment"]
    want = env.get("cpu_capability", RECORDS_BEFORE_THE_FIELD)
    here = torch.backends.cpu.get_cpu_capability()
    levels = list(LEVELS)
    pin = want != here or "onednn_max_cpu_isa" in env
    if pin and want in LEVELS and here in LEVELS and levels.index(want) <= levels.index(here):
        pins = {"ATEN_CPU_CAPABILITY": want.lower(), "ONEDNN_MAX_CPU_ISA": env.get("onednn_max_cpu_isa", LEVELS[want])}
        code = ("import json, sys, torch; from vflkit.study import compute; torch.set_num_threads(int(sys.argv[2])); "
                "compute(json.loads(sys.argv[1]), device='cpu', deadline=None)")
        subprocess.run([sys.executable, "-c", code, json.dumps(payload), str(env["torch_threads"])], check=True,
                       env={**os.environ, **pins})
        return True
    threads = torch.get_num_threads()
    torch.set_num_threads(env["torch_threads"])  # a reduction's order depends on it
    try:
        compute(payload, device="cpu", deadline=None)
    finally:
        torch.set_num_threads(threads)
    return not pin


@pytest.mark.parametrize("paper", sorted(METHOD))
def test_the_rerun_record_is_of_its_family_s_current_results_version(paper: str) -> None:
    """The record computed again below is of its family's current results version
    (records.RESULTS_VERSION), so the rerun's passing means that version computes it: a change
    that moves the numbers fails the rerun until the version is raised and the records remade."""
    committed = _cheapest(paper)
    family = STUDY_FAMILY[paper]
    assert recorded_results_version(committed) == RESULTS_VERSION[family], (
        f"{paper}: the committed record {committed['key']} is of results version "
        f"{recorded_results_version(committed)}, the {family} family's is {RESULTS_VERSION[family]}: remake the "
        "committed records at the new version (or lower it again if the numbers did not change)")


@pytest.mark.parametrize("paper", sorted(METHOD))
def test_a_committed_record_is_computed_again(paper: str, tmp_path: Path) -> None:
    committed = _cheapest(paper)
    same_isa = _compute_as_recorded(committed, {"family": STUDY_FAMILY[paper], "config": committed["config"],
                                                "profile": committed["profile"], "results": str(tmp_path)})
    (path,) = (tmp_path / committed["profile"] / paper).glob(f"*{committed['key']}*.json")
    again = json.loads(path.read_text())
    assert again["key"] == committed["key"]
    for ledger in ("comm", "ledger_per_kind", "costs"):
        if ledger in committed:
            assert again[ledger] == committed[ledger], f"{paper}: the ledger ({ledger}) differs from the record's"
    want, got = _scores(committed), _scores(again)
    assert want and set(got) == set(want), (paper, sorted(want), sorted(got))
    same_cpu = _cpu_name() == committed["environment"]["cpu"] and same_isa
    tolerance = 1e-6 if same_cpu else OTHER_CPU_TOLERANCE
    off = {k: (want[k], got[k]) for k in want if abs(want[k] - got[k]) > tolerance}
    assert not off, (f"{paper} ({committed['key']}, recorded at {committed['environment']['git_commit']} on "
                     f"{committed['environment']['cpu']}): scores moved beyond {tolerance}: {off}. If the change "
                     f"is meant, raise records.RESULTS_VERSION[{STUDY_FAMILY[paper]!r}] and remake the records")
