"""The reproduction report: ``figures/REPORT.md``, regenerated from records and the papers' numbers.

``python -m vflkit.reproduction`` (``make report``; ``make study`` ends with it) writes one
section per paper with

* every artefact the paper prints (each table and figure): the profiles whose records it has,
  where those come from (when they finished, the commit, the device) and its status, with links
  to the notebook and to the CSV and PNG the notebook wrote under ``figures/<paper>/<profile>/``;
* every number the paper prints (:func:`vflkit.report.load_reference`) beside ours, read from the
  tables the studies wrote (the reference long format of :func:`vflkit.report.write_table`), the
  paper profile's value where there is one, else the quick profile's; with the gap and whether it
  lies within the paper's std, ours, or 2 points; and a figure of ours against the paper's;
* every claim (the study's ``CLAIMS``, judged by :func:`vflkit.claims.evaluate`) per profile,
  and the figure-only claims of the reference README mapped onto them;

and ends with findings beyond the papers, computed from the records where the study provides the
function. Nothing is trained: the records that exist are loaded and the missing ones skipped, so a
profile without records reads "not recorded" / "not testable at this profile", not an error.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import re
import sys
import time
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from . import claims as claimlib
from . import records as store
from .config import check_record_profile, data_root, figures_dir
from .files import atomic_path
from .report import KEY_COLUMNS, TABLE_COLUMNS, load_reference, set_style, shown_path

#: The papers in the order the report shows them, by study module, with the names they print.
TITLES: dict[str, str] = {"vfedmh": "VFedMH", "easter": "EASTER", "multi_vfl": "Multi-VFL",
                          "apc_vfl": "APC-VFL", "adptvfedconv": "AdptVFedConv"}
#: The tolerance of "within 2 points" (percentage points of a score).
POINTS = 2.0
#: Scores the papers print as fractions (the reference README: percent where the metric's name
#: ends in ``_pct``, fractions otherwise): one point is 0.01 of them. Other metrics (MB, rounds,
#: minutes) have no points, so no 2-point judgement.
FRACTION_SCORES: tuple[str, ...] = ("accuracy", "f1", "micro_f1", "macro_f1", "weighted_f1", "auc")
#: Statuses of a number the paper prints.
COMPARED, NO_PAPER_VALUE, NOT_RECORDED = "compared", "recorded; the paper gives no number", "not recorded"
#: A cell whose every recorded run diverged: it has no number of ours (a diverged run's score is
#: its broken model's, not the method's), so nothing is compared.
DIVERGED = "recorded; every run diverged"
CELL_STATUSES: tuple[str, ...] = (COMPARED, NO_PAPER_VALUE, NOT_RECORDED, DIVERGED)
#: Statuses of an artefact (the report's legend); a status may add the other profiles' state.
PAPER_SCALE, QUICK_ONLY, IMPOSSIBLE = "reproduced at paper scale", "quick only", "impossible here"
_KEYS = [c for c in KEY_COLUMNS if c != "paper"]


# --------------------------------------------------------------------------- artefacts


@dataclass(frozen=True)
class Artefact:
    """One table or figure a paper prints: the runs behind it and the files its notebook writes."""

    label: str  # as the paper names it: "Table II", "Fig. 3"
    runs: Callable[[str], list[Any]]  # profile -> the study's runs it is drawn from
    files: tuple[str, ...]  # glob patterns under figures/<paper>/<profile>/


@functools.lru_cache(maxsize=None)
def _configs(paper: str, profile: str) -> Any:
    """``<paper>.configs(profile)``, built once (the artefacts share it)."""
    return _study(paper).configs(profile)


_KEY_OF: dict[int, tuple[Any, str]] = {}


def _key(run: Any) -> str:
    """``run.key``, hashed once per run object (a config's key hashes its whole dict: thousands of
    lookups would take seconds). The run is kept beside its key, so its id is never reused."""
    hit = _KEY_OF.get(id(run))
    if hit is None or hit[0] is not run:
        hit = _KEY_OF[id(run)] = (run, run.key)
    return hit[1]


def _unique(runs: Iterable[Any]) -> list[Any]:
    """``runs`` once each (by key), in first-seen order."""
    return list({_key(r): r for r in runs}.values())


def _groups(paper: str, *names: str, keep: Callable[[Any], bool] = lambda c: True) -> Callable[[str], list[Any]]:
    """The runs of the named groups of ``<paper>.configs(profile)`` (a dict of artefact -> runs)."""
    def runs(profile: str) -> list[Any]:
        groups = _configs(paper, profile)
        return _unique(c for n in names for c in groups.get(n, []) if keep(c))
    return runs


def _easter_table5(profile: str) -> list[Any]:
    """Table V and Figs. 4-5 are drawn from the same runs (the baselines' θ2 run and EASTER's)."""
    easter = _study("easter")
    return easter._table5_runs(_configs("easter", profile), easter.settings(profile)["table5_datasets"])


def _multi_vfl(keep: Callable[[Any], bool]) -> Callable[[str], list[Any]]:
    """Multi-VFL's runs (a flat list) that ``keep`` selects."""
    return lambda profile: [c for c in _configs("multi_vfl", profile) if keep(c)]


def _apc(kind: str, *, methods: Sequence[str] | None = None, datasets: Sequence[str] | None = None,
         few: bool = False) -> Callable[[str], list[Any]]:
    """APC-VFL's runs of one kind at Appendix B's learning rate; ``few``: Fig. 8 / D.3's small
    aligned counts (with the Local and Ablation runs they are drawn beside), else Fig. 5's."""
    def runs(profile: str) -> list[Any]:
        apc = _study("apc_vfl")
        out = [c for c in _configs("apc_vfl", profile) if c.kind == kind and c.lr != apc.SENSITIVITY_LR
               and (datasets is None or c.dataset in datasets) and (methods is None or c.method in methods)]
        small = [c for c in out if c.n_aligned in apc.DATASETS[c.dataset].few_aligned]
        if not few:
            return [c for c in out if c.n_aligned not in apc.DATASETS[c.dataset].few_aligned]
        # Local and Ablation (no aligned count) belong to the small counts only where those are run
        ran = {c.dataset for c in small}
        return small + [c for c in out if c.n_aligned is None and c.dataset in ran]
    return runs


