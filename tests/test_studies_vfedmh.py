"""Tests for vflkit.studies.vfedmh: model assignment, the study's configs, the paper profile
end to end on a tiny slice, and the blinding demonstration."""

import numpy as np
import pandas as pd
import pytest

from vflkit.errors import ConfigError
from vflkit.ops import pricing
from vflkit.training.split import run
from vflkit.methods import get_method
from vflkit import claims, report
from vflkit.studies import _split, vfedmh


def test_assign_models_uses_every_architecture_and_is_seeded():
    """Every architecture of the set appears at least once; the same seed gives the same draw."""
    draws = {_split.assign_models(vfedmh.SMALL_MODELS, seed=s) for s in range(20)}
    for d in draws:
        assert len(d) == 4 and set(d) == set(vfedmh.SMALL_MODELS)
    assert len(draws) > 1
    assert _split.assign_models(vfedmh.RESNETS, seed=3) == _split.assign_models(vfedmh.RESNETS, seed=3)
    with pytest.raises(ConfigError, match="do not fit"):
        _split.assign_models(("mlp", "cnn", "lenet"), n_parties=2, seed=0)


def test_smoke_configs_cover_every_table_and_share_runs():
    """Table II has 4 baselines x 3 models + VFedMH per dataset; Table III reuses VFedMH's run;
    each variant's model mix matches its name; Table IV has one run per optimizer."""
    groups = vfedmh.configs("smoke", seeds=(0, 1))
    assert len(groups["table2"]) == 2 * (4 * 3 + 1)
    t2 = {c.key for c in groups["table2"]}
    assert {c.key for c in groups["table3"] if c.method == "vfedmh"} <= t2
    assert {c.key for c in groups["table3"] if c.method == "agg_vfl"} <= t2
    for c in vfedmh.unique(groups):
        mix = get_method(c.method).model_mix
        if mix is not None:
            assert (len(set(c.models)) == 1) == (mix == "homogeneous"), c
    assert sorted({c.optimizers for c in groups["table4"]}) == sorted(["sgd", "sgd_momentum", "adagrad", "adam"])
    assert {c.lr for c in groups["table4"]} == {0.05}  # the paper's sentence, for every optimizer
    assert {(c.optimizers, c.lr) for c in groups["table4_standard"]} == {
        ("sgd", 0.05), ("sgd_momentum", 0.05), ("adagrad", 0.01), ("adam", 0.001)}
    # the standard-rate SGD rows are the literal runs, not new ones
    assert len({c.key for c in groups["table4"] + groups["table4_standard"]}) == 2 * 6
    assert all(c.options == {"blinding": False} for c in groups["blinding"])
    with pytest.raises(ConfigError, match=r"unknown overrides \['epoch'\]"):
        vfedmh.configs("smoke", overrides={"epoch": 3})


def test_paper_profile_has_three_seeds_and_every_table_on_every_dataset():
    """Without seeds given, paper runs 3 seeds, both model sets, Tables III-IV on all datasets."""
    groups = vfedmh.configs("paper")
    runs = vfedmh.unique(groups)
    assert {c.seed for c in runs} == {0, 1, 2}
    assert {c.dataset for c in groups["table4"]} == {"mnist", "fashion_mnist", "cifar10"}
    assert set(vfedmh.RESNETS) <= {m for c in groups["table2"] for m in c.models}
    assert {c.seed for c in vfedmh.unique(vfedmh.configs("quick"))} == {0, 1, 2}


@pytest.mark.parametrize("profile", ["smoke", "quick", "paper"])
def test_every_method_makes_the_same_passes_over_the_data(profile):
    """C-VFL trains as many epochs as every other method (its Q = 10 local iterations are its
    protocol, not a reason for fewer passes), with the paper's batch size and learning rate
    (C-VFL's Table II cells at 0.05 / Q, its analysis's step: see the test below)."""
    groups = vfedmh.configs(profile)
    runs = vfedmh.unique(groups)
    assert len({c.epochs for c in runs}) == 1
    assert {c.batch_size for c in runs} == {128}
    defended = {c.key for c in groups["table2"] if c.method == "c_vfl"}
    assert {c.lr for c in runs if c not in groups["table4_standard"] and c.key not in defended} == {0.05}
    assert {c.lr for c in runs if c.key in defended} == {vfedmh.CVFL_LR}


