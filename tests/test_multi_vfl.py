"""Tests for Multi-VFL: server optimizers (vflkit.methods.server_opt), the protocol
(vflkit.methods.multi_vfl), the non-IID scenario builder and the study (vflkit.studies.multi_vfl)."""

import copy
import json
import math

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import torch
from matplotlib.colors import to_hex

from vflkit import claims, records, report
from vflkit.ops import pricing
from vflkit.data import ImageData
from vflkit.errors import ConfigError
from vflkit.methods import multi_vfl
from vflkit.methods.multi_vfl import MultiVFL, MultiVFLConfig, RoundPack
from vflkit.methods.server_opt import ServerOptimizer, demon_beta1, init_state, server_step
from vflkit.partition import label_owner_split
from vflkit.records import record_path
from vflkit.studies import multi_vfl as study
from vflkit.training import multi_owner

# ----------------------------------------------------------------------- server optimizers


def _step(name, variant, t, *, w=1.0, m=0.0, v=0.0, r=1, total_rounds=10):
    opt = ServerOptimizer(name=name, variant=variant, total_rounds=total_rounds)
    state = {"m": {"w": torch.tensor([m], dtype=torch.float64)}, "v": {"w": torch.tensor([v], dtype=torch.float64)}}
    new, state = server_step({"w": torch.tensor([w], dtype=torch.float64)},
                             {"w": torch.tensor([t], dtype=torch.float64)}, state, opt, r)
    return new["w"].item(), state["m"]["w"].item(), state["v"]["w"].item()


def test_fedavg_moves_by_the_mean_update():
    """FedAvg adds the aggregated update with server learning rate 1 (the owners' average model)."""
    assert _step("fedavg", "paper", -0.25, w=1.0) == (0.75, 0.0, 0.0)


def test_fedadam_paper_squares_m_with_bias_correction():
    """Paper FedAdam, round 1 from zero state, t = 0.5 (Table 2 hyperparameters)."""
    w, m, v = _step("fedadam", "paper", 0.5)
    # m = 0.1 * 0.5 = 0.05;  v = 0.01 * 0.05^2 = 2.5e-5;  sqrt(v) = 0.005
    # scale = 1e-3 * sqrt(1 - 0.99) / (1 - 0.9) = 1e-3;  step = 1e-3 * 0.05 / (0.005 + 0.001)
    assert m == pytest.approx(0.05)
    assert v == pytest.approx(2.5e-5)
    assert w == pytest.approx(1.0 + 1e-3 * 0.05 / 0.006)


def test_fedadam_reddi_squares_the_update_without_bias_correction():
    """Reddi et al.'s FedAdam, round 1 from v = tau^2, t = 0.5."""
    w, m, v = _step("fedadam", "reddi", 0.5, v=1e-6)
    # m = 0.05;  v = 0.99 * 1e-6 + 0.01 * 0.25 = 0.00250099;  step = 1e-3 * 0.05 / (sqrt(v) + 1e-3)
    assert m == pytest.approx(0.05)
    assert v == pytest.approx(0.00250099)
    assert w == pytest.approx(1.0 + 1e-3 * 0.05 / (math.sqrt(0.00250099) + 1e-3))


def test_fedyogi_paper_uses_the_sign_rule_on_m():
    """Paper FedYogi, round 2 from m = 0.05, v = 2.5e-5, t = -0.2: v grows where Adam's would shrink."""
    w, m, v = _step("fedyogi", "paper", -0.2, m=0.05, v=2.5e-5, r=2)
    # m = 0.9 * 0.05 + 0.1 * (-0.2) = 0.025;  m^2 = 6.25e-4 > v, so v = 2.5e-5 + 0.01 * 6.25e-4
    assert m == pytest.approx(0.025)
    assert v == pytest.approx(3.125e-5)
    scale = 1e-3 * math.sqrt(1 - 0.99 ** 2) / (1 - 0.9 ** 2)
    assert w == pytest.approx(1.0 + scale * 0.025 / (math.sqrt(3.125e-5) + 1e-3))
    _, _, v_adam = _step("fedadam", "paper", -0.2, m=0.05, v=2.5e-5, r=2)
    assert v_adam == pytest.approx(0.99 * 2.5e-5 + 0.01 * 6.25e-4)  # 3.1e-5: differs from Yogi


def test_fedyogi_reddi_shrinks_v_when_the_update_is_small():
    """Reddi FedYogi: with t^2 < v, v decreases by (1 - beta2) t^2."""
    _, _, v = _step("fedyogi", "reddi", 0.1, m=0.0, v=0.04, r=3)
    assert v == pytest.approx(0.04 - 0.01 * 0.01)


