"""Tables and figures beside the papers' numbers.

The papers' printed numbers ship in ``vflkit/reference/*.csv`` (long format: ``paper, table,
dataset, method, setting, model, metric, value, std, note``). A reproduced table is written as
``figures/<paper>/<profile>/table<N>.csv`` (or its own name) in that format with our ``value,
std, n_runs, profile``, the paper's ``paper_value, paper_std`` and, where some run of a cell
diverged, ``diverged`` (their count, kept out of the value); a figure as ``fig<N>.png`` with the
data it plots as ``fig<N>.csv``.
"""

from __future__ import annotations

import os
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from .config import FIGURES_ENV, check_paper, check_record_profile, figures_dir
from .errors import ConfigError
from .files import atomic_path

if TYPE_CHECKING:
    from .studies.base import Study

KEY_COLUMNS: tuple[str, ...] = ("paper", "table", "dataset", "method", "setting", "model", "metric")
TABLE_COLUMNS: tuple[str, ...] = KEY_COLUMNS + ("value", "std", "n_runs", "profile", "paper_value", "paper_std")


def set_style() -> None:
    """The one plot style of every figure: seaborn whitegrid, colour-blind palette, readable sizes;
    in a notebook, figures drawn inline."""
    # a backend forced through MPLBACKEND (Agg) would keep every figure out of an executed notebook:
    # in a Jupyter kernel (IPython imported already) figures are drawn inline
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if getattr(shell, "kernel", None) is not None:
        shell.run_line_magic("matplotlib", "inline")
    sns.set_theme(style="whitegrid", context="notebook", palette="colorblind")
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 150, "savefig.bbox": "tight"})


def load_reference(paper: str) -> pd.DataFrame:
    """The numbers printed in ``paper``'s tables, from the file its study declares
    (:attr:`vflkit.studies.base.Study.reference_csv`); empty for a paper that prints none (Multi-VFL)."""
    from . import studies  # the study modules import this one

    name = studies.get(check_paper(paper)).reference_csv
    if not name:
        return pd.DataFrame(columns=list(KEY_COLUMNS) + ["value", "std", "note"])
    with resources.files("vflkit.reference").joinpath(name).open() as f:
        df = pd.read_csv(f, dtype={"table": str, "setting": str, "model": str, "note": str})
    return df.fillna({"setting": "", "model": "", "note": ""})


def join_reference(ours: pd.DataFrame, paper: str, *, profile: str) -> pd.DataFrame:
    """Put the paper's value and std beside ours.

    ``ours`` has the key columns (``paper`` and ``table`` may be omitted: the reference's
    paper name is used) plus ``value``, ``std`` and ``n_runs``. Rows of ours without a printed
    counterpart keep empty ``paper_value``; the paper's rows we did not run are not added.
    """
    ref = load_reference(paper)
    ours = ours.copy()
    if "paper" not in ours:
        ours["paper"] = ref["paper"].iloc[0] if len(ref) else paper
    for col in KEY_COLUMNS:
        if col not in ours:
            raise ConfigError(f"our results lack the column {col!r}; need {', '.join(KEY_COLUMNS)}")
        ours[col] = ours[col].fillna("").astype(str)
    ref = ref.rename(columns={"value": "paper_value", "std": "paper_std"})
    ref = ref.assign(**{c: ref[c].fillna("").astype(str) for c in KEY_COLUMNS})
    out = ours.merge(ref[list(KEY_COLUMNS) + ["paper_value", "paper_std"]], on=list(KEY_COLUMNS), how="left")
    out["profile"] = check_record_profile(profile)
    # a table built with analysis.summarise_runs keeps its count of diverged runs per cell
    return out[list(TABLE_COLUMNS) + (["diverged"] if "diverged" in out else [])]


