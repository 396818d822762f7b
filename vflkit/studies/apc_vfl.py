"""APC-VFL (Irureta et al. 2025): one-shot VFL with autoencoders and distillation.

Reproduces Figs 5-8 / Appendices C-D (Local, Ablation, APC-VFL with MSE and MAE distillation,
VFedTrans over aligned-sample counts and feature partitions), Table 2 (SplitNN vs APC-VFL on
aligned data only) and Table 4 (MIMIC-III macro/weighted F1, when the data is present), with
every method's communication from the channel's ledger beside the paper's footprint formulas
(Eqs. 6-10).

This module declares the runs per profile (:func:`configs`) and draws the tables and figures
from their records. The runs (parties, the one-shot methods, the classifier of step ④ and the
scoring) are :mod:`vflkit.training.one_shot`'s; :mod:`vflkit.records` writes one record each
to ``results/<profile>/apc_vfl/<key>.json`` and skips runs whose record exists.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch

from .. import records as store
from ..config import apply_overrides, check_profile, check_seeds
from ..partition import APC_VFL_N_ACTIVE
from ..report import join_reference, side_by_side
from ..training import one_shot
from ..training.one_shot import (DATASETS, FIG5_METHODS, LOCAL_METHODS, TABLE2_METHODS, OneShotRun,
                                 available_datasets)

PAPER = "apc_vfl"


METHOD_LABELS: dict[str, str] = {
    "local": "Local", "ablation": "Ablation", "apc_vfl_mse": "APC-VFL (MSE)",
    "apc_vfl_mae": "APC-VFL (MAE)", "vfedtrans": "VFedTrans", "splitnn": "SplitNN", "apc_vfl_joint": "APC-VFL",
}
#: Per profile. ``epochs`` caps every autoencoder / SplitNN per dataset (the paper: 200 with
#: early stopping, patience 10); ``n_active_features`` are the Appendix A partitions run;
#: ``methods`` the Fig. 5 methods; ``few_aligned`` adds Fig. 8 / D.3's small counts.
#: quick fits 10 minutes on a 2-core CPU by running the two extreme partitions (2 and 5 active
#: features), APC-VFL with MSE only, and capping epochs (Credit Card: 10 epochs of 157
#: batches; Breast Cancer: 20 epochs of 57 batches). paper is the paper's full grid.
PROFILE_SETTINGS: dict[str, dict[str, Any]] = {
    "smoke": {"datasets": ("breast_cancer",), "aligned": {"breast_cancer": (250, 100)},
              "n_active_features": (2, 5), "methods": ("local", "ablation", "vfedtrans", "apc_vfl_mse"),
              "few_aligned": False, "epochs": {"breast_cancer": 3}, "folds": 2, "seeds": (0,),
              "table2_aligned": {"breast_cancer": (250,)}},
    "quick": {"datasets": ("breast_cancer", "credit_card"), "aligned": {},
              "n_active_features": (2, 5), "methods": ("local", "ablation", "vfedtrans", "apc_vfl_mse"),
              "few_aligned": False, "epochs": {"breast_cancer": 20, "credit_card": 10}, "folds": 10,
              "seeds": (0,), "table2_aligned": {}},
    "paper": {"datasets": ("breast_cancer", "credit_card", "mimic3"), "aligned": {},
              "n_active_features": APC_VFL_N_ACTIVE, "methods": FIG5_METHODS, "few_aligned": True,
              "epochs": {}, "folds": 10, "seeds": (0, 1, 2, 3, 4), "table2_aligned": {}},
}


def configs(profile: str, *, seeds: Sequence[int] | None = None,
            overrides: dict[str, Any] | None = None) -> list[OneShotRun]:
    """Every run of ``profile``: Fig. 5 (+ Fig. 8 / D.3 in ``paper``) and Table 2 grids.

    ``seeds``: repetitions (default: the profile's). ``overrides`` replace profile settings
    (e.g. ``datasets``; ``epochs``, ``aligned`` and ``table2_aligned`` are per dataset in the
    profiles, and an override may give one value for every dataset) or set a
    :class:`OneShotRun` field on every run (``patience``, ``lr``, ``lam``, ``val_fraction``);
    an unknown key is an error that lists the valid ones.
    """
    run_fields = ("patience", "lr", "lam", "val_fraction")
    s, forced = apply_overrides(PROFILE_SETTINGS[check_profile(profile)], overrides, run_fields=run_fields)
    seeds = check_seeds(s["seeds"] if seeds is None else seeds)
    out: list[OneShotRun] = []
    for ds in s["datasets"]:
        spec = DATASETS[ds]
        per = {k: (s[k].get(ds, default) if isinstance(s[k], dict) else s[k])
               for k, default in (("aligned", spec.aligned), ("epochs", 200), ("table2_aligned", spec.aligned))}
        common = {"epochs": per["epochs"], "folds": s["folds"], **forced}
        aligned = tuple(per["aligned"]) + (spec.few_aligned if s["few_aligned"] else ())
        for seed in seeds:
            for a in s["n_active_features"]:
                for m in LOCAL_METHODS:
                    if m in s["methods"]:
                        out.append(OneShotRun(kind="fig5", dataset=ds, method=m, n_aligned=None,
                                              n_active_features=a, seed=seed, **common))
                for n in aligned:
                    for m in ("vfedtrans", "apc_vfl_mse", "apc_vfl_mae"):
                        if m in s["methods"]:
                            out.append(OneShotRun(kind="fig5", dataset=ds, method=m, n_aligned=n,
                                                  n_active_features=a, seed=seed, **common))
            # Table 2: the initial (5-feature) partition; the paper notes the split of features
            # does not matter when training and inference are both collaborative.
            for n in tuple(per["table2_aligned"]):
                for m in TABLE2_METHODS:
                    out.append(OneShotRun(kind="table2", dataset=ds, method=m, n_aligned=n,
                                          n_active_features=5, seed=seed, **common))
    return out


def run(profile: str, *, device: str | torch.device = "auto", seeds: Sequence[int] | None = None,
        overrides: dict[str, Any] | None = None, results: Path | None = None,
        progress: bool = True, recompute_before: str | None = None) -> list[dict[str, Any]]:
    """Train (or load) every run of :func:`configs` and return their records. The models are
    tiny and run on one CPU thread whatever ``device`` says (see :func:`one_shot.train`)."""
    return one_shot.run_many(configs(profile, seeds=seeds, overrides=overrides), profile=profile,
                             device=device, results=results, progress=progress, recompute_before=recompute_before)


def recorded(profile: str = "quick", datasets: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The records an earlier run of ``profile`` committed for :func:`configs` on ``datasets``
    (default: the profile's that are present here); nothing is trained. What the notebook
    shows beside its own run."""
    if datasets is None:
        datasets, _ = available_datasets(PROFILE_SETTINGS[check_profile(profile)]["datasets"])
    return store.load_recorded(configs(profile, overrides={"datasets": datasets}), profile=profile)


# ------------------------------------------------------------------------------ footprints


MB = 1e6  # the paper's MB: 9500 aligned x 256 floats x 4 bytes = 9.73 MB (Table 2)


def footprint_apc_vfl(n_aligned: int, z_p: int = 256) -> int:
    """Eq. 6: bytes of the one exchange, |D_A| * z_p * 4."""
    return n_aligned * z_p * 4


def footprint_splitnn(epochs: int, n_aligned: int, batch_size: int, z_p: int = 256,
                      p: int = 128 * 256 + 256) -> int:
    """Eqs. 7-9: epochs * |D_A| * z_p * 4 (forward) + epochs * ceil(|D_A|/B) * p * 4 (backward,
    priced as one gradient per parameter of the passive encoder's last layer)."""
    return epochs * n_aligned * z_p * 4 + epochs * math.ceil(n_aligned / batch_size) * p * 4


def footprint_vfedtrans(n_aligned: int, x_t: int, x_d: int) -> int:
    """Eq. 10: (2|D_A|^2 + x_t x + x_d x + |D_A| x_t + |D_A| x_d + |D_A| x) * 4, x = x_t + x_d."""
    x = x_t + x_d
    return (2 * n_aligned ** 2 + x_t * x + x_d * x + n_aligned * x_t + n_aligned * x_d + n_aligned * x) * 4


def footprint_formula(rec: dict[str, Any]) -> float:
    """The paper's footprint (bytes) for a record's run, from its own sizes and epochs."""
    cfg = rec["config"]
    if cfg["method"] in LOCAL_METHODS:
        return 0.0
    if cfg["kind"] == "table2":
        n = rec["n_train"]
        if cfg["method"] == "splitnn":
            n_fit = n - int(round(n * cfg["val_fraction"]))
            return float(footprint_splitnn(rec["history"]["splitnn"]["epochs"], n_fit,
                                           DATASETS[cfg["dataset"]].batch_size))
        return float(footprint_apc_vfl(n))
    if cfg["method"] == "vfedtrans":
        return float(footprint_vfedtrans(cfg["n_aligned"], rec["x_t"], rec["x_d"]))
    return float(footprint_apc_vfl(cfg["n_aligned"]))


# ------------------------------------------------------------------------- tables, figures


def runs_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per run and metric: config columns, the run's mean-over-folds value, ledger
    bytes and rounds, and the paper's formula for the same run."""
    rows = []
    for r in records:
        c = r["config"]
        for metric, value in r["final"].items():
            rows.append({**c, "label": METHOD_LABELS[c["method"]], "metric": metric, "value": value,
                         "bytes": r["comm"]["total"]["bytes"], "rounds": r["comm"]["total"]["rounds"],
                         "formula_bytes": footprint_formula(r)})
    return pd.DataFrame(rows)


def _expand_local(df: pd.DataFrame, aligned: dict[str, Sequence[int]]) -> pd.DataFrame:
    """Local and Ablation do not depend on |D_A|: repeat their rows at each aligned count."""
    loc = df[df["n_aligned"].isna()]
    parts = [df[df["n_aligned"].notna()]]
    for ds, counts in aligned.items():
        for n in counts:
            parts.append(loc[loc["dataset"] == ds].assign(n_aligned=n))
    out = pd.concat(parts, ignore_index=True)
    out["n_aligned"] = out["n_aligned"].astype(int)
    return out


def _fig5_runs(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Fig. 5's runs, one row each with its dataset's metric, Local and Ablation repeated at
    every aligned count of their dataset."""
    df = runs_frame([r for r in records if r["config"]["kind"] == "fig5"])
    aligned = {ds: sorted(df[df["dataset"] == ds]["n_aligned"].dropna().astype(int).unique())
               for ds in df["dataset"].unique()}
    df = _expand_local(df, aligned)
    return df[df["metric"] == df["dataset"].map(lambda d: DATASETS[d].metric)]


def fig5_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Fig. 5's data: per dataset, |D_A| and method, the mean over feature partitions of the
    per-partition mean over repetitions, and its std over partitions (the paper's bars)."""
    df = _fig5_runs(records)
    per_part = df.groupby(["dataset", "n_aligned", "method", "label", "metric", "n_active_features"],
                          as_index=False).agg(value=("value", "mean"), n_runs=("value", "size"))
    out = per_part.groupby(["dataset", "n_aligned", "method", "label", "metric"], as_index=False).agg(
        value=("value", "mean"), std=("value", "std"), n_partitions=("value", "size"), n_runs=("n_runs", "sum"))
    return out


def paired_difference(records: Sequence[dict[str, Any]], method: str = "apc_vfl_mse",
                      baselines: Sequence[str] = ("local", "ablation", "vfedtrans")) -> pd.DataFrame:
    """``method`` minus each baseline on the same feature partition and repetition (so the
    partition's own difficulty cancels), per dataset and |D_A|, in metric points: the mean
    difference, its standard error over the pairs, and how many pairs ``method`` wins."""
    df = _fig5_runs(records)
    wide = df.pivot_table(index=["dataset", "n_aligned", "n_active_features", "seed"], columns="method",
                          values="value")
    rows = []
    for (ds, n), g in wide.groupby(level=["dataset", "n_aligned"]):
        for b in baselines:
            if b not in g or method not in g:
                continue
            d = 100 * (g[method] - g[b]).dropna()
            rows.append({"dataset": ds, "n_aligned": n, "baseline": METHOD_LABELS[b], "pairs": len(d),
                         "mean_diff_points": d.mean(), "std_error": d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else np.nan,
                         "wins": int((d > 0).sum()), "ties": int((d == 0).sum())})
    columns = ["dataset", "n_aligned", "baseline", "pairs", "mean_diff_points", "std_error", "wins", "ties"]
    return pd.DataFrame(rows, columns=columns).round(3)


def fig6_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Fig. 6's data: communication (MB) of APC-VFL and VFedTrans per |D_A|, from the ledger
    and from the paper's formulas (Eqs. 6 and 10), averaged over partitions and repetitions."""
    df = runs_frame([r for r in records if r["config"]["kind"] == "fig5"
                     and r["config"]["method"] in ("apc_vfl_mse", "vfedtrans")])
    df = df.drop_duplicates(["dataset", "method", "n_aligned", "n_active_features", "seed"])
    out = df.groupby(["dataset", "n_aligned", "method", "label"], as_index=False).agg(
        ledger_MB=("bytes", lambda b: b.mean() / MB), formula_MB=("formula_bytes", lambda b: b.mean() / MB),
        rounds=("rounds", "mean"))
    return out


def detail_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Fig. 7 / Appendix C's data: per dataset, |D_A|, partition (active features) and method."""
    df = runs_frame([r for r in records if r["config"]["kind"] == "fig5"])
    aligned = {ds: sorted(df[(df["dataset"] == ds)]["n_aligned"].dropna().astype(int).unique())
               for ds in df["dataset"].unique()}
    df = _expand_local(df, aligned)
    df = df[df["metric"] == df["dataset"].map(lambda d: DATASETS[d].metric)]
    return df.groupby(["dataset", "n_aligned", "n_active_features", "method", "label", "metric"],
                      as_index=False).agg(value=("value", "mean"), std=("value", "std"), n_runs=("value", "size"))


def plot_fig5(frame: pd.DataFrame, *, counts: dict[str, Sequence[int]] | None = None,
              title: str = "Mean over feature partitions (bars: std over partitions)") -> plt.Figure:
    """Grouped bars per dataset: metric vs |D_A| per method, error bars = std over partitions."""
    dss = list(dict.fromkeys(frame["dataset"]))
    fig, axes = plt.subplots(1, len(dss), figsize=(6.2 * len(dss), 4.2), squeeze=False)
    order = [METHOD_LABELS[m] for m in FIG5_METHODS if METHOD_LABELS[m] in set(frame["label"])]
    for ax, ds in zip(axes[0], dss):
        d = frame[frame["dataset"] == ds]
        if counts and ds in counts:
            d = d[d["n_aligned"].isin(counts[ds])]
        xs = sorted(d["n_aligned"].unique(), reverse=True)
        width = 0.8 / len(order)
        for i, lab in enumerate(order):
            dl = d[d["label"] == lab].set_index("n_aligned").reindex(xs)
            ax.bar(np.arange(len(xs)) + (i - (len(order) - 1) / 2) * width, dl["value"], width,
                   yerr=dl["std"].fillna(0), capsize=2, label=lab)
        metric = DATASETS[ds].metric
        lo = float(np.nanmin(d["value"] - d["std"].fillna(0)))
        ax.set(xticks=np.arange(len(xs)), xticklabels=[str(x) for x in xs], xlabel="aligned samples |D_A|",
               ylabel={"accuracy": "accuracy", "f1": "F1 score", "micro_f1": "micro F1"}[metric],
               title=DATASETS[ds].title, ylim=(max(0.0, lo - 0.05), None))
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_fig6(frame: pd.DataFrame) -> plt.Figure:
    """Communication (MB, log scale) vs |D_A|: ledger (solid) and the paper's formula (dashed)."""
    dss = list(dict.fromkeys(frame["dataset"]))
    fig, axes = plt.subplots(1, len(dss), figsize=(6 * len(dss), 4), squeeze=False)
    for ax, ds in zip(axes[0], dss):
        d = frame[frame["dataset"] == ds]
        for lab, g in d.groupby("label"):
            g = g.sort_values("n_aligned")
            line, = ax.plot(g["n_aligned"], g["ledger_MB"], marker="o", label=f"{lab} (ledger)")
            ax.plot(g["n_aligned"], g["formula_MB"], ls="--", marker="x", color=line.get_color(),
                    label=f"{lab} (paper's Eq. {'10' if lab == 'VFedTrans' else '6'})")
        ax.set(xlabel="aligned samples |D_A|", ylabel="communication (MB, 10^6 bytes)", yscale="log",
               title=DATASETS[ds].title)
        ax.legend(fontsize=8)
    fig.suptitle("Communication footprint of APC-VFL vs VFedTrans")
    fig.tight_layout()
    return fig


def plot_detail(frame: pd.DataFrame, dataset: str) -> plt.Figure:
    """Fig. 7 / Appendix C: per |D_A| a panel of metric vs active features, one line per method."""
    d = frame[frame["dataset"] == dataset]
    xs = sorted(d["n_aligned"].unique(), reverse=True)
    fig, axes = plt.subplots(1, len(xs), figsize=(3.6 * len(xs), 3.6), squeeze=False, sharey=True)
    for ax, n in zip(axes[0], xs):
        sns.lineplot(data=d[d["n_aligned"] == n], x="n_active_features", y="value", hue="label",
                     hue_order=[METHOD_LABELS[m] for m in FIG5_METHODS if METHOD_LABELS[m] in set(d["label"])],
                     marker="o", ax=ax,
                     legend=ax is axes[0][-1])
        ax.set(title=f"|D_A| = {n}", xlabel="active participant's features", xticks=list(APC_VFL_N_ACTIVE),
               ylabel=DATASETS[dataset].metric)
    if axes[0][-1].get_legend():
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1, 1), title=None, fontsize=8)
    fig.suptitle(f"{DATASETS[dataset].title}: per feature partition")
    fig.tight_layout()
    return fig


