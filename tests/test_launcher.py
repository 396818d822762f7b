"""Tests for vflkit.ops.launcher: the GPU window plan, its calls, and the record-return path."""

import dataclasses
import json
import tarfile
from pathlib import Path

import pytest

from vflkit.ops import launcher, machines, windows as L
from vflkit.records import checkpoint_path, record_path
from vflkit.studies import multi_vfl

MIB = 2**20


def _record(run, profile="paper"):
    """A whole record of ``run`` (envelope, config and final scores), as the record store writes it."""
    return {"key": run.key, "profile": profile, "config": run.to_dict(), "environment": {"device": "cuda"},
            "finished": "2026-11-26T00:00:00+0000", "wall_time_s": 1.0, "peak_memory_mb": 1.0,
            "peak_memory_kind": "cuda", "diverged": None, "final": {"accuracy": 0.5}}


def _run(paper, key, cost, priority, artefacts=("Table II",)):
    return L.GpuRun(key=key, paper=paper, family="split", label=key, config={"dataset": "mnist"},
                    priority=priority, artefacts=artefacts, cost_s=cost)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Multi-VFL's paper runs against a results folder holding one valid record of them."""
    results = tmp_path_factory.mktemp("results")
    run = multi_vfl.configs("paper")[0]
    path = record_path(run, "paper", results)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(_record(run)))
    pending, recorded = L.pending_gpu_runs("paper", results=results, papers=["multi_vfl"])
    return run, pending, recorded, results


@pytest.fixture
def placeholder_rate(monkeypatch):
    """Multi-VFL priced at a placeholder FLOP rate, as before a GPU measured it: at its measured
    price no run fits a window, and these tests exercise the windows' mechanics."""
    from vflkit.ops import pricing

    alone = pricing.alone
    monkeypatch.setattr(pricing, "alone", lambda run, *a, **k: None if type(run).__name__ == "MultiVFLConfig"
                        else alone(run, *a, **k))
    # twice the placeholder rate: some runs then fit the room a window's benchmark leaves
    monkeypatch.setitem(L.PLACEHOLDER_RATES, "multi_owner", 2 * L.PLACEHOLDER_RATES["multi_owner"])


def test_committed_records_are_skipped(planted):
    """A GPU run with a whole record is not planned; every other GPU run of the study is pending."""
    run, pending, recorded, _ = planted
    assert recorded == [run.key]
    assert run.key not in {r.key for r in pending}
    assert len(pending) == len(multi_vfl.configs("paper")) - 1


def test_plan_accounts_for_every_pending_run_within_the_limits(planted, placeholder_rate):
    """Each pending run is planned or listed as not fitting with a reason; no call overruns its
    limit, its carry or its command length, and every window ends before its deadline."""
    _, pending, _, _ = planted
    deadline = 28 * 60
    p = L.plan(deadline, runs=pending, opened={("multi_vfl", "Fig. 2"): 3}, tree=30 * MIB, workers=4)
    planned = [r.key for r in p.planned]
    assert len(planned) == len(set(planned))
    assert sorted(planned + [r.key for r, _ in p.not_fitting]) == sorted(r.key for r in pending)
    assert all(why for _, why in p.not_fitting)
    assert p.windows, "some Multi-VFL runs fit a 28-minute window at the placeholder rate"
    for w in p.windows:
        assert w.end_s <= deadline
        assert sum(c.est_s for c in w.calls) + L.DEFAULT_MACHINE.start_s <= deadline + L.DEFAULT_MACHINE.call_limit_s
        for c in w.calls:
            assert c.wait_s + 60 <= L.DEFAULT_MACHINE.call_limit_s
            assert c.carry_bytes <= L.DEFAULT_MACHINE.carry_bytes
            assert len(c.command) <= L.DEFAULT_MACHINE.command_chars
        assert sum(c.starts for c in w.calls) == 1


def test_a_run_longer_than_a_window_is_listed_with_its_cost():
    """A run whose estimate cannot end inside a window is not planned, and says why with its cost."""
    runs = [_run("vfedmh", "long", 10_000.0, (0,)), _run("vfedmh", "short", 10.0, (1,))]
    p = L.plan(14 * 60, runs=runs, opened={("vfedmh", "Table II"): 1}, tree=30 * MIB, workers=2)
    assert [r.key for r in p.planned] == ["short"]
    (run, why), = p.not_fitting
    assert run.key == "long" and "does not fit a window" in why and "166.7 min" in why


def test_value_order_follows_open_clauses_and_the_studies_own_order():
    """GPU time goes to each study in proportion to its open clauses, each study in its own order,
    and runs that decide no open clause come last."""
    runs = [_run("vfedmh", f"v{i}", 60.0, (i,)) for i in range(4)]
    runs += [_run("easter", f"e{i}", 60.0, (i,)) for i in range(4)]
    runs += [_run("easter", "idle", 1.0, (-1,), artefacts=("Fig. 6",))]
    order = [r.key for r in L.value_order(runs, {("vfedmh", "Table II"): 3, ("easter", "Table II"): 1})]
    assert order[-1] == "idle"
    assert [k for k in order if k.startswith("v")] == ["v0", "v1", "v2", "v3"]
    assert order.index("v2") < order.index("e1")  # three open clauses buy three runs per one of EASTER's


def test_collect_and_receive_return_only_whole_records(tmp_path):
    """A call's records come back whole: a truncated record or a temporary file left by a lane
    killed mid-write never reaches results/."""
    work, out, results = tmp_path / "machine", tmp_path / "out", tmp_path / "results"
    good, broken = multi_vfl.configs("paper")[:2]
    folder = work / "results" / "paper" / "multi_vfl"
    folder.mkdir(parents=True)
    (folder / f"{good.key}.json").write_text(json.dumps(_record(good)))
    (folder / f"{broken.key}.json").write_text(json.dumps(_record(broken))[:200])  # cut off mid-write
    (folder / f".{broken.key}.json.tmp").write_text("{")
    L.collect(work, out)
    with tarfile.open(out / "records.tar.gz") as tar:
        assert not any(n.endswith(".tmp") for n in tar.getnames())
    taken, refused = L.receive(out, results)
    assert taken == [good.key]
    assert len(refused) == 1 and broken.key in refused[0]
    assert record_path(good, "paper", results).exists()
    assert not record_path(broken, "paper", results).exists()
    assert sorted(p.name for p in results.rglob("*") if p.is_file()) == [f"{good.key}.json"]


def test_chunks_fit_beside_the_tree(tmp_path):
    """Data is cut into per-call chunks that fit the carry limit, the first one beside the wheels,
    and the machine reassembles each file and checks its sha256."""
    files = {"a.bin": bytes(range(256)) * 1000, "b.bin": b"x" * 70_000}
    for name, blob in files.items():
        (tmp_path / name).write_bytes(blob)
    listed = [("toy", name, len(blob), True) for name, blob in files.items()]
    chunks = L.chunk_files(listed, 100_000, first_room=50_000)
    assert sum(n for _, _, n in chunks[0]) <= 50_000
    assert all(sum(n for _, _, n in c) <= 100_000 for c in chunks)
    folders = L.write_chunks(listed, chunks, {n: tmp_path / n for n in files}, tmp_path / "carry", 1)
    for folder in folders:
        L.unpack(folder, tmp_path / "machine")
    for name, blob in files.items():
        assert (tmp_path / "machine" / "data" / name).read_bytes() == blob


