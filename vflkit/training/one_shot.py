"""The trainer of the one-shot family: representation transfer on tabular data, then a classifier.

APC-VFL (Irureta et al. 2025), its Ablation and Local baselines and VFedTrans
(:data:`vflkit.methods.ONE_SHOT_METHODS`) run a short protocol once between an active and a
passive participant; the active participant then trains an ordinary classifier on its enhanced
features (step ④, :func:`classifier`), scored by stratified cross-validation on its own samples.
Table 2's comparison on aligned data only is the same family on :func:`build_aligned_parties`.
"""

from __future__ import annotations

import functools
import time
import warnings
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Sequence

import numpy as np
import pandas as pd
import torch
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from .. import records
from ..comm import ROUNDS_COUNTED_AS, Channel, Ledger, Party
from ..config import SHA1_10, KeyedRun, KeyFormat, check_dataset, check_int, check_name, check_rate, data_root
from ..errors import BudgetExhausted, ConfigError, DatasetNotFoundError, DivergenceError
from ..methods import get_one_shot_method
from ..methods.aligned_splitnn import AlignedSplitNN, footprint_splitnn
from ..methods.apc_vfl import APCVFLJoint, footprint_apc_vfl
from ..methods.oneshot import ADAM_LR, OneShotMethod, standardize
from ..methods.vfedtrans import footprint_vfedtrans
from ..partition import APC_VFL_N_ACTIVE, apc_vfl_partition, partial_alignment
from . import dataset as cached_dataset

@dataclass(frozen=True)
class DatasetSpec:
    """How APC-VFL uses one dataset (Sec. 5, Appendices A-B)."""

    label: str  # the reference CSV's dataset name
    title: str  # for figures
    n_pool: int | None  # rows kept after the reduction (None: all)
    n_active: int  # samples the active participant holds
    aligned: tuple[int, ...]  # Fig. 5's |D_A|
    few_aligned: tuple[int, ...]  # Fig. 8 / Appendix D.3
    batch_size: int
    n_test_table2: int  # aligned samples held out as Table 2's test set
    metric: str  # Fig. 5's metric
    n_columns: int = 0  # feature columns of a table of your own (the paper's: not needed, 0)


DATASETS: dict[str, DatasetSpec] = {
    # 500 of the 569 samples go to the active participant (Appendix A).
    "breast_cancer": DatasetSpec("BreastCancerWisconsin", "Breast Cancer Wisconsin", None, 500,
                                 (250, 200, 150, 100), (), 8, 50, "accuracy"),
    # "Reduced to 20000 samples": we draw 20000 rows and give the active participant all of
    # them; the passive participant holds the aligned ones (the paper does not give its size).
    "credit_card": DatasetSpec("UCICreditCard", "UCI Credit Card", 20000, 20000,
                               (10000, 7500, 5000, 2500), (750, 500, 250, 100), 128, 500, "f1"),
    "mimic3": DatasetSpec("MIMIC-III", "MIMIC-III", 20000, 20000,
                          (10000, 7500, 5000, 2500), (750, 500, 250, 100), 128, 500, "micro_f1"),
}


def dataset_spec(dataset: str) -> DatasetSpec:
    """How APC-VFL uses ``dataset``: :data:`DATASETS` for the paper's three. For a table of your
    own (:func:`vflkit.data.register_dataset`) every row belongs to the active participant (as Credit Card's 20000 do),
    batches are 8 rows below 5000 rows and 128 from there (the paper's Breast Cancer and Credit
    Card sizes), Table 2 holds out 10 % of the rows (at least one per class) as its test set, and
    the metric is accuracy. Images and unknown names are a ConfigError saying what APC-VFL takes.
    """
    if dataset in DATASETS:
        return DATASETS[dataset]
    check_dataset(dataset, method="APC-VFL", kind="tabular", builtin=DATASETS)
    data = cached_dataset(dataset)
    n = len(data.target)
    return DatasetSpec(dataset, dataset, None, n, (), (), 8 if n < 5000 else 128,
                       max(data.num_classes, round(0.1 * n)), "accuracy", n_columns=data.features.shape[1])


