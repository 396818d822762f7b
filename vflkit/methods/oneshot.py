"""The one-shot VFL contract (APC-VFL, its Ablation, VFedTrans, LocalFeatures) and what they share.

APC-VFL (Irureta et al. 2025) and VFedTrans (Huang et al. 2023) do not train batch by batch
across parties, so they do not fit :class:`~vflkit.methods.base.VFLMethod`. Each runs a short
protocol once, after which the active participant turns its *own* features into enhanced
features and trains an ordinary classifier on them. Every one-shot method implements

``fit(active, passive)`` (the protocol; every message through ``Party.send``/``recv``) and
``transform(x_active)`` (the active participant's enhanced features, computed alone).

:func:`train_autoencoder` is the one training loop of every SELU autoencoder here (Adam,
mini-batches, early stopping on a held-out 10 % of the samples, APC-VFL Appendix B), with the
distillation term of APC-VFL Eq. 5 when a teacher representation is given.
"""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from typing import ClassVar

import torch

from ..comm import Party
from ..errors import ConfigError, DivergenceError, check_choice
from ..partition import intersect_ids

DISTILL_LOSSES: tuple[str, ...] = ("mse", "mae")

#: Adam's learning rate in every APC-VFL experiment. Appendix B: Adam "with the parameters
#: proposed in the original paper", i.e. Kingma & Ba's defaults (lr 1e-3, betas 0.9/0.999,
#: eps 1e-8), which are also torch's. The notebook keeps 0.01 as a labelled sensitivity row
#: (it trains the teacher autoencoders badly).
ADAM_LR: float = 1e-3


