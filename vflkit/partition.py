"""Vertical partitions of features, sample alignment between parties, and label owners.

A :class:`Partition` says which features each party holds and which party is the *active*
party (the one with the labels): image strips along the width or height (VFedMH/EASTER:
4 parties on 28x7 MNIST strips, C = 2..10; Multi-VFL: 4 data owners on 7x28 strips), a grid of
equal tiles (AdptVFedConv: 2x2 tiles of 16x16 on 32x32 CIFAR), or groups of tabular columns
(APC-VFL). :class:`Alignment` says which samples each party holds (APC-VFL's partially aligned
samples); :func:`label_owner_split` gives Multi-VFL's label owners their samples (Table 3).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import accumulate
from typing import Any

import torch

from .errors import PartitionError

KINDS = ("strips", "grid", "columns")
AXES = ("width", "height")

# --------------------------------------------------------------------------- Partition


@dataclass(frozen=True)
class Partition:
    """Which features each party holds; party ``active`` also holds the labels. Build it with
    :func:`strips`, :func:`grid`, :func:`columns` or :func:`apc_vfl_partition` (the constructor
    checks every field either way).

    ``slices``: per party, a ``(start, stop)`` pixel range along ``axis`` (strips), ``((top,
    bottom), (left, right))`` (grid tiles, row-major), or a tuple of column names (columns, whose
    ``feature_names`` are every column of a full sample). ``input_shape``: one full sample,
    ``(C, H, W)`` or ``(F,)``.
    """

    kind: str
    slices: tuple[Any, ...]
    input_shape: tuple[int, ...]
    active: int = 0
    axis: str | None = None
    feature_names: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise PartitionError(f"Invalid partition kind {self.kind!r}; choose one of {', '.join(KINDS)}")
        if len(self.slices) < 1:
            raise PartitionError("a partition needs at least one party")
        _check_active(self.active, len(self.slices))
        if self.kind == "columns":
            self._check_columns()
        else:
            self._check_image()

    def _check_image(self) -> None:
        if len(self.input_shape) != 3 or any(int(s) < 1 for s in self.input_shape):
            raise PartitionError("image partitions need image_shape (C, H, W) of positive sizes, got "
                                 f"{self.input_shape}; for a grey image use (1, H, W)")
        _, height, width = self.input_shape
        if self.kind == "strips":
            if self.axis not in AXES:
                raise PartitionError(f"Invalid strip axis {self.axis!r}; choose one of {', '.join(AXES)}")
            length = width if self.axis == "width" else height
            _check_cover([tuple(s) for s in self.slices], length, self.axis)
        else:
            rows = sorted({tuple(s[0]) for s in self.slices})
            cols = sorted({tuple(s[1]) for s in self.slices})
            _check_cover(rows, height, "height")
            _check_cover(cols, width, "width")
            expected = tuple((r, c) for r in rows for c in cols)
            if tuple((tuple(s[0]), tuple(s[1])) for s in self.slices) != expected:
                raise PartitionError("grid tiles must cover the image once each, in row-major order")

    def _check_columns(self) -> None:
        names = self.feature_names
        if self.input_shape != (len(names),):
            raise PartitionError(f"input_shape {self.input_shape} does not match {len(names)} feature names")
        twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
        if twice is not None:
            raise PartitionError(f"feature name {twice!r} appears twice in feature_names; names must be unique")
        seen = set(names)
        owner: dict[str, int] = {}
        for k, group in enumerate(self.slices):
            if len(group) == 0:
                raise PartitionError(f"party {k} holds no features; every party needs at least one column")
            unknown = [g for g in group if g not in seen]
            if unknown:
                raise PartitionError(f"unknown column names {unknown} for party {k}; valid names: {', '.join(names)}")
            for name in group:
                if name in owner:
                    where = "twice" if owner[name] == k else f"by parties {owner[name]} and {k}"
                    raise PartitionError(f"feature {name!r} is held {where}; vertical partitions must not overlap")
                owner[name] = k
        missing = [n for n in names if n not in owner]
        if missing:
            raise PartitionError(f"features {missing} are held by no party; assign every column to one party "
                                 "(or drop it from feature_names)")

    @property
    def n_parties(self) -> int:
        """Number of parties, active included."""
        return len(self.slices)

    @property
    def passive(self) -> list[int]:
        return [k for k in range(self.n_parties) if k != self.active]

    @property
    def grid_shape(self) -> tuple[int, int]:
        """(rows, cols) of a grid partition; strips are (1, C) for width and (C, 1) for height."""
        if self.kind == "grid":
            return len({tuple(s[0]) for s in self.slices}), len({tuple(s[1]) for s in self.slices})
        if self.kind == "strips":
            return (1, self.n_parties) if self.axis == "width" else (self.n_parties, 1)
        raise PartitionError("a column partition has no grid shape")

    @cached_property
    def _positions(self) -> tuple[tuple[int, ...], ...]:
        index = {name: i for i, name in enumerate(self.feature_names)}
        return tuple(tuple(index[name] for name in group) for group in self.slices)

    def _check_party(self, k: int) -> None:
        if not isinstance(k, int) or not 0 <= k < self.n_parties:
            raise PartitionError(f"party index {k!r} is out of range; use 0..{self.n_parties - 1}")

    def party_shape(self, k: int) -> tuple[int, ...]:
        """Shape of one sample as party ``k`` holds it: ``(C, h, w)`` or ``(n_cols,)``."""
        self._check_party(k)
        if self.kind == "columns":
            return (len(self.slices[k]),)
        channels, height, width = self.input_shape
        if self.kind == "strips":
            start, stop = self.slices[k]
            if self.axis == "width":
                return (channels, height, stop - start)
            return (channels, stop - start, width)
        (top, bottom), (left, right) = self.slices[k]
        return (channels, bottom - top, right - left)

    def _check_input(self, x: torch.Tensor) -> None:
        n = len(self.input_shape)
        if not isinstance(x, torch.Tensor):
            raise PartitionError(f"split needs a torch.Tensor, got {type(x).__name__}; use split_frame for DataFrames")
        if x.dim() < n or tuple(x.shape[-n:]) != tuple(self.input_shape):
            raise PartitionError(f"expected samples of shape {tuple(self.input_shape)} (with leading batch dims), "
                                 f"got a tensor of shape {tuple(x.shape)}")

    def split(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Cut ``x`` (``[N, C, H, W]`` or ``[N, F]``, any leading dims) into one tensor per party.

        Strips, tiles and contiguous column groups are views of ``x`` (no copy); a column
        group that is not a contiguous run of columns is gathered into a new tensor.
        """
        self._check_input(x)
        if self.kind == "strips":
            dim = -1 if self.axis == "width" else -2
            return [x.narrow(dim, start, stop - start) for start, stop in self.slices]
        if self.kind == "grid":
            return [x[..., top:bottom, left:right] for (top, bottom), (left, right) in self.slices]
        return [x.narrow(-1, pos[0], len(pos)) if pos == tuple(range(pos[0], pos[0] + len(pos)))
                else x.index_select(-1, torch.tensor(pos, device=x.device)) for pos in self._positions]

    def split_frame(self, df: Any) -> list[Any]:
        """Cut a pandas DataFrame into one DataFrame per party by column name (columns only).

        Columns of ``df`` that no party holds (an ID or the label) are left out.
        """
        if self.kind != "columns":
            raise PartitionError(f"split_frame needs a column partition; this one is {self.kind!r}, use split")
        missing = [n for n in self.feature_names if n not in df.columns]
        if missing:
            raise PartitionError(f"the DataFrame lacks columns {missing} that the partition assigns")
        return [df.loc[:, list(group)] for group in self.slices]

    def assemble(self, parts: Sequence[torch.Tensor]) -> torch.Tensor:
        """Put per-party tensors back together: the inverse of :meth:`split`.

        For strips and grids the parts are concatenated in their spatial arrangement, so they
        may be feature maps of any size (AdptVFedConv's server stitches its clients' maps)
        as long as neighbours agree on their shared side. For columns each part must have its
        group's number of columns; they are put back in ``feature_names`` order.
        """
        parts = list(parts)
        if len(parts) != self.n_parties:
            raise PartitionError(f"assemble needs {self.n_parties} parts, one per party, got {len(parts)}")
        try:
            if self.kind == "columns":
                for k, (part, group) in enumerate(zip(parts, self.slices)):
                    if part.shape[-1] != len(group):
                        raise PartitionError(f"party {k}'s part has {part.shape[-1]} columns, its group has "
                                             f"{len(group)}")
                out = parts[0].new_empty((*parts[0].shape[:-1], len(self.feature_names)))
                for part, pos in zip(parts, self._positions):
                    out[..., list(pos)] = part
                return out
            rows, cols = self.grid_shape
            bands = [torch.cat(parts[r * cols:(r + 1) * cols], dim=-1) for r in range(rows)]
            return torch.cat(bands, dim=-2)
        except RuntimeError as exc:
            shapes = [tuple(p.shape) for p in parts]
            raise PartitionError(f"the parts do not fit together ({shapes}): {exc}") from exc

    def describe(self) -> dict[str, Any]:
        """A plain, JSON-able description for run records."""
        parties = []
        for k, s in enumerate(self.slices):
            if self.kind == "strips":
                holds: Any = {self.axis: list(s)}
            elif self.kind == "grid":
                holds = {"height": list(s[0]), "width": list(s[1])}
            else:
                holds = list(s)
            parties.append({"index": k, "role": "active" if k == self.active else "passive",
                            "shape": list(self.party_shape(k)), "holds": holds})
        out: dict[str, Any] = {"kind": self.kind, "n_parties": self.n_parties, "active": self.active,
                               "input_shape": list(self.input_shape), "parties": parties}
        if self.axis is not None:
            out["axis"] = self.axis
        return out


