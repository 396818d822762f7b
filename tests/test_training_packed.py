"""Tests for packs (vflkit.training.split.train of K > 1 runs): a pack of K runs equals K runs
alone through the one engine (float64, to a tolerance; ledgers exactly), refuses what it cannot
pack, keeps record keys, reads nothing back inside a step."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from test_no_sync import HostReadCounter

from vflkit import records
from vflkit.errors import ConfigError, DivergenceError
from vflkit.methods import RunConfig
from vflkit.training import split

#: Relative tolerance of a packed run's losses and metrics against the unpacked run, in float64
#: (vmapped kernels may reduce in another order; measured differences are ~1e-15).
REL = 1e-9


def _configs(method: str, models: tuple[str, ...], seeds=(0, 1, 2), **changes: Any) -> list[RunConfig]:
    base = dict(paper="vfedmh", dataset="mnist", method=method, models=models, n_train=224, n_test=96,
                epochs=2, batch_size=96, embedding_dim=16, optimizers="sgd_momentum")
    base.update(changes)
    return [RunConfig(**base, seed=s) for s in seeds]


def _strip(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "elapsed_s"} for row in history]


def _close(got: Any, want: Any) -> bool:
    """Equal, floats to REL (nested lists and dicts walked)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_close(got[k], want[k]) for k in want)
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(_close, got, want))
    if isinstance(want, float):
        return got == pytest.approx(want, rel=REL, abs=0)
    return got == want


def _assert_same_run(got: dict[str, Any], want: dict[str, Any]) -> None:
    """A packed run's result against the unpacked one: metrics to REL, the ledger exactly."""
    assert got["models"] == want["models"]
    assert _close(_strip(got["history"]), _strip(want["history"]))
    assert _close(got["final"], want["final"])
    assert got["comm"] == want["comm"]
    assert got["diverged"] == want["diverged"]


# a last batch smaller than the others (224 = 96 + 96 + 32), heterogeneous and BatchNorm models,
# every compressor, Adam, and the exponential schedule; all vmapped (a GPU's path), and two
# cases also as the CPU's loop over slices (stacking="auto" there for convolutions)
CASES = {
    "local": ("local", ("lenet",) * 4, {}),
    "splitnn": ("splitnn", ("mlp",) * 4, {"lr_schedule": "exponential", "lr_gamma": 0.5}),
    "pyvertical, adam": ("pyvertical", ("cnn",) * 4, {"optimizers": "adam", "lr": 0.01}),
    # two parties: building a ResNet18 is most of this case's time
    "splitnn resnet18 (BatchNorm)": ("splitnn", ("resnet18",) * 2, {"n_parties": 2, "n_train": 24, "batch_size": 16,
                                                                     "n_test": 16, "epochs": 1}),
    "c_vfl": ("c_vfl", ("mlp",) * 4, {}),
    "c_vfl scalar, active 2": ("c_vfl", ("lenet",) * 4, {"options": {"compressor": "scalar", "bits": 2,
                                                                     "local_iterations": 3}, "active": 2,
                                                          "n_train": 112, "epochs": 1}),
    "c_vfl topk": ("c_vfl", ("mlp",) * 4, {"options": {"compressor": "topk", "local_iterations": 2}}),
    # two groups of alike parties, stacked apart (the active party in the second)
    "c_vfl mixed, parties grouped": ("c_vfl", ("lenet", "mlp", "lenet", "mlp"), {"options": {"local_iterations": 2},
                                                                                   "active": 1, "n_train": 112,
                                                                                   "epochs": 1}),
    "agg_vfl": ("agg_vfl", ("mlp",) * 4, {}),
    "heter_aggvfl": ("heter_aggvfl", ("mlp", "lenet", "mlp", "lenet"), {}),
}
STACKED = ([(case, "vmap") for case in sorted(CASES)] + [(case, "grouped") for case in sorted(CASES)]
           + [("heter_aggvfl", "loop"), ("c_vfl scalar, active 2", "loop")])


@pytest.mark.parametrize("case,stacking", STACKED)
def test_pack_equals_separate_runs(float64, case, stacking):
    """K = 3 runs packed give each run's unpacked losses, metrics and ledger."""
    method, models, changes = CASES[case]
    configs = _configs(method, models, **changes)
    got = split.train(configs, device="cpu", stacking=stacking)
    want = [split.train(c, device=torch.device("cpu"), progress=False) for c in configs]
    for g, w in zip(got, want):
        _assert_same_run(g, w)
        assert g["execution"] == {"packed": len(configs), "pack": [c.key for c in configs]}
    # the runs differ: a pack that trained one run three times would pass the checks above only
    # if the unpacked runs were alike too
    assert got[0]["history"][-1]["loss"] != got[1]["history"][-1]["loss"]