#: Per paper, the tables and figures it prints, in its order.
ARTEFACTS: dict[str, tuple[Artefact, ...]] = {
    "vfedmh": (
        Artefact("Table II", _groups("vfedmh", "table2"), ("table2.*",)),
        Artefact("Table III", _groups("vfedmh", "table3"), ("table3.*",)),
        Artefact("Table IV", _groups("vfedmh", "table4", "table4_standard"), ("table4.*",)),
        Artefact("Fig. 3", _groups("vfedmh", "table2"), ("fig3.*",)),
        Artefact("Fig. 4", _groups("vfedmh", "table4", "table4_standard"), ("fig4.*",)),
        Artefact("Fig. 5", _groups("vfedmh", "fig5"), ("fig5.*",)),
    ),
    "easter": (
        Artefact("Table II", _groups("easter", "table2"), ("table2.*",)),
        Artefact("Table IV", _groups("easter", "table4"), ("table4.*",)),
        Artefact("Table V", _easter_table5, ("table5.*",)),
        Artefact("Fig. 4", _easter_table5, ("fig4.*",)),
        Artefact("Fig. 5", _easter_table5, ("fig5.*",)),
        Artefact("Table VI", _groups("easter", "table6"), ("table6.*",)),
        Artefact("Table VII", _groups("easter", "table2", keep=lambda c: c.method == "easter"), ("table7_*",)),
        Artefact("Fig. 6", _groups("easter", "fig6"), ("fig6.*",)),
    ),
    "multi_vfl": (
        Artefact("Fig. 2", _multi_vfl(lambda c: c.server_optimizer == "fedavg"), ("fig2.*", "final_accuracy.csv")),
        Artefact("Fig. 3", _multi_vfl(lambda c: c.scenario == "4niid"), ("fig3.*", "final_accuracy.csv")),
    ),
    "apc_vfl": (
        Artefact("Fig. 5", _apc("fig5"), ("fig5.*",)),
        Artefact("Fig. 6", _apc("fig5", methods=("apc_vfl_mse", "vfedtrans")), ("fig6.*",)),
        Artefact("Fig. 7", _apc("fig5"), ("fig7_*",)),
        Artefact("Fig. 8", _apc("fig5", datasets=("mimic3",), few=True), ("fig8.*",)),
        Artefact("App. D.3", _apc("fig5", datasets=("credit_card",), few=True), ("fig8.*",)),
        Artefact("Table 2", _apc("table2"), ("table2.csv", "table2_lr0.01.csv")),
        Artefact("Table 4", _apc("table2", datasets=("mimic3",)), ("table4.*",)),
    ),
    "adptvfedconv": (
        Artefact("Table 2", _groups("adptvfedconv", "table2"), ("table2.*",)),
        Artefact("Fig. 3", _groups("adptvfedconv", "table2"), ("fig3.*",)),
        Artefact("Table 3", _groups("adptvfedconv", "table3"), ("table3.*",)),
        Artefact("Fig. 4", _groups("adptvfedconv", "table3"), ("fig4.*",)),
    ),
}


def _study(paper: str) -> Any:
    """The study module of ``paper`` (:mod:`vflkit.studies.<paper>`)."""
    return importlib.import_module(f"vflkit.studies.{paper}")


def _all_runs(paper: str, profile: str) -> list[Any]:
    """Every run of the study under ``profile`` (the artefacts' and the study's own extras)."""
    cfg = _configs(paper, profile)
    return _unique(c for g in cfg.values() for c in g) if isinstance(cfg, dict) else _unique(cfg)


class _Records:
    """The records of each (paper, profile), loaded once per report; nothing is trained."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self.problems: list[str] = []

    def get(self, paper: str, profile: str) -> dict[str, dict[str, Any]]:
        """The records that exist for the study's runs under ``profile``, by key."""
        if (paper, profile) not in self._cache:
            runs = _all_runs(paper, profile)
            try:
                found = store.load_available(runs, profile=profile)
            except store.BadRecord:  # one bad file must not hide the others: skip it, say so
                found = []
                for run in runs:
                    try:
                        found += store.load_available([run], profile=profile)
                    except store.BadRecord:
                        self.problems.append(f"{TITLES[paper]}, {profile} profile: the file of run {run.key} "
                                             "is not its record (skipped; the study's notebook names it)")
            self._cache[paper, profile] = {r["key"]: r for r in found}
        return self._cache[paper, profile]


def _present(datasets: Iterable[str]) -> tuple[str, ...]:
    """Those of APC-VFL's ``datasets`` that load here (looked up once per data folder)."""
    return _present_in(str(data_root()), tuple(sorted(datasets)))


@functools.lru_cache(maxsize=8)
def _present_in(root: str, datasets: tuple[str, ...]) -> tuple[str, ...]:
    from .training.one_shot import available_datasets

    return tuple(available_datasets(datasets)[0])


def _unavailable(paper: str, runs: Sequence[Any]) -> list[Any]:
    """Runs on data that is not here (APC-VFL's MIMIC-III cannot be redistributed)."""
    if paper != "apc_vfl" or not runs:
        return []
    present = _present({c.dataset for c in runs})
    return [c for c in runs if c.dataset not in present]


def _pending_cost(paper: str, runs: Sequence[Any]) -> pd.DataFrame:
    """The pending paper-profile ``runs`` of an artefact: what each needs (GPU or CPU) and its
    estimated cost where the study gives one (columns ``needs, h100_min, cpu_h``)."""
    cols = ["needs", "h100_min", "cpu_h"]
    if not runs:
        return pd.DataFrame(columns=cols)
    study = _study(paper)
    if paper == "vfedmh":
        # paper_so_far's pricing, run by run (it reports a group's pending runs without their
        # keys, and the runs of Table IV differ only in optimizer): ResNets on a GPU at the
        # calibrated H100 minutes, the small networks on a CPU, unpriced
        rows = []
        for c in runs:
            gpu = any(m.startswith("resnet") for m in c.models)
            arch = "resnet" if c.method == "vfedmh" and gpu else c.models[0]
            rows.append({"needs": "GPU" if gpu else "CPU", "cpu_h": np.nan,
                         "h100_min": study.H100_MINUTES.get((c.method, arch), np.nan) if gpu else np.nan})
        return pd.DataFrame(rows, columns=cols)
    if paper == "easter":
        df = study.pending({"runs": list(runs)}, [])
        return pd.DataFrame({"needs": df["needs"], "h100_min": df["estimated_h100_min"], "cpu_h": np.nan})
    if paper == "multi_vfl":
        df = study.pending("paper").set_index(["dataset", "scenario", "optimizer", "seed"])
        idx = [(study.DATASET_LABELS[c.dataset], c.scenario, study.OPTIMIZER_LABELS[c.server_optimizer], c.seed)
               for c in runs]
        return pd.DataFrame({"needs": "CPU", "h100_min": np.nan,
                             "cpu_h": df["estimated_cpu_hours"].reindex(idx).to_numpy()})
    if paper == "adptvfedconv":  # GPU only; the study shares a pre-training between runs
        df = study.results("paper")[1].set_index(["variant", "cut", "seed"])
        idx = [(c.variant, c.adpt.cut, c.seed) for c in runs]
        return pd.DataFrame({"needs": "GPU", "h100_min": df["estimated_h100_min"].reindex(idx).to_numpy(),
                             "cpu_h": np.nan})
    # APC-VFL prices its pending runs per dataset, kind and method, not per artefact (see the section)
    return pd.DataFrame({"needs": ["CPU"] * len(runs), "h100_min": np.nan, "cpu_h": np.nan})