def test_feddemonadam_decays_momentum_and_drops_the_1_minus_beta_factor():
    """FedDemonAdam (paper), round 1 of R = 10: beta1_1 = 0.9*0.9/(0.1+0.81), m = beta1_1 m + t."""
    beta = 0.81 / 0.91
    assert demon_beta1(0.9, 1, 10) == pytest.approx(beta)
    w, m, v = _step("feddemonadam", "paper", 0.5, m=0.2, r=1, total_rounds=10)
    assert m == pytest.approx(beta * 0.2 + 0.5)
    assert v == pytest.approx(0.01 * m ** 2)
    scale = 1e-3 * math.sqrt(0.01) / (1 - beta)
    assert w == pytest.approx(1.0 + scale * m / (math.sqrt(v) + 1e-3))


def test_demon_schedule_runs_from_beta1_to_zero():
    """Demon's beta1 starts at beta1 (r = 0), decreases, and is 0 at r = R."""
    values = [demon_beta1(0.9, r, 5) for r in range(6)]
    assert values[0] == pytest.approx(0.9) and values[-1] == 0.0
    assert all(a > b for a, b in zip(values, values[1:]))


def test_server_step_does_not_modify_its_inputs():
    """server_step is pure: the state and weights passed in are unchanged."""
    weights = {"w": torch.ones(3)}
    opt = ServerOptimizer(name="fedadam")
    state = init_state(weights, opt)
    server_step(weights, {"w": torch.full((3,), 0.5)}, state, opt, 1)
    assert torch.equal(weights["w"], torch.ones(3)) and torch.equal(state["m"]["w"], torch.zeros(3))


def test_server_optimizer_rejects_bad_settings():
    """Unknown names, variants and out-of-range betas fail with the valid choices."""
    with pytest.raises(ConfigError, match="fedavg, fedadam"):
        ServerOptimizer(name="fedsgd")
    with pytest.raises(ConfigError, match="paper, reddi"):
        ServerOptimizer(variant="flower")
    with pytest.raises(ConfigError, match="beta2"):
        ServerOptimizer(beta2=1.0)
    with pytest.raises(ConfigError, match="rounds count from 1"):
        server_step({"w": torch.ones(1)}, {"w": torch.ones(1)}, {}, ServerOptimizer(), 0)


# ------------------------------------------------------------------ non-IID scenario builder

TABLE3 = {  # Multi-VFL Table 3, typed in from the paper: None = labels 0-9
    "1niid": [None, None, None, None, {0, 1}],
    "2niid": [None, None, None, {0, 1}, {2, 3}],
    "3niid": [None, None, {0, 1}, {2, 3}, {4, 5}],
    "4niid": [None, {0, 1}, {2, 3}, {4, 5}, {6, 7}],
}


@pytest.mark.parametrize("scenario", sorted(TABLE3))
def test_scenario_builder_gives_each_owner_its_table3_labels(scenario):
    """Each owner gets 5000 disjoint samples whose labels are exactly Table 3's set."""
    y = torch.randint(0, 10, (60000,), generator=torch.Generator().manual_seed(1))
    owners = label_owner_split(y, scenario=scenario, seed=3)
    assert [len(o) for o in owners] == [5000] * 5
    assert len(torch.unique(torch.cat(owners))) == 25000
    for rows, expected in zip(owners, TABLE3[scenario]):
        assert set(y[rows].tolist()) == (set(range(10)) if expected is None else expected)


# ----------------------------------------------------------------------------- protocol


