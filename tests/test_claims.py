"""The claim predicates: the ordering rule and the table every study's claims become."""

import pandas as pd
import pytest

from vflkit import claims


def _diffs(values: dict[str, list[float]]) -> pd.DataFrame:
    return pd.DataFrame([{"cell": c, "seed": s, "diff": d} for c, ds in values.items() for s, d in enumerate(ds)])


def test_ordering_agrees_disagrees_or_not_testable_by_the_error_bar() -> None:
    assert claims.ordering(_diffs({"x": [2.0, 2.2, 1.9], "y": [1.5, 1.7, 1.6]}), a="A", b="B").status == claims.AGREE
    assert claims.ordering(_diffs({"x": [-2.0, -2.2, -1.9]}), a="A", b="B").status == claims.DISAGREE
    noisy = claims.ordering(_diffs({"x": [3.0, -2.5, 0.1]}), a="A", b="B")
    assert noisy.status == claims.NOT_TESTABLE and "noise" in noisy.evidence


def test_noise_band_is_students_t_on_the_seeds_degrees_of_freedom() -> None:
    """t(0.975, df) standard errors: wide with few seeds, the normal's 1.96 with many."""
    assert claims.noise_band(1.0, 2) == pytest.approx(4.3027, abs=1e-4)
    assert claims.noise_band(0.5, 4) == pytest.approx(0.5 * 2.7764, abs=1e-4)
    assert claims.noise_band(1.0, 10_000) == pytest.approx(1.96, abs=1e-3)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="dof must be a positive integer"):
            claims.noise_band(1.0, bad)


def test_ordering_takes_the_seed_as_the_replicate() -> None:
    """Three cells with the same three seeds: the replicates are the 3 per-seed means (2 d.f.),
    not the 9 (cell, seed) rows. Here seed 0 is low in every cell (a seed's split or run moves
    all its cells together): pooled as 9 independent rows (the old rule, 6 d.f.) the mean of
    +1.0 would be 4 standard errors out and agree; over the seeds it is within the noise."""
    shared = {c: [0.1 + e, 1.0 + e, 1.9 + e] for c, e in zip("xyz", (0.0, 0.05, -0.05))}
    v = claims.ordering(_diffs(shared), a="A", b="B")
    assert v.status == claims.NOT_TESTABLE and "2 d.f." in v.evidence and "3 seeds as the replicates" in v.evidence
    by_seed = pd.Series([0.1, 1.0, 1.9])
    assert f"+1.00 ± {by_seed.std() / 3 ** 0.5:.2f} points" in v.evidence
    one = claims.ordering(_diffs({"x": [1.0, 2.0, 3.0]}), a="A", b="B")  # mean 2, s.e. 0.577: 3.5 s.e.
    assert one.status == claims.NOT_TESTABLE and "2 d.f." in one.evidence and "noise band ± 2.48" in one.evidence


def test_ordering_leaves_out_cells_without_shared_seeds_and_names_them() -> None:
    """A cell with one seed cannot enter a test whose replicate is the seed: it is left out and
    named, and an agreement then does not cover it (not testable while it is expected)."""
    v = claims.ordering(_diffs({"x": [3.0], "y": [1.0, 1.2, 0.8]}), a="A", b="B")
    assert v.status == claims.AGREE and "2 d.f." in v.evidence and "left out of the test (x)" in v.evidence
    assert f"+1.00 ± {pd.Series([1.0, 1.2, 0.8]).std() / 3 ** 0.5:.2f} points" in v.evidence
    covered = claims.ordering(_diffs({"x": [3.0], "y": [1.0, 1.2, 0.8]}), a="A", b="B", expected={"x", "y"})
    assert covered.status == claims.NOT_TESTABLE and "(x)" in covered.evidence


def test_ordering_prints_its_cell_split() -> None:
    """An ordering says in how many cells A is ahead, whatever its verdict."""
    v = claims.ordering(_diffs({"x": [2.0, 2.2, 1.9], "y": [-0.1, -0.2, -0.1], "z": [1.5, 1.7, 1.6]}), a="A", b="B")
    assert "A > B in 2 of 3 cells" in v.evidence