def _pending_text(cost: pd.DataFrame) -> str:
    """"pending: GPU (n runs, est. ...), CPU (...)" from :func:`_pending_cost`; "" when none."""
    parts = []
    for needs in ("GPU", "CPU"):
        d = cost[cost["needs"] == needs]
        if d.empty:
            continue
        est = [f"est. {d[col].sum():,.0f} {unit}" for col, unit in (("h100_min", "H100 min"), ("cpu_h", "CPU h"))
               if d[col].notna().any()]
        unpriced = int(d[["h100_min", "cpu_h"]].isna().all(axis=1).sum())
        note = "; ".join(est + ([f"{unpriced} without an estimate"] if est and unpriced else []))
        parts.append(f"{needs} ({len(d)} run{'s' if len(d) != 1 else ''}" + (f", {note}" if note else "") + ")")
    return "pending: " + ", ".join(parts) if parts else ""


def _provenance(profile: str, runs: Sequence[Any], recs: Sequence[dict[str, Any]]) -> str:
    """One line: runs recorded, seeds, when they finished, commits and devices (from the records)."""
    seeds = sorted({r["config"].get("seed") for r in recs if r["config"].get("seed") is not None})
    days = sorted(r["finished"][:10] for r in recs if r.get("finished"))
    when = ("" if not days else days[0] if days[0] == days[-1] else f"{days[0]} to {days[-1]}")
    commits = pd.Series([r.get("environment", {}).get("git_commit", "?") for r in recs]).value_counts()
    shown = ", ".join(f"`{c}`" for c in commits.index[:3]) + (f" +{len(commits) - 3}" if len(commits) > 3 else "")
    devices = []
    for r in recs:
        env = r.get("environment", {})
        dev = env.get("device", "?")
        name = env.get("device_name", "") if str(dev).startswith("cuda") else env.get("cpu", "")
        devices.append(f"{dev} ({name})" if name else str(dev))
    return (f"**{profile}**: {len(recs)} of {len(runs)} runs; seeds {', '.join(map(str, seeds)) or '—'}; "
            f"finished {when or 'not recorded'}; commit {shown}; device {', '.join(dict.fromkeys(devices))}")


def artefact_table(paper: str, profiles: Sequence[str], recs: _Records) -> pd.DataFrame:
    """One row per artefact of ``paper``: profiles recorded (with provenance), status, links."""
    rows = []
    for art in ARTEFACTS[paper]:
        counts: dict[str, tuple[int, int]] = {}
        lines, links = [], [f"[notebook](../notebooks/{paper}.ipynb)"]
        pending = ""
        impossible: list[Any] = []
        for profile in profiles:
            runs = art.runs(profile)
            have = recs.get(paper, profile)
            found = [have[_key(c)] for c in runs if _key(c) in have]
            counts[profile] = (len(runs), len(found))
            if found:
                lines.append(_provenance(profile, runs, found))
            folder = figures_dir() / paper / profile
            for pattern in art.files:
                links += [f"[{profile}/{p.name}]({paper}/{profile}/{p.name})" for p in sorted(folder.glob(pattern))]
            if profile == "paper":
                impossible = _unavailable(paper, runs)
                skip = {_key(c) for c in impossible} | set(have)
                todo = [c for c in runs if _key(c) not in skip]
                pending = _pending_text(_pending_cost(paper, todo))
        kind, status = _status(counts, profiles, pending, impossible, paper)
        rows.append({"artefact": art.label, "profiles recorded": "<br>".join(lines) or "none",
                     "status": status, "links": " · ".join(dict.fromkeys(links)), "kind": kind})
    return pd.DataFrame(rows, columns=["artefact", "profiles recorded", "status", "links", "kind"])


def _status(counts: dict[str, tuple[int, int]], profiles: Sequence[str], pending: str,
            impossible: Sequence[Any], paper: str) -> tuple[str, str]:
    """The artefact's kind of status (reproduced at paper scale, quick only, ..., for the overview's
    counts) and its full text, which adds the other profiles' state and what is pending."""
    n_paper, k_paper = counts.get("paper", (0, 0))
    if n_paper and k_paper == n_paper:
        return PAPER_SCALE, PAPER_SCALE
    missing = sorted({_dataset_title(paper, c.dataset) for c in impossible})
    why = (f"{IMPOSSIBLE}: data not redistributable ({', '.join(missing)})"
           if missing and all("MIMIC" in m for m in missing) else f"{IMPOSSIBLE}: data not here ({', '.join(missing)})")
    if n_paper and len(impossible) == n_paper and not any(k for _, k in counts.values()):
        return IMPOSSIBLE, why
    parts = []
    lower = [p for p in profiles if p != "paper"]
    full = [p for p in lower if counts[p][0] and counts[p][1] == counts[p][0]]
    part = [p for p in lower if counts[p][1]]
    if full:
        kind = QUICK_ONLY if full[0] == "quick" else f"{full[0]} only"
        parts.append(kind)
    elif part:
        kind = f"{part[0]} in part"
        parts.append(f"{kind} ({counts[part[0]][1]} of {counts[part[0]][0]} runs)")
    elif any(counts[p][0] for p in lower):
        kind = "no records yet"
        parts.append(f"{' / '.join(p for p in lower if counts[p][0])}: {kind}")
    else:
        kind = "paper profile only" if k_paper else "no records yet"
        if lower:
            parts.append(f"not run in the {' / '.join(lower)} profile")
    if "paper" in counts:
        if k_paper:
            parts.append(f"paper: {k_paper} of {n_paper} runs recorded")
        if pending:
            parts.append(pending)
        if impossible:
            parts.append(f"{len(impossible)} paper runs {why}")
    return kind, "; ".join(parts)


def _dataset_title(paper: str, dataset: str) -> str:
    """A dataset as the paper names it (APC-VFL's registry names are not its titles)."""
    if paper == "apc_vfl":
        return _study("apc_vfl").DATASETS[dataset].title
    return dataset


# --------------------------------------------------------------------------- numbers


def measured(paper: str, profiles: Sequence[str]) -> pd.DataFrame:
    """Our rows in the reference long format: every table the study wrote under
    ``figures/<paper>/<profile>/`` (a CSV with the columns of :data:`vflkit.report.TABLE_COLUMNS`).
    The paper profile's are written by the quick notebooks as far as recorded, and
    ``tests/test_reproduction.py`` fails when one is stale against the committed records.
    ``source`` says where each row comes from."""
    frames = []
    for profile in profiles:
        folder = figures_dir() / paper / profile
        for csv in sorted(folder.glob("*.csv")):
            df = pd.read_csv(csv, dtype={c: str for c in KEY_COLUMNS})
            if set(TABLE_COLUMNS) <= set(df.columns):
                frames.append(df.assign(profile=profile, source=f"[{profile}/{csv.name}]({paper}/{profile}/{csv.name})"))
    cols = list(TABLE_COLUMNS) + ["diverged", "source"]
    if not frames:
        return pd.DataFrame(columns=cols)
    # ``diverged``: runs of the cell that diverged (kept out of its value); 0 where a table has no such count
    out = pd.concat(frames, ignore_index=True).reindex(columns=cols)
    out["diverged"] = out["diverged"].fillna(0).astype(int)
    return out.assign(**{c: out[c].fillna("").astype(str) for c in KEY_COLUMNS})


