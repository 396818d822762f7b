"""Datasets of the five papers, loaded whole into tensors (images) or DataFrames (tables).

One entry point, :func:`load_dataset`, reads from one data root (``root=``, else
:func:`vflkit.config.data_root`: ``$VFLKIT_DATA``, else ``./data``); the layout it reads, and
what ``verify=True`` checks of each dataset, are in ``docs/data-and-models.md``. Images are
kept as ``uint8`` tensors ``[N, C, H, W]`` and normalised on the way to the device
(:meth:`ImageData.normalize`); PNG trees are decoded once and cached under
:func:`vflkit.config.cache_dir` (the data root may be read-only), with a digest of the tensors
(an altered cache is decoded again). A missing dataset raises :class:`DatasetNotFoundError`
(what is missing and how to provide it), a wrong one :class:`DatasetCorruptError`.
``verify=False`` (test fixtures, modified copies) skips the checksums and expected counts only,
and warns that the result is not the published dataset.
"""

from __future__ import annotations

import gzip
import hashlib
import inspect
import io
import numbers
import os
import pickle
import warnings
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd
import torch
import torchvision
from tqdm.auto import tqdm

from .config import DATA_ENV, data_root, cache_dir, resolve_device
from .errors import ConfigError, DatasetCorruptError, DatasetNotFoundError

__all__ = [
    "register_dataset", "unregister_dataset", "is_registered", "content_digest",
    "registered_digest", "DATASETS", "IMAGE_DATASETS", "IMAGE_METADATA", "criteo_file",
    "TABULAR_DATASETS", "ALIASES", "ImageData", "TabularData", "load_dataset", "encode_criteo",
    "CREDIT_CARD_COLUMNS", "MIMIC3_FEATURES", "CRITEO_DENSE", "CRITEO_SPARSE",
]

#: The built-in datasets loaded as :class:`ImageData`, and those loaded as :class:`TabularData`.
IMAGE_DATASETS: tuple[str, ...] = ("mnist", "fashion_mnist", "cifar10", "cifar100", "cinic10")
TABULAR_DATASETS: tuple[str, ...] = ("breast_cancer", "credit_card", "criteo", "mimic3")
DATASETS: tuple[str, ...] = (*IMAGE_DATASETS, *TABULAR_DATASETS)
#: Per built-in image dataset: one image's shape, the classes, and the official training split's
#: size, so that a run's steps are known with no data loaded (counting, pricing, packing).
IMAGE_METADATA: dict[str, tuple[tuple[int, int, int], int, int]] = {
    "mnist": ((1, 28, 28), 10, 60_000),
    "fashion_mnist": ((1, 28, 28), 10, 60_000),
    "cifar10": ((3, 32, 32), 10, 50_000),
    "cifar100": ((3, 32, 32), 100, 50_000),
    "cinic10": ((3, 32, 32), 10, 90_000),
}
ALIASES: dict[str, str] = {"fmnist": "fashion_mnist"}
OFFLINE_ENV = "VFLKIT_OFFLINE"

CIFAR10_CLASSES: tuple[str, ...] = (
    "airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck",
)

# Per-channel mean/std of the training images scaled to [0, 1] (population std over all
# pixels, not the mean of per-image stds). MNIST, FashionMNIST, CIFAR-10 and CIFAR-100: the
# standard training-set values (CIFAR-10's agree with the PNG copy in the data README to 1e-4).
# CINIC-10: the values published in the CINIC-10 repository's README (BayesWatch/cinic-10).
_STATS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    "cinic10": ((0.47889522, 0.47227842, 0.43047404), (0.24205776, 0.23828046, 0.25874835)),
}

_CINIC_URL = "https://datashare.ed.ac.uk/handle/10283/3192 (CINIC-10.tar.gz; see github.com/BayesWatch/cinic-10)"
_CREDIT_URL = (
    "https://archive.ics.uci.edu/dataset/350/default+of+credit+card+clients (UCI, header X1..X23,Y) "
    "or Kaggle's 'uciml/default-of-credit-card-clients-dataset' (UCI_Credit_Card.csv)"
)
_CRITEO_URL = (
    "Criteo Labs' Display Advertising Challenge data (Kaggle 'criteo-display-ad-challenge': "
    "train.txt, or the 100,000-line dac_sample.txt)"
)
_MIMIC_URL = "https://physionet.org/content/mimiciii/1.4/"

# The Kaggle-named UCI_Credit_Card.csv (data README): sha256 of the file, and sha256 of its
# values X1..X23, Y as little-endian int64 in row order (IDs 1..30000). The second accepts the
# same data written another way (UCI's X1..X23,Y header, no ID column, other line ends) while
# still refusing any changed value, row order or column order.
_CREDIT_SHA256 = "a0f0ab49d6326671d6cd83be5c88dcf18007025fe9a53ecd699119c871176ca1"
_CREDIT_VALUES_SHA256 = "9dc981540a6e93a868c943fd1b08dea87a123132108396c6bc5c7b0590f125a4"

# UCI names (X1..X23, Y) of the Kaggle-named UCI_Credit_Card.csv columns, in file order.
# APC-VFL (Appendix A) names features X3, X5, X7, X9, X11.
CREDIT_CARD_COLUMNS: dict[str, str] = {
    "X1": "LIMIT_BAL", "X2": "SEX", "X3": "EDUCATION", "X4": "MARRIAGE", "X5": "AGE",
    "X6": "PAY_0", "X7": "PAY_2", "X8": "PAY_3", "X9": "PAY_4", "X10": "PAY_5", "X11": "PAY_6",
    **{f"X{11 + i}": f"BILL_AMT{i}" for i in range(1, 7)},
    **{f"X{17 + i}": f"PAY_AMT{i}" for i in range(1, 7)},
    "Y": "default.payment.next.month",
}

# Huang et al. 2023 (VFedTrans, github.com/Chung-ju/VFedTrans, utils.load_data('MIMIC')) read
# the per-admission table mimic3d.csv (58,976 admissions), drop these columns and predict the
# length-of-stay group LOSgroupNum (4 classes) from the 15 count features that remain.
MIMIC3_DROPPED: tuple[str, ...] = (
    "LOSgroupNum", "hadm_id", "AdmitDiagnosis", "AdmitProcedure", "religion", "insurance",
    "ethnicity", "marital_status", "ExpiredHospital", "LOSdays", "gender", "admit_type",
    "admit_location",
)
MIMIC3_FEATURES: tuple[str, ...] = (
    "age", "NumCallouts", "NumDiagnosis", "NumProcs", "NumCPTevents", "NumInput", "NumLabs",
    "NumMicroLabs", "NumNotes", "NumOutput", "NumRx", "NumProcEvents", "NumTransfers",
    "NumChartEvents", "TotalNumInteract",
)
_MIMIC3_TARGETS: tuple[str, ...] = ("LOSgroupNum", "target", "label", "y", "Y")

CRITEO_DENSE: tuple[str, ...] = tuple(f"I{i}" for i in range(1, 14))
CRITEO_SPARSE: tuple[str, ...] = tuple(f"C{i}" for i in range(1, 27))
_CRITEO_FILES: tuple[str, ...] = ("train.txt", "dac_sample.txt", "train.csv", "train.tiny.csv", "criteo_sample.txt")
# sha256 of the two public samples (data README). No published checksum of Criteo's own
# train.txt or dac_sample.txt is known, so verify=True cannot vouch for those and refuses them.
_CRITEO_SHA256: dict[str, str] = {
    "train.tiny.csv": "68f7852149b089e7929ba9e1acd6debbc986cbd498107a7c4dc9f2e716500b18",
    "criteo_sample.txt": "08b84f12a22438fb534e989a5e4fa245726b2bda001983556bc2aea2f094f724",
}

# Bump when the cached tensor layout changes, so old cache files are never read.
_CACHE_VERSION = 1


# --------------------------------------------------------------------------- containers


