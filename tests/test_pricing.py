"""Counting (:mod:`vflkit.training.counting`: a step's operations and FLOPs, counted by running
it) and pricing (:mod:`vflkit.ops.pricing`: counts times measured rates): FLOPs against the
analytic count, their scaling with a run's length, the measured rates, honest GPU prices, and
--status estimating every pending run. No test times anything."""

from __future__ import annotations

import json
import math

import pytest

from vflkit.methods.base import RunConfig
from vflkit.ops import pricing
from vflkit.training import counting


def _run(**changes):
    base = dict(paper="vfedmh", dataset="mnist", method="local", models=("mlp",) * 4, batch_size=64,
                epochs=1, n_train=640)
    return RunConfig(**{**base, **changes})


#: One time-limited H200 job's measurements: its packed benchmark and a stopped Multi-VFL run.
H200_WINDOW = "device/h200-2026-11-26-window.json"


def _mlp_linears(n_in: int, classes: int = 10) -> list[tuple[int, int]]:
    """The MLP party model's Linear layers (vflkit.models.mlp at EL:PL 1:1, embedding 128)."""
    return [(n_in, 256), (256, 128), (128, 128), (128, classes)]


def test_mlp_step_matches_the_analytic_count():
    """One step of Local with an MLP party model, counted by running the method's step: 2*B*in*out
    per Linear forward, the same again for each weight gradient and for each input gradient but
    the first layer's (the data needs none). It matches to 1 %."""
    b = 64
    layers = _mlp_linears(28 * 7)  # MNIST's width strips of 4 parties: 28 x 7 pixels each
    forward = sum(2 * b * i * o for i, o in layers)
    analytic = forward + forward + (forward - 2 * b * layers[0][0] * layers[0][1])
    assert counting.step_flops(_run(batch_size=b)) == pytest.approx(analytic, rel=0.01)


def test_a_steps_flops_grow_with_its_batch_and_its_operations_do_not():
    """Counted on the CPU at batch 4 and 8: twice the FLOPs, the same operations; the meta
    device's count (shapes only) is the CPU's."""
    run = _run(method="splitnn", models=("cnn",) * 4)
    four, eight = counting.count_step(run, 4), counting.count_step(run, 8)
    assert eight.flops == pytest.approx(2 * four.flops) and eight.ops == four.ops > 50
    assert counting.step_flops(run) == pytest.approx(four.flops / 4 * run.batch_size)


def test_flops_scale_linearly_with_epochs_and_training_size():
    one = counting.run_flops(_run())
    assert one > 0
    assert counting.run_flops(_run(epochs=3)) == pytest.approx(3 * one)
    assert counting.run_flops(_run(n_train=6400)) == pytest.approx(10 * one)
    # n_train None is the dataset's whole training split (MNIST: 60,000), read from no data
    assert counting.train_size(_run(n_train=None)) == 60_000
    assert counting.run_flops(_run(n_train=None)) == pytest.approx(one * 60_000 / 640)


def test_method_factors():
    """C-VFL's Q local iterations cost about Q times a step; VFedMH trains every party's whole
    model (as Agg_VFL), four times Local's one model; SplitNN trains the bottoms and a top."""
    q1 = counting.run_flops(_run(method="c_vfl", options={"local_iterations": 1}))
    q10 = counting.run_flops(_run(method="c_vfl", options={"local_iterations": 10}))
    assert q10 > 5 * q1
    local = counting.run_flops(_run())
    assert counting.run_flops(_run(method="vfedmh")) == pytest.approx(4 * local)
    assert counting.run_flops(_run(method="agg_vfl")) == pytest.approx(4 * local)
    assert counting.run_flops(_run(method="splitnn")) < counting.run_flops(_run(method="agg_vfl"))


def test_criteo_parties_are_counted_from_the_column_partition():
    """Criteo's models check their codes (no meta tensors): counted on a CPU batch of 2, scaled."""
    run = RunConfig(paper="easter", dataset="criteo", method="easter",
                    models=("deepfm", "wide_deep", "cnn_tabular", "deepfm"), n_train=400)
    assert counting.run_flops(run) > 0
    assert counting.run_flops(run.replace(n_train=800)) == pytest.approx(2 * counting.run_flops(run))


