"""Tests for vflkit.training.checkpoint: what every resuming trainer saves and how a checkpoint
that is not the run's is refused."""

import random

import numpy as np
import pytest
import torch

from vflkit.comm import Channel
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
    state = checkpoint.load(path, run, device=CPU)
    assert (state["key"], state["round"], state["history"]) == (run.key, 2, [{"round": 1}])
    checkpoint.restore_rng(state, CPU)
    assert _draws() == after
    assert [p.name for p in tmp_path.iterdir()] == ["k.ckpt.pt"]  # no temporary left behind


def test_another_runs_checkpoint_is_moved_aside(tmp_path):
    """A checkpoint of another config is not returned: it goes to ``.bad`` with a warning."""
    path = tmp_path / "k.ckpt.pt"
    checkpoint.save(path, MultiVFLConfig(seed=1), {"round": 1}, device=CPU)
    with pytest.warns(UserWarning, match="ignoring checkpoint .*not this run's.*starting from round 1"):
        assert checkpoint.load(path, MultiVFLConfig(seed=0), device=CPU, fresh="round 1") is None
    assert not path.exists() and (tmp_path / "k.ckpt.pt.bad").exists()
    assert checkpoint.load(path, MultiVFLConfig(seed=0), device=CPU) is None  # none there: nothing to warn about


@pytest.mark.parametrize("changed", ["vflkit_source", "torch", "device", "torch_threads"])
def test_a_checkpoint_computed_by_other_code_or_elsewhere_is_moved_aside(tmp_path, monkeypatch, changed):
    """A record names one environment, so a checkpoint written by other vflkit code, another
    PyTorch or on another instruction set or GPU is not resumed: the warning names what differs."""
    run, path = MultiVFLConfig(rounds=3), tmp_path / "k.ckpt.pt"
    here = checkpoint.computed_by(CPU)
    assert set(here) == {"vflkit_source", "torch", "device", "torch_threads"}
    assert here["device"] == f"cpu {torch.backends.cpu.get_cpu_capability()}" and len(here["vflkit_source"]) == 64
    checkpoint.save(path, run, {"round": 2}, device=CPU)
    assert checkpoint.load(path, run, device=CPU)["computed_by"] == here  # same code, same machine
    monkeypatch.setattr(checkpoint, "computed_by", lambda device: {**here, changed: "elsewhere"})
    with pytest.warns(UserWarning, match=f"computed with another {changed} .*starting from round 1"):
        assert checkpoint.load(path, run, device=CPU, fresh="round 1") is None
    assert (tmp_path / "k.ckpt.pt.bad").exists()


def test_a_checkpoint_written_before_it_named_its_environment_is_moved_aside(tmp_path):
    """A checkpoint without ``computed_by`` cannot show that this code on this machine wrote it."""
    run, path = MultiVFLConfig(rounds=3), tmp_path / "k.ckpt.pt"
    torch.save({"key": run.key, "config": run.to_dict(), "round": 2}, path)
    with pytest.warns(UserWarning, match="computed with another vflkit_source, torch, device"):
        assert checkpoint.load(path, run, device=CPU) is None


def test_the_source_digest_follows_every_file_of_the_package_and_nothing_else(tmp_path):
    """A copy of vflkit has vflkit's digest; a changed data file (not only a module) changes it,
    a bytecode cache does not."""
    import shutil
    from pathlib import Path

    import vflkit

    package = Path(vflkit.__file__).resolve().parent
    copy = tmp_path / "vflkit"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert checkpoint.source_digest(copy) == checkpoint.source_digest()
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "x.pyc").write_bytes(b"cache")
    assert checkpoint.source_digest.__wrapped__(copy) == checkpoint.source_digest()
    csv = next(copy.rglob("*.csv"))
    csv.write_text(csv.read_text() + "\n")
    assert checkpoint.source_digest.__wrapped__(copy) != checkpoint.source_digest()


