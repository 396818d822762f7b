"""The trainer of the batch-by-batch family: split learning and aggregation (VFedMH's family).

Local, SplitNN/PyVertical, C-VFL, Agg_VFL and VFedMH (:mod:`vflkit.methods`) all train the
same way: the parties hold vertical slices of an image dataset (:func:`build_parties`), a
seeded shuffle (a public protocol parameter) orders the samples, and per batch the method's
``train_step`` exchanges its messages through the counted channel. :func:`train` runs one
:class:`~vflkit.methods.base.RunConfig` that way and returns its results; the record store
(:func:`vflkit.records.run_one`) wraps them in the common envelope and writes them.

Every epoch is checkpointed beside the record (:func:`save_checkpoint`, through the shared
:mod:`.checkpoint`): an interrupted run resumes after its last finished epoch and ends with the
record of an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import torch
from tqdm.auto import tqdm

from .. import records
from ..comm import ROUNDS_COUNTED_AS, Channel, Ledger, Party, checked_batches
from ..errors import BudgetExhausted, ConfigError, DivergenceError
from ..methods.base import RunConfig
from ..records import checkpoint_path
from ..secure import CheckReader, DeferredChecks
from . import checkpoint as checkpoint_io
from . import dataset

if TYPE_CHECKING:
    import pandas as pd


def _check_finite(losses: dict[str, float], *, epoch: int, step: int, limit: float) -> None:
    for party, value in losses.items():
        if not math.isfinite(value) or value > limit:
            err = DivergenceError(
                f"the loss of {party} is {value} at epoch {epoch}, batch {step}: training diverged. "
                "Lower the learning rate of that party or check its inputs."
            )
            err.step = step  # read back in batches on a GPU: the batch it happened at
            raise err


#: Steps between reading the losses back from a GPU. Reading a loss (``.item()``) waits for
#: the device to finish; one read per 50 steps keeps the GPU's queue full. On a CPU a read
#: costs nothing, so every step is read: a divergence is caught at its own batch.
SYNC_EVERY_CUDA = 50


class LossWindow:
    """The losses of the steps not yet read back, and the epoch's running sums.

    ``add`` keeps a step's losses (0-d tensors, possibly on a GPU, or floats) and the checks
    its ``train_step`` left on the device (:class:`vflkit.secure.DeferredChecks`, e.g.
    VFedMH's ring overflow); ``drain`` reads them all with one transfer, checks them in step
    order, a step's own checks before its losses (raising at the first bad step, with its
    ``step``; the steps before it counted), and adds the losses to ``sums`` as
    ``loss * batch size`` in double precision, as a per-step ``.item()`` would.
    """

    def __init__(self, *, epoch: int, limit: float, every: int) -> None:
        self.epoch, self.limit, self.every = epoch, limit, every
        self.sums: dict[str, float] = {}
        self.seen = 0
        self._pending: list[tuple[int, int, dict[str, Any], list[tuple[torch.Tensor, CheckReader]]]] = []

    def add(self, step: int, n: int, losses: dict[str, Any],
            checks: list[tuple[torch.Tensor, CheckReader]] | None = None) -> None:
        self._pending.append((step, n, losses, checks or []))
        if len(self._pending) >= self.every:
            self.drain()

    def drain(self) -> None:
        pending, self._pending = self._pending, []
        # one transfer, in the order read below: per step its checks' values, then its losses
        parts: list[torch.Tensor] = []
        for _, _, losses, step_checks in pending:
            parts += [values.reshape(-1).double() for values, _ in step_checks]
            parts += [v.detach().reshape(1).double() for v in losses.values() if isinstance(v, torch.Tensor)]
        read = iter(torch.cat(parts).tolist() if parts else [])
        for step, n, losses, step_checks in pending:
            for values, reader in step_checks:
                try:
                    reader([next(read) for _ in range(values.numel())])
                except DivergenceError as err:
                    err.step = step  # read back in batches on a GPU: the batch it happened at
                    raise
            values = {k: next(read) if isinstance(v, torch.Tensor) else float(v) for k, v in losses.items()}
            _check_finite(values, epoch=self.epoch, step=step, limit=self.limit)
            for k, v in values.items():
                self.sums[k] = self.sums.get(k, 0.0) + v * n
            self.seen += n


def precision_context(config: RunConfig, device: torch.device) -> contextlib.AbstractContextManager:
    """Where the run's steps and evaluation compute: bfloat16 autocast on ``device`` for
    ``precision="bf16"`` (the CPU included, where it runs but proves nothing about a GPU's
    accuracy), nothing for "fp32".

    Autocast's cache of weight casts is off: it keeps a weight's bfloat16 copy for the whole
    region, and a step that updates a weight in place and uses it again (C-VFL's Q local
    iterations, its server's Q) would compute every iteration after the first from the stale
    copy. A CUDA graph's capture needs it off too (the cached copy would be a capture-time
    tensor). Cost: one cast a use instead of one a step."""
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
    """The partitioner that cuts images of ``shape`` among ``config``'s parties (strips, a
    grid, or EASTER Table VI's first C of n fixed strips)."""
    from ..partition import first_parts, grid, strips

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
    """Load the dataset, partition it and give each party its slice; returns (parties, n_classes).

    Images are cut into strips or a grid (with ``config.feature_parts``: the first C of that
    many fixed strips, EASTER Table VI); tables (Criteo) into column groups by
    :func:`vflkit.tabular.build_tabular_parties`, which also gives each party its model options.

    Party names: ``active`` for the party that holds the labels, ``passive_1`` ...
    ``passive_K`` for the others in partition order.
    """
    data = dataset(config.dataset)
    if hasattr(data, "target"):  # a table (Criteo): column groups, each party's model options
        from ..tabular import build_tabular_parties

        return build_tabular_parties(config, device=device, channel=channel, data=data)
    if hasattr(data, "x_train"):
        data = data.subset(n_train=config.n_train, n_test=config.n_test, seed=config.seed)
        part = image_partition(config, data.image_shape)
        train_parts = part.split(data.x_train)
        test_parts = part.split(data.x_test)
        labels = {"train": data.y_train, "test": data.y_test}
        n_classes = data.num_classes

        def transform(x: torch.Tensor) -> torch.Tensor:
            return data.normalize(x, device)
    else:
        raise ConfigError(
            f"build_parties handles image datasets; {config.dataset!r} is tabular and its study "
            "builds its own parties"
        )

    parties: list[Party] = []
    passive_no = 0
    for k in range(part.n_parties):
        if k == part.active:
            name = "active"
        else:
            passive_no += 1
            name = f"passive_{passive_no}"
        parties.append(
            Party(
                name,
                channel=channel,
                # Contiguous copies on the party's device, made once: a strip of a whole dataset
                # is a strided view, slow to index, and per-batch host-to-device copies would
                # sit on the hot path. uint8 is kept; normalising happens per batch.
                features={"train": train_parts[k].contiguous().to(device),
                          "test": test_parts[k].contiguous().to(device)},
                labels={s: y.to(device) for s, y in labels.items()} if k == part.active else None,
                transform=transform,
                device=device,
            )
        )
    return parties, n_classes