def _check_active(active: int, n_parties: int) -> None:
    if not isinstance(active, int) or isinstance(active, bool) or not 0 <= active < n_parties:
        raise PartitionError(f"active party index {active!r} is out of range for {n_parties} parties; use "
                             f"0..{n_parties - 1}")


def _check_cover(ranges: list[tuple[int, int]], length: int, what: str) -> None:
    """Ranges must be non-empty, in order, and cover 0..length exactly once."""
    pos = 0
    for start, stop in ranges:
        if start != pos or stop <= start:
            raise PartitionError(f"pixel ranges {ranges} along the {what} must be non-empty, in order "
                                 f"and cover 0..{length} once")
        pos = stop
    if pos != length:
        raise PartitionError(f"pixel ranges {ranges} along the {what} do not cover all {length} pixels")


def _positive(what: str, n: Any) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise PartitionError(f"{what} must be a positive integer, got {n!r}")


def _even_bounds(length: int, n: int, what: str) -> list[tuple[int, int]]:
    """torch.tensor_split sizes: the first ``length % n`` pieces are one longer."""
    _positive("the number of parties", n)
    if n > length:
        raise PartitionError(f"cannot cut {length} {what} into {n} parties: each party needs at least one; "
                             f"use at most {length} parties")
    return [(int(p[0]), int(p[-1]) + 1) for p in torch.arange(length).tensor_split(n)]