def test_equivalence_is_two_one_sided_tests_on_the_signed_mean() -> None:
    """"About the same" agrees when the 95 % interval of the signed mean lies inside ± tolerance.
    Seed noise alone (differences of ±1.5 around 0, tolerance 2) agrees here, where the old rule
    (the mean of tolerance - |difference|, +0.5 ± ...) could not: E|Δ| is large at equal means."""
    noise = {c: [1.5, -1.5, 1.4, -1.4, 0.1] for c in "xyz"}
    noise["y"] = [-1.5, 1.5, -1.4, 1.4, -0.1]
    v = claims.equivalent(_diffs(noise), tolerance=2.0, what="|A - B|", unit="epochs")
    assert v.status == claims.AGREE and "two one-sided tests" in v.evidence and v.p_for < 0.025
    old = _diffs(noise).assign(diff=lambda d: 2.0 - d["diff"].abs())  # the folded statistic, for contrast
    assert old["diff"].mean() < 1.0
    far = claims.equivalent(_diffs({c: [5.0, 5.2, 4.9] for c in "xy"}), tolerance=2.0, what="A - B")
    assert far.status == claims.DISAGREE and "wholly outside" in far.evidence
    wide = claims.equivalent(_diffs({"x": [3.0, -2.0, 1.0]}), tolerance=2.0, what="A - B")
    assert wide.status == claims.NOT_TESTABLE and "across a bound" in wide.evidence


def test_replicates_whose_means_coincide_take_their_noise_from_the_cells_then_the_rows() -> None:
    """Two seeds whose mean differences coincide (a discrete quantity: epochs) give a standard
    error of 0, on which a t-test would call any difference certain: the spread between cells
    stands in, then the spread of the rows; only a constant difference is judged without noise."""
    alike = _diffs({"x": [-4.0, -3.0], "y": [-3.0, -4.0], "z": [-1.0, -1.0]})  # seed means -2.67, -2.67
    v = claims.ordering(alike, a="A", b="B")
    assert "as the seeds' means coincide" in v.evidence and "between cells" in v.evidence
    assert v.status == claims.NOT_TESTABLE  # cells -3.5, -3.5, -1: the band (2 d.f.) covers -2.67
    rows = _diffs({"x": [-4.0, -5.0], "y": [-5.0, -4.0]})  # seed and cell means all -4.5
    assert "every one of the 4 (cell, seed) pairs" in claims.ordering(rows, a="A", b="B").evidence
    constant = _diffs({"x": [0.0, 0.0, 0.0], "y": [0.0, 0.0, 0.0]})
    assert claims.equivalent(constant, tolerance=2.0, what="A - B").status == claims.AGREE


def test_all_of_corrects_a_lone_disagreement_for_the_number_of_parts() -> None:
    """Holm: a part that disagrees at p = 0.02 disagrees on its own, but among four parts it must
    pass 0.025 / 4; the clause is then not testable and says why. A strong disagreement stands."""
    weak = claims.Verdict(claims.DISAGREE, "weak", p_for=0.98, p_against=0.02)
    quiet = [claims.Verdict(claims.NOT_TESTABLE, f"q{i}", p_for=0.4, p_against=0.6) for i in range(3)]
    assert claims.all_of([weak]).status == claims.DISAGREE
    v = claims.all_of([weak, *quiet])
    assert v.status == claims.NOT_TESTABLE and "Holm" in v.evidence
    strong = claims.Verdict(claims.DISAGREE, "strong", p_for=0.999, p_against=0.001)
    assert claims.all_of([strong, *quiet]).status == claims.DISAGREE
    # a counted part (no test behind it) keeps its verdict
    assert claims.all_of([claims.Verdict(claims.DISAGREE, "counted"), *quiet]).status == claims.DISAGREE
    assert claims.holm([0.001, 0.02, 0.03]) == [True, False, False]
    assert claims.holm([0.001, 0.012, 0.02]) == [True, True, True]