def _first_run(paper: str):
    import importlib

    groups = importlib.import_module(f"vflkit.studies.{paper}").configs("quick")
    return next(iter(groups.values()))[0] if isinstance(groups, dict) else groups[0]


def test_multi_vfl_rounds_are_counted():
    """Multi-VFL: a round's batch step costs about three forwards of its label owners' batches
    (the conv layers' backward), and a run grows linearly with its rounds."""
    steps = counting.count_round("mnist", 4, 5)["per_step"]
    forward = counting.count_evaluation("mnist", 4, n_test=counting.OP_COUNT_BATCH)
    assert 2.5 < steps.flops / (5 * forward.flops) < 3.0
    run = _first_run("multi_vfl")
    assert counting.run_flops(run.replace(rounds=2 * run.rounds)) == pytest.approx(2 * counting.run_flops(run), rel=0.05)


def test_other_families_say_why_they_are_not_counted():
    for paper in ("apc_vfl", "adptvfedconv"):
        run = _first_run(paper)
        assert counting.run_flops(run) is None and counting.uncounted(run)


def test_rates_come_from_the_committed_records():
    """FLOP/s per (device kind, family): positive, the median over the committed records of that
    kind (CPU records of many configs; a few H100 records of VFedMH's CIFAR-10 ResNets)."""
    import statistics

    measured = pricing.record_rates()
    assert len(measured[("cpu", "split")]) > 100 and len(measured[("cuda", "split")]) >= 1
    for kind in ("cpu", "cuda"):
        r = pricing.rate(kind, "split")
        assert r is not None and r > 0 and r == statistics.median(measured[(kind, "split")])
    assert pricing.rate("cuda:0", "split") == pricing.rate("cuda", "split")
    assert pricing.rate("cuda", "split") > pricing.rate("cpu", "split")
    assert pricing.rate("cpu", "one_shot") is None  # no FLOP count, no rate


def test_every_pending_vfedmh_paper_run_has_an_estimate(tmp_path, monkeypatch):
    """--status: every pending CPU-sized VFedMH paper run has its minutes here (from its seeds,
    its twin's, its other rates' or its FLOPs), and every run left for a GPU its H100 minutes,
    launch-bound from its op count (every VFedMH setting has one committed)."""
    from vflkit import study

    # an empty record root makes every run pending, whatever is committed (all CPU-sized runs
    # are now), while the estimator still reads the committed records' wall times
    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    table = study.status(["vfedmh"], profile="paper", device="cpu")
    pending = table[table.status == "pending"]
    here, gpu = pending[~pending.needs_gpu], pending[pending.needs_gpu]
    assert len(here) > 100 and here.estimated_min.notna().all()
    assert set(here.estimate) <= {"seeds", "twin seeds", "rate seeds", "flops"}
    assert gpu.h100_min.notna().all() and set(gpu.h100_estimate) <= {"ops", "flops"}
    assert (here.estimated_min > 0).all() and not any(math.isnan(v) for v in gpu.h100_min)


def test_the_studies_calibration_runs_meet_every_measured_row():
    """Each H100 calibration row names one of VFedMH's declared calibration runs, and the
    Multi-VFL run a GPU job stopped is Multi-VFL's; the calibrated rate is their FLOPs over their
    seconds, and a run without an op count is priced at it (never under the FLOP floor)."""
    measured = pricing.measurements(str(pricing.committed_root()))
    calibrated = [m for m in measured if m.kind == "h100" and m.source == "calibration"]
    assert len(calibrated) == 13 and all(m.ops for m in calibrated)
    assert pricing.flop_rate("h100") == pytest.approx(sum(m.flops for m in calibrated) / sum(m.seconds for m in calibrated))
    assert any(type(m.run).__name__ == "MultiVFLConfig" and m.source == "stopped" and not m.alone for m in measured)


@pytest.mark.parametrize("paper", ["vfedmh", "easter"])
def test_status_and_the_report_price_pending_gpu_runs_alike(paper):
    """--status's H100-minutes and the report's pending cell come from pricing.price: the same
    runs, the same total."""
    import re

    from vflkit import reproduction, studies, study

    table = study.status([paper], profile="paper", device="cpu")
    gpu = table[table.needs_gpu & (table.status == "pending")]
    s = studies.get(paper)
    by_key = {r.key: r for r in s.runs("paper")}
    priced = pricing.price(s, [by_key[k] for k in gpu.key])
    assert gpu.h100_min.sum() == pytest.approx(priced.h100_min.round(1).sum())
    text = reproduction.runs_status(paper, "paper")
    got = re.search(r"GPU \((\d+) runs, est\. ([\d,]+) H100 min\)", text)
    assert got, text
    assert int(got[1]) == len(gpu) and int(got[2].replace(",", "")) == round(priced.h100_min.sum())