def _scale(metric: str) -> float | None:
    """Points per unit of ``metric``: 1 for a percentage, 100 for a fraction score, else None."""
    if metric.endswith("_pct"):
        return 1.0
    return 100.0 if metric in FRACTION_SCORES else None


def compare(paper: str, profiles: Sequence[str]) -> pd.DataFrame:
    """Every number ``paper`` prints beside ours: one row per reference row and our matching row
    (several where one printed cell has several of ours, e.g. EASTER's Table VII under two network
    topologies; none: one row with status "not recorded"). Ours is the first of ``profiles`` that
    has the cell. A row of ours matches on the key columns; where a study relabels the model
    column (AdptVFedConv's width-reduced VGG-16), on the others, if no row of ours matches exactly."""
    ref = load_reference(paper).reset_index(names="ref_row")
    ref = ref.assign(**{c: ref[c].fillna("").astype(str) for c in KEY_COLUMNS})
    ours = measured(paper, profiles)
    exact = ref.merge(ours.drop(columns="paper").rename(columns={"model": "our_model"}).assign(
        model=lambda d: d["our_model"]), on=_KEYS, how="inner", suffixes=("", "_ours"))
    loose_keys = [k for k in _KEYS if k != "model"]
    unused = ours.merge(ref[_KEYS], on=_KEYS, how="left", indicator=True)
    unused = unused[unused["_merge"] == "left_only"].drop(columns=["_merge", "paper"]).rename(columns={"model": "our_model"})
    todo = ref[~ref["ref_row"].isin(exact["ref_row"])]
    loose = todo.merge(unused, on=loose_keys, how="inner", suffixes=("", "_ours"))
    hits = pd.concat([exact, loose], ignore_index=True)
    rank = {p: i for i, p in enumerate(profiles)}
    if len(hits):
        hits = hits.assign(rank=hits["profile"].map(rank))
        hits = hits[hits["rank"] == hits.groupby("ref_row")["rank"].transform("min")]
        hits = hits.assign(rounded=hits["value_ours"].astype(float).round(9)).drop_duplicates(["ref_row", "rounded"])
    rows = []
    for _, r in ref.iterrows():
        base = {"table": r["table"], **{k: r[k] for k in _KEYS if k != "table"},
                "paper_value": r["value"], "paper_std": r["std"], "ref_row": r["ref_row"]}
        matched = hits[hits["ref_row"] == r["ref_row"]] if len(hits) else hits
        if matched.empty:
            rows.append({**base, "status": NOT_RECORDED})
            continue
        for _, m in matched.sort_values("source").iterrows():
            value, std, n = float(m["value_ours"]), float(m["std_ours"]), m["n_runs"]
            row = {**base, "value": value, "std": std, "n_runs": n, "diverged": int(m["diverged"]),
                   "profile": m["profile"], "source": m["source"],
                   "our_model": m["our_model"] if m["our_model"] != r["model"] else ""}
            if pd.isna(value) and row["diverged"] > 0:
                rows.append({**row, "status": DIVERGED})
                continue
            if pd.isna(r["value"]):
                rows.append({**row, "status": NO_PAPER_VALUE})
                continue
            gap = value - float(r["value"])
            scale = _scale(r["metric"])
            within = []
            if not pd.isna(r["std"]) and abs(gap) <= float(r["std"]):
                within.append("paper std")
            if not pd.isna(std) and float(n or 1) > 1 and abs(gap) <= std:
                within.append("our std")
            if scale is not None and abs(gap) * scale <= POINTS:
                within.append(f"±{POINTS:g} points")
            rows.append({**row, "gap": gap, "gap_points": gap * scale if scale is not None else np.nan,
                         "within": ", ".join(within) or "none", "status": COMPARED})
    cols = ["ref_row", "table", *[k for k in _KEYS if k != "table"], "paper_value", "paper_std", "value", "std",
            "n_runs", "diverged", "profile", "source", "our_model", "gap", "gap_points", "within", "status"]
    return pd.DataFrame(rows).reindex(columns=cols)


def table_summary(cells: pd.DataFrame) -> pd.DataFrame:
    """Per printed table: cells printed, compared, within 2 points (of the score cells compared)
    and the mean |gap| in points; within the paper's and our std. A printed cell counts once (its
    first row of ours)."""
    rows = []
    for table, g in cells.groupby("table", sort=False):
        first = g.drop_duplicates("ref_row")
        cmp_ = first[first["status"] == COMPARED]
        pts = cmp_[cmp_["gap_points"].notna()]
        within = cmp_["within"].fillna("").astype(str)
        rows.append({"table": table, "cells printed": len(first), "compared": len(cmp_),
                     f"within ±{POINTS:g} points": f"{int((pts['gap_points'].abs() <= POINTS).sum())} of {len(pts)}",
                     "mean abs gap (points)": f"{pts['gap_points'].abs().mean():.2f}" if len(pts) else "—",
                     "within the paper's std": int(within.str.contains("paper std").sum()),
                     "within our std": int(within.str.contains("our std").sum())})
    return pd.DataFrame(rows)


def plot_comparison(paper: str, cells: pd.DataFrame, path: Path) -> Path | None:
    """Ours against the paper's for every compared cell, identity line drawn: scores in points
    (left) and, where the paper prints other quantities (MB, rounds, minutes), those on log axes."""
    cmp_ = cells[cells["status"] == COMPARED].copy()
    if cmp_.empty:
        return None
    set_style()
    scale = cmp_["metric"].map(lambda m: _scale(m) or np.nan)
    cmp_["paper (points)"] = cmp_["paper_value"].astype(float) * scale
    cmp_["ours (points)"] = cmp_["value"].astype(float) * scale
    cmp_["table"] = "Table " + cmp_["table"].astype(str)
    score, other = cmp_[scale.notna()], cmp_[scale.isna() & (cmp_["value"] > 0) & (cmp_["paper_value"] > 0)]
    panels = [p for p in (score, other) if len(p)]
    # one colour per table in both panels
    tables = list(dict.fromkeys(cmp_["table"]))
    palette = dict(zip(tables, sns.color_palette("colorblind", len(tables))))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels) + 0.8, 4.6), squeeze=False)
    for ax, data in zip(axes[0], panels):
        is_score = data is score
        x, y = ("paper (points)", "ours (points)") if is_score else ("paper_value", "value")
        sns.scatterplot(data=data, x=x, y=y, hue="table", style="profile", palette=palette,
                        hue_order=[t for t in tables if t in set(data["table"])], ax=ax, s=28)
        lo, hi = float(min(data[x].min(), data[y].min())), float(max(data[x].max(), data[y].max()))
        ax.plot([lo, hi], [lo, hi], color="0.4", lw=1, ls="--", label="ours = paper")
        if is_score:
            ax.set(xlabel="paper (points)", ylabel="ours (points)", title="scores (accuracy, F1, AUC)")
        else:
            ax.set(xscale="log", yscale="log", xlabel="paper", ylabel="ours",
                   title="other quantities (" + ", ".join(sorted(data["metric"].unique())) + ")")
        ax.legend(fontsize=7)
    fig.suptitle(f"{TITLES[paper]}: ours against the paper's, every compared cell", fontsize=11)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- claims


