"""The one-page demo: a 4-party SplitNN on real MNIST strips against the active party alone (the
whole pipeline on the smallest real task; not a paper's experiment)."""

from __future__ import annotations

from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..config import check_profile, check_seeds, check_seeds_once, override_runs, split_run_overrides
from ..methods import RunConfig
from ..report import load_reference
from ..training.split import history_frame
from . import register
from .base import Artefact, Study, every_run

#: Per profile: training/test subset sizes and epochs. MLP party models, plain SGD at
#: VFedMH's learning rate 0.05 and batch 128 (VFedMH Sec. VI-C).
PROFILE_SETTINGS: dict[str, dict[str, Any]] = {
    "smoke": {"n_train": 2000, "n_test": 1000, "epochs": 2, "seeds": (0,), "model": "mlp"},
    "quick": {"n_train": None, "n_test": None, "epochs": 5, "seeds": (0,), "model": "mlp"},
    "paper": {"n_train": None, "n_test": None, "epochs": 20, "seeds": (0,), "model": "mlp"},
}

METHOD_LABELS = {"local": "Local: active party's strip only", "splitnn": "SplitNN: every party's strip"}


def configs(profile: str, *, seeds: Sequence[int] | None = None,
            overrides: dict[str, Any] | None = None) -> list[RunConfig]:
    """Local and SplitNN on MNIST in 4 width strips (28x7), one run per seed. ``overrides`` replace
    profile settings or set a run field on every run (:func:`vflkit.config.split_run_overrides`)."""
    s, run_fields = split_run_overrides(PROFILE_SETTINGS[check_profile(profile)], overrides, RunConfig)
    check_seeds_once(seeds, overrides)
    seeds = check_seeds(s["seeds"] if seeds is None else seeds)
    return override_runs([
        RunConfig(paper="demo", dataset="mnist", method=method, models=(s["model"],) * 4,
                  optimizers="sgd", lr=0.05, partition="strips_width", n_parties=4,
                  batch_size=128, seed=seed, n_train=s["n_train"], n_test=s["n_test"], epochs=s["epochs"])
        for method in ("local", "splitnn") for seed in seeds
    ], run_fields)


#: Where VFedMH's Table II prints the nearest setting (MNIST, MLP, 4 width strips) of each method.
PAPER_ROWS = {"local": ("Local", "local"), "splitnn": ("PyVertical", "homogeneous")}


def summary(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Final test accuracy (%), bytes sent and rounds per run, beside VFedMH Table II's number for the
    same setting (a different training budget: context, not a target)."""
    ref = load_reference("vfedmh")
    paper = ref[(ref["table"] == "II") & (ref["dataset"] == "MNIST") & (ref["model"] == "MLP")].set_index(
        ["method", "setting"])["value"]
    rows = []
    for r in records:
        cfg = r["config"]
        # the paper's number only beside the setting it was printed for (MNIST, 4 strips, MLP)
        comparable = (cfg["dataset"] == "mnist" and cfg["n_parties"] == 4 and cfg["partition"] == "strips_width"
                      and set(cfg["models"]) == {"mlp"})
        rows.append({"method": cfg["method"], "seed": cfg["seed"],
                     "test_accuracy_pct": round(100 * r["final"]["active"]["test_accuracy"], 2),
                     "VFedMH_Table_II_pct": paper.get(PAPER_ROWS[cfg["method"]], np.nan) if comparable else np.nan,
                     "bytes_sent_MB": round(r["comm"]["total"]["bytes"] / 2**20, 2),
                     "rounds": r["comm"]["total"]["rounds"]})
    return pd.DataFrame(rows)


def comparison(table: pd.DataFrame) -> str:
    """The demo's result in one sentence, worded from :func:`summary`'s table."""
    acc = table.groupby("method")["test_accuracy_pct"].mean()
    if not {"splitnn", "local"} <= set(acc.index):
        return "SplitNN and Local are not both recorded yet."
    gap = acc["splitnn"] - acc["local"]
    return (f"SplitNN reaches {acc['splitnn']:.1f} % test accuracy and Local {acc['local']:.1f} % "
            f"(mean over seeds): the passive parties' embeddings {'add' if gap > 0 else 'cost'} "
            f"{abs(gap):.1f} points.")


def figure(records: Sequence[dict[str, Any]]) -> tuple[plt.Figure, pd.DataFrame]:
    """Test accuracy per epoch of Local and SplitNN; returns the figure and the data it plots."""
    df = history_frame(records)
    df["test_accuracy_pct"] = 100 * df["test_accuracy"]
    df["label"] = df["method"].map(METHOD_LABELS)
    cfg = records[0]["config"]
    n, shape = cfg["n_parties"], "width strips" if cfg["partition"] == "strips_width" else cfg["partition"]
    seeds = sorted({r["config"]["seed"] for r in records})
    fig, ax = plt.subplots(figsize=(6, 3.8))
    sns.lineplot(data=df, x="epoch", y="test_accuracy_pct", hue="label", marker="o", ax=ax)
    ax.set(xlabel="epoch", ylabel="test accuracy (%)", ylim=(0, 100),
           xticks=sorted(df["epoch"].unique()),
           title=f"{cfg['dataset']} in {n} {shape}, {cfg['models'][0]}: collaboration vs the active party alone\n"
                 f"({records[0]['profile']} profile, {len(seeds)} seed{'s' if len(seeds) > 1 else ''}; mean and 95 % interval over seeds)")
    ax.legend(title=None, loc="center right")
    return fig, df[["method", "seed", "epoch", "loss", "test_accuracy_pct"]]


# The pipeline's demonstration, not a paper: scheduled like the studies, no section in the report.
STUDY = register(Study(name="demo", title="Demo", family="split", configs=configs, in_report=False, order=0,
                       cites="romanini2021pyvertical",
                       artefacts=(Artefact("Fig. 1", every_run(), ("fig1.*",), lambda g, r, p: figure(r)),)))  # SplitNN as PyVertical runs it