def output_dir(paper: str, profile: str, root: Path | str | None = None) -> Path:
    """``figures/<paper>/<profile>/``, created."""
    check_paper(paper)
    path = Path(root or figures_dir()) / paper / check_record_profile(profile)
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_table(table: pd.DataFrame, paper: str, profile: str, number: str | None = None, *,
                name: str | None = None, root: Path | str | None = None) -> Path | None:
    """Write a joined table as ``table<number>.csv`` or ``<name>.csv``; returns its path. A table with
    no rows writes nothing and returns None: a committed table is never emptied."""
    if (number is None) == (name is None):
        raise ConfigError("write_table needs either the paper's table number or a name, not both")
    if table.empty:
        return None
    missing = [c for c in TABLE_COLUMNS if c not in table]
    if missing:
        raise ConfigError(f"table lacks columns {missing}; build it with join_reference()")
    path = output_dir(paper, profile, root) / (f"table{number}.csv" if name is None else f"{name}.csv")
    with atomic_path(path) as tmp:  # two studies writing one table never mix their rows
        table[table_columns(table)].to_csv(tmp, index=False)
    return path


def table_columns(table: pd.DataFrame) -> list[str]:
    """The columns :func:`write_table` writes: :data:`TABLE_COLUMNS`, and ``diverged`` where some
    cell has a diverged run."""
    has_diverged = "diverged" in table and bool((table["diverged"].fillna(0) > 0).any())
    return list(TABLE_COLUMNS) + (["diverged"] if has_diverged else [])


def seeds_stamp(data: pd.DataFrame, point: Sequence[str] | None = None) -> str:
    """How many seeds stand behind a figure drawn from ``data``: "3 seeds", or, with ``point`` (the
    columns naming one plotted point or curve), "1–5 seeds a point" where points differ; "" where
    ``data`` has no ``seed`` column."""
    if "seed" not in data or data.empty:
        return ""
    if point:
        missing = [c for c in point if c not in data]
        if missing:
            raise ConfigError(f"point names columns {missing} that the figure's data lacks "
                              f"(it has {list(data.columns)})")
        counts = data.groupby(list(point), dropna=False)["seed"].nunique()
        lo, hi = int(counts.min()), int(counts.max())
    else:
        lo = hi = int(data["seed"].nunique())
    if lo == hi:
        return f"{lo} seed{'s' if lo != 1 else ''}"
    return f"{lo}–{hi} seeds a point"


def save_figure(fig: plt.Figure, data: pd.DataFrame, paper: str, profile: str, number: str,
                *, point: Sequence[str] | None = None, root: Path | str | None = None) -> Path:
    """Save ``fig<number>.png`` and the data it plots as ``fig<number>.csv``; returns the PNG path.
    The figure is stamped with paper, profile and seeds (:func:`seeds_stamp`): a PNG read on its
    own says which runs it comes from."""
    out = output_dir(paper, profile, root)
    seeds = seeds_stamp(data, point)
    stamp = f"{paper} · {profile} profile" + (f" · {seeds}" if seeds else "")
    # under the figure's tight box (outside legends included): it never covers a label
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    width, height = fig.get_size_inches()
    fig.text(box.x1 / width, box.y0 / height - 0.01, stamp, ha="right", va="top", fontsize=7, color="0.45")
    with atomic_path(out / f"fig{number}.csv") as tmp:
        data.to_csv(tmp, index=False)
    path = out / f"fig{number}.png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png")
    return path


#: Commits :func:`provenance` names in a row before it counts the rest.
PROVENANCE_COMMITS = 3


