"""The trainer of the batch-by-batch family: split learning and aggregation (VFedMH's family).

Local, SplitNN/PyVertical, C-VFL, Agg_VFL and VFedMH (:mod:`vflkit.methods`) all train alike
(docs/engine.md, "The split family's loop"). :func:`train` is the one loop (resume, checkpoints,
deadline, divergence, rate schedule, evaluation) for K >= 1 runs: a run alone, or a :class:`Pack`
of runs that differ in seed and dataset alone, each getting the record it gets alone (equal in
float64; ``execution`` names the pack). :func:`pack_key`, :func:`group_packs` and
:func:`compute_pack` are a scheduler's and a launcher's interface to packs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Hashable, Mapping, Sequence

import torch
from tqdm.auto import tqdm

from .. import records
from ..data import ALIASES, IMAGE_DATASETS, IMAGE_METADATA, ImageData, is_registered, load_dataset
from ..comm import ROUNDS_COUNTED_AS, Channel, Ledger, Party, checked_batches
from ..errors import BudgetExhausted, ConfigError, DivergenceError
from ..config import resolve_device
from ..methods import METHODS, get_method
from ..methods.base import RunConfig
from ..methods.multi_vfl import MultiVFLConfig
from ..partition import first_parts, grid, strips
from ..tabular import build_tabular_parties
from ..records import checkpoint_path
from ..secure import CheckReader, DeferredChecks
from . import FAMILIES
from . import checkpoint as checkpoint_io
from .graphs import GRAPH_BACKENDS, capture, graph_blocker
from . import dataset
from ..methods.pack import Pack, _packable_names
from ..stacked import StackedModel  # noqa: F401 (the pack's models, named from here too)
from .multi_owner import MAX_RUNS
from .multi_owner import compute_pack as multi_owner_pack
from .multi_owner import pack_key as multi_owner_key

if TYPE_CHECKING:
    import pandas as pd


def _check_finite(losses: dict[str, float], *, epoch: int, step: int, limit: float) -> None:
    for party, value in losses.items():
        if not math.isfinite(value) or value > limit:
            err = DivergenceError(f"the loss of {party} is {value} at epoch {epoch}, batch {step}: training diverged. "
                                  "Lower the learning rate of that party or check its inputs.")
            err.step = step  # read back in batches on a GPU: the batch it happened at
            raise err


#: Steps between reading the losses back from a GPU. Reading a loss (``.item()``) waits for
#: the device to finish; one read per 50 steps keeps the GPU's queue full. On a CPU a read
#: costs nothing, so every step is read: a divergence is caught at its own batch.
SYNC_EVERY_CUDA = 50


class LossWindow:
    """The losses of K runs' steps not yet read back, and each run's running sums for the epoch.

    ``add`` keeps a step's losses (per trained model a ``[K]`` tensor, possibly on a GPU, a 0-d
    tensor or a float for a run alone) and the checks its step left on the device (a run alone's,
    :class:`vflkit.secure.DeferredChecks`, e.g. VFedMH's ring overflow); every ``every`` steps
    ``drain`` reads them all with one transfer and checks them in step order, a step's own checks
    before its losses. A run whose check fails or whose loss is not finite (or exceeds ``limit``)
    is returned with its error (its ``step`` set to the bad batch) and counted no further; the
    others add ``loss * batch size`` in double precision to their sums, as a per-step ``.item()``
    would. ``sums`` and ``seen`` are run 0's (a run alone's).
    """

    def __init__(self, *, epoch: int, limit: float, every: int, runs: int = 1) -> None:
        self.epoch, self.limit, self.every = epoch, limit, every
        self.sums_of: list[dict[str, float]] = [{} for _ in range(runs)]
        self.seen_of = [0] * runs
        #: runs no longer read (diverged)
        self.stopped: set[int] = set()
        self._pending: list[tuple[int, int, dict[str, Any], list[tuple[torch.Tensor, CheckReader]]]] = []

    @property
    def sums(self) -> dict[str, float]:
        return self.sums_of[0]

    @property
    def seen(self) -> int:
        return self.seen_of[0]

    def add(self, step: int, n: int, losses: dict[str, Any],
            checks: list[tuple[torch.Tensor, CheckReader]] | None = None) -> dict[int, DivergenceError]:
        """Keep a step's losses; the runs that diverged, with their errors, once they are read."""
        self._pending.append((step, n, losses, checks or []))
        return self.drain() if len(self._pending) >= self.every else {}

    def drain(self) -> dict[int, DivergenceError]:
        """Read the pending steps; the runs that diverged among them, with their errors."""
        pending, self._pending = self._pending, []
        runs = len(self.seen_of)
        # one transfer, in the order read below: per step its checks' values, then its losses
        parts: list[torch.Tensor] = []
        for _, _, losses, step_checks in pending:
            parts += [values.reshape(-1).double() for values, _ in step_checks]
            parts += [v.detach().reshape(-1).double() for v in losses.values() if isinstance(v, torch.Tensor)]
        read = iter(torch.cat(parts).tolist() if parts else [])
        failed: dict[int, DivergenceError] = {}
        for step, n, losses, step_checks in pending:
            for values, reader in step_checks:  # a run alone's
                got = [next(read) for _ in range(values.numel())]
                if 0 in failed or 0 in self.stopped:
                    continue
                try:
                    reader(got)
                except DivergenceError as err:
                    err.step = step  # read back in batches on a GPU: the batch it happened at
                    failed[0] = err
            values = {k: [next(read) for _ in range(runs)] if isinstance(v, torch.Tensor) else [float(v)]
                      for k, v in losses.items()}
            for r in range(runs):
                if r in failed or r in self.stopped:
                    continue
                mine = {k: v[r] for k, v in values.items()}
                try:
                    _check_finite(mine, epoch=self.epoch, step=step, limit=self.limit)
                except DivergenceError as err:
                    failed[r] = err
                    continue
                sums = self.sums_of[r]
                for k, v in mine.items():
                    sums[k] = sums.get(k, 0.0) + v * n
                self.seen_of[r] += n
        return failed


