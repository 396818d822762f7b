"""Multi-VFL (Mugunthan et al.): Figs 2-3 on MNIST and FashionMNIST.

Fig. 2: test accuracy per round with FedAvg as 1, 2, 3 and 4 of the 5 label owners become
non-IID (Table 3). Fig. 3: the 4niid scenario under the four server optimizers. The paper
prints no numbers; its claims (the reference README) are about the order and convergence of
the curves. One record per run is written to ``results/<profile>/multi_vfl/<key>.json``.
"""

from __future__ import annotations

import functools
import json
import math
import resource
import time
from pathlib import Path
from typing import Any, Sequence

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.ticker import MaxNLocator
import torch
from tqdm.auto import tqdm

from ..comm import Channel
from ..config import resolve_device, results_dir
from ..experiment import _write_json_atomic, check_profile, environment_info, load_recorded
from ..methods.multi_vfl import MultiVFL, MultiVFLConfig
from ..methods.server_opt import SERVER_OPTIMIZERS
from ..partition import NIID_SCENARIOS

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


def configs(profile: str, *, seeds: Sequence[int] | None = None, variant: str = "paper",
            **overrides: Any) -> list[MultiVFLConfig]:
    """The runs behind Figs 2-3: per dataset and seed, 1niid..4niid with FedAvg (Fig. 2) and
    4niid with FedAdam, FedYogi, FedDemonAdam (Fig. 3; its FedAvg run is Fig. 2's).

    ``seeds=None`` takes the profile's; ``overrides`` change any :class:`MultiVFLConfig` field
    (tests shrink the paper profile with them).
    """
    s = dict(PROFILE_SETTINGS[check_profile(profile)])
    datasets = s.pop("datasets")
    profile_seeds = s.pop("seeds")
    seeds = tuple(profile_seeds if seeds is None else seeds)
    s.update(overrides)
    out = []
    for dataset in datasets:
        for seed in seeds:
            for scenario in SCENARIOS:
                out.append(MultiVFLConfig(dataset=dataset, scenario=scenario, server_optimizer="fedavg",
                                          variant=variant, seed=seed, **s))
            for opt in SERVER_OPTIMIZERS[1:]:
                out.append(MultiVFLConfig(dataset=dataset, scenario="4niid", server_optimizer=opt,
                                          variant=variant, seed=seed, **s))
    return out


def record_path(config: MultiVFLConfig, profile: str, root: Path | None = None) -> Path:
    """``<results>/<profile>/multi_vfl/<key>.json``."""
    return (root or results_dir()) / check_profile(profile) / PAPER / f"{config.key}.json"


def recorded(profile: str = "quick") -> list[dict[str, Any]]:
    """The records an earlier run of ``profile`` committed for :func:`configs` (nothing is
    trained): what the notebook shows as that profile's results beside its own run."""
    return load_recorded(configs(profile), profile=profile, path=record_path)


@functools.lru_cache(maxsize=2)
def _dataset(name: str) -> Any:
    from ..data import load_dataset

    return load_dataset(name)


