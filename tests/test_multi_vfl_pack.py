"""Tests for Multi-VFL's one round over K runs' chains (vflkit.methods.multi_vfl.RoundPack; a
run alone is a pack of one) and the one loop over it (vflkit.training.multi_owner.train): a
pack of K runs equals the K runs alone (float64, to a relative tolerance; the ledger row for
row), stacked or looped; checkpoints, deadlines and divergence of a pack."""

import math
import time

import pytest
import torch
import torch.nn.functional as F

from vflkit.data import ImageData
from vflkit.errors import BudgetExhausted, ConfigError, DivergenceError
from vflkit.methods.multi_vfl import EVAL_CHUNK, MultiVFL, MultiVFLConfig, RoundPack, local_optimizer
from vflkit.methods.server_opt import server_step
from vflkit.records import checkpoint_path, record_path
from vflkit.training import multi_owner
from vflkit.training.checkpoint import saved_progress

#: Relative tolerance of a pack against its runs alone in float64 (stacked kernels may reduce
#: in another order).
REL = 1e-9
CPU = torch.device("cpu")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: two threads spin-waiting on a shared CPU make these runs many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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
    """Every party's models to REL; the ledger row for row; no message left."""
    for p_alone, p_packed in zip(alone.parties, packed.parties):
        for name, model in p_alone.models.items():
            for (n, a), b in zip(model.state_dict().items(), p_packed.models[name].state_dict().values()):
                assert torch.allclose(a, b, rtol=REL, atol=1e-12), (p_alone.name, name, n)
    assert alone.channel.ledger.frame(phase=None).equals(packed.channel.ledger.frame(phase=None))
    assert packed.channel.pending() == 0


def _assert_same_round(alone: MultiVFL, want: dict, packed: MultiVFL, got: dict, r: int) -> None:
    """The round's losses and the server's statistics to REL."""
    assert want.keys() == got.keys() and all(_close(want[k], got[k]) for k in want)
    s_want, s_got = alone.server_stats(r), packed.server_stats(r)
    assert s_want.keys() == s_got.keys() and all(_close(s_want[k], s_got[k]) for k in s_want)


def _plain_round(m: MultiVFL, r: int) -> dict[str, float]:
    """Round ``r`` of ``m`` (never packed) as Algorithm 1 reads: label owner after label owner,
    batch after batch, each party's own modules and optimizers."""
    c, server = m.config, m.server
    start = {n: t.clone() for n, t in server.models["global"].state_dict().items()}
    losses, updates = {}, []
    for k, lo in enumerate(m.label_owners):
        top, copies = lo.models["top"], [d.models[f"copy_{k + 1}"] for d in m.data_owners]
        opts = [local_optimizer(c, list(x.parameters())) for x in (top, *copies)]
        order, sizes = m.round_order(k, r)
        total = 0.0
        for ids in order.split(sizes):
            for o in opts:
                o.zero_grad(set_to_none=True)
            acts = [x(d.features("train", ids=ids)) for x, d in zip(copies, m.data_owners)]
            parts = [a.detach().clone().requires_grad_(True) for a in acts]
            loss = F.cross_entropy(top(torch.cat(parts, dim=2)), lo.labels("train", ids=ids))
            loss.backward()
            opts[0].step()
            for a, p, o in zip(acts, parts, opts[1:]):
                a.backward(p.grad.clone())
                o.step()
            total += loss.item()
        losses[lo.name] = total / len(sizes)
        updates.append({n: t - start[n] for n, t in top.state_dict().items()})
    mean = {n: torch.stack([u[n] for u in updates]).mean(0) for n in start}
    new, server.state["opt"] = server_step(start, mean, server.state["opt"], m.server_optimizer, r)
    for model in (server.models["global"], *(lo.models["top"] for lo in m.label_owners)):
        model.load_state_dict(new)
    for d in m.data_owners:
        states = [x.state_dict() for name, x in d.models.items() if name.startswith("copy_")]
        avg = {n: torch.stack([s[n] for s in states]).mean(0) for n in states[0]}
        for model in d.models.values():
            model.load_state_dict(avg)
    return losses