def test_ordering_of_exact_values_with_one_seed_needs_every_cell() -> None:
    """Counted or priced values carry no training noise: each cell's sign is the verdict."""
    assert claims.ordering(_diffs({"x": [1.0], "y": [0.5]}), a="A", b="B", exact=True).status == claims.AGREE
    assert claims.ordering(_diffs({"x": [-1.0], "y": [0.0]}), a="A", b="B", exact=True).status == claims.DISAGREE
    mixed = claims.ordering(_diffs({"x": [1.0], "y": [-0.5]}), a="A", b="B", exact=True)
    assert mixed.status == claims.NOT_TESTABLE and "1 of 2" in mixed.evidence


def test_ordering_with_one_run_per_method_is_not_testable() -> None:
    """One noisy pair gives no error bar, however large the difference."""
    v = claims.ordering(_diffs({"x": [40.0]}), a="A", b="B")
    assert v.status == claims.NOT_TESTABLE and "no error bar" in v.evidence


def test_ordering_with_one_seed_per_cell_uses_the_spread_between_cells() -> None:
    """No cell has two seeds: a paired t-test across cells (n_cells - 1 d.f.). Two cells (1 d.f.,
    12.7 s.e.) with the claimed sign are not enough; five consistent cells are."""
    two = claims.ordering(_diffs({"x": [1.0], "y": [0.5]}), a="A", b="B")
    assert two.status == claims.NOT_TESTABLE and "between cells" in two.evidence and "1 d.f." in two.evidence
    five = claims.ordering(_diffs({c: [v] for c, v in zip("vwxyz", [2.0, 2.2, 1.8, 2.1, 1.9])}), a="A", b="B")
    assert five.status == claims.AGREE and "4 d.f." in five.evidence
    se = pd.Series([2.0, 2.2, 1.8, 2.1, 1.9]).std() / 5 ** 0.5
    assert f"+2.00 ± {se:.2f} points" in five.evidence
    worse = claims.ordering(_diffs({c: [-v] for c, v in zip("vwxyz", [2.0, 2.2, 1.8, 2.1, 1.9])}), a="A", b="B")
    assert worse.status == claims.DISAGREE


def test_ordering_without_pairs_is_not_testable() -> None:
    v = claims.ordering(pd.DataFrame(columns=["cell", "seed", "diff"]), a="A", b="B")
    assert v.status == claims.NOT_TESTABLE and "no recorded pair" in v.evidence


def test_ordering_agrees_only_when_every_expected_cell_is_recorded() -> None:
    """A clause covers every cell the profile runs: the recorded ones agreeing does not show it
    for the others (not testable, naming them); a recorded contradiction stands."""
    wins = _diffs({"MNIST/CNN": [2.0, 2.2, 1.9], "MNIST/MLP": [1.5, 1.7, 1.6]})
    assert claims.ordering(wins, a="A", b="B", expected={"MNIST/CNN", "MNIST/MLP"}).status == claims.AGREE
    partial = claims.ordering(wins, a="A", b="B", expected={"MNIST/CNN", "MNIST/MLP", "CIFAR-10/CNN"})
    assert partial.status == claims.NOT_TESTABLE
    assert "+1.82" in partial.evidence and "1 of the 3 cells" in partial.evidence and "(CIFAR-10/CNN)" in partial.evidence
    losses = _diffs({"MNIST/CNN": [-2.0, -2.2, -1.9]})
    assert claims.ordering(losses, a="A", b="B", expected={"MNIST/CNN", "CIFAR-10/CNN"}).status == claims.DISAGREE


def test_paired_matches_cells_and_seeds() -> None:
    frame = pd.DataFrame({"method": ["A", "B", "A", "B", "A"], "dataset": ["m"] * 5,
                          "seed": [0, 0, 1, 1, 2], "acc": [90.0, 80.0, 91.0, 85.0, 99.0]})
    d = claims.paired(frame, by="method", a="A", b="B", value="acc", cell=["dataset"])
    assert d["diff"].tolist() == [10.0, 6.0]  # seed 2 has no B: not paired
    none = claims.paired(frame, by="method", a="A", b="C", value="acc", cell=["dataset"])
    assert none.empty and claims.ordering(none, a="A", b="C").status == claims.NOT_TESTABLE


