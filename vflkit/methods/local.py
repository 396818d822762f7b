"""Local: the active party trains its model on its own features only (no federation).

The lower bound VFedMH reports ("Local" in Tables II-III); APC-VFL's one-shot "Local" is
:class:`~vflkit.methods.oneshot.LocalFeatures`.
No message crosses the channel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import VFLMethod


class Local(VFLMethod):
    """The active party's model h then p, trained on its own strip with its own labels."""

    name = "local"

    def build(self) -> None:
        a = self.active
        a.models["model"] = self.party_model(a)
        a.optimizers["local"] = self.make_optimizer(a, a.models["model"].parameters())

    def train_step(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        a = self.active
        opt = a.optimizers["local"]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(a.models["model"](a.features("train", ids=ids)), a.labels("train", ids=ids))
        loss.backward()
        opt.step()
        return {"active": loss.detach()}

    @torch.no_grad()
    def predict(self, ids: torch.Tensor, split: str = "test") -> dict[str, torch.Tensor]:
        return {"active": self.active.models["model"](self.active.features(split, ids=ids))}

    def trained_models(self) -> dict[str, str]:
        return {"active": self.config.party_value("models", self.party_index(self.active))}
