"""Issue 12: nothing lost, nothing silently wrong. Bad records, bad inputs and divergence under
abuse: each is either handled (moved aside and recomputed, recorded) or a clear one-line error
that says what is wrong and what to do."""

import dataclasses
import json
import math
import os
import subprocess
import warnings
from pathlib import Path

import pytest

from vflkit import config, records
from vflkit.ops import pricing
from vflkit.config import project_root
from vflkit.errors import ConfigError, DivergenceError
from vflkit.methods import RunConfig
from vflkit.methods.multi_vfl import MultiVFLConfig
from vflkit.training.one_shot import OneShotRun
from vflkit.training.tiles import TilesRun

GIT = {"git_commit": "abc1234", "vflkit_modified": False}


def _cfg(**changes):
    base = dict(paper="demo", dataset="mnist", method="splitnn", models=("mlp",) * 4, lr=0.05, n_train=256,
                n_test=64, epochs=1, batch_size=64, embedding_dim=16)
    return RunConfig(**{**base, **changes})


class FakeTrainer:
    """Counts its calls; returns a tiny result (optionally a diverged one)."""

    def __init__(self, diverged=None):
        self.calls = 0
        self.diverged = diverged

    def __call__(self, run, **kw):
        self.calls += 1
        return {"final": {"active": {"test_accuracy": 0.5}}, "diverged": self.diverged}


@pytest.fixture(autouse=True)
def fixed_git(monkeypatch):
    """Records made here name a fixed, clean commit (the worktree may be dirty)."""
    monkeypatch.setattr(records, "git_state", lambda: dict(GIT))


def _one(run, tmp_path, train=None, **kw):
    return records.run_one(run, train=train or FakeTrainer(), profile="smoke", device="cpu", results=tmp_path,
                           progress=False, **kw)


# --------------------------------------------------------------------------- records


