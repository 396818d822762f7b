"""Multi-VFL (Mugunthan et al.): Figs 2-3 on MNIST and FashionMNIST (docs/studies.md). The paper prints
no numbers; its claims are about the order and convergence of the curves. Trained by
:mod:`vflkit.training.multi_owner`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import MaxNLocator

from .. import claims
from ..config import apply_overrides, check_profile, check_seeds, check_seeds_once
from ..methods import server_opt
from ..methods.multi_vfl import MultiVFLConfig
from ..methods.server_opt import SERVER_OPTIMIZERS
from ..partition import NIID_SCENARIOS
from ..report import join_reference
from ..training.multi_owner import round_seconds  # noqa: F401 -- the notebook measures ROUND_CPU_SECONDS with it
from . import base, register
from .base import Artefact, Study

PAPER = "multi_vfl"

#: R of Sec. 4 ("all the experiments are run for 500 epochs", one local epoch per round).
PAPER_ROUNDS = 500

#: The quick profile's reduction: the fewest CPU seconds at which FedAvg leaves chance (at plain
#: SGD, lr 1e-3, it needs about 400 local steps per label owner on 1niid MNIST). 256 samples per
#: owner (one local epoch of 4 batches of 64, as Algorithm 1) for ``QUICK_ROUNDS`` rounds: the budget
#: goes to rounds, over which the server optimizers' behaviour unfolds. The 500-round clauses stay
#: with the paper profile.
QUICK_ROUNDS = 100

#: CPU seconds per round of one run (training and one evaluation, one torch thread), as
#: :func:`~vflkit.training.multi_owner.round_seconds` reports them (rerun it to recalibrate):
#: ``paper`` 5 x 79 batches and 10,000 test images; ``quick`` 5 x 4 batches and 500 (it evaluates
#: every fifth round: ~10 % high).
ROUND_CPU_SECONDS: dict[str, float] = {"paper": 127.4, "quick": 2.0}

#: Per profile; every other field is the paper's (``MultiVFLConfig``'s defaults, Sec. 4 and Table 2).
#: ``paper``: 500 rounds, 5000 samples per label owner, the full test set, 3 seeds. ``quick``: the
#: start of the paper's curves (above; the 500-round claims are not testable there). ``smoke``: CI.
PROFILE_SETTINGS: dict[str, dict[str, Any]] = {
    "smoke": {"datasets": ("mnist",), "seeds": (0,), "rounds": 2, "samples_per_owner": 32, "batch_size": 32,
              "n_test": 100, "eval_every": 1},
    "quick": {"datasets": ("mnist", "fashion_mnist"), "seeds": (0, 1, 2), "rounds": QUICK_ROUNDS,
              "samples_per_owner": 256, "batch_size": 64, "n_test": 500, "eval_every": 5},
    "paper": {"datasets": ("mnist", "fashion_mnist"), "seeds": (0, 1, 2), "rounds": PAPER_ROUNDS,
              "samples_per_owner": 5000, "batch_size": 64, "n_test": None, "eval_every": 1},
}

DATASET_LABELS = {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}
#: Test accuracy (%) at chance on the 10 classes of MNIST and FashionMNIST.
CHANCE_PCT = 10.0
OPTIMIZER_LABELS = {"fedavg": "FedAvg", "fedadam": "FedAdam", "fedyogi": "FedYogi", "feddemonadam": "FedDemonAdam"}
ADAPTIVE: tuple[str, ...] = ("FedAdam", "FedYogi", "FedDemonAdam")
SCENARIOS: tuple[str, ...] = tuple(NIID_SCENARIOS)


def configs(profile: str, *, seeds: Sequence[int] | None = None,
            overrides: dict[str, Any] | None = None) -> list[MultiVFLConfig]:
    """Per dataset and seed, 1niid..4niid with FedAvg (Fig. 2) and 4niid with the adaptive server
    optimizers (Fig. 3). ``overrides`` replace profile settings or set any :class:`MultiVFLConfig`
    field on every run."""
    # the study sets dataset, scenario, optimizer and seed per run; the other fields may be overridden
    fields = [f.name for f in dataclasses.fields(MultiVFLConfig)
              if f.name not in ("dataset", "scenario", "server_optimizer", "seed")]
    s, run_fields = apply_overrides(PROFILE_SETTINGS[check_profile(profile)], overrides, run_fields=fields)
    check_seeds_once(seeds, overrides)
    seeds = check_seeds(s["seeds"] if seeds is None else seeds)
    common = {"variant": "paper", **{k: v for k, v in s.items() if k not in ("datasets", "seeds")}, **run_fields}
    cells = [(scenario, "fedavg") for scenario in SCENARIOS] + [("4niid", opt) for opt in SERVER_OPTIMIZERS[1:]]
    return [MultiVFLConfig(**common, dataset=dataset, scenario=scenario, server_optimizer=opt, seed=seed)
            for dataset in s["datasets"] for seed in seeds for scenario, opt in cells]


def needs_gpu(config: MultiVFLConfig) -> bool:
    """The paper's 500 rounds (hours of one core, :data:`ROUND_CPU_SECONDS`) are a GPU's work."""
    return config.rounds >= PAPER_ROUNDS


# ------------------------------------------------------------------------------- reading


def _labels(cfg: dict[str, Any]) -> dict[str, Any]:
    """A recorded run's dataset, scenario, optimizer (as the paper names them) and seed."""
    return {"dataset": DATASET_LABELS[cfg["dataset"]], "scenario": cfg["scenario"],
            "optimizer": OPTIMIZER_LABELS[cfg["server_optimizer"]], "seed": cfg["seed"]}