def test_dry_run_rehearses_a_window_on_the_cpu(planted, tmp_path, placeholder_rate):
    """The CPU rehearsal writes every call, runs the first window's calls with stand-ins, and the
    stand-in records come back through collect and receive."""
    _, pending, _, _ = planted
    p = L.plan(28 * 60, runs=pending[:3], opened={("multi_vfl", "Fig. 2"): 3}, tree=30 * MIB, workers=2)
    rep = L.dry_run(p, tmp_path / "dry")
    executed = [c for c in rep["calls"] if "rc" in c]
    assert executed and all(c["rc"] == 0 for c in executed), executed
    assert rep["received"] and not rep["refused"] and rep["failed_runs"] == {}
    assert (tmp_path / "dry" / "window1" / "call1.sh").exists()
    chunks = json.loads((tmp_path / "dry" / "chunks.json").read_text())
    assert {c["file"] for c in chunks} == set(L.DATA_FILES["mnist"])
    assert "nvidia-cuda-mps-control -d" in rep["mps"]["start"]


def test_a_packed_pack_needs_on_the_machine_what_the_plan_gave_it():
    """A lane starts a packed pack when the time it needs is left, reckoned as the plan reckoned
    it (the rate file's pack speed-up included): before, the lane dropped the speed-up and
    refused packs the plan had fitted."""
    runs = [L.dataclasses.replace(_run("vfedmh", f"s{i}", 100.0, (i,)), config={"dataset": "mnist"}) for i in range(3)]
    pack = L.Pack(key="packed:0", runs=runs, packed=True, speedup=2.5)
    p = L.Plan(profile="paper", device_kind="h100", deadline_s=1.0, workers=1,
               windows=[L.Window(index=1, deadline_s=1.0, lanes=[[pack]])], not_fitting=[], recorded=[],
               rates={}, chunk_room=0)
    carried, = p.to_dict()["windows"][0]["lanes"][0]
    assert L.packed_need_s(carried) == pytest.approx(pack.cost_s * L.SAFETY) == pytest.approx(120.0 * L.SAFETY)


def test_the_carry_folder_is_ignored_by_git():
    """What a call carries sits under CARRY_DIR, which git ignores: the device tool carries only
    ignored paths, and the working tree sent with every call must not include it."""
    import subprocess

    root = Path(L.__file__).resolve().parents[1]
    done = subprocess.run(["git", "check-ignore", "-q", f"{L.CARRY_DIR}/plan.json"], cwd=root)
    assert done.returncode == 0, f"{L.CARRY_DIR}/ is not in .gitignore"


def test_runs_packed_together_fit_the_window_their_data_leaves():
    """Runs grouped into one lane's pack are sized to the room a window has once their dataset's
    data calls are made (CIFAR-10: several), not to an empty window's: two CIFAR-10 runs that
    each fit are planned, where before they were packed together beyond that room and both
    listed as not fitting."""
    runs = [L.dataclasses.replace(_run("vfedmh", f"c{i}", 120.0, (i,)), config={"dataset": "cifar10"})
            for i in range(2)]
    p = L.plan(14 * 60, runs=runs, opened={("vfedmh", "Table II"): 1}, tree=30 * MIB, workers=2)
    assert sorted(r.key for r in p.planned) == ["c0", "c1"] and not p.not_fitting
    assert all(w.end_s <= w.deadline_s for w in p.windows)


def test_runs_on_mnist_and_fashion_mnist_pack_together_sized_to_both_datasets():
    """A split run on MNIST and its twin on FashionMNIST (one pack key: they differ in seed and
    dataset alone) are one packed pack, sized to the room of a window that carries both
    datasets; a run on CIFAR-10 packs apart."""
    from vflkit.methods import RunConfig

    base = RunConfig(paper="vfedmh", dataset="mnist", method="splitnn", models=("mlp",) * 4)
    runs = [L.dataclasses.replace(_run("vfedmh", f"r{i}", 60.0, (i,)), config=base.replace(dataset=d, seed=i).to_dict())
            for i, d in enumerate(("mnist", "fashion_mnist", "cifar10"))]
    asked = []

    def room(datasets):
        asked.append(set(datasets))
        return 3600.0

    packs = L.group_packs(runs, max_cost_s=room)
    assert [[r.key for r in p.runs] for p in packs] == [["r0", "r1"], ["r2"]] and packs[0].packed
    assert packs[0].datasets == {"mnist", "fashion_mnist"} and {"mnist", "fashion_mnist"} in asked


def _referenced(command):
    """The carried paths a call's command names (``.launch/...``, globs kept)."""
    import re

    return re.findall(rf"{L.CARRY_DIR}/[^\s;|&]+", command)


@pytest.mark.parametrize("with_wheels", [False, True])
def test_prepare_writes_every_file_the_calls_read(planted, tmp_path, monkeypatch, with_wheels, placeholder_rate):
    """`prepare` leaves under .launch/ every path a window's calls carry or name (plan, chunks and,
    when there are wheels, the wheel folder); without wheels the first call installs none."""
    _, pending, _, _ = planted
    carry = tmp_path / L.CARRY_DIR
    if with_wheels:  # pip's download stands in: no network in a test
        def fake_download(dest, names=L.DEVICE_LACKS):
            dest.mkdir(parents=True, exist_ok=True)
            (dest / "cryptography-50.0.2-cp311-abi3-manylinux_2_34_x86_64.whl").write_bytes(b"w" * 1000)
            return L.wheels_size(dest)
        monkeypatch.setattr(L, "download_wheels", fake_download)
    (carry / "w9c9").mkdir(parents=True)  # a chunk of an earlier plan: must not ride along
    p = L.prepare(28 * 60, carry=carry, wheels=with_wheels, runs=pending[:3], opened={("multi_vfl", "Fig. 2"): 3},
                  tree=30 * MIB, workers=2)
    assert p.windows and not (carry / "w9c9").exists()
    first = p.windows[0].calls[0]
    assert ("whl/*.whl" in first.command) == with_wheels and (f"{L.CARRY_DIR}/whl" in first.carries) == with_wheels
    for w in p.windows:
        for c in w.calls:
            for path in c.carries:
                assert (tmp_path / path).exists(), path
            for path in _referenced(c.command):
                assert list(tmp_path.glob(path)), f"call {c.index} names {path}, which prepare did not write"
    assert json.loads((carry / "plan.json").read_text()) == json.loads(json.dumps(p.to_dict()))
    assert "window 1 call 1: carry=" in L.call_sequence(p)