def test_compared_cells_are_those_where_both_methods_run() -> None:
    """A run of A on m and n, one of B on n and o: "A > B" covers n alone, recorded or not."""
    runs = [("A", {"m", "n"}), ("B", {"n"}), ("B", {"o"}), ("C", {"m"})]
    cells = claims.compared_cells(runs, "A", "B", lambda r: r[1], name=lambda r: r[0])
    assert cells == {"n"} and claims.compared_cells(runs, "A", "D", lambda r: r[1], name=lambda r: r[0]) == set()


def test_evaluate_keeps_every_clause_and_reports_broken_checks() -> None:
    def broken(records: claims.Records) -> claims.Verdict:
        raise KeyError("table2")

    cs = [claims.Claim("p", "Table 1", "A beats B", lambda records: claims.Verdict(claims.AGREE, "ok")),
          claims.Claim("p", "Table 1", "and converges faster", broken)]
    t = claims.evaluate(cs, "quick", records={})
    assert t["status"].tolist() == [claims.AGREE, claims.NOT_TESTABLE]
    assert "KeyError" in t["evidence"].iloc[1]
    assert claims.summary(t) == "1 agree, 0 disagree, 1 not testable at this profile"
    with pytest.raises(ValueError, match="Invalid verdict status"):
        claims.Verdict("maybe", "")


def test_all_of_is_as_strong_as_its_weakest_part() -> None:
    a, d, n = claims.Verdict(claims.AGREE, "a"), claims.Verdict(claims.DISAGREE, "d"), claims.not_testable("n")
    assert claims.all_of([a, a]).status == claims.AGREE
    assert claims.all_of([a, n]).status == claims.NOT_TESTABLE
    assert claims.all_of([a, n, d]).status == claims.DISAGREE


def test_labelled_parts_keep_their_status_and_name_their_part_in_all_of() -> None:
    mnist = claims.Verdict(claims.AGREE, "A > B in 3 of 3 cells").labelled("MNIST")
    criteo = claims.Verdict(claims.DISAGREE, "A > B in 0 of 3 cells").labelled("CRITEO")
    assert mnist.status == claims.AGREE and mnist.evidence == "MNIST: A > B in 3 of 3 cells"
    joined = claims.all_of([mnist, criteo])
    assert joined.status == claims.DISAGREE
    assert joined.evidence == "MNIST: A > B in 3 of 3 cells; CRITEO: A > B in 0 of 3 cells"


def test_a_verdict_on_a_stand_in_decides_nothing_but_keeps_its_reading() -> None:
    """A disagreement (or agreement) judged on a stand-in sample is not testable, and its evidence
    says what the stand-in is and what it read."""
    lost = claims.Verdict(claims.DISAGREE, "A > B in 0 of 3 cells", p_against=0.001)
    v = claims.on_stand_in(lost, "a 2,000-row sample, the paper's 45 M rows")
    assert v.status == claims.NOT_TESTABLE and v.p_against is None
    assert v.evidence == (f"{claims.NOT_AT_THIS_SCALE} (a 2,000-row sample, the paper's 45 M rows; on the sample "
                          "it reads disagree: A > B in 0 of 3 cells)")


def test_interval_of_one_cell() -> None:
    mean, se, band = claims.interval(pd.Series([1.0, 2.0, 3.0]))
    assert (mean, round(se, 4), round(band, 3)) == (2.0, 0.5774, round(4.3027 * 0.5774, 3))
    with pytest.raises(ValueError, match="at least 2 seeds"):
        claims.interval(pd.Series([1.0, float("nan")]))


