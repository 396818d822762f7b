"""A pack (:class:`Pack`), what every packable method's step takes; :mod:`vflkit.training.split` steps it."""

from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import torch

from ..comm import Channel
from ..errors import ConfigError
from ..stacked import PackChannel, StackedModel


class Pack:
    """K >= 1 built runs of one method whose step packs (:attr:`VFLMethod.step`), trained as one
    computation: what the step takes (``names``, ``active``, ``x``, ``y``, ``model``,
    ``optimizers``, ``channel``) for the K runs at once.

    The runs differ only in seed and dataset (:func:`pack_key`). For K > 1 each party's training
    features and the labels are stacked ``[K, N, ...]`` (the runs' parties hold views of them),
    each party model is a :class:`~vflkit.stacked.StackedModel`, each optimizer the same
    ``torch.optim`` class over the stacked parameters (elementwise: slice k follows run k alone).
    A run alone (:meth:`~vflkit.methods.base.VFLMethod.train_step`) is a pack of one: it takes
    its batches from its parties and steps its own models and optimizers, its tensors without
    the run dimension (``ids`` ``[b]``, each loss 0-d): the run's own kernels.
    """

    def __init__(self, methods: Sequence[Any], *, stacking: str = "auto",
                 compile: dict[str, Any] | None = None, group_parties: bool = True) -> None:
        methods = list(methods)
        if not methods:
            raise ConfigError("a pack needs at least one run")
        first = methods[0]
        self.cls = type(first)
        if self.cls.step is None:
            raise ConfigError(f"{first.name} does not pack; packable methods: {', '.join(_packable_names())}")
        if any(type(m) is not self.cls for m in methods):
            raise ConfigError("a pack holds runs of one method; got " + ", ".join(sorted({m.name for m in methods})))
        self.methods, self.k = methods, len(methods)
        self.names = [p.name for p in first.parties]
        self.active = first.active.name
        self.device = first.active.device
        self.options = first.options
        self._stacking = {"stacking": stacking, "compile": compile, "bf16": first.config.precision == "bf16"}
        # a run alone's messages go through its own channel, as every party of it sends them
        self.channel: PackChannel | Channel = (first.active.channel if self.k == 1
                                               else PackChannel([m.active.channel for m in methods]))
        self.features: dict[str, torch.Tensor] = {}
        self.models: dict[tuple[Any, str], StackedModel] = {}
        self.optimizers: dict[tuple[Any, str], torch.optim.Optimizer] = {}
        if self.k == 1:
            for p in first.parties:
                self.models.update(((p.name, name), StackedModel([model], alone=True)) for name, model in p.models.items())
                self.optimizers.update(((p.name, name), opt) for name, opt in p.optimizers.items())
        else:
            self._stack_runs()
        #: parties trained as one stacked model (C-VFL's alike parties: ``cls.pack_parties``)
        self.groups: list[tuple[str, ...]] = [(n,) for n in self.names]
        self.slots: dict[tuple[str, ...], torch.Tensor] = {}
        self.cls.pack_parties(self, together=group_parties)
        if self.k > 1:  # a resumed run's optimizer state (its checkpoint's) and its rate
            for key, own in self._run_optimizers().items():
                _stack_state(self.optimizers[key], own)
        self._rows = torch.arange(self.k, device=self.device)[:, None]
        #: what the coming steps draw at random, drawn ahead (:meth:`draw_dither`)
        self.dither: list[torch.Tensor] = []
        #: the step captured per batch shape (:meth:`capture`), or None: eager
        self.graphed: Any = None  # a training.graphs.GraphedStep, set by the trainer

    def _stack_runs(self) -> None:
        methods = self.methods
        # each run's features normalised as alone, by its own party's transform: the runs of one
        # dataset, a stretch of the pack, in one call
        stretches = [list(ks) for _, ks in itertools.groupby(range(self.k), key=lambda k: methods[k].config.dataset)]
        self._transforms: dict[str, list[tuple[int, int, Callable[[torch.Tensor], torch.Tensor]]]] = {
            name: [(ks[0], ks[-1] + 1, methods[ks[0]].parties[j].transform) for ks in stretches]
            for j, name in enumerate(self.names)}
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
        for j, name in enumerate(self.names):
            runs = [m.parties[j] for m in methods]
            owner: dict[int, torch.Tensor] = {}
            for model_name in runs[0].models:
                stacked = self.stack([p.models[model_name] for p in runs])
                self.models[(name, model_name)] = stacked
                for pname, t in runs[0].models[model_name].named_parameters():
                    owner[id(t)] = stacked.params[pname]
            for opt_name, opt in runs[0].optimizers.items():
                params = [owner[id(t)] for group in opt.param_groups for t in group["params"]]
                # the optimizer the run's config assigns to this party, over the stacked parameters
                self.optimizers[(name, opt_name)] = methods[0].make_optimizer(methods[0].parties[j], params)

    def stack(self, modules: Sequence[torch.nn.Module]) -> StackedModel:
        """``modules`` as one stacked model, stacked as this pack stacks its models."""
        return StackedModel(modules, **self._stacking)

    def x(self, party: str, ids: torch.Tensor) -> torch.Tensor:
        """The K runs' batches of ``party``'s features, ``[K, b, ...]``, each normalised as its
        run alone normalises it (its dataset's statistics)."""
        if self.k == 1:
            return self.methods[0].parties[self.names.index(party)].features("train", ids=ids)
        batch = self.features[party][self._rows, ids]
        stretches = self._transforms[party]
        if len(stretches) == 1:
            return stretches[0][2](batch)
        return torch.cat([transform(batch[a:b]) for a, b, transform in stretches])

    def y(self, ids: torch.Tensor) -> torch.Tensor:
        """The K runs' batches of labels, ``[K, b]``."""
        if self.k == 1:
            return self.methods[0].active.labels("train", ids=ids)
        return self.labels[self._rows, ids]

    def model(self, party: str, name: str) -> StackedModel:
        return self.models[(party, name)]

    def zero_grad(self, *keys: tuple[str, str]) -> None:
        for key in keys:
            self.optimizers[key].zero_grad(set_to_none=True)

    def train_step(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """One protocol step of every run on its batch ``ids[k]`` (``[K, b]`` sample ids on the
        device); each trained model's loss per run, a detached ``[K]`` tensor (replayed once the trainer
        captured it: :class:`~vflkit.training.graphs.GraphedStep`)."""
        if self.graphed is not None:
            return self.graphed(ids)
        return self.eager_step(ids)

    def eager_step(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """The method's step, run now (what a graphed step captures)."""
        return self.cls.step(self, ids)

    def epoch_lr(self, gamma: float) -> None:
        """The exponential schedule's step after an epoch, as a run alone applies it."""
        for opt in self.optimizers.values():
            for group in opt.param_groups:
                group["lr"] *= gamma
        if self.graphed is not None:  # the old rate is baked into the captured steps
            self.graphed.forget()

    def write_back(self) -> None:
        """Every run's models as the pack trained them (before evaluating or recording)."""
        for (party, model_name), stacked in self.models.items():
            parties = party if isinstance(party, tuple) else (party,)  # a group of parties: party-major
            stacked.write_back([m.parties[self.names.index(n)].models[model_name]
                                for n in parties for m in self.methods])

    def _run_optimizers(self) -> dict[tuple[Any, str], list[torch.optim.Optimizer]]:
        """Each stacked optimizer's runs' own optimizers, in the order of its slices."""
        out = {}
        for party, name in self.optimizers:
            parties = party if isinstance(party, tuple) else (party,)
            out[(party, name)] = [m.parties[self.names.index(n)].optimizers[name] for n in parties for m in self.methods]
        return out

    def write_back_optimizers(self) -> None:
        """Every run's own optimizers given their slice of the pack's state and its rate (before
        a checkpoint: a packed run's checkpoint is the one the run alone writes)."""
        if self.k > 1:
            for key, own in self._run_optimizers().items():
                _split_state(self.optimizers[key], own)

    def dither_per_step(self) -> int:
        """How many drawn tensors one step takes (C-VFL's dither)."""
        return self.cls.draws_per_step(self)

    def draw_dither(self, batch_sizes: Sequence[int]) -> None:
        """Draw what the coming steps (of ``batch_sizes``) take at random, each run from its own
        generator in the order its step draws it, onto the device in one copy."""
        self.cls.draw_ahead(self, batch_sizes)


def _sliced(value: Any) -> bool:
    """An optimizer state entry that holds one slice per run (momentum, Adam's moments), not a
    count shared by all (Adam's and Adagrad's ``step``: every run takes the same steps)."""
    return isinstance(value, torch.Tensor) and value.dim() > 0


def _stack_state(stacked: torch.optim.Optimizer, own: Sequence[torch.optim.Optimizer]) -> None:
    """Load the runs' own optimizer state into ``stacked`` (slice k from ``own[k]``) and their rate."""
    theirs = [o.state_dict() for o in own]
    sd = stacked.state_dict()
    sd["state"] = {i: {name: torch.stack([t["state"][i][name] for t in theirs]) if _sliced(v) else v
                       for name, v in st.items()}
                   for i, st in theirs[0]["state"].items()}
    for group in sd["param_groups"]:
        group["lr"] = theirs[0]["param_groups"][0]["lr"]
    stacked.load_state_dict(sd)


def _split_state(stacked: torch.optim.Optimizer, own: Sequence[torch.optim.Optimizer]) -> None:
    """The reverse of :func:`_stack_state`: ``own[k]`` gets slice k of the stacked state and its rate."""
    sd = stacked.state_dict()
    lr = sd["param_groups"][0]["lr"]
    for k, opt in enumerate(own):
        mine = opt.state_dict()
        mine["state"] = {i: {name: v[k] if _sliced(v) else v for name, v in st.items()}
                         for i, st in sd["state"].items()}
        for group in mine["param_groups"]:
            group["lr"] = lr
        opt.load_state_dict(mine)


def _packable_names() -> list[str]:
    from . import METHODS

    return sorted(n for n, cls in METHODS.items() if cls.packs())
