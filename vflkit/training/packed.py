"""Packed training: K runs that differ only in their seed or dataset trained as one batched computation.

Issue 40, "Packing". A small party model keeps a GPU busy a few per cent of a step: the step
time is set by the number of kernels, not by their FLOPs. Here each party's K copies of a model
(one per run) are stacked with :func:`torch.func.stack_module_state` and run as one
``vmap(functional_call)``: one kernel per layer for all K runs. Each run keeps what the
unpacked trainer (:func:`vflkit.training.split.train`) gives it: its initialisation and data
subset (built by the very same code under its own seed), its batch order (drawn from its own
generator), its batch of ``batch_size``, its optimizer (the same ``torch.optim`` class over the
stacked parameters: SGD, momentum, Adagrad and Adam update elementwise, so slice k follows run
k alone), its ledger (every message counted with one run's bytes in that run's ledger) and its
record. A record of a packed run differs from the unpacked one only in its timings and in
``execution`` (``{"packed": K, "pack": [keys]}``); its key is the config's.

Equivalence is claimed in float64, to a tolerance: a vmapped kernel may reduce in another order
than the unpacked one, so in float32 two trajectories drift apart after a few steps (fastest
for ResNet18 with BatchNorm on 1x1 maps, where the drift is visible after three steps), while
in float64 they agree to ~1e-13 (tests/test_training_packed.py).

Which runs pack (:func:`pack_key`): image data, and a method whose ``train_step`` has a packed
mirror here (:data:`PACKED_STEPS`): Local, SplitNN/PyVertical, C-VFL and the Agg_VFL family.
VFedMH and EASTER (secure aggregation in a host-side ring) do not. Runs pack when their configs
differ in seed and dataset alone and their datasets share an image's shape, the classes and the
number of training images (MNIST and FashionMNIST: VFedMH's Table II trains each method on
both), so every stacked tensor has one shape and every run's epoch as many steps; each run
normalises its images with its own dataset's statistics (:meth:`Pack.x`). Evaluation, once per
epoch, runs each run's own ``evaluate`` on its own models (written back from the pack), so
evaluation metrics and the evaluation ledger are the unpacked code's.

How the K copies run (:data:`STACKINGS`): ``grouped`` (the K runs side by side in the channels,
one grouped layer per layer: :mod:`vflkit.training.grouped`, the GPU's path for every model it
covers), ``vmap`` (one batched kernel per layer too, with the K runs moved in and out of the batch
around every layer: about 4x the operations for a ResNet), or a loop over the slices of the
stacked parameters, which a CPU prefers for convolutions (``python -m vflkit.ops.bench --packed``
prints them beside the runs stepped alone).
``compile`` hands the stacked call to :func:`torch.compile` (e.g. CUDA graphs with
``mode="reduce-overhead"``); on a CPU it is tested with the ``aot_eager`` backend only.
Runs of ``precision="bf16"`` pack with the loop only: autocast does not reach inside ``vmap``
(with torch 2.14.1 a vmapped convolution or linear layer under bf16 autocast computes in
float32, on a CPU), and the loop computes each slice as the run alone does, under autocast.

C-VFL's parties are packed too (:meth:`Pack._group_parties`): its parties' Q local
iterations are independent of one another, so parties with alike bottom models (VFedMH's
Table II: all four) run them as one stacked model of [parties x K] copies: a step then
dispatches far fewer operations than with the parties apart, and either fewer than the K runs
alone (``vflkit.training.counting.count_step_ops`` counts each). On a GPU these steps are launch-bound:
runs alone and seed packs spend about the same time per operation (``results/device/``), so
the step's operations set its time.

A pack's step may be captured once per batch shape and replayed (``graphs``: CUDA graphs,
:mod:`vflkit.training.graphs`; its CPU stand-in, the tape, proves the replayed pack equal to the
eager one in float64); the channel's ledger rows of a replayed step are counted in Python.

A pack checkpoints each of its runs after every epoch in the run's own format (the optimizers'
stacked state written back slice by slice): an interrupted pack resumes where its runs stopped,
and a run alone resumes its packed checkpoint, or the pack the runs' own (float64-equal to a
pack never stopped: tests/test_pack_checkpoints.py). With a deadline it stops at an epoch's end.

What a pack does not do: pack runs of different methods (their steps are different
computations: nothing but an alike layer would batch), a packed evaluation.

Interface for a scheduler or a launcher: :func:`pack_key` (None: not packable),
:func:`packable_config` (a study payload's run config, if it could pack), :func:`group_packs`,
:func:`run_pack` (records, through the record store), :func:`compute_pack` (``run_pack`` of
study payloads: the task function of a pack, for :mod:`vflkit.scheduler` and the launcher's
lanes alike) and :func:`train_pack` (results, as ``split.train`` returns them).
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Hashable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, stack_module_state, vmap
from tqdm.auto import tqdm

from .. import records
from ..config import resolve_device
from ..comm import KINDS, Channel, wire_copy, payload_nbytes
from ..errors import BudgetExhausted, ConfigError, DivergenceError
from ..methods.aggvfl import AggVFL
from ..methods.base import RunConfig, VFLMethod, make_optimizer
from ..methods.cvfl import CVFL, a2_nearest
from ..methods.local import Local
from ..methods.splitnn import SplitNN
from . import checkpoint as checkpoint_io
from . import split
from .grouped import from_channels, grouped_copy, to_channels, why_not_grouped

if TYPE_CHECKING:  # pragma: no cover (graphs imports this module's Pack)
    from .graphs import GraphedStep

#: The setting that captures the packs the scheduler and the launcher train (:func:`compute_pack`)
#: in CUDA graphs (:mod:`vflkit.training.graphs`): ``VFLKIT_GRAPHS=auto`` (on a GPU, when the
#: step can be captured) or ``cuda``; unset, they run eagerly. Off by default until a GPU has
#: measured it (``python -m vflkit.ops.bench --packed`` prints the graphed step beside the eager one).
GRAPHS_ENV = "VFLKIT_GRAPHS"

#: Image datasets by name (a registered :class:`~vflkit.data.ImageData` packs too).
_IMAGE_DATASETS = ("mnist", "fashion_mnist", "cifar10", "cifar100", "cinic10")


# --------------------------------------------------------------------------- the channel


class PackChannel:
    """The channel of K runs' parties: one message carries the K runs' payloads stacked on
    dimension 0, and each run's ledger gets the row the unpacked run would have written (its
    own bytes, at its own clock). Like :class:`~vflkit.comm.Channel`, the receiver gets a
    detached copy: no graph or memory crosses a party boundary.

    A run stopped by divergence is no longer ``live``: its ledger gets no more rows.
    """

    def __init__(self, channels: Sequence[Channel]) -> None:
        self.channels = list(channels)
        self.live = [True] * len(self.channels)
        self._boxes: dict[tuple[str, str, str], list[Any]] = {}
        #: while a step is captured (:mod:`vflkit.training.graphs`): its messages, counted again per replay
        self.sends: list[tuple[str, str, str, int]] | None = None

    def at(self, *, epoch: int, step: int, phase: str) -> None:
        """Set every run's clock."""
        for ch in self.channels:
            ch.at(epoch=epoch, step=step, phase=phase)

    def send(self, sender: str, receiver: str, kind: str, payload: Any, *, nbytes: int | None = None) -> None:
        """Send K runs' stacked ``payload``; ``nbytes`` is one run's size when it travels
        compressed (default: the payload's size over K, each run's slice being alike)."""
        if kind not in KINDS:
            raise ConfigError(f"Invalid message kind {kind!r}; choose one of {', '.join(KINDS)}")
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
        every live run's ledger, at its clock: a replayed step's messages (its payloads moved on
        the device, inside the graph)."""
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


# --------------------------------------------------------------------------- stacked models


#: How a :class:`StackedModel` runs its K copies: "grouped" (the K runs side by side in the
#: channels of one network of grouped layers, :mod:`vflkit.training.grouped`), "vmap" (one
#: batched kernel per layer; a convolution becomes one grouped convolution, with the runs moved
#: in and out of the batch around it), "loop" (K calls on the slices of the stacked parameters: no
#: fewer kernels, for a CPU, where vmap's grouped convolutions were measured at ~0.7x the speed of
#: K plain ones), or "auto" (:func:`device_stacking`).
STACKINGS: tuple[str, ...] = ("auto", "grouped", "vmap", "loop")


def device_stacking(module: nn.Module, device: torch.device | str) -> str:
    """What ``stacking="auto"`` runs ``module``'s K copies with on ``device``. A model with
    convolutions: on a GPU grouped where :mod:`vflkit.training.grouped` covers every layer, else
    vmap; on a CPU the loop. A model without: vmap (measured ~1.1x on a CPU,
    ``python -m vflkit.ops.bench --packed``).

    Why: on a GPU these packs are launch-bound, so the stacking with the fewest operations wins.
    Counted for a pack of 3 (:func:`vflkit.training.counting.count` of one packed step), grouped
    dispatches 0.4-0.6x the operations vmap does for ResNet18s (SplitNN's: 1,270 against 2,912)
    and 0.75-1.0x for CNNs and LeNets, but 1.0-1.1x for MLPs, whose flat features it moves in and
    out of the runs' layout around every linear layer."""
    convolves = any(isinstance(m, nn.modules.conv._ConvNd) for m in module.modules())
    if not convolves:
        return "vmap"
    if torch.device(device).type == "cpu":
        return "loop"
    return "grouped" if why_not_grouped(module) is None else "vmap"


class StackedModel:
    """K copies of one party model (one per run) as one call: stacked parameters (leaves that
    train) and buffers (BatchNorm statistics, updated in place per run), run as one grouped
    network (``stacking="grouped"``), with ``vmap(functional_call)``, or slice by slice
    (``"loop"``); ``"auto"``: :func:`device_stacking`.

    ``compile``: keyword arguments of :func:`torch.compile` for the stacked call (e.g.
    ``{"mode": "reduce-overhead"}`` on a GPU); None runs it eagerly. ``fullgraph`` is set: a
    graph break inside a party model is an error, not a silent slow path.
    """

    def __init__(self, modules: Sequence[nn.Module], *, stacking: str = "auto",
                 compile: dict[str, Any] | None = None) -> None:
        if stacking not in STACKINGS:
            raise ConfigError(f"Invalid stacking {stacking!r}; choose one of {', '.join(STACKINGS)}")
        self.params, self.buffers = stack_module_state(list(modules))
        # the architecture only: functional_call runs it on the stacked tensors
        self.base = copy.deepcopy(modules[0]).to("meta")
        self.base.train(modules[0].training)
        if stacking == "auto":
            stacking = device_stacking(self.base, next(iter(self.params.values())).device)
        if stacking == "grouped" and (why := why_not_grouped(self.base)) is not None:
            raise ConfigError(f"stacking='grouped' cannot run this model ({why}); use stacking='auto' or 'vmap'")
        if stacking == "loop" and compile is not None:
            raise ConfigError("compile applies to the vmapped or grouped call; use stacking='vmap' or 'grouped' with it")
        self.stacking = stacking
        if stacking == "grouped":
            self._grouped_base = grouped_copy(self.base, len(modules))
        self._forward = {"vmap": vmap(self._one), "loop": self._loop, "grouped": self._grouped}[stacking]
        if compile is not None:
            self._forward = torch.compile(self._forward, fullgraph=True, **compile)

    def _one(self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
             x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.base, (params, buffers), (x,))

    def _grouped(self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
                 x: torch.Tensor) -> torch.Tensor:
        # the K runs side by side in the channels: one grouped layer per layer (vflkit.training.grouped)
        y = functional_call(self._grouped_base, (params, buffers), (to_channels(x),))
        return from_channels(y, len(x))

    def _loop(self, params: dict[str, torch.Tensor], buffers: dict[str, torch.Tensor],
              x: torch.Tensor) -> torch.Tensor:
        # slices are views: gradients reach the stacked leaves, BatchNorm updates its run's rows
        return torch.stack([self._one({n: p[k] for n, p in params.items()}, {n: b[k] for n, b in buffers.items()}, x[k])
                            for k in range(len(x))])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward(self.params, self.buffers, x)

    def call_with(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        """The architecture run with other (stacked) parameters, e.g. a frozen or received copy."""
        return self._forward(params, self.buffers, x)

    @torch.no_grad()
    def write_back(self, modules: Sequence[nn.Module]) -> None:
        """Copy run k's slice into ``modules[k]`` (for its evaluation and its record)."""
        for k, m in enumerate(modules):
            for name, t in m.named_parameters():
                t.copy_(self.params[name][k])
            for name, t in m.named_buffers():
                t.copy_(self.buffers[name][k])


def _cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Each run's mean cross-entropy, [K]: ``F.cross_entropy`` of one run, for K at once."""
    k, b = labels.shape
    return F.cross_entropy(logits.reshape(k * b, -1), labels.reshape(-1), reduction="none").view(k, b).mean(1)


# --------------------------------------------------------------------------- the pack


class Pack:
    """K built runs of one method (:class:`~vflkit.methods.base.VFLMethod` objects, each with
    its parties and its own channel) trained as one computation.

    The runs must differ only in seed and dataset (:func:`pack_key`): same method, architectures,
    data shapes, optimizers and learning rates. Each party's training features and the labels
    are stacked [K, N, ...] (the runs' parties keep views of them, so the data is held once),
    each party model is a :class:`StackedModel`, each optimizer is rebuilt over the stacked
    parameters.
    """

    def __init__(self, methods: Sequence[VFLMethod], *, stacking: str = "auto",
                 compile: dict[str, Any] | None = None, group_parties: bool = True) -> None:
        methods = list(methods)
        if not methods:
            raise ConfigError("a pack needs at least one run")
        first = methods[0]
        step = PACKED_STEPS.get(type(first).train_step)
        if step is None:
            raise ConfigError(f"{first.name} has no packed step; packable methods: {', '.join(_packable_names())}")
        if any(type(m) is not type(first) for m in methods):
            raise ConfigError("a pack holds runs of one method; got " + ", ".join(sorted({m.name for m in methods})))
        self.methods, self.k, self._step = methods, len(methods), step
        self.names = [p.name for p in first.parties]
        self.active = first.active.name
        self.device = first.active.device
        self.options = first.options
        self.channel = PackChannel([m.active.channel for m in methods])
        # each run's features normalised as alone, by its own party's transform: the runs of one
        # dataset, a stretch of the pack, in one call (a pack of one dataset: one call)
        stretches = [list(ks) for _, ks in itertools.groupby(range(self.k), key=lambda k: methods[k].config.dataset)]
        self._transforms: dict[str, list[tuple[int, int, Callable[[torch.Tensor], torch.Tensor]]]] = {
            name: [(ks[0], ks[-1] + 1, methods[ks[0]].parties[j].transform) for ks in stretches]
            for j, name in enumerate(self.names)}
        self.features: dict[str, torch.Tensor] = {}
        for j, name in enumerate(self.names):
            runs = [m.parties[j] for m in methods]
            if not all(p.aligned("train") for p in runs):
                raise ConfigError("a pack needs parties whose sample ids are their rows (aligned image parties)")
            self.features[name] = torch.stack([p.held_features("train") for p in runs])
            for k, p in enumerate(runs):  # the run's party sees its slice: the data is held once
                p.hold("train", features=self.features[name][k])
        self.labels = torch.stack([m.active.held_labels("train") for m in methods])
        for k, m in enumerate(methods):
            m.active.hold("train", labels=self.labels[k])
        self.models: dict[tuple[str, str], StackedModel] = {}
        self.optimizers: dict[tuple[str, str], torch.optim.Optimizer] = {}
        for j, name in enumerate(self.names):
            runs = [m.parties[j] for m in methods]
            owner: dict[int, torch.Tensor] = {}
            for model_name in runs[0].models:
                stacked = StackedModel([p.models[model_name] for p in runs], stacking=stacking, compile=compile)
                self.models[(name, model_name)] = stacked
                for pname, t in runs[0].models[model_name].named_parameters():
                    owner[id(t)] = stacked.params[pname]
            cfg = first.config
            for opt_name, opt in runs[0].optimizers.items():
                params = [owner[id(t)] for group in opt.param_groups for t in group["params"]]
                self.optimizers[(name, opt_name)] = make_optimizer(cfg.party_value("optimizers", j), params,
                                                                   float(cfg.party_value("lr", j)))
        #: C-VFL's parties trained as one stacked model per group (:meth:`_group_parties`)
        self.groups: list[tuple[str, ...]] = []
        self.slots: dict[tuple[str, ...], torch.Tensor] = {}
        if step is _step_cvfl:
            self._group_parties(stacking, compile, group_parties)
        # a resumed run's optimizer state (its checkpoint's) and its rate, decayed by the schedule
        for key, own in self._run_optimizers().items():
            _stack_state(self.optimizers[key], own)
        self._rows = torch.arange(self.k, device=self.device)[:, None]
        #: C-VFL's dither of the coming steps, drawn ahead on the host per run (same values)
        self._dither: list[torch.Tensor] = []
        #: the step captured per batch shape (:meth:`capture`), or None: eager
        self.graphed: GraphedStep | None = None

    def _group_parties(self, stacking: str, compile: dict[str, Any] | None, together: bool) -> None:
        """C-VFL's parties whose bottom models are alike, trained as one stacked model.

        A party's Q local iterations use only its own features and bottom model and what it
        received (the others' stale embeddings, the server model, the labels): the parties'
        iterations are independent of one another. Parties with the same architecture, input
        shape, optimizer and rate are therefore stacked once more, party-major ([G x K] copies:
        party g's K runs, then the next party's), and their Q iterations run as one call a
        layer instead of G, each slice computing from its own party's data and messages only
        (float64 equivalence with the unpacked trainer, whose channel enforces who receives
        what: tests/test_training_packed.py). ``together=False`` keeps each party alone (the
        benchmark's comparison).
        """
        first = self.methods[0]
        cfg = first.config

        def alike(j: int) -> Hashable:
            bottom = first.parties[j].models["bottom"]
            return (repr(bottom), tuple((n, tuple(t.shape)) for n, t in bottom.state_dict().items()),
                    tuple(self.features[self.names[j]].shape[2:]), cfg.party_value("optimizers", j),
                    float(cfg.party_value("lr", j)))

        groups: dict[Hashable, list[int]] = {}
        for j in range(len(self.names)):
            groups.setdefault(alike(j) if together else j, []).append(j)
        for members in groups.values():
            names = tuple(self.names[j] for j in members)
            self.groups.append(names)
            if len(names) == 1:  # alone: its own stacked model and optimizer, built above
                continue
            for n in names:  # replaced by the group's
                del self.models[(n, "bottom")], self.optimizers[(n, "local")]
            modules = [m.parties[j].models["bottom"] for j in members for m in self.methods]
            stacked = StackedModel(modules, stacking=stacking, compile=compile)
            self.models[(names, "bottom")] = stacked
            # where each slice's own embedding goes in the top's input: built once, here (a
            # tensor made from host values inside a step would be a copy to the device each step)
            slot = torch.tensor([[m == n for m in self.names] for n in names])
            self.slots[names] = slot.repeat_interleave(self.k, 0).repeat_interleave(cfg.embedding_dim, 1)[:, None, :].to(
                self.device)
            # the unpacked optimizer's parameter order (C-VFL builds it over bottom.parameters())
            params = [stacked.params[n] for n, _ in modules[0].named_parameters()]
            self.optimizers[(names, "local")] = make_optimizer(cfg.party_value("optimizers", members[0]), params,
                                                               float(cfg.party_value("lr", members[0])))

    # -- data -------------------------------------------------------------------------------

    def x(self, party: str, ids: torch.Tensor) -> torch.Tensor:
        """The K runs' batches of ``party``'s features, [K, b, ...], each normalised on the device
        as its run alone normalises it (its dataset's statistics)."""
        batch = self.features[party][self._rows, ids]
        stretches = self._transforms[party]
        if len(stretches) == 1:
            return stretches[0][2](batch)
        return torch.cat([transform(batch[a:b]) for a, b, transform in stretches])

    def y(self, ids: torch.Tensor) -> torch.Tensor:
        """The K runs' batches of labels, [K, b]."""
        return self.labels[self._rows, ids]

    def model(self, party: str, name: str) -> StackedModel:
        return self.models[(party, name)]

    def zero_grad(self, *keys: tuple[str, str]) -> None:
        for key in keys:
            self.optimizers[key].zero_grad(set_to_none=True)

    # -- training ----------------------------------------------------------------------------

    def train_step(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """One protocol step of every run on its batch ``ids[k]`` ([K, b] sample ids on the
        device); each trained model's loss per run, a detached [K] tensor (captured and replayed
        after :meth:`capture`)."""
        if self.graphed is not None:
            return self.graphed(ids)
        return self._step(self, ids)

    def capture(self, backend: str) -> None:
        """From now on, each batch shape's step is captured once and replayed
        (:class:`~vflkit.training.graphs.GraphedStep`; ``backend`` "cuda", or "tape" on a CPU)."""
        from .graphs import GraphedStep

        self.graphed = GraphedStep(self, backend)

    def epoch_lr(self, gamma: float) -> None:
        """The exponential schedule's step after an epoch, as the unpacked trainer applies it."""
        for opt in self.optimizers.values():
            for group in opt.param_groups:
                group["lr"] *= gamma
        if self.graphed is not None:  # the old rate is baked into the captured steps
            self.graphed.forget()

    def write_back(self) -> None:
        """Every run's models as the pack trained them (before evaluating or recording)."""
        for j, name in enumerate(self.names):
            for (party, model_name), stacked in self.models.items():
                if party == name:
                    stacked.write_back([m.parties[j].models[model_name] for m in self.methods])
        for (names, model_name), stacked in self.models.items():
            if isinstance(names, tuple):  # a group of parties: party-major, as stacked
                stacked.write_back([m.parties[self.names.index(n)].models[model_name]
                                    for n in names for m in self.methods])

    def _run_optimizers(self) -> dict[tuple[Any, str], list[torch.optim.Optimizer]]:
        """Each stacked optimizer's runs' own optimizers, in the order of its slices (a group of
        C-VFL parties party-major, as stacked)."""
        out = {}
        for key in self.optimizers:
            party, name = key
            parties = party if isinstance(party, tuple) else (party,)
            out[key] = [m.parties[self.names.index(n)].optimizers[name] for n in parties for m in self.methods]
        return out

    def write_back_optimizers(self) -> None:
        """Every run's own optimizers given their slice of the pack's state and its rate (before
        a checkpoint: a packed run's checkpoint is the one the run alone writes)."""
        for key, own in self._run_optimizers().items():
            _split_state(self.optimizers[key], own)

    def dither_per_step(self) -> int:
        """How many dither tensors one step takes (:meth:`compress` pops one per compressed
        tensor: every party's embedding and each of the top's parameters; C-VFL's dithered
        compressors only)."""
        if self._step is not _step_cvfl or self.options["compressor"] not in ("vector", "scalar"):
            return 0
        return len(self.names) + len(self.methods[0].active.models["top"].state_dict())

    def draw_dither(self, batch_sizes: Sequence[int]) -> None:
        """Draw C-VFL's dither for the coming steps (batch sizes ``batch_sizes``) from each run's
        own generator, in the order the unpacked step draws it, and move it to the device in
        one copy: a step then needs no host-to-device copy. No-op for other methods."""
        if self._step is not _step_cvfl or self.options["compressor"] not in ("vector", "scalar"):
            return
        vector = self.options["compressor"] == "vector"
        e = self.methods[0].config.embedding_dim
        top = [tuple(t.shape) for t in self.methods[0].active.models["top"].state_dict().values()]
        shapes = []  # per step: every party's embedding (passive ones, then the active one), the top
        for b in batch_sizes:
            for shape in [(b, e)] * len(self.names) + top:
                n = math.prod(shape)
                shapes.append(((n + n % 2) // 2, 2) if vector else shape)  # vector: values in pairs
        flat = torch.stack([torch.cat([torch.rand(shape, generator=m.generator).reshape(-1) for shape in shapes])
                            for m in self.methods]).to(self.device, non_blocking=True)
        pieces = torch.split(flat, [math.prod(s) for s in shapes], dim=1)
        self._dither = [d.reshape(self.k, *shape) for d, shape in zip(pieces, shapes)]

    def compress(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        """C-VFL's compressor on K runs' tensors [K, ...]: each run's slice compressed over its
        own range with its own dither, as :meth:`CVFL.compress`; returns the tensor and one
        run's bytes on the wire."""
        bits, kind = int(self.options["bits"]), self.options["compressor"]
        x = x.detach()
        if x.dtype == torch.bfloat16:  # an embedding under bf16 autocast: quantised in float32, as alone
            x = x.float()
        n = x[0].numel()
        if kind == "none":
            return x, n * x.element_size()
        if kind == "topk":
            rows = x.reshape(x.shape[0], x.shape[1], -1) if x.dim() > 2 else x.reshape(x.shape[0], 1, -1)
            keep = max(1, int(rows.shape[2] * bits / 32))
            idx = rows.abs().topk(keep, dim=2).indices
            out = torch.zeros_like(rows).scatter_(2, idx, rows.gather(2, idx))
            return out.reshape(x.shape), rows.shape[1] * keep * 6
        dims = tuple(range(1, x.dim()))
        lo = x.amin(dim=dims, keepdim=True)
        span = torch.clamp(x.amax(dim=dims, keepdim=True) - lo, min=1e-12)
        dither = self._dither.pop(0)
        size = math.ceil(n * bits / 8) + 8
        if kind == "scalar":
            levels = 2**bits
            u = (x - lo) / span * (levels - 1)
            d = dither - 0.5
            q = torch.clamp(torch.round(u + d), 0, levels - 1) - d
            return (q / (levels - 1) * span + lo).to(x.dtype), size
        flat = ((x - lo) / span).reshape(self.k, -1)
        if n % 2:
            flat = torch.cat([flat, flat.new_zeros(self.k, 1)], 1)
        s = math.sqrt(2 / math.sqrt(3)) / 2**bits
        d = (dither - 0.5) * s
        q = a2_nearest((flat.reshape(self.k, -1, 2) + d).reshape(-1, 2), s).reshape(self.k, -1, 2) - d
        out = q.reshape(self.k, -1)[:, :n].reshape(x.shape)
        return (out * span + lo).to(x.dtype), size


def _sliced(value: Any) -> bool:
    """An optimizer state entry that holds one slice per run (momentum, Adam's moments), not a
    count shared by all (Adam's and Adagrad's ``step``: every run takes the same steps)."""
    return isinstance(value, torch.Tensor) and value.dim() > 0


def _stack_state(stacked: torch.optim.Optimizer, own: Sequence[torch.optim.Optimizer]) -> None:
    """Load the runs' own optimizer state into ``stacked``, slice k from ``own[k]``, and its
    rate from theirs. Their parameters are numbered as the stacked optimizer's (the pack builds it
    over the stacked parameters in their order); a fresh run's state is empty, its rate the config's."""
    theirs = [o.state_dict() for o in own]
    sd = stacked.state_dict()
    sd["state"] = {i: {name: torch.stack([t["state"][i][name] for t in theirs]) if _sliced(v) else v
                       for name, v in st.items()}
                   for i, st in theirs[0]["state"].items()}
    for group in sd["param_groups"]:
        group["lr"] = theirs[0]["param_groups"][0]["lr"]
    stacked.load_state_dict(sd)


def _split_state(stacked: torch.optim.Optimizer, own: Sequence[torch.optim.Optimizer]) -> None:
    """The reverse of :func:`_stack_state`: ``own[k]`` gets slice k of the stacked state (a view:
    a checkpoint copies it out as it writes, :func:`vflkit.training.checkpoint.write`) and the
    stacked rate."""
    sd = stacked.state_dict()
    lr = sd["param_groups"][0]["lr"]
    for k, opt in enumerate(own):
        mine = opt.state_dict()
        mine["state"] = {i: {name: v[k] if _sliced(v) else v for name, v in st.items()}
                         for i, st in sd["state"].items()}
        for group in mine["param_groups"]:
            group["lr"] = lr
        opt.load_state_dict(mine)


# --------------------------------------------------------------------------- packed steps
#
# Each mirrors one method's ``train_step`` (vflkit/methods/*.py): the same messages in the
# same order, with every tensor carrying K runs on dimension 0. A change to a method's step
# must be made here too; tests/test_training_packed.py compares the two in float64.


def _step_local(pack: Pack, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    a = pack.active
    pack.zero_grad((a, "local"))
    loss = _cross_entropy(pack.model(a, "model")(pack.x(a, ids)), pack.y(ids))
    loss.sum().backward()  # run k's slice gets the gradient of run k's loss alone
    pack.optimizers[(a, "local")].step()
    return {"active": loss.detach()}


def _step_splitnn(pack: Pack, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    a, ch = pack.active, pack.channel
    passive = [n for n in pack.names if n != a]
    pack.zero_grad(*((n, "local") for n in pack.names))
    sent = {}
    for n in passive:
        sent[n] = pack.model(n, "bottom")(pack.x(n, ids))
        ch.send(n, a, "embedding", sent[n])
    embeddings = [pack.model(n, "bottom")(pack.x(n, ids)) if n == a
                  else ch.recv(a, n, "embedding").requires_grad_(True) for n in pack.names]
    loss = _cross_entropy(pack.model(a, "top")(torch.cat(embeddings, dim=2)), pack.y(ids))
    loss.sum().backward()
    for n, e in zip(pack.names, embeddings):
        if n != a:
            ch.send(a, n, "gradient", e.grad)
    pack.optimizers[(a, "local")].step()
    if passive:
        torch.autograd.backward([sent[n] for n in passive], [ch.recv(n, a, "gradient") for n in passive])
    for n in passive:
        pack.optimizers[(n, "local")].step()
    return {"active": loss.detach()}


def _step_aggvfl(pack: Pack, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    a, ch = pack.active, pack.channel
    passive = [n for n in pack.names if n != a]
    pack.zero_grad(*((n, "local") for n in pack.names))
    sent = {}
    for n in passive:
        sent[n] = pack.model(n, "model")(pack.x(n, ids))
        ch.send(n, a, "prediction", sent[n])
    received = [ch.recv(a, n, "prediction").requires_grad_(True) for n in passive]
    own = pack.model(a, "model")(pack.x(a, ids))
    total = own + torch.stack(received).sum(0) if received else own
    loss = _cross_entropy(total, pack.y(ids))
    loss.sum().backward()
    for n, r in zip(passive, received):
        ch.send(a, n, "gradient", r.grad)
    pack.optimizers[(a, "local")].step()
    if passive:
        torch.autograd.backward([sent[n] for n in passive], [ch.recv(n, a, "gradient") for n in passive])
    for n in passive:
        pack.optimizers[(n, "local")].step()
    return {"active": loss.detach()}


def _step_cvfl(pack: Pack, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    a, ch = pack.active, pack.channel
    passive = [n for n in pack.names if n != a]
    q = int(pack.options["local_iterations"])
    top = pack.model(a, "top")
    if not pack._dither:  # no draw ahead (a caller stepping by itself): this step's only
        pack.draw_dither([ids.shape[1]])
    sizes: dict[str, int] = {}
    stale: dict[str, torch.Tensor] = {}
    xs = {group: pack.x(group[0], ids) if len(group) == 1 else torch.cat([pack.x(n, ids) for n in group])
          for group in pack.groups}
    with torch.no_grad():
        fresh: dict[str, torch.Tensor] = {}  # each party's embedding, computed by its group's call
        for group in pack.groups:
            out = pack.models[(group[0] if len(group) == 1 else group, "bottom")](xs[group])
            fresh.update((n, out[g * pack.k:(g + 1) * pack.k]) for g, n in enumerate(group))
        for n in passive:
            h, sizes[n] = pack.compress(fresh[n])
            ch.send(n, a, "embedding", h, nbytes=sizes[n])
        stale = {n: ch.recv(a, n, "embedding") for n in passive}
        stale[a], sizes[a] = pack.compress(fresh[a])
        top_state, top_bytes = {}, 0
        for name, value in top.params.items():  # state_dict order: the top has no buffers
            top_state[name], nb = pack.compress(value)
            top_bytes += nb
    y = pack.y(ids)
    for n in passive:
        others = {m: e for m, e in stale.items() if m != n}
        ch.send(a, n, "embedding", others, nbytes=sum(sizes[m] for m in others))
        ch.send(a, n, "model_weights", top_state, nbytes=top_bytes)
        ch.send(a, n, "labels", y)
    # Q local iterations at every party on its own bottom model, against a frozen top: the
    # active party's own (not yet updated: the server's iterations come after), the compressed
    # copy for a passive party. What each party computes from: its own features and model,
    # and what it received.
    got: dict[str, tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor]] = {}
    for n in pack.names:
        if n == a:
            got[n] = ({k: v.detach() for k, v in top.params.items()}, stale, y)
        else:
            got[n] = (ch.recv(n, a, "model_weights"), ch.recv(n, a, "embedding"), ch.recv(n, a, "labels"))
    for group in pack.groups:
        if len(group) == 1:
            n = group[0]
            frozen, embeddings, labels = got[n]
            x = xs[group]
            bottom, opt = pack.model(n, "bottom"), pack.optimizers[(n, "local")]
            for _ in range(q):
                opt.zero_grad(set_to_none=True)
                own = bottom(x)
                z = torch.cat([own if m == n else embeddings[m] for m in pack.names], 2)
                _cross_entropy(top.call_with(frozen, z), labels).sum().backward()
                opt.step()
            continue
        # G parties as one stacked model, party-major [G x K]: slice g*K+k is party g's run k,
        # fed party g's features and computing against party g's own messages
        x = xs[group]
        frozen = {k: torch.cat([got[n][0][k] for n in group]) for k in top.params}
        labels = torch.cat([got[n][2] for n in group])
        # the top's input with each party's own slot left open (zeros), filled each iteration
        # with its fresh embedding by a select: exact, and its gradient reaches that slot only
        fixed = torch.cat([torch.cat([torch.zeros_like(stale[m]) if m == n else got[n][1][m] for m in pack.names], 2)
                           for n in group])
        mask = pack.slots[group]
        bottom, opt = pack.models[(group, "bottom")], pack.optimizers[(group, "local")]
        for _ in range(q):
            opt.zero_grad(set_to_none=True)
            own = bottom(x)
            z = torch.where(mask, own.repeat(1, 1, len(pack.names)), fixed)
            _cross_entropy(top.call_with(frozen, z), labels).sum().backward()
            opt.step()
    z = torch.cat([stale[m] for m in pack.names], 2)
    opt = pack.optimizers[(a, "top")]
    for _ in range(q):
        opt.zero_grad(set_to_none=True)
        loss = _cross_entropy(top(z), y)
        loss.sum().backward()
        opt.step()
    return {"active": loss.detach()}


#: Method ``train_step`` -> its packed mirror. A subclass that keeps its parent's step packs
#: (Homo_/Heter_aggVFL, PyVertical); one that overrides it does not, until mirrored here.
PACKED_STEPS: dict[Callable[..., Any], Callable[[Pack, torch.Tensor], dict[str, torch.Tensor]]] = {
    Local.train_step: _step_local,
    SplitNN.train_step: _step_splitnn,
    AggVFL.train_step: _step_aggvfl,
    CVFL.train_step: _step_cvfl,
}


def _packable_names() -> list[str]:
    from ..methods import METHODS

    return sorted(n for n, cls in METHODS.items() if cls.train_step in PACKED_STEPS)


# --------------------------------------------------------------------------- the interface


def _is_image_dataset(name: str) -> bool:
    from ..data import ALIASES, ImageData, is_registered, load_dataset

    if is_registered(name):
        return isinstance(load_dataset(name), ImageData)  # in memory: no files read
    return ALIASES.get(name, name) in _IMAGE_DATASETS


def _data_shape(config: RunConfig) -> tuple[tuple[int, ...], int, int]:
    """What a run's image data must share with the other runs of its pack: one image's shape,
    the number of classes and of training images (after ``n_train``). A built-in dataset's
    come from :data:`vflkit.data.IMAGE_METADATA` (nothing is loaded), a registered one's from
    the data in memory."""
    from ..data import IMAGE_METADATA as IMAGE_DATASETS
    from ..data import ALIASES, is_registered
    from . import dataset

    name = ALIASES.get(config.dataset, config.dataset)
    if is_registered(config.dataset) or name not in IMAGE_DATASETS:
        data = dataset(config.dataset)
        shape, n_classes, n_train = data.image_shape, data.num_classes, len(data.y_train)
    else:
        shape, n_classes, n_train = IMAGE_DATASETS[name]
    return tuple(shape), n_classes, config.n_train or n_train


def pack_key(config: Any) -> Hashable | None:
    """What runs must share to be packed with ``config``: its key's fields but the seed and the
    dataset, and its data's shape (:func:`_data_shape`), so equal pack keys differ in seed and
    dataset alone (MNIST's runs pack with FashionMNIST's, CIFAR-10's with neither); or None when
    ``config`` cannot be packed (a method without a packed step, or tabular data). A Multi-VFL
    run packs with the runs that share its step's shapes
    (:func:`vflkit.training.multi_owner_packed.pack_key`)."""
    from ..methods import METHODS
    from ..methods.multi_vfl import MultiVFLConfig

    if isinstance(config, MultiVFLConfig):
        from .multi_owner_packed import pack_key as multi_owner_key

        return multi_owner_key(config)
    if not isinstance(config, RunConfig):
        return None

    cls = METHODS.get(config.method)
    if cls is None or cls.train_step not in PACKED_STEPS or not _is_image_dataset(config.dataset):
        return None
    shared = config.replace(seed=0).key_dict()  # the fields a record's key hashes, as they are hashed
    del shared["dataset"]
    shared.pop("data_digest", None)  # a registered dataset's content
    return ("packed", json.dumps(shared, sort_keys=True), _data_shape(config))


def _why_not_packable(config: RunConfig) -> str:
    from ..methods import METHODS

    if METHODS.get(config.method) is None or METHODS[config.method].train_step not in PACKED_STEPS:
        return f"method {config.method!r} has no packed step (packable: {', '.join(_packable_names())})"
    return f"dataset {config.dataset!r} is not image data"


def check_pack(configs: Sequence[RunConfig]) -> None:
    """A ConfigError unless ``configs`` can be trained as one pack: each packable, all with one
    :func:`pack_key` (they differ in seed and dataset alone, the datasets of one shape), no run
    twice."""
    if not configs:
        raise ConfigError("a pack needs at least one run config")
    keys = []
    for c in configs:
        key = pack_key(c)
        if key is None:
            raise ConfigError(f"run {c.key} cannot be packed: {_why_not_packable(c)}")
        keys.append(key)
    if len(set(keys)) > 1:
        raise ConfigError("a pack holds runs that differ in seed and dataset alone, on datasets of one image "
                          "shape, classes and training size; these differ in more (group them with "
                          "vflkit.training.packed.group_packs)")
    seen = [c.key for c in configs]
    if len(set(seen)) != len(seen):
        raise ConfigError("a pack holds each run once; the same config was given twice")


def pack_limit(config: Any, max_size: int | None) -> int | None:
    """The most runs a pack of ``config`` holds: ``max_size`` (the scheduler's and launcher's
    :data:`~vflkit.scheduler.MAX_PACK` for seeds), a Multi-VFL run's own
    (:data:`~vflkit.training.multi_owner_packed.MAX_RUNS`, where it is larger)."""
    from ..methods.multi_vfl import MultiVFLConfig

    if isinstance(config, MultiVFLConfig) and max_size is not None:
        from .multi_owner_packed import MAX_RUNS

        return max(max_size, MAX_RUNS)
    return max_size


def group_packs(configs: Sequence[Any], *, max_size: int | None = None) -> tuple[list[list[Any]], list[Any]]:
    """``configs`` grouped into packs (equal :func:`pack_key`, at most :func:`pack_limit` runs
    each, in the order given) and the configs that cannot be packed."""
    groups: dict[Hashable, list[list[RunConfig]]] = {}
    single: list[RunConfig] = []
    for c in configs:
        key = pack_key(c)
        if key is None:
            single.append(c)
            continue
        packs = groups.setdefault(key, [[]])
        limit = pack_limit(c, max_size)
        if limit is not None and len(packs[-1]) >= limit:
            packs.append([])
        packs[-1].append(c)
    return [p for packs in groups.values() for p in packs], single


def packable_config(family: str, config: Mapping[str, Any]) -> Any:
    """The run config of a study payload (its protocol ``family`` and its config as a dict)
    when :func:`pack_key` may pack it: the split family's and the multi-label-owner family's
    (Multi-VFL), and a whole config (a stand-in or a config of another version of the class is
    not); else None."""
    from ..methods.multi_vfl import MultiVFLConfig

    cls = {"split": RunConfig, "multi_owner": MultiVFLConfig}.get(family)
    if cls is None:  # the packed trainers mirror these two families only
        return None
    try:
        return cls.from_dict(dict(config))
    except (TypeError, ValueError, KeyError, ConfigError):
        return None


def compute_pack(payloads: Sequence[Mapping[str, Any]], *, device: torch.device | str = "auto",
                 deadline: float | None = None) -> list[dict[str, Any]]:
    """The records of study payloads (``{"family": "split", "config", "profile", "results"}``,
    what :func:`vflkit.study.compute` takes for one run) trained as one pack by :func:`run_pack`,
    a diverging run handled as its family says (:data:`vflkit.training.FAMILIES`): the
    task function of a pack, for the scheduler and the launcher's lanes, as
    :func:`vflkit.study.compute` is of one run. Multi-VFL's payloads go to its packed trainer
    (:func:`vflkit.training.multi_owner_packed.compute_pack`).

    ``deadline``: the pack checkpoints its runs after every epoch (a Multi-VFL pack: round) and
    stops at the end of the last one that ends before it (:class:`~vflkit.errors.BudgetExhausted`),
    as a run alone does. Whoever starts a pack still checks first that its estimate ends before
    the deadline (:func:`vflkit.scheduler.ends_before`): on a time-limited GPU machine a
    checkpoint is lost with it. CUDA graphs as ``$VFLKIT_GRAPHS`` says (:data:`GRAPHS_ENV`)."""
    payloads = list(payloads)
    if payloads and all(p.get("family") == "multi_owner" for p in payloads):
        from .multi_owner_packed import compute_pack as multi_owner_pack

        return multi_owner_pack(payloads, device=device, deadline=deadline)
    profiles = {(p["profile"], str(p["results"])) for p in payloads}
    if len(profiles) != 1:
        raise ConfigError(f"a pack writes its records under one profile and results folder; got {sorted(profiles)}")
    configs = [packable_config(p["family"], p["config"]) for p in payloads]
    if any(c is None for c in configs):
        bad = [p["config"].get("method", "?") for p, c in zip(payloads, configs) if c is None]
        raise ConfigError(f"a pack holds split-family runs of whole configs; these are not: {bad}")
    from . import FAMILIES

    profile, results = next(iter(profiles))
    return run_pack(configs, profile=profile, device=device, results=Path(results),
                    on_divergence=FAMILIES["split"].on_divergence, graphs=os.environ.get(GRAPHS_ENV) or None,
                    deadline=deadline)


class _PackWindow:
    """The K runs' losses not yet read back, read with one transfer per ``every`` steps; per
    run, the checks and double-precision sums of :class:`vflkit.training.split.LossWindow`
    (one per run, fed one read step at a time)."""

    def __init__(self, n_runs: int, *, epoch: int, limit: float, every: int) -> None:
        self.windows = [split.LossWindow(epoch=epoch, limit=limit, every=1) for _ in range(n_runs)]
        self.every = every
        #: runs stopped by divergence: their losses are no longer read
        self.stopped: set[int] = set()
        self._pending: list[tuple[int, int, dict[str, torch.Tensor]]] = []

    def add(self, step: int, n: int, losses: dict[str, torch.Tensor]) -> dict[int, DivergenceError]:
        self._pending.append((step, n, losses))
        return self.drain() if len(self._pending) >= self.every else {}

    def drain(self) -> dict[int, DivergenceError]:
        """Read the pending losses; the runs that diverged among them, with their errors."""
        pending, self._pending = self._pending, []
        if not pending:
            return {}
        # one transfer: [pending steps x models] rows of K values
        read = iter(torch.stack([v.detach().double() for _, _, losses in pending
                                 for v in losses.values()]).tolist())
        rows = [(step, n, {key: next(read) for key in losses}) for step, n, losses in pending]
        failed: dict[int, DivergenceError] = {}
        for k, w in enumerate(self.windows):
            if k in self.stopped:
                continue
            try:
                for step, n, values in rows:
                    w.add(step, n, {key: v[k] for key, v in values.items()})
            except DivergenceError as err:  # the steps after it are not counted, as alone
                failed[k] = err
        return failed


def train_pack(configs: Sequence[RunConfig], *, device: torch.device | str = "cpu", progress: bool = False,
               on_divergence: str = "raise", max_loss: float = 1e4, stacking: str = "auto",
               compile: dict[str, Any] | None = None, graphs: str | None = None,
               checkpoints: Sequence[Path] | None = None, deadline: float | None = None) -> list[dict[str, Any]]:
    """Train ``configs`` (runs that differ in seed and dataset alone, :func:`check_pack`) as one pack; each
    run's result as :func:`vflkit.training.split.train` returns it, plus ``execution``.

    ``checkpoints`` (one path per run): after every epoch but the last, each run's state is
    saved at its path as the run alone saves it (:func:`vflkit.training.split.save_checkpoint`),
    and a pack whose runs all find a checkpoint of the same epoch continues after it, so either
    trainer resumes the other's runs (else it starts from epoch 1, with a warning). A run that
    diverged is checkpointed as diverged (:func:`vflkit.training.split.save_checkpoint`) while
    its siblings train on. With ``deadline`` (a ``time.time()`` value) too, a pack whose next
    epoch would end after it stops there, checkpointed, with
    :class:`~vflkit.errors.BudgetExhausted`, as a run alone does (whatever its runs diverged).

    Timings (``wall_time_s``, each history row's ``elapsed_s``) are the pack's. A run whose loss
    is not finite or exceeds ``max_loss`` raises :class:`DivergenceError` (naming the run), or
    with ``on_divergence="record"`` stops there while the others go on, as it would alone.
    ``stacking`` and ``compile``: how each stacked party model runs (:class:`StackedModel`).
    ``graphs``: capture the step per batch shape and replay it (:mod:`vflkit.training.graphs`:
    "cuda", or "tape", its CPU stand-in; "auto": "cuda" on a CUDA device when the pack's step
    can be captured, else eager); None: eager. The records name it (``execution["graphs"]``).
    """
    from ..methods import get_method
    from .graphs import GRAPH_BACKENDS, graph_blocker

    check_pack(configs)
    if on_divergence not in ("raise", "record"):
        raise ConfigError(f"Invalid on_divergence {on_divergence!r}; choose raise or record")
    if graphs is not None and graphs not in (*GRAPH_BACKENDS, "auto"):
        raise ConfigError(f"Invalid graphs {graphs!r}; choose None, auto or one of {', '.join(GRAPH_BACKENDS)}")
    if graphs is not None and compile is not None:
        raise ConfigError("graphs and compile both capture the step: choose one")
    if checkpoints is not None and len(checkpoints) != len(configs):
        raise ConfigError(f"a pack of {len(configs)} runs needs as many checkpoint paths; got {len(checkpoints)}")
    by_dataset = sorted(range(len(configs)), key=lambda k: configs[k].dataset)  # stable: seeds keep their order
    if by_dataset != list(range(len(configs))):  # runs of one dataset side by side: one stretch each (Pack.x)
        got = train_pack([configs[k] for k in by_dataset], device=device, progress=progress,
                         on_divergence=on_divergence, max_loss=max_loss, stacking=stacking, compile=compile,
                         graphs=graphs, checkpoints=None if checkpoints is None else [checkpoints[k] for k in by_dataset],
                         deadline=deadline)
        of_run = dict(zip(by_dataset, got))
        return [of_run[k] for k in range(len(configs))]
    if configs[0].precision == "bf16":  # autocast does not reach inside vmap (module docstring)
        if stacking == "vmap" or compile is not None:
            raise ConfigError("a bf16 pack runs its slices one by one (stacking='loop', no compile): autocast "
                              "does not reach inside vmap; use stacking='auto' or 'loop'")
        stacking = "loop"
    device = resolve_device(device)
    methods = []
    for cfg in configs:  # each run built exactly as split.train builds it: init, data, ids
        torch.manual_seed(cfg.seed)
        channel = Channel()
        parties, n_classes = split.build_parties(cfg, device=device, channel=channel)
        method = get_method(cfg.method)(cfg, parties, num_classes=n_classes)
        split.use_precision(cfg, method)
        channel.at(epoch=0, step=0, phase="setup")
        method.setup()
        methods.append(method)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    gens = [torch.Generator().manual_seed(c.seed) for c in configs]
    ledger_logs = [checkpoint_io.LedgerLog(m.active.channel) for m in methods]
    histories: list[list[dict[str, Any]]] = [[] for _ in configs]
    finals: list[dict[str, Any]] = [{} for _ in configs]
    diverged: list[dict[str, Any] | None] = [None] * len(configs)
    first_epoch, offset = _resume(methods, configs, checkpoints, ledger_logs, gens, histories, finals, diverged,
                                  device)
    pack = Pack(methods, stacking=stacking, compile=compile)  # stacks the resumed models and optimizers
    for k, d in enumerate(diverged):  # a run that diverged before the checkpoint sends no more messages
        if d is not None and on_divergence == "raise":
            raise DivergenceError(f"run {configs[k].key} (seed {configs[k].seed}) of the pack: {d['message']}")
        if d is not None:
            pack.channel.live[k] = False
    # the runs' precision (split.precision_context): steps and evaluation under bf16 autocast, as alone
    compute = split.precision_context(configs[0], device)
    if graphs == "auto":
        graphs = "cuda" if device.type == "cuda" and graph_blocker(pack, "cuda") is None else None
    if graphs is not None:
        pack.capture(graphs)
    cfg0 = configs[0]
    n = len(methods[0].active.ids["train"])
    n_steps = math.ceil(n / cfg0.batch_size)
    every = split.SYNC_EVERY_CUDA if device.type == "cuda" else 1
    datasets = "+".join(dict.fromkeys(c.dataset for c in configs))
    bar = tqdm(total=cfg0.epochs * n_steps, initial=(first_epoch - 1) * n_steps,
               desc=f"{cfg0.method} {datasets} x{len(configs)}", disable=not progress, leave=False)
    start = time.perf_counter() - offset
    for epoch in range(first_epoch, cfg0.epochs + 1):
        live = [k for k in range(len(configs)) if diverged[k] is None]
        if not live:
            break
        orders = []
        for k, m in enumerate(methods):
            order = m.active.ids["train"][torch.randperm(n, generator=gens[k])]
            for party in m.parties:
                if "train" in party.ids:
                    party.check_ids("train", order)
            orders.append(order)
        order = torch.stack(orders).to(device)
        window = _PackWindow(len(configs), epoch=epoch, limit=max_loss, every=every)
        window.stopped.update(k for k in range(len(configs)) if diverged[k] is not None)
        stopped: dict[int, tuple[DivergenceError, int]] = {}
        sizes = [min(cfg0.batch_size, n - s * cfg0.batch_size) for s in range(n_steps)]
        for step in range(n_steps):
            if step % every == 0:
                pack.draw_dither(sizes[step:step + every])
            pack.channel.at(epoch=epoch, step=step, phase="train")
            ids = order[:, step * cfg0.batch_size:(step + 1) * cfg0.batch_size]
            with compute:
                losses = pack.train_step(ids)
            failed = window.add(step, ids.shape[1], losses)
            if step == n_steps - 1:
                failed.update(window.drain())
            for k, err in failed.items():
                if on_divergence == "raise":
                    raise DivergenceError(f"run {configs[k].key} (seed {configs[k].seed}) of the pack: {err}") from None
                stopped[k] = (err, step + 1)
                pack.channel.live[k] = False
            if failed:
                with compute:
                    _finish_epoch(pack, [k for k in failed], configs, epoch, window, histories, finals, start)
                for k in failed:
                    err, returned = stopped[k]
                    diverged[k] = {"epoch": epoch, "step": getattr(err, "step", step), "steps_run": returned,
                                   "message": str(err)}
                window.stopped.update(failed)
            bar.update(1)
        if cfg0.lr_schedule == "exponential":
            pack.epoch_lr(cfg0.lr_gamma)
        going = [k for k in live if k not in stopped]
        with compute:
            _finish_epoch(pack, going, configs, epoch, window, histories, finals, start)
        # every run is checkpointed and the deadline looked at whatever its siblings did: a run
        # that diverged is saved as diverged (its result is final), so a pack stopped here
        # resumes its healthy runs after this epoch and keeps the divergence as it happened
        if checkpoints is not None and epoch < cfg0.epochs and any(d is None for d in diverged):
            pack.write_back_optimizers()  # the models were written back to evaluate them
            for k, m in enumerate(methods):
                split.save_checkpoint(checkpoints[k], config=configs[k], epoch=epoch,
                                      elapsed_s=time.perf_counter() - start, history=histories[k], method=m,
                                      ledger_log=ledger_logs[k], gen=gens[k], device=device,
                                      diverged=diverged[k], final=finals[k] if diverged[k] else None)
            epoch_s = (time.perf_counter() - start - offset) / (epoch - first_epoch + 1)
            if deadline is not None and time.time() + epoch_s > deadline:
                bar.close()
                raise BudgetExhausted(f"a pack of {len(configs)} {cfg0.method} {datasets} runs stopped after "
                                      f"epoch {epoch} of {cfg0.epochs} at the budget; rerun to resume it")
    bar.close()
    wall = time.perf_counter() - start
    results = []
    keys = [c.key for c in configs]
    for k, (m, cfg) in enumerate(zip(methods, configs)):
        ledger = m.active.channel.ledger
        results.append({
            "models": m.trained_models(),
            "history": histories[k],
            "final": finals[k],
            "wall_time_s": wall,
            "comm": split.comm_summary(ledger),
            "diverged": diverged[k],
            "execution": {"packed": len(configs), "pack": keys, **({"graphs": graphs} if graphs else {})},
        })
    return results


def _resume(methods: Sequence[VFLMethod], configs: Sequence[RunConfig], checkpoints: Sequence[Path] | None,
            ledger_logs: Sequence[checkpoint_io.LedgerLog], gens: Sequence[torch.Generator],
            histories: list[list[dict[str, Any]]], finals: list[dict[str, Any]],
            diverged: list[dict[str, Any] | None], device: torch.device) -> tuple[int, float]:
    """Restore every run of a pack from its checkpoint (each run's own, as alone) when all have
    one of the same epoch (:func:`~vflkit.training.checkpoint.load_all`): the first epoch to
    train and the seconds already spent; else (1, 0). A run saved as diverged gets its
    divergence and final metrics back into ``diverged`` and ``finals``."""
    states = (checkpoint_io.load_all(checkpoints, configs, device=device, unit="epoch", check=split.check_checkpoint)
              if checkpoints else None)
    if states is None:
        return 1, 0.0
    for k, state in enumerate(states):
        split.restore_checkpoint(state, method=methods[k], ledger_log=ledger_logs[k], gen=gens[k], device=device)
        histories[k] = state["history"]
        if state.get("diverged") is not None:
            diverged[k], finals[k] = state["diverged"], state["final"]
    return states[0]["epoch"] + 1, max(s["elapsed_s"] for s in states)


def _finish_epoch(pack: Pack, runs: Sequence[int], configs: Sequence[RunConfig], epoch: int,
                  window: _PackWindow, histories: list[list[dict[str, Any]]], finals: list[dict[str, Any]],
                  start: float) -> None:
    """Evaluate ``runs`` after ``epoch`` (each its own models, through its own channel) and
    append their history rows, as the unpacked trainer does."""
    if not runs:
        return
    pack.write_back()
    for k in runs:
        m, w = pack.methods[k], window.windows[k]
        m.active.channel.at(epoch=epoch, step=0, phase="eval")
        metrics = split.evaluate(m, configs[k])
        for model_key, values in metrics.items():
            row = {"epoch": epoch, "model": model_key, "elapsed_s": time.perf_counter() - start,
                   "loss": w.sums[model_key] / w.seen if w.seen and model_key in w.sums else float("nan")}
            row.update(values)
            histories[k].append(row)
        finals[k] = dict(metrics)


def run_pack(configs: Sequence[RunConfig], *, profile: str, device: torch.device | str = "auto",
             results: str | Path | None = None, force: bool = False, progress: bool = False,
             on_divergence: str = "raise", graphs: str | None = None,
             deadline: float | None = None) -> list[dict[str, Any]]:
    """The records of ``configs`` (one pack, :func:`check_pack`), in their order: those already
    recorded are loaded, the others trained as one pack (:func:`train_pack`) and written to the
    record store, each under its own key, with ``execution`` naming the pack. Each run is
    checkpointed beside its record after every epoch, where the run alone checkpoints (an
    interrupted pack, or one the ``deadline`` stopped, resumes there).

    Records are made by the record store's one path (:func:`vflkit.records.run_together`, the
    one :func:`vflkit.records.run_one` takes), so the envelope and its checks are the unpacked
    runs'; ``peak_memory_mb`` is the pack's peak (every run of a pack holds it together).
    """
    check_pack(configs)

    def train_all(todo: list[RunConfig], dev: torch.device, checkpoints: list[Path]) -> list[dict[str, Any]]:
        return train_pack(todo, device=dev, progress=progress, on_divergence=on_divergence, graphs=graphs,
                          checkpoints=checkpoints, deadline=deadline)

    return records.run_together(configs, train_all=train_all, profile=profile, device=device, results=results,
                                force=force, on_divergence=on_divergence)


__all__ = [
    "GRAPHS_ENV", "PACKED_STEPS", "Pack", "PackChannel", "StackedModel", "check_pack", "compute_pack", "device_stacking",
    "group_packs", "pack_key", "pack_limit", "packable_config", "run_pack", "train_pack"]
