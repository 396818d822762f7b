"""One trainer per protocol family, each ``train(run, *, device, checkpoint, progress, on_divergence) -> result``.

The method contracts differ because the protocols do; how runs are configured, scheduled,
recorded and resumed does not: :func:`vflkit.records.run_one` runs every family. A run stopped
at any point (a deadline stops it after checkpointing) resumes from its last checkpoint
(:mod:`.checkpoint`) and ends with the record of an uninterrupted run; :mod:`.one_shot` runs
restart instead. The families (:data:`FAMILIES`), their run classes and when each checkpoints:
docs/engine.md, "The families".
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, NamedTuple

from ..config import KeyedRun
from ..errors import ConfigError, check_choice


class Family(NamedTuple):
    """A protocol family: its trainer module, its run class (``module:Name``) and what a run that
    diverges does (``"record"``: the run's record says so; ``"raise"``: an error)."""

    trainer: str
    run_class: str
    on_divergence: str = "raise"


#: The protocol families by name, beside their trainers (each study names its own,
#: :attr:`vflkit.studies.base.Study.family`). VFedMH's tables report the runs that diverge at
#: the paper's settings, so the split family records divergence instead of raising.
FAMILIES: dict[str, Family] = {
    "split": Family("vflkit.training.split", "vflkit.methods.base:RunConfig", "record"),
    "multi_owner": Family("vflkit.training.multi_owner", "vflkit.methods.multi_vfl:MultiVFLConfig", "raise"),
    "one_shot": Family("vflkit.training.one_shot", "vflkit.training.one_shot:OneShotRun", "raise"),
    "tiles": Family("vflkit.training.tiles", "vflkit.training.tiles:TilesRun", "raise"),
}


def load(spec: str) -> Any:
    """The module ``module``, or the object ``name`` in it, of a ``module[:name]`` spec (a
    family's trainer or run class), imported on first use: the registry stays light."""
    module, _, name = spec.partition(":")
    obj = importlib.import_module(module)
    return getattr(obj, name) if name else obj


def run_class(family: str) -> type[KeyedRun]:
    """The run class of protocol ``family`` (:data:`FAMILIES`), e.g. ``RunConfig`` for "split":
    a :class:`~vflkit.config.KeyedRun`, so its records are named by the one key scheme. An
    unknown family is a ConfigError listing the known ones."""
    check_choice("family", family, FAMILIES)
    cls = load(FAMILIES[family].run_class)
    if not (isinstance(cls, type) and issubclass(cls, KeyedRun)):
        raise ConfigError(f"family {family!r}: run class {FAMILIES[family].run_class} is not a "
                          "vflkit.config.KeyedRun (the one key scheme its records are filed by)")
    return cls


def dataset(name: str) -> Any:
    """``load_dataset(name)``, kept in memory for the next run of a study: one cache for every
    trainer (MNIST's gz files take about half a second to decode, and a study makes dozens of
    runs on one dataset). A dataset given by :func:`vflkit.data.register_dataset` is already in
    memory and is looked up afresh, so re-registering a name is seen at once."""
    from ..data import is_registered, load_dataset

    return load_dataset(name) if is_registered(name) else _load(name)


@functools.lru_cache(maxsize=3)
def _load(name: str) -> Any:
    from ..data import load_dataset

    return load_dataset(name)