def test_within_reads_the_noise_band_against_a_range() -> None:
    """Disagree when the band lies wholly outside ``plausible`` (first), agree when inside ``agree``,
    else not testable with ``undecided``; a run that did not learn, no pair, one seed or a
    ``why_not`` is not testable."""
    def frame(diffs: list[float]) -> pd.DataFrame:
        return pd.DataFrame({"cell": "all", "seed": range(len(diffs)), "diff": diffs}, columns=["cell", "seed", "diff"])

    tight, wide = [2.4, 2.5, 2.6], [-1.0, 2.5, 6.0]
    kw = {"what": "a - b", "agree": (2.0, 3.0), "undecided": "it straddles", "note": "; paper 2 to 3"}
    assert claims.within(frame(tight), **kw) == claims.Verdict(claims.AGREE, "a - b: +2.50 ± 0.06 points (mean ± "
                                                               "s.e., 3 seeds; noise band ± 0.25); paper 2 to 3")
    assert claims.within(frame([d + 5 for d in tight]), **kw).status == claims.DISAGREE
    assert claims.within(frame(wide), **kw).evidence.endswith("; paper 2 to 3: it straddles")
    # one-sided "no loss beyond 1": a loss within the margin but beyond the noise still disagrees
    no_loss = {"what": "a - b", "agree": (-1.0, float("inf")), "plausible": (0.0, float("inf")), "undecided": "u"}
    assert claims.within(frame([d - 3 for d in tight]), **no_loss).status == claims.DISAGREE
    assert claims.within(frame([d - 2.5 for d in tight]), **no_loss).status == claims.AGREE
    assert claims.within(frame([]), **kw).evidence == "no recorded pair for a - b"
    assert claims.within(frame([2.5]), **kw).evidence == ("a - b: +2.50 points, 1 seed; paper 2 to 3: one seed gives "
                                                          "no error bar")
    v = claims.within(frame(tight), **kw, why_not="not the paper's model")
    assert v.status == claims.NOT_TESTABLE and v.evidence.endswith(": not the paper's model")
    untrained = frame(tight).assign(untrained=["", "A all seed 1 (11.0, chance 10)", ""])
    assert claims.within(untrained, **kw) == claims.not_testable(
        f"{claims.DID_NOT_LEARN}: A all seed 1 (11.0, chance 10)", tested=True)


def _long(values: dict[str, list[float]], cell: str = "MNIST/CNN") -> pd.DataFrame:
    return pd.DataFrame([{"dataset": cell.split("/")[0], "model": cell.split("/")[1], "seed": s, "method": m,
                          "value": v} for m, vs in values.items() for s, v in enumerate(vs)])


def test_a_run_near_chance_decides_no_clause_and_is_named() -> None:
    """Two models at chance differ by noise only: the clause reads not testable (did not learn)
    and says which run, whatever the sign of the difference (Multi-VFL's quick models at 9-15 %)."""
    df = _long({"FedAdam": [9.4, 9.8, 10.1], "FedAvg": [12.3, 12.0, 12.6], "Trained": [90.0, 91.0, 90.5]})
    plain = claims.ordering(claims.paired(df, by="method", a="FedAdam", b="FedAvg", value="value",
                                          cell=["dataset", "model"]), a="FedAdam", b="FedAvg")
    assert plain.status == claims.DISAGREE  # what the clause read before the gate
    gated = claims.ordering(claims.paired(df, by="method", a="FedAdam", b="FedAvg", value="value",
                                          cell=["dataset", "model"], chance=10), a="FedAdam", b="FedAvg")
    assert gated.status == claims.NOT_TESTABLE and gated.evidence.startswith(claims.DID_NOT_LEARN)
    assert "FedAdam MNIST/CNN seed 0 (9.4, chance 10)" in gated.evidence and "FedAvg" in gated.evidence
    one = claims.ordering(claims.paired(df, by="method", a="Trained", b="FedAvg", value="value",
                                        cell=["dataset", "model"], chance=10), a="Trained", b="FedAvg")
    assert one.status == claims.NOT_TESTABLE and "Trained" not in one.evidence.split("(a clause")[0].split(":")[1]


