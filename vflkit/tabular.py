"""Tabular parties for the batch-by-batch trainer (EASTER on Criteo, or a table of your own).

:func:`build_tabular_parties` is the tabular twin of :func:`vflkit.training.split.build_parties`:
load the table, split it 80/20, encode it, give each party a group of columns, and return
``(parties, n_classes)`` with the same party names (``active``, ``passive_1`` ...). A party's
columns travel as one float32 tensor, dense columns first, then category codes; with them it
carries its model's ``model_kwargs`` (what a tabular party holds: ``docs/data-and-models.md``).

Choices where the paper is silent (EASTER Sec. V-A1 gives only "80% / 20%")
-----------------------------------------------------------------------
* The 80/20 split is drawn once with ``split_seed`` (default 0), independent of the run seed,
  so every method and seed is scored on the same test rows (paired comparisons; the tiny
  sample's 400 test rows make unpaired AUC gaps of a few points unresolvable).
* Categories seen fewer than ``min_count=2`` times share code 0 with missing values; the
  vocabulary is counted over all rows (DeepCTR's practice: counts, never labels).
* Columns keep Criteo's order I1..I13, C1..C26 and are cut into consecutive groups
  (:func:`vflkit.partition.columns`), so at C = 4 (10/10/10/9 columns) the active party holds
  dense columns only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd
import torch

from .comm import Channel, Party
from .data import CRITEO_DENSE, CRITEO_SPARSE, TabularData, draw_rows, encode_criteo, load_dataset
from .errors import ConfigError, PartitionError
from .models import TABULAR_MODELS
from .partition import columns, first_parts

#: float32 represents every integer below 2**24 exactly: the largest category code allowed.
_FLOAT32_EXACT = 2**24


@dataclass(frozen=True)
class EncodedTable:
    """A tabular dataset as model inputs, split 80/20 (seeded): float32 ``[N, F]`` features in
    ``feature_names`` order (the ``dense`` columns first, then category codes 0..V-1 with
    ``vocab_sizes`` V per categorical column) and int64 labels."""

    x_train: torch.Tensor
    x_test: torch.Tensor
    y_train: torch.Tensor
    y_test: torch.Tensor
    feature_names: tuple[str, ...]
    dense: tuple[str, ...]
    vocab_sizes: dict[str, int]
    num_classes: int

    def model_kwargs(self, names: Sequence[str]) -> dict[str, Any]:
        """What a Criteo model of a party holding ``names`` needs: its dense count and the
        vocabulary of each of its categorical columns, in the order the party holds them."""
        return {"n_dense": sum(n in self.dense for n in names),
                "vocab_sizes": [self.vocab_sizes[n] for n in names if n not in self.dense]}

    def party_columns(self, names: Sequence[str]) -> list[str]:
        """``names`` reordered as a party holds them: its dense columns first, then its
        categorical ones (each kind in the given order)."""
        return [n for n in names if n in self.dense] + [n for n in names if n not in self.dense]


def encode_table(data: TabularData, *, split_seed: int = 0, test_fraction: float = 0.2,
                 min_count: int = 2) -> EncodedTable:
    """Encode a table and split it ``1 - test_fraction`` / ``test_fraction`` with a seeded
    permutation (see the module docstring for the choices).

    Criteo (``load_dataset("criteo")``, or any table with its columns I1..I13, C1..C26) is
    encoded by :func:`vflkit.data.encode_criteo`. Any other table (a :class:`TabularData` of
    your own) by :func:`encode_generic`: numeric columns standardised with the training rows'
    statistics, categorical ones (``data.categorical`` and non-numeric columns) as codes.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ConfigError(f"test_fraction must be in (0, 1), got {test_fraction!r}")
    n = len(data.target)
    n_test = int(round(n * test_fraction))
    if not 0 < n_test < n:
        raise ConfigError(f"{n} rows cannot be split with test_fraction={test_fraction}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(split_seed))
    # Sorted within each split so that rows keep the file's order (easier to inspect).
    test, train = order[:n_test].sort().values, order[n_test:].sort().values
    if set(CRITEO_DENSE) | set(CRITEO_SPARSE) <= set(data.features.columns):
        dense, sparse, vocab = encode_criteo(data, min_count=min_count)
        dense_names, sparse_names = tuple(CRITEO_DENSE), tuple(CRITEO_SPARSE)
    else:
        dense, sparse, vocab, dense_names, sparse_names = encode_generic(data, train_rows=train.numpy(),
                                                                         min_count=min_count)
    if max(vocab, default=0) > _FLOAT32_EXACT:
        raise ConfigError(f"a vocabulary of {max(vocab)} categories has codes that float32 cannot "
                          "hold exactly; raise min_count")
    x = torch.cat([dense, sparse.float()], dim=1)
    y = torch.tensor(data.target.to_numpy(copy=True), dtype=torch.long)
    return EncodedTable(x_train=x[train].contiguous(), x_test=x[test].contiguous(),
                        y_train=y[train], y_test=y[test],
                        feature_names=(*dense_names, *sparse_names), dense=dense_names,
                        vocab_sizes=dict(zip(sparse_names, vocab)), num_classes=data.num_classes)


def encode_generic(data: TabularData, *, train_rows: Any, min_count: int = 2
                   ) -> tuple[torch.Tensor, torch.Tensor, list[int], tuple[str, ...], tuple[str, ...]]:
    """Any table as model inputs: ``(dense, sparse, vocab_sizes, dense_names, sparse_names)``.

    Numeric columns (bools too) are standardised with the mean and standard deviation of the
    ``train_rows`` (so the test rows leak nothing into the scaling; a constant column is only
    centred) and a missing value becomes 0, the mean. Categorical columns, those named in
    ``data.categorical`` and every non-numeric column, become codes as Criteo's do: 0 for a
    missing or rare (fewer than ``min_count``) category, 1..V-1 for the others in sorted order,
    counted over all rows (counts, never labels). Columns keep the table's order within each kind.
    """
    if min_count < 1:
        raise ConfigError(f"min_count must be >= 1, got {min_count}")
    df = data.features
    if df.shape[1] == 0:
        raise ConfigError(f"{data.name}: the table has no feature columns")
    categorical = [c for c in df.columns
                   if c in data.categorical or not (pd.api.types.is_numeric_dtype(df[c])
                                                    or pd.api.types.is_bool_dtype(df[c]))]
    numeric = [c for c in df.columns if c not in categorical]
    x = df[numeric].to_numpy(dtype=np.float64) if numeric else np.zeros((len(df), 0))
    with np.errstate(all="ignore"):
        fit = x[train_rows]
        mean = np.nan_to_num(np.nanmean(fit, axis=0)) if len(fit) else np.zeros(x.shape[1])
        std = np.nanstd(fit, axis=0) if len(fit) else np.ones(x.shape[1])
    std = np.where(np.isfinite(std) & (std > 0), std, 1.0)
    dense = np.nan_to_num((x - mean) / std, nan=0.0, posinf=0.0, neginf=0.0)
    sparse = np.zeros((len(df), len(categorical)), dtype=np.int64)
    vocab = []
    for j, col in enumerate(categorical):
        values = df[col].astype(str).where(df[col].notna(), "")
        counts = values[values != ""].value_counts()
        kept = sorted(counts.index[counts >= min_count])
        sparse[:, j] = pd.Index(kept).get_indexer(values) + 1  # -1 (missing, rare) -> 0
        vocab.append(len(kept) + 1)
    return (torch.from_numpy(dense.astype(np.float32)), torch.from_numpy(sparse), vocab,
            tuple(map(str, numeric)), tuple(map(str, categorical)))


def build_tabular_parties(config: Any, *, device: torch.device | str, channel: Channel,
                          data: TabularData | None = None, n_parts: int | None = None, split_seed: int = 0,
                          test_fraction: float = 0.2, min_count: int = 2) -> tuple[list[Party], int]:
    """Give each party its columns of the table ``data`` (default: ``config.dataset`` loaded);
    returns ``(parties, n_classes)`` like :func:`vflkit.training.split.build_parties`.

    ``config`` is a :class:`~vflkit.methods.base.RunConfig` or anything with ``dataset``,
    ``n_parties``, ``active``, ``seed``, ``n_train``, ``n_test`` (kept as a seeded subset of
    each split) and optionally ``feature_parts``. ``n_parts`` (default ``config.feature_parts``):
    Table VI's first C of ``n_parts`` fixed column groups (None: all columns over C parties).
    ``split_seed``, ``test_fraction``, ``min_count``: see :func:`encode_table`.
    """
    if data is None:
        data = load_dataset(config.dataset)
    if not hasattr(data, "target"):
        raise ConfigError(f"build_tabular_parties needs a tabular dataset; {config.dataset!r} is not one")
    table = encode_table(data, split_seed=split_seed, test_fraction=test_fraction, min_count=min_count)
    if n_parts is None:
        n_parts = getattr(config, "feature_parts", None)
    # consecutive column groups for C parties, or the first C of n_parts fixed groups (Table VI)
    if n_parts is None:
        groups = columns(table.feature_names, config.n_parties, active=config.active).slices
    else:
        groups = first_parts(config.n_parties, n_parts, feature_names=table.feature_names,
                             active=config.active).partition.slices
    device = torch.device(device)
    splits = {"train": (table.x_train, table.y_train), "test": (table.x_test, table.y_test)}
    if getattr(config, "partition", "strips_width") != "strips_width":  # RunConfig's default: not stored as a choice
        raise ConfigError(f"partition={config.partition!r} cuts images; {config.dataset!r} is a table, whose columns "
                          "are dealt to the parties in order: leave partition at its default (feature_parts picks "
                          "column groups)")
    for split, key in (("train", "n_train"), ("test", "n_test")):
        x, y = splits[split]
        k = getattr(config, key, None)
        if k is not None and k > len(y):  # never kept silently in the record while all rows train
            raise ConfigError(f"{config.dataset}: {key}={k} rows asked for, but the table's {split} split has "
                              f"{len(y)}; choose 1..{len(y)} or None for all")
        if k is not None and k < len(y):
            keep = draw_rows(len(y), k, config.seed, f"{config.dataset}: {key}={k} rows", " or None for all")
            splits[split] = (x[keep], y[keep])
    position = {name: i for i, name in enumerate(table.feature_names)}
    parties: list[Party] = []
    for k, group in enumerate(groups):
        held = table.party_columns(group)
        cols = torch.tensor([position[n] for n in held])
        party = Party("active" if k == config.active else f"passive_{k + (k < config.active)}", channel=channel,
                      features={s: x.index_select(1, cols).contiguous().to(device) for s, (x, _) in splits.items()},
                      labels={s: y.to(device) for s, (_, y) in splits.items()} if k == config.active else None,
                      device=device)
        party.columns = tuple(held)  # type: ignore[attr-defined]
        party.model_kwargs = table.model_kwargs(held)  # type: ignore[attr-defined]
        parties.append(party)
    return parties, table.num_classes


def model_kwargs(party: Party, architecture: str) -> dict[str, Any]:
    """The extra options ``architecture`` needs on ``party``'s columns (none for image models)."""
    if architecture not in TABULAR_MODELS:
        return {}
    kwargs = getattr(party, "model_kwargs", None)
    if kwargs is None:
        raise PartitionError(f"{party.name} holds no tabular columns, so it cannot run {architecture!r}; "
                             "build its party with build_tabular_parties")
    return dict(kwargs)
