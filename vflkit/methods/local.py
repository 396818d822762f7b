"""Local: the active party trains its model on its own features only (no federation).

The lower bound VFedMH reports ("Local" in Tables II-III); APC-VFL's one-shot "Local" is
:class:`~vflkit.methods.oneshot.LocalFeatures`.
No message crosses the channel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .base import VFLMethod, backward_runs, stacked_cross_entropy

if TYPE_CHECKING:
    from .pack import Pack


def step(pack: Pack, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Local's step over K runs (:attr:`VFLMethod.step`)."""
    a = pack.active
    pack.zero_grad((a, "local"))
    loss = stacked_cross_entropy(pack.model(a, "model")(pack.x(a, ids)), pack.y(ids))
    backward_runs(loss)
    pack.optimizers[(a, "local")].step()
    return {"active": loss.detach()}


class Local(VFLMethod):
    """The active party's model h then p, trained on its own strip with its own labels."""

    name = "local"
    step = staticmethod(step)

    def build(self) -> None:
        a = self.active
        a.models["model"] = self.party_model(a)
        a.optimizers["local"] = self.make_optimizer(a, a.models["model"].parameters())

    @torch.no_grad()
    def predict(self, ids: torch.Tensor, split: str = "test") -> dict[str, torch.Tensor]:
        return {"active": self.active.models["model"](self.active.features(split, ids=ids))}