def test_prepare_refuses_cifar10_unpacked(tmp_path):
    """A window that needs CIFAR-10 is not prepared from an estimate: prepare says to pack it first."""
    runs = [L.dataclasses.replace(_run("vfedmh", "c0", 60.0, (0,)), config={"dataset": "cifar10"})]
    from vflkit.errors import ConfigError

    with pytest.raises(ConfigError, match="pack DIR"):
        L.prepare(14 * 60, carry=tmp_path / L.CARRY_DIR, wheels=False, runs=runs, opened={}, tree=30 * MIB,
                  workers=1, data_root=tmp_path)


def test_every_launcher_command_of_the_calls_parses():
    """Each `python3 -m vflkit.ops.launcher ...` a call runs is accepted by the launcher's own command
    line (an option the machine side does not take, like a dead --workers, fails here), and the
    wheels' site folder sits under the calls' work folder."""
    import shlex

    runs = [_run("vfedmh", f"s{i}", 100.0, (i,)) for i in range(3)]
    p = L.plan(14 * 60, runs=runs, opened={("vfedmh", "Table II"): 1}, tree=30 * MIB, workers=2, wheels_bytes=MIB)
    calls = L.window_calls(p.windows[0], [[("f", 0, 10)]], wheels_bytes=MIB, tree=30 * MIB, work="/w")
    ap = launcher.parser()
    parsed = 0
    for c in calls:
        assert "/tmp/site" not in c.command and "/w/site" in c.command
        for part in c.command.replace("&&", ";").replace("||", ";").split(";"):
            words = shlex.split(part)
            if words[:3] == ["python3", "-m", "vflkit.ops.launcher"]:
                ap.parse_args(words[3:])
                parsed += 1
    assert parsed >= 4  # check, unpack, start, collect
    with pytest.raises(SystemExit):
        ap.parse_args(["start", "plan.json", "--window", "1", "--deadline-in", "60", "--workers", "3"])


def test_receive_refuses_an_odd_entry_alone(tmp_path):
    """A tar entry outside <profile>/<paper>/<key>.json is refused by itself; the whole records
    beside it are still taken."""
    good = multi_vfl.configs("paper")[0]
    src = tmp_path / "src"
    src.mkdir()
    (src / "good.json").write_text(json.dumps(_record(good)))
    (src / "odd.json").write_text("{}")
    out = tmp_path / "out"
    out.mkdir()
    with tarfile.open(out / "records.tar.gz", "w:gz") as tar:
        tar.add(src / "odd.json", arcname="odd.json")
        tar.add(src / "good.json", arcname=f"paper/multi_vfl/{good.key}.json")
    taken, refused = L.receive(out, tmp_path / "results")
    assert taken == [good.key]
    assert len(refused) == 1 and refused[0].startswith("odd.json")


def test_a_packed_pack_that_would_overrun_is_not_started(tmp_path):
    """A lane does not start a packed pack whose need (packed_need_s) ends after the window's
    deadline: a pack has no checkpoints, so it would be lost whole."""
    runs = [{"key": f"s{i}", "paper": "vfedmh", "family": "split", "label": f"s{i}", "config": {"dataset": "mnist"},
             "cost_s": 100.0} for i in range(2)]
    spec = {"profile": "paper", "windows": [{"lanes": [[{"key": "packed:0", "packed": True, "speedup": 2.0,
                                                         "runs": runs}]]}]}
    (tmp_path / "plan.json").write_text(json.dumps(spec))
    need = L.packed_need_s(spec["windows"][0]["lanes"][0][0])
    out = L.lane(tmp_path / "plan.json", 1, 0, work=tmp_path / "machine", device="cpu",
                 deadline=L.time.time() + need - 30)
    assert set(out) == {"s0", "s1"} and all("not started" in v for v in out.values())


def test_a_lane_trains_a_packed_pack_through_the_schedulers_pack_function(tmp_path):
    """A lane's packed pack is computed by vflkit.training.split.compute_pack, the scheduler's
    task function of a pack: each run's record in the machine's results, under its own key,
    with ``execution`` naming the pack."""
    from vflkit.studies import demo

    configs = [c for c in demo.configs("smoke", seeds=(0, 1), overrides={"n_train": 256, "n_test": 128, "epochs": 1})
               if c.method == "local"]
    runs = [{"key": c.key, "paper": "demo", "family": "split", "label": c.key, "config": c.to_dict(), "cost_s": 1.0}
            for c in configs]
    spec = {"profile": "smoke", "windows": [{"lanes": [[{"key": "packed:0", "packed": True, "speedup": 1.0,
                                                         "runs": runs}]]}]}
    (tmp_path / "plan.json").write_text(json.dumps(spec))
    out = L.lane(tmp_path / "plan.json", 1, 0, work=tmp_path / "machine", device="cpu",
                 deadline=L.time.time() + 600)
    assert out == {c.key: "recorded (packed)" for c in configs}
    for c in configs:
        rec = json.loads(record_path(c, "smoke", tmp_path / "machine" / "results").read_text())
        assert rec["key"] == c.key and rec["execution"] == {"packed": 2, "pack": [x.key for x in configs]}


def test_a_missing_data_file_says_what_to_do(tmp_path):
    """A dataset file missing here names VFLKIT_DATA, the variable that points at it."""
    from vflkit.errors import ConfigError

    with pytest.raises(ConfigError, match="Set VFLKIT_DATA"):
        L.data_files({"mnist"}, tmp_path)


def _cvfl_seeds(dataset="mnist"):
    """One C-VFL paper setting of VFedMH's Table II on ``dataset``, its seeds (configs that pack)."""
    from vflkit.studies import vfedmh

    runs = [c for g in vfedmh.configs("paper").values() for c in g if c.method == "c_vfl" and c.dataset == dataset]
    first = runs[0].replace(seed=0).key
    return sorted({c.key: c for c in runs if c.replace(seed=0).key == first}.values(), key=lambda c: c.seed)


def _slow(config, cost, cpu_cost=100 * 60.0):
    """A CPU-sized run taken in as slow (its CPU estimate in ``cpu_cost_s``), priced at ``cost`` on the GPU."""
    return L.GpuRun(key=config.key, paper="vfedmh", family="split", label=f"c_vfl {config.dataset} {config.seed}",
                    config=config.to_dict(), priority=(True, False, config.seed), artefacts=("Table II", "Fig. 3"),
                    cost_s=cost, cpu_cost_s=cpu_cost)