def precision_context(config: RunConfig, device: torch.device) -> contextlib.AbstractContextManager:
    """bfloat16 autocast on ``device`` for ``precision="bf16"`` (the CPU included, where it runs
    but proves nothing about a GPU's accuracy), nothing for "fp32". Its cache of weight casts is
    off: a step that updates a weight in place and uses it again (C-VFL's Q local iterations)
    would compute every iteration after the first from the stale cached copy, and a CUDA graph's
    capture would keep a capture-time tensor."""
    if config.precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=False)
    return contextlib.nullcontext()


def use_precision(config: RunConfig, method: Any) -> None:
    """For ``precision="bf16"``: every party model's convolution weights in channels_last (the
    layout bf16 convolutions are fastest in; parameters keep their identity, so optimizers
    and checkpoints are unaffected). Nothing for "fp32"."""
    if config.precision == "bf16":
        for module in method.modules():
            module.to(memory_format=torch.channels_last)


def image_partition(config: RunConfig, shape: tuple[int, ...]) -> Any:
    """The partitioner that cuts images of ``shape`` among ``config``'s parties."""
    if config.feature_parts is not None:  # EASTER Table VI: the first C of n fixed strips
        if config.partition not in ("strips_width", "strips_height"):
            raise ConfigError(f"feature_parts cuts strips; partition {config.partition!r} has none")
        return first_parts(config.n_parties, config.feature_parts, image_shape=shape,
                           axis=config.partition.split("_")[1], active=config.active)
    if config.partition == "grid":
        side = int(round(math.sqrt(config.n_parties)))
        if side * side != config.n_parties:
            raise ConfigError(f"a grid partition needs a square number of parties, got {config.n_parties}")
        return grid(side, side, image_shape=shape, active=config.active)
    if config.partition in ("strips_width", "strips_height"):
        return strips(config.n_parties, image_shape=shape, axis=config.partition.split("_")[1], active=config.active)
    raise ConfigError(f"partition {config.partition!r} does not apply to image data")


def build_parties(config: RunConfig, *, device: torch.device, channel: Channel) -> tuple[list[Party], int]:
    """The parties, each with its slice of the dataset (images: :func:`image_partition`; tables:
    :func:`vflkit.tabular.build_tabular_parties`, which also gives each party its model options),
    and the number of classes. Names: ``active`` (holds the labels), then ``passive_1`` ...
    ``passive_K`` in partition order.
    """
    data = dataset(config.dataset)
    if hasattr(data, "target"):  # a table (Criteo): column groups, each party's model options
        return build_tabular_parties(config, device=device, channel=channel, data=data)
    if not hasattr(data, "x_train"):
        raise ConfigError(f"build_parties handles image datasets; {config.dataset!r} is tabular and its study "
                          "builds its own parties")
    data = data.subset(n_train=config.n_train, n_test=config.n_test, seed=config.seed)
    part = image_partition(config, data.image_shape)
    train_parts, test_parts = part.split(data.x_train), part.split(data.x_test)
    labels = {"train": data.y_train, "test": data.y_test}

    def transform(x: torch.Tensor) -> torch.Tensor:
        return data.normalize(x, device)

    # Contiguous copies on the party's device, made once: a strip of a whole dataset is a strided
    # view, slow to index, and per-batch host-to-device copies would sit on the hot path. uint8 is
    # kept; normalising happens per batch.
    passive = iter(range(1, part.n_parties))
    parties = [Party("active" if k == part.active else f"passive_{next(passive)}", channel=channel,
                     features={"train": train_parts[k].contiguous().to(device),
                               "test": test_parts[k].contiguous().to(device)},
                     labels={s: y.to(device) for s, y in labels.items()} if k == part.active else None,
                     transform=transform, device=device)
               for k in range(part.n_parties)]
    return parties, data.num_classes