@pytest.mark.parametrize("content, reason", [
    ("{\"key\": ", "not valid JSON"),
    ("[1, 2]", "holds a JSON list"),
    ("{\"key\": \"x\"}", "lacks the record fields"),
])
def test_a_broken_record_is_moved_aside_and_recomputed(tmp_path, content, reason):
    run = _cfg()
    path = records.record_path(run, "smoke", tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    train = FakeTrainer()
    with pytest.warns(UserWarning, match=reason + ".*moved it to " + path.name + ".bad"):
        rec = _one(run, tmp_path, train)
    assert train.calls == 1 and rec["key"] == run.key
    assert path.with_name(path.name + ".bad").read_text() == content
    assert records.check_record(path, run, "smoke") == rec


def test_a_record_without_final_scores_is_broken_not_reused(tmp_path):
    """A file with the whole envelope but no final scores (a hand edit, another tool's file) is
    not a finished run: it is moved aside and the run recomputed, not reused to fail later
    with KeyError: 'final' (R07)."""
    run = _cfg()
    rec = _one(run, tmp_path)
    path = records.record_path(run, "smoke", tmp_path)
    del rec["final"]
    path.write_text(json.dumps(rec))
    assert records.record_problem(path, key=run.key) is not None and not records.is_valid_record(path)
    train = FakeTrainer()
    with pytest.warns(UserWarning, match="lacks the run's final scores.*moved it to"):
        again = _one(run, tmp_path, train)
    assert train.calls == 1 and again["final"] == {"active": {"test_accuracy": 0.5}}
    assert records.is_valid_record(path, key=run.key, profile="smoke")


def test_each_broken_record_is_kept_as_evidence(tmp_path):
    """A second broken file at one key goes to ``.bad.2``: the first ``.bad`` is not overwritten (R10)."""
    run = _cfg()
    path = records.record_path(run, "smoke", tmp_path)
    path.parent.mkdir(parents=True)
    for content in ("first broken", "second broken"):
        path.write_text(content)
        with pytest.warns(UserWarning, match="moved it to"):
            _one(run, tmp_path, force=False)
        path.unlink()
    assert path.with_name(path.name + ".bad").read_text() == "first broken"
    assert path.with_name(path.name + ".bad.2").read_text() == "second broken"


def test_another_runs_record_is_never_returned(tmp_path):
    """A record copied under another run's name, or with its config edited, is not that run's."""
    a, b = _cfg(seed=0), _cfg(seed=1)
    rec_a = _one(a, tmp_path)
    path_b = records.record_path(b, "smoke", tmp_path)
    path_b.write_text(json.dumps(rec_a))
    train = FakeTrainer()
    with pytest.warns(UserWarning, match="holds the record of key"):
        rec_b = _one(b, tmp_path, train)
    assert train.calls == 1 and rec_b["config"]["seed"] == 1
    # same key, someone else's config
    forged = {**rec_b, "config": {**rec_b["config"], "epochs": 7}}
    path_b.write_text(json.dumps(forged))
    with pytest.warns(UserWarning, match="another run's config"):
        assert _one(b, tmp_path)["config"]["epochs"] == 1


def test_load_record_names_a_broken_file_and_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    runs = [_cfg(seed=0), _cfg(seed=1)]
    for r in runs:
        _one(r, tmp_path)
    bad = records.record_path(runs[1], "smoke", tmp_path)
    bad.write_text("{truncated")
    with pytest.raises(ConfigError, match="not valid JSON.*delete it") as err:
        records.load_record(runs[1], "smoke", tmp_path)
    msg = str(err.value)
    assert not isinstance(err.value, json.JSONDecodeError)
    assert str(bad) in msg and "remake" in msg and "\n" not in msg
    assert bad.exists()  # loading never moves or trains


def _set_environment(run, tmp_path, **env):
    """Edit the environment of ``run``'s record in ``tmp_path`` (as if other code had made it)."""
    path = records.record_path(run, "smoke", tmp_path)
    rec = json.loads(path.read_text())
    rec["environment"].update(env)
    for k in [k for k, v in env.items() if v is None]:
        del rec["environment"][k]
    path.write_text(json.dumps(rec))


def test_a_record_of_another_results_version_or_uncommitted_code_is_named_once_per_call(tmp_path, monkeypatch):
    """The reuse warning names, in one line, the records of an older results version of their
    family and those made with uncommitted changes to vflkit/; the others reuse quietly."""
    runs = [_cfg(seed=s) for s in range(4)]
    records.run_many(runs, train=FakeTrainer(), profile="smoke", device="cpu", results=tmp_path, progress=False)
    rec = records.load_record(runs[0], "smoke", tmp_path)
    assert rec["environment"]["results_version"] == records.RESULTS_VERSION["split"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # records of this very code reuse quietly
        records.run_many(runs, train=FakeTrainer(), profile="smoke", device="cpu", results=tmp_path,
                         progress=False)
    monkeypatch.setitem(records.RESULTS_VERSION, "split", 3)
    _set_environment(runs[0], tmp_path, results_version=2, git_commit="fedcba9")
    _set_environment(runs[1], tmp_path, results_version=3, vflkit_modified=True)
    _set_environment(runs[2], tmp_path, results_version=3, git_commit="0123456")  # another commit, same version
    _set_environment(runs[3], tmp_path, results_version=3)
    with pytest.warns(UserWarning, match="2 of 4 reused records may not be what this code computes") as caught:
        records.run_many(runs, train=FakeTrainer(), profile="smoke", device="cpu", results=tmp_path,
                         progress=False)
    named = [str(w.message) for w in caught if "may not be what" in str(w.message)]
    assert len(named) == 1 and "\n" not in named[0]
    assert "1 of the split family's results version 2 (now 3)" in named[0]
    assert "1 made with uncommitted changes to vflkit/" in named[0]
    assert runs[0].key in named[0] and runs[1].key in named[0] and runs[2].key not in named[0]
    assert "another results version" in named[0]  # the message says when it is given


def test_a_record_made_before_the_results_version_field_is_of_the_first_version(tmp_path, monkeypatch):
    """Records without ``results_version`` (every committed one made before it) count as the
    first version: quiet while the family is at it, named once the family's version is raised."""
    run = _cfg()
    _one(run, tmp_path)
    _set_environment(run, tmp_path, results_version=None, git_commit="fedcba9")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _one(run, tmp_path)
    monkeypatch.setitem(records.RESULTS_VERSION, "split", records.FIRST_RESULTS_VERSION + 1)
    with pytest.warns(UserWarning, match=f"split family's results version 1 \\(now 2\\): {run.key}"):
        _one(run, tmp_path)


def test_every_family_has_a_results_version():
    """Each protocol family names its results version, and each run class maps to its family."""
    from vflkit.study import FAMILIES, run_class

    assert set(records.RESULTS_VERSION) == set(FAMILIES)
    assert all(isinstance(v, int) and v >= records.FIRST_RESULTS_VERSION for v in records.RESULTS_VERSION.values())
    for family in FAMILIES:
        assert records.run_family(run_class(family).__new__(run_class(family))) == family


def test_committed_quick_records_of_every_study_reuse_without_a_warning():
    """On a fresh clone every committed quick record is reused quietly: they were made at older
    commits, but at their family's current results version (tests/test_committed_records_rerun.py
    checks that they still compute the same)."""
    from vflkit import studies
    from vflkit.study import FAMILIES

    root = project_root() / "results"
    train = FakeTrainer()
    seen = 0
    for study in studies.studies():
        runs = [r for r in study.runs("quick") if records.record_path(r, "quick", root).exists()]
        assert runs, f"no committed quick record of {study.name}"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            records.run_many(runs, train=train, profile="quick", device="cpu", results=root, progress=False,
                             on_divergence=FAMILIES[study.family].on_divergence)
        reuse = [str(w.message) for w in caught if "reused records" in str(w.message)]
        assert not reuse, f"{study.name}: {reuse[0][:300]}"
        seen += len(runs)
    assert train.calls == 0 and seen > 100


def test_recompute_before_a_commit_remakes_older_records(tmp_path):
    run = _cfg()
    _one(run, tmp_path)
    path = records.record_path(run, "smoke", tmp_path)
    train = FakeTrainer()
    _one(run, tmp_path, train, recompute_before="HEAD")  # finished just now: newer than HEAD
    assert train.calls == 0
    rec = json.loads(path.read_text())
    rec["finished"] = "2000-01-01T00:00:00+0000"
    path.write_text(json.dumps(rec))
    _one(run, tmp_path, train, recompute_before="HEAD")
    assert train.calls == 1 and json.loads(path.read_text())["finished"] > "2001"
    records.run_many([run], train=train, profile="smoke", device="cpu", results=tmp_path, progress=False,
                     recompute_before="HEAD")
    assert train.calls == 1
    with pytest.raises(ConfigError, match="not a commit of this checkout"):
        _one(run, tmp_path, train, recompute_before="no-such-commit-xyz")
    with pytest.raises(ConfigError, match="must be a commit hash or tag"):
        _one(run, tmp_path, train, recompute_before="--all")


def test_stale_temporaries_of_a_killed_writer_are_cleaned(tmp_path):
    run = _cfg()
    folder = records.record_path(run, "smoke", tmp_path).parent
    folder.mkdir(parents=True)
    dead = 2**22 - 3  # above any pid this machine hands out
    stale = folder / f".{run.key}.json.tmp{dead}-1"
    stale.write_text("{half a rec")
    _one(run, tmp_path)
    assert not stale.exists() and records.check_record(folder / f"{run.key}.json", run, "smoke")


def test_an_unwritable_results_folder_fails_before_training(tmp_path):
    blocker = tmp_path / "results"
    blocker.write_text("a file, not a folder")
    train = FakeTrainer()
    with pytest.raises(ConfigError, match=r"results folder .* is not writable.*VFLKIT_RESULTS") as err:
        records.run_many([_cfg(seed=0), _cfg(seed=1)], train=train, profile="smoke", device="cpu",
                         results=blocker, progress=False)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="VFLKIT_RESULTS"):
        _one(_cfg(), blocker, train)
    assert train.calls == 0


def test_a_full_disk_is_a_clear_error_before_training(tmp_path, monkeypatch):
    """An empty probe file fits on a full disk; the free space is checked too, before training,
    with an error that says how much is needed and where (F14)."""
    from collections import namedtuple

    from vflkit import files
    from vflkit.errors import DiskSpaceError

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(files.shutil, "disk_usage", lambda p: usage(2**30, 2**30 - 4096, 4096))
    train = FakeTrainer()
    with pytest.raises(DiskSpaceError, match=r"needs about 64.0 MiB free in .*only 0.0 MiB is free") as err:
        _one(_cfg(), tmp_path, train)
    assert train.calls == 0 and isinstance(err.value, OSError) and "\n" not in str(err.value)


def test_a_record_that_cannot_be_written_after_training_is_kept(tmp_path, monkeypatch):
    """The disk fills while a run trains: the record write fails, but the trained result is not
    lost: it is written under the temporary folder and the error carries it and says where (F14)."""
    import errno

    from vflkit.errors import RecordWriteError

    monkeypatch.setattr(records.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    real = records.write_json_atomic

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(records, "write_json_atomic", full)
    run = _cfg()
    train = FakeTrainer()
    with pytest.raises(RecordWriteError, match="could not be written to .*No space left.*saved to .*move that file") as err:
        _one(run, tmp_path / "results", train)
    assert train.calls == 1 and err.value.record["final"] == {"active": {"test_accuracy": 0.5}}
    saved = Path(err.value.saved_to)
    assert saved.is_relative_to(tmp_path / "tmp") and json.loads(saved.read_text()) == err.value.record
    # moved into place, the saved record is the run's: nothing is retrained
    monkeypatch.setattr(records, "write_json_atomic", real)
    path = records.record_path(run, "smoke", tmp_path / "results")
    saved.replace(path)
    assert _one(run, tmp_path / "results", train) == err.value.record and train.calls == 1
    import pickle

    again = pickle.loads(pickle.dumps(err.value))  # a worker's error reaches the scheduler whole
    assert again.record == err.value.record and again.saved_to == err.value.saved_to


def test_a_read_only_folder_with_a_dead_writers_temporary_still_reads_its_records(tmp_path, monkeypatch):
    """clean_stale_tmp is housekeeping: a temporary it cannot remove (a read-only results folder)
    is left, and the finished record is still reused (F16)."""
    run = _cfg()
    first = _one(run, tmp_path)
    folder = records.record_path(run, "smoke", tmp_path).parent
    stale = folder / f".{run.key}.json.tmp{2**22 - 3}-1"
    stale.write_text("{half")
    real_unlink = Path.unlink

    def read_only(self, missing_ok=False):
        if self.parent == folder:
            raise OSError(30, "Read-only file system", str(self))
        return real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", read_only)
    train = FakeTrainer()
    assert _one(run, tmp_path, train) == first and train.calls == 0 and stale.exists()


def test_results_may_be_a_str(tmp_path):
    rec = _one(_cfg(), str(tmp_path))
    assert records.record_path(_cfg(), "smoke", str(tmp_path)) == tmp_path / "smoke" / "demo" / f"{rec['key']}.json"


def test_a_diverged_record_is_not_handed_to_a_raise_run(tmp_path):
    runs = [_cfg(seed=0), _cfg(seed=1)]
    made = records.run_many(runs[:1], train=FakeTrainer(diverged={"epoch": 1, "step": 3, "message": "loss nan"}),
                            profile="smoke", device="cpu", results=tmp_path, progress=False, on_divergence="record")
    assert made[0]["diverged"]["epoch"] == 1
    train = FakeTrainer()
    with pytest.raises(DivergenceError, match="diverged \\(loss nan\\).*on_divergence='record'"):
        records.run_many(runs, train=train, profile="smoke", device="cpu", results=tmp_path, progress=False)
    assert train.calls == 0  # refused before the other run trained
    with pytest.raises(DivergenceError, match="force=True"):
        _one(runs[0], tmp_path)
    assert _one(runs[0], tmp_path, on_divergence="record")["diverged"]["step"] == 3


# --------------------------------------------------------------------------- divergence


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_vfedmh_divergence_inside_train_step_is_recorded(tmp_path, monkeypatch, backend):
    """A VFedMH passive party whose embedding turns NaN makes the blinded encoder refuse it
    (NonFiniteEmbeddingError) at that step; on_divergence='record' records it. The host ring
    (numpy, the CPU's default) refuses it inside train_step; the device ring (torch, a GPU's)
    leaves its check on the device, read after the step with that step's losses."""
    from vflkit import secure
    from vflkit.methods.vfedmh import VFedMH
    from vflkit.training import split

    real = VFedMH.train_step
    calls = {"n": 0}

    def poisoned(self, ids):
        calls["n"] += 1
        if calls["n"] == 2:  # a passive party's weights blow up to NaN
            for p in self.passive[0].models["model"].parameters():
                p.data.fill_(float("nan"))
        return real(self, ids)

    monkeypatch.setattr(VFedMH, "train_step", poisoned)
    monkeypatch.setattr(VFedMH, "ring_backend", backend)
    cfg = _cfg(method="vfedmh", options={"blinding": True}, epochs=2)
    with pytest.raises(secure.NonFiniteEmbeddingError):
        split.run(cfg, profile="smoke", device="cpu", results=tmp_path, progress=False)
    calls["n"] = 0
    rec = split.run(cfg, profile="smoke", device="cpu", results=tmp_path, progress=False, on_divergence="record",
                    force=True)
    assert rec["diverged"]["epoch"] == 1 and rec["diverged"]["step"] == 1
    # steps_run counts the steps that sent all their messages (VFedMH's 4 rounds each): the first
    # only where the second was refused inside train_step; both where it was refused after it
    steps = 1 if backend == "numpy" else 2
    assert rec["diverged"]["steps_run"] == steps and rec["comm"]["per_epoch"][-1]["rounds"] == 4 * steps
    # the encoder's error, not the NaN loss's: a step's ring checks are read before its losses
    assert "blind (passive party 1) got NaN or infinite embedding values" in rec["diverged"]["message"]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_vfedmh_finite_blow_up_beyond_the_ring_is_recorded(tmp_path, monkeypatch, backend):
    """A passive party at lr 1e8 sends finite embeddings far beyond the ring's limit (~1e14 >
    1.4e11) before its loss turns NaN: a divergence, recorded in record mode, not a ConfigError
    telling the user to change scale_bits. A narrow ring (scale_bits=52, limit 2) with normal
    embeddings stays a configuration error, in record mode too. Alike on the host ring and on
    the device ring (whose checks the trainer reads after the step)."""
    from vflkit import secure
    from vflkit.methods.vfedmh import VFedMH
    from vflkit.training import split

    monkeypatch.setattr(VFedMH, "ring_backend", backend)

    cfg = _cfg(method="vfedmh", lr=(0.05, 1e8, 0.05, 0.05), batch_size=32)
    with pytest.raises(secure.EmbeddingOverflowError, match="the model diverged"):
        split.run(cfg, profile="smoke", device="cpu", results=tmp_path, progress=False)
    rec = split.run(cfg, profile="smoke", device="cpu", results=tmp_path, progress=False, on_divergence="record")
    assert rec["diverged"] and "the model diverged" in rec["diverged"]["message"]
    assert "scale_bits" not in rec["diverged"]["message"].split(":")[-1]  # not advice to change the ring
    narrow = _cfg(method="vfedmh", options={"scale_bits": 52}, batch_size=32)
    with pytest.raises(ConfigError, match="use fewer scale_bits") as err:
        split.run(narrow, profile="smoke", device="cpu", results=tmp_path, progress=False, on_divergence="record")
    assert not isinstance(err.value, DivergenceError)


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize("changes, match", [
    ({"lr": "0.05"}, "lr must be a positive number"),
    ({"lr": float("nan")}, "lr must be a finite number > 0"),
    ({"lr": float("inf")}, "lr must be a finite number > 0"),
    ({"lr": -0.1}, "lr must be a finite number > 0"),
    ({"lr": 0}, "lr must be a finite number > 0"),
    ({"lr": True}, "lr must be a positive number"),
    ({"lr": (0.1, 0.1, float("nan"), 0.1)}, r"lr\[2\] must be a finite number"),
    ({"epochs": 2.0}, "epochs must be an integer"),
    ({"epochs": True}, "epochs must be an integer"),
    ({"batch_size": "128"}, "batch_size must be an integer"),
    ({"n_train": 10.5}, "n_train must be an integer >= 1 or None"),
    ({"seed": 1.0}, "seed must be an integer"),
    ({"n_parties": 0, "models": "mlp"}, "n_parties must be an integer >= 1"),
    ({"n_parties": "4", "models": "mlp"}, "n_parties must be an integer"),
    ({"active": 1.0}, "active must be an integer"),
    ({"active": 4}, "active=4 is not a party index 0..3"),
    ({"models": ("mlp", "mlp", 3, "mlp")}, "models must be names"),
    ({"optimizers": "sdg"}, "Invalid optimizer 'sdg'; choose one of sgd"),
    ({"options": {"blinding": "no"}, "method": "vfedmh"}, "option blinding='no' of method 'vfedmh' must be True or False"),
    ({"options": {"bits": 3.5}, "method": "c_vfl"}, "option bits=3.5 of method 'c_vfl' must be an integer"),
    ({"options": ["blinding"]}, "options must be a dict"),
    ({"dataset": 3}, "dataset must be a non-empty name"),
    ({"el_pl": (1,)}, "el_pl must be two integers"),
])
def test_run_config_rejects_bad_fields_when_built(changes, match):
    with pytest.raises(ConfigError, match=match) as err:
        _cfg(**changes)
    assert "\n" not in str(err.value)


def test_numpy_numbers_are_plain_numbers_in_the_key():
    import numpy as np

    cfg = _cfg(seed=np.int64(2), epochs=np.int32(1), lr=np.float64(0.05))
    assert cfg.key == _cfg(seed=2).key and type(cfg.seed) is int and type(cfg.lr) is float


def test_names_are_normalised_before_hashing():
    assert _cfg(dataset=" MNIST ", method="SplitNN ").key == _cfg().key
    assert _cfg(dataset=" MNIST ").dataset == "mnist"
    assert MultiVFLConfig(dataset="MNIST").key == MultiVFLConfig().key


@pytest.mark.parametrize("cls, kw, match", [
    (MultiVFLConfig, {"local_lr": "1e-3"}, "local_lr must be a positive number"),
    (MultiVFLConfig, {"server_lr": float("nan")}, "server_lr must be a finite number"),
    (MultiVFLConfig, {"rounds": 2.0}, "rounds must be a positive integer"),
    (MultiVFLConfig, {"n_test": True}, "n_test must be a positive integer or None"),
    (MultiVFLConfig, {"disjoint": "no"}, "disjoint must be True or False"),
    (MultiVFLConfig, {"seed": "0"}, "seed must be an integer"),
])
def test_multi_vfl_config_rejects_bad_fields(cls, kw, match):
    with pytest.raises(ConfigError, match=match):
        cls(**kw)


def _one_shot(**kw):
    base = dict(kind="fig5", dataset="breast_cancer", method="apc_vfl_mse", n_aligned=100, n_active_features=5,
                seed=0)
    return OneShotRun(**{**base, **kw})


@pytest.mark.parametrize("kw, match", [
    ({"lr": float("inf")}, "lr must be a finite number"),
    ({"epochs": 1.5}, "epochs must be an integer"),
    ({"n_aligned": 100.0}, "n_aligned must be an integer"),
    ({"lam": -1}, "lam must be a finite number >= 0"),
    ({"val_fraction": 1.0}, "val_fraction must be below 1"),
    ({"n_active_features": 5.0}, "n_active_features must be an integer"),
    ({"method": " APC_VFL_MSE", "lr": "0.01"}, "lr must be a positive number"),
    # more aligned samples than the active participant holds: once clamped silently, recorded as asked
    ({"n_aligned": 5000}, r"n_aligned=5000 exceeds the 500 samples the active participant holds in breast_cancer"),
    ({"n_aligned": 501}, "choose 1..500"),
    ({"kind": "table2", "method": "splitnn", "n_aligned": 50}, "leaves no training samples"),
])
def test_one_shot_run_rejects_bad_fields(kw, match):
    with pytest.raises(ConfigError, match=match):
        _one_shot(**kw)


def test_apc_vfl_overrides_with_too_many_aligned_samples_are_an_error():
    """overrides={'aligned': {'breast_cancer': (5000, 100)}} trained on min(5000, 500) and
    recorded 5000 (S17): now refused before any run trains."""
    from vflkit.studies import apc_vfl

    with pytest.raises(ConfigError, match="n_aligned=5000 exceeds"):
        apc_vfl.configs("smoke", overrides={"aligned": {"breast_cancer": (5000, 100)}})
    assert _one_shot(n_aligned=500).n_aligned == 500


def _with_new_field(cls, name="new_knob", default=3):
    """``cls`` as it would be after someone adds a field with a default."""
    return dataclasses.make_dataclass(cls.__name__ + "Plus", [(name, int, dataclasses.field(default=default))],
                                      bases=(cls,), frozen=True, **({"kw_only": True} if cls is OneShotRun else {}))


@pytest.mark.parametrize("cls, make", [
    (RunConfig, lambda c, **kw: c(**{**dict(paper="demo", dataset="mnist", method="splitnn",
                                             models=("mlp",) * 4), **kw})),
    (MultiVFLConfig, lambda c, **kw: c(**kw)),
    (OneShotRun, lambda c, **kw: c(**{**dict(kind="fig5", dataset="breast_cancer", method="apc_vfl_mse",
                                             n_aligned=100, n_active_features=5, seed=0), **kw})),
])
def test_a_new_field_at_its_default_keeps_every_key(cls, make):
    plus = _with_new_field(cls)
    assert make(plus).key == make(cls).key
    assert make(plus, new_knob=4).key != make(cls).key
    assert make(plus, seed=1).key == make(cls, seed=1).key != make(cls).key
    # and a record made before the field existed is still that run's record
    assert records._same_config(make(plus), make(cls).to_dict())


def test_every_committed_record_has_the_key_its_config_gives():
    classes = {"vfedmh": RunConfig, "demo": RunConfig, "easter": RunConfig, "adptvfedconv": TilesRun,
               "multi_vfl": MultiVFLConfig, "apc_vfl": OneShotRun}
    paths = sorted((project_root() / "results").glob("*/*/*.json"))
    assert paths
    for path in paths:
        rec = json.loads(path.read_text())
        run = classes[path.parent.name].from_dict(rec["config"])
        assert run.key == rec["key"] == path.stem, path
        assert records.check_record(path, run, path.parent.parent.name) == rec


@pytest.mark.parametrize("seeds, match", [
    ([], "seeds is empty"),
    (3, "seeds must be a non-empty list"),
    ("012", "seeds must be a non-empty list"),
    ([0, 1.5], "seeds must be integers"),
    ([True], "seeds must be integers"),
    ([0, 0], r"lists seed\(s\) \[0\] more than once"),
    ((1, 2, 1, 2), r"seed\(s\) \[1, 2\] more than once"),
])
def test_check_seeds(seeds, match):
    with pytest.raises(ConfigError, match=match):
        config.check_seeds(seeds)
    assert config.check_seeds([0, 1]) == (0, 1)


def test_shared_override_validation():
    settings = {"epochs": 1, "seeds": (0,)}
    with pytest.raises(ConfigError, match=r"unknown overrides \['epoch'\]; valid: profile settings epochs, seeds"):
        config.apply_overrides(settings, {"epoch": 2})
    with pytest.raises(ConfigError, match="seeds is empty"):
        config.apply_overrides(settings, {"seeds": []})
    with pytest.raises(ConfigError, match="seeds must be a non-empty list"):
        config.apply_overrides(settings, {"seeds": 0})
    with pytest.raises(ConfigError, match="overrides must be a dict"):
        config.apply_overrides(settings, [("epochs", 2)])
    assert config.apply_overrides(settings, {"seeds": [1, 2]})[0]["seeds"] == (1, 2)
    with pytest.raises(ConfigError, match="Invalid profile 'qiuck'; choose one of smoke, quick, paper"):
        config.check_profile("qiuck")
    with pytest.raises(ConfigError, match="Invalid profile"):
        config.check_profile(["quick"])


@pytest.mark.parametrize("study_name", ["vfedmh", "multi_vfl", "apc_vfl", "demo"])
def test_every_study_rejects_bad_parameters_before_any_work(study_name):
    """Through the shared validators (check_profile, apply_overrides): one-line errors."""
    import importlib

    study = importlib.import_module(f"vflkit.studies.{study_name}")
    for kwargs, match in [
        (dict(profile="qiuck"), "Invalid profile 'qiuck'; choose one of smoke, quick, paper"),
        (dict(profile="smoke", overrides={"epoch": 1}), r"unknown overrides \['epoch'\]; valid: profile settings"),
        (dict(profile="smoke", overrides={"seeds": []}), "seeds is empty"),
        (dict(profile="smoke", overrides={"seeds": 3}), "seeds must be a non-empty list"),
        (dict(profile="smoke", overrides={"seeds": [0.5]}), "seeds must be integers"),
    ]:
        profile = kwargs.pop("profile")
        with pytest.raises(ConfigError, match=match) as err:
            study.configs(profile, **kwargs)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("study_name", ["vfedmh", "easter", "multi_vfl", "apc_vfl", "adptvfedconv", "demo"])
def test_a_seed_given_twice_is_an_error(study_name):
    """[0, 0] would be one run counted as two seeds that agree exactly (Table II's n_runs 2,
    std 0); as the seeds argument (papermill's -y 'seeds: [0, 0]') and in overrides."""
    import importlib

    study = importlib.import_module(f"vflkit.studies.{study_name}")
    with pytest.raises(ConfigError, match="more than once"):
        study.configs("smoke", seeds=[0, 0])
    with pytest.raises(ConfigError, match="more than once"):
        study.configs("smoke", overrides={"seeds": [0, 0]})
    # seeds in both places: neither silently wins
    with pytest.raises(ConfigError, match="seeds are given twice"):
        study.configs("smoke", seeds=[1], overrides={"seeds": [2]})


def test_overrides_of_the_wrong_shape_are_errors():
    """A string where a list is expected was iterated letter by letter (datasets 'm', 'n', ...);
    a list of names where a list of model sets is expected likewise ("Invalid model 'p'")."""
    from vflkit.studies import easter, vfedmh

    with pytest.raises(ConfigError, match=r"overrides\['datasets'\] must be a list like \['mnist'\], got 'mnist'"):
        vfedmh.configs("smoke", overrides={"datasets": "mnist"})
    with pytest.raises(ConfigError, match=r"overrides\['model_sets'\]\[0\] must be a list like .*got 'mlp'"):
        vfedmh.configs("smoke", overrides={"model_sets": ["mlp"]})
    with pytest.raises(ConfigError, match=r"overrides\['criteo_seeds'\] lists seed"):
        easter.configs("smoke", overrides={"criteo_seeds": [3, 3]})
    with pytest.raises(ConfigError, match="seeds are given twice"):
        easter.configs("smoke", seeds=[0], overrides={"criteo_seeds": [1]})
    # the right shapes still work (papermill passes lists)
    assert vfedmh.configs("smoke", overrides={"datasets": ["mnist"], "model_sets": [["mlp", "cnn"]]})["table2"]


def test_apc_vfl_notebook_checks_the_profile_before_reading_its_settings():
    """papermill -p profile fast: a ConfigError naming the valid profiles, not KeyError: 'fast'."""
    import nbformat

    from vflkit.studies import apc_vfl

    with pytest.raises(ConfigError, match="Invalid profile 'fast'"):
        apc_vfl.settings("fast")
    nb = nbformat.read(project_root() / "notebooks" / "apc_vfl.ipynb", as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    first = next(src for src in code if "study.configs(profile" in src)
    with pytest.raises(ConfigError, match="Invalid profile 'fast'"):
        exec(first, {"profile": "fast", "seeds": None, "overrides": {}, "device": "cpu", "display": print})


def test_a_notebook_run_outside_the_checkout_reads_the_checkouts_records(tmp_path, monkeypatch):
    """papermill --cwd outside the checkout (N13): project_root() is the checkout vflkit was
    imported from, so the paper section shows the committed paper records, not empty tables."""
    from vflkit import config
    from vflkit.studies import vfedmh

    root = project_root()
    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path)
    assert config.project_root() == root == config.package_checkout()
    assert config.figures_dir() == root / "figures"
    _, found = vfedmh.STUDY.recorded("paper")
    assert found, "the committed Table II paper records were not found from outside the checkout"


def test_paper_profile_with_no_paper_record(tmp_path, monkeypatch, outside_checkout):
    """With no checkout around (an installed wheel, run elsewhere) no paper record is found: the
    paper section shows empty tables, not a pandas KeyError from report.provenance([])."""
    from vflkit import report
    from vflkit.studies import vfedmh

    assert list(report.provenance([]).columns) == ["commits", "vflkit_modified", "device", "cpu", "torch",
                                                   "runs", "first_finished", "last_finished"]
    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path / "results"))
    assert project_root() == tmp_path
    _, found = vfedmh.STUDY.recorded("paper")
    assert found == [] and len(pricing.pending(vfedmh.STUDY, "paper", label="Table II"))
    assert report.draw(vfedmh.STUDY, "Table II", "paper", root=tmp_path, display=False).empty
    assert report.provenance(found).empty