def test_a_vfl_run_below_local_decides_no_clause_but_a_clause_about_local_is_judged() -> None:
    """A VFL method below Local (each party alone) has not learned what VFL is for: comparing it
    with another method decides nothing. "A beats Local" is judged as usual: there, being below
    Local is the answer. Local's level is the cell's mean over seeds, so one noisy seed does not
    count as below."""
    df = _long({"EASTER": [60.0, 62.0, 61.0], "PyVertical": [80.0, 81.0, 79.0], "Local": [70.0, 69.0, 71.0]})
    v = claims.ordering(claims.paired(df, by="method", a="EASTER", b="PyVertical", value="value",
                                      cell=["dataset", "model"], chance=10, local="Local"), a="EASTER", b="PyVertical")
    assert v.status == claims.NOT_TESTABLE and "EASTER MNIST/CNN (61.0 over its seeds, below Local's 70.0)" in v.evidence
    about = claims.ordering(claims.paired(df, by="method", a="EASTER", b="Local", value="value",
                                          cell=["dataset", "model"], chance=10, local="Local"), a="EASTER", b="Local")
    assert about.status == claims.DISAGREE
    noisy = _long({"A": [71.5, 72.0, 68.0], "B": [80.0, 81.0, 79.0], "Local": [70.0, 69.0, 71.0]})
    v = claims.ordering(claims.paired(noisy, by="method", a="A", b="B", value="value", cell=["dataset", "model"],
                                      local="Local"), a="A", b="B")
    assert v.status == claims.DISAGREE  # A's mean 70.5 is above Local's 70.0 though seed 2 is below


def test_as_markdown_prints_each_clause_from_the_table_and_filters_by_artefact() -> None:
    """The prose under a notebook's table is the claims table's rows: a clause of another artefact,
    or one left undecided with ``decided_only``, is not in it; an empty selection gives ""."""
    table = pd.DataFrame([
        {"artefact": "Table III", "clause": "A beats B", "status": claims.AGREE, "evidence": "+1.0 ± 0.2 points."},
        {"artefact": "Table III (own logits)", "clause": "A beats C", "status": claims.NOT_TESTABLE,
         "evidence": "within the noise"},
        {"artefact": "Table IV", "clause": "D beats E", "status": claims.DISAGREE, "evidence": "-2.0 ± 0.1 points"},
        {"artefact": "Table II", "clause": "F beats G", "status": claims.AGREE, "evidence": "+3"}])
    text = claims.as_markdown(table, "paper profile", artefacts=["Table III"])
    assert text.splitlines()[0] == "**paper profile: 1 agree, 0 disagree, 1 not testable at this profile**"
    assert "- *Table III*, A beats B: **agree**. +1.0 ± 0.2 points." in text
    assert "A beats C" in text and "D beats E" not in text and "F beats G" not in text
    decided = claims.as_markdown(table, decided_only=True)
    assert "A beats C" not in decided and "D beats E" in decided and not decided.startswith("**")
    assert claims.as_markdown(table, artefacts=["Fig. 9"]) == ""


def _multi_vfl_records(profile: str, final: dict[str, float]) -> list[dict]:
    """Hand-built records of Multi-VFL's FedAvg runs of ``profile``: each scenario's accuracy
    curve rises to ``final[scenario]`` (%), a little apart by seed; nothing is read from disk."""
    from vflkit.studies import multi_vfl

    out = []
    for run in multi_vfl.configs(profile):
        if run.server_optimizer != "fedavg" or run.scenario not in final:
            continue
        # apart by seed, and by a different amount per scenario: identical paired differences on
        # every seed would give no error bar (claims.ordering refuses a noisy quantity's s.e. of 0)
        top = final[run.scenario] + (0.2 if run.scenario == "1niid" else 0.1) * (run.seed - 1)
        history = [{"round": r, "train_loss": 1.0, "test_accuracy": (top - 4.0 / r) / 100}
                   for r in range(1, run.rounds + 1)]
        out.append({"key": run.key, "config": run.to_dict(), "history": history})
    return out


