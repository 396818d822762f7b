"""The trainer of the multi-label-owner family: data owners, several label owners and a server.

Multi-VFL (:class:`~vflkit.methods.multi_vfl.MultiVFL`) runs round by round: every label owner
trains with the data owners by split learning, the server aggregates the label owners' updates
with its optimizer, the data owners average their copies. :func:`train` runs one
:class:`~vflkit.methods.multi_vfl.MultiVFLConfig` for its rounds and returns the per-round
loss and accuracy and the ledger's traffic; the record store wraps them in the common envelope.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from tqdm.auto import tqdm

from .. import records
from ..comm import Channel
from ..config import resolve_device
from ..errors import DivergenceError
from ..methods.multi_vfl import MultiVFL, MultiVFLConfig
from . import dataset


def _data(config: MultiVFLConfig) -> Any:
    return dataset(config.dataset).subset(n_test=config.n_test, seed=config.seed)


def train(config: MultiVFLConfig, *, device: torch.device, checkpoint: Path | None = None,
          progress: bool = True, on_divergence: str = "raise",
          deadline: float | None = None) -> dict[str, Any]:
    """Train ``config`` for its rounds and return its results: per-round training loss, the
    server's step sizes (:meth:`~vflkit.methods.multi_vfl.MultiVFL.server_stats`) and test
    accuracy (every ``eval_every`` rounds and after the last), the final and best accuracy, and
    bytes per round and per message kind.

    ``checkpoint`` is not used (a round of the quick profile takes seconds; the paper profile's
    runs are resumed at run granularity). ``on_divergence``: Multi-VFL's label owners raise
    :class:`~vflkit.errors.DivergenceError` themselves; with ``"record"`` the run stops at that
    round, the models are evaluated as they are (NaN where they cannot be) and the results say
    where it diverged (``diverged``).
    """
    data = _data(config)
    channel = Channel()
    method = MultiVFL(config, data, device=device, channel=channel)
    start = time.perf_counter()
    method.setup()
    history: list[dict[str, Any]] = []
    bar = tqdm(range(1, config.rounds + 1), desc=f"{config.dataset} {config.scenario} {config.server_optimizer}",
               disable=not progress, leave=False)
    diverged: dict[str, Any] | None = None
    for r in bar:
        try:
            losses = method.round(r)
        except DivergenceError as err:
            if on_divergence == "raise":
                raise
            diverged = {"round": r, "message": str(err)}
            losses = {}
        row: dict[str, Any] = {"round": r,
                               "train_loss": sum(losses.values()) / len(losses) if losses else float("nan"),
                               **method.server_stats(r)}  # the server's step sizes of this round
        if diverged or r % config.eval_every == 0 or r == config.rounds:
            try:
                row.update(method.evaluate())
            except (ValueError, DivergenceError):
                row.update({"test_accuracy": float("nan"), "test_loss": float("nan")})
            bar.set_postfix(acc=round(row["test_accuracy"], 3))
        row["elapsed_s"] = time.perf_counter() - start
        history.append(row)
        if diverged:
            break
    wall = time.perf_counter() - start
    ledger = channel.ledger
    per_round_kind = (ledger.frame().groupby(["epoch", "kind"])["nbytes"].sum().rename("bytes").reset_index()
                      .rename(columns={"epoch": "round"}))
    evaluated = [h for h in history if "test_accuracy" in h]
    best = max(evaluated, key=lambda h: h["test_accuracy"])
    return {
        "history": history,
        "final": {k: evaluated[-1][k] for k in ("test_accuracy", "test_loss")},
        "best": {"test_accuracy": best["test_accuracy"], "round": best["round"]},
        "wall_time_s": wall,
        "comm": {"total": ledger.totals(),
                 "per_round": ledger.per_epoch().reset_index().rename(columns={"epoch": "round"})
                 .to_dict(orient="records"),
                 "per_round_kind": per_round_kind.to_dict(orient="records"),
                 "per_kind": ledger.per_kind().reset_index().to_dict(orient="records"),
                 "per_party": ledger.per_party().reset_index().to_dict(orient="records"),
                 "eval_total": ledger.totals(phase="eval"), "setup_total": ledger.totals(phase="setup")},
        "diverged": diverged,
    }


def run(config: MultiVFLConfig, **kwargs: Any) -> dict[str, Any]:
    """The record of ``config``: :func:`vflkit.records.run_one` with this family's :func:`train`."""
    return records.run_one(config, train=train, **kwargs)


def run_many(configs: Sequence[MultiVFLConfig], **kwargs: Any) -> list[dict[str, Any]]:
    """The records of ``configs``: :func:`vflkit.records.run_many` with this family's :func:`train`."""
    return records.run_many(configs, train=train, desc="Multi-VFL runs", **kwargs)


def update_scale(config: MultiVFLConfig, *, device: str | torch.device = "auto") -> dict[str, Any]:
    """The size of round 1's aggregated update t under ``config``'s local training, beside the
    server optimizers' stability constant tau.

    Runs round 1 with FedAvg (``W <- W + t``), so t is the change of the global label-owner
    model. Returns the median and 99th percentile of |t| over its parameters and the median of
    sqrt(v) after that round in the paper's ServerAggregation (``m = (1 - beta1) t``,
    ``v = (1 - beta2) m^2``). Where sqrt(v) is far below tau, FedAdam and FedYogi divide by
    tau, not by sqrt(v): they act as FedAvg with server momentum and a step of ``lr / tau``.
    """
    cfg = config.replace(server_optimizer="fedavg", rounds=1)
    method = MultiVFL(cfg, _data(cfg), device=resolve_device(device))
    method.setup()
    model = method.server.models["global"]
    before = torch.cat([w.detach().flatten() for w in model.state_dict().values()]).clone()
    method.round(1)
    t = (torch.cat([w.detach().flatten() for w in model.state_dict().values()]) - before).abs()
    sqrt_v = math.sqrt(1 - cfg.beta2) * (1 - cfg.beta1) * t
    steps = cfg.local_steps or math.ceil(cfg.samples_per_owner / cfg.batch_size) * cfg.local_epochs
    return {"local steps per owner": steps, "local lr": cfg.local_lr,
            "median |t|": float(t.median()), "99th percentile |t|": float(t.quantile(0.99)),
            "median sqrt(v)": float(sqrt_v.median()), "tau": cfg.tau}


__all__ = ["run", "run_many", "train", "update_scale"]