def test_overrides_given_as_json_lists_act_like_the_profile_tuples():
    """papermill passes lists: a model set given as a list still gets Tables III-IV."""
    groups = vfedmh.configs("paper", seeds=[0], overrides={"datasets": ["cifar10"],
                                                           "model_sets": [["cnn", "lenet", "mlp"]],
                                                           "all_artefacts_on": ["cifar10"]})
    assert len(groups["table3"]) == 4 * 3 + 1 and len(groups["table4"]) == 4 and groups["blinding"]


def test_paper_profile_runs_end_to_end_on_a_tiny_slice(tmp_path):
    """The paper profile's heterogeneous ResNet run on CIFAR-10 (the PNG tree) trains and
    evaluates every party's model, here on 64 images for one epoch."""
    groups = vfedmh.configs("paper", seeds=[0], overrides={"datasets": ("cifar10",), "n_train": 64, "n_test": 32,
                                                           "epochs": 1, "cvfl_epochs": 1})
    het = [c for c in groups["table2"] if c.method == "vfedmh" and set(c.models) == set(vfedmh.RESNETS)]
    assert len(het) == 1
    record = run(het[0], profile="paper", results=tmp_path, progress=False)
    assert set(record["models"].values()) == set(vfedmh.RESNETS)
    assert all(0 <= m["test_accuracy"] <= 1 for m in record["final"].values())
    assert record["comm"]["total"]["rounds"] == 4  # one batch: VFedMH's four rounds


def test_blinding_demo_shows_the_literal_leak():
    """Per-entry masks leave nothing of the embedding visible; the literal scalar leaks it all;
    both aggregate to the plain mean within the ring's rounding bound."""
    demo = vfedmh.blinding_demo()
    assert abs(demo["corr_per_entry"]) < 0.05
    assert demo["corr_literal"] > 0.999
    assert demo["max_abs_error"] <= demo["error_bound"]
    assert 0.45 < demo["blinded_unit"].mean() < 0.55  # uniform over the ring


def test_blinding_words_read_the_demo():
    """The blinding sentence is worded from the demo's numbers: exact within the bound, nothing
    visible under per-entry masks, the literal reading revealing the embedding; a leaky mask is
    worded as such."""
    demo = vfedmh.blinding_demo()
    words = vfedmh.blinding_words(demo)
    assert "within the ring's rounding bound" in words and "(about 0: nothing of it shows)" in words
    assert "reveals the embedding up to one constant" in words
    leaky = vfedmh.blinding_words({**demo, "corr_per_entry": 0.5, "corr_literal": 0.2,
                                   "max_abs_error": 2 * demo["error_bound"]})
    assert "beyond" in leaky and "at 0.500 under per-entry masks;" in leaky and "does not reveal it" in leaky


def test_baselines_beside_paper_counts_cells_above_the_paper():
    """Per baseline, the cells with a printed number in which ours is above the paper's; VFedMH's
    own cells and cells without a printed number are left out."""
    table = pd.DataFrame({"method": ["PyVertical", "PyVertical", "Local", "VFedMH", "C_VFL"],
                          "value": [98.0, 90.0, 30.0, 98.0, 50.0], "paper_value": [65.0, 95.0, 23.0, 97.0, None]})
    words = vfedmh.baselines_beside_paper(table)
    assert "PyVertical above the paper's in 1 of 2 cells (median +14.0 points)" in words
    assert "Local above the paper's in 1 of 1 cells" in words and "VFedMH" not in words and "C_VFL" not in words
    assert vfedmh.baselines_beside_paper(table.iloc[3:]).startswith("No baseline cell")


