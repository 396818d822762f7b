"""The papers' claims as predicates on our records: agree / disagree / not testable.

Each study declares its paper's claims next to its runs (``CLAIMS`` in
:mod:`vflkit.studies.<paper>`), one :class:`Claim` per clause: a claim that says "A beats B
and C, and converges faster" is three clauses, each judged on its own, so no table reports
only the clause that holds. A claim's ``check`` reads the records of one profile and returns
a :class:`Verdict`; :func:`evaluate` turns a study's claims into the table its notebook shows
(and the reproduction report collects), so notebook and report never disagree.

A check is a pure function of :class:`Records`, the records of one study and profile that its
caller loaded once: :func:`evaluate` loads them for a notebook, the report passes those it read
already, and a test passes records it built by hand. No check reads the disk.

The rule for an ordering ("A > B"), :func:`ordering`: the paired difference A - B over the
cells the claim covers (same dataset, column and seed) is averaged; where cells have two seeds
or more its standard error is estimated from the seeds (the within-cell variances pooled, on
sum(n_cell - 1) degrees of freedom). The clause

* **agrees** when the mean difference has the claimed sign and lies outside the noise band,
  the two-sided 95 % interval ``± t * s.e.`` with Student's t on those degrees of freedom
  (:func:`noise_band`: 4.30 standard errors with 3 seeds in one cell, 2.78 with 5, tending
  to 1.96 -- the familiar "two standard errors" -- with many; a standard error from a few
  seeds is itself uncertain, and the t quantile pays for it),
* **disagrees** when the mean difference has the opposite sign and lies outside the noise band,
* is **not testable at this profile** otherwise (the difference is within the seeds' noise, or
  the cells it needs are not recorded) -- the evidence says which.

Cells with a single seed add their difference to the mean but nothing to the noise estimate,
which then comes from the cells with several (the same training noise is assumed across the
cells of one clause). When no cell has two seeds there is no seed-to-seed spread at all:

* over several cells, the spread of the differences *between* cells stands in for it (a paired
  t-test across the cells, on n_cells - 1 degrees of freedom). It holds real differences
  between the cells as well as noise, so it usually overstates the noise: it errs towards not
  testable;
* one cell with one seed is not testable: a single pair of runs gives no error bar;
* quantities without training noise (``exact=True``: rounds counted by the protocol, times
  priced from recorded traffic) are judged cell by cell instead: agree when every cell has the
  claimed sign, disagree when none has.

A run that did not learn decides nothing (:func:`paired` with ``chance`` and ``local``): when
a compared run ends within :data:`CHANCE_MARGIN` points of chance, or below the Local baseline
(each party on its own features) that a VFL method exists to beat, the clause is **not
testable (did not learn)**, and the evidence names the run. A clause *about* Local ("A beats
Local") is judged as usual: there, ending below Local is the answer, not a broken run.

A clause covers every cell the profile runs (``expected``): agreement on the recorded cells
does not show it for the others, so while some have no recorded pair an agreement is reported
as not testable. A disagreement stands: the recorded cells already contradict the clause.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

if TYPE_CHECKING:
    from .studies.base import Study

AGREE, DISAGREE, NOT_TESTABLE = "agree", "disagree", "not testable at this profile"
STATUSES = (AGREE, DISAGREE, NOT_TESTABLE)


@dataclass(frozen=True)
class Verdict:
    """What the records say about one clause, with its evidence in one line."""

    status: str
    evidence: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Invalid verdict status {self.status!r}; choose one of {', '.join(STATUSES)}")

    def labelled(self, label: str) -> "Verdict":
        """The same verdict with its evidence behind ``label`` (a dataset, a scenario): how the
        sub-verdicts of one clause say which part each judges before :func:`all_of` joins them."""
        return Verdict(self.status, f"{label}: {self.evidence}")


@dataclass(frozen=True, eq=False)
class Records:
    """What a study's claims are judged on: the records of its runs under one ``profile``, by
    key, loaded once by the caller. A check reads these and nothing else; what several checks
    derive from them (a frame, a pricing) is computed once per :class:`Records` (:meth:`derived`)."""

    profile: str
    by_key: Mapping[str, dict[str, Any]]
    _derived: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of_list(cls, profile: str, records: Iterable[dict[str, Any]]) -> "Records":
        """From a list of record dicts (each with its ``key``), as :func:`vflkit.records.load_available` gives them."""
        return cls(profile, {r["key"]: r for r in records})

    def of(self, runs: Iterable[Any]) -> list[dict[str, Any]]:
        """The records of ``runs`` that exist, in the runs' order (a run without one is skipped)."""
        return [self.by_key[k] for k in (run.key for run in runs) if k in self.by_key]

    def derived(self, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per ``name`` for these records: what several clauses share."""
        if name not in self._derived:
            self._derived[name] = compute()
        return self._derived[name]

    def __len__(self) -> int:
        return len(self.by_key)


@dataclass(frozen=True)
class Claim:
    """One clause of a paper's claim and how to judge it from the records of a profile.

    ``check(records)`` judges the clause on :class:`Records` alone (nothing is read or trained)
    and returns a :class:`Verdict`.
    """

    paper: str
    artefact: str  # "Table II", "Fig. 5", "Sec. V-C": where the paper makes the claim
    clause: str  # the paper's words (or a faithful paraphrase), one clause
    check: Callable[[Records], Verdict]


def not_testable(reason: str) -> Verdict:
    """The clause cannot be judged at this profile; ``reason`` says why (e.g. no records)."""
    return Verdict(NOT_TESTABLE, reason)


#: Two-sided confidence of the noise band that a difference must leave to count.
CONFIDENCE = 0.95
#: A run whose metric ends within this many points of chance did not learn (the fidelity
#: audit's rule: Multi-VFL's quick models at 9-15 % on 10 classes; a model that learned
#: anything of MNIST or FashionMNIST is far above 15 %).
CHANCE_MARGIN = 5.0
#: The evidence of a clause judged on a run that did not learn begins with this.
DID_NOT_LEARN = "did not learn"


def noise_band(se: float, dof: int) -> float:
    """Half-width of the two-sided 95 % t interval of a mean whose standard error ``se`` was
    estimated on ``dof`` degrees of freedom: ``t(0.975, dof) * se``. With 2 d.f. (3 seeds) the
    quantile is 4.30, with 4 d.f. 2.78; it tends to 1.96 as the seeds grow."""
    if isinstance(dof, bool) or not isinstance(dof, (int, np.integer)) or dof < 1:
        raise ValueError(f"dof must be a positive integer (seeds minus one, summed over cells), got {dof!r}; "
                         "one seed gives no standard error, so no noise band")
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, int(dof)) * se)


def interval(diffs: pd.Series) -> tuple[float, float, float]:
    """Mean, standard error and :func:`noise_band` of one cell's paired differences over seeds
    (at least two: one seed gives no standard error)."""
    d = pd.Series(diffs, dtype=float).dropna()
    if len(d) < 2:
        raise ValueError(f"an interval needs the differences of at least 2 seeds, got {len(d)}")
    se = float(d.std(ddof=1) / math.sqrt(len(d)))
    return float(d.mean()), se, noise_band(se, len(d) - 1)


def ordering(diffs: pd.DataFrame, *, a: str, b: str, what: str = "points",
             expected: Iterable[str] | None = None, exact: bool = False) -> Verdict:
    """Judge the clause "``a`` > ``b``" from paired differences.

    ``diffs`` has one row per (cell, seed): a ``cell`` column naming the compared cell (e.g.
    "MNIST/CNN") and ``diff`` = value(a) - value(b) for that cell and seed. ``expected``: the
    cells the profile runs, named alike; an agreement while some of them have no recorded pair
    is not testable. ``exact``: the values carry no training noise (counted or priced), so
    with one seed each cell's sign is the verdict. See the module docstring for the rule.
    """
    diffs = diffs.dropna(subset=["diff"])
    untrained = untrained_runs(diffs)
    if untrained:
        shown = "; ".join(untrained[:4]) + (f"; and {len(untrained) - 4} more" if len(untrained) > 4 else "")
        return Verdict(NOT_TESTABLE, f"{DID_NOT_LEARN}: {shown} (a clause is not judged on a run that did not "
                                     "learn)")
    verdict = _ordering(diffs, a=a, b=b, what=what, exact=exact)
    if expected is None or verdict.status != AGREE:
        return verdict
    missing = sorted(set(expected) - set(diffs["cell"]))
    if not missing:
        return verdict
    shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
    return Verdict(NOT_TESTABLE, f"{verdict.evidence}; but {len(missing)} of the {len(set(expected))} cells "
                                 f"the profile runs have no recorded pair yet ({shown})")


def _ordering(diffs: pd.DataFrame, *, a: str, b: str, what: str, exact: bool) -> Verdict:
    if diffs.empty:
        return not_testable(f"no recorded pair of {a} and {b}")
    per_cell = diffs.groupby("cell")["diff"]
    sizes = per_cell.size()
    n_cells = per_cell.ngroups
    mean = float(diffs["diff"].mean())
    wins = int((per_cell.mean() > 0).sum())
    dof = int((sizes - 1).sum())
    if dof >= 1:
        # seed-to-seed spread within cells, pooled on sum(n - 1) degrees of freedom (a cell with
        # one seed adds none); the mean over all rows averages len(diffs) of them
        pooled = float((per_cell.var(ddof=1).fillna(0.0) * (sizes - 1)).sum() / dof)
        se = math.sqrt(pooled / len(diffs))
        lo, hi = int(sizes.min()), int(sizes.max())
        seeds = f"{lo}+ seeds" if lo >= 2 else f"1-{hi} seeds (noise from the cells with several)"
        band = noise_band(se, dof)
        return _judge(mean, band, f"{a} > {b} in {wins} of {n_cells} cells, {seeds}; paired difference {mean:+.2f} "
                                  f"± {se:.2f} {what} (mean ± s.e.; noise band ± {band:.2f}, {dof} d.f.)",
                      "within the seeds' noise")
    ev = f"{a} > {b} in {wins} of {n_cells} cells, 1 seed; mean difference {mean:+.2f} {what}"
    if exact:
        if wins == n_cells:
            return Verdict(AGREE, ev)
        if wins == 0:
            return Verdict(DISAGREE, ev)
        return Verdict(NOT_TESTABLE, ev + ": mixed")
    if n_cells == 1:
        return Verdict(NOT_TESTABLE, ev + ": one pair of runs gives no error bar")
    # no seed has a twin: the differences between cells stand in for the noise (conservative:
    # their spread holds real cell-to-cell differences too)
    _, se, band = interval(per_cell.mean())  # the cells as the replicates: one difference each
    return _judge(mean, band, f"{a} > {b} in {wins} of {n_cells} cells, 1 seed; mean difference {mean:+.2f} ± "
                              f"{se:.2f} {what} (mean ± s.e. between cells; noise band ± {band:.2f}, {n_cells - 1} d.f.)",
                  "within the spread between cells")


def _judge(mean: float, band: float, evidence: str, inside: str) -> Verdict:
    """Agree or disagree once ``mean`` leaves its noise band; otherwise not testable, ``inside``."""
    if mean > band:
        return Verdict(AGREE, evidence)
    if mean < -band:
        return Verdict(DISAGREE, evidence)
    return Verdict(NOT_TESTABLE, f"{evidence}: {inside}")


def paired(frame: pd.DataFrame, *, by: str, a: str, b: str, value: str,
           cell: Sequence[str], seed: str = "seed", chance: float | None = None,
           local: str | None = None) -> pd.DataFrame:
    """Paired differences ``value(a) - value(b)`` from a long frame of results: rows with
    ``frame[by] == a`` and ``== b`` are matched on ``cell`` columns and ``seed``.

    With ``chance`` (the metric's value at chance: 10 for accuracy in % on 10 classes, 50 for
    AUC in %) a run of ``a`` or ``b`` ending within :data:`CHANCE_MARGIN` of it did not learn;
    with ``local`` (the label of the Local baseline in ``frame[by]``) neither did one ending
    below Local in its cell and seed, unless the clause compares with Local itself. Such runs
    are named in the ``untrained`` column, and :func:`ordering` then judges nothing.
    """
    keys = list(cell) + [seed]
    left = frame[frame[by] == a].groupby(keys)[value].mean()
    right = frame[frame[by] == b].groupby(keys)[value].mean()
    both = pd.concat({"a": left, "b": right}, axis=1).dropna()
    out = both.reset_index()
    if out.empty:  # nothing paired (agg over no rows would return a frame, not a column)
        return pd.DataFrame(columns=["cell", seed, "diff", "untrained"])
    out["cell"] = out[list(cell)].astype(str).agg("/".join, axis=1) if len(cell) else "all"
    out["diff"] = out["a"] - out["b"]
    below: dict[str, str] = {}  # per cell: which side's mean over seeds ends below Local's
    if local is not None and local not in (a, b) and (frame[by] == local).any():
        loc = frame[frame[by] == local].groupby(keys)[value].mean()
        loc = loc.reindex(pd.MultiIndex.from_frame(out[keys]) if len(keys) > 1 else out[keys[0]]).to_numpy()
        means = out.assign(local=loc).groupby("cell")[["a", "b", "local"]].mean()
        for c, m in means.iterrows():
            notes = [f"{name} {c} ({m[side]:.1f} over its seeds, below {local}'s {m['local']:.1f})"
                     for side, name in (("a", a), ("b", b)) if not np.isnan(m["local"]) and m[side] < m["local"]]
            if notes:
                below[str(c)] = "; ".join(notes)

    def why(i: int) -> str:
        notes = [f"{name} {out['cell'].iloc[i]} seed {out[seed].iloc[i]} ({float(out[side].iloc[i]):.1f}, "
                 f"chance {chance:g})" for side, name in (("a", a), ("b", b))
                 if chance is not None and float(out[side].iloc[i]) <= chance + CHANCE_MARGIN]
        if str(out["cell"].iloc[i]) in below:
            notes.append(below[str(out["cell"].iloc[i])])
        return "; ".join(notes)

    out["untrained"] = [why(i) for i in range(len(out))]
    return out[["cell", seed, "diff", "untrained"]]


def untrained_runs(diffs: pd.DataFrame) -> list[str]:
    """The runs :func:`paired` found did not learn, once each (empty when it was not asked)."""
    if "untrained" not in diffs:
        return []
    found = [part for note in diffs["untrained"].dropna() for part in str(note).split("; ") if part]
    return list(dict.fromkeys(found))


def all_of(verdicts: Iterable[Verdict]) -> Verdict:
    """Several sub-checks of one clause: agree only if all agree; disagree if any disagrees."""
    vs = list(verdicts)
    if not vs:
        return not_testable("nothing to compare")
    status = (DISAGREE if any(v.status == DISAGREE for v in vs)
              else AGREE if all(v.status == AGREE for v in vs) else NOT_TESTABLE)
    return Verdict(status, "; ".join(v.evidence for v in vs))


def owner(claim: Claim) -> Study | None:
    """The registered study that declares ``claim`` (in its ``claims`` or ``variant_claims``, by
    identity); None when none does."""
    from . import studies

    return next((s for s in studies.studies() if any(c is claim for c in (*s.claims, *s.variant_claims))), None)


def _study_records(study: Study | None, claim: Claim, profile: str) -> Records:
    """The records of every run of ``study`` (``claim``'s owner) under ``profile``; nothing is trained."""
    from . import records as store

    if study is None:
        raise LookupError(f"the claim {claim.artefact}: {claim.clause!r} belongs to no registered study; "
                          "pass its records to evaluate(..., records=...)")
    return Records.of_list(profile, store.load_available(study.runs(profile), profile=profile))


def load(claim: Claim, profile: str) -> Records:
    """The records ``claim`` is judged on under ``profile``: those of every run of the study that
    declares it (:func:`owner`); nothing is trained."""
    return _study_records(owner(claim), claim, profile)


def evaluate(claims: Sequence[Claim], profile: str,
             records: Records | Mapping[str, dict[str, Any]] | None = None) -> pd.DataFrame:
    """One row per clause: paper, artefact, clause, status, evidence, profile. ``records``: those
    of the claims' study under ``profile`` (a :class:`Records`, or the records by key as the report
    holds them); None: loaded here, once per study (:func:`load`). A check that fails with an
    error, or whose records cannot be loaded, is reported as not testable with the error (never
    dropped)."""
    if records is not None and not isinstance(records, Records):
        records = Records(profile, records)
    if records is not None and records.profile != profile:
        raise ValueError(f"records of the {records.profile} profile passed to judge the {profile} profile")
    loaded: dict[str | None, Records | Exception] = {}  # by study: its clauses share one load

    def records_of(c: Claim) -> Records:
        if records is not None:
            return records
        study = owner(c)
        name = None if study is None else study.name
        if name not in loaded:
            try:
                loaded[name] = _study_records(study, c, profile)
            except Exception as exc:  # noqa: BLE001 -- reported on each clause of the study below
                loaded[name] = exc
        got = loaded[name]
        if isinstance(got, Exception):
            raise got
        return got

    rows = []
    for c in claims:
        try:
            v = c.check(records_of(c))
        except Exception as exc:  # a broken check must show, not hide the other clauses
            v = not_testable(f"check failed: {type(exc).__name__}: {exc}")
        if not isinstance(v, Verdict):
            raise TypeError(f"the check of {c.artefact} ({c.clause!r}) returned {type(v).__name__}, not a Verdict")
        rows.append({"paper": c.paper, "artefact": c.artefact, "clause": c.clause,
                     "status": v.status, "evidence": v.evidence, "profile": profile})
    return pd.DataFrame(rows, columns=["paper", "artefact", "clause", "status", "evidence", "profile"])


def summary(table: pd.DataFrame) -> str:
    """"n agree, m disagree, k not testable" for a table from :func:`evaluate`."""
    counts = table["status"].value_counts()
    return ", ".join(f"{int(counts.get(s, 0))} {s}" for s in STATUSES)


def as_markdown(table: pd.DataFrame, title: str = "", *, artefacts: Sequence[str] | None = None,
                decided_only: bool = False) -> str:
    """Clauses of :func:`evaluate`'s ``table`` as prose, one line each (where the paper claims it,
    the clause, the verdict, its evidence): what a notebook says under a table, generated so that
    it never disagrees with the records. ``artefacts``: only the clauses whose artefact starts with
    one of these labels ("Table III" also takes "Table III (...)"); ``decided_only``: only agree and
    disagree. Headed by ``title`` and the counts of the clauses shown; "" when none is shown."""
    shown = table
    if artefacts is not None:
        shown = shown[shown["artefact"].map(lambda a: any(a == x or a.startswith(f"{x} ") for x in artefacts))]
    if decided_only:
        shown = shown[shown["status"].isin([AGREE, DISAGREE])]
    if shown.empty:
        return ""
    lines = [f"**{title}: {summary(shown)}**", ""] if title else []
    lines += [f"- *{r.artefact}*, {r.clause}: **{r.status}**. {str(r.evidence).rstrip('.')}." for r in shown.itertuples()]
    return "\n".join(lines)


__all__ = ["AGREE", "DISAGREE", "NOT_TESTABLE", "Claim", "Records", "Verdict", "all_of", "as_markdown", "evaluate", "load",
           "not_testable", "owner", "ordering", "paired", "summary", "untrained_runs"]

