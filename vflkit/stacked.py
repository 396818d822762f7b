"""K copies of a party model run as one call, and the channel of K runs' parties.

A pack (:class:`vflkit.methods.pack.Pack`) trains K runs that differ in seed and dataset alone;
each party model of theirs is a :class:`StackedModel` of its K copies. Stacking (``STACKINGS``):
``grouped`` (the K runs side by side in the channels: a convolution is one grouped convolution, a
BatchNorm one over K x C channels, a linear layer one batched matrix product), ``vmap`` (one
batched kernel per layer, the runs moved in and out of the batch around each), or ``loop`` (a call
per run on its slice of the stacked parameters). A stack of one module is the module itself: a
run alone (a pack of one, whose tensors carry no run dimension) computes its own kernels.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap
from torchvision.models.resnet import BasicBlock, Bottleneck

from .comm import KINDS, Channel, payload_nbytes, wire_copy
from .errors import ConfigError, check_choice
from .models import PartyModel


def stacked_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Each run's mean cross-entropy, ``[K]``, of K runs' logits ``[K, b, classes]`` and labels
    ``[K, b]``: ``F.cross_entropy`` of one run for K at once; a run alone's (a pack of one holds
    its tensors without the run dimension): that very call, 0-d."""
    if labels.dim() == 1:
        return F.cross_entropy(logits, labels)
    k, b = labels.shape
    return F.cross_entropy(logits.reshape(k * b, -1), labels.reshape(-1), reduction="none").view(k, b).mean(1)


#: How a :class:`StackedModel` runs its K copies; "auto": :func:`device_stacking`.
STACKINGS: tuple[str, ...] = ("auto", "grouped", "vmap", "loop")

#: Modules whose ``forward`` works on each channel alone (containers: their children are grouped
#: in turn); a subclass counts only with its class's own ``forward``.
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
    """K runs' affine ``BatchNorm1d``/``2d`` layers (running statistics, fixed momentum) as one over
    K x C channels; the stacked buffers are updated in place, each run's rows by its own channels."""

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
        if self.training:
            self.num_batches_tracked.add_(1)
        return F.batch_norm(x, self.running_mean.view(-1), self.running_var.view(-1), self.weight.view(-1),
                            self.bias.view(-1), self.training, self.momentum, self.eps)


class GroupedLinear(nn.Module):
    """K runs' ``Linear`` layers as one batched matrix product: ``[b, K x in]`` to ``[b, K x out]``."""

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
    """``module``'s architecture on the meta device with each layer made the K runs' grouped layer;
    parameters and buffers keep ``module``'s names, in their stacked shapes ``[K, ...]``."""
    why = why_not_grouped(module)
    if why is not None:
        raise ValueError(f"cannot group this model: {why}")
    out = copy.deepcopy(module).to("meta")
    swaps = {nn.Conv2d: lambda c: GroupedConv2d(c, k), nn.BatchNorm1d: lambda c: GroupedBatchNorm(c, k),
             nn.BatchNorm2d: lambda c: GroupedBatchNorm(c, k), nn.Linear: lambda c: GroupedLinear(c, k),
             nn.Unflatten: GroupedUnflatten}

    def swap(parent: nn.Module) -> None:
        for name, child in parent.named_children():
            if type(child) in swaps:
                setattr(parent, name, swaps[type(child)](child))
            else:
                swap(child)

    swap(out)
    out.train(module.training)
    return out


def device_stacking(module: nn.Module, device: torch.device | str) -> str:
    """What ``stacking="auto"`` runs ``module``'s copies with on ``device``: vmap without
    convolutions; with them the loop on a CPU, on a GPU (fewest launches) grouped where it can, else vmap."""
    if not any(isinstance(m, nn.modules.conv._ConvNd) for m in module.modules()):
        return "vmap"
    if torch.device(device).type == "cpu":
        return "loop"
    return "grouped" if why_not_grouped(module) is None else "vmap"


