"""One trainer per protocol family, each ``train(run, *, device, checkpoint, progress, on_divergence) -> result``.

- :mod:`.split`: batch-by-batch split learning and aggregation over vertical image slices
  (Local, SplitNN/PyVertical, C-VFL, Agg_VFL, VFedMH), configured by
  :class:`~vflkit.methods.base.RunConfig`;
- :mod:`.multi_owner`: several label owners and a server, round by round (Multi-VFL),
  configured by :class:`~vflkit.methods.multi_vfl.MultiVFLConfig`;
- :mod:`.one_shot`: one-shot representation transfer on tabular data and its classifier
  (APC-VFL, VFedTrans, their Local and Ablation baselines, and Table 2's aligned SplitNN),
  configured by :class:`~vflkit.training.one_shot.OneShotRun`;
- :mod:`.tiles`: AdptVFedConv across the 2x2 tiles of an image (its variants, Centralized
  VGG-16 and Non-cooperation), configured by :class:`~vflkit.training.tiles.TilesRun`; the
  three stages' loops, checkpoints and resume are :mod:`.adptvfedconv`.

The method contracts differ because the protocols do; how runs are configured, scheduled,
recorded and resumed does not: :func:`vflkit.records.run_one` runs every family.

Checkpoints (:mod:`.checkpoint`, shared): :mod:`.split` saves after epochs, :mod:`.multi_owner`
after rounds, :mod:`.adptvfedconv` after every epoch of every stage; a run stopped at any point
(a deadline stops it after checkpointing) resumes from its last checkpoint and ends with the
record of an uninterrupted run. :mod:`.one_shot` runs restart instead (:func:`.one_shot.train`).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, NamedTuple

from ..config import KeyedRun
from ..errors import ConfigError


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
    if family not in FAMILIES:
        raise ConfigError(f"Invalid family {family!r}; choose one of {', '.join(FAMILIES)}")
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