def _too_many(n_parties: int, n_columns: int) -> str:
    return f"{n_parties} parties but only {n_columns} columns; use at most {n_columns} parties"


def _image_shape(image_shape: Sequence[int]) -> tuple[int, int, int]:
    shape = tuple(int(s) for s in image_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise PartitionError(f"image_shape must be (C, H, W) of positive sizes, got {tuple(image_shape)}; "
                             "for a grey image use (1, H, W)")
    return shape  # type: ignore[return-value]


def _axis_length(shape: tuple[int, int, int], axis: str) -> int:
    """The length of ``shape``'s (C, H, W) image axis that strips cut."""
    if axis not in AXES:
        raise PartitionError(f"Invalid strip axis {axis!r}; choose one of {', '.join(AXES)}")
    return shape[2] if axis == "width" else shape[1]


def strips(n_parties: int, *, image_shape: Sequence[int], axis: str = "width", active: int = 0) -> Partition:
    """Cut ``(C, H, W)`` images into ``n_parties`` strips along the width (all rows, a band of
    columns: MNIST into 4 gives VFedMH/EASTER's 28x7 strips) or the height (7x28, Multi-VFL);
    strip 0 is the leftmost / top one. A length that does not divide follows
    ``torch.tensor_split``: the first ``L % n`` strips are one pixel wider (28 into 3: 10, 9, 9;
    28 into 10: eight of 3, then two of 2)."""
    shape = _image_shape(image_shape)
    bounds = _even_bounds(_axis_length(shape, axis), n_parties, f"pixels of {axis}")
    return Partition("strips", tuple(bounds), shape, active=active, axis=axis)


def grid(rows: int, cols: int, *, image_shape: Sequence[int], active: int = 0) -> Partition:
    """Cut images into a ``rows`` x ``cols`` grid of equal tiles, one per party, row-major.

    AdptVFedConv: ``grid(2, 2, image_shape=(3, 32, 32))`` gives 4 tiles of 3x16x16 (party 0
    top-left, 1 top-right, 2 bottom-left, 3 bottom-right). The paper's tiles are all "the same
    size", so the grid must divide the image exactly.
    """
    shape = _image_shape(image_shape)
    _, height, width = shape
    _positive("grid rows", rows)
    _positive("grid cols", cols)
    if height % rows or width % cols:
        raise PartitionError(f"a {rows}x{cols} grid does not divide a {height}x{width} image into equal tiles: "
                             f"the height must be a multiple of {rows} and the width a multiple of {cols}")
    th, tw = height // rows, width // cols
    tiles = tuple(((r * th, (r + 1) * th), (c * tw, (c + 1) * tw)) for r in range(rows) for c in range(cols))
    return Partition("grid", tiles, shape, active=active)


def columns(feature_names: Sequence[str], groups: Sequence[Sequence[str]] | Sequence[int] | int, *,
            active: int = 0) -> Partition:
    """Give each party a group of the tabular columns ``feature_names`` (every feature column of
    a full sample, in order; no ID or label). ``groups``: one name list per party (every feature
    once, no overlap), one count per party (the next columns in order), or a number of parties C
    (consecutive columns, sizes as in :func:`strips`)."""
    if isinstance(feature_names, str):
        raise PartitionError("feature_names must be a sequence of column names, not one string")
    names = tuple(str(n) for n in feature_names)
    if len(names) == 0:
        raise PartitionError("feature_names is empty; a column partition needs at least one column")
    if isinstance(groups, int) and not isinstance(groups, bool):
        bounds = _even_bounds(len(names), groups, "columns")
        slices = tuple(names[a:b] for a, b in bounds)
    elif isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence) or len(groups) == 0:
        raise PartitionError("groups must be a non-empty list of column-name lists or of counts, or a number of "
                             f"parties; got {groups!r}")
    elif all(isinstance(g, int) and not isinstance(g, bool) for g in groups):
        counts = list(groups)  # type: ignore[arg-type]
        if len(counts) > len(names):
            raise PartitionError(_too_many(len(counts), len(names)))
        if min(counts) < 1:
            raise PartitionError(f"column counts {counts} must all be at least 1")
        if sum(counts) != len(names):
            raise PartitionError(f"column counts {counts} sum to {sum(counts)}, but there are {len(names)} columns")
        slices = tuple(names[end - c:end] for c, end in zip(counts, accumulate(counts)))
    elif all(isinstance(g, Sequence) and not isinstance(g, (str, bytes)) for g in groups):
        if len(groups) > len(names):
            raise PartitionError(_too_many(len(groups), len(names)))
        slices = tuple(tuple(str(n) for n in g) for g in groups)  # type: ignore[union-attr]
    else:
        raise PartitionError("groups mixes types: give either one list of column names per party or one count per "
                             "party (a single name must be written as a list, e.g. [['age'], ['income']])")
    return Partition("columns", slices, (len(names),), active=active, feature_names=names)


