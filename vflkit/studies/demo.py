"""The one-page demo: a 4-party SplitNN on real MNIST strips against the active party alone.

Not a paper's experiment: it shows the whole pipeline (data, partition, parties, channel,
runner, records, figure) on the smallest real task, until the paper notebooks take over.
"""

from __future__ import annotations

from typing import Any, Sequence

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from ..experiment import RunConfig, check_profile, history_frame
from ..report import load_reference

#: Per profile: training/test subset sizes and epochs. MLP party models, plain SGD at
#: VFedMH's learning rate 0.05 and batch 128 (VFedMH Sec. VI-C).
PROFILE_SETTINGS: dict[str, dict[str, Any]] = {
    "smoke": {"n_train": 2000, "n_test": 1000, "epochs": 2},
    "quick": {"n_train": None, "n_test": None, "epochs": 5},
    "paper": {"n_train": None, "n_test": None, "epochs": 20},
}


METHOD_LABELS = {
    "local": "Local: active party's strip only",
    "splitnn": "SplitNN: all four strips",
}


def configs(profile: str, *, seeds: Sequence[int] = (0,), model: str = "mlp") -> list[RunConfig]:
    """Local and SplitNN on MNIST split into 4 width strips (28x7), one run per seed."""
    s = PROFILE_SETTINGS[check_profile(profile)]
    return [
        RunConfig(paper="demo", dataset="mnist", method=method, models=(model,) * 4,
                  optimizers="sgd", lr=0.05, partition="strips_width", n_parties=4,
                  batch_size=128, seed=seed, **s)
        for method in ("local", "splitnn") for seed in seeds
    ]


#: Where VFedMH's Table II prints the nearest setting (MNIST, MLP, 4 width strips) of each method.
PAPER_ROWS = {"local": ("Local", "local"), "splitnn": ("PyVertical", "homogeneous")}


def summary(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Final test accuracy (%), bytes sent and rounds per run, beside VFedMH Table II's
    number for the same method, dataset and model (a different training budget: context,
    not a target)."""
    ref = load_reference("vfedmh")
    ref = ref[(ref["table"] == "II") & (ref["dataset"] == "MNIST") & (ref["model"] == "MLP")]
    rows = []
    for r in records:
        method = r["config"]["method"]
        name, setting = PAPER_ROWS[method]
        paper = ref[(ref["method"] == name) & (ref["setting"] == setting)]["value"]
        rows.append({
            "method": method,
            "seed": r["config"]["seed"],
            "test_accuracy_pct": round(100 * r["final"]["active"]["test_accuracy"], 2),
            "VFedMH_Table_II_pct": paper.item() if len(paper) else float("nan"),
            "bytes_sent_MB": round(r["comm"]["total"]["bytes"] / 2**20, 2),
            "rounds": r["comm"]["total"]["rounds"],
        })
    return pd.DataFrame(rows)


def figure(records: Sequence[dict[str, Any]]) -> tuple[plt.Figure, pd.DataFrame]:
    """Test accuracy per epoch of Local and SplitNN; returns the figure and the data it plots."""
    df = history_frame(records)
    df["test_accuracy_pct"] = 100 * df["test_accuracy"]
    df["label"] = df["method"].map(METHOD_LABELS)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    sns.lineplot(data=df, x="epoch", y="test_accuracy_pct", hue="label", marker="o", ax=ax)
    ax.set(xlabel="epoch", ylabel="test accuracy (%)", ylim=(0, 100),
           xticks=sorted(df["epoch"].unique()),
           title="MNIST in four 28x7 strips: collaboration vs the active party alone")
    ax.legend(title=None, loc="center right")
    return fig, df[["method", "seed", "epoch", "loss", "test_accuracy_pct"]]
