"""The reproduction report: ``figures/REPORT.md``, regenerated from records and the papers' numbers.

``python -m vflkit.reproduction`` (``make report``; ``make study`` ends with it) writes, per
registered study (:class:`vflkit.studies.base.Study`), its artefacts' status, the paper's numbers
beside ours, its claims judged and its findings beyond the paper, from the records that exist
(nothing is trained). What each section holds: docs/studies.md, "The reproduction report".
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import sys
import time
import warnings
from importlib import resources
from pathlib import Path
from typing import Any, Mapping, Sequence


def _parser() -> argparse.ArgumentParser:
    """The command line, defined before the heavy imports below."""
    parser = argparse.ArgumentParser(prog="python -m vflkit.reproduction", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="where to write it (default figures/REPORT.md)")
    parser.add_argument("--profiles", nargs="+", default=["paper", "quick"],
                        help="profiles to report, the preferred first (default: paper quick)")
    return parser


if __name__ == "__main__":
    # `python -m vflkit.reproduction --help` (or a bad argument) answers here, before the imports
    # below load torch, pandas and matplotlib: seconds, half a minute on a loaded machine
    _parser().parse_args()

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from . import bibliography
from . import claims as claimlib
from . import records as store
from . import studies
from .files import atomic_path
from .ops import pricing
from .report import KEY_COLUMNS, TABLE_COLUMNS, load_reference, set_style, shown_path
from .studies.base import Study, key_of as _key
from .config import DATA_ENV, FIGURES_ENV, RESULTS_ENV, check_record_profile, data_root, figures_dir, project_root, results_dir
from .records import record_roots
from .studies import vfedmh

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


def _reported() -> list[Study]:
    """The studies the report has a section for, in its order (:func:`vflkit.studies.studies`)."""
    return [s for s in studies.studies() if s.in_report]


def __getattr__(name: str) -> Any:
    # views of the registry, built on access (a study registered later is in them)
    if name == "TITLES":  # the papers in the report's order, by study module, with the names they print
        return {s.name: s.title for s in _reported()}
    if name == "ARTEFACTS":  # per paper, the tables and figures it prints, in its order
        return {s.name: s.artefacts for s in _reported()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Records:
    """The records of each (paper, profile), loaded once per report; nothing is trained."""
    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self.problems: list[str] = []

    def get(self, paper: str, profile: str) -> dict[str, dict[str, Any]]:
        """The records that exist for the study's runs under ``profile``, by key."""
        if (paper, profile) not in self._cache:
            runs = studies.get(paper).runs(profile)
            try:
                found = store.load_available(runs, profile=profile)
            except store.BadRecord:  # one bad file must not hide the others: skip it, say so
                found = []
                for run in runs:
                    try:
                        found += store.load_available([run], profile=profile)
                    except store.BadRecord:
                        self.problems.append(f"{studies.get(paper).title}, {profile} profile: the file of run "
                                             f"{run.key} is not its record (skipped; the study's notebook names it)")
            self._cache[paper, profile] = {r["key"]: r for r in found}
        return self._cache[paper, profile]


class _Evidence:
    """One study's records as the report loaded them (:class:`vflkit.studies.base.Evidence`)."""
    def __init__(self, study: Study, profiles: Sequence[str], recs: _Records) -> None:
        self.study, self.profiles, self._recs = study, list(profiles), recs

    def get(self, profile: str) -> dict[str, dict[str, Any]]:
        return self._recs.get(self.study.name, profile)

    def first_with_records(self) -> tuple[str, dict[str, dict[str, Any]]] | None:
        """The profile whose runs are the most completely recorded (the first on a tie) and its
        records; None when no profile has any."""
        share = {p: len(self.get(p)) / max(1, len(self.runs(p))) for p in self.profiles}
        best = max(self.profiles, key=lambda p: share[p]) if self.profiles else None
        return (best, self.get(best)) if best is not None and share[best] > 0 else None

    def groups(self, profile: str) -> dict[str, list[Any]]:
        return self.study.groups(profile)

    def runs(self, profile: str) -> list[Any]:
        return self.study.runs(profile)

    key = staticmethod(_key)

    def notebook(self, section: str) -> str:
        """A link to the notebook, naming the section (GitHub gives notebook headings no anchors)."""
        return f"[{self.study.name} notebook](../{self.study.notebook}), section “{section}”"

    def markdown(self, df: pd.DataFrame) -> str:
        return _markdown(df)


def _pending_text(cost: pd.DataFrame) -> str:
    """"pending: GPU (n runs, est. ...), CPU (...)" from :func:`vflkit.ops.pricing.price`; "" when none."""
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
    """One line: runs recorded, seeds, when they finished, commits and devices, and how many were
    received from another machine (:data:`vflkit.records.RECEIVED`)."""
    seeds = sorted({r["config"].get("seed") for r in recs if r["config"].get("seed") is not None})
    days = sorted(r["finished"][:10] for r in recs if r.get("finished"))
    when = ("" if not days else days[0] if days[0] == days[-1] else f"{days[0]} to {days[-1]}")
    commits = pd.Series([r.get("environment", {}).get("git_commit", "?") for r in recs]).value_counts()
    shown = ", ".join(f"`{c}`" for c in commits.index[:3]) + (f" +{len(commits) - 3}" if len(commits) > 3 else "")
    envs = [r.get("environment", {}) for r in recs]
    names = [e.get("device_name" if str(e.get("device", "?")).startswith("cuda") else "cpu", "") for e in envs]
    devices = [f"{e.get('device', '?')} ({n})" if n else str(e.get("device", "?")) for e, n in zip(envs, names)]
    received = sum(1 for r in recs if r.get("received"))
    return (f"**{profile}**: {len(recs)} of {len(runs)} runs; seeds {', '.join(map(str, seeds)) or '—'}; "
            f"finished {when or 'not recorded'}; commit {shown}; device {', '.join(dict.fromkeys(devices))}"
            + (f"; {received} received from another machine" if received else ""))


def runs_status(paper: str, profile: str = "paper", recs: _Records | None = None) -> str:
    """How far ``paper``'s study is recorded under ``profile``: "k of N runs recorded", for a reduced
    profile its records' summed wall times, for the paper profile what is pending (with its
    estimated cost) and what cannot run here."""
    study = studies.get(paper)
    recs = recs if recs is not None else _Records()
    runs = study.runs(profile)
    have = recs.get(paper, profile)
    parts = [f"{sum(_key(c) in have for c in runs)} of {len(runs)} runs recorded"]
    if profile != "paper" and have:
        hours = sum(float(r.get("wall_time_s") or 0.0) for r in have.values()) / 3600
        parts.append(f"their wall times add up to {hours:.1f} h")
    if profile == "paper":
        impossible = study.unavailable(runs)
        skip = {_key(c) for c in impossible} | set(have)
        pending = _pending_text(pricing.price(study, [c for c in runs if _key(c) not in skip]))
        if pending:
            parts.append(pending)
        if impossible:
            missing = sorted({_dataset_title(paper, c.dataset) for c in impossible})
            parts.append(f"{len(impossible)} {IMPOSSIBLE}: {study.unavailable_why(missing)} ({', '.join(missing)})")
    return "; ".join(parts)