def history_frame(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per-round test accuracy (%) of every run, with dataset, scenario, optimizer and seed."""
    cols = ["dataset", "scenario", "optimizer", "seed", "round", "train_loss", "test_accuracy_pct"]
    frames = [pd.DataFrame(r["history"]).dropna(subset=["test_accuracy"]).assign(**_labels(r["config"]))
              for r in records]
    h = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*cols, "test_accuracy"])
    return h.assign(test_accuracy_pct=100 * h["test_accuracy"])[cols]


#: The share of a run's rounds over which :func:`converged` judges the end of its curve.
CONVERGENCE_WINDOW = 0.1


def converged(run: pd.DataFrame, *, window: float = CONVERGENCE_WINDOW, tolerance_pct: float = 1.0) -> bool:
    """Whether a run's accuracy curve has flattened. The paper says "fails to converge" of curves it
    only plots; our reading: over the last ``window`` of the rounds the accuracy neither rises by more
    than ``tolerance_pct`` points against the window before nor swings with a std above it."""
    acc = run.sort_values("round")["test_accuracy_pct"].to_numpy()
    n = max(2, int(round(window * len(acc))))
    if len(acc) < 2 * n:
        raise ValueError(f"{len(acc)} evaluated rounds are too few to judge convergence over windows of {n}")
    last, before = acc[-n:], acc[-2 * n:-n]
    return bool(last.mean() - before.mean() <= tolerance_pct and last.std(ddof=1) <= tolerance_pct)


def per_run(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per run: final, best and mean test accuracy (%; the mean is the area under the curve,
    our measure of speed), the first round at 90 % of its best, its rounds and whether it diverged."""
    keys = ["dataset", "scenario", "optimizer", "seed"]
    h = history_frame(records)
    if h.empty:
        return pd.DataFrame(columns=[*keys, "rounds", "final_accuracy_pct", "best_accuracy_pct", "mean_accuracy_pct",
                                     "round_to_90pct_of_best", "diverged"])
    acc = h.groupby(keys, sort=False)["test_accuracy_pct"]
    last = h.loc[h.groupby(keys, sort=False)["round"].idxmax()].set_index(keys)
    reached = h["round"].where(h["test_accuracy_pct"] >= 0.9 * acc.transform("max"))
    out = pd.DataFrame({"rounds": last["round"], "final_accuracy_pct": last["test_accuracy_pct"],
                        "best_accuracy_pct": acc.max(), "mean_accuracy_pct": acc.mean(),
                        "round_to_90pct_of_best": reached.groupby([h[k] for k in keys], sort=False).min()})
    # a diverged run's record stops at that round: summary keeps it out of the means
    diverged = {tuple(_labels(r["config"]).values()): bool(r.get("diverged")) for r in records}
    out = out.astype(float).reset_index()
    return out.assign(diverged=[diverged.get(k, False) for k in out[keys].itertuples(index=False)])


def learning(summary_table: pd.DataFrame) -> str:
    """Whether this profile's models learn (:func:`summary` worded): the range of final accuracy and
    how many cells end within ``claims.CHANCE_MARGIN`` points of chance (they decide no claim)."""
    if summary_table.empty:
        return "No run recorded yet."
    acc = summary_table["final_accuracy_pct"]
    near = int((acc <= CHANCE_PCT + claims.CHANCE_MARGIN).sum())
    verdict = ("every one ends near chance: these runs show that the pipeline, the server optimizers "
               "and the ledger work, and decide no claim" if near == len(acc) else
               "none ends near chance" if near == 0 else
               f"{near} end near chance and decide no claim")
    return (f"Final test accuracy {acc.min():.1f}–{acc.max():.1f} % over {len(acc)} cells (dataset, "
            f"scenario, optimizer; chance {CHANCE_PCT:g} %, near chance within {claims.CHANCE_MARGIN:g} "
            f"points): {verdict}.")


def summary(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per dataset, scenario and optimizer: :func:`per_run`'s columns, mean and std over seeds."""
    runs = per_run(records)
    # a diverged run's accuracy is its broken model's: counted in ``diverged``, never averaged in
    metrics = ["final_accuracy_pct", "best_accuracy_pct", "mean_accuracy_pct", "round_to_90pct_of_best"]
    runs[metrics] = runs[metrics].astype(float).where(~runs["diverged"].astype(bool))
    runs["n_runs"] = (~runs["diverged"].astype(bool)).astype(int)
    out = runs.groupby(["dataset", "scenario", "optimizer"], sort=False).agg(
        final_accuracy_pct=("final_accuracy_pct", "mean"), final_accuracy_sd=("final_accuracy_pct", "std"),
        best_accuracy_pct=("best_accuracy_pct", "mean"),
        mean_accuracy_pct=("mean_accuracy_pct", "mean"), mean_accuracy_sd=("mean_accuracy_pct", "std"),
        round_to_90pct_of_best=("round_to_90pct_of_best", "mean"),
        n_runs=("n_runs", "sum"), diverged=("diverged", "sum"))
    return out.round(2).reset_index()


def long_table(summ: pd.DataFrame, profile: str) -> pd.DataFrame:
    """:func:`summary` in the long format (Multi-VFL prints no values), ``std`` over seeds where known."""
    sds = {"final_accuracy_pct": "final_accuracy_sd", "mean_accuracy_pct": "mean_accuracy_sd"}
    long = pd.concat([summ.assign(metric=m, value=summ[m], std=summ[sds[m]] if m in sds else float("nan"))
                      for m in ("final_accuracy_pct", "best_accuracy_pct", "mean_accuracy_pct",
                                "round_to_90pct_of_best")]).sort_index(kind="stable")  # row by row
    long = long.assign(table=np.where(long["optimizer"] == "FedAvg", "Fig. 2", "Fig. 3"), method=long["optimizer"],
                       setting=long["scenario"], model="")
    return join_reference(long, PAPER, profile=profile)


def bytes_per_round(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Training traffic of one round by message kind (MB; mean over rounds), per dataset."""
    rows = [{"dataset": DATASET_LABELS[r["config"]["dataset"]], "kind": kind,
             "local_steps_per_owner": _local_steps(r["config"]), "MB_per_round": b / 2**20}
            for r in records
            for kind, b in pd.DataFrame(r["comm"]["per_round_kind"]).groupby("kind")["bytes"].mean().items()]
    out = pd.DataFrame(rows).groupby(["dataset", "local_steps_per_owner", "kind"], sort=False).mean()
    return out.round(3).reset_index()


def _local_steps(cfg: dict[str, Any]) -> int:
    """Batches per label owner and round of a recorded config."""
    full = math.ceil(cfg["samples_per_owner"] / cfg["batch_size"]) * cfg["local_epochs"]
    return full if cfg["local_steps"] is None else min(full, cfg["local_steps"])


def long_traffic(traffic: pd.DataFrame, profile: str) -> pd.DataFrame:
    """:func:`bytes_per_round` in the long format of ``report.write_table``."""
    rows = [{"table": "traffic", "dataset": r["dataset"], "method": "all runs", "setting": r["kind"],
             "model": f"{r['local_steps_per_owner']} batches per label owner and round",
             "metric": "MB_per_round", "value": r["MB_per_round"], "std": float("nan"), "n_runs": 1}
            for _, r in traffic.iterrows()]
    return join_reference(pd.DataFrame(rows), PAPER, profile=profile)


# ------------------------------------------------------------ what the server optimizers do


def server_steps(records: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per run and round, the recorded server steps: ||t|| (the mean update), ||W^{r+1} - W^r||, their
    ratio (1 for FedAvg), ||W^{r+1} - W^0|| and the adaptive rules' median sqrt(v) / tau."""
    rows = [{**_labels(r["config"]), "round": h["round"], "update_norm": h["update_norm"],
             "server_step_norm": h["server_step_norm"], "step_ratio": h["server_step_norm"] / h["update_norm"],
             "distance_from_init": h["distance_from_init"],
             "median_sqrt_v_over_tau": h["median_sqrt_v"] / r["config"]["tau"],
             "p99_sqrt_v_over_tau": h["p99_sqrt_v"] / r["config"]["tau"]}
            for r in records for h in r["history"] if "server_step_norm" in h]
    return pd.DataFrame(rows, columns=["dataset", "scenario", "optimizer", "seed", "round", "update_norm",
                                       "server_step_norm", "step_ratio", "distance_from_init",
                                       "median_sqrt_v_over_tau", "p99_sqrt_v_over_tau"])


def constant_update_steps(config: MultiVFLConfig, *, t: float = 1e-9) -> pd.DataFrame:
    """Per round, each rule's server step over the update when every update is the same tiny ``t``
    (sqrt(v) << tau, the regime :func:`server_steps` measures), by
    :func:`vflkit.methods.server_opt.constant_update_steps`."""
    steps = {name: server_opt.constant_update_steps(config.replace(server_optimizer=name).server(), config.rounds, t=t)
             for name in SERVER_OPTIMIZERS}
    return pd.DataFrame([{"optimizer": OPTIMIZER_LABELS[name], "round": r, "step_ratio": x}
                         for name, ratios in steps.items() for r, x in enumerate(ratios, 1)])


def displacement(records: Sequence[dict[str, Any]], *, scenario: str = "4niid") -> pd.DataFrame:
    """How far each server optimizer moved the model in Fig. 3's runs, beside its accuracy: per
    dataset and optimizer (mean, std over seeds) the summed steps over the summed updates
    (``path_ratio``, with :func:`constant_update_steps`' prediction), the final distance from the
    initial model over FedAvg's, the largest median sqrt(v)/tau and the accuracy minus FedAvg's."""
    steps = server_steps(records)
    steps = steps[steps["scenario"] == scenario]
    runs = per_run(records)
    runs = runs[runs["scenario"] == scenario].set_index(["dataset", "optimizer", "seed"])
    per = steps.groupby(["dataset", "optimizer", "seed"], sort=False).agg(
        step_sum=("server_step_norm", "sum"), update_sum=("update_norm", "sum"),
        final_distance=("distance_from_init", "last"), max_median_sqrt_v_over_tau=("median_sqrt_v_over_tau", "max"))
    per["path_ratio"] = per["step_sum"] / per["update_sum"]
    # FedAvg's run of the same dataset and seed, row by row (NaN where it is not recorded)
    idx = pd.MultiIndex.from_arrays([per.index.get_level_values("dataset"), ["FedAvg"] * len(per),
                                     per.index.get_level_values("seed")], names=per.index.names)
    per["distance_vs_fedavg"] = per["final_distance"].to_numpy() / per["final_distance"].reindex(idx).to_numpy()
    per["accuracy_minus_fedavg"] = (runs["final_accuracy_pct"].reindex(per.index).to_numpy()
                                    - runs["final_accuracy_pct"].reindex(idx).to_numpy())
    out = per.groupby(["dataset", "optimizer"], sort=False).agg(
        path_ratio=("path_ratio", "mean"), path_ratio_sd=("path_ratio", "std"),
        distance_vs_fedavg=("distance_vs_fedavg", "mean"), distance_vs_fedavg_sd=("distance_vs_fedavg", "std"),
        max_median_sqrt_v_over_tau=("max_median_sqrt_v_over_tau", "max"),
        accuracy_minus_fedavg=("accuracy_minus_fedavg", "mean"),
        accuracy_minus_fedavg_sd=("accuracy_minus_fedavg", "std"), n_runs=("path_ratio", "size")).reset_index()
    if records:
        cfg = MultiVFLConfig.from_dict(records[0]["config"])
        predicted = constant_update_steps(cfg).groupby("optimizer")["step_ratio"].mean()
        out.insert(2, "predicted_path_ratio", out["optimizer"].map(predicted))
    return out


def same_order(table: pd.DataFrame, by: str, then: str) -> pd.Series:
    """Per dataset of :func:`displacement`, whether ``by`` ranks the optimizers as ``then`` does."""
    def agree(g: pd.DataFrame) -> bool:
        a, b = g[by].to_numpy(), g[then].to_numpy()
        i, j = np.triu_indices(len(g), 1)
        return bool((np.sign(a[i] - a[j]) * np.sign(b[i] - b[j]) >= 0).all())

    return table.groupby("dataset", sort=False).apply(agree, include_groups=False)


def explain(table: pd.DataFrame) -> list[str]:
    """One sentence per dataset and adaptive optimizer of :func:`displacement`."""
    def pm(mean: float, sd: float, fmt: str) -> str:
        # one seed has no sd; "nan" would read like a failed run
        if np.isnan(mean):
            return "not recorded"
        return f"{mean:{fmt}}" + ("" if np.isnan(sd) else f" ± {sd:{fmt.lstrip('+')}}")

    out = []
    for _, r in table[table["optimizer"] != "FedAvg"].iterrows():
        predicted = r.get("predicted_path_ratio", float("nan"))
        out.append(f"{r['dataset']}, {r['optimizer']}: its server steps summed to {r['path_ratio']:.2f}x the updates "
                   f"(FedAvg 1; predicted {predicted:.2f}x when sqrt(v) << tau); it ended "
                   f"{pm(r['distance_vs_fedavg'], r['distance_vs_fedavg_sd'], '.2f')}x as far from the initial model "
                   f"as FedAvg, and {pm(r['accuracy_minus_fedavg'], r['accuracy_minus_fedavg_sd'], '+.1f')} points "
                   f"of final accuracy from it.")
    return out


# ------------------------------------------------------------------------------- claims


Check = Callable[[claims.Records], claims.Verdict]
CheckOn = Callable[[pd.DataFrame, int], claims.Verdict]


def _check(*, full: bool = False, frame: Callable[[Sequence[dict[str, Any]]], pd.DataFrame] | None = None,
           **where: str) -> Callable[[CheckOn], Check]:
    """A check from ``f(rows, rounds)``: the rows of ``frame`` (:func:`per_run` by default) over the
    profile's records whose columns equal ``where``; not testable with ``full`` under 500 rounds,
    or where there is no such row."""
    def wrap(f: CheckOn) -> Check:
        def check(records: claims.Records) -> claims.Verdict:
            profile = records.profile
            rounds = STUDY.runs(profile)[0].rounds
            if full and rounds < PAPER_ROUNDS:
                return claims.not_testable(f"needs the paper's {PAPER_ROUNDS} rounds; the {profile} profile runs {rounds}")
            rows = (frame or per_run)(STUDY.recorded_runs(records))
            rows = rows[rows[list(where)].eq(pd.Series(where)).all(axis=1)]
            return f(rows, rounds) if len(rows) else claims.not_testable(f"no records of the {profile} profile yet")
        return check
    return wrap


def _ordering_check(by: str, a: str, b: str, value: str, **where: str) -> Check:
    """``a`` > ``b`` in ``value`` on every dataset (paired over seeds), in the runs ``where`` selects."""
    what = {"final_accuracy_pct": "points of final accuracy",
            "mean_accuracy_pct": "points of accuracy averaged over the rounds"}[value]

    @_check(**where)
    def check(runs: pd.DataFrame, rounds: int) -> claims.Verdict:
        # a model near chance decides nothing (claims.paired's gate); Multi-VFL has no Local
        return claims.all_of(claims.ordering(claims.paired(g, by=by, a=a, b=b, value=value, cell=["dataset"],
                                                           chance=CHANCE_PCT),
                                             a=a, b=b, what=what).labelled(f"{d} after {rounds} rounds")
                             for d, g in runs.groupby("dataset", sort=False))

    return check


def _not_converged_check(**where: str) -> Check:
    """FedAvg on 4niid does not converge (:func:`converged`) within the paper's 500 rounds."""
    @_check(full=True, frame=history_frame, optimizer="FedAvg", scenario="4niid", **where)
    def check(h: pd.DataFrame, rounds: int) -> claims.Verdict:
        flat = {(d, s): converged(g) for (d, s), g in h.groupby(["dataset", "seed"], sort=False)}
        ev = (f"{sum(not v for v in flat.values())} of {len(flat)} FedAvg 4niid runs still rising or swinging "
              f"over their last {CONVERGENCE_WINDOW:.0%} of rounds (converged: "
              + (", ".join(f"{d} seed {s}" for (d, s), v in flat.items() if v) or "none") + ")")
        if not any(flat.values()):
            return claims.Verdict(claims.AGREE, ev)
        if all(flat.values()):
            return claims.Verdict(claims.DISAGREE, ev)
        return claims.not_testable(ev + ": mixed over seeds")

    return check


@_check()
def _fmnist_greater_check(runs: pd.DataFrame, rounds: int) -> claims.Verdict:
    """The adaptive optimizers' gain over FedAvg is larger on FashionMNIST than on MNIST."""
    # a gain between models at chance is noise: the gate names the 4niid runs near chance
    niid = runs[runs["scenario"] == "4niid"].assign(cell=lambda d: d["dataset"])
    untrained = [u for opt in ADAPTIVE if opt in set(niid["optimizer"]) for u in claims.untrained_runs(
        claims.paired(niid, by="optimizer", a=opt, b="FedAvg", value="final_accuracy_pct", cell=["dataset"],
                      chance=CHANCE_PCT))]
    if untrained:
        return claims.not_testable(f"{claims.DID_NOT_LEARN}: " + "; ".join(dict.fromkeys(untrained)))
    # per seed and dataset, the adaptive optimizers' mean final accuracy minus FedAvg's
    acc = niid.pivot_table(index=["dataset", "seed"], columns="optimizer", values="final_accuracy_pct")
    g = (acc[[o for o in ADAPTIVE if o in acc]].mean(axis=1) - acc["FedAvg"]).unstack("dataset")
    if not {"MNIST", "FashionMNIST"} <= set(g):
        return claims.not_testable("needs both datasets")
    diffs = pd.DataFrame({"cell": "FashionMNIST gain - MNIST gain", "seed": g.index,
                          "diff": (g["FashionMNIST"] - g["MNIST"]).to_numpy()})
    return claims.ordering(diffs, a="the gain on FashionMNIST", b="the gain on MNIST",
                           what="points").labelled(f"after {rounds} rounds")


#: Sec. 4.2: "they improve the accuracy by 2-3%" on FashionMNIST (points of accuracy).
FMNIST_GAIN_PCT = (2.0, 3.0)


@_check(full=True, dataset="FashionMNIST", scenario="4niid")
def _fmnist_gain_check(runs: pd.DataFrame, rounds: int) -> claims.Verdict:
    """Each adaptive optimizer's final gain over FedAvg on FashionMNIST is 2-3 points: agree when the
    paired mean's noise band overlaps [2, 3] and excludes no gain, disagree when wholly outside.
    Overlap, not containment: a 1-point range is narrower than a few seeds can resolve."""
    pairs = {opt: claims.paired(runs, by="optimizer", a=opt, b="FedAvg", value="final_accuracy_pct", cell=[],
                                chance=CHANCE_PCT) for opt in ADAPTIVE}
    return claims.all_of(claims.within(d, what=f"{opt} - FedAvg", agree=(0.0, np.inf), plausible=FMNIST_GAIN_PCT,
                                       undecided="the noise band includes no gain") for opt, d in pairs.items())


#: The paper's claims (Sec. 4): orderings on final accuracy ("higher") and on the mean over the
#: rounds ("converges faster"), paired over seeds on every dataset.
CLAIMS: list[claims.Claim] = [
    *[claims.Claim(PAPER, "Fig. 2", f"with FedAvg, accuracy is lower with {worse} than with {better} "
                   "(it falls as more label owners are non-IID)",
                   _ordering_check("scenario", better, worse, "final_accuracy_pct", optimizer="FedAvg"))
      for better, worse in zip(SCENARIOS, SCENARIOS[1:])],
    claims.Claim(PAPER, "Fig. 2", "with FedAvg, 4niid does not converge even after 500 rounds", _not_converged_check()),
    *[claims.Claim(PAPER, "Fig. 3", f"in 4niid, {opt} reaches a higher accuracy than FedAvg",
                   _ordering_check("optimizer", opt, "FedAvg", "final_accuracy_pct", scenario="4niid"))
      for opt in ADAPTIVE],
    *[claims.Claim(PAPER, "Fig. 3", f"in 4niid, {opt} converges faster than FedAvg",
                   _ordering_check("optimizer", opt, "FedAvg", "mean_accuracy_pct", scenario="4niid"))
      for opt in ADAPTIVE],
    claims.Claim(PAPER, "Fig. 3", "the adaptive optimizers' gain over FedAvg is greater on FashionMNIST than on MNIST",
                 _fmnist_greater_check),
    claims.Claim(PAPER, "Fig. 3", "on FashionMNIST the adaptive optimizers improve the accuracy by 2-3 points",
                 _fmnist_gain_check),
    claims.Claim(PAPER, "Fig. 3", "on FashionMNIST (4niid), FedAvg fails to converge",
                 _not_converged_check(dataset="FashionMNIST")),
]


# ------------------------------------------------------------------------------- figures


def _panels(records: Sequence[dict[str, Any]], keep: tuple[str, str], hue: str, order: Sequence[str], title: str,
            legend_title: str) -> tuple[plt.Figure, pd.DataFrame]:
    """The runs whose ``keep[0]`` is ``keep[1]``, one panel per dataset (mean and sd over seeds), and their data."""
    df = history_frame(records)
    df = df[df[keep[0]] == keep[1]]
    datasets = list(dict.fromkeys(df["dataset"]))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.2 * len(datasets), 3.8), squeeze=False, sharey=True)
    # every panel's levels: a curve keeps its colour and marker, the one legend lists it
    levels = set(df[hue])
    present = [o for o in order if o in levels]
    for ax, name in zip(axes[0], datasets):
        # Marker and dash per curve as well as colour: curves that coincide stay visible.
        sns.lineplot(data=df[df["dataset"] == name], x="round", y="test_accuracy_pct", hue=hue, hue_order=present,
                     style=hue, style_order=present, markers=True, errorbar="sd", ax=ax)
        ax.set(title=name, xlabel="global round", ylabel="test accuracy (%)", ylim=(0, 100))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax is not axes[0][-1]:
            ax.get_legend().remove()
    # one legend, beside the last panel: inside a panel it covers curves that climb past 60 %
    sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1, 1), title=legend_title)
    fig.suptitle(title)
    fig.tight_layout()
    return fig, df