def test_multi_vfl_divergence_is_recorded(tmp_path, monkeypatch):
    """on_divergence='record' holds for Multi-VFL too: an absurd local learning rate stops the
    run at the round it diverged, recorded, instead of stopping the study."""
    import torch

    from vflkit.data import ImageData
    from vflkit.training import multi_owner

    g = torch.Generator().manual_seed(0)
    y_train, y_test = torch.arange(600) % 10, torch.arange(40) % 10
    images = lambda y: torch.randint(0, 255, (len(y), 1, 28, 28), dtype=torch.uint8, generator=g)  # noqa: E731
    data = ImageData("tiny", images(y_train), y_train, images(y_test), y_test, tuple(map(str, range(10))),
                     (0.2,), (0.3,))
    monkeypatch.setattr(multi_owner, "dataset", lambda name: data)
    cfg = MultiVFLConfig(rounds=3, samples_per_owner=16, batch_size=8, n_test=20, local_lr=1e30)
    with pytest.raises(DivergenceError, match="training diverged"):
        multi_owner.run(cfg, profile="smoke", device="cpu", results=tmp_path, progress=False)
    rec = multi_owner.run(cfg, profile="smoke", device="cpu", results=tmp_path, progress=False,
                          on_divergence="record")
    assert rec["diverged"]["round"] >= 1 and "diverged" in rec["diverged"]["message"]
    assert rec["history"][-1]["round"] == rec["diverged"]["round"] and len(rec["history"]) <= 3