def _plain_evaluation(m: MultiVFL, batch_size: int = 16) -> dict[str, float]:
    lo, n, correct, loss_sum = m.evaluator, m.evaluator.n_samples("test"), 0.0, 0.0
    with torch.no_grad():
        for s in range(0, n, batch_size):
            rows = torch.arange(s, min(s + batch_size, n))
            parts = [d.models["global"](d.features("test", rows=rows)) for d in m.data_owners]
            logits = torch.cat([lo.models["top"](torch.cat([p[i:i + EVAL_CHUNK] for p in parts], dim=2))
                                for i in range(0, len(rows), EVAL_CHUNK)])
            y = lo.labels("test", rows=rows)
            correct += (logits.argmax(dim=1) == y).float().mean().item() * len(rows)
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
    return {"test_accuracy": correct / n, "test_loss": loss_sum / n}


@pytest.mark.parametrize("cfg", [{"scenario": "4niid", "server_optimizer": "fedavg", "samples_per_owner": 20},
                                 {"scenario": "iid", "server_optimizer": "fedadam", "local_optimizer": "adam"}])
def test_a_run_alone_computes_what_the_protocol_computes_to_the_bit(cfg):
    """A run alone (a pack of one, looped: MultiVFL.round) in float32 gives exactly, bit for
    bit, what the protocol written plainly gives: each round's losses, every model, the
    evaluation. The committed records were made by such a plain round."""
    plain, alone = _method(**cfg), _method(**cfg)
    for r in (1, 2):
        assert _plain_round(plain, r) == alone.round(r)
    for p_plain, p_alone in zip(plain.parties, alone.parties):
        for name, model in p_plain.models.items():
            for a, b in zip(model.state_dict().values(), p_alone.models[name].state_dict().values()):
                assert torch.equal(a, b), (p_plain.name, name)
    assert _plain_evaluation(plain) == alone.evaluate(batch_size=16)


@pytest.mark.parametrize("stacking", ["grouped", "vmap"])
@pytest.mark.parametrize("cfg", [{"scenario": "4niid", "server_optimizer": "fedavg"},
                                 {"scenario": "iid", "server_optimizer": "fedadam", "local_optimizer": "adam"}])
def test_a_stacked_run_equals_the_looped_run(float64, cfg, stacking):
    """A run alone stacked (an accelerator's way) and looped (the CPU's, MultiVFL.round): two
    rounds' losses, server statistics, every model and the evaluation to 1e-9; the ledger row for row."""
    alone, stacked = _method(**cfg), _method(**cfg)
    pack = RoundPack([stacked], stacking=stacking)
    assert not pack.looped
    for r in (1, 2):
        _assert_same_round(alone, alone.round(r), stacked, pack.round(r)[0], r)
    e_want, e_got = alone.evaluate(), pack.evaluate()[0]
    assert e_want.keys() == e_got.keys() and all(_close(e_want[k], e_got[k]) for k in e_want)
    _assert_same_run(alone, stacked)


# the loop packs slowest on a loaded 2-core CPU; the single-run test above covers the stacked kinds
@pytest.mark.parametrize("stacking", ["grouped", "vmap", "loop"])
def test_a_pack_of_runs_equals_each_run_alone(float64, stacking):
    """Three runs (other seeds, scenarios, server optimizers, two of one rule apart in the
    pack; one batch per label owner) packed for two rounds, held as the trainer holds them: each
    round's losses and server statistics, the runs' models (views of the stack: current with no
    copy), the packed evaluation and the ledgers equal each run alone."""
    cfgs = [{"scenario": "4niid", "server_optimizer": "fedyogi", "seed": 0, "local_steps": 1},
            {"scenario": "1niid", "server_optimizer": "fedavg", "seed": 1, "local_steps": 1},
            {"scenario": "2niid", "server_optimizer": "fedyogi", "seed": 2, "local_steps": 1}]
    alone, packed = [_method(**c) for c in cfgs], [_method(**c) for c in cfgs]
    pack = RoundPack(packed, stacking=stacking)
    for r in (1, 2):
        got = pack.round(r)
        for a, want, p, g in zip(alone, [a.round(r) for a in alone], packed, got):
            _assert_same_round(a, want, p, g, r)
    top = packed[2].label_owners[0].models["top"][0].weight
    assert top.untyped_storage().data_ptr() == pack.top.params["0.weight"].untyped_storage().data_ptr()
    for a, e in zip(alone, pack.evaluate(batch_size=16, chunk=5)):  # messages of 16, the last of 8
        want = a.evaluate(batch_size=16)
        assert want.keys() == e.keys() and all(_close(want[k], e[k]) for k in want)
    for a, p in zip(alone, packed):
        _assert_same_run(a, p)