# --------------------------------------------------------------------------- EASTER Table VI: the first C of 10 parts


@dataclass(frozen=True)
class PartsPartition:
    """C parties holding the first C of ``n_parts`` fixed feature parts (EASTER Table VI).

    EASTER Sec. V-D: the features are "split ... into 10 equal parts, with each client having
    one part". Read with Table VI (accuracy rises with C; C = 4 sits far below Table II's C = 4,
    which uses every feature), the parts are fixed and C parties hold the first C of them; the
    features of parts C+1..10 take part in no run. :attr:`partition` is an ordinary
    :class:`Partition` over the kept features only (the cropped image, or the kept names).
    """

    partition: Partition
    n_parts: int
    full_shape: tuple[int, ...]
    full_names: tuple[str, ...] = ()

    @property
    def n_parties(self) -> int:
        """C, the number of parts held (one per party)."""
        return self.partition.n_parties

    @property
    def active(self) -> int:
        return self.partition.active

    @property
    def kept(self) -> int:
        """Pixels along the cut axis (strips) or columns (tables) that the C parties hold."""
        p = self.partition
        if p.kind == "columns":
            return len(p.feature_names)
        return p.input_shape[2] if p.axis == "width" else p.input_shape[1]

    def select(self, x: torch.Tensor) -> torch.Tensor:
        """The kept features of ``x`` (``[..., C, H, W]`` or ``[..., F]``): a view, no copy."""
        n = len(self.full_shape)
        if not isinstance(x, torch.Tensor) or x.dim() < n or tuple(x.shape[-n:]) != self.full_shape:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise PartitionError(f"expected samples of shape {self.full_shape}, got {shape}")
        if self.partition.kind == "columns":
            return x.narrow(-1, 0, self.kept)
        return x.narrow(-1 if self.partition.axis == "width" else -2, 0, self.kept)

    def split(self, x: torch.Tensor) -> list[torch.Tensor]:
        """One tensor per party: the first C parts of ``x``."""
        return self.partition.split(self.select(x))

    def describe(self) -> dict[str, Any]:
        """The kept partition's description plus the parts it was taken from."""
        return {**self.partition.describe(), "n_parts": self.n_parts, "full_shape": list(self.full_shape),
                "kept": self.kept}


