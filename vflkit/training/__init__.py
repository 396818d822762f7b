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

Checkpoints (:mod:`.checkpoint`, shared): :mod:`.split` saves every epoch and :mod:`.multi_owner`
every round (at most one per :data:`~.multi_owner.CHECKPOINT_EVERY_S` seconds), and
:mod:`.adptvfedconv` every epoch of every stage; a run of these families stopped at any point resumes from its last checkpoint and ends with the record of
an uninterrupted run, and a deadline stops it after checkpointing. :mod:`.one_shot` runs take
seconds to two minutes and restart instead; they check the deadline before they
start.
"""

from __future__ import annotations

import functools
from typing import Any


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