#: A bf16 pack against its runs alone (float32 master weights, bf16 autocast): the same kernels
#: slice by slice, so only the order of float32 sums may differ, and a bfloat16 rounding it flips
#: compounds over the steps (measured: 1e-7 relative, 1.3e-4 for Heter_aggVFL's summed predictions).
BF16_REL = 1e-3


@pytest.mark.parametrize("case", ["local", "splitnn", "c_vfl scalar, active 2", "c_vfl mixed, parties grouped",
                                  "heter_aggvfl"])
@pytest.mark.parametrize("graphs", [None, "tape"])
def test_bf16_pack_equals_bf16_runs_alone(case, graphs):
    """precision="bf16" packs (issue 40: bf16 is to be measured in packs on a GPU): each run's
    losses and metrics are its bf16 run's alone to BF16_REL, its ledger exactly (messages
    widened to float32 on the wire, sized as alone), eager and captured; the pack ran under
    autocast (its losses differ from the fp32 pack's)."""
    method, models, changes = CASES[case]
    configs = _configs(method, models, seeds=(0, 1), precision="bf16", **changes)
    got = split.train(configs, device="cpu", graphs=graphs)
    want = [split.train(c, device=torch.device("cpu"), progress=False) for c in configs]
    fp32 = split.train([c.replace(precision="fp32") for c in configs], device="cpu")
    for g, w, f in zip(got, want, fp32):
        assert g["comm"] == w["comm"] == f["comm"]
        rows = list(zip(_strip(g["history"]), _strip(w["history"])))
        assert len(rows) == len(w["history"]) and all(gr.keys() == wr.keys() for gr, wr in rows)
        assert all(gr[k] == (pytest.approx(wr[k], rel=BF16_REL) if isinstance(wr[k], float) else wr[k])
                   for gr, wr in rows for k in wr)
        assert g["history"][-1]["loss"] != f["history"][-1]["loss"]


