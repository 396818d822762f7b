"""The tiles family's runs: AdptVFedConv's VGG-16 across the 2x2 tiles of an image.

One run (:class:`TilesRun`) is one row of the paper's Table 2 or 3, or one of our extensions:
a *variant* and the :class:`~vflkit.methods.adptvfedconv.AdptVFedConvConfig` it runs with;
:func:`train` runs it with :mod:`vflkit.training.adptvfedconv`, one result shape for every variant.

Checkpoints. A run's per-epoch checkpoint (every stage) lives in ``<key>.ckpt.d/`` beside its
record and is deleted once the run is complete. Stage 1 (the server's pre-training) depends only
on the stage-1 fields, so every run agreeing on them (Non-cooperation, AdptVFedConv at every
cut, No model transfer, the extensions) shares one pre-training, kept in ``_pretrain/`` beside
the records (never committed; a file lock makes a second worker wait for it, not repeat it).
A pre-training is seeded by its stage and epoch alone: a shared one equals a run's own.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar, Iterator

import torch

from .. import records
from ..config import SHA1_10, KeyedRun, KeyFormat, check_dataset
from ..data import ALIASES, IMAGE_DATASETS
from ..errors import BudgetExhausted, ConfigError, check_choice
from ..methods import adptvfedconv as A
from . import adptvfedconv as trainer
from . import dataset as cached_dataset

#: Each variant and the fields of :class:`AdptVFedConvConfig` it fixes. A variant's fields take
#: their defaults unless the variant names them, so the variants are exclusive.
VARIANTS: dict[str, dict[str, Any]] = {
    "adptvfedconv": {},                          # the paper's method (Table 2; Table 3 by cut)
    "centralized": {},                           # Centralized VGG-16 on whole images
    "noncooperation": {},                        # the server's stage 1 alone
    "no_transfer": {"model_transfer": False},    # No model transfer
    "zero_padding": {"padding": "zeros"},        # Zero-padding mode (its pre-training too)
    "oneshot": {"extraction": "once"},           # ours: Algorithm 1 literally (maps sent once)
    "no_finetune": {"finetune": "none"},         # ours: transfer without the autoencoder
    "bn_stats": {"finetune": "bn_stats"},        # ours: only BatchNorm statistics adapt
}
_VARIANT_FIELDS = ("model_transfer", "padding", "extraction", "finetune")
#: Table 2's rows and our extensions, as the notebook labels them.
LABELS: dict[str, str] = {
    "adptvfedconv": "AdptVFedConv", "centralized": "Centralized VGG-16",
    "noncooperation": "Non-cooperation", "no_transfer": "No model transfer",
    "zero_padding": "Zero-padding mode", "oneshot": "One-shot extraction (ours)",
    "no_finetune": "Transfer, no fine-tuning (ours)", "bn_stats": "BN statistics only (ours)",
}


@dataclass(frozen=True)
class TilesRun(KeyedRun):
    """One AdptVFedConv run: ``variant`` (a key of :data:`VARIANTS`) and its ``adpt`` config.

    Build one with :meth:`make`, which applies the variant's fields; a run whose config
    contradicts its variant is a ConfigError. Its key (:class:`~vflkit.config.KeyedRun`) is a
    readable prefix and 10 hex digits of SHA-1 of the flat ``to_dict()``.
    """

    #: Which paper the record belongs to (results/<profile>/<paper>/).
    paper: ClassVar[str] = "adptvfedconv"

    variant: str
    adpt: A.AdptVFedConvConfig

    def __post_init__(self) -> None:
        check_choice("variant", self.variant, VARIANTS)
        # images only (tiles of a 2x2 grid): a table is refused here, before any work starts
        check_dataset(self.adpt.dataset, method="AdptVFedConv", kind="image",
                      builtin=(*IMAGE_DATASETS, *(a for a, d in ALIASES.items() if d in IMAGE_DATASETS)))
        default = A.AdptVFedConvConfig()
        for name in _VARIANT_FIELDS:
            want = VARIANTS[self.variant].get(name, getattr(default, name))
            if getattr(self.adpt, name) != want:
                raise ConfigError(f"variant {self.variant!r} runs with {name}={want!r}, got "
                                  f"{getattr(self.adpt, name)!r}; build it with TilesRun.make")

    @classmethod
    def make(cls, variant: str, **config: Any) -> "TilesRun":
        """The run of ``variant`` with ``config`` (fields of :class:`AdptVFedConvConfig`)."""
        check_choice("variant", variant, VARIANTS)
        return cls(variant, A.AdptVFedConvConfig(**{**config, **VARIANTS[variant]}))

    @property
    def seed(self) -> int:
        return self.adpt.seed

    @property
    def method(self) -> str:
        """The variant (the scheduler labels tasks with it)."""
        return self.variant

    @property
    def dataset(self) -> str:
        return self.adpt.dataset

    #: The fields every key hashes, default or not (those of the first committed records): a
    #: field added to :class:`AdptVFedConvConfig` later is hashed only when it differs from its
    #: default, so adding one keeps every committed key (:meth:`vflkit.config.KeyedRun.key_dict`). Never edit.
    KEYED_FIELDS: ClassVar[tuple[str, ...]] = (
        "variant", "dataset", "n_train", "n_test", "subset_seed", "seed", "server_tile", "width", "cut", "padding",
        "model_transfer", "finetune", "extraction", "pretrain_epochs", "finetune_epochs", "classifier_epochs",
        "centralized_epochs", "batch_size", "lr", "weight_decay", "ae_batch_size", "ae_lr_extractor",
        "ae_lr_generator", "ae_lr_extractor_scratch", "augment", "tile_shift", "centralized_crop_pad",
        "eval_batch_size")

    #: The committed records' digest (:class:`~vflkit.config.KeyedRun`): never change it.
    KEY_FORMAT: ClassVar[KeyFormat] = SHA1_10

    def key_prefix(self) -> str:
        """The record's file name starts with the variant, dataset, cut and seed."""
        return f"{self.variant}_{self.adpt.dataset}_{self.adpt.cut.replace('+', '')}_s{self.adpt.seed}"

    def key_defaults(self) -> type:
        """The nested config's class: ``to_dict()`` spreads its fields, whose defaults decide."""
        return type(self.adpt)

    def to_dict(self) -> dict[str, Any]:
        """Flat JSON-able dict (the record's ``config``)."""
        return {"variant": self.variant, **self.adpt.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TilesRun":
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        d = dict(d)
        cls.refuse_unknown(d, ["variant", *(f.name for f in fields(A.AdptVFedConvConfig))])
        variant = d.pop("variant", None)
        return cls(variant, A.AdptVFedConvConfig(**d))

    def replace(self, **changes: Any) -> "TilesRun":
        """A copy with some config fields (or ``variant``) changed; the variant's fields re-applied."""
        variant = changes.pop("variant", self.variant)
        base = {k: v for k, v in self.adpt.to_dict().items() if k not in _VARIANT_FIELDS}
        return TilesRun.make(variant, **{**base, **changes})


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (released when the process dies, so never stale)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def train(run: TilesRun, *, device: torch.device | str = "cpu", checkpoint: Path | None = None,
          progress: bool = True, on_divergence: str = "raise",
          deadline: float | None = None) -> dict[str, Any]:
    """Run ``run`` and return its results (the envelope is :func:`records.run_one`'s).

    Returns ``variant``, ``label``, ``curve`` (test accuracy per epoch of the stage that makes
    the row: stage 3 for the AdptVFedConv variants, stage 1 for Non-cooperation, the whole model
    for Centralized), ``train_loss``, ``final_accuracy`` / ``best_accuracy`` / ``best_epoch``,
    ``history`` (every stage), ``ledger_per_kind`` (bytes and messages per message kind, all
    phases), ``costs`` (:func:`~vflkit.methods.adptvfedconv.cost_model` plus the ledger's
    per-client bytes), ``paper_model``, ``n_train``, ``n_test`` and ``wall_time_s`` (compute time
    summed over resumes). With ``deadline`` a run checkpoints at the end of the last epoch that
    fits and raises :class:`BudgetExhausted`; calling again resumes it.
    """
    cfg = run.adpt
    data = cached_dataset(cfg.dataset)
    own = shared = None
    if checkpoint is not None:
        own = checkpoint.with_name(checkpoint.name.removesuffix(".pt") + ".d")
        shared = checkpoint.parent / "_pretrain"
    kw: dict[str, Any] = dict(device=device, checkpoint_dir=own, data=data, deadline=deadline)

    def stopped(what: str) -> BudgetExhausted:
        return BudgetExhausted(f"adptvfedconv {run.variant} ({run.key}) stopped at the deadline in "
                               f"{what}; run again to resume from its checkpoint")

    if run.variant == "centralized":
        out = trainer.train_centralized(cfg, **kw)
        if not out["complete"]:
            raise stopped("centralized training")
        result = {"curve": out["curve"], "train_loss": out["train_loss"],
                  "history": {"centralized": {"train_loss": out["train_loss"], "test_accuracy": out["curve"]}},
                  "ledger_per_kind": {},  # one party: nothing crosses
                  "costs": {"centralized_params": out["params"], "centralized_macs_per_image": out["macs_per_image"]},
                  "n_train": out["n_train"], "n_test": out["n_test"]}
    else:
        # Stage 1 first, under a lock on its shared file: a parallel run that needs the same
        # pre-training waits for it instead of training it again.
        pre = None
        if shared is not None:
            with _lock(shared / f"pretrain-{cfg.key(A._PRETRAIN_FIELDS)}.lock"):
                pre = trainer.train(cfg, stages=("pretrain",), pretrain_dir=shared, **kw)
            if not pre["complete"]:
                raise stopped("stage 1 (pre-training)")
        if run.variant == "noncooperation":
            out = pre or trainer.train(cfg, stages=("pretrain",), **kw)
            ledger: dict[str, Any] = {}  # the server alone: nothing crosses
        else:
            out = trainer.train(cfg, pretrain_dir=shared, **kw)
            ledger = out["costs"]["ledger_per_kind"]
        if not out["complete"]:
            raise stopped(f"stage {next((s for s, e in out['progress'].items() if not e), '?')}")
        hist = out["history"]["pretrain" if run.variant == "noncooperation" else "classifier"]
        result = {"curve": hist["test_accuracy"], "train_loss": hist["train_loss"], "history": out["history"],
                  "ledger_per_kind": ledger, "costs": out["costs"] if run.variant != "noncooperation" else
                  A.cost_model(cfg, num_classes=data.num_classes, image_shape=data.image_shape,
                               n_train=out["n_train"]),
                  "noncooperation": out["noncooperation"], "n_train": out["n_train"], "n_test": out["n_test"]}
    if own is not None:
        shutil.rmtree(own, ignore_errors=True)  # complete: the record replaces the checkpoint
    return {"variant": run.variant, "label": LABELS[run.variant], "paper_model": cfg.paper_model,
            **trainer.curve_summary(result["curve"]), **result, "wall_time_s": out["elapsed_s"]}


def run(cfg: TilesRun, **kwargs: Any) -> dict[str, Any]:
    """The record of ``cfg``: :func:`vflkit.records.run_one` with this family's :func:`train`."""
    return records.run_one(cfg, train=train, **kwargs)


def run_many(cfgs: list[TilesRun], **kwargs: Any) -> list[dict[str, Any]]:
    """The records of ``cfgs``: :func:`vflkit.records.run_many` with this family's :func:`train`."""
    return records.run_many(cfgs, train=train, desc="AdptVFedConv runs", **kwargs)


__all__ = ["LABELS", "VARIANTS", "TilesRun", "run", "run_many", "train"]