def comm_summary(ledger: Ledger) -> dict[str, Any]:
    """A split-family record's ``comm``: totals, per epoch, party, kind and link, evaluation and
    setup traffic (the unpacked and the packed trainer write the same)."""
    return {"rounds_counted_as": ROUNDS_COUNTED_AS, "total": ledger.totals(),
            "per_epoch": ledger.per_epoch().reset_index().to_dict(orient="records"),
            "per_party": ledger.per_party().reset_index().to_dict(orient="records"),
            "per_kind": ledger.per_kind().reset_index().to_dict(orient="records"),
            # traffic per (epoch, kind, sender, receiver): prices the run under any network
            # afterwards (network.price_record; EASTER Figs 4-5, Table VII) without retraining;
            # as columns and rows (network.link_rows reads them), which keeps a record small
            "per_link": ledger.per_link().to_dict(orient="split", index=False),
            "eval_total": ledger.totals(phase="eval"), "setup_total": ledger.totals(phase="setup")}

#: Seconds between a run's checkpoints (:func:`train`'s ``checkpoint_every_s``): a checkpoint
#: is written after the first epoch that ends this long after the last one (or the start), and
#: always at a stop for the deadline, not after every epoch (a pack's may be large).
CHECKPOINT_EVERY_S = 300.0


def train(
    configs: RunConfig | Sequence[RunConfig],
    *,
    device: torch.device | str = "cpu",
    checkpoint: Path | Sequence[Path] | None = None,
    progress: bool = True,
    on_divergence: str = "raise",
    max_loss: float = 1e4,
    deadline: float | None = None,
    checkpoint_every_s: float | None = None,
    durable: bool = True,
    stacking: str = "auto",
    compile: dict[str, Any] | None = None,
    graphs: str | None = None,
) -> Any:
    """Train ``configs``, K >= 1 runs trained together (a :class:`Pack`: they differ in seed and
    dataset alone, :func:`check_pack`), and return each run's results: the models each party
    trained, per-epoch training loss, test metrics and elapsed seconds of every model, bytes,
    messages and rounds per epoch, party and kind, and the wall time of training (setup
    included, data loading not). One config (not in a list) gives its results alone; a pack of
    K > 1 adds ``execution`` (``{"packed": K, "pack": [keys]}``, and ``graphs``) to each.

    A packed run's results equal those of the run alone (its method's ``train_step``) in float64,
    its timings apart.

    A loss that is not finite or exceeds ``max_loss`` raises :class:`DivergenceError`; with
    ``on_divergence="record"`` that run stops there (the others train on), its models are
    evaluated as they are, and its results say where it diverged (``diverged``).

    ``checkpoint`` (a path per run): the state after an epoch but the last is saved there, every
    ``checkpoint_every_s`` (:data:`CHECKPOINT_EVERY_S`) and at a stop for the ``deadline`` (a
    ``time.time()`` value: a pack whose next epoch would end after it stops with
    :class:`BudgetExhausted`), none where ``durable`` is False (the checkpoint would not outlive
    the machine). Runs that all find a checkpoint of one epoch continue after it, a run alone
    or a pack resuming either's. ``stacking`` and ``compile``: how a pack runs each party model's
    K copies (:class:`~vflkit.stacked.StackedModel`); ``graphs``: a pack's step captured
    per batch shape and replayed (:mod:`vflkit.training.graphs`: "cuda", "tape" or "auto").
    """
    alone = isinstance(configs, RunConfig)
    configs = [configs] if alone else list(configs)
    paths = None if checkpoint is None else [checkpoint] if isinstance(checkpoint, (str, Path)) else list(checkpoint)
    if len(configs) > 1:
        check_pack(configs)
    elif not configs:
        raise ConfigError("train needs at least one run config")
    if on_divergence not in ("raise", "record"):
        raise ConfigError(f"Invalid on_divergence {on_divergence!r}; choose raise or record")
    if graphs is not None and graphs not in (*GRAPH_BACKENDS, "auto"):
        raise ConfigError(f"Invalid graphs {graphs!r}; choose None, auto or one of {', '.join(GRAPH_BACKENDS)}")
    if graphs is not None and compile is not None:
        raise ConfigError("graphs and compile both capture the step: choose one")
    if paths is not None and len(paths) != len(configs):
        raise ConfigError(f"{len(configs)} runs need as many checkpoint paths; got {len(paths)}")
    options = dict(device=device, progress=progress, on_divergence=on_divergence, max_loss=max_loss,
                   deadline=deadline, durable=durable, stacking=stacking, compile=compile, graphs=graphs,
                   every_s=CHECKPOINT_EVERY_S if checkpoint_every_s is None else checkpoint_every_s)
    by_dataset = sorted(range(len(configs)), key=lambda k: configs[k].dataset)  # stable: seeds keep their order
    got = _train([configs[k] for k in by_dataset], None if paths is None else [paths[k] for k in by_dataset],
                 **options)  # runs of one dataset side by side: one stretch each (Pack.x)
    of_run = dict(zip(by_dataset, got))
    results = [of_run[k] for k in range(len(configs))]
    return results[0] if alone else results


