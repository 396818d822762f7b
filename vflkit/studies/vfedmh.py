"""VFedMH (Wang et al.): Tables II-IV and Figs. 3-5, and the blinding demonstration.

The setting (Sec. VI-C) and our choices where the paper is silent (the epochs, how a column reads
a heterogeneous run, Homo_aggVFL): docs/studies.md (VFedMH).
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any, Callable, Iterable, Iterator, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

from .. import analysis, claims
from ..config import check_profile, check_seeds, check_seeds_once, override_runs, split_run_overrides
from ..methods import OPTIMIZERS, RunConfig
from ..methods.cvfl import step_size as cvfl_step_size
from ..records import by_key, recorded
from ..report import load_reference
from ..secure import BlindingKeys, FixedPointRing, aggregate, blind
from ..training.split import history_frame
from . import base, register
from . import _split
from ._split import (FULL_GRADIENT_READING, GRADIENT_READINGS, RESNET_CUT, Groups, assign_models, needs_gpu,
                     rotate, run_priority, train_size)
from ._split import figure as _figure, view as _view
from .base import Artefact, Study, all_runs as unique

#: Model sets of Table II: the three small networks and the three ResNets.
SMALL_MODELS: tuple[str, ...] = ("cnn", "lenet", "mlp")
RESNETS: tuple[str, ...] = ("resnet18", "resnet50", "resnet101")

#: Per profile: datasets, model sets, subset sizes and epochs. Every method makes ``epochs`` passes,
#: C-VFL too (Q = 10 local iterations per batch: about ten times the others' compute;
#: ``cvfl_epochs``, None: ``epochs``); its Q = 1 control (``cvfl_q1``) is the equal-compute one.
PROFILE_SETTINGS: dict[str, dict[str, Any]] = {
    # CI: a real MNIST subset, one epoch; exercises every method and table in seconds.
    "smoke": {"datasets": ("mnist",), "model_sets": (SMALL_MODELS,), "n_train": 256, "n_test": 256,
              "epochs": 1, "cvfl_epochs": None, "all_artefacts_on": ("mnist",), "seeds": (0,)},
    # The paper's protocol on the small networks, reduced (seeded subsets, fewer epochs, three seeds;
    # a 2-core CPU's work): Table IV, Figs. 4-5 and blinding on MNIST only; no CIFAR-10, no ResNets.
    "quick": {"datasets": ("mnist", "fashion_mnist"), "model_sets": (SMALL_MODELS,),
              "n_train": 4000, "n_test": 1500, "epochs": 6, "cvfl_epochs": None,
              "all_artefacts_on": ("mnist",), "seeds": (0, 1, 2)},
    # GPU: full data, all six networks, every artefact, three seeds (the paper's mean ± std gives no count)
    "paper": {"datasets": ("mnist", "fashion_mnist", "cifar10"), "model_sets": (SMALL_MODELS, RESNETS),
              "n_train": None, "n_test": None, "epochs": 20, "cvfl_epochs": None,
              "all_artefacts_on": ("mnist", "fashion_mnist", "cifar10"), "seeds": (0, 1, 2)},
}

#: The paper's one learning rate (Sec. VI-C: "the learning rate for all networks 0.05").
PAPER_LR = 0.05
#: Table IV's second rows, each optimizer at its standard rate: Adam 1e-3 (Kingma and Ba's default),
#: Adagrad 1e-2 (PyTorch's); SGD and SGD-momentum keep 0.05. Published defaults, no sweep: there
#: is no held-out split, and tuning on the test images would favour the optimizer tuned hardest.
STANDARD_LR: dict[str, float] = {"sgd": PAPER_LR, "sgd_momentum": PAPER_LR, "adagrad": 1e-2, "adam": 1e-3}
#: C-VFL's rate (the paper gives none): 0.05 / Q, as C-VFL's analysis bounds the step
#: (:func:`vflkit.methods.cvfl.step_size`); 0.05 with Q = 10 is a labelled sensitivity row (``cvfl_host_lr``).
CVFL_LR = cvfl_step_size(PAPER_LR)

#: The bf16 check (bf16 autocast becomes the GPU default only if its seeds land inside the fp32
#: seeds' spread): this Table II cell trained again under bf16. Chosen before any bf16 run: the
#: cheapest ResNet cell with its fp32 seeds committed (the small networks are launch-bound, bf16
#: cannot speed them). Its fp32 seeds spread wide, so it sees only a gross loss of accuracy.
PRECISION_CHECK: tuple[str, str, str] = ("fashion_mnist", "local", "resnet18")

#: Our registry names -> the names the paper's tables print.
DATASET_NAMES = {"mnist": "MNIST", "fashion_mnist": "FMNIST", "cifar10": "CIFAR10"}
MODEL_NAMES = {"cnn": "CNN", "lenet": "LeNet", "mlp": "MLP", "resnet18": "ResNet18",
               "resnet50": "ResNet50", "resnet101": "ResNet101"}
OPTIMIZER_NAMES = {"sgd": "SGD", "sgd_momentum": "SGD_Momentum", "adagrad": "Adagrad", "adam": "Adam"}
TABLE2_METHODS = {"local": ("Local", "local"), "splitnn": ("PyVertical", "homogeneous"),
                  "c_vfl": ("C_VFL", "homogeneous"), "agg_vfl": ("Agg_VFL", "homogeneous")}
#: Table II's methods by the names the paper prints (VFedMH's own run included).
TABLE2_NAMES = {k: v[0] for k, v in TABLE2_METHODS.items()} | {"vfedmh": "VFedMH"}
TABLE3_METHODS = {"local": "Local", "heter_aggvfl": "Heter_aggVFL", "agg_vfl": "Homo_aggVFL",
                  "homo_vfedmh": "Homo_VFedMH", "vfedmh": "VFedMH"}


#: ``settings(profile, overrides=None)``: the profile's settings, any overridden (e.g. a tiny slice of ``paper``).
settings = partial(_split.settings, PROFILE_SETTINGS)


def assign_optimizers(n_parties: int = 4, *, seed: int) -> tuple[str, ...]:
    """Fig. 5's heterogeneous optimizers: the four of Table IV shuffled over the parties by seed."""
    out = [OPTIMIZERS[k % len(OPTIMIZERS)] for k in range(n_parties)]
    random.Random(1000 + seed).shuffle(out)
    return tuple(out)


def _config(dataset: str, method: str, models: Sequence[str], seed: int, s: dict[str, Any], **kw: Any) -> RunConfig:
    return RunConfig(paper="vfedmh", dataset=dataset, method=method, models=tuple(models),
                     optimizers=kw.pop("optimizers", "sgd"), lr=kw.pop("lr", PAPER_LR), partition="strips_width",
                     n_parties=4, active=0, batch_size=128, epochs=kw.pop("epochs", s["epochs"]), seed=seed,
                     n_train=s["n_train"], n_test=s["n_test"], resnet_cut=RESNET_CUT, **kw)


