"""The papers' claims as predicates on our records: agree / disagree / not testable.

Each study declares its paper's claims, one :class:`Claim` per clause, each judged on its own; a
check is a pure function of :class:`Records` (the records of one study and profile, loaded once by
its caller; no check reads the disk), and :func:`evaluate` gives the table a notebook and the report
show. The rule: docs/studies.md, "How a claim is judged".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from . import records as store

AGREE, DISAGREE, NOT_TESTABLE = "agree", "disagree", "not testable at this profile"
STATUSES = (AGREE, DISAGREE, NOT_TESTABLE)


@dataclass(frozen=True)
class Verdict:
    """What the records say about one clause, with its evidence in one line."""

    status: str
    evidence: str
    #: One-sided p-values of the test behind the verdict, for the claim and against it; None where
    #: it rests on no test (a counted quantity, a rule). :func:`all_of` corrects the p against.
    p_for: float | None = None
    p_against: float | None = None
    #: Whether records were looked at (a difference within noise: True; "no records": False).
    tested: bool = True

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Invalid verdict status {self.status!r}; choose one of {', '.join(STATUSES)}")

    def labelled(self, label: str) -> "Verdict":
        """The same verdict with its evidence behind ``label`` (the part it judges, for :func:`all_of`)."""
        return replace(self, evidence=f"{label}: {self.evidence}")

    def with_evidence(self, evidence: str, status: str | None = None) -> "Verdict":
        """The same verdict (its test kept) with ``evidence`` (and ``status``) replaced."""
        return replace(self, evidence=evidence, status=self.status if status is None else status)


@dataclass(frozen=True, eq=False)
class Records:
    """The records of a study's runs under one ``profile``, by key, loaded once by the caller: all a
    check reads (what several derive is computed once, :meth:`derived`)."""

    profile: str
    by_key: Mapping[str, dict[str, Any]]
    _derived: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of_list(cls, profile: str, records: Iterable[dict[str, Any]]) -> "Records":
        """From a list of record dicts (each with its ``key``), as :func:`vflkit.records.load_available` gives them."""
        return cls(profile, store.by_key(records))

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
    """One clause of a paper's claim; ``check(records)`` judges it on :class:`Records` alone."""

    paper: str
    artefact: str  # "Table II", "Fig. 5", "Sec. V-C": where the paper makes the claim
    clause: str  # the paper's words (or a faithful paraphrase), one clause
    check: Callable[[Records], Verdict]
    #: The reading of the paper this clause is judged under, where the paper admits more than one
    #: (e.g. "∂L/∂E / C (Eq. 7's mean)"): the clauses of one artefact and wording judged under
    #: different readings are shown together (the report's findings), each verdict with its reading.
    #: "" where no reading is in question.
    reading: str = ""


def not_testable(reason: str, *, tested: bool = False) -> Verdict:
    """The clause cannot be judged at this profile; ``reason`` says why (e.g. no records).
    ``tested``: records were looked at and found wanting (e.g. runs that did not learn)."""
    return Verdict(NOT_TESTABLE, reason, tested=tested)


#: The evidence of a verdict on a stand-in dataset begins with this (:func:`on_stand_in`).
NOT_AT_THIS_SCALE = "not testable at this scale"


