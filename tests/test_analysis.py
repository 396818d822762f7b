"""Tests for vflkit.analysis: the convergence rule and bytes to convergence, on hand-made records."""

import math

import pandas as pd
import pytest

from vflkit.analysis import bytes_to_convergence, convergence_epoch, convergence_epochs
from vflkit.errors import ConfigError


def _history(curves, metric="test_accuracy"):
    return [{"epoch": e, "model": m, metric: v, "loss": 0.0, "elapsed_s": float(e)}
            for m, values in curves.items() for e, v in enumerate(values, start=1)]


# active: best 0.900 at epoch 5; 0.896 (epoch 3) is within 0.5 points, 0.890 (epoch 2) is not.
# passive_1: best 0.950 at epoch 4; first within 0.5 points is epoch 4 (0.944 at 3 is 0.6 short).
CURVES = {"active": [0.80, 0.890, 0.896, 0.899, 0.900],
          "passive_1": [0.70, 0.900, 0.944, 0.950, 0.948]}


def test_convergence_epoch_first_within_half_a_point_of_best():
    """e* per model is the first epoch within 0.5 points of its best; the run's e* is the latest."""
    h = _history(CURVES)
    assert convergence_epochs(h) == {"active": 3, "passive_1": 4}
    assert convergence_epoch(h) == 4
    assert convergence_epoch(h, models=["active"]) == 3
    # 1.0 point (the sensitivity check): 0.890 and 0.944 now count.
    assert convergence_epochs(h, tolerance=1.0) == {"active": 2, "passive_1": 3}
    # Exactly best - 0.5 points counts; a curve at its best from the start converges at epoch 1.
    assert convergence_epochs(_history({"a": [0.795, 0.8]})) == {"a": 1}
    assert convergence_epochs(_history({"a": [0.5, 0.5, 0.5]}), tolerance=0) == {"a": 1}


def test_convergence_epoch_errors_and_missing_values():
    """NaN epochs are skipped; unknown metrics or models are errors."""
    h = _history({"a": [float("nan"), 0.7, 0.8]})
    assert convergence_epoch(h) == 3
    with pytest.raises(ConfigError, match="test_auc"):
        convergence_epoch(h, metric="test_auc")
    with pytest.raises(ConfigError, match="no history"):
        convergence_epoch(h, models=["b"])
    with pytest.raises(ConfigError, match="tolerance"):
        convergence_epoch(h, tolerance=-1)


def _record(method="easter", curves=CURVES, per_epoch_bytes=(1000, 1000, 1000, 1000, 1000), **extra):
    per_kind = [{"kind": "embedding", "bytes": 2000}, {"kind": "global_embedding", "bytes": 1000},
                {"kind": "prediction", "bytes": 1000}, {"kind": "loss", "bytes": 1000}]
    return {"config": {"method": method, "dataset": "fashion_mnist", "seed": 0, "options": extra},
            "history": _history(curves),
            "comm": {"per_epoch": [{"epoch": e, "bytes": b, "messages": 1, "rounds": 1}
                                   for e, b in enumerate(per_epoch_bytes, start=1)],
                     "per_kind": per_kind}}


def test_bytes_to_convergence_as_sent_and_float32():
    """Bytes of epochs 1..e*; blinded int64 embeddings (40 % of EASTER's bytes here) count half
    in float32-equivalent: 1000 B an epoch -> 800 B."""
    out = bytes_to_convergence(_record())
    assert out["epoch"] == 4 and out["bytes"] == 4000
    assert out["bytes_float32"] == pytest.approx(4 * 800)
    assert out["mb"] == pytest.approx(4000 / 2**20)
    assert out["value"] == pytest.approx((0.899 + 0.950) / 2) and out["metric"] == "test_accuracy"
    # Plain embeddings (blinding off) and other methods count as sent.
    assert bytes_to_convergence(_record(blinding=False))["bytes_float32"] == 4000
    assert bytes_to_convergence(_record("splitnn"))["bytes_float32"] == 4000
    # A given e*, and the per-link rows when the record has them (exact per epoch and kind).
    assert bytes_to_convergence(_record(), epoch=2)["bytes"] == 2000
    rec = _record(per_epoch_bytes=(10, 10, 10, 10, 10))
    rec["comm"]["per_link"] = [
        {"epoch": e, "kind": k, "sender": "passive_1", "receiver": "active", "messages": 1, "bytes": b, "steps": 1}
        for e in range(1, 6) for k, b in (("embedding", 8), ("prediction", 2))]
    out = bytes_to_convergence(rec)
    assert (out["bytes"], out["bytes_float32"]) == (40, pytest.approx(4 * (4 + 2)))
    with pytest.raises(ConfigError, match="past the record"):
        bytes_to_convergence(_record(), epoch=9)


