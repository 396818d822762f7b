"""Tests for vflkit.training.split (with the record store): configs, records, resume,
divergence, and that VFL learns."""

import json

import pytest
from helpers import kill_at_first_checkpoint
import torch

from vflkit import config, records
from vflkit.errors import ConfigError, DivergenceError
from vflkit.methods import RunConfig, get_method, make_optimizer
from vflkit.records import record_path
from vflkit.training import split
from vflkit.training.split import run


def _config(**changes):
    base = dict(paper="demo", dataset="mnist", method="splitnn", models=("mlp",) * 4, lr=0.05,
                n_train=512, n_test=256, epochs=1, batch_size=128, embedding_dim=32)
    base.update(changes)
    return RunConfig(**base)


def test_config_key_is_stable_and_sensitive():
    """The key depends on every field that decides a result and on nothing else."""
    a, b = _config(), _config()
    assert a.key == b.key and len(a.key) == 16
    assert _config(seed=1).key != a.key
    assert _config(lr=0.01).key != a.key
    assert RunConfig.from_dict(json.loads(json.dumps(a.to_dict()))).key == a.key


def test_config_rejects_bad_values():
    """Unknown keys, wrong per-party lengths, unknown papers/partitions/profiles are errors."""
    with pytest.raises(ConfigError, match="unknown RunConfig keys \\['epoch'\\]"):
        RunConfig.from_dict({**_config().to_dict(), "epoch": 3})
    with pytest.raises(ConfigError, match="models has 3 entries but there are 4 parties"):
        _config(models=("mlp",) * 3)
    with pytest.raises(ConfigError, match="Invalid paper.*paper=.demo. for runs of your own"):
        _config(paper="vfedmhh")
    with pytest.raises(ConfigError, match="Invalid partition"):
        _config(partition="diagonal")
    with pytest.raises(ConfigError, match="Invalid profile 'fast'"):
        config.check_profile("fast")
    with pytest.raises(ConfigError, match="Invalid method 'splitn'"):
        get_method("splitn")
    with pytest.raises(ConfigError, match="Invalid optimizer 'sdg'; choose one of sgd, sgd_momentum"):
        make_optimizer("sdg", [torch.nn.Parameter(torch.zeros(1))], 0.1)


def test_unknown_method_option_rejected():
    """A method refuses options it does not know instead of ignoring them."""
    with pytest.raises(ConfigError, match="unknown options \\['compression'\\] for method 'splitnn'"):
        run(_config(options={"compression": "topk"}), profile="smoke", device="cpu", progress=False)


def test_run_writes_record_and_resumes(tmp_path):
    """A finished run is written once; running the same config again loads it instead."""
    cfg = _config()
    rec = run(cfg, profile="smoke", device="cpu", results=tmp_path, progress=False)
    path = record_path(cfg, "smoke", tmp_path)
    assert path.exists() and rec["key"] == cfg.key
    env = rec["environment"]
    assert env["device"] == "cpu" and "torch" in env and env["cpu"]
    assert isinstance(env["vflkit_modified"], bool)  # this test runs inside the git checkout
    assert [h["epoch"] for h in rec["history"]] == [1] and rec["history"][0]["elapsed_s"] > 0
    assert rec["comm"]["total"]["rounds"] == 2 * 4  # 512/128 steps, embeddings up + gradients down
    mtime = path.stat().st_mtime_ns
    again = run(cfg, profile="smoke", device="cpu", results=tmp_path, progress=False)
    assert path.stat().st_mtime_ns == mtime and again == rec


def test_divergence_names_party_epoch_and_batch(tmp_path):
    """A NaN/exploding loss stops the run with an error naming the party, epoch and batch."""
    cfg = _config(lr=1e6, optimizers="sgd")
    with pytest.raises(DivergenceError, match=r"loss of active is .* at epoch 1, batch \d+"):
        run(cfg, profile="smoke", device="cpu", results=tmp_path, progress=False)
    assert not record_path(cfg, "smoke", tmp_path).exists()


