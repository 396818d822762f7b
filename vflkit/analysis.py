"""Pure functions over run records: convergence epoch, time to a common target, communication to
convergence, runs that diverged, the bf16 check and the cells of a table (:func:`summarise_runs`,
which keeps diverged runs out of every number).

EASTER reports accuracy and communication "at convergence" (Table V, Figs 4-5) without saying
how convergence was detected. Our rule (:func:`convergence_epoch`):

* a model has converged at the **first epoch whose test metric is within ``tolerance``
  percentage points (default 0.5) of the best that model reaches in the run**;
* a run that trains several models (EASTER/VFedMH: one per party) has converged when **all**
  of them have: the latest of their epochs. A method is not "converged" while one of the
  models it promises is still improving;
* 1.0 point is the suggested sensitivity check. (Multi-VFL's 90 %-of-best rule is far too
  loose for a 98 %-accurate MNIST model.)

The rule looks at the whole run, so e* is defined only after the run's last epoch: it says
when the run got where it ended up, not when to stop.

A record is the dict :func:`vflkit.records.run_one` writes: ``history`` rows with ``epoch``,
``model`` and metrics (``test_accuracy`` / ``test_auc`` as fractions 0..1), and
``comm["per_epoch"]`` rows with ``epoch`` and ``bytes``. Nothing here imports the runner.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from .errors import ConfigError
from .network import link_rows

#: Methods whose "embedding" messages are blinded int64 ring elements when blinding is on.
BLINDED_METHODS: tuple[str, ...] = ("vfedmh", "homo_vfedmh", "easter")


def _history(history: Any, metric: str | None = None) -> pd.DataFrame:
    df = history if isinstance(history, pd.DataFrame) else pd.DataFrame(list(history))
    if df.empty or not {"epoch", "model"} <= set(df.columns):
        raise ConfigError("history needs rows with 'epoch', 'model' and a metric column")
    if metric is not None and metric not in df.columns:
        raise ConfigError(f"history has no {metric!r} column; it has {sorted(df.columns)}")
    return df


def convergence_epochs(history: Any, *, metric: str = "test_accuracy", tolerance: float = 0.5,
                       models: Sequence[str] | None = None) -> dict[str, int]:
    """e* of every model (of ``models``, default all): the first epoch whose ``metric`` (a
    fraction; missing or NaN epochs skipped) is >= its best - ``tolerance`` percentage points."""
    if not tolerance >= 0:
        raise ConfigError(f"tolerance must be >= 0 percentage points, got {tolerance!r}")
    df = _history(history, metric)
    if models is not None:
        unknown = sorted(set(models) - set(df["model"]))
        if unknown:
            raise ConfigError(f"no history for models {unknown}; it has {sorted(set(df['model']))}")
        df = df[df["model"].isin(list(models))]
    out: dict[str, int] = {}
    for model, rows in df.groupby("model", sort=True):
        rows = rows[rows[metric].notna()].sort_values("epoch")
        if rows.empty:
            raise ConfigError(f"model {model!r} has no {metric} value in any epoch")
        best = float(rows[metric].max())
        # The fraction -> points conversion; the 1e-12 keeps an epoch at exactly best - tol.
        reached = rows[rows[metric] * 100 >= best * 100 - tolerance - 1e-12]
        out[str(model)] = int(reached["epoch"].iloc[0])
    return out


def convergence_epoch(history: Any, *, metric: str = "test_accuracy", tolerance: float = 0.5,
                      models: Sequence[str] | None = None) -> int:
    """The run's e*: the latest of its models' convergence epochs (all models converged)."""
    return max(convergence_epochs(history, metric=metric, tolerance=tolerance, models=models).values())


#: "To convergence" where methods are compared (EASTER's Table V, VFedMH's Fig. 3). Neither paper
#: says how it detected convergence; EASTER reports each method's accuracy "at convergence" beside
#: the communication spent to get there and calls its own the highest (Sec. V-C), and VFedMH says
#: the methods "converge at the same global epoch" (Sec. VI-D). A per-run rule (first epoch within
#: 0.5 points of the run's own best, :func:`convergence_epoch`) gives every run that is still
#: rising at its last epoch the same e*, so it compares bytes per epoch, not speed. The compared
#: rule is the time-to-accuracy of DAWNBench and MLPerf: the first epoch at which a run reaches a
#: target common to the runs compared on one cell and seed, a fixed share of the best final metric
#: among them. 99 % of it: on MNIST (98 %) a run must come within 1 point, on FashionMNIST (89 %)
#: within 0.9, so a method that ends a point behind has not converged to the others' level. A run
#: that never reaches the target within the horizon is censored: its pair decides nothing.
TARGET_SHARE = 0.99


def metric_curve(history: Any, *, metric: str = "test_accuracy", models: Sequence[str] | None = None) -> pd.Series:
    """Epoch -> ``metric`` (a fraction) averaged over ``models`` (default: every model of the run)."""
    df = _history(history, metric)
    if models is not None:
        df = df[df["model"].isin(list(models))]
    return df[df[metric].notna()].groupby("epoch")[metric].mean().sort_index()


def to_common_target(curves: Mapping[Hashable, pd.Series], cell: Callable[[Hashable], Hashable] = lambda key: None,
                     share: float = TARGET_SHARE) -> dict[Hashable, tuple[float, float]]:
    """Each curve (epoch -> metric) of ``curves`` timed to the target common to the curves of its
    ``cell(key)`` (default: all in one cell), ``share`` of the best of their final metrics, as
    ``(target, epoch)``: the first epoch at which the curve reaches it, NaN where it never does
    within the run (censored: the horizon cannot say when it would)."""
    finals: dict[Hashable, list[float]] = {cell(key): [] for key in curves}
    for key, curve in curves.items():
        if not math.isnan(final := float(curve.iloc[-1])):
            finals[cell(key)].append(final)
    if empty := [c for c, f in finals.items() if not f]:
        raise ConfigError(f"a common target needs at least one final metric that is a number (none in {empty[0]!r})")
    targets = {c: share * max(f) for c, f in finals.items()}
    out = {}
    for key, curve in curves.items():
        reached = curve[curve >= targets[cell(key)] - 1e-12]
        out[key] = (targets[cell(key)], math.nan if reached.empty else int(reached.index[0]))
    return out


def _float32_factors(record: Mapping[str, Any]) -> dict[str, float]:
    """Per message kind, float32-equivalent bytes per byte sent: blinded embeddings travel as
    int64 ring elements (8 B per entry) where a float32 would take 4. Everything else is sent
    as float32 already, or compressed (C-VFL), and counts as sent."""
    cfg = record.get("config", {})
    blinded = cfg.get("method") in BLINDED_METHODS and cfg.get("options", {}).get("blinding", True)
    return {"embedding": 0.5} if blinded else {}


def _per_epoch_bytes(record: Mapping[str, Any], factors: Mapping[str, float]) -> pd.DataFrame:
    """Bytes per epoch, as sent and float32-equivalent: per kind from ``comm["per_link"]`` where
    the record has it, else by the run's overall kind shares (exact when every epoch runs the same steps)."""
    comm = record.get("comm", {})
    links = link_rows(comm["per_link"]) if comm.get("per_link") else pd.DataFrame()
    if not links.empty:
        links["f32"] = links["bytes"] * links["kind"].map(lambda k: factors.get(k, 1.0))
        g = links.groupby("epoch")
        return pd.DataFrame({"bytes": g["bytes"].sum(), "bytes_float32": g["f32"].sum()}).reset_index()
    per_epoch = pd.DataFrame(comm.get("per_epoch") or [])
    if per_epoch.empty:
        raise ConfigError("the record has no comm.per_epoch rows")
    kinds = pd.DataFrame(comm.get("per_kind") or [])
    if factors and kinds.empty:
        raise ConfigError("float32-equivalent bytes need comm.per_kind (or comm.per_link) in the record")
    total = float(kinds["bytes"].sum()) if not kinds.empty else 0.0
    ratio = 1.0
    if total > 0:
        ratio = float(sum(b * factors.get(k, 1.0) for k, b in zip(kinds["kind"], kinds["bytes"]))) / total
    out = per_epoch[["epoch", "bytes"]].copy()
    out["bytes_float32"] = out["bytes"] * ratio
    return out