def on_stand_in(verdict: Verdict, what: str) -> Verdict:
    """``verdict`` as judged on a stand-in far smaller than the paper's data (``what`` says what it is
    and shows): it decides nothing, so not testable, with the sample's reading kept in the evidence."""
    return not_testable(f"{NOT_AT_THIS_SCALE} ({what}; on the sample it reads {verdict.status}: {verdict.evidence})")


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
    estimated on ``dof`` degrees of freedom: ``t(0.975, dof) * se`` (its values: docs/studies.md)."""
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


@dataclass(frozen=True)
class Estimate:
    """A mean paired difference with its standard error on ``dof`` degrees of freedom, as
    :func:`estimate` forms it; ``how`` says in words what the replicates were, ``left_out`` the
    cells that could not enter the test."""

    mean: float
    se: float
    dof: int
    how: str
    cells: tuple[str, ...]
    left_out: tuple[str, ...] = ()

    @property
    def band(self) -> float:
        return noise_band(self.se, self.dof)

    def p(self, shift: float = 0.0) -> tuple[float, float]:
        """One-sided p-values of "mean > shift" and "mean < shift" (Student's t on ``dof``)."""
        if self.se == 0:
            return (0.0, 1.0) if self.mean > shift else (1.0, 0.0) if self.mean < shift else (0.5, 0.5)
        t = (self.mean - shift) / self.se
        return float(stats.t.sf(t, self.dof)), float(stats.t.cdf(t, self.dof))

    def note(self) -> str:
        """Which cells were left out of the test, for the evidence ("" when none)."""
        if not self.left_out:
            return ""
        shown = ", ".join(self.left_out[:3]) + (", ..." if len(self.left_out) > 3 else "")
        return f"; {len(self.left_out)} cell(s) without two seeds shared with the others left out of the test ({shown})"


def estimate(diffs: pd.DataFrame) -> Estimate | None:
    """The mean of ``diffs`` (rows: ``cell``, ``seed``, ``diff``) and its standard error, the seed as
    the replicate (docs/studies.md): over the cells with at least two shared seeds, averaged per
    seed. None with one seed per cell."""
    if diffs.empty or "seed" not in diffs.columns:
        return None
    per = diffs.groupby(["cell", "seed"])["diff"].mean().unstack("seed")
    multi = per[per.notna().sum(axis=1) >= 2]
    if multi.empty:
        return None
    seeds = [s for s in multi.columns if multi[s].notna().all()]
    if len(seeds) < 2:
        # the cells with several seeds share fewer than two: keep the seeds of the largest
        # group of cells that share two or more (the rest left out and named)
        shared = {tuple(sorted(r.dropna().index.tolist())) for _, r in multi.iterrows()}
        seeds = list(max(shared, key=lambda s: int(multi[list(s)].notna().all(axis=1).sum())))
        multi = multi[multi[seeds].notna().all(axis=1)]
    block = multi[seeds]
    by_seed = block.mean(axis=0)
    n = len(by_seed)
    se = float(by_seed.std(ddof=1) / math.sqrt(n))
    left = tuple(str(c) for c in per.index if c not in block.index)
    return Estimate(float(by_seed.mean()), se, n - 1,
                    f"{n} seeds as the replicates (per seed, the mean over {len(block)} cell(s))",
                    tuple(str(c) for c in block.index), left)


def _between_cells(diffs: pd.DataFrame) -> Estimate | None:
    """One seed per cell: the cells' differences as the replicates (conservative: their spread
    holds real differences between the cells too); None for a single cell."""
    per_cell = diffs.groupby("cell")["diff"].mean()
    if len(per_cell) < 2:
        return None
    mean, se, _ = interval(per_cell)
    return Estimate(mean, se, len(per_cell) - 1, f"1 seed, the {len(per_cell)} cells as the replicates (the "
                    "spread between cells)", tuple(map(str, per_cell.index)))


def _rows(diffs: pd.DataFrame) -> Estimate | None:
    """Every (cell, seed) row as a replicate: the last stand-in for the noise (see :func:`_noisy`)."""
    if len(diffs) < 2:
        return None
    mean, se, _ = interval(diffs["diff"])
    return Estimate(mean, se, len(diffs) - 1, f"every one of the {len(diffs)} (cell, seed) pairs as a replicate",
                    tuple(map(str, diffs["cell"].unique())))


def _noisy(diffs: pd.DataFrame) -> Estimate | None:
    """:func:`estimate`, or with one seed per cell the spread between cells; where the replicates'
    means coincide (an epoch) but the differences vary, the spread between cells, then rows."""
    est = estimate(diffs) or _between_cells(diffs)
    if est is None or est.se > 0:
        return est
    for alt in (_between_cells(diffs), _rows(diffs)):
        if alt is not None and alt.se > 0:
            return replace(alt, how=f"{alt.how}, as the seeds' means coincide")
    return est


def ordering(diffs: pd.DataFrame, *, a: str, b: str, what: str = "points",
             expected: Iterable[str] | None = None, exact: bool = False) -> Verdict:
    """Judge the clause "``a`` > ``b``" from paired differences.

    ``diffs`` has one row per (cell, seed): a ``cell`` column naming the compared cell (e.g.
    "MNIST/CNN"), a ``seed`` column and ``diff`` = value(a) - value(b) for that cell and seed.
    ``expected``: the cells the profile runs, named alike; an agreement while some of them have
    no recorded pair (or are left out of the test) is not testable. ``exact``: the values carry
    no training noise (counted or priced), so with one seed each cell's sign is the verdict. See
    docs/studies.md for the rule.
    """
    diffs = diffs.dropna(subset=["diff"])
    untrained = untrained_runs(diffs)
    if untrained:
        shown = "; ".join(untrained[:4]) + (f"; and {len(untrained) - 4} more" if len(untrained) > 4 else "")
        return not_testable(f"{DID_NOT_LEARN}: {shown} (a clause is not judged on a run that did not learn)",
                            tested=True)
    verdict, judged = _ordering(diffs, a=a, b=b, what=what, exact=exact)
    return _cover(verdict, judged, expected)


def _cover(verdict: Verdict, judged: set[str], expected: Iterable[str] | None) -> Verdict:
    """An agreement covers only the cells judged: while some ``expected`` cell is not, the clause
    is not testable. A disagreement stands: the judged cells already contradict the clause."""
    if expected is None or verdict.status != AGREE:
        return verdict
    missing = sorted(set(expected) - judged)
    if not missing:
        return verdict
    shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
    return verdict.with_evidence(f"{verdict.evidence}; but {len(missing)} of the {len(set(expected))} cells the "
                                 f"profile runs have no recorded pair yet ({shown})", NOT_TESTABLE)


def _ordering(diffs: pd.DataFrame, *, a: str, b: str, what: str, exact: bool) -> tuple[Verdict, set[str]]:
    if diffs.empty:
        return not_testable(f"no recorded pair of {a} and {b}"), set()
    per_cell = diffs.groupby("cell")["diff"].mean()
    wins, n_cells = int((per_cell > 0).sum()), len(per_cell)
    split = f"{a} > {b} in {wins} of {n_cells} cells"
    est = estimate(diffs)
    if est is None and exact:
        ev = f"{split}, 1 seed; mean difference {float(diffs['diff'].mean()):+.2f} {what}"
        status = AGREE if wins == n_cells else DISAGREE if wins == 0 else NOT_TESTABLE
        return Verdict(status, ev + (": mixed" if status == NOT_TESTABLE else "")), set(map(str, per_cell.index))
    if est is None or (est.se == 0 and not exact):
        est = _noisy(diffs)
    if est is None:
        return Verdict(NOT_TESTABLE, f"{split}, 1 seed; mean difference {float(diffs['diff'].mean()):+.2f} {what}: "
                                     "one pair of runs gives no error bar"), set()
    band = est.band
    ev = (f"{split}; paired difference {est.mean:+.2f} ± {est.se:.2f} {what} (mean ± s.e., {est.how}; noise band "
          f"± {band:.2f}, {est.dof} d.f.){est.note()}")
    p_for, p_against = est.p()
    status = AGREE if est.mean > band else DISAGREE if est.mean < -band else NOT_TESTABLE
    if status == NOT_TESTABLE:
        ev += ": within the seeds' noise" if "seeds as the replicates" in est.how else ": within the spread between cells"
    return Verdict(status, ev, p_for=p_for, p_against=p_against), set(est.cells)


def equivalent(diffs: pd.DataFrame, *, tolerance: float, what: str, unit: str = "points",
               expected: Iterable[str] | None = None) -> Verdict:
    """Judge "``what`` is about zero" (|difference| <= ``tolerance``) by two one-sided tests on the
    signed mean of ``diffs`` (as :func:`ordering`'s): agree when its 95 % interval lies inside
    ± ``tolerance``, disagree when wholly outside, else not testable."""
    if not tolerance > 0:
        raise ValueError(f"tolerance must be > 0, got {tolerance!r}")
    diffs = diffs.dropna(subset=["diff"])
    untrained = untrained_runs(diffs)
    if untrained:
        return not_testable(f"{DID_NOT_LEARN}: {'; '.join(untrained[:4])} (a clause is not judged on a run that "
                            "did not learn)", tested=True)
    if diffs.empty:
        return not_testable(f"no recorded pair for {what}")
    est = _noisy(diffs)
    if est is None:
        return Verdict(NOT_TESTABLE, f"{what}: one pair of runs ({float(diffs['diff'].mean()):+.2f} {unit}) gives no "
                                     "error bar")
    lo, hi = est.mean - est.band, est.mean + est.band
    # TOST: "mean > -tol" and "mean < +tol", each one-sided; against: the mean beyond a bound
    p_for = max(est.p(-tolerance)[0], est.p(tolerance)[1])
    p_against = min(est.p(tolerance)[0], est.p(-tolerance)[1])
    where = ("inside" if -tolerance < lo and hi < tolerance else
             "wholly outside" if lo > tolerance or hi < -tolerance else "across a bound of")
    status = {"inside": AGREE, "wholly outside": DISAGREE}.get(where, NOT_TESTABLE)
    ev = (f"{what}: signed mean {est.mean:+.2f} ± {est.se:.2f} {unit} (mean ± s.e., {est.how}); its 95 % interval "
          f"[{lo:+.2f}, {hi:+.2f}] lies {where} ± {tolerance:g} {unit} (two one-sided tests, {est.dof} d.f.)"
          f"{est.note()}")
    return _cover(Verdict(status, ev, p_for=p_for, p_against=p_against), set(est.cells), expected)


def within(diffs: pd.DataFrame, *, what: str, agree: tuple[float, float], plausible: tuple[float, float] | None = None,
           note: str = "", undecided: str, why_not: str = "", unit: str = "points") -> Verdict:
    """Judge a clause on one cell's paired differences over seeds (:func:`paired`'s) by their
    :func:`interval` noise band: disagree when the band lies wholly outside ``plausible`` (default
    ``agree``), else agree when it lies inside ``agree`` ([lo, hi]; ± inf for a one-sided clause),
    else not testable (``undecided`` says why). ``note`` (e.g. "; paper 0 to 4") follows the numbers
    in the evidence; ``why_not``, a reason they cannot decide the clause, makes it not testable, as
    do a run that did not learn, no pair and one seed."""
    if untrained := untrained_runs(diffs):
        return not_testable(f"{DID_NOT_LEARN}: {'; '.join(untrained)}", tested=True)
    d = pd.Series(diffs["diff"], dtype=float).dropna()
    if d.empty:
        return not_testable(f"no recorded pair for {what}")
    if len(d) < 2:
        return not_testable(f"{what}: {float(d.mean()):+.2f} {unit}, 1 seed{note}: one seed gives no error bar")
    mean, se, band = interval(d)
    ev = f"{what}: {mean:+.2f} ± {se:.2f} {unit} (mean ± s.e., {len(d)} seeds; noise band ± {band:.2f}){note}"
    lo, hi = plausible or agree
    if why_not:
        return not_testable(f"{ev}: {why_not}")
    if mean + band < lo or mean - band > hi:
        return Verdict(DISAGREE, ev)
    if agree[0] <= mean - band and mean + band <= agree[1]:
        return Verdict(AGREE, ev)
    return not_testable(f"{ev}: {undecided}")


def paired(frame: pd.DataFrame, *, by: str, a: str, b: str, value: str,
           cell: Sequence[str], seed: str = "seed", chance: float | None = None,
           local: str | None = None) -> pd.DataFrame:
    """Paired differences ``value(a) - value(b)`` of the rows with ``frame[by] == a`` and ``== b``,
    matched on the ``cell`` columns and ``seed``. A run ending within :data:`CHANCE_MARGIN` of
    ``chance`` (the metric at chance, e.g. 10 for % accuracy on 10 classes), or below the Local
    baseline labelled ``local`` (unless the clause compares with it), did not learn: it is named
    in the ``untrained`` column, and :func:`ordering` then judges nothing."""
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


def compared_cells(runs: Iterable[Any], a: str, b: str, cell: Callable[[Any], Iterable[str]], *,
                   name: Callable[[Any], str]) -> set[str]:
    """The cells ``cell(run)`` in which ``runs`` hold both methods ``a`` and ``b`` (``name(run)``): what
    a clause "a > b" covers, recorded or not (:func:`ordering`'s ``expected``)."""
    runs = list(runs)
    return set.intersection(*({x for r in runs if name(r) == m for x in cell(r)} for m in (a, b)))


def untrained_runs(diffs: pd.DataFrame) -> list[str]:
    """The runs :func:`paired` found did not learn, once each (empty when it was not asked)."""
    if "untrained" not in diffs:
        return []
    found = [part for note in diffs["untrained"].dropna() for part in str(note).split("; ") if part]
    return list(dict.fromkeys(found))


#: The level each part of a clause is tested at, one-sided (the two-sided 95 % band's 2.5 %).
ALPHA = (1 - CONFIDENCE) / 2


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Holm's step-down procedure: which of ``p_values`` are rejected at family-wise ``alpha``."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected


def all_of(verdicts: Iterable[Verdict]) -> Verdict:
    """Several parts of one clause: agree only if all agree; disagree if a part disagrees after
    Holm's correction for the number of parts (a part without a test, a counted quantity, keeps
    its verdict); a part that disagrees alone but not after the correction is not testable."""
    vs = list(verdicts)
    if not vs:
        return not_testable("nothing to compare")
    if len(vs) > 1:
        p = [(v.p_against if v.p_against is not None else (0.0 if v.status == DISAGREE else 1.0)) for v in vs]
        kept = holm(p)
        vs = [v if v.status != DISAGREE or ok else
              v.with_evidence(f"{v.evidence} (disagrees alone, p = {v.p_against:.3f}, but not after Holm's correction "
                              f"for {len(vs)} parts)", NOT_TESTABLE)
              for v, ok in zip(vs, kept)]
    status = (DISAGREE if any(v.status == DISAGREE for v in vs)
              else AGREE if all(v.status == AGREE for v in vs) else NOT_TESTABLE)
    p_for = max((v.p_for for v in vs if v.p_for is not None), default=None)
    p_against = min((min(1.0, v.p_against * len(vs)) for v in vs if v.p_against is not None), default=None)
    return Verdict(status, "; ".join(v.evidence for v in vs), p_for=p_for, p_against=p_against,
                   tested=any(v.tested for v in vs))


class Study(Protocol):
    """What this module needs of a study (:class:`vflkit.studies.base.Study` is one): its name,
    its clauses, and its runs under a profile."""

    name: str
    claims: Sequence[Claim]
    variant_claims: Sequence[Claim]

    def runs(self, profile: str) -> list[Any]: ...


#: The study that declares each claim, by the claim's identity: told by the study registry
#: (:func:`vflkit.studies.register` calls :func:`declare`), so this module reads no layer above it.
_OWNERS: dict[int, tuple[Claim, Study]] = {}


def declare(study: Study) -> None:
    """Record ``study`` as the owner of its ``claims`` and ``variant_claims``."""
    for c in (*study.claims, *study.variant_claims):
        _OWNERS[id(c)] = (c, study)


def forget(study: Study) -> None:
    """Undo :func:`declare` (a test's toy study, unregistered)."""
    for c in (*study.claims, *study.variant_claims):
        if _OWNERS.get(id(c), (None, None))[1] is study:
            del _OWNERS[id(c)]


def owner(claim: Claim) -> Study | None:
    """The registered study that declares ``claim`` (in its ``claims`` or ``variant_claims``, by
    identity); None when none does."""
    got = _OWNERS.get(id(claim))
    return got[1] if got is not None and got[0] is claim else None


def load(claim: Claim, profile: str) -> Records:
    """The records ``claim`` is judged on under ``profile``: those of every run of the study that
    declares it (:func:`owner`); nothing is trained."""
    study = owner(claim)
    if study is None:
        raise LookupError(f"the claim {claim.artefact}: {claim.clause!r} belongs to no registered study; "
                          "pass its records to evaluate(..., records=...)")
    return Records.of_list(profile, store.load_available(study.runs(profile), profile=profile))


def evaluate(claims: Sequence[Claim], profile: str,
             records: Records | Mapping[str, dict[str, Any]] | None = None) -> pd.DataFrame:
    """One row per clause (:data:`COLUMNS`). ``records``: the claims' study's under ``profile`` (a
    :class:`Records`, or by key); None: loaded once per study (:func:`load`). A check that fails,
    or whose records cannot be loaded, is reported as not testable with the error."""
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
                loaded[name] = load(c, profile)
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
                     "status": v.status, "evidence": v.evidence, "profile": profile,
                     "reading": c.reading, "tested": bool(v.tested)})
    return pd.DataFrame(rows, columns=COLUMNS)