def table2(records: Sequence[dict[str, Any]], *, profile: str) -> pd.DataFrame:
    """Table 2 in the reference long format: metric, rounds and MB of SplitNN and APC-VFL
    (mean ± std over repetitions) beside the paper's; our ``formula`` rows give Eqs. 6-9 for
    the same runs."""
    recs = [r for r in records if r["config"]["kind"] == "table2"]
    rows = []
    for r in recs:
        c = r["config"]
        metric = DATASETS[c["dataset"]].metric
        base = {"table": "2", "dataset": DATASETS[c["dataset"]].label,
                "method": "SplitNN" if c["method"] == "splitnn" else "APC-VFL",
                "setting": f"aligned={c['n_aligned']}", "model": "", "seed": c["seed"]}
        rows += [{**base, "metric": metric, "value": r["final"][metric]},
                 {**base, "metric": "communication_rounds", "value": r["comm"]["total"]["rounds"]},
                 {**base, "metric": "communication_MB", "value": r["comm"]["total"]["bytes"] / MB},
                 {**base, "metric": "formula_MB", "value": footprint_formula(r) / MB}]
        if c["dataset"] == "mimic3":
            for avg in ("macro", "weighted"):
                rows.append({**base, "table": "4", "metric": f"{avg}_f1_pct", "value": 100 * r["final"][f"{avg}_f1"]})
    if not rows:
        return join_reference(pd.DataFrame(columns=["table", "dataset", "method", "setting", "model", "metric",
                                                    "value", "std", "n_runs"]), PAPER, profile=profile)
    df = pd.DataFrame(rows)
    agg = df.groupby(["table", "dataset", "method", "setting", "model", "metric"], as_index=False, sort=False).agg(
        value=("value", "mean"), std=("value", "std"), n_runs=("value", "size"))
    return join_reference(agg, PAPER, profile=profile)


