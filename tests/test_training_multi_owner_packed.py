"""Tests for vflkit.training.multi_owner_packed: a packed Multi-VFL round, of one run or several,
equals MultiVFL.round (float64, to a relative tolerance; the ledger row for row)."""

import math

import pytest
import torch

from vflkit.data import ImageData
from vflkit.errors import ConfigError, DivergenceError
from vflkit.methods.multi_vfl import MultiVFL, MultiVFLConfig
from vflkit.records import record_path
from vflkit.training.multi_owner_packed import packed_round

#: Relative tolerance of the packed round against the unpacked one in float64 (vmapped kernels
#: may reduce in another order).
REL = 1e-9


def _method(**cfg):
    g = torch.Generator().manual_seed(0)
    images = ImageData("tiny", torch.randint(0, 256, (400, 1, 28, 28), dtype=torch.uint8, generator=g),
                       torch.arange(400) % 10, torch.randint(0, 256, (40, 1, 28, 28), dtype=torch.uint8, generator=g),
                       torch.arange(40) % 10, tuple(str(i) for i in range(10)), (0.5,), (0.25,))
    config = MultiVFLConfig(**{"samples_per_owner": 16, "batch_size": 8, "rounds": 2, "local_lr": 0.05, **cfg})
    m = MultiVFL(config, images)
    m.setup()
    return m


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)


def _assert_same_run(alone: MultiVFL, packed: MultiVFL) -> None:
    """Every party's models and the evaluation to REL; the ledger row for row; no message left."""
    for p_alone, p_packed in zip(alone.parties, packed.parties):
        for name, model in p_alone.models.items():
            for (n, a), b in zip(model.state_dict().items(), p_packed.models[name].state_dict().values()):
                assert torch.allclose(a, b, rtol=REL, atol=1e-12), (p_alone.name, name, n)
    e_want, e_got = alone.evaluate(), packed.evaluate()
    assert all(_close(e_want[k], e_got[k]) for k in e_want)
    assert alone.channel.ledger.frame(phase=None).equals(packed.channel.ledger.frame(phase=None))
    assert packed.channel.pending() == 0


def _assert_same_round(alone: MultiVFL, want: dict, packed: MultiVFL, got: dict, r: int) -> None:
    """The round's losses and the server's statistics to REL."""
    assert want.keys() == got.keys() and all(_close(want[k], got[k]) for k in want)
    s_want, s_got = alone.server_stats(r), packed.server_stats(r)
    assert s_want.keys() == s_got.keys() and all(_close(s_want[k], s_got[k]) for k in s_want)


@pytest.mark.parametrize("stacking", ["grouped", "vmap", "loop"])
@pytest.mark.parametrize("cfg", [{"scenario": "4niid", "server_optimizer": "fedavg"},
                                 {"scenario": "iid", "server_optimizer": "fedadam", "local_optimizer": "adam"}])
def test_packed_round_equals_the_unpacked_round(float64, cfg, stacking):
    """Two rounds: losses, server statistics, every model and the evaluation to 1e-9; the ledger row for row."""
    alone, packed = _method(**cfg), _method(**cfg)
    for r in (1, 2):
        _assert_same_round(alone, alone.round(r), packed, packed_round(packed, r, stacking=stacking), r)
    _assert_same_run(alone, packed)


# ~30 s each on a loaded 2-core CPU; the single-run test covers every stacking in the fast tier
@pytest.mark.parametrize("stacking", ["grouped", "vmap", pytest.param("loop", marks=pytest.mark.slow)])
def test_a_pack_of_runs_equals_each_run_alone(float64, stacking):
    """Three runs (other seeds, scenarios, server optimizers; one batch per label owner) packed: each as if alone."""
    cfgs = [{"scenario": "4niid", "server_optimizer": "fedavg", "seed": 0, "local_steps": 1},
            {"scenario": "1niid", "server_optimizer": "fedadam", "seed": 1, "local_steps": 1},
            {"scenario": "4niid", "server_optimizer": "feddemonadam", "seed": 2, "local_steps": 1}]
    alone, packed = [_method(**c) for c in cfgs], [_method(**c) for c in cfgs]
    for r in (1, 2):
        got = packed_round(packed, r, stacking=stacking)
        for a, want, p, g in zip(alone, [a.round(r) for a in alone], packed, got):
            _assert_same_round(a, want, p, g, r)
    for a, p in zip(alone, packed):
        _assert_same_run(a, p)