def artefact_table(paper: str, profiles: Sequence[str], recs: _Records) -> pd.DataFrame:
    """One row per artefact of ``paper``: profiles recorded (with provenance), status, links."""
    study = studies.get(paper)
    rows = []
    for art in study.artefacts:
        counts: dict[str, tuple[int, int]] = {}
        lines, links = [], [f"[notebook](../{study.notebook})"]
        pending = ""
        impossible: list[Any] = []
        for profile in profiles:
            runs = study.artefact_runs(art, profile)
            have = recs.get(paper, profile)
            found = [have[_key(c)] for c in runs if _key(c) in have]
            counts[profile] = (len(runs), len(found))
            if found:
                lines.append(_provenance(profile, runs, found))
            folder = figures_dir() / paper / profile
            for pattern in art.files:
                links += [f"[{profile}/{p.name}]({paper}/{profile}/{p.name})" for p in sorted(folder.glob(pattern))]
            if profile == "paper":
                impossible = study.unavailable(runs)
                skip = {_key(c) for c in impossible} | set(have)
                todo = [c for c in runs if _key(c) not in skip]
                pending = _pending_text(pricing.price(study, todo))
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
    why = f"{IMPOSSIBLE}: {studies.get(paper).unavailable_why(missing)} ({', '.join(missing)})"
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
    """A dataset as the paper names it (a study's registry names need not be its titles)."""
    return studies.get(paper).dataset_title(dataset)


# --------------------------------------------------------------------------- numbers


def measured(paper: str, profiles: Sequence[str]) -> pd.DataFrame:
    """Our rows in the reference long format: every table the study wrote under
    ``figures/<paper>/<profile>/``, ``source`` linking each row's."""
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


#: The one profile at the paper's scale: a value of any other (fewer images, epochs, a narrower
#: model) is shown beside the paper's number but is not a comparison with it.
FULL_SCALE = "paper"
#: Labels of ours that name another reading or rate of a printed cell: the label without its
#: suffix is the printed cell's (a method "X (reading)"; a setting "S, lr=R" or "S, lr=R (why)").
_LABELLED = {"method": re.compile(r"^(?P<cell>.+?) \((?P<what>[^()]+)\)$"),
             "setting": re.compile(r"^(?P<cell>.+?), (?P<what>lr=[^ ,]+(?: \([^()]+\))?)$")}
#: Why such a row is not counted, by the column its label is in.
_LABELLED_WHY = {"method": "another reading ({what}) of {cell}", "setting": "another rate ({what}) than the paper's cell"}


def _beside(ours: pd.DataFrame, ref: pd.DataFrame, uncounted_tables: Mapping[str, str],
            uncounted_datasets: Mapping[str, str]) -> pd.DataFrame:
    """``ours`` (:func:`measured`) with each row's printed cell: a row labelled as another reading or
    rate of one (:data:`_LABELLED`) takes its key and keeps the label in ``our_label``;
    ``not_counted`` says why a row is not counted ("" when it is): its label, a table or dataset
    the study declares uncounted, a profile other than :data:`FULL_SCALE`."""
    printed = set(map(tuple, ref[_KEYS].to_numpy()))
    out = ours.assign(our_label="", not_counted="")
    for i, row in out.iterrows():
        if tuple(row[_KEYS]) in printed:
            continue
        for col, pattern in _LABELLED.items():
            m = pattern.match(row[col])
            if m and tuple(m["cell"] if k == col else row[k] for k in _KEYS) in printed:
                out.loc[i, [col, "our_label", "not_counted"]] = [
                    m["cell"], row[col], _LABELLED_WHY[col].format(what=m["what"], cell=m["cell"])]
                break
    table = out["source"].str.extract(r"\[[^/\]]+/([^\]]+)\]", expand=False)
    out["uncounted_table"] = table.where(table.isin(list(uncounted_tables)), "")
    why = table.map(lambda name: uncounted_tables.get(name, ""))
    reduced = (out["profile"] + " profile: reduced scale, not the paper's").where(out["profile"] != FULL_SCALE, "")
    stand_in = out["dataset"].map(lambda name: uncounted_datasets.get(name, ""))
    for more in (why, stand_in, reduced):  # every reason a row is not counted, "; "-joined
        out["not_counted"] = [f"{a}; {b}" if a and b else a or b for a, b in zip(out["not_counted"], more)]
    return out


def _scale(metric: str) -> float | None:
    """Points per unit of ``metric``: 1 for a percentage, 100 for a fraction score, else None."""
    return 1.0 if metric.endswith("_pct") else 100.0 if metric in FRACTION_SCORES else None


