"""APC-VFL, its Ablation, VFedTrans, the aligned SplitNN and the study module."""

import inspect

import pandas as pd
import pytest
import torch

from vflkit.comm import Channel, Ledger, Party
from vflkit.errors import ConfigError
from vflkit.methods.aligned_splitnn import AlignedSplitNN, footprint_splitnn
from vflkit.methods.apc_vfl import APCVFL, APCVFLJoint, Ablation, footprint_apc_vfl
from vflkit import claims, records
from vflkit.methods.oneshot import ADAM_LR, LocalFeatures, OneShotMethod, train_autoencoder
from vflkit.methods.vfedtrans import VFedTrans, footprint_vfedtrans
from vflkit.models import apc_vfl_autoencoder
from vflkit.ops import pricing
from vflkit.partition import apc_vfl_active_features, apc_vfl_partition, partial_alignment
from vflkit.records import record_path
from vflkit.studies import apc_vfl as study
from vflkit.training import one_shot

FAST = {"epochs": 2, "patience": 10, "batch_size": 16, "seed": 0}


def _parties(n_total=80, n_active=60, n_aligned=30, a=3, p=6, seed=0, channel=None, passive_seed=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_total, a + p, generator=g)
    if passive_seed is not None:  # the same active data, other passive data
        x[:, a:] = torch.randn(n_total, p, generator=torch.Generator().manual_seed(passive_seed))
    y = (x[:, a] > 0).long()  # the label depends on a passive feature
    al = partial_alignment(n_total, n_active=n_active, n_aligned=n_aligned, seed=seed)
    ch = channel or Channel(Ledger())
    active = Party("active", channel=ch, ids={"train": al.active_ids},
                   features={"train": x[al.active_ids, :a]}, labels={"train": y[al.active_ids]})
    passive = Party("passive", channel=ch, ids={"train": al.passive_ids}, features={"train": x[al.passive_ids, a:]})
    return active, passive, ch


def _aligned_parties(n=40, n_test=8):
    """Table 2's setting: the same ids at both participants, with a test split."""
    g = torch.Generator().manual_seed(0)
    x, ids = torch.randn(n + n_test, 9, generator=g), torch.arange(n + n_test)
    y = (x[:, 3] > 0).long()
    ch = Channel(Ledger())
    split = {"train": slice(0, n), "test": slice(n, n + n_test)}
    active = Party("active", channel=ch, ids={k: ids[s] for k, s in split.items()},
                   features={k: x[s, :3] for k, s in split.items()}, labels={k: y[s] for k, s in split.items()})
    passive = Party("passive", channel=ch, ids={k: ids[s] for k, s in split.items()},
                    features={k: x[s, 3:] for k, s in split.items()})
    return active, passive, ch


# ------------------------------------------------------------------------ feature partitions


@pytest.mark.parametrize("dataset,n,expected", [
    ("breast_cancer", 5, {"worst compactness", "concave points error", "smoothness error", "mean texture",
                          "worst fractal dimension"}),
    ("breast_cancer", 4, {"concave points error", "smoothness error", "mean texture", "worst fractal dimension"}),
    ("breast_cancer", 2, {"mean texture", "worst fractal dimension"}),
    ("credit_card", 5, {"X3", "X5", "X7", "X9", "X11"}),
    ("credit_card", 3, {"X7", "X9", "X11"}),
    ("credit_card", 2, {"X9", "X11"}),
    ("mimic3", 3, {"NumCallouts", "NumDiagnosis", "Age"}),
    ("mimic3", 2, {"NumCallouts", "NumDiagnosis"}),
])
def test_active_features_follow_appendix_a(dataset, n, expected):
    """Appendix A: the 5 listed features, minus the first 5 - n of the transfer order."""
    assert set(apc_vfl_active_features(dataset, n)) == expected


def test_partition_moves_features_to_passive():
    """Credit Card with 2 active features: X3, X5, X7 are the passive participant's; every
    column is held by exactly one participant."""
    names = [f"X{i}" for i in range(1, 24)]
    part = apc_vfl_partition("credit_card", 2, names)
    active, passive = part.slices
    assert list(active) == ["X9", "X11"]
    assert {"X3", "X5", "X7"} <= set(passive) and len(active) + len(passive) == 23