def _train(configs: list[RunConfig], paths: list[Path] | None, *, device: torch.device | str, progress: bool,
           on_divergence: str, max_loss: float, deadline: float | None, every_s: float, durable: bool,
           stacking: str, compile: dict[str, Any] | None, graphs: str | None) -> list[dict[str, Any]]:
    device = resolve_device(device)
    k_runs, cfg0 = len(configs), configs[0]
    deferred = DeferredChecks()  # the checks a run alone's step computes on the device (VFedMH's ring)
    methods = []
    for cfg in configs:  # each run built as it is alone: its init, data and ids
        torch.manual_seed(cfg.seed)
        channel = Channel()
        parties, n_classes = build_parties(cfg, device=device, channel=channel)
        method = get_method(cfg.method)(cfg, parties, num_classes=n_classes)
        use_precision(cfg, method)
        if k_runs == 1:
            method.defer_checks(deferred)
        channel.at(epoch=0, step=0, phase="setup")
        method.setup()
        methods.append(method)
    if device.type == "cuda":  # the peak of training, not of loading the data onto the device
        torch.cuda.reset_peak_memory_stats(device)
    gens = [torch.Generator().manual_seed(c.seed) for c in configs]
    ledger_logs = [checkpoint_io.LedgerLog(m.active.channel) for m in methods]
    histories: list[list[dict[str, Any]]] = [[] for _ in configs]
    finals: list[dict[str, Any]] = [{} for _ in configs]
    diverged: list[dict[str, Any] | None] = [None] * k_runs
    first_epoch, offset = 1, 0.0
    if paths is not None:
        states = checkpoint_io.load_all(paths, configs, device=device, unit="epoch", check=check_checkpoint)
        for k, state in enumerate(states or []):
            restore_checkpoint(state, method=methods[k], ledger_log=ledger_logs[k], gen=gens[k], device=device)
            histories[k] = state["history"]
            if state.get("diverged") is not None:  # diverged in a pack that trained on: its result is final
                diverged[k], finals[k] = state["diverged"], state["final"]
        if states:
            first_epoch, offset = states[0]["epoch"] + 1, max(s["elapsed_s"] for s in states)

    def named(k: int, err: Exception) -> DivergenceError:
        if k_runs == 1:
            return err if isinstance(err, DivergenceError) else DivergenceError(str(err))
        return DivergenceError(f"run {configs[k].key} (seed {configs[k].seed}) of the pack: {err}")

    for k, d in enumerate(diverged):
        if d is not None and on_divergence == "raise":
            raise named(k, DivergenceError(d["message"]))
    pack = Pack(methods, stacking=stacking, compile=compile) if k_runs > 1 else None  # stacks the resumed runs
    if pack is not None:
        for k, d in enumerate(diverged):  # a run that diverged before the checkpoint sends no more messages
            pack.channel.live[k] = d is None
        if graphs == "auto":
            graphs = "cuda" if device.type == "cuda" and graph_blocker(pack, "cuda") is None else None
        if graphs is not None:
            capture(pack, graphs)
        step_fn = pack.train_step
    else:
        method = methods[0]

        def step_fn(ids: torch.Tensor) -> dict[str, Any]:
            return method.train_step(ids[0])
    compute = precision_context(cfg0, device)  # the runs' precision: steps and evaluation
    n = len(methods[0].active.ids["train"])
    n_steps = math.ceil(n / cfg0.batch_size)
    sizes = [min(cfg0.batch_size, n - s * cfg0.batch_size) for s in range(n_steps)]
    every = SYNC_EVERY_CUDA if device.type == "cuda" else 1
    datasets = "+".join(dict.fromkeys(c.dataset for c in configs))
    bar = tqdm(total=cfg0.epochs * n_steps, initial=(first_epoch - 1) * n_steps,
               desc=f"{cfg0.method} {datasets}" + (f" x{k_runs}" if k_runs > 1 else ""), disable=not progress,
               leave=False)
    start = time.perf_counter() - offset
    saved = time.perf_counter()

    def finish(runs: Sequence[int], epoch: int, window: LossWindow) -> None:
        """Evaluate ``runs`` after ``epoch`` (each its own models, through its own channel)."""
        if pack is not None:
            pack.write_back()
        for k in runs:
            m = methods[k]
            m.active.channel.at(epoch=epoch, step=0, phase="eval")
            with compute:
                metrics = evaluate(m, configs[k])
            sums, seen = window.sums_of[k], window.seen_of[k]
            for model_key, values in metrics.items():
                # the mean over the batches actually trained (a diverged epoch stops early)
                row = {"epoch": epoch, "model": model_key, "elapsed_s": time.perf_counter() - start,
                       "loss": sums[model_key] / seen if seen and model_key in sums else float("nan")}
                row.update(values)
                histories[k].append(row)
            finals[k] = dict(metrics)
        if k_runs == 1:
            bar.set_postfix({key: round(v.get("test_accuracy", float("nan")), 3) for key, v in finals[0].items()})

    parties = [p for m in methods for p in m.parties]
    for epoch in range(first_epoch, cfg0.epochs + 1):
        live = [k for k in range(k_runs) if diverged[k] is None]
        if not live:
            break
        # The shuffle is a public protocol parameter (seeded), so parties need no message to
        # agree on the batch order. Every party's ids are checked once per epoch on this host
        # copy, then the order goes to the device in one copy: the steps take their batches by
        # device-side indexing, with no per-batch index copy nor check (checked_batches).
        orders = []
        for k, m in enumerate(methods):
            order = m.active.ids["train"][torch.randperm(n, generator=gens[k])]
            for party in m.parties:
                if "train" in party.ids:
                    party.check_ids("train", order)
            orders.append(order)
        order = torch.stack(orders).to(device)
        window = LossWindow(epoch=epoch, limit=max_loss, every=every, runs=k_runs)
        window.stopped.update(k for k in range(k_runs) if k not in live)
        for m in methods:
            m.train()
        evaluated: set[int] = set()
        returned = 0
        with checked_batches(parties):  # the ids were checked above, once
            for step in range(n_steps):
                if pack is not None and step % every == 0:
                    pack.draw_dither(sizes[step:step + every])
                for m in methods:
                    m.active.channel.at(epoch=epoch, step=step, phase="train")
                ids = order[:, step * cfg0.batch_size:(step + 1) * cfg0.batch_size]
                try:
                    # inside: a run alone's method may detect the divergence itself (e.g. VFedMH's
                    # encoder refusing a NaN embedding, NonFiniteEmbeddingError)
                    with compute:
                        losses = step_fn(ids)
                    returned = step + 1  # this epoch's steps that sent all their messages
                    failed = window.add(step, ids.shape[1], losses, deferred.take() if pack is None else None)
                    if step == n_steps - 1:
                        failed.update(window.drain())
                except DivergenceError as err:
                    if pack is not None:
                        raise
                    # a step before this one may have diverged unread (on a GPU): it comes first
                    failed = window.drain() or {0: err}
                for k, err in failed.items():
                    if on_divergence == "raise":
                        bar.close()
                        raise named(k, err) from None
                    # steps_run: the steps that sent all their messages (on a GPU the bad step may be
                    # an earlier one, read back late); a per-step traffic figure divides by it
                    diverged[k] = {"epoch": epoch, "step": getattr(err, "step", step), "steps_run": returned,
                                   "message": str(err)}
                    window.stopped.add(k)
                    if pack is not None:
                        pack.channel.live[k] = False
                going = [k for k in live if diverged[k] is None]
                if failed and going:  # evaluated as they diverged: the pack trains on
                    finish(list(failed), epoch, window)
                    evaluated.update(failed)
                bar.update(1)
                if not going:
                    break
        if cfg0.lr_schedule == "exponential":
            # after the epoch, as torch's ExponentialLR; the lr lives in the optimizer's state,
            # so a checkpoint carries it and a resumed run continues the schedule
            if pack is not None:
                pack.epoch_lr(cfg0.lr_gamma)
            else:
                for party in methods[0].parties:
                    for opt in party.optimizers.values():
                        for group in opt.param_groups:
                            group["lr"] *= cfg0.lr_gamma
        finish([k for k in live if k not in evaluated], epoch, window)
        if epoch == cfg0.epochs or all(d is not None for d in diverged):
            continue
        # every run is checkpointed and the deadline looked at whatever its siblings did: a run
        # that diverged is saved as diverged (its result is final)
        now = time.perf_counter()
        epoch_s = (now - start - offset) / (epoch - first_epoch + 1)
        stop = deadline is not None and time.time() + epoch_s > deadline
        if paths is not None and durable and (stop or now - saved >= every_s):
            if pack is not None:
                pack.write_back_optimizers()  # the models were written back to evaluate them
            for k, m in enumerate(methods):
                save_checkpoint(paths[k], config=configs[k], epoch=epoch, elapsed_s=now - start,
                                history=histories[k], method=m, ledger_log=ledger_logs[k], gen=gens[k],
                                device=device, diverged=diverged[k], final=finals[k] if diverged[k] else None)
            saved = time.perf_counter()
        if stop:
            bar.close()
            what = (f"{cfg0.method} {cfg0.dataset} ({cfg0.key})" if k_runs == 1
                    else f"a pack of {k_runs} {cfg0.method} {datasets} runs")
            raise BudgetExhausted(f"{what} stopped after epoch {epoch} of {cfg0.epochs} at the budget; "
                                  "rerun to resume it")
    bar.close()
    wall = time.perf_counter() - start
    results = []
    for k, m in enumerate(methods):
        if not finals[k]:  # resumed from the last epoch's checkpoint: nothing left to train
            finals[k] = {r["model"]: {key: v for key, v in r.items() if key.startswith("test_")}
                         for r in histories[k] if r["epoch"] == histories[k][-1]["epoch"]}
        results.append({"models": m.trained_models(), "history": histories[k], "final": finals[k],
                        "wall_time_s": wall, "comm": comm_summary(m.active.channel.ledger), "diverged": diverged[k]})
        if k_runs > 1:
            results[-1]["execution"] = {"packed": k_runs, "pack": [c.key for c in configs],
                                        **({"graphs": graphs} if graphs else {})}
    return results