def provenance(records: Sequence[dict]) -> pd.DataFrame:
    """Where a set of run records comes from: per (uncommitted changes, device, CPU, torch) the
    commits that made its runs (the first :data:`PROVENANCE_COMMITS` by count, then how many
    more), the number of runs, and when the first and the last finished."""
    rows = []
    for r in records:
        env = r.get("environment", {})
        rows.append({"commit": env.get("git_commit", "?"),
                     "vflkit_modified": env.get("vflkit_modified", "not recorded"),
                     "device": env.get("device", "?"), "cpu": env.get("cpu", "not recorded"),
                     "torch": env.get("torch", "?"),
                     # None, not "" (which min() would pick first), where a record kept no time
                     "finished": r.get("finished") or None})
    keys = ["vflkit_modified", "device", "cpu", "torch"]
    if not rows:  # nothing recorded yet (or no results folder found): an empty table, same columns
        return pd.DataFrame(columns=["commits", *keys, "runs", "first_finished", "last_finished"])

    def commits(c: pd.Series) -> str:
        # most runs first, ties in the records' order (a stable sort: the same table every time)
        counts = c.groupby(c, sort=False).size().sort_values(ascending=False, kind="stable")
        shown = ", ".join(counts.index[:PROVENANCE_COMMITS])
        more = len(counts) - PROVENANCE_COMMITS
        return shown + (f" +{more} more" if more > 0 else "")

    df = pd.DataFrame(rows).astype({"vflkit_modified": str})
    out = (df.groupby(keys, sort=False)
           .agg(commits=("commit", commits), runs=("device", "size"), first_finished=("finished", "min"),
                last_finished=("finished", "max")).reset_index())
    out[["first_finished", "last_finished"]] = out[["first_finished", "last_finished"]].fillna("")
    return out[["commits", *keys, "runs", "first_finished", "last_finished"]]


#: What :func:`side_by_side` shows in a cell no row of its table fills.
NOT_RECORDED = "not recorded"


def side_by_side(table: pd.DataFrame, *, index: Sequence[str], columns: str, digits: int = 2) -> pd.DataFrame:
    """A readable pivot: each cell ``ours ± std (paper p ± s)``; '—' where the paper prints none;
    :data:`NOT_RECORDED` for a cell the table has no row of. An empty table gives an empty frame."""
    if table.empty:
        return pd.DataFrame()

    def cell(row: pd.Series) -> str:
        ours = "—" if pd.isna(row["value"]) else f"{row['value']:.{digits}f}"
        if not pd.isna(row.get("std")) and row.get("n_runs", 1) > 1:
            ours += f" ± {row['std']:.{digits}f}"
        n_div = row.get("diverged", 0)
        if not pd.isna(n_div) and n_div > 0:  # never a diverged run's score as if it were a result
            ours = (f"diverged ({int(n_div)} run{'s' if n_div > 1 else ''})" if pd.isna(row["value"])
                    else f"{ours} ({int(n_div)} more diverged)")
        paper = "—" if pd.isna(row["paper_value"]) else f"{row['paper_value']:.{digits}f}"
        if not pd.isna(row.get("paper_std")):
            paper += f" ± {row['paper_std']:.{digits}f}"
        return f"{ours} (paper {paper})"

    t = table.assign(cell=table.apply(cell, axis=1))
    out = t.pivot_table(index=list(index), columns=columns, values="cell", aggfunc="first", sort=False)
    out = out.fillna(NOT_RECORDED)
    if "profile" in table and "n_runs" in table and len(table):
        # the table says what it shows: profile and seeds per cell (ours: mean ± std over them)
        profiles = ", ".join(dict.fromkeys(table["profile"].astype(str)))
        n = sorted(set(table["n_runs"].dropna().astype(int)))
        runs = f"{n[0]}" if len(n) == 1 else f"{n[0]}-{n[-1]}"
        out.columns.name = f"{columns} ({profiles} profile; {runs} seed{'s' if n != [1] else ''} per cell)"
    return out


def shown_path(path: Path | str) -> str:
    """``path`` as a reader should see it: ``figures/...`` (or ``$VFLKIT_FIGURES/...``), never this
    machine's layout."""
    path = Path(path)
    root = figures_dir()
    try:
        rel = path.resolve().relative_to(root.resolve())
    except ValueError:
        return path.name
    return f"${FIGURES_ENV}/{rel}" if os.environ.get(FIGURES_ENV) else f"figures/{rel}"


