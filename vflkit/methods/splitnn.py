"""SplitNN / PyVertical: split learning with a trainable top model at the active party.

Vepakomma et al., "Split learning for health", 2018; Romanini et al., "PyVertical: A Vertical
Federated Learning Framework for Multi-headed SplitNN", 2021 (VFedMH's baseline [16]).

Every party runs a bottom model (the embedding network h of its architecture) on its own
features and sends the embedding to the active party. The active party concatenates all
embeddings in party order, runs the top model, computes the loss with its labels and returns
to each passive party the gradient of the loss with respect to that party's embedding (the
cut-layer gradient). Two communication rounds per step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from .base import VFLMethod, backward_runs, return_cut_gradients, send_cut_outputs, stacked_cross_entropy

if TYPE_CHECKING:
    from .pack import Pack


def top_model(n_parties: int, embedding_dim: int, num_classes: int) -> nn.Sequential:
    """The active party's top model on the concatenated embeddings (see :class:`SplitNN`)."""
    return nn.Sequential(nn.Linear(n_parties * embedding_dim, embedding_dim), nn.ReLU(),
                         nn.Linear(embedding_dim, num_classes))


@torch.no_grad()
def predict_top(method: VFLMethod, ids: torch.Tensor, split: str = "test") -> dict[str, torch.Tensor]:
    """A split model's logits (SplitNN's, C-VFL's ``predict``): each passive party sends h_k(x_k)
    to the active party, whose top model takes every party's embedding in party order."""
    a = method.active
    for p in method.passive:
        p.send(a, "embedding", p.models["bottom"](p.features(split, ids=ids)))
    z = [a.models["bottom"](a.features(split, ids=ids)) if p is a else a.recv(p, "embedding") for p in method.parties]
    return {"active": a.models["top"](torch.cat(z, dim=1))}


def step(pack: Pack, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """SplitNN's step over K runs (:attr:`VFLMethod.step`): embeddings up, cut gradients back."""
    a = pack.active
    pack.zero_grad(*((n, "local") for n in pack.names))
    sent, received = send_cut_outputs(pack, ids, "bottom", "embedding")
    embeddings = [pack.model(n, "bottom")(pack.x(n, ids)) if n == a else received[n] for n in pack.names]
    loss = stacked_cross_entropy(pack.model(a, "top")(torch.cat(embeddings, dim=-1)), pack.y(ids))
    backward_runs(loss)
    return_cut_gradients(pack, sent, received)
    return {"active": loss.detach()}


class SplitNN(VFLMethod):
    """PyVertical / SplitNN.

    The top model is ``Linear(C*E, E) -> ReLU -> Linear(E, classes)`` on the concatenated
    embeddings (E = embedding size, C = parties). The papers do not describe PyVertical's top
    model; a two-layer head keeps the trainable top small, as in PyVertical's examples, and is
    the same for every bottom architecture so Table II compares bottom models only.
    """

    name = "splitnn"
    step = staticmethod(step)

    def build(self) -> None:
        cfg = self.config
        for party in self.parties:
            party.models["bottom"] = self.party_model(party).embedding
        self.active.models["top"] = top_model(len(self.parties), cfg.embedding_dim,
                                              self.num_classes).to(self.active.device)
        for party in self.parties:
            params = [p for m in party.models.values() for p in m.parameters()]
            party.optimizers["local"] = self.make_optimizer(party, params)

    predict = predict_top