# --------------------------------------------------------------------------- checkpoints


#: Party state that is not carried across a resume: blinding keys are agreed afresh by
#: ``setup()`` (fresh masks still cancel exactly, so training is unchanged) and ``E`` is the
#: last batch's global embedding, recomputed at the next step.
_VOLATILE_STATE = ("keys", "E")


def save_checkpoint(path: Path, *, config: RunConfig, epoch: int, elapsed_s: float,
                    history: list[dict[str, Any]], method: Any, ledger_log: checkpoint_io.LedgerLog,
                    gen: torch.Generator, device: torch.device, diverged: dict[str, Any] | None = None,
                    final: dict[str, Any] | None = None) -> None:
    """Everything a run needs to continue after ``epoch`` as if never stopped, in one format for
    packed and lone runs (either resumes the other's). A packed run that diverged while its pack trains on is saved
    with its ``diverged`` and ``final`` metrics: its result, which :func:`train` returns as it is."""
    checkpoint_io.save(path, config, {
        "epoch": epoch, "elapsed_s": elapsed_s, "history": history,
        **checkpoint_io.parties_state(method.parties, volatile=_VOLATILE_STATE),
        "generators": {k: g.get_state() for k, g in checkpoint_io.generators(method).items()},
        "ledger": ledger_log.pack(),
        "gen": gen.get_state(),
        **({"diverged": diverged, "final": final} if diverged is not None else {}),
    }, device=device)