def test_slow_cpu_runs_lead_the_plan_packed_by_seed_within_the_deadline():
    """With slow CPU runs taken in, C-VFL's seeds are planned as one packed pack ahead of the GPU
    runs that come first in the study's own order, and every pack ends, estimate x SAFETY, before
    the window's deadline."""
    seeds = _cvfl_seeds()
    assert len(seeds) >= 2
    gpu = [_run("vfedmh", f"g{i}", 60.0, (False, False, i)) for i in range(3)]
    runs = gpu + [_slow(c, 90.0) for c in seeds]
    deadline = L.DEFAULT_MACHINE.deadline_s
    p = L.plan(deadline, runs=runs, opened={("vfedmh", "Table II"): 2, ("vfedmh", "Fig. 3"): 1}, tree=30 * MIB,
               workers=1)
    assert not p.not_fitting and {r.key for r in p.planned} == {r.key for r in runs}
    first, *rest = p.windows[0].lanes[0]
    assert first.packed and sorted(r.key for r in first.runs) == sorted(c.key for c in seeds)
    # priced as the engine trains it: one packed step (parties stacked) per step, by its op count
    from vflkit.ops import pricing as costs

    assert first.cost_s == pytest.approx(90.0 * costs.pack_ratio(seeds[0])) and first.cost_s < 90.0
    assert p.to_dict()["windows"][0]["lanes"][0][0]["speedup"] == pytest.approx(len(seeds) / costs.pack_ratio(seeds[0]))
    assert all(r.key.startswith("g") for pk in rest for r in pk.runs)
    for w in p.windows:
        for lane in w.lanes:
            at = w.start_s + L.LANE_START_S
            for pk in lane:
                at += pk.cost_s * L.SAFETY
                assert at <= w.deadline_s - L.RETURN_MARGIN_S
    table = L.plan_table(p)
    assert f"packed x{len(seeds)}" in table and "CPU-sized runs taken in as slow" in table


def test_slow_cpu_runs_are_pending_only_when_asked(tmp_path):
    """`pending_gpu_runs` leaves CPU-sized runs out unless asked; asked, it takes in C-VFL's paper
    runs, each with a CPU estimate above the threshold and none that a study sizes for a GPU."""
    without, _ = L.pending_gpu_runs("paper", results=tmp_path, papers=["vfedmh"])
    assert not any(r.slow_cpu for r in without)
    asked, _ = L.pending_gpu_runs("paper", results=tmp_path, papers=["vfedmh"], slow_cpu_min=machines.SLOW_CPU_MIN)
    slow = [r for r in asked if r.slow_cpu]
    assert {c.key for c in _cvfl_seeds()} <= {r.key for r in slow}
    assert all(r.cpu_cost_s > machines.SLOW_CPU_MIN * 60 for r in slow)
    from vflkit.studies.vfedmh import needs_gpu

    assert not any(needs_gpu(L.run_class("split").from_dict(r.config)) for r in slow)
    assert {r.key for r in asked} - {r.key for r in slow} == {r.key for r in without}
    ap = launcher.parser()
    assert ap.parse_args(["plan"]).include_slow_cpu is None
    assert ap.parse_args(["plan", "--include-slow-cpu"]).include_slow_cpu == machines.SLOW_CPU_MIN
    assert ap.parse_args(["dry-run", "--folder", "x", "--include-slow-cpu", "45"]).include_slow_cpu == 45.0


def test_every_pending_run_is_in_a_window_or_needs_an_own_gpu():
    """The plan's summary names the windows needed, the own-GPU hours of the runs that fit none
    (each listed with its estimate and why: a run cannot go on in the next window) and the rate
    assumed; the default window is the default machine's job time less its give-back, and a plan
    for another named machine (a cluster job's wall time) has windows of that machine's length."""
    runs = [_run("vfedmh", "long", 10_000.0, (0,)), _run("vfedmh", "short", 10.0, (1,)),
            L.dataclasses.replace(_run("vfedmh", "unpriced", 0.0, (2,)), cost_s=None, config={"dataset": "mnist", "x": 1})]
    runs = [L.dataclasses.replace(r, cost_source="placeholder") for r in runs]
    p = L.plan(L.DEFAULT_MACHINE.deadline_s, runs=runs[:2], opened={("vfedmh", "Table II"): 1}, tree=30 * MIB, workers=2)
    p.rates = {"split": (2.0e12, "placeholder")}
    assert L.DEFAULT_MACHINE.deadline_s + L.DEFAULT_MACHINE.give_back_s == L.DEFAULT_MACHINE.job_s == 15 * 60
    table = L.plan_table(p)
    assert "needs a longer session (own GPU)" in table
    assert "long (long): 166.7 min" in table and "checkpoint never leaves the GPU machine" in table
    assert "windows needed for what fits: 1, one per short-calls job" in table
    assert "own-GPU hours for the rest: 1 runs, 2.8 run-hours" in table
    assert "rate assumed: split 2.00 TFLOP/s" in table and "not measured" in table
    # runs priced launch-bound name the per-op time and the sharing slowdown, not a FLOP rate
    ops = L.dataclasses.replace(p, windows=[], not_fitting=[(L.dataclasses.replace(runs[0], cost_source="ops"), "x")])
    names = L.rate_names(ops)
    assert len(names) == 1 and names[0].startswith("GPU runs: launch-bound") and "the best measured" in names[0]
    assert "warning" not in table
    assert "warning" in L.plan_table(L.dataclasses.replace(p, deadline_s=28 * 60))
    assert L.own_gpu_s(runs, 2) == (10_010.0, 10_000.0)
    # a cluster job with a wall-time limit (here of 8 h): the long run fits its window, no warning
    wall = L.dataclasses.replace(machines.MACHINES["wall-time"], job_s=8 * 3600)
    p = L.plan(wall.deadline_s, runs=runs[:2], opened={("vfedmh", "Table II"): 1}, tree=30 * MIB, workers=2,
               machine=wall)
    table = L.plan_table(p)
    assert not p.not_fitting and "one per wall-time job" in table and "warning" not in table
    assert all(c.wait_s <= wall.call_limit_s for w in p.windows for c in w.calls)
    assert launcher.parser().parse_args(["plan", "--machine", "wall-time"]).machine == "wall-time"


@pytest.fixture
def quick_plan(monkeypatch):
    """`plan`'s slow stages (finding, pricing, reading the claims: minutes) replaced by one priced run."""
    monkeypatch.setattr(L, "pending_gpu_runs", lambda *a, **k: ([_run("vfedmh", "short", 10.0, (1,))], []))
    monkeypatch.setattr(L, "open_clauses", lambda *a, **k: {("vfedmh", "Table II"): 1})
    monkeypatch.setattr(L, "tree_bytes", lambda: 30 * MIB)


def test_plan_says_each_stage_as_it_goes(quick_plan, monkeypatch, capsys):
    """`python -m vflkit.ops.launcher plan` prints a line per planning stage on stderr, the plan on stdout."""
    monkeypatch.setattr(L, "data_files", lambda *a, **k: [])
    assert launcher.main(["plan", "--deadline-min", "14"]) == 0
    out = capsys.readouterr()
    lines = [line for line in out.err.splitlines() if line.startswith("[launcher] ")]
    assert [line.split(" (")[0] for line in lines[:3]] == [
        "[launcher] 1 pending runs of the paper profile found", "[launcher] 0 runs priced on h100",
        "[launcher] the claims each run could decide read from the records"]
    assert lines[3] == "[launcher] packs priced eagerly: no committed h100 benchmark timed CUDA graphs"
    assert lines[4] == "[launcher] 1 windows laid out, 0 runs left for a GPU of one's own"
    assert "short" in out.out and "pending runs of the paper profile found" not in out.out