def readme_claims() -> pd.DataFrame:
    """The reference README's claims the papers make only in figures: paper, figure, claim."""
    text = resources.files("vflkit.reference").joinpath("README.md").read_text()
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 3 and cells[0] not in ("paper", "") and not set(cells[0]) <= set("-"):
            rows.append({"paper": cells[0], "figure": cells[1], "claim": cells[2]})
    return pd.DataFrame(rows, columns=["paper", "figure", "claim"])


def _figures(figure: str) -> list[int]:
    """Figure numbers named by "Fig. 3", "Figs. 4–5" (a range) or "Figs. 4, 6"."""
    nums = [int(n) for n in re.findall(r"\d+", figure)]
    if len(nums) == 2 and re.search(r"\d\s*[–-]\s*\d", figure):
        return list(range(nums[0], nums[1] + 1))
    return nums


def map_readme(readme: pd.DataFrame, evaluated: pd.DataFrame) -> pd.DataFrame:
    """Each README claim (of one paper) judged through the CLAIMS clauses of its figures (those
    whose artefact names the figure): agree if all agree, disagree if any disagrees, else not
    testable; with no clause, not testable with the evidence "no predicate yet"."""
    rows = []
    for _, c in readme.iterrows():
        figs = _figures(c["figure"])
        mask = evaluated["artefact"].map(lambda a: any(re.search(rf"\bFigs?\.\s*{n}\b", a) for n in figs)) \
            if len(evaluated) else pd.Series(dtype=bool)
        for profile in dict.fromkeys(evaluated["profile"]) if len(evaluated) else [None]:
            sub = evaluated[mask & (evaluated["profile"] == profile)] if len(evaluated) else evaluated
            if sub.empty:
                status, evidence = claimlib.NOT_TESTABLE, "no predicate yet"
            else:
                v = claimlib.all_of(claimlib.Verdict(s, "") for s in sub["status"])
                status = v.status
                evidence = (f"{len(sub)} clauses of " + ", ".join(dict.fromkeys(sub["artefact"]))
                            + ": " + claimlib.summary(sub))
            rows.append({"figure": c["figure"], "claim": c["claim"], "profile": profile or "",
                         "status": status, "evidence": evidence})
    return pd.DataFrame(rows, columns=["figure", "claim", "profile", "status", "evidence"])


def evaluate_claims(paper: str, profiles: Sequence[str], *, variants: bool = False) -> pd.DataFrame:
    """The study's CLAIMS judged at each profile (:func:`vflkit.claims.evaluate`); with
    ``variants``, its VARIANT_CLAIMS instead: the same clauses on vflkit's labelled variants
    (sensitivity rows, our design choices), which are never counted as the paper's."""
    study = _study(paper)
    tables = [claimlib.evaluate(getattr(study, "VARIANT_CLAIMS", []) if variants else study.CLAIMS, p)
              for p in profiles]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(
        columns=["paper", "artefact", "clause", "status", "evidence", "profile"])


# --------------------------------------------------------------------------- beyond the papers


def _first_with_records(paper: str, profiles: Sequence[str], recs: _Records) -> tuple[str, dict[str, Any]] | None:
    """The profile whose runs are the most completely recorded (the first of ``profiles`` on a
    tie) and its records; None when no profile has any. A profile with a handful of records
    (the paper profile's first runs) gives thinner evidence than a complete reduced one."""
    share = {p: len(recs.get(paper, p)) / max(1, len(_all_runs(paper, p))) for p in profiles}
    best = max(profiles, key=lambda p: share[p]) if profiles else None
    return (best, recs.get(paper, best)) if best is not None and share[best] > 0 else None


def _nb(paper: str, section: str) -> str:
    """A link to a notebook, naming the section (GitHub gives notebook headings no anchors)."""
    return f"[{paper} notebook](../notebooks/{paper}.ipynb), section “{section}”"


def _beyond_vfedmh(profiles: Sequence[str], recs: _Records) -> list[tuple[str, str]]:
    """VFedMH: label leakage (pointer), the literal blinding scalar, divergence, C-VFL's Q."""
    vfedmh = _study("vfedmh")
    out = [("VFedMH: a passive party recovers every training label from round 4",
            "Round 4 sends each passive party ∂L_k/∂R_k, whose one negative entry per row is the true "
            "class, so an arg-min recovers each label of each batch without a model or auxiliary data "
            "(measured on a real run in the " + _nb("vfedmh", "What a passive party learns: labels from round 4")
            + "; `vflkit.attacks.label_leakage` trains, so this report does not recompute it).")]
    d = vfedmh.blinding_demo()  # a 128x128 masking demonstration, no training (milliseconds)
    out.append(("VFedMH: Eq. (5) read literally (one blinding scalar per party) reveals the embedding",
                f"From one blinded 128×128 embedding the active party computes differences between entries: "
                f"their correlation with the true embedding is {d['corr_literal']:.3f} with one scalar per party and "
                f"{d['corr_per_entry']:+.3f} with a mask per entry; the aggregate's largest error is "
                f"{d['max_abs_error']:.2g} (ring bound {d['error_bound']:.2g}) either way "
                f"(`vfedmh.blinding_demo()`; " + _nb("vfedmh", "Blinding factors") + ")."))
    found = _first_with_records("vfedmh", profiles, recs)
    if found:
        profile, have = found
        groups = _configs("vfedmh", profile)
        runs = _all_runs("vfedmh", profile)
        div = vfedmh.diverged_runs([have[_key(c)] for c in runs if _key(c) in have])
        out.append(("VFedMH: divergence at the paper's learning rate 0.05",
                    f"{len(div)} of {sum(_key(c) in have for c in runs)} recorded {profile}-profile runs diverged"
                    + (": " + "; ".join(f"{r.method} {r.models} on {r.dataset} (epoch {r.epoch}"
                                        + (", collapsed to chance and trained on there)" if r.how == "collapsed"
                                           else ")")
                                        for r in div.itertuples()) if len(div) else "")
                    + " (`vfedmh.diverged_runs`)."))
        t = vfedmh.cvfl_local_iterations(groups, list(have.values()))
        if len(t):
            cols = [c for c in t.columns if c.startswith("Q=")]
            means, counts = t.groupby("dataset")[cols].mean(), t.groupby("dataset")[cols].count()
            out.append(("VFedMH: C-VFL's local iterations Q and its learning rate (Q = 1 is the equal-compute control)",
                        "; ".join(f"{ds}: " + ", ".join(f"{means.loc[ds, c]:.1f} % at {c} ({counts.loc[ds, c]} runs)"
                                                       for c in cols if counts.loc[ds, c])
                                  for ds in means.index)
                        + f" (mean test accuracy over architectures and seeds, {profile} profile; Table II's cell is "
                        f"Q = 10 at {vfedmh.CVFL_LR:g}, the rate C-VFL's analysis allows; "
                        "`vfedmh.cvfl_local_iterations`)."))
    return out


