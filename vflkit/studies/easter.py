"""EASTER (the journal version of VFedMH): Tables II, IV-VII and Figs. 4-6.

The algorithm is VFedMH's (:mod:`vflkit.methods.easter`); the setting and our choices where the
paper is silent: docs/studies.md (EASTER; ``shared/specs/easter.md`` argues each).
"""

from __future__ import annotations

from functools import partial
from itertools import product
from typing import Any, Callable, Iterable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .. import analysis, claims, network
from ..analysis import arch_metric
from ..config import check_profile, check_seeds, check_seeds_once, override_runs, split_run_overrides
from ..methods import RunConfig
from ..methods.cvfl import step_size as cvfl_step_size
from ..records import by_key, recorded
from ..report import side_by_side
from . import _split, base, register
from ._split import (FULL_GRADIENT_READING, GRADIENT_READINGS, RESNET_CUT, Groups, assign_models,
                     needs_gpu, rotate, run_priority, train_size)
from ._split import figure as _figure, view as _view
from .base import Artefact, Study, all_runs as unique

PAPER = "easter"
#: θ1..θ3 per dataset, in the order under which EASTER's Local row equals VFedMH's.
MODEL_SETS: dict[str, tuple[str, ...]] = {
    "mnist": ("cnn", "lenet", "mlp"), "fashion_mnist": ("cnn", "lenet", "mlp"),
    "cifar10": ("resnet18", "resnet34", "resnet50"), "criteo": ("deepfm", "wide_deep", "cnn_tabular")}
#: Our registry names -> the names the paper's tables print.
DATASET_NAMES = {"mnist": "MNIST", "fashion_mnist": "FMNIST", "cifar10": "CIFAR-10", "criteo": "CRITEO"}
METHOD_NAMES = {"local": "Local", "splitnn": "PyVertical", "c_vfl": "C_VFL", "agg_vfl": "Agg_VFL", "easter": "EASTER"}
BASELINES: tuple[str, ...] = ("splitnn", "c_vfl", "agg_vfl")
#: Per dataset: optimizer, learning rate, schedule (Sec. V-A4's rates; the rest our choice: CIFAR-10's decay is
#: not given, no weight decay; on Criteo Adam's default rate, as plain SGD barely moves DeepFM).
TRAINING: dict[str, dict[str, Any]] = {
    "mnist": {"optimizers": "sgd", "lr": 0.01},
    "fashion_mnist": {"optimizers": "sgd", "lr": 0.01},
    "cifar10": {"optimizers": "sgd_momentum", "lr": 0.1, "lr_schedule": "exponential", "lr_gamma": 0.95},
    "criteo": {"optimizers": "adam", "lr": 0.001},
}
#: The paper's datasets we do not have, and how to supply them.
MISSING_DATASETS: dict[str, str] = {
    "CIFAR-100": "put cifar-100-python/ (the python pickle version) under $VFLKIT_DATA; the paper's "
                 "ImageNet-pre-trained ResNets also need their torchvision weights (no 3x3-stem "
                 "equivalent exists, so a run here would train from scratch, labelled as such)",
    "CINIC-10": "put CINIC-10/{train,valid,test}/<class>/*.png under $VFLKIT_DATA "
                "(https://datashare.ed.ac.uk/handle/10283/3192); CIFAR-10 stands in for it in Table VI",
    "Criteo (full)": "put the 45M-row train.txt of the Criteo display-ads challenge under "
                     "$VFLKIT_DATA/criteo/ and pass criteo(file='train.txt'); here the 1,999-row "
                     "train.tiny.csv sample is used",
}

#: Per profile; ``criteo_seeds`` for Criteo (its 400 test rows give AUC a standard error of about 3 points).
PROFILE_SETTINGS: dict[str, dict[str, Any]] = {
    # CI, seconds: 256 MNIST images, 256 Criteo rows, one epoch; every artefact at its smallest.
    "smoke": {"datasets": ("mnist", "criteo"), "n_train": 256, "n_test": 256, "criteo_n_train": 256,
              "epochs": 1, "cvfl_epochs": 1, "criteo_epochs": 1, "seeds": (0,), "criteo_seeds": (0,),
              "cvfl_seeds": None, "table4_datasets": ("mnist", "criteo"), "table4_seeds": None,
              "table6_seeds": None, "fig6_seeds": None,
              "table5_datasets": ("mnist", "criteo"), "table6_datasets": ("criteo",), "table6_parties": (2, 4),
              "fig6_dataset": "mnist", "embedding_dims": (16, 128), "el_pls": ((1, 1), (1, 2))},
    # 2-core CPU, FMNIST and Criteo; the sizes and why (235 SGD steps, Criteo's 5 seeds): docs/studies.md (EASTER).
    "quick": {"datasets": ("fashion_mnist", "criteo"), "n_train": 6000, "n_test": 1000,
              "criteo_n_train": None, "epochs": 5, "cvfl_epochs": 1, "criteo_epochs": 3,
              "seeds": (0, 1, 2), "criteo_seeds": (0, 1, 2, 3, 4), "cvfl_seeds": None,
              "table4_datasets": ("criteo",), "table4_seeds": None, "table6_seeds": None, "fig6_seeds": (0, 1, 2),
              "table5_datasets": ("fashion_mnist", "criteo"), "table6_datasets": ("criteo",),
              "table6_parties": (2, 6, 10), "fig6_dataset": "fashion_mnist",
              "embedding_dims": (16, 128, 256), "el_pls": ((2, 1), (1, 1), (1, 2))},
    # Full data, 20 epochs (images) / 10 (Criteo); the CIFAR-10 ResNets need a GPU. Fig. 6 on 5
    # seeds: its neighbouring levels differ by tenths of a point, inside 3 seeds' noise band.
    "paper": {"datasets": ("mnist", "fashion_mnist", "cifar10", "criteo"), "n_train": None, "n_test": None,
              "criteo_n_train": None, "epochs": 20, "cvfl_epochs": 20, "criteo_epochs": 10,
              "seeds": (0, 1, 2), "criteo_seeds": (0, 1, 2, 3, 4), "cvfl_seeds": None,
              "table4_datasets": ("mnist", "fashion_mnist", "cifar10", "criteo"), "table4_seeds": None,
              "table6_seeds": None, "fig6_seeds": (0, 1, 2, 3, 4),
              "table5_datasets": ("fashion_mnist", "criteo", "cifar10"), "table6_datasets": ("criteo", "cifar10"),
              "table6_parties": (2, 4, 6, 8, 10), "fig6_dataset": "fashion_mnist",
              "embedding_dims": (16, 32, 64, 128, 256), "el_pls": ((2, 1), (1, 1), (1, 2))},
}
#: The columns of Tables II/IV/VII: θ1..θ3 as the reference names them.
THETA = ("party1", "party2", "party3")
#: Fig. 4's bandwidth sweep (Mbps; the paper's values are not given) at 10 ms latency.
FIG4_BANDWIDTHS: tuple[float, ...] = (5, 10, 50, 100, 500, 1000)
FIG4_LATENCY_MS = 10.0
#: Fig. 5: latency draws per class, averaged (each a full pricing; 5 keep it under a minute).
FIG5_DRAWS = 5