def table2_view(table: pd.DataFrame, digits: int = 3) -> pd.DataFrame:
    """Table 2 laid out as in the paper: per dataset (its metric in brackets) and |D_A|, SplitNN
    and APC-VFL with their score, rounds and MB, ours beside the paper's."""
    metric_of = {spec.label: spec.metric for spec in DATASETS.values()}
    t = table[table["table"] == "2"]
    is_score = t["metric"] == t["dataset"].map(metric_of)
    t = t.assign(dataset=t["dataset"] + " (" + t["dataset"].map(metric_of) + ")",
                 metric=t["metric"].where(~is_score, "score"))
    return side_by_side(t, index=["dataset", "setting", "method"], columns="metric", digits=digits)


def fig5_long(frame: pd.DataFrame, *, profile: str, number: str = "5") -> pd.DataFrame:
    """Fig. 5's frame in the reference long format (the paper prints no numbers for it)."""
    out = frame.assign(table=f"fig{number}", dataset=frame["dataset"].map(lambda d: DATASETS[d].label),
                       method=frame["label"], setting="aligned=" + frame["n_aligned"].astype(str), model="")
    return join_reference(out[["table", "dataset", "method", "setting", "model", "metric", "value", "std", "n_runs"]],
                          PAPER, profile=profile)


