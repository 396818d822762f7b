"""K copies of a party model as one network whose channels hold the K runs (grouped convolutions).

Issue 40, "Packing ... (``torch.func`` stacking + ``vmap``, or grouped convolutions)". A vmapped
ResNet18 moves its K runs in and out of the batch dimension around every layer: counted on a CPU,
one step of three ResNet18 embedding networks of a 1x28x7 MNIST strip dispatches 667 torch
operations vmapped (views, permutes, copies and BatchNorm's rescaling among them), against 158
for one network alone. On a GPU those runs are launch-bound (a near-constant time per
operation), which is why vmapped packs of ResNets gain next to nothing there.

Here the K runs live side by side in the channel dimension instead: run k's channels are
``k*C .. (k+1)*C - 1`` of every feature map, and each layer is one call for all K runs:

- a convolution is one grouped convolution (``groups = K x`` its own), whose group k holds run
  k's filters;
- a BatchNorm normalises K x C channels, each with its run's statistics;
- a linear layer is one batched matrix product of the K runs' weights;
- an activation, a pooling, a residual addition, ``Flatten`` work on each channel alone and need
  no change. ``Flatten`` keeps each run's features contiguous, and ``Unflatten`` widens its channels.

The same three ResNet18 networks then dispatch 174 operations a step, and their outputs equal the
runs' alone in float64 (``tests/test_training_grouped.py``).

A module tree is grouped only when every module in it is one the list above covers
(:func:`why_not_grouped`). Anything else, such as a dropout, a custom ``forward`` or a
cumulative BatchNorm, keeps the vmapped path.

The parameters stay the pack's stacked ``[K, ...]`` leaves, so the optimizers, the write-back and
the checkpoints are unchanged. Each grouped layer views them in its grouped shape as it runs.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

from ..models import PartyModel

#: Modules whose ``forward`` works on each channel alone, so K runs side by side in the channels
#: go through unchanged (containers: their children are grouped in turn; a party model runs
#: ``prediction(embedding(x))``); a subclass counts only with its class's own ``forward``.
CHANNELWISE: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.Identity, nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.Sequential, BasicBlock, Bottleneck,
    PartyModel)


def _channelwise(m: nn.Module) -> bool:
    return any(isinstance(m, c) and type(m).forward is c.forward for c in CHANNELWISE)


# Each grouped layer takes K from the stacked tensors it is given, not from its build: a pack runs
# a model with other stacked parameters too (C-VFL's frozen top, one copy per party and run).


class GroupedConv2d(nn.Module):
    """K runs' ``Conv2d`` layers as one grouped convolution; ``weight`` ``[K, out, in/groups, kh, kw]``."""

    def __init__(self, conv: nn.Conv2d, k: int) -> None:
        super().__init__()
        self.stride, self.padding, self.dilation, self.groups = conv.stride, conv.padding, conv.dilation, conv.groups
        self.weight = nn.Parameter(torch.empty(k, *conv.weight.shape, device="meta"))
        self.bias = None if conv.bias is None else nn.Parameter(torch.empty(k, *conv.bias.shape, device="meta"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.reshape(-1)
        return F.conv2d(x, self.weight.flatten(0, 1), bias, self.stride, self.padding, self.dilation,
                        self.groups * self.weight.shape[0])


class GroupedBatchNorm(nn.Module):
    """K runs' ``BatchNorm1d``/``BatchNorm2d`` layers (affine, with running statistics and a fixed
    momentum) as one over K x C channels; parameters and buffers ``[K, C]``, the count ``[K]``."""

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm, k: int) -> None:
        super().__init__()
        self.momentum, self.eps = bn.momentum, bn.eps
        c = bn.num_features
        self.weight = nn.Parameter(torch.empty(k, c, device="meta"))
        self.bias = nn.Parameter(torch.empty(k, c, device="meta"))
        self.register_buffer("running_mean", torch.empty(k, c, device="meta"))
        self.register_buffer("running_var", torch.empty(k, c, device="meta"))
        self.register_buffer("num_batches_tracked", torch.empty(k, dtype=torch.long, device="meta"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # nn.BatchNorm's forward with running statistics and a fixed momentum: the views of the
        # stacked buffers are updated in place, each run's rows with its own channels' statistics
        if self.training:
            self.num_batches_tracked.add_(1)
        return F.batch_norm(x, self.running_mean.view(-1), self.running_var.view(-1), self.weight.view(-1),
                            self.bias.view(-1), self.training, self.momentum, self.eps)


class GroupedLinear(nn.Module):
    """K runs' ``Linear`` layers as one batched matrix product; ``weight`` ``[K, out, in]``. Its
    input is ``[b, K x in]`` (each run's features contiguous), its output ``[b, K x out]``."""

    def __init__(self, linear: nn.Linear, k: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(k, *linear.weight.shape, device="meta"))
        self.bias = None if linear.bias is None else nn.Parameter(torch.empty(k, *linear.bias.shape, device="meta"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:  # a run's features would mix with the next run's
            raise ValueError(f"a grouped linear layer takes [batch, K x features], got {tuple(x.shape)}")
        b = x.shape[0]
        runs = x.view(b, self.weight.shape[0], -1).transpose(0, 1)  # [K, b, in]
        if self.bias is None:
            y = torch.bmm(runs, self.weight.transpose(1, 2))
        else:
            y = torch.baddbmm(self.bias.unsqueeze(1), runs, self.weight.transpose(1, 2))
        return y.transpose(0, 1).reshape(b, -1)


class GroupedUnflatten(nn.Module):
    """``Unflatten(1, (C, ...))`` of K runs' ``[b, K x C x ...]``: ``[b, K x C, ...]``."""

    def __init__(self, unflatten: nn.Unflatten) -> None:
        super().__init__()
        self.rest = tuple(unflatten.unflattened_size[1:])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(1, (-1, *self.rest))


def why_not_grouped(module: nn.Module) -> str | None:
    """Why ``module`` cannot run as K runs side by side in the channels, or None."""
    for name, m in module.named_modules():
        where = name or type(module).__name__
        if type(m) is nn.Conv2d:
            if m.padding_mode != "zeros":
                return f"{where}: a convolution with padding_mode={m.padding_mode!r}"
        elif type(m) in (nn.BatchNorm1d, nn.BatchNorm2d):
            if not (m.affine and m.track_running_stats) or m.momentum is None:
                return f"{where}: a BatchNorm without affine parameters, running statistics or a fixed momentum"
        elif type(m) is nn.Flatten:
            if m.start_dim != 1 or m.end_dim != -1:
                return f"{where}: a Flatten of dimensions {m.start_dim}..{m.end_dim}"
        elif type(m) is nn.Unflatten:
            if m.dim != 1:
                return f"{where}: an Unflatten of dimension {m.dim}"
        elif type(m) is nn.Linear or _channelwise(m):
            continue
        else:
            return f"{where}: a {type(m).__name__}, whose forward is not known to keep the runs apart"
    return None


def grouped_copy(module: nn.Module, k: int) -> nn.Module:
    """``module``'s architecture with each layer made the K runs' grouped layer, on the meta
    device (:func:`torch.func.functional_call` runs it on the stacked tensors): its parameters and
    buffers have the names of ``module``'s and their stacked shapes ``[K, ...]``."""
    why = why_not_grouped(module)
    if why is not None:
        raise ValueError(f"cannot group this model: {why}")
    out = copy.deepcopy(module).to("meta")

    def swap(parent: nn.Module) -> None:
        for name, child in parent.named_children():
            if type(child) is nn.Conv2d:
                setattr(parent, name, GroupedConv2d(child, k))
            elif type(child) in (nn.BatchNorm1d, nn.BatchNorm2d):
                setattr(parent, name, GroupedBatchNorm(child, k))
            elif type(child) is nn.Linear:
                setattr(parent, name, GroupedLinear(child, k))
            elif type(child) is nn.Unflatten:
                setattr(parent, name, GroupedUnflatten(child))
            else:
                swap(child)

    swap(out)
    out.train(module.training)
    return out


def to_channels(x: torch.Tensor) -> torch.Tensor:
    """The K runs' inputs ``[K, b, C, ...]`` as one batch ``[b, K x C, ...]``, run k's channels k-th."""
    k, b = x.shape[:2]
    return x.transpose(0, 1).reshape(b, k * x.shape[2], *x.shape[3:])


def from_channels(y: torch.Tensor, k: int) -> torch.Tensor:
    """The grouped network's output ``[b, K x C, ...]`` as the K runs' ``[K, b, C, ...]``."""
    b = y.shape[0]
    return y.reshape(b, k, y.shape[1] // k, *y.shape[2:]).transpose(0, 1)


__all__ = ["CHANNELWISE", "GroupedBatchNorm", "GroupedConv2d", "GroupedLinear", "GroupedUnflatten", "from_channels",
           "grouped_copy", "to_channels", "why_not_grouped"]
