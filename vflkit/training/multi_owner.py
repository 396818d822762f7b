"""The trainer of the multi-label-owner family: data owners, several label owners and a server.

Multi-VFL (:class:`~vflkit.methods.multi_vfl.MultiVFL`) runs round by round: every label owner
trains with the data owners by split learning, the server aggregates the label owners' updates
with its optimizer, the data owners average their copies. :func:`train` runs one
:class:`~vflkit.methods.multi_vfl.MultiVFLConfig` for its rounds and returns the per-round
loss and accuracy and the ledger's traffic; the record store wraps them in the common envelope.

Rounds are checkpointed beside the record (:func:`save_checkpoint`, through the shared
:mod:`.checkpoint`; at most every :data:`CHECKPOINT_EVERY_S` seconds): an interrupted run resumes
after its last checkpointed round and ends with the record of an uninterrupted run.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from tqdm.auto import tqdm

from .. import records
from ..comm import ROUNDS_COUNTED_AS, Channel
from ..config import check_dataset, resolve_device
from ..errors import BudgetExhausted, DivergenceError
from ..methods.multi_vfl import DATASETS, MultiVFL, MultiVFLConfig
from . import checkpoint as checkpoint_io
from . import dataset


def _data(config: MultiVFLConfig) -> Any:
    """The run's images: MNIST, FashionMNIST or images of your own (registered with
    :func:`vflkit.data.register_dataset`), its test split cut to ``n_test``."""
    # checked again here: the name may have been registered anew (as a table) since the config was made
    check_dataset(config.dataset, method="Multi-VFL", kind="image", builtin=DATASETS)
    return dataset(config.dataset).subset(n_test=config.n_test, seed=config.seed)


#: Seconds of training between two checkpoints: a round ends with one when at least this much
#: time has passed since the last (or when the deadline stops the run). A checkpoint holds five
#: label-owner models, the server's model and its two moments: tens of MB whatever the
#: profile, a fraction of a second to write and fsync. A paper-profile round takes minutes, so
#: each one is checkpointed (a negligible share of it); a quick-profile round takes seconds,
#: where one checkpoint per round would add a sizeable share. Every 10 s bounds the cost near
#: 5 % and loses at most 10 s and a round to a kill.
CHECKPOINT_EVERY_S: float = 10.0


def train(config: MultiVFLConfig, *, device: torch.device, checkpoint: Path | None = None,
          progress: bool = True, on_divergence: str = "raise",
          deadline: float | None = None) -> dict[str, Any]:
    """Train ``config`` for its rounds and return its results: per-round training loss, the
    server's step sizes (:meth:`~vflkit.methods.multi_vfl.MultiVFL.server_stats`) and test
    accuracy (every ``eval_every`` rounds and after the last), the final and best accuracy, and
    bytes per round and per message kind.

    With ``checkpoint`` set, the state after a round (every round but the last, at most every
    :data:`CHECKPOINT_EVERY_S` seconds) is saved there: every party's models, the server's
    optimizer moments, the ledger, the history, the elapsed time and the random states. A run
    finding its own checkpoint continues after that round and ends with the record of an
    uninterrupted run. With ``deadline`` (a ``time.time()`` value) too, a run whose next round
    would end after it checkpoints and raises :class:`~vflkit.errors.BudgetExhausted`.
    ``on_divergence``: Multi-VFL's label owners raise :class:`~vflkit.errors.DivergenceError`
    themselves; with ``"record"`` the run stops at that round, the models are evaluated as they
    are (NaN where they cannot be) and the results say where it diverged (``diverged``).
    """
    data = _data(config)
    channel = Channel()
    method = MultiVFL(config, data, device=device, channel=channel)
    start = time.perf_counter()
    method.setup()
    history: list[dict[str, Any]] = []
    first = 1
    ledger_log = checkpoint_io.LedgerLog(channel)
    if checkpoint is not None:
        state = checkpoint_io.load(checkpoint, config, device=device, fresh="round 1")
        if state is not None:
            restore_checkpoint(state, method=method, ledger_log=ledger_log, device=device)
            history, first = state["history"], state["round"] + 1
            start = time.perf_counter() - state["elapsed_s"]
    bar = tqdm(range(first, config.rounds + 1), total=config.rounds, initial=first - 1,
               desc=f"{config.dataset} {config.scenario} {config.server_optimizer}",
               disable=not progress, leave=False)
    diverged: dict[str, Any] | None = None
    resumed_at = last_saved = time.perf_counter()
    for r in bar:
        try:
            losses = method.round(r)
        except DivergenceError as err:
            if on_divergence == "raise":
                raise
            diverged = {"round": r, "message": str(err)}
            losses = {}
        row = round_row(method, r, losses, evaluate=bool(diverged))
        if "test_accuracy" in row:
            bar.set_postfix(acc=round(row["test_accuracy"], 3))
        row["elapsed_s"] = time.perf_counter() - start
        history.append(row)
        if diverged:
            break
        if checkpoint is None or r == config.rounds:
            continue
        now = time.perf_counter()
        round_s = (now - resumed_at) / (r - first + 1)
        stop = deadline is not None and time.time() + round_s > deadline
        if stop or now - last_saved >= CHECKPOINT_EVERY_S:
            save_checkpoint(checkpoint, config=config, r=r, elapsed_s=now - start, history=history,
                            method=method, ledger_log=ledger_log, device=device)
            last_saved = time.perf_counter()
        if stop:
            bar.close()
            raise BudgetExhausted(f"Multi-VFL {config.dataset} {config.scenario} {config.server_optimizer} "
                                  f"({config.key}) stopped after round {r} of {config.rounds} at the budget; "
                                  "rerun to resume it")
    bar.close()
    return results(history, channel, time.perf_counter() - start, diverged)


def results(history: list[dict[str, Any]], channel: Channel, wall_time_s: float,
            diverged: dict[str, Any] | None) -> dict[str, Any]:
    """A run's results as :func:`train` returns them, from its per-round ``history`` and its
    channel's ledger (the packed trainer's too, :mod:`.multi_owner_packed`)."""
    ledger = channel.ledger
    per_round_kind = (ledger.frame().groupby(["epoch", "kind"])["nbytes"].sum().rename("bytes").reset_index()
                      .rename(columns={"epoch": "round"}))
    evaluated = [h for h in history if "test_accuracy" in h]
    best = max(evaluated, key=lambda h: h["test_accuracy"])
    return {
        "history": history,
        "final": {k: evaluated[-1][k] for k in ("test_accuracy", "test_loss")},
        "best": {"test_accuracy": best["test_accuracy"], "round": best["round"]},
        "wall_time_s": wall_time_s,
        "comm": {"rounds_counted_as": ROUNDS_COUNTED_AS, "total": ledger.totals(),
                 "per_round": ledger.per_epoch().reset_index().rename(columns={"epoch": "round"})
                 .to_dict(orient="records"),
                 "per_round_kind": per_round_kind.to_dict(orient="records"),
                 "per_kind": ledger.per_kind().reset_index().to_dict(orient="records"),
                 "per_party": ledger.per_party().reset_index().to_dict(orient="records"),
                 "eval_total": ledger.totals(phase="eval"), "setup_total": ledger.totals(phase="setup")},
        "diverged": diverged,
    }


def round_row(method: MultiVFL, r: int, losses: dict[str, float], *, evaluate: bool = False,
              evaluation: dict[str, float] | None = None) -> dict[str, Any]:
    """Round ``r``'s history row: its mean training loss over the label owners (NaN without
    losses), the server's step sizes, and the test accuracy and loss where the run evaluates
    (every ``eval_every`` rounds, after the last, or ``evaluate``). ``evaluation``: the run's
    evaluation, made already (by a pack of runs, :meth:`~.multi_owner_packed.RoundPack.evaluate`)."""
    config = method.config
    row: dict[str, Any] = {"round": r, "train_loss": sum(losses.values()) / len(losses) if losses else float("nan"),
                           **method.server_stats(r)}  # the server's step sizes of this round
    if evaluation is not None:
        row.update(evaluation)
    elif evaluate or r % config.eval_every == 0 or r == config.rounds:
        try:
            row.update(method.evaluate())
        except (ValueError, DivergenceError):
            row.update({"test_accuracy": float("nan"), "test_loss": float("nan")})
    return row


def save_checkpoint(path: Path, *, config: MultiVFLConfig, r: int, elapsed_s: float,
                    history: list[dict[str, Any]], method: MultiVFL, ledger_log: checkpoint_io.LedgerLog,
                    device: torch.device) -> None:
    """Everything a run needs to continue after round ``r`` as if never stopped, written atomically.

    The local optimizers need no saving: Algorithm 1 starts each round's from the server's
    weights, and :class:`MultiVFL` makes them afresh every round. The batch order needs none
    either: it is drawn from a generator seeded by (seed, round, owner).
    """
    if method.channel.pending():  # a message in flight would be lost across a resume
        raise RuntimeError(f"round {r} left {method.channel.pending()} messages unread; "
                           "cannot checkpoint mid-protocol")
    checkpoint_io.save(path, config, {
        "round": r, "elapsed_s": elapsed_s, "history": history,
        **checkpoint_io.parties_state(method.parties),
        "generators": {k: g.get_state() for k, g in checkpoint_io.generators(method).items()},
        "ledger": ledger_log.pack(),
    }, device=device)


def restore_checkpoint(state: dict[str, Any], *, method: MultiVFL, ledger_log: checkpoint_io.LedgerLog,
                       device: torch.device) -> None:
    """Put a freshly set-up ``method`` where the checkpoint left it (its setup messages, logged
    again, give way to the saved ledger, which holds them once)."""
    checkpoint_io.restore_parties(method.parties, state)  # models, the server's moments
    for k, g in checkpoint_io.generators(method).items():
        g.set_state(state["generators"][k])
    ledger_log.restore(state["ledger"])
    method.rounds_done = state["round"]
    checkpoint_io.restore_rng(state, device)


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


__all__ = ["results", "round_row", "run", "run_many", "train", "update_scale"]
