"""Multi-VFL (Mugunthan et al.): Figs 2-3 on MNIST and FashionMNIST.

Fig. 2: test accuracy per round with FedAvg as 1, 2, 3 and 4 of the 5 label owners become
non-IID (Table 3). Fig. 3: the 4niid scenario under the four server optimizers. The paper
prints no numbers; its claims (the reference README) are about the order and convergence of
the curves. The runs are trained by :mod:`vflkit.training.multi_owner` and recorded by
:mod:`vflkit.records` (``results/<profile>/multi_vfl/<key>.json``); this module declares the
runs per profile and draws the figures and tables from the records.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Sequence

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.ticker import MaxNLocator
import torch

from .. import records as store
from ..config import apply_overrides, check_profile, check_seeds
from ..methods.multi_vfl import MultiVFLConfig
from ..methods.server_opt import SERVER_OPTIMIZERS
from ..partition import NIID_SCENARIOS
from ..training import multi_owner
from ..training.multi_owner import update_scale  # noqa: F401  (the notebook measures it through the study)

PAPER = "multi_vfl"

#: Per profile. ``paper``: Sec. 4 as printed (500 rounds of one local epoch over each label
#: owner's 5000 samples, batch 64, SGD at 1e-3, full test set) with 3 seeds. ``quick`` and
#: ``smoke`` cap each label owner at ``local_steps`` batches per round and raise the local
#: learning rate so that their few dozen local steps move the models visibly: at the paper's
#: 1e-3 a 10-round run stays at chance, and on a 2-core CPU one batch of the label owners'
#: convolution costs a few tenths of a second, so the paper's 395 batches per round do not fit.
#: ``smoke`` only checks the pipeline (CI): it also halves the batch.
PROFILE_SETTINGS: dict[str, dict[str, Any]] = {
    "smoke": {"datasets": ("mnist",), "seeds": (0,), "rounds": 2, "local_steps": 1, "batch_size": 32,
              "local_lr": 0.05, "n_test": 100, "eval_every": 1},
    "quick": {"datasets": ("mnist", "fashion_mnist"), "seeds": (0,), "rounds": 10, "local_steps": 1,
              "local_lr": 0.05, "n_test": 400, "eval_every": 2},
    "paper": {"datasets": ("mnist", "fashion_mnist"), "seeds": (0, 1, 2), "rounds": 500, "local_steps": None,
              "local_lr": 1e-3, "n_test": None, "eval_every": 1},
}

DATASET_LABELS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}
OPTIMIZER_LABELS = {"fedavg": "FedAvg", "fedadam": "FedAdam", "fedyogi": "FedYogi", "feddemonadam": "FedDemonAdam"}
SCENARIOS: tuple[str, ...] = tuple(NIID_SCENARIOS)

#: The paper's claims (reference README), shown beside what we measure.
CLAIMS = {
    "2": "with FedAvg, accuracy falls as the number of non-IID label owners grows (1niid to 4niid); "
         "4niid does not converge in 500 rounds",
    "3": "in 4niid, FedAdam, FedYogi and FedDemonAdam converge faster and higher than FedAvg, by 2-3 points "
         "on FashionMNIST, where FedAvg does not converge",
}


def configs(profile: str, *, seeds: Sequence[int] | None = None,
            overrides: dict[str, Any] | None = None) -> list[MultiVFLConfig]:
    """The runs behind Figs 2-3: per dataset and seed, 1niid..4niid with FedAvg (Fig. 2) and
    4niid with FedAdam, FedYogi, FedDemonAdam (Fig. 3; its FedAvg run is Fig. 2's).

    ``seeds=None`` takes the profile's; ``overrides`` replace profile settings or set any
    :class:`MultiVFLConfig` field on every run (e.g. a tiny slice of ``paper``); an unknown
    key is an error that lists the valid ones.
    """
    # the study sets dataset, scenario, optimizer and seed per run; the other fields may be overridden
    fields = [f.name for f in dataclasses.fields(MultiVFLConfig)
              if f.name not in ("dataset", "scenario", "server_optimizer", "seed")]
    s, run_fields = apply_overrides(PROFILE_SETTINGS[check_profile(profile)], overrides, run_fields=fields)
    datasets = s.pop("datasets")
    profile_seeds = s.pop("seeds")
    seeds = check_seeds(profile_seeds if seeds is None else seeds)
    s.update(run_fields)
    s.setdefault("variant", "paper")
    out = []
    for dataset in datasets:
        for seed in seeds:
            for scenario in SCENARIOS:
                out.append(MultiVFLConfig(**{**s, "dataset": dataset, "scenario": scenario,
                                             "server_optimizer": "fedavg", "seed": seed}))
            for opt in SERVER_OPTIMIZERS[1:]:
                out.append(MultiVFLConfig(**{**s, "dataset": dataset, "scenario": "4niid",
                                             "server_optimizer": opt, "seed": seed}))
    return out


def run(profile: str, *, device: str | torch.device = "auto", seeds: Sequence[int] | None = None,
        overrides: dict[str, Any] | None = None, results: Path | None = None,
        progress: bool = True, recompute_before: str | None = None) -> list[dict[str, Any]]:
    """Train (or load) every run of :func:`configs` and return their records."""
    return multi_owner.run_many(configs(profile, seeds=seeds, overrides=overrides), profile=profile,
                                device=device, results=results, progress=progress, recompute_before=recompute_before)


def recorded(profile: str = "quick") -> list[dict[str, Any]]:
    """The records an earlier run of ``profile`` committed for :func:`configs` (nothing is
    trained): what the notebook shows as that profile's results beside its own run."""
    return store.load_recorded(configs(profile), profile=profile)


# ------------------------------------------------------------------------------- reading


def history_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per-round test accuracy (%) of every run, with dataset, scenario, optimizer and seed."""
    frames = []
    for r in records:
        cfg = r["config"]
        df = pd.DataFrame(r["history"])
        df = df[df["test_accuracy"].notna()] if "test_accuracy" in df else df.iloc[0:0]
        frames.append(df.assign(dataset=DATASET_LABELS[cfg["dataset"]], scenario=cfg["scenario"],
                                optimizer=OPTIMIZER_LABELS[cfg["server_optimizer"]], seed=cfg["seed"],
                                test_accuracy_pct=100 * df["test_accuracy"]))
    cols = ["dataset", "scenario", "optimizer", "seed", "round", "train_loss", "test_accuracy_pct"]
    return pd.concat(frames, ignore_index=True)[cols]


def _rounds_to(df: pd.DataFrame, fraction: float = 0.9) -> int:
    """First evaluated round whose accuracy reaches ``fraction`` of the run's best."""
    target = fraction * df["test_accuracy_pct"].max()
    return int(df.loc[df["test_accuracy_pct"] >= target, "round"].min())


def summary(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per dataset, scenario and optimizer (mean over seeds): final and best test accuracy (%)
    and the first round at which a run reaches 90 % of its best accuracy."""
    h = history_frame(records)
    per_run = h.groupby(["dataset", "scenario", "optimizer", "seed"], sort=False).apply(
        lambda g: pd.Series({"final_accuracy_pct": g.sort_values("round")["test_accuracy_pct"].iloc[-1],
                             "best_accuracy_pct": g["test_accuracy_pct"].max(),
                             "round_to_90pct_of_best": _rounds_to(g)}), include_groups=False)
    out = per_run.groupby(["dataset", "scenario", "optimizer"], sort=False).agg(
        final_accuracy_pct=("final_accuracy_pct", "mean"), best_accuracy_pct=("best_accuracy_pct", "mean"),
        round_to_90pct_of_best=("round_to_90pct_of_best", "mean"),
        n_runs=("final_accuracy_pct", "size"))
    return out.round(2).reset_index()


def long_table(summ: pd.DataFrame, profile: str) -> pd.DataFrame:
    """:func:`summary` in the long format of ``report.write_table`` (no paper values: Multi-VFL
    prints none)."""
    from ..report import join_reference

    rows = []
    for _, r in summ.iterrows():
        fig = "2" if r["optimizer"] == "FedAvg" else "3"
        for metric in ("final_accuracy_pct", "best_accuracy_pct", "round_to_90pct_of_best"):
            rows.append({"table": f"Fig. {fig}", "dataset": r["dataset"], "method": r["optimizer"],
                         "setting": r["scenario"], "model": "", "metric": metric, "value": r[metric],
                         "std": float("nan"), "n_runs": r["n_runs"]})
    return join_reference(pd.DataFrame(rows), PAPER, profile=profile)


def bytes_per_round(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Training traffic of one round by message kind (MB; mean over rounds), per dataset."""
    rows = []
    for r in records:
        df = pd.DataFrame(r["comm"]["per_round_kind"])
        for kind, b in df.groupby("kind")["bytes"].mean().items():
            rows.append({"dataset": DATASET_LABELS[r["config"]["dataset"]], "kind": kind,
                         "local_steps_per_owner": r["config"]["local_steps"] or "1 epoch",
                         "MB_per_round": b / 2**20})
    out = pd.DataFrame(rows).groupby(["dataset", "local_steps_per_owner", "kind"], sort=False).mean()
    return out.round(3).reset_index()


def long_traffic(traffic: pd.DataFrame, profile: str) -> pd.DataFrame:
    """:func:`bytes_per_round` in the long format of ``report.write_table``."""
    from ..report import join_reference

    rows = [{"table": "traffic", "dataset": r["dataset"], "method": "all runs", "setting": r["kind"],
             "model": f"{r['local_steps_per_owner']} batches per label owner and round",
             "metric": "MB_per_round", "value": r["MB_per_round"], "std": float("nan"), "n_runs": 1}
            for _, r in traffic.iterrows()]
    return join_reference(pd.DataFrame(rows), PAPER, profile=profile)


def claims(summ: pd.DataFrame) -> pd.DataFrame:
    """Each figure's claim beside what our summary shows (checked on final accuracy)."""
    rows = []
    for dataset, g in summ.groupby("dataset", sort=False):
        fedavg = g[g["optimizer"] == "FedAvg"].set_index("scenario")["final_accuracy_pct"].reindex(SCENARIOS)
        falling = bool((fedavg.diff().dropna() <= 0).all())
        rows.append({"figure": "Fig. 2", "dataset": dataset, "paper": CLAIMS["2"],
                     "ours": ("falls monotonically" if falling else "does not fall monotonically")
                     + ": " + ", ".join(f"{s} {v:.1f}" for s, v in fedavg.items())})
        niid = g[g["scenario"] == "4niid"].set_index("optimizer")["final_accuracy_pct"]
        base = niid.get("FedAvg", float("nan"))
        diffs = ", ".join(f"{o} {v - base:+.1f}" for o, v in niid.items() if o != "FedAvg")
        rows.append({"figure": "Fig. 3", "dataset": dataset, "paper": CLAIMS["3"],
                     "ours": f"FedAvg {base:.1f}; adaptive minus FedAvg: {diffs}"})
    return pd.DataFrame(rows)


def _panels(df: pd.DataFrame, hue: str, order: Sequence[str], title: str, legend_title: str) -> plt.Figure:
    datasets = list(dict.fromkeys(df["dataset"]))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.2 * len(datasets), 3.8), squeeze=False, sharey=True)
    for ax, name in zip(axes[0], datasets):
        sub = df[df["dataset"] == name]
        present = [o for o in order if o in set(sub[hue])]
        # Marker and dash per curve as well as colour: curves that coincide stay visible.
        sns.lineplot(data=sub, x="round", y="test_accuracy_pct", hue=hue, hue_order=present,
                     style=hue, style_order=present, markers=True, errorbar="sd", ax=ax)
        ax.set(title=name, xlabel="global round", ylabel="test accuracy (%)", ylim=(0, 100))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(title=legend_title, loc="upper center", ncol=2)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def figure2(records: Sequence[dict[str, Any]]) -> tuple[plt.Figure, pd.DataFrame]:
    """Fig. 2: FedAvg, 1niid..4niid, one panel per dataset (mean and sd over seeds)."""
    df = history_frame(records)
    df = df[df["optimizer"] == "FedAvg"]
    fig = _panels(df, "scenario", SCENARIOS, "Fig. 2: FedAvg as more label owners see only two labels",
                  "non-IID label owners")
    return fig, df


def figure3(records: Sequence[dict[str, Any]]) -> tuple[plt.Figure, pd.DataFrame]:
    """Fig. 3: 4niid under the four server optimizers, one panel per dataset."""
    df = history_frame(records)
    df = df[df["scenario"] == "4niid"]
    fig = _panels(df, "optimizer", list(OPTIMIZER_LABELS.values()),
                  "Fig. 3: 4niid (4 of 5 label owners non-IID) by server optimizer", "server optimizer")
    return fig, df