def _must_not_run(payload, *, device, deadline):
    raise AssertionError("the budget started a run its FLOPs say will not finish")


def test_the_budget_starts_no_run_its_flops_say_will_not_finish(tmp_path, monkeypatch):
    """A pending run with no recorded seed gets its FLOP estimate, and the scheduler keeps it
    pending under a budget shorter than that estimate."""
    import dataclasses

    from vflkit import records, study
    from vflkit.scheduler import schedule

    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    monkeypatch.setattr(records, "record_roots", lambda: [tmp_path])  # no other seed recorded
    task = next(t for t in study.study_tasks("vfedmh", "paper")
                if not t.payload["needs_gpu"] and t.payload["config"]["dataset"] == "mnist")
    (est,) = study.estimate_costs([task], "cpu")
    assert est.payload["cost_source"] == "flops" and est.cost_s > 60
    est = dataclasses.replace(est, fn=_must_not_run)
    summary = schedule([est], device="cpu", budget_minutes=est.cost_s / 60 / 2, executor="serial", progress=False)
    assert summary.pending == [est.key] and not summary.computed


def test_status_marks_unavailable_runs_impossible_not_pending():
    """APC-VFL's MIMIC-III runs (absent data, Study.unavailable) are "impossible here" in --status,
    none of them pending."""
    from vflkit import studies, study

    table = study.status(["apc_vfl"], profile="paper", device="cpu")
    s = studies.get("apc_vfl")
    unavailable = {r.key for r in s.unavailable(s.runs("paper"))}
    assert unavailable and unavailable <= set(table.key)
    assert set(table[table.key.isin(unavailable)].status) == {study.IMPOSSIBLE}


def _cheap_settings():
    """Three VFedMH paper settings whose steps count in a second: C-VFL's MLPs, VFedMH's mixed
    small models, Local's ResNet18."""
    from vflkit.studies import vfedmh

    runs = [c for c in vfedmh.configs("paper")["table2"] if c.dataset == "mnist" and c.seed == 0]
    return [next(c for c in runs if c.method == "c_vfl" and c.models[0] == "mlp"),
            next(c for c in runs if c.method == "vfedmh" and "resnet18" not in c.models),
            next(c for c in runs if c.method == "local" and c.models[0] == "resnet18")]


def test_an_op_count_does_not_depend_on_the_batch_and_the_committed_table_holds_todays():
    """The op count of a step is the same at batch 4 and 16, and equal to the committed table's
    (results/device/op-counts.json): a change of a method's step that the table has not caught
    up with fails here (regenerate: python -m vflkit.ops.pricing --count-ops)."""
    committed = counting._committed()
    for run in _cheap_settings():
        n = counting.count_step_ops(run)
        assert n > 50 and n == counting.count_step_ops(run, batch=16) == pricing.step_ops(run), run.method
        # and its FLOPs, which price a fresh checkout's runs without counting them (counting.COMMITTED)
        flops = counting.count_step(run).flops / counting.OP_COUNT_BATCH
        assert committed[f"step {counting.step_key(run)}"] == pytest.approx(flops, rel=1e-12), run.method


def test_a_packed_cvfl_step_is_counted_and_prices_its_pack():
    """C-VFL's packed step (3 seeds, alike parties stacked) is in the committed table as counted
    today, and a pack of its seeds is priced at one run's time times that ratio: the paper
    profile's three MNIST MLP seeds cost ratio / 3 each; a run without seeds to pack with, and
    a method whose packed step the table does not count, cost their time alone."""
    from vflkit.ops.pricing import pack_cost_s

    cvfl = _cheap_settings()[0]
    ratio = pricing.pack_ratio(cvfl)
    assert ratio == counting.count_step_ops(cvfl, pack=pricing.PACK_COUNTED) / counting.count_step_ops(cvfl)
    assert 0.5 < ratio < 1.0  # four MLPs stacked: fewer operations for 3 runs than for one alone
    seeds = [cvfl.replace(seed=s) for s in range(3)]
    local = _cheap_settings()[2]
    runs = [*seeds, cvfl.replace(seed=0, models=("lenet",) * 4), local, local.replace(seed=1)]
    shares = pricing.packed_shares(runs)
    assert shares == {0: ratio / 3, 1: ratio / 3, 2: ratio / 3}
    assert pricing.pack_ratio(local) is None
    assert pack_cost_s([60.0, 60.0, 60.0], cvfl) == 60.0 * ratio
    assert pack_cost_s([60.0, 60.0], local) == 120.0 and pack_cost_s([60.0, None], cvfl) is None