#: ``settings(profile, overrides=None)``: the profile's settings, any overridden (an unknown key is an error).
settings = partial(_split.settings, PROFILE_SETTINGS)


def _seeds(dataset: str, s: dict[str, Any], seeds: Sequence[int] | None) -> tuple[int, ...]:
    return check_seeds(seeds if seeds is not None else s["criteo_seeds"] if dataset == "criteo" else s["seeds"])


def _config(dataset: str, method: str, models: Sequence[str], seed: int, s: dict[str, Any], **kw: Any) -> RunConfig:
    """One run; C-VFL at the dataset's rate / Q."""
    criteo = dataset == "criteo"
    epochs = s["cvfl_epochs"] if method == "c_vfl" else s["criteo_epochs"] if criteo else s["epochs"]
    training = TRAINING[dataset] | ({"lr": cvfl_step_size(TRAINING[dataset]["lr"])} if method == "c_vfl" else {})
    return RunConfig(paper=PAPER, dataset=dataset, method=method, models=tuple(models),
                     partition="strips_width", n_parties=kw.pop("n_parties", 4), active=0, batch_size=128,
                     epochs=epochs, seed=seed, n_train=s["criteo_n_train"] if criteo else s["n_train"],
                     n_test=None if criteo else s["n_test"], resnet_cut=RESNET_CUT, **training, **kw)


def _baselines(s: dict[str, Any], seed: int) -> tuple[str, ...]:
    """The baselines run on ``seed``: C-VFL only on the profile's ``cvfl_seeds`` (None: all)."""
    return tuple(m for m in BASELINES if m != "c_vfl" or s["cvfl_seeds"] is None or seed in s["cvfl_seeds"])


def configs(profile: str, *, seeds: Sequence[int] | None = None, overrides: dict[str, Any] | None = None) -> Groups:
    """Every run, by artefact (a shared run is trained once). ``seeds=None``: the profile's."""
    s, run_fields = split_run_overrides(PROFILE_SETTINGS[check_profile(profile)], overrides, RunConfig)
    # the seeds argument replaces every seed setting (Criteo's, Fig. 6's, ...)
    check_seeds_once(seeds, overrides, keys=[k for k in s if k.endswith("seeds")])
    out: Groups = {g: [] for g in ("table2", "table4", "table6", "fig6", "cvfl_host_lr", "embedding_gradient")}

    def add(group: str, run: RunConfig, twin: bool = False) -> None:
        """``run`` into ``group``; on a CPU, C-VFL's run at the dataset's own rate beside it and the 1/C ``twin``."""
        out[group].append(run)
        if run.method == "c_vfl" and not needs_gpu(run):
            out["cvfl_host_lr"].append(run.replace(lr=TRAINING[run.dataset]["lr"]))
        if twin and not needs_gpu(run):
            out["embedding_gradient"].append(run.replace(options={"embedding_gradient": "full"}))
    for dataset in s["datasets"]:
        models = MODEL_SETS[dataset]
        for seed in _seeds(dataset, s, seeds):
            het = assign_models(models, seed=seed)
            for m, method in product(models, ("local", *_baselines(s, seed))):
                add("table2", _config(dataset, method, (m,) * 4 if method == "local" else rotate(het, m), seed, s))
            add("table2", _config(dataset, "easter", het, seed, s), twin=True)
            if dataset not in s["table4_datasets"] or (seeds is None and s["table4_seeds"] is not None
                                                       and seed not in s["table4_seeds"]):
                continue
            for m, method in product(models, ("local", *_baselines(s, seed), "easter")):
                # Table IV's 1/C twin on the images only (Criteo is not testable at its scale)
                add("table4", _config(dataset, method, (m,) * 4, seed, s),
                    twin=method == "easter" and dataset != "criteo")
    for dataset in s["table6_datasets"]:
        models = MODEL_SETS[dataset]
        own = seeds is None and s["table6_seeds"] is not None
        for seed in check_seeds(s["table6_seeds"]) if own else _seeds(dataset, s, seeds):
            for c, method in product(s["table6_parties"], (*_baselines(s, seed), "easter")):
                het = assign_models(models, c, seed=seed) if c >= len(models) else tuple(models[:c])
                # C = 2: one passive party, r_1 = 0, the active party sees E_1; recorded
                options = {"allow_single_passive": True} if method == "easter" and c == 2 else {}
                out["table6"].append(_config(dataset, method, het, seed, s, n_parties=c, feature_parts=10,
                                             options=options))
    dataset = s["fig6_dataset"]
    for seed in _seeds(dataset, s, seeds if seeds is not None else s["fig6_seeds"]):
        het = assign_models(MODEL_SETS[dataset], seed=seed)
        out["fig6"] += [_config(dataset, "easter", het, seed, s, embedding_dim=dim) for dim in s["embedding_dims"]]
        out["fig6"] += [_config(dataset, "easter", het, seed, s, el_pl=tuple(el_pl)) for el_pl in s["el_pls"]]
    return override_runs(out, run_fields)


#: The 1/C comparison (:func:`vflkit.studies._split.embedding_gradient`), AUC on Criteo.
embedding_gradient = partial(_split.embedding_gradient, names=DATASET_NAMES,
                             metric=lambda cfg: metric_of(cfg["dataset"]))


def missing_datasets() -> pd.DataFrame:
    """The paper's datasets this study skips, and how to supply them."""
    return pd.DataFrame([{"dataset": k, "how to supply it": v} for k, v in MISSING_DATASETS.items()])


# --------------------------------------------------------------------------- results


def metric_of(dataset: str) -> str:
    """The test metric the paper reports: AUC on Criteo, accuracy elsewhere."""
    return "test_auc" if dataset == "criteo" else "test_accuracy"


def _run_metric(c: RunConfig, r: dict[str, Any]) -> float:
    """A run's final test metric (%): EASTER's mean over its party models, a baseline's one model's."""
    models = list(r["models"]) if c.method == "easter" else ["active"]
    return float(np.mean([100 * r["final"][k].get(metric_of(c.dataset), float("nan")) for k in models]))


def _theta(dataset: str, arch: str) -> str:
    return THETA[MODEL_SETS[dataset].index(arch)]


def accuracy_rows(groups: Groups, records: Sequence[dict[str, Any]], table: str) -> pd.DataFrame:
    """Table II's (heterogeneous) or IV's (homogeneous) θ columns and their average, one row per
    (dataset, method, θ, seed), metric in %; EASTER's θ_m is the mean over its parties holding m
    (in Table IV all four)."""
    group, setting = ("table2", "heterogeneous") if table == "II" else ("table4", "homogeneous")
    rows = []
    for c, r in recorded(groups[group], records):
        metric = metric_of(c.dataset)
        base = {"table": table, "dataset": DATASET_NAMES[c.dataset], "method": METHOD_NAMES[c.method],
                "setting": setting, "metric": f"{metric}_pct", "seed": c.seed, "diverged": bool(r.get("diverged"))}
        vals = arch_metric(r, metric) if c.method == "easter" else {c.models[0]: _run_metric(c, r)}
        rows += [{**base, "model": _theta(c.dataset, arch), "value": v} for arch, v in vals.items()]
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df = df.drop_duplicates(["dataset", "method", "model", "seed"])
    keys = ["table", "dataset", "method", "setting", "metric", "seed"]
    avg = df.groupby(keys, sort=False).agg(value=("value", "mean"), diverged=("diverged", "max")).reset_index()
    return pd.concat([df, avg.assign(model="avg")], ignore_index=True)


