"""Agg_VFL: aggregation VFL, each party's whole model predicts and the active party sums.

Zhang, Guo, Qu, Zeng, Wang, Liu, Zomaya, "Adaptive Vertical Federated Learning on Unbalanced
Features", IEEE TPDS 2022 (VFedMH's baseline [21]); VFedMH Sec. VII-A: "in aggVFL, the last
layer's prediction values are added together".

Every party's prediction R_k (logits) goes to the active party, which adds them (no trainable
top model) and returns to each passive party ``∂L/∂R_k``: two communication rounds per step,
one global model, the sum of the parties' outputs (docs/engine.md, "Agg_VFL's step").

This is the summed-logit aggregation VFedMH describes, **not** the algorithm of its cited
paper [21]: Zhang et al.'s method is defined by an adaptive number of local updates per party
(derived from each party's feature count and compute), which VFedMH never mentions; here every
party makes one update per step, like every other baseline of Table II.

``homo_aggvfl`` and ``heter_aggvfl`` (VFedMH Table III) are the same protocol with the party
models required to be identical, or mixed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .base import VFLMethod, accuracy, backward_runs, return_cut_gradients, send_cut_outputs, stacked_cross_entropy

if TYPE_CHECKING:
    from .pack import Pack


def step(pack: Pack, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Agg_VFL's step over K runs (:attr:`VFLMethod.step`): predictions up, summed, cut gradients back."""
    a = pack.active
    pack.zero_grad(*((n, "local") for n in pack.names))
    sent, received = send_cut_outputs(pack, ids, "model", "prediction")
    own = pack.model(a, "model")(pack.x(a, ids))
    total = own + torch.stack(list(received.values())).sum(0) if received else own
    loss = stacked_cross_entropy(total, pack.y(ids))
    backward_runs(loss)
    return_cut_gradients(pack, sent, received)
    return {"active": loss.detach()}


class AggVFL(VFLMethod):
    """Agg_VFL: summed party predictions, cut gradients back; any model mix."""

    name = "agg_vfl"
    step = staticmethod(step)

    def build(self) -> None:
        for party in self.parties:
            party.models["model"] = self.party_model(party)
            party.optimizers["local"] = self.make_optimizer(party, party.models["model"].parameters())

    def _predictions(self, ids: torch.Tensor, split: str) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Round 1 as the active party ends up holding it: the sum, its own R_a and each R_k received."""
        a = self.active
        for p in self.passive:
            p.send(a, "prediction", p.models["model"](p.features(split, ids=ids)))
        received = [a.recv(p, "prediction").requires_grad_(torch.is_grad_enabled()) for p in self.passive]
        own = a.models["model"](a.features(split, ids=ids))
        return own + torch.stack(received).sum(0), own, received

    @torch.no_grad()
    def predict(self, ids: torch.Tensor, split: str = "test") -> dict[str, torch.Tensor]:
        return {"active": self._predictions(ids, split)[0]}


class HomoAggVFL(AggVFL):
    """Homo_aggVFL (VFedMH Table III): Agg_VFL with one architecture at every party."""

    name = "homo_aggvfl"
    model_mix = "homogeneous"


class HeterAggVFL(AggVFL):
    """Heter_aggVFL (VFedMH Table III): Agg_VFL with at least two architectures.

    Its one trained model is the summed ensemble (as Agg_VFL's). :meth:`evaluate` also scores
    each party's own prediction R_k alone, which the active party holds after round 1: the
    paper's Table III columns differ by tens of points between architectures, which the
    ensemble (the same kind of model in every column) cannot show, and each party's own model
    can. The record carries both readings (``own_test_accuracy:<party>`` beside the ensemble's
    ``test_accuracy``); the study shows both, labelled.
    """

    name = "heter_aggvfl"
    model_mix = "heterogeneous"

    _own: dict[str, list[torch.Tensor]] | None = None  # set while evaluate() runs

    @torch.no_grad()
    def predict(self, ids: torch.Tensor, split: str = "test") -> dict[str, torch.Tensor]:
        total, mine, received = self._predictions(ids, split)
        if self._own is not None:  # keep each party's own R_k from the same round 1
            self._own[self.active.name].append(mine.float())
            for p, r in zip(self.passive, received):
                self._own[p.name].append(r.float())
        return {"active": total}

    def evaluate(self, *, split: str = "test", batch_size: int = 512) -> dict[str, dict[str, float]]:
        """The ensemble's metrics and each party's own, from one test pass (one round 1 a batch,
        counted once by the ledger)."""
        self._own = {p.name: [] for p in self.parties}
        try:
            result = super().evaluate(split=split, batch_size=batch_size)
            own = self._own
        finally:
            self._own = None
        y = self.active.labels(split, ids=self.active.ids[split]).cpu()
        for name, parts in own.items():
            result["active"][f"own_test_accuracy:{name}"] = accuracy(torch.cat(parts).cpu(), y)
        return result