def test_divergence_can_be_recorded_instead(tmp_path):
    """With on_divergence="record" the run stops at the diverging batch and its record says where."""
    cfg = _config(lr=1e6, optimizers="sgd")
    record = run(cfg, profile="smoke", device="cpu", results=tmp_path, progress=False, on_divergence="record")
    assert record["diverged"]["epoch"] == 1 and "training diverged" in record["diverged"]["message"]
    assert [h["epoch"] for h in record["history"]] == [1]
    assert record_path(cfg, "smoke", tmp_path).exists()
    with pytest.raises(ConfigError, match="on_divergence"):
        run(cfg, profile="smoke", results=tmp_path, force=True, on_divergence="ignore")


def test_splitnn_learns_beyond_the_active_strip(tmp_path):
    """On real MNIST strips, a minimal 4-party SplitNN beats the active party's strip alone."""
    common = dict(n_train=3000, n_test=1000, epochs=3, embedding_dim=64, lr=0.05, optimizers="sgd_momentum")
    local = run(_config(method="local", **common), profile="smoke", device="cpu", results=tmp_path, progress=False)
    split = run(_config(method="splitnn", **common), profile="smoke", device="cpu", results=tmp_path, progress=False)
    acc_local = local["final"]["active"]["test_accuracy"]
    acc_split = split["final"]["active"]["test_accuracy"]
    # the leftmost 28x7 strip holds little of a digit; all four strips hold the whole image
    assert acc_split > 0.85
    assert acc_split > acc_local + 0.2
    assert local["comm"]["total"]["messages"] == 0


def test_load_available_falls_back_to_the_projects_results(tmp_path, monkeypatch):
    """With VFLKIT_RESULTS pointing at a scratch folder, the committed records still load."""
    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path / "scratch"))
    project = tmp_path / "project"
    (project / "vflkit").mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    monkeypatch.chdir(project)
    cfg = _config()
    rec = run(cfg, profile="quick", device="cpu", results=project / "results", progress=False)
    assert records.load_available([cfg], profile="quick") == [rec]


class _Interrupt(Exception):
    pass


@pytest.mark.parametrize("method,models,options", [
    ("splitnn", ("mlp",) * 4, {}),
    ("vfedmh", ("mlp", "cnn", "mlp", "lenet"), {}),  # blinding keys are agreed afresh on resume
    ("c_vfl", ("mlp",) * 4, {}),  # its compression dither has its own generator
])
def test_interrupted_run_resumes_from_checkpoint_with_identical_record(tmp_path, monkeypatch, method, models, options):
    """A run stopped after epoch 2 of 3 continues from its checkpoint, not from scratch, and ends
    with the record of an uninterrupted run (metrics, losses and ledger)."""
    monkeypatch.setattr(split, "CHECKPOINT_EVERY_S", 0.0)  # after every epoch: a run here takes less
    cfg = _config(method=method, models=models, epochs=3, options=options, paper="vfedmh")
    whole = run(cfg, profile="smoke", results=tmp_path / "a", device="cpu", progress=False)

    calls = {"n": 0}
    real = split.evaluate

    def evaluate_then_die(method_obj, config):
        calls["n"] += 1
        if calls["n"] == 3:  # epoch 3's evaluation: epochs 1-2 are checkpointed
            raise _Interrupt
        return real(method_obj, config)

    monkeypatch.setattr(split, "evaluate", evaluate_then_die)
    with pytest.raises(_Interrupt):
        run(cfg, profile="smoke", results=tmp_path / "b", device="cpu", progress=False)
    path = record_path(cfg, "smoke", tmp_path / "b")
    assert not path.exists() and split.checkpoint_path(path).exists()

    trained: list[int] = []
    real_step = get_method(method).train_step

    def counting_step(self, ids):
        trained.append(self.parties[0].channel.epoch)
        return real_step(self, ids)

    monkeypatch.setattr(split, "evaluate", real)
    monkeypatch.setattr(get_method(method), "train_step", counting_step)
    resumed = run(cfg, profile="smoke", results=tmp_path / "b", device="cpu", progress=False)
    assert set(trained) == {3}, "the resumed run retrained epochs it had checkpointed"
    assert not split.checkpoint_path(path).exists()
    strip = lambda h: [{k: v for k, v in r.items() if k != "elapsed_s"} for r in h]  # noqa: E731
    assert strip(resumed["history"]) == strip(whole["history"])
    assert resumed["final"] == whole["final"]
    assert resumed["comm"]["total"] == whole["comm"]["total"]
    assert resumed["comm"]["per_epoch"] == whole["comm"]["per_epoch"]