def test_plan_without_the_data_is_one_line_and_exit_code_2(quick_plan, monkeypatch, capsys, tmp_path):
    """Without the data (VFLKIT_DATA unset or elsewhere), `plan` ends in one line that says what to
    set, exit code 2, no traceback."""
    monkeypatch.setenv("VFLKIT_DATA", str(tmp_path))
    assert launcher.main(["plan", "--deadline-min", "14"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("vflkit.ops.launcher: ConfigError: ") and "Set VFLKIT_DATA" in err
    assert "Traceback" not in capsys.readouterr().err


def test_a_lane_gates_a_stopped_run_on_what_its_checkpoint_leaves(tmp_path, monkeypatch):
    """A run the deadline stopped resumes on the same machine in a later call: the lane starts it
    when what its checkpoint leaves (here 2 of 20 epochs) fits before the deadline, though the
    whole run would not; without the checkpoint the same run is not started."""
    import torch

    from vflkit.studies import demo

    config = demo.configs("smoke")[0].replace(epochs=20)
    run = {"key": config.key, "paper": "demo", "family": "split", "label": "r", "config": config.to_dict(),
           "cost_s": 100.0}
    spec = {"profile": "smoke", "windows": [{"lanes": [[{"key": "p", "packed": False, "runs": [run]}]]}]}
    (tmp_path / "plan.json").write_text(json.dumps(spec))
    started = []
    monkeypatch.setattr(L, "compute", lambda payload, **kw: started.append(payload["config"]["epochs"]))
    work = tmp_path / "machine"

    def go():
        return L.lane(tmp_path / "plan.json", 1, 0, work=work, device="cpu", deadline=L.time.time() + 60)

    assert "not started" in go()[config.key] and started == []  # 100 s x SAFETY > 60 s
    ckpt = checkpoint_path(record_path(config, "smoke", work / "results"))
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"epoch": 18}, ckpt)
    assert L.left_to_do({**run, "profile": "smoke"}, work / "results") == pytest.approx(0.1)
    assert go()[config.key].startswith("recorded") and started == [20]


def test_a_windows_first_call_benchmarks_the_gpu_and_receive_files_the_rows(tmp_path):
    """On a GPU the first call runs the packed benchmark before the lanes start (the plan counts
    its minutes), writing its rows into $OUT; receive files them under results/device/ by GPU
    kind, where the cost model reads its seconds per operation. A CPU window runs none, and a
    benchmark made on a CPU is not filed."""
    runs = [_run("vfedmh", "short", 10.0, (0,))]
    gpu = L.plan(L.DEFAULT_MACHINE.deadline_s, runs=runs, opened={("vfedmh", "Table II"): 1}, tree=30 * MIB, workers=2)
    cpu = L.plan(L.DEFAULT_MACHINE.deadline_s, "cpu", runs=runs, opened={("vfedmh", "Table II"): 1}, tree=30 * MIB, workers=2)
    first = gpu.windows[0].calls[0]
    assert "vflkit.ops.bench --device cuda --packed" in first.command and "bench.json" in first.command
    assert not any("vflkit.ops.bench" in c.command for w in cpu.windows for c in w.calls)
    assert gpu.windows[0].start_s >= cpu.windows[0].start_s + L.BENCH_S
    # with several data calls it runs detached beside their transfers, the lanes waiting only for the rest
    assert L.bench_wait_s(1) == L.BENCH_S and L.bench_wait_s(2) < L.BENCH_S and L.bench_wait_s(9) == 0
    work = tmp_path / "machine"
    (work / "results").mkdir(parents=True)
    (work / "bench.json").write_text("{}")
    L.collect(work, tmp_path / "out")
    assert (tmp_path / "out" / "bench.json").exists()  # every call returns it, as far as it got
    got = tmp_path / "got"
    got.mkdir()
    row = {"method": "local", "model": "mlp", "alone_samples_per_s": 1.0, "vmap_samples_per_s": 1.0,
           "loop_samples_per_s": 1.0}
    (got / "bench.json").write_text(json.dumps({"device": "CPU (2 cores)", "bench_packed": {"rows": [row]}}))
    assert L.keep_benchmark(got, tmp_path / "results") is None
    (got / "bench.json").write_text(json.dumps({"device": "NVIDIA H200", "bench_packed": {"rows": [row]}}))
    tarfile.open(got / "records.tar.gz", "w:gz").close()  # a call that finished no record yet
    L.receive(got, tmp_path / "results")
    (filed,) = (tmp_path / "results" / "device").glob("h200-*-bench.json")
    assert json.loads(filed.read_text())["bench_packed"]["rows"] == [row]


def test_the_calls_name_the_commit_they_carry(monkeypatch):
    """The copy on the machine has no .git: every call exports the checkout's commit and whether
    its vflkit/ differs, so a window's records name the code that made them."""
    import subprocess

    monkeypatch.delenv("VFLKIT_GIT_COMMIT", raising=False)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(L.__file__).parent).stdout.strip()
    p = L.plan(L.DEFAULT_MACHINE.deadline_s, runs=[_run("vfedmh", "short", 10.0, (0,))], opened={("vfedmh", "Table II"): 1},
               tree=30 * MIB, workers=2)
    for c in p.windows[0].calls:
        assert f"VFLKIT_GIT_COMMIT={head} VFLKIT_GIT_MODIFIED=" in c.command