def test_a_run_is_held_by_one_pack_at_a_time():
    """A run trained alone after its pack's rounds leaves that pack, which then refuses to go on;
    the run's models are views of its own pack of one; a run whose server moments were
    replaced under its pack is refused."""
    runs = [_method(seed=0, local_steps=1), _method(seed=1, local_steps=1)]
    pack = RoundPack(runs)
    pack.round(1)
    runs[0].round(2)
    assert runs[0].pack is not pack and runs[0].pack.n_runs == 1 and runs[1].pack is pack
    w = runs[0].label_owners[0].models["top"][0].weight
    assert w.untyped_storage().data_ptr() == runs[0].pack.top.params["0.weight"].untyped_storage().data_ptr()
    with pytest.raises(ConfigError, match="taken by another pack"):
        pack.round(2)
    # the server's moments are views of the stack too: replacing them (a late restore) is refused
    alone = RoundPack([runs[1]])
    runs[1].server.state["opt"] = {w: dict(ms) for w, ms in runs[1].server.state["opt"].items()}
    with pytest.raises(ConfigError, match="restore checkpoints before"):
        alone.round(2)


def test_runs_that_differ_in_a_step_shape_do_not_pack():
    """Runs with another batch size or local lr are refused, naming what differs; rounds run in order."""
    with pytest.raises(ConfigError, match="batch_size"):
        RoundPack([_method(), _method(samples_per_owner=32, batch_size=16)])
    with pytest.raises(ConfigError, match="local_lr"):
        RoundPack([_method(), _method(local_lr=0.01)])
    with pytest.raises(ConfigError, match="in order"):
        _method().round(2)


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


def _same(got, want):
    assert [r["round"] for r in got["history"]] == [r["round"] for r in want["history"]]
    for g, w in zip(got["history"], want["history"]):
        assert g.keys() == w.keys() and all(_close(g[k], w[k]) for k in g if k != "elapsed_s")
    assert got["comm"] == want["comm"]


def test_the_loop_trains_a_pack_as_each_run_alone(float64, monkeypatch):
    """train of a pack (each run's rows, evaluation and ledger its own) gives every run what
    train gives it alone: history to 1e-9, traffic exactly; the scheduler's pack key groups
    them, and a run with other rounds packs apart."""
    from vflkit.training import split as split_packed

    monkeypatch.setattr(multi_owner, "dataset", lambda name: _tiny_data())
    cfgs = _pack_configs()
    got = multi_owner.train(cfgs, device="cpu", progress=False)
    for cfg, g in zip(cfgs, got):
        want = multi_owner.train(cfg, device=CPU, progress=False)
        assert [r["round"] for r in g["history"]] == [1, 2, 3] and "execution" not in want
        _same(g, want)
        assert g["diverged"] is None and g["execution"] == {"packed": 2, "pack": [c.key for c in cfgs]}
    keys = {split_packed.pack_key(c) for c in cfgs}
    assert len(keys) == 1 and split_packed.pack_key(cfgs[0].replace(rounds=4)) not in keys
    assert split_packed.packable_config("multi_owner", cfgs[0].to_dict()) == cfgs[0]
    with pytest.raises(ConfigError, match="share"):
        multi_owner.train([cfgs[0], cfgs[0].replace(rounds=4)], device="cpu", progress=False)


def test_a_diverging_pack_records_each_run_as_alone(monkeypatch, tmp_path):
    """A pack whose loss turns non-finite is trained again run by run: each record is the run
    alone's (with on_divergence="record": where it diverged), none names a pack."""
    monkeypatch.setattr(multi_owner, "dataset", lambda name: _tiny_data())
    cfgs = _pack_configs(local_lr=1e30)
    recs = multi_owner.run_pack(cfgs, profile="smoke", device="cpu", results=tmp_path, on_divergence="record")
    assert all(r["diverged"] is not None and "execution" not in r for r in recs)
    # a pack that trains writes each run's record under its own key, naming the pack
    fine = _pack_configs()
    recs = multi_owner.run_pack(fine, profile="smoke", device="cpu", results=tmp_path)
    assert [r["config"] for r in recs] == [c.to_dict() for c in fine]
    assert all(r["execution"] == {"packed": 2, "pack": [c.key for c in fine]} and r["diverged"] is None for r in recs)
    assert all(record_path(c, "smoke", tmp_path).exists() for c in fine)
    with pytest.raises(DivergenceError):
        multi_owner.run_pack(_pack_configs(local_lr=1e31), profile="smoke", device="cpu", results=tmp_path)