def figure2(records: Sequence[dict[str, Any]]) -> tuple[plt.Figure, pd.DataFrame]:
    """Fig. 2: FedAvg, 1niid..4niid."""
    return _panels(records, ("optimizer", "FedAvg"), "scenario", SCENARIOS,
                   "Fig. 2: FedAvg as more label owners see only two labels", "non-IID label owners")


def figure3(records: Sequence[dict[str, Any]]) -> tuple[plt.Figure, pd.DataFrame]:
    """Fig. 3: 4niid under the four server optimizers."""
    return _panels(records, ("scenario", "4niid"), "optimizer", list(OPTIMIZER_LABELS.values()),
                   "Fig. 3: 4niid (4 of 5 label owners non-IID) by server optimizer", "server optimizer")


# --------------------------------------------------------------------------- the study's declaration


def pending_cost(runs: Sequence[MultiVFLConfig]) -> pd.DataFrame:
    """Pending paper-profile runs' CPU hours, rounds x :data:`ROUND_CPU_SECONDS` (their GPU minutes
    are :func:`vflkit.ops.pricing.price`'s, which takes this rule only for a run it cannot price)."""
    return pd.DataFrame({"needs": ["GPU" if needs_gpu(c) else "CPU" for c in runs],
                         "h100_min": [np.nan] * len(runs),
                         "cpu_h": [c.rounds * ROUND_CPU_SECONDS["paper"] / 3600 for c in runs]})


