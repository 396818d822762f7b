"""The trainer of the multi-label-owner family: data owners, several label owners and a server.

:func:`train` runs Multi-VFL round by round for one run or a pack of them trained as one
computation (:class:`~vflkit.methods.multi_vfl.RoundPack`; a run alone is a pack of one). Each
run is checkpointed beside its record as a run alone, whether it trains alone or packed, so
either resumes the other's.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from tqdm.auto import tqdm

from .. import records
from ..comm import ROUNDS_COUNTED_AS, Channel
from ..config import check_dataset, resolve_device
from ..errors import BudgetExhausted, ConfigError, DivergenceError
from ..methods.multi_vfl import DATASETS, EVAL_IMAGES, MultiVFL, MultiVFLConfig, RoundPack
from . import FAMILIES
from . import checkpoint as checkpoint_io
from . import dataset


def _data(config: MultiVFLConfig) -> Any:
    """The run's images: MNIST, FashionMNIST or images of your own (registered with
    :func:`vflkit.data.register_dataset`), its test split cut to ``n_test``."""
    # checked again here: the name may have been registered anew (as a table) since the config was made
    check_dataset(config.dataset, method="Multi-VFL", kind="image", builtin=DATASETS)
    return dataset(config.dataset).subset(n_test=config.n_test, seed=config.seed)


#: Seconds of training between two checkpoints of a run (a pack of K runs: K times as many,
#: since it writes K checkpoints); a round ends with one when at least this much time has
#: passed since the last, or when the deadline stops the run.
CHECKPOINT_EVERY_S: float = 10.0

#: What the runs of one pack must share (the step's shapes, the local optimizer, the rounds
#: and when they evaluate); they may differ in anything else (dataset, scenario, server
#: optimizer, seed).
SHARED = ("n_data_owners", "n_label_owners", "batch_size", "samples_per_owner", "local_epochs", "local_steps",
          "local_optimizer", "local_lr", "rounds", "eval_every", "n_test", "variant")

#: The most runs in one Multi-VFL pack: the paper profile's 42.
MAX_RUNS = 42


def pack_key(config: MultiVFLConfig) -> tuple[Any, ...]:
    """What Multi-VFL runs must share to train as one pack (:data:`SHARED`)."""
    return ("multi_owner_packed", *(getattr(config, f) for f in SHARED))


def train(configs: MultiVFLConfig | Sequence[MultiVFLConfig], *, device: torch.device | str = "cpu",
          checkpoint: Path | Sequence[Path] | None = None, progress: bool = True, on_divergence: str = "raise",
          deadline: float | None = None, ephemeral: bool = False, checkpoint_every_s: float | None = None,
          stacking: str = "auto") -> Any:
    """Train one run (a config: its results) or a pack of runs of one :func:`pack_key` (a
    sequence: each run's results, in order, with ``execution`` naming the pack).

    A run's results: per round its training loss, the server's step sizes
    (:meth:`~vflkit.methods.multi_vfl.MultiVFL.server_stats`) and test accuracy and loss (every
    ``eval_every`` rounds and after the last); the final and best accuracy; bytes per round,
    kind and party. Timings are the pack's.

    ``checkpoint`` (one path per run): after a round, at most every ``checkpoint_every_s``
    seconds (default :data:`CHECKPOINT_EVERY_S`), each run is saved there
    (:func:`save_checkpoint`); runs that all hold a checkpoint of one round continue after it.
    ``deadline`` (a ``time.time()`` value): a run whose next round would end after it stops
    with :class:`~vflkit.errors.BudgetExhausted`, checkpointed unless ``ephemeral`` (the
    machine's disk ends with the deadline: no checkpoint is written at all).
    ``on_divergence``: a non-finite loss raises :class:`~vflkit.errors.DivergenceError`; a run
    alone with ``"record"`` stops at that round instead, its models evaluated as they are (NaN
    where they cannot be) and its results say where (``diverged``). A pack always raises
    (:func:`run_pack` then trains its runs alone).
    """
    alone = isinstance(configs, MultiVFLConfig)
    cfgs = [configs] if alone else list(configs)
    paths = None if checkpoint is None or ephemeral else [Path(checkpoint)] if alone else list(checkpoint)
    if not cfgs or len({pack_key(c) for c in cfgs}) != 1 or len({c.key for c in cfgs}) != len(cfgs):
        raise ConfigError("a Multi-VFL pack holds distinct runs that share " + ", ".join(SHARED))
    if paths is not None and len(paths) != len(cfgs):
        raise ConfigError(f"a pack of {len(cfgs)} runs needs as many checkpoint paths; got {len(paths)}")
    device = resolve_device(device)
    every = (CHECKPOINT_EVERY_S if checkpoint_every_s is None else checkpoint_every_s) * len(cfgs)
    start = time.perf_counter()
    methods = []
    for cfg in cfgs:
        m = MultiVFL(cfg, _data(cfg), device=device, channel=Channel())
        m.setup()
        methods.append(m)
    rounds, eval_every = cfgs[0].rounds, cfgs[0].eval_every
    histories: list[list[dict[str, Any]]] = [[] for _ in cfgs]
    logs = [checkpoint_io.LedgerLog(m.channel) for m in methods]
    first = 1
    states = None if paths is None else checkpoint_io.load_all(paths, cfgs, device=device, unit="round")
    if states is not None:  # before the pack binds the runs' models to its stack
        for j, (m, state, log) in enumerate(zip(methods, states, logs)):
            restore_checkpoint(state, method=m, ledger_log=log, device=device)
            histories[j] = state["history"]
        first, start = states[0]["round"] + 1, time.perf_counter() - max(s["elapsed_s"] for s in states)
    pack = RoundPack(methods, stacking=stacking)
    desc = (f"{cfgs[0].dataset} {cfgs[0].scenario} {cfgs[0].server_optimizer}" if alone
            else f"Multi-VFL x{len(cfgs)}")
    bar = tqdm(range(first, rounds + 1), total=rounds, initial=first - 1, desc=desc, disable=not progress, leave=False)
    diverged: dict[str, Any] | None = None
    resumed_at = last_saved = time.perf_counter()
    for r in bar:
        try:
            losses = pack.round(r)
        except DivergenceError as err:
            if on_divergence == "raise" or len(cfgs) > 1:
                bar.close()
                raise
            diverged, losses = {"round": r, "message": str(err)}, [{}]
        due = diverged is not None or r % eval_every == 0 or r == rounds
        evaluations = _evaluate(pack) if due else [{}] * len(cfgs)
        for m, loss, evaluation, history in zip(methods, losses, evaluations, histories):
            history.append({"round": r, "train_loss": sum(loss.values()) / len(loss) if loss else float("nan"),
                            **m.server_stats(r), **evaluation, "elapsed_s": time.perf_counter() - start})
        if "test_accuracy" in histories[0][-1]:
            bar.set_postfix(acc=round(histories[0][-1]["test_accuracy"], 3))
        if diverged is not None or r == rounds:
            break
        now = time.perf_counter()
        stop = deadline is not None and time.time() + (now - resumed_at) / (r - first + 1) > deadline
        if paths is not None and (stop or now - last_saved >= every):
            for m, cfg, path, history, log in zip(methods, cfgs, paths, histories, logs):
                save_checkpoint(path, config=cfg, r=r, elapsed_s=now - start, history=history, method=m,
                                ledger_log=log, device=device)
            last_saved = time.perf_counter()
        if stop:
            bar.close()
            what = f"Multi-VFL {desc} ({cfgs[0].key})" if alone else f"a pack of {len(cfgs)} Multi-VFL runs"
            then = "rerun to resume it" if paths is not None else "no checkpoint kept: a rerun starts over"
            raise BudgetExhausted(f"{what} stopped after round {r} of {rounds} at the deadline; {then}")
    bar.close()
    wall = time.perf_counter() - start
    out = [results(h, m.channel, wall, diverged) for m, h in zip(methods, histories)]
    if alone:
        return out[0]
    return [{**o, "execution": {"packed": len(cfgs), "pack": [c.key for c in cfgs]}} for o in out]


def _evaluate(pack: RoundPack) -> list[dict[str, float]]:
    try:
        return pack.evaluate()
    except (ValueError, DivergenceError):  # a diverged run's models
        return [{"test_accuracy": float("nan"), "test_loss": float("nan")}] * pack.n_runs


def results(history: list[dict[str, Any]], channel: Channel, wall_time_s: float,
            diverged: dict[str, Any] | None) -> dict[str, Any]:
    """A run's results as :func:`train` returns them, from its per-round ``history`` and its
    channel's ledger."""
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


def save_checkpoint(path: Path, *, config: MultiVFLConfig, r: int, elapsed_s: float,
                    history: list[dict[str, Any]], method: MultiVFL, ledger_log: checkpoint_io.LedgerLog,
                    device: torch.device) -> None:
    """Everything a run needs to continue after round ``r`` as if never stopped, written atomically:
    not the local optimizers, made afresh every round from the server's weights (Algorithm 1),
    nor the batch order, drawn from a generator seeded by (seed, round, owner)."""
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


class _PackDiverged(Exception):
    """A pack's divergence, after which :func:`run_pack` trains its runs alone."""


def run_pack(configs: Sequence[MultiVFLConfig], *, profile: str, device: torch.device | str = "auto",
             results: str | Path | None = None, force: bool = False, progress: bool = False,
             on_divergence: str = "raise", deadline: float | None = None,
             ephemeral: bool = False) -> list[dict[str, Any]]:
    """The records of ``configs``, in their order: recorded ones loaded, the others trained as
    one pack (:func:`train`) and written through the record store
    (:func:`vflkit.records.run_together`). Where the pack diverges, each of its runs is trained
    alone from round 1 (so a diverged record is a run alone's) and recorded as it finishes, so
    a deadline that stops a later one loses none finished."""

    def train_all(todo: list[MultiVFLConfig], dev: torch.device, checkpoints: list[Path]) -> list[dict[str, Any]]:
        try:
            return train(todo, device=dev, progress=progress, checkpoint=checkpoints, on_divergence=on_divergence,
                         deadline=deadline, ephemeral=ephemeral)
        except DivergenceError as err:
            if len(todo) == 1:
                raise
            for ckpt in checkpoints:  # the pack's: alone, every run starts over
                ckpt.unlink(missing_ok=True)
            raise _PackDiverged() from err

    try:
        return records.run_together(configs, train_all=train_all, profile=profile, device=device, results=results,
                                    force=force, on_divergence=on_divergence)
    except _PackDiverged:
        return [records.run_one(c, train=train, profile=profile, device=device, results=results, force=force,
                                progress=progress, on_divergence=on_divergence, deadline=deadline) for c in configs]


def compute_pack(payloads: Sequence[Mapping[str, Any]], *, device: torch.device | str = "auto",
                 deadline: float | None = None, ephemeral: bool = False) -> list[dict[str, Any]]:
    """The records of Multi-VFL study payloads (``{"family": "multi_owner", "config",
    "profile", "results"}``) trained as one pack by :func:`run_pack`: a pack's task function."""
    payloads = list(payloads)
    places = {(p["profile"], str(p["results"])) for p in payloads}
    if len(places) != 1 or any(p.get("family") != "multi_owner" for p in payloads):
        raise ConfigError("a Multi-VFL pack writes Multi-VFL records under one profile and results folder")
    profile, results_dir = next(iter(places))
    configs = [MultiVFLConfig.from_dict(dict(p["config"])) for p in payloads]
    return run_pack(configs, profile=profile, device=device, results=Path(results_dir),
                    on_divergence=FAMILIES["multi_owner"].on_divergence, deadline=deadline, ephemeral=ephemeral)


def round_seconds(config: MultiVFLConfig, *, rounds: int = 1) -> dict[str, float]:
    """Seconds per round of ``config`` on the CPU (training and one evaluation), over ``rounds``
    rounds after setup: ``cpu_s`` (one thread: a core of its own) and ``wall_s`` (overstated on a
    shared machine)."""
    method = MultiVFL(config.replace(rounds=max(rounds, 1)), _data(config), device="cpu")
    method.setup()
    wall, cpu = time.perf_counter(), time.process_time()
    for r in range(1, rounds + 1):
        method.round(r)
        method.evaluate()
    return {"cpu_s": (time.process_time() - cpu) / rounds, "wall_s": (time.perf_counter() - wall) / rounds}


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


__all__ = ["CHECKPOINT_EVERY_S", "EVAL_IMAGES", "MAX_RUNS", "SHARED", "RoundPack", "compute_pack", "pack_key",
           "results", "round_seconds", "run", "run_many", "run_pack", "train", "update_scale"]
