"""AdptVFedConv (Li et al.): VGG-16 across the 2x2 tiles of CIFAR images, by feature-map transfer;
its artefacts, our extensions and profiles: docs/studies.md. The runs are :mod:`vflkit.training.tiles`'.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator
import numpy as np
import pandas as pd

from .. import claims
from ..config import apply_overrides, check_profile, check_seeds, check_seeds_once
from ..methods.adptvfedconv import _PRETRAIN_FIELDS, CUTS, AdptVFedConvConfig, cost_model
from ..report import join_reference, side_by_side
from ..training.tiles import LABELS, TilesRun
from . import base, register
from .base import Artefact, Study, all_runs

PAPER = "adptvfedconv"
TABLE2_VARIANTS = ("adptvfedconv", "centralized", "noncooperation", "no_transfer", "zero_padding")
EXTENSIONS = ("oneshot", "no_finetune", "bn_stats")

#: Per profile: the :class:`AdptVFedConvConfig` fields of every run (``run``), the seeds, the
#: Table 3 cuts and our extensions' seeds (docs/studies.md says what each runs). quick's width 1/8
#: is not the paper's model; its images and epochs are the paper's / 15 (the smallest factor keeping
#: whole epochs in a quarter hour), its Centralized trains AdptVFedConv's two supervised stages
#: together (a 4-epoch one ended below Non-cooperation), batch 32 (more steps matter more there).
#: paper: 60 epochs per stage (the spec's choice; the paper gives none), one seed (no printed std).
PROFILE_SETTINGS: dict[str, dict[str, Any]] = {
    "smoke": {"run": {"width": 1 / 16, "n_train": 64, "n_test": 32, "pretrain_epochs": 1,
                      "finetune_epochs": 1, "classifier_epochs": 1, "centralized_epochs": 1,
                      "batch_size": 16, "ae_batch_size": 16, "eval_batch_size": 32},
              "seeds": (0,), "cuts": ("2C", "2C+1M", "4C+2M"), "extension_seeds": (0,)},
    "quick": {"run": {"width": 1 / 8, "n_train": 3333, "n_test": 667, "pretrain_epochs": 4,
                      "finetune_epochs": 1, "classifier_epochs": 4, "centralized_epochs": 4 + 4,
                      "batch_size": 32, "ae_batch_size": 32, "eval_batch_size": 250},
              "seeds": (0, 1, 2), "cuts": ("2C", "2C+1M", "4C+2M"), "extension_seeds": (0,)},
    "paper": {"run": {"width": 1.0, "pretrain_epochs": 60, "finetune_epochs": 10,
                      "classifier_epochs": 60, "centralized_epochs": 60},
              "seeds": (0,), "cuts": CUTS, "extension_seeds": (0,)},
}
_RUN_FIELDS = tuple(f for f in AdptVFedConvConfig.__dataclass_fields__
                    if f not in ("seed", "cut", "padding", "model_transfer", "finetune", "extraction"))


def configs(profile: str, *, seeds: Sequence[int] | None = None,
            overrides: dict[str, Any] | None = None) -> dict[str, list[TilesRun]]:
    """Every run, by artefact: ``table2``, ``table3`` (its 2C+1M runs are Table 2's) and
    ``extensions``. ``overrides`` replace profile settings or set an :class:`AdptVFedConvConfig`
    field on every run."""
    settings = {k: v for k, v in PROFILE_SETTINGS[check_profile(profile)].items() if k != "run"}
    s, forced = apply_overrides(settings, overrides, run_fields=_RUN_FIELDS)
    base = {**PROFILE_SETTINGS[profile]["run"], **forced}
    check_seeds_once(seeds, overrides)
    seeds = check_seeds(s["seeds"] if seeds is None else seeds)
    ext_seeds = tuple(x for x in s["extension_seeds"] if x in seeds) or seeds[:1]
    # the runs that train a pre-training (Non-cooperation, Zero-padding) start before those that wait
    t2 = [TilesRun.make(v, seed=seed, **base) for seed in seeds
          for v in ("noncooperation", "centralized", "zero_padding", "adptvfedconv", "no_transfer")]
    t3 = [TilesRun.make("adptvfedconv", seed=seed, cut=cut, **base) for seed in seeds for cut in s["cuts"]]
    ext = [TilesRun.make(v, seed=seed, **base) for seed in ext_seeds for v in EXTENSIONS]
    return {"table2": t2, "table3": t3, "extensions": ext}


def needs_gpu(run: TilesRun) -> bool:
    """The paper's full-width VGG-16-BN is a GPU's work; the reduced widths train on a CPU."""
    return run.adpt.width >= 1


#: Estimated H100 seconds per epoch of each stage at width 1 on CIFAR-10 (the spec's, from FLOPs
#: and launch overhead, +-2x; not measured).
H100_S_PER_EPOCH = {"pretrain": 2.5, "finetune_per_client": 1.0, "classifier": 7.0, "centralized": 5.0}


def estimated_h100_minutes(run: TilesRun, *, pretrained: bool = False) -> float:
    """The estimated H100 minutes of ``run`` (:data:`H100_S_PER_EPOCH`); ``pretrained``: its
    pre-training is shared with a run already counted."""
    c, s = run.adpt, H100_S_PER_EPOCH
    if run.variant == "centralized":
        return c.centralized_epochs * s["centralized"] / 60
    sec = 0.0 if pretrained else c.pretrain_epochs * s["pretrain"]
    if run.variant != "noncooperation":
        ae = 0 if c.finetune == "none" else c.finetune_epochs * 3 * s["finetune_per_client"]
        sec += ae + c.classifier_epochs * s["classifier"]
    return sec / 60


# ------------------------------------------------------------------------------ frames


#: What the cut costs a client: Table 3's rows, from each record's ``costs``.
COSTS = ("upload_bytes_per_sample_per_client", "extractor_macs_per_tile", "extractor_params")


def runs_frame(recs: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per record: variant, cut, seed, width, label, final / best accuracy (%) and :data:`COSTS`."""
    rows = [{**{k: r["config"][k] for k in ("variant", "cut", "seed", "width")},
             "label": LABELS[r["config"]["variant"]], "final_pct": 100 * r["final_accuracy"],
             "best_pct": 100 * r["best_accuracy"], **{k: r.get("costs", {}).get(k) for k in COSTS}} for r in recs]
    return pd.DataFrame(rows, columns=["variant", "cut", "seed", "width", "label", "final_pct", "best_pct", *COSTS])


def _model_label(df: pd.DataFrame) -> str:
    widths = sorted(set(df["width"]))
    if widths == [1.0]:
        return "VGG-16"
    return "VGG-16 at width " + "/".join(f"1/{round(1 / w)}" for w in widths) + " (not the paper's model)"


def _table(df: pd.DataFrame, *, table: str, profile: str, setting: pd.Series | str = "") -> pd.DataFrame:
    """Final and best accuracy per method and ``setting``, mean over ``df``'s seeds, beside the paper's."""
    d = pd.concat([df.assign(metric=metric, value=df[col], method=df["label"], setting=setting)
                   for metric, col in (("top1_accuracy_pct", "final_pct"), ("best_top1_accuracy_pct", "best_pct"))])
    agg = d.groupby(["method", "setting", "metric"], as_index=False, sort=False).agg(
        value=("value", "mean"), std=("value", "std"), n_runs=("value", "size"))
    agg = agg.assign(table=table, dataset="CIFAR-10", model="VGG-16")
    out = join_reference(agg, PAPER, profile=profile)
    out["model"] = _model_label(df)  # after the join: the paper's value stays beside ours
    return out


def table2(recs: Sequence[dict[str, Any]], *, profile: str) -> pd.DataFrame:
    """Table 2: final-epoch (the paper's metric, we read) and best test accuracy (%), beside the paper's."""
    df = runs_frame(recs)
    df = df[df["variant"].isin(TABLE2_VARIANTS) & ((df["cut"] == "2C+1M") | (df["variant"] == "centralized"))]
    return _table(df, table="2", profile=profile)


def table3(recs: Sequence[dict[str, Any]], *, profile: str) -> pd.DataFrame:
    """Table 3: accuracy per extractor depth beside the paper's, and what the cut costs a client
    (upload bytes per sample, extractor MACs and parameters) as rows of their own."""
    df = runs_frame(recs)
    df = df[(df["variant"] == "adptvfedconv")]
    out = _table(df, table="3", setting="extractor=" + df["cut"], profile=profile)
    cost = df.groupby("cut", sort=False).agg(**{k: (k, "mean") for k in COSTS}, n_runs=("seed", "size")).reset_index()
    cost = cost.melt(id_vars=["cut", "n_runs"], value_vars=list(COSTS), var_name="metric")
    cost = cost.assign(table="3", dataset="CIFAR-10", method="AdptVFedConv", setting="extractor=" + cost["cut"],
                       model="VGG-16", std=0.0)
    costs = join_reference(cost, PAPER, profile=profile).assign(model=_model_label(df))
    order = {c: i for i, c in enumerate(CUTS)}
    out = pd.concat([out, costs], ignore_index=True)
    return out.sort_values("setting", key=lambda s: s.str.removeprefix("extractor=").map(order),
                           kind="stable").reset_index(drop=True)


def extensions(recs: Sequence[dict[str, Any]], *, profile: str) -> pd.DataFrame:
    """Our extensions beside AdptVFedConv on the same seeds."""
    df = runs_frame(recs)
    ext_seeds = set(df[df["variant"].isin(EXTENSIONS)]["seed"])
    df = df[(df["variant"].isin(EXTENSIONS) | ((df["variant"] == "adptvfedconv") & (df["cut"] == "2C+1M")))
            & df["seed"].isin(ext_seeds)]
    return _table(df, table="extensions", profile=profile)


def curves(recs: Sequence[dict[str, Any]], variants: Sequence[str] = ("adptvfedconv", "centralized",
                                                                       "noncooperation")) -> pd.DataFrame:
    """Fig. 3's data: test accuracy (%) per epoch, one row per (variant, seed, epoch)."""
    rows = []
    for r in recs:
        c = r["config"]
        if c["variant"] in variants and (c["variant"] == "centralized" or c["cut"] == "2C+1M"):
            rows += [{"variant": c["variant"], "label": LABELS[c["variant"]], "seed": c["seed"],
                      "epoch": i + 1, "accuracy_pct": 100 * a} for i, a in enumerate(r["curve"])]
    return pd.DataFrame(rows, columns=["variant", "label", "seed", "epoch", "accuracy_pct"])


def plot_fig3(curve: pd.DataFrame, table: pd.DataFrame) -> plt.Figure:
    """Test accuracy per epoch (mean, band min..max over seeds), the paper's final one dashed."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    paper = table[table["metric"] == "top1_accuracy_pct"].set_index("method")["paper_value"]
    for lab, g in curve.groupby("label", sort=False):
        m = g.groupby("epoch")["accuracy_pct"].agg(["mean", "min", "max"])
        line, = ax.plot(m.index, m["mean"], marker="o", label=f"{lab} (ours)")
        ax.fill_between(m.index, m["min"], m["max"], color=line.get_color(), alpha=0.2)
        if lab in paper and not pd.isna(paper[lab]):
            ax.axhline(paper[lab], ls="--", color=line.get_color(), lw=1, label=f"{lab} (paper, final)")
    ax.set(xlabel="epoch (stage 3 for AdptVFedConv, stage 1 for Non-cooperation)", ylabel="test accuracy (%)",
           title="CIFAR-10", ylim=(0, 100))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole: no 1.5, 2.5 ticks
    if len(curve):
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    fig.tight_layout()
    return fig


def plot_fig4(table: pd.DataFrame) -> plt.Figure:
    """Accuracy per cut (ours and the paper's) and the upload each cut costs a client."""
    acc = table[table["metric"] == "top1_accuracy_pct"]
    up = table[table["metric"] == "upload_bytes_per_sample_per_client"].set_index("setting")["value"]
    cuts = [s.removeprefix("extractor=") for s in acc["setting"]]
    x = np.arange(len(cuts))
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.errorbar(x, acc["value"], yerr=acc["std"].fillna(0), marker="o", capsize=3, label="ours (mean ± std)")
    ax.plot(x, acc["paper_value"], marker="s", ls="--", label="paper")
    ax.set(xticks=x, xticklabels=cuts, xlabel="client feature extractor", ylabel="test accuracy (%)",
           title="CIFAR-10", ylim=(0, 100))
    ax2 = ax.twinx()
    ax2.bar(x, [up.get(f"extractor={c}", np.nan) / 1024 for c in cuts], alpha=0.2, color="0.3",
            label="upload per sample per client (KiB)")
    ax2.set_ylabel("upload per sample per client (KiB)")
    ax2.grid(False)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------ communication


def communication(recs: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Per client over one run: what AdptVFedConv sends and receives (model transfer, feature maps
    per extraction: every stage-3 epoch or once) against the raw tiles and parameter-sharing FL
    of the same VGG-16 (one round per epoch), at the recorded run's scale and the paper's."""
    out = []
    r = next((r for r in recs if r["config"]["variant"] == "adptvfedconv" and r["config"]["cut"] == "2C+1M"), None)
    scales = [("this run (recorded)", r["costs"], r["n_train"], len(r["curve"]))] if r else []
    scales.append(("paper scale (priced)", cost_model(AdptVFedConvConfig(width=1.0), n_train=50_000), 50_000, 60))
    for scale, costs, n, epochs in scales:
        fmap = costs["feature_map_bytes_per_sample"] * n
        fl = costs["fl_bytes_per_round_per_client"]
        transfer = costs.get("model_transfer_bytes_per_client", costs["model_transfer_bytes"])
        rows = {
            "AdptVFedConv, maps re-extracted every epoch (ours, default)": transfer + fmap * epochs,
            "AdptVFedConv, maps sent once (Algorithm 1)": transfer + fmap,
            "raw tiles, sent once": costs["raw_tiles_bytes_per_client"],
            "parameter-sharing FL of the same VGG-16, one round per epoch": (fl["upload"] + fl["download"]) * epochs,
            "parameter-sharing FL, one round": fl["upload"] + fl["download"],
        }
        if scale.startswith("this run"):
            # the ledger's count of what this client actually sent in training
            first = costs["per_client"][min(costs["per_client"])]
            rows["AdptVFedConv, ledger (this client's training traffic)"] = (
                first["model_transfer_bytes"] + first["upload_bytes_train"])
        for what, b in rows.items():
            out.append({"scale": scale, "n_train": n, "epochs": epochs, "what": what, "MiB": b / 2**20,
                        "x_raw_tiles": b / costs["raw_tiles_bytes_per_client"]})
    return pd.DataFrame(out)


def communication_words(table: pd.DataFrame) -> str:
    """:func:`communication` worded: per scale, how many times its raw tiles a client sends."""
    def times(x: float) -> str:
        return f"{x:.3g}" if x < 100 else f"{x:,.0f}"

    out = []
    for scale, g in table.groupby("scale", sort=False):
        adpt = g[g["what"].str.startswith("AdptVFedConv, maps")]["x_raw_tiles"]
        fl = g[g["what"].str.startswith("parameter-sharing FL")]["x_raw_tiles"]
        if adpt.empty:
            continue
        more = " (more than its raw tiles however the maps are sent)" if adpt.min() > 1 else ""
        side = f", with parameter-sharing FL {times(fl.min())}–{times(fl.max())} times" if len(fl) else ""
        out.append(f"{scale}: with AdptVFedConv a client sends {times(adpt.min())}–{times(adpt.max())} "
                   f"times its raw tiles{more}{side}")
    return ("; ".join(out) + ".") if out else "No run recorded yet."


def compute(recs: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """Forward MACs per sample: a client's extractor on its tile against the whole VGG-16 on the
    image, at the recorded width and the paper's."""
    ours = {}  # each cut's first recorded costs
    for r in recs:
        if r["config"]["variant"] == "adptvfedconv":
            ours.setdefault(r["costs"]["cut"], r["costs"])
    paper = {cut: cost_model(AdptVFedConvConfig(width=1.0, cut=cut)) for cut in sorted(ours, key=CUTS.index)}
    rows = [{"scale": scale, "cut": cut, "extractor_macs_per_tile": c["extractor_macs_per_tile"],
             "centralized_macs_per_image": c["centralized_macs_per_image"],
             "ratio": c["extractor_macs_per_tile"] / c["centralized_macs_per_image"]}
            for scale, costs in (("this run", ours), ("paper's VGG-16", paper)) for cut, c in costs.items()]
    return pd.DataFrame(rows, columns=["scale", "cut", "extractor_macs_per_tile", "centralized_macs_per_image", "ratio"])


# ------------------------------------------------------------------------------ claims


def _pairs(records: claims.Records, a: tuple[str, str], b: tuple[str, str]) -> pd.DataFrame:
    """Final accuracy of ``a`` minus ``b`` (each a variant and cut) per seed (:func:`vflkit.claims.paired`)."""
    df = runs_frame(STUDY.recorded_runs(records))
    df["row"] = df["variant"] + "@" + np.where(df["variant"] == "centralized", "", df["cut"])
    df["dataset"] = "CIFAR-10"
    # a run near chance, or below Non-cooperation (each client alone: the Local of this paper),
    # decides nothing (claims.paired's gate)
    return claims.paired(df, by="row", a=f"{a[0]}@{a[1]}", b=f"{b[0]}@{b[1]}", value="final_pct", cell=["dataset"],
                         chance=CHANCE_PCT, local="noncooperation@2C+1M")


#: Test accuracy (%) at chance on CIFAR-10's 10 classes.
CHANCE_PCT = 10.0


def _order(a: tuple[str, str], b: tuple[str, str], names: tuple[str, str]):
    """"a > b", named ``names`` (:func:`vflkit.claims.ordering`)."""
    return lambda records: claims.ordering(_pairs(records, a, b), a=names[0], b=names[1])


def _within(records: claims.Records, a: tuple[str, str], b: tuple[str, str], lo: float, hi: float, what: str) -> claims.Verdict:
    """"a - b lies in [lo, hi] points" (:func:`vflkit.claims.within`), judged on the paper's model only."""
    # a gap's size belongs to the model and training length: only the paper's model can judge it
    reduced = set(runs_frame(STUDY.recorded_runs(records))["width"]) != {1.0}
    why_not = "measured on a width-reduced VGG-16 (not the paper's model), whose gaps are not the paper's"
    return claims.within(_pairs(records, a, b), what=what, agree=(lo, hi), note=f"; paper {lo:g} to {hi:g}",
                         undecided="the interval straddles the paper's range", why_not=why_not if reduced else "")


def _no_loss(records: claims.Records, a: tuple[str, str], b: tuple[str, str], what: str, margin: float = 1.0) -> claims.Verdict:
    """"a is no worse than b": agree when a loss beyond ``margin`` points is ruled out, disagree
    when a is below b beyond the noise (:func:`vflkit.claims.within`)."""
    return claims.within(_pairs(records, a, b), what=what, agree=(-margin, np.inf), plausible=(0.0, np.inf),
                         note=f"; 'no loss' read as > -{margin:g}", undecided="the noise allows a larger loss")


ADPT = ("adptvfedconv", "2C+1M")
CENTRAL = ("centralized", "")


def _comm_claim(mode: str):
    def check(records: claims.Records) -> claims.Verdict:
        com = communication(STUDY.recorded_runs(records))
        b = com[com["scale"] == "paper scale (priced)"].set_index("what")["MiB"]
        ours = b[mode]
        fl = b["parameter-sharing FL of the same VGG-16, one round per epoch"]
        raw = b["raw tiles, sent once"]
        ev = (f"per client at the paper's scale (60 epochs): {ours:,.0f} MiB against FL's {fl:,.0f} MiB "
              f"(raw tiles: {raw:,.0f} MiB); priced from the architecture; {_ledger_check(com)}")
        return claims.Verdict(claims.AGREE if ours < fl else claims.DISAGREE, ev)
    return check


#: :func:`communication`'s rows that set the recorded run's ledger beside its pricing.
_PRICED, _LEDGER = ("AdptVFedConv, maps re-extracted every epoch (ours, default)",
                    "AdptVFedConv, ledger (this client's training traffic)")


def _ledger_check(com: pd.DataFrame) -> str:
    """Whether the recorded run's ledger gives the bytes priced at its scale (the paper-scale figure rests on it)."""
    run = com[com["scale"] == "this run (recorded)"].set_index("what")["MiB"]
    if _PRICED not in run or _LEDGER not in run:
        return "no run recorded at this profile to check the pricing against its ledger"
    priced, ledger = float(run[_PRICED]), float(run[_LEDGER])
    if np.isclose(ledger, priced, rtol=1e-6):
        return f"the recorded run's ledger gives the bytes priced at its scale ({priced:,.2f} MiB)"
    return (f"the recorded run's ledger gives {ledger:,.2f} MiB against {priced:,.2f} MiB priced at its scale "
            f"({100 * (ledger / priced - 1):+.1f} %)")


CLAIMS: list[claims.Claim] = [
    claims.Claim(PAPER, "Table 2 / Fig. 3", "AdptVFedConv ends within 2.74 points of Centralized VGG-16 on CIFAR-10 (about 3-4 on all datasets)",
                 lambda records: _within(records, CENTRAL, ADPT, 0.0, 4.04, "Centralized - AdptVFedConv")),
    claims.Claim(PAPER, "Table 2 / Fig. 3", "AdptVFedConv is above Non-cooperation",
                 _order(ADPT, ("noncooperation", "2C+1M"), ("AdptVFedConv", "Non-cooperation"))),
    claims.Claim(PAPER, "Sec. 4.2", "by about 25 to 31 points",
                 lambda records: _within(records, ADPT, ("noncooperation", "2C+1M"), 25.0, 31.84, "AdptVFedConv - Non-cooperation")),
    claims.Claim(PAPER, "Table 2", "model transfer beats No model transfer",
                 _order(ADPT, ("no_transfer", "2C+1M"), ("AdptVFedConv", "No model transfer"))),
    claims.Claim(PAPER, "Table 2", "replication padding beats zero padding",
                 _order(ADPT, ("zero_padding", "2C+1M"), ("AdptVFedConv", "Zero-padding mode"))),
    claims.Claim(PAPER, "Table 3 / Fig. 4", "accuracy decreases as the extractor gets deeper (2C+1M > 4C+2M)",
                 _order(ADPT, ("adptvfedconv", "4C+2M"), ("2C+1M", "4C+2M"))),
    claims.Claim(PAPER, "Table 3 / Fig. 4", "adding the first max-pool has no negative impact (2C -> 2C+1M)",
                 lambda records: _no_loss(records, ADPT, ("adptvfedconv", "2C"), "2C+1M - 2C")),
    claims.Claim(PAPER, "Sec. 5", "less communication than parameter-sharing FL (maps sent once, as Algorithm 1)",
                 _comm_claim("AdptVFedConv, maps sent once (Algorithm 1)")),
]

#: Clauses on our variant, shown apart: re-extracting the maps every epoch is our choice (coordinated
#: augmentation, see the trainer); Algorithm 1 sends them once, as the paper's clause is judged.
VARIANT_CLAIMS: list[claims.Claim] = [
    claims.Claim(PAPER, "Sec. 5 (our variant)", "less communication than parameter-sharing FL with the maps "
                 "re-extracted every epoch (vflkit's default, for the augmentation of Sec. 4.1)",
                 _comm_claim("AdptVFedConv, maps re-extracted every epoch (ours, default)")),
]


#: A table laid out as the paper's: rows x metric, ``ours ± std (paper p)``.
side = partial(side_by_side, index=["method", "setting"], columns="metric")


# --------------------------------------------------------------------------- the study's declaration


def pending_cost(runs: Sequence[TilesRun]) -> pd.DataFrame:
    """Pending runs' H100 minutes (:func:`estimated_h100_minutes`), a pre-training shared with a
    pending paper-profile run (or an earlier one of ``runs``) counted once."""
    seen_pre: set[str] = set()
    minutes: dict[str, float] = {}
    for r in [*STUDY.pending_runs("paper"), *runs]:
        pre = r.adpt.key(_PRETRAIN_FIELDS)
        minutes.setdefault(r.key, round(estimated_h100_minutes(r, pretrained=pre in seen_pre), 1))
        if r.variant != "centralized":
            seen_pre.add(pre)
    return pd.DataFrame({"needs": "GPU", "h100_min": [minutes.get(r.key, np.nan) for r in runs], "cpu_h": np.nan})


def beyond(evidence: base.Evidence) -> list[tuple[str, str]]:
    """Findings the paper does not report: communication and computation per client at its scale."""
    found = evidence.first_with_records()
    records = list(found[1].values()) if found else []
    com = communication(records)  # the paper-scale rows are priced from the architecture alone
    paper = com[com["scale"] == "paper scale (priced)"].set_index("what")["MiB"]
    link = evidence.notebook("Edge devices: communication and computation")
    out = [("AdptVFedConv: communication per client, which the paper claims but never measures",
            "At the paper's scale (VGG-16, 50,000 images, 60 epochs; `adptvfedconv.communication`): "
            + "; ".join(f"{what}: {mib:,.0f} MiB" for what, mib in paper.items()) + f" ({link}).")]
    comp = compute(records)
    comp = comp[comp["scale"] == "paper's VGG-16"]
    if len(comp):
        out.append(("AdptVFedConv: what a client computes",
                    "Forward MACs of a client's extractor on its tile over the whole VGG-16 on the image "
                    "(paper's width; `adptvfedconv.compute`): "
                    + ", ".join(f"{r.cut} {r.ratio:.1%}" for r in comp.itertuples()) + f" ({link})."))
    return out


STUDY = register(Study(
    name=PAPER, title="AdptVFedConv", family="tiles", configs=configs, order=5, reference_csv="adptvfedconv.csv",
    cites="li2024adptvfedconv",
    artefacts=(
        Artefact("Table 2", base.groups("table2"), ("table2.*",), lambda g, r, p: table2(r, profile=p), side),
        Artefact("Fig. 3", base.groups("table2"), ("fig3.*",),  # the figure and the curves it plots
                 lambda g, r, p: (plot_fig3(curve := curves(r), table2(r, profile=p)), curve)),
        Artefact("Table 3", base.groups("table3"), ("table3.*",), lambda g, r, p: table3(r, profile=p), side),
        Artefact("Fig. 4", base.groups("table3"), ("fig4.*",),  # the figure and Table 3, which it plots
                 lambda g, r, p: (plot_fig4(t3 := table3(r, profile=p)), t3)),
    ),
    extras=(Artefact("Extensions", base.groups("extensions"), ("extensions.csv",),
                     lambda g, r, p: extensions(r, profile=p), side),),
    describe=lambda run: {"variant": run.variant, "cut": run.adpt.cut, "seed": run.seed},
    claims=CLAIMS, variant_claims=VARIANT_CLAIMS, needs_gpu=needs_gpu, pending_cost=pending_cost, beyond=beyond,
))
