"""The contract every VFL method implements, and the pieces they share.

A method is one class in one module, configured by a :class:`RunConfig` (defined here, beside
the methods that consume it). The split trainer (:mod:`vflkit.training.split`) builds the
parties (each with its own feature slice; the active party also with the labels), then calls,
in this order:

``build()`` (models and optimizers, once) -> ``setup()`` (one-off protocol messages such as
public keys) -> per epoch: ``train()``, ``train_step(ids)`` per batch, ``evaluate()``.

``train_step`` and ``predict`` act as each party in turn; everything one party learns of
another arrives through ``Party.send``/``Party.recv``, i.e. through the counted channel.

A method whose step packs writes it once, as :attr:`VFLMethod.step`, over K runs' stacked party
models (:class:`vflkit.training.split.Pack`, K >= 1); its ``train_step`` is that step on a pack of
one, which computes the run's own kernels on its own models and optimizers.
"""

from __future__ import annotations

import copy
import dataclasses
import numbers
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Sequence

import numpy as np
import torch
from torch import nn

from ..comm import Party
from ..config import KeyedRun, check_int, check_name, check_paper, check_rate
from ..errors import ConfigError, check_choice
from ..models import MODELS, RESNET_BLOCKS, RESNET_CUTS, PartyModel, get_model, resnet_cut_blocks
from ..secure import DeferredChecks
from ..stacked import stacked_cross_entropy  # noqa: F401 (the methods' steps take it from here)
from ..tabular import model_kwargs
from .pack import Pack

OPTIMIZERS: tuple[str, ...] = ("sgd", "sgd_momentum", "adagrad", "adam")
#: How image datasets are cut into party slices (:func:`vflkit.training.split.build_parties`).
PARTITIONS: tuple[str, ...] = ("strips_width", "strips_height", "grid")
#: Learning-rate schedules of :attr:`RunConfig.lr_schedule`.
LR_SCHEDULES: tuple[str, ...] = ("none", "exponential")
#: Compute precisions of :attr:`RunConfig.precision`.
PRECISIONS: tuple[str, ...] = ("fp32", "bf16")


#: The largest embedding a run may ask for (the papers use 32-512; beyond this the layers alone
#: take gigabytes, and the allocation would fail inside torch).
MAX_EMBEDDING_DIM = 1 << 16


def _rate(value: Any) -> float:
    """A learning rate as a Python float; a numpy float32 as the decimal it prints as (0.05, not
    0.05000000074505806), which is the rate that was asked for."""
    if isinstance(value, np.floating) and value.dtype != np.float64:
        return float(str(value))
    return float(value)