def test_one_shot_divergence_is_recorded(tmp_path):
    """on_divergence='record' holds for the one-shot family: a diverging autoencoder gives a
    record with NaN metrics that says why, instead of stopping the study."""
    from vflkit.training import one_shot

    cfg = _one_shot(lr=1e30, epochs=3, folds=2)
    with pytest.raises(DivergenceError, match="lower lr"):
        one_shot.run(cfg, profile="smoke", results=tmp_path, progress=False)
    rec = one_shot.run(cfg, profile="smoke", results=tmp_path, progress=False, on_divergence="record")
    assert "lower lr" in rec["diverged"]["message"] and math.isnan(rec["final"]["accuracy"])


def test_a_diverged_runs_record_holds_nan_as_its_final_scores(tmp_path):
    """V06: a diverged run's record held its NaN model's arg-max (about 0.1) as its final
    accuracy, a number a reader could take for a measurement; its final scores are now NaN
    (its history keeps what was measured), and the tables, the sentence worded from them and
    the diverged-runs list take such a record without error."""
    from vflkit import analysis
    from vflkit.studies import demo, vfedmh
    from vflkit.training import split

    cfg = _cfg(lr=1e6, optimizers="sgd", epochs=2)
    rec = split.run(cfg, profile="smoke", device="cpu", results=tmp_path, progress=False, on_divergence="record")
    assert rec["diverged"]["epoch"] == 1
    assert set(rec["final"]) == {"active"} and set(rec["final"]["active"]) == {"test_accuracy"}
    assert math.isnan(rec["final"]["active"]["test_accuracy"])
    assert math.isfinite(rec["history"][-1]["test_accuracy"])  # what the broken model scored, as measured
    assert math.isnan(records.load_record(cfg, "smoke", tmp_path)["final"]["active"]["test_accuracy"])
    local = split.run(cfg.replace(method="local", lr=0.05), profile="smoke", device="cpu", results=tmp_path,
                      progress=False)
    table = demo.summary([rec, local])
    assert math.isnan(table.loc[table["method"] == "splitnn", "test_accuracy_pct"].item())
    assert "SplitNN reaches nan %" in demo.comparison(table)
    assert len(vfedmh.diverged_runs([rec, local])) == 1
    pair = analysis.variant_pairs([(local, rec)], labels=("a", "b"), metric="test_accuracy")
    assert math.isnan(pair["difference (points)"].item())