def test_foreign_checkpoint_is_moved_aside(tmp_path):
    """A checkpoint that does not belong to the run is never resumed from."""
    cfg = _config(epochs=1)
    path = record_path(cfg, "smoke", tmp_path)
    ckpt = split.checkpoint_path(path)
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"not a checkpoint")
    with pytest.warns(UserWarning, match="ignoring checkpoint"):
        rec = run(cfg, profile="smoke", results=tmp_path, device="cpu", progress=False)
    assert rec["history"][0]["epoch"] == 1 and ckpt.with_name(ckpt.name + ".bad").exists()


def test_kill_9_mid_run_resumes_from_checkpoint_with_identical_record(tmp_path):
    """A run killed with SIGKILL (no chance to clean up) resumes from its last checkpoint."""
    import os
    import signal
    import subprocess
    import sys
    import time

    cfg = _config(method="vfedmh", models=("mlp", "cnn", "mlp", "lenet"), epochs=4, paper="vfedmh",
                  n_train=1024)
    # one thread everywhere: results are bit-identical only at one thread count (docs/profiles-and-scheduler.md)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    whole = run(cfg, profile="smoke", results=tmp_path / "a", device="cpu", progress=False)
    path = record_path(cfg, "smoke", tmp_path / "b")
    ckpt = split.checkpoint_path(path)
    code = ("import json, sys; from vflkit.methods import RunConfig; from vflkit.training import split; "
            "split.CHECKPOINT_EVERY_S = 0.0; run = split.run; "
            f"run(RunConfig.from_dict(json.loads({json.dumps(json.dumps(cfg.to_dict()))})), profile='smoke', "
            f"results=__import__('pathlib').Path({str(tmp_path / 'b')!r}), device='cpu', progress=False)")
    kill_at_first_checkpoint(code, ckpt, path)
    try:
        resumed = run(cfg, profile="smoke", results=tmp_path / "b", device="cpu", progress=False)
    finally:
        torch.set_num_threads(threads)
    strip = lambda h: [{k: v for k, v in r.items() if k != "elapsed_s"} for r in h]  # noqa: E731
    assert strip(resumed["history"]) == strip(whole["history"])
    assert resumed["comm"]["per_epoch"] == whole["comm"]["per_epoch"]


def test_deadline_checkpoints_and_stops(tmp_path):
    """A run whose next epoch would end after its deadline checkpoints and raises BudgetExhausted."""
    import time

    from vflkit.errors import BudgetExhausted

    cfg = _config(epochs=3)
    with pytest.raises(BudgetExhausted, match="rerun to resume"):
        run(cfg, profile="smoke", results=tmp_path, device="cpu", progress=False, deadline=time.time())
    path = record_path(cfg, "smoke", tmp_path)
    assert not path.exists() and split.checkpoint_path(path).exists()
    rec = run(cfg, profile="smoke", results=tmp_path, device="cpu", progress=False)
    assert [r["epoch"] for r in rec["history"]] == [1, 2, 3]