@dataclass(frozen=True)
class RunConfig(KeyedRun):
    """Everything that decides one run's result; its key (:class:`~vflkit.config.KeyedRun`) is
    16 hex digits of SHA-256 of its keyed fields.

    Per-party fields (``models``, ``optimizers``, ``lr``) hold one entry per party in party
    order (party ``active`` holds the labels); a single string/number applies to every party.
    ``options`` carries method-specific settings (e.g. C-VFL's compression); unknown options
    are rejected by the method.
    """

    paper: str
    dataset: str
    method: str
    models: tuple[str, ...]
    optimizers: tuple[str, ...] | str = "sgd"
    lr: tuple[float, ...] | float = 0.05
    partition: str = "strips_width"
    n_parties: int = 4
    active: int = 0
    batch_size: int = 128
    epochs: int = 10
    seed: int = 0
    n_train: int | None = None
    n_test: int | None = None
    embedding_dim: int = 128
    el_pl: tuple[int, int] = (1, 1)
    options: dict[str, Any] = field(default_factory=dict)
    #: EASTER Table VI: cut the features into this many fixed parts and give the C parties the
    #: first C (:func:`vflkit.partition.first_parts`); None: all features over C parties.
    feature_parts: int | None = None
    #: Learning-rate schedule applied after every epoch: "none", or "exponential" (lr times
    #: ``lr_gamma`` per epoch; EASTER's CIFAR runs, "0.1 with exponential decay").
    lr_schedule: str = "none"
    #: The decay factor per epoch of the exponential schedule (the paper gives none; 0.95).
    lr_gamma: float = 0.95
    #: How a ResNet is cut into h and p (:mod:`vflkit.models`): "stages" (the stem and whole
    #: residual stages) or "layers" (half the weighted layers at a block boundary, EASTER's "the
    #: number of layers ... was the same"). Where both readings cut alike it holds "stages" (one key).
    resnet_cut: str = "stages"
    #: Compute precision of the split trainer: "fp32" (PyTorch's defaults: float32, cuDNN convolutions
    #: in TF32 on a GPU) or "bf16" (bfloat16 autocast on the run's device with float32 master weights
    #: and channels_last convolution weights). bf16 changes the numbers, so it is keyed: a bf16 record
    #: never stands in for an fp32 one. Messages keep float32 (:mod:`vflkit.comm` widens bf16 on the
    #: wire). Not the default until a GPU check shows bf16 seeds inside the fp32/TF32 seed spread.
    precision: str = "fp32"

    def __post_init__(self) -> None:
        # every field is checked here, before any data is loaded, in an order where each
        # message is about the field that is wrong (n_parties before active and per-party fields)
        check_paper(self.paper)
        check_choice("partition", self.partition, PARTITIONS)
        object.__setattr__(self, "dataset", check_name("dataset", self.dataset))
        object.__setattr__(self, "method", check_name("method", self.method))
        for name in ("n_parties", "batch_size", "epochs", "embedding_dim"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("active", self.active, minimum=0)
        check_int("seed", self.seed)
        if not -2**63 <= self.seed < 2**63:  # torch's generator takes a 64-bit seed
            raise ConfigError(f"seed must fit in 64 bits (|seed| < 2**63), got {self.seed}")
        if self.embedding_dim > MAX_EMBEDDING_DIM:
            raise ConfigError(f"embedding_dim={self.embedding_dim} is beyond {MAX_EMBEDDING_DIM}: every party "
                              "model's embedding layer would not fit in memory; the papers use 32-512")
        for name in ("n_train", "n_test"):
            check_int(name, getattr(self, name), minimum=1, optional=True)
        for name in ("n_parties", "batch_size", "epochs", "embedding_dim", "active", "seed", "n_train", "n_test"):
            if getattr(self, name) is not None:  # numpy integers as plain ints (JSON, the key)
                object.__setattr__(self, name, int(getattr(self, name)))
        if not isinstance(self.options, dict):
            raise ConfigError(f"options must be a dict of option -> value, got {self.options!r}")
        from . import METHODS  # the registry imports this module; a registered method's
        if self.method in METHODS:  # options are checked here, before any data is loaded
            check_options(self.method, METHODS[self.method].defaults, self.options)
            METHODS[self.method].check_option_values(self.options)
        if not (isinstance(self.el_pl, (list, tuple)) and len(self.el_pl) == 2):
            raise ConfigError(f"el_pl must be two integers (embedding layers, prediction layers), got {self.el_pl!r}")
        for part in self.el_pl:
            check_int("each of el_pl", part, minimum=0)
        for name in ("models", "optimizers", "lr"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
                value = getattr(self, name)
            if isinstance(value, tuple) and len(value) != self.n_parties:
                raise ConfigError(f"{name} has {len(value)} entries but there are {self.n_parties} parties; "
                                  "give one per party or a single value for all")
        if isinstance(self.models, str):
            object.__setattr__(self, "models", (self.models,) * self.n_parties)
        for name in ("models", "optimizers"):
            value = getattr(self, name)
            for v in value if isinstance(value, tuple) else (value,):
                if not isinstance(v, str):
                    raise ConfigError(f"{name} must be names (one per party or one for all), got {v!r}")
                if name == "optimizers" and v not in OPTIMIZERS:
                    raise ConfigError(f"Invalid optimizer {v!r}; choose one of {', '.join(OPTIMIZERS)}")
                if name == "models" and v not in MODELS:
                    raise ConfigError(f"Invalid model {v!r}; choose one of {', '.join(MODELS)}")
        self._normalise_resnet_cut()
        for k, v in enumerate(self.lr if isinstance(self.lr, tuple) else (self.lr,)):
            check_rate(f"lr[{k}]" if isinstance(self.lr, tuple) else "lr", v)
        # one experiment, one key: lr=1 and lr=1.0 (and numpy floats, given as the decimal they
        # print as) are one rate, and one value per party that is the same for all is that value
        object.__setattr__(self, "lr", tuple(_rate(v) for v in self.lr) if isinstance(self.lr, tuple)
                           else _rate(self.lr))
        for name in ("optimizers", "lr"):
            value = getattr(self, name)
            if isinstance(value, tuple) and len(set(value)) == 1:
                object.__setattr__(self, name, value[0])
        object.__setattr__(self, "el_pl", tuple(self.el_pl))
        check_choice("lr_schedule", self.lr_schedule, LR_SCHEDULES)
        if isinstance(self.lr_gamma, bool) or not isinstance(self.lr_gamma, (int, float)) or not 0 < self.lr_gamma <= 1:
            raise ConfigError(f"lr_gamma must be a number in (0, 1], got {self.lr_gamma!r}")
        object.__setattr__(self, "lr_gamma", float(self.lr_gamma))
        check_choice("precision", self.precision, PRECISIONS)
        check_int("feature_parts", self.feature_parts, minimum=1, optional=True)
        if self.feature_parts is not None:
            object.__setattr__(self, "feature_parts", int(self.feature_parts))
            if self.n_parties > self.feature_parts:
                raise ConfigError(f"{self.n_parties} parties cannot hold the first C of {self.feature_parts} "
                                  "feature parts; C <= feature_parts")
        if not 0 <= self.active < self.n_parties:
            raise ConfigError(f"active={self.active} is not a party index 0..{self.n_parties - 1}")

    def party_value(self, name: str, k: int) -> Any:
        """Party ``k``'s entry of a per-party field."""
        value = getattr(self, name)
        return value[k] if isinstance(value, tuple) else value

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (what ``dataclasses.asdict`` gives, without its deep walk of every
        field: the key of every run is computed from it, tens of thousands of times per report)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["options"] = copy.deepcopy(d["options"])  # the only mutable field: no aliasing
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        """Build from a dict; an unknown key is an error, never ignored."""
        cls.refuse_unknown(d, (f.name for f in dataclasses.fields(cls)))
        d = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**d)

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    #: The fields every key hashes, default or not (frozen: the fields of the first committed
    #: records). A field added later is hashed only when it differs from its default, so that
    #: adding it keeps every existing key (:meth:`vflkit.config.KeyedRun.key_dict`). Never edit this.
    KEYED_FIELDS: ClassVar[tuple[str, ...]] = (
        "paper", "dataset", "method", "models", "optimizers", "lr", "partition", "n_parties", "active",
        "batch_size", "epochs", "seed", "n_train", "n_test", "embedding_dim", "el_pl", "options")

    def _normalise_resnet_cut(self) -> None:
        """Check ``resnet_cut``; hold the default where it changes no model of this config (no
        ResNet, or ResNets that both readings cut alike), so an unchanged run keeps its key."""
        check_choice("resnet_cut", self.resnet_cut, RESNET_CUTS)
        if self.resnet_cut == "stages":
            return
        models = self.models if isinstance(self.models, tuple) else (self.models,)
        for m in set(models) & set(RESNET_BLOCKS):
            try:
                if resnet_cut_blocks(m, self.el_pl, "stages") == resnet_cut_blocks(m, self.el_pl, self.resnet_cut):
                    continue
            except ConfigError:  # an EL:PL the six units cannot split: the readings differ
                pass
            return
        object.__setattr__(self, "resnet_cut", "stages")


def make_optimizer(name: str, params: Iterable[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """One of VFedMH Table IV's local optimizers: ``sgd_momentum`` uses momentum 0.9, the common
    default (the paper gives no value); the others PyTorch's defaults besides ``lr``."""
    params = list(params)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "sgd_momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    raise ConfigError(f"Invalid optimizer {name!r}; choose one of {', '.join(OPTIMIZERS)}")


def check_options(method: str, defaults: dict[str, Any], options: dict[str, Any]) -> None:
    """A ConfigError for an option ``method`` does not declare, or one whose value's type is
    not its default's (``blinding="no"`` must not mean on)."""
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        valid = ", ".join(sorted(defaults)) or "none"
        raise ConfigError(f"unknown options {unknown} for method {method!r}; valid: {valid}")
    for name, value in options.items():
        default = defaults[name]
        if not _same_kind(value, default):
            raise ConfigError(f"option {name}={value!r} of method {method!r} must be "
                              f"{_kind_name(default)} like its default {default!r}, got {type(value).__name__}")


def _same_kind(value: Any, default: Any) -> bool:
    """Whether an option's ``value`` has the type of its ``default`` (an int for a float is
    fine; a bool is only a bool; a string is never a bool); a None default accepts anything."""
    if default is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, numbers.Integral):
        return isinstance(value, numbers.Integral)
    if isinstance(default, numbers.Real):
        return isinstance(value, numbers.Real)
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))