def first_parts(n_parties: int, n_parts: int = 10, *, image_shape: Sequence[int] | None = None,
                feature_names: Sequence[str] | None = None, axis: str = "width", active: int = 0) -> PartsPartition:
    """Cut the features into ``n_parts`` fixed parts and give party k part k, for k < C.

    Give either ``image_shape`` (strips along ``axis``: 32 px into 10 -> 4, 4, 3, ..., 3; 28
    into 10 -> eight of 3, then two of 2) or ``feature_names`` (consecutive column groups,
    sizes as :func:`columns` with an int: Criteo's 39 into 10 -> nine of 4, then 3). Parts
    keep their size whatever C is, so adding a party adds features and never reshuffles them
    (EASTER Table VI). With C = ``n_parts`` every feature is held, as :func:`strips` /
    :func:`columns` would give.
    """
    if (image_shape is None) == (feature_names is None):
        raise PartitionError("give exactly one of image_shape= (images) or feature_names= (tables)")
    _positive("the number of parties", n_parties)
    if isinstance(n_parts, bool) or not isinstance(n_parts, int) or n_parties > n_parts:
        raise PartitionError(f"{n_parties} parties but only {n_parts} parts: C parties hold the first C parts, so "
                             f"C <= n_parts")
    if image_shape is not None:
        shape = _image_shape(image_shape)
        bounds = _even_bounds(_axis_length(shape, axis), n_parts, f"pixels of {axis}")[:n_parties]
        stop = bounds[-1][1]
        kept_shape = (shape[0], shape[1], stop) if axis == "width" else (shape[0], stop, shape[2])
        inner = Partition("strips", tuple(bounds), kept_shape, active=active, axis=axis)
        return PartsPartition(inner, n_parts, shape)
    if isinstance(feature_names, str):
        raise PartitionError("feature_names must be a sequence of column names, not one string")
    names = tuple(str(n) for n in feature_names)
    bounds = _even_bounds(len(names), n_parts, "columns")[:n_parties]
    kept = names[:bounds[-1][1]]
    inner = columns(kept, [b - a for a, b in bounds], active=active)
    return PartsPartition(inner, n_parts, (len(names),), names)


# --------------------------------------------------------------------------- APC-VFL feature partitions (Appendix A)

# Appendix A, per dataset: (the five features "initially assigned to the active participant",
# the "transfer order"). Names as the paper writes them; APC_VFL_ALIASES maps them to the
# column names of the common copies of each dataset.
APC_VFL_FEATURES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "breast_cancer": (
        ("worst compactness", "concave points error", "smoothness error", "mean texture",
         "worst fractal dimension"),
        ("worst compactness", "concave points error", "smoothness error"),
    ),
    "credit_card": (("X3", "X5", "X7", "X9", "X11"), ("X3", "X5", "X7")),
    # The paper prints "NumCalouts"; the MIMIC-III length-of-stay table calls it NumCallouts.
    "mimic3": (
        ("Age", "NumCallouts", "NumDiagnosis", "NumProcs", "NumCPTevents"),
        ("NumCPTevents", "NumProcs", "Age"),
    ),
}

# The paper's names for UCI Credit Card are those of the original UCI file (X1..X23); the
# widely used CSV (Kaggle "UCI_Credit_Card.csv") names them: X3 EDUCATION, X5 AGE,
# X6..X11 the repayment status of September..April = PAY_0, PAY_2, ..., PAY_6.
APC_VFL_ALIASES: dict[str, tuple[str, ...]] = {
    "X3": ("X3", "EDUCATION"),
    "X5": ("X5", "AGE"),
    "X7": ("X7", "PAY_2"),
    "X9": ("X9", "PAY_4"),
    "X11": ("X11", "PAY_6"),
    "NumCallouts": ("NumCallouts", "NumCalouts"),
}

_APC_DATASET_ALIASES = {
    "breastcancer": "breast_cancer", "breastcancerwisconsin": "breast_cancer", "bcw": "breast_cancer",
    "creditcard": "credit_card", "ucicreditcard": "credit_card",
    "mimic3": "mimic3", "mimiciii": "mimic3", "mimic": "mimic3",
}

APC_VFL_N_ACTIVE = (2, 3, 4, 5)  # Table 3: a in {2, 3, 4, 5}