def configs(profile: str, *, seeds: Sequence[int] | None = None, overrides: dict[str, Any] | None = None) -> Groups:
    """Every run, by the artefact that needs it (a shared run is trained once). ``overrides``
    replace profile settings or set a run field on every run (:func:`vflkit.config.split_run_overrides`)."""
    s, run_fields = split_run_overrides(PROFILE_SETTINGS[check_profile(profile)], overrides, RunConfig)
    check_seeds_once(seeds, overrides)
    seeds = check_seeds(s["seeds"] if seeds is None else seeds)
    out: Groups = {g: [] for g in ("table2", "table3", "table4", "table4_standard", "fig5", "blinding", "cvfl_q1",
                                   "cvfl_host_lr", "embedding_gradient", "precision")}
    for dataset in s["datasets"]:
        for models in s["model_sets"]:
            for seed in seeds:
                het = assign_models(models, seed=seed)
                vfedmh = _config(dataset, "vfedmh", het, seed, s)
                for m in models:
                    for method in TABLE2_METHODS:
                        cvfl = {"epochs": s["cvfl_epochs"] or s["epochs"], "lr": CVFL_LR} if method == "c_vfl" else {}
                        out["table2"].append(_config(dataset, method, (m,) * 4, seed, s, **cvfl))
                        if method == "c_vfl" and models == SMALL_MODELS:  # sensitivity row: the paper's rate, Q = 10
                            out["cvfl_host_lr"].append(out["table2"][-1].replace(lr=PAPER_LR))
                        if (dataset, method, m) == PRECISION_CHECK:
                            out["precision"].append(out["table2"][-1].replace(precision="bf16"))
                out["table2"].append(vfedmh)
                if models != SMALL_MODELS:
                    continue  # the 1/C question, Tables III-IV and Figs. 4-5 use the small networks only
                # the 1/C question: the same run with each h getting ∂L_k/∂E, not ∂L_k/∂E / C
                out["embedding_gradient"].append(vfedmh.replace(options={"embedding_gradient": "full"}))
                for m in models:
                    out["table3"] += [_config(dataset, "local", (m,) * 4, seed, s),
                                      _config(dataset, "heter_aggvfl", rotate(het, m), seed, s),
                                      _config(dataset, "agg_vfl", (m,) * 4, seed, s),
                                      _config(dataset, "homo_vfedmh", (m,) * 4, seed, s)]
                out["table3"].append(vfedmh)
                if dataset not in s["all_artefacts_on"]:
                    continue
                for opt in OPTIMIZERS:
                    out["table4"].append(_config(dataset, "vfedmh", het, seed, s, optimizers=opt))
                    # the same run where the standard rate is the paper's (SGD, SGD with momentum)
                    out["table4_standard"].append(_config(dataset, "vfedmh", het, seed, s, optimizers=opt,
                                                          lr=STANDARD_LR[opt]))
                out["fig5"].append(_config(dataset, "vfedmh", het, seed, s, optimizers=assign_optimizers(seed=seed)))
                if dataset == s["all_artefacts_on"][0]:
                    out["blinding"].append(vfedmh.replace(options={"blinding": False}))
                    # C-VFL with Q = 1 at step_size(0.05, Q=1) = 0.05: Q's effect apart from compression
                    out["cvfl_q1"] += [c.replace(options={"local_iterations": 1}) for c in out["cvfl_host_lr"]
                                       if c.dataset == dataset and c.seed == seed]
    return override_runs(out, run_fields)


def assignment_table(groups: Groups) -> pd.DataFrame:
    """Which architecture (and optimizer) each party holds in the heterogeneous runs."""
    rows = [{"runs": "Table II-IV" if name == "table2" else "Fig. 5", "dataset": c.dataset, "seed": c.seed,
             **{"active" if k == c.active else f"passive_{k}": c.party_value("models", k)
                + ("" if name == "table2" else f" + {c.party_value('optimizers', k)}") for k in range(c.n_parties)}}
            for name in ("table2", "fig5") for c in groups[name] if c.method == "vfedmh"]
    return pd.DataFrame(rows).drop_duplicates()


# --------------------------------------------------------------------------- results


def _cells(c: RunConfig, r: dict[str, Any], table: str) -> list[tuple[str, str, str, float]]:
    """(method, setting, architecture, test accuracy %) of a recorded Table II-IV run: one per architecture
    of a run with a model per party, else its active party's global model (and Heter_aggVFL's own-logits reading)."""
    name = (TABLE2_NAMES if table == "table2" else TABLE3_METHODS)[c.method]
    if table == "table4" or c.method in _AGGREGATING:
        # Table IV: every party on one optimizer, at the paper's rate or at the optimizer's standard one
        rate = "" if _lr(c) == PAPER_LR else f", lr={_lr(c):g}"
        setting = {"table4": f"optimizer={_optimizer(c)}{rate}", "table2": "heterogeneous"}.get(table, "")
        return [(name, setting, arch, v) for arch, v in analysis.arch_metric(r).items()]
    setting = TABLE2_METHODS[c.method][1] if table == "table2" else ""
    if c.method == "c_vfl" and _lr(c) != CVFL_LR:  # labelled: not the paper's cell
        setting = f"{setting}, lr={_lr(c):g} (sensitivity)"
    arch = c.models[c.active]
    out = [(name, setting, arch, 100 * r["final"]["active"]["test_accuracy"])]
    if c.method == "heter_aggvfl" and (own := _own_accuracy(c, r)) is not None:
        out.append((OWN_LOGITS, setting, arch, own))
    return out


def _accuracy_table(groups: Groups, records: Sequence[dict[str, Any]], profile: str, table: str) -> pd.DataFrame:
    """Table II, III or IV in the reference long format: test accuracy (%) per dataset, method and
    model (Table II with C-VFL's recorded sensitivity rows; Table IV's standard-rate rows with the
    paper's number for their optimizer beside them)."""
    runs = _table4_runs(groups) if table == "table4" else groups[table]
    runs = runs + (groups.get("cvfl_host_lr", []) if table == "table2" else [])  # those recorded
    rows = [{"table": {"table2": "II", "table3": "III"}.get(table, "IV"), "dataset": DATASET_NAMES[c.dataset],
             "method": m, "setting": setting, "model": MODEL_NAMES[arch], "metric": "test_accuracy_pct",
             "value": v, "diverged": bool(r.get("diverged"))}
            for c, r in recorded(runs, records) for m, setting, arch, v in _cells(c, r, table)]
    out = _split.summarise(rows, "vfedmh", profile)
    if table != "table4":
        return out
    # the paper's number for the optimizer beside its standard-rate row too
    literal = out.set_index(["dataset", "setting", "model"])[["paper_value", "paper_std"]]
    for i, row in out[out["setting"].str.contains(", lr=")].iterrows():
        key = (row["dataset"], row["setting"].split(", lr=")[0], row["model"])
        if key in literal.index:
            out.loc[i, ["paper_value", "paper_std"]] = literal.loc[key].to_numpy()
    return out


#: Table II (test accuracy per dataset, method and model), III (embedding vs prediction aggregation)
#: and IV (VFedMH with every party on one optimizer: rows ``optimizer=X`` at the paper's 0.05, rows
#: ``optimizer=X, lr=...`` at the optimizer's standard rate, :data:`STANDARD_LR`, where not 0.05).
table2 = partial(_accuracy_table, table="table2")
table3 = partial(_accuracy_table, table="table3")
table4 = partial(_accuracy_table, table="table4")


