"""A Multi-VFL round with its K label-owner chains stepped as one computation.

Issue 40, "Packing" (the GPU review's Multi-VFL section). Within a round of Algorithm 1 the K
label owners train independently: chain k touches only label owner k's model ``W^S_k`` and copy
k of every data owner's model ``W^C_{d,k}``, all starting from the same weights, on its own
batches (drawn from the generator seeded by (seed, round, owner)). So step i of every chain can
run at once: each party's K models are stacked (:class:`~vflkit.training.packed.StackedModel`:
``vmap(functional_call)`` on a GPU, a loop over the slices on a CPU) and one backward pass gives
every chain its own gradients, since the chains' losses are summed and share no parameter.

Every message still crosses the run's :class:`~vflkit.comm.Channel` between the same parties,
stamped with the step the unpacked round gives it; the round's ledger rows are then put in the
order the unpacked round sends them (:meth:`~vflkit.comm.Ledger.sort_since`), so the ledger is
the unpacked round's row for row. The server's aggregation and the data owners' averaging are
:class:`~vflkit.methods.multi_vfl.MultiVFL`'s own. Equivalence is claimed in float64, to a
tolerance (a vmapped kernel may reduce in another order): tests/test_training_multi_owner_packed.py.

Not done (yet): packing several runs (all 42 runs of the study share shapes), and a divergence
mid-round stops every chain at the same step index, where the unpacked round has finished the
chains before the diverging one and not started those after it (a diverged run's evaluation of
``label_owner_1``'s model may then differ).
"""

from __future__ import annotations

import math

import torch

from ..errors import ConfigError, DivergenceError
from ..methods.multi_vfl import MultiVFL, _weights
from .packed import StackedModel, _cross_entropy


def _protocol_order(row: tuple[str, str, str, int, int, int, str]) -> tuple[int, int]:
    # rows by step; within the step a chain ends on (its update to the server), the update
    # comes first, as the unpacked round sends it before the next chain's first batch
    return row[5], 0 if row[2] == "model_weights" else 1


def packed_round(method: MultiVFL, r: int, *, stacking: str = "auto") -> dict[str, float]:
    """Global round ``r`` of ``method`` (what :meth:`MultiVFL.round` does) with the K label-owner
    chains stepped together; returns the mean training loss per label owner.

    ``stacking``: how each party's K models run (:data:`vflkit.training.packed.STACKINGS`).
    """
    if r != method.rounds_done + 1:
        raise ConfigError(f"round {r} called after round {method.rounds_done}; rounds run in order 1, 2, ...")
    if "global" not in method.server.models:
        raise ConfigError("call setup() before round()")
    los, dos, channel = method.label_owners, method.data_owners, method.channel
    batches = [method._batches(k, r) for k in range(len(los))]
    n = len(batches[0])
    if any(len(b) != n for b in batches):
        raise ConfigError(f"label owners have {sorted({len(b) for b in batches})} batches in round {r}; "
                          "a packed round needs the same number for every label owner")
    first_row = len(channel.ledger)
    starts = [_weights(lo.models["top"]) for lo in los]
    copies = [[d.models[f"copy_{k + 1}"] for k in range(len(los))] for d in dos]
    top = StackedModel([lo.models["top"] for lo in los], stacking=stacking)
    bottoms = [StackedModel(c, stacking=stacking) for c in copies]
    # one optimizer per party over its K stacked models: SGD and Adam update elementwise, so
    # slice k follows chain k's own optimizer
    top_opt = method._local_optimizer(list(top.params.values()))
    bottom_opts = [method._local_optimizer(list(b.params.values())) for b in bottoms]
    totals = [0.0] * len(los)
    for i in range(n):
        ids = [batches[k][i] for k in range(len(los))]
        acts = []
        for d, bottom, opt in zip(dos, bottoms, bottom_opts):
            opt.zero_grad(set_to_none=True)
            acts.append(bottom(torch.stack([d.features("train", ids=b) for b in ids])))
        for k, lo in enumerate(los):
            channel.at(epoch=r, step=k * n + i, phase="train")
            for d, a in zip(dos, acts):
                d.send(lo, "embedding", a[k])
        parts = [torch.stack([lo.recv(d, "embedding") for lo in los]).requires_grad_(True) for d in dos]
        top_opt.zero_grad(set_to_none=True)
        # A_k = Concatenate A_{d,k} along the height: dim 3 of the stacked [K, B, C, h, W]
        losses = _cross_entropy(top(torch.cat(parts, dim=3)),
                                torch.stack([lo.labels("train", ids=b) for lo, b in zip(los, ids)]))
        losses.sum().backward()  # the chains share no parameter: each gets its own loss's gradient
        top_opt.step()
        for k, lo in enumerate(los):
            channel.at(epoch=r, step=k * n + i, phase="train")
            for d, a in zip(dos, parts):
                lo.send(d, "gradient", a.grad[k])
        for d, a, opt in zip(dos, acts, bottom_opts):
            a.backward(torch.stack([d.recv(lo, "gradient") for lo in los]))
            opt.step()
        values = losses.tolist()
        for k, (lo, value) in enumerate(zip(los, values)):
            if not math.isfinite(value):
                raise DivergenceError(f"{lo.name}'s loss is {value} in round {r}: training diverged; "
                                      "lower local_lr or the server lr")
            totals[k] += value
    top.write_back([lo.models["top"] for lo in los])
    for bottom, c in zip(bottoms, copies):
        bottom.write_back(c)
    for k, lo in enumerate(los):
        # Line 9: t_k = W_k^{S,r+1} - W^{S,r}, sent to the server when chain k ends
        now = _weights(lo.models["top"])
        channel.at(epoch=r, step=(k + 1) * n, phase="train")
        lo.send(method.server, "model_weights", {name: now[name] - starts[k][name] for name in now})
    channel.ledger.sort_since(first_row, _protocol_order)
    method._aggregate(r, len(los) * n)
    for d in dos:
        method._average_copies(d)
    method.rounds_done = r
    return {lo.name: total / n for lo, total in zip(los, totals)}


__all__ = ["packed_round"]
