"""Tests for vflkit.training.checkpoint: what every resuming trainer saves and how a checkpoint
that is not the run's is refused."""

import random

import numpy as np
import pytest
import torch

from vflkit.methods.multi_vfl import MultiVFLConfig
from vflkit.training import checkpoint

CPU = torch.device("cpu")


def _draws():
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def test_save_then_load_gives_back_the_state_and_every_global_random_state(tmp_path):
    """A checkpoint carries the run's key and config, its state, and torch's, numpy's and
    Python's random states: restoring them repeats the draws made after saving."""
    run, path = MultiVFLConfig(rounds=3), tmp_path / "k.ckpt.pt"
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    _draws()
    checkpoint.save(path, run, {"round": 2, "history": [{"round": 1}]}, device=CPU)
    after = _draws()
    state = checkpoint.load(path, run)
    assert (state["key"], state["round"], state["history"]) == (run.key, 2, [{"round": 1}])
    checkpoint.restore_rng(state, CPU)
    assert _draws() == after
    assert [p.name for p in tmp_path.iterdir()] == ["k.ckpt.pt"]  # no temporary left behind


def test_another_runs_checkpoint_is_moved_aside(tmp_path):
    """A checkpoint of another config is not returned: it goes to ``.bad`` with a warning."""
    path = tmp_path / "k.ckpt.pt"
    checkpoint.save(path, MultiVFLConfig(seed=1), {"round": 1}, device=CPU)
    with pytest.warns(UserWarning, match="ignoring checkpoint .*not this run's.*starting from round 1"):
        assert checkpoint.load(path, MultiVFLConfig(seed=0), fresh="round 1") is None
    assert not path.exists() and (tmp_path / "k.ckpt.pt.bad").exists()
    assert checkpoint.load(path, MultiVFLConfig(seed=0)) is None  # none there: nothing to warn about