def comm_summary(ledger: Ledger) -> dict[str, Any]:
    """A split-family record's ``comm``: totals, per epoch, party, kind and link, evaluation and
    setup traffic (the unpacked and the packed trainer write the same)."""
    return {"rounds_counted_as": ROUNDS_COUNTED_AS, "total": ledger.totals(),
            "per_epoch": ledger.per_epoch().reset_index().to_dict(orient="records"),
            "per_party": ledger.per_party().reset_index().to_dict(orient="records"),
            "per_kind": ledger.per_kind().reset_index().to_dict(orient="records"),
            # traffic per (epoch, kind, sender, receiver): prices the run under any network
            # afterwards (network.price_record; EASTER Figs 4-5, Table VII) without retraining.
            # As columns and rows (network.link_rows reads them): a dict per row was most of a record
            "per_link": ledger.per_link().to_dict(orient="split", index=False),
            "eval_total": ledger.totals(phase="eval"), "setup_total": ledger.totals(phase="setup")}

def train(
    config: RunConfig,
    *,
    device: torch.device,
    checkpoint: Path | None = None,
    progress: bool = True,
    on_divergence: str = "raise",
    max_loss: float = 1e4,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Train ``config`` and return its results: the models each party trained, per-epoch
    training loss, test metrics and elapsed seconds of every model, bytes/messages/rounds per
    epoch, party and kind, and the wall time of training (setup included, data loading not).

    A loss that is not finite or exceeds ``max_loss`` raises :class:`DivergenceError`; with
    ``on_divergence="record"`` the run stops there instead, its models are evaluated as they
    are, and the results say where it diverged (``diverged``): a study then reports a method
    that diverges at the paper's settings rather than stopping. With ``checkpoint`` set, the
    state after every epoch but the last is saved there, and a run finding its own
    checkpoint continues after that epoch. With ``deadline`` (a ``time.time()`` value) too, a
    run whose next epoch would end after it checkpoints and raises :class:`BudgetExhausted`.
    """
    from ..methods import get_method

    torch.manual_seed(config.seed)
    channel = Channel()
    parties, n_classes = build_parties(config, device=device, channel=channel)
    method = get_method(config.method)(config, parties, num_classes=n_classes)
    use_precision(config, method)
    compute = precision_context(config, device)
    active = method.active
    if device.type == "cuda":  # the peak of training, not of loading the data onto the device
        torch.cuda.reset_peak_memory_stats(device)

    # the checks a step computes on the device (VFedMH's ring) are read with its losses, below
    deferred = DeferredChecks()
    method.defer_checks(deferred)
    channel.at(epoch=0, step=0, phase="setup")
    method.setup()
    history: list[dict[str, Any]] = []
    gen = torch.Generator().manual_seed(config.seed)
    train_ids = active.ids["train"]
    n_steps = math.ceil(len(train_ids) / config.batch_size)
    diverged: dict[str, Any] | None = None
    first_epoch, offset = 1, 0.0
    ledger_log = checkpoint_io.LedgerLog(channel)
    if checkpoint is not None:
        state = checkpoint_io.load(checkpoint, config, device=device, fresh="epoch 1", check=check_checkpoint)
        if state is not None:
            restore_checkpoint(state, method=method, ledger_log=ledger_log, gen=gen, device=device)
            history, first_epoch, offset = state["history"], state["epoch"] + 1, state["elapsed_s"]
            if state.get("diverged") is not None:  # diverged in a pack that trained on: its result is final
                if on_divergence == "raise":
                    raise DivergenceError(state["diverged"]["message"])
                return {"models": method.trained_models(), "history": history, "final": state["final"],
                        "wall_time_s": offset, "comm": comm_summary(channel.ledger), "diverged": state["diverged"]}
    start = time.perf_counter() - offset
    bar = tqdm(total=config.epochs * n_steps, initial=(first_epoch - 1) * n_steps,
               desc=f"{config.method} {config.dataset}", disable=not progress, leave=False)
    metrics: dict[str, dict[str, float]] = {}
    for epoch in range(first_epoch, config.epochs + 1):
        # The shuffle is a public protocol parameter (seeded), so parties need no message to
        # agree on the batch order.
        order = train_ids[torch.randperm(len(train_ids), generator=gen)]
        # Every party's ids are checked once per epoch on this host copy, then the order goes to
        # the device in one copy: the steps take their batches by device-side indexing, with no
        # per-batch index copy nor check that would make a GPU wait (checked_batches).
        for party in method.parties:
            if "train" in party.ids:
                party.check_ids("train", order)
        order = order.to(device)
        window = LossWindow(epoch=epoch, limit=max_loss,
                             every=SYNC_EVERY_CUDA if device.type == "cuda" else 1)
        method.train()
        returned = 0
        with checked_batches(method.parties):  # the ids were checked above, once
            for step in range(n_steps):
                channel.at(epoch=epoch, step=step, phase="train")
                ids = order[step * config.batch_size:(step + 1) * config.batch_size]
                try:
                    # inside: a method may detect the divergence itself (e.g. VFedMH's encoder
                    # refusing a NaN embedding, NonFiniteEmbeddingError), and "record" holds for it too
                    with compute:
                        losses = method.train_step(ids)
                    returned = step + 1  # this epoch's steps that sent all their messages
                    window.add(step, len(ids), losses, deferred.take())
                    if step == n_steps - 1:
                        window.drain()
                except DivergenceError as err:
                    try:  # a step before this one may have diverged unread (on a GPU): it comes first
                        window.drain()
                    except DivergenceError as earlier:
                        err = earlier
                    if on_divergence == "raise":
                        raise err from None
                    # steps_run: the steps whose train_step returned, so sent all their messages (on a
                    # GPU the bad step may be an earlier one, read back late); a per-step traffic figure
                    # divides the epoch's ledger by it
                    diverged = {"epoch": epoch, "step": getattr(err, "step", step), "steps_run": returned,
                                "message": str(err)}
                    break
                bar.update(1)
        sums, seen = window.sums, window.seen
        if config.lr_schedule == "exponential":
            # after the epoch, as torch's ExponentialLR; the lr lives in the optimizer's state,
            # so a checkpoint carries it and a resumed run continues the schedule
            for party in method.parties:
                for opt in party.optimizers.values():
                    for group in opt.param_groups:
                        group["lr"] *= config.lr_gamma
        channel.at(epoch=epoch, step=0, phase="eval")
        with compute:
            metrics = evaluate(method, config)
        for model_key, m in metrics.items():
            # the mean over the batches actually trained (a diverged epoch stops early)
            row = {"epoch": epoch, "model": model_key, "elapsed_s": time.perf_counter() - start,
                   "loss": sums[model_key] / seen if seen and model_key in sums else float("nan")}
            row.update(m)
            history.append(row)
        bar.set_postfix({k: round(v.get("test_accuracy", float("nan")), 3) for k, v in metrics.items()})
        if diverged:
            break
        if checkpoint is not None and epoch < config.epochs:
            save_checkpoint(checkpoint, config=config, epoch=epoch, elapsed_s=time.perf_counter() - start,
                            history=history, method=method, ledger_log=ledger_log, gen=gen, device=device)
            epoch_s = (time.perf_counter() - start - offset) / (epoch - first_epoch + 1)
            if deadline is not None and time.time() + epoch_s > deadline:
                bar.close()
                raise BudgetExhausted(f"{config.method} {config.dataset} ({config.key}) stopped after epoch "
                                      f"{epoch} of {config.epochs} at the budget; rerun to resume it")
    if not metrics:  # resumed from the last epoch's checkpoint: nothing left to train
        metrics = {r["model"]: {k: v for k, v in r.items() if k.startswith("test_")}
                   for r in history if r["epoch"] == history[-1]["epoch"]}
    bar.close()
    wall = time.perf_counter() - start

    ledger = channel.ledger
    return {
        "models": method.trained_models(),
        "history": history,
        "final": {k: v for k, v in metrics.items()},
        "wall_time_s": wall,
        "comm": comm_summary(ledger),
        "diverged": diverged,
    }


# --------------------------------------------------------------------------- checkpoints


#: Party state that is not carried across a resume: blinding keys are agreed afresh by
#: ``setup()`` (fresh masks still cancel exactly, so training is unchanged) and ``E`` is the
#: last batch's global embedding, recomputed at the next step.
_VOLATILE_STATE = ("keys", "E")


def save_checkpoint(path: Path, *, config: RunConfig, epoch: int, elapsed_s: float,
                    history: list[dict[str, Any]], method: Any, ledger_log: checkpoint_io.LedgerLog,
                    gen: torch.Generator, device: torch.device, diverged: dict[str, Any] | None = None,
                    final: dict[str, Any] | None = None) -> None:
    """Everything a run needs to continue after ``epoch`` as if never stopped, written atomically
    (also a packed run's, :func:`vflkit.training.packed.train_pack`: one format, so either
    trainer resumes the other's). A packed run that diverged while its pack trains on is saved
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
    this family's :func:`train`; ``kwargs`` as there (``profile``, ``device``, ``results``,
    ``force``, ``progress``, ``on_divergence``)."""
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


__all__ = ["LossWindow", "build_parties", "check_checkpoint", "checkpoint_path", "evaluate", "history_frame", "run", "run_many", "train"]