def full_epoch_traffic(record: Mapping[str, Any], steps: int) -> pd.DataFrame:
    """The record's training traffic per epoch (``comm["per_epoch"]``: messages, bytes, rounds),
    its diverged last epoch (if any) scaled from the steps it ran to a full epoch of ``steps``:
    a run that stopped at a NaN loss sent less, but the protocol's cost per epoch is the same."""
    per_epoch = pd.DataFrame(record["comm"]["per_epoch"])
    div = record.get("diverged")
    if div:
        # records written before steps_run was kept: CPU runs whose NaN loss was read after its
        # step returned (C_VFL's, the only diverged ones), so the bad step ran in full
        ran = div.get("steps_run", div["step"] + 1)
        last = per_epoch["epoch"] == div["epoch"]
        cols = [c for c in ("messages", "bytes", "rounds") if c in per_epoch]
        per_epoch.loc[last, cols] = per_epoch.loc[last, cols].astype(float) * steps / ran
    return per_epoch


def bytes_to_convergence(record: Mapping[str, Any], *, metric: str | None = None, tolerance: float = 0.5,
                         models: Sequence[str] | None = None, epoch: int | None = None,
                         float32_factors: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Table V's communication volume: training bytes of epochs 1..e* of ``record`` (``history``,
    ``comm``, ``config``), all parties and directions. ``metric``: default ``test_auc`` if the
    history has it (Criteo), else ``test_accuracy``; ``tolerance``, ``models``: the convergence rule
    (:func:`convergence_epoch`); ``epoch``: this e* instead of detecting it; ``float32_factors``: per
    kind, float32-equivalent bytes per byte sent (default: blinded embeddings of VFedMH/EASTER count
    half, int64 -> float32, everything else as sent). Returns ``epoch`` (e*), ``metric``, ``value``
    (the metric at e*, the mean over the considered models, a fraction), ``bytes`` (as sent),
    ``bytes_float32``, ``mb`` and ``mb_float32`` (MB = 2**20 bytes, as the ledger's other reports)."""
    history = _history(record["history"])
    if metric is None:
        metric = "test_auc" if "test_auc" in history.columns and history["test_auc"].notna().any() else "test_accuracy"
    e_star = epoch if epoch is not None else convergence_epoch(history, metric=metric, tolerance=tolerance,
                                                              models=models)
    factors = _float32_factors(record) if float32_factors is None else dict(float32_factors)
    per_epoch = _per_epoch_bytes(record, factors)
    if e_star > int(per_epoch["epoch"].max()):
        raise ConfigError(f"e*={e_star} is past the record's last epoch of traffic ({int(per_epoch['epoch'].max())})")
    upto = per_epoch[per_epoch["epoch"] <= e_star]
    at = history[(history["epoch"] == e_star)]
    if models is not None:
        at = at[at["model"].isin(list(models))]
    value = float(at[metric].mean()) if not at.empty else math.nan
    sent, f32 = int(upto["bytes"].sum()), float(upto["bytes_float32"].sum())
    return {"epoch": int(e_star), "metric": metric, "value": value, "bytes": sent, "bytes_float32": f32,
            "mb": sent / 2**20, "mb_float32": f32 / 2**20}


def summarise_runs(rows: Iterable[Mapping[str, Any]] | pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """One row per cell (``keys``) of ``rows`` (one run's ``value`` each, ``diverged`` where it
    did): ``value`` (mean), ``std`` and ``n_runs`` over the runs that did not diverge (a broken
    model's score measures nothing; a cell whose every run diverged is NaN), and ``diverged``."""
    df = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    div = df["diverged"] if "diverged" in df else pd.Series(False, index=df.index)
    df["diverged"] = div.fillna(False).astype(bool)
    df["value"] = df["value"].where(~df["diverged"])
    g = df.groupby(list(keys), sort=False)
    out = pd.DataFrame({"value": g["value"].mean(), "std": g["value"].std(ddof=1),
                        "n_runs": g.size() - g["diverged"].sum(), "diverged": g["diverged"].sum()})
    return out.astype({"n_runs": int, "diverged": int}).reset_index()


def collapsed_epoch(record: Mapping[str, Any], *, at_chance_pct: float, metric: str = "test_accuracy") -> int | None:
    """The epoch from which a run that trained to the end stayed below ``at_chance_pct`` (``metric``
    in %; some party model), None where every model ends above it or the run diverged and stopped."""
    if record.get("diverged"):
        return None
    hist = pd.DataFrame(record["history"])
    first = []
    for party in record["models"]:
        h = hist[hist["model"] == party].sort_values("epoch")
        acc, epochs = 100 * h[metric].to_numpy(), h["epoch"].to_numpy()
        if len(acc) and acc[-1] < at_chance_pct:
            above = np.flatnonzero(acc >= at_chance_pct)
            first.append(int(epochs[above[-1] + 1] if len(above) else epochs[0]))
    return min(first) if first else None


def diverged_runs(records: Iterable[Mapping[str, Any]], *, at_chance_pct: float) -> pd.DataFrame:
    """Runs that diverged: loss NaN or exploded (``how`` "stopped", at ``epoch``/``batch``), or
    trained to the end at chance (``how`` "collapsed", from :func:`collapsed_epoch`)."""
    rows = [{"dataset": r["config"]["dataset"], "method": r["config"]["method"],
             "models": "/".join(r["config"]["models"]), "how": "stopped" if d else "collapsed",
             "epoch": d["epoch"] if d else e, "batch": d["step"] if d else None}
            for r in records for d, e in [(r.get("diverged"), collapsed_epoch(r, at_chance_pct=at_chance_pct))]
            if d or e is not None]
    out = pd.DataFrame(rows, columns=["dataset", "method", "models", "how", "epoch", "batch"])
    return out.astype({"batch": "Int64"})  # empty for a collapsed run, which ran every batch


def bf16_check(runs: Iterable[Any], records: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """The bf16 check (bf16 autocast becomes the GPU default only where a cell trained again under
    bf16 lands inside its fp32 seeds' spread, :func:`bf16_verdict`): per run of ``runs`` (run configs,
    ``precision="bf16"``) and its fp32 twin, by seed, the final test accuracy (%) of the active
    party, device and wall time (s: a hint only, the GPU may have been shared); NaN where not recorded yet."""
    rec = {r["key"]: r for r in records}
    rows = []
    for c in runs:
        row: dict[str, Any] = {"seed": c.seed}
        for name, r in (("fp32", rec.get(c.replace(precision="fp32").key)), ("bf16", rec.get(c.key))):
            row[f"{name} accuracy (%)"] = 100 * r["final"]["active"]["test_accuracy"] if r else float("nan")
            row[f"{name} device"] = (r.get("environment") or {}).get("device_name") if r else None
            row[f"{name} wall (s)"] = r["wall_time_s"] if r else float("nan")
        rows.append(row)
    return pd.DataFrame(rows, columns=["seed", "fp32 accuracy (%)", "bf16 accuracy (%)", "fp32 device", "bf16 device",
                                       "fp32 wall (s)", "bf16 wall (s)"])


def bf16_verdict(table: pd.DataFrame, cell: str) -> tuple[str | None, str]:
    """Whether bf16 may become the GPU default (:func:`bf16_check`'s ``table`` of the run ``cell``
    names), and the sentence: "bf16" when the bf16 seeds' mean lies inside the fp32 seeds' range,
    "fp32" outside, None while runs are missing. The mean, not each seed: three seeds land each
    inside the range of three others drawn alike only about one time in five."""
    fp32, bf16 = table["fp32 accuracy (%)"], table["bf16 accuracy (%)"]
    if table.empty or fp32.isna().any() or bf16.isna().any():
        return None, (f"bf16 check ({cell}): not decided, {int(bf16.notna().sum())} of {len(table)} bf16 and "
                      f"{int(fp32.notna().sum())} of {len(table)} fp32 seeds recorded; fp32 stays the default")
    lo, hi, mean = float(fp32.min()), float(fp32.max()), float(bf16.mean())
    inside = lo <= mean <= hi
    return ("bf16" if inside else "fp32"), (
        f"bf16 check ({cell}): bf16 seeds' mean {mean:.2f} % ({', '.join(f'{v:.2f}' for v in bf16)}) "
        f"{'inside' if inside else 'outside'} the fp32 seeds' range {lo:.2f}-{hi:.2f} %: "
        + ("bf16 may become the GPU default" if inside else "fp32 stays the default"))


def arch_metric(record: Mapping[str, Any], metric: str = "test_accuracy") -> dict[str, float]:
    """Final test metric (%) per architecture: the mean over the party models holding it (``record["models"]``)."""
    out: dict[str, list[float]] = {}
    for model_key, arch in record["models"].items():
        out.setdefault(arch, []).append(100 * record["final"][model_key].get(metric, float("nan")))
    return {a: float(np.mean(v)) for a, v in out.items()}


def recorded_pairs(variants: Iterable[Any], records: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    """Each variant run (a config with options: no blinding, Q = 1, the full gradient) with its standard
    run (no options), where both are in ``records`` (by key): a part-computed profile has half-recorded pairs."""
    pairs = [(c, c.replace(options={})) for c in variants]
    return [(c, s) for c, s in pairs if c.key in records and s.key in records]


def variant_pairs(pairs: Iterable[tuple[Mapping[str, Any], Mapping[str, Any]]], *, labels: tuple[str, str],
                  metric: str | Callable[[Mapping[str, Any]], str] = "test_accuracy",
                  tolerance: float = 0.5) -> pd.DataFrame:
    """One row per ``(record, variant_record)`` pair that differ in one setting, its sides named
    by ``labels``: each side's final metric (%, the mean over its models) and e*
    (:func:`convergence_epoch`), and the difference (variant - run). ``metric``: a name, or a
    function of the config giving it. A diverged run keeps its row, its final metric as recorded."""
    rows = []
    for base, variant in pairs:
        cfg = base["config"]
        m = metric(cfg) if callable(metric) else metric
        row: dict[str, Any] = {"dataset": cfg["dataset"], "seed": cfg["seed"], "models": "/".join(cfg["models"])}
        for label, r in zip(labels, (base, variant)):
            row[f"{label}: final %"] = 100 * float(np.mean([v.get(m, np.nan) for v in r["final"].values()]))
            row[f"{label}: e*"] = convergence_epoch(r["history"], metric=m, tolerance=tolerance)
        row["difference (points)"] = row[f"{labels[1]}: final %"] - row[f"{labels[0]}: final %"]
        rows.append(row)
    return pd.DataFrame(rows, columns=["dataset", "seed", "models", *(f"{lab}: {what}" for lab in labels
                                                                     for what in ("final %", "e*")),
                                       "difference (points)"])


def variant_summary(table: pd.DataFrame, *, labels: tuple[str, str]) -> str:
    """One sentence per dataset from a :func:`variant_pairs` table: the variant's mean paired
    difference over the pairs (± its standard error where there are two or more) and the mean e*
    of each side; a notebook prints it, so the prose is the table's."""
    if table.empty:
        return "No pair of runs is recorded yet at this profile."
    parts = []
    for dataset, g in table.groupby("dataset", sort=False):
        d = g["difference (points)"]
        se = f" ± {d.std(ddof=1) / np.sqrt(len(d)):.2f}" if len(d) > 1 else ""
        e0, e1 = (g[f"{lab}: e*"].mean() for lab in labels)
        parts.append(f"on {dataset}, {labels[1]} ends {d.mean():+.2f}{se} points against {labels[0]} over "
                     f"{len(d)} pair{'s' if len(d) != 1 else ''} (range {d.min():+.2f} to {d.max():+.2f}; "
                     f"mean e* {e0:.1f} against {e1:.1f} epochs)")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def swap_in_variant(groups: Mapping[str, list[Any]], variant: str | None, *, variants: Mapping[str, tuple[str, str]],
                    tables: Sequence[str], keep_unmatched: bool) -> Mapping[str, list[Any]]:
    """``groups`` with the labelled variant ``variants[variant]`` = (method, group) swapped in (None:
    unchanged): each run of the method in ``tables`` replaced by its twin in the variant's group (same
    dataset, models, seed and parties), so that a study's claims judged on its variant (the 1/C
    reading, C-VFL at the host's rate) read the same tables as on its runs. A run the variant has
    no twin for stays (``keep_unmatched``) or leaves the table."""
    if variant is None:
        return groups
    method, group = variants[variant]

    def twin_key(c: Any) -> tuple:
        return (c.dataset, c.models, c.seed, c.n_parties)

    twins = {twin_key(c): c for c in groups[group] if c.method == method}
    swapped = {t: [twins.get(twin_key(c), c if keep_unmatched else None) if c.method == method else c
                   for c in groups[t]] for t in tables if t in groups}
    return {**groups, **{t: [c for c in runs if c is not None] for t, runs in swapped.items()}}