def test_losses_read_back_in_batches_catch_divergence_at_its_own_step():
    """On a GPU the trainer reads losses every SYNC_EVERY_CUDA steps; a bad loss is still
    reported at its own batch, and only the steps before it are counted."""
    window = split.LossWindow(epoch=2, limit=1e4, every=5)
    for step, v in enumerate([1.0, 2.0, 3.0]):
        assert window.add(step, 10, {"active": torch.tensor(v)}) == {}
    assert window.seen == 0  # nothing read back yet
    assert window.add(3, 10, {"active": torch.tensor(4.0)}) == {}
    failed = window.add(4, 10, {"active": torch.tensor(float("nan"))})
    assert list(failed) == [0] and isinstance(failed[0], DivergenceError) and "epoch 2, batch 4" in str(failed[0])
    assert failed[0].step == 4 and window.seen == 40 and window.sums == {"active": 100.0}


def test_a_loss_window_reads_each_run_of_a_pack_apart():
    """K runs' losses ([K] a step): a run that diverges is returned with its own step and counted
    no further; the others' sums go on, each as its run alone's."""
    window = split.LossWindow(epoch=1, limit=1e4, every=3, runs=3)
    window.add(0, 10, {"active": torch.tensor([1.0, 2.0, 3.0])})
    window.add(1, 10, {"active": torch.tensor([1.0, float("inf"), 3.0])})
    failed = window.add(2, 5, {"active": torch.tensor([1.0, 2.0, 1e5])})
    assert {k: e.step for k, e in failed.items()} == {1: 1, 2: 2}
    assert window.sums_of == [{"active": 25.0}, {"active": 20.0}, {"active": 60.0}] and window.seen_of == [25, 10, 20]


def test_tensor_and_float_losses_give_the_same_record(tmp_path, monkeypatch):
    """Methods return 0-d tensors (no per-step .item()); the record is the one a float return gave."""
    cfg = _config(epochs=1)
    a = run(cfg, profile="smoke", device="cpu", results=tmp_path / "a", progress=False)
    cls = get_method("splitnn")
    real = cls.train_step
    monkeypatch.setattr(cls, "train_step", lambda self, ids: {k: v.item() for k, v in real(self, ids).items()})
    b = run(cfg, profile="smoke", device="cpu", results=tmp_path / "b", progress=False)
    assert a["history"] == [{**h, "elapsed_s": a["history"][i]["elapsed_s"]} for i, h in enumerate(b["history"])]


def test_vfedmh_mask_prefetch_changes_nothing(tmp_path):
    """VFedMH generates the next blinding factors ahead on a thread: same masks, same record."""
    cfg = _config(method="vfedmh", models=("mlp", "lenet", "mlp", "lenet"), paper="vfedmh", n_train=384)
    off = cfg.replace(options={"mask_prefetch": False})
    a = run(cfg, profile="smoke", device="cpu", results=tmp_path / "a", progress=False)
    b = run(off, profile="smoke", device="cpu", results=tmp_path / "b", progress=False)
    strip = lambda r: [{k: v for k, v in h.items() if k != "elapsed_s"} for h in r["history"]]  # noqa: E731
    assert strip(a) == strip(b) and a["comm"] == b["comm"]


def test_deferred_checks_are_read_with_the_losses_at_their_own_step():
    """Checks a step left on the device (VFedMH's ring) are read with the losses, in one
    transfer every SYNC_EVERY_CUDA steps on a GPU; a failing check raises its own error at its
    own batch, before that step's losses are read, and only the steps before it are counted."""
    from vflkit.secure import NonFiniteEmbeddingError

    def reader(values):
        if values[0]:
            raise NonFiniteEmbeddingError(f"{int(values[0])} NaN entries")

    window = split.LossWindow(epoch=1, limit=1e4, every=5)
    for step in range(3):
        window.add(step, 10, {"active": torch.tensor(1.0)}, [(torch.tensor([0.0, 7.0]), lambda v: None)])
    window.add(3, 10, {"active": torch.tensor(float("nan"))}, [(torch.tensor([3.0]), reader)])
    failed = window.add(4, 10, {"active": torch.tensor(1.0)})
    assert isinstance(failed[0], NonFiniteEmbeddingError) and "3 NaN entries" in str(failed[0])
    assert failed[0].step == 3 and window.seen == 30 and window.sums == {"active": 30.0}