#: Methods whose result does not depend on the aligned count (trained on local data only).
LOCAL_METHODS = ("local", "ablation")
#: Fig. 5's methods, by the names of :data:`vflkit.methods.ONE_SHOT_METHODS`.
FIG5_METHODS = ("local", "ablation", "vfedtrans", "apc_vfl_mse", "apc_vfl_mae")
#: Table 2's methods (aligned data only).
TABLE2_METHODS = ("splitnn", "apc_vfl_joint")


@dataclass(frozen=True, kw_only=True)
class OneShotRun(KeyedRun):
    """One APC-VFL run: a (dataset, method, aligned count, feature partition, repetition).

    ``kind`` is "fig5" (one-shot method, 10-fold CV on the active participant's data) or
    "table2" (aligned data only, fixed test set). Its key (:class:`~vflkit.config.KeyedRun`) is a
    readable prefix and 10 hex digits of SHA-1.
    """

    #: Which paper the record belongs to (results/<profile>/<paper>/); not part of the key.
    paper: ClassVar[str] = "apc_vfl"

    kind: str
    dataset: str
    method: str
    n_aligned: int | None
    n_active_features: int
    seed: int
    epochs: int = 200
    patience: int = 10
    lr: float = ADAM_LR  # Appendix B: Adam's original parameters
    lam: float = 0.01
    folds: int = 10
    val_fraction: float = 0.1

    #: The fields every key hashes, default or not (those of the first committed records);
    #: a field added later is hashed only when it differs from its default. Never edit this.
    KEYED_FIELDS: ClassVar[tuple[str, ...]] = (
        "kind", "dataset", "method", "n_aligned", "n_active_features", "seed", "epochs", "patience", "lr",
        "lam", "folds", "val_fraction")

    def __post_init__(self) -> None:
        for name in ("kind", "dataset", "method"):
            object.__setattr__(self, name, check_name(name, getattr(self, name)))
        check_int("seed", self.seed)
        check_int("n_aligned", self.n_aligned, minimum=1, optional=True)
        check_int("n_active_features", self.n_active_features)  # True == 1 must not pass as a count
        for name in ("epochs", "patience"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("folds", self.folds, minimum=2)
        check_rate("lr", self.lr)
        if isinstance(self.lam, bool) or not isinstance(self.lam, (int, float)) or not 0 <= self.lam < float("inf"):
            raise ConfigError(f"lam must be a finite number >= 0, got {self.lam!r}")
        check_rate("val_fraction", self.val_fraction)
        if self.val_fraction >= 1:
            raise ConfigError(f"val_fraction must be below 1, got {self.val_fraction!r}")
        if self.kind not in ("fig5", "table2"):
            raise ConfigError(f"Invalid kind {self.kind!r}; choose one of fig5, table2")
        spec = dataset_spec(self.dataset)  # a ConfigError for images or an unknown name
        valid = FIG5_METHODS if self.kind == "fig5" else TABLE2_METHODS
        if self.method not in valid:
            raise ConfigError(f"Invalid {self.kind} method {self.method!r}; choose one of {', '.join(valid)}")
        if self.dataset in DATASETS and self.n_active_features not in APC_VFL_N_ACTIVE:
            raise ConfigError(f"n_active_features must be one of {APC_VFL_N_ACTIVE}, got {self.n_active_features}")
        n_columns = spec.n_columns
        if self.dataset not in DATASETS and not 1 <= self.n_active_features < n_columns:
            # a table of your own: the active participant holds its first n_active_features columns
            raise ConfigError(f"n_active_features must leave the passive participant a column: choose 1.."
                              f"{n_columns - 1} of {self.dataset}'s {n_columns} feature columns, got "
                              f"{self.n_active_features}")
        if (self.n_aligned is None) != (self.kind == "fig5" and self.method in LOCAL_METHODS):
            raise ConfigError(f"{self.method}: n_aligned must be None exactly for the local methods "
                              f"{LOCAL_METHODS} (they never use aligned samples)")
        if self.n_aligned is not None and self.n_aligned > spec.n_active:
            # the aligned samples are drawn from the active participant's: more cannot exist, and
            # a silent clamp would record (and plot) a count that was never used
            raise ConfigError(f"n_aligned={self.n_aligned} exceeds the {spec.n_active} samples the active participant "
                              f"holds in {self.dataset}; choose 1..{spec.n_active}")
        if self.kind == "table2" and self.n_aligned is not None and self.n_aligned <= spec.n_test_table2:
            raise ConfigError(f"n_aligned={self.n_aligned} leaves no training samples: Table 2 holds out "
                              f"{spec.n_test_table2} aligned samples of {self.dataset} as its test set; choose "
                              f"{spec.n_test_table2 + 1}..{spec.n_active}")

    #: The committed records' digest (:class:`~vflkit.config.KeyedRun`): never change it.
    KEY_FORMAT: ClassVar[KeyFormat] = SHA1_10

    def key_prefix(self) -> str:
        """The record's file name starts with the run's cell, readable in a listing."""
        aligned = "all" if self.n_aligned is None else self.n_aligned
        return f"{self.kind}_{self.dataset}_{self.method}_al{aligned}_a{self.n_active_features}_s{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (the record's ``config``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "OneShotRun":
        """Inverse of :meth:`to_dict`; unknown keys are an error."""
        cls.refuse_unknown(d, (f.name for f in fields(cls)))
        return cls(**d)

    def replace(self, **changes: Any) -> "OneShotRun":
        """A copy with some fields changed."""
        return replace(self, **changes)


def available_datasets(datasets: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The datasets that load, and a message for each one that does not (MIMIC-III needs a
    credentialed download; see :func:`vflkit.data.load_dataset`)."""
    ok, missing = [], {}
    for name in datasets:
        try:
            cached_dataset(name)
            ok.append(name)
        except DatasetNotFoundError as e:
            missing[name] = str(e)
    return ok, missing


@functools.lru_cache(maxsize=8)
def _present_in(root: str, datasets: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(available_datasets(datasets)[0])


def unavailable(runs: Sequence[OneShotRun]) -> list[OneShotRun]:
    """The runs on data that is not here (MIMIC-III cannot be redistributed), looked up once per data folder."""
    here = _present_in(str(data_root()), tuple(sorted({c.dataset for c in runs}))) if runs else ()
    return [c for c in runs if c.dataset not in here]


def unavailable_why(titles: Sequence[str]) -> str:
    """Why the runs on ``titles`` cannot be made here: MIMIC-III's licence forbids passing it on."""
    return "data not redistributable" if titles and all("MIMIC" in t for t in titles) else "data not here"


# ------------------------------------------------------------------------------ parties


def _pool(cfg: OneShotRun) -> tuple[pd.DataFrame, np.ndarray]:
    """The dataset after the paper's reduction (a random ``n_pool`` rows, seeded by the run)."""
    data = cached_dataset(cfg.dataset)
    x, y = data.features.reset_index(drop=True), data.target.to_numpy()
    n_pool = dataset_spec(cfg.dataset).n_pool
    if n_pool is not None and n_pool < len(x):
        rows = np.sort(np.random.default_rng(cfg.seed).permutation(len(x))[:n_pool])
        x, y = x.iloc[rows].reset_index(drop=True), y[rows]
    return x, y


def _tensor(df: pd.DataFrame) -> torch.Tensor:
    return torch.tensor(df.to_numpy(dtype=np.float32))


def _party_columns(cfg: OneShotRun, x: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The active and the passive participant's columns of ``x``, as numbers.

    The paper's datasets: Appendix A's partition (:func:`~vflkit.partition.apc_vfl_partition`).
    A table of your own: the active participant holds its first ``n_active_features`` columns,
    the passive one the rest; a missing number becomes its column's mean and a categorical
    column (named in ``categorical``, or not numeric) one 0/1 column per category, as
    scikit-learn's OneHotEncoder writes it (the autoencoders take numbers, and codes 1, 2, 3
    would read as an order the categories do not have).
    """
    if cfg.dataset in DATASETS:
        act, pas = apc_vfl_partition(cfg.dataset, cfg.n_active_features, list(x.columns)).slices
        return x[list(act)], x[list(pas)]
    data = cached_dataset(cfg.dataset)
    categorical = [c for c in x.columns if c in data.categorical or not (pd.api.types.is_numeric_dtype(x[c])
                                                                         or pd.api.types.is_bool_dtype(x[c]))]
    names = list(x.columns)
    parts = []
    for cols in (names[:cfg.n_active_features], names[cfg.n_active_features:]):
        cats = [c for c in cols if c in categorical]
        numeric = x[[c for c in cols if c not in cats]].astype(np.float64)
        numeric = numeric.fillna(numeric.mean()).fillna(0.0)  # an all-missing column: 0
        onehot = pd.get_dummies(x[cats].astype("string"), dummy_na=bool(x[cats].isna().any().any()),
                                dtype=np.float32) if cats else None
        parts.append(numeric if onehot is None else pd.concat([numeric, onehot], axis=1))
    return parts[0], parts[1]


def build_parties(cfg: OneShotRun) -> tuple[Party, Party, Channel]:
    """The active and passive participant of a Fig. 5 run (each standardises its own columns)."""
    x, y = _pool(cfg)
    spec = dataset_spec(cfg.dataset)
    act_x, pas_x = _party_columns(cfg, x)
    n_aligned = cfg.n_aligned or 1  # local methods ignore the passive participant
    al = partial_alignment(len(x), n_active=spec.n_active, n_aligned=n_aligned, seed=cfg.seed)
    channel = Channel(Ledger())
    active = Party("active", channel=channel, ids={"train": al.active_ids},
                   features={"train": standardize(_tensor(act_x.loc[al.active_ids.numpy()]))},
                   labels={"train": torch.as_tensor(y[al.active_ids.numpy()])})
    passive = Party("passive", channel=channel, ids={"train": al.passive_ids},
                    features={"train": standardize(_tensor(pas_x.loc[al.passive_ids.numpy()]))})
    return active, passive, channel


def build_aligned_parties(cfg: OneShotRun) -> tuple[Party, Party, Channel]:
    """Table 2's participants: the aligned samples only, split into train and test
    (``n_test_table2`` of them, stratified); features scaled with training statistics."""
    x, y = _pool(cfg)
    spec = dataset_spec(cfg.dataset)
    al = partial_alignment(len(x), n_active=spec.n_active, n_aligned=cfg.n_aligned, seed=cfg.seed)
    ids = al.aligned_ids.numpy()
    train, test = train_test_split(ids, test_size=spec.n_test_table2, random_state=cfg.seed, stratify=y[ids])
    train, test = np.sort(train), np.sort(test)
    channel = Channel(Ledger())
    parties = []
    for name, frame in zip(("active", "passive"), _party_columns(cfg, x)):
        tr, te = _tensor(frame.loc[train]), _tensor(frame.loc[test])
        mean, std = tr.mean(0), tr.std(0)
        std = torch.where(std > 0, std, torch.ones_like(std))
        labels = {"train": torch.as_tensor(y[train]), "test": torch.as_tensor(y[test])} if name == "active" else None
        parties.append(Party(name, channel=channel, features={"train": (tr - mean) / std, "test": (te - mean) / std},
                             labels=labels, ids={"train": torch.as_tensor(train), "test": torch.as_tensor(test)}))
    return parties[0], parties[1], channel


# ------------------------------------------------------------------------------ training


def make_method(cfg: OneShotRun) -> OneShotMethod:
    """The one-shot method of a Fig. 5 run (a lookup in :data:`vflkit.methods.ONE_SHOT_METHODS`)."""
    return get_one_shot_method(cfg.method, lam=cfg.lam, **_settings(cfg))


def scores(y_true: np.ndarray, y_pred: np.ndarray, dataset: str) -> dict[str, float]:
    """The paper's metric(s): accuracy (Breast Cancer, and a table of your own), F1 of the
    positive class (Credit Card), micro / macro / weighted F1 (MIMIC-III's 4 classes)."""
    if dataset == "breast_cancer" or dataset not in DATASETS:
        return {"accuracy": float(accuracy_score(y_true, y_pred))}
    if dataset == "credit_card":
        return {"f1": float(f1_score(y_true, y_pred))}
    return {f"{avg}_f1": float(f1_score(y_true, y_pred, average=avg)) for avg in ("micro", "macro", "weighted")}


def classifier() -> Any:
    """The active participant's classifier of step ④ (unfitted)."""
    # Step ④: scikit-learn's logistic regression with its defaults (Sec. 5 names no settings),
    # standardised inside the pipeline (fitted on the training folds) to help lbfgs; on 256 nearly
    # collinear SELU features it may still stop at 100 iterations (a ConvergenceWarning, silenced
    # in cross_validate): a higher limit barely changes the F1 and costs far more time.
    return make_pipeline(StandardScaler(), LogisticRegression())


def cross_validate(z: np.ndarray, y: np.ndarray, dataset: str, *, folds: int, seed: int) -> dict[str, list[float]]:
    """Stratified ``folds``-fold CV of the classifier on the active participant's (enhanced)
    data; per-fold scores."""
    out: dict[str, list[float]] = {}
    with warnings.catch_warnings(), threadpool_limits(1):
        warnings.simplefilter("ignore", ConvergenceWarning)
        for tr, te in StratifiedKFold(folds, shuffle=True, random_state=seed).split(z, y):
            clf = classifier().fit(z[tr], y[tr])
            for k, v in scores(y[te], clf.predict(z[te]), dataset).items():
                out.setdefault(k, []).append(v)
    return out


def _ledger_summary(ledger: Ledger) -> dict[str, Any]:
    kinds = ledger.per_kind()
    return {"rounds_counted_as": ROUNDS_COUNTED_AS, "total": ledger.totals(), "eval": ledger.totals(phase="eval"),
            "per_kind": {k: int(v) for k, v in kinds["bytes"].items()} if len(kinds) else {}}


def train(cfg: OneShotRun, *, device: torch.device | None = None, checkpoint: Path | None = None,
          progress: bool = True, on_divergence: str = "raise",
          deadline: float | None = None) -> dict[str, Any]:
    """Run ``cfg`` and return its results: metrics per fold and their means, the autoencoders'
    (or SplitNN's) histories, the ledger's totals per kind, and the sizes the paper's footprint
    formulas need.

    Runs on the CPU whatever ``device`` says (the models are a few hundred thousand weights,
    batches of 8-128: a GPU would only add transfers). The autoencoders raise
    :class:`~vflkit.errors.DivergenceError` themselves, which ``on_divergence="record"`` records
    (NaN metrics, ``diverged`` saying why).

    ``checkpoint`` is not used: this family restarts a stopped run rather than resuming it. Its
    runs take seconds to a couple of minutes of CPU, so a killed run loses little, while per-epoch
    checkpoints would reach into every method's nested autoencoder loops. The budget holds
    without them: a run handed a ``deadline`` already passed raises
    :class:`~vflkit.errors.BudgetExhausted` unstarted, and one started finishes (overrunning the
    budget by at most one run's length).
    """
    if deadline is not None and time.time() >= deadline:
        raise BudgetExhausted(f"{cfg.key} not started: the budget is spent; rerun to compute it")
    # The models are tiny: one thread is faster than two, and on a shared CPU far faster; the
    # same holds for the BLAS under scikit-learn (cross_validate limits it).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(cfg)
    except DivergenceError as err:
        if on_divergence == "raise":
            raise
        # nothing trained is left to score: the run's metrics are NaN, and it says why
        nan = {k: float("nan") for k in scores(np.array([0, 1]), np.array([0, 1]), cfg.dataset)}
        return {"history": {}, "per_fold": {k: [v] for k, v in nan.items()}, "final": nan, "comm": {},
                "diverged": {"message": str(err)}}
    finally:
        torch.set_num_threads(threads)


def _settings(cfg: OneShotRun) -> dict[str, Any]:
    return {"epochs": cfg.epochs, "patience": cfg.patience, "lr": cfg.lr, "seed": cfg.seed,
            "batch_size": dataset_spec(cfg.dataset).batch_size, "val_fraction": cfg.val_fraction}


def _train(cfg: OneShotRun) -> dict[str, Any]:
    torch.manual_seed(cfg.seed)
    extra: dict[str, Any] = {}
    if cfg.kind == "fig5":
        active, passive, channel = build_parties(cfg)
        method = make_method(cfg)
        method.fit(active, passive)
        z = method.transform(active.features("train")).numpy()
        y = active.labels("train").numpy()
        per_fold = cross_validate(z, y, cfg.dataset, folds=cfg.folds, seed=cfg.seed)
        # the same encoder's other enhanced features (VFedTrans without the raw features),
        # scored on the same folds: a paired comparison at no training cost
        for name, zv in method.variants(active.features("train")).items():
            cv = cross_validate(zv.numpy(), y, cfg.dataset, folds=cfg.folds, seed=cfg.seed)
            extra.setdefault("variants", {})[name] = {
                "per_fold": cv, "final": {k: float(np.mean(v)) for k, v in cv.items()}, "enhanced_dim": int(zv.shape[1])}
        history = method.history
        extra.update({"n_active_samples": int(len(y)), "n_passive_samples": int(passive.n_samples()),
                      "enhanced_dim": int(z.shape[1]), "x_t": int(active.input_shape[0]),
                      "x_d": int(passive.input_shape[0])})
    else:
        active, passive, channel = build_aligned_parties(cfg)
        y_test = active.labels("test").numpy()
        if cfg.method == "splitnn":
            method = AlignedSplitNN(num_classes=int(active.labels("train").max()) + 1, **_settings(cfg))
            method.fit(active, passive)
            pred = method.predict(active, passive, "test").numpy()
            history = {"splitnn": method.history}
        else:
            method = APCVFLJoint(lam=cfg.lam, **_settings(cfg))
            method.fit(active, passive)
            with warnings.catch_warnings(), threadpool_limits(1):
                warnings.simplefilter("ignore", ConvergenceWarning)
                clf = classifier().fit(method.joint_features(active, passive, "train").numpy(),
                                       active.labels("train").numpy())
            pred = clf.predict(method.joint_features(active, passive, "test").numpy())
            history = method.history
        per_fold = {k: [v] for k, v in scores(y_test, pred, cfg.dataset).items()}
        extra = {"n_train": int(active.n_samples("train")), "n_test": int(len(y_test)),
                 "x_t": int(active.input_shape[0]), "x_d": int(passive.input_shape[0])}
    if channel.pending():
        raise RuntimeError(f"{cfg.method} left {channel.pending()} messages unread: protocol out of order")
    return {"history": history, "per_fold": per_fold, "final": {k: float(np.mean(v)) for k, v in per_fold.items()},
            "comm": _ledger_summary(channel.ledger), **extra}


def paper_footprint(record: dict[str, Any]) -> float:
    """The bytes APC-VFL's formulas (Eqs. 6-10) give a record's training phase, from the sizes and
    epochs the record holds; 0 for the local methods."""
    cfg = record["config"]
    if cfg["method"] in LOCAL_METHODS:
        return 0.0
    if cfg["kind"] == "table2":
        n = record["n_train"]
        if cfg["method"] == "splitnn":
            n_fit = n - int(round(n * cfg["val_fraction"]))
            return float(footprint_splitnn(record["history"]["splitnn"]["epochs"], n_fit,
                                           dataset_spec(cfg["dataset"]).batch_size))
        return float(footprint_apc_vfl(n))
    if cfg["method"] == "vfedtrans":
        return float(footprint_vfedtrans(cfg["n_aligned"], record["x_t"], record["x_d"]))
    return float(footprint_apc_vfl(cfg["n_aligned"]))


def run(cfg: OneShotRun, **kwargs: Any) -> dict[str, Any]:
    """The record of ``cfg``: :func:`vflkit.records.run_one` with this family's :func:`train`,
    on the CPU whatever ``device`` says (see :func:`train`; the record names the CPU)."""
    return records.run_one(cfg, train=train, **{**kwargs, "device": "cpu"})


def run_many(cfgs: Sequence[OneShotRun], **kwargs: Any) -> list[dict[str, Any]]:
    """The records of ``cfgs``: :func:`vflkit.records.run_many` with this family's :func:`train`,
    on the CPU whatever ``device`` says."""
    return records.run_many(cfgs, train=train, desc="APC-VFL runs", **{**kwargs, "device": "cpu"})


__all__ = ["DATASETS", "FIG5_METHODS", "dataset_spec", "LOCAL_METHODS", "TABLE2_METHODS", "DatasetSpec", "OneShotRun",
           "available_datasets", "build_aligned_parties", "build_parties", "classifier", "cross_validate",
           "make_method", "paper_footprint", "run", "run_many", "scores", "train", "unavailable",
           "unavailable_why"]