def _data(n_train=400, n_test=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ImageData("tiny", torch.randint(0, 256, (n_train, 1, 28, 28), dtype=torch.uint8, generator=g),
                     torch.arange(n_train) % 10,
                     torch.randint(0, 256, (n_test, 1, 28, 28), dtype=torch.uint8, generator=g),
                     torch.arange(n_test) % 10, tuple(str(i) for i in range(10)), (0.5,), (0.25,))


def _method(**cfg):
    config = MultiVFLConfig(**{"samples_per_owner": 16, "batch_size": 8, "rounds": 3, "local_lr": 0.05, **cfg})
    m = MultiVFL(config, _data())
    m.setup()
    return m


def _params(party):
    return {f"{k}.{n}": p.detach().clone() for k, mod in party.models.items() for n, p in mod.named_parameters()}


def test_a_round_sends_what_algorithm_1_says():
    """One round: per step, D embeddings up and D gradients down; K updates to and K models from the server."""
    m = _method(scenario="4niid", local_steps=None)  # 16 samples / batch 8 = 2 steps per owner
    m.round(1)
    per_kind = m.channel.ledger.per_kind()
    steps, d, k = 2 * 5, 4, 5
    act_bytes = 8 * 32 * 7 * 28 * 4
    assert per_kind.loc["embedding", "messages"] == steps * d
    assert per_kind.loc["embedding", "bytes"] == steps * d * act_bytes
    assert per_kind.loc["gradient", "bytes"] == steps * d * act_bytes
    n_weights = sum(p.numel() for p in m.server.models["global"].parameters())
    assert per_kind.loc["model_weights", "messages"] == 2 * k
    assert per_kind.loc["model_weights", "bytes"] == 2 * k * 4 * n_weights
    assert m.channel.pending() == 0


def test_server_and_label_owners_agree_and_data_owner_copies_are_averaged():
    """After a round every label owner holds the server's model and every data owner's K copies equal their mean."""
    m = _method(local_steps=1)
    m.round(1)
    server = m.server.models["global"].state_dict()
    for lo in m.label_owners:
        assert all(torch.equal(server[n], t) for n, t in lo.models["top"].state_dict().items())
    for d in m.data_owners:
        base = d.models["global"].state_dict()
        for k in range(1, 6):
            assert all(torch.equal(base[n], t) for n, t in d.models[f"copy_{k}"].state_dict().items())


def test_fedavg_global_model_is_the_mean_of_the_local_models(monkeypatch):
    """With FedAvg the new label-owner model is the average of the five locally trained models."""
    m = _method(local_steps=1)
    local = []
    end_round = RoundPack._end_round

    def spy(self, *args):
        local.append([{n: t.clone() for n, t in lo.models["top"].state_dict().items()} for lo in m.label_owners])
        end_round(self, *args)

    monkeypatch.setattr(RoundPack, "_end_round", spy)
    m.round(1)
    got = m.server.models["global"].state_dict()
    for name, tensor in got.items():
        assert torch.allclose(tensor, torch.stack([s[name] for s in local[0]]).mean(0), atol=1e-6)


def test_data_owners_learn_only_from_gradient_messages(monkeypatch):
    """Zeroing every gradient message leaves the data owners' models unchanged; the label owners still learn."""
    m = _method(local_steps=2)
    before_d = [_params(d) for d in m.data_owners]
    before_s = _params(m.server)
    post = multi_vfl._post

    def zero_gradients(payloads, kind, *args, **kw):
        got = post(payloads, kind, *args, **kw)
        return [torch.zeros_like(g) for g in got] if kind == "gradient" else got

    control = _method(local_steps=2)
    control.round(1)
    assert any(not torch.allclose(before_d[0][n], p) for n, p in _params(control.data_owners[0]).items())
    monkeypatch.setattr(multi_vfl, "_post", zero_gradients)
    m.round(1)
    for d, before in zip(m.data_owners, before_d):
        # averaging five identical copies may round in the last bit; a learning step moves far more
        assert all(torch.allclose(before[n], p, rtol=1e-6, atol=0) for n, p in _params(d).items())
    assert any(not torch.equal(before_s[n], p) for n, p in _params(m.server).items())


def test_parties_hold_only_their_own_data():
    """Data owners hold no labels, label owners no features, the server neither; only label_owner_1 has test labels."""
    m = _method()
    for d in m.data_owners:
        assert not d.holds_labels
        with pytest.raises(PermissionError):
            d.labels("train")
    for lo in m.label_owners:
        with pytest.raises(KeyError):
            lo.features("train")
    assert not m.server.holds_labels
    assert [("test" in lo._labels) for lo in m.label_owners] == [True, False, False, False, False]


def test_evaluation_reaches_label_owner_1_through_the_channel():
    """Evaluation sends D test-activation messages per batch in the eval phase and returns a valid accuracy."""
    m = _method()
    m.round(1)
    out = m.evaluate(batch_size=16)
    assert 0.0 <= out["test_accuracy"] <= 1.0 and math.isfinite(out["test_loss"])
    ev = m.channel.ledger.frame(phase="eval")
    assert set(ev["receiver"]) == {"label_owner_1"} and len(ev) == 4 * 3  # 40 test images in 3 batches


def test_evaluation_in_chunks_gives_the_same_numbers_and_messages():
    """The label owner's model run on chunks of a message gives the same accuracy, the same loss
    to float32's rounding (bit-identical on one CPU, not on an AVX-512 one, whose kernels for 3
    rows and for 16 sum in another order: EVAL_CHUNK) and the same ledger."""
    whole, chunked = _method(local_steps=1), _method(local_steps=1)
    for m in (whole, chunked):
        m.round(1)
    a = whole.evaluate(batch_size=16, eval_chunk=16)
    b = chunked.evaluate(batch_size=16, eval_chunk=3)
    assert a.keys() == b.keys() and a["test_accuracy"] == b["test_accuracy"]
    assert b["test_loss"] == pytest.approx(a["test_loss"], rel=1e-6)
    assert whole.channel.ledger.frame(phase=None).equals(chunked.channel.ledger.frame(phase=None))
    with pytest.raises(ConfigError, match="eval_chunk"):
        whole.evaluate(eval_chunk=0)


def test_rounds_are_deterministic_and_must_run_in_order():
    """The same seed gives the same model; skipping a round is an error."""
    a, b = _method(local_steps=1), _method(local_steps=1)
    a.round(1), b.round(1)
    pa, pb = _params(a.server), _params(b.server)
    assert all(torch.equal(pa[n], pb[n]) for n in pa)
    with pytest.raises(ConfigError, match="in order"):
        a.round(3)


def test_config_rejects_bad_values_and_keys():
    """Bad choices name the valid ones; unknown keys in a dict are errors."""
    with pytest.raises(ConfigError, match="fedavg"):
        MultiVFLConfig(server_optimizer="adam")
    with pytest.raises(ConfigError, match="5 label owners"):
        MultiVFLConfig(scenario="2niid", n_label_owners=3)
    with pytest.raises(ConfigError, match="unknown"):
        MultiVFLConfig.from_dict({"rounds": 2, "epochs": 3})
    assert MultiVFLConfig.from_dict(MultiVFLConfig(rounds=7).to_dict()) == MultiVFLConfig(rounds=7)


# ------------------------------------------------------------------------------- study


def test_profiles_make_the_runs_of_figs_2_and_3():
    """Every profile makes 4 FedAvg scenarios + 3 adaptive optimizers on 4niid per dataset and seed."""
    for profile, n in (("smoke", 7), ("quick", 42), ("paper", 42)):
        cfgs = study.configs(profile)
        assert len(cfgs) == n and len({c.key for c in cfgs}) == n
    paper = study.configs("paper")[0]
    assert (paper.rounds, paper.samples_per_owner, paper.batch_size, paper.local_lr, paper.local_steps) == \
        (500, 5000, 64, 1e-3, None)
    assert (paper.beta1, paper.beta2, paper.server_lr, paper.tau) == (0.9, 0.99, 1e-3, 1e-3)


def test_quick_is_the_paper_protocol_with_fewer_samples_rounds_and_test_images():
    """quick differs from paper only in samples per owner, rounds, test images and how often it
    evaluates: full local epochs at the paper's lr, batch and server optimizers, and at least 3 seeds."""
    quick, paper = study.configs("quick"), study.configs("paper")
    assert len({c.seed for c in quick}) >= 3
    reduced = {"samples_per_owner", "rounds", "n_test", "eval_every"}
    for q, p in zip(quick, paper):
        qd, pd_ = q.to_dict(), p.to_dict()
        assert {k for k in qd if qd[k] != pd_[k]} <= reduced
        assert q.local_steps is None and q.rounds < p.rounds and q.samples_per_owner % q.batch_size == 0


#: A tiny slice of the paper profile (settings and MultiVFLConfig fields alike).
SLICE = {"rounds": 2, "samples_per_owner": 16, "batch_size": 8, "n_test": 20}


def test_overrides_are_settings_or_run_fields_and_unknown_ones_are_listed():
    """overrides change profile settings or set config fields on every run; others are errors."""
    cfgs = study.configs("quick", overrides={"datasets": ["mnist"], "variant": "reddi", "rounds": 3})
    assert {(c.dataset, c.variant, c.rounds) for c in cfgs} == {("mnist", "reddi", 3)}
    with pytest.raises(ConfigError, match=r"unknown overrides \['round', 'scenario'\]"):
        study.configs("quick", overrides={"round": 3, "scenario": "iid"})


def test_paper_profile_runs_end_to_end_and_resumes(tmp_path, monkeypatch):
    """A paper-profile config, shrunk, runs, writes its record and is loaded (not rerun) the second time."""
    monkeypatch.setattr(multi_owner, "dataset", lambda name: _data(n_train=600))
    cfg = study.configs("paper", seeds=[0], overrides=SLICE)[-1]
    assert cfg.server_optimizer == "feddemonadam"
    rec = multi_owner.run(cfg, profile="paper", device="cpu", results=tmp_path, progress=False)
    path = record_path(cfg, "paper", tmp_path)
    assert json.loads(path.read_text())["key"] == cfg.key
    assert [h["round"] for h in rec["history"]] == [1, 2]
    assert all(h["server_step_norm"] > 0 and h["update_norm"] > 0 for h in rec["history"])
    assert rec["comm"]["total"]["bytes"] > 0 and rec["environment"]["device"] == "cpu"
    path.write_text(json.dumps({**rec, "marker": True}))
    assert multi_owner.run(cfg, profile="paper", device="cpu", results=tmp_path, progress=False)["marker"]
    summ = study.summary([rec])
    assert summ.loc[0, "best_accuracy_pct"] >= summ.loc[0, "final_accuracy_pct"]


def test_update_scale_measures_round_one_against_tau(monkeypatch):
    """update_scale's t is the change of the global label-owner model in round 1 with FedAvg,
    and sqrt(v) follows from it by the paper's moments."""
    monkeypatch.setattr(multi_owner, "dataset", lambda name: _data(n_train=600))
    cfg = study.configs("paper", seeds=[0], overrides=SLICE)[-1]
    s = multi_owner.update_scale(cfg, device="cpu")
    assert s["local steps per owner"] == 2 and s["tau"] == cfg.tau
    assert 0 < s["median |t|"] <= s["99th percentile |t|"]
    assert s["median sqrt(v)"] == pytest.approx(0.1 * 0.1 * s["median |t|"], rel=1e-5)


# ------------------------------------------------------------- server step sizes and claims


def test_a_round_records_the_server_step_sizes():
    """FedAvg's server step is the mean update t; paper FedAdam's first step is 0.1 t where
    sqrt(v) << tau, and its sqrt(v) is (1 - beta2)^0.5 (1 - beta1) |t|."""
    avg = _method(local_steps=1, local_lr=1e-3)
    avg.round(1)
    s = avg.server_stats(1)
    assert s["server_step_norm"] == pytest.approx(s["update_norm"], rel=1e-5)
    assert s["distance_from_init"] == pytest.approx(s["server_step_norm"], rel=1e-5)
    assert math.isnan(s["median_sqrt_v"]) and avg.server_stats(2) == {}
    adam = _method(local_steps=1, local_lr=1e-3, server_optimizer="fedadam")
    adam.round(1)
    a = adam.server_stats(1)
    assert a["update_norm"] == pytest.approx(s["update_norm"], rel=1e-4)  # same seed, same local training
    assert a["p99_sqrt_v"] < 0.01 * adam.config.tau
    assert a["server_step_norm"] / a["update_norm"] == pytest.approx(0.1, rel=0.02)


def test_constant_update_steps_follow_the_printed_rule():
    """With sqrt(v) << tau, paper FedAdam's step is sqrt(1 - beta2^r) t (m = (1 - beta1^r) t over
    its bias correction (1 - beta1^r)); FedAvg's is t; FedDemonAdam's sums to the audit's 10.2 t over R = 10."""
    steps = study.constant_update_steps(MultiVFLConfig(rounds=10))
    by = {o: g.sort_values("round")["step_ratio"].to_numpy() for o, g in steps.groupby("optimizer")}
    assert by["FedAvg"] == pytest.approx([1.0] * 10)
    expected = [math.sqrt(1 - 0.99 ** r) for r in range(1, 11)]
    assert by["FedAdam"] == pytest.approx(expected, rel=1e-4)
    assert by["FedYogi"] == pytest.approx(expected, rel=1e-4)
    # round 1: m = t, scale sqrt(0.01) / (1 - beta1_1); round R: beta1_R = 0, m = t, scale sqrt(1 - 0.99^R)
    assert by["FedDemonAdam"][0] == pytest.approx(0.1 / (1 - demon_beta1(0.9, 1, 10)), rel=1e-4)
    assert by["FedDemonAdam"][-1] == pytest.approx(math.sqrt(1 - 0.99 ** 10), rel=1e-4)
    assert by["FedDemonAdam"].sum() == pytest.approx(10.2, abs=0.1)


def _fake_record(dataset, scenario, optimizer, seed, accuracies, *, step_ratio=1.0):
    """A record as the trainer writes it, reduced to what the study reads."""
    # the run of the profile with these rounds (quick: study.QUICK_ROUNDS, paper: 500), so that its key is the study's
    profile = "quick" if len(accuracies) == study.QUICK_ROUNDS else "paper"
    run = next(c for c in study.configs(profile)
               if (c.dataset, c.scenario, c.server_optimizer, c.seed) == (dataset, scenario, optimizer, seed))
    hist = [{"round": r, "train_loss": 1.0, "test_accuracy": a / 100, "update_norm": 1.0,
             "server_step_norm": step_ratio, "distance_from_init": step_ratio * r,
             "median_sqrt_v": float("nan") if optimizer == "fedavg" else 1e-7, "p99_sqrt_v": 1e-6}
            for r, a in enumerate(accuracies, 1)]
    return {"key": run.key, "config": run.to_dict(), "history": hist}


def _fake_study(rounds, *, fedavg_4niid_swings=False, adaptive_gain=5.0):
    """Every run of Figs 2-3 on both datasets and 3 seeds: FedAvg falls by 4 points per non-IID
    owner, each adaptive optimizer is ``adaptive_gain`` points above FedAvg on 4niid."""
    recs = []
    for dataset in ("mnist", "fashion_mnist"):
        for seed in range(3):
            noise = 0.3 * (seed - 1)
            for i, scenario in enumerate(study.SCENARIOS):
                top = 90 - 4 * i + noise
                curve = [top - 40 / r for r in range(1, rounds + 1)]
                if scenario == "4niid" and fedavg_4niid_swings:
                    curve = [c + (5 if r % 2 else -5) for r, c in enumerate(curve)]
                recs.append(_fake_record(dataset, scenario, "fedavg", seed, curve))
            for opt in ("fedadam", "fedyogi", "feddemonadam"):
                curve = [78 + noise + adaptive_gain - 40 / r for r in range(1, rounds + 1)]
                recs.append(_fake_record(dataset, "4niid", opt, seed, curve, step_ratio=2.0))
    return recs


def _verdicts(recs, rounds):
    profile = "quick" if rounds == study.QUICK_ROUNDS else "paper"
    table = claims.evaluate(study.CLAIMS, profile, claims.Records.of_list(profile, recs))
    return dict(zip(table["clause"], table["status"])), table


def test_claims_judge_orderings_and_leave_500_round_clauses_untestable_in_short_runs():
    """Short runs: Fig. 2's falls and Fig. 3's gains are judged over seeds; the clauses that
    need 500 rounds (convergence, the 2-3 points) are not testable, saying so."""
    status, table = _verdicts(_fake_study(study.QUICK_ROUNDS), study.QUICK_ROUNDS)
    assert len(table) == len(study.CLAIMS) == 13
    for clause, st in status.items():
        if "converge even" in clause or "fails to converge" in clause or "2-3 points" in clause:
            assert st == "not testable at this profile"
            assert "500 rounds" in table.set_index("clause").loc[clause, "evidence"]
        elif "greater on FashionMNIST" in clause:
            assert st == "not testable at this profile"  # the same gain on both datasets
        else:
            assert st == "agree", clause
    # FedAvg better than the adaptive optimizers: every Fig. 3 ordering disagrees
    status, _ = _verdicts(_fake_study(study.QUICK_ROUNDS, adaptive_gain=-5.0), study.QUICK_ROUNDS)
    assert status["in 4niid, FedAdam reaches a higher accuracy than FedAvg"] == "disagree"
    assert status["in 4niid, FedDemonAdam converges faster than FedAvg"] == "disagree"


def test_claims_judge_convergence_and_the_gain_at_500_rounds():
    """At 500 rounds: a flat FedAvg 4niid curve contradicts "does not converge", a swinging one
    agrees; a 5-point gain is outside the paper's 2-3, a 2.5-point gain inside."""
    status, _ = _verdicts(_fake_study(500), 500)
    assert status["with FedAvg, 4niid does not converge even after 500 rounds"] == "disagree"
    assert status["on FashionMNIST the adaptive optimizers improve the accuracy by 2-3 points"] == "disagree"
    status, _ = _verdicts(_fake_study(500, adaptive_gain=2.5), 500)
    assert status["on FashionMNIST the adaptive optimizers improve the accuracy by 2-3 points"] == "agree"
    status, _ = _verdicts(_fake_study(500, fedavg_4niid_swings=True), 500)
    assert status["with FedAvg, 4niid does not converge even after 500 rounds"] == "agree"
    assert status["on FashionMNIST (4niid), FedAvg fails to converge"] == "agree"


def test_converged_reads_the_end_of_the_curve():
    """A curve that has flattened converged; one still climbing or swinging did not."""
    def run(acc):
        return pd.DataFrame({"round": range(1, len(acc) + 1), "test_accuracy_pct": acc})

    assert study.converged(run([90.0] * 100))
    assert not study.converged(run([float(r) / 2 for r in range(100)]))
    assert not study.converged(run([90.0 + (3 if r % 2 else -3) for r in range(100)]))
    with pytest.raises(ValueError, match="too few"):
        study.converged(run([1.0, 2.0]))


def test_displacement_sets_each_optimizer_beside_fedavg():
    """displacement: path ratio from the recorded norms, distance and accuracy relative to FedAvg in the same seed."""
    table = study.displacement(_fake_study(8)).set_index(["dataset", "optimizer"])
    assert table.loc[("MNIST", "FedAvg"), "path_ratio"] == pytest.approx(1.0)
    assert table.loc[("MNIST", "FedAdam"), "distance_vs_fedavg"] == pytest.approx(2.0)
    assert table.loc[("MNIST", "FedAdam"), "accuracy_minus_fedavg"] == pytest.approx(5.0)
    assert table.loc[("MNIST", "FedAvg"), "predicted_path_ratio"] == pytest.approx(1.0)
    assert study.same_order(table.reset_index(), "distance_vs_fedavg", "accuracy_minus_fedavg").all()
    sentences = study.explain(table.reset_index())
    assert len(sentences) == 6 and "MNIST, FedAdam" in sentences[0] and "+5.0" in sentences[0]


def test_explain_with_one_seed_prints_no_nan():
    """With one seed there is no sd: the sentence gives the mean alone, never "nan ± nan"."""
    table = study.displacement(_fake_study(8)).reset_index()
    table["distance_vs_fedavg_sd"] = float("nan")
    table["accuracy_minus_fedavg_sd"] = float("nan")
    sentences = study.explain(table)
    assert sentences and not any("nan" in s for s in sentences)
    assert "+5.0 points" in sentences[0]


def test_pending_lists_unrecorded_paper_runs_with_their_cost(monkeypatch):
    """Every paper run without a record is pending, priced for a GPU from its counted rounds; the
    study's own rule (for a run the operations wing cannot price) is rounds x the measured
    seconds per round on this CPU."""
    monkeypatch.setattr(records, "load_available", lambda runs, profile: [])
    table = pricing.pending(study.STUDY, "paper")
    assert len(table) == 42 and set(table["rounds"]) == {500}
    assert set(table["needs"]) == {"GPU"} and (table["h100_min"] > 0).all()
    own = study.pending_cost(study.STUDY.pending_runs("paper"))
    assert own["cpu_h"].iloc[0] == pytest.approx(500 * study.ROUND_CPU_SECONDS["paper"] / 3600)


@pytest.mark.parametrize("gains, status", [
    ({"FedAdam": [2.4, 2.6, 2.5], "FedYogi": [2.2, 2.9, 2.6], "FedDemonAdam": [2.0, 3.1, 2.5]}, "agree"),
    ({"FedAdam": [2.4, 2.6, 2.5], "FedYogi": [2.2, 2.9, 2.6], "FedDemonAdam": [6.0, 6.2, 6.1]}, "disagree"),
    ({"FedAdam": [2.4, 2.6, 2.5], "FedYogi": [2.2, 2.9, 2.6], "FedDemonAdam": [-1.0, 4.0, 2.5]},
     "not testable at this profile"),  # consistent with 2-3 points, but the band also allows no gain
])
def test_fashion_mnist_gain_clause_reads_the_noise_band(monkeypatch, gains, status) -> None:
    """2-3 points: agree when each optimizer's band overlaps [2, 3] and excludes no gain, disagree
    when one band lies wholly outside, else not testable (the paper's 500 rounds assumed)."""
    rows = [{"dataset": "FashionMNIST", "scenario": "4niid", "optimizer": "FedAvg", "seed": s,
             "final_accuracy_pct": 80.0} for s in range(3)]
    rows += [{"dataset": "FashionMNIST", "scenario": "4niid", "optimizer": opt, "seed": s,
              "final_accuracy_pct": 80.0 + g} for opt, gs in gains.items() for s, g in enumerate(gs)]
    monkeypatch.setattr(study, "per_run", lambda records: pd.DataFrame(rows))
    v = study._fmnist_gain_check(claims.Records("paper", {}))
    assert v.status == status, v.evidence


def test_a_diverged_run_is_counted_not_averaged_in_the_summary(tmp_path):
    """A Multi-VFL run that diverged (its record's ``diverged``) is counted in the summary's and
    the written table's ``diverged`` and kept out of the means; with none diverged the committed
    table is unchanged (no such column)."""
    _, recs = study.STUDY.recorded("quick")
    clean = study.summary(recs)
    assert (clean["diverged"] == 0).all()
    path = report.write_table(study.long_table(clean, "quick"), "multi_vfl", "quick", name="final_accuracy",
                              root=tmp_path)
    assert "diverged" not in pd.read_csv(path).columns
    broken = copy.deepcopy(recs)
    broken[0]["diverged"] = {"round": 2, "message": "the loss is nan: training diverged"}
    cfg = broken[0]["config"]
    summ = study.summary(broken)
    cell = summ[(summ["dataset"] == study.DATASET_LABELS[cfg["dataset"]]) & (summ["scenario"] == cfg["scenario"])
                & (summ["optimizer"] == study.OPTIMIZER_LABELS[cfg["server_optimizer"]])].iloc[0]
    before = clean.loc[cell.name]
    assert (cell["diverged"], cell["n_runs"]) == (1, before["n_runs"] - 1)
    path = report.write_table(study.long_table(summ, "quick"), "multi_vfl", "quick", name="final_accuracy",
                              root=tmp_path)
    assert pd.read_csv(path)["diverged"].max() == 1


def test_learning_sentence_counts_cells_near_chance():
    """Whether the profile learns is counted from the summary: cells within claims.CHANCE_MARGIN of
    chance decide no claim, and the sentence says how many there are."""
    summ = pd.DataFrame({"final_accuracy_pct": [9.4, 12.0, 15.1]})
    assert "2 end near chance" in study.learning(summ) and "9.4–15.1 %" in study.learning(summ)
    assert "every one ends near chance" in study.learning(summ.iloc[:2])
    assert "none ends near chance" in study.learning(pd.DataFrame({"final_accuracy_pct": [80.0]}))
    assert study.learning(summ.iloc[:0]) == "No run recorded yet."


@pytest.mark.parametrize("cfg", [{"samples_per_owner": 20, "batch_size": 8},  # a last batch of 4
                                 {"samples_per_owner": 20, "batch_size": 8, "local_epochs": 2},
                                 {"samples_per_owner": 20, "batch_size": 8, "local_epochs": 2, "local_steps": 4},
                                 {"samples_per_owner": 16, "batch_size": 8, "local_steps": 5}])
def test_a_label_owners_batches_are_its_round_order_cut_in_batches(cfg):
    """round_order: each local epoch a permutation of the label owner's ids drawn from the (seed,
    round, owner) generator, cut in batches (the last one short), the first local_steps kept,
    end to end with their batch sizes."""
    m = _method(**cfg)
    c = m.config
    ids = m.label_owners[1].ids["train"]
    g = torch.Generator().manual_seed(c.seed * 1_000_003 + 2 * 101 + 1)
    want = []
    for _ in range(c.local_epochs):
        order = ids[torch.randperm(len(ids), generator=g)]
        want += [order[b:b + c.batch_size] for b in range(0, len(ids), c.batch_size)]
    want = want[:c.local_steps]
    order, sizes = m.round_order(1, 2)
    assert sizes == [len(b) for b in want] and order.tolist() == torch.cat(want).tolist()


def test_figures_have_one_legend_listing_every_curve_of_any_panel():
    """Figs 2-3 carry one legend, beside the last panel, listing every curve drawn in any panel
    (a panel whose runs are not all recorded yet included), in the same colour in every panel."""
    recs = [r for r in _fake_study(study.QUICK_ROUNDS)
            if not (r["config"]["dataset"] == "fashion_mnist" and r["config"]["server_optimizer"] == "fedyogi")]
    fig, _ = study.figure3(recs)
    try:
        mnist, fmnist = fig.axes
        assert mnist.get_legend() is None
        assert [t.get_text() for t in fmnist.get_legend().get_texts()] == ["FedAvg", "FedAdam", "FedYogi", "FedDemonAdam"]
        # each optimizer keeps its colour: FedYogi's (absent from FMNIST) is on no FMNIST curve,
        # FedDemonAdam's is on a curve of both panels
        legend = {t.get_text(): to_hex(h.get_color()) for t, h in
                  zip(fmnist.get_legend().get_texts(), fmnist.get_legend().legend_handles)}
        drawn = {ax: {to_hex(line.get_color()) for line in ax.get_lines() if len(line.get_xdata()) > 1}
                 for ax in fig.axes}
        assert legend["FedYogi"] not in drawn[fmnist] and legend["FedYogi"] in drawn[mnist]
        assert legend["FedDemonAdam"] in drawn[fmnist] and legend["FedDemonAdam"] in drawn[mnist]
    finally:
        plt.close(fig)