def test_lanes_capture_their_packs_only_when_the_window_benchmark_says_so(tmp_path, monkeypatch, capsys):
    """A window's lanes get VFLKIT_GRAPHS=auto only when its benchmark's captured steps equal the
    eager pack's (max |dW| within GRAPHS_MAX_DIFF) and run faster (median gain GRAPHS_MIN_GAIN),
    with no failed capture; no benchmark, a difference, a failure or no gain: eager."""
    from vflkit.training.split import GRAPHS_ENV

    def bench(*rows):
        path = tmp_path / "bench.json"
        path.write_text(json.dumps({"bench_packed": {"rows": [
            {"method": m, "model": "mlp", "vmap_samples_per_s": 100.0, **extra} for m, extra in rows]}}))
        return path

    good = {"graphs_samples_per_s": 300.0, "graphs_max_abs_diff": 0.0}
    assert L.graphs_verdict(bench(("c_vfl", good), ("splitnn", good)))[0]
    assert not L.graphs_verdict(tmp_path / "none.json")[0]
    on, why = L.graphs_verdict(bench(("c_vfl", good), ("splitnn", {**good, "graphs_max_abs_diff": 0.01})))
    assert not on and "differ from the eager pack (splitnn mlp by 1.0e-02)" in why
    # within the eager step's own noise (a second eager pack differing by as much): on
    noisy = {**good, "graphs_max_abs_diff": 0.01, "eager_max_abs_diff": 0.008}
    assert L.graphs_verdict(bench(("c_vfl", good), ("splitnn", noisy)))[0]
    on, why = L.graphs_verdict(bench(("c_vfl", good), ("splitnn", {"graphs_error": "RuntimeError: x"})))
    assert not on and "a capture failed in the benchmark (splitnn mlp)" in why
    on, why = L.graphs_verdict(bench(("c_vfl", {**good, "graphs_samples_per_s": 105.0})))
    assert not on and "1.05x" in why
    # start() passes the verdict to the lanes' environment (the lanes themselves are not started here)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"windows": [{"lanes": [[]]}]}))
    seen = []

    class FakePopen:
        def __init__(self, cmd, env, **kw):
            seen.append(env.get(GRAPHS_ENV))
            self.pid = 1

    monkeypatch.setattr(L.subprocess, "Popen", FakePopen)
    monkeypatch.delenv(GRAPHS_ENV, raising=False)
    bench(("c_vfl", good))
    L.start(plan, 1, work=tmp_path, device="cuda", deadline_in=60)
    (tmp_path / "bench.json").unlink()
    L.start(plan, 1, work=tmp_path, device="cuda", deadline_in=60)
    assert seen == ["auto", None]
    assert "the packs run in CUDA graphs" in capsys.readouterr().out


def test_a_window_reserves_the_packs_on_its_data_it_does_not_plan():
    """A window carries, in value order, the packs on its data that it does not plan (one too
    long for a window at the estimated rate, one planned for a later window), never one on data
    it lacks; its last calls collect until the deadline, since its lanes may work until then."""
    mnist = [_run("vfedmh", f"m{i}", 200.0, (i,)) for i in range(4)] + [_run("vfedmh", "long", 3600.0, (9,))]
    other = [L.dataclasses.replace(_run("vfedmh", "c", 60.0, (5,)), config={"dataset": "cifar10"})]
    p = L.plan(14 * 60, runs=mnist + other, opened={("vfedmh", "Table II"): 1}, tree=30 * MIB, workers=1)
    first = p.windows[0]
    assert first.datasets == {"mnist"}
    planned = {r.key for r in first.runs}
    reserved = [r.key for pk in first.reserve for r in pk.runs]
    assert "long" in reserved and not planned & set(reserved) and "c" not in reserved
    later = {r.key for w in p.windows[1:] for r in w.runs if r.dataset == "mnist"}
    assert later and later <= set(reserved)
    carried = p.to_dict()["windows"][0]
    assert [r["key"] for pk in carried["reserve"] for r in pk["runs"]] == reserved
    assert sum(c.est_s for c in first.calls) + L.DEFAULT_MACHINE.start_s >= first.deadline_s - 2 * L.RETURN_MARGIN_S
    assert sum(c.est_s for c in first.calls) + L.DEFAULT_MACHINE.start_s <= first.deadline_s


def _reserve_plan(tmp_path, lanes, reserve):
    """A plan of one window whose lanes and reserve hold one-run packs ``(name, estimated s)``,
    each a demo smoke run told apart by its seed (numbered in order); returns the plan's path and
    the names by seed."""
    from vflkit.studies import demo

    base = demo.configs("smoke")[0]
    names = []

    def pack(key, cost):
        config = base.replace(seed=len(names))
        names.append(key)
        return {"key": key, "packed": False, "speedup": 1.0,
                "runs": [{"key": config.key, "paper": "demo", "family": "split", "label": key,
                          "config": config.to_dict(), "cost_s": cost}]}

    spec = {"profile": "smoke", "windows": [{"lanes": [[pack(k, c) for k, c in lane] for lane in lanes],
                                             "reserve": [pack(k, c) for k, c in reserve]}]}
    (tmp_path / "plan.json").write_text(json.dumps(spec))
    return tmp_path / "plan.json", names


@pytest.fixture
def fake_compute(monkeypatch):
    """study.compute recording which runs it was asked for (no training; each run is told by its
    seed, :func:`_reserve_plan`) and a record check that says a run has a record once it ran."""
    started = []
    monkeypatch.setattr(L, "compute", lambda payload, **kw: started.append(payload["config"]["seed"]))
    monkeypatch.setattr(L, "_recorded", lambda run, results: run["config"]["seed"] in started)
    return started


def test_a_lane_takes_reserve_packs_that_end_before_the_deadline_at_the_measured_speed(tmp_path, fake_compute):
    """Once its own packs are done a lane takes the reserve's packs that end, at the speed the
    window has measured (another lane's run took half its estimate), before the deadline: one
    priced at 30 s (x0.5 x SAFETY = 22.5 s) and, past one of 100 s that would not (75 s > 60),
    one of 20 s; a pack another lane claimed is left to it."""
    work = tmp_path / "machine"
    (work / "status").mkdir(parents=True)
    (work / "status" / "times7.json").write_text(json.dumps([[10.0, 5.0]]))
    assert L.window_speed(work) == pytest.approx(0.5)
    path, names = _reserve_plan(tmp_path, [[]], [("r30", 30.0), ("r100", 100.0), ("taken", 1.0), ("r20", 20.0)])
    assert L._claim(work, "taken")
    out = L.lane(path, 1, 0, work=work, device="cpu", deadline=L.time.time() + 60)
    assert [names[i] for i in fake_compute] == ["r30", "r20"] and len(out) == 2
    assert not L._claim(work, "r30") and L._claim(work, "r100")  # taken by this lane; left free


def test_a_lane_measured_slower_than_planned_starts_no_pack_that_would_overrun(tmp_path, fake_compute):
    """A window whose runs took three times their estimate gates the lane's next planned pack on
    that speed: a 20 s run (x3 x SAFETY = 90 s) is not started 60 s before the deadline, though at
    the plan's rate (30 s) it would be; nor is any reserve pack."""
    work = tmp_path / "machine"
    (work / "status").mkdir(parents=True)
    (work / "status" / "times3.json").write_text(json.dumps([[10.0, 30.0]]))
    path, names = _reserve_plan(tmp_path, [[("p20", 20.0)]], [("r5", 15.0)])
    out = L.lane(path, 1, 0, work=work, device="cpu", deadline=L.time.time() + 60)
    assert fake_compute == [] and list(out.values()) == ["not started: would not finish before the deadline"]
    (work / "status" / "times3.json").unlink()
    out = L.lane(path, 1, 0, work=work, device="cpu", deadline=L.time.time() + 60)
    assert [names[i] for i in fake_compute] == ["p20", "r5"]  # unmeasured: the plan's rate, and the lane times what it ran
    assert json.loads((work / "status" / "times0.json").read_text())[0][0] == pytest.approx(20.0)