class StackedModel:
    """K copies of one party model (one per run) as one call on ``[K, b, ...]``: stacked
    parameters and buffers, run as ``stacking`` says. ``alone``: one module called on ``[b, ...]``
    with its own parameters. ``compile``: :func:`torch.compile`'s arguments for the stacked call
    (fullgraph). ``bf16``: autocast does not reach inside ``vmap``, so "auto" loops where it would
    vmap, and ``vmap`` is refused."""

    def __init__(self, modules: Sequence[nn.Module], *, stacking: str = "auto",
                 compile: dict[str, Any] | None = None, bf16: bool = False, alone: bool = False) -> None:
        check_choice("stacking", stacking, STACKINGS)
        if alone and len(modules) != 1:
            raise ConfigError(f"a run alone has one copy of each model, not {len(modules)}")
        self.k, self.alone = len(modules), alone
        if alone:
            self.module, self.stacking = modules[0], "alone"
            return
        self.params, self.buffers = stack_module_state(list(modules))
        self.base = copy.deepcopy(modules[0]).to("meta")  # the architecture; functional_call runs it
        self.base.train(modules[0].training)
        if stacking == "auto":
            stacking = device_stacking(self.base, next(iter(self.params.values())).device)
            stacking = "loop" if bf16 and stacking == "vmap" else stacking
        if stacking == "grouped" and (why := why_not_grouped(self.base)) is not None:
            raise ConfigError(f"stacking='grouped' cannot run this model ({why}); use stacking='auto' or 'vmap'")
        if bf16 and (stacking == "vmap" or compile is not None):
            raise ConfigError("bf16 runs do not pack with vmap or compile: autocast does not reach inside vmap; "
                              "use stacking='auto', 'grouped' or 'loop'")
        if stacking == "loop" and compile is not None:
            raise ConfigError("compile applies to the vmapped or grouped call; use stacking='vmap' or 'grouped' "
                              "with it")
        self.stacking = stacking
        if stacking == "grouped":
            self._grouped_base = grouped_copy(self.base, self.k)
        self._forward = {"vmap": vmap(self._one), "loop": self._loop, "grouped": self._grouped}[stacking]
        if compile is not None:
            self._forward = torch.compile(self._forward, fullgraph=True, **compile)

    def _one(self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.base, (params, buffers), (x,))

    def _grouped(self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
                 x: torch.Tensor) -> torch.Tensor:
        # [K, b, C, ...] as one batch [b, K x C, ...], run k's channels k-th, and the output back
        k, b = x.shape[:2]
        batch = x.transpose(0, 1).reshape(b, k * x.shape[2], *x.shape[3:])
        y = functional_call(self._grouped_base, (params, buffers), (batch,))
        return y.reshape(b, k, y.shape[1] // k, *y.shape[2:]).transpose(0, 1)

    def _loop(self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        # slices are views: gradients reach the stacked leaves, BatchNorm updates its run's rows
        return torch.stack([self._one({n: p[k] for n, p in params.items()}, {n: b[k] for n, b in buffers.items()}, x[k])
                            for k in range(len(x))])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x) if self.alone else self._forward(self.params, self.buffers, x)

    def stacked_params(self) -> dict[str, torch.Tensor]:
        """The parameters, ``[K, ...]`` each (one module's: its own)."""
        return dict(self.module.named_parameters()) if self.alone else self.params

    def call_with(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """The architecture run with other (stacked) parameters, e.g. a frozen or received copy."""
        return functional_call(self.module, params, (x,)) if self.alone else self._forward(params, self.buffers, x)

    @torch.no_grad()
    def write_back(self, modules: Sequence[nn.Module]) -> None:
        """Copy run k's slice into ``modules[k]`` (for its evaluation and its checkpoint)."""
        if self.alone:
            return
        stacked = {**self.params, **self.buffers}
        for k, m in enumerate(modules):
            for name, t in [*m.named_parameters(), *m.named_buffers()]:
                t.copy_(stacked[name][k])


class PackChannel:
    """The channel of K runs' parties: one message carries the K runs' payloads stacked on
    dimension 0, and each live run's ledger gets the row the run alone writes (one run's bytes, at
    its own clock). The receiver gets a detached copy, as from :class:`~vflkit.comm.Channel`."""

    def __init__(self, channels: Sequence[Channel]) -> None:
        self.channels = list(channels)
        self.live = [True] * len(self.channels)
        self._boxes: dict[tuple[str, str, str], list[Any]] = {}
        #: while a step is captured (:mod:`vflkit.training.graphs`): its messages, counted again per replay
        self.sends: list[tuple[str, str, str, int]] | None = None

    def send(self, sender: str, receiver: str, kind: str, payload: Any, *, nbytes: int | None = None) -> None:
        """Send K runs' stacked ``payload``; ``nbytes``: one run's size (default: the payload's over K)."""
        check_choice("message kind", kind, KINDS)
        k = len(self.channels)
        wire = wire_copy(payload)  # as it travels: a bf16 payload widened to float32, as alone
        if nbytes is None:
            total = payload_nbytes(wire)
            if total % k:
                raise ValueError(f"a packed {kind} of {total} bytes does not split into {k} runs")
            nbytes = total // k
        self.count([(sender, receiver, kind, int(nbytes))])
        if self.sends is not None:
            self.sends.append((sender, receiver, kind, int(nbytes)))
        self._boxes.setdefault((sender, receiver, kind), []).append(wire)

    def count(self, sends: Sequence[tuple[str, str, str, int]]) -> None:
        """One ledger row per message of ``sends`` (sender, receiver, kind, one run's bytes) in
        every live run's ledger, at its clock (a replayed step's messages too)."""
        for ch, live in zip(self.channels, self.live):
            if live:
                for sender, receiver, kind, nbytes in sends:
                    ch.ledger.add(sender, receiver, kind, nbytes, ch.epoch, ch.step, ch.phase)

    def recv(self, receiver: str, sender: str, kind: str) -> Any:
        """The oldest ``kind`` message from ``sender`` to ``receiver``."""
        box = self._boxes.get((sender, receiver, kind))
        if not box:
            raise RuntimeError(f"{receiver} expected a {kind} message from {sender}, but none was sent; "
                               "the packed protocol is out of order")
        return box.pop(0)


__all__ = ["CHANNELWISE", "STACKINGS", "PackChannel", "StackedModel", "device_stacking", "grouped_copy",
           "why_not_grouped"]