def beats_local(frame: pd.DataFrame) -> pd.DataFrame:
    """Per dataset and |D_A|: APC-VFL (best of MSE/MAE and each) minus Local, in metric points."""
    p = frame.pivot_table(index=["dataset", "n_aligned"], columns="method", values="value")
    out = pd.DataFrame({f"{METHOD_LABELS[m]} - Local": p[m] - p["local"]
                        for m in ("apc_vfl_mse", "apc_vfl_mae", "vfedtrans", "ablation") if m in p})
    return (100 * out).round(2).sort_index(ascending=[True, False])


def wins(gain: pd.DataFrame, method: str = "APC-VFL (MSE)") -> pd.DataFrame:
    """Per dataset, at how many aligned counts ``method`` beats Local, the Ablation and
    VFedTrans (from :func:`beats_local`'s differences to Local)."""
    col = f"{method} - Local"
    rows = []
    for ds, g in gain.groupby(level="dataset"):
        row = {"dataset": ds, "aligned_counts": len(g), "beats_Local": int((g[col] > 0).sum())}
        for other in ("Ablation", "VFedTrans"):
            if f"{other} - Local" in g:
                row[f"beats_{other}"] = int((g[col] > g[f"{other} - Local"]).sum())
        rows.append(row)
    return pd.DataFrame(rows)


def ledger_check(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per method: ledger bytes vs the paper's formula, ratio min/max over runs."""
    df = runs_frame(records).drop_duplicates(["kind", "dataset", "method", "n_aligned", "n_active_features", "seed"])
    df = df[~df["method"].isin(LOCAL_METHODS)]
    df["ratio"] = df["bytes"] / df["formula_bytes"]
    return df.groupby(["kind", "label"], as_index=False).agg(
        runs=("ratio", "size"), ledger_over_formula_min=("ratio", "min"), ledger_over_formula_max=("ratio", "max"),
        rounds_min=("rounds", "min"), rounds_max=("rounds", "max")).round(4)


__all__ = [
    "DATASETS", "FIG5_METHODS", "LOCAL_METHODS", "METHOD_LABELS", "PROFILE_SETTINGS", "OneShotRun",
    "available_datasets", "beats_local", "configs", "detail_frame", "fig5_frame", "fig5_long", "fig6_frame",
    "footprint_apc_vfl", "footprint_formula", "footprint_splitnn", "footprint_vfedtrans", "ledger_check",
    "paired_difference", "plot_detail", "plot_fig5", "plot_fig6", "recorded", "run", "runs_frame", "table2",
    "table2_view", "wins",
]
