"""Tests for vflkit.stacked: a stack of one is the module itself; K party models as one
network with the runs side by side in the channels equal the K models alone (float64: outputs,
gradients, BatchNorm statistics), refuse what they cannot keep apart, and dispatch fewer
operations than vmap where the GPU takes them."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from test_training_packed import CASES, _assert_same_run, _configs

from vflkit.training import counting as costs
from vflkit.errors import ConfigError
from vflkit.methods import RunConfig
from vflkit.models import get_model
from vflkit.training import split
from vflkit.stacked import StackedModel, device_stacking, why_not_grouped

K = 3

#: Party models as the split family builds them, on a MNIST strip (1x28x7) or a CIFAR-10 image:
#: whole (h then p), their h alone, and a ResNet cut inside a stage (p starts with an Unflatten)
MODELS = {
    "mlp": lambda: get_model("mlp", input_shape=(1, 28, 7), num_classes=10, embedding_dim=16),
    "cnn": lambda: get_model("cnn", input_shape=(1, 28, 7), num_classes=10, embedding_dim=16),
    "lenet": lambda: get_model("lenet", input_shape=(1, 28, 7), num_classes=10, embedding_dim=16),
    "resnet18 h": lambda: get_model("resnet18", input_shape=(3, 32, 32), num_classes=10, embedding_dim=16).embedding,
    "resnet18 cut inside a stage": lambda: get_model("resnet18", input_shape=(1, 28, 7), num_classes=10,
                                                     embedding_dim=16, el_pl=(2, 1), cut="layers"),
}


def _input(name: str, b: int = 6) -> torch.Tensor:
    shape = (3, 32, 32) if name == "resnet18 h" else (1, 28, 7)
    return torch.randn(K, b, *shape, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_grouped_network_equals_each_run_alone(float64, name):
    """K runs' models stepped as one grouped network: each run's output, the gradients of its
    slice of the stacked parameters and its BatchNorm statistics are the run's alone (to 1e-12),
    and the runs differ (a network that ran one run K times would not pass)."""
    torch.manual_seed(0)
    models = [MODELS[name]().train() for _ in range(K)]
    alone = [copy.deepcopy(m) for m in models]
    stacked = StackedModel(models, stacking="grouped")
    x = _input(name)
    y = stacked(x)
    want = torch.stack([m(x[k]) for k, m in enumerate(alone)])
    assert y.shape == want.shape and torch.allclose(y, want, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(y[0], y[1])
    (y * torch.arange(1.0, K + 1).view(K, *[1] * (y.dim() - 1))).sum().backward()
    for k, m in enumerate(alone):
        ((k + 1) * m(x[k])).sum().backward()  # the same forward twice alone: statistics updated twice
    stacked(x)  # and twice packed
    for k, m in enumerate(alone):
        for pname, p in m.named_parameters():
            assert torch.allclose(stacked.params[pname].grad[k], p.grad, rtol=1e-10, atol=1e-12), pname
        for bname, buf in m.named_buffers():
            assert torch.allclose(stacked.buffers[bname][k].to(buf.dtype), buf, rtol=1e-12, atol=1e-12), bname


def test_grouped_call_with_more_copies_than_built():
    """A grouped model takes K from the parameters it is given: C-VFL's frozen top runs once per
    party and run (G x K copies) on a top stacked for K."""
    tops = [get_model("mlp", input_shape=(1, 28, 7), num_classes=10, embedding_dim=8).prediction for _ in range(2)]
    stacked = StackedModel(tops, stacking="grouped")
    wider = {n: torch.cat([p, p + 1]).detach() for n, p in stacked.params.items()}  # 4 copies
    z = torch.randn(4, 5, 8)
    got = stacked.call_with(wider, z)
    assert got.shape == (4, 5, 10)
    vmapped = StackedModel(tops, stacking="vmap").call_with(wider, z)
    assert torch.allclose(got, vmapped, atol=1e-5)


class _Custom(nn.Sequential):
    def forward(self, x):  # its own forward: nothing says it keeps the runs' channels apart
        return super().forward(x).flatten(0)


@pytest.mark.parametrize("module,why", [
    (nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)), "a Dropout"),
    (_Custom(nn.Linear(4, 4)), "a _Custom"),
    (nn.Conv2d(1, 2, 3, padding=1, padding_mode="reflect"), "padding_mode='reflect'"),
    (nn.BatchNorm2d(4, momentum=None), "a fixed momentum"),
    (nn.Sequential(nn.Flatten(2), nn.Linear(4, 4)), "a Flatten of dimensions 2..-1"),
])
def test_what_grouping_cannot_keep_apart_is_named(module, why):
    """A module the channel layout could mix runs in is refused by name: asked for, a ConfigError;
    on a GPU, stacking="auto" takes vmap for it."""
    assert why in why_not_grouped(module)
    with pytest.raises(ConfigError, match="stacking='grouped' cannot run this model"):
        StackedModel([module, copy.deepcopy(module)], stacking="grouped")
    assert device_stacking(module, "cuda") == "vmap"


def test_the_gpu_stacks_convolutions_grouped_and_mlps_vmapped():
    """stacking="auto": on a GPU grouped for convolutional models (the fewest operations), vmap for
    MLPs; on a CPU the loop for convolutions, vmap for MLPs (unchanged)."""
    cnn, mlp = MODELS["cnn"](), MODELS["mlp"]()
    assert [device_stacking(cnn, d) for d in ("cuda", "cpu")] == ["grouped", "loop"]
    assert [device_stacking(mlp, d) for d in ("cuda", "cpu")] == ["vmap", "vmap"]


@pytest.mark.parametrize("method,model,at_most", [("splitnn", "resnet18", 0.5), ("c_vfl", "resnet18", 0.6),
                                                  ("agg_vfl", "lenet", 0.9)])
def test_a_grouped_pack_dispatches_fewer_operations_than_vmap(method, model, at_most):
    """The reason for grouping (counted, not timed): one packed step of 3 runs dispatches at most
    ``at_most`` times vmap's operations (counted 0.44 for SplitNN's ResNet18s, 0.55 for C-VFL's,
    0.82 for Agg_VFL's LeNets); the cost model still prices the vmapped step, the one the GPU
    measurements were taken on, until a GPU times the grouped one."""
    run = RunConfig(paper="vfedmh", dataset="mnist", method=method, models=(model,) * 4)
    grouped, vmapped = (costs.count_step_ops(run, pack=3, stacking=s) for s in ("grouped", "vmap"))
    assert grouped <= at_most * vmapped
    assert costs.count_step_ops(run, pack=3) == vmapped  # what the cost model prices


@pytest.mark.parametrize("case", ["splitnn resnet18 (BatchNorm)", "c_vfl scalar, active 2"])
def test_a_grouped_pack_on_the_graphs_tape_equals_the_runs_alone(float64, case):
    """Captured and replayed (the tape, CUDA graphs' CPU stand-in), a grouped pack still gives each
    run its unpacked losses, metrics and ledger: the GPU's path, eager and graphed, on a CPU."""
    method, models, changes = CASES[case]
    configs = _configs(method, models, seeds=(0, 1), **changes)
    got = split.train(configs, device="cpu", stacking="grouped", graphs="tape")
    for g, c in zip(got, configs):
        _assert_same_run(g, split.train(c, device=torch.device("cpu"), progress=False))


def test_a_stack_of_one_is_the_module_itself():
    """K = 1 (a run alone): the module is called itself, on its own parameters, so a run alone
    computes its own kernels bit for bit and its own optimizer steps its own parameters."""
    net = MODELS["lenet"]()
    one = StackedModel([net], stacking="vmap", alone=True)
    x = _input("lenet")[0]
    out = one(x)
    assert one.module is net and torch.equal(out, net(x))
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    assert all(s is p for s, p in zip(one.stacked_params().values(), net.parameters()))
    frozen = {n: torch.zeros_like(t) for n, t in one.stacked_params().items()}
    assert torch.count_nonzero(one.call_with(frozen, x)) == 0  # other parameters, same architecture