def _beyond_easter(profiles: Sequence[str], recs: _Records) -> list[tuple[str, str]]:
    """EASTER: the two-party setting of Table VI, as recorded."""
    easter = _study("easter")
    found = _first_with_records("easter", profiles, recs)
    text = ("With C = 2 EASTER has one passive party, whose blinding factor must be zero, so the active "
            "party sees its embedding in the clear; the study runs it only with the recorded option "
            "`allow_single_passive`")
    if found:
        profile, have = found
        groups = _configs("easter", profile)
        # table6_security needs at least one recorded EASTER run of Table VI
        ran = any(c.method == "easter" and _key(c) in have for c in groups["table6"])
        sec = easter.table6_security(groups, list(have.values())) if ran else pd.DataFrame()
        flagged = sec[sec["allow_single_passive (recorded)"]] if len(sec) else sec
        text += (f": {len(flagged)} recorded {profile}-profile setting(s) carry the flag "
                 f"({', '.join(f'{r.dataset} C = {r.C}' for r in flagged.itertuples()) or 'none'})")
    link = _nb("easter", "Table VI: 2 to 10 parties")
    return [("EASTER: Table VI's two-party setting is not private", f"{text} ({link}).")]


def _beyond_multi_vfl(profiles: Sequence[str], recs: _Records) -> list[tuple[str, str]]:
    """Multi-VFL: the server optimizers' step sizes against FedAvg's."""
    multi = _study("multi_vfl")
    found = _first_with_records("multi_vfl", profiles, recs)
    title = "Multi-VFL: how far each server optimizer moves the model, and its accuracy"
    link = _nb("multi_vfl", "What the server optimizers do here, measured")
    if not found:
        return [(title, f"Not computed: no records yet; see the {link}.")]
    profile, have = found
    table = multi.displacement(list(have.values()))
    lines = multi.explain(table) if len(table) else []
    return [(title, f"From the {profile} profile's records (`multi_vfl.displacement`, `explain`; {link}):\n\n"
             + "\n".join(f"- {s}" for s in lines))]


def _beyond_apc_vfl(profiles: Sequence[str], recs: _Records) -> list[tuple[str, str]]:
    """APC-VFL: the ledger against the paper's formulas; Appendix B's learning rate."""
    apc = _study("apc_vfl")
    found = _first_with_records("apc_vfl", profiles, recs)
    if not found:
        link = _nb("apc_vfl", "Communication: ledger vs the paper's formulas")
        return [("APC-VFL: the communication ledger against the paper's formulas", f"Not computed: no records yet; see the {link}.")]
    profile, have = found
    main, sens = apc.split_lr(list(have.values()))
    led = apc.ledger_check(main)
    out = [("APC-VFL: the communication ledger against the paper's formulas (Eqs. 6-10)",
            f"Bytes counted by the channel over the paper's footprint, {profile} profile (`apc_vfl.ledger_check`; "
            + _nb("apc_vfl", "Communication: ledger vs the paper's formulas") + "):\n\n"
            + _markdown(led.rename(columns=str)))]
    sensitivity = apc.lr_sensitivity(main, sens)
    if len(sensitivity) and "diff_points" in sensitivity:
        out.append(("APC-VFL: what Appendix B's learning rate changes (Adam at 1e-3 against 0.01)",
                    f"Paired over the runs recorded at both rates, {profile} profile (`apc_vfl.lr_sensitivity`; "
                    + _nb("apc_vfl", "Sensitivity: Adam at lr 0.01 instead of Appendix B's 1e-3") + "):\n\n"
                    + _markdown(sensitivity[["kind", "dataset", "method", "pairs", "score_lr_1e-3", "score_lr_0.01",
                                             "diff_points", "std_error"]])))
    return out


def _beyond_adptvfedconv(profiles: Sequence[str], recs: _Records) -> list[tuple[str, str]]:
    """AdptVFedConv: communication and computation per client at the paper's scale."""
    adpt = _study("adptvfedconv")
    found = _first_with_records("adptvfedconv", profiles, recs)
    records = list(found[1].values()) if found else []
    com = adpt.communication(records)  # the paper-scale rows are priced from the architecture alone
    paper = com[com["scale"] == "paper scale (priced)"].set_index("what")["MiB"]
    link = _nb("adptvfedconv", "Edge devices: communication and computation")
    out = [("AdptVFedConv: communication per client, which the paper claims but never measures",
            "At the paper's scale (VGG-16, 50,000 images, 60 epochs; `adptvfedconv.communication`): "
            + "; ".join(f"{what}: {mib:,.0f} MiB" for what, mib in paper.items()) + f" ({link}).")]
    comp = adpt.compute(records)
    comp = comp[comp["scale"] == "paper's VGG-16"]
    if len(comp):
        out.append(("AdptVFedConv: what a client computes",
                    "Forward MACs of a client's extractor on its tile over the whole VGG-16 on the image "
                    "(paper's width; `adptvfedconv.compute`): "
                    + ", ".join(f"{r.cut} {r.ratio:.1%}" for r in comp.itertuples()) + f" ({link})."))
    return out


BEYOND: dict[str, Callable[[Sequence[str], _Records], list[tuple[str, str]]]] = {
    "vfedmh": _beyond_vfedmh, "easter": _beyond_easter, "multi_vfl": _beyond_multi_vfl,
    "apc_vfl": _beyond_apc_vfl, "adptvfedconv": _beyond_adptvfedconv,
}


# --------------------------------------------------------------------------- markdown