def test_auc_is_the_default_metric_when_recorded():
    """Criteo records carry test_auc: convergence is then judged on AUC."""
    rec = _record("splitnn", curves={"active": [0.6, 0.7, 0.72]})
    for row, auc in zip(rec["history"], [0.70, 0.75, 0.752]):
        row["test_auc"] = auc
    out = bytes_to_convergence(rec, models=["active"])
    assert out["metric"] == "test_auc" and out["epoch"] == 2 and out["value"] == pytest.approx(0.75)


def test_variant_summary_reads_the_table():
    from vflkit.analysis import variant_summary

    labels = ("a", "b")
    t = pd.DataFrame({"dataset": ["MNIST", "MNIST", "FMNIST"], "seed": [0, 1, 0], "models": ["m"] * 3,
                      "a: final %": [90.0, 91.0, 80.0], "a: e*": [10, 12, 8], "b: final %": [91.0, 93.0, 79.0],
                      "b: e*": [8, 10, 8], "difference (points)": [1.0, 2.0, -1.0]})
    text = variant_summary(t, labels=labels)
    assert text.startswith("On MNIST, b ends +1.50 ± 0.50 points against a over 2 pairs")
    assert "mean e* 11.0 against 9.0 epochs" in text and "on FMNIST, b ends -1.00 points" in text
    assert variant_summary(t.iloc[:0], labels=labels).startswith("No pair")


def test_time_to_a_common_target_tells_apart_runs_that_a_per_run_rule_cannot() -> None:
    """Two runs still rising at their last epoch: the per-run rule (first epoch within 0.5 points
    of the run's own best) gives both the last epoch; timed to 99 % of the better final accuracy
    the faster run gets there first and the slower one never does (censored: NaN)."""
    from vflkit.analysis import metric_curve, to_common_target

    fast = _history({"a": [0.80, 0.86, 0.882, 0.89]})
    slow = _history({"a": [0.60, 0.70, 0.78, 0.85]})
    assert convergence_epochs(fast) == {"a": 4} and convergence_epochs(slow) == {"a": 4}
    timed = to_common_target({"fast": metric_curve(fast), "slow": metric_curve(slow)})
    assert timed["fast"][0] == timed["slow"][0] == pytest.approx(0.99 * 0.89)
    assert timed["fast"][1] == 3 and math.isnan(timed["slow"][1])
    with pytest.raises(ConfigError, match="at least one final metric that is a number"):
        to_common_target({"nan": pd.Series([0.5, float("nan")], index=[1, 2])})
    two = pd.DataFrame([{"epoch": e, "model": m, "test_accuracy": v}
                        for e, (a, b) in enumerate([(0.5, 0.7), (0.8, 0.9)], 1) for m, v in (("p", a), ("q", b))])
    assert metric_curve(two).tolist() == pytest.approx([0.6, 0.85])  # the models' mean per epoch
    assert metric_curve(two, models=["q"]).tolist() == pytest.approx([0.7, 0.9])


def test_to_common_target_times_each_curve_to_its_cells_target() -> None:
    """Each cell's target is 99 % of the best final among its curves; a curve that never reaches it is NaN."""
    from vflkit.analysis import to_common_target

    def curve(*values: float) -> pd.Series:  # epoch -> metric
        return pd.Series(values, index=range(1, len(values) + 1))

    timed = to_common_target({("x", "a"): curve(0.5, 0.9), ("x", "b"): curve(0.2, 0.5), ("y", "a"): curve(0.4, 0.5)},
                             cell=lambda key: key[0])
    assert timed[("x", "a")] == (pytest.approx(0.99 * 0.9), 2) and timed[("y", "a")] == (pytest.approx(0.495), 2)
    assert math.isnan(timed[("x", "b")][1])  # never within the run
    one = to_common_target({"a": curve(0.5, 0.9), "b": curve(0.2, 0.5)})  # one cell by default
    assert one["b"][0] == one["a"][0] == pytest.approx(0.891)