def compare(paper: str, profiles: Sequence[str]) -> pd.DataFrame:
    """Every number ``paper`` prints beside ours: one row per printed cell and row of ours that
    matches it on the key columns (or on all but the model where none matches exactly), each
    reading, rate and uncounted table from the first of ``profiles`` that has it ("not recorded"
    where none). Each row says whether it is ``counted`` as its cell's comparison (first), and if
    not why (``not_counted``, :func:`_beside`)."""
    ref = load_reference(paper).reset_index(names="ref_row")
    ref = ref.assign(**{c: ref[c].fillna("").astype(str) for c in KEY_COLUMNS})
    study = studies.get(paper)
    ours = _beside(measured(paper, profiles), ref, study.uncounted_tables, study.uncounted_datasets)
    exact = ref.merge(ours.drop(columns="paper").rename(columns={"model": "our_model"}).assign(
        model=lambda d: d["our_model"]), on=_KEYS, how="inner", suffixes=("", "_ours"))
    loose_keys = [k for k in _KEYS if k != "model"]
    unused = ours.merge(ref[_KEYS], on=_KEYS, how="left", indicator=True)
    unused = unused[unused["_merge"] == "left_only"].drop(columns=["_merge", "paper"]).rename(columns={"model": "our_model"})
    todo = ref[~ref["ref_row"].isin(exact["ref_row"])]
    loose = todo.merge(unused, on=loose_keys, how="inner", suffixes=("", "_ours"))
    model = "another model: " + loose["our_model"]
    loose = loose.assign(not_counted=np.where(loose["not_counted"] == "", model, model + "; " + loose["not_counted"]))
    hits = pd.concat([exact, loose], ignore_index=True)
    rank = {p: i for i, p in enumerate(profiles)}
    if len(hits):
        # the first profile that has the row, per reading, rate and table of it: a reading the
        # paper profile lacks (VFedMH's own logits on MNIST) still shows, from the quick profile
        hits = hits.assign(rank=hits["profile"].map(rank))
        hits = hits[hits["rank"] == hits.groupby(["ref_row", "our_label", "uncounted_table"])["rank"].transform("min")]
        # a counted row first: of two equal values (EASTER's accuracy in both Table VII pricings) it stays
        hits = hits.assign(rounded=hits["value_ours"].astype(float).round(9), uncounted=hits["not_counted"] != "")
        hits = hits.sort_values(["ref_row", "uncounted", "source"], kind="stable").drop_duplicates(["ref_row", "rounded"])
    rows = []
    for _, r in ref.iterrows():
        base = {"table": r["table"], **{k: r[k] for k in _KEYS if k != "table"},
                "paper_value": r["value"], "paper_std": r["std"], "ref_row": r["ref_row"]}
        matched = hits[hits["ref_row"] == r["ref_row"]] if len(hits) else hits
        if matched.empty:
            rows.append({**base, "status": NOT_RECORDED})
            continue
        for _, m in matched.iterrows():  # the counted row first (the hits' order)
            value, std, n = float(m["value_ours"]), float(m["std_ours"]), m["n_runs"]
            row = {**base, "value": value, "std": std, "n_runs": n, "diverged": int(m["diverged"]),
                   "profile": m["profile"], "source": m["source"],
                   "our_model": m["our_model"] if m["our_model"] != r["model"] else "",
                   "our_label": m["our_label"], "counted": m["not_counted"] == "", "not_counted": m["not_counted"]}
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
            "n_runs", "diverged", "profile", "source", "our_model", "our_label", "gap", "gap_points", "within",
            "status", "counted", "not_counted"]
    return pd.DataFrame(rows).reindex(columns=cols)


def counted(cells: pd.DataFrame) -> pd.DataFrame:
    """:func:`compare`'s comparisons that count: one per printed cell (each row's ``counted``)."""
    keep = (cells["status"] == COMPARED) & cells["counted"].fillna(False).astype(bool)
    return cells[keep].drop_duplicates("ref_row")