def _fake_records(groups, accuracy):
    """A record per run with final (and per-epoch) accuracy ``accuracy(config, party, arch)`` and
    the ledger's per-epoch rounds of its protocol: what the claims read."""
    phases = {"local": 0, "vfedmh": 4, "homo_vfedmh": 4}
    out = {}
    for c in vfedmh.unique(groups):
        parties = (["active"] + [f"passive_{k}" for k in range(1, 4)]) if c.method in ("vfedmh", "homo_vfedmh") \
            else ["active"]
        models = {p: c.models[k] for k, p in enumerate(parties)}
        final = {p: {"test_accuracy": accuracy(c, p, models[p]) / 100} for p in parties}
        if c.method == "heter_aggvfl":  # each party's own prediction, scored alone: 40 points lower
            final["active"].update({f"own_test_accuracy:{p}": final["active"]["test_accuracy"] - 0.4
                                    for p in ["active"] + [f"passive_{k}" for k in range(1, 4)]})
        history = [{"epoch": e, "model": p, "test_accuracy": final[p]["test_accuracy"] * (0.5 if e == 1 else 1.0)}
                   for e in (1, 2, 3) for p in parties]
        steps = vfedmh._steps(c)
        per_epoch = [{"epoch": e, "rounds": phases.get(c.method, 2) * steps} for e in (1, 2, 3)]
        out[c.key] = {"key": c.key, "models": models, "final": final, "history": history,
                      "comm": {"per_epoch": per_epoch, "total": {"rounds": 3 * phases.get(c.method, 2) * steps}}}
    return out


def test_claims_judge_the_records_clause_by_clause(monkeypatch):
    """With records where VFedMH leads every baseline by seed-varying margins, Adam fails at lr 0.05
    and blinding changes nothing, each clause gets the verdict the numbers imply; clauses on the
    ResNets, which smoke does not run, are not testable."""
    from vflkit import claims, report

    groups = vfedmh.configs("smoke", seeds=(0, 1, 2))
    base = {"local": 30.0, "splitnn": 80.0, "c_vfl": 70.0, "agg_vfl": 85.0, "heter_aggvfl": 84.0,
            "homo_vfedmh": 88.0, "vfedmh": 90.0}

    def accuracy(c, party, arch):
        if c.method == "vfedmh" and c.optimizers == "adam" and c.lr == 0.05:
            return 20.0
        return base[c.method] + 0.3 * c.seed

    records = _fake_records(groups, accuracy)
    monkeypatch.setattr(vfedmh, "configs", lambda profile, **kw: groups)
    table = claims.evaluate(vfedmh.CLAIMS, "smoke", records)
    status = dict(zip(table["clause"], table["status"]))
    assert len(table) == len(vfedmh.CLAIMS) == 22
    small = [c for c in status if "(CNN, LeNet, MLP)" in c]
    assert len(small) == 4 and {status[c] for c in small} == {claims.AGREE}
    assert {status[c] for c in status if "ResNet" in c} == {claims.NOT_TESTABLE}
    t3 = table[table["artefact"].str.startswith("Table III")]
    assert t3["status"].tolist() == [claims.AGREE] * 5  # Heter_aggVFL read both ways
    assert t3["artefact"].str.contains("own logits").sum() == 2
    t4 = table[table["artefact"] == "Table IV"]
    assert t4["status"].tolist() == [claims.DISAGREE, claims.AGREE] and "Adam" in t4["evidence"].iloc[0]
    fig4 = table[table["artefact"] == "Fig. 4"]["status"].tolist()
    assert fig4 == [claims.DISAGREE, claims.AGREE]
    rounds = table[table["clause"].str.contains("rounds per step")]
    assert rounds["status"].item() == claims.AGREE
    assert table[table["artefact"] == "Sec. IV-C"]["status"].item() == claims.AGREE
    # a baseline's cell without records leaves its clause not testable, however the others compare
    lenet = [c.key for c in groups["table2"] if c.method == "c_vfl" and c.models[0] == "lenet"]
    kept = {k: records.pop(k) for k in lenet}  # every seed's
    table = claims.evaluate(vfedmh.CLAIMS, "smoke", records)
    row = table[table["clause"] == "VFedMH's heterogeneous models are more accurate than C_VFL (CNN, LeNet, MLP)"]
    assert row["status"].item() == claims.NOT_TESTABLE and "no recorded pair yet (MNIST/LeNet)" in row["evidence"].item()
    records.update(kept)
    # a clause whose runs are partly unrecorded is not testable, never judged on what is left
    adam = next(c for c in groups["table4_standard"] if c.optimizers == "adam")
    del records[adam.key]
    table = claims.evaluate(vfedmh.CLAIMS, "smoke", records)
    fig4 = table[table["artefact"] == "Fig. 4"]
    assert fig4["status"].tolist() == [claims.DISAGREE, claims.NOT_TESTABLE]
    assert "no records of Adam (lr 0.001)" in fig4["evidence"].iloc[1]