def test_runs_that_differ_in_a_step_shape_do_not_pack():
    """Runs with another batch size or local lr are refused, naming what differs."""
    with pytest.raises(ConfigError, match="batch_size"):
        packed_round([_method(), _method(samples_per_owner=32, batch_size=16)], 1)
    with pytest.raises(ConfigError, match="local_lr"):
        packed_round([_method(), _method(local_lr=0.01)], 1)


def test_packed_round_runs_rounds_in_order():
    """Skipping a round is an error, as for MultiVFL.round."""
    m = _method()
    with pytest.raises(ConfigError, match="in order"):
        packed_round(m, 2)


def _tiny_data():
    g = torch.Generator().manual_seed(0)
    return ImageData("tiny", torch.randint(0, 256, (400, 1, 28, 28), dtype=torch.uint8, generator=g),
                     torch.arange(400) % 10, torch.randint(0, 256, (20, 1, 28, 28), dtype=torch.uint8, generator=g),
                     torch.arange(20) % 10, tuple(str(i) for i in range(10)), (0.5,), (0.25,))


def _pack_configs(**changes):
    base = dict(dataset="mnist", samples_per_owner=16, batch_size=8, local_steps=1, rounds=3, local_lr=0.05,
                n_test=20, eval_every=2)
    cfgs = [{"scenario": "4niid", "server_optimizer": "fedadam", "seed": 0},
            {"scenario": "1niid", "server_optimizer": "fedavg", "seed": 1}]
    return [MultiVFLConfig(**{**base, **c, **changes}) for c in cfgs]


def test_the_packed_trainer_gives_each_run_its_unpacked_results(float64, monkeypatch):
    """train_pack (rounds of packed_round, each run's rows, evaluation and ledger its own) gives
    every run what multi_owner.train gives it alone: history to 1e-9, traffic exactly; the
    scheduler's pack key groups them, and a run with other rounds packs apart."""
    from vflkit.training import multi_owner, split as split_packed
    from vflkit.training.multi_owner_packed import train_pack

    monkeypatch.setattr(multi_owner, "dataset", lambda name: _tiny_data())
    cfgs = _pack_configs()
    got = train_pack(cfgs, device="cpu")
    for cfg, g in zip(cfgs, got):
        want = multi_owner.train(cfg, device=torch.device("cpu"), progress=False)
        assert [r["round"] for r in g["history"]] == [1, 2, 3]
        for gr, wr in zip(g["history"], want["history"]):
            assert gr.keys() == wr.keys() and all(_close(gr[k], wr[k]) for k in gr if k != "elapsed_s")
        assert g["comm"] == want["comm"] and g["diverged"] is None
        assert g["execution"] == {"packed": 2, "pack": [c.key for c in cfgs]}
    keys = {split_packed.pack_key(c) for c in cfgs}
    assert len(keys) == 1 and split_packed.pack_key(cfgs[0].replace(rounds=4)) not in keys
    assert split_packed.packable_config("multi_owner", cfgs[0].to_dict()) == cfgs[0]


def test_a_diverging_pack_records_each_run_as_alone(monkeypatch, tmp_path):
    """A pack whose loss turns non-finite is trained again run by run: each record is the
    unpacked trainer's (with on_divergence="record": where it diverged), none names a pack."""
    from vflkit.training import multi_owner
    from vflkit.training.multi_owner_packed import run_pack

    monkeypatch.setattr(multi_owner, "dataset", lambda name: _tiny_data())
    cfgs = _pack_configs(local_lr=1e30)
    recs = run_pack(cfgs, profile="smoke", device="cpu", results=tmp_path, on_divergence="record")
    assert all(r["diverged"] is not None and "execution" not in r for r in recs)
    # a pack that trains writes each run's record under its own key, naming the pack
    fine = _pack_configs()
    recs = run_pack(fine, profile="smoke", device="cpu", results=tmp_path)
    assert [r["config"] for r in recs] == [c.to_dict() for c in fine]
    assert all(r["execution"] == {"packed": 2, "pack": [c.key for c in fine]} and r["diverged"] is None for r in recs)
    assert all(record_path(c, "smoke", tmp_path).exists() for c in fine)
    with pytest.raises(DivergenceError):
        run_pack(_pack_configs(local_lr=1e31), profile="smoke", device="cpu", results=tmp_path)