def test_the_launch_bound_model_predicts_the_h200s_seed_packs():
    """The lent H200's packed C-VFL rows (3 seeds vmapped, each party apart as that code stacked
    them): the gain their op counts predict (K x one run's operations over the packed step's)
    is within 25 % of the gain measured, as for the runs alone (what pack_ratio relies on)."""
    doc = json.loads((pricing.committed_root() / H200_WINDOW).read_text())
    bench = doc["bench_packed"]
    rows = [r for r in bench["rows"] if r["method"] == "c_vfl"]
    assert len(rows) == 2
    k = bench["pack_size"]
    for row in rows:
        setting = counting.bench_setting("c_vfl", row["model"], bench["batch"])
        predicted = k * counting.count_step_ops(setting) / counting.count_step_ops(setting, pack=k, group_parties=False)
        measured = row["vmap_samples_per_s"] / row["alone_samples_per_s"]
        assert abs(predicted / measured - 1) < 0.25, (row["model"], predicted, measured)


def test_every_split_image_paper_setting_has_a_committed_op_count():
    from vflkit import studies

    missing = [f"{s.name}: {r.method} {r.dataset}" for s in studies.studies() if s.family == "split"
               for g in s.groups("paper").values() for r in g
               if r.dataset in counting.IMAGE_METADATA and pricing.step_ops(r) is None]
    assert not missing, f"no op count (python -m vflkit.ops.pricing --count-ops): {missing[:5]}"


def test_the_launch_bound_model_against_what_the_gpus_measured():
    """Op count x seconds per op against each measured step: the H100 calibration's 13 Table II
    settings within 0.3-3x (their FLOP/s spread 5-24 TFLOP/s), and the C-VFL settings the H200
    benchmarked alone within 1.25x, at the H200's own seconds per operation."""
    measured = pricing.measurements(str(pricing.committed_root()))
    per = pricing.op_seconds("h100")
    ratios = [m.ops * per / m.seconds for m in measured if m.kind == "h100" and m.alone and m.ops]
    assert len(ratios) == 13 and all(0.3 < r < 3 for r in ratios)
    bench = json.loads((pricing.committed_root() / H200_WINDOW).read_text())["bench_packed"]
    cvfl = [r for r in bench["rows"] if r["method"] == "c_vfl"]
    assert cvfl
    for row in cvfl:
        setting = counting.bench_setting("c_vfl", row["model"], bench["batch"])
        measured_s = bench["batch"] / row["alone_samples_per_s"]
        assert pricing.step_ops(setting) * pricing.op_seconds("h200") == pytest.approx(measured_s, rel=0.25)


def test_the_sharing_slowdown_is_each_cuda_records_time_over_its_time_alone(tmp_path):
    """sharing_slowdown: a cuda record's wall time over its launch-bound time alone on its GPU
    (named by environment.device_name); CPU records and other GPUs do not count."""
    import json

    run = _cheap_settings()[0]
    alone = pricing.launch_bound_s(run, "h200")
    assert alone and pricing.launch_bound_s(run, "h100") > alone  # the H200 window's host ran ops faster
    folder = tmp_path / "paper" / "vfedmh"
    folder.mkdir(parents=True)
    for name, device, gpu, wall in [("a", "cuda", "NVIDIA H200", 3 * alone), ("b", "cpu", "", 99 * alone),
                                    ("c", "cuda", "NVIDIA A100", 50 * alone)]:
        env = {"device": device, "device_name": gpu}
        (folder / f"{name}.json").write_text(json.dumps({"config": run.to_dict(), "environment": env,
                                                         "wall_time_s": wall, "diverged": None}))
    assert pricing.sharing_slowdown(tmp_path) == pytest.approx(3.0)