def beyond(evidence: base.Evidence) -> list[tuple[str, str]]:
    """Findings the paper does not report: the server optimizers' step sizes against FedAvg's."""
    found = evidence.first_with_records()
    title = "Multi-VFL: how far each server optimizer moves the model, and its accuracy"
    link = evidence.notebook("What the server optimizers do here, measured")
    if not found:
        return [(title, f"Not computed: no records yet; see the {link}.")]
    profile, have = found
    table = displacement(list(have.values()))
    lines = explain(table) if len(table) else []
    return [(title, f"From the {profile} profile's records (`multi_vfl.displacement`, `explain`; {link}):\n\n"
             + "\n".join(f"- {s}" for s in lines))]


STUDY = register(Study(
    name=PAPER, title="Multi-VFL", family="multi_owner", configs=configs, order=3,
    cites="mugunthan2021multivfl",
    artefacts=(
        Artefact("Fig. 2", base.every_run(lambda c: c.server_optimizer == "fedavg"), ("fig2.*", "final_accuracy.csv"),
                 lambda groups, records, profile: figure2(records)),
        Artefact("Fig. 3", base.every_run(lambda c: c.scenario == "4niid"), ("fig3.*", "final_accuracy.csv"),
                 lambda groups, records, profile: figure3(records)),
    ),
    extras=(
        Artefact("Final accuracy", base.every_run(), ("final_accuracy.csv",),
                 lambda groups, records, profile: long_table(summary(records), profile)),
        Artefact("Traffic", base.every_run(), ("traffic.csv",),
                 lambda groups, records, profile: long_traffic(bytes_per_round(records), profile)),
    ),
    claims=CLAIMS, needs_gpu=needs_gpu, pending_cost=pending_cost, beyond=beyond,
    describe=lambda run: {"dataset": DATASET_LABELS[run.dataset], "scenario": run.scenario,
                          "optimizer": OPTIMIZER_LABELS[run.server_optimizer], "seed": run.seed, "rounds": run.rounds},
    calibration=lambda: configs("paper"),
))