def test_a_diverged_run_counts_its_protocol_rounds_not_its_early_stop(monkeypatch):
    """A C_VFL run that stopped at a NaN loss in epoch 2 (after 5 of its steps) sent fewer
    rounds: per step it still ran 2, and its schedule's total is that of a full run. Before,
    the rounds-per-step clause read 'disagree' on such records (C_VFL: 0.875 per step)."""
    from vflkit import analysis, claims

    groups = vfedmh.configs("smoke", seeds=(0, 1, 2))
    records = _fake_records(groups, lambda c, party, arch: 90.0 if c.method == "vfedmh" else 80.0)
    cvfl = [c for c in groups["table2"] if c.method == "c_vfl"]
    for c, kept in zip(cvfl[:2], ({}, {"steps_run": 5})):  # an old record (no steps_run) and a new one
        rec, steps = records[c.key], vfedmh._steps(c)
        rec["comm"]["per_epoch"] = [{"epoch": 1, "rounds": 2 * steps, "messages": 8 * steps, "bytes": 80 * steps},
                                    {"epoch": 2, "rounds": 2 * 5, "messages": 8 * 5, "bytes": 80 * 5}]
        rec["comm"]["total"]["rounds"] = 2 * steps + 10
        rec["diverged"] = {"epoch": 2, "step": 4, **kept}
        full = analysis.full_epoch_traffic(rec, steps)
        assert full["rounds"].tolist() == [2 * steps, 2 * steps]
        assert full["messages"].tolist() == [8 * steps, 8 * steps]
    monkeypatch.setattr(vfedmh, "configs", lambda profile, **kw: groups)
    per_step = vfedmh._rounds_per_step(claims.Records("smoke", records))
    assert per_step.status == claims.AGREE and "C_VFL: 2 per step" in per_step.evidence
    assert vfedmh._total_rounds(claims.Records("smoke", records)).status == claims.AGREE


def test_a_diverged_run_has_no_convergence_epoch(monkeypatch):
    """A run stuck at chance "converges" at epoch 1 by the first-epoch-near-the-end rule; a run
    that diverged never converged, so it leaves its cell unpaired and the clause cannot agree."""
    from vflkit import claims, report

    groups = vfedmh.configs("smoke", seeds=(0, 1, 2))
    records = _fake_records(groups, lambda c, party, arch: 90.0)
    assert vfedmh._same_epoch()(claims.Records("smoke", {})).status == claims.NOT_TESTABLE  # no records
    monkeypatch.setattr(vfedmh, "configs", lambda profile, **kw: groups)
    assert vfedmh._same_epoch()(claims.Records("smoke", records)).status == claims.AGREE  # every run converges at epoch 2
    stuck = next(c for c in groups["table2"] if c.method == "c_vfl")
    rec = records[stuck.key]
    for h in rec["history"]:
        h["test_accuracy"] = 0.10
    rec["final"] = {p: {"test_accuracy": 0.10} for p in rec["final"]}
    rec["diverged"] = {"epoch": 3, "step": 1}
    rec["config"] = {"dataset": stuck.dataset, "method": stuck.method, "models": list(stuck.models)}
    assert stuck.key not in {c.key for c, _ in vfedmh._curves(groups, records)}  # no curve to read
    v = vfedmh._same_epoch()(claims.Records("smoke", records))
    assert v.status == claims.NOT_TESTABLE and "left out: C_VFL (1)" in v.evidence