@dataclass(repr=False, eq=False)
class ImageData:
    """A whole image dataset as ``uint8`` tensors ``[N, C, H, W]`` (``ToTensor()``'s floats in
    [0, 1] are taken as the uint8 pixels they came from) with ``int64`` labels; ``mean``/``std``
    are per-channel training-set statistics of pixels in [0, 1] (None: computed from ``x_train``).
    :meth:`from_torchvision` builds one from two torchvision datasets."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: tuple[str, ...]
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        # Checked here, when the data is handed over, because each of these otherwise trains
        # wrong or fails late: a label >= K fails inside torch, -100 is cross-entropy's
        # ignore_index (silently dropped), std 0 or a NaN mean reads as "training diverged".
        self.classes = tuple(self.classes)
        k = len(self.classes)
        if k < 1:
            raise ConfigError(f"{self.name}: classes is empty; name one class per label 0..K-1")
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                x = as_uint8_images(x, f"{self.name}: x_{split}")
                setattr(self, f"x_{split}", x)
            if not isinstance(x, torch.Tensor) or x.dtype != torch.uint8 or x.ndim != 4:
                raise ConfigError(f"{self.name}: x_{split} must be uint8 [N, C, H, W], got "
                                  f"{getattr(x, 'dtype', type(x).__name__)} {tuple(getattr(x, 'shape', ()))}")
            if not isinstance(y, torch.Tensor) or y.dtype != torch.int64 or y.shape != (x.shape[0],):
                raise ConfigError(f"{self.name}: y_{split} must be int64 [{x.shape[0]}], got "
                                  f"{getattr(y, 'dtype', type(y).__name__)} {tuple(getattr(y, 'shape', ()))}")
            if x.shape[0] == 0:
                raise ConfigError(f"{self.name}: the {split} set is empty; give at least one {split} image")
            lo, hi = int(y.min()), int(y.max())
            if lo < 0 or hi >= k:
                bad = lo if lo < 0 else hi
                raise ConfigError(f"{self.name}: y_{split} holds label {bad}, outside 0..{k - 1} for the {k} "
                                  "classes; labels must be class indices 0..K-1 (one name in classes per label)")
        if self.x_train.shape[1:] != self.x_test.shape[1:]:
            raise ConfigError(f"{self.name}: train and test images differ in shape")
        if self.mean is None or self.std is None:  # the training pixels' own statistics, per channel
            pixels = self.x_train.transpose(0, 1).reshape(self.x_train.shape[1], -1).double() / 255
            self.mean = tuple(float(m) for m in pixels.mean(1)) if self.mean is None else self.mean
            self.std = tuple(float(sd) for sd in pixels.std(1)) if self.std is None else self.std
        if not len(self.mean) == len(self.std) == self.x_train.shape[1]:
            raise ConfigError(f"{self.name}: mean/std need one value per channel ({self.x_train.shape[1]})")
        for i, (m, sd) in enumerate(zip(self.mean, self.std)):
            if not (isinstance(m, numbers.Real) and np.isfinite(m)):
                raise ConfigError(f"{self.name}: mean[{i}] must be a finite number (of pixels in [0, 1]), got {m!r}")
            if not (isinstance(sd, numbers.Real) and np.isfinite(sd) and sd > 0):
                raise ConfigError(f"{self.name}: std[{i}] must be a finite number > 0 (normalising divides by "
                                  f"it), got {sd!r}")

    @classmethod
    def from_torchvision(cls, name: str, train: Any, test: Any, classes: Sequence[str] | None = None) -> ImageData:
        """An ImageData from two torchvision datasets (or sequences of ``(image, label)``): each
        image a PIL image, a ``uint8`` array ``[H, W(, C)]``, a ``uint8`` tensor ``[C, H, W]`` or
        a float tensor in [0, 1] (``ToTensor()``'s output, kept as the uint8 pixels it came from);
        the classes from ``classes``, else the dataset's ``classes``, else the labels seen."""
        from torchvision.transforms.functional import pil_to_tensor

        def tensors(ds: Any) -> tuple[torch.Tensor, torch.Tensor]:
            xs, ys = [], []
            for image, label in ds:
                if isinstance(image, torch.Tensor):
                    x = image
                elif isinstance(image, np.ndarray):
                    x = torch.from_numpy(image if image.ndim == 3 else image[..., None]).permute(2, 0, 1)
                else:
                    x = pil_to_tensor(image)
                if x.is_floating_point():  # ToTensor's output: [0, 1] floats
                    x = as_uint8_images(x, f"{name}: an image")
                if x.dtype != torch.uint8:
                    raise ConfigError(f"{name}: images must be uint8 or floats in [0, 1] (PIL images, arrays or "
                                      f"ToTensor's tensors), got {x.dtype}")
                xs.append(x)
                ys.append(int(label))
            if not xs:
                raise ConfigError(f"{name}: a dataset given is empty")
            return torch.stack(xs), torch.tensor(ys, dtype=torch.int64)

        x_train, y_train = tensors(train)
        x_test, y_test = tensors(test)
        names = classes or getattr(train, "classes", None)
        if not names:
            names = [str(c) for c in range(int(max(y_train.max(), y_test.max())) + 1)]
        return cls(name, x_train, y_train, x_test, y_test, tuple(names))

    def __repr__(self) -> str:
        return (f"ImageData(name={self.name!r}, n_train={len(self.y_train)}, n_test={len(self.y_test)}, "
                f"image_shape={self.image_shape}, num_classes={self.num_classes})")

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        c, h, w = self.x_train.shape[1:]
        return int(c), int(h), int(w)

    def subset(self, *, n_train: int | None = None, n_test: int | None = None, seed: int = 0) -> ImageData:
        """A random subset of ``n_train`` training and ``n_test`` test images (None keeps all)
        in their original order, each split drawn with its own generator seeded ``seed``."""
        x_tr, y_tr = _pick(self.x_train, self.y_train, n_train, seed, f"{self.name} n_train")
        x_te, y_te = _pick(self.x_test, self.y_test, n_test, seed, f"{self.name} n_test")
        return ImageData(self.name, x_tr, y_tr, x_te, y_te, self.classes, self.mean, self.std)

    def normalize(self, x: torch.Tensor, device: str | torch.device | None = None) -> torch.Tensor:
        """``(x / 255 - mean) / std`` of a ``uint8`` batch ``[..., C, H, W]`` as float32 on
        ``device`` (default: where ``x`` is), converted there (a quarter of the bytes cross)."""
        if x.dtype != torch.uint8:
            raise ValueError(f"normalize expects the uint8 images of {self.name}, got {x.dtype}")
        if x.ndim < 3 or x.shape[-3] != len(self.mean):
            raise ValueError(f"normalize expects [..., {len(self.mean)}, H, W] images, got {tuple(x.shape)}")
        dev = x.device if device is None else resolve_device(device)
        x = x.to(dev, non_blocking=True)
        mean, std = self._stats_on(dev)
        return (x.to(torch.float32).div_(255.0) - mean).div_(std)

    def _stats_on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        # normalize runs once per batch: build the mean/std tensors once per device, not per
        # call (on a GPU each would be a host-to-device copy)
        cache = self.__dict__.setdefault("_stats", {})
        if device not in cache:
            cache[device] = tuple(torch.tensor(v, dtype=torch.float32, device=device).view(-1, 1, 1)
                                  for v in (self.mean, self.std))
        return cache[device]


@dataclass(repr=False, eq=False)
class TabularData:
    """A whole tabular dataset: ``features`` (one column per feature; ``categorical`` names those
    holding categories), ``target`` (0..K-1) for a ``"binary"`` or ``"multiclass"`` ``task``. The
    index carries the source's sample ids (credit card ``ID``, Criteo ``Id``, MIMIC-III ``hadm_id``)."""

    name: str
    features: pd.DataFrame
    target: pd.Series
    task: str
    categorical: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.task not in ("binary", "multiclass"):
            raise ConfigError(f"Invalid task {self.task!r}; choose one of binary, multiclass")
        if not isinstance(self.features, pd.DataFrame) or not isinstance(self.target, pd.Series):
            raise ConfigError(f"{self.name}: features must be a pandas DataFrame and target a Series, got "
                              f"{type(self.features).__name__} and {type(self.target).__name__}")
        if len(self.features) != len(self.target):
            raise ConfigError(f"{self.name}: {len(self.features)} feature rows but {len(self.target)} targets")
        if not self.features.index.equals(self.target.index):
            # rows are paired by position: a target from a re-sorted frame would be mislabelled
            at = next((i for i, (a, b) in enumerate(zip(self.features.index, self.target.index)) if a != b), 0)
            raise ConfigError(f"{self.name}: the target's index is not the features' (row {at}: features "
                              f"{_label(self.features.index, at)!r}, target {_label(self.target.index, at)!r}); "
                              "pair them with target.reindex(features.index), or reset both indexes if the order "
                              "is right")
        if len(self.target) == 0 or self.features.shape[1] == 0:
            raise ConfigError(f"{self.name}: the table is empty ({len(self.target)} rows, {self.features.shape[1]} "
                              "feature columns); give at least one row and one column")
        unknown = [c for c in self.categorical if c not in self.features.columns]
        if unknown:
            raise ConfigError(f"{self.name}: categorical columns {unknown} are not feature columns")
        self.categorical = tuple(self.categorical)
        # the target is a class index 0..K-1 (binary: 0/1): a 2 in a binary task or a -1 would
        # otherwise train on a class the model cannot output, or fail inside torch
        y = self.target
        if not (pd.api.types.is_numeric_dtype(y) or pd.api.types.is_bool_dtype(y)):
            raise ConfigError(f"{self.name}: target must hold class indices 0..K-1, got dtype {y.dtype}; "
                              "map the classes to integers first")
        values = y.to_numpy(dtype=np.float64)
        if not np.all(np.isfinite(values)) or not np.all(values == np.round(values)):
            raise ConfigError(f"{self.name}: target must hold integer class indices 0..K-1, with no missing "
                              "value; it holds NaN or a fraction")
        lo, hi = int(values.min()), int(values.max())
        if self.task == "binary" and (lo < 0 or hi > 1):
            raise ConfigError(f"{self.name}: a binary target holds only 0 and 1, got values "
                              f"{sorted(int(v) for v in set(np.unique(values)) - {0, 1})[:5]}; use task='multiclass' for "
                              "more classes, or map the labels to 0/1")
        if lo < 0:
            raise ConfigError(f"{self.name}: target holds {lo}; class indices are 0..K-1")
        # an infinite value poisons its column's scaling (encode_generic's mean) and read as
        # "training diverged"; NaN is a missing value, imputed there (documented)
        for col in self.features.columns:
            column = self.features[col]
            if col in self.categorical or not pd.api.types.is_numeric_dtype(column) \
                    or pd.api.types.is_bool_dtype(column):
                continue
            kind = np.complex128 if pd.api.types.is_complex_dtype(column) else np.float64
            inf = np.isinf(column.to_numpy(dtype=kind, na_value=np.nan))
            if inf.any():
                raise ConfigError(f"{self.name}: feature column {col!r} holds {int(inf.sum())} infinite value(s) "
                                  f"(first at index {_label(self.features.index, int(np.argmax(inf)))!r}); replace them with "
                                  "a finite number, or NaN (a missing value, imputed as the column's mean)")

    def __repr__(self) -> str:
        return (f"TabularData(name={self.name!r}, n={len(self.target)}, n_features={self.features.shape[1]}, "
                f"task={self.task!r}, num_classes={self.num_classes})")

    @property
    def num_classes(self) -> int:
        return 2 if self.task == "binary" else int(self.target.max()) + 1

    def subset(self, *, n: int, seed: int = 0) -> TabularData:
        """A random subset of ``n`` rows, deterministic in ``seed``, in their original order."""
        idx = draw_rows(len(self.target), n, seed, f"{self.name}: n={n} rows", "").numpy()
        return TabularData(self.name, self.features.iloc[idx], self.target.iloc[idx], self.task, self.categorical)


def as_uint8_images(x: Any, what: str) -> torch.Tensor:
    """Float images in [0, 1] (torchvision's ``ToTensor()`` output) as the uint8 pixels they
    were made from (``round(255 x)``: exact for ToTensor's ``p / 255``). Values outside [0, 1]
    are a ConfigError: ``Normalize``'s output cannot be turned back without its statistics, and
    vflkit normalises by the training set's own (:meth:`ImageData.normalize`)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise ConfigError(f"{what} must be a float tensor in [0, 1] here, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.numel() and not (bool(torch.isfinite(x).all()) and float(x.min()) >= 0 and float(x.max()) <= 1):
        raise ConfigError(f"{what} holds floats outside [0, 1] (min {float(x.nan_to_num().min()):.3g}, max "
                          f"{float(x.nan_to_num().max()):.3g}); give ToTensor's [0, 1] output or uint8 pixels, "
                          "without Normalize: vflkit normalises by the training images' own mean and std")
    return (x * 255).round().to(torch.uint8)


def _label(index: pd.Index, i: int) -> Any:
    """The ``i``-th label of ``index`` as Python writes it (``8``, not ``np.int64(8)``), or None
    past its end."""
    if i >= len(index):
        return None
    v = index[i]
    if isinstance(v, tuple):  # a MultiIndex's label
        return tuple(x.item() if isinstance(x, np.generic) else x for x in v)
    return v.item() if isinstance(v, np.generic) else v



def draw_rows(total: int, n: int, seed: int, asked: str, other: str) -> torch.Tensor:
    """``n`` of ``range(total)`` drawn with a generator seeded ``seed``, in order; ``asked`` and
    ``other`` word the error when ``n`` is not in 1..``total``."""
    if not 1 <= n <= total:
        raise ConfigError(f"{asked} asked for, but there are {total}; choose 1..{total}{other}")
    return torch.randperm(total, generator=torch.Generator().manual_seed(seed))[:n].sort().values


def _pick(x: torch.Tensor, y: torch.Tensor, n: int | None, seed: int, what: str) -> tuple[torch.Tensor, torch.Tensor]:
    if n is None:
        return x, y
    idx = draw_rows(len(y), n, seed, f"{what}={n} images", " or None for all")
    return x[idx], y[idx]


# --------------------------------------------------------------------------- entry point


def load_dataset(name: str, *, root: str | Path | None = None, download: bool | None = None,
                 **options: Any) -> ImageData | TabularData:
    """Dataset ``name`` (one of :data:`DATASETS`, or an alias) whole, as :class:`ImageData` or
    :class:`TabularData`, from ``root`` (default :func:`vflkit.config.data_root`).

    ``download`` fetches missing MNIST, FashionMNIST, CIFAR-10 or CIFAR-100 with torchvision's
    own downloader (default: unless ``$VFLKIT_OFFLINE`` is ``1``); no other dataset is
    downloaded. ``options``, per dataset (an unknown one is an error listing the valid ones):
    ``verify`` (default True; see docs/data-and-models.md); ``progress`` (cifar10, cinic10: a bar
    while decoding PNGs); ``source`` (cifar10, default ``"auto"``: pickles if present, else the
    PNG tree); ``include_valid`` (cinic10); ``file`` (credit_card, criteo, mimic3); ``nrows``
    (criteo); ``target`` (mimic3).
    """
    key = _dataset_key(name) if isinstance(name, str) else name
    if key in _REGISTERED:
        if options:
            raise ConfigError(f"dataset {key!r} was registered in memory; it takes no options, got {sorted(options)}")
        return _REGISTERED[key]
    if key not in _LOADERS:
        alias_text = ", ".join(f"{a} (= {c})" for a, c in ALIASES.items())
        raise ConfigError(f"Invalid dataset {name!r}; choose one of {', '.join(DATASETS)} (aliases: {alias_text})")
    loader = _LOADERS[key]
    valid = [p.name for p in inspect.signature(loader).parameters.values() if p.kind is p.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(f"Invalid option(s) {', '.join(unknown)} for dataset {key!r}; "
                          f"choose from {', '.join(valid) if valid else '(none)'}")
    for flag in ("verify", "progress", "include_valid"):  # 'no' would read as true
        if flag in options and not isinstance(options[flag], bool):
            raise ConfigError(f"{flag} must be True or False, got {options[flag]!r}")
    base = Path(root).expanduser() if root is not None else data_root()
    if download is None:
        download = os.environ.get(OFFLINE_ENV, "").strip() != "1"
    return loader(base, bool(download), **options)


#: Datasets handed to vflkit in memory with :func:`register_dataset`, by name.
_REGISTERED: dict[str, ImageData | TabularData] = {}
#: The content digest of each registered dataset (:func:`content_digest`), taken at
#: registration and again whenever the data may have changed (:func:`registered_digest`).
_DIGESTS: dict[str, str] = {}
#: What each registered image set's tensors were when its digest was taken (:func:`_fingerprint`).
_FINGERPRINTS: dict[str, Any] = {}


def content_digest(data: ImageData | TabularData) -> str:
    """16 hex digits of a sha256 of a dataset's content (values, labels, classes, statistics;
    not its name): two registrations of equal data agree."""
    h = hashlib.sha256()

    def add(part: Any) -> None:
        if isinstance(part, torch.Tensor):
            part = part.detach().cpu().contiguous().numpy()
        if isinstance(part, np.ndarray):
            h.update(f"{part.dtype}{part.shape}".encode())
            h.update(np.ascontiguousarray(part).reshape(-1).view(np.uint8))  # no copy of the data
        else:
            h.update(repr(part).encode())
        h.update(b"\0")

    if isinstance(data, ImageData):
        for part in (data.x_train, data.y_train, data.x_test, data.y_test, data.classes,
                     tuple(map(float, data.mean)), tuple(map(float, data.std))):
            add(part)
    else:
        add(("tabular", data.task, tuple(map(str, data.features.columns)),
             tuple(map(str, data.features.dtypes)), data.categorical))
        add(pd.util.hash_pandas_object(data.features, index=True).to_numpy())
        add(pd.util.hash_pandas_object(data.target, index=True).to_numpy())
    return h.hexdigest()[:16]


def _fingerprint(data: ImageData | TabularData) -> Any:
    """What tells, without reading the data, that a registered image set is unchanged: each
    tensor's identity, storage and torch's count of its in-place edits, and the classes and
    statistics; None for a table (no such count: its digest, cheap, is taken again)."""
    if not isinstance(data, ImageData):
        return None
    tensors = (data.x_train, data.y_train, data.x_test, data.y_test)
    return (tuple((id(t), t.data_ptr(), tuple(t.shape), t._version) for t in tensors), tuple(data.classes),
            tuple(map(float, data.mean)), tuple(map(float, data.std)))


def registered_digest(name: str, *, recheck: bool = False) -> str | None:
    """The content digest of the dataset registered under ``name`` (None for a built-in name,
    whose keys stay the built-in's): run keys hash it, so a record is never reused for other
    data under the same name.

    It is of the data as it is now: a table's is taken at every call, an image set's when torch
    saw its tensors replaced or edited (:func:`_fingerprint`), and with ``recheck`` always (an
    edit through a numpy view escapes torch's count). Changed data is checked as at
    registration and keyed anew, with a warning.
    """
    key = _dataset_key(name) if isinstance(name, str) else name
    if key in _LOADERS or key not in _REGISTERED:
        return None
    data = _REGISTERED[key]
    fingerprint = _fingerprint(data)
    if not recheck and fingerprint is not None and fingerprint == _FINGERPRINTS.get(key):
        return _DIGESTS[key]
    digest = content_digest(data)
    if digest != _DIGESTS.get(key):
        _check_registrable(data)  # an edit may have broken what the data's checks guaranteed
        warnings.warn(f"dataset {key!r} changed since its content digest was taken ({_DIGESTS.get(key)}; now "
                      f"{digest}): runs on it get new keys and are trained afresh", stacklevel=2)
        _DIGESTS[key] = digest
    _FINGERPRINTS[key] = fingerprint
    return digest


def _check_registrable(data: ImageData | TabularData) -> None:
    """A dataset's own checks (its ``__post_init__``) again, and at least two classes (with one,
    every prediction is right; not in ``__post_init__``, since a run's small subset may hold one)."""
    data.__post_init__()
    if isinstance(data, ImageData):
        if len(data.classes) < 2:
            raise ConfigError(f"{data.name}: {len(data.classes)} class {data.classes!r}; a classifier needs at least "
                              "two classes (with one, every prediction is right)")
        seen = torch.unique(data.y_train)
        if len(seen) < 2:
            raise ConfigError(f"{data.name}: the training labels are all {int(seen[0])}; a classifier needs "
                              "training examples of at least two classes")
    else:
        seen = pd.unique(data.target)
        if len(seen) < 2:
            raise ConfigError(f"{data.name}: the target holds one class ({seen[0]}); a classifier needs at least "
                              "two (with one, every prediction is right)")


def _dataset_key(name: str) -> str:
    key = name.strip().lower()
    return ALIASES.get(key, key)


def register_dataset(data: ImageData | TabularData, *, name: str | None = None, replace: bool = False) -> str:
    """Make ``data`` loadable by ``name`` (default ``data.name``; returned): every later
    ``load_dataset(name)``, so every run config naming it, gets this object instead of files.
    How a researcher brings a dataset of their own, and how a machine without the data files
    uses a copy shipped in another form.

    Run keys of a name of your own include the data's :func:`content_digest`; other data under
    a name registered earlier replaces it, with a warning. A built-in dataset's name needs
    ``replace=True``: run keys then stay the built-in's (the copy is meant to be that dataset,
    so a copy that differs would put other data's numbers into its records).
    """
    if not isinstance(data, (ImageData, TabularData)):
        raise ConfigError(f"register_dataset takes an ImageData or TabularData, got {type(data).__name__}")
    given = data.name if name is None else name
    if not isinstance(given, str) or not given.strip():
        raise ConfigError(f"register_dataset needs a non-empty name (a string), got {given!r}")
    key = _dataset_key(given)
    if key in _LOADERS and not replace:
        raise ConfigError(f"dataset name {key!r} is taken; choose another name or pass replace=True")
    _check_registrable(data)
    digest = content_digest(data)
    if key in _REGISTERED and not replace and _DIGESTS.get(key) != digest:
        warnings.warn(f"dataset {key!r} was registered with other data ({_DIGESTS.get(key)}); it now means this "
                      f"data ({digest}): runs on it get new keys and are trained afresh", stacklevel=2)
    _REGISTERED[key] = data
    _DIGESTS[key] = digest
    _FINGERPRINTS[key] = _fingerprint(data)
    return key


def is_registered(name: str) -> bool:
    return _dataset_key(name) in _REGISTERED


def unregister_dataset(name: str) -> None:
    """Forget a dataset given to :func:`register_dataset` (a built-in name loads from files again)."""
    key = _dataset_key(name)
    for table in (_REGISTERED, _DIGESTS, _FINGERPRINTS):
        table.pop(key, None)


# --------------------------------------------------------------------------- errors


def _not_found(dataset: str, root: Path, expected: list[str], searched: list[Path], *, how: str,
               download_error: str | None = None) -> DatasetNotFoundError:
    lines = [
        f"Dataset {dataset!r} not found.",
        "Expected (relative to the data root): " + ", ".join(expected),
        "Searched: " + ", ".join(str(p) for p in searched)
        + (f" (data root {root}" + (", which does not exist)" if not root.is_dir() else ")")),
        f"To provide it: set {DATA_ENV} to a folder holding these files, or copy them into ./data/ "
        f"(the default data root) keeping the layout above; {how}",
    ]
    if download_error:
        lines.append(f"The download failed: {download_error}")
    return DatasetNotFoundError("\n".join(lines))


def _corrupt(path: Path | str, what: str) -> DatasetCorruptError:
    return DatasetCorruptError(f"{path}: {what}. Replace the file with an intact copy of the original.")


def _unverified(dataset: str) -> None:
    warnings.warn(f"{dataset}: loaded with verify=False: checksums and expected counts were not checked, "
                  "so this may not be the published dataset and results are not comparable with the papers'.",
                  UserWarning, stacklevel=4)


def _file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _try_download(cls: type, root: Path) -> str | None:
    """Run torchvision's downloader: None on success, else why it failed."""
    try:
        cls(root=str(root), train=True, download=True)
        return None
    except Exception as exc:  # any failure (no network, read-only root) falls through to the error
        return f"{type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------- MNIST / FashionMNIST

_IDX_IMAGES, _IDX_LABELS = 2051, 2049

# sha256 of the decompressed originals (the files torchvision extracts into raw/): torchvision
# publishes md5s of the .gz files only, so these were computed here from the .gz files whose md5s
# match (see the data README). They let verify=True cover an uncompressed copy as well.
_IDX_SHA256: dict[tuple[str, str], str] = {
    ("MNIST", "train-images-idx3-ubyte"): "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db",
    ("MNIST", "train-labels-idx1-ubyte"): "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5",
    ("MNIST", "t10k-images-idx3-ubyte"): "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7",
    ("MNIST", "t10k-labels-idx1-ubyte"): "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2",
    ("FashionMNIST", "train-images-idx3-ubyte"): "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    ("FashionMNIST", "train-labels-idx1-ubyte"): "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    ("FashionMNIST", "t10k-images-idx3-ubyte"): "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    ("FashionMNIST", "t10k-labels-idx1-ubyte"): "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}


def _read_idx(path: Path, *, gz: bool, magic: int, count: int | None, sha256: str | None = None) -> np.ndarray:
    """Parse an IDX file (big-endian header, then uint8 data), checking magic, size, count and
    ``sha256`` of the uncompressed bytes (first, so an altered file is reported as such)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
        if gz:
            raw = gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise _corrupt(path, f"cannot be decompressed ({type(exc).__name__}: {exc})") from exc
    if sha256 is not None:
        actual = hashlib.sha256(raw).hexdigest()
        if actual != sha256:
            raise _corrupt(path, f"sha256 is {actual}, the original's (uncompressed) is {sha256}")
    ndim = 3 if magic == _IDX_IMAGES else 1
    head = 4 * (1 + ndim)
    if len(raw) < head:
        raise _corrupt(path, f"is {len(raw)} bytes, shorter than an IDX header")
    fields = np.frombuffer(raw[:head], dtype=">u4").astype(np.int64)
    if fields[0] != magic:
        raise _corrupt(path, f"IDX magic number is {fields[0]}, expected {magic}")
    shape = tuple(int(v) for v in fields[1:])
    if len(raw) != head + int(np.prod(shape)):
        raise _corrupt(path, f"holds {len(raw) - head} data bytes, header says shape {shape}")
    if ndim == 3 and shape[1:] != (28, 28):
        raise _corrupt(path, f"images are {shape[1]}x{shape[2]}, expected 28x28")
    if count is not None and shape[0] != count:
        raise _corrupt(path, f"holds {shape[0]} items, expected {count}")
    return np.frombuffer(raw, dtype=np.uint8, offset=head).reshape(shape)


def _load_idx_dataset(dataset: str, source: str, root: Path, download: bool, *, verify: bool = True) -> ImageData:
    """MNIST or FashionMNIST (``source``: the torchvision class, looked up at each load)."""
    cls = getattr(torchvision.datasets, source)
    raw_dir = root / cls.__name__ / "raw"
    resources = list(cls.resources)  # [(file name or URL, md5)] of the four .gz originals

    def find() -> tuple[list[tuple[Path, bool, str]], list[str]]:
        found, missing = [], []
        for url, md5 in resources:
            gz_name = url.rsplit("/", 1)[-1]
            gz, plain = raw_dir / gz_name, raw_dir / gz_name.removesuffix(".gz")
            if gz.is_file():
                found.append((gz, True, md5))
            elif plain.is_file():
                found.append((plain, False, md5))
            else:
                missing.append(gz_name)
        return found, missing

    found, missing = find()
    download_error = None
    if missing and download:
        download_error = _try_download(cls, root)
        found, missing = find()
    if missing:
        expected = [f"{cls.__name__}/raw/{url.rsplit('/', 1)[-1]}" for url, _ in resources]
        mirror = cls.mirrors[0] if getattr(cls, "mirrors", None) else ""
        raise _not_found(dataset, root, expected, [raw_dir], download_error=download_error,
                         how=f"or call load_dataset({dataset!r}, download=True) when online "
                             f"(official source: {mirror}; missing: {', '.join(missing)}).")
    if not verify:
        _unverified(dataset)
    arrays = {}  # (training split?, images?) -> array
    for (path, gz, md5), (url, _) in zip(found, resources):
        # A .gz is checked against torchvision's md5; an uncompressed file against the sha256
        # of the decompressed original, so verify=True means the same for both forms.
        if verify and gz:
            actual = _file_digest(path, "md5")
            if actual != md5:
                raise _corrupt(path, f"md5 is {actual}, the original's (torchvision) is {md5}")
        plain_sha = None
        if verify and not gz:
            plain_sha = _IDX_SHA256.get((cls.__name__, path.name))
            if plain_sha is None:  # a torchvision class vflkit has no digest for: refuse, don't skip
                raise _corrupt(path, "has no known checksum for its uncompressed form; provide the .gz original "
                               "or load with verify=False")
        is_images, train = "images" in url, url.rsplit("/", 1)[-1].startswith("train")
        count = (60000 if train else 10000) if verify else None
        arrays[train, is_images] = _read_idx(path, gz=gz, magic=_IDX_IMAGES if is_images else _IDX_LABELS,
                                             count=count, sha256=plain_sha)
    tensors = {}
    for split, train in (("train", True), ("test", False)):
        x, y = arrays[train, True], arrays[train, False]
        if len(x) != len(y):
            raise _corrupt(raw_dir, f"{split}: {len(x)} images but {len(y)} labels")
        if y.max() > 9:
            raise _corrupt(raw_dir, f"{split} labels reach {int(y.max())}, expected 0..9")
        tensors[split] = (torch.from_numpy(x.copy()).unsqueeze(1), torch.from_numpy(y.astype(np.int64)))
    mean, std = _STATS[dataset]
    return ImageData(dataset, *tensors["train"], *tensors["test"], tuple(cls.classes), mean, std)


# --------------------------------------------------------------------------- CIFAR pickles


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles only what CIFAR's pickles hold (dicts, lists, strings, numpy arrays): refusing
    every other global keeps a swapped or ``verify=False`` file from running code."""

    def find_class(self, module: str, name: str) -> Any:
        if module in ("numpy.core.multiarray", "numpy._core.multiarray") and name in ("_reconstruct", "scalar"):
            try:
                from numpy._core import multiarray  # numpy >= 2; numpy.core is its deprecated alias
            except ImportError:
                from numpy.core import multiarray
            return getattr(multiarray, name)
        if module == "numpy" and name in ("ndarray", "dtype"):
            return getattr(np, name)
        if (module, name) == ("_codecs", "encode"):  # how Python 3 writes bytes in protocol-2 pickles
            import _codecs
            return _codecs.encode
        raise pickle.UnpicklingError(f"global {module}.{name} is not part of a CIFAR pickle")


def _read_pickle(path: Path, md5: str, *, verify: bool) -> dict[str, Any]:
    if verify:
        actual = _file_digest(path, "md5")
        if actual != md5:
            raise _corrupt(path, f"md5 is {actual}, the original's (torchvision) is {md5}")
    try:
        with open(path, "rb") as f:
            # latin1: the originals are Python 2 pickles whose byte strings hold the pixels
            obj = _ArrayUnpickler(f, encoding="latin1").load()
    except Exception as exc:
        raise _corrupt(path, f"is not a readable CIFAR pickle ({type(exc).__name__}: {exc})") from exc
    if not isinstance(obj, dict):
        raise _corrupt(path, f"holds a {type(obj).__name__}, expected a dict")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}


def _pickle_split(paths: list[tuple[Path, str]], label_key: str, n_classes: int, *, verify: bool,
                  count: int) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys = [], []
    for path, md5 in paths:
        d = _read_pickle(path, md5, verify=verify)
        if "data" not in d or label_key not in d:
            raise _corrupt(path, f"lacks the keys 'data' and {label_key!r} (has {sorted(d)})")
        x, y = np.asarray(d["data"]), np.asarray(d[label_key], dtype=np.int64)
        if x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != 3072 or len(x) != len(y):
            raise _corrupt(path, f"data is {x.dtype} {x.shape} with {len(y)} labels, "
                           "expected uint8 (N, 3072) and N labels")
        if len(y) and (y.min() < 0 or y.max() >= n_classes):
            raise _corrupt(path, f"labels span {y.min()}..{y.max()}, expected 0..{n_classes - 1}")
        xs.append(x)
        ys.append(y)
    x, y = np.concatenate(xs), np.concatenate(ys)
    if verify:
        per_class = np.bincount(y, minlength=n_classes)
        if len(y) != count or (per_class != count // n_classes).any():
            raise _corrupt(paths[0][0].parent, f"{len(y)} images with per-class counts {per_class.tolist()}, "
                           f"expected {count} with {count // n_classes} per class")
    # rows are R(1024) G(1024) B(1024): exactly [3, 32, 32] in C order
    return torch.from_numpy(x.reshape(-1, 3, 32, 32).copy()), torch.from_numpy(y)


def _load_cifar_pickles(dataset: str, cls: type, root: Path, *, verify: bool, label_key: str,
                        n_classes: int) -> ImageData:
    folder = root / cls.base_folder
    if not verify:
        _unverified(dataset)
    meta = _read_pickle(folder / cls.meta["filename"], cls.meta["md5"], verify=verify)
    classes = tuple(meta.get(cls.meta["key"], ()))
    if len(classes) != n_classes:
        raise _corrupt(folder / cls.meta["filename"], f"names {len(classes)} classes, expected {n_classes}")
    train = _pickle_split([(folder / f, m) for f, m in cls.train_list], label_key, n_classes,
                          verify=verify, count=50000)
    test = _pickle_split([(folder / f, m) for f, m in cls.test_list], label_key, n_classes,
                         verify=verify, count=10000)
    mean, std = _STATS[dataset]
    return ImageData(dataset, *train, *test, classes, mean, std)


def _pickle_expected(cls: type) -> list[str]:
    names = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
    return [f"{cls.base_folder}/{n}" for n in names]


def _pickles_present(cls: type, root: Path) -> bool:
    return all((root / rel).is_file() for rel in _pickle_expected(cls))


# --------------------------------------------------------------------------- PNG trees (cached)


def _list_png_tree(split_dir: Path, classes: tuple[str, ...]) -> list[tuple[int, os.DirEntry]]:
    found = sorted(e.name for e in os.scandir(split_dir) if e.is_dir() and not e.name.startswith("."))
    if tuple(found) != classes:
        raise _corrupt(split_dir, f"class folders are {found}, expected {list(classes)}")
    files = []
    for label, name in enumerate(classes):
        entries = [e for e in os.scandir(split_dir / name)
                   if e.name.lower().endswith(".png") and not e.name.startswith(".") and e.is_file()]
        files += [(label, e) for e in sorted(entries, key=lambda e: e.name)]
    return files


def _read_manifest(path: Path) -> dict[str, str]:
    digests = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or len(parts[0]) != 64:
            raise _corrupt(path, f"line {n} is not '<sha256>  <path>'")
        digests[parts[1].lstrip("*")] = parts[0].lower()
    return digests


def _decode_png_split(root: Path, split_dir: Path, *, tag: str, classes: tuple[str, ...], per_class: int | None,
                      manifest: Path | None, rgb: bool, verify: bool, progress: bool
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode ``split_dir/<class>/*.png`` into uint8 [N, 3, 32, 32] and labels, cached under a
    key of every file's path, size and mtime, the manifest's bytes and the settings."""
    files = _list_png_tree(split_dir, classes)  # class by class, files by name
    labels = np.array([label for label, _ in files], dtype=np.int64)
    if verify and per_class is not None:
        counts = np.bincount(labels, minlength=len(classes))
        if (counts != per_class).any():
            raise _corrupt(split_dir, "per-class image counts are "
                           + ", ".join(f"{c}={k}" for c, k in zip(classes, counts.tolist()))
                           + f", expected {per_class} each")
    use_manifest = verify and manifest is not None and manifest.is_file()
    key = hashlib.sha256(f"v{_CACHE_VERSION}|{tag}|verify={verify}|rgb={rgb}|manifest={use_manifest}\n".encode())
    for label, e in files:
        st = e.stat()
        key.update(f"{label}/{e.name}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    if use_manifest:
        key.update(hashlib.sha256(manifest.read_bytes()).digest())
    where = hashlib.sha256(str(split_dir.resolve()).encode()).hexdigest()[:8]
    stem = f"{tag}-{where}-{split_dir.name}"
    cache = cache_dir() / f"{stem}-{key.hexdigest()[:20]}.pt"
    if cache.is_file():
        try:
            blob = torch.load(cache, weights_only=True)
            if blob["x"].shape == (len(files), 3, 32, 32) and torch.equal(blob["y"], torch.from_numpy(labels)):
                # with verify, the pixels too: a cache whose tensors do not match its digest is rebuilt
                if not verify or blob.get("sha256") == _tensor_digest(blob["x"], blob["y"]):
                    return blob["x"], blob["y"]
                warnings.warn(f"ignoring cache file {cache}: its tensors do not match their digest (altered, or "
                              "written without one); decoding the PNG files again", stacklevel=2)
        except Exception as exc:  # an unreadable cache is rebuilt, never trusted
            warnings.warn(f"ignoring unreadable cache file {cache}: {exc}", stacklevel=2)

    # plain strings: a pathlib object per file costs more than decoding it
    prefix = split_dir.relative_to(root).as_posix() + "/"
    rels = [f"{prefix}{classes[label]}/{e.name}" for label, e in files]
    base = str(root) + os.sep
    digests = None
    if use_manifest:
        digests = {k: v for k, v in _read_manifest(manifest).items() if k.startswith(prefix)}
        if set(rels) != set(digests):
            missing, extra = sorted(set(digests) - set(rels)), sorted(set(rels) - set(digests))
            raise _corrupt(split_dir, f"files differ from {manifest.name}: missing {len(missing)} "
                           f"(first {missing[:5]}), not listed {len(extra)} (first {extra[:5]})")

    def read(batch: list[str]) -> list[bytes]:
        out = []
        for rel in batch:
            with open(base + rel, "rb") as f:
                data = f.read()
            if digests is not None:
                actual = hashlib.sha256(data).hexdigest()
                if actual != digests[rel]:
                    raise _corrupt(base + rel, f"sha256 is {actual}, {manifest.name} lists {digests[rel]}")
            out.append(data)
        return out

    decode = _png_decoder(rgb)
    x = torch.empty((len(rels), 3, 32, 32), dtype=torch.uint8)
    # Reading and hashing release the GIL, so each chunk of files is read by threads; decode_png
    # holds the GIL, so decoding runs afterwards in this thread alone (overlapping them contends).
    chunk, per_task = 4096, 256
    with ThreadPoolExecutor(max_workers=4) as pool, tqdm(
        total=len(rels), desc=f"decoding {tag}/{split_dir.name}", unit="img", disable=not progress, leave=False
    ) as bar:
        for start in range(0, len(rels), chunk):
            part = rels[start:start + chunk]
            blobs = [b for batch in pool.map(read, [part[k:k + per_task] for k in range(0, len(part), per_task)])
                     for b in batch]
            for i, data in enumerate(blobs, start):
                try:
                    img = decode(data)
                except (RuntimeError, OSError, ValueError) as exc:
                    raise _corrupt(base + rels[i], f"is not a decodable PNG ({exc})") from exc
                if img.shape != (3, 32, 32):
                    raise _corrupt(base + rels[i], f"decodes to shape {tuple(img.shape)}, expected (3, 32, 32) RGB")
                x[i] = img
            bar.update(len(part))
    y = torch.from_numpy(labels)
    _write_cache(cache, {"x": x, "y": y, "sha256": _tensor_digest(x, y)}, stale=f"{stem}-*.pt")
    return x, y


def _tensor_digest(*tensors: torch.Tensor) -> str:
    h = hashlib.sha256()
    for t in tensors:
        arr = np.ascontiguousarray(t.detach().cpu().numpy())
        h.update(f"{arr.dtype}{arr.shape}|".encode())
        h.update(arr.reshape(-1).view(np.uint8))
    return h.hexdigest()


def _png_decoder(rgb: bool) -> Callable[[bytes], torch.Tensor]:
    """bytes -> uint8 [C, H, W]: torchvision's libpng decoder (its deprecation warning, in
    favour of TorchCodec, silenced), else Pillow (slower) once it is removed."""
    decode_png = getattr(torchvision.io, "decode_png", None)
    if decode_png is not None:
        mode = torchvision.io.ImageReadMode.RGB if rgb else torchvision.io.ImageReadMode.UNCHANGED

        def decode(data: bytes) -> torch.Tensor:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                return decode_png(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=mode)
        return decode
    from PIL import Image

    def decode_pil(data: bytes) -> torch.Tensor:
        with Image.open(io.BytesIO(data)) as img:
            arr = np.asarray(img.convert("RGB") if rgb else img)
        arr = arr[:, :, None] if arr.ndim == 2 else arr
        return torch.from_numpy(arr.copy()).permute(2, 0, 1)
    return decode_pil


def _write_cache(path: Path, obj: dict[str, Any], *, stale: str) -> None:
    """Write atomically, then drop older caches of the same source."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        torch.save(obj, tmp)
        os.replace(tmp, path)
    except OSError as exc:  # a cache that cannot be written only costs time
        warnings.warn(f"could not write cache {path}: {exc}", stacklevel=3)
        tmp.unlink(missing_ok=True)
        return
    for old in path.parent.glob(stale):
        if old != path:
            old.unlink(missing_ok=True)


# --------------------------------------------------------------------------- CIFAR-10 / 100, CINIC-10


def _load_cifar10(root: Path, download: bool, *, verify: bool = True, source: str = "auto",
                  progress: bool = True) -> ImageData:
    cls = torchvision.datasets.CIFAR10
    if source not in ("auto", "pickle", "png"):
        raise ConfigError(f"Invalid source {source!r} for cifar10; choose one of auto, pickle, png")
    png = root / "cifar10-png"
    png_present = (png / "train").is_dir() and (png / "test").is_dir()
    download_error = None
    if download and source != "png" and not _pickles_present(cls, root) and not (source == "auto" and png_present):
        download_error = _try_download(cls, root)
    if source != "png" and _pickles_present(cls, root):
        return _load_cifar_pickles("cifar10", cls, root, verify=verify, label_key="labels", n_classes=10)
    if source != "pickle" and png_present:
        # The PNG copy holds the images class by class (it has no record of the pickles'
        # interleaving); training shuffles and subset() samples, so only the order differs.
        if not verify:
            _unverified("cifar10")
        else:
            # The per-file sha256 manifests are what makes this tree verifiable; without them
            # verify=True would silently check counts only.
            absent = [f"{s}.sha256" for s in ("train", "test") if not (png / f"{s}.sha256").is_file()]
            if absent:
                raise _corrupt(png, f"lacks the checksum manifest(s) {', '.join(absent)}, so its PNGs cannot be "
                               "verified; copy them with the tree (cifar10-png/train.sha256, test.sha256) or load "
                               "with verify=False")
        splits = {}
        for split, per_class in (("train", 5000), ("test", 1000)):
            splits[split] = _decode_png_split(
                root, png / split, tag="cifar10-png", classes=CIFAR10_CLASSES, per_class=per_class,
                manifest=png / f"{split}.sha256", rgb=False, verify=verify, progress=progress)
        mean, std = _STATS["cifar10"]
        return ImageData("cifar10", *splits["train"], *splits["test"], CIFAR10_CLASSES, mean, std)
    expected, searched = [], []
    if source != "png":
        expected += _pickle_expected(cls)
        searched.append(root / cls.base_folder)
    if source != "pickle":
        expected += ["cifar10-png/{train,test}/<class>/NNNN.png (+ train.sha256, test.sha256)"]
        searched.append(png)
    raise _not_found("cifar10", root, expected, searched,
                     how=f"or call load_dataset('cifar10', download=True) when online (official source: {cls.url}).",
                     download_error=download_error)


def _load_cifar100(root: Path, download: bool, *, verify: bool = True) -> ImageData:
    cls = torchvision.datasets.CIFAR100
    download_error = None
    if not _pickles_present(cls, root) and download:
        download_error = _try_download(cls, root)
    if not _pickles_present(cls, root):
        raise _not_found("cifar100", root, _pickle_expected(cls), [root / cls.base_folder],
                         how=f"or call load_dataset('cifar100', download=True) when online "
                             f"(official source: {cls.url}).",
                         download_error=download_error)
    return _load_cifar_pickles("cifar100", cls, root, verify=verify, label_key="fine_labels", n_classes=100)


def _load_cinic10(root: Path, download: bool, *, include_valid: bool = False, verify: bool = True,
                  progress: bool = True) -> ImageData:
    base = root / "cinic-10"
    splits_needed = ["train", "test"] + (["valid"] if include_valid else [])
    if not all((base / s).is_dir() for s in splits_needed):
        raise _not_found(
            "cinic10", root, [f"cinic-10/{s}/<class>/*.png" for s in splits_needed], [base],
            how=f"vflkit does not download CINIC-10 (no torchvision source): get CINIC-10.tar.gz from {_CINIC_URL} "
                "and unpack it into <data root>/cinic-10/ (tar -xzf CINIC-10.tar.gz -C <data root>/cinic-10).")
    if not verify:
        _unverified("cinic10")
    # CINIC-10 has 90,000 images per split, 9,000 per class; some ImageNet-derived ones are
    # greyscale, so every image is decoded as RGB.
    parts = {s: _decode_png_split(root, base / s, tag="cinic10", classes=CIFAR10_CLASSES, per_class=9000,
                                  manifest=None, rgb=True, verify=verify, progress=progress)
             for s in splits_needed}
    x_tr, y_tr = parts["train"]
    if include_valid:
        x_tr, y_tr = torch.cat([x_tr, parts["valid"][0]]), torch.cat([y_tr, parts["valid"][1]])
    mean, std = _STATS["cinic10"]
    return ImageData("cinic10", x_tr, y_tr, *parts["test"], CIFAR10_CLASSES, mean, std)


# --------------------------------------------------------------------------- tabular


def _load_breast_cancer(root: Path, download: bool) -> TabularData:
    from sklearn.datasets import load_breast_cancer

    bunch = load_breast_cancer(as_frame=True)
    features, target = bunch.data, bunch.target.astype(np.int64)
    if features.shape != (569, 30) or set(target.unique()) != {0, 1}:
        raise DatasetCorruptError(f"scikit-learn's breast cancer data is {features.shape}, expected (569, 30); "
                                  "reinstall scikit-learn")
    # scikit-learn's coding: 0 = malignant, 1 = benign
    return TabularData("breast_cancer", features, target.rename("target"), "binary")


def criteo_file(root: Path) -> Path | None:
    """The Criteo file under ``root`` that :func:`load_dataset` would read; None where there is none."""
    return _resolve_file(root, "criteo", None, _CRITEO_FILES)


def _resolve_file(root: Path, folder: str, file: str | None, defaults: tuple[str, ...]) -> Path | None:
    if file is not None:
        p = Path(file).expanduser()
        p = p if p.is_absolute() else root / folder / p
        return p if p.is_file() else None
    return next((root / folder / n for n in defaults if (root / folder / n).is_file()), None)


def _read_csv(path: Path, **kwargs: Any) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, **kwargs)
    except (pd.errors.ParserError, ValueError, UnicodeDecodeError, EOFError) as exc:
        raise _corrupt(path, f"cannot be parsed as the expected CSV ({type(exc).__name__}: {exc})") from exc
    if not df.index.equals(pd.RangeIndex(len(df))):  # pandas' silent reaction to rows longer than the header
        raise _corrupt(path, "has rows with more fields than its header")
    return df


def _load_credit_card(root: Path, download: bool, *, file: str | None = None, verify: bool = True) -> TabularData:
    path = _resolve_file(root, "uci_credit_card", file, ("UCI_Credit_Card.csv",))
    if path is None:
        name = file or "UCI_Credit_Card.csv"
        raise _not_found("credit_card", root, [f"uci_credit_card/{name}"], [root / "uci_credit_card"],
                         how=f"vflkit does not download it: get it from {_CREDIT_URL}.")
    df = _read_csv(path)
    uci, kaggle = list(CREDIT_CARD_COLUMNS), list(CREDIT_CARD_COLUMNS.values())
    cols = [str(c) for c in df.columns]
    if cols and cols[0] in ("ID", "Unnamed: 0", ""):
        ids = df.iloc[:, 0]
        df = df.iloc[:, 1:]
        cols = cols[1:]
    else:
        ids = None
    if cols == uci and len(df) and str(df.iloc[0, 0]) == "LIMIT_BAL":
        # UCI's spreadsheet saved as CSV keeps its second header row (the long names)
        df, ids = df.iloc[1:].apply(pd.to_numeric, errors="coerce"), None if ids is None else ids.iloc[1:]
    if cols == kaggle or cols == uci:
        df.columns = uci
    else:
        raise _corrupt(path, f"has columns {cols[:4]}...{cols[-2:]} ({len(cols)}), expected ID + {kaggle[0]}.."
                       f"{kaggle[-1]} (Kaggle) or X1..X23,Y (UCI): 24 after the ID")
    if df.isna().any().any() or not all(pd.api.types.is_numeric_dtype(t) for t in df.dtypes):
        raise _corrupt(path, "holds missing or non-numeric values")
    if verify and len(df) != 30000:
        raise _corrupt(path, f"has {len(df)} rows, expected 30000")
    target = df.pop("Y").astype(np.int64)
    if not set(target.unique()) <= {0, 1}:
        raise _corrupt(path, f"label takes values {sorted(target.unique())[:5]}, expected 0/1")
    if ids is not None:
        if ids.duplicated().any():
            raise _corrupt(path, f"ID is not unique ({int(ids.duplicated().sum())} repeated)")
        df.index = pd.Index(ids.astype(np.int64).to_numpy(), name="ID")
        target.index = df.index
    if verify:
        _verify_credit_card(path, df, target)
    else:
        _unverified("credit_card")
    return TabularData("credit_card", df, target.rename("Y"), "binary")


def _verify_credit_card(path: Path, features: pd.DataFrame, target: pd.Series) -> None:
    """The file is the published CSV, or holds exactly its values (IDs 1..30000 if it has IDs)."""
    if _file_digest(path, "sha256") == _CREDIT_SHA256:
        return
    values = np.column_stack([features.to_numpy(np.float64), target.to_numpy(np.float64)])
    if not np.array_equal(values, np.round(values)):
        raise _corrupt(path, "holds non-integer values; the original's are all integers")
    digest = hashlib.sha256(np.ascontiguousarray(values, dtype="<i8").tobytes()).hexdigest()
    if digest != _CREDIT_VALUES_SHA256:
        raise _corrupt(path, f"sha256 is not the published {_CREDIT_SHA256} and its values X1..X23,Y differ from "
                       "the original's (a changed value, row or column order); if the change is deliberate, "
                       "load with verify=False")
    if features.index.name == "ID" and not np.array_equal(features.index.to_numpy(), np.arange(1, len(features) + 1)):
        raise _corrupt(path, "IDs are not 1..30000 in order as in the original")


def _load_criteo(root: Path, download: bool, *, file: str | None = None, nrows: int | None = None,
                 verify: bool = True) -> TabularData:
    if nrows is not None and nrows < 1:
        raise ConfigError(f"nrows must be >= 1 or None (all rows), got {nrows}")
    path = _resolve_file(root, "criteo", file, _CRITEO_FILES)
    if path is None:
        names = [file] if file else list(_CRITEO_FILES)
        raise _not_found("criteo", root, [f"criteo/{n}" for n in names], [root / "criteo"],
                         how=f"vflkit does not download it: get {_CRITEO_URL}. Any one of these files suffices; "
                             "pick one with file=.")
    if verify:
        actual = _file_digest(path, "sha256")
        if actual not in _CRITEO_SHA256.values():
            known = _CRITEO_SHA256.get(path.name)
            raise _corrupt(path, f"sha256 is {actual}, the published {path.name}'s is {known}" if known else
                           f"sha256 is {actual}, which is neither published sample's (train.tiny.csv, "
                           "criteo_sample.txt); vflkit knows no checksum for other Criteo files, so load them "
                           "with verify=False")
    else:
        _unverified("criteo")
    with open(path, "r", errors="replace") as f:
        first = f.readline()
    columns = ["label", *CRITEO_DENSE, *CRITEO_SPARSE]
    dtypes = {"label": "int64", **{c: "float64" for c in CRITEO_DENSE}, **{c: str for c in CRITEO_SPARSE}}
    na = {c: [""] for c in CRITEO_DENSE}  # empty = missing; only the integer columns become NaN
    common = dict(dtype=dtypes, keep_default_na=False, na_values=na, nrows=nrows)
    header = [h.strip().strip('"').lower() for h in first.rstrip("\r\n").split(",")]
    if header[:2] == ["id", "label"]:
        if header != [c.lower() for c in ["Id", *columns]]:
            raise _corrupt(path, f"header is {first.strip()[:80]}..., expected Id,Label,I1..I13,C1..C26")
        df = _read_csv(path, header=0, names=["Id", *columns], **{**common, "dtype": {**dtypes, "Id": "int64"}})
        df = df.set_index("Id")
    elif header[0] == "label":
        if header != [c.lower() for c in columns]:
            raise _corrupt(path, f"header is {first.strip()[:80]}..., expected label,I1..I13,C1..C26")
        df = _read_csv(path, header=0, names=columns, **common)
    elif "\t" in first:
        # a longer first line would silently become the index; shorter lines are copies with
        # their trailing empty fields stripped (missing categories)
        if len(first.rstrip("\r\n").split("\t")) > len(columns):
            raise _corrupt(path, f"line 1 has more than the {len(columns)} tab-separated fields of train.txt")
        df = _read_csv(path, sep="\t", header=None, names=columns, **common)
    else:
        raise _corrupt(path, "is none of the Criteo layouts: Kaggle CSV (Id,Label,I1..), DeepCTR CSV (label,I1..) "
                       "or tab-separated train.txt/dac_sample.txt")
    # trailing fields some copies strip read as NaN; they are missing categories
    df[list(CRITEO_SPARSE)] = df[list(CRITEO_SPARSE)].fillna("")
    target = df.pop("label")
    if not set(target.unique()) <= {0, 1}:
        raise _corrupt(path, f"label takes values {sorted(target.unique())[:5]}, expected 0/1")
    return TabularData("criteo", df, target, "binary", CRITEO_SPARSE)


def _load_mimic3(root: Path, download: bool, *, file: str | None = None, target: str | None = None,
                 verify: bool = True) -> TabularData:
    path = _resolve_file(root, "mimic3", file, ("mimic3.csv", "mimic3d.csv"))
    if path is None:
        raise _not_found(
            "mimic3", root, [f"mimic3/{file or 'mimic3.csv'}"], [root / "mimic3"],
            how="vflkit cannot download it: MIMIC-III may not be redistributed. Get credentialed access on "
                f"PhysioNet ({_MIMIC_URL}: account, CITI training, signed data use agreement), build the "
                "per-admission table mimic3d.csv (58,976 admissions: hadm_id, demographics, LOSdays, the counts "
                "NumCallouts..TotalNumInteract, ExpiredHospital, LOSgroupNum; the aggregation D. Scarlat "
                "published as Kaggle 'drscarlat/mimic3d') and save it as <data root>/mimic3/mimic3.csv. vflkit then "
                "applies Huang et al. 2023 (VFedTrans): it drops " + ", ".join(MIMIC3_DROPPED[1:])
                + " and keeps the 15 count features with target LOSgroupNum (4 length-of-stay groups). "
                "A CSV of just those 15 columns plus the target also works.")
    df = _read_csv(path)
    names = [target] if target is not None else list(_MIMIC3_TARGETS)
    tcol = next((c for c in names if c in df.columns), None)
    if tcol is None:
        raise _corrupt(path, f"has no target column {' or '.join(names)} (columns: {list(df.columns)[:30]})")
    index = pd.Index(df["hadm_id"].to_numpy(), name="hadm_id") if "hadm_id" in df.columns else None
    y = df[tcol]
    if all(c in df.columns for c in MIMIC3_DROPPED):
        features = df.drop(columns=list(MIMIC3_DROPPED) + ([tcol] if tcol not in MIMIC3_DROPPED else []))
    else:
        features = df.drop(columns=[tcol] + (["hadm_id"] if index is not None else []))
    if features.shape[1] != 15 or not all(pd.api.types.is_numeric_dtype(t) for t in features.dtypes):
        raise _corrupt(path, f"gives {features.shape[1]} feature columns ({list(features.columns)[:20]}), "
                       "expected the 15 numeric ones of Huang et al. 2023: " + ", ".join(MIMIC3_FEATURES))
    if features.isna().any().any() or y.isna().any():
        raise _corrupt(path, "holds missing values (features or target)")
    if not pd.api.types.is_numeric_dtype(y) or (y != y.round()).any() or y.min() < 0:
        raise _corrupt(path, f"target {tcol!r} is not a non-negative integer class")
    y = y.astype(np.int64)
    n_classes = int(y.max()) + 1
    if verify:
        if len(df) != 58976:
            raise _corrupt(path, f"has {len(df)} rows, expected 58976 (Huang et al. 2023)")
        # the paper's task (default target) has 4 length-of-stay groups; another target is the user's choice
        if target is None and sorted(y.unique()) != [0, 1, 2, 3]:
            raise _corrupt(path, f"target {tcol!r} takes values {sorted(y.unique())[:10]}, expected 0..3")
    else:
        _unverified("mimic3")
    if index is not None:
        features.index, y.index = index, index
    return TabularData("mimic3", features, y.rename(tcol), "binary" if n_classes <= 2 else "multiclass")


def encode_criteo(data: TabularData, *, min_count: int = 1) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Criteo (columns I1..I13, C1..C26) as model inputs ``(dense, sparse, vocab_sizes)``.

    ``dense``: float32 ``[N, 13]``, ``log(1 + x)`` for ``x > 0`` (the usual DeepFM
    preprocessing), ``x`` itself for ``x <= 0`` (I2 holds small negatives), 0 for missing.
    ``sparse``: int64 ``[N, 26]``, 0 for a missing category or one seen fewer than ``min_count``
    times, 1..V-1 for the others in sorted order; V per column in ``vocab_sizes``. The
    vocabulary is built from ``data`` itself, as DeepCTR's examples do on the whole sample.
    """
    if min_count < 1:
        raise ConfigError(f"min_count must be >= 1, got {min_count}")
    missing = [c for c in (*CRITEO_DENSE, *CRITEO_SPARSE) if c not in data.features.columns]
    if missing:
        raise ConfigError(f"encode_criteo needs Criteo's columns I1..I13, C1..C26; missing {missing[:5]}")
    x = data.features[list(CRITEO_DENSE)].to_numpy(dtype=np.float64)
    dense = np.where(x > 0, np.log1p(np.where(x > 0, x, 0.0)), x)
    dense = np.nan_to_num(dense, nan=0.0)
    sparse = np.zeros((len(x), len(CRITEO_SPARSE)), dtype=np.int64)
    vocab = []
    for j, col in enumerate(CRITEO_SPARSE):
        values = data.features[col].astype(str)
        counts = values[values != ""].value_counts()
        kept = sorted(counts.index[counts >= min_count])
        sparse[:, j] = pd.Index(kept).get_indexer(values) + 1  # -1 (missing, rare) -> 0
        vocab.append(len(kept) + 1)
    return torch.from_numpy(dense.astype(np.float32)), torch.from_numpy(sparse), vocab


_LOADERS: dict[str, Callable[..., ImageData | TabularData]] = {
    "mnist": partial(_load_idx_dataset, "mnist", "MNIST"),
    "fashion_mnist": partial(_load_idx_dataset, "fashion_mnist", "FashionMNIST"),
    "cifar10": _load_cifar10,
    "cifar100": _load_cifar100,
    "cinic10": _load_cinic10,
    "breast_cancer": _load_breast_cancer,
    "credit_card": _load_credit_card,
    "criteo": _load_criteo,
    "mimic3": _load_mimic3,
}