def test_the_digest_is_taken_when_the_module_is_imported_not_at_the_first_checkpoint():
    """vflkit's digest is in the cache before any checkpoint is written (a run that edits
    nothing has it from its imports), so files changed during a first epoch are not named."""
    import subprocess
    import sys

    code = ("from vflkit.training import checkpoint as c; i = c.source_digest.cache_info(); "
            "print(i.currsize, i.misses)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "1"]


def test_ledger_log_packs_each_row_once_and_restores_the_rows_exactly():
    """The ledger is packed chunk by chunk as it grows; restoring gives back its rows, drops rows
    logged since (a resumed run's repeated setup), and reads an older checkpoint's plain list."""
    channel = Channel()
    log = checkpoint.LedgerLog(channel)
    channel.at(epoch=0, phase="setup").send("a", "b", "model_weights", torch.zeros(3))
    first = log.pack()
    channel.at(epoch=1, phase="train").send("b", "a", "gradient", torch.zeros(2))
    saved = log.pack()
    assert saved["rows"] == 2 and len(saved["chunks"]) == 2 and saved["chunks"][0] == first["chunks"][0]
    rows = list(channel.ledger._rows)

    fresh = Channel()
    fresh.at(epoch=0, phase="setup").send("a", "b", "model_weights", torch.zeros(3))
    again = checkpoint.LedgerLog(fresh)
    again.restore(saved)
    assert fresh.ledger._rows == rows
    again.restore([list(r) for r in rows])  # the format before chunks
    assert fresh.ledger._rows == rows and again.pack()["rows"] == 2


class _Planted:
    """What a planted checkpoint holds: an object whose unpickling runs code (here: creates a file)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_checkpoint_that_would_run_code_is_refused_unread_and_moved_aside(tmp_path):
    """Checkpoints are read with torch.load(weights_only=True): a planted pickle that would run
    code when loaded is refused, its code never runs, and it goes to ``.bad`` (F09)."""
    run, path = MultiVFLConfig(rounds=3), tmp_path / "k.ckpt.pt"
    marker = tmp_path / "ran"
    torch.save({"key": run.key, "config": run.to_dict(), "round": 2, "payload": _Planted(marker)}, path)
    with pytest.warns(UserWarning, match="holds objects a checkpoint never holds, refused unread.*moved to k.ckpt.pt.bad"):
        assert checkpoint.load(path, run, device=CPU) is None
    assert not marker.exists() and (tmp_path / "k.ckpt.pt.bad").exists()
    # a ledger packed as pickled chunks (also code, once unpickled) is refused too
    with pytest.raises(ValueError, match="pickled form"):
        checkpoint.LedgerLog(Channel()).restore({"rows": 1, "chunks": [b"..."]})
    # what vflkit writes loads under weights_only (every trainer's state: see the resume tests)
    checkpoint.save(path, run, {"round": 2, "ledger": checkpoint.LedgerLog(Channel()).pack()}, device=CPU)
    assert torch.load(path, weights_only=True)["round"] == 2


def test_a_checkpoint_made_at_another_thread_count_is_not_resumed(tmp_path):
    """The bit-identical promise (docs/profiles-and-scheduler.md) holds at one thread count, whole or resumed: a run
    paused at 1 thread (the scheduler) and resumed at 2 (a notebook) would match neither, so
    the checkpoint is moved aside and the run starts afresh (F27)."""
    run, path = MultiVFLConfig(rounds=3), tmp_path / "k.ckpt.pt"
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        checkpoint.save(path, run, {"round": 2}, device=CPU)
        assert checkpoint.load(path, run, device=CPU)["computed_by"]["torch_threads"] == "1"
        torch.set_num_threads(2)
        with pytest.warns(UserWarning, match="computed with another torch_threads.*starting from round 1"):
            assert checkpoint.load(path, run, device=CPU, fresh="round 1") is None
    finally:
        torch.set_num_threads(before)


def test_a_checkpoint_on_a_full_disk_is_a_clear_error(tmp_path, monkeypatch):
    """Free space is checked before each checkpoint (how much, where), and a write that runs
    out of space anyway is the same error, not torch's "unexpected pos" (F15)."""
    from collections import namedtuple

    from vflkit import files
    from vflkit.errors import DiskSpaceError

    run, path = MultiVFLConfig(rounds=3), tmp_path / "k.ckpt.pt"
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(files.shutil, "disk_usage", lambda p: usage(2**30, 2**30 - 100, 100))
    big = {"round": 2, "weights": torch.zeros(2**20)}
    with pytest.raises(DiskSpaceError, match=f"checkpoint of run {run.key} needs about 5.4 MiB free in {tmp_path}"):
        checkpoint.save(path, run, big, device=CPU)
    monkeypatch.undo()

    def short_write(obj, f):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 128 vs 0")

    monkeypatch.setattr(checkpoint.torch, "save", short_write)
    with pytest.raises(DiskSpaceError, match="ran out of space"):
        checkpoint.save(path, run, big, device=CPU)
    assert not path.exists() and not list(tmp_path.iterdir())


def test_a_partys_state_goes_back_to_its_device_on_resume():
    """A checkpoint is read onto the CPU; a party's plain-tensor state (Multi-VFL's server
    moments) must return to the device it lives on, else a run resumed on a GPU fails at its
    first round (seen on an H200). The "meta" device stands in for a GPU on the CPU."""
    from types import SimpleNamespace

    fresh = {"opt": {"m": {"w": torch.zeros(2, device="meta")}}, "initial": [torch.zeros(2, device="meta")]}
    party = SimpleNamespace(models={}, optimizers={}, state=fresh, device=torch.device("meta"))
    saved = {"models": [{}], "optimizers": [{}],
             "party_state": [{"opt": {"m": {"w": torch.ones(2)}}, "initial": [torch.ones(2)],
                              "new": torch.ones(1), "round": 3}]}
    checkpoint.restore_parties([party], saved)
    assert party.state["opt"]["m"]["w"].device.type == "meta"
    assert party.state["initial"][0].device.type == "meta"
    assert party.state["new"].device.type == "meta"  # no counterpart: the party's device
    assert party.state["round"] == 3
    cpu = SimpleNamespace(models={}, optimizers={}, state={"opt": torch.zeros(1)}, device=torch.device("cpu"))
    checkpoint.restore_parties([cpu], {"models": [{}], "optimizers": [{}], "party_state": [{"opt": torch.ones(1)}]})
    assert torch.equal(cpu.state["opt"], torch.ones(1))  # on the CPU, values as saved