def _accuracy_table(groups: Groups, records: Sequence[dict[str, Any]], profile: str, table: str) -> pd.DataFrame:
    """Table II (heterogeneous party models) or IV (homogeneous) in the reference long format, beside the paper's."""
    return _split.summarise(accuracy_rows(groups, records, table).to_dict("records"), PAPER, profile)


table2 = partial(_accuracy_table, table="II")
table4 = partial(_accuracy_table, table="IV")


def table5_runs(by_group: Groups, profile: str = "", *, datasets: Sequence[str] | None = None) -> list[RunConfig]:
    """Table V's runs, Figs. 4-5's too: the baselines' Table II θ2 run (active party holds θ2) and EASTER's
    one run, on ``datasets`` (None: the ``profile``'s Table V datasets)."""
    datasets = settings(profile)["table5_datasets"] if datasets is None else datasets
    return [c for c in by_group["table2"] if c.dataset in datasets and c.method != "local"
            and (c.method == "easter" or c.models[0] == MODEL_SETS[c.dataset][1])]


def _table5_recorded(groups: Groups, records: Sequence[dict[str, Any]], datasets: Sequence[str]
                     ) -> list[tuple[RunConfig, dict[str, Any], list[str] | None]]:
    """Table V's recorded runs, each with the parties its θ2 metric is read from (a baseline's: None, its one model)."""
    return [(c, r, [k for k, a in r["models"].items() if a == MODEL_SETS[c.dataset][1]]
             if c.method == "easter" else None) for c, r in recorded(table5_runs(groups, datasets=datasets), records)]


def convergence(groups: Groups, records: Sequence[dict[str, Any]], datasets: Sequence[str]) -> pd.DataFrame:
    """Per Table V run: e*, the θ2 metric at e* (%), MB to e* as sent and float32-equivalent, kB per sample-epoch."""
    rows = []
    for c, r, theta2 in _table5_recorded(groups, records, datasets):
        metric = metric_of(c.dataset)
        e_star = analysis.convergence_epoch(r["history"], metric=metric)
        b = analysis.bytes_to_convergence(r, metric=metric, epoch=e_star, models=theta2)
        rows.append({"dataset": DATASET_NAMES[c.dataset], "method": METHOD_NAMES[c.method], "seed": c.seed,
                     "e_star": e_star, "epochs": c.epochs, "metric": f"{metric}_pct", "value": 100 * b["value"],
                     "MB_as_sent": b["mb"], "MB_float32": b["mb_float32"],
                     "kB_per_sample_epoch": b["bytes_float32"] / 1024 / (train_size(c) * e_star), "key": c.key,
                     "diverged": bool(r.get("diverged"))})
    return pd.DataFrame(rows)