class Note(str):
    """A line of Markdown a notebook cell shows as text (a plain ``str`` would show quoted)."""

    def _repr_markdown_(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return str(self)


def show(table: pd.DataFrame, *, empty: str) -> pd.DataFrame | Note:
    """``table`` where it has rows; otherwise ``empty`` as a :class:`Note` (never a bare header)."""
    return table if len(table) else Note(empty)


def pending_summary(pending: pd.DataFrame, by: Sequence[str] = ("dataset", "needs")) -> pd.DataFrame:
    """Pending runs (:meth:`vflkit.studies.base.Study.pending`) counted per ``by``: ``runs`` and
    their summed ``h100_minutes`` (an empty frame of the same columns where none is pending)."""
    if pending.empty:
        return pd.DataFrame(columns=["runs", "h100_minutes"],
                            index=pd.MultiIndex.from_tuples([], names=list(by)) if len(by) > 1 else
                            pd.Index([], name=by[0]))
    return pending.groupby(list(by)).agg(runs=("needs", "size"), h100_minutes=("h100_min", "sum"))


def draw(study: Study, label: str, profile: str, *, records: Sequence[dict] | None = None, seeds: Any = None,
         overrides: dict | None = None, also: str | None = None, root: Path | str | None = None,
         display: bool = True) -> Any:
    """Artefact ``label`` of ``study`` drawn from ``profile``'s records (``records``, a notebook's
    own run, or those on disk: nothing is trained), written under ``figures/<paper>/<profile>/``
    and, with ``display``, shown (a table as its ``view``); ``also`` draws that profile's first.
    A drawing with no recorded run writes nothing and says so; it returns an empty drawing of
    the same shape (a table with no row, a figure as ``(None, empty frame)``, a dict of those)."""
    art = study.artefact(label)
    if art.draw is None:
        raise ConfigError(f"{study.title}'s {label} declares no drawing")
    if also is not None and also != profile:
        draw(study, label, also, root=root, display=display)
    groups, recs = study.recorded(profile, seeds=seeds, overrides=overrides, records=records)
    drawn = art.draw(groups, recs, profile) if art.runs(groups, profile) else _nothing(art)
    parts = drawn if isinstance(drawn, dict) else {art.stem: drawn}
    shown: list[Any] = [] if parts else [Note(f"No {profile}-profile run of {label} recorded yet.")]
    for stem, part in parts.items():
        if len(parts) > 1:
            shown.append(Note(f"*{stem}*"))
        if (isinstance(part, pd.DataFrame) and part.empty) or (isinstance(part, tuple) and part[1].empty):
            shown.append(Note(f"No {profile}-profile run of {label} recorded yet."))
            if isinstance(part, tuple) and part[0] is not None:
                plt.close(part[0])
        elif isinstance(part, tuple):
            path = save_figure(part[0], part[1], study.name, profile, stem.removeprefix("fig"), point=art.point or None,
                               root=root)
            shown.append(Note(f"saved {shown_path(path)}"))
            if not display:
                plt.close(part[0])
        else:
            write_table(part, study.name, profile, name=stem, root=root)
            shown.append(art.view(part) if art.view else part)
    if display:
        from IPython.display import Markdown, display as show_now

        show_now(Markdown(f"**{label}, {profile} profile**"), *shown)
    return drawn


def _nothing(art: Any) -> Any:
    """What :func:`draw` returns for ``art`` while none of its runs is recorded."""
    def empty(stem: str) -> Any:
        return (None, pd.DataFrame()) if stem.startswith("fig") else pd.DataFrame(columns=list(TABLE_COLUMNS))
    stems = [f.split(".")[0] for f in art.files if "*" not in f.split(".")[0]]
    if len(art.files) > 1 and len(stems) == len(art.files) and all(f.endswith(".csv") for f in art.files):
        return {stem: empty(stem) for stem in stems}  # several tables, named
    return {} if "*" in art.files[0].split(".")[0] else empty(art.stem)