@pytest.mark.parametrize("case", ["local", "c_vfl scalar, active 2"])
def test_bf16_pack_stacks_grouped_under_autocast(case):
    """A bf16 pack of convolutional models runs grouped (plain grouped convolutions, BatchNorm
    and batched products, which autocast covers): each run's losses and metrics are its bf16 run's
    alone to BF16_REL, its ledger exactly; the grouped network computes in bfloat16, and vmap,
    which autocast does not reach, is refused."""
    from vflkit.models import get_model
    from vflkit.stacked import StackedModel

    method, models, changes = CASES[case]
    configs = _configs(method, models, seeds=(0, 1), precision="bf16", **changes)
    got = split.train(configs, device="cpu", progress=False, stacking="grouped")
    want = [split.train(c, device=torch.device("cpu"), progress=False) for c in configs]
    for g, w in zip(got, want):
        assert g["comm"] == w["comm"]
        rows = list(zip(_strip(g["history"]), _strip(w["history"])))
        assert len(rows) == len(w["history"])
        assert all(gr[k] == (pytest.approx(wr[k], rel=BF16_REL) if isinstance(wr[k], float) else wr[k])
                   for gr, wr in rows for k in wr)
    nets = [get_model("lenet", input_shape=(1, 28, 7), num_classes=10, embedding_dim=16) for _ in range(2)]
    stacked = StackedModel(nets, stacking="auto", bf16=True)
    assert stacked.stacking == "loop"  # a CPU's choice for convolutions
    grouped = StackedModel(nets, stacking="grouped", bf16=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        assert grouped(torch.randn(2, 4, 1, 28, 7)).dtype == torch.bfloat16
    with pytest.raises(ConfigError, match="bf16 runs do not pack with vmap"):
        StackedModel(nets, stacking="vmap", bf16=True)


def test_cvfl_stacks_alike_parties_together(monkeypatch):
    """C-VFL's parties with alike bottom models train as one stacked model (their Q local
    iterations are independent): one group per architecture, in party order (that they train as
    the runs alone: the "c_vfl mixed, parties grouped" case above); the grouped step dispatches
    far fewer torch operations than the same pack with every party apart."""
    from vflkit.training import counting as costs

    built = []
    real = split.Pack.__init__

    def keep(self, *a, **k):
        real(self, *a, **k)
        built.append(self)

    monkeypatch.setattr(split.Pack, "__init__", keep)
    configs = _configs("c_vfl", ("lenet", "mlp", "lenet", "mlp"), options={"local_iterations": 1}, n_train=64,
                       n_test=32, epochs=1, seeds=(0, 1))
    split.train(configs, device="cpu", stacking="loop")
    names = built[0].names
    assert built[0].groups == [(names[0], names[2]), (names[1], names[3])]
    run = configs[0].replace(models=("mlp",) * 4, options={})  # C-VFL's Q = 10
    together, apart = costs.count_step_ops(run, pack=2), costs.count_step_ops(run, pack=2, group_parties=False)
    assert built[-1].groups == [(names[0],), (names[1],), (names[2],), (names[3],)]  # the last: apart
    assert together < 0.5 * apart


def test_divergence_recorded_per_run_as_alone(float64):
    """With on_divergence="record" each run of a pack stops where it would alone: same epoch,
    step and steps run, same ledger (no message counted after it stopped)."""
    configs = _configs("splitnn", ("mlp",) * 4, lr=1e6, optimizers="sgd", seeds=(0, 1))
    got = split.train(configs, device="cpu", on_divergence="record")
    want = [split.train(c, device=torch.device("cpu"), progress=False, on_divergence="record") for c in configs]
    for g, w in zip(got, want):
        assert g["diverged"] is not None
        assert {k: g["diverged"][k] for k in ("epoch", "step", "steps_run")} == \
               {k: w["diverged"][k] for k in ("epoch", "step", "steps_run")}
        assert g["comm"] == w["comm"]
        assert [r["epoch"] for r in g["history"]] == [r["epoch"] for r in w["history"]]
    with pytest.raises(DivergenceError, match=r"run [0-9a-f]{16} \(seed 0\) of the pack: the loss of active"):
        split.train(configs, device="cpu")


def test_unpackable_configs_are_refused():
    """A method without a packed step, tabular data, runs differing in more than the seed, a bf16
    pack asked to vmap, or a run given twice: a ConfigError saying which."""
    vfedmh = _configs("vfedmh", ("mlp", "lenet", "mlp", "lenet"))
    assert split.pack_key(vfedmh[0]) is None
    with pytest.raises(ConfigError, match="method 'vfedmh' has no packed step \\(packable: agg_vfl, c_vfl"):
        split.train(vfedmh, device="cpu")
    criteo = RunConfig(paper="easter", dataset="criteo", method="splitnn", models=("deepfm",) * 2, n_parties=2)
    assert split.pack_key(criteo) is None
    with pytest.raises(ConfigError, match="dataset 'criteo' is not image data"):
        split.check_pack([criteo])
    a, b = _configs("splitnn", ("mlp",) * 4, seeds=(0, 1))
    assert split.pack_key(a.replace(precision="bf16")) not in (None, split.pack_key(a))
    with pytest.raises(ConfigError, match="bf16 runs do not pack with vmap"):
        split.train([a.replace(precision="bf16"), b.replace(precision="bf16")], device="cpu", stacking="vmap")
    with pytest.raises(ConfigError, match="differ in seed and dataset alone"):
        split.check_pack([a, b.replace(lr=0.01)])
    with pytest.raises(ConfigError, match="differ in seed and dataset alone, on datasets of one image shape"):
        split.check_pack([a, b.replace(dataset="cifar10")])
    with pytest.raises(ConfigError, match="given twice"):
        split.check_pack([a, a])
    assert split.pack_key(a) == split.pack_key(b) != split.pack_key(b.replace(epochs=3))


#: Runs of MNIST and FashionMNIST in one pack, in an order where the datasets alternate (each
#: stretch of one dataset normalised apart) and where they come in stretches.
MIXED = {"alternating": ("mnist", "fashion_mnist", "fashion_mnist", "mnist"),
         "in stretches": ("mnist", "mnist", "fashion_mnist", "fashion_mnist")}


@pytest.mark.parametrize("case", ["splitnn", "c_vfl mixed, parties grouped"])
@pytest.mark.parametrize("order", sorted(MIXED))
@pytest.mark.parametrize("graphs", [None, "tape"])
def test_pack_across_datasets_equals_separate_runs(float64, case, order, graphs):
    """A pack of runs on two datasets of one shape (MNIST and FashionMNIST, as VFedMH's Table II
    trains every method on both) gives each run its unpacked losses, metrics and ledger, eager
    and captured: its own data, labels and normalisation (the two datasets' statistics differ,
    so a pack that normalised every run as its first would fail this)."""
    method, models, changes = CASES[case]
    base = _configs(method, models, seeds=(0,), **changes)[0]
    configs = [base.replace(dataset=d, seed=k) for k, d in enumerate(MIXED[order])]
    assert len({split.pack_key(c) for c in configs}) == 1
    got = split.train(configs, device="cpu", graphs=graphs)
    for g, c in zip(got, configs):
        _assert_same_run(g, split.train(c, device=torch.device("cpu"), progress=False))
    # trained with the runs of one dataset side by side (one normalisation call each), returned as given
    assert all(g["execution"]["pack"] == [c.key for c in sorted(configs, key=lambda c: c.dataset)] for g in got)
    # one seed on each dataset: its own data (FashionMNIST's images are not MNIST's)
    same_seed = split.train([base, base.replace(dataset="fashion_mnist")], device="cpu")
    assert same_seed[0]["history"][-1]["loss"] != same_seed[1]["history"][-1]["loss"]


def test_pack_key_spans_datasets_of_one_shape():
    """Runs pack across datasets whose images, classes and training sizes agree (MNIST with
    FashionMNIST, and with a registered dataset of that shape at one n_train), never across
    others (CIFAR-10; a registered one of another size), nor in anything but seed and dataset."""
    from vflkit.data import ImageData, register_dataset, unregister_dataset

    a = _configs("splitnn", ("mlp",) * 4, seeds=(0,), n_train=None)[0]
    assert split.pack_key(a) == split.pack_key(a.replace(dataset="fashion_mnist", seed=5))
    assert split.pack_key(a) != split.pack_key(a.replace(dataset="cifar10"))
    assert split.pack_key(a) != split.pack_key(a.replace(dataset="fashion_mnist", lr=0.01))
    g = torch.Generator().manual_seed(0)
    register_dataset(ImageData("tiny28", torch.randint(0, 256, (50, 1, 28, 28), dtype=torch.uint8, generator=g),
                               torch.arange(50) % 10, torch.zeros(10, 1, 28, 28, dtype=torch.uint8),
                               torch.arange(10), tuple("abcdefghij")))
    try:
        tiny = a.replace(dataset="tiny28")
        assert split.pack_key(tiny) != split.pack_key(a)  # 50 training images against 60,000
        assert split.pack_key(tiny.replace(n_train=40)) == split.pack_key(a.replace(n_train=40))
    finally:
        unregister_dataset("tiny28")


def test_group_packs_splits_by_pack_key_and_size():
    """Packs hold runs of one pack key, at most max_size each; the unpackable stay apart."""
    split_runs = _configs("splitnn", ("mlp",) * 4, seeds=range(5))
    cvfl = _configs("c_vfl", ("mlp",) * 4, seeds=range(2))
    vfedmh = _configs("vfedmh", ("mlp", "lenet", "mlp", "lenet"), seeds=range(1))
    packs, single = split.group_packs(split_runs + vfedmh + cvfl, max_size=2)
    assert [[c.seed for c in p] for p in packs] == [[0, 1], [2, 3], [4], [0, 1]]
    assert [p[0].method for p in packs] == ["splitnn"] * 3 + ["c_vfl"]
    assert single == vfedmh


def test_run_pack_writes_records_under_their_own_keys(tmp_path):
    """run_pack writes each run's record at its own key (packing changes no key); the record
    store then finds them like any other record, and a second call trains nothing."""
    configs = _configs("splitnn", ("mlp",) * 4, seeds=(3, 4), epochs=1)
    recs = split.run_pack(configs, profile="smoke", device="cpu", results=tmp_path)
    for cfg, rec in zip(configs, recs):
        path = records.record_path(cfg, "smoke", tmp_path)
        assert rec["key"] == cfg.key and path.exists()
        assert rec["execution"] == {"packed": 2, "pack": [c.key for c in configs]}
        assert set(records.ENVELOPE) <= set(rec)
        # the unpacked record store reuses it (it would train, and differ in execution, if not)
        assert split.run(cfg, profile="smoke", device="cpu", results=tmp_path, progress=False) == rec
    again = split.run_pack(configs, profile="smoke", device="cpu", results=tmp_path)
    assert again == recs


def test_a_packed_result_may_not_overwrite_the_envelope(tmp_path, monkeypatch):
    """A packed run's result that reuses an envelope name is refused as an unpacked run's is
    (the same error), and no run of the pack gets a record."""
    configs = _configs("splitnn", ("mlp",) * 4, seeds=(3, 4), epochs=1)

    def clashing(todo, **kw):
        return [{"final": {}, "wall_time_s": 0.0, "diverged": None, "config": {}} for _ in todo]

    monkeypatch.setattr(split, "train", clashing)
    with pytest.raises(RuntimeError, match=r"envelope's names \['config'\]"):
        split.run_pack(configs, profile="smoke", device="cpu", results=tmp_path)
    assert not any(records.record_path(c, "smoke", tmp_path).exists() for c in configs)


@pytest.mark.parametrize("stacking,model", [("auto", "mlp"), ("grouped", "lenet")])
def test_packed_step_makes_no_host_read(monkeypatch, stacking, model):
    """Inside a packed step (SplitNN and C-VFL; vmapped MLPs, and grouped LeNets as a GPU runs
    them) nothing is read back to the host; C-VFL's dither is drawn ahead, outside the step."""
    real = split.Pack.train_step
    reads: list[Any] = []

    def guarded(self, ids):
        with HostReadCounter() as counter:
            out = real(self, ids)
        reads.append(counter.reads)
        return out

    monkeypatch.setattr(split.Pack, "train_step", guarded)
    for method in ("splitnn", "c_vfl"):
        reads.clear()
        split.train(_configs(method, (model,) * 4, seeds=(0, 1), epochs=1), device="cpu", stacking=stacking)
        assert len(reads) == 3 and not any(reads), f"{method}: {reads}"


def test_compiled_pack_equals_eager(float64):
    """With ``compile`` (torch.compile, whole graphs) a pack trains as the eager one; on a CPU the
    test compiles with the aot_eager backend (graph capture and AOT autograd, no code generation)."""
    configs = _configs("splitnn", ("mlp",) * 2, n_parties=2, n_train=192, n_test=64, epochs=1, seeds=(0, 1))
    eager = split.train(configs, device="cpu", stacking="vmap")
    torch._dynamo.reset()
    compiled = split.train(configs, device="cpu", stacking="vmap", compile={"backend": "aot_eager"})
    for g, w in zip(compiled, eager):
        _assert_same_run(g, w)
    torch._dynamo.reset()
    grouped = split.train(configs, device="cpu", stacking="grouped", compile={"backend": "aot_eager"})
    for g, w in zip(grouped, eager):
        _assert_same_run(g, w)
    with pytest.raises(ConfigError, match="compile applies to the vmapped or grouped call"):
        split.train(configs, device="cpu", stacking="loop", compile={"backend": "aot_eager"})


def test_one_diverged_run_stops_alone(float64, monkeypatch):
    """A run of the pack whose loss turns NaN (injected at its second step) stops there with
    on_divergence="record": no later message in its ledger; the other runs are the runs alone."""
    configs = _configs("splitnn", ("mlp",) * 4)
    real = split.Pack.train_step
    calls = {"n": 0}

    def poisoned(self, ids):
        out = real(self, ids)
        calls["n"] += 1
        if calls["n"] == 2:
            out["active"] = out["active"].clone()
            out["active"][1] = float("nan")
        return out

    monkeypatch.setattr(split.Pack, "train_step", poisoned)
    got = split.train(configs, device="cpu", on_divergence="record")
    want = [split.train(c, device=torch.device("cpu"), progress=False) for c in configs]
    for k in (0, 2):
        _assert_same_run(got[k], want[k])
    stopped = got[1]
    assert {k: stopped["diverged"][k] for k in ("epoch", "step", "steps_run")} == {"epoch": 1, "step": 1,
                                                                                    "steps_run": 2}
    assert [r["epoch"] for r in stopped["history"]] == [1]
    assert math.isfinite(stopped["history"][0]["loss"])  # the mean over the step before, NaN not counted
    assert stopped["comm"]["total"]["messages"] == 2 * 6  # 2 steps x (3 embeddings up, 3 gradients down)
    assert [r["epoch"] for r in stopped["comm"]["per_epoch"]] == [1]