def test_a_run_that_collapses_to_chance_has_no_convergence_epoch(monkeypatch):
    """A run that learns, then falls to chance and trains on there to the end (no NaN, so not
    stopped) "converges" at its first epoch at chance by the first-epoch-near-the-end rule; it
    never converged: no row, named among the runs left out, and listed with the epoch it fell."""
    from vflkit import claims, report

    groups = vfedmh.configs("smoke", seeds=(0, 1, 2))
    records = _fake_records(groups, lambda c, party, arch: 90.0)
    monkeypatch.setattr(vfedmh, "configs", lambda profile, **kw: groups)
    fell = next(c for c in groups["table2"] if c.method == "c_vfl")
    rec = records[fell.key]
    rec["config"] = {"dataset": fell.dataset, "method": fell.method, "models": list(fell.models)}
    assert vfedmh.collapsed_epoch(rec) is None and vfedmh.diverged_runs([rec]).empty
    for h in rec["history"]:
        h["test_accuracy"] = {1: 0.80, 2: 0.138, 3: 0.10}[h["epoch"]]  # 13.8 %: at chance already
    rec["final"] = {p: {"test_accuracy": 0.10} for p in rec["final"]}
    assert vfedmh.collapsed_epoch(rec) == 2
    listed = vfedmh.diverged_runs([rec])
    assert listed.to_dict("records") == [{"dataset": fell.dataset, "method": "c_vfl", "models": "/".join(fell.models),
                                          "how": "collapsed", "epoch": 2, "batch": None}]
    assert fell.key not in {c.key for c, _ in vfedmh._curves(groups, records)}  # no curve to read
    without = {k: r for k, r in records.items() if k != fell.key}
    pd.testing.assert_frame_equal(vfedmh.time_to_target(groups, records), vfedmh.time_to_target(groups, without))
    v = vfedmh._same_epoch()(claims.Records("smoke", records))
    assert v.status == claims.NOT_TESTABLE and "left out: C_VFL (1)" in v.evidence
    for h in rec["history"]:
        h["test_accuracy"] = {1: 0.10, 2: 0.12, 3: 0.10}[h["epoch"]]  # never above chance
    assert vfedmh.collapsed_epoch(rec) == 1
    for h in rec["history"]:
        h["test_accuracy"] = {1: 0.10, 2: 0.12, 3: 0.238}[h["epoch"]]  # weak, like Local, not collapsed
    assert vfedmh.collapsed_epoch(rec) is None


def test_fig3_of_the_paper_profile_shows_a_baseline_only_with_its_three_runs():
    """Drawn from the committed paper records as far as recorded: a baseline's total is the sum
    of its three runs, so a seed missing one of them is left out rather than shown cheaper."""
    import matplotlib.pyplot as plt

    groups, recs = vfedmh.STUDY.recorded("paper")
    assert {c.key for c in groups["table2"] + groups["cvfl_host_lr"]} <= {r["key"] for r in recs}
    # C_VFL's MNIST runs at the paper's rate (the sensitivity group) stand in for Table II's,
    # which are recorded over several sessions
    groups = {"table2": groups["table2"] + groups["cvfl_host_lr"]}
    fig, data = vfedmh.fig3(groups, recs)
    plt.close(fig)
    full = data.set_index(["dataset", "method"])
    assert (full.loc[full.index.get_level_values("method") != "VFedMH", "runs_for_3_models"] == 3).all()
    cvfl = [c for c in groups["table2"] if c.method == "c_vfl" and c.dataset == "mnist"]
    assert cvfl, "the committed paper records hold C_VFL's MNIST runs"
    drop = {c.key for c in cvfl if c.models[0] == "cnn"}
    cut = {"table2": [c for c in groups["table2"] if c.key not in drop]}
    fig, data = vfedmh.fig3(cut, [r for r in recs if r["key"] not in drop])
    plt.close(fig)
    assert not ((data["dataset"] == "MNIST") & (data["method"] == "C_VFL")).any()
    with pytest.raises(KeyError, match="no artefact 'Fig. 7'"):
        report.draw(vfedmh.STUDY, "Fig. 7", "paper", display=False)


