"""What VFedMH's and EASTER's studies share: both draw the parties' architectures by seed from
one model set, order their runs alike (C-VFL's Q = 10 runs last) and judge some clauses on a
labelled twin of their own method's runs. Not a study (its name starts with ``_``)."""

from __future__ import annotations

import random
from typing import Any, Callable, Sequence

import pandas as pd

from .. import analysis
from ..errors import ConfigError
from ..methods import RunConfig
from ..report import side_by_side
from .base import unique as _unique

#: How the ResNets are cut into h and p: half their weighted layers each (EASTER Sec. V-A, the
#: same authors: "the number of layers in both the local embedding and predicting models was
#: the same"; :mod:`vflkit.models`). The earlier six-unit reading gave ResNet50 and ResNet101
#: the same h, so SplitNN's and C-VFL's two columns trained one network; ResNet18 is cut alike
#: by both, and its records stand.
RESNET_CUT = "layers"

#: The two readings of Eq. 7's gradient to each embedding network, as the 1/C tables label them.
GRADIENT_READINGS: tuple[str, str] = ("∂L/∂E / C (default)", "∂L/∂E")

_DATASET_ORDER = {"mnist": 0, "fashion_mnist": 1, "cifar10": 2}
_METHOD_ORDER = {"agg_vfl": 1, "splitnn": 2, "local": 3}  # after the study's own method (0)


def assign_models(models: Sequence[str], n_parties: int = 4, *, seed: int) -> tuple[str, ...]:
    """Architectures for the parties, drawn by seed: every one of ``models`` at least once, the
    remaining parties drawing uniformly from ``models``, then shuffled (party 0 is active)."""
    if len(models) > n_parties:
        raise ConfigError(f"{len(models)} architectures do not fit {n_parties} parties")
    rng = random.Random(seed)
    out = list(models) + [rng.choice(list(models)) for _ in range(n_parties - len(models))]
    rng.shuffle(out)
    return tuple(out)


def run_priority(config: RunConfig, rank: int) -> tuple:
    """The order the scheduler computes the runs in: the headline table (rank 0) for every seed,
    then the other artefacts seed by seed, and C-VFL with its Q = 10 local iterations last (Q
    steps per batch against one). Within a seed MNIST before FashionMNIST, the study's own
    method first."""
    costly = config.method == "c_vfl" and int(config.options.get("local_iterations", 10)) > 1
    return (costly, rank > 0, config.seed, rank, _DATASET_ORDER.get(config.dataset, 9),
            0 if config.method == config.paper else _METHOD_ORDER.get(config.method, 5), config.models)


def unique(groups: dict[str, list[RunConfig]]) -> list[RunConfig]:
    """Every run of ``groups`` once each, in first-use order."""
    return _unique(c for group in groups.values() for c in group)


def by_key(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``records`` by their run's key."""
    return {r["key"]: r for r in records}


def with_variant(groups: dict[str, list[RunConfig]], variants: dict[str, tuple[str, str]], variant: str | None,
                 tables: tuple[str, str], *, keep_unmatched: bool) -> dict[str, list[RunConfig]]:
    """``groups`` with ``variants[variant]`` = (method, group) swapped in (None: unchanged): each
    of the method's runs in ``tables`` replaced by its twin in the variant's group
    (:func:`vflkit.analysis.swap_in_variant`)."""
    if variant is None:
        return groups
    method, group = variants[variant]
    return analysis.swap_in_variant(groups, method, group, tables, keep_unmatched=keep_unmatched)


def view(columns: str = "model", index: tuple[str, ...] = ("dataset", "method")) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """A table shown as ours beside the paper's, one column per ``columns``."""
    return lambda t: side_by_side(t, index=list(index), columns=columns)


def figure(draw: Callable[[Any, Any], Any]) -> Callable[[Any, Any, str], Any]:
    """A figure drawn from (groups, records), whatever the profile."""
    return lambda groups, records, profile: draw(groups, records)