def apc_vfl_active_features(dataset: str, n_active_features: int) -> tuple[str, ...]:
    """The features (paper names) APC-VFL's active participant holds with ``n_active_features``.

    Appendix A lists five features as the initial active set and says that, "to simulate
    scenarios where the active participant has less features", some of them are moved
    between the participants "in the following order: <t1>, <t2>, <t3>". The sentence's words
    "eliminating them from the passive party's dataset and transferring to the active one"
    cannot produce an active participant with *fewer* features, so we read them as swapped:
    the listed features leave the active participant for the passive one in that order. With
    ``n`` active features the active participant holds the initial set minus the first
    ``5 - n`` features of the order. Breast Cancer: 5 = the initial set; 4 drops worst
    compactness; 3 also concave points error; 2 also smoothness error, leaving {mean texture,
    worst fractal dimension}. Credit Card: 4 drops X3, 3 also X5, 2 also X7 (leaves X9, X11).
    MIMIC-III: 4 drops NumCPTevents, 3 also NumProcs, 2 also Age.
    """
    key = _APC_DATASET_ALIASES.get(re.sub(r"[^a-z0-9]", "", str(dataset).lower()))
    if key is None:
        raise PartitionError(f"Invalid APC-VFL dataset {dataset!r}; choose one of {', '.join(APC_VFL_FEATURES)}")
    if n_active_features not in APC_VFL_N_ACTIVE:
        raise PartitionError(f"APC-VFL's active participant holds 2, 3, 4 or 5 features (Appendix A, Table 3); "
                             f"got n_active_features={n_active_features!r}")
    initial, order = APC_VFL_FEATURES[key]
    moved = set(order[: len(initial) - n_active_features])
    return tuple(f for f in initial if f not in moved)


def apc_vfl_partition(dataset: str, n_active_features: int, feature_names: Sequence[str]) -> Partition:
    """APC-VFL's two-participant column partition (Appendix A) of ``feature_names`` (the
    dataset's feature columns, no ID, no label): participant 0 is active and holds
    :func:`apc_vfl_active_features` (matched through :data:`APC_VFL_ALIASES`, e.g. X3 ->
    EDUCATION), participant 1 every other column, both in the order of ``feature_names``."""
    names = [str(n) for n in feature_names]
    lookup = {n.lower(): n for n in names}
    chosen = set()
    for feature in apc_vfl_active_features(dataset, n_active_features):
        candidates = APC_VFL_ALIASES.get(feature, (feature,))
        found = next((lookup[c.lower()] for c in candidates if c.lower() in lookup), None)
        if found is None:
            raise PartitionError(f"APC-VFL's active participant needs feature {feature!r} (looked for "
                                 f"{list(candidates)}), which is not among the given columns: {', '.join(names)}")
        chosen.add(found)
    active_cols = [n for n in names if n in chosen]
    passive_cols = [n for n in names if n not in chosen]
    if not passive_cols:
        raise PartitionError("the passive participant would hold no features; pass the dataset's full feature list")
    return columns(names, [active_cols, passive_cols], active=0)


# --------------------------------------------------------------------------- sample alignment


def _as_ids(ids: Any, what: str) -> torch.Tensor:
    t = torch.as_tensor(ids)
    if t.dim() != 1 or (t.numel() and (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool)):
        raise PartitionError(f"{what} must be a 1-D tensor of integer sample ids, got {t.dtype} of shape "
                             f"{tuple(t.shape)}")
    t = t.to(torch.int64)
    uniq = torch.unique(t)
    if uniq.numel() != t.numel():
        dup = [int(v) for v, c in zip(*torch.unique(t, return_counts=True)) if c > 1][:5]
        raise PartitionError(f"{what} lists some ids more than once (e.g. {dup}); each sample id must be unique")
    return t


def sample_ids(ids: Any, what: str) -> torch.Tensor:
    """``ids`` as an int64 tensor of sample ids, checked: 1-D, integer, non-negative, unique.

    Sample ids index a dataset's rows, so a negative id could only ever address a row from the
    end (silently the wrong sample) and a repeated id would make an id lookup ambiguous.
    """
    t = _as_ids(ids, what)
    if t.numel() and int(t.min()) < 0:
        bad = t[t < 0][:5].tolist()
        raise PartitionError(f"{what} holds negative sample ids (e.g. {bad}); sample ids are row numbers >= 0 "
                             "of the dataset")
    return t


