"""Multi-VFL: split learning with D data owners and K label owners, aggregated by a server.

Mugunthan, Goyal and Kagal, "Multi-VFL: A Vertical Federated Learning System for Multiple Data
and Label Owners" (Algorithm 1). Every data owner holds one strip of every image; every label
owner holds the labels of its own samples (Table 3). A round's three parts and their messages:
docs/engine.md, "Multi-VFL's round". Test accuracy is the aggregated label-owner model on the
averaged data-owner models, scored by ``label_owner_1`` (it holds the test labels) on the data
owners' activations of the test images (``phase="eval"``). Several label owners, rounds and a
server do not fit :class:`~vflkit.methods.base.VFLMethod`, hence the interface of its own:
:meth:`MultiVFL.setup`, :meth:`MultiVFL.round`, :meth:`MultiVFL.evaluate`. A round is written
once, over the label-owner chains of K >= 1 runs (:class:`RoundPack`); a run alone is K = 1.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..comm import Channel, Party, wire_copy
from ..config import KeyedRun, check_dataset, check_int, check_name, check_rate
from ..errors import ConfigError, DivergenceError
from ..models import MultiVFLDataOwner, MultiVFLLabelOwner
from ..partition import NIID_SCENARIOS, LABEL_SCENARIOS, label_owner_split, strips
from ..stacked import StackedModel
from .server_opt import SERVER_OPTIMIZERS, VARIANTS, ServerOptimizer, init_state, server_step

LOCAL_OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")
#: The paper's datasets; any image dataset registered with :func:`vflkit.data.register_dataset`
#: runs too (its images are cut into the data owners' strips of rows whatever their size).
DATASETS: tuple[str, ...] = ("mnist", "fashion_mnist")

#: Test images each run's label-owner model takes at once where the runs are looped (the CPU):
#: chunks whose activations fit a CPU's last-level cache. The messages and the accuracy do not
#: depend on the chunk; the loss may, in float32's last bits, where kernels for other row counts
#: sum in another order. Part of what a committed record computed: never change it.
EVAL_CHUNK: int = 100


@dataclass(frozen=True)
class MultiVFLConfig(KeyedRun):
    """Everything that decides one Multi-VFL run (defaults: the paper's Sec. 4 and Tables 2-3);
    its key (:class:`~vflkit.config.KeyedRun`) is 16 hex digits of SHA-256 of its keyed fields.

    Parameters
    ----------
    dataset : {"mnist", "fashion_mnist"} or the name of image data of your own
        Image data of any size and channel count registered with
        :func:`vflkit.data.register_dataset` (Table 3's niid scenarios need labels 0-9; "iid"
        takes any). Tables are refused: the data owners' models are convolutions over strips.
    scenario : {"iid", "1niid", "2niid", "3niid", "4niid"}, default "4niid"
        Labels each label owner sees (Table 3).
    server_optimizer : {"fedavg", "fedadam", "fedyogi", "feddemonadam"}; variant : {"paper", "reddi"}
        The paper's ServerAggregation or Reddi et al.'s (see :mod:`.server_opt`).
    n_data_owners : int, default 4
        D; images are cut into D strips of rows (4: 7x28).
    n_label_owners : int, default 5
        K (the niid scenarios need 5).
    disjoint : bool, default True
        No training sample belongs to two label owners (the paper does not say).
    rounds : int, default 500
        R. The paper's "500 epochs": one round is ``local_epochs`` passes over each owner's data.
    local_epochs : int, default 1
        E of DataOwnerUpdate; the paper does not give it, one epoch per round makes its 500
        rounds its "500 epochs".
    local_steps : int or None, default None
        Cap on the batches per label owner and round (None: ``local_epochs`` full passes). Only
        the small profiles set it, to fit a CPU budget.
    local_optimizer : {"sgd", "adam"}, default "sgd"
        Algorithm 1 line 7 is a plain gradient step, ``W <- W - eta_k grad``.
    beta1, beta2, server_lr, tau : float
        Table 2: 0.9, 0.99, 1e-3, 1e-3.
    n_test : int or None, default None
        Test images used for the accuracy (None: the full test set).
    eval_every : int, default 1
        Evaluate every this many rounds (and always after the last).
    """

    dataset: str = "mnist"
    scenario: str = "4niid"
    server_optimizer: str = "fedavg"
    variant: str = "paper"
    n_data_owners: int = 4
    n_label_owners: int = 5
    samples_per_owner: int = 5000
    disjoint: bool = True
    rounds: int = 500
    local_epochs: int = 1
    local_steps: int | None = None
    batch_size: int = 64
    local_lr: float = 1e-3
    local_optimizer: str = "sgd"
    beta1: float = 0.9
    beta2: float = 0.99
    server_lr: float = 1e-3
    tau: float = 1e-3
    n_test: int | None = None
    eval_every: int = 1
    seed: int = 0

    #: Which paper the record belongs to (results/<profile>/<paper>/).
    paper = "multi_vfl"

    #: The fields every key hashes, default or not (those of the first committed records);
    #: a field added later is hashed only when it differs from its default. Never edit this.
    KEYED_FIELDS: ClassVar[tuple[str, ...]] = (
        "paper", "dataset", "scenario", "server_optimizer", "variant", "n_data_owners", "n_label_owners",
        "samples_per_owner", "disjoint", "rounds", "local_epochs", "local_steps", "batch_size", "local_lr",
        "local_optimizer", "beta1", "beta2", "server_lr", "tau", "n_test", "eval_every", "seed")

    def __post_init__(self) -> None:
        for name in ("dataset", "scenario", "server_optimizer", "variant", "local_optimizer"):
            object.__setattr__(self, name, check_name(name, getattr(self, name)))
        check_int("seed", self.seed)
        if not isinstance(self.disjoint, bool):
            raise ConfigError(f"disjoint must be True or False, got {self.disjoint!r}")
        for name in ("local_lr", "beta1", "beta2", "server_lr", "tau"):
            check_rate(name, getattr(self, name))
        check_dataset(self.dataset, method="Multi-VFL", kind="image", builtin=DATASETS)
        choices = {"scenario": LABEL_SCENARIOS, "server_optimizer": SERVER_OPTIMIZERS,
                   "variant": VARIANTS, "local_optimizer": LOCAL_OPTIMIZERS}
        for name, valid in choices.items():
            if getattr(self, name) not in valid:
                raise ConfigError(f"Invalid {name} {getattr(self, name)!r}; choose one of {', '.join(valid)}")
        for name in ("n_data_owners", "n_label_owners", "samples_per_owner", "rounds", "local_epochs",
                     "batch_size", "eval_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        for name in ("local_steps", "n_test"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"{name} must be a positive integer or None, got {value!r}")
        if self.scenario in NIID_SCENARIOS and self.n_label_owners != 5:
            raise ConfigError(f"scenario {self.scenario!r} is Table 3 with 5 label owners; "
                              f"got n_label_owners={self.n_label_owners} (use scenario='iid')")
        self.server()  # validates beta1, beta2, server_lr, tau

    def server(self) -> ServerOptimizer:
        """The server optimizer this config names."""
        return ServerOptimizer(name=self.server_optimizer, beta1=self.beta1, beta2=self.beta2,
                               lr=self.server_lr, tau=self.tau, variant=self.variant,
                               total_rounds=self.rounds)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (with ``paper``)."""
        return {"paper": self.paper, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MultiVFLConfig":
        """Build from a dict; an unknown key is an error, never ignored."""
        d = {k: v for k, v in d.items() if k != "paper"}
        cls.refuse_unknown(d, (f.name for f in dataclasses.fields(cls)))
        return cls(**d)

    def replace(self, **changes: Any) -> "MultiVFLConfig":
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


def xavier_init(module: nn.Module) -> nn.Module:
    """Xavier (Glorot) normal weights and zero biases for every conv and linear layer: Algorithm 1
    initialises with "Gaussian/Xavier", which we read as Glorot's Gaussian."""
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_normal_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
    return module


def _weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def local_optimizer(config: MultiVFLConfig, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    """A label owner's or a copy's optimizer (``config.local_optimizer``). Made afresh each
    round: its state does not survive the server's replacement of the weights (plain SGD has none)."""
    return (torch.optim.SGD if config.local_optimizer == "sgd" else torch.optim.Adam)(params, lr=config.local_lr)


class MultiVFL:
    """One Multi-VFL run: D data owners, K label owners and a server on one channel (default: a
    new one with its own ledger). ``data`` is an :class:`~vflkit.data.ImageData` whose test split
    may already be a subset.

    Usage: ``m = MultiVFL(cfg, data); m.setup(); for r in 1..R: m.round(r); m.evaluate()``. A
    round is that of a :class:`RoundPack` of this run alone; several runs train as one pack.
    """

    def __init__(self, config: MultiVFLConfig, data: Any, *, device: torch.device | str = "cpu",
                 channel: Channel | None = None) -> None:
        self.config = config
        self.device = torch.device(device)
        self.channel = channel or Channel()
        self.num_classes = data.num_classes
        self.in_channels = data.image_shape[0]
        c = config
        # Multi-VFL Sec. 4: each data owner receives images of (28/4 = 7) x 28, height x width,
        # so the image is cut into bands of rows.
        self.partition = strips(c.n_data_owners, image_shape=data.image_shape, axis="height")
        owner_rows = label_owner_split(data.y_train, scenario=c.scenario, n_owners=c.n_label_owners,
                                       samples_per_owner=c.samples_per_owner, seed=c.seed,
                                       disjoint=c.disjoint)

        def transform(x: torch.Tensor) -> torch.Tensor:
            return data.normalize(x, self.device)

        train_parts = self.partition.split(data.x_train)
        test_parts = self.partition.split(data.x_test)
        # Data owners hold their strip of every image (the samples of all label owners); what
        # each label owner shares with them is found by entity resolution (PSI, Sec. 1), which
        # the paper treats as done before training and we do not simulate.
        self.data_owners = [
            Party(f"data_owner_{d + 1}", channel=self.channel,
                  features={"train": train_parts[d].contiguous().to(self.device),
                            "test": test_parts[d].contiguous().to(self.device)},
                  transform=transform, device=self.device)
            for d in range(c.n_data_owners)
        ]
        # Label owner 1 also holds the test labels: it evaluates the aggregated model.
        self.label_owners = [
            Party(f"label_owner_{k + 1}", channel=self.channel,
                  labels={"train": data.y_train[rows].to(self.device),
                          **({"test": data.y_test.to(self.device)} if k == 0 else {})},
                  ids={"train": rows}, device=self.device)
            for k, rows in enumerate(owner_rows)
        ]
        self.server = Party("server", channel=self.channel, device=self.device)
        self.evaluator = self.label_owners[0]
        self.server_optimizer = config.server()
        self.rounds_done = 0
        #: Per round, what the server's aggregation did (:meth:`server_stats`).
        self.server_log: dict[int, dict[str, float]] = {}
        #: The pack whose stacked tensors this run's models view (None before its first round).
        self.pack: RoundPack | None = None

    @property
    def parties(self) -> list[Party]:
        """Every party: data owners, label owners, server."""
        return [*self.data_owners, *self.label_owners, self.server]

    def setup(self) -> None:
        """Initialise every model (Xavier) and send the server's initial weights to the label owners."""
        c = self.config
        torch.manual_seed(c.seed)
        self.channel.at(epoch=0, step=0, phase="setup")
        for d in self.data_owners:
            base = xavier_init(MultiVFLDataOwner(self.in_channels)).to(self.device)
            d.models["global"] = base
            # W^C_{d,k}: one copy per label owner, identical at the start of every round.
            for k in range(len(self.label_owners)):
                d.models[f"copy_{k + 1}"] = MultiVFLDataOwner(self.in_channels).to(self.device)
                d.models[f"copy_{k + 1}"].load_state_dict(base.state_dict())
        hw = self.partition.input_shape[1:]
        global_model = xavier_init(MultiVFLLabelOwner(self.num_classes, input_hw=hw)).to(self.device)
        self.server.models["global"] = global_model
        self.server.state["opt"] = init_state(_weights(global_model), self.server_optimizer)
        # W^{S,0}, kept by the server to report how far its optimizer has moved the model
        self.server.state["initial"] = _weights(global_model)
        for lo in self.label_owners:
            self.server.send(lo, "model_weights", _weights(global_model))
            lo.models["top"] = MultiVFLLabelOwner(self.num_classes, input_hw=hw).to(self.device)
            lo.models["top"].load_state_dict(lo.recv(self.server, "model_weights"))

    def round_order(self, k: int, r: int) -> tuple[torch.Tensor, list[int]]:
        """Label owner k's sample ids of round r in their order (the first ``local_steps`` batches),
        and its batches' sizes. Each local epoch is a permutation drawn from a generator seeded by
        (seed, round, owner): a public protocol parameter, so data owners need no message to agree."""
        c = self.config
        ids = self.label_owners[k].ids["train"]
        g = torch.Generator().manual_seed(c.seed * 1_000_003 + r * 101 + k)
        full, rest = divmod(len(ids), c.batch_size)
        epoch = [c.batch_size] * full + ([rest] if rest else [])
        orders = [ids[torch.randperm(len(ids), generator=g)] for _ in range(c.local_epochs)]
        sizes = (epoch * c.local_epochs)[:c.local_steps]  # [:None] keeps them all
        order = torch.cat(orders) if len(orders) > 1 else orders[0]
        return order[:sum(sizes)], sizes

    def _alone(self) -> RoundPack:
        if self.pack is None or self.pack.n_runs > 1:
            RoundPack([self])  # binds this run's models to a stack of its own
        assert self.pack is not None
        return self.pack

    def round(self, r: int) -> dict[str, float]:
        """Global round ``r`` (from 1) of Algorithm 1; returns the mean training loss per label owner."""
        return self._alone().round(r)[0]

    def server_stats(self, r: int) -> dict[str, float]:
        """What the server's aggregation of round ``r`` did (see :meth:`RoundPack.round`); empty
        before that round has run."""
        return dict(self.server_log.get(r, {}))

    def evaluate(self, *, batch_size: int = 1000, eval_chunk: int | None = None) -> dict[str, float]:
        """Test accuracy and loss, computed by ``label_owner_1`` (see :meth:`RoundPack.evaluate`;
        the module docstring says what is scored)."""
        return self._alone().evaluate(batch_size=batch_size, chunk=eval_chunk)[0]


#: What the runs of one pack must share: the shapes of a step and the local optimizer.
STEP_SHARED = ("n_data_owners", "n_label_owners", "batch_size", "local_optimizer", "local_lr")

#: Test images the label owners' stacked model takes at once over all runs of a pack, on an
#: accelerator and on a CPU, where the runs are stacked (looped runs take :data:`EVAL_CHUNK` each).
EVAL_IMAGES: tuple[int, int] = (16_384, 4_096)


class _Stack:
    """One role's models of every chain (or run) as stacked tensors ``[n, ...]`` that each
    module's parameters view. ``"loop"`` runs each module on its slice, with the kernels of a
    model alone (the modules' parameters are the leaves that train); ``"vmap"`` and
    ``"grouped"`` run the stack as one call (its stacked parameters train)."""

    def __init__(self, modules: Sequence[nn.Module], stacking: str) -> None:
        self.modules = list(modules)
        if any(True for m in self.modules for _ in m.buffers()):
            raise ConfigError("a Multi-VFL pack holds models without buffers")
        self.model: Any = None
        if stacking == "loop":
            with torch.no_grad():
                params = [dict(m.named_parameters()) for m in self.modules]
                self.params = {n: torch.stack([p[n].detach() for p in params]) for n in params[0]}
        else:
            self.model = StackedModel(self.modules, stacking=stacking)
            self.params = self.model.params
        for k, module in enumerate(self.modules):
            for name, p in module.named_parameters():
                p.data = self.params[name].detach()[k]
        self.leaves = (list(self.params.values()) if self.model is not None
                       else [p for m in self.modules for p in m.parameters()])

    def __call__(self, x: torch.Tensor, every: int = 1) -> torch.Tensor:
        """Models ``0, every, 2 every, ...`` on their slices of ``x``."""
        if self.model is None:
            return torch.stack([m(xi) for m, xi in zip(self.modules[::every], x)])
        if every == 1:
            return self.model(x)
        return self.model.call_with({n: p[::every] for n, p in self.params.items()}, x)


class RoundPack:
    """Multi-VFL runs (set up), one or several, trained round by round as one computation: step
    i of every label-owner chain of every run at once (why it may: docs/engine.md, "RoundPack").

    Each role's models are one :class:`_Stack`, of which the runs' own models (and the server's
    moments) are views, current after every round with no copy. The runs must share
    :data:`STEP_SHARED` and have run the same rounds; a run is held by one pack at a time (a new
    pack takes it). Every message is a row in its own run's ledger (:func:`_post`). ``stacking``
    (:class:`_Stack`): ``"loop"`` (the CPU's under ``"auto"``), ``"vmap"`` or ``"grouped"``.
    """

    def __init__(self, methods: Sequence[MultiVFL], *, stacking: str = "auto") -> None:
        runs = list(methods)
        if not runs:
            raise ConfigError("a pack needs at least one run")
        for m in runs:
            if "global" not in m.server.models:
                raise ConfigError("call setup() before round()")
        differ = [f for f in STEP_SHARED if len({getattr(m.config, f) for m in runs}) > 1]
        if differ:
            raise ConfigError(f"runs packed in one round must share {', '.join(STEP_SHARED)}; they differ in {differ}")
        if len({m.rounds_done for m in runs}) > 1:
            raise ConfigError("runs packed together must have run the same rounds")
        self.runs = runs
        self.n_runs, self.n_owners = len(runs), len(runs[0].label_owners)
        self.device = device = runs[0].device
        if stacking == "auto" and device.type == "cpu":
            stacking = "loop"
        self.looped = stacking == "loop"
        # chain (j, k): run j's label owner k with copy k of each of run j's data owners
        self.chains = [(j, k) for j in range(self.n_runs) for k in range(self.n_owners)]
        n_do = len(runs[0].data_owners)
        self.top = _Stack([runs[j].label_owners[k].models["top"] for j, k in self.chains], stacking)
        self.bottoms = [_Stack([runs[j].data_owners[d].models[f"copy_{k + 1}"] for j, k in self.chains], stacking)
                        for d in range(n_do)]
        self.globals = [_Stack([m.data_owners[d].models["global"] for m in runs], stacking) for d in range(n_do)]
        self.server = _Stack([m.server.models["global"] for m in runs], "loop")  # never called
        with torch.no_grad():
            names = list(self.server.params)
            self.moments = {which: {n: torch.stack([m.server.state["opt"][which][n] for m in runs]) for n in names}
                            for which in ("m", "v")}
            self.initial = {n: torch.stack([m.server.state["initial"][n] for m in runs]) for n in names}
        for j, m in enumerate(runs):
            m.server.state["opt"] = {w: {n: t[j] for n, t in moments.items()} for w, moments in self.moments.items()}
            m.pack = self
        self._opt = [m.server.state["opt"] for m in runs]
        # the runs with one server rule step together (FedAvg, FedAdam, ...: a run's own hyperparameters)
        groups: dict[Any, list[int]] = {}
        for j, m in enumerate(runs):
            groups.setdefault(m.server_optimizer, []).append(j)
        self.groups = [(opt, torch.tensor(idx, device=device)) for opt, idx in groups.items()]
        self._test: Sequence[torch.Tensor] | None = None
        # each data owner's training strips, transformed once: runs of one dataset hold the same
        # images, so a strip is kept once and each chain points at its run's ([distinct, N, ...])
        self._train, self._strip_of = zip(*[_distinct([runs[j].data_owners[d] for j, _ in self.chains], "train", device)
                                           for d in range(n_do)])
        held = [runs[j].label_owners[k].held_labels("train") for j, k in self.chains]
        if len({len(y) for y in held}) > 1:
            raise ConfigError("label owners packed together must hold as many samples each")
        self._labels = torch.stack(held)  # each chain's label owner's own, [chains, samples]

    def _check_held(self) -> None:
        if any(m.pack is not self for m in self.runs):
            raise ConfigError("a run of this pack was taken by another pack; make a new RoundPack")
        if any(m.server.state["opt"] is not opt for m, opt in zip(self.runs, self._opt)):
            raise ConfigError("a run's server moments were replaced (a checkpoint restored into a run in a pack); "
                              "restore checkpoints before the run's first round")

    def round(self, r: int) -> list[dict[str, float]]:
        """Global round ``r`` of every run; the mean training loss per label owner, one dict per run.
        A non-finite loss of any chain raises :class:`~vflkit.errors.DivergenceError` after the
        chains' steps (the losses are summed on the device and read once a round)."""
        runs, chains = self.runs, self.chains
        self._check_held()
        for m in runs:
            if r != m.rounds_done + 1:
                raise ConfigError(f"round {r} called after round {m.rounds_done}; rounds run in order 1, 2, ...")
        orders = {(j, k): m.round_order(k, r) for j, m in enumerate(runs) for k in range(self.n_owners)}
        sizes = orders[chains[0]][1]
        if any(orders[c][1] != sizes for c in chains):
            raise ConfigError(f"label owners' batches differ in number or size in round {r}; "
                              "a packed round needs them alike")
        n = len(sizes)
        lo_of = {(j, k): runs[j].label_owners[k] for j, k in chains}
        n_do = len(runs[0].data_owners)
        first_rows = [len(m.channel.ledger) for m in runs]
        with torch.no_grad():
            starts = {name: p.clone() for name, p in self.top.params.items()}  # W^{S,r} of every chain
        top, bottoms = self.top, self.bottoms
        # one optimizer per role over its models of every chain: SGD and Adam update elementwise
        top_opt = local_optimizer(runs[0].config, top.leaves)
        bottom_opts = [local_optimizer(runs[0].config, b.leaves) for b in bottoms]
        totals = torch.zeros(len(chains), dtype=torch.float64, device=self.device)
        offsets = [0, *itertools.accumulate(sizes)]
        ids = {c: order for c, (order, _) in orders.items()}
        # where each party holds its chain's samples, found on the host and sent over at once
        held_at = torch.stack([torch.stack([runs[j].data_owners[d].positions("train", ids[j, k]) for j, k in chains])
                               for d in range(n_do)] + [torch.stack([lo_of[c].positions("train", ids[c]) for c in chains])])
        held_at = held_at.to(self.device, non_blocking=True)
        features = [x[u[:, None], at] for x, u, at in zip(self._train, self._strip_of, held_at)]
        labels = torch.gather(self._labels, 1, held_at[-1])
        data_owner = [[runs[j].data_owners[d].name for j, _ in chains] for d in range(n_do)]
        label_owner = [lo_of[c].name for c in chains]
        ledgers = [runs[j].channel.ledger for j, _ in chains]
        for i in range(n):
            rows = slice(offsets[i], offsets[i + 1])
            steps = [k * n + i for _, k in chains]
            acts = []
            for bottom, opt, x in zip(bottoms, bottom_opts, features):
                opt.zero_grad(set_to_none=True)
                acts.append(bottom(x[:, rows]))
            parts = [p.requires_grad_(True) for p in _post(acts, "embedding", ledgers, data_owner,
                                                            [label_owner] * n_do, r, steps)]
            top_opt.zero_grad(set_to_none=True)
            # A_k = Concatenate A_{d,k}: strips of rows re-join along the height (dim 3 of [chains, B, C, h, W])
            losses = _losses(top(torch.cat(parts, dim=3)), labels[:, rows], self.looped)
            losses.sum().backward()  # the chains share no parameter: each gets its own loss's gradient
            top_opt.step()
            grads = _post([p.grad for p in parts], "gradient", ledgers, [label_owner] * n_do, data_owner, r, steps)
            for a, g, opt in zip(acts, grads, bottom_opts):
                a.backward(g)
                opt.step()
            totals += losses.detach().to(torch.float64)
        sums = totals.tolist()
        for (j, k), value in zip(chains, sums):
            if not math.isfinite(value):
                where = f" of run {j} of the pack" if self.n_runs > 1 else ""
                raise DivergenceError(f"{lo_of[j, k].name}'s loss is not finite in round {r}{where} (its sum: {value}): "
                                      "training diverged; lower local_lr or the server lr")
        self._end_round(r, n, starts, label_owner, ledgers)
        for j, m in enumerate(runs):
            m.channel.ledger.sort_since(first_rows[j], _protocol_order)
            m.rounds_done = r
        return [{lo_of[j, k].name: sums[j * self.n_owners + k] / n for k in range(self.n_owners)}
                for j in range(self.n_runs)]

    @torch.no_grad()
    def _end_round(self, r: int, n: int, starts: dict[str, torch.Tensor], label_owner: list[str],
                   ledgers: list[Any]) -> None:
        """Lines 9-13 for every run. Algorithm 1 calls ServerAggregation(t_k) inside the loop over
        label owners; we read it as FedOpt does (Reddi et al., Algorithm 2), which the paper cites for it: the server
        averages the K updates of the round and takes one optimizer step with their mean."""
        runs, n_runs, n_owners = self.runs, self.n_runs, self.n_owners

        def per_run(t: torch.Tensor) -> torch.Tensor:  # [chains, ...] -> [runs, label owners, ...]
            return t.view(n_runs, n_owners, *t.shape[1:])

        # Line 9: t_k = W_k^{S,r+1} - W^{S,r}, sent to the server when chain k ends
        names = list(self.server.params)
        t = {name: self.top.params[name] - starts[name] for name in names}
        server = [runs[j].server.name for j, _ in self.chains]
        got = _post(t, "model_weights", ledgers, label_owner, server, r, [(k + 1) * n for _, k in self.chains])
        # Line 10: each run's server averages its K updates and steps
        mean = {name: per_run(got[name]).mean(1) for name in names}
        weights = {name: p.clone() for name, p in self.server.params.items()}
        for opt, idx in self.groups:
            every = len(idx) == n_runs  # one rule for all runs (a run alone): no gather, no scatter

            def pick(x: torch.Tensor) -> torch.Tensor:
                return x if every else x[idx]

            new, state = server_step({name: pick(w) for name, w in weights.items()},
                                     {name: pick(u) for name, u in mean.items()},
                                     {which: {name: pick(x) for name, x in ms.items()} for which, ms in self.moments.items()},
                                     opt, r)
            for name in names:
                for into, got in [(self.server.params[name], new[name]),
                                  *((self.moments[which][name], state[which][name]) for which in self.moments)]:
                    into.copy_(got) if every else into.index_copy_(0, idx, got)
        self._server_stats(r, weights, mean)
        # the new weights to every label owner (one message per label owner)
        wire = {name: p.repeat_interleave(n_owners, dim=0) for name, p in self.server.params.items()}
        new = _post(wire, "model_weights", ledgers, server, label_owner, r, [n_owners * n + 2] * len(self.chains))
        for name, p in self.top.params.items():
            p.copy_(new[name])
        # Lines 11-13: W^C_d = mean_k W^C_{d,k}, then every copy restarts from it
        for bottom, global_ in zip(self.bottoms, self.globals):
            for name, p in bottom.params.items():
                avg = per_run(p).mean(1)
                global_.params[name].copy_(avg)
                per_run(p).copy_(avg.unsqueeze(1).expand_as(per_run(p)))

    def _server_stats(self, r: int, weights: dict[str, torch.Tensor], update: dict[str, torch.Tensor]) -> None:
        """Each run's :meth:`MultiVFL.server_stats` of round ``r``, read in one transfer.
        ``update_norm`` is ||t|| (the mean label-owner update), ``server_step_norm`` is
        ||W^{r+1} - W^r|| (FedAvg: equal to ``update_norm``), ``distance_from_init`` is
        ||W^{r+1} - W^0||; ``median_sqrt_v`` and ``p99_sqrt_v`` are the median and 99th percentile
        of the adaptive rules' sqrt(v) over all parameters, beside their stability constant tau
        (NaN for FedAvg, which keeps no v). Norms are Euclidean over every parameter, in float64."""
        names = list(weights)

        def sq(parts: Sequence[torch.Tensor]) -> torch.Tensor:  # [runs]: each run's squared norm, float64
            return torch.stack([sum(p[j].double().pow(2).sum() for p in parts) for j in range(self.n_runs)])

        new = self.server.params
        norms = [sq([update[n] for n in names]), sq([new[n] - weights[n] for n in names]),
                 sq([new[n] - self.initial[n] for n in names])]
        adaptive = [j for j, m in enumerate(self.runs) if m.server_optimizer.name != "fedavg"]
        quantiles = []
        if adaptive:  # sqrt(v) of the runs whose rule keeps v
            rows = torch.tensor(adaptive, device=self.device)
            sqrt_v = torch.cat([self.moments["v"][n][rows].flatten(1) for n in names], dim=1).clamp_min(0).sqrt()
            stride = max(1, sqrt_v.shape[1] // 4_000_000)  # keeps torch.quantile under its input-size limit
            for one in sqrt_v[:, ::stride]:
                quantiles.append(torch.stack([one.median().double(), torch.quantile(one.double(), 0.99)]))
        values = torch.cat([torch.stack(norms).flatten(), *quantiles]).tolist()
        n_runs = self.n_runs
        values[:3 * n_runs] = map(math.sqrt, values[:3 * n_runs])  # the host's square root, correctly rounded
        q = dict(zip(adaptive, zip(values[3 * n_runs::2], values[3 * n_runs + 1::2])))
        for j, m in enumerate(self.runs):
            median, p99 = q.get(j, (float("nan"), float("nan")))
            m.server_log[r] = {"update_norm": values[j], "server_step_norm": values[n_runs + j],
                               "distance_from_init": values[2 * n_runs + j],
                               "median_sqrt_v": median, "p99_sqrt_v": p99}

    @torch.no_grad()
    def evaluate(self, *, batch_size: int = 1000, chunk: int | None = None) -> list[dict[str, float]]:
        """Every run's :meth:`MultiVFL.evaluate`: its data owners' averaged models send the
        embeddings of ``batch_size`` of its test images per message to its ``label_owner_1``,
        whose model (the server's, just received) scores ``chunk`` of them at a time (default:
        :data:`EVAL_CHUNK` per run where looped, else as many as keep [runs x chunk] near
        :data:`EVAL_IMAGES`)."""
        if chunk is not None and (not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1):
            raise ConfigError(f"eval_chunk must be a positive integer or None, got {chunk!r}")
        runs = self.runs
        self._check_held()
        if self._test is None:  # each run's test strips, as its data owners hold them (each distinct one once)
            self._test, self._test_of = zip(*[_distinct([m.data_owners[d] for m in runs], "test", self.device)
                                              for d in range(len(runs[0].data_owners))])
            self._test_labels = torch.stack([m.evaluator.labels("test") for m in runs])
        n = self._test_labels.shape[1]
        if chunk is None:
            chunk = EVAL_CHUNK if self.looped else max(1, EVAL_IMAGES[self.device.type == "cpu"] // self.n_runs)
        ledgers = [m.channel.ledger for m in runs]
        senders = [[m.data_owners[d].name for m in runs] for d in range(len(self._test))]
        receivers = [[m.evaluator.name for m in runs]] * len(self._test)
        correct = torch.zeros(self.n_runs, dtype=torch.float64, device=self.device)
        loss_sum = torch.zeros_like(correct)
        for start in range(0, n, batch_size):
            rows = slice(start, min(start + batch_size, n))
            size = rows.stop - rows.start
            acts = [g(x[u, rows]) for g, x, u in zip(self.globals, self._test, self._test_of)]
            # the runs of a pack have run the same rounds: each message at that round, step 0
            parts = _post(acts, "embedding", ledgers, senders, receivers, runs[0].rounds_done, [0] * self.n_runs,
                          phase="eval")
            # label owner 1's model of each run: chain (j, 0)
            logits = torch.cat([self.top(torch.cat([p[:, i:i + chunk] for p in parts], dim=3), every=self.n_owners)
                                for i in range(0, size, chunk)], dim=1)
            y = self._test_labels[:, rows]
            correct += (logits.argmax(dim=2) == y).float().mean(1).double() * size
            loss_sum += torch.stack([F.cross_entropy(lg, t, reduction="sum") for lg, t in zip(logits, y)]).double()
        return [{"test_accuracy": c / n, "test_loss": s / n} for c, s in zip(correct.tolist(), loss_sum.tolist())]


def _losses(logits: torch.Tensor, labels: torch.Tensor, looped: bool) -> torch.Tensor:
    """Each chain's mean cross-entropy, [chains]: ``F.cross_entropy`` of each chain where the
    chains are looped (the kernel of one run alone), one call for all where stacked."""
    if looped:
        return torch.stack([F.cross_entropy(lg, y) for lg, y in zip(logits, labels)])
    k, b = labels.shape
    return F.cross_entropy(logits.reshape(k * b, -1), labels.reshape(-1), reduction="none").view(k, b).mean(1)


def _protocol_order(row: tuple[str, str, str, int, int, int, str]) -> tuple[int, int]:
    # rows by step; within the step a chain ends on (its update to the server), the update
    # comes first, as the protocol sends it before the next chain's first batch
    return row[5], 0 if row[2] == "model_weights" else 1


def _distinct(parties: Sequence[Party], split: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``split`` features of ``parties`` (the same data owner of each chain or run),
    transformed, each distinct strip once: ``([distinct, N, ...], which strip each party holds)``."""
    held: list[torch.Tensor] = []
    strips_: list[torch.Tensor] = []
    which = []
    for party in parties:
        x = party.held_features(split)
        u = next((i for i, h in enumerate(held) if h is x or (h.shape == x.shape and torch.equal(h, x))), None)
        if u is None:
            held.append(x)
            strips_.append(party.features(split))
            u = len(held) - 1
        which.append(u)
    return torch.stack(strips_), torch.tensor(which, device=device)


def _post(payloads: Any, kind: str, ledgers: Sequence[Any], senders: Any, receivers: Any, r: int,
          steps: Sequence[int], phase: str = "train") -> Any:
    """Send ``payloads`` (a list of stacked tensors [slices, ...], one per data owner, or a
    dict of them: one model's weights) as one stacked message: slice c (a chain; a run, for the
    evaluation) travels from ``senders[..][c]`` to ``receivers[..][c]`` and is a row in
    ``ledgers[c]``, stamped with round ``r``, ``steps[c]`` and ``phase`` (chain by chain, then
    data owner by data owner); the receivers get a detached copy, as through
    :class:`~vflkit.comm.Channel` (each slice only to its chain)."""
    if isinstance(payloads, dict):  # one message of several tensors per slice
        one = sum(p.numel() // p.shape[0] * p.element_size() for p in payloads.values())
        for c, ledger in enumerate(ledgers):
            ledger.add(senders[c], receivers[c], kind, one, r, steps[c], phase)
        return {name: wire_copy(p) for name, p in payloads.items()}
    for c, ledger in enumerate(ledgers):
        for d, p in enumerate(payloads):
            one = p.numel() // p.shape[0] * p.element_size()  # chain c's slice, as it travels
            ledger.add(senders[d][c], receivers[d][c], kind, one, r, steps[c], phase)
    return [wire_copy(p) for p in payloads]
