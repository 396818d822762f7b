"""Tests for Multi-VFL: server optimizers (vflkit.methods.server_opt), the protocol
(vflkit.methods.multi_vfl), the non-IID scenario builder and the study (vflkit.studies.multi_vfl)."""

import json
import math

import pytest
import torch

from vflkit.comm import Channel
from vflkit.data import ImageData
from vflkit.errors import ConfigError
from vflkit.methods.multi_vfl import MultiVFL, MultiVFLConfig
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


def test_fedavg_global_model_is_the_mean_of_the_local_models():
    """With FedAvg the new label-owner model is the average of the five locally trained models."""
    m = _method(local_steps=1)
    local = []
    original = m._aggregate

    def spy(r, step):
        local.append([{n: t.clone() for n, t in lo.models["top"].state_dict().items()} for lo in m.label_owners])
        original(r, step)

    m._aggregate = spy
    m.round(1)
    got = m.server.models["global"].state_dict()
    for name, tensor in got.items():
        assert torch.allclose(tensor, torch.stack([s[name] for s in local[0]]).mean(0), atol=1e-6)


def test_data_owners_learn_only_from_gradient_messages():
    """Zeroing every gradient message leaves the data owners' models unchanged; the label owners still learn."""
    m = _method(local_steps=2)
    before_d = [_params(d) for d in m.data_owners]
    before_s = _params(m.server)
    send = m.channel.send

    def zero_gradients(sender, receiver, kind, payload, **kw):
        if kind == "gradient":
            payload = torch.zeros_like(payload)
        send(sender, receiver, kind, payload, **kw)

    control = _method(local_steps=2)
    control.round(1)
    assert any(not torch.allclose(before_d[0][n], p) for n, p in _params(control.data_owners[0]).items())
    m.channel.send = zero_gradients
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
    for profile, n in (("smoke", 7), ("quick", 14), ("paper", 42)):
        cfgs = study.configs(profile)
        assert len(cfgs) == n and len({c.key for c in cfgs}) == n
    paper = study.configs("paper")[0]
    assert (paper.rounds, paper.samples_per_owner, paper.batch_size, paper.local_lr, paper.local_steps) == \
        (500, 5000, 64, 1e-3, None)
    assert (paper.beta1, paper.beta2, paper.server_lr, paper.tau) == (0.9, 0.99, 1e-3, 1e-3)


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
    s = study.update_scale(cfg, device="cpu")
    assert s["local steps per owner"] == 2 and s["tau"] == cfg.tau
    assert 0 < s["median |t|"] <= s["99th percentile |t|"]
    assert s["median sqrt(v)"] == pytest.approx(0.1 * 0.1 * s["median |t|"], rel=1e-5)