def _is_empty(drawn):
    """A drawing of nothing: an empty table, or no figure and no data."""
    return drawn.empty if isinstance(drawn, pd.DataFrame) else drawn[0] is None and drawn[1].empty


def test_each_artefact_without_records_is_pending_and_draws_nothing(tmp_path, monkeypatch, outside_checkout):
    """Without records every run of an artefact is pending (Table IV's standard-rate rows
    included), nothing is drawn and no file is written."""
    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    groups = vfedmh.configs("paper")
    for art in vfedmh.STUDY.artefacts:
        todo = pricing.pending(vfedmh.STUDY, "paper", label=art.label)
        assert len(todo) == len(art.runs(groups, "paper")) and set(todo["needs"]) <= {"GPU", "CPU"}
        assert _is_empty(report.draw(vfedmh.STUDY, art.label, "paper", root=tmp_path / "figures", display=False))
    assert not any((tmp_path / "figures").rglob("*.*"))


def test_pair_tables_leave_out_pairs_not_recorded_yet():
    """Blinding on/off and C-VFL's Q = 10 / Q = 1 are pairs of runs: a paper profile part-computed
    has some pairs half-recorded; those are left out, not a KeyError."""
    groups = vfedmh.configs("paper")
    blind = groups["blinding"][0]
    q1 = groups["cvfl_q1"][0]

    def record(cfg, acc):
        return {"key": cfg.key, "models": {"active": cfg.models[0]},
                "final": {"active": {"test_accuracy": acc}}}

    half = [record(blind, 0.9), record(q1, 0.8)]  # only one run of each pair
    assert vfedmh.blinding_accuracy(groups, half).empty
    assert vfedmh.cvfl_local_iterations(groups, half).empty
    whole = half + [record(blind.replace(options={}), 0.91), record(q1.replace(options={}), 0.1)]
    b = vfedmh.blinding_accuracy(groups, whole)
    assert len(b) == 1 and b["difference"].iloc[0] == pytest.approx(1.0)
    q = vfedmh.cvfl_local_iterations(groups, whole)
    # the defended rate's run (Table II's cell) is not recorded yet: shown missing, not dropped
    assert len(q) == 1 and q["Q=10, lr=0.05"].iloc[0] == pytest.approx(10.0)
    assert q["Q=1, lr=0.05"].iloc[0] == pytest.approx(80.0) and np.isnan(q["Q=10, lr=0.005"].iloc[0])
    defended = q1.replace(options={}, lr=vfedmh.CVFL_LR)
    assert defended in groups["table2"]
    q = vfedmh.cvfl_local_iterations(groups, whole + [record(defended, 0.9)])
    assert q["Q=10, lr=0.005"].iloc[0] == pytest.approx(90.0)


def test_cvfl_runs_at_the_rate_its_analysis_allows_and_keeps_the_papers_rate_as_a_labelled_row():
    """Table II's C-VFL cells use lr 0.05 / Q (C-VFL's step bound shrinks as 1/Q); the paper's
    0.05 at Q = 10 is a separate sensitivity group, and the Q = 1 control keeps 0.05."""
    from vflkit.methods.cvfl import step_size
    groups = vfedmh.configs("quick")
    cvfl = [c for c in groups["table2"] if c.method == "c_vfl"]
    assert cvfl and {c.lr for c in cvfl} == {0.005} == {step_size(0.05, 10)}
    assert {c.lr for c in groups["cvfl_host_lr"]} == {0.05} and len(groups["cvfl_host_lr"]) == len(cvfl)
    assert {c.lr for c in groups["cvfl_q1"]} == {0.05}
    assert step_size(0.05, 1) == 0.05
    with pytest.raises(ConfigError, match="local_iterations"):
        step_size(0.05, 0)