def test_a_diverged_epochs_loss_is_the_mean_over_the_batches_seen(tmp_path, monkeypatch):
    """Two batches of loss 1.0, then a divergence: the epoch's loss is 1.0, not 2 x 64 / 256."""
    from vflkit.methods.splitnn import SplitNN
    from vflkit.training import split

    calls = {"n": 0}

    def step(self, ids):
        calls["n"] += 1
        if calls["n"] == 3:
            raise DivergenceError("the loss of active is nan: training diverged")
        return {"active": 1.0}

    monkeypatch.setattr(SplitNN, "train_step", step)
    rec = split.run(_cfg(), profile="smoke", device="cpu", results=tmp_path, progress=False,
                    on_divergence="record")
    assert rec["diverged"]["step"] == 2 and rec["history"][-1]["loss"] == 1.0
    assert rec["diverged"]["steps_run"] == 2  # raised inside the step: it did not return


def test_unknown_model_name_is_an_error_when_the_config_is_built():
    from vflkit.errors import ConfigError
    from vflkit.methods import RunConfig

    with pytest.raises(ConfigError, match="Invalid model 'mlpp'"):
        RunConfig(paper="demo", dataset="mnist", method="splitnn", models=("mlpp",) * 4)


@pytest.mark.parametrize("study", ["vfedmh", "multi_vfl", "apc_vfl", "demo"])
def test_study_seeds_argument_is_validated(study):
    import importlib

    from vflkit.errors import ConfigError

    mod = importlib.import_module(f"vflkit.studies.{study}")
    for bad in ([], 3, [0.5], "0"):
        with pytest.raises(ConfigError):
            mod.configs("quick", seeds=bad)