class OneShotMethod(ABC):
    """Base class of the one-shot methods: ``fit`` once, then ``transform`` the active data.

    Parameters (keyword-only, shared by every subclass)
    ----------
    epochs : int, default 200
        Most epochs of any autoencoder (APC-VFL Appendix B).
    patience : int, default 10
        Early stopping on the validation loss (Appendix B).
    lr : float, default :data:`ADAM_LR`
    batch_size : int, default 128
        128 for MIMIC-III and Credit Card, 8 for Breast Cancer (Appendix B).
    val_fraction : float, default 0.1
        Share of a participant's samples held out for early stopping (Appendix A).
    seed : int, default 0
        Every initialisation, shuffle and mask of the run.
    """

    name: ClassVar[str] = "one_shot"

    def __init__(self, *, epochs: int = 200, patience: int = 10, lr: float = ADAM_LR,
                 batch_size: int = 128, val_fraction: float = 0.1, seed: int = 0) -> None:
        for key, value in (("epochs", epochs), ("patience", patience), ("batch_size", batch_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{key} must be a positive integer, got {value!r}")
        if not lr > 0:
            raise ConfigError(f"lr must be > 0, got {lr!r}")
        if not 0 <= val_fraction < 1:
            raise ConfigError(f"val_fraction must be in [0, 1), got {val_fraction!r}")
        self.epochs, self.patience, self.lr = epochs, patience, float(lr)
        self.batch_size, self.val_fraction, self.seed = batch_size, float(val_fraction), seed
        #: Per trained autoencoder: epochs run and the best validation loss (for the record).
        self.history: dict[str, dict[str, float]] = {}
        self._fitted = False

    @abstractmethod
    def fit(self, active: Party, passive: Party) -> None:
        """Run the protocol between the active and the passive participant (split "train")."""

    @abstractmethod
    def _transform(self, x_active: torch.Tensor) -> torch.Tensor:
        """The enhanced features of the active participant's rows ``x_active``."""

    @torch.no_grad()
    def transform(self, x_active: torch.Tensor) -> torch.Tensor:
        """The active participant's enhanced features for its own rows ``x_active`` [N, a]: needs
        no other participant (APC-VFL Sec. 4.4: inference is independent)."""
        if not self._fitted:
            raise ConfigError(f"{type(self).__name__}.transform called before fit(active, passive)")
        return self._transform(torch.as_tensor(x_active, dtype=torch.float32))

    @torch.no_grad()
    def variants(self, x_active: torch.Tensor) -> dict[str, torch.Tensor]:
        """Other enhanced features of the *same* fitted method, by name, that the trainer scores
        beside :meth:`transform`'s in the same run (a paired comparison at no training cost).
        None by default; VFedTrans offers its representation without the raw features."""
        if not self._fitted:
            raise ConfigError(f"{type(self).__name__}.variants called before fit(active, passive)")
        return self._variants(torch.as_tensor(x_active, dtype=torch.float32))

    def _variants(self, x_active: torch.Tensor) -> dict[str, torch.Tensor]:
        return {}

    def generator(self, offset: int) -> torch.Generator:
        """A generator for one step of the protocol, so steps do not share random streams."""
        return torch.Generator().manual_seed(self.seed * 1000 + offset)

    @staticmethod
    def aligned_ids(active: Party, passive: Party) -> torch.Tensor:
        """The ids both participants hold: the outcome of the PSI the paper assumes done
        beforehand (Sec. 3). Only ids are compared, never features; the PSI's own traffic is
        not part of either paper's footprint, so it is not sent through the channel."""
        return intersect_ids(active.ids["train"], passive.ids["train"])


class LocalFeatures(OneShotMethod):
    """APC-VFL's "Local": the classifier on the active participant's raw (standardised) features.

    The lower bound of APC-VFL Fig. 5; no message crosses the channel. (Not VFedMH's
    :class:`~vflkit.methods.local.Local`, the active party's own network trained batch by batch.)
    """

    name = "local_features"

    def fit(self, active: Party, passive: Party) -> None:
        self._fitted = True

    def _transform(self, x_active: torch.Tensor) -> torch.Tensor:
        return x_active


def _split_rows(n: int, val_fraction: float, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    perm = torch.randperm(n, generator=g)
    n_val = int(round(n * val_fraction)) if n >= 10 else 0
    return perm[n_val:], perm[:n_val]


def train_autoencoder(
    model: torch.nn.Module,
    x: torch.Tensor,
    *,
    teacher: torch.Tensor | None = None,
    teacher_rows: torch.Tensor | None = None,
    lam: float = 0.01,
    distill_loss: str = "mse",
    epochs: int = 200,
    patience: int = 10,
    lr: float = ADAM_LR,
    batch_size: int = 128,
    val_fraction: float = 0.1,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """Train a :class:`~vflkit.models.SeluAutoencoder` in place; returns its training summary.

    Without ``teacher`` the loss is the reconstruction MSE (Eq. 1). With it, APC-VFL Eq. 5:
    per sample ``||x - f(g(x))||^2 + lam * D(z, g(x))`` where ``x`` is aligned (``teacher[j]``
    is the target of row ``teacher_rows[j]``), the reconstruction alone otherwise; ``D`` is the
    squared L2 distance ("mse") or the L1 distance ("mae"). Eq. 5 writes norms, so both terms
    are sums over dimensions (not means): that is what gives lam = 0.01 weight against a
    256-dimensional latent; the batch loss is the mean over samples.

    Early stopping watches the loss on a random ``val_fraction`` of the rows (patience epochs
    without improvement) and the best weights are restored: the paper does not say whether
    they are; restoring them makes the result independent of how long the plateau lasted.
    """
    check_choice("distillation loss", distill_loss, DISTILL_LOSSES)
    x = torch.as_tensor(x, dtype=torch.float32)
    n = len(x)
    if n < 2:
        raise ConfigError(f"an autoencoder needs at least 2 samples to train, got {n}")
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    target = torch.full((n,), -1, dtype=torch.long)
    if teacher is not None:
        if teacher_rows is None or len(teacher_rows) != len(teacher):
            raise ConfigError("teacher needs teacher_rows: the row of x each teacher representation belongs to")
        target[teacher_rows] = torch.arange(len(teacher_rows))
        teacher = torch.as_tensor(teacher, dtype=torch.float32)
    train_rows, val_rows = _split_rows(n, val_fraction, g)
    if len(val_rows) == 0:  # too few samples to hold any out: stop on the training loss
        val_rows = train_rows

    def batch_loss(rows: torch.Tensor) -> torch.Tensor:
        xb = x[rows]
        z = model.encode(xb)
        per_sample = ((model.decode(z) - xb) ** 2).sum(dim=1)
        if teacher is None:
            return per_sample.mean() / x.shape[1]  # plain MSE (Eq. 1)
        t = target[rows]
        has = t >= 0
        if has.any():
            diff = z[has] - teacher[t[has]]
            d = (diff ** 2).sum(dim=1) if distill_loss == "mse" else diff.abs().sum(dim=1)
            per_sample = per_sample.index_add(0, has.nonzero().flatten(), lam * d)
        return per_sample.mean()

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    best, best_state, stale, ran = math.inf, copy.deepcopy(model.state_dict()), 0, 0
    for epoch in range(epochs):
        model.train()
        order = train_rows[torch.randperm(len(train_rows), generator=g)]
        for start in range(0, len(order), batch_size):
            opt.zero_grad(set_to_none=True)
            loss = batch_loss(order[start:start + batch_size])
            loss.backward()
            opt.step()
        ran = epoch + 1
        model.eval()
        with torch.no_grad():
            val = float(batch_loss(val_rows))
        if not math.isfinite(val):
            raise DivergenceError(f"autoencoder validation loss is {val} at epoch {ran}; lower lr (now {lr})")
        if val < best - 1e-7:
            best, best_state, stale = val, copy.deepcopy(model.state_dict()), 0
        else:
            stale += 1
            if stale >= patience:
                break
    model.load_state_dict(best_state)
    model.eval()
    return {"epochs": ran, "best_val_loss": best}


def standardize(x: torch.Tensor) -> torch.Tensor:
    """Z-score each column with the party's own statistics (constant columns become 0): the
    paper does not say, and unscaled Credit Card amounts (up to 10^6) would swamp a SELU network."""
    x = torch.as_tensor(x, dtype=torch.float32)
    if len(x) < 2:
        return torch.zeros_like(x)
    mean, std = x.mean(dim=0), x.std(dim=0)
    return (x - mean) / torch.where(std > 0, std, torch.ones_like(std))


__all__ = ["ADAM_LR", "DISTILL_LOSSES", "LocalFeatures", "OneShotMethod", "standardize", "train_autoencoder"]
