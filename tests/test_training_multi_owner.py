"""Tests for vflkit.training.multi_owner: Multi-VFL runs checkpoint their rounds and resume from
them (interrupted, killed with SIGKILL, stopped at a deadline) with the record of an
uninterrupted run; a checkpoint that is not the run's is moved aside."""

import json
import time

import pytest
from helpers import kill_at_first_checkpoint
import torch

from vflkit.data import ImageData
from vflkit.errors import BudgetExhausted
from vflkit.methods.multi_vfl import MultiVFLConfig, RoundPack
from vflkit.records import checkpoint_path, record_path
from vflkit.training import multi_owner

#: An adaptive server optimizer (its moments must survive a resume) and evaluation every other
#: round (the resumed rounds are one without, one with).
CFG = MultiVFLConfig(dataset="mnist", scenario="4niid", server_optimizer="fedadam", rounds=4,
                     samples_per_owner=16, batch_size=8, local_steps=1, local_lr=0.05, n_test=20, eval_every=2)


def _data():
    g = torch.Generator().manual_seed(0)
    return ImageData("tiny", torch.randint(0, 256, (600, 1, 28, 28), dtype=torch.uint8, generator=g),
                     torch.arange(600) % 10,
                     torch.randint(0, 256, (20, 1, 28, 28), dtype=torch.uint8, generator=g),
                     torch.arange(20) % 10, tuple(str(i) for i in range(10)), (0.5,), (0.25,))


def _run(cfg, root, **kwargs):
    return multi_owner.run(cfg, profile="smoke", results=root, device="cpu", progress=False, **kwargs)