#: Table III's second reading of Heter_aggVFL: each party's own prediction scored alone.
OWN_LOGITS = "Heter_aggVFL (own logits)"


def _own_accuracy(config: RunConfig, record: dict[str, Any]) -> float | None:
    """Heter_aggVFL's column read as each party's own model: the mean test accuracy (%) of the
    parties holding the active party's architecture, each scoring its own R_k alone; None for a
    record made before the method scored them."""
    final, arch = record["final"]["active"], config.models[config.active]
    vals = [final.get(f"own_test_accuracy:{f'passive_{k}' if k else 'active'}")
            for k, m in enumerate(config.models) if m == arch]
    return None if not vals or None in vals else 100 * float(np.mean(vals))


def _optimizer(c: RunConfig) -> str:
    return OPTIMIZER_NAMES[c.party_value("optimizers", 0)]


def _lr(c: RunConfig) -> float:
    return float(c.party_value("lr", 0))


def _table4_runs(groups: Groups) -> list[RunConfig]:
    """Table IV's runs at the paper's rate and at each optimizer's standard rate, once each."""
    return base.unique(groups["table4"] + groups.get("table4_standard", []))


#: The columns of :func:`cvfl_local_iterations`: (Q, learning rate) of each C-VFL variant.
CVFL_VARIANTS: tuple[tuple[int, float], ...] = ((10, CVFL_LR), (10, PAPER_LR), (1, PAPER_LR))


