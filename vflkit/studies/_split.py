"""What VFedMH's and EASTER's studies share (the same authors' two papers): architectures drawn by
seed, the run order, the 1/C twins, the tables' long format and the helpers their claims use. Not a
study (its name starts with ``_``)."""

from __future__ import annotations

import random
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from .. import analysis
from ..config import check_profile, split_run_overrides
from ..errors import ConfigError
from ..methods import RunConfig
from ..records import by_key
from ..report import join_reference, side_by_side

#: How the ResNets are cut into h and p: half their weighted layers each (EASTER Sec. V-A: "the
#: number of layers in both the local embedding and predicting models was the same"; :mod:`vflkit.models`).
RESNET_CUT = "layers"

#: The two readings of Eq. 7's gradient to each embedding network, as the 1/C tables label them.
GRADIENT_READINGS: tuple[str, str] = ("∂L/∂E / C (default)", "∂L/∂E")
#: The labelled reading of the 1/C twins (group ``embedding_gradient``).
FULL_GRADIENT_READING = "h gets ∂L/∂E, no 1/C"

#: Training samples of each dataset when a run sets no ``n_train`` (Criteo: its sample's).
TRAIN_SIZES: dict[str, int] = {"mnist": 60000, "fashion_mnist": 60000, "cifar10": 50000, "criteo": 1599}

_DATASET_ORDER = {"mnist": 0, "fashion_mnist": 1, "cifar10": 2}
_METHOD_ORDER = {"agg_vfl": 1, "splitnn": 2, "local": 3}  # after the study's own method (0)
#: A profile's runs by artefact group (a study's ``configs``).
Groups = dict[str, list[RunConfig]]


def needs_gpu(config: RunConfig) -> bool:
    """The ResNet runs: tens of milliseconds per 32x8 sample on a laptop-class CPU, so a GPU's work
    (:func:`vflkit.ops.pricing.alone`)."""
    return any(m.startswith("resnet") for m in config.models)


def train_size(run: RunConfig) -> int:
    """A run's training samples: its ``n_train``, else its dataset's (:data:`TRAIN_SIZES`)."""
    return run.n_train or TRAIN_SIZES[run.dataset]


def assign_models(models: Sequence[str], n_parties: int = 4, *, seed: int) -> tuple[str, ...]:
    """Architectures for the parties, drawn by seed: every one of ``models`` at least once, the
    remaining parties drawing uniformly from ``models``, then shuffled (party 0 is active)."""
    if len(models) > n_parties:
        raise ConfigError(f"{len(models)} architectures do not fit {n_parties} parties")
    rng = random.Random(seed)
    out = list(models) + [rng.choice(list(models)) for _ in range(n_parties - len(models))]
    rng.shuffle(out)
    return tuple(out)


def rotate(models: Sequence[str], m: str) -> tuple[str, ...]:
    """The heterogeneous assignment rotated so that the active party (index 0) holds ``m``."""
    i = list(models).index(m)
    return tuple(models[i:]) + tuple(models[:i])


def run_priority(config: RunConfig, rank: int) -> tuple:
    """The scheduler's order: the headline table (rank 0) for every seed, then the other artefacts
    seed by seed, C-VFL's Q = 10 runs last (Q steps a batch); within a seed by dataset, own method first."""
    costly = config.method == "c_vfl" and int(config.options.get("local_iterations", 10)) > 1
    return (costly, rank > 0, config.seed, rank, _DATASET_ORDER.get(config.dataset, 9),
            0 if config.method == config.paper else _METHOD_ORDER.get(config.method, 5), config.models)


def settings(profiles: dict[str, dict[str, Any]], profile: str,
             overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A profile's settings, with any of them overridden (an unknown key is an error listing the
    valid ones, :func:`vflkit.config.split_run_overrides`)."""
    return split_run_overrides(profiles[check_profile(profile)], overrides, RunConfig)[0]


def summarise(rows: Sequence[dict[str, Any]], paper: str, profile: str) -> pd.DataFrame:
    """The cells of the reference long format beside the paper's; a diverged run (its row's ``diverged``)
    is counted in the cell's ``diverged`` column and kept out of its number (:func:`vflkit.analysis.summarise_runs`)."""
    cell = ["table", "dataset", "method", "setting", "model", "metric"]
    df = pd.DataFrame(rows, columns=[*cell, "value", "seed", "diverged"])
    return join_reference(analysis.summarise_runs(df, cell), paper, profile=profile)


def describe(run: RunConfig, datasets: dict[str, str], methods: dict[str, str] | None = None,
             fields: tuple[str, ...] = ()) -> dict[str, Any]:
    """A pending run as the notebook lists it: ``datasets``' and ``methods``' names, ``fields`` before the seed."""
    return {"dataset": datasets[run.dataset], "method": (methods or {}).get(run.method, run.method),
            "models": "/".join(run.models), **{f: getattr(run, f) for f in fields}, "seed": run.seed}


def claim_input(configs: Callable[[str], Groups], with_variant: Callable[[Groups, str | None], Groups]
                ) -> Callable[..., tuple[Groups, Mapping[str, dict[str, Any]]]]:
    """What a study's clauses read of :class:`vflkit.claims.Records`: ``read(records, variant=None)``
    gives the profile's run groups (built once per records, the labelled ``variant`` swapped in by
    ``with_variant``) and the records by key; nothing is read from disk."""
    return lambda records, variant=None: (
        with_variant(records.derived("groups", lambda: configs(records.profile)), variant), records.by_key)


def embedding_gradient(groups: Groups, records: Sequence[dict[str, Any]],
                       names: dict[str, str], metric: Any = "test_accuracy") -> pd.DataFrame:
    """The 1/C comparison (:func:`vflkit.analysis.variant_pairs`): each run of group
    ``embedding_gradient`` (h given ∂L_k/∂E) beside the study's own run of the same seed, data and
    initialisation (h given ∂L_k/∂E / C, Eq. 7's exact gradient), where both are recorded;
    ``names``: the datasets as the paper prints them."""
    rec = by_key(records)
    pairs = [(rec[s.key], rec[c.key]) for c, s in analysis.recorded_pairs(groups["embedding_gradient"], rec)]
    out = analysis.variant_pairs(pairs, labels=GRADIENT_READINGS, metric=metric)
    return out.assign(dataset=out["dataset"].map(names))


def view(columns: str = "model", index: tuple[str, ...] = ("dataset", "method")) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """A table shown as ours beside the paper's, one column per ``columns``."""
    return lambda t: side_by_side(t, index=list(index), columns=columns)


def figure(draw: Callable[[Any, Any], Any]) -> Callable[[Any, Any, str], Any]:
    """A figure drawn from (groups, records), whatever the profile."""
    return lambda groups, records, profile: draw(groups, records)