def table_summary(cells: pd.DataFrame) -> pd.DataFrame:
    """Per printed table: cells printed, compared (once, by :func:`counted`), shown but not counted,
    within 2 points and the mean |gap| in points of the scores, within the paper's and our std."""
    rows = []
    for table, g in cells.groupby("table", sort=False):
        cmp_ = counted(g)
        pts = cmp_[cmp_["gap_points"].notna()]
        within = cmp_["within"].fillna("").astype(str)
        shown = int(((g["status"] == COMPARED) & ~g["counted"].fillna(False).astype(bool)).sum())
        rows.append({"table": table, "cells printed": g["ref_row"].nunique(), "compared": len(cmp_),
                     "shown, not counted": shown,
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
        # markers tell the profiles apart among scores, and the units (MB, rounds, minutes) apart
        # among the other quantities, which share one log axis; one profile needs no marker key
        style = "metric" if not is_score else ("profile" if data["profile"].nunique() > 1 else None)
        sns.scatterplot(data=data, x=x, y=y, hue="table", style=style, palette=palette,
                        hue_order=[t for t in tables if t in set(data["table"])], ax=ax, s=28)
        lo, hi = float(min(data[x].min(), data[y].min())), float(max(data[x].max(), data[y].max()))
        ax.plot([lo, hi], [lo, hi], color="0.4", lw=1, ls="--", label="ours = paper")
        if is_score:
            ax.set(xlabel="paper (points)", ylabel="ours (points)", title="scores (accuracy, F1, AUC)")
        else:
            ax.set(xscale="log", yscale="log", xlabel="paper", ylabel="ours",
                   title="other quantities (" + ", ".join(sorted(data["metric"].unique())) + ")")
        ax.legend(fontsize=7)
    fig.suptitle(f"{studies.get(paper).title}: ours against the paper's, every compared cell", fontsize=11)
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
                status = claimlib.all_of(claimlib.Verdict(s, "") for s in sub["status"]).status
                evidence = (f"{len(sub)} clauses of " + ", ".join(dict.fromkeys(sub["artefact"]))
                            + ": " + claimlib.summary(sub))
            rows.append({"figure": c["figure"], "claim": c["claim"], "profile": profile or "",
                         "status": status, "evidence": evidence})
    return pd.DataFrame(rows, columns=["figure", "claim", "profile", "status", "evidence"])


def evaluate_claims(paper: str, profiles: Sequence[str], *, variants: bool = False,
                    recs: _Records | None = None) -> pd.DataFrame:
    """The study's CLAIMS (with ``variants``, its VARIANT_CLAIMS, never counted as the paper's)
    judged at each profile on the records ``recs`` holds (None: loaded for this call)."""
    study = studies.get(paper)
    recs = _Records() if recs is None else recs
    tables = [claimlib.evaluate(study.variant_claims if variants else study.claims, p, recs.get(paper, p))
              for p in profiles]
    return pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(columns=claimlib.COLUMNS)


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
    return f"{x:{s},.0f}" if abs(x) >= 1e4 else f"{x:{s}.2f}"


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
        label = r.get("our_label")
        return (r["source"] + (f" (model: {r['our_model']})" if isinstance(r["our_model"], str) and r["our_model"] else "")
                + (f" (as {label})" if isinstance(label, str) and label else ""))

    def count(r: pd.Series) -> str:
        return "—" if r["status"] != COMPARED else "yes" if bool(r["counted"]) else f"no: {r['not_counted']}"

    return pd.DataFrame({
        "table": cells["table"], "dataset": cells["dataset"], "method": cells["method"], "setting": cells["setting"],
        "model": cells["model"], "metric": cells["metric"], "paper": cells.apply(paper, axis=1),
        "ours": cells.apply(ours, axis=1), "gap": cells["gap"].map(lambda g: _num(g, sign=True)),
        "within": cells["within"].astype(object).where(cells["within"].notna(), "—"), "status": cells["status"],
        "counted": cells.apply(count, axis=1), "ours from": cells.apply(source, axis=1)})


def _paper_section(paper: str, profiles: Sequence[str], recs: _Records, out_dir: Path,
                   overview: list[dict[str, Any]], judged: dict[str, pd.DataFrame] | None = None) -> str:
    """A paper's section (artefacts, numbers, claims); appends its line of the overview, and its
    judged claims to ``judged``."""
    study = studies.get(paper)
    title = study.title
    md = [f"## {title}\n", *paper_lines(study)]
    arts = artefact_table(paper, profiles, recs)
    md += ["### Artefacts\n", _markdown(arts.drop(columns="kind"))]
    note = study.artefacts_note(profiles)  # what the artefact rows cannot carry (e.g. a price per dataset)
    if note:
        md.append(note)
    cells = compare(paper, profiles)
    md.append("### Numbers beside the paper's\n")
    if cells.empty:
        md.append(f"{title} prints no table of numbers (its results are figures only): see the claims below.\n")
        n_cmp = n_pts = n_within = n_shown = 0
    else:
        summ = table_summary(cells)
        n_cmp, n_shown = int(summ["compared"].sum()), int(summ["shown, not counted"].sum())
        pts = counted(cells)["gap_points"].dropna()
        n_pts, n_within = len(pts), int((pts.abs() <= POINTS).sum())
        order = " profile's value where recorded, else the ".join(profiles)
        md.append(f"Ours: the {order} profile's, from the "
                  "tables the notebook wrote; gap = ours − paper, in the metric's unit. \"within\" lists the "
                  f"tolerances the gap meets: the paper's std, ours (over seeds), ±{POINTS:g} points (scores only). "
                  "A printed cell is compared once, at the paper profile with the paper's model, data, reading and rate; "
                  "rows beside it on another reading (VFedMH's Heter_aggVFL as each party's own logits), rate "
                  "(a sensitivity, an optimizer's standard rate), model, data (EASTER's Criteo sample) or profile are "
                  "shown, with their gap, "
                  "and not counted (column *counted* says why).\n")
        md.append(_markdown(summ))
        png = plot_comparison(paper, cells, out_dir / f"report_{paper}.png")
        if png is not None:
            md.append(f"![{title}: ours against the paper's](report_{paper}.png)\n")
        for table, g in cells.groupby("table", sort=False):
            md += [f"<details><summary>Table {table}: every printed cell</summary>\n", _markdown(_cells_view(g)),
                   "</details>\n"]
    evaluated = evaluate_claims(paper, profiles, recs=recs)
    ours = evaluate_claims(paper, profiles, variants=True, recs=recs)
    if judged is not None:
        judged[paper] = evaluated
        judged[f"{paper}{VARIANTS_SUFFIX}"] = ours
    md.append("### Claims\n")
    for profile in profiles:
        t = evaluated[evaluated["profile"] == profile]
        md += [f"#### {profile} profile: {claimlib.summary(t)}\n",
               _markdown(t[["artefact", "clause", "reading", "status", "evidence"]])]
    if len(ours):
        md.append("### The same clauses on our variants (not the paper's claims, not counted above)\n")
        for profile in profiles:
            t = ours[ours["profile"] == profile]
            md += [f"#### {profile} profile: {claimlib.summary(t)}\n",
                   _markdown(t[["artefact", "clause", "reading", "status", "evidence"]])]
    readme = readme_claims()
    mapped = map_readme(readme[readme["paper"] == title], evaluated)
    md += ["### The reference README's figure-only claims\n",
           "Each claim the paper makes only in a figure, judged through the clauses above that test its figure.\n",
           _markdown(mapped) if len(mapped) else "(none for this paper)\n"]
    counts = arts["kind"].value_counts()
    overview.append({
        "paper": f"[{title}](#{title.lower()})", "artefacts": "; ".join(f"{n} {s}" for s, n in counts.items()),
        "numbers": (f"{len(cells.drop_duplicates('ref_row'))} printed, {n_cmp} compared, {n_within} of {n_pts} "
                    f"scores within ±{POINTS:g} points" + (f" ({n_shown} more shown, not counted)" if n_shown else ""))
        if len(cells) else "figures only",
        **{f"claims ({p})": claimlib.summary(evaluated[evaluated["profile"] == p]) for p in profiles},
        **{f"runs ({p})": runs_status(paper, p, recs) for p in profiles}})
    return "\n".join(md)


def paper_lines(study: Study) -> list[str]:
    """The lines under a paper's heading in the report: the paper as a reader cites and opens it
    (:mod:`vflkit.bibliography`), and the notebook that reproduces it."""
    cited = [f"Paper: {bibliography.citation(study.cites)}\n"] if study.cites else []
    return [*cited, f"Notebook: [{study.notebook}](../{study.notebook})\n"]


def build_report(profile_order: Sequence[str] = ("paper", "quick"), out_dir: Path | None = None,
                 papers: Sequence[str] | None = None) -> str:
    """The report's markdown; writes each paper's comparison figure to ``out_dir``. ``papers``:
    the studies reported (default: every registered one with ``in_report``, in the report's order)."""
    profiles = [check_record_profile(p) for p in profile_order]
    out_dir = Path(out_dir) if out_dir is not None else figures_dir()
    reported = _reported() if papers is None else [studies.get(p) for p in papers]
    recs = _Records()
    overview: list[dict[str, Any]] = []
    judged: dict[str, pd.DataFrame] = {}
    sections = []
    for i, study in enumerate(reported, 1):
        # a line per paper as it goes (a paper's records, tables and claims take up to minutes), on
        # stderr: what a notebook prints to it is not kept
        t0 = time.perf_counter()
        sections.append(_paper_section(study.name, profiles, recs, out_dir, overview, judged))
        print(f"[report] {study.title}: section {i} of {len(reported)} in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr, flush=True)
    beyond = ["## Beyond the papers\n",
              "Findings the papers do not report, each with its evidence computed here from the records (or a "
              "computation of seconds), or, where it needs training, a pointer to the notebook section that measures it.\n"]
    for study in reported:
        if study.beyond is None:
            continue
        try:
            findings = study.beyond(_Evidence(study, profiles, recs))
        except Exception as exc:  # a finding that cannot be computed is said so, not hidden
            findings = [(f"{study.title}: not computed", f"{type(exc).__name__}: {exc}; see the "
                         f"[{study.name} notebook](../{study.notebook}).")]
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
        "(the paper prints it, we have no such cell); a compared row is *counted* once per printed cell (the "
        "paper profile's, on the paper's model, data, reading and rate), other rows beside it are shown, not counted. Claims: agree / disagree / not testable at this profile "
        "(`vflkit.claims`), with one line of evidence.\n",
        "## Overview\n", _markdown(pd.DataFrame(overview))]
    if recs.problems:
        head += ["Records skipped:\n", "\n".join(f"- {p}" for p in recs.problems) + "\n"]
    return "\n".join(head + findings_section(judged, profiles) + beyond + sections + [inputs_stamp(profiles)])


#: The report's last line: what it was built from (:func:`inputs_stamp`).
STAMP_PATTERN = re.compile(r"<!-- built from (\d+) records and (\d+) notebook outputs; sha256 ([0-9a-f]{64}) -->")


def inputs_stamp(profiles: Sequence[str]) -> str:
    """The report's last line, an HTML comment: the records of ``profiles`` and the files the
    notebooks wrote, counted, and one SHA-256 over their paths and the records' and CSVs' contents
    (PNGs by name), so a test checks a committed report in a second without rebuilding it."""
    files: list[tuple[str, Path]] = []
    for profile in profiles:
        # every root the report reads records from (VFLKIT_RESULTS, then the committed results/),
        # a record named once: the first root's copy, as the record store looks them up
        seen: dict[str, Path] = {}
        for root in record_roots():
            for p in root.glob(f"{profile}/*/*.json"):
                seen.setdefault(f"results/{p.relative_to(root).as_posix()}", p)
        files += list(seen.items())
        files += [(f"figures/{p.relative_to(figures_dir()).as_posix()}", p)
                  for p in figures_dir().glob(f"*/{profile}/*") if p.is_file()]
    digest = hashlib.sha256()
    for name, path in sorted(files):
        content = hashlib.sha256(path.read_bytes()).hexdigest() if path.suffix in (".json", ".csv") else ""
        digest.update(f"{name}\0{content}\n".encode())
    n_records = sum(name.startswith("results/") for name, _ in files)
    return (f"<!-- built from {n_records} records and {len(files) - n_records} notebook outputs; "
            f"sha256 {digest.hexdigest()} -->\n")


FINDINGS_HEADING = "## Findings"
EVIDENCE = ". Evidence: "
#: ``judged`` keys of a paper's labelled variants (its own claims are under the paper's name).
VARIANTS_SUFFIX = ":variants"


def cell_split(evidence: str) -> str:
    """"ahead in a of b cells", summed over the orderings an evidence line reports ("" if none)."""
    found = [(int(a), int(b)) for a, b in re.findall(r" in (\d+) of (\d+) cells", evidence)]
    return f"ahead in {sum(a for a, _ in found)} of {sum(b for _, b in found)} cells" if found else ""


def statistic(evidence: str) -> str:
    """The statistic a verdict's evidence rests on, in a few words (every shown verdict names it)."""
    parts = []
    if "two one-sided tests" in evidence:
        parts.append("equivalence by two one-sided tests")
    if "seeds as the replicates" in evidence:
        parts.append("paired, the seed as the replicate")
    elif "between cells" in evidence:
        parts.append("paired, one seed, the spread between cells")
    if "Holm" in evidence:
        parts.append("Holm-corrected across parts")
    if not parts and ("1 seed" in evidence or "per step" in evidence):
        parts.append("counted, no noise")
    return ", ".join(parts)


def _reading_note(row: Any, alternatives: pd.DataFrame) -> str:
    """How the verdict of ``row`` (a clause at a profile) reads under each labelled reading: ""
    when the clause has no reading; else its reading, and every alternative's verdict."""
    alt = alternatives[(alternatives["paper"] == row.paper) & (alternatives["profile"] == row.profile)
                       & (alternatives["artefact"].map(claimlib.base_artefact) == claimlib.base_artefact(row.artefact))
                       & (alternatives["clause"] == row.clause) & (alternatives["artefact"] != row.artefact)]
    if not row.reading and alt.empty:
        return ""
    own = f"under {row.reading}" if row.reading else "under the default reading"
    if alt.empty:
        return f" [{own}]"
    # an alternative without records says nothing yet: shown as such, never as a different verdict
    tested = alt[alt["tested"].astype(bool)]
    others = "; ".join(f"*{a.status if a.tested else 'not recorded'}* under {a.reading or a.artefact}"
                       for a in alt.itertuples())
    flag = ("contingent on the reading" if (tested["status"] != row.status).any()
            else "the same under every reading recorded")
    return f" [{flag}: *{row.status}* {own}; {others}]"


def findings_section(judged: dict[str, pd.DataFrame], profiles: Sequence[str]) -> list[str]:
    """The report's findings: per paper, its verdict counts and every clause decided at the largest
    profile that tested it (:func:`vflkit.claims.speaking`), with its cell split, statistic,
    verdict under each reading and evidence; then how often the quick profile agrees with the paper's."""
    md = [f"{FINDINGS_HEADING}\n",
          "Every clause decided at the largest profile that tested it, and every clause another reading of the paper "
          "decides differently, at that profile "
          f"({' before '.join(profiles)}; a profile that found a difference within noise speaks for the clause "
          "too, so a smaller profile's decision does not stand over it); the clauses no profile decides are "
          "*not testable* at the scale run, listed with their reasons in each paper's Claims table. Each line names "
          "its cell split, its statistic and, where the paper admits more than one reading, the verdict under each "
          "(a clause marked *contingent on the reading* is decided by our reading, not by the paper alone).\n"]
    agreement: list[tuple[str, str, str, str, str]] = []  # paper, artefact, clause, paper verdict, quick verdict
    for paper, table in judged.items():
        if paper.endswith(VARIANTS_SUFFIX):
            continue
        alternatives = pd.concat([table, judged.get(f"{paper}{VARIANTS_SUFFIX}", table.iloc[:0])], ignore_index=True)
        title = studies.get(paper).title
        counts = "; ".join(f"{p}: {claimlib.summary(table[table['profile'] == p])}" for p in profiles)
        md.append(f"- **[{title}](#{title.lower()})** ({counts})")
        for r in claimlib.speaking(table, profiles).itertuples():
            reading = _reading_note(r, alternatives)
            # decided clauses, and every clause whose verdict another reading of the paper changes
            if r.status not in (claimlib.AGREE, claimlib.DISAGREE) and "contingent on the reading" not in reading:
                continue
            notes = ", ".join(x for x in (cell_split(r.evidence), statistic(r.evidence)) if x)
            md.append(f"  - *{r.status}* at the {r.profile} profile — {r.artefact}: {_escape(r.clause)}"
                      f"{' (' + notes + ')' if notes else ''}{_escape(reading)}{EVIDENCE}{_escape(r.evidence)}")
        if "paper" in profiles and "quick" in profiles:
            both = table[table["status"].isin([claimlib.AGREE, claimlib.DISAGREE])]
            by = both.pivot_table(index=["artefact", "clause"], columns="profile", values="status", aggfunc="first")
            if {"paper", "quick"} <= set(by.columns):
                for (art, clause), x in by.dropna(subset=["paper", "quick"]).iterrows():
                    agreement.append((title, art, clause, x["paper"], x["quick"]))
        md[-1] += "\n"
    if agreement:
        same = [a for a in agreement if a[3] == a[4]]
        md.append(f"**The quick profile against the paper profile**: of the {len(agreement)} clauses both decide, "
                  f"the quick profile decides {len(same)} the same way"
                  + (". It decides these the other way (its reduced scale is the first suspect; each paper's "
                     "notebook explains its quick profile's scale):\n" if len(same) < len(agreement) else ".\n"))
        md += [f"- {t} {art}: {_escape(clause)}: *{p}* at the paper profile, *{q}* at the quick profile"
               for t, art, clause, p, q in agreement if p != q]
        md[-1] += "\n"
    return md


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}: generated by `make report` -->", f"<!-- /{name} -->"


#: The generated blocks: each is written between its two markers in whichever page of the
#: README and ``docs/`` carries them (:func:`update_generated`), so moving a block is moving its
#: markers. Their links are written relative to the project root and rebased per page.
README_START, README_END = _markers("findings")
README_TIMES_START, README_TIMES_END = _markers("times")
README_NOTEBOOKS_START, README_NOTEBOOKS_END = _markers("notebooks")
README_STATUS_START, README_STATUS_END = _markers("status")
README_GPU_START, README_GPU_END = _markers("own-gpu")
REFERENCES_START, REFERENCES_END = _markers("references")
VERDICTS_START, VERDICTS_END = _markers("verdicts")
GENERATED_BLOCKS = (
    (README_START, README_END, "readme_findings"),  # the block's function, by name: looked up when written
    (README_TIMES_START, README_TIMES_END, "readme_times"),
    (README_NOTEBOOKS_START, README_NOTEBOOKS_END, "readme_notebooks"),
    (README_STATUS_START, README_STATUS_END, "readme_status"),
    (README_GPU_START, README_GPU_END, "readme_own_gpu"),
    (REFERENCES_START, REFERENCES_END, "references_list"),
    (VERDICTS_START, VERDICTS_END, "changelog_verdicts"),
)
#: The pages that may carry generated blocks, relative to the project root.
GENERATED_PAGES = ("README.md", "CHANGELOG.md", "docs/*.md")


def _readme_line(line: str) -> str:
    """A finding of the report in the README's short form: verdict, artefact, clause, cell split
    and its verdict under every reading that changes it."""
    head = line.split(EVIDENCE, 1)[0]
    status, rest = re.match(r"  - \*([^*]+)\* at the paper profile — (.*)$", head).groups()
    reading = ""
    if rest.endswith("]") and " [" in rest:
        rest, reading = rest[:rest.rindex(" [")], rest[rest.rindex(" [") + 2:-1]
    split = ""
    if rest.endswith(")") and " (ahead in " in rest:
        rest, notes = rest[:rest.rindex(" (ahead in ")], rest[rest.rindex(" (ahead in ") + 2:-1]
        split = notes.split(",", 1)[0]
    short = lambda text: text.replace(claimlib.NOT_TESTABLE, "not testable")  # noqa: E731
    verdicts = re.findall(r"\*([^*]+)\* under ([^;]+)", reading.split(": ", 1)[1]) if ": " in reading else []
    if not verdicts:
        return f"  - *{short(status)}* — {rest}" + (f" ({split})" if split else "")
    # "*S* under R; *S2* under R2; ...": the first is this verdict's reading, then the others,
    # named where they give another verdict or have no records yet
    (own, label), others = verdicts[0], verdicts[1:]
    changed = "; ".join(f"*{short(s)}* under {r}" for s, r in others if s != own)
    return f"  - *{short(own)}* under {label} — {rest}" + (f" ({split})" if split else "") + (f"; {changed}" if changed else "")


def readme_findings(report: str) -> str:
    """The README's opening block, from the report: a line per paper with its verdict counts, and
    under it, in short, each clause the paper profile contradicts or whose verdict a reading changes."""
    lines = report.split(FINDINGS_HEADING, 1)[1].split("\n## ", 1)[0].splitlines()
    papers = []
    for line in lines:
        if line.startswith("- **"):
            papers.append(line.replace("](#", "](figures/REPORT.md#").replace(claimlib.NOT_TESTABLE, "not testable"))
        elif line.startswith("  - *") and " at the paper profile — " in line and (
                line.startswith(f"  - *{claimlib.DISAGREE}*") or "contingent on the reading" in line.split(EVIDENCE, 1)[0]):
            # where a paper does not hold at its own scale, and every verdict our reading decides
            papers.append(_readme_line(line))
    beyond = re.findall(r"^### (.+)$", report.split("## Beyond the papers", 1)[1].split("\n## ", 1)[0], re.M)
    return "\n".join([README_START,
                      "**What was found** at the paper profile: each clause the records contradict, and each whose "
                      "verdict another reading of the paper changes, under each reading ([the report](figures/REPORT.md) "
                      "has every verdict and its evidence, computed from the records). Statistic: paired, the seed as "
                      "the replicate, 95 %, Holm across a clause's parts, two one-sided tests for \"about the same\" "
                      "([how claims are judged](docs/studies.md)).\n",
                      *papers, "",
                      f"Beyond the papers: {len(beyond)} findings the papers do not report, each computed from the "
                      "records ([the report](figures/REPORT.md#beyond-the-papers)).",
                      README_END])


def readme_status(report: str) -> str:
    """The status table of docs/studies.md: the report's overview, its links into the report."""
    table = report.split("## Overview\n", 1)[1].lstrip("\n").split("\n\n", 1)[0]
    return "\n".join([README_STATUS_START, table.replace("](#", "](figures/REPORT.md#"), README_STATUS_END])


def _overview_rows(report: str) -> dict[str, dict[str, str]]:
    """The report's overview table, by paper title: each column's cell as printed."""
    table = report.split("## Overview\n", 1)[1].lstrip("\n").split("\n\n", 1)[0].splitlines()
    split = lambda line: [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]  # noqa: E731
    head = split(table[0])
    rows = {}
    for line in table[2:]:
        row = dict(zip(head, split(line)))
        rows[re.sub(r"^\[(.*?)\]\(.*\)$", r"\1", row["paper"])] = row
    return rows


def readme_notebooks(report: str) -> str:
    """The README's table of the notebooks: each one's paper, the artefacts it reproduces, and its
    profiles' runs as the report's overview states them."""
    rows = _overview_rows(report)
    lines = ["| notebook | paper | reproduces | quick profile | paper profile |", "|---|---|---|---|---|"]
    for study in _reported():
        row = rows.get(study.title, {})
        arts = ", ".join(a.label for a in study.artefacts)
        lines.append(f"| [{Path(study.notebook).stem}]({study.notebook}) | [{study.title}](figures/REPORT.md#"
                     f"{study.title.lower()}){', ' + bibliography.link(study.cites) if study.cites else ''} | {arts} | "
                     f"{row.get('runs (quick)', '—')} | {row.get('runs (paper)', '—')} |")
    demo = studies.get("demo")
    lines.append(f"| [{Path(demo.notebook).stem}]({demo.notebook}) | SplitNN as in {bibliography.get(demo.cites).short}, "
                 f"{bibliography.link(demo.cites)} | SplitNN against Local, the smallest use of vflkit | "
                 f"{runs_status('demo', 'quick')} | — |")
    return "\n".join([README_NOTEBOOKS_START, *lines, README_NOTEBOOKS_END])


def own_gpu_minutes(recs: _Records | None = None) -> pd.DataFrame:
    """Per paper, its paper-profile runs left for a GPU (without a record, not unavailable) priced
    by :func:`vflkit.ops.pricing.price`: ``runs``, ``h100_min``, ``h100_min_packed``, ``unpriced``,
    ``how`` they are estimated, and ``cpu_h`` where the study prices them for a CPU."""
    recs = recs if recs is not None else _Records()
    rows = []
    for study in _reported():
        runs = study.runs("paper")
        have = recs.get(study.name, "paper")
        skip = {_key(c) for c in study.unavailable(runs)} | set(have)
        todo = [c for c in runs if _key(c) not in skip and study.needs_gpu(c)]
        if not todo:
            continue
        cost = pricing.price(study, todo)
        how = {pricing.FROM_OPS: "from each step's operations at the H100's measured seconds per operation (1)",
               pricing.FROM_FLOPS: "from FLOPs at the H100's measured rates (1)",
               pricing.FROM_STUDY: f"the study's own rule (`{study.name}.pending_cost`)"}
        priced = cost["source"][cost["h100_min"].notna()]
        rows.append({"paper": study.title, "name": study.name, "runs": len(todo), "h100_min": cost["h100_min"].sum(min_count=1),
                     "h100_min_packed": cost["h100_min_packed"].sum(min_count=1),
                     "unpriced": int(cost["h100_min"].isna().sum()), "cpu_h": cost["cpu_h"].sum(min_count=1),
                     "how": "; ".join(how[s] for s in dict.fromkeys(priced))})
    return pd.DataFrame(rows, columns=["paper", "name", "runs", "h100_min", "h100_min_packed", "unpriced", "cpu_h", "how"])


def readme_own_gpu(report: str = "") -> str:
    """docs/own-gpu.md's estimate of the paper profiles' GPU runs on one's own H100
    (:func:`own_gpu_minutes` per paper and in total)."""
    df = own_gpu_minutes()
    lines = ["| paper | runs left for a GPU | H100-minutes | packed (2) | how estimated |", "|---|---:|---:|---:|---|"]
    for r in df.itertuples():
        minutes = f"{r.h100_min:,.0f}" if r.h100_min == r.h100_min else "—"
        packed = f"{r.h100_min_packed:,.0f}" if r.h100_min_packed == r.h100_min_packed else "—"
        how = [r.how] if r.how else []
        if r.unpriced:
            how.append(("none" if r.unpriced == r.runs else f"{r.unpriced} without an H100 estimate")
                       + (f" (its own rule, `{r.name}.pending_cost`, prices them at {r.cpu_h:,.0f} CPU-hours)"
                          if r.cpu_h == r.cpu_h else ""))
        lines.append(f"| {r.paper} | {r.runs} | {minutes} | {packed} | {'; '.join(how)} |")
    total, unpriced = df["h100_min"].sum(), int(df["unpriced"].sum())
    packed_total = df["h100_min_packed"].sum()
    return "\n".join([
        README_GPU_START, *lines, "",
        f"In all: about {total:,.0f} H100-minutes ({total / 60:.1f} hours) for one run at a time"
        + (f", and {unpriced} runs without an H100 estimate" if unpriced else "") + ". (1) " + pricing.GPU_LABEL
        + "; `python -m vflkit.study --status --profile paper` prints the same estimate run by run. (2) As the "
        f"engine trains them on a GPU: C-VFL's runs that differ in seed and dataset alone as one pack, its alike parties "
        f"stacked (`vflkit.training.split`), and Multi-VFL's runs in one pack (`vflkit.training.multi_owner`), "
        f"each pack priced at one run's time times its packed step's (or round's) operations over the run's own "
        f"(`vflkit.ops.pricing.pack_ratio`, counted: results/{pricing.OP_COUNTS}): about {packed_total:,.0f} H100-minutes "
        f"({packed_total / 60:.1f} hours); predicted from op counts, not yet measured on a GPU.",
        *shared_gpu_hours(packed_total, "packed so"), "", *measured_gpu_rates(), README_GPU_END])


def shared_gpu_hours(total_min: float, how: str = "") -> list[str]:
    """docs/own-gpu.md's line on the same work with several processes sharing one GPU (each run
    :func:`vflkit.ops.pricing.slowdown` times slower)."""
    if not pricing.sharing_slowdown() or not total_min == total_min:
        return []
    share = pricing.slowdown(pricing.DEFAULT_LANES)
    hours = total_min * share / pricing.DEFAULT_LANES / 60
    return ["", f"Several processes at once use the card better: with {pricing.DEFAULT_LANES} sharing it (each run "
            f"{share:.1f}x slower, from what the `cuda` records measured) the same work{' ' + how if how else ''} "
            f"takes about {hours:,.0f} hours of one H100 (`python -m vflkit.ops.launcher plan` prices it run by run)."]


def measured_gpu_rates() -> list[str]:
    """docs/own-gpu.md's lines on what GPUs measured, each computed from the committed
    measurement files under ``results/device/`` (:mod:`vflkit.ops.pricing`)."""
    lines = ["Measured on GPUs (`results/device/`): these runs are launch-bound, so their time is set by the "
             "torch operations each step dispatches, not by their FLOPs."]
    for kind in pricing.GPU_KINDS:
        got = [m for m in pricing.measurements(str(pricing.committed_root())) if m.kind == kind]
        us = [1e6 * m.seconds / m.ops for m in got if m.alone and m.ops]
        if us:
            lines.append(f"- {kind.upper()}: {statistics.median(us):.1f} µs per operation (median of {len(us)} settings "
                         f"measured one process alone, {min(us):.0f}-{max(us):.0f}); at most "
                         f"{pricing.best_rate(kind) / 1e12:.1f} TFLOP/s measured, which no price exceeds.")
    share, n = pricing.sharing_slowdown(), len(pricing.sharing_factors())
    if share:
        lines.append(f"- several processes sharing one GPU: each run took {share:.1f}x its time alone (median over "
                     f"{n} `cuda` records), so the card did about that many times less per run but ran them side by side.")
    for path, _, doc in pricing.benchmarks(str(pricing.committed_root())):
        bench = doc["bench_packed"]
        gains = [f"{r['method']} {r['model']} {r['vmap_samples_per_s'] / r['alone_samples_per_s']:.2f}x"
                 for r in bench["rows"]]
        lines.append(f"- packing {bench['pack_size']} seeds as one vmapped step (`vflkit.training.split`), against "
                     f"the same runs stepped one after another ({doc['device']}, `{path.name}`): {', '.join(gains)}.")
        graphed = [r for r in bench["rows"] if r.get("graphs_samples_per_s")]
        if graphed:  # the packed step captured in CUDA graphs (older benchmarks lack it)
            lines.append("  The same pack captured in CUDA graphs (`vflkit.training.graphs`), against the eager "
                         "step: " + ", ".join(f"{r['method']} {r['model']} {pricing.captured_gain(r):.1f}x"
                                              for r in graphed) + ".")
    lines.append(f"- {vfedmh.precision_verdict(vfedmh.precision_check(*vfedmh.STUDY.recorded('paper')))[1]} "
                 "(`vfedmh.precision_check`; the launcher plans these runs first).")
    return lines


def references_list(report: str = "") -> str:
    """The book's list of papers: every entry of :mod:`vflkit.bibliography`, one line each."""
    return "\n".join([REFERENCES_START, *(f"- **{p.short}**: {bibliography.citation(p.key)}"
                                           for p in bibliography.PAPERS.values()), REFERENCES_END])


def changelog_verdicts(report: str, changelog: Path | None = None) -> str:
    """CHANGELOG.md's verdicts of the version in progress: per paper, the report's claim counts at
    each profile and what changed since the last released version's table in ``changelog``."""
    rows = _overview_rows(report)
    changelog = changelog or project_root() / "CHANGELOG.md"
    text = changelog.read_text() if changelog.exists() else ""
    before: dict[str, list[str]] = {}
    version = None
    rest = text.split(VERDICTS_END, 1)[1] if VERDICTS_END in text else ""
    for line in rest.splitlines():
        if line.startswith("## ") and version is None:
            version = line[3:].split()[0]
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| ") else []
        if version and len(cells) == 3 and cells[0] != "paper":
            before[cells[0]] = cells[1:]
        elif before and not line.startswith("|"):
            break
    since = f"changed since {version}" if version else "changed"
    lines = [f"| paper | claims (paper) | claims (quick) | {since} |", "|---|---|---|---|"]
    for title, row in rows.items():
        now = [row.get("claims (paper)", "—"), row.get("claims (quick)", "—")]
        was = before.get(title)
        change = "—" if was is None else "; ".join(f"{p}: {a} → {b}" for p, a, b in zip(("paper", "quick"), was, now)
                                                     if a != b) or "none"
        lines.append(f"| {title} | {now[0]} | {now[1]} | {change} |")
    return "\n".join([VERDICTS_START, *lines, VERDICTS_END])


#: What scripts/time_commands.py measured, under the committed results/.
COMMAND_TIMES = "device/command-times.json"


def readme_times(report: str = "") -> str:
    """How long the two commands took on a fresh clone, as ``scripts/time_commands.py`` measured
    them (wall time, machine, load, commit, pytest's closing line); says so where none is measured."""
    path = project_root() / "results" / COMMAND_TIMES
    rows = json.loads(path.read_text())["commands"].values() if path.exists() else []
    rows = [r for r in rows if r.get("exit_status") == 0]  # a failed command's time says nothing
    lines = [f"`{r['command']}` took {r['seconds'] / 60:.0f} min on a fresh clone ({r['machine']['cpu']}, "
             f"{r['machine']['cores']} cores, load average {r['machine']['load_average_at_start']:g} at the start; "
             f"`{r['commit']}`, {r['when']}" + (f"; {r['closing_line']}" if r.get("closing_line") else "")
             + (", tree clean after it" if r.get("tree_clean_after") else "") + ")." for r in rows]
    if not lines:
        lines = ["Not measured yet: `python scripts/time_commands.py` times both on a fresh clone."]
    return "\n".join([README_TIMES_START, " ".join(lines), README_TIMES_END])


def _rebase(block: str, depth: int) -> str:
    """``block``'s relative links (written from the project root) as seen from a page ``depth``
    folders below it."""
    return re.sub(r"\]\((?![a-z]+:|#|/)", "](" + "../" * depth, block) if depth else block


def update_readme(report: str, readme: Path | None = None) -> bool:
    """Write every generated block (:data:`GENERATED_BLOCKS`) whose markers are in ``readme``
    (default the project's README.md) between them; False if it carries none."""
    root = project_root()
    readme = Path(readme) if readme is not None else root / "README.md"
    text = readme.read_text()
    try:
        depth = len(readme.resolve().parent.relative_to(root.resolve()).parts)
    except ValueError:  # a page outside the project (a test's): links as from the root
        depth = 0
    new = text
    for start, end, block in GENERATED_BLOCKS:
        if start in new and end in new:
            head, rest = new.split(start, 1)
            new = head + _rebase(globals()[block](report), depth) + rest.split(end, 1)[1]
    if new != text:
        with atomic_path(readme) as tmp:
            tmp.write_text(new)
    return any(start in text and end in text for start, end, _ in GENERATED_BLOCKS)


def update_generated(report: str) -> list[Path]:
    """Write the generated blocks into every page of :data:`GENERATED_PAGES` that carries their
    markers; returns those pages."""
    root = project_root()
    pages = [p for pattern in GENERATED_PAGES for p in sorted(root.glob(pattern))]
    return [p for p in pages if update_readme(report, p)]


def _anonymise(text: str) -> str:
    """``text`` with this machine's folders as the names a reader knows them by (it is committed)."""
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
        # the studies warn about records of another results version; the report names every commit itself
        warnings.simplefilter("ignore", UserWarning)
        text = _anonymise(build_report(profile_order, out.parent))
    with atomic_path(out) as tmp:
        tmp.write_text(text)
    if default:
        update_generated(text)  # the README opens with the same findings; docs/ carry the rest
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m vflkit.reproduction [--out PATH] [--profiles paper quick]``."""
    args = _parser().parse_args(argv)
    start = time.perf_counter()
    path = write_report(args.profiles, args.out)
    print(f"[report] {shown_path(path)} written in {time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