def test_precision_keys_only_a_non_default_setting():
    """``precision`` is named in a run's config: the default ("fp32") keeps every existing key
    (a committed record's among them), "bf16" gets keys of its own, anything else is refused."""
    committed = json.loads(next(iter(sorted((config.project_root() / "results" / "quick" / "vfedmh")
                                            .glob("*.json")))).read_text())
    cfg = RunConfig.from_dict(committed["config"])
    assert "precision" not in committed["config"] and cfg.precision == "fp32"
    assert cfg.key == committed["key"] == cfg.replace(precision="fp32").key
    bf16 = cfg.replace(precision="bf16")
    assert bf16.key != cfg.key and bf16.to_dict()["precision"] == "bf16"
    assert RunConfig.from_dict(bf16.to_dict()).key == bf16.key
    with pytest.raises(ConfigError, match="Invalid precision 'fp16'; choose one of fp32, bf16"):
        cfg.replace(precision="fp16")


@pytest.mark.parametrize("method, models", [("splitnn", ("cnn", "lenet", "cnn", "lenet")),
                                            ("vfedmh", ("cnn", "lenet", "mlp", "lenet"))])
def test_bf16_runs_under_autocast_and_keeps_fp32_messages(tmp_path, monkeypatch, method, models):
    """precision="bf16" trains and evaluates under bfloat16 autocast (here on the CPU) with
    channels_last convolution weights; its record names the precision under a key of its own,
    its numbers differ from fp32's, and its ledger is fp32's: messages travel as float32."""
    cfg = _config(method=method, models=models, paper="vfedmh", n_train=384, epochs=2)
    cls = get_method(method)
    real = cls.train_step
    seen = []

    def spying(self, ids):
        conv = [m.weight for p in self.parties for m in p.models.values() for m in m.modules()
                if isinstance(m, torch.nn.Conv2d)]
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
                     all(w.is_contiguous(memory_format=torch.channels_last) for w in conv) and bool(conv)))
        return real(self, ids)

    monkeypatch.setattr(cls, "train_step", spying)
    fp32 = run(cfg, profile="smoke", device="cpu", results=tmp_path, progress=False)
    assert not any(enabled for enabled, _, _ in seen)
    seen.clear()
    bf16 = run(cfg.replace(precision="bf16"), profile="smoke", device="cpu", results=tmp_path, progress=False)

    assert seen and all(s == (True, torch.bfloat16, True) for s in seen)
    assert bf16["config"]["precision"] == "bf16" and bf16["key"] != fp32["key"]
    assert bf16["comm"] == fp32["comm"]
    losses = [[h["loss"] for h in r["history"]] for r in (fp32, bf16)]
    assert losses[0] != losses[1] and all(0 < v < 10 for v in losses[1])


def test_bf16_steps_see_weights_updated_inside_the_step():
    """Under bf16 a weight updated in place inside one step is used updated on its next use (C-VFL's
    Q local iterations): autocast's cache of weight casts, which would keep the first iteration's
    bfloat16 copy for the whole step, is off."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(layer.parameters(), lr=1.0)
    x = torch.randn(3, 4)
    outs = []
    with split.precision_context(_config(precision="bf16"), torch.device("cpu")):
        for _ in range(3):  # one step's three local iterations
            out = layer(x)
            assert out.dtype == torch.bfloat16
            outs.append(out.float().sum().item())
            out.float().sum().backward()
            opt.step()
            opt.zero_grad()
    assert len(set(outs)) == 3  # stale casts would give the first output three times
