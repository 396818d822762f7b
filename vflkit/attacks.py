"""What a passive party learns from the messages it receives: label inference in VFedMH.

VFedMH's round 4 (as we implement Algorithm 1) sends each passive party ``dL_k/dR_k``, the
gradient of its cross-entropy loss with respect to its own prediction, so that it can
back-propagate its loss. For a mean cross-entropy over a batch of B samples that gradient is
``(softmax(R_k) - onehot(y)) / B``: in each row the true class is the one negative entry. A
passive party therefore recovers every label of every batch by an arg-min, with no model of
its own and no auxiliary data. The paper sends "the loss" and names label inference as a
threat (Sec. III); a scalar loss cannot be back-propagated by the party, which is why the
gradient travels. We reproduce the paper's protocol as written and measure this leak.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .comm import Channel
from .config import resolve_device
from .methods import get_method
from .training.split import build_parties


def infer_labels(grad_prediction: torch.Tensor) -> torch.Tensor:
    """Labels from ``dL/dR`` of a softmax cross-entropy: the arg-min of each row."""
    return grad_prediction.argmin(dim=1)


class TappedChannel(Channel):
    """A channel that also keeps what one party receives, as that party sees it."""

    def __init__(self, receiver: str, kind: str) -> None:
        super().__init__()
        self.receiver, self.kind = receiver, kind
        self.seen: list[Any] = []

    def recv(self, receiver: str, sender: str, kind: str) -> Any:
        payload = super().recv(receiver, sender, kind)
        if receiver == self.receiver and kind == self.kind:
            self.seen.append(payload)
        return payload


def label_leakage(config: Any, *, device: str = "cpu", passive: str = "passive_1",
                  max_steps: int | None = None) -> dict[str, Any]:
    """Train ``config`` (a VFedMH-family run) and let passive party ``passive`` infer the label
    of every training sample in each batch from the ``loss`` messages it receives.

    Returns the fraction of labels recovered per epoch and overall, and the number of labels
    the passive party saw. The passive party knows which sample ids each batch holds (the
    shuffle is a public protocol parameter), so it can attach each inferred label to an id;
    the true labels are used only to score the inference.
    """
    dev = resolve_device(device)
    torch.manual_seed(config.seed)
    channel = TappedChannel(passive, "loss")
    parties, n_classes = build_parties(config, device=dev, channel=channel)
    method = get_method(config.method)(config, parties, num_classes=n_classes)
    method.setup()
    active = method.active
    gen = torch.Generator().manual_seed(config.seed)
    train_ids = active.ids["train"]
    n_steps = math.ceil(len(train_ids) / config.batch_size)
    if max_steps is not None:
        n_steps = min(n_steps, max_steps)
    per_epoch, right, total = [], 0, 0
    for epoch in range(1, config.epochs + 1):
        order = train_ids[torch.randperm(len(train_ids), generator=gen)]
        e_right = e_total = 0
        method.train()
        for step in range(n_steps):
            channel.at(epoch=epoch, step=step, phase="train")
            ids = order[step * config.batch_size:(step + 1) * config.batch_size]
            channel.seen.clear()
            method.train_step(ids)
            if not channel.seen:
                raise ValueError(f"{passive} received no 'loss' message: {config.method} does not send one")
            guess = infer_labels(channel.seen[-1]["grad_prediction"]).cpu()
            truth = active.labels("train", ids=ids).cpu()
            e_right += int((guess == truth).sum())
            e_total += len(ids)
        per_epoch.append({"epoch": epoch, "recovered": e_right / e_total, "labels": e_total})
        right, total = right + e_right, total + e_total
    return {"method": config.method, "passive": passive, "recovered": right / total, "labels": total,
            "per_epoch": per_epoch}