def test_a_round_pack_held_across_rounds_keeps_every_run_as_alone(float64):
    """A RoundPack held for two rounds (as the packed trainer holds it; two server rules, one of
    them of two runs apart in the pack): each round's losses and server statistics, the runs' models (views of the stack while it
    is held: current with no copy), the packed evaluation and the ledgers equal each run alone;
    released, every run's models own their storage again."""
    from vflkit.training.multi_owner_packed import RoundPack

    cfgs = [{"scenario": "4niid", "server_optimizer": "fedyogi", "seed": 0, "local_steps": 1},
            {"scenario": "1niid", "server_optimizer": "fedavg", "seed": 1, "local_steps": 1},
            {"scenario": "2niid", "server_optimizer": "fedyogi", "seed": 2, "local_steps": 1}]
    alone, packed = [_method(**c) for c in cfgs], [_method(**c) for c in cfgs]
    pack = RoundPack(packed, stacking="vmap")
    for r in (1, 2):
        got = pack.round(r)
        for a, want, p, g in zip(alone, [a.round(r) for a in alone], packed, got):
            _assert_same_round(a, want, p, g, r)
    top = packed[2].label_owners[0].models["top"][0].weight
    assert top.untyped_storage().data_ptr() == pack.top.params["0.weight"].untyped_storage().data_ptr()
    for a, e in zip(alone, pack.evaluate(batch_size=16, chunk=5)):  # messages of 16, the last of 8
        want = a.evaluate(batch_size=16)
        assert want.keys() == e.keys() and all(_close(want[k], e[k]) for k in want)
    pack.release()
    with pytest.raises(ConfigError, match="released"):
        pack.round(3)
    for p in packed:
        for party in p.parties:
            for model in party.models.values():
                assert all(t.untyped_storage().nbytes() == t.numel() * t.element_size() for t in model.parameters())
    for a, p in zip(alone, packed):
        # the packed evaluation's messages are in the ledger as the unpacked one's (16 images each)
        assert a.channel.ledger.frame(phase="eval").equals(p.channel.ledger.frame(phase="eval"))
        _assert_same_run(a, p)


def test_after_a_pack_diverged_a_run_finished_alone_is_kept_when_the_deadline_stops_the_next(monkeypatch, tmp_path):
    """A diverged pack's runs are trained alone, each recorded as it finishes: the deadline
    stopping the second (simulated) loses nothing of the first, and a rerun trains only the
    second (the first was retrained in every budget window before)."""
    import time

    from vflkit.errors import BudgetExhausted
    from vflkit.training import multi_owner
    from vflkit.training.multi_owner_packed import run_pack

    monkeypatch.setattr(multi_owner, "dataset", lambda name: _tiny_data())
    cfgs = _pack_configs(local_lr=1e30)
    real, trained = multi_owner.train, []

    def second_stopped(config, **kwargs):
        trained.append(config)
        if config == cfgs[1] and len(trained) == 2:
            raise BudgetExhausted("stopped at the budget")
        return real(config, **kwargs)

    monkeypatch.setattr(multi_owner, "train", second_stopped)
    with pytest.raises(BudgetExhausted):
        run_pack(cfgs, profile="smoke", device="cpu", results=tmp_path, on_divergence="record",
                 deadline=time.time() + 3600)
    assert record_path(cfgs[0], "smoke", tmp_path).exists() and not record_path(cfgs[1], "smoke", tmp_path).exists()
    recs = run_pack(cfgs, profile="smoke", device="cpu", results=tmp_path, on_divergence="record")
    assert trained == [cfgs[0], cfgs[1], cfgs[1]] and all(r["diverged"] is not None for r in recs)