#: The columns of :func:`evaluate`'s table.
COLUMNS = ["paper", "artefact", "clause", "status", "evidence", "profile", "reading", "tested"]


def base_artefact(artefact: str) -> str:
    """The artefact without a parenthesised reading: "Table III (Heter_aggVFL as the ensemble)"
    -> "Table III"."""
    return artefact.split(" (", 1)[0]


def speaking(table: pd.DataFrame, profiles: Sequence[str]) -> pd.DataFrame:
    """One row per clause of ``table``: its verdict at the largest of ``profiles`` (largest first)
    that *tested* it (a difference within noise counts, "no records" does not), decided or not;
    at the last profile where none did."""
    order = {p: i for i, p in enumerate(profiles)}
    t = table[table["profile"].isin(order)].assign(rank=table["profile"].map(order))
    t = t.assign(untested=~t["tested"].astype(bool)).sort_values(["untested", "rank"], kind="stable")
    return t.drop_duplicates(["paper", "artefact", "clause"]).drop(columns=["rank", "untested"]).sort_index()


def summary(table: pd.DataFrame) -> str:
    """"n agree, m disagree, k not testable" for a table from :func:`evaluate`."""
    counts = table["status"].value_counts()
    return ", ".join(f"{int(counts.get(s, 0))} {s}" for s in STATUSES)