def _escape(value: Any) -> str:
    """A table cell: pipes escaped and line breaks as <br> (a raw one would end the row)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "—"
    if isinstance(value, float):
        value = _num(value)
    return str(value).replace("|", "\\|").replace("\n", "<br>")


def _num(x: Any, sign: bool = False) -> str:
    """A number as a reader wants it: 4 significant digits below 1, 2 decimals up to 10^4."""
    if x is None or pd.isna(x):
        return "—"
    x = float(x)
    s = "+" if sign else ""
    if x != 0 and abs(x) < 1:
        return f"{x:{s}.3g}"
    if abs(x) >= 1e4:
        return f"{x:{s},.0f}"
    return f"{x:{s}.2f}"


def _markdown(df: pd.DataFrame) -> str:
    """``df`` as a GitHub markdown table."""
    if df.empty:
        return "(nothing recorded)\n"
    head = "| " + " | ".join(_escape(c) for c in df.columns) + " |"
    sep = "|" + "---|" * len(df.columns)
    body = ["| " + " | ".join(_escape(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body]) + "\n"


def _cells_view(cells: pd.DataFrame) -> pd.DataFrame:
    """:func:`compare`'s rows as the report prints them: ``ours ± std (n runs)`` beside the paper's."""
    def ours(r: pd.Series) -> str:
        n_div = 0 if pd.isna(r.get("diverged")) else int(r["diverged"])
        if pd.isna(r["value"]):
            return f"diverged ({n_div} run{'s' if n_div != 1 else ''})" if n_div else "—"
        s = _num(r["value"])
        if not pd.isna(r["std"]) and float(r["n_runs"] or 1) > 1:
            s += f" ± {_num(r['std'])}"
        n = "" if pd.isna(r["n_runs"]) else f" ({int(float(r['n_runs']))} run{'s' if float(r['n_runs']) != 1 else ''})"
        if n and n_div:  # the value is of the runs that did not diverge; say how many did
            n = n[:-1] + f"; {n_div} more diverged)"
        return s + n

    def paper(r: pd.Series) -> str:
        return _num(r["paper_value"]) + ("" if pd.isna(r["paper_std"]) else f" ± {_num(r['paper_std'])}")

    def source(r: pd.Series) -> str:
        if pd.isna(r["source"]):
            return "—"
        return r["source"] + (f" (model: {r['our_model']})" if isinstance(r["our_model"], str) and r["our_model"] else "")

    return pd.DataFrame({
        "table": cells["table"], "dataset": cells["dataset"], "method": cells["method"], "setting": cells["setting"],
        "model": cells["model"], "metric": cells["metric"], "paper": cells.apply(paper, axis=1),
        "ours": cells.apply(ours, axis=1), "gap": cells["gap"].map(lambda g: _num(g, sign=True)),
        "within": cells["within"].astype(object).where(cells["within"].notna(), "—"), "status": cells["status"],
        "ours from": cells.apply(source, axis=1)})


def _paper_section(paper: str, profiles: Sequence[str], recs: _Records, out_dir: Path,
                   overview: list[dict[str, Any]], judged: dict[str, pd.DataFrame] | None = None) -> str:
    """A paper's section (artefacts, numbers, claims); appends its line of the overview, and its
    judged claims to ``judged``."""
    title = TITLES[paper]
    md = [f"## {title}\n", f"Notebook: [notebooks/{paper}.ipynb](../notebooks/{paper}.ipynb)\n"]
    arts = artefact_table(paper, profiles, recs)
    md += ["### Artefacts\n", _markdown(arts.drop(columns="kind"))]
    if paper == "apc_vfl" and "paper" in profiles:
        present = _present(_study("apc_vfl").PROFILE_SETTINGS["paper"]["datasets"])
        cost = _study("apc_vfl").pending("paper", datasets=present)
        if len(cost):
            md.append(f"The study prices its pending paper-profile runs per dataset, kind and method, not per "
                      f"artefact: {int(cost['runs'].sum())} runs, at most {cost['cpu_hours_upper'].sum():,.1f} CPU hours "
                      "where the quick profile's run times give a price (`apc_vfl.pending`).\n")
    cells = compare(paper, profiles)
    md.append("### Numbers beside the paper's\n")
    if cells.empty:
        md.append(f"{title} prints no table of numbers (its results are figures only): see the claims below.\n")
        n_cmp = n_pts = n_within = 0
    else:
        summ = table_summary(cells)
        first = cells.drop_duplicates("ref_row")
        n_cmp = int((first["status"] == COMPARED).sum())
        pts = first[(first["status"] == COMPARED) & first["gap_points"].notna()]
        n_pts, n_within = len(pts), int((pts["gap_points"].abs() <= POINTS).sum())
        order = " profile's value where recorded, else the ".join(profiles)
        md.append(f"Ours: the {order} profile's, from the "
                  "tables the notebook wrote; gap = ours − paper, in the metric's unit. \"within\" lists the "
                  f"tolerances the gap meets: the paper's std, ours (over seeds), ±{POINTS:g} points (scores only).\n")
        md.append(_markdown(summ))
        png = plot_comparison(paper, cells, out_dir / f"report_{paper}.png")
        if png is not None:
            md.append(f"![{title}: ours against the paper's](report_{paper}.png)\n")
        for table, g in cells.groupby("table", sort=False):
            md += [f"<details><summary>Table {table}: every printed cell</summary>\n", _markdown(_cells_view(g)),
                   "</details>\n"]
    evaluated = evaluate_claims(paper, profiles)
    if judged is not None:
        judged[paper] = evaluated
    md.append("### Claims\n")
    for profile in profiles:
        t = evaluated[evaluated["profile"] == profile]
        md += [f"#### {profile} profile: {claimlib.summary(t)}\n",
               _markdown(t[["artefact", "clause", "status", "evidence"]])]
    ours = evaluate_claims(paper, profiles, variants=True)
    if len(ours):
        md.append("### The same clauses on our variants (not the paper's claims, not counted above)\n")
        for profile in profiles:
            t = ours[ours["profile"] == profile]
            md += [f"#### {profile} profile: {claimlib.summary(t)}\n",
                   _markdown(t[["artefact", "clause", "status", "evidence"]])]
    readme = readme_claims()
    mapped = map_readme(readme[readme["paper"] == title], evaluated)
    md += ["### The reference README's figure-only claims\n",
           "Each claim the paper makes only in a figure, judged through the clauses above that test its figure.\n",
           _markdown(mapped) if len(mapped) else "(none for this paper)\n"]
    counts = arts["kind"].value_counts()
    overview.append({
        "paper": f"[{title}](#{title.lower()})", "artefacts": "; ".join(f"{n} {s}" for s, n in counts.items()),
        "numbers": (f"{len(cells.drop_duplicates('ref_row'))} printed, {n_cmp} compared, {n_within} of {n_pts} "
                    f"scores within ±{POINTS:g} points") if len(cells) else "figures only",
        **{f"claims ({p})": claimlib.summary(evaluated[evaluated["profile"] == p]) for p in profiles}})
    return "\n".join(md)


def build_report(profile_order: Sequence[str] = ("paper", "quick"), out_dir: Path | None = None) -> str:
    """The report's markdown; writes each paper's comparison figure to ``out_dir``."""
    profiles = [check_record_profile(p) for p in profile_order]
    out_dir = Path(out_dir) if out_dir is not None else figures_dir()
    recs = _Records()
    overview: list[dict[str, Any]] = []
    judged: dict[str, pd.DataFrame] = {}
    sections = [_paper_section(paper, profiles, recs, out_dir, overview, judged) for paper in TITLES]
    beyond = ["## Beyond the papers\n",
              "Findings the papers do not report, each with its evidence computed here from the records (or a "
              "computation of seconds), or, where it needs training, a pointer to the notebook section that measures it.\n"]
    for paper, fn in BEYOND.items():
        try:
            findings = fn(profiles, recs)
        except Exception as exc:  # a finding that cannot be computed is said so, not hidden
            findings = [(f"{TITLES[paper]}: not computed", f"{type(exc).__name__}: {exc}; see the "
                         f"[{paper} notebook](../notebooks/{paper}.ipynb).")]
        for title, text in findings:
            beyond += [f"### {title}\n", text + "\n"]
    head = [
        "# Reproduction report\n",
        "Generated by `python -m vflkit.reproduction` (`make report`; `make study` ends with it) from the "
        "run records under `results/<profile>/<paper>/`, the tables the notebooks wrote under "
        "`figures/<paper>/<profile>/` and the numbers printed in the papers (`vflkit/reference/`); nothing "
        "here is typed by hand. Profiles: " + ", ".join(f"**{p}**" for p in profiles) + ".\n",
        "Artefact statuses: *reproduced at paper scale* (every paper-profile run recorded); *quick only* "
        "(the reduced quick profile recorded, the paper profile not, or in part); *pending: GPU / CPU* "
        "(paper-profile runs not yet made, with the study's cost estimate where it gives one); *impossible "
        "here* (the data cannot be redistributed, APC-VFL's MIMIC-III). Numbers: *compared*, *not recorded* "
        "(the paper prints it, we have no such cell). Claims: agree / disagree / not testable at this profile "
        "(`vflkit.claims`), with one line of evidence.\n",
        "## Overview\n", _markdown(pd.DataFrame(overview))]
    if recs.problems:
        head += ["Records skipped:\n", "\n".join(f"- {p}" for p in recs.problems) + "\n"]
    # what was found first (the verdicts that decide something, then what the papers do not
    # report), the evidence per paper after
    return "\n".join(head + findings_section(judged, profiles) + beyond + sections)


FINDINGS_HEADING = "## Findings"
EVIDENCE = ". Evidence: "


def findings_section(judged: dict[str, pd.DataFrame], profiles: Sequence[str]) -> list[str]:
    """The report's summary of findings: per paper, its verdict counts at each profile and every
    clause a profile decides (agree or disagree), at the largest profile that decides it, with
    its evidence. A clause no profile decides is in the paper's Claims table only."""
    md = [f"{FINDINGS_HEADING}\n",
          "Every clause a profile decides (agree or disagree), at the largest profile that decides it "
          f"({' before '.join(profiles)}); the clauses no profile decides yet are *not testable* at the "
          "scale run, listed with their reasons in each paper's Claims table.\n"]
    for paper, table in judged.items():
        title = TITLES[paper]
        counts = "; ".join(f"{p}: {claimlib.summary(table[table['profile'] == p])}" for p in profiles)
        md.append(f"- **[{title}](#{title.lower()})** ({counts})")
        seen: set[tuple[str, str]] = set()
        for profile in profiles:
            t = table[(table["profile"] == profile) & table["status"].isin([claimlib.AGREE, claimlib.DISAGREE])]
            for r in t.itertuples():
                if (r.artefact, r.clause) in seen:
                    continue
                seen.add((r.artefact, r.clause))
                md.append(f"  - *{r.status}* at the {profile} profile — {r.artefact}: {_escape(r.clause)}"
                          f"{EVIDENCE}{_escape(r.evidence)}")
        md[-1] += "\n"
    return md