def table5(groups: Groups, records: Sequence[dict[str, Any]], profile: str,
           datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """Table V: the θ2 metric at convergence and the communication to it (``communication_MB``
    float32-equivalent, as the paper presumably counted; ``_as_sent`` with blinded int64), beside the paper's."""
    rows = []
    for _, x in convergence(groups, records, datasets or settings(profile)["table5_datasets"]).iterrows():
        base = {"table": "V", "dataset": x["dataset"], "method": x["method"], "setting": "", "model": "",
                "seed": x["seed"], "diverged": x["diverged"]}
        rows += [{**base, "metric": m, "value": x[col]} for m, col in (
            (x["metric"], "value"), ("communication_MB", "MB_float32"), ("communication_MB_as_sent", "MB_as_sent"),
            ("epochs_to_convergence", "e_star"))]
    return _split.summarise(rows, PAPER, profile)


def table5_ratios(t5: pd.DataFrame) -> pd.DataFrame:
    """Each method's communication to convergence over EASTER's, ours beside the paper's."""
    t = t5[t5["metric"] == "communication_MB"]
    e = t[t["method"] == "EASTER"].set_index("dataset")[["value", "paper_value"]]
    t = t[t["method"] != "EASTER"].join(e, on="dataset", rsuffix="_easter", how="inner").reset_index(drop=True)
    return pd.DataFrame({"dataset": t["dataset"], "method": t["method"],
                         "ours_over_EASTER": t["value"] / t["value_easter"],
                         "paper_over_EASTER": t["paper_value"] / t["paper_value_easter"]}).round(2)


def cvfl_rates(groups: Groups, records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per Table II/IV C-VFL run, the final metric (%) at the dataset's rate / Q (the tables' cells)
    beside the dataset's own rate (``cvfl_host_lr``); NaN where not recorded, a pair with neither left out."""
    rec = by_key(records)
    rows = []
    for c in groups["cvfl_host_lr"]:
        defended, metric = c.replace(lr=cvfl_step_size(c.lr)), metric_of(c.dataset)
        vals = [_run_metric(x, rec[x.key]) if x.key in rec else np.nan for x in (defended, c)]
        if all(np.isnan(v) for v in vals):
            continue
        rows.append({"table": "II" if defended in groups["table2"] else "IV", "dataset": DATASET_NAMES[c.dataset],
                     "models": "/".join(dict.fromkeys(c.models)), "seed": c.seed, "metric": metric,
                     "lr / Q": defended.lr, "at lr / Q (%)": vals[0], "dataset's lr": c.lr,
                     "at the dataset's lr (%)": vals[1]})
    return pd.DataFrame(rows).round({"at lr / Q (%)": 2, "at the dataset's lr (%)": 2})


def implied_convergence(t5: pd.DataFrame, other: str = "PyVertical") -> pd.DataFrame:
    """What the paper's Table V implies about how fast its EASTER converged: the ratio of its
    totals to convergence over our ratio of per-epoch traffic is the ratio of epochs each needed
    (whatever its byte accounting, if the same for both), beside our own e* ratio."""
    t = t5.set_index(["dataset", "method", "metric"])
    rows = []
    for dataset in dict.fromkeys(t5["dataset"]):
        mb, ep = ([(dataset, m, metric) for m in ("EASTER", other)]
                  for metric in ("communication_MB", "epochs_to_convergence"))
        if not all(k in t.index for k in mb + ep) or t.loc[mb, "paper_value"].isna().any():
            continue
        (mb_easter, mb_other), (ep_easter, ep_other), (paper_easter, paper_other) = (
            t.loc[mb, "value"], t.loc[ep, "value"], t.loc[mb, "paper_value"])
        ours = (mb_easter / ep_easter) / (mb_other / ep_other)  # MB per epoch, EASTER over the other
        rows.append({"dataset": dataset, f"paper: MB to e*, EASTER / {other}": paper_easter / paper_other,
                     f"ours: MB per epoch, EASTER / {other}": ours,
                     f"paper's implied e*, EASTER / {other}": paper_easter / paper_other / ours,
                     f"our e*, EASTER / {other}": ep_easter / ep_other})
    return pd.DataFrame(rows).round(2)


def comm_times(groups: Groups, records: Sequence[dict[str, Any]],
               datasets: Sequence[str], *, bandwidths: Sequence[float] = FIG4_BANDWIDTHS) -> pd.DataFrame:
    """Figs. 4-5: communication seconds to convergence of each Table V run against bandwidth (10 ms,
    parallel links) and latency class (50 Mbps, :data:`FIG5_DRAWS` draws); priced once per records."""
    rec, frames = by_key(records), []
    memo = (tuple(sorted((k, r.get("finished") or "") for k, r in rec.items())), tuple(datasets), tuple(bandwidths))
    if memo in _TIMES:
        return _TIMES[memo].copy()
    for _, x in convergence(groups, records, datasets).iterrows():
        links = network.link_rows(rec[x["key"]]["comm"]["per_link"])
        if x["method"] == METHOD_NAMES["c_vfl"]:  # C-VFL's downlink bundle (sent together) as one round
            links = links.assign(kind=np.where(links["sender"] == "active", "downlink", links["kind"]))
        t = network.sweep(links, until_epoch=int(x["e_star"]), bandwidths=bandwidths, latency_ms=FIG4_LATENCY_MS,
                          latency_classes=network.LATENCY_CLASSES, draws=FIG5_DRAWS)
        frames.append(t.assign(figure=np.where(t.index < len(bandwidths), "4", "5"), dataset=x["dataset"],
                               method=x["method"], seed=x["seed"]))
    columns = ["figure", "dataset", "method", "seed", "bandwidth_mbps", "latency", "seconds"]
    _TIMES[memo] = pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame()
    return _TIMES[memo].copy()


_TIMES: dict[tuple[Any, ...], pd.DataFrame] = {}


def fig4(times: pd.DataFrame) -> tuple[plt.Figure, pd.DataFrame]:
    """Communication time to convergence against bandwidth, per dataset and method."""
    data = times[times["figure"] == "4"].drop(columns="figure")
    g = sns.relplot(data=data, x="bandwidth_mbps", y="seconds", hue="method", col="dataset", kind="line",
                    marker="o", height=3, aspect=1.2, errorbar=None, facet_kws={"sharey": False})
    g.set(xscale="log", yscale="log")
    g.set_axis_labels("bandwidth (Mbps)", "communication time to e* (s)")  # y label on the left panel only
    g.figure.suptitle("Fig. 4: communication time to convergence vs bandwidth (10 ms, parallel links)", y=1.04)
    return g.figure, data


def fig5(times: pd.DataFrame) -> tuple[plt.Figure, pd.DataFrame]:
    """Communication time to convergence per latency class at 50 Mbps."""
    data = times[times["figure"] == "5"].drop(columns="figure")
    g = sns.catplot(data=data, x="latency", y="seconds", hue="method", col="dataset", kind="bar",
                    height=3, aspect=1.2, errorbar=None, sharey=False, order=list(network.LATENCY_CLASSES))
    # the class's range under its name, the y label on the left panel only: no label overlaps a panel
    g.set_axis_labels("latency class", "communication time to e* (s)")
    for ax in g.axes.flat:
        ax.set_xticks(range(len(network.LATENCY_CLASSES)),
                      [f"{cls}\n{lo:g}-{hi:g} ms" for cls, (lo, hi) in network.LATENCY_CLASSES.items()])
    g.figure.suptitle("Fig. 5: communication time to convergence per latency class (50 Mbps)", y=1.04)
    return g.figure, data


def table6(groups: Groups, records: Sequence[dict[str, Any]], profile: str) -> pd.DataFrame:
    """Table VI: C = 2..10 parties on the first C of 10 feature parts: ACC/AUC, wall time (min) and
    peak memory (MB, per ``peak_memory_kind``: on a CPU the process's, an upper bound of the run's)."""
    return _split.summarise([{"table": "VI", "dataset": x.dataset, "method": x.method, "setting": f"C={x.C}",
                              "model": "", "seed": x.seed, "diverged": x.diverged, "metric": metric, "value": value}
                             for x in table6_rows(groups, records).itertuples()
                             for metric, value in ((x.metric, x.value), ("train_time_min", x.train_time_min),
                                                   ("memory_MB", x.memory_MB))], PAPER, profile)


def table6_security(groups: Groups, records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per EASTER run of Table VI: whether its record holds the insecure single-passive flag (C = 2)."""
    flag = "allow_single_passive (recorded)"
    rows = [{"dataset": DATASET_NAMES[c.dataset], "C": c.n_parties, "seed": c.seed, "passive_parties": c.n_parties - 1,
             flag: bool(r["config"]["options"].get("allow_single_passive", False))}
            for c, r in recorded(groups["table6"], records) if c.method == "easter"]
    rows = pd.DataFrame(rows, columns=["dataset", "C", "seed", "passive_parties", flag])
    return rows.drop_duplicates(["dataset", "C", flag])


#: Table VII's device mixes: the number of low-performance passive devices -> the paper's label.
DEVICE_MIXES = {0: "devices(A,B,C)=high,high,high", 1: "devices(A,B,C)=high,high,low",
                2: "devices(A,B,C)=high,low,low", 3: "devices(A,B,C)=low,low,low"}


def table7(groups: Groups, records: Sequence[dict[str, Any]], profile: str) -> pd.DataFrame:
    """Table VII from the Table II EASTER runs, per device mix and topology (column ``topology``):
    the run's θ accuracies and the time to e* (min) = measured compute per step, scaled by the
    slowest device, + communication priced per link."""
    acc = accuracy_rows(groups, records, "II")
    rows: dict[str, list[dict[str, Any]]] = {topology: [] for topology in network.TOPOLOGIES}
    for c, r in recorded((c for c in groups["table2"] if c.method == "easter"), records):
        e_star = analysis.convergence_epoch(r["history"], metric=metric_of(c.dataset))
        passive = sorted(p for p in r["models"] if p != "active")
        theta = acc[(acc["dataset"] == DATASET_NAMES[c.dataset]) & (acc["method"] == "EASTER")
                    & (acc["seed"] == c.seed) & (acc["model"] != "avg")]
        for (topology, out), (n_low, label) in product(rows.items(), DEVICE_MIXES.items()):
            t = network.record_time(r, network.device_mix(passive, n_low), until_epoch=e_star, topology=topology)
            base = {"table": "VII", "dataset": DATASET_NAMES[c.dataset], "method": "EASTER",
                    "setting": label, "seed": c.seed, "diverged": bool(r.get("diverged"))}
            out.append({**base, "model": "", "metric": "train_time_min", "value": t["total_s"] / 60})
            out += [{**base, "model": x["model"], "metric": x["metric"], "value": x["value"]}
                    for _, x in theta.iterrows()]
    return pd.concat([_split.summarise(rows[t], PAPER, profile).assign(topology=t) for t in network.TOPOLOGIES],
                     ignore_index=True)


def table7_times(t7: pd.DataFrame) -> pd.DataFrame:
    """Table VII's times side by side: ours under each topology and the paper's, per mix."""
    t = t7[t7["metric"] == "train_time_min"]
    out = t.pivot_table(index=["dataset", "setting"], columns="topology", values="value", sort=False)
    paper = t.drop_duplicates(["dataset", "setting"]).set_index(["dataset", "setting"])["paper_value"]
    return out.assign(paper=paper).round(3).reset_index()


#: The paper's embedding size (Sec. VI-A); Fig. 6 varies it, and its EL:PL panel keeps it.
EMBEDDING_DIM = 128


def _el_pl_label(el_pl: Sequence[int]) -> str:
    """An EL:PL layer ratio as the paper writes it, e.g. "1:2" (the figure's and the claim's level)."""
    return f"{el_pl[0]}:{el_pl[1]}"


def fig6(groups: Groups, records: Sequence[dict[str, Any]]) -> tuple[plt.Figure | None, pd.DataFrame]:
    """Test accuracy against (a) embedding size, (b) EL:PL ratio, per architecture and the mean;
    no figure while no run is recorded."""
    data = pd.DataFrame([{"dataset": DATASET_NAMES[c.dataset], "seed": c.seed, "embedding_dim": c.embedding_dim,
                          "el_pl": _el_pl_label(c.el_pl), "model": arch, f"{metric_of(c.dataset)}_pct": v}
                         for c, r in recorded(groups["fig6"], records)
                         for arch, v in {**arch_metric(r, metric_of(c.dataset)), "mean": _run_metric(c, r)}.items()])
    if data.empty:
        return None, data
    data = data.drop_duplicates(["seed", "embedding_dim", "el_pl", "model"])
    y = [c for c in data.columns if c.endswith("_pct")][0]
    ylabel = f"test {y.removesuffix('_pct').removeprefix('test_').replace('_', ' ')} (%)"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    models = list(dict.fromkeys(data["model"]))  # one colour per model in both panels (one legend)
    sns.lineplot(data=data[data["el_pl"] == "1:1"], x="embedding_dim", y=y, hue="model", hue_order=models,
                 marker="o", errorbar=None, legend=False, ax=axes[0])
    # Base-2 axis with one label per size run: base-10 minor labels (2x10^1, ...) collide.
    axes[0].set(xlabel="embedding size", ylabel=ylabel, title="(a) embedding size (EL:PL 1:1)")
    axes[0].set_xscale("log", base=2)
    axes[0].minorticks_off()
    sizes = sorted(data["embedding_dim"].unique())
    axes[0].set_xticks(sizes, [str(d) for d in sizes])
    sns.barplot(data=data[data["embedding_dim"] == EMBEDDING_DIM], x="el_pl", y=y, hue="model", hue_order=models,
                errorbar=None, ax=axes[1], order=[r for r in ("2:1", "1:1", "1:2") if r in set(data["el_pl"])])
    axes[1].set(xlabel="EL:PL (layer ratio; it changes total depth too)", ylabel=ylabel,
                title=f"(b) EL:PL (embedding {EMBEDDING_DIM})", ylim=(max(0.0, float(data[y].min()) - 5), None))
    if axes[1].get_legend() is not None:  # one legend, beside panel (b): the panels share their colours
        sns.move_legend(axes[1], "upper left", bbox_to_anchor=(1, 1), title="party model")
    fig.suptitle("Fig. 6: EASTER's heterogeneous run on " + ", ".join(data["dataset"].unique()), y=1.02)
    return fig, data


# --------------------------------------------------------------------------- claims


def _judged(frame: Callable[..., pd.DataFrame], variant: str | None = None) -> Callable[..., Any]:
    """A check (decorator of ``judge(records, groups, t)``) on ``t = frame(records, groups, recs)``
    of the profile's runs and records (:func:`_inputs`): not testable while ``t`` has no row."""
    def wrap(judge: Callable[..., claims.Verdict]) -> Callable[[claims.Records], claims.Verdict]:
        def check(records: claims.Records) -> claims.Verdict:
            groups, recs = _inputs(records, variant)
            t = frame(records, groups, recs)
            return claims.not_testable("no records") if t.empty else judge(records, groups, t)
        return check
    return wrap


#: ``_cells(runs, a, b, cell)``: the cells in which ``runs`` hold both ``a`` and ``b`` (:func:`claims.compared_cells`).
_cells = partial(claims.compared_cells, name=lambda c: METHOD_NAMES[c.method])


#: Test metric (%) at chance: accuracy on 10 classes; AUC on Criteo.
CHANCE_PCT: dict[str, float] = {"mnist": 10.0, "fashion_mnist": 10.0, "cifar10": 10.0, "criteo": 50.0}
#: Datasets here only as a stand-in far smaller than the paper's (what it is, the paper's scale): a
#: clause they alone would decide is not testable at this scale (:func:`stand_in_note` says why).
STAND_INS: dict[str, tuple[str, str]] = {"criteo": ("Criteo here is the 1,999-row sample", "the paper's 45 M rows")}


def stand_in_note(dataset: str, acc: pd.DataFrame, runs: Iterable[RunConfig]) -> str:
    """What a stand-in ``dataset`` is and what its records show: the training rows of ``runs`` and,
    from ``acc`` (:func:`accuracy_rows`), each VFL method's mean over θ and seeds against Local's."""
    rows = sorted({train_size(c) for c in runs if c.dataset == dataset})
    here, paper = STAND_INS[dataset]
    head = here + (f" ({', '.join(f'{n:,}' for n in rows)} training rows)" if rows else "") + f", {paper}"
    d = acc[(acc["dataset"] == DATASET_NAMES[dataset]) & (acc["model"] != "avg")] if len(acc) else acc
    means = d.groupby("method")["value"].mean() if len(d) else pd.Series(dtype=float)
    if "Local" not in means:
        return f"{head}; Local is not recorded on it"
    local = float(means.pop("Local"))
    gaps = {m: float(v) - local for m, v in means.items()}
    order = [m for m in METHOD_NAMES.values() if m in gaps] + sorted(set(gaps) - set(METHOD_NAMES.values()))
    above = [f"{m} ({gaps[m]:+.2f})" for m in order if gaps[m] > 0]
    below = [f"{m} ({gaps[m]:+.2f})" for m in order if gaps[m] <= 0]
    table = str(acc["table"].iloc[0]) if "table" in acc and len(acc) else "II"
    where = (f"on it (Table {table}, mean over θ and seeds, {metric_of(dataset).removeprefix('test_').upper()} %) "
             f"Local ends at {local:.2f}")
    if not gaps:
        return f"{head}; {where}, no VFL method recorded"
    if not above:
        return f"{head}; {where} and every VFL method ends below Local: {', '.join(below)}"
    return f"{head}; {where}; above Local: {', '.join(above)}" + (f"; below it: {', '.join(below)}" if below else "")


def _per_dataset(records: claims.Records, datasets: Iterable[str], judge: Callable[[str], claims.Verdict],
                 note: Callable[[str], str] | None = None) -> list[claims.Verdict]:
    """``judge(d)`` per dataset, labelled with its printed name; on a stand-in (:data:`STAND_INS`)
    not testable (:func:`vflkit.claims.on_stand_in`), with ``note(d)`` (default :func:`_table2_note`)."""
    note = note or partial(_table2_note, records)
    return [(claims.on_stand_in(v, note(d)) if d in STAND_INS else v).labelled(DATASET_NAMES[d])
            for d, v in {d: judge(d) for d in datasets}.items()]


#: The reading our own runs are judged under where the paper admits another, and C-VFL's alternative.
DEFAULT_READING = "1/C (Eq. 7), C-VFL at lr/Q"
CVFL_HOST_READING = "C-VFL at the dataset's lr, Q = 10"


def _table2_note(records: claims.Records, dataset: str) -> str:
    """:func:`stand_in_note` on Table II's records, for a clause whose own runs have no Local."""
    groups, recs = _inputs(records)
    return stand_in_note(dataset, records.derived("table2_rows", lambda: accuracy_rows(groups, recs, "II")),
                         groups["table2"])


#: Labelled variants: the method's runs in Tables II and IV replaced by another group's.
VARIANTS: dict[str, tuple[str, str]] = {
    "full_gradient": ("easter", "embedding_gradient"),  # h gets ∂L_k/∂E, not ∂L_k/∂E / C
    "cvfl_host_lr": ("c_vfl", "cvfl_host_lr"),  # C-VFL at the dataset's rate with Q = 10
}


#: ``groups`` with :data:`VARIANTS` ``variant`` swapped in (None: unchanged).
with_variant = partial(analysis.swap_in_variant, variants=VARIANTS, tables=("table2", "table4"), keep_unmatched=True)
#: ``_inputs(records, variant=None)``: the profile's runs (``variant`` swapped in) and ``records`` by key.
_inputs = _split.claim_input(configs, with_variant)


def _beats(table: str, other: str, variant: str | None = None, label: str = "") -> claims.Claim:
    group = "table2" if table == "II" else "table4"

    def thetas(c: RunConfig) -> set[str]:  # EASTER's one heterogeneous run holds every θ
        held = set(c.models) if c.method == "easter" and table == "II" else {c.models[0]}
        return {_theta(c.dataset, m) for m in held}

    @_judged(lambda records, groups, recs: accuracy_rows(groups, recs, table), variant)
    def check(records: claims.Records, groups: Groups, every: pd.DataFrame) -> claims.Verdict:
        acc = every[every["model"] != "avg"]
        # Per dataset, then all_of: the paper says "consistently" superior "across a variety of
        # datasets" (Sec. VI-B); datasets carry different seeds (Criteo 5); an unrecorded one stays open.
        # A run near chance or below Local decides nothing (claims.paired's gate).
        datasets = settings(records.profile)["datasets" if table == "II" else "table4_datasets"]

        def judge(d: str) -> claims.Verdict:
            diffs = claims.paired(acc[acc["dataset"] == DATASET_NAMES[d]], by="method", a="EASTER", b=other,
                                  value="value", cell=["model"], chance=CHANCE_PCT[d], local="Local")
            runs = [c for c in groups[group] if c.dataset == d]
            return claims.ordering(diffs, a="EASTER", b=other, expected=_cells(runs, "EASTER", other, thetas))
        return claims.all_of(_per_dataset(records, datasets, judge, lambda d: stand_in_note(d, every, groups[group])))
    setting = "heterogeneous" if table == "II" else "homogeneous"
    return claims.Claim(PAPER, f"Table {table}" + (f" ({label})" if label else ""),
                        f"EASTER's models beat {other} on every dataset ({setting} models)", check,
                        reading=label if variant else DEFAULT_READING)


def to_target(groups: Groups, records: Sequence[dict[str, Any]], datasets: Sequence[str]) -> pd.DataFrame:
    """Table V's communication "to convergence" by the compared rule: per Table V run, the first
    epoch its θ2 metric reaches :data:`vflkit.analysis.TARGET_SHARE` of the best final θ2 metric of
    the dataset's runs of that seed, and the float32-equivalent MB until then (NaN: never, or diverged)."""
    runs = [(c, r, analysis.metric_curve(r["history"], metric=metric_of(c.dataset), models=theta2))
            for c, r, theta2 in _table5_recorded(groups, records, datasets) if not r.get("diverged")]
    timed = analysis.to_common_target({i: curve for i, (_, _, curve) in enumerate(runs)},
                                      cell=lambda i: (runs[i][0].dataset, runs[i][0].seed))
    rows = []
    for (c, r, _), (target, e) in zip(runs, timed.values()):
        mb = np.nan if np.isnan(e) else analysis.bytes_to_convergence(r, epoch=e)["mb_float32"]
        rows.append({"dataset": DATASET_NAMES[c.dataset], "method": METHOD_NAMES[c.method], "seed": c.seed,
                     "target_pct": 100 * target, "epoch_to_target": e, "epochs": c.epochs, "MB_to_target": mb})
    return pd.DataFrame(rows, columns=["dataset", "method", "seed", "target_pct", "epoch_to_target", "epochs",
                                       "MB_to_target"])


def _less_comm(other: str, variant: str | None = None, label: str = "") -> claims.Claim:
    @_judged(lambda records, groups, recs: to_target(groups, recs, settings(records.profile)["table5_datasets"]),
             variant)
    def check(records: claims.Records, groups: Groups, conv: pd.DataFrame) -> claims.Verdict:
        datasets = settings(records.profile)["table5_datasets"]

        def judge(dataset: str) -> claims.Verdict:  # each dataset alone, so that a stand-in decides nothing
            d = conv[conv["dataset"] == DATASET_NAMES[dataset]]
            v = claims.ordering(claims.paired(d.dropna(subset=["MB_to_target"]), by="method", a=other, b="EASTER",
                                              value="MB_to_target", cell=["dataset"]), a=other, b="EASTER", what="MB",
                                expected=_cells(table5_runs(groups, datasets=[dataset]), other, "EASTER",
                                                lambda c: {DATASET_NAMES[c.dataset]}))
            never = d[d["MB_to_target"].isna() & d["method"].isin([other, "EASTER"])]
            return v if never.empty else v.with_evidence(
                f"{v.evidence}; never within {analysis.TARGET_SHARE:.0%} of the best final metric in "
                f"{int(d['epochs'].max())} epochs, so the horizon cannot time them: "
                + ", ".join(f"{r.method} seed {r.seed}" for r in never.itertuples()))
        return claims.all_of(_per_dataset(records, datasets, judge))
    return claims.Claim(PAPER, "Table V" + (f" ({label})" if label else ""),
                        f"EASTER communicates less than {other} to convergence", check,
                        reading=label if variant else DEFAULT_READING)


def _times_check(check: Callable[[pd.DataFrame, list[RunConfig]], claims.Verdict]) -> Callable[..., claims.Verdict]:
    """A Figs. 4-5 clause judged on the times to convergence of the profile's Table V runs (priced
    once for every clause, :func:`comm_times`) and those runs, recorded or not."""
    return _judged(lambda records, groups, recs: records.derived(
        "times", lambda: comm_times(groups, recs, settings(records.profile)["table5_datasets"])))(
        lambda records, groups, t: check(t, table5_runs(groups, records.profile)))


def _slower(figure: str, by: str, a: Any, b: Any, unit: str) -> Callable[[claims.Records], claims.Verdict]:
    """Fig. ``figure``: communication to convergence is slower at ``by`` = ``a`` than at ``b`` (per dataset, method)."""
    @_times_check
    def check(t: pd.DataFrame, runs: list[RunConfig]) -> claims.Verdict:
        diffs = claims.paired(t[t["figure"] == figure], by=by, a=a, b=b, value="seconds", cell=["dataset", "method"])
        return claims.ordering(diffs, a=f"time at {a}{unit}", b=f"time at {b}{unit}", what="s",
                               expected={f"{DATASET_NAMES[c.dataset]}/{METHOD_NAMES[c.method]}" for c in runs})
    return check


@_times_check
def _fig5_agg_check(t: pd.DataFrame, runs: list[RunConfig]) -> claims.Verdict:
    t = t[t["figure"] == "5"].pivot_table(index=["dataset", "method", "seed"], columns="latency", values="seconds")
    growth = (t["high"] - t["low"]).rename("growth").reset_index()
    return claims.all_of(
        claims.ordering(claims.paired(growth, by="method", a=m, b="Agg_VFL", value="growth", cell=["dataset"]),
                        a=f"{m}'s latency penalty", b="Agg_VFL's", what="s",
                        expected=_cells(runs, m, "Agg_VFL", lambda c: {DATASET_NAMES[c.dataset]}))
        for m in ("EASTER", "PyVertical", "C_VFL"))


_table6_check = _judged(lambda records, groups, recs: table6_rows(groups, recs))


@_table6_check
def _table6_rise(records: claims.Records, groups: Groups, t: pd.DataFrame) -> claims.Verdict:
    # the profile's fewest and most parties: an unrecorded C leaves it open, not judged on inner C
    few, many = min(settings(records.profile)["table6_parties"]), max(settings(records.profile)["table6_parties"])
    t = t[(t["method"] == "EASTER") & t["C"].isin([few, many])]
    t = t.assign(end=np.where(t["C"] == many, "many", "few"))
    return claims.all_of(_per_dataset(records, sorted({c.dataset for c in groups["table6"] if c.method == "easter"}),
                                      lambda d: claims.ordering(
        claims.paired(t[t["dataset"] == DATASET_NAMES[d]], by="end", a="many", b="few", value="value", cell=["dataset"],
                      chance=CHANCE_PCT[d]), a=f"EASTER at C={many}", b=f"at C={few}", expected={DATASET_NAMES[d]})))


@_table6_check
def _table6_beats(records: claims.Records, groups: Groups, t: pd.DataFrame) -> claims.Verdict:
    return claims.all_of(v for m in ("PyVertical", "C_VFL", "Agg_VFL") for v in _per_dataset(
        records, sorted({c.dataset for c in groups["table6"]}), lambda d: claims.ordering(
            claims.paired(t[t["dataset"] == DATASET_NAMES[d]], by="method", a="EASTER", b=m, value="value",
                          cell=["dataset", "C"], chance=CHANCE_PCT[d]), a="EASTER", b=m,
            expected=_cells([c for c in groups["table6"] if c.dataset == d], "EASTER", m,
                            lambda c: {f"{DATASET_NAMES[c.dataset]}/{c.n_parties}"}))))


def table6_rows(groups: Groups, records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per Table VI run and seed: dataset, method, C, the test metric (%) as ``value`` (its name
    ``metric``), wall time (min), peak memory (MB) and whether it diverged."""
    return pd.DataFrame([{"dataset": DATASET_NAMES[c.dataset], "method": METHOD_NAMES[c.method], "C": c.n_parties,
                          "seed": c.seed, "value": _run_metric(c, r), "metric": f"{metric_of(c.dataset)}_pct",
                          "train_time_min": r["wall_time_s"] / 60, "memory_MB": r["peak_memory_mb"],
                          "diverged": bool(r.get("diverged"))}
                         for c, r in recorded(groups["table6"], records)])


def _table7_check(topology: str) -> Any:
    # priced once for both pricings
    @_judged(lambda records, groups, recs: records.derived("table7", lambda: table7(groups, recs, records.profile)))
    def check(records: claims.Records, groups: Groups, t7: pd.DataFrame) -> claims.Verdict:
        t = t7[(t7["metric"] == "train_time_min") & (t7["topology"] == topology)]
        # priced from every Table II EASTER run the profile has: one not recorded leaves it open
        datasets = {DATASET_NAMES[c.dataset] for c in groups["table2"] if c.method == "easter"}
        by_mix = {mix: t[t["setting"] == mix].set_index("dataset")["value"] for mix in DEVICE_MIXES.values()}
        # one row per dataset, the mean over seeds (priced, not noisy)
        return claims.all_of(claims.ordering(pd.DataFrame({"cell": d.index, "seed": 0, "diff": d.to_numpy()}),
                                             a=f"{n} slow", b=f"{n - 1} slow", what="min", expected=datasets,
                                             exact=True)
                             for n in range(1, 4) for d in [by_mix[DEVICE_MIXES[n]] - by_mix[DEVICE_MIXES[n - 1]]])
    return check


def _fig6_best(what: str) -> Any:
    @_judged(lambda records, groups, recs: fig6(groups, recs)[1])
    def check(records: claims.Records, groups: Groups, data: pd.DataFrame) -> claims.Verdict:
        plt.close("all")  # fig6's figure: only its data is judged
        y = [c for c in data.columns if c.endswith("_pct")][0]
        data = data[data["model"] == "mean"]
        # the levels to beat are the profile's: an unrecorded one leaves the clause not testable
        if what == "embedding":
            d = data[data["el_pl"] == "1:1"].assign(level=lambda x: x["embedding_dim"].astype(str))
            levels = sorted({c.embedding_dim for c in groups["fig6"] if _el_pl_label(c.el_pl) == "1:1"})
            best, others = str(EMBEDDING_DIM), [str(v) for v in levels if v != EMBEDDING_DIM]
        else:
            d = data[data["embedding_dim"] == EMBEDDING_DIM].assign(level=lambda x: x["el_pl"])
            levels = {_el_pl_label(c.el_pl) for c in groups["fig6"] if c.embedding_dim == EMBEDDING_DIM}
            best, others = "1:1", sorted(levels - {"1:1"})
        chance = CHANCE_PCT[settings(records.profile)["fig6_dataset"]]
        return claims.all_of(claims.ordering(claims.paired(d, by="level", a=best, b=o, value=y, cell=["dataset"],
                                                           chance=chance), a=best, b=o) for o in others)
    return check


CLAIMS: list[claims.Claim] = [
    *[_beats(t, m) for t in ("II", "IV") for m in ("Local", "PyVertical", "C_VFL", "Agg_VFL")],
    _less_comm("PyVertical"), _less_comm("C_VFL"),
    claims.Claim(PAPER, "Fig. 4", "communication time to convergence falls as bandwidth grows",
                 _slower("4", "bandwidth_mbps", min(FIG4_BANDWIDTHS), max(FIG4_BANDWIDTHS), " Mbps")),
    claims.Claim(PAPER, "Fig. 5", "communication time to convergence grows with latency",
                 _slower("5", "latency", "high", "low", " latency")),
    claims.Claim(PAPER, "Fig. 5", "Agg_VFL is the least affected by latency", _fig5_agg_check),
    claims.Claim(PAPER, "Table VI", "EASTER's accuracy rises with the number of parties C", _table6_rise),
    claims.Claim(PAPER, "Table VI", "EASTER beats every baseline at every C", _table6_beats),
    claims.Claim(PAPER, "Table VII", "training time rises with each low-performance device (shared uplink)",
                 _table7_check("shared_uplink")),
    claims.Claim(PAPER, "Fig. 6", "embedding size 128 gives the highest accuracy", _fig6_best("embedding")),
    claims.Claim(PAPER, "Fig. 6", "EL:PL = 1:1 beats 2:1 and 1:2", _fig6_best("el_pl")),
]

#: Clauses on our variants (:data:`VARIANTS`; shown apart), and Table VII priced with parallel
#: links, where a synchronous step's time is the slowest device's by construction.
VARIANT_CLAIMS: list[claims.Claim] = [
    *[_beats(t, m, "full_gradient", FULL_GRADIENT_READING) for t in ("II", "IV")
      for m in ("Local", "PyVertical", "C_VFL", "Agg_VFL")],
    *[_less_comm(m, "full_gradient", FULL_GRADIENT_READING) for m in ("PyVertical", "C_VFL")],
    *[_beats(t, "C_VFL", "cvfl_host_lr", CVFL_HOST_READING) for t in ("II", "IV")],
    claims.Claim(PAPER, "Table VII (parallel links, our pricing)",
                 "training time rises with each low-performance device (parallel links)", _table7_check("parallel")),
]


# --------------------------------------------------------------------------- the study's declaration


def beyond(evidence: base.Evidence) -> list[tuple[str, str]]:
    """Findings the paper does not report: the two-party setting of Table VI, as recorded."""
    found = evidence.first_with_records()
    text = ("With C = 2 EASTER has one passive party, whose blinding factor must be zero, so the active "
            "party sees its embedding in the clear; the study runs it only with the recorded option "
            "`allow_single_passive`")
    if found:
        profile, have = found
        sec = table6_security(evidence.groups(profile), list(have.values()))
        flagged = sec[sec["allow_single_passive (recorded)"]]
        text += (f": {len(flagged)} recorded {profile}-profile setting(s) carry the flag "
                 f"({', '.join(f'{r.dataset} C = {r.C}' for r in flagged.itertuples()) or 'none'})")
    link = evidence.notebook("Table VI: 2 to 10 parties")
    out = [("EASTER: Table VI's two-party setting is not private", f"{text} ({link}).")]
    if scale := _quick_against_paper(evidence):
        out.append(("EASTER: the quick profile measures early training, where the 1/C reading slows EASTER", scale))
    return out


def _quick_against_paper(evidence: base.Evidence) -> str:
    """Table II's FashionMNIST gaps (EASTER minus each baseline) at the quick and the paper profile,
    under each reading of Eq. 7: why 235 quick steps can set EASTER behind methods it is level with
    after 20 epochs. "" while either profile lacks the records."""
    parts = []
    for profile in ("quick", "paper"):
        have = evidence.get(profile)
        if not have:
            return ""
        groups, recs, gaps = evidence.groups(profile), list(have.values()), []
        for label, g in (("∂L/∂E / C", groups), (FULL_GRADIENT_READING.split(",")[0], with_variant(groups, "full_gradient"))):
            acc = accuracy_rows(g, recs, "II")
            acc = acc[(acc["model"] != "avg") & (acc["dataset"] == DATASET_NAMES["fashion_mnist"])]
            means = acc.groupby("method")["value"].mean()
            if "EASTER" not in means or "PyVertical" not in means:
                return ""
            gaps.append(f"{label}: " + ", ".join(f"{means['EASTER'] - means[m]:+.1f} against {m}"
                                                 for m in ("PyVertical", "Agg_VFL", "C_VFL") if m in means))
        steps = "235 SGD steps" if profile == "quick" else f"{settings(profile)['epochs']} epochs"
        parts.append(f"{profile} profile ({steps}): " + "; ".join(gaps))
    return ("EASTER's mean test accuracy over θ1-θ3 on FashionMNIST minus each baseline's, in points — "
            + " | ".join(parts) + ". The quick profile stops in early training, where methods differ in speed: "
            "under the 1/C reading each embedding network gets a C-th of the gradient, which slows EASTER early, "
            "and the gap shrinks under the labelled twin and at the paper's 20 epochs (`easter.beyond`, from the "
            f"records; {evidence.notebook('Table II')}).")


def _table7_view(t7: pd.DataFrame) -> pd.DataFrame:
    """A Table VII topology, ours beside the paper's: each party's accuracy and the time to e*."""
    return side_by_side(t7.assign(model=t7["model"].replace("", "time to e* (min)")), index=["dataset", "setting"],
                        columns="model")


def _table7_files(groups: Groups, records: Sequence[dict[str, Any]], profile: str) -> dict[str, pd.DataFrame]:
    """Table VII, one file per network topology."""
    t7 = table7(groups, records, profile)
    return {f"table7_{topology}": t7[t7["topology"] == topology] for topology in network.TOPOLOGIES}


def _times_figure(figure: Callable[[pd.DataFrame], tuple[plt.Figure, pd.DataFrame]]) -> Callable[..., Any]:
    """Fig. 4 or 5, drawn from :func:`comm_times` of the profile's Table V runs."""
    return lambda groups, records, profile: figure(comm_times(groups, records, settings(profile)["table5_datasets"]))


STUDY = register(Study(
    name=PAPER, title="EASTER", family="split", configs=configs, order=2, reference_csv="easter.csv",
    cites="wang2025easter",
    artefacts=(
        Artefact("Table II", base.groups("table2"), ("table2.*",), table2, _view()),
        Artefact("Table IV", base.groups("table4"), ("table4.*",), table4, _view()),
        Artefact("Table V", table5_runs, ("table5.*",), table5, _view(columns="metric")),
        Artefact("Fig. 4", table5_runs, ("fig4.*",), _times_figure(fig4), point=("dataset", "method", "bandwidth_mbps")),
        Artefact("Fig. 5", table5_runs, ("fig5.*",), _times_figure(fig5), point=("dataset", "method", "latency")),
        Artefact("Table VI", base.groups("table6"), ("table6.*",), table6, _view("setting", ("dataset", "method", "metric"))),
        Artefact("Table VII", base.groups("table2", keep=lambda c: c.method == "easter"), ("table7_*",), _table7_files,
                 _table7_view),
        Artefact("Fig. 6", base.groups("fig6"), ("fig6.*",), _figure(fig6), point=("embedding_dim", "el_pl", "model")),
    ),
    # VFedMH's run order: the same costs (C-VFL's Q = 10 last)
    claims=CLAIMS, variant_claims=VARIANT_CLAIMS, needs_gpu=needs_gpu, run_priority=run_priority,
    beyond=beyond, describe=partial(_split.describe, datasets=DATASET_NAMES, methods=METHOD_NAMES,
                                                fields=("n_parties",)),
    uncounted_tables={"table7_parallel.csv": "parallel links, our pricing (the shared uplink is the model "
                                             "comparable with the paper's devices)"},
    uncounted_datasets={DATASET_NAMES[d]: f"{here}, {paper}" for d, (here, paper) in STAND_INS.items()},
))