def test_a_run_at_chance_to_the_end_is_listed_as_collapsed_and_a_stopped_one_as_stopped() -> None:
    """A run that ends below the chance line has collapsed from the epoch after its last one above it
    (its first epoch when never above); a run that stopped at a NaN loss is listed as stopped."""
    from vflkit.analysis import collapsed_epoch, diverged_runs

    def record(accs, diverged=None):
        return {"config": {"dataset": "mnist", "method": "c_vfl", "models": ["cnn", "cnn"]},
                "models": {"active": "cnn", "passive_1": "cnn"}, "diverged": diverged,
                "history": _history({"active": accs, "passive_1": [0.9] * len(accs)})}

    assert collapsed_epoch(record([0.8, 0.9, 0.9]), at_chance_pct=15) is None
    assert collapsed_epoch(record([0.8, 0.138, 0.10]), at_chance_pct=15) == 2  # 13.8 %: at chance already
    assert collapsed_epoch(record([0.10, 0.12, 0.10]), at_chance_pct=15) == 1  # never above chance
    assert collapsed_epoch(record([0.10, 0.12, 0.238]), at_chance_pct=15) is None  # weak, not collapsed
    assert collapsed_epoch(record([0.10, 0.12, 0.238]), at_chance_pct=25) == 1
    stopped = record([0.8, 0.1], diverged={"epoch": 2, "step": 7})
    assert collapsed_epoch(stopped, at_chance_pct=15) is None
    listed = diverged_runs([record([0.8, 0.9]), record([0.8, 0.1, 0.1]), stopped], at_chance_pct=15)
    assert listed.to_dict("records") == [
        {"dataset": "mnist", "method": "c_vfl", "models": "cnn/cnn", "how": "collapsed", "epoch": 2, "batch": None},
        {"dataset": "mnist", "method": "c_vfl", "models": "cnn/cnn", "how": "stopped", "epoch": 2, "batch": 7}]


def test_the_bf16_check_pairs_each_bf16_run_with_its_fp32_twin_and_decides_by_the_seeds_mean() -> None:
    """Per seed, the bf16 run's accuracy beside its fp32 twin's (NaN where not recorded); the verdict
    waits for every seed of both, then takes bf16 when the bf16 mean lies inside the fp32 range."""
    from vflkit.analysis import bf16_check, bf16_verdict
    from vflkit.methods import RunConfig

    runs = [RunConfig(paper="demo", dataset="mnist", method="local", models="cnn", seed=s, precision="bf16")
            for s in range(3)]

    def records(fp32, bf16):
        return [{"key": c.replace(precision=p).key, "final": {"active": {"test_accuracy": a / 100}},
                 "environment": {"device_name": "GPU"}, "wall_time_s": 90.0}
                for c, f, b in zip(runs, fp32, bf16) for p, a in (("fp32", f), ("bf16", b)) if a is not None]

    table = bf16_check(runs, records([99.0, 99.2, 99.1], [99.1, None, 99.0]))
    assert table["seed"].tolist() == [0, 1, 2] and table["bf16 accuracy (%)"].isna().tolist() == [False, True, False]
    assert table["fp32 device"].tolist() == ["GPU"] * 3
    assert table["bf16 wall (s)"].isna().tolist() == [False, True, False]
    assert bf16_verdict(table, "the cell") == (None, "bf16 check (the cell): not decided, 2 of 3 bf16 and 3 of 3 fp32 "
                                                     "seeds recorded; fp32 stays the default")
    inside = bf16_verdict(bf16_check(runs, records([99.0, 99.2, 99.1], [99.3, 98.9, 99.1])), "the cell")
    assert inside[0] == "bf16" and "mean 99.10 %" in inside[1]
    outside = bf16_verdict(bf16_check(runs, records([99.0, 99.2, 99.1], [98.9, 98.8, 99.0])), "the cell")
    assert outside[0] == "fp32" and "outside the fp32 seeds' range 99.00-99.20 %" in outside[1]


def test_recorded_pairs_keeps_a_variant_only_with_its_standard_run_recorded() -> None:
    from vflkit.analysis import recorded_pairs
    from vflkit.methods import RunConfig

    standard = [RunConfig(paper="demo", dataset="mnist", method="vfedmh", models="cnn", seed=s) for s in range(3)]
    variants = [c.replace(options={"blinding": False}) for c in standard]
    records = {c.key: {} for c in [*variants, *standard[:2]]}  # seed 2's standard run not recorded yet
    assert recorded_pairs(variants, records) == list(zip(variants[:2], standard[:2]))
    assert recorded_pairs(variants, {}) == []


def test_arch_metric_averages_the_party_models_holding_each_architecture() -> None:
    from vflkit.analysis import arch_metric

    record = {"models": {"active": "cnn", "passive_1": "mlp", "passive_2": "cnn"},
              "final": {"active": {"test_accuracy": 0.9}, "passive_1": {"test_accuracy": 0.8, "test_auc": 0.7},
                        "passive_2": {"test_accuracy": 0.7}}}
    assert arch_metric(record) == {"cnn": pytest.approx(80.0), "mlp": pytest.approx(80.0)}
    auc = arch_metric(record, "test_auc")  # a metric a party lacks is NaN
    assert auc["mlp"] == pytest.approx(70.0) and math.isnan(auc["cnn"])
