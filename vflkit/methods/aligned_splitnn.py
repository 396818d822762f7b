"""Vertical SplitNN on fully aligned tabular data, as APC-VFL's Table 2 runs it.

Ceballos et al. 2020 / Vepakomma et al. 2018: every participant has a local feature extractor
and the active participant a classification head. APC-VFL Appendix B makes the comparison fair
by reusing its encoders: the extractors are the encoders of g1A ([a, 64, 128]) and g1P
([p, 128, 256]), the head is g2A's encoder ([384, 256, 256]) plus a linear layer to the
classes. Per mini-batch the passive participant sends its embedding (kind ``"embedding"``)
and receives the gradient with respect to it (kind ``"gradient"``): two communication rounds
per batch. Adam with Kingma & Ba's defaults (lr 1e-3, Appendix B), at most 200 epochs, early
stopping (patience 10) on the cross-entropy of a held-out 10 % of the training samples, best
weights restored.

The image-strip SplitNN in :mod:`vflkit.methods.splitnn` is trained batch by batch by
:mod:`vflkit.training.split`; this one is the tabular, aligned-only variant with early stopping
that Table 2 needs, trained by :mod:`vflkit.training.one_shot`.
"""

from __future__ import annotations

import copy
import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..comm import Party
from ..errors import ConfigError, DivergenceError
from ..models import apc_vfl_autoencoder
from ..partition import check_aligned
from .oneshot import ADAM_LR


class AlignedSplitNN:
    """SplitNN between an active and a passive participant holding the same aligned samples;
    keyword-only parameters: ``num_classes`` and those of :class:`~vflkit.methods.oneshot.OneShotMethod`."""

    name: ClassVar[str] = "aligned_splitnn"

    def __init__(self, *, num_classes: int, epochs: int = 200, patience: int = 10, lr: float = ADAM_LR,
                 batch_size: int = 128, val_fraction: float = 0.1, seed: int = 0) -> None:
        if num_classes < 2:
            raise ConfigError(f"num_classes must be at least 2, got {num_classes}")
        self.num_classes, self.epochs, self.patience, self.lr = num_classes, epochs, patience, lr
        self.batch_size, self.val_fraction, self.seed = batch_size, val_fraction, seed
        self.history: dict[str, float] = {}

    def _build(self, active: Party, passive: Party) -> None:
        torch.manual_seed(self.seed * 1000 + 11)
        passive.models["extractor"] = apc_vfl_autoencoder("g1P", p=passive.input_shape[0]).encoder
        torch.manual_seed(self.seed * 1000 + 12)
        active.models["extractor"] = apc_vfl_autoencoder("g1A", a=active.input_shape[0]).encoder
        head = apc_vfl_autoencoder("g2A").encoder
        active.models["head"] = nn.Sequential(head, nn.Linear(head[-2].out_features, self.num_classes))
        passive.optimizers["extractor"] = torch.optim.Adam(passive.models["extractor"].parameters(), lr=self.lr)
        active.optimizers["model"] = torch.optim.Adam(
            [*active.models["extractor"].parameters(), *active.models["head"].parameters()], lr=self.lr)

    def _forward(self, active: Party, passive: Party, split: str, rows: torch.Tensor, *, train: bool) -> torch.Tensor:
        """Logits for ``rows`` of ``split``; in training the passive participant keeps its
        embedding's graph until the gradient message arrives."""
        ids = passive.ids[split][rows]
        h_p = passive.models["extractor"](passive.features(split, ids=ids))
        if train:
            passive.state["h"] = h_p
        passive.send(active, "embedding", h_p)
        h_p_recv = active.recv(passive, "embedding")
        if train:
            h_p_recv.requires_grad_(True)
            active.state["h_p"] = h_p_recv
        h_a = active.models["extractor"](active.features(split, ids=ids))
        return active.models["head"](torch.cat([h_a, h_p_recv], dim=1))

    def fit(self, active: Party, passive: Party) -> None:
        """Train on split "train" of the aligned samples (same ids, same order at both)."""
        check_aligned(active.ids["train"], passive.ids["train"])
        self._build(active, passive)
        channel = active.channel
        g = torch.Generator().manual_seed(self.seed * 1000 + 13)
        n = active.n_samples("train")
        perm = torch.randperm(n, generator=g)
        n_val = int(round(n * self.val_fraction))
        train_rows, val_rows = perm[n_val:], perm[:n_val] if n_val else perm
        models = [active.models["extractor"], active.models["head"], passive.models["extractor"]]
        best, stale, ran = math.inf, 0, 0
        best_state = [copy.deepcopy(m.state_dict()) for m in models]
        step = 0
        for epoch in range(self.epochs):
            for m in models:
                m.train()
            order = train_rows[torch.randperm(len(train_rows), generator=g)]
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                channel.at(epoch=epoch, step=step, phase="train")
                step += 1
                active.optimizers["model"].zero_grad(set_to_none=True)
                passive.optimizers["extractor"].zero_grad(set_to_none=True)
                logits = self._forward(active, passive, "train", rows, train=True)
                loss = F.cross_entropy(logits, active.labels("train", ids=active.ids["train"][rows]))
                loss.backward()
                active.optimizers["model"].step()
                active.send(passive, "gradient", active.state.pop("h_p").grad)
                passive.state.pop("h").backward(passive.recv(active, "gradient"))
                passive.optimizers["extractor"].step()
            ran = epoch + 1
            channel.at(epoch=epoch, step=step, phase="eval")
            for m in models:
                m.eval()
            with torch.no_grad():
                val = float(F.cross_entropy(self._forward(active, passive, "train", val_rows, train=False),
                                            active.labels("train", ids=active.ids["train"][val_rows])))
            if not math.isfinite(val):
                raise DivergenceError(f"SplitNN validation loss is {val} at epoch {ran}; lower lr (now {self.lr})")
            if val < best - 1e-7:
                best, stale = val, 0
                best_state = [copy.deepcopy(m.state_dict()) for m in models]
            else:
                stale += 1
                if stale >= self.patience:
                    break
        for m, s in zip(models, best_state):
            m.load_state_dict(s)
            m.eval()
        self.history = {"epochs": ran, "best_val_loss": best}

    @torch.no_grad()
    def predict(self, active: Party, passive: Party, split: str = "test") -> torch.Tensor:
        """Class predictions for every sample of ``split`` (one eval-phase embedding message)."""
        check_aligned(active.ids[split], passive.ids[split])
        active.channel.at(phase="eval")
        rows = torch.arange(active.n_samples(split))
        return self._forward(active, passive, split, rows, train=False).argmax(dim=1)


def footprint_splitnn(epochs: int, n_aligned: int, batch_size: int, z_p: int = 256,
                      p: int = 128 * 256 + 256) -> int:
    """APC-VFL's Eqs. 7-9: epochs * |D_A| * z_p * 4 (forward) + epochs * ceil(|D_A|/B) * p * 4 (backward:
    one gradient per parameter of the passive encoder's last layer)."""
    return epochs * n_aligned * z_p * 4 + epochs * math.ceil(n_aligned / batch_size) * p * 4


__all__ = ["AlignedSplitNN", "footprint_splitnn"]
