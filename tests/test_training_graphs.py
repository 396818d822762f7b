"""Tests for vflkit.training.graphs: a packed step captured once per batch shape and replayed
trains as the eager pack (float64, on the tape: the CPU stand-in with a CUDA graph's contract);
the tape fails where a graph would (a baked learning rate, a host read); steps that cannot be
captured are refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_training_packed import CASES, _assert_same_run, _configs

from vflkit.errors import ConfigError
from vflkit.training import graphs, split

#: C-VFL (every compressor, parties grouped, the active party elsewhere), SplitNN with the
#: exponential schedule (graphs dropped and captured again each epoch), BatchNorm, Agg_VFL: each
#: with at least three steps of one batch shape (eager, captured, replayed), kept small for CI
GRAPHED = {
    "c_vfl vector": ("c_vfl", ("mlp",) * 4, {"options": {"local_iterations": 2}}),
    "c_vfl scalar, active 2": ("c_vfl", ("mlp",) * 4, {"options": {"compressor": "scalar", "bits": 2,
                                                                   "local_iterations": 2}, "active": 2}),
    "c_vfl topk": CASES["c_vfl topk"],
    "c_vfl mixed, parties grouped": ("c_vfl", ("lenet", "mlp", "lenet", "mlp"),
                                     {"options": {"local_iterations": 1}, "active": 1, "n_train": 96,
                                      "batch_size": 32, "n_test": 32, "epochs": 1}),
    "splitnn, exponential schedule": CASES["splitnn"],
    "splitnn resnet18 (BatchNorm)": ("splitnn", ("resnet18",) * 2, {"n_parties": 2, "n_train": 48, "batch_size": 16,
                                                                     "n_test": 16, "epochs": 1}),
    "agg_vfl": CASES["agg_vfl"],
}


def _taped(configs: list[Any], monkeypatch: pytest.MonkeyPatch, *, device: str = "cpu",
           backend: str = "tape", stacking: str = "vmap") -> tuple[list[dict[str, Any]], dict[str, int]]:
    """``configs`` trained as a pack on ``backend``, captured after one eager step per batch
    shape (so a test's few steps include replays); the results and the graphed step's counts."""
    monkeypatch.setattr(graphs, "WARMUP_STEPS", 1)
    built: list[split.Pack] = []

    def keep(pack: split.Pack, backend: str) -> None:
        graphs.capture(pack, backend)
        built.append(pack)

    monkeypatch.setattr(split, "capture", keep)
    got = split.train(configs, device=device, stacking=stacking, graphs=backend)
    return got, built[0].graphed.counts


#: minutes on a loaded 2-core CPU (a float64 ResNet18): the slow tier
SLOW = {"splitnn resnet18 (BatchNorm)"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c in SLOW else c for c in sorted(GRAPHED)])
def test_replayed_pack_equals_eager(float64, monkeypatch, case):
    """Captured and replayed on the tape, each run's losses, metrics and ledger are the eager
    pack's (hence the run's alone: test_training_packed), with steps replayed."""
    method, models, changes = GRAPHED[case]
    configs = _configs(method, models, **changes)
    eager = split.train(configs, device="cpu", stacking="vmap")
    got, counts = _taped(configs, monkeypatch)
    for g, w in zip(got, eager):
        assert g["execution"] == {**w["execution"], "graphs": "tape"}
        _assert_same_run(g, w)
    assert counts["replayed"] >= 1 and counts["captured"] >= 1, counts


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: CUDA graphs themselves")
@pytest.mark.parametrize("case", ["c_vfl vector", "c_vfl mixed, parties grouped", "splitnn, exponential schedule",
                                  "splitnn resnet18 (BatchNorm)"])
def test_cuda_graphs_equal_eager_on_a_gpu(float64, monkeypatch, case):
    """On a GPU, the packs above captured in CUDA graphs train as the eager pack on that GPU
    (float64; the first check of a lent window: ``pytest tests/test_training_graphs.py``)."""
    method, models, changes = GRAPHED[case]
    configs = _configs(method, models, **changes)
    eager = split.train(configs, device="cuda", stacking="vmap")
    got, counts = _taped(configs, monkeypatch, device="cuda", backend="cuda")
    for g, w in zip(got, eager):
        assert g["execution"] == {**w["execution"], "graphs": "cuda"}
        _assert_same_run(g, w)
    assert counts["replayed"] >= 1, counts


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: CUDA graphs themselves")
@pytest.mark.parametrize("case", ["c_vfl vector", "splitnn resnet18 (BatchNorm)"])
def test_bf16_cuda_graphs_equal_eager_on_a_gpu(monkeypatch, case):
    """bf16 packs (slice by slice under autocast) captured in CUDA graphs train as the eager bf16
    pack on that GPU: autocast's casts are captured with the step (its weight cache is off, so no
    cast made at capture time is reused); ledgers exactly, numbers to BF16_REL."""
    from test_training_packed import BF16_REL, _strip

    method, models, changes = GRAPHED[case]
    configs = _configs(method, models, precision="bf16", **changes)
    eager = split.train(configs, device="cuda")
    got, counts = _taped(configs, monkeypatch, device="cuda", backend="cuda", stacking="auto")
    for g, w in zip(got, eager):
        assert g["execution"] == {**w["execution"], "graphs": "cuda"} and g["comm"] == w["comm"]
        rows = list(zip(_strip(g["history"]), _strip(w["history"])))
        assert len(rows) == len(w["history"])
        assert all(gr[k] == (pytest.approx(wr[k], rel=BF16_REL) if isinstance(wr[k], float) else wr[k])
                   for gr, wr in rows for k in wr)
    assert counts["replayed"] >= 1, counts


def test_tape_fails_where_a_graph_would(float64, monkeypatch):
    """The learning rate is baked into a captured step: kept graphs after the schedule's step
    (``forget`` skipped) train at the old rate, and the runs differ from the eager pack. So the
    equality above is a test that can fail."""
    configs = _configs("splitnn", ("mlp",) * 4, lr_schedule="exponential", lr_gamma=0.5, seeds=(0, 1), epochs=3)
    eager = split.train(configs, device="cpu", stacking="vmap")
    monkeypatch.setattr(graphs.GraphedStep, "forget", lambda self: None)
    got, counts = _taped(configs, monkeypatch)
    assert counts["replayed"] >= 2
    assert eager[0]["history"][-1]["loss"] != pytest.approx(got[0]["history"][-1]["loss"], rel=1e-6)


def test_tape_replays_in_place_and_refuses_host_reads():
    """A replay reruns the captured operations on the captured tensors: new input values are
    read only when copied into the captured input, results land in the captured outputs, state
    is updated in place; a host read inside a capture is an error."""
    x, w = torch.tensor([1.0, 2.0]), torch.tensor([0.5, 0.5])
    g = graphs.StepGraph("tape")
    out = g.capture(lambda: (w.add_(x), (x * w).sum())[1])
    assert out.item() == pytest.approx(1 * 1.5 + 2 * 2.5)
    x.copy_(torch.tensor([0.0, 1.0]))
    g.replay()
    assert w.tolist() == [1.5, 3.5] and out.item() == pytest.approx(3.5)
    with pytest.raises(graphs.GraphCaptureError, match="read a value back to the host"):
        graphs.StepGraph("tape").capture(lambda: float((x * 2).sum()))
    with pytest.raises(ConfigError, match="Invalid graph backend 'gpu'"):
        graphs.StepGraph("gpu")


def test_steps_that_cannot_be_captured_are_refused():
    """An optimizer that keeps its step count on the host cannot be captured (Adagrad; Adam on a
    CPU); "auto" on a CPU trains eagerly and the records say nothing of graphs; CUDA graphs on a
    CPU pack, an unknown mode and graphs with compile are refused."""
    configs = _configs("splitnn", ("mlp",) * 2, n_parties=2, n_train=96, n_test=32, epochs=1, seeds=(0, 1))
    for name in ("adagrad", "adam"):
        with pytest.raises(ConfigError, match=r"cannot be captured: (Adagrad|Adam) keeps its step count on the host"):
            split.train([c.replace(optimizers=name) for c in configs], device="cpu", graphs="tape")
    auto = split.train(configs, device="cpu", graphs="auto")
    assert "graphs" not in auto[0]["execution"]
    with pytest.raises(ConfigError, match="CUDA graphs need a pack on a CUDA device"):
        split.train(configs, device="cpu", graphs="cuda")
    with pytest.raises(ConfigError, match="Invalid graphs 'yes'"):
        split.train(configs, device="cpu", graphs="yes")
    with pytest.raises(ConfigError, match="graphs and compile both capture the step"):
        split.train(configs, device="cpu", graphs="tape", compile={"backend": "aot_eager"})


def test_scheduled_packs_follow_the_graphs_setting(tmp_path, monkeypatch):
    """The scheduler's and the launcher's packs (compute_pack) are captured as ``$VFLKIT_GRAPHS``
    says, and their records say so; unset, they run eagerly."""
    configs = _configs("splitnn", ("mlp",) * 2, n_parties=2, n_train=96, n_test=32, batch_size=32, epochs=1,
                       seeds=(0, 1))

    def payloads(results):
        return [{"family": "split", "config": c.to_dict(), "profile": "smoke", "results": str(results)}
                for c in configs]

    monkeypatch.setenv(split.GRAPHS_ENV, "tape")
    assert [r["execution"].get("graphs") for r in split.compute_pack(payloads(tmp_path / "a"), device="cpu")] == \
        ["tape", "tape"]
    monkeypatch.delenv(split.GRAPHS_ENV)
    assert [r["execution"].get("graphs") for r in split.compute_pack(payloads(tmp_path / "b"), device="cpu")] == \
        [None, None]