def _kind_name(default: Any) -> str:
    kinds = ((bool, "True or False"), (int, "an integer"), (float, "a number"), (str, "a string"))
    return next((name for kind, name in kinds if isinstance(default, kind)), f"a {type(default).__name__}")


def backward_each(pairs: Sequence[tuple[torch.Tensor, torch.Tensor | None]]) -> None:
    """Back-propagate several parties' outputs with their gradients (None for a scalar loss)
    in one autograd call: each party's graph is its own (what it received came through the
    channel, detached), so this is exactly a ``backward`` per party, at one call's fixed cost."""
    if pairs:
        torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])


def send_cut_outputs(pack: Any, ids: torch.Tensor, model: str, kind: str
                     ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """The up-leg of a split step: each passive party runs its ``model`` on its batch and sends
    the output as a ``kind`` message; the active party receives each as a leaf whose gradient it
    returns (:func:`return_cut_gradients`). What each passive party sent, and what the active
    party received, by passive party."""
    a, ch = pack.active, pack.channel
    sent = {}
    for n in pack.names:
        if n != a:
            sent[n] = pack.model(n, model)(pack.x(n, ids))
            ch.send(n, a, kind, sent[n])
    return sent, {n: ch.recv(a, n, kind).requires_grad_(True) for n in sent}


def return_cut_gradients(pack: Any, sent: dict[str, torch.Tensor], received: dict[str, torch.Tensor]) -> None:
    """The down-leg of a split step after the active party's backward: it sends each passive
    party the gradient of what it received from that party and steps its own optimizer; each
    passive party back-propagates its gradient through what it ``sent`` and steps its own."""
    a, ch = pack.active, pack.channel
    for n, r in received.items():
        ch.send(a, n, "gradient", r.grad)
    pack.optimizers[(a, "local")].step()
    backward_each([(sent[n], ch.recv(n, a, "gradient")) for n in sent])
    for n in sent:
        pack.optimizers[(n, "local")].step()


def backward_runs(loss: torch.Tensor) -> None:
    """Back-propagate each run's loss (``[K]``, or a run alone's 0-d): run k's slice of every
    stacked parameter gets the gradient of run k's loss alone."""
    (loss if loss.dim() == 0 else loss.sum()).backward()


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Fraction of correct arg-max predictions."""
    return (logits.argmax(dim=1) == labels).float().mean().item()


class VFLMethod(ABC):
    """Base class of all VFL methods; ``parties`` in partition order, exactly one holding the labels."""

    #: Registry name of the method.
    name: ClassVar[str]
    #: Method-specific options and their defaults (overridden by ``config.options``).
    defaults: ClassVar[dict[str, Any]] = {}
    #: "homogeneous" / "heterogeneous" when the method's name promises a model mix (the
    #: Homo_ and Heter_ variants of VFedMH Table III); None accepts any.
    model_mix: ClassVar[str | None] = None

    #: Where ``train_step`` leaves the checks it computes on the device instead of reading them
    #: (VFedMH's ring: NaN/inf and overflow of embeddings, masks that did not cancel); set by a
    #: trainer that reads them with the losses (:meth:`defer_checks`). None: read at once.
    checks: DeferredChecks | None = None

    #: The method's training step over K >= 1 runs' stacked party models, written once:
    #: ``step(pack, ids)`` with ``ids`` ``[K, b]`` returns each trained model's loss per run, a
    #: detached ``[K]`` tensor. None: the method steps with its own ``train_step`` and does not pack.
    step: ClassVar[Callable[[Pack, torch.Tensor], dict[str, torch.Tensor]] | None] = None

    _alone: Pack | None = None

    @classmethod
    def packs(cls) -> bool:
        """Whether runs of this method train as packs: it has a :attr:`step` and its
        ``train_step`` is that step (a subclass overriding ``train_step`` does not pack)."""
        return cls.step is not None and cls.train_step is VFLMethod.train_step

    @classmethod
    def pack_parties(cls, pack: Pack, *, together: bool) -> None:
        """Rearrange a pack's stacked models once it is built (C-VFL stacks alike parties); default none."""

    @classmethod
    def draw_ahead(cls, pack: Pack, batch_sizes: Sequence[int]) -> None:
        """Draw on the host what the coming steps (of ``batch_sizes``) take at random (C-VFL's
        dither), so that a step copies nothing to the device; default none."""

    @classmethod
    def draws_per_step(cls, pack: Pack) -> int:
        """How many drawn tensors one step takes (:meth:`draw_ahead`)."""
        return 0

    @classmethod
    def check_option_values(cls, options: dict[str, Any]) -> None:
        """A ConfigError for option values that contradict each other (``options`` as given,
        each of a known name and type: :func:`check_options`); a method with such options
        overrides it. Called where the options are, before any data is loaded."""

    def __init__(self, config: RunConfig, parties: Sequence[Party], *, num_classes: int) -> None:
        holders = [p for p in parties if p.holds_labels]
        if len(holders) != 1:
            raise ConfigError(f"{self.name} needs exactly one party with labels, got {len(holders)}")
        check_options(self.name, self.defaults, config.options)
        self.check_option_values(config.options)
        if self.model_mix is not None:
            n_arch = len(set(config.party_value("models", k) for k in range(len(parties))))
            if (self.model_mix == "homogeneous") != (n_arch == 1):
                want = ("one architecture for every party" if self.model_mix == "homogeneous"
                        else "at least two architectures")
                raise ConfigError(f"{self.name} needs {self.model_mix} party models, got {list(config.models)}; "
                                  f"give {want}")
        self.config = config
        self.parties = list(parties)
        self.active = holders[0]
        self.passive = [p for p in self.parties if p is not self.active]
        self.num_classes = num_classes
        self.options = {**self.defaults, **config.options}
        self.build()

    # -- what every method provides -------------------------------------------------------

    @abstractmethod
    def build(self) -> None:
        """Create each party's models (``party.models``) and optimizers (``party.optimizers``)."""

    def setup(self) -> None:
        """One-off protocol messages before training (default: none)."""

    def train_step(self, ids: torch.Tensor) -> dict[str, torch.Tensor | float]:
        """One protocol step on the samples ``ids``; returns the loss of each trained model as a
        detached 0-d tensor (the trainer reads losses back in batches: a ``.item()`` per step
        would make a GPU wait) or a float. Default: :attr:`step` on a pack of this run alone."""
        if type(self).step is None:
            raise NotImplementedError(f"{self.name} defines neither step nor train_step")
        if self._alone is None:
            self._alone = Pack([self])
        return self._alone.train_step(ids)

    @abstractmethod
    def predict(self, ids: torch.Tensor, split: str = "test") -> dict[str, torch.Tensor]:
        """Logits of each trained model for ``ids``, as the active party ends up holding them."""

    def trained_models(self) -> dict[str, str]:
        """The models a run yields: key (as used in losses and metrics) -> architecture; by
        default the active party's model alone."""
        return {"active": self.config.party_value("models", self.party_index(self.active))}

    def defer_checks(self, checks: DeferredChecks) -> None:
        """Have ``train_step`` leave its device-side checks in ``checks`` for the trainer to read
        with the losses (every N steps on a GPU), rather than read each at once: a step then
        never waits for the device. A method that computes no such checks never adds any."""
        self.checks = checks

    # -- shared helpers --------------------------------------------------------------------

    def party_index(self, party: Party) -> int:
        """Position of ``party`` in partition order (the index into per-party config fields)."""
        return self.parties.index(party)

    def party_model(self, party: Party) -> "PartyModel":
        """A fresh model for ``party`` on its device: its architecture from the config, the
        run's embedding size and EL:PL split, and a tabular party's ``model_kwargs``."""
        cfg = self.config
        arch = cfg.party_value("models", self.party_index(party))
        # a tabular party carries what its Criteo model needs (vocab_sizes, n_dense); none for images
        cut = {"cut": cfg.resnet_cut} if arch.startswith("resnet") else {}
        return get_model(arch, input_shape=party.input_shape, num_classes=self.num_classes,
                         embedding_dim=cfg.embedding_dim, el_pl=cfg.el_pl,
                         **model_kwargs(party, arch), **cut).to(party.device)

    def modules(self) -> list[nn.Module]:
        """Every module of every party."""
        return [m for p in self.parties for m in p.models.values()]

    def train(self) -> None:
        """Put every model in training mode."""
        for m in self.modules():
            m.train()

    def eval(self) -> None:
        """Put every model in evaluation mode."""
        for m in self.modules():
            m.eval()

    def make_optimizer(self, party: Party, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        """The optimizer the config assigns to ``party``."""
        k = self.party_index(party)
        return make_optimizer(self.config.party_value("optimizers", k),
                              params, float(self.config.party_value("lr", k)))

    @torch.no_grad()
    def evaluate(self, *, split: str = "test", batch_size: int = 512) -> dict[str, dict[str, float]]:
        """Test metrics of every trained model, computed by the active party from its labels:
        accuracy; for two classes also F1 of the positive class (APC-VFL) and ROC AUC (EASTER)."""
        self.eval()
        ids = self.active.ids[split]
        logits: dict[str, list[torch.Tensor]] = {}
        labels = []
        for start in range(0, len(ids), batch_size):
            batch = ids[start:start + batch_size]
            for key, out in self.predict(batch, split).items():
                logits.setdefault(key, []).append(out.float())
            labels.append(self.active.labels(split, ids=batch))
        # one transfer per model after the loop, not one per batch (each would wait for a GPU)
        y = torch.cat(labels).cpu()
        result = {}
        for key, parts in logits.items():
            z = torch.cat(parts).cpu()
            metrics = {"test_accuracy": accuracy(z, y)}
            if self.num_classes == 2:
                from sklearn.metrics import f1_score, roc_auc_score

                metrics["test_f1"] = float(f1_score(y.numpy(), z.argmax(1).numpy(), zero_division=0))
                if len(y.unique()) == 2:  # AUC is undefined on a single-class test set
                    metrics["test_auc"] = float(roc_auc_score(y.numpy(), z.softmax(1)[:, 1].numpy()))
            result[key] = metrics
        self.train()
        return result