# -------------------------------------------------------------------------------- protocol


def test_apc_vfl_sends_exactly_one_message_of_eq6_size():
    """One representation message, |D_A| x 256 float32 = Eq. 6's bytes, one round."""
    active, passive, ch = _parties()
    APCVFL(**FAST).fit(active, passive)
    totals = ch.ledger.totals()
    assert totals["messages"] == 1 and totals["rounds"] == 1
    assert totals["bytes"] == footprint_apc_vfl(30)
    assert ch.ledger.frame()["kind"].tolist() == ["representation"]


def test_ablation_and_local_send_nothing():
    """The local baselines never use the channel; Local's features are the raw ones."""
    active, passive, ch = _parties()
    m = Ablation(**FAST)
    m.fit(active, passive)
    loc = LocalFeatures(**FAST)
    loc.fit(active, passive)
    assert len(ch.ledger) == 0
    x = active.features("train")
    assert m.transform(x).shape == (60, 256) and torch.equal(loc.transform(x), x)


class _ZeroingChannel(Channel):
    """A channel that replaces every representation payload by zeros."""

    def send(self, sender, receiver, kind, payload, *, nbytes=None):
        if kind == "representation":
            payload = torch.zeros_like(payload)
        super().send(sender, receiver, kind, payload, nbytes=nbytes)


def test_passive_data_reaches_active_only_through_the_message():
    """Changing the passive participant's features changes the active's encoder; with the
    message zeroed on the wire, the passive features no longer matter at all."""
    def encoder_out(seed_data, channel):
        active, passive, _ = _parties(channel=channel, passive_seed=seed_data)
        m = APCVFL(**FAST)
        m.fit(active, passive)
        return m.transform(active.features("train"))

    assert not torch.allclose(encoder_out(1, Channel(Ledger())), encoder_out(2, Channel(Ledger())))
    assert torch.equal(encoder_out(1, _ZeroingChannel(Ledger())), encoder_out(2, _ZeroingChannel(Ledger())))


def test_transform_before_fit_fails():
    """A clear error, not an attribute error."""
    with pytest.raises(ConfigError, match="before fit"):
        APCVFL(**FAST).transform(torch.zeros(2, 3))