def as_markdown(table: pd.DataFrame, title: str = "", *, artefacts: Sequence[str] | None = None,
                decided_only: bool = False) -> str:
    """Clauses of :func:`evaluate`'s ``table`` as prose a notebook shows, one line each, headed by
    ``title`` and their counts ("" when none is shown). ``artefacts``: only those whose artefact
    starts with one of these labels; ``decided_only``: only agree and disagree."""
    shown = table
    if artefacts is not None:
        shown = shown[shown["artefact"].map(lambda a: any(a == x or a.startswith(f"{x} ") for x in artefacts))]
    if decided_only:
        shown = shown[shown["status"].isin([AGREE, DISAGREE])]
    if shown.empty:
        return ""
    lines = [f"**{title}: {summary(shown)}**", ""] if title else []
    def under(r: Any) -> str:  # the reading a verdict rests on, named wherever it is shown
        reading = getattr(r, "reading", "")
        return f" (under {reading})" if isinstance(reading, str) and reading and reading not in r.artefact else ""
    lines += [f"- *{r.artefact}*, {r.clause}: **{r.status}**{under(r)}. {str(r.evidence).rstrip('.')}."
              for r in shown.itertuples()]
    return "\n".join(lines)


__all__ = ["AGREE", "DISAGREE", "NOT_TESTABLE", "Claim", "Estimate", "Records", "Verdict", "all_of", "as_markdown",
           "base_artefact", "equivalent", "estimate", "evaluate", "holm", "load", "not_testable", "on_stand_in",
           "owner", "ordering", "paired", "speaking", "summary", "untrained_runs", "within"]