def check_checkpoint(state: dict[str, Any]) -> None:
    """A ValueError where a checkpoint saved as diverged (:func:`save_checkpoint`) lacks what
    :func:`train` returns of it (a hand edit: it is then moved aside, never half used)."""
    diverged = state.get("diverged")
    if diverged is not None and not (isinstance(diverged, dict) and isinstance(diverged.get("message"), str)
                                     and isinstance(state.get("final"), dict)):
        raise ValueError("it is saved as diverged but lacks the divergence's message or the final metrics")


def restore_checkpoint(state: dict[str, Any], *, method: Any, ledger_log: checkpoint_io.LedgerLog,
                       gen: torch.Generator, device: torch.device) -> None:
    """Load what :func:`save_checkpoint` wrote into ``method`` (built and set up afresh), its
    ledger and its batch-order generator."""
    checkpoint_io.restore_parties(method.parties, state)
    for k, g in checkpoint_io.generators(method).items():
        g.set_state(state["generators"][k])
    # the ledger as it stood after the checkpointed epoch (setup's messages included once)
    ledger_log.restore(state["ledger"])
    gen.set_state(state["gen"])
    checkpoint_io.restore_rng(state, device)


def evaluate(method: Any, config: RunConfig) -> dict[str, dict[str, float]]:
    """Test metrics; NaN where a diverged model's outputs cannot be scored (e.g. AUC of NaNs)."""
    try:
        return method.evaluate(batch_size=max(config.batch_size, 512))
    except (ValueError, DivergenceError):  # e.g. VFedMH's encoder refusing NaN embeddings
        return {k: {"test_accuracy": float("nan")} for k in method.trained_models()}