def _same(a, b):
    """The parts of two records that must be identical (timings aside)."""
    strip = lambda h: [{k: v for k, v in r.items() if k != "elapsed_s"} for r in h]  # noqa: E731
    assert strip(a["history"]) == strip(b["history"])
    assert a["final"] == b["final"] and a["best"] == b["best"]
    assert a["comm"] == b["comm"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: results are bit-identical only at one thread count (docs/profiles-and-scheduler.md), and two
    threads spin-waiting on a shared CPU make these runs many times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def whole(tmp_path_factory, one_thread):
    """The record of CFG run without interruption."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(multi_owner, "dataset", lambda name: _data())
        return _run(CFG, tmp_path_factory.mktemp("whole"))


@pytest.fixture
def tiny(monkeypatch):
    """Tiny data, and a checkpoint after every round."""
    monkeypatch.setattr(multi_owner, "dataset", lambda name: _data())
    monkeypatch.setattr(multi_owner, "CHECKPOINT_EVERY_S", 0.0)


class _Interrupt(Exception):
    pass


_ROUND = RoundPack.round


def _count_rounds(monkeypatch, *, die_at=None):
    """Record the rounds trained from now on; raise _Interrupt at round ``die_at``."""
    trained: list[int] = []

    def round_(self, r):
        if r == die_at:
            raise _Interrupt
        trained.append(r)
        return _ROUND(self, r)

    monkeypatch.setattr(RoundPack, "round", round_)
    return trained


def test_interrupted_run_resumes_from_checkpoint_with_identical_record(tmp_path, monkeypatch, tiny, whole):
    """A run stopped in round 3 of 4 continues after round 2, not from scratch, and ends with the
    record of an uninterrupted run (history, final and best accuracy, every ledger sum)."""
    _count_rounds(monkeypatch, die_at=3)
    with pytest.raises(_Interrupt):
        _run(CFG, tmp_path)
    path = record_path(CFG, "smoke", tmp_path)
    assert not path.exists() and torch.load(checkpoint_path(path), weights_only=False)["round"] == 2
    trained = _count_rounds(monkeypatch)
    resumed = _run(CFG, tmp_path)
    assert trained == [3, 4], "the resumed run retrained rounds it had checkpointed"
    assert not checkpoint_path(path).exists()
    _same(resumed, whole)


def test_resume_restores_the_server_moments(tmp_path, monkeypatch, tiny, whole):
    """Without the server's FedAdam moments the resumed run would differ: the checkpoint is
    what makes it identical (the comparison above can fail)."""
    _count_rounds(monkeypatch, die_at=3)
    with pytest.raises(_Interrupt):
        _run(CFG, tmp_path)
    ckpt = checkpoint_path(record_path(CFG, "smoke", tmp_path))
    state = torch.load(ckpt, weights_only=False)
    moments = state["party_state"][-1]["opt"]
    assert any(t.abs().sum() > 0 for t in moments["m"].values())
    for part in ("m", "v"):
        moments[part] = {k: torch.zeros_like(t) for k, t in moments[part].items()}
    torch.save(state, ckpt)
    _count_rounds(monkeypatch)
    resumed = _run(CFG, tmp_path)
    assert resumed["history"][-1]["test_loss"] != whole["history"][-1]["test_loss"]


def test_deadline_checkpoints_and_stops_and_a_rerun_finishes_identically(tmp_path, monkeypatch, whole):
    """A run whose next round would end after its deadline checkpoints (whatever the checkpoint
    interval) and raises BudgetExhausted; the rerun resumes and ends with the uninterrupted record."""
    monkeypatch.setattr(multi_owner, "dataset", lambda name: _data())
    monkeypatch.setattr(multi_owner, "CHECKPOINT_EVERY_S", 3600.0)
    with pytest.raises(BudgetExhausted, match="after round 1 of 4.*rerun to resume"):
        _run(CFG, tmp_path, deadline=time.time())
    path = record_path(CFG, "smoke", tmp_path)
    assert not path.exists() and torch.load(checkpoint_path(path), weights_only=False)["round"] == 1
    trained = _count_rounds(monkeypatch)
    _same(_run(CFG, tmp_path), whole)
    assert trained == [2, 3, 4]


@pytest.mark.parametrize("kind", ["corrupt", "foreign"])
def test_a_checkpoint_not_the_runs_is_moved_aside(tmp_path, monkeypatch, tiny, whole, kind):
    """An unreadable checkpoint, or another run's, is never resumed from: it is moved to
    ``.bad`` with a warning and the run starts from round 1."""
    ckpt = checkpoint_path(record_path(CFG, "smoke", tmp_path))
    if kind == "corrupt":
        ckpt.parent.mkdir(parents=True)
        ckpt.write_bytes(b"not a checkpoint")
    else:  # a real checkpoint of another seed, under this run's name
        other = CFG.replace(seed=1)
        with pytest.raises(BudgetExhausted):
            _run(other, tmp_path, deadline=time.time())
        checkpoint_path(record_path(other, "smoke", tmp_path)).replace(ckpt)
    trained = _count_rounds(monkeypatch)
    with pytest.warns(UserWarning, match="ignoring checkpoint.*starting from round 1"):
        rec = _run(CFG, tmp_path)
    assert trained == [1, 2, 3, 4] and ckpt.with_name(ckpt.name + ".bad").exists()
    _same(rec, whole)


def test_kill_9_mid_run_resumes_from_checkpoint_with_identical_record(tmp_path, monkeypatch):
    """A run killed with SIGKILL (no chance to clean up) resumes after its last checkpointed
    round and ends with the record of an uninterrupted run. On real MNIST: the killed process
    is a fresh interpreter, which sees the dataset files, not this test's patches."""
    cfg = MultiVFLConfig(dataset="mnist", scenario="iid", server_optimizer="feddemonadam", rounds=5,
                         samples_per_owner=32, batch_size=8, local_steps=1, local_lr=0.05, n_test=50)
    whole = _run(cfg, tmp_path / "a")
    path = record_path(cfg, "smoke", tmp_path / "b")
    ckpt = checkpoint_path(path)
    code = ("import json, pathlib; from vflkit.methods.multi_vfl import MultiVFLConfig; "
            "from vflkit.training import multi_owner; multi_owner.CHECKPOINT_EVERY_S = 0.0; "
            f"multi_owner.run(MultiVFLConfig.from_dict(json.loads({json.dumps(json.dumps(cfg.to_dict()))})), "
            f"profile='smoke', results=pathlib.Path({str(tmp_path / 'b')!r}), device='cpu', progress=False)")
    kill_at_first_checkpoint(code, ckpt, path)
    saved = torch.load(ckpt, weights_only=False)["round"]
    assert 1 <= saved < cfg.rounds
    trained = _count_rounds(monkeypatch)
    resumed = _run(cfg, tmp_path / "b")
    assert trained == list(range(saved + 1, cfg.rounds + 1))
    _same(resumed, whole)