def test_after_a_pack_diverged_a_run_finished_alone_is_kept_when_the_deadline_stops_the_next(monkeypatch, tmp_path):
    """A diverged pack's runs are trained alone, each recorded as it finishes: the deadline
    stopping the second (simulated) loses nothing of the first, and a rerun trains only the second."""
    monkeypatch.setattr(multi_owner, "dataset", lambda name: _tiny_data())
    cfgs = _pack_configs(local_lr=1e30)
    real, trained = multi_owner.train, []

    def second_stopped(configs, **kwargs):
        trained.append(configs)
        if configs == cfgs[1] and cfgs[0] in trained:
            raise BudgetExhausted("stopped at the budget")
        return real(configs, **kwargs)

    monkeypatch.setattr(multi_owner, "train", second_stopped)
    with pytest.raises(BudgetExhausted):
        multi_owner.run_pack(cfgs, profile="smoke", device="cpu", results=tmp_path, on_divergence="record",
                             deadline=time.time() + 3600)
    assert record_path(cfgs[0], "smoke", tmp_path).exists() and not record_path(cfgs[1], "smoke", tmp_path).exists()
    trained.clear()
    recs = multi_owner.run_pack([cfgs[0]], profile="smoke", device="cpu", results=tmp_path, on_divergence="record")
    assert trained == [] and recs[0]["diverged"] is not None  # the first is recorded, not trained again


def _paths(tmp_path, configs):
    return [checkpoint_path(tmp_path / f"{c.key}.json") for c in configs]


def test_a_stopped_pack_resumes_and_its_runs_alone_too(float64, tmp_path, monkeypatch):
    """A pack stopped after round 1 resumes (trains rounds 2-3 only) to the results of a pack
    never stopped; a run alone resumes the packed checkpoint to its results alone; and a run's
    packed checkpoint holds its own models, not its pack's whole stack."""
    monkeypatch.setattr(multi_owner, "dataset", lambda name: _tiny_data())
    configs = _pack_configs()  # three rounds, two runs of two server rules
    want = multi_owner.train(configs, device="cpu", progress=False)
    paths = _paths(tmp_path / "packed", configs)
    with pytest.raises(BudgetExhausted, match="after round 1 of 3"):
        multi_owner.train(configs, device="cpu", progress=False, checkpoint=paths, deadline=time.time())
    assert [saved_progress(p) for p in paths] == [("round", 1)] * 2  # what the scheduler packs them by
    rounds, step = [], RoundPack.round
    monkeypatch.setattr(RoundPack, "round", lambda self, r: rounds.append(r) or step(self, r))
    for g, w in zip(multi_owner.train(configs, device="cpu", progress=False, checkpoint=paths), want):
        _same(g, w)
    assert rounds == [2, 3]
    alone_paths = _paths(tmp_path / "alone", configs)
    for c, p, q, w in zip(configs, paths, alone_paths, want):
        with pytest.raises(BudgetExhausted):
            multi_owner.train(c, device=CPU, progress=False, checkpoint=q, deadline=time.time())
        assert p.stat().st_size < 1.1 * q.stat().st_size
        _same(multi_owner.train(c, device=CPU, progress=False, checkpoint=p), w)  # the pack's = alone's


def test_checkpoints_follow_the_interval_and_none_outlive_an_ephemeral_machine(tmp_path, monkeypatch):
    """With a long interval no round is checkpointed but the one the deadline stops after; an
    ephemeral deadline stops the run with none written at all; a deadline stops a run without
    a checkpoint path too."""
    monkeypatch.setattr(multi_owner, "dataset", lambda name: _tiny_data())
    cfg, = _pack_configs()[:1]
    path, = _paths(tmp_path, [cfg])
    saved = []
    save = multi_owner.save_checkpoint
    monkeypatch.setattr(multi_owner, "save_checkpoint", lambda p, **kw: saved.append(kw["r"]) or save(p, **kw))
    multi_owner.train(cfg, device=CPU, progress=False, checkpoint=path, checkpoint_every_s=3600.0)
    assert saved == [] and not path.exists()
    multi_owner.train(cfg, device=CPU, progress=False, checkpoint=path, checkpoint_every_s=0.0)
    assert saved == [1, 2]  # every round but the last
    path.unlink()
    saved.clear()
    with pytest.raises(BudgetExhausted, match="no checkpoint kept"):
        multi_owner.train(cfg, device=CPU, progress=False, checkpoint=path, deadline=time.time(), ephemeral=True)
    assert saved == [] and not path.exists()
    with pytest.raises(BudgetExhausted, match="after round 1 of 3"):
        multi_owner.train(cfg, device=CPU, progress=False, deadline=time.time())