def intersect_ids(*id_sets: Any) -> torch.Tensor:
    """The ids every party holds (what a private set intersection would give), sorted int64."""
    if not id_sets:
        raise PartitionError("intersect_ids needs at least one set of ids")
    sets = [_as_ids(ids, f"party {k}'s ids") for k, ids in enumerate(id_sets)]
    common = torch.sort(sets[0]).values
    for other in sets[1:]:
        common = common[torch.isin(common, other)]
    return common


def check_aligned(*id_sets: Any) -> None:
    """Raise :class:`PartitionError` unless every party holds the same ids in the same row order.

    Methods that need full alignment (SplitNN, VFedMH, ...) pair row i of every party, so the
    ids must match element by element, not just as sets.
    """
    if not id_sets:
        raise PartitionError("check_aligned needs at least one set of ids")
    sets = [_as_ids(ids, f"party {k}'s ids") for k, ids in enumerate(id_sets)]
    first = sets[0]
    for k, other in enumerate(sets[1:], start=1):
        if other.numel() == first.numel() and torch.equal(other, first):
            continue
        extra = other[~torch.isin(other, first)]
        lacking = first[~torch.isin(first, other)]
        if extra.numel() == 0 and lacking.numel() == 0:
            raise PartitionError(f"party {k} holds the same ids as party 0 but in a different row order; "
                                 "sort every party's rows by id before training")
        raise PartitionError(f"party {k}'s ids do not match party 0's: {extra.numel()} ids only at party {k} "
                             f"(e.g. {extra[:5].tolist()}), {lacking.numel()} ids missing there "
                             f"(e.g. {lacking[:5].tolist()}); "
                             "this method needs fully aligned samples: restrict every party to intersect_ids(...)")


@dataclass(frozen=True, eq=False)
class Alignment:
    """Which samples the active and the passive participant hold (sorted int64 dataset ids).

    ``aligned_ids`` is their intersection, the result of the PSI that APC-VFL assumes; every
    other id a participant holds is one of its unaligned samples.
    """

    active_ids: torch.Tensor
    passive_ids: torch.Tensor
    aligned_ids: torch.Tensor

    def __post_init__(self) -> None:
        for name in ("active_ids", "passive_ids", "aligned_ids"):
            ids = _as_ids(getattr(self, name), name)
            if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
                raise PartitionError(f"{name} must be sorted in increasing order (use torch.sort)")
            object.__setattr__(self, name, ids)
        if not torch.equal(intersect_ids(self.active_ids, self.passive_ids), self.aligned_ids):
            raise PartitionError("aligned_ids must be exactly the ids both the active and the passive participant hold")

    @property
    def n_aligned(self) -> int:
        """|D_A|."""
        return int(self.aligned_ids.numel())

    def describe(self) -> dict[str, int]:
        """Counts for run records."""
        return {"n_active": int(self.active_ids.numel()), "n_passive": int(self.passive_ids.numel()),
                "n_aligned": self.n_aligned}


def partial_alignment(n_total: int, *, n_active: int, n_aligned: int, n_passive: int | None = None,
                      seed: int = 0) -> Alignment:
    """Draw APC-VFL's partially aligned samples from a pool of ids ``0 .. n_total - 1`` (the
    dataset, after any reduction such as Credit Card's 20000).

    The active participant holds ``n_active`` random ids (Breast Cancer: 500 of 569); a random
    ``n_aligned`` of them (|D_A| >= 1, as APC-VFL requires) are also held by the passive
    participant, which holds ``n_passive`` in all: unaligned samples of its own too (Fig. 2; its
    autoencoder trains on all its local data), drawn from the ids the active participant lacks.
    The paper does not give the passive side's size; the default None (the aligned ones plus
    *every* id the active participant lacks) needs no extra number and fits the Breast Cancer
    setup. For a fixed ``seed`` and ``n_active`` the active ids are the same for every
    ``n_aligned`` and the aligned sets nest, so scenarios differ only in alignment, as in the
    paper's sweep.
    """
    for name, value in (("n_total", n_total), ("n_active", n_active), ("n_aligned", n_aligned)):
        _positive(name, value)
    if n_active > n_total:
        raise PartitionError(f"n_active={n_active} exceeds the pool of n_total={n_total} samples")
    if n_aligned > n_active:
        raise PartitionError(f"n_aligned={n_aligned} exceeds n_active={n_active}: "
                             "aligned samples are a subset of the active participant's")
    rest = n_total - n_active
    if n_passive is None:
        n_passive = n_aligned + rest
    elif not isinstance(n_passive, int) or isinstance(n_passive, bool) or n_passive < n_aligned:
        raise PartitionError(f"n_passive={n_passive!r} must be an integer of at least n_aligned={n_aligned}")
    elif n_passive - n_aligned > rest:
        raise PartitionError(f"n_passive={n_passive} needs {n_passive - n_aligned} unaligned samples, but only {rest} "
                             f"ids are not held by the active participant (n_total={n_total}, n_active={n_active})")
    perm = torch.randperm(n_total, generator=torch.Generator().manual_seed(seed))
    active = perm[:n_active]
    aligned = active[:n_aligned]
    passive = torch.cat([aligned, perm[n_active:n_active + n_passive - n_aligned]])
    return Alignment(torch.sort(active).values, torch.sort(passive).values, torch.sort(aligned).values)