@pytest.mark.parametrize("final, status, evidence", [
    ({"1niid": 90.0, "2niid": 86.0}, claims.AGREE, "1niid > 2niid"),
    ({"1niid": 86.0, "2niid": 90.0}, claims.DISAGREE, "1niid > 2niid"),
    ({"1niid": 13.0, "2niid": 11.0}, claims.NOT_TESTABLE, claims.DID_NOT_LEARN),  # both near chance (10 %)
])
def test_a_studys_claim_is_a_pure_function_of_records_built_by_hand(final, status, evidence) -> None:
    """Multi-VFL's "with FedAvg, accuracy is lower with 2niid than with 1niid" judged on
    hand-built records alone (no record file exists for them): the verdict is the one the numbers
    were built to give, and a pair of runs near chance decides nothing (did not learn)."""
    from vflkit.studies import multi_vfl

    clause = multi_vfl.CLAIMS[0]
    assert "lower with 2niid than with 1niid" in clause.clause
    verdict = clause.check(claims.Records.of_list("quick", _multi_vfl_records("quick", final)))
    assert verdict.status == status, verdict
    assert evidence in verdict.evidence and "MNIST" in verdict.evidence and "FashionMNIST" in verdict.evidence


def test_no_claim_reads_the_disk_when_its_records_are_passed(monkeypatch) -> None:
    """Every registered study's clauses, judged on records passed in (none recorded here, and
    the hand-built ones of a Multi-VFL clause), give a verdict while every way of reading a record
    raises: a check reads its :class:`~vflkit.claims.Records` and nothing else. Without records,
    :func:`~vflkit.claims.evaluate` reads a study's records once for all of its clauses."""
    from vflkit import records as store
    from vflkit import studies
    from vflkit.studies import multi_vfl

    def no_disk(*args, **kwargs):
        raise AssertionError("a claim's check read the disk")

    built = _multi_vfl_records("quick", {"1niid": 90.0, "2niid": 86.0})
    for name in ("load_available", "check_record", "record_path", "record_roots"):
        monkeypatch.setattr(store, name, no_disk)
    for study in studies.studies():
        for profile in ("quick", "paper"):
            for clauses in (study.claims, study.variant_claims):
                table = claims.evaluate(clauses, profile, claims.Records(profile, {}))
                assert len(table) == len(clauses)
                failed = table[table["evidence"].str.startswith("check failed")]
                assert failed.empty, (study.name, profile, failed[["clause", "evidence"]].to_dict("records"))
    table = claims.evaluate(multi_vfl.CLAIMS, "quick", claims.Records.of_list("quick", built))
    assert table["status"].iloc[0] == claims.AGREE

    calls = []
    monkeypatch.setattr(store, "load_available", lambda runs, profile: calls.append(profile) or built)
    table = claims.evaluate(multi_vfl.CLAIMS, "quick")  # a notebook's call: loaded here, once
    assert calls == ["quick"] and table["status"].iloc[0] == claims.AGREE
    with pytest.raises(ValueError, match="paper profile passed"):
        claims.evaluate(multi_vfl.CLAIMS, "quick", claims.Records("paper", {}))


def test_a_shown_verdict_names_the_reading_it_rests_on() -> None:
    """Where a clause is judged under one reading of the paper, the prose a notebook prints says
    which; a variant whose artefact already names its reading is not labelled twice."""
    table = pd.DataFrame([
        {"artefact": "Table II", "clause": "A beats B", "status": claims.DISAGREE, "evidence": "-1", "reading": "1/C"},
        {"artefact": "Table II (no 1/C)", "clause": "A beats B", "status": claims.AGREE, "evidence": "+1",
         "reading": "no 1/C"},
        {"artefact": "Fig. 3", "clause": "C", "status": claims.AGREE, "evidence": "+1", "reading": ""}])
    text = claims.as_markdown(table)
    assert "- *Table II*, A beats B: **disagree** (under 1/C). -1." in text
    assert "- *Table II (no 1/C)*, A beats B: **agree**. +1." in text and "- *Fig. 3*, C: **agree**. +1." in text