def test_one_experiment_one_key_and_out_of_range_fields():
    """lr=1 and lr=1.0, a numpy float32 rate and its decimal, one optimizer and the same one per
    party are one run (C07, C10, C11, C41); a seed or embedding size torch cannot take is a
    ConfigError, not an error inside torch (C24, C27)."""
    import numpy as np

    base = dict(paper="demo", dataset="mnist", method="splitnn", models="mlp")
    key = lambda **kw: RunConfig(**{**base, **kw}).key  # noqa: E731
    assert key(lr=1) == key(lr=1.0)
    assert key(lr=np.float32(0.05)) == key(lr=0.05) and RunConfig(**base, lr=np.float32(0.05)).lr == 0.05
    assert key(lr=tuple(np.float32(x) for x in (0.05, 0.01, 0.05, 0.05))) == key(lr=(0.05, 0.01, 0.05, 0.05))
    assert key(optimizers=("sgd",) * 4) == key(optimizers="sgd") and key(lr=(0.05,) * 4) == key(lr=0.05)
    with pytest.raises(ConfigError, match="seed must fit in 64 bits"):
        RunConfig(**base, seed=2**64)
    with pytest.raises(ConfigError, match="embedding_dim=1000000000000 is beyond"):
        RunConfig(**base, embedding_dim=10**12)