def test_distillation_pulls_encoder_towards_teacher():
    """Eq. 5: with a large lambda the aligned rows' latent moves to the teacher."""
    torch.manual_seed(0)
    x = torch.randn(64, 3)
    teacher = torch.full((32, 256), 0.5)
    dist = []
    for lam in (0.0, 10.0):
        torch.manual_seed(0)
        m = apc_vfl_autoencoder("g3A", a=3)
        train_autoencoder(m, x, teacher=teacher, teacher_rows=torch.arange(32), lam=lam, epochs=30,
                          batch_size=16, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            dist.append(float(((m.encode(x[:32]) - teacher) ** 2).mean()))
    assert dist[1] < 0.5 * dist[0]


def _fit_and_encode(method: APCVFL, **parties) -> tuple[torch.Tensor, dict, dict]:
    active, passive, ch = _parties(**parties)
    method.fit(active, passive)
    with torch.no_grad():
        z = method.transform(active.features("train"))
    return z, {k: dict(v) for k, v in method.history.items()}, ch.ledger.totals()


def test_teachers_trained_once_are_reused_exactly(monkeypatch):
    """The MSE and MAE runs of one cell train the same g1P, g1A and g2A; g1A is the same at
    every aligned count. A process trains each once, and what the MAE run gets is bit for bit
    what training again would give; the record says which were reused; messages are unchanged."""
    from vflkit.methods import apc_vfl as module

    kw = {"epochs": 5, "patience": 10, "batch_size": 16, "seed": 0}
    monkeypatch.setattr(module, "_TRAINED", module.OrderedDict())
    fresh = {}
    for loss in ("mse", "mae"):  # each trained from scratch
        module._TRAINED.clear()
        fresh[loss] = _fit_and_encode(APCVFL(distill_loss=loss, **kw))
    module._TRAINED.clear()
    z_mse, h_mse, comm_mse = _fit_and_encode(APCVFL(distill_loss="mse", **kw))
    z_mae, h_mae, comm_mae = _fit_and_encode(APCVFL(distill_loss="mae", **kw))
    assert torch.equal(z_mse, fresh["mse"][0]) and torch.equal(z_mae, fresh["mae"][0])
    assert not any("reused" in h for h in h_mse.values())
    assert {k for k, h in h_mae.items() if h.get("reused")} == {"g1P", "g1A", "g2A"}
    assert {k: {m: v for m, v in h.items() if m != "reused"} for k, h in h_mae.items()} == fresh["mae"][1]
    assert comm_mae == comm_mse == fresh["mae"][2]  # the message is still sent and counted
    # another aligned count: other passive rows, so g1P and g2A are new; g1A is the same
    _, h_other, _ = _fit_and_encode(APCVFL(distill_loss="mse", **kw), n_aligned=20)
    assert {k for k, h in h_other.items() if h.get("reused")} == {"g1A"}
    # another seed or learning rate is another model
    _, h_seed, _ = _fit_and_encode(APCVFL(distill_loss="mse", **{**kw, "seed": 1}))
    _, h_lr, _ = _fit_and_encode(APCVFL(distill_loss="mse", lr=0.01, **kw))
    assert not any(h.get("reused") for h in (*h_seed.values(), *h_lr.values()))


def test_vfedtrans_ledger_and_representation():
    """Five messages in three rounds (masks, masked blocks, U~); the A and U~ terms are
    Eq. 10's; the enhanced features are the raw ones beside a latent of width x_total."""
    active, passive, ch = _parties()
    m = VFedTrans(mask_block_size=8, **FAST)
    m.fit(active, passive)
    df = ch.ledger.frame()
    assert len(df) == 5 and ch.ledger.totals()["rounds"] == 3
    n, xt, xd = 30, 3, 6
    masks = df[df["kind"] == "mask"]["nbytes"].sum()
    assert masks == (2 * n * n + xt * (xt + xd) + xd * (xt + xd)) * 4
    u = df[(df["sender"] == "server")]["nbytes"].item()
    assert u == n * (xt + xd) * 4
    assert m.transform(active.features("train")).shape == (60, xt + xt + xd)
    assert ch.pending() == 0


def test_vfedtrans_concatenates_raw_features_like_its_reference():
    """VFedTrans's own pipeline scores [X_task | representation]; the representation alone is
    the variant of the same encoder (APC-VFL Sec. 6's reading)."""
    active, passive, _ = _parties()
    m = VFedTrans(mask_block_size=8, **FAST)
    m.fit(active, passive)
    x = active.features("train")
    z = m.transform(x)
    rep = m.variants(x)["representation_only"]
    assert torch.equal(z[:, :3], x) and torch.equal(z[:, 3:], rep)
    apc = APCVFL(**FAST)
    apc.fit(*_parties()[:2])
    assert apc.variants(x) == {}  # APC-VFL scores its representation only
    with pytest.raises(ConfigError, match="before fit"):
        VFedTrans(**FAST).variants(x)


def test_every_optimiser_defaults_to_adams_original_learning_rate():
    """Appendix B: Adam with Kingma & Ba's parameters (lr 1e-3) for every autoencoder, the
    aligned SplitNN and every run of the study (bar the labelled lr-0.01 sensitivity rows)."""
    assert ADAM_LR == 1e-3
    assert APCVFL().lr == VFedTrans().lr == Ablation().lr == ADAM_LR
    assert AlignedSplitNN(num_classes=2).lr == ADAM_LR
    assert inspect.signature(train_autoencoder).parameters["lr"].default == ADAM_LR
    cfgs = study.configs("paper")
    assert {c.lr for c in cfgs} == {ADAM_LR, study.SENSITIVITY_LR}
    sens = [c for c in cfgs if c.lr == study.SENSITIVITY_LR]
    assert {c.dataset for c in sens} == {"breast_cancer"}
    assert {c.method for c in sens} == {"ablation", "apc_vfl_mse", "splitnn", "apc_vfl_joint"}
    # each sensitivity run repeats a main run with only the learning rate changed
    main = {c.key for c in cfgs if c.lr == ADAM_LR}
    assert all(c.replace(lr=ADAM_LR).key in main for c in sens)
    assert not [c for c in study.configs("paper", overrides={"lr": 0.002}) if c.lr != 0.002]


def test_vfedtrans_teacher_is_the_svd_of_the_aligned_data():
    """The unmasked U spans the same space as the plain SVD of [X_t | X_d] on aligned rows."""
    active, passive, _ = _parties()
    rows, z = VFedTrans(mask_block_size=8, **FAST).teacher_representations(active, passive)
    aligned = OneShotMethod.aligned_ids(active, passive)
    x = torch.cat([active.features("train", ids=aligned), passive.features("train", ids=aligned)], dim=1).double()
    u0 = torch.linalg.svd(x, full_matrices=False).U
    u = z.double() / 30 ** 0.5
    assert torch.allclose((u.T @ u0).abs(), torch.eye(9, dtype=torch.float64), atol=1e-3)


def test_splitnn_two_rounds_per_batch_and_gradients_reach_passive():
    """Embedding up, gradient down every batch; the passive extractor's weights change."""
    active, passive, ch = _aligned_parties()
    net = AlignedSplitNN(num_classes=2, epochs=2, patience=10, batch_size=8, seed=0)
    net._build(active, passive)
    before = [p.detach().clone() for p in passive.models["extractor"].parameters()]
    net.fit(active, passive)
    totals = ch.ledger.totals()
    steps = 2 * -(-36 // 8)  # 2 epochs of ceil(36 / 8) batches (4 of 40 held out)
    assert totals["rounds"] == 2 * steps
    assert set(ch.ledger.frame()["kind"]) == {"embedding", "gradient"}
    assert any(not torch.equal(b, p) for b, p in zip(before, passive.models["extractor"].parameters()))
    assert net.predict(active, passive, "test").shape == (8,)


def test_apc_joint_scores_test_samples_in_eval_phase():
    """Table 2's APC-VFL: one training message; test representations are eval traffic."""
    active, passive, ch = _aligned_parties()
    m = APCVFLJoint(**FAST)
    m.fit(active, passive)
    assert m.joint_features(active, passive, "train").shape == (40, 256)
    assert m.joint_features(active, passive, "test").shape == (8, 256)
    assert ch.ledger.totals()["messages"] == 1 and ch.ledger.totals(phase="eval")["messages"] == 1


def test_footprint_formulas():
    """Eqs. 6, 9 and 10 on the paper's own example sizes: 9500 x 256 x 4 B = 9.73 MB."""
    assert round(footprint_apc_vfl(9500) / 1e6, 2) == 9.73
    assert footprint_splitnn(1, 128, 128) == (128 * 256 + 128 * 256 + 256) * 4
    assert footprint_vfedtrans(10, 2, 3) == (200 + 10 + 15 + 20 + 30 + 50) * 4


def test_paper_footprint_reads_the_records_sizes():
    """A record's formula bytes: Eq. 6 at its aligned count (Table 2: its training rows), Eq. 10 from its
    x_t and x_d, Eqs. 7-9 from SplitNN's epochs over the rows it fitted (10 % held out); Local sends nothing."""
    def rec(kind, method, **extra):
        return {"config": {"kind": kind, "dataset": "credit_card", "method": method, "n_aligned": 2500,
                           "val_fraction": 0.1}, **extra}

    assert one_shot.paper_footprint(rec("fig5", "local")) == 0.0
    assert one_shot.paper_footprint(rec("fig5", "apc_vfl_mae")) == footprint_apc_vfl(2500)
    assert one_shot.paper_footprint(rec("fig5", "vfedtrans", x_t=2, x_d=21)) == footprint_vfedtrans(2500, 2, 21)
    assert one_shot.paper_footprint(rec("table2", "apc_vfl_joint", n_train=2000)) == footprint_apc_vfl(2000)
    splitnn = rec("table2", "splitnn", n_train=2000, history={"splitnn": {"epochs": 7}})
    assert one_shot.paper_footprint(splitnn) == footprint_splitnn(7, 1800, 128)


# ----------------------------------------------------------------------------- study module


def test_config_validation():
    """Unknown methods, and aligned counts on local methods, are errors."""
    common = dict(kind="fig5", dataset="breast_cancer", n_active_features=5, seed=0)
    with pytest.raises(ConfigError, match="Invalid fig5 method"):
        study.OneShotRun(method="fedavg", n_aligned=100, **common)
    with pytest.raises(ConfigError, match="n_aligned must be None"):
        study.OneShotRun(method="local", n_aligned=100, **common)
    with pytest.raises(ConfigError, match="unknown OneShotRun keys"):
        study.OneShotRun.from_dict({"kind": "fig5", "typo": 1})
    with pytest.raises(ConfigError, match=r"unknown overrides \['epoch'\]"):
        study.configs("smoke", overrides={"epoch": 1})


def test_profiles_build_their_grids():
    """The paper profile runs every partition, both distillation losses and the few-aligned
    counts; quick covers both datasets' extreme aligned counts over 3 repetitions."""
    paper = study.configs("paper", overrides={"datasets": ["credit_card"]})
    assert {c.n_active_features for c in paper} == {2, 3, 4, 5}
    assert {c.method for c in paper if c.kind == "fig5"} == set(study.FIG5_METHODS)
    assert {750, 500, 250, 100} <= {c.n_aligned for c in paper}
    assert {c.seed for c in paper} == {0, 1, 2, 3, 4}
    quick = study.configs("quick")
    assert {(c.dataset, c.n_aligned) for c in quick if c.method == "apc_vfl_mse"} == {
        ("breast_cancer", n) for n in (250, 100)} | {("credit_card", n) for n in (10000, 2500)}
    assert {c.seed for c in quick} == {0, 1, 2}  # every ordering quick shows has an error bar


def test_paper_profile_runs_end_to_end_on_a_tiny_slice(tmp_path):
    """A paper-profile config of each kind, with epochs and folds shrunk, runs and writes its
    record; a rerun loads it instead of training again."""
    cfgs = [c for c in study.configs("paper", seeds=[0], overrides={"datasets": ["breast_cancer"], "epochs": 1,
                                                                     "folds": 2}) if c.lr == ADAM_LR]
    pick = [c for c in cfgs if c.n_aligned in (None, 100) and c.n_active_features == 5][:3]
    pick += [c for c in cfgs if c.kind == "table2" and c.n_aligned == 100]
    recs = one_shot.run_many(pick, profile="paper", results=tmp_path, progress=False)
    assert all(record_path(c, "paper", tmp_path).exists() for c in pick)
    assert all(0 <= next(iter(r["final"].values())) <= 1 for r in recs)
    again = one_shot.run_many(pick, profile="paper", results=tmp_path, progress=False)
    assert [r["wall_time_s"] for r in again] == [r["wall_time_s"] for r in recs]
    t2 = study.table2(recs, profile="paper")
    view = study.table2_view(t2)
    assert "score" in view.columns and all(d.endswith("(accuracy)") for d in view.index.get_level_values("dataset"))
    # Paired differences: the same partition and repetition, Local repeated at each |D_A|.
    by = {r["config"]["method"]: r["final"]["accuracy"] for r in recs if r["config"]["kind"] == "fig5"}
    diff = study.paired_difference(recs, "vfedtrans", baselines=("local", "ablation"))
    assert diff[["n_aligned", "baseline", "pairs"]].values.tolist() == [[100, "Local", 1], [100, "Ablation", 1]]
    assert diff.loc[0, "mean_diff_points"] == pytest.approx(100 * (by["vfedtrans"] - by["local"]), abs=1e-3)
    assert study.paired_difference(recs, "apc_vfl_mae").empty


def test_a_run_handed_a_spent_deadline_is_not_started(tmp_path, monkeypatch):
    """One-shot runs do not checkpoint; a run whose deadline has passed raises BudgetExhausted
    before any training (the scheduler lists it as paused; its next call computes it) and writes
    nothing."""
    import time

    from vflkit.errors import BudgetExhausted

    monkeypatch.setattr(one_shot, "_train", lambda cfg: pytest.fail("trained past its deadline"))
    cfg = study.configs("smoke", seeds=[0])[0]
    with pytest.raises(BudgetExhausted, match="not started"):
        one_shot.run(cfg, profile="smoke", results=tmp_path, progress=False, deadline=time.time() - 1)
    assert not record_path(cfg, "smoke", tmp_path).exists()


def test_vfedtrans_run_records_its_representation_only_variant(tmp_path):
    """One VFedTrans run scores both feature sets on the same folds; the frames show the
    variant as its own method; records of two learning rates are never mixed in one frame."""
    cfg = study.OneShotRun(kind="fig5", dataset="breast_cancer", method="vfedtrans", n_aligned=100,
                           n_active_features=2, seed=0, epochs=1, folds=2)
    rec = one_shot.run(cfg, profile="quick", results=tmp_path, progress=False)
    var = rec["variants"]["representation_only"]
    assert len(var["per_fold"]["accuracy"]) == 2 and rec["enhanced_dim"] == 2 + var["enhanced_dim"]
    frame = study.runs_frame([rec])
    assert set(frame["method"]) == {"vfedtrans", "vfedtrans_repr"}
    assert frame.set_index("method").loc["vfedtrans_repr", "value"] == var["final"]["accuracy"]
    other = one_shot.run(cfg.replace(lr=study.SENSITIVITY_LR), profile="quick", results=tmp_path, progress=False)
    with pytest.raises(ValueError, match="mix learning rates"):
        study.runs_frame([rec, other])
    assert study.split_lr([rec, other]) == ([rec], [other])


def _quick_run(kind, method, seed, a=5, n_aligned=250):
    """The quick profile's Breast Cancer run of ``kind`` and ``method`` (main learning rate)."""
    local = kind == "fig5" and method in study.LOCAL_METHODS
    return next(c for c in study.configs("quick") if c.kind == kind and c.dataset == "breast_cancer"
                and c.method == method and c.n_active_features == a and c.seed == seed
                and c.n_aligned == (None if local else n_aligned) and c.lr != study.SENSITIVITY_LR)


def _fake(method, seed, value, a=5, n_aligned=250):
    """A minimal Fig. 5 record of the quick profile's Breast Cancer run (what the claims read)."""
    run = _quick_run("fig5", method, seed, a, n_aligned)
    return {"key": run.key, "config": run.to_dict(), "final": {"accuracy": value},
            "comm": {"total": {"bytes": 0, "rounds": 0}}, "history": {}, "x_t": a, "x_d": 30 - a}


@pytest.mark.parametrize("gap,status", [(0.02, claims.AGREE), (-0.02, claims.DISAGREE), (0.0, claims.NOT_TESTABLE)])
def test_fig5_claim_is_judged_on_paired_repetitions(gap, status):
    """APC-VFL above Local by 2 points in every repetition (noise 0.5) agrees, below disagrees,
    equal is within noise; the clauses the records cannot reach are not testable, never errors."""
    noise = [0.0, 0.005, -0.005]
    recs = [_fake("local", s, 0.8) for s in range(3)] + [_fake("apc_vfl_mse", s, 0.8 + gap + noise[s]) for s in range(3)]
    table = claims.evaluate(study.CLAIMS, "quick", claims.Records.of_list("quick", recs))
    assert len(table) == len(study.CLAIMS) and not table["evidence"].str.startswith("check failed").any()
    assert table.loc[0, "status"] == status and "Breast Cancer" in table.loc[0, "evidence"]
    assert table.loc[1, "status"] == claims.NOT_TESTABLE  # no Ablation recorded


def test_table2_claims_with_one_method_recorded_are_not_testable():
    """Table 2 records of SplitNN alone (APC-VFL's pending): the rounds and MB clauses say
    which method is missing instead of failing on an empty column."""
    run = _quick_run("table2", "splitnn", 0)
    rec = {"key": run.key, "config": run.to_dict(), "final": {"accuracy": 0.9},
           "comm": {"total": {"bytes": 10**6, "rounds": 400}}, "n_train": 200, "history": {"splitnn": {"epochs": 50}}}
    recs = claims.Records.of_list("quick", [rec])
    rounds, mb = study._table2_rounds(recs), study._table2_mb(recs)
    assert rounds.status == claims.NOT_TESTABLE and "APC-VFL" in rounds.evidence
    assert mb.status == claims.NOT_TESTABLE and "nan" not in mb.evidence


def test_pending_runs_keep_their_learning_rate_and_an_upper_cpu_price(monkeypatch):
    """A pending run is listed with its lr (the paper's 1e-3 and the sensitivity's 0.01, never
    rounded away) and an upper bound of its CPU hours from the quick profile's recorded times."""
    real = records.load_available
    monkeypatch.setattr(records, "load_available",
                        lambda runs, profile: [] if profile == "paper" else real(runs, profile=profile))
    table = pricing.pending(study.STUDY, "paper")
    assert len(table) and (table["lr"] > 0).all() and set(table["lr"]) >= {1e-3, study.SENSITIVITY_LR}
    assert set(table["needs"]) == {"CPU"} and table["cpu_h"].notna().any() and (table["cpu_h"].dropna() > 0).all()


def test_fig5_helpers_of_no_record_are_empty_with_their_columns():
    """With no Fig. 5 run recorded the paper-profile section's helpers give empty frames (and no
    figure), so its cells run unconditionally."""
    assert study.fig5_frame([]).empty and "value" in study.fig5_frame([])
    assert study.paired_difference([]).empty and "mean_diff_points" in study.paired_difference([])
    assert study.paired_differences([]).empty and study.fig5_means(study.fig5_frame([])).empty
    fig, data = study.fig5_figure([], profile="paper")
    assert fig is None and data.empty
    fig, data = study.fig8_figure(study.fig5_frame([]), profile="quick")
    assert fig is None and data.empty


def test_ledger_words_say_exact_or_the_range():
    """The ledger-against-formula sentence comes from ledger_check's rows: exact where every run
    matches, the range otherwise; Table 2's rows are left to Table 2."""
    check = pd.DataFrame({"kind": ["fig5", "fig5", "table2"], "label": ["APC-VFL (MSE)", "VFedTrans", "SplitNN"],
                          "ledger_over_formula_min": [1.0, 1.001, 0.5], "ledger_over_formula_max": [1.0, 1.111, 2.0]})
    words = study.ledger_words(check)
    assert "APC-VFL (MSE) exactly its formula" in words and "VFedTrans 1.001–1.111 times" in words
    assert "SplitNN" not in words
    assert study.ledger_words(check.iloc[:0]) == "No Fig. 5 run recorded yet."


def test_splitnn_beside_paper_words_table2():
    """Table 2's comparison is counted from the table: where our SplitNN scores above our APC-VFL,
    and each method's distance from the paper's numbers."""
    rows = []
    for n, (s, a, ps, pa) in {2500: (0.49, 0.42, 0.187, 0.314), 10000: (0.43, 0.40, 0.389, 0.412)}.items():
        for method, v, p in (("SplitNN", s, ps), ("APC-VFL", a, pa)):
            rows.append({"table": "2", "dataset": "UCICreditCard", "method": method, "setting": f"aligned={n}",
                         "metric": "f1", "value": v, "paper_value": p, "paper_std": 0.09 if n == 2500 else 0.01})
    words = study.splitnn_beside_paper(pd.DataFrame(rows))
    assert "our SplitNN above our APC-VFL at 2 of 2 aligned counts" in words
    assert "SplitNN +0.041 to +0.303" in words and "the paper's SplitNN at aligned=2500: 0.187 ± 0.090" in words
    assert study.splitnn_beside_paper(pd.DataFrame(rows).iloc[:0]) == "No Table 2 run recorded yet."


def test_a_method_below_local_decides_no_clause() -> None:
    """APC-VFL is gated as every study is: a compared method ending below Local in a cell did not
    learn from the passive party, and the clause is not testable (did not learn), naming it; a
    clause about Local itself is judged as usual."""
    rows = [{"method": m, "n_aligned": 100, "n_active_features": 2, "seed": s, "points": v + 0.1 * s}
            for s in range(5) for m, v in (("local", 84.0), ("ablation", 83.0), ("apc_vfl_mse", 85.0))]
    frame = pd.DataFrame(rows)
    d = study._pair(frame, by="method", a="apc_vfl_mse", b="ablation", value="points",
                    cell=["n_aligned", "n_active_features"])
    v = claims.ordering(d, a="APC-VFL", b="Ablation")
    assert v.status == claims.NOT_TESTABLE and v.evidence.startswith(claims.DID_NOT_LEARN) and "ablation" in v.evidence
    about_local = study._pair(frame, by="method", a="ablation", b="local", value="points",
                              cell=["n_aligned", "n_active_features"])
    assert claims.ordering(about_local, a="Ablation", b="Local").status == claims.DISAGREE