def test_a_multi_vfl_pack_is_priced_from_its_counted_rounds(tmp_path):
    """A Multi-VFL pack of k runs takes its round's counted operations (per batch step and once
    a round, k = 1, 2, 8, the line through 2 and 8 between) plus k evaluations, over one run's
    round alone; the study's 42 paper runs are priced as one pack (multi_owner.MAX_RUNS)."""
    from vflkit.studies import multi_vfl
    from vflkit.training.multi_owner import MAX_RUNS

    rows = [{"dataset": "mnist", "n_data_owners": 4, "n_label_owners": 5, "k": k, "per_step": ps, "fixed": fx}
            for k, ps, fx in ((1, 900.0, 600.0), (2, 1000.0, 1500.0), (8, 2800.0, 6000.0))]
    (tmp_path / "device").mkdir()
    (tmp_path / pricing.OP_COUNTS).write_text(json.dumps(
        {"steps": [], "multi_owner": {"rounds": rows, "eval": [{"dataset": "mnist", "n_data_owners": 4,
                                                              "per_message": 70.0}]}}))
    run = next(c for c in multi_vfl.configs("paper") if c.dataset == "mnist")
    n = math.ceil(run.samples_per_owner / run.batch_size)  # 79 batches per label owner
    one = 600 + n * 900 + 10 * 70.0  # 10,000 test images in messages of 1,000
    assert pricing.pack_ratio(run, tmp_path, 1) == 1.0
    assert pricing.pack_ratio(run, tmp_path, 8) == pytest.approx((6000 + n * 2800 + 8 * 700) / one)
    assert pricing.pack_ratio(run, tmp_path, 5) == pytest.approx((3750 + n * 1900 + 5 * 700) / one)
    assert pricing.pack_ratio(run, tmp_path, 12) == pytest.approx((9000 + n * 4000 + 12 * 700) / one)
    assert pricing.pack_ratio(run.replace(dataset="fashion_mnist"), tmp_path, 2) is None
    # where a pack's evaluation was counted, its messages take the pack's count, not k runs' alone
    rows[2]["eval_per_message"] = 300.0
    (tmp_path / pricing.OP_COUNTS).write_text(json.dumps(
        {"steps": [], "multi_owner": {"rounds": rows, "eval": [{"dataset": "mnist", "n_data_owners": 4,
                                                              "per_message": 70.0}]}}))
    pricing._op_table.cache_clear()
    assert pricing.pack_ratio(run, tmp_path, 8) == pytest.approx((6000 + n * 2800 + 10 * 300) / one)
    runs = multi_vfl.configs("paper")
    assert len(runs) == MAX_RUNS == 42
    assert pricing.packed_shares(runs) == {i: pricing.pack_ratio(runs[0], k=42) / 42 for i in range(42)}


@pytest.mark.slow
def test_the_committed_multi_vfl_round_counts_are_todays():
    """The committed Multi-VFL rows (a round alone and two runs packed with their evaluation
    message, one run's evaluation message) equal a count of today's code (regenerate: python -m vflkit.ops.pricing --count-ops)."""
    doc = json.loads((pricing.committed_root() / pricing.OP_COUNTS).read_text())["multi_owner"]
    committed = {r["k"]: {f: r[f] for f in ("per_step", "fixed", "eval_per_message") if f in r} for r in doc["rounds"]
                 if (r["dataset"], r["n_data_owners"], r["n_label_owners"]) == ("mnist", 4, 5)}
    for k in (1, 2):
        got = counting.count_round("mnist", 4, 5, k=k)
        assert committed[k] == {f: float(c.ops) for f, c in got.items()}, k
    committed_eval = {(r["dataset"], r["n_data_owners"]): r["per_message"] for r in doc["eval"]}
    assert committed_eval[("mnist", 4)] == counting.count_evaluation("mnist", 4, n_test=counting.MULTI_VFL_EVAL_BATCH).ops