def run(config: RunConfig, **kwargs: Any) -> dict[str, Any]:
    """The record of ``config`` (trained now or loaded): :func:`vflkit.records.run_one` with
    this family's :func:`train`."""
    return records.run_one(config, train=train, **kwargs)


def run_many(configs: Sequence[RunConfig], **kwargs: Any) -> list[dict[str, Any]]:
    """The records of ``configs``: :func:`vflkit.records.run_many` with this family's :func:`train`."""
    return records.run_many(configs, train=train, **kwargs)


def history_frame(recs: Sequence[dict[str, Any]]) -> "pd.DataFrame":
    """Per-epoch metrics of many records as one long DataFrame with the config fields that vary."""
    import pandas as pd

    frames = []
    for r in recs:
        df = pd.DataFrame(r["history"])
        cfg = r["config"]
        for k in ("dataset", "method", "seed"):
            df[k] = cfg[k]
        df["architecture"] = df["model"].map(r.get("models", {}))
        df["key"] = r["key"]
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# --------------------------------------------------------------------------- packs


#: The setting that captures the packs the scheduler and the launcher train (:func:`compute_pack`)
#: in CUDA graphs (:mod:`vflkit.training.graphs`): ``VFLKIT_GRAPHS=auto`` (on a GPU, when the
#: step can be captured) or ``cuda``; unset, they run eagerly.
GRAPHS_ENV = "VFLKIT_GRAPHS"

#: The methods' steps that pack (:attr:`VFLMethod.step`), each once.
PACKED_STEPS: tuple[Callable[..., Any], ...] = tuple(dict.fromkeys(c.step for c in METHODS.values() if c.packs()))


def _is_image_dataset(name: str) -> bool:
    if is_registered(name):  # a registered ImageData packs too
        return isinstance(load_dataset(name), ImageData)  # in memory: no files read
    return ALIASES.get(name, name) in IMAGE_DATASETS


def _data_shape(config: RunConfig) -> tuple[tuple[int, ...], int, int]:
    """What a run's image data must share with the other runs of its pack: one image's shape,
    the number of classes and of training images (after ``n_train``)."""
    name = ALIASES.get(config.dataset, config.dataset)
    if is_registered(config.dataset) or name not in IMAGE_METADATA:
        data = dataset(config.dataset)
        shape, n_classes, n_train = data.image_shape, data.num_classes, len(data.y_train)
    else:
        shape, n_classes, n_train = IMAGE_METADATA[name]
    return tuple(shape), n_classes, config.n_train or n_train


def pack_key(config: Any) -> Hashable | None:
    """What runs must share to be packed with ``config``: its key's fields but the seed and the
    dataset, and its data's shape, so equal pack keys differ in seed and dataset alone (MNIST's
    runs pack with FashionMNIST's, CIFAR-10's with neither); or None when ``config`` cannot be
    packed (a method whose step does not pack, or tabular data). A Multi-VFL run packs with the
    runs that share its step's shapes (:func:`vflkit.training.multi_owner.pack_key`)."""
    if isinstance(config, MultiVFLConfig):
        return multi_owner_key(config)
    if not isinstance(config, RunConfig):
        return None
    cls = METHODS.get(config.method)
    if cls is None or not cls.packs() or not _is_image_dataset(config.dataset):
        return None
    shared = config.replace(seed=0).key_dict()  # the fields a record's key hashes, as they are hashed
    del shared["dataset"]
    shared.pop("data_digest", None)  # a registered dataset's content
    return ("packed", json.dumps(shared, sort_keys=True), _data_shape(config))


def check_pack(configs: Sequence[RunConfig]) -> None:
    """A ConfigError unless ``configs`` can be trained as one pack: each packable, all with one
    :func:`pack_key`, no run twice."""
    if not configs:
        raise ConfigError("a pack needs at least one run config")
    keys = []
    for c in configs:
        key = pack_key(c)
        if key is None:
            why = (f"dataset {c.dataset!r} is not image data" if c.method in METHODS and METHODS[c.method].packs()
                   else f"method {c.method!r} has no packed step (packable: {', '.join(_packable_names())})")
            raise ConfigError(f"run {c.key} cannot be packed: {why}")
        keys.append(key)
    if len(set(keys)) > 1:
        raise ConfigError("a pack holds runs that differ in seed and dataset alone, on datasets of one image "
                          "shape, classes and training size; these differ in more (group them with "
                          "vflkit.training.split.group_packs)")
    seen = [c.key for c in configs]
    if len(set(seen)) != len(seen):
        raise ConfigError("a pack holds each run once; the same config was given twice")