def test_cli_and_data_options_fail_clearly(tmp_path, monkeypatch, capsys):
    """A vflkit error on the command line is its message without a traceback; a missing notebook,
    a cache variable naming a file and verify='no' are clear errors (L01, L15, D32, D28)."""
    from vflkit import data, study

    with pytest.raises(SystemExit) as stop:  # argparse's usage error, before anything runs
        study.cli(["--profile", "smoke", "--status", "notebooks/nope.ipynb"])
    assert stop.value.code == 2 and "no such notebook: notebooks/nope.ipynb" in capsys.readouterr().err
    root, outside = project_root(), tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.chdir(outside)  # no notebooks here (vflkit as an installed wheel): an error, not
    monkeypatch.setattr(config, "package_checkout", lambda: None)  # "every run is recorded"
    with pytest.raises(SystemExit) as stop:
        study.cli(["--profile", "smoke", "--status"])
    assert stop.value.code == 2 and "no notebooks under" in capsys.readouterr().err
    monkeypatch.chdir(root)
    monkeypatch.setattr(study, "_print_status", lambda *a, **k: (_ for _ in ()).throw(ConfigError("bad thing; do X")))
    assert study.cli(["--status", "--profile", "smoke", "notebooks/demo.ipynb"]) == 2
    err = capsys.readouterr().err
    assert "ConfigError: bad thing; do X" in err and "Traceback" not in err
    afile = tmp_path / "file"
    afile.write_text("")
    monkeypatch.setenv("VFLKIT_CACHE", str(afile))
    with pytest.raises(ConfigError, match="cannot be used"):
        config.cache_dir()
    with pytest.raises(ConfigError, match="verify must be True or False, got 'no'"):
        data.load_dataset("mnist", verify="no")


def test_a_bad_device_name_is_refused_even_when_every_run_is_recorded():
    """A device name torch does not know is a ConfigError before any record is looked up: the
    demo's quick runs are all recorded, and 'tpu' or 'gpu' used to return their records."""
    from vflkit.studies import demo

    for bad in ("tpu", "gpu"):
        with pytest.raises(ConfigError, match=f"Invalid device '{bad}'"):
            demo.STUDY.run("quick", device=bad)
    assert len(demo.STUDY.run("quick", device="cpu")) > 0  # the same call with a real device loads them