def test_a_stand_in_trains_on_the_data_its_window_carries():
    """The rehearsal's stand-in for a FashionMNIST run is a smoke run on FashionMNIST (the only
    data its window carries), keyed as the record store keys it; before, it was the study's first
    smoke run, on MNIST, and every stand-in of such a window failed for want of data."""
    from vflkit.study import run_class, study_tasks

    task = next(t for t in study_tasks("vfedmh", "paper") if t.payload["config"]["dataset"] == "fashion_mnist")
    run = {"key": task.key, "paper": "vfedmh", "family": "split", "config": task.payload["config"], "cost_s": 1.0}
    got = L.stand_in_run(run)
    assert got["profile"] == "smoke" and got["config"]["dataset"] == "fashion_mnist"
    assert run_class("split").from_dict(got["config"]).key == got["key"] != task.key
    assert got["config"].get("precision", "fp32") == "fp32"
    # the bf16 check's stand-in trains bf16 (the rehearsal runs its precision's code)
    check = run_class("split").from_dict(task.payload["config"]).replace(precision="bf16")
    got = L.stand_in_run({**run, "key": check.key, "config": check.to_dict()})
    assert got["config"]["precision"] == "bf16" and got["config"]["dataset"] == "fashion_mnist"
    assert run_class("split").from_dict(got["config"]).key == got["key"]


def test_tree_bytes_counts_whole_blocks(tmp_path):
    """The device tool refused a tree that fitted by bytes but not by disk blocks: each file counts
    as whole 4 KiB blocks, a 1-byte file as one block, an ignored file not at all."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.json").write_text("x")
    (tmp_path / "b.bin").write_bytes(b"\0" * (L.TREE_BLOCK + 1))
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "big").write_bytes(b"\0" * 100_000)
    # a.json: 1 block, b.bin: 2 blocks, .gitignore: 1 block
    assert L.tree_bytes(tmp_path) == 4 * L.TREE_BLOCK


def test_graphs_gain_is_read_from_the_committed_benchmarks():
    """The captured step's gain over the eager vmapped one, per GPU kind, method and model: the
    committed H200 benchmarks' rows, none for a kind without one or for mixed party models."""
    from vflkit.ops import pricing as costs

    rows = [r for p in sorted((costs.committed_root() / "device").glob("h200-*.json"))
            for r in json.loads(p.read_text()).get("bench_packed", {}).get("rows", [])
            if r["method"] == "c_vfl" and r["model"] == "cnn" and r.get("graphs_samples_per_s")]
    assert rows, "the committed H200 benchmark of 2026-11-27 timed C-VFL's captured CNN step"
    import statistics

    want = statistics.median(r["graphs_samples_per_s"] / r["vmap_samples_per_s"] for r in rows)
    assert costs.graphs_gain("c_vfl", ("cnn",) * 4, "h200") == pytest.approx(want) and want > 1
    assert costs.graphs_gain("c_vfl", ("cnn",) * 4, "h100") is None
    assert costs.graphs_gain("c_vfl", ("cnn", "mlp", "cnn", "cnn"), "h200") is None
    assert L.expect_graphs("h200")[0] == "h200" and L.expect_graphs("h100")[0] is None
    assert L.expect_graphs("cpu")[0] is None


def test_packs_priced_with_graphs_are_gated_at_their_eager_gain_without_them(monkeypatch):
    """On a GPU kind whose committed benchmark passed the graphs verdict, a C-VFL seed pack is
    priced at its op-count ratio over the measured graphs gain; plan.json also carries its eager
    gain, at which a lane gates it when its window's own benchmark leaves graphs off."""
    from vflkit.ops import pricing as costs
    from vflkit.training.split import GRAPHS_ENV

    seeds = _cvfl_seeds()
    runs = [_slow(c, 600.0) for c in seeds]
    p = L.plan(L.DEFAULT_MACHINE.deadline_s, "h200", runs=runs, opened={("vfedmh", "Table II"): 2}, tree=30 * MIB,
               workers=1)
    pack = next(pk for w in p.windows for lane in w.lanes for pk in lane)
    gain = costs.graphs_gain(seeds[0].method, seeds[0].models, "h200")
    assert pack.packed and gain and gain > 1
    assert pack.cost_s == pytest.approx(600.0 * costs.pack_ratio(seeds[0]) / gain)
    carried = p.to_dict()["windows"][0]["lanes"][0][0]
    assert carried["eager_speedup"] == pytest.approx(len(seeds) / costs.pack_ratio(seeds[0]))
    assert carried["speedup"] == pytest.approx(carried["eager_speedup"] * gain)
    assert L.packed_need_s(carried, graphs=True) == pytest.approx(pack.cost_s * L.SAFETY)
    assert L.packed_need_s(carried, graphs=False) == pytest.approx(pack.cost_s * gain * L.SAFETY)
    monkeypatch.delenv(GRAPHS_ENV, raising=False)
    assert L.packed_need_s(carried) == L.packed_need_s(carried, graphs=False)  # what start's verdict left off
    monkeypatch.setenv(GRAPHS_ENV, "auto")
    assert L.packed_need_s(carried) == L.packed_need_s(carried, graphs=True)


def test_the_bf16_check_is_planned_first(tmp_path):
    """VFedMH's bf16 check (its PRECISION_CHECK runs, every seed) is pending as GPU runs and
    planned ahead of every other run, slow CPU runs that decide open clauses included: it decides
    how every later run is computed."""
    pending, _ = L.pending_gpu_runs("paper", results=tmp_path, papers=["vfedmh"])
    checks = [r for r in pending if r.precision_check]
    assert sorted(r.config["seed"] for r in checks) == [0, 1, 2]
    assert all(r.config["precision"] == "bf16" and r.leads for r in checks)
    assert not any(r.precision_check for r in pending if r not in checks)
    checks = [dataclasses.replace(r, cost_s=300.0) for r in checks]
    gpu = [_run("vfedmh", f"g{i}", 60.0, (False, False, i)) for i in range(3)]
    runs = gpu + [_slow(c, 90.0) for c in _cvfl_seeds()] + checks
    order = L.value_order(runs, {("vfedmh", "Table II"): 2, ("vfedmh", "Fig. 3"): 1})
    assert {r.key for r in order[:3]} == {r.key for r in checks}
    assert all(r.slow_cpu for r in order[3:3 + len(runs) - len(gpu) - len(checks)])
    # priced by the cost model, all of it fits the first lent window (the check's rule)
    priced, _ = L.cost_runs([r for r in pending if r.precision_check], "h200")
    p = L.plan(L.DEFAULT_MACHINE.deadline_s, "h200", runs=priced, opened={}, tree=30 * MIB, workers=L.DEFAULT_WORKERS)
    assert not p.not_fitting and len(p.windows) == 1


# ----------------------------------------------------------------- the way home refuses bad input (issue 69)


