"""Tests for a pack's checkpoints (vflkit.training.split.train of K > 1 runs; Multi-VFL's are in
test_multi_vfl_pack.py): a pack stopped after an epoch and resumed gives what
a pack never stopped gives, a run alone resumes its packed checkpoint and a pack its runs' own
(float64, to the packed trainers' tolerance; ledgers exactly), and the scheduler pauses a pack
the deadline stopped and packs its runs again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from test_training_packed import _assert_same_run, _configs

from vflkit import scheduler
from vflkit.errors import BudgetExhausted, DivergenceError
from vflkit.records import checkpoint_path
from vflkit.training import split

CPU = torch.device("cpu")

# optimizer state that must travel (momentum, Adam's moments and count), the exponential
# schedule's decayed rate, C-VFL's parties stacked as one group (party-major slices) and its
# dither generator; small MLPs and three epochs, so a resume has two left
RESUMED = {
    "splitnn, momentum, exponential": ("splitnn", {"lr_schedule": "exponential", "lr_gamma": 0.5}),
    "splitnn, adam": ("splitnn", {"optimizers": "adam", "lr": 0.01}),
    "c_vfl, parties stacked, dithered": ("c_vfl", {"options": {"compressor": "scalar", "bits": 2,
                                                               "local_iterations": 2}}),
}


def _case(name: str, seeds=(0, 1)):
    method, changes = RESUMED[name]
    return _configs(method, ("mlp",) * 4, seeds=seeds, epochs=3, **changes)


@pytest.fixture(autouse=True)
def every_epoch(monkeypatch):
    """A checkpoint after every epoch (these runs take less than the interval)."""
    monkeypatch.setattr(split, "CHECKPOINT_EVERY_S", 0.0)


def _paths(tmp_path: Path, configs) -> list[Path]:
    return [checkpoint_path(tmp_path / f"{c.key}.json") for c in configs]


def _stop_pack_after_epoch_1(configs, paths, graphs=None) -> None:
    """Train the pack until the deadline (already past) stops it at the end of epoch 1."""
    with pytest.raises(BudgetExhausted, match="after epoch 1 of 3"):
        split.train(configs, device="cpu", checkpoint=paths, deadline=time.time(), graphs=graphs)
    assert all(p.exists() for p in paths)


@pytest.mark.parametrize("case,graphs", [(c, None) for c in sorted(RESUMED)]
                         + [("c_vfl, parties stacked, dithered", "tape")])
def test_a_stopped_pack_resumes_as_if_never_stopped(float64, tmp_path, case, graphs):
    """Stopped after epoch 1 and trained again, a pack gives every run what the pack never
    stopped gives: losses and metrics of all three epochs, final scores, the ledger exactly
    (also with its steps captured: the tape, CUDA graphs' CPU stand-in, captures the resumed pack)."""
    configs = _case(case)
    want = split.train(configs, device="cpu")
    paths = _paths(tmp_path, configs)
    _stop_pack_after_epoch_1(configs, paths, graphs)
    got = split.train(configs, device="cpu", checkpoint=paths, graphs=graphs)
    for g, w in zip(got, want):
        _assert_same_run(g, w)
        assert [r["epoch"] for r in g["history"]] == [r["epoch"] for r in w["history"]]
    # the last epoch is not checkpointed (the record is written next), as alone
    assert all(torch.load(p, weights_only=True)["epoch"] == 2 for p in paths)


@pytest.mark.parametrize("case", ["splitnn, adam", "c_vfl, parties stacked, dithered"])
def test_packed_and_alone_checkpoints_are_one_format(float64, tmp_path, case):
    """A run alone resumes the checkpoint its pack wrote (each run's slice of the stacked
    optimizer state), and a pack resumes the checkpoints its runs wrote alone: both give the
    runs' unpacked results."""
    configs = _case(case)
    want = [split.train(c, device=CPU, progress=False) for c in configs]
    packed_ckpts = _paths(tmp_path / "packed", configs)
    _stop_pack_after_epoch_1(configs, packed_ckpts)
    for c, p, w in zip(configs, packed_ckpts, want):
        _assert_same_run(split.train(c, device=CPU, progress=False, checkpoint=p), w)
    alone_ckpts = _paths(tmp_path / "alone", configs)
    for c, p in zip(configs, alone_ckpts):
        with pytest.raises(BudgetExhausted):
            split.train(c, device=CPU, progress=False, checkpoint=p, deadline=time.time())
    # a run's slice of the stacked optimizer state is copied out on write, not its whole stack
    assert all(p.stat().st_size < 1.1 * q.stat().st_size for p, q in zip(packed_ckpts, alone_ckpts))
    for g, w in zip(split.train(configs, device="cpu", checkpoint=alone_ckpts), want):
        _assert_same_run(g, w)


def test_a_pack_across_datasets_checkpoints_each_run_at_its_own_path(float64, tmp_path):
    """A pack of MNIST and FashionMNIST runs given out of dataset order (the trainer puts runs
    of one dataset side by side) saves each run's checkpoint at that run's path: each run alone
    resumes it to its unpacked results."""
    a, b = _case("splitnn, adam")
    configs = [a, b.replace(dataset="fashion_mnist"), a.replace(seed=2)]
    paths = _paths(tmp_path, configs)
    _stop_pack_after_epoch_1(configs, paths)
    assert [torch.load(p, weights_only=True)["key"] for p in paths] == [c.key for c in configs]
    for c, p in zip(configs, paths):  # resumed, not started over (a foreign checkpoint is moved aside)
        _assert_same_run(split.train(c, device=CPU, progress=False, checkpoint=p),
                         split.train(c, device=CPU, progress=False))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: CUDA graphs themselves")
def test_a_stopped_pack_resumes_under_cuda_graphs_on_a_gpu(float64, tmp_path):
    """On a GPU, a pack with Adam stopped after epoch 1 and resumed with its steps captured
    (Adam made capturable after its state was loaded from the checkpoints) gives the eager
    pack's results."""
    configs = _case("splitnn, adam")
    want = split.train(configs, device="cuda", stacking="vmap")
    paths = _paths(tmp_path, configs)
    with pytest.raises(BudgetExhausted):
        split.train(configs, device="cuda", stacking="vmap", checkpoint=paths, deadline=time.time())
    got = split.train(configs, device="cuda", stacking="vmap", checkpoint=paths, graphs="cuda")
    for g, w in zip(got, want):
        _assert_same_run(g, w)


def test_a_pack_whose_runs_stopped_apart_starts_over(float64, tmp_path):
    """Checkpoints of some runs only: the pack says so and trains every run from epoch 1, as a
    fresh pack does (it does not mix a resumed run with a fresh one)."""
    configs = _case("splitnn, momentum, exponential")
    paths = _paths(tmp_path, configs)
    with pytest.raises(BudgetExhausted):
        split.train(configs[0], device=CPU, progress=False, checkpoint=paths[0], deadline=time.time())
    with pytest.warns(UserWarning, match="1 of this pack's 2 runs have a checkpoint"):
        got = split.train(configs, device="cpu", checkpoint=paths)
    for g, w in zip(got, split.train(configs, device="cpu")):
        _assert_same_run(g, w)


def test_run_pack_checkpoints_beside_each_record_and_removes_them(tmp_path):
    """run_pack stops at the deadline with each run's checkpoint where the run alone keeps it,
    then finishes the pack from them, writes the records and removes the checkpoints."""
    configs = _case("splitnn, momentum, exponential")
    with pytest.raises(BudgetExhausted):
        split.run_pack(configs, profile="smoke", device="cpu", results=tmp_path, deadline=time.time())
    from vflkit.records import record_path

    ckpts = [checkpoint_path(record_path(c, "smoke", tmp_path)) for c in configs]
    assert all(p.exists() for p in ckpts) and not any(record_path(c, "smoke", tmp_path).exists() for c in configs)
    recs = split.run_pack(configs, profile="smoke", device="cpu", results=tmp_path)
    assert [r["history"][-1]["epoch"] for r in recs] == [3, 3]
    assert not any(p.exists() for p in ckpts)


def _stopped_pack(payloads, *, device, deadline):
    raise BudgetExhausted("stopped after epoch 1")


def test_scheduler_pauses_a_pack_the_deadline_stopped(tmp_path):
    """A pack task that stops at the deadline leaves all its runs paused (and unlocked), not failed."""
    members = tuple(scheduler.Task(key=f"run{i}", path=tmp_path / f"run{i}.json", fn=_stopped_pack,
                                   payload={"key": f"run{i}"}) for i in range(2))
    pack = scheduler.Task(key="pack:run0x2", path=members[0].path, fn=_stopped_pack,
                          payload=[m.payload for m in members], members=members)
    assert scheduler.execute_pack(pack, "cpu", deadline=time.time()) == [("run0", "paused"), ("run1", "paused")]
    assert not any(scheduler.lock_path(m.path).exists() for m in members)


def test_a_stopped_pack_is_packed_again_by_the_next_schedule(float64, tmp_path, monkeypatch):
    """The engine end to end: a pack of study payloads (the scheduler's task function) stopped
    after epoch 1, then a packed schedule of the same runs, which trains epochs 2 and 3 only,
    gives the records an uninterrupted packed schedule writes (each still naming its pack)."""
    from vflkit import study

    def tasks(results):
        return study.study_tasks("demo", "smoke", seeds=(0, 1), results=results,
                                 overrides={"n_train": 256, "n_test": 128, "epochs": 3})

    stopped = [t for t in tasks(tmp_path / "stopped") if t.payload["config"]["method"] == "splitnn"]
    with pytest.raises(BudgetExhausted):
        split.compute_pack([t.payload for t in stopped], device="cpu", deadline=time.time())
    assert all(checkpoint_path(t.path).exists() for t in stopped)
    fresh = [t for t in tasks(tmp_path / "fresh") if t.payload["config"]["method"] == "splitnn"]
    real, epochs = split.evaluate, []

    def counted(method, config):
        epochs.append(method.active.channel.epoch)
        return real(method, config)

    monkeypatch.setattr(split, "evaluate", counted)
    for runs, trained in ((stopped, [2, 2, 3, 3]), (fresh, [1, 1, 2, 2, 3, 3])):
        epochs.clear()
        s = scheduler.schedule(runs, device="cpu", executor="serial", progress=False, pack=True)
        assert sorted(s.computed) == sorted(t.key for t in runs) and not s.failed
        assert epochs == trained
    import json

    for a, b in zip(stopped, fresh):
        got, want = json.loads(a.path.read_text()), json.loads(b.path.read_text())
        assert got["execution"] == want["execution"] == {"packed": 2, "pack": [t.key for t in stopped]}
        _assert_same_run(got, want)
        assert not checkpoint_path(a.path).exists()


def _poisoned(monkeypatch) -> None:
    """From now on, a pack's run 1 diverges at the second step of every pack trained (its loss
    set to NaN there): a divergence no seed or rate reproduces, so a resumed pack that got it
    right restored it from the checkpoint rather than meeting it again."""
    real = split.Pack.train_step
    calls: dict[int, int] = {}

    def poisoned(self, ids):
        out = real(self, ids)
        calls[id(self)] = calls.get(id(self), 0) + 1
        if calls[id(self)] == 2:
            out["active"] = out["active"].clone()
            out["active"][1] = float("nan")
        return out

    monkeypatch.setattr(split.Pack, "train_step", poisoned)


def test_a_pack_with_a_diverged_run_still_checkpoints_and_stops_at_the_deadline(float64, tmp_path, monkeypatch):
    """Once a run of a pack diverged, the pack still stops at the deadline with every run
    checkpointed (the diverged one as diverged); resumed, the healthy run trains epochs 2-3 to
    what a pack never stopped gives and the diverged one keeps its divergence; each run alone
    resumes its checkpoint to the same results (the diverged one raising where told to)."""
    configs = _case("splitnn, momentum, exponential")
    with monkeypatch.context() as m:
        _poisoned(m)
        want = split.train(configs, device="cpu", on_divergence="record")
        assert want[0]["diverged"] is None and want[1]["diverged"]["epoch"] == 1
        paths = _paths(tmp_path, configs)
        with pytest.raises(BudgetExhausted, match="after epoch 1 of 3"):
            split.train(configs, device="cpu", on_divergence="record", checkpoint=paths,
                              deadline=time.time())
    saved = [torch.load(p, weights_only=True) for p in paths]
    assert [s["epoch"] for s in saved] == [1, 1]
    assert saved[0].get("diverged") is None and saved[1]["diverged"] == want[1]["diverged"]
    alone = [tmp_path / "alone" / p.name for p in paths]
    alone[0].parent.mkdir()
    for p, q in zip(paths, alone):
        q.write_bytes(p.read_bytes())
    real, evaluated = split.evaluate, []
    monkeypatch.setattr(split, "evaluate", lambda m, c: evaluated.append((m.active.channel.epoch, c.seed)) or real(m, c))
    got = split.train(configs, device="cpu", on_divergence="record", checkpoint=paths)
    assert evaluated == [(2, configs[0].seed), (3, configs[0].seed)]  # epochs 2 and 3, of the healthy run only
    for g, w in zip(got, want):
        _assert_same_run(g, w)
    for c, q, w in zip(configs, alone, want):
        _assert_same_run(split.train(c, device=CPU, progress=False, on_divergence="record", checkpoint=q), w)
    with pytest.raises(DivergenceError, match="the loss of active is nan at epoch 1"):  # as the run alone raises
        split.train(configs[1], device=CPU, progress=False, checkpoint=alone[1])


def test_a_checkpoint_saved_as_diverged_without_its_result_is_set_aside(float64, tmp_path, monkeypatch):
    """A checkpoint saved as diverged whose final metrics were removed (a hand edit) is moved
    aside with a warning, by a pack and by the run alone, never half used (it was a KeyError)."""
    configs = _case("splitnn, momentum, exponential")
    paths = _paths(tmp_path, configs)
    with monkeypatch.context() as m:
        _poisoned(m)
        with pytest.raises(BudgetExhausted):
            split.train(configs, device="cpu", on_divergence="record", checkpoint=paths, deadline=time.time())
    state = torch.load(paths[1], weights_only=True)
    del state["final"]
    torch.save(state, paths[1])
    copy = tmp_path / "alone.ckpt.pt"
    copy.write_bytes(paths[1].read_bytes())
    with pytest.warns(UserWarning, match="saved as diverged but lacks"):
        got = split.train(configs, device="cpu", on_divergence="record", checkpoint=paths)
    assert [g["diverged"] for g in got] == [None, None]  # started over, without the poison
    with pytest.warns(UserWarning, match="saved as diverged but lacks"):
        alone = split.train(configs[1], device=CPU, progress=False, on_divergence="record", checkpoint=copy)
    _assert_same_run(alone, got[1])


def test_checkpoints_follow_their_interval_a_deadline_stop_and_durability(tmp_path, monkeypatch):
    """A run alone or a pack checkpoints once ``checkpoint_every_s`` has passed since its last
    checkpoint (not after every epoch), always when the deadline stops it, and never where the
    checkpoint would not outlive the machine (``durable=False``: the deadline still stops it)."""
    configs = _case("splitnn, adam")
    saves: list[int] = []
    real = split.save_checkpoint
    monkeypatch.setattr(split, "save_checkpoint", lambda path, **kw: saves.append(kw["epoch"]) or real(path, **kw))
    for runs in (configs[0], configs):
        paths = _paths(tmp_path / str(len(saves)), [runs] if runs is configs[0] else runs)
        ckpt = paths[0] if runs is configs[0] else paths
        saves.clear()
        split.train(runs, device="cpu", progress=False, checkpoint=ckpt, checkpoint_every_s=1e9)
        assert saves == []
        split.train(runs, device="cpu", progress=False, checkpoint=ckpt, checkpoint_every_s=0.0)
        assert sorted(saves) == [1] * len(paths) + [2] * len(paths)
        for p in paths:
            p.unlink()
        saves.clear()
        with pytest.raises(BudgetExhausted, match="after epoch 1 of 3"):
            split.train(runs, device="cpu", progress=False, checkpoint=ckpt, checkpoint_every_s=1e9,
                        deadline=time.time())
        assert saves == [1] * len(paths) and all(p.exists() for p in paths)
        for p in paths:
            p.unlink()
        with pytest.raises(BudgetExhausted, match="after epoch 1 of 3"):
            split.train(runs, device="cpu", progress=False, checkpoint=ckpt, durable=False, deadline=time.time())
        assert saves == [1] * len(paths) and not any(p.exists() for p in paths)


def test_the_deadline_stops_a_pack_whose_run_diverged_without_checkpoints(float64, monkeypatch):
    """The deadline is looked at after every epoch whatever a run of the pack did, also with no
    checkpoint to write."""
    configs = _case("splitnn, momentum, exponential")
    _poisoned(monkeypatch)
    with pytest.raises(BudgetExhausted, match="after epoch 1 of 3"):
        split.train(configs, device="cpu", on_divergence="record", deadline=time.time())
