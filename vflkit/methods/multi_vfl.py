"""Multi-VFL: split learning with D data owners and K label owners, aggregated by a server.

Mugunthan, Goyal and Kagal, "Multi-VFL: A Vertical Federated Learning System for Multiple Data
and Label Owners" (Algorithm 1). Every data owner holds one strip of every image; every label
owner holds the labels of its own samples (Table 3). Each round:

1. every label owner k trains with the data owners by split learning: data owner d runs its
   copy ``W^C_{d,k}`` on its strip of the batch and sends the activations (``embedding``);
   label owner k joins them into one map, runs its model ``W^S_k``, computes the loss and
   sends each data owner the gradient at its activations (``gradient``);
2. every label owner sends its update ``W^{S,r+1}_k - W^{S,r}`` to the server
   (``model_weights``), which aggregates them with its optimizer (:mod:`.server_opt`) and
   returns the new weights (``model_weights``);
3. every data owner averages its K copies and starts the next round from that average
   (Algorithm 1, lines 11-13; local, no message).

Test accuracy is the aggregated label-owner model on the averaged data-owner models: the data
owners send their activations of the test images to ``label_owner_1``, which holds the test
labels (``phase="eval"``). The protocol does not fit :class:`~vflkit.methods.base.VFLMethod`
(several label owners, rounds, a server), so it has its own small interface:
:meth:`MultiVFL.setup`, :meth:`MultiVFL.round`, :meth:`MultiVFL.evaluate`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..comm import Channel, Party
from ..config import KeyedRun, check_dataset, check_int, check_name, check_rate
from ..errors import ConfigError, DivergenceError
from ..models import MultiVFLDataOwner, MultiVFLLabelOwner
from ..partition import NIID_SCENARIOS, LABEL_SCENARIOS, label_owner_split, strips
from .base import accuracy
from .server_opt import SERVER_OPTIMIZERS, VARIANTS, ServerOptimizer, init_state, server_step

LOCAL_OPTIMIZERS: tuple[str, ...] = ("sgd", "adam")
#: The paper's datasets; any image dataset registered with :func:`vflkit.data.register_dataset`
#: runs too (its images are cut into the data owners' strips of rows whatever their size).
DATASETS: tuple[str, ...] = ("mnist", "fashion_mnist")

#: Test images the label owner's model takes at once on the CPU when it evaluates. A 1000-image
#: message's activations after the first conv (173 MB) overflow the CPU's last-level cache, those
#: of 100 images (17 MB) fit a 32 MB one, so chunks of 100 evaluate markedly faster than the whole
#: message at once. The messages do not depend on the chunk, nor the accuracy; each image's logits
#: can be bit-identical on an AVX2 CPU, while on an AVX-512 one the kernels torch picks for 3 rows
#: and for 16 sum in another order, and the test loss differs in float32's last bits (relative 1e-7
#: or so: tests/test_multi_vfl.py holds it to 1e-6). On a GPU the model takes the whole message.
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
    server_optimizer : {"fedavg", "fedadam", "fedyogi", "feddemonadam"}, default "fedavg"
    variant : {"paper", "reddi"}, default "paper"
        The paper's ServerAggregation or Reddi et al.'s (see :mod:`.server_opt`).
    n_data_owners : int, default 4
        D; images are cut into D strips of rows (4: 7x28).
    n_label_owners : int, default 5
        K (the niid scenarios need 5).
    samples_per_owner : int, default 5000
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
    batch_size : int, default 64
    local_lr : float, default 1e-3
    local_optimizer : {"sgd", "adam"}, default "sgd"
        Algorithm 1 line 7 is a plain gradient step, ``W <- W - eta_k grad``.
    beta1, beta2, server_lr, tau : float
        Table 2: 0.9, 0.99, 1e-3, 1e-3.
    n_test : int or None, default None
        Test images used for the accuracy (None: the full test set).
    eval_every : int, default 1
        Evaluate every this many rounds (and always after the last).
    seed : int, default 0
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
        check_rate("local_lr", self.local_lr)
        for name in ("beta1", "beta2", "server_lr", "tau"):
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
        if self.local_lr <= 0:
            raise ConfigError(f"local_lr must be > 0, got {self.local_lr}")
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
    """Xavier (Glorot) normal weights and zero biases for every conv and linear layer.

    Algorithm 1 initialises with "Gaussian/Xavier"; we read that as Glorot's Gaussian.
    """
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_normal_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
    return module


def _weights(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class MultiVFL:
    """One Multi-VFL run: D data owners, K label owners and a server on one channel.

    Parameters
    ----------
    config
        The run's settings.
    data
        An :class:`~vflkit.data.ImageData` (MNIST, FashionMNIST or images of your own); its test
        split may already be a subset.
    device
        Where every party's models live.
    channel
        The channel (default: a new one with its own ledger).

    Usage: ``m = MultiVFL(cfg, data); m.setup(); for r in 1..R: m.round(r); m.evaluate()``.
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

    @property
    def parties(self) -> list[Party]:
        """Every party: data owners, label owners, server."""
        return [*self.data_owners, *self.label_owners, self.server]

    # -- protocol ------------------------------------------------------------------------

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

    def _local_optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        # Created afresh each round: a label owner's and a copy's optimizer state does not
        # survive the server's replacement of the weights (plain SGD has none anyway).
        if self.config.local_optimizer == "sgd":
            return torch.optim.SGD(params, lr=self.config.local_lr)
        return torch.optim.Adam(params, lr=self.config.local_lr)

    def _batches(self, k: int, r: int) -> list[torch.Tensor]:
        """Label owner k's batches (sample ids) of round r.

        The order is drawn from a generator seeded by (seed, round, owner): a public protocol
        parameter, so data owners need no message to agree on it.
        """
        order, sizes = self._round_order(k, r)
        return list(order.split(sizes))

    def _round_order(self, k: int, r: int) -> tuple[torch.Tensor, list[int]]:
        """Label owner k's sample ids of round r in their order, and its batches' sizes: the
        batches of :meth:`_batches` end to end (a packed round takes them at once)."""
        c = self.config
        ids = self.label_owners[k].ids["train"]
        g = torch.Generator().manual_seed(c.seed * 1_000_003 + r * 101 + k)
        full, rest = divmod(len(ids), c.batch_size)
        epoch = [c.batch_size] * full + ([rest] if rest else [])
        orders = [ids[torch.randperm(len(ids), generator=g)] for _ in range(c.local_epochs)]
        sizes = (epoch * c.local_epochs)[:c.local_steps]  # [:None] keeps them all
        order = torch.cat(orders) if len(orders) > 1 else orders[0]
        return order[:sum(sizes)], sizes

    def _split_step(self, k: int, ids: torch.Tensor, optimizers: dict[str, torch.optim.Optimizer]) -> float:
        """One split-learning step between label owner k and every data owner's copy k."""
        lo = self.label_owners[k]
        copy = f"copy_{k + 1}"
        for d in self.data_owners:
            optimizers[d.name].zero_grad(set_to_none=True)
            a = d.models[copy](d.features("train", ids=ids))
            d.state["activation"] = a
            d.send(lo, "embedding", a)
        parts = [lo.recv(d, "embedding").requires_grad_(True) for d in self.data_owners]
        optimizers[lo.name].zero_grad(set_to_none=True)
        # A_k = Concatenate A_{d,k}: strips of rows re-join along the height (dim 2).
        logits = lo.models["top"](torch.cat(parts, dim=2))
        loss = F.cross_entropy(logits, lo.labels("train", ids=ids))
        loss.backward()
        optimizers[lo.name].step()
        for d, a in zip(self.data_owners, parts):
            lo.send(d, "gradient", a.grad)
        for d in self.data_owners:
            d.state.pop("activation").backward(d.recv(lo, "gradient"))
            optimizers[d.name].step()
        return loss.item()

    def round(self, r: int) -> dict[str, float]:
        """Global round ``r`` (from 1) of Algorithm 1; returns the mean training loss per label owner."""
        if r != self.rounds_done + 1:
            raise ConfigError(f"round {r} called after round {self.rounds_done}; rounds run in order 1, 2, ...")
        if "global" not in self.server.models:
            raise ConfigError("call setup() before round()")
        losses: dict[str, float] = {}
        step = 0
        for k, lo in enumerate(self.label_owners):
            copy = f"copy_{k + 1}"
            start = _weights(lo.models["top"])
            optimizers = {lo.name: self._local_optimizer(list(lo.models["top"].parameters()))}
            for d in self.data_owners:
                optimizers[d.name] = self._local_optimizer(list(d.models[copy].parameters()))
            total = 0.0
            batches = self._batches(k, r)
            for ids in batches:
                self.channel.at(epoch=r, step=step, phase="train")
                value = self._split_step(k, ids, optimizers)
                if not math.isfinite(value):
                    raise DivergenceError(f"{lo.name}'s loss is {value} in round {r}: training diverged; "
                                          "lower local_lr or the server lr")
                total += value
                step += 1
            losses[lo.name] = total / len(batches)
            # Line 9: t_k = W_k^{S,r+1} - W^{S,r}, sent to the server.
            now = _weights(lo.models["top"])
            self.channel.at(epoch=r, step=step, phase="train")
            lo.send(self.server, "model_weights", {n: now[n] - start[n] for n in now})
        self._aggregate(r, step)
        for d in self.data_owners:
            self._average_copies(d)
        self.rounds_done = r
        return losses

    def _aggregate(self, r: int, step: int) -> None:
        """Line 10: the server aggregates the label owners' updates and returns the new weights.

        Algorithm 1 calls ServerAggregation(t_k) inside the loop over label owners; we read it as
        FedOpt does (Reddi et al., Algorithm 2), which the paper cites for it: the server
        averages the K updates of the round and takes one optimizer step with their mean.
        """
        self.channel.at(epoch=r, step=step + 1, phase="train")
        server = self.server
        updates = [server.recv(lo, "model_weights") for lo in self.label_owners]
        weights = _weights(server.models["global"])
        mean = {n: torch.stack([u[n] for u in updates]).mean(0) for n in weights}
        new, server.state["opt"] = server_step(weights, mean, server.state["opt"], self.server_optimizer, r)
        self.server_log[r] = self._step_stats(weights, mean, new, server.state["opt"], server.state["initial"])
        server.models["global"].load_state_dict(new)
        self.channel.at(epoch=r, step=step + 2, phase="train")
        for lo in self.label_owners:
            server.send(lo, "model_weights", new)
            lo.models["top"].load_state_dict(lo.recv(server, "model_weights"))

    def _step_stats(self, weights: dict[str, torch.Tensor], update: dict[str, torch.Tensor],
                    new: dict[str, torch.Tensor], state: dict[str, dict[str, torch.Tensor]],
                    initial: dict[str, torch.Tensor]) -> dict[str, float]:
        """The sizes that decide how far a server optimizer moves the model in one round.

        ``update_norm`` is ||t|| (the mean label-owner update), ``server_step_norm`` is
        ||W^{r+1} - W^r|| (FedAvg: equal to ``update_norm``), ``distance_from_init`` is
        ||W^{r+1} - W^0||; ``median_sqrt_v`` and ``p99_sqrt_v`` are the median and 99th percentile
        of the adaptive rules' sqrt(v) over all parameters, beside their stability constant tau
        (NaN for FedAvg, which keeps no v). Norms are Euclidean over every parameter, in float64.
        """
        def norm(parts: list[torch.Tensor]) -> float:
            return math.sqrt(sum(float(p.double().pow(2).sum()) for p in parts))

        names = list(weights)
        out = {"update_norm": norm([update[n] for n in names]),
               "server_step_norm": norm([new[n] - weights[n] for n in names]),
               "distance_from_init": norm([new[n] - initial[n] for n in names]),
               "median_sqrt_v": float("nan"), "p99_sqrt_v": float("nan")}
        if self.server_optimizer.name != "fedavg":
            sqrt_v = torch.cat([state["v"][n].flatten() for n in names]).clamp_min(0).sqrt()
            # a fixed stride keeps torch.quantile under its input-size limit for any model
            sqrt_v = sqrt_v[:: max(1, sqrt_v.numel() // 4_000_000)]
            out["median_sqrt_v"] = float(sqrt_v.median())
            out["p99_sqrt_v"] = float(torch.quantile(sqrt_v.double(), 0.99))
        return out

    def server_stats(self, r: int) -> dict[str, float]:
        """What the server's aggregation of round ``r`` did (see :meth:`_step_stats`); empty
        before that round has run."""
        return dict(self.server_log.get(r, {}))

    @staticmethod
    @torch.no_grad()
    def _average_copies(d: Party) -> None:
        """Lines 11-13: W^C_d = mean_k W^C_{d,k}, then every copy restarts from it."""
        copies = [m for name, m in d.models.items() if name.startswith("copy_")]
        states = [c.state_dict() for c in copies]
        mean = {n: torch.stack([s[n] for s in states]).mean(0) for n in states[0]}
        d.models["global"].load_state_dict(mean)
        for c in copies:
            c.load_state_dict(mean)

    @torch.no_grad()
    def evaluate(self, *, batch_size: int = 1000, eval_chunk: int | None = None) -> dict[str, float]:
        """Test accuracy and loss of the aggregated label-owner model on the averaged data-owner
        models, computed by ``label_owner_1`` from its test labels (messages in phase "eval").

        ``batch_size`` test images travel per message; the label owner runs its model on
        ``eval_chunk`` of them at a time (default: :data:`EVAL_CHUNK` on the CPU, the whole
        message elsewhere; the result is the same).
        """
        if eval_chunk is not None and (not isinstance(eval_chunk, int) or eval_chunk < 1):
            raise ConfigError(f"eval_chunk must be a positive integer or None, got {eval_chunk!r}")
        if eval_chunk is None and self.device.type == "cpu":
            eval_chunk = EVAL_CHUNK
        lo = self.evaluator
        self.channel.at(epoch=self.rounds_done, step=0, phase="eval")
        n = lo.n_samples("test")
        correct, loss_sum = 0.0, 0.0
        for start in range(0, n, batch_size):
            rows = torch.arange(start, min(start + batch_size, n))
            for d in self.data_owners:
                d.send(lo, "embedding", d.models["global"](d.features("test", rows=rows)))
            parts = [lo.recv(d, "embedding") for d in self.data_owners]
            chunk = eval_chunk or len(rows)
            logits = torch.cat([lo.models["top"](torch.cat([p[i:i + chunk] for p in parts], dim=2))
                                for i in range(0, len(rows), chunk)])
            y = lo.labels("test", rows=rows)
            correct += accuracy(logits, y) * len(rows)
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
        return {"test_accuracy": correct / n, "test_loss": loss_sum / n}