def test_a_clause_judged_on_cvfl_at_the_papers_rate_names_the_runs_that_did_not_learn():
    """The committed paper records of C-VFL at lr 0.05 with Q = 10 (the sensitivity group) hold
    collapsed runs: "VFedMH > C_VFL" on them reads not testable (did not learn), naming them,
    where the ungated rule read agree (+42 points) on those same records."""
    claim = next(c for c in vfedmh.VARIANT_CLAIMS if "lr 0.05" in c.artefact)
    recs = claims.load(claim, "paper")  # the committed records, read once
    groups, rec = vfedmh._available(recs)
    swapped = vfedmh.with_variant(groups, "cvfl_host_lr")
    assert {c.lr for c in swapped["table2"] if c.method == "c_vfl"} == {0.05}
    assert not any(c.method == "c_vfl" and c.lr != 0.05 for c in swapped["table2"])
    v = claim.check(recs)
    assert v.status == claims.NOT_TESTABLE and v.evidence.startswith(claims.DID_NOT_LEARN)
    assert "C_VFL FMNIST/LeNet" in v.evidence or "C_VFL MNIST/LeNet" in v.evidence or "more" in v.evidence
    df = vfedmh.accuracy_frame(swapped, rec, "table2")
    df = df[df["model_set"] == "small"]
    ungated = claims.ordering(claims.paired(df, by="method", a="VFedMH", b="C_VFL", value="value",
                                            cell=["dataset", "model"]), a="VFedMH", b="C_VFL")
    assert ungated.status == claims.AGREE


def test_embedding_gradient_table_pairs_each_run_with_its_default_twin():
    """The 1/C comparison pairs a run given ∂L/∂E with the same run given ∂L/∂E / C (same key but
    for the option); a pair with a side not recorded is left out."""
    groups = vfedmh.configs("smoke")
    full = groups["embedding_gradient"][0]
    base = full.replace(options={})
    assert base in groups["table2"] and full.options == {"embedding_gradient": "full"}

    def record(cfg, accs):
        return {"key": cfg.key, "config": cfg.to_dict(), "models": {"active": "cnn", "passive_1": "mlp"},
                "final": {"active": {"test_accuracy": accs[-1]}, "passive_1": {"test_accuracy": accs[-1] - 0.02}},
                "history": [{"epoch": e + 1, "model": m, "test_accuracy": a - (0.02 if m == "passive_1" else 0)}
                            for e, a in enumerate(accs) for m in ("active", "passive_1")]}

    assert vfedmh.embedding_gradient(groups, [record(full, [0.5, 0.9])]).empty
    t = vfedmh.embedding_gradient(groups, [record(base, [0.5, 0.7, 0.8]), record(full, [0.7, 0.858, 0.86])])
    assert len(t) == 1 and t["dataset"].iloc[0] == "MNIST"
    share, whole = vfedmh.GRADIENT_READINGS
    assert t[f"{share}: final %"].iloc[0] == pytest.approx(79.0)
    assert t["difference (points)"].iloc[0] == pytest.approx(6.0)
    assert t[f"{share}: e*"].iloc[0] == 3 and t[f"{whole}: e*"].iloc[0] == 2


@pytest.mark.parametrize("paper", ["vfedmh", "easter", "demo"])
def test_overrides_set_a_run_field_on_every_run(paper):
    """`overrides` means the same in every study: a profile setting, or a run field set on every
    run (the baselines' included); the fields that make a run (dataset, method, models, seed,
    options) are the profile's to choose, and naming one is an error that lists the valid keys."""
    import importlib

    from vflkit.config import override_runs

    study = importlib.import_module(f"vflkit.studies.{paper}")
    runs = study.configs("smoke", overrides={"lr": 0.01, "embedding_dim": 32})
    flat = [c for g in (runs.values() if isinstance(runs, dict) else [runs]) for c in g]
    assert flat and all(c.lr == 0.01 and c.embedding_dim == 32 for c in flat)
    plain = study.configs("smoke")
    assert override_runs(plain, {}) is plain
    with pytest.raises(ConfigError, match="unknown overrides \\['method'\\]"):
        study.configs("smoke", overrides={"method": "splitnn"})