def _one_line_error(capsys) -> str:
    """The one line a refused command printed on stderr (asserting no traceback came with it)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("vflkit.ops.launcher: ")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("damage", ["truncated", "garbled"])
def test_receive_of_a_damaged_archive_is_one_line_naming_it(tmp_path, capsys, damage):
    """A records archive cut short in transfer (gzip's EOFError) or garbled (tarfile's ReadError)
    is one line naming the file and what to do, exit code 2, and nothing is taken."""
    runs = multi_vfl.configs("paper")[:3]
    src, out, results = tmp_path / "src", tmp_path / "out", tmp_path / "results"
    src.mkdir()
    out.mkdir()
    with tarfile.open(out / "records.tar.gz", "w:gz") as tar:
        for run in runs:
            (src / f"{run.key}.json").write_text(json.dumps(_record(run)) + " " * 20_000)
            tar.add(src / f"{run.key}.json", arcname=f"paper/multi_vfl/{run.key}.json")
    blob = (out / "records.tar.gz").read_bytes()
    (out / "records.tar.gz").write_bytes(blob[:len(blob) // 2] if damage == "truncated"
                                         else bytes(range(256)) * 8)
    assert launcher.main(["receive", str(out), "--results", str(results)]) == 2
    line = _one_line_error(capsys)
    assert str(out / "records.tar.gz") in line and "fetch" in line
    assert not results.exists() or not list(results.rglob("*.json"))


@pytest.mark.parametrize("case", ["no folder", "no archive"])
def test_receive_of_the_wrong_folder_is_an_error(tmp_path, capsys, case):
    """A folder that does not exist, or one without records.tar.gz (every call's collect writes
    one), is an error naming the folder, not '0 records taken' with exit code 0."""
    folder = tmp_path / "fetched"
    if case == "no archive":
        folder.mkdir()
        (folder / "status.json").write_text("{}")
    assert launcher.main(["receive", str(folder), "--results", str(tmp_path / "results")]) == 2
    line = _one_line_error(capsys)
    assert str(folder) in line and ("does not exist" if case == "no folder" else "no records.tar.gz") in line


def test_a_damaged_chunk_is_an_error_and_its_part_removed(tmp_path, capsys):
    """A carried chunk whose bytes do not match its manifest's sha256 is an error naming the file
    (unpack's contract), and the damaged .part is removed, so the lanes never start on it; a file
    split across chunks is still whole once its last piece arrives."""
    blob = bytes(range(256)) * 400
    (tmp_path / "a.bin").write_bytes(blob)
    listed = [("toy", "a.bin", len(blob), True)]
    chunks = L.chunk_files(listed, 60_000)
    assert len(chunks) == 2
    folders = L.write_chunks(listed, chunks, {"a.bin": tmp_path / "a.bin"}, tmp_path / "carry", 1)
    machine = tmp_path / "machine"
    assert L.unpack(folders[0], machine) == []  # half there: not complete yet, no error
    piece = folders[1] / "piece0"
    piece.write_bytes(b"\xff" + piece.read_bytes()[1:])  # one byte damaged in transfer
    assert launcher.main(["unpack", str(folders[1]), "--work", str(machine)]) == 2
    line = _one_line_error(capsys)
    assert "a.bin" in line and "sha256" in line and folders[1].name in line
    assert not list((machine / "data").iterdir())  # neither the .part nor what tracked it is left
    for folder in folders:  # carried again, undamaged: whole
        (folder / "piece0").unlink()
    folders = L.write_chunks(listed, chunks, {"a.bin": tmp_path / "a.bin"}, tmp_path / "carry", 1)
    assert L.unpack(folders[0], machine) == [] and L.unpack(folders[1], machine) == ["a.bin"]
    assert (machine / "data" / "a.bin").read_bytes() == blob
    assert sorted(p.name for p in (machine / "data").iterdir()) == ["a.bin"]


def test_a_garbled_manifest_is_one_line_naming_it(tmp_path, capsys):
    """A chunk whose manifest.json is not JSON is one line naming the file, not a JSONDecodeError."""
    folder = tmp_path / "w1c1"
    folder.mkdir()
    (folder / "manifest.json").write_text("{pieces: [")
    assert launcher.main(["unpack", str(folder), "--work", str(tmp_path / "machine")]) == 2
    assert str(folder / "manifest.json") in _one_line_error(capsys)
    assert launcher.main(["unpack", str(tmp_path / "w1c2"), "--work", str(tmp_path / "machine")]) == 2  # not carried
    assert f"no carried chunk at {tmp_path / 'w1c2'}" in _one_line_error(capsys)


def test_a_garbled_rate_file_is_one_line_naming_it(quick_plan, tmp_path, capsys):
    """`plan --rates` with a file that is not JSON (or not an object) names the file, exit code 2."""
    rates = tmp_path / "rates.json"
    for text in ("{flop_per_s: 1", "[1, 2]"):
        rates.write_text(text)
        assert launcher.main(["plan", "--rates", str(rates)]) == 2
        assert str(rates) in _one_line_error(capsys)


def test_plan_of_an_unknown_paper_is_an_error(quick_plan, capsys):
    """`plan --papers nosuch` (a typo) is an error listing the registered studies, not an empty plan."""
    assert launcher.main(["plan", "--papers", "vfedmh,nosuch"]) == 2
    line = _one_line_error(capsys)
    assert "'nosuch'" in line and "vfedmh" in line


@pytest.mark.parametrize("minutes", ["-5", "0", "nan"])
def test_a_deadline_that_is_not_positive_is_an_error(quick_plan, capsys, minutes):
    """`plan --deadline-min -5` is an error saying what a deadline must be, not a plan of no windows."""
    assert launcher.main(["plan", "--deadline-min", minutes]) == 2
    assert "--deadline-min" in _one_line_error(capsys)


def test_a_received_record_says_where_and_when_it_was_received(tmp_path):
    """A record taken from a call's files carries the mark of the machine it was collected on
    (collect's status.json) and when it was received, its key and config unchanged, and it loads
    as the run's record; a record made here has no mark."""
    import platform

    from vflkit import records

    run = multi_vfl.configs("paper")[0]
    work, out, results = tmp_path / "machine", tmp_path / "out", tmp_path / "results"
    folder = work / "results" / "paper" / "multi_vfl"
    folder.mkdir(parents=True)
    (folder / f"{run.key}.json").write_text(json.dumps(_record(run)))
    L.collect(work, out)
    assert json.loads((out / "status.json").read_text())["host"] == platform.node()
    status = json.loads((out / "status.json").read_text())
    (out / "status.json").write_text(json.dumps({**status, "host": "lent-gpu-7"}))
    assert L.receive(out, results) == ([run.key], [])
    rec = records.load_record(run, "paper", results)
    assert rec["received"]["from"] == "lent-gpu-7" and records.received_problem(rec["received"]) is None
    assert rec["key"] == run.key and rec["config"] == run.to_dict()
    assert {k: v for k, v in rec.items() if k != "received"} == _record(run)
    assert "received" not in _record(run)
    (out / "status.json").unlink()  # files collected before collect named its host
    assert L.receive(out, tmp_path / "elsewhere") == ([run.key], [])
    assert records.load_record(run, "paper", tmp_path / "elsewhere")["received"]["from"] == "unknown"