def pack_limit(config: Any, max_size: int | None) -> int | None:
    """The most runs a pack of ``config`` holds: ``max_size``, or a Multi-VFL run's own
    (:data:`~vflkit.training.multi_owner.MAX_RUNS`, where it is larger)."""
    if isinstance(config, MultiVFLConfig) and max_size is not None:
        return max(max_size, MAX_RUNS)
    return max_size


def group_packs(configs: Sequence[Any], *, max_size: int | None = None) -> tuple[list[list[Any]], list[Any]]:
    """``configs`` grouped into packs (equal :func:`pack_key`, at most :func:`pack_limit` runs
    each, in the order given) and the configs that cannot be packed."""
    groups: dict[Hashable, list[list[RunConfig]]] = {}
    single: list[RunConfig] = []
    for c in configs:
        key = pack_key(c)
        if key is None:
            single.append(c)
            continue
        packs = groups.setdefault(key, [[]])
        limit = pack_limit(c, max_size)
        if limit is not None and len(packs[-1]) >= limit:
            packs.append([])
        packs[-1].append(c)
    return [p for packs in groups.values() for p in packs], single


def packable_config(family: str, config: Mapping[str, Any]) -> Any:
    """The run config of a study payload (its protocol ``family`` and its config as a dict)
    when :func:`pack_key` may pack it: the split family's and the multi-label-owner family's, a
    whole config; else None."""
    cls = {"split": RunConfig, "multi_owner": MultiVFLConfig}.get(family)
    if cls is None:
        return None
    try:
        return cls.from_dict(dict(config))
    except (TypeError, ValueError, KeyError, ConfigError):
        return None


def run_pack(configs: Sequence[RunConfig], *, profile: str, device: torch.device | str = "auto",
             results: str | Path | None = None, force: bool = False, progress: bool = False,
             on_divergence: str = "raise", graphs: str | None = None,
             deadline: float | None = None) -> list[dict[str, Any]]:
    """The records of ``configs`` (one pack, :func:`check_pack`), in their order: those already
    recorded are loaded, the others trained together by :func:`train` and written by the record
    store's one path (:func:`vflkit.records.run_together`), each under its own key and
    checkpointed beside its record; ``peak_memory_mb`` is the pack's."""
    check_pack(configs)

    def train_all(todo: list[RunConfig], dev: torch.device, checkpoints: list[Path]) -> list[dict[str, Any]]:
        return train(todo, device=dev, progress=progress, on_divergence=on_divergence, graphs=graphs,
                     checkpoint=checkpoints, deadline=deadline)

    return records.run_together(configs, train_all=train_all, profile=profile, device=device, results=results,
                                force=force, on_divergence=on_divergence)


def compute_pack(payloads: Sequence[Mapping[str, Any]], *, device: torch.device | str = "auto",
                 deadline: float | None = None) -> list[dict[str, Any]]:
    """The records of study payloads (``{"family": "split", "config", "profile", "results"}``)
    trained as one pack by :func:`run_pack` (Multi-VFL's by its packed trainer), a diverging run
    handled as its family says: the scheduler's and the launcher's task function of a pack, as
    :func:`vflkit.study.compute` is of one run. CUDA graphs as :data:`GRAPHS_ENV` says."""
    payloads = list(payloads)
    if payloads and all(p.get("family") == "multi_owner" for p in payloads):
        return multi_owner_pack(payloads, device=device, deadline=deadline)
    profiles = {(p["profile"], str(p["results"])) for p in payloads}
    if len(profiles) != 1:
        raise ConfigError(f"a pack writes its records under one profile and results folder; got {sorted(profiles)}")
    configs = [packable_config(p["family"], p["config"]) for p in payloads]
    if any(c is None for c in configs):
        bad = [p["config"].get("method", "?") for p, c in zip(payloads, configs) if c is None]
        raise ConfigError(f"a pack holds split-family runs of whole configs; these are not: {bad}")

    profile, results = next(iter(profiles))
    return run_pack(configs, profile=profile, device=device, results=Path(results),
                    on_divergence=FAMILIES["split"].on_divergence, graphs=os.environ.get(GRAPHS_ENV) or None,
                    deadline=deadline)


__all__ = ["CHECKPOINT_EVERY_S", "GRAPHS_ENV", "LossWindow", "PACKED_STEPS", "Pack", "build_parties", "check_checkpoint",
           "check_pack", "checkpoint_path", "compute_pack", "evaluate", "group_packs", "history_frame", "pack_key",
           "pack_limit", "packable_config", "run", "run_many", "run_pack", "train"]