README_START, README_END = "<!-- findings: generated by `make report` -->", "<!-- /findings -->"


def readme_findings(report: str) -> str:
    """The README's opening block, from the report's text: one line per paper with its verdict
    counts, linking into the report, and under it each clause the paper profile finds does not
    hold (the evidence, and every other decided clause, are the report's)."""
    lines = report.split(FINDINGS_HEADING, 1)[1].split("\n## ", 1)[0].splitlines()
    papers = []
    for line in lines:
        if line.startswith("- **"):
            papers.append(line.replace("](#", "](figures/REPORT.md#"))
        elif line.startswith(f"  - *{claimlib.DISAGREE}* at the paper profile — "):
            # where a paper does not hold at its own scale: the clause, its evidence in the report
            papers.append(line.split(EVIDENCE, 1)[0])
    beyond = re.findall(r"^### (.+)$", report.split("## Beyond the papers", 1)[1].split("\n## ", 1)[0], re.M)
    anchor = lambda t: re.sub(r"[^a-z0-9 -]", "", t.lower()).replace(" ", "-")  # noqa: E731 (GitHub's anchors)
    return "\n".join([README_START,
                      "**What was found** ([figures/REPORT.md](figures/REPORT.md) has each verdict with its evidence; "
                      "every count here is computed from the records):\n",
                      *papers, "",
                      "Beyond the papers: " + "; ".join(f"[{t}](figures/REPORT.md#{anchor(t)})" for t in beyond) + ".",
                      README_END])


def update_readme(report: str, readme: Path | None = None) -> bool:
    """Write :func:`readme_findings` between the README's markers; False if it has none."""
    from .config import project_root

    readme = readme or project_root() / "README.md"
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        return False
    head, rest = text.split(README_START, 1)
    new = head + readme_findings(report) + rest.split(README_END, 1)[1]
    if new != text:
        with atomic_path(readme) as tmp:
            tmp.write_text(new)
    return True


def _anonymise(text: str) -> str:
    """The report is committed: this machine's folders (in an error or evidence a study wrote)
    become the names a reader knows them by."""
    import os

    from .config import DATA_ENV, FIGURES_ENV, RESULTS_ENV, project_root, results_dir

    def name(env: str, default: str) -> str:
        return f"${env}" if os.environ.get(env) else default

    places = [(data_root(), name(DATA_ENV, "data")), (results_dir(), name(RESULTS_ENV, "results")),
              (figures_dir(), name(FIGURES_ENV, "figures")), (project_root(), "."), (Path.home(), "~")]
    for path, name in places:
        for form in dict.fromkeys([str(path), os.path.realpath(path)]):
            if len(form) > 1:
                text = text.replace(form, name)
    return text


def write_report(profile_order: Sequence[str] = ("paper", "quick"), out: Path | str | None = None) -> Path:
    """Write the report (default ``figures/REPORT.md``) and its per-paper figures beside it
    (``report_<paper>.png``); returns its path. Loads records only; trains nothing."""
    default = out is None
    out = Path(out) if out is not None else figures_dir() / "REPORT.md"
    with warnings.catch_warnings():
        # the studies warn about records made by other code; the report names every commit itself
        warnings.simplefilter("ignore", UserWarning)
        text = _anonymise(build_report(profile_order, out.parent))
    with atomic_path(out) as tmp:
        tmp.write_text(text)
    if default:
        update_readme(text)  # the README opens with the same findings
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m vflkit.reproduction [--out PATH] [--profiles paper quick]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="where to write it (default figures/REPORT.md)")
    parser.add_argument("--profiles", nargs="+", default=["paper", "quick"],
                        help="profiles to report, the preferred first (default: paper quick)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    path = write_report(args.profiles, args.out)
    print(f"[report] {shown_path(path)} written in {time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