def cvfl_local_iterations(groups: Groups, records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """C-VFL's final test accuracy (%) per architecture (3-bit quantisation) in each of
    :data:`CVFL_VARIANTS`: Table II's cell, the sensitivity row and the equal-compute control.
    NaN where not recorded yet; a row with fewer than two recorded is left out."""
    rec = by_key(records)
    columns = [f"Q={q}, lr={lr:g}" for q, lr in CVFL_VARIANTS]
    rows = []
    for c in groups["cvfl_q1"]:
        row = {"dataset": DATASET_NAMES[c.dataset], "seed": c.seed, "model": MODEL_NAMES[c.models[0]]}
        for (q, lr), name in zip(CVFL_VARIANTS, columns):
            r = rec.get(c.replace(options={} if q == 10 else {"local_iterations": q}, lr=lr).key)
            row[name] = round(100 * r["final"]["active"]["test_accuracy"], 2) if r else np.nan
        if sum(not np.isnan(row[n]) for n in columns) >= 2:  # something to compare
            rows.append(row)
    return pd.DataFrame(rows, columns=["dataset", "seed", "model", *columns])


#: The 1/C comparison (:func:`vflkit.studies._split.embedding_gradient`).
embedding_gradient = partial(_split.embedding_gradient, names=DATASET_NAMES)


def precision_check(groups: Groups, records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The bf16 check of :data:`PRECISION_CHECK`'s cell (:func:`vflkit.analysis.bf16_check`)."""
    return analysis.bf16_check(groups["precision"], records)


def precision_verdict(table: pd.DataFrame) -> tuple[str | None, str]:
    """Whether bf16 may become the GPU default: :func:`vflkit.analysis.bf16_verdict` on :data:`PRECISION_CHECK`."""
    dataset, method, model = PRECISION_CHECK
    return analysis.bf16_verdict(table, f"{TABLE2_METHODS[method][0]} {MODEL_NAMES[model]} on {DATASET_NAMES[dataset]}")


def baselines_beside_paper(table: pd.DataFrame) -> str:
    """Per Table II baseline (:func:`table2`): in how many printed cells ours is above the paper's,
    and the median gap in points."""
    rows = table[table["method"].isin(["Local", "PyVertical", "C_VFL", "Agg_VFL"])
                 & table["value"].notna() & table["paper_value"].notna()]
    if rows.empty:
        return "No baseline cell with a printed counterpart is recorded yet."
    parts = [f"{method} above the paper's in {int((d > 0).sum())} of {len(d)} cells (median {d.median():+.1f} points)"
             for method, d in (rows["value"] - rows["paper_value"]).groupby(rows["method"], sort=False)]
    return "Our baselines beside the paper's printed Table II: " + "; ".join(parts) + "."


def baseline_evidence() -> pd.DataFrame:
    """Why our baselines sit far above VFedMH's Table II, in the papers' own numbers: the range over
    the small networks each prints for the same baseline, data and split (VFedMH's C_VFL far above
    its PyVertical; the same authors' EASTER prints others). From ``vflkit/reference``."""
    rows = []
    picks = [("vfedmh", "II", "PyVertical", "homogeneous"), ("vfedmh", "II", "C_VFL", "homogeneous"),
             ("vfedmh", "III", "Heter_aggVFL", ""), ("easter", "II", "PyVertical", "heterogeneous"),
             ("easter", "IV", "PyVertical", "homogeneous"), ("easter", "II", "Agg_VFL", "heterogeneous")]
    refs = {p: load_reference(p) for p in ("vfedmh", "easter")}
    for paper, table, method, setting in picks:
        ref = refs[paper]
        sel = ref[(ref["table"] == table) & (ref["method"] == method) & (ref["dataset"].isin(["MNIST", "FMNIST"]))
                  & (ref["setting"] == setting) & ~ref["model"].isin(["avg", *map(MODEL_NAMES.get, RESNETS)])]
        for dataset, g in sel.groupby("dataset", sort=False):
            rows.append({"paper": ref["paper"].iloc[0], "table": table, "method": method, "setting": setting or "-",
                         "dataset": dataset, "paper's lowest (%)": g["value"].min(),
                         "paper's highest (%)": g["value"].max()})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- figures


def _traffic(groups: Groups, records: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Per recorded Table II run but Local's: its training traffic per full epoch, from the ledger
    (a diverged run's last epoch ran fewer steps; a count the ledger lacks: NaN)."""
    rows = []
    for c, r in recorded((c for c in groups["table2"] if c.method != "local"), records):
        mean = analysis.full_epoch_traffic(r, _steps(c)).reindex(columns=["messages", "bytes", "rounds"]).mean()
        rows.append({"dataset": DATASET_NAMES[c.dataset], "seed": c.seed, "model": c.models[0],
                     "method": TABLE2_NAMES[c.method], "epochs": c.epochs, "messages_per_epoch": mean["messages"],
                     "MB_per_epoch": mean["bytes"] / 2**20, "rounds_per_epoch": mean["rounds"], "rounds_per_step":
                     mean["rounds"] / _steps(c)})
    return pd.DataFrame(rows, columns=["dataset", "seed", "model", "method", "epochs", "messages_per_epoch",
                                       "MB_per_epoch", "rounds_per_epoch", "rounds_per_step"])


def _three_models(groups: Groups, records: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """:func:`_traffic`'s runs that obtain the three small models: VFedMH's one run, a baseline's
    three of a seed only once all three are recorded (else it would look cheaper)."""
    per_run = _traffic(groups, records)
    per_run = per_run[per_run["model"].isin(SMALL_MODELS)]
    seed_runs = per_run.groupby(["dataset", "method", "seed"])
    whole = ((seed_runs["seed"].transform("size") == len(SMALL_MODELS))
             & (seed_runs["model"].transform("nunique") == len(SMALL_MODELS)))
    return per_run[(per_run["method"] == "VFedMH") | whole]


def fig3(groups: Groups, records: Sequence[dict[str, Any]]) -> tuple[plt.Figure, pd.DataFrame]:
    """Communication per epoch and in total to obtain the three small models: VFedMH's one run
    against each baseline's three. Per-epoch figures are the ledger's (training phase, mean over
    epochs); totals are them times the study's epochs."""
    epochs = max(c.epochs for c in groups["table2"])
    data = _three_models(groups, by_key(records)).groupby(["dataset", "method", "seed"], sort=False).agg(
        runs_for_3_models=("seed", "size"), messages_per_epoch=("messages_per_epoch", "mean"),
        MB_per_epoch=("MB_per_epoch", "mean"), rounds_per_step=("rounds_per_step", "mean"),
        total_messages=("messages_per_epoch", "sum"), total_MB=("MB_per_epoch", "sum"),
        total_rounds=("rounds_per_epoch", "sum")).reset_index()
    data[["total_messages", "total_MB", "total_rounds"]] *= epochs
    data["epochs"] = epochs
    data = data.groupby(["dataset", "method"], sort=False).mean(numeric_only=True).reset_index().drop(columns="seed")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), gridspec_kw={"wspace": 0.4})
    for ax, col, label, title in zip(
            axes, ["messages_per_epoch", "total_rounds", "total_MB"],
            ["messages per epoch (one run)", f"rounds to obtain 3 models ({epochs} epochs)",
             f"MB sent to obtain 3 models ({epochs} epochs)"],
            ["VFedMH: 4 messages per passive party\nand batch; PyVertical, Agg_VFL: 2",
             "VFedMH: 1 run; each baseline: 3 runs", "C_VFL compresses to 3 bits per value"]):
        sns.barplot(data=data, x="method", y=col, hue="dataset", ax=ax, legend=ax is axes[-1])
        ax.set(xlabel="", ylabel=label, title=title)
        ax.tick_params(axis="x", rotation=20)
    sns.move_legend(axes[-1], "upper left", bbox_to_anchor=(1, 1))  # beside the bars, never on them
    fig.suptitle("Fig. 3: communication of VFedMH and the baselines (training, from the ledgers)", y=1.06)
    return fig, data


def _steps(c: RunConfig) -> int:
    return -(-train_size(c) // c.batch_size)


def _histories(runs: Iterable[RunConfig], records: Sequence[dict[str, Any]],
               columns: Callable[[RunConfig, pd.DataFrame], dict[str, Any]]) -> pd.DataFrame:
    """The recorded ``runs``' :func:`history_frame` with ``columns(run, rows)``, accuracy in %, datasets as printed."""
    df = pd.concat([h.assign(**columns(c, h)) for c, r in recorded(runs, records) for h in [history_frame([r])]],
                   ignore_index=True)
    return df.assign(dataset=df["dataset"].map(DATASET_NAMES), **{"test accuracy (%)": 100 * df["test_accuracy"]})


def fig4(groups: Groups, records: Sequence[dict[str, Any]]) -> tuple[plt.Figure, pd.DataFrame]:
    """Test accuracy per epoch of each party's model, with every party on one optimizer."""
    df = _histories(_table4_runs(groups), records, lambda c, _: {
        "optimizer": _optimizer(c), "learning rate": "paper's 0.05" if _lr(c) == PAPER_LR else f"standard {_lr(c):g}"})
    df["party model"] = df["model"] + " (" + df["architecture"].map(MODEL_NAMES) + ")"
    # mean over seeds; the learning rate as the line style (only Adagrad and Adam have two)
    g = sns.relplot(data=df, x="epoch", y="test accuracy (%)", hue="party model", style="learning rate",
                    col="optimizer", row="dataset", kind="line", marker="o", height=2.6, aspect=1.15,
                    errorbar=None, facet_kws={"margin_titles": True})
    g.set(ylim=(0, 100))
    g.figure.suptitle("Fig. 4: VFedMH, each party's model under each optimizer (all parties on the same one; "
                      "mean over seeds)", y=1.03)
    cols = ["dataset", "seed", "optimizer", "learning rate", "epoch", "model", "architecture", "loss",
            "test accuracy (%)"]
    return g.figure, df[cols]


def fig5(groups: Groups, records: Sequence[dict[str, Any]]) -> tuple[plt.Figure, pd.DataFrame]:
    """Heterogeneous models and heterogeneous optimizers together: test accuracy per epoch."""
    def party_model(c: RunConfig, rows: pd.DataFrame) -> dict[str, pd.Series]:
        names = {("active" if k == 0 else f"passive_{k}"): k for k in range(c.n_parties)}
        return {"party model": rows["model"].map(lambda m: f"{m}: {MODEL_NAMES[c.party_value('models', names[m])]} + "
                                                          f"{OPTIMIZER_NAMES[c.party_value('optimizers', names[m])]}")}
    df = _histories(groups["fig5"], records, party_model)
    g = sns.relplot(data=df, x="epoch", y="test accuracy (%)", hue="party model", col="dataset",
                    kind="line", marker="o", height=3, aspect=1.2, errorbar=None)
    g.set(ylim=(0, 100))
    g.figure.suptitle("Fig. 5: VFedMH with heterogeneous models and optimizers at the four parties", y=1.04)
    return g.figure, df[["dataset", "seed", "epoch", "model", "party model", "loss", "test accuracy (%)"]]


# --------------------------------------------------------------------------- blinding


def blinding_words(demo: dict[str, Any]) -> str:
    """:func:`blinding_demo` worded: the aggregate's error against the ring's bound, and what one
    blinded embedding reveals under per-entry masks and under Eq. (5)'s literal scalar."""
    exact = demo["max_abs_error"] <= demo["error_bound"]
    literal = "reveals the embedding up to one constant" if demo["corr_literal"] > 0.99 else "does not reveal it"
    return (f"The aggregate of the blinded embeddings differs from the plain mean by at most "
            f"{demo['max_abs_error']:.1e}, {'within' if exact else 'beyond'} the ring's rounding bound "
            f"({demo['error_bound']:.1e}). From one blinded embedding, the active party's reconstruction "
            f"correlates with the true one at {demo['corr_per_entry']:.3f} under per-entry masks"
            f"{' (about 0: nothing of it shows)' if abs(demo['corr_per_entry']) < 0.05 else ''}; "
            f"the literal reading ({demo['corr_literal']:.3f}) {literal}.")


def blinding_demo(*, n_passive: int = 3, shape: tuple[int, int] = (128, 128), seed: int = 0) -> dict[str, Any]:
    """What the active party sees of one passive embedding (ReLU-like random tensors), blinded per
    entry and by Eq. (5)'s literal one scalar, and how exact Eq. (7)'s aggregate is: the blinded
    ring values in [0, 1), the aggregate's largest error and its bound, and the correlation of the
    true centred embedding with what each reveals (entries minus the first)."""
    gen = torch.Generator().manual_seed(seed)
    ring = FixedPointRing()
    keys = {k: BlindingKeys(k, seed=seed * 100 + k) for k in range(1, n_passive + 1)}
    for k, kk in keys.items():
        kk.agree({j: other.public_key() for j, other in keys.items() if j != k})
    emb = {k: torch.relu(torch.randn(shape, generator=gen)) for k in range(n_passive + 1)}
    blinded, literal = ([blind(emb[k], keys[k], ring=ring, round=0, step=0, mode=mode) for k in keys]
                        for mode in ("per_entry", "literal_scalar"))
    exact = torch.stack(list(emb.values())).mean(0)
    agg, agg_literal = (aggregate(emb[0], b, ring=ring, n_parties=n_passive + 1) for b in (blinded, literal))

    def unit(t: torch.Tensor) -> np.ndarray:
        return t.numpy().view(np.uint64).astype(np.float64).ravel() / 2.0**64

    def revealed(t: torch.Tensor) -> np.ndarray:
        # What the active party can compute without keys: differences to the first entry.
        v = t.numpy().view(np.uint64).ravel()
        return (v - v[0]).view(np.int64).astype(np.float64) / 2**16

    truth = emb[1].numpy().ravel() - emb[1].numpy().ravel()[0]
    # with one scalar per party the differences between entries are in the clear (``literal_revealed``)
    return {"blinded_unit": unit(blinded[0]), "literal_unit": unit(literal[0]),
            "literal_revealed": revealed(literal[0]), "plain": emb[1].numpy().ravel(),
            "max_abs_error": float((agg - exact).abs().max()),
            "max_abs_error_literal": float((agg_literal - exact).abs().max()),
            "error_bound": ring.mean_error_bound(float(max(e.abs().max() for e in emb.values()))),
            "corr_per_entry": float(np.corrcoef(revealed(blinded[0]), truth)[0, 1]),
            "corr_literal": float(np.corrcoef(revealed(literal[0]), truth)[0, 1]),
            "max_leak_error_literal": float(np.abs(revealed(literal[0]) - truth).max())}


def blinding_figure(demo: dict[str, Any]) -> tuple[plt.Figure, pd.DataFrame]:
    """Histograms of one passive embedding: plain, blinded per entry, blinded by one scalar."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    axes[0].hist(demo["plain"], bins=60, color="C0")
    axes[0].set(title="plain local embedding E_k\n(never leaves party k)", xlabel="entry value", ylabel="entries")
    axes[1].hist(demo["blinded_unit"], bins=60, color="C1")
    axes[1].set(title="[E_k] as the active party sees it\n(per-entry blinding factor)", xlabel="ring value / 2^64")
    # the literal values share one shift (one invisible bar): show what the active party decodes
    axes[2].hist(demo["literal_revealed"], bins=60, color="C3")
    axes[2].set(title="literal Eq. (5): one scalar per party\nentry minus first entry, decoded (no key needed)",
                xlabel="E_k[i] - E_k[0]")
    fig.suptitle("What blinding hides: 128x128 embedding entries of one passive party", y=1.06)
    return fig, pd.DataFrame({"plain": demo["plain"], "blinded_per_entry_unit": demo["blinded_unit"],
                              "blinded_literal_unit": demo["literal_unit"],
                              "literal_revealed_difference": demo["literal_revealed"]})


def blinding_accuracy(groups: Groups, records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Final test accuracy (%) of each party's model with and without blinding (recorded pairs)."""
    rec = by_key(records)
    rows = [{"dataset": DATASET_NAMES[c.dataset], "seed": c.seed, "party": party, "model": MODEL_NAMES[arch],
             "blinding": blinding, "test_accuracy_pct": round(100 * rec[run.key]["final"][party]["test_accuracy"], 2)}
            for c, standard in analysis.recorded_pairs(groups["blinding"], rec)
            for blinding, run in (("on", standard), ("off", c)) for party, arch in rec[run.key]["models"].items()]
    if not rows:
        return pd.DataFrame(columns=["dataset", "seed", "party", "model", "on", "off", "difference"])
    out = pd.DataFrame(rows).pivot_table(index=["dataset", "seed", "party", "model"], columns="blinding",
                         values="test_accuracy_pct", sort=False).reset_index()
    return out.assign(difference=(out["on"] - out["off"]).round(2))


# --------------------------------------------------------------------------- claims
# How each clause is judged (orderings, equivalences, coverage): docs/studies.md, "How a claim is judged".

#: "Similar accuracy" across optimizers (Table IV): within 5 points, the widest spread the
#: paper's own Table IV calls similar (CIFAR-10 LeNet, 4.78 points; MNIST/FMNIST at most 0.65).
OPTIMIZER_TOLERANCE_POINTS = 5.0
#: Blinding changes no number beyond the ring's rounding, which training may amplify a little.
BLINDING_TOLERANCE_POINTS = 1.0
#: A model "converges" when it ends above Local with its architecture (as every curve of Figs. 4-5)
#: and its last epoch moved it by less than this (plain SGD at 0.05 moves a point or two on a plateau).
PLATEAU_POINTS = 2.0
#: A model ending below this test accuracy (1.5 x chance on ten classes) learned nothing that
#: lasted; the weakest model that learned (Local on a quarter image) ends well above it.
AT_CHANCE_PCT = 15.0
#: Test accuracy (%) at chance on the 10 classes of every dataset of the paper.
CHANCE_PCT = 10.0
#: ``collapsed_epoch(record)``, ``diverged_runs(records)``: at :data:`AT_CHANCE_PCT` (:mod:`vflkit.analysis`).
collapsed_epoch = partial(analysis.collapsed_epoch, at_chance_pct=AT_CHANCE_PCT)
diverged_runs = partial(analysis.diverged_runs, at_chance_pct=AT_CHANCE_PCT)


def _model_set(arch: str) -> str:
    return "resnets" if arch.startswith("resnet") else "small"


#: The methods whose one run trains a model per party (its cells: every architecture it holds).
_AGGREGATING = ("vfedmh", "homo_vfedmh")


def expected_cells(groups: Groups, table: str, a: str, b: str, model_set: str | None = None) -> set[str]:
    """The cells "dataset/architecture" where the profile runs both ``a`` and ``b`` (:func:`claims.compared_cells`)."""
    def cell(c: RunConfig) -> set[str]:
        archs = set(c.models) if c.method in _AGGREGATING else {c.models[c.active]}
        return {f"{DATASET_NAMES[c.dataset]}/{MODEL_NAMES[arch]}" for arch in archs
                if model_set is None or _model_set(arch) == model_set}
    same = {OWN_LOGITS: TABLE3_METHODS["heter_aggvfl"]}  # the same runs
    return claims.compared_cells(groups[table], same.get(a, a), same.get(b, b), cell,
                                 name=lambda c: (TABLE2_NAMES if table == "table2" else TABLE3_METHODS)[c.method])


def accuracy_frame(groups: Groups, records: dict[str, dict[str, Any]], table: str) -> pd.DataFrame:
    """One row per (dataset, method, architecture, seed) of Table II or III with its final test
    accuracy (%): the long frame the claims pair on (missing records are left out)."""
    rows = [{"dataset": DATASET_NAMES[c.dataset], "method": m, "model": MODEL_NAMES[arch],
             "model_set": _model_set(arch), "seed": c.seed, "value": v}
            for c, r in recorded(groups[table], records) for m, _, arch, v in _cells(c, r, table)]
    return pd.DataFrame(rows, columns=["dataset", "method", "model", "model_set", "seed", "value"])


#: Labelled variants a clause can be judged on: the method's runs in ``table2``/``table3``
#: replaced by those of another group (:func:`vflkit.analysis.swap_in_variant`).
VARIANTS: dict[str, tuple[str, str]] = {
    "full_gradient": ("vfedmh", "embedding_gradient"),  # h gets ∂L_k/∂E, not ∂L_k/∂E / C
    "cvfl_host_lr": ("c_vfl", "cvfl_host_lr"),  # C-VFL at the paper's 0.05 with Q = 10
}


#: ``groups`` with :data:`VARIANTS` ``variant`` swapped in (None: unchanged); defined on the small
#: networks only, so the method's other cells leave the table.
with_variant = partial(analysis.swap_in_variant, variants=VARIANTS, tables=("table2", "table3"), keep_unmatched=False)
#: ``_available(records, variant=None)``: the profile's runs (``variant`` swapped in) and ``records`` by key.
_available = _split.claim_input(configs, with_variant)


def _ordering_check(table: str, a: str, b: str, model_set: str | None = None, variant: str | None = None) -> Any:
    """The check of "``a`` > ``b``" over the cells (dataset, architecture) of ``table``, on the
    study's runs or on a labelled :data:`VARIANTS` entry."""
    def check(records: claims.Records) -> claims.Verdict:
        groups, rec = _available(records, variant)
        df = accuracy_frame(groups, rec, table)
        if model_set is not None:
            df = df[df["model_set"] == model_set]
        # a run near chance or below Local decides nothing (claims.paired's gate); not for the
        # own-logits reading, a part never trained to stand alone: a low score is its answer
        gate = {} if OWN_LOGITS in (a, b) else {"chance": CHANCE_PCT, "local": "Local"}
        return claims.ordering(claims.paired(df, by="method", a=a, b=b, value="value", cell=["dataset", "model"],
                                             **gate), a=a, b=b, expected=expected_cells(groups, table, a, b, model_set))
    return check


def _optimizer_spread(standard: bool) -> Any:
    def check(records: claims.Records) -> claims.Verdict:
        groups, rec = _available(records)
        runs = groups["table4_standard" if standard else "table4"]
        rows = [{"cell": f"{DATASET_NAMES[c.dataset]}/{MODEL_NAMES[arch]}", "seed": c.seed, "optimizer": _optimizer(c),
                 "value": v} for c, r in recorded(runs, rec) for arch, v in analysis.arch_metric(r).items()]
        df = pd.DataFrame(rows, columns=["cell", "seed", "optimizer", "value"])
        full = df.groupby(["cell", "seed"]).filter(lambda g: g["optimizer"].nunique() == len(OPTIMIZERS))
        spread = full.groupby(["cell", "seed"])["value"].agg(lambda v: v.max() - v.min()).rename("diff").reset_index()
        worst = (full.groupby("optimizer")["value"].mean().idxmin() if len(full) else None)
        cells = {f"{DATASET_NAMES[c.dataset]}/{MODEL_NAMES[arch]}" for c in runs for arch in set(c.models)}
        # "spread <= tolerance" for a spread (never negative): the ordering of tolerance - spread, seed the replicate
        v = claims.ordering(spread.assign(diff=OPTIMIZER_TOLERANCE_POINTS - spread["diff"]),
                            a=f"tolerance of {OPTIMIZER_TOLERANCE_POINTS:g} points",
                            b="spread between the 4 optimizers", expected=cells)
        return v.with_evidence(v.evidence + (f" (lowest: {worst})" if worst else ""))
    return check


def _converges(group: str, label: Callable[[RunConfig], str], missing: Callable[[list[str]], str]) -> Any:
    """Figs. 4-5: each party model of ``group``'s runs ends above Local with its architecture (in
    that seed's run) and on a plateau, judged per ``label(run)`` over cells (dataset, party); a run
    without records makes the clause not testable, ``missing(sorted labels)`` saying so."""
    def check(records: claims.Records) -> claims.Verdict:
        groups, rec = _available(records)
        local = {(c.dataset, c.models[0], c.seed): 100 * rec[c.key]["final"]["active"]["test_accuracy"]
                 for c in groups["table2"] if c.method == "local" and c.key in rec}
        above, flat = [], []
        for c, r in recorded(groups[group], rec):
            hist = pd.DataFrame(r["history"])
            for party, arch in r["models"].items():
                acc = 100 * hist[hist["model"] == party].sort_values("epoch")["test_accuracy"].to_numpy()
                row = {"group": label(c), "cell": f"{DATASET_NAMES[c.dataset]}/{party}", "seed": c.seed}
                if (c.dataset, arch, c.seed) in local:
                    above.append({**row, "diff": acc[-1] - local[(c.dataset, arch, c.seed)]})
                if len(acc) >= 2:
                    flat.append({**row, "diff": PLATEAU_POINTS - abs(acc[-1] - acc[-2])})
        cols = ["group", "cell", "seed", "diff"]
        verdicts = [claims.all_of([
            claims.ordering(pd.DataFrame([d for d in above if d["group"] == g], columns=cols), a=f"{g}", b="Local"),
            claims.ordering(pd.DataFrame([d for d in flat if d["group"] == g], columns=cols),
                            a=f"{PLATEAU_POINTS:g}-point plateau", b=f"{g}'s last-epoch change")])
            for g in sorted({d["group"] for d in above + flat})]
        if gone := sorted({label(c) for c in groups[group] if c.key not in rec}):
            verdicts.append(claims.not_testable(missing(gone)))
        return claims.all_of(verdicts)
    return check


def _rounds_per_step(records: claims.Records) -> claims.Verdict:
    """Fig. 3: VFedMH 4 rounds per step, PyVertical, C_VFL and Agg_VFL 2 (counts, not estimates)."""
    per_run = _traffic(*_available(records))
    seen = {m: set(rounds.round(3)) for m, rounds in per_run.groupby("method", sort=False)["rounds_per_step"]}
    if "VFedMH" not in seen or len(seen) < 2:
        return claims.not_testable("no recorded pair of VFedMH and a baseline")
    ev = "; ".join(f"{m}: {', '.join(f'{v:g}' for v in sorted(vs))} per step" for m, vs in seen.items())
    ok = seen["VFedMH"] == {4.0} and all(vs == {2.0} for m, vs in seen.items() if m != "VFedMH")
    return claims.Verdict(claims.AGREE if ok else claims.DISAGREE, ev)


def _total_rounds(records: claims.Records) -> claims.Verdict:
    """Fig. 3: to obtain the three small models, VFedMH's one run needs fewer rounds than each
    baseline's three. Rounds per epoch times epochs: a run that stopped early does not look cheaper."""
    groups, rec = _available(records)
    df = _three_models(groups, rec).assign(rounds=lambda d: d["rounds_per_epoch"] * d["epochs"])
    df = df.groupby(["method", "dataset", "seed"], as_index=False)["rounds"].sum()
    return claims.all_of(
        claims.ordering(claims.paired(df, by="method", a=b, b="VFedMH", value="rounds", cell=["dataset"]),
                        a=f"{b}'s rounds", b="VFedMH's", what="rounds", exact=True,  # counted, no noise
                        expected={cell.split("/")[0] for cell in expected_cells(groups, "table2", b, "VFedMH", "small")})
        for b in ("PyVertical", "C_VFL", "Agg_VFL"))


def _curves(groups: Groups, records: dict[str, dict[str, Any]]) -> Iterator[tuple[RunConfig, dict[str, Any]]]:
    """Table II's recorded runs with a curve to read: not Local's, none that diverged or collapsed."""
    for c, r in recorded(groups["table2"], records):
        if c.method != "local" and not r.get("diverged") and collapsed_epoch(r) is None:
            yield c, r


def time_to_target(groups: Groups, records: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """Fig. 3's "converge at the same epoch", pair by pair: per Table II cell and seed and baseline,
    the epochs at which VFedMH (mean over the parties holding the architecture) and the baseline
    first reach :data:`vflkit.analysis.TARGET_SHARE` of the better final accuracy (NaN: never)."""
    curves: dict[tuple[str, str, int, str], pd.Series] = {}
    for c, r in _curves(groups, records):
        method = TABLE2_NAMES[c.method]
        # a baseline's one global model is its active party's architecture
        for arch in dict.fromkeys(r["models"].values()) if method == "VFedMH" else [c.models[0]]:
            parties = [p for p, a in r["models"].items() if a == arch]
            curves[(DATASET_NAMES[c.dataset], MODEL_NAMES[arch], c.seed, method)] = 100 * analysis.metric_curve(
                r["history"], models=parties)
    rows = []
    for (dataset, model, seed, method), theirs in curves.items():
        ours = curves.get((dataset, model, seed, "VFedMH"))
        if method == "VFedMH" or ours is None:
            continue
        timed = analysis.to_common_target({"VFedMH": ours, "epoch": theirs})
        rows.append({"dataset": dataset, "model": model, "seed": seed, "baseline": method,
                     "target": timed["epoch"][0], **{k: e for k, (_, e) in timed.items()}})
    return pd.DataFrame(rows, columns=["dataset", "model", "seed", "baseline", "target", "VFedMH", "epoch"])


def _same_epoch(variant: str | None = None) -> Any:
    def check(records: claims.Records) -> claims.Verdict:
        """Fig. 3: VFedMH and each baseline reach a common accuracy target at about the same epoch
        (within a tenth of the epochs trained, at least one), by two one-sided tests on the signed
        difference; a pair where a run never reaches the target is left out and named."""
        groups, rec = _available(records, variant)
        df = time_to_target(groups, rec)
        if df.empty:
            return claims.not_testable("no recorded pair of VFedMH and a baseline")
        epochs = max((c.epochs for c in groups["table2"]), default=10)
        tol = max(1.0, epochs // 10)
        verdicts = []
        for b in ("PyVertical", "C_VFL", "Agg_VFL"):
            d = df[df["baseline"] == b]
            censored = d[d[["VFedMH", "epoch"]].isna().any(axis=1)]
            d = d.dropna(subset=["VFedMH", "epoch"])
            diffs = pd.DataFrame({"cell": d["dataset"] + "/" + d["model"], "seed": d["seed"],
                                  "diff": d["VFedMH"] - d["epoch"]})
            v = claims.equivalent(diffs, tolerance=tol, what=f"VFedMH's epoch to the common target - {b}'s",
                                  unit="epochs", expected=expected_cells(groups, "table2", "VFedMH", b))
            if len(censored):
                shown = ", ".join(f"{r.dataset}/{r.model} seed {r.seed}" for r in censored.head(3).itertuples())
                v = v.with_evidence(f"{v.evidence}; {len(censored)} pair(s) where a run never reaches "
                                    f"{analysis.TARGET_SHARE:.0%} of the better final accuracy within {epochs} epochs, "
                                    f"left out ({shown}{', ...' if len(censored) > 3 else ''})")
            verdicts.append(v.labelled(b))
        verdict = claims.all_of(verdicts)
        # a diverged run leaves its cell without a pair (so the clause cannot agree); say which
        gone = diverged_runs([r for c, r in recorded(groups["table2"], rec) if c.method != "local"])
        if gone.empty:
            return verdict
        which = ", ".join(f"{m} ({n})" for m, n in gone["method"].map(TABLE2_NAMES).value_counts().sort_index().items())
        # a run that never converged cannot support "converge at about the same epoch"
        status = claims.NOT_TESTABLE if verdict.status == claims.AGREE else verdict.status
        return verdict.with_evidence(f"{verdict.evidence}; runs that diverged (or collapsed to chance) and never "
                                     f"converged, left out: {which}", status)
    return check


def _blinding(records: claims.Records) -> claims.Verdict:
    """Blinding's masks cancel: each party's accuracy with and without them agree within
    :data:`BLINDING_TOLERANCE_POINTS`."""
    groups, rec = _available(records)
    rows = [{"cell": f"{DATASET_NAMES[c.dataset]}/{party}", "seed": c.seed,
             "diff": 100 * (rec[on.key]["final"][party]["test_accuracy"] - rec[c.key]["final"][party]["test_accuracy"])}
            for c, on in analysis.recorded_pairs(groups["blinding"], rec) for party in rec[on.key]["models"]]
    return claims.equivalent(pd.DataFrame(rows, columns=["cell", "seed", "diff"]), tolerance=BLINDING_TOLERANCE_POINTS,
                             what="accuracy with blinding - without")


#: The reading our own runs are judged under where the paper admits another (:attr:`vflkit.claims.Claim.reading`).
DEFAULT_READING = "1/C (Eq. 7), C-VFL at 0.05/Q"


def _claim(artefact: str, clause: str, check: Any, reading: str = "") -> claims.Claim:
    return claims.Claim(paper="VFedMH", artefact=artefact, clause=clause, check=check, reading=reading)


def _heter_aggvfl(clause: str, a: str) -> list[claims.Claim]:
    """Table III's clause ``a`` > Heter_aggVFL under both readings (the paper does not say which it
    scored): the summed ensemble, and each party's own prediction alone."""
    return [_claim(f"Table III (Heter_aggVFL as {r})", clause, _ordering_check("table3", a, b), reading=f"Heter_aggVFL as {r}")
            for r, b in (("the ensemble", "Heter_aggVFL"), ("each party's own logits", OWN_LOGITS))]


#: VFedMH's claims, one clause each (Sec. VI-D-F, the reference README's figure claims).
CLAIMS: list[claims.Claim] = [
    *[_claim("Table II", f"VFedMH's heterogeneous models are more accurate than {b} ({label})",
             _ordering_check("table2", "VFedMH", b, model_set), reading=DEFAULT_READING if model_set == "small" else "")
      for model_set, label in (("small", "CNN, LeNet, MLP"), ("resnets", "ResNet18/50/101"))
      for b in ("Local", "PyVertical", "C_VFL", "Agg_VFL")],
    *_heter_aggvfl("heterogeneous embedding aggregation (VFedMH) beats heterogeneous prediction aggregation "
                   "(Heter_aggVFL)", "VFedMH"),
    _claim("Table III", "homogeneous embedding aggregation (Homo_VFedMH) beats homogeneous prediction "
                        "aggregation (Homo_aggVFL)", _ordering_check("table3", "Homo_VFedMH", "Homo_aggVFL")),
    *_heter_aggvfl("prediction aggregation does worse with heterogeneous models than with homogeneous ones "
                   "(Homo_aggVFL > Heter_aggVFL)", "Homo_aggVFL"),
    *[_claim("Table IV", f"similar accuracy whichever of SGD, SGD-momentum, Adagrad, Adam every party uses, {rate}",
             _optimizer_spread(standard=standard))
      for standard, rate in ((False, "at the paper's learning rate 0.05 for all"), (True, "each at its standard learning rate"))],
    _claim("Fig. 3", "VFedMH needs 4 communication rounds per step, the baselines 2", _rounds_per_step),
    _claim("Fig. 3", "with 3 models, VFedMH needs fewer communication rounds in total than each baseline",
           _total_rounds),
    _claim("Fig. 3", "VFedMH and the baselines converge at about the same epoch", _same_epoch(),
           reading=DEFAULT_READING),
    *[_claim("Fig. 4", f"every party's model converges under each optimizer ({rate})",
             _converges(group, lambda c: f"{_optimizer(c)} (lr {_lr(c):g})",
                        lambda gone: f"no records of {', '.join(gone)}"))
      for group, rate in (("table4", "lr 0.05, the paper's"), ("table4_standard", "each at its standard rate"))],
    _claim("Fig. 5", "with heterogeneous models and optimizers mixed, every party's model converges",
           _converges("fig5", lambda c: "mixed models and optimizers", lambda gone: "runs of Fig. 5 without records")),
    _claim("Sec. IV-C", "the blinding factors cancel in the aggregate: accuracy with and without them is the same",
           _blinding),
]

#: The same clauses on our labelled variants (:data:`VARIANTS`; shown apart from the paper's claims).
VARIANT_CLAIMS: list[claims.Claim] = [
    *[_claim("Table II (h gets ∂L/∂E, no 1/C)", f"VFedMH's heterogeneous models are more accurate than {b} "
             "(CNN, LeNet, MLP)", _ordering_check("table2", "VFedMH", b, "small", variant="full_gradient"),
             reading=FULL_GRADIENT_READING)
      for b in ("Local", "PyVertical", "C_VFL", "Agg_VFL")],
    _claim("Table II (C-VFL at lr 0.05, Q = 10)", "VFedMH's heterogeneous models are more accurate than C_VFL "
           "(CNN, LeNet, MLP)", _ordering_check("table2", "VFedMH", "C_VFL", "small", variant="cvfl_host_lr"),
           reading="C-VFL at lr 0.05, Q = 10"),
    _claim("Fig. 3 (h gets ∂L/∂E, no 1/C)", "VFedMH and the baselines converge at about the same epoch",
           _same_epoch("full_gradient"), reading=FULL_GRADIENT_READING),
]


# --------------------------------------------------------------------------- the study's declaration


def beyond(evidence: base.Evidence) -> list[tuple[str, str]]:
    """Findings the paper does not report: label leakage, the literal blinding scalar, divergence, C-VFL's Q."""
    out = [("VFedMH: a passive party recovers every training label from round 4",
            "Round 4 sends each passive party ∂L_k/∂R_k, whose one negative entry per row is the true "
            "class, so an arg-min recovers each label of each batch without a model or auxiliary data "
            "(measured on a real run in the " + evidence.notebook("What a passive party learns: labels from round 4")
            + "; `vflkit.attacks.label_leakage` trains, so this report does not recompute it).")]
    d = blinding_demo()  # a 128x128 masking demonstration, no training (milliseconds)
    out.append(("VFedMH: Eq. (5) read literally (one blinding scalar per party) reveals the embedding",
                f"From one blinded 128×128 embedding the active party computes differences between entries: "
                f"their correlation with the true embedding is {d['corr_literal']:.3f} with one scalar per party and "
                f"{d['corr_per_entry']:+.3f} with a mask per entry; the aggregate's largest error is "
                f"{d['max_abs_error']:.2g} (ring bound {d['error_bound']:.2g}) either way "
                f"(`vfedmh.blinding_demo()`; " + evidence.notebook("Blinding factors") + ")."))
    if found := evidence.first_with_records():
        profile, have = found
        groups, runs, key = evidence.groups(profile), evidence.runs(profile), evidence.key
        div = diverged_runs([have[key(c)] for c in runs if key(c) in have])
        which = "; ".join(f"{r.method} {r.models} on {r.dataset} (epoch {r.epoch}"
                          + (", collapsed to chance and trained on there)" if r.how == "collapsed" else ")")
                          for r in div.itertuples())
        out.append(("VFedMH: divergence at the paper's learning rate 0.05",
                    f"{len(div)} of {sum(key(c) in have for c in runs)} recorded {profile}-profile runs diverged"
                    + (f": {which}" if len(div) else "") + " (`vfedmh.diverged_runs`)."))
        t = cvfl_local_iterations(groups, list(have.values()))
        if len(t):
            cols = [c for c in t.columns if c.startswith("Q=")]
            means, counts = t.groupby("dataset")[cols].mean(), t.groupby("dataset")[cols].count()
            out.append(("VFedMH: C-VFL's local iterations Q and its learning rate (Q = 1 is the equal-compute control)",
                        "; ".join(f"{ds}: " + ", ".join(f"{means.loc[ds, c]:.1f} % at {c} ({counts.loc[ds, c]} runs)"
                                                       for c in cols if counts.loc[ds, c])
                                  for ds in means.index)
                        + f" (mean test accuracy over architectures and seeds, {profile} profile; Table II's cell is "
                        f"Q = 10 at {CVFL_LR:g}, the rate C-VFL's analysis allows; "
                        "`vfedmh.cvfl_local_iterations`)."))
    return out


STUDY = register(Study(
    name="vfedmh", title="VFedMH", family="split", configs=configs, order=1, reference_csv="vfedmh.csv",
    cites="wang2023vfedmh",
    artefacts=(
        Artefact("Table II", base.groups("table2"), ("table2.*",), table2, _view()),
        Artefact("Table III", base.groups("table3"), ("table3.*",), table3, _view()),
        Artefact("Table IV", base.groups("table4", "table4_standard"), ("table4.*",), table4,
                 _view(index=("dataset", "setting"))),
        Artefact("Fig. 3", base.groups("table2"), ("fig3.*",), _figure(fig3)),
        Artefact("Fig. 4", base.groups("table4", "table4_standard"), ("fig4.*",), _figure(fig4)),
        Artefact("Fig. 5", base.groups("fig5"), ("fig5.*",), _figure(fig5)),
    ),
    claims=CLAIMS, variant_claims=VARIANT_CLAIMS, needs_gpu=needs_gpu, run_priority=run_priority,
    beyond=beyond, describe=partial(_split.describe, datasets=DATASET_NAMES),
    calibration=lambda: [c for c in configs("paper")["table2"] if c.dataset == "cifar10" and c.seed == 0 and needs_gpu(c)],
))