def test_diverged_runs_are_never_a_plain_number_in_the_tables(tmp_path):
    """The committed C_VFL runs that diverged (at least 8 paper records, more as the lr 0.05
    sensitivity row fills in; 4 quick) score their NaN model's arg-max (chance); Table II counts
    every one in ``diverged`` and keeps them out of the cell's value (NaN where every run
    diverged), the written CSV carries the count, and the readable table says "diverged" instead
    of 9.80 ± 0.00."""
    import json
    import math

    from vflkit import report
    from vflkit.config import project_root

    root = project_root() / "results"
    for profile, at_least in (("paper", 8), ("quick", 4)):
        recs = [json.loads(p.read_text()) for p in sorted((root / profile / "vfedmh").glob("*.json"))]
        n_diverged = sum(bool(r.get("diverged")) for r in recs)  # the committed records
        assert n_diverged >= at_least
        table = vfedmh.table2(*vfedmh.STUDY.recorded(profile), profile)
        assert table["diverged"].sum() == n_diverged
        gone = table[(table["n_runs"] == 0)]
        assert len(gone) and gone["value"].isna().all() and (gone["diverged"] > 0).all()
        partly = table[(table["diverged"] > 0) & (table["n_runs"] > 0)]
        assert partly["value"].notna().all()  # the mean of the runs that did not diverge
        path = report.write_table(table, "vfedmh", profile, "2", root=tmp_path)
        written = pd.read_csv(path)
        assert written["diverged"].sum() == n_diverged and math.isnan(written.loc[gone.index[0], "value"])
        shown = report.side_by_side(gone, index=["dataset", "method", "setting"], columns="model")
        assert shown.map(lambda s: isinstance(s, str) and s.startswith("diverged (")).to_numpy().sum() == len(gone)


def test_the_bf16_check_is_its_table_ii_cell_again_under_bf16_and_decides_by_the_seeds_mean():
    """The paper profile's bf16 check is PRECISION_CHECK's Table II runs, every seed, again with
    precision="bf16" (keys of their own); the quick profile has none (no ResNets). The verdict
    waits for every seed of both, then takes bf16 when the bf16 seeds' mean lies inside the fp32
    seeds' range, else keeps fp32."""
    groups = vfedmh.configs("paper")
    dataset, method, model = vfedmh.PRECISION_CHECK
    fp32 = [c for c in groups["table2"] if (c.dataset, c.method, c.models[0]) == (dataset, method, model)]
    assert len(fp32) == 3 and [c.replace(precision="fp32") for c in groups["precision"]] == fp32
    assert {c.precision for c in groups["precision"]} == {"bf16"}
    assert not {c.key for c in groups["precision"]} & {c.key for c in fp32}
    assert vfedmh.needs_gpu(groups["precision"][0]) and not vfedmh.configs("quick")["precision"]

    def records(fp32_acc, bf16_acc):
        return [{"key": c.replace(precision=p).key, "final": {"active": {"test_accuracy": a / 100}},
                 "environment": {"device_name": "GPU"}, "wall_time_s": 90.0 if p == "bf16" else 95.0}
                for c, f, b in zip(groups["precision"], fp32_acc, bf16_acc) for p, a in (("fp32", f), ("bf16", b))
                if a is not None]

    table = vfedmh.precision_check(groups, records([99.0, 99.2, 99.1], [99.1, None, 99.0]))
    assert table["bf16 accuracy (%)"].isna().tolist() == [False, True, False]
    assert table["fp32 wall (s)"].tolist() == [95.0] * 3 and table["bf16 wall (s)"].isna().tolist() == [False, True, False]
    status, words = vfedmh.precision_verdict(table)
    assert status is None and "2 of 3 bf16 and 3 of 3 fp32 seeds" in words
    inside = vfedmh.precision_verdict(vfedmh.precision_check(groups, records([99.0, 99.2, 99.1], [99.3, 98.9, 99.1])))
    assert inside[0] == "bf16" and "mean 99.10 %" in inside[1] and "inside" in inside[1]
    outside = vfedmh.precision_verdict(vfedmh.precision_check(groups, records([99.0, 99.2, 99.1], [98.9, 98.8, 99.0])))
    assert outside[0] == "fp32" and "outside the fp32 seeds' range 99.00-99.20 %" in outside[1]