# --------------------------------------------------------------------------- label owners (Multi-VFL)

_ALL = tuple(range(10))
# Multi-VFL Table 3: labels each of the 5 label owners sees; 0-9 = an IID owner.
NIID_SCENARIOS: dict[str, tuple[tuple[int, ...], ...]] = {
    "1niid": (_ALL, _ALL, _ALL, _ALL, (0, 1)),
    "2niid": (_ALL, _ALL, _ALL, (0, 1), (2, 3)),
    "3niid": (_ALL, _ALL, (0, 1), (2, 3), (4, 5)),
    "4niid": (_ALL, (0, 1), (2, 3), (4, 5), (6, 7)),
}
LABEL_SCENARIOS = ("iid", *NIID_SCENARIOS)


def label_owner_split(labels: torch.Tensor, *, scenario: str = "1niid", n_owners: int = 5,
                      samples_per_owner: int = 5000, seed: int = 0, disjoint: bool = True) -> list[torch.Tensor]:
    """Each label owner's sorted sample indices into the training pool ``labels`` (Multi-VFL,
    Table 3's order): an IID owner draws uniformly from the whole pool, a non-IID owner from
    the samples of its two labels. ``scenario`` "iid" makes every owner IID; the niid ones are
    Table 3 exactly (5 owners). ``disjoint``: no sample goes to two owners; the paper does not
    say, and disjoint owners are the usual federated setting (False: independent draws).
    """
    if scenario not in LABEL_SCENARIOS:
        raise PartitionError(f"Invalid label-owner scenario {scenario!r}; choose one of {', '.join(LABEL_SCENARIOS)}")
    _positive("n_owners", n_owners)
    _positive("samples_per_owner", samples_per_owner)
    if scenario != "iid" and n_owners != 5:
        raise PartitionError(f"scenario {scenario!r} is Multi-VFL's Table 3 with 5 label owners; got "
                             f"n_owners={n_owners}")
    label_sets: list[tuple[int, ...] | None] = ([None] * n_owners if scenario == "iid" else
                                                [None if s == _ALL else s for s in NIID_SCENARIOS[scenario]])
    y = torch.as_tensor(labels)
    if y.dim() != 1 or y.is_floating_point():
        raise PartitionError(f"labels must be a 1-D integer tensor, got {y.dtype} of shape {tuple(y.shape)}")
    present = set(torch.unique(y).tolist())
    for s in label_sets:
        for label in s or ():
            if label not in present:
                raise PartitionError(f"scenario {scenario!r} needs samples of label {label}, but labels has none")

    g = torch.Generator().manual_seed(seed)
    free = torch.ones(y.numel(), dtype=torch.bool)
    chosen: list[torch.Tensor | None] = [None] * n_owners
    # IID owners draw first so that, with disjoint owners, they see the pool's true class mix;
    # the non-IID owners then take their two labels from what is left.
    order = sorted(range(n_owners), key=lambda k: label_sets[k] is not None)
    for k in order:
        s = label_sets[k]
        mask = free.clone() if disjoint else torch.ones_like(free)
        if s is not None:
            mask &= torch.isin(y, torch.tensor(s, dtype=y.dtype))
        candidates = mask.nonzero().flatten()
        if candidates.numel() < samples_per_owner:
            what = "samples" if s is None else f"samples of labels {set(s)}"
            left = " left after the other owners took theirs" if disjoint else ""
            raise PartitionError(
                f"label owner {k + 1} needs {samples_per_owner} {what}, but only {candidates.numel()} are"
                f"{left} in a pool of {y.numel()}; lower samples_per_owner"
                + (" or set disjoint=False" if disjoint else "")
            )
        pick = candidates[torch.randperm(candidates.numel(), generator=g)[:samples_per_owner]]
        free[pick] = False
        chosen[k] = torch.sort(pick).values
    return [c for c in chosen if c is not None]