def test_a_multi_vfl_packs_evaluation_counts_alike_at_any_call_size():
    """count_multi_vfl counts a pack's evaluation message on calls of 2 images (the real message
    of 42 runs would not fit a CPU's memory): the premise, that a call's operations do not
    depend on its size, holds (four runs, one message in four calls, of 8 and of 40 images)."""
    from vflkit.training.multi_owner import RoundPack

    counts = []
    for n_test in (8, 40):
        runs = [counting._multi_vfl_method("mnist", 4, 5, 4, 1, seed=s, n_test=n_test) for s in range(4)]
        pack = RoundPack(runs, stacking="vmap")
        pack.round(1)
        counts.append(counting.count(lambda: pack.evaluate(batch_size=n_test, chunk=n_test // 4)).ops)
    assert counts[0] == counts[1] > 0


def test_a_multi_vfl_pack_ends_its_rounds_and_evaluates_for_all_runs_at_once():
    """The committed counts (results/device/op-counts.json; kept current by the slow test above):
    what a pack of the paper's 42 runs adds once a round (the servers' steps, the averaging) and
    per evaluation message is under a third of what the 42 runs add alone, so a packed round is
    mostly its stacked steps (a pack that ended rounds run by run counted 1.2 times the runs')."""
    doc = json.loads((pricing.committed_root() / pricing.OP_COUNTS).read_text())["multi_owner"]
    for shape in {(r["dataset"], r["n_data_owners"], r["n_label_owners"]) for r in doc["rounds"]}:
        rows = {r["k"]: r for r in doc["rounds"] if (r["dataset"], r["n_data_owners"], r["n_label_owners"]) == shape}
        alone = next(e["per_message"] for e in doc["eval"] if (e["dataset"], e["n_data_owners"]) == shape[:2])
        messages = 10  # 10,000 test images in messages of 1,000
        pack = rows[42]["fixed"] + messages * rows[42]["eval_per_message"]
        assert pack < (42 * (rows[1]["fixed"] + messages * alone)) / 3, shape


def test_a_run_without_recorded_seeds_is_priced_by_its_twin_datasets_seeds(tmp_path, monkeypatch):
    """A FashionMNIST run with no recorded seed of its own is priced by the median wall time of
    the same run's seeds on MNIST (same shapes and sizes), not by its FLOPs; a run whose twin has
    no seed either keeps its FLOP estimate; a seed of its own wins over the twin's."""
    from vflkit import records, study

    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    monkeypatch.setattr(records, "record_roots", lambda: [tmp_path])
    tasks = [t for t in study.study_tasks("vfedmh", "paper") if not t.payload["needs_gpu"]]
    fm = next(t for t in tasks if t.payload["config"]["dataset"] == "fashion_mnist")
    twins = [t for t in tasks if {**t.payload["config"], "dataset": "x", "seed": 0}
             == {**fm.payload["config"], "dataset": "x", "seed": 0} and t.key != fm.key]
    mnist = [t for t in twins if t.payload["config"]["dataset"] == "mnist"]
    assert len(mnist) >= 2
    other = next(t for t in tasks if t.payload["config"]["dataset"] == "fashion_mnist"
                 and t.payload["config"]["models"] != fm.payload["config"]["models"])

    def record(task, wall):
        task.path.parent.mkdir(parents=True, exist_ok=True)
        task.path.write_text(json.dumps({"key": task.key, "profile": "paper", "config": task.payload["config"],
                                         "environment": {"device": "cpu"}, "wall_time_s": wall, "diverged": None,
                                         "finished": "2026-11-26T00:00:00+0000", "final": {}}))

    for t, wall in zip(mnist, (1000.0, 3000.0)):
        record(t, wall)
    est, est_other = study.estimate_costs([fm, other], "cpu")
    assert est.payload["cost_source"] == "twin seeds" and est.cost_s == pytest.approx(2000.0)
    assert est_other.payload["cost_source"] == "flops"
    own = next(t for t in twins if t.payload["config"]["dataset"] == "fashion_mnist")
    record(own, 500.0)
    (est,) = study.estimate_costs([fm], "cpu")
    assert est.payload["cost_source"] == "seeds" and est.cost_s == pytest.approx(500.0)


def test_a_run_without_recorded_seeds_is_priced_by_the_same_run_at_another_learning_rate(tmp_path, monkeypatch):
    """C-VFL's lr 0.05 sensitivity runs have no seed of their own recorded at first: the same
    run's seeds at the defended rate price them (a step costs the same at any rate), not their
    FLOPs; a diverged seed (stopped early) does not count, another architecture's seeds neither,
    and a seed at the run's own rate wins."""
    from vflkit import records, study

    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    monkeypatch.setattr(records, "record_roots", lambda: [tmp_path])
    tasks = [t for t in study.study_tasks("vfedmh", "paper")
             if t.payload["config"]["method"] == "c_vfl" and t.payload["config"]["dataset"] == "cifar10"]
    rates = {t.payload["config"]["lr"] for t in tasks}
    assert len(rates) >= 2, rates  # the defended rate and the sensitivity row
    target = next(t for t in tasks if t.payload["config"]["lr"] == max(rates))
    same_run = lambda t: ({**t.payload["config"], "seed": 0, "lr": 0} ==  # noqa: E731
                          {**target.payload["config"], "seed": 0, "lr": 0})
    other_rate = [t for t in tasks if same_run(t) and t.payload["config"]["lr"] != max(rates)]
    own_rate = [t for t in tasks if same_run(t) and t.payload["config"]["lr"] == max(rates) and t.key != target.key]
    other_model = next(t for t in tasks if not same_run(t) and t.payload["config"]["lr"] != max(rates))
    assert len(other_rate) >= 3 and own_rate

    def record(task, wall, diverged=None):
        task.path.parent.mkdir(parents=True, exist_ok=True)
        task.path.write_text(json.dumps({"key": task.key, "profile": "paper", "config": task.payload["config"],
                                         "environment": {"device": "cpu"}, "wall_time_s": wall, "diverged": diverged,
                                         "finished": "2026-11-26T00:00:00+0000", "final": {}}))

    record(other_model, 99.0)
    (est,) = study.estimate_costs([target], "cpu")
    assert est.payload["cost_source"] == "flops"
    record(other_rate[0], 600.0)
    record(other_rate[1], 1000.0)
    record(other_rate[2], 30.0, diverged={"epoch": 1, "step": 3})
    (est,) = study.estimate_costs([target], "cpu")
    assert est.payload["cost_source"] == "rate seeds" and est.cost_s == pytest.approx(800.0)
    record(own_rate[0], 300.0)
    (est,) = study.estimate_costs([target], "cpu")
    assert est.payload["cost_source"] == "seeds" and est.cost_s == pytest.approx(300.0)


def test_a_runs_seeds_made_on_this_kind_of_cpu_price_it_before_other_machines(tmp_path, monkeypatch):
    """Of a run's recorded seeds, those made on this machine's CPU (name and instruction set)
    set its estimate, and its twin dataset's seeds made here come before its own made elsewhere;
    where none was made here, every seed's wall time counts."""
    import torch

    from vflkit import records, study

    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    monkeypatch.setattr(records, "record_roots", lambda: [tmp_path])
    tasks = [t for t in study.study_tasks("vfedmh", "paper") if not t.payload["needs_gpu"]]
    target = tasks[0]
    seeds = [t for t in tasks if {**t.payload["config"], "seed": 0} == {**target.payload["config"], "seed": 0}
             and t.key != target.key]
    assert len(seeds) >= 2
    here = records.environment_info(torch.device("cpu"))
    elsewhere = {"cpu": "another CPU", "cpu_capability": "AVX2"}

    def record(task, wall, env):
        task.path.parent.mkdir(parents=True, exist_ok=True)
        task.path.write_text(json.dumps({"key": task.key, "profile": "paper", "config": task.payload["config"],
                                         "environment": {"device": "cpu", **env}, "wall_time_s": wall,
                                         "diverged": None, "finished": "2026-11-26T00:00:00+0000", "final": {}}))

    record(seeds[0], 12000.0, elsewhere)
    (est,) = study.estimate_costs([target], "cpu")
    assert est.payload["cost_source"] == "seeds" and est.cost_s == pytest.approx(12000.0)
    this_cpu = {"cpu": here["cpu"], "cpu_capability": here["cpu_capability"]}
    twin_config = {**target.payload["config"], "seed": 0,
                   "dataset": study.TWIN_DATASETS[target.payload["config"]["dataset"]]}
    twin = next(t for t in study.study_tasks("vfedmh", "paper") if {**t.payload["config"], "seed": 0} == twin_config)
    record(twin, 3000.0, this_cpu)
    (est,) = study.estimate_costs([target], "cpu")
    # the twin dataset's seed made here, before the run's own seed made on another CPU
    assert est.payload["cost_source"] == "twin seeds" and est.cost_s == pytest.approx(3000.0)
    record(seeds[1], 2400.0, this_cpu)
    (est,) = study.estimate_costs([target], "cpu")
    assert est.payload["cost_source"] == "seeds"
    assert est.cost_s == pytest.approx(2400.0)  # not the median of the two machines (7200)


def _gpu_paper_runs():
    from vflkit import studies

    return [(s, r) for s in studies.studies() for r in s.runs("paper") if s.needs_gpu(r)]


@pytest.mark.parametrize("kind", ["h100", "h200"])
def test_no_gpu_price_implies_a_rate_above_the_best_measured_on_that_kind(kind):
    """Every paper run left for a GPU that has a price: its FLOPs over its price alone is at most
    the best FLOP/s anything measured on that GPU kind (results/device/)."""
    best = pricing.best_rate(kind)
    assert best and best < 50e12  # a measured rate, not a card's peak
    checked = 0
    for _, run in _gpu_paper_runs():
        got, flops = pricing.alone(run, kind), counting.run_flops(run)
        if got is None or not flops:
            continue
        assert flops / got[0] <= best * (1 + 1e-9), (run.key, flops / got[0] / 1e12)
        checked += 1
    assert checked > 100


def test_no_packed_price_implies_a_rate_above_the_best_measured():
    """A pack's share is priced no faster than the best FLOP/s measured on the kind either:
    Multi-VFL's 42 paper runs, one pack, whose packed count alone would imply far more."""
    from vflkit import studies

    study = studies.get("multi_vfl")
    runs = [r for r in study.runs("paper") if study.needs_gpu(r)]
    priced = pricing.price(study, runs)
    flops = sum(counting.run_flops(r) for r in runs)
    assert priced["h100_min_packed"].notna().all()
    assert flops / (priced["h100_min_packed"].sum() * 60) <= pricing.best_rate() * (1 + 1e-9)


def test_a_price_faster_than_the_best_measured_rate_is_raised_to_the_floor(monkeypatch):
    """Were the launch-bound model to price a run faster than the best measured FLOP/s (here: an
    op time a thousand times too short), its price is the FLOP floor instead, and says so."""
    run = next(r for _, r in _gpu_paper_runs() if pricing.step_ops(r) is not None)
    honest = pricing.alone(run, "h100")
    assert honest is not None
    monkeypatch.setattr(pricing, "op_seconds", lambda kind="h100", root=None: 1e-9)
    seconds, source = pricing.alone(run, "h100")
    assert source == pricing.FROM_FLOPS
    assert seconds == pytest.approx(counting.run_flops(run) / pricing.best_rate("h100"))
    assert counting.run_flops(run) / seconds <= pricing.best_rate("h100") * (1 + 1e-9)


def test_an_h200_is_priced_from_h200_measurements():
    """The H200's own seconds per operation (from its committed benchmarks) price an H200 run;
    an H100 run is priced from the H100's; the launcher's and the scheduler's estimate for a GPU
    kind use that kind's."""
    run = next(r for _, r in _gpu_paper_runs() if pricing.step_ops(r) is not None)
    h100, h200 = pricing.op_seconds("h100"), pricing.op_seconds("h200")
    assert h100 and h200 and h100 != h200
    assert pricing.launch_bound_s(run, "h200") == pytest.approx(pricing.run_ops(run) * h200)
    assert pricing.estimate(run, "h200", "split", lanes=1)[0] == pricing.alone(run, "h200")[0]
    assert pricing.estimate(run, "h100", "split", lanes=1)[0] == pricing.alone(run, "h100")[0]
    assert pricing.estimate(run, "h200", "split", lanes=1)[0] != pricing.estimate(run, "h100", "split", lanes=1)[0]


def test_a_window_is_priced_at_its_own_lane_count():
    """Alone a run takes its time alone; at the lane count the records were made at, the measured
    sharing slowdown; fewer lanes, less; so a 3-lane window prices a run shorter than an 8-lane one."""
    run = next(r for _, r in _gpu_paper_runs() if pricing.step_ops(r) is not None)
    assert pricing.slowdown(1) == 1.0
    assert pricing.slowdown(pricing.SHARED_LANES) == pytest.approx(pricing.sharing_slowdown())
    three, eight = (pricing.estimate(run, "h100", "split", lanes=n)[0] for n in (3, 8))
    assert pricing.alone(run)[0] < three < eight