def run(config: MultiVFLConfig, *, profile: str, device: str | torch.device = "auto",
        results: Path | None = None, force: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run ``config`` (or load its finished record) and return the record.

    The record holds the config, per-round training loss and test accuracy, the final and best
    accuracy, bytes per round and per message kind, wall time, device and library versions.
    """
    path = record_path(config, profile, results)
    if path.exists() and not force:
        with open(path) as f:
            return json.load(f)
    dev = resolve_device(device)
    data = _dataset(config.dataset).subset(n_test=config.n_test, seed=config.seed)
    channel = Channel()
    method = MultiVFL(config, data, device=dev, channel=channel)
    start = time.perf_counter()
    method.setup()
    history: list[dict[str, Any]] = []
    bar = tqdm(range(1, config.rounds + 1), desc=f"{config.dataset} {config.scenario} {config.server_optimizer}",
               disable=not progress, leave=False)
    for r in bar:
        losses = method.round(r)
        row: dict[str, Any] = {"round": r, "train_loss": sum(losses.values()) / len(losses)}
        if r % config.eval_every == 0 or r == config.rounds:
            row.update(method.evaluate())
            bar.set_postfix(acc=round(row["test_accuracy"], 3))
        row["elapsed_s"] = time.perf_counter() - start
        history.append(row)
    wall = time.perf_counter() - start
    ledger = channel.ledger
    train = ledger.frame()
    per_round_kind = (train.groupby(["epoch", "kind"])["nbytes"].sum().rename("bytes").reset_index()
                      .rename(columns={"epoch": "round"}))
    evaluated = [h for h in history if "test_accuracy" in h]
    best = max(evaluated, key=lambda h: h["test_accuracy"])
    record = {
        "key": config.key,
        "profile": profile,
        "config": config.to_dict(),
        "seed": config.seed,
        "history": history,
        "final": {k: evaluated[-1][k] for k in ("test_accuracy", "test_loss")},
        "best": {"test_accuracy": best["test_accuracy"], "round": best["round"]},
        "wall_time_s": wall,
        "peak_memory_mb": (torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda"
                           else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "comm": {"total": ledger.totals(),
                 "per_round": ledger.per_epoch().reset_index().rename(columns={"epoch": "round"})
                 .to_dict(orient="records"),
                 "per_round_kind": per_round_kind.to_dict(orient="records"),
                 "per_kind": ledger.per_kind().reset_index().to_dict(orient="records"),
                 "per_party": ledger.per_party().reset_index().to_dict(orient="records"),
                 "eval_total": ledger.totals(phase="eval"), "setup_total": ledger.totals(phase="setup")},
        "environment": environment_info(dev),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    record = json.loads(json.dumps(record, default=lambda o: o.item()))
    _write_json_atomic(path, record)
    return record


def run_many(configs: Sequence[MultiVFLConfig], *, profile: str, device: str | torch.device = "auto",
             results: Path | None = None, progress: bool = True) -> list[dict[str, Any]]:
    """Run every config in order, skipping those with a record; returns all records."""
    done = sum(record_path(c, profile, results).exists() for c in configs)
    return [run(c, profile=profile, device=device, results=results, progress=progress)
            for c in tqdm(configs, desc=f"Multi-VFL runs ({done} of {len(configs)} already recorded)",
                          disable=not progress)]


# ------------------------------------------------------------------------------- reading


def update_scale(config: MultiVFLConfig, *, device: str | torch.device = "auto") -> dict[str, Any]:
    """The size of round 1's aggregated update t under ``config``'s local training, beside the
    server optimizers' stability constant tau.

    Runs round 1 with FedAvg (``W <- W + t``), so t is the change of the global label-owner
    model. Returns the median and 99th percentile of |t| over its parameters and the median of
    sqrt(v) after that round in the paper's ServerAggregation (``m = (1 - beta1) t``,
    ``v = (1 - beta2) m^2``). Where sqrt(v) is far below tau, FedAdam and FedYogi divide by
    tau, not by sqrt(v): they act as FedAvg with server momentum and a step of ``lr / tau``.
    """
    cfg = config.replace(server_optimizer="fedavg", rounds=1)
    method = MultiVFL(cfg, _dataset(cfg.dataset).subset(n_test=cfg.n_test, seed=cfg.seed),
                      device=resolve_device(device))
    method.setup()
    model = method.server.models["global"]
    before = torch.cat([w.detach().flatten() for w in model.state_dict().values()]).clone()
    method.round(1)
    t = (torch.cat([w.detach().flatten() for w in model.state_dict().values()]) - before).abs()
    sqrt_v = math.sqrt(1 - cfg.beta2) * (1 - cfg.beta1) * t
    steps = cfg.local_steps or math.ceil(cfg.samples_per_owner / cfg.batch_size) * cfg.local_epochs
    return {"local steps per owner": steps, "local lr": cfg.local_lr,
            "median |t|": float(t.median()), "99th percentile |t|": float(t.quantile(0.99)),
            "median sqrt(v)": float(sqrt_v.median()), "tau": cfg.tau}


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
