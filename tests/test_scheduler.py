"""Tests for vflkit.scheduler: parallel runs, budget, locks, and a dask LocalCluster."""

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vflkit import scheduler
from vflkit.errors import ConfigError
from vflkit.scheduler import BudgetExhausted, Task, acquire, lock_path, release, schedule

HERE = Path(__file__).resolve().parent


def toy_run(payload, *, device, deadline):
    """A run of ``payload['epochs']`` epochs of ``payload['epoch_s']`` seconds with a checkpoint
    per epoch; logs each computed epoch so tests can see what was computed twice."""
    path, ckpt = Path(payload["path"]), Path(payload["path"] + ".ckpt")
    first = int(ckpt.read_text()) + 1 if ckpt.exists() else 1
    for epoch in range(first, payload["epochs"] + 1):
        time.sleep(payload["epoch_s"])
        with open(payload["log"], "a") as f:
            f.write(f"{payload['key']} {epoch} {os.getpid()}\n")
        if epoch < payload["epochs"]:
            ckpt.write_text(str(epoch))
            if deadline is not None and time.time() + payload["epoch_s"] > deadline:
                raise BudgetExhausted
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(_record(payload["key"], value=payload["key"] * 2)))
    os.replace(tmp, path)
    ckpt.unlink(missing_ok=True)


def _record(key, profile="smoke", **result):
    """A whole record (the envelope and final scores) of ``key``, as the scheduler requires."""
    from vflkit.records import ENVELOPE

    return {**dict.fromkeys(ENVELOPE), "key": key, "profile": profile, "final": {}, **result}


def dying_run(payload, *, device, deadline):
    """A run whose worker process is killed (kill -9, an OOM kill): every time, or only the
    first time (``payload['once']``, a marker file)."""
    marker = Path(payload["path"] + ".died")
    if not payload.get("once") or not marker.exists():
        marker.write_text("died")
        os.kill(os.getpid(), 9)
    toy_run(payload, device=device, deadline=deadline)


def _tasks(tmp_path, n=4, epochs=2, epoch_s=0.05, cost_s=None):
    log = tmp_path / "log.txt"
    out = []
    for i in range(n):
        key = f"run{i}"
        path = tmp_path / "results" / f"{key}.json"
        out.append(Task(key=key, path=path, fn=toy_run, priority=i, cost_s=cost_s,
                        payload={"key": key, "path": str(path), "epochs": epochs, "epoch_s": epoch_s, "log": str(log)}))
    return out, log


def _scheduler_script(tmp_path, *, n, epochs, epoch_s, workers):
    """A script that schedules :func:`_tasks` on a local pool, for tests that run (and kill)
    a scheduler in a process of its own."""
    script = tmp_path / "go.py"
    script.write_text(
        "import sys; sys.path.insert(0, %r)\n"
        "from pathlib import Path\n"
        "import test_scheduler as ts\n"
        "from vflkit.scheduler import schedule\n"
        "if __name__ == '__main__':  # spawned workers import this file again\n"
        "    tasks, _ = ts._tasks(Path(%r), n=%d, epochs=%d, epoch_s=%r)\n"
        "    print(schedule(tasks, workers=%d, executor='local', progress=False, poll_s=0.2))\n"
        % (str(HERE), str(tmp_path), n, epochs, epoch_s, workers))
    return script


def _computed(log):
    return [tuple(line.split()[:2]) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("executor", ["serial", "local"])
def test_schedule_computes_each_run_once_and_resumes(tmp_path, executor):
    tasks, log = _tasks(tmp_path)
    s = schedule(tasks, workers=2, executor=executor, progress=False)
    assert sorted(s.computed) == [t.key for t in tasks] and not s.failed
    assert all(t.path.exists() for t in tasks)
    assert sorted(_computed(log)) == sorted((t.key, str(e)) for t in tasks for e in (1, 2))
    again = schedule(tasks, workers=2, executor=executor, progress=False)
    assert again.computed == [] and len(again.recorded) == len(tasks)
    assert not list((tmp_path / "results").glob("*.lock"))


def test_budget_pauses_runs_in_flight_and_leaves_the_rest_pending(tmp_path):
    """With a budget, runs in flight checkpoint and stop; runs whose estimate does not fit are
    not started; a later call finishes the paused ones from their checkpoints."""
    tasks, log = _tasks(tmp_path, n=2, epochs=4, epoch_s=1.0)
    s = schedule(tasks, workers=2, executor="local", budget_minutes=2.5 / 60, progress=False)
    assert sorted(s.paused) == ["run0", "run1"] and not s.recorded
    assert all(Path(t.payload["path"] + ".ckpt").exists() for t in tasks)
    s2 = schedule(tasks, workers=2, executor="local", progress=False)
    assert sorted(s2.computed) == ["run0", "run1"]
    epochs = _computed(log)
    assert len(epochs) == len(set(epochs)) == 8, "an epoch was computed twice across the resume"
    big, _ = _tasks(tmp_path / "b", n=1, cost_s=3600)
    s3 = schedule(big, executor="serial", budget_minutes=1, progress=False)
    assert s3.pending == ["run0"] and not big[0].path.exists()
    assert "pending" in str(s3)


@pytest.mark.parametrize("executor", ["serial", "local"])
def test_nothing_starts_after_the_budget_even_without_an_estimate(tmp_path, executor):
    """Runs without a cost estimate must not start once the budget is spent: each would train
    an epoch past it before pausing."""
    tasks, log = _tasks(tmp_path, n=3, epochs=3, epoch_s=1.0)
    s = schedule(tasks, workers=1, executor=executor, budget_minutes=0.5 / 60, progress=False)
    assert s.paused == ["run0"] and sorted(s.pending) == ["run1", "run2"]
    assert _computed(log) == [("run0", "1")]
    assert not any(Path(t.payload["path"] + ".ckpt").exists() for t in tasks[1:])


def test_lock_excludes_a_second_holder_and_stale_locks_are_taken_over(tmp_path):
    record = tmp_path / "r.json"
    assert acquire(record)
    assert json.loads(lock_path(record).read_text())["pid"] == os.getpid()
    # a live holder (this process, seen from a child that asks) keeps the lock
    code = f"from vflkit.scheduler import acquire; from pathlib import Path; print(acquire(Path({str(record)!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    release(record)
    assert not lock_path(record).exists()
    # a lock left by a killed process is stale
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock_path(record).write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename, "time": time.time()}))
    assert scheduler.lock_is_stale(lock_path(record))
    assert acquire(record)
    release(record)


def test_two_concurrent_schedulers_lose_nothing_and_compute_nothing_twice(tmp_path):
    tasks, log = _tasks(tmp_path, n=6, epochs=2, epoch_s=0.3)
    script = _scheduler_script(tmp_path, n=6, epochs=2, epoch_s=0.3, workers=2)
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert all(t.path.exists() for t in tasks)
    epochs = _computed(log)
    assert sorted(epochs) == sorted(set(epochs)) and len(epochs) == 12, epochs


def test_dask_local_cluster_gives_the_same_records_as_the_local_pool(tmp_path, monkeypatch, capsys):
    import bokeh  # noqa: F401  (pinned: dask's dashboard needs it; a dependency, never skipped)
    import dask.distributed  # noqa: F401
    # dask's worker processes import the task function by module name
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    a, _ = _tasks(tmp_path / "a")
    b, _ = _tasks(tmp_path / "b")
    schedule(a, workers=2, executor="local", progress=False)
    s = schedule(b, workers=2, executor="dask", progress=False)
    assert sorted(s.computed) == [t.key for t in b] and not s.failed
    assert [t.path.read_text() for t in a] == [t.path.read_text() for t in b]
    assert re.search(r"dask dashboard: http://\S+:\d+/status", capsys.readouterr().out)


@pytest.mark.parametrize("runs_per_worker, processes", [(None, 1), (1, 3)])
def test_a_worker_computes_run_after_run_unless_told_otherwise(tmp_path, runs_per_worker, processes):
    """One worker, three runs: by default one process computes all three (no torch import per
    run); ``runs_per_worker=1`` gives each run a fresh process."""
    tasks, log = _tasks(tmp_path, n=3, epochs=1, epoch_s=0.01)
    s = schedule(tasks, workers=1, executor="local", progress=False, runs_per_worker=runs_per_worker)
    assert sorted(s.computed) == [t.key for t in tasks]
    pids = {line.split()[2] for line in log.read_text().splitlines()}
    assert len(pids) == processes


def test_bad_arguments_are_clear_errors(tmp_path):
    tasks, _ = _tasks(tmp_path, n=1)
    with pytest.raises(ConfigError, match="runs_per_worker"):
        schedule(tasks, runs_per_worker=0)
    with pytest.raises(ConfigError, match="budget_minutes"):
        schedule(tasks, budget_minutes=0)
    with pytest.raises(ConfigError, match="Invalid executor"):
        schedule(tasks, executor="slurm")


def test_study_runs_on_the_local_pool_and_on_dask_give_the_same_records(tmp_path, monkeypatch):
    """The demo's smoke runs (real MNIST, the split trainer) through the scheduler: a dask
    LocalCluster writes the records the local process pool writes."""
    from vflkit import study

    records = {}
    for executor in ("local", "dask"):
        root = tmp_path / executor
        tasks = study.study_tasks("demo", "smoke", results=root)
        s = schedule(tasks, workers=2, executor=executor, progress=False)
        assert sorted(s.computed) == sorted(t.key for t in tasks) and not s.failed, s.failed
        records[executor] = {t.key: json.loads(t.path.read_text()) for t in tasks}
    strip = lambda r: [{k: v for k, v in row.items() if k != "elapsed_s"} for row in r["history"]]  # noqa: E731
    for key, rec in records["local"].items():
        other = records["dask"][key]
        assert strip(rec) == strip(other) and rec["final"] == other["final"] and rec["comm"]["total"] == other["comm"]["total"]
        assert rec["environment"]["torch_threads"] == other["environment"]["torch_threads"] == 1


def test_study_recomputes_records_older_than_a_commit(tmp_path):
    """``recompute_before`` moves records finished before the commit aside; newer ones stay."""
    from vflkit import study

    root = tmp_path / "r"
    tasks = study.study_tasks("demo", "smoke", results=root)
    old, new = tasks[0].path, tasks[1].path
    for t, finished in ((tasks[0], "2000-01-01T00:00:00+0000"), (tasks[1], "2999-01-01T00:00:00+0000")):
        t.path.parent.mkdir(parents=True, exist_ok=True)
        t.path.write_text(json.dumps(_record(t.key, finished=finished)))
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout.strip()
    study.study_tasks("demo", "smoke", results=root, recompute_before=head)
    assert not old.exists() and old.with_name(old.name + ".old").exists() and new.exists()
    # a file that is not a record (truncated) is moved aside as broken, not a bare JSONDecodeError
    new.write_text("{")
    with pytest.warns(UserWarning, match="not valid JSON.*moved it to .*json.bad"):
        study.study_tasks("demo", "smoke", results=root, recompute_before=head)
    assert not new.exists() and new.with_name(new.name + ".bad").read_text() == "{"
    with pytest.raises(ConfigError, match="not a commit"):
        study.study_tasks("demo", "smoke", results=root, recompute_before="nosuchcommit")


def test_workers_end_when_their_scheduler_is_killed_and_the_run_resumes(tmp_path):
    """kill -9 of the scheduler leaves no worker training unattended (it would record the
    code of a checkout that may have changed); the next scheduler resumes the run."""
    script = _scheduler_script(tmp_path, n=1, epochs=400, epoch_s=0.25, workers=1)
    proc = subprocess.Popen([sys.executable, str(script)])
    log = tmp_path / "log.txt"
    deadline = time.time() + 120
    while not (log.exists() and len(_computed(log)) >= 2) and time.time() < deadline:
        time.sleep(0.1)
    worker = int(log.read_text().splitlines()[-1].split()[2])
    proc.kill()
    proc.wait()
    deadline = time.time() + 15  # the run has 100 s to go: only the watch ends it in time
    while time.time() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.kill(worker, 9)
        pytest.fail(f"worker {worker} still trains 15 s after its scheduler was killed")
    done_before = len(_computed(log))
    tasks, _ = _tasks(tmp_path, n=1, epochs=400, epoch_s=0.001)
    schedule(tasks, workers=1, executor="serial", progress=False)
    assert tasks[0].path.exists()
    assert len(_computed(log)) - done_before < 400  # resumed from the checkpoint, not from epoch 1


def test_a_cpu_leaves_the_runs_a_study_says_need_a_gpu_pending(tmp_path, monkeypatch):
    """On a CPU, compute_pending hands the scheduler no ResNet run (the study's needs_gpu) and
    lists them in the summary; --include-gpu-runs (or a GPU) hands it every run."""
    from vflkit import study
    from vflkit.scheduler import Summary

    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    handed = {}
    monkeypatch.setattr(study, "schedule", lambda tasks, **kw: handed.update(tasks=tasks) or Summary())
    s = study.compute_pending(["vfedmh"], profile="paper", device="cpu", datasets=["mnist"])
    models = [t.payload["config"]["models"] for t in handed["tasks"]]
    assert models and not any(m.startswith("resnet") for ms in models for m in ms)
    every = study.only_datasets(study.study_tasks("vfedmh", "paper"), ["mnist"])
    resnet = {t.key for t in every if any(m.startswith("resnet") for m in t.payload["config"]["models"])}
    assert resnet and set(s.needs_gpu) == resnet and "left for a GPU" in str(s)
    s = study.compute_pending(["vfedmh"], profile="paper", device="cpu", datasets=["mnist"], include_gpu_runs=True)
    assert {t.key for t in handed["tasks"]} == {t.key for t in every} and not s.needs_gpu


def test_study_command_says_which_runs_are_left_for_a_gpu(monkeypatch, capsys):
    """The CLI names the runs left for a GPU and executes no notebook while they are missing."""
    from vflkit import study
    from vflkit.scheduler import Summary

    monkeypatch.setattr(study, "compute_pending", lambda *a, **k: Summary(needs_gpu=["k1", "k2"]))
    monkeypatch.setattr(study, "execute", lambda *a, **k: pytest.fail("a notebook was executed"))
    assert study.main(["--profile", "paper", "--device", "cpu", "notebooks/vfedmh.ipynb"]) == 0
    out = capsys.readouterr().out
    assert "2 runs need a GPU" in out and "--include-gpu-runs" in out and "left for a GPU" in out


def test_study_command_says_which_notebook_it_executes_before_it_starts(monkeypatch, capsys, tmp_path):
    """`make study` prints a line before each notebook (with its last execution time once known)
    and one after it: a notebook that executes for minutes is not silence."""
    from vflkit import study
    from vflkit.scheduler import Summary

    monkeypatch.setattr(study, "compute_pending", lambda *a, **k: Summary())
    monkeypatch.setattr(study, "_durations_path", lambda profile: tmp_path / profile / "durations.json")
    started: list[str] = []

    def execute(nb, **kw):
        started.append(capsys.readouterr().out)  # what was printed before the notebook ran
        return nb

    monkeypatch.setattr(study, "execute", execute)
    argv = ["notebooks/demo.ipynb", "notebooks/vfedmh.ipynb", "--profile", "smoke", "--no-report"]
    assert study.main(argv) == 0
    assert "[study] executing notebooks/demo.ipynb (1 of 2)" in started[0]
    assert "[study] executing notebooks/vfedmh.ipynb (2 of 2)" in started[1]
    assert "notebooks/demo.ipynb executed in" in started[1]
    assert study.last_duration(Path("notebooks/demo.ipynb"), "smoke") is not None
    started.clear()
    assert study.main(argv) == 0
    assert re.search(r"executing notebooks/demo.ipynb \(1 of 2, about \d+ s last time\)", started[0])


def test_a_runs_cost_is_estimated_from_its_other_seeds_on_the_same_kind_of_device(tmp_path, monkeypatch):
    """compute_pending hands the scheduler each pending APC-VFL run with the median wall time of
    its recorded other seeds (CPU records only, on a CPU): the budget then starts no one-shot
    run that cannot finish. A run with no recorded sibling, or with a checkpoint, has no
    estimate; the summary adds up what is left."""
    from vflkit import records, study
    from vflkit.scheduler import Summary

    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    monkeypatch.setattr(records, "record_roots", lambda: [tmp_path])
    every = study.study_tasks("apc_vfl", "quick")
    by_seed = {}
    for t in every:
        by_seed.setdefault(json.dumps({k: v for k, v in t.payload["config"].items() if k != "seed"}, sort_keys=True),
                           []).append(t)
    group = next(g for g in by_seed.values() if len(g) >= 3)
    (a, b, c), other = group[:3], next(t for t in every if t not in group)

    def record(t, wall, device="cpu"):
        t.path.parent.mkdir(parents=True, exist_ok=True)
        t.path.write_text(json.dumps({"key": t.key, "config": t.payload["config"], "wall_time_s": wall,
                                      "environment": {"device": device}}))

    record(a, 100.0)
    record(b, 300.0)
    record(other, 50.0, device="cuda:0")
    handed = {}
    monkeypatch.setattr(study, "schedule", lambda tasks, **kw: handed.update(tasks=tasks) or Summary())
    s = study.compute_pending(["apc_vfl"], profile="quick", device="cpu")
    cost = {t.key: t.cost_s for t in handed["tasks"]}
    assert cost[c.key] == 200.0  # the median of its two recorded seeds
    assert all(cost[t.key] is None for t in by_seed[json.dumps({k: v for k, v in other.payload["config"].items()
                                                                 if k != "seed"}, sort_keys=True)])  # a GPU's time
    assert s.left_estimated_s >= 200.0 and s.left_unestimated > 0
    records.checkpoint_path(c.path).write_text("part-done")
    study.compute_pending(["apc_vfl"], profile="quick", device="cpu")
    assert {t.key: t.cost_s for t in handed["tasks"]}[c.key] is None


@pytest.mark.parametrize("paper", ["vfedmh", "easter"])
def test_runs_are_scheduled_in_the_order_the_issue_asks(paper):
    """Table II for every seed first, then the other artefacts seed by seed, C-VFL at Q = 10 last
    (EASTER's study shares VFedMH's order)."""
    import importlib

    from vflkit import study

    module = importlib.import_module(f"vflkit.studies.{paper}")
    tasks = sorted(study.study_tasks(paper, "paper"), key=lambda t: t.priority)
    costly = [t.payload["config"]["method"] == "c_vfl" and t.payload["config"]["options"].get("local_iterations", 10) > 1
              for t in tasks]
    first_costly = costly.index(True)
    assert all(costly[first_costly:]) and not any(costly[:first_costly])
    head = tasks[:first_costly]
    table2 = {c.key for c in module.configs("paper")["table2"]}
    in_t2 = [t.key in table2 for t in head]
    assert in_t2.index(False) == sum(in_t2), "a run of another artefact came before a Table II run"
    rest_seeds = [t.payload["config"]["seed"] for t in head if t.key not in table2]
    assert rest_seeds == sorted(rest_seeds) and head[0].payload["config"]["method"] == paper


def test_only_datasets_keeps_the_runs_on_those_datasets(tmp_path):
    """--datasets selects a profile's runs by dataset; an unknown name is an error that lists the known ones."""
    from vflkit import study

    tasks = study.study_tasks("easter", "quick", results=tmp_path)
    kept = study.only_datasets(tasks, ["criteo"])
    assert kept and len(kept) < len(tasks)
    assert {t.payload["config"]["dataset"] for t in kept} == {"criteo"}
    with pytest.raises(ConfigError, match="unknown dataset.*criteo_full.*known: .*fashion_mnist"):
        study.only_datasets(tasks, ["criteo_full"])


def test_status_lists_what_is_left_and_computes_nothing(tmp_path, monkeypatch, capsys):
    """``--status`` prints one row per run without a record, each in its state (a live lock:
    running; a dead process's lock: not running; a checkpoint: checkpointed), the runs a CPU
    leaves for a GPU, and a total; it schedules nothing and writes no record."""
    import socket

    from vflkit import records, study

    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    monkeypatch.setattr(records, "record_roots", lambda: [tmp_path])
    monkeypatch.setattr(study, "schedule", lambda *a, **k: pytest.fail("--status scheduled runs"))
    every = study.only_datasets(study.study_tasks("vfedmh", "paper"), ["mnist"])
    here = [t for t in every if not t.payload["needs_gpu"]]
    done, live, dead, part = here[:4]
    done.path.parent.mkdir(parents=True, exist_ok=True)
    done.path.write_text(json.dumps(_record(done.key, "paper", config=done.payload["config"], wall_time_s=60.0,
                                            environment={"device": "cpu"})))
    assert acquire(live.path)
    lock_path(dead.path).write_text(json.dumps({"pid": 2**22 + 7, "host": socket.gethostname(), "time": 0}))
    import torch

    torch.save({"epoch": 1, "key": part.key}, records.checkpoint_path(part.path))  # part-done (a garbage one: L21)

    table = study.status(["vfedmh"], profile="paper", device="cpu", datasets=["mnist"])
    state = dict(zip(table.key, table.status))
    assert done.key not in state and state[live.key] == "running" and state[part.key] == "checkpointed"
    assert state[dead.key] == "pending"  # its process is gone: nobody computes it
    assert set(table.key[table.needs_gpu]) == {t.key for t in every if t.payload["needs_gpu"]}
    assert table.setting.str.len().gt(0).all()

    assert study.main(["--status", "--profile", "paper", "--device", "cpu", "--datasets", "mnist",
                       "notebooks/vfedmh.ipynb"]) == 0
    out = capsys.readouterr().out
    assert f"{len(every) - 1} runs without a record: {len(here) - 1} to compute here" in out
    assert "1 running" in out and "1 checkpointed" in out and live.key in out
    assert sorted(p.name for p in done.path.parent.glob("*.json")) == [done.path.name]


def test_status_without_notebooks_covers_every_study(tmp_path, monkeypatch, capsys):
    from vflkit import records, study

    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    monkeypatch.setattr(records, "record_roots", lambda: [tmp_path])
    monkeypatch.setattr(study, "schedule", lambda *a, **k: pytest.fail("--status scheduled runs"))
    assert study.main(["--status", "--profile", "smoke", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    for paper in study.STUDY_FAMILY:
        assert f"{paper}: " in out, f"--status without notebooks left out {paper}"


@pytest.mark.parametrize("content", ["", "{\"key\": ", "no final scores"])
def test_a_broken_record_is_recomputed_not_counted_as_recorded(tmp_path, content):
    """A truncated, empty or incomplete record is not a finished run: the status says broken,
    and the scheduler moves it aside (numbered: the first .bad stays) and computes the run (R13, L18)."""
    from vflkit import records

    tasks, log = _tasks(tmp_path, n=2, epochs=1, epoch_s=0.01)
    schedule(tasks, executor="serial", progress=False)
    if content == "no final scores":
        content = json.dumps({k: v for k, v in json.loads(tasks[0].path.read_text()).items() if k != "final"})
    bad = tasks[0].path.with_name(tasks[0].path.name + ".bad")
    bad.write_text("an earlier broken record")
    tasks[0].path.write_text(content)
    assert scheduler.status_table(tasks).status.tolist() == ["broken", "recorded"]
    assert not scheduler.recorded(tasks[0].__class__(**{**tasks[0].__dict__, "path": tmp_path / "none.json"}))
    with pytest.warns(UserWarning, match="moved it to run0.json.bad.2"):
        s = schedule(tasks, executor="serial", progress=False)
    assert s.computed == ["run0"] and sorted(s.recorded) == ["run0", "run1"]
    assert records.is_valid_record(tasks[0].path, key="run0")
    assert bad.read_text() == "an earlier broken record" and bad.with_name(bad.name + ".2").read_text() == content


def test_compute_pending_and_status_see_a_broken_record(tmp_path, monkeypatch):
    """``python -m vflkit.study`` (compute_pending) and ``--status`` judge a record as the
    scheduler does: a truncated demo record is left to compute, not "recorded" (R13, L18)."""
    from vflkit import study

    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    tasks = study.study_tasks("demo", "smoke")
    for t in tasks:
        t.path.parent.mkdir(parents=True, exist_ok=True)
        t.path.write_text(json.dumps(_record(t.key, config=t.payload["config"], environment={"device": "cpu"})))
    tasks[0].path.write_text("{")
    table = study.status(["demo"], profile="smoke", device="cpu")
    assert table.key.tolist() == [tasks[0].key] and table.status.tolist() == ["broken"]
    handed = {}
    monkeypatch.setattr(study, "schedule", lambda ts, **kw: handed.update(kw) or scheduler.Summary())
    s = study.compute_pending(["demo"], profile="smoke", device="cpu")
    # the broken run is left to compute (priced from its FLOPs, or unpriced)
    assert (s.left_unestimated == 1 or s.left_estimated_s > 0) and handed["lock_wait_minutes"] is None


def test_a_lock_of_a_reused_pid_or_a_lost_host_goes_stale(tmp_path):
    """A lock whose pid is alive but is another process (started after the lock was taken: pid
    reuse after a crash or reboot) is stale; so is any lock, of this host or another, whose
    holder has not refreshed it for LOCK_STALE_S; a fresh lock of another host is held (F11, F12)."""
    import socket

    lock = lock_path(tmp_path / "r.json")
    here = socket.gethostname()
    lock.write_text(json.dumps({"pid": 1, "host": here, "time": 0}))  # F11: pid 1, a month-old lock
    assert "another process" in scheduler.lock_stale_reason(lock)
    lock.write_text(json.dumps({"pid": os.getpid(), "host": here, "time": time.time(), "started": 12345.0}))
    assert "another process" in scheduler.lock_stale_reason(lock)
    lock.write_text(json.dumps({"pid": 4242, "host": "lost-node", "time": time.time()}))
    assert scheduler.lock_stale_reason(lock) is None  # another host's fresh lock: held
    old = time.time() - scheduler.LOCK_STALE_S - 5
    os.utime(lock, (old, old))
    assert "not refreshed" in scheduler.lock_stale_reason(lock)  # F12: its node is lost
    # a holder's heartbeat keeps its own lock fresh, and only its own
    record = tmp_path / "mine.json"
    assert acquire(record)
    os.utime(lock_path(record), (old, old))
    assert scheduler.lock_is_stale(lock_path(record))
    scheduler._refresh_held()
    assert not scheduler.lock_is_stale(lock_path(record))
    release(record)
    assert not lock_path(record).exists()


def test_of_two_takers_of_one_stale_lock_only_one_wins(tmp_path, monkeypatch):
    """A taker delayed between judging a lock stale and replacing it must not remove the lock
    the first taker made meanwhile: both would compute the run (F26)."""
    record = tmp_path / "r.json"
    lock_path(record).write_text(json.dumps({"pid": 2**22 + 7, "host": os.uname().nodename, "time": time.time()}))
    assert acquire(record)  # the first taker replaces the stale lock
    mine = json.loads(lock_path(record).read_text())
    real = scheduler.lock_stale_reason
    calls = []

    def judged_earlier(path, **kw):  # the delayed taker's first judgement saw the old, stale lock
        calls.append(path)
        return "its process is gone" if len(calls) == 1 else real(path, **kw)

    monkeypatch.setattr(scheduler, "lock_stale_reason", judged_earlier)
    assert not acquire(record)
    assert json.loads(lock_path(record).read_text()) == mine and len(calls) == 2
    monkeypatch.setattr(scheduler, "lock_stale_reason", real)
    release(record)


def test_waiting_for_a_locked_run_can_be_bounded(tmp_path, monkeypatch, capsys):
    """A run another live process holds is waited for, saying who holds it; with
    lock_wait_minutes at most that long, then it is left pending and the summary names the holder."""
    tasks, _ = _tasks(tmp_path, n=1, epochs=1, epoch_s=0.01)
    tasks[0].path.parent.mkdir(parents=True)
    monkeypatch.setattr(scheduler, "LOCK_REPORT_S", 0.0)
    assert acquire(tasks[0].path)  # held by a live process (this one, for the scheduler's purposes)
    try:
        s = schedule(tasks, executor="serial", progress=True, poll_s=0.05, lock_wait_minutes=0.5 / 60)
    finally:
        release(tasks[0].path)
    assert s.pending == ["run0"] and f"pid {os.getpid()}" in s.still_locked["run0"] and not s.computed
    assert "still locked" in str(s)
    assert f"waiting for 1 runs another process computes: run0 (pid {os.getpid()}" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="lock_wait_minutes"):
        schedule(tasks, executor="serial", progress=False, lock_wait_minutes=-1)


def test_a_dead_worker_does_not_stop_the_scheduler(tmp_path):
    """kill -9 of a worker (an OOM kill) breaks the process pool: the scheduler replaces it,
    retries the dead worker's run once, reports a run whose retry dies too as failed with the
    reason, and computes the others (F25)."""
    tasks, _ = _tasks(tmp_path, n=4, epochs=1, epoch_s=0.01)
    tasks[1] = Task(**{**tasks[1].__dict__, "fn": dying_run, "payload": {**tasks[1].payload, "once": True}})
    tasks[2] = Task(**{**tasks[2].__dict__, "fn": dying_run})
    s = schedule(tasks, workers=1, executor="local", progress=False)
    assert sorted(s.computed) == ["run0", "run1", "run3"], s
    assert list(s.failed) == ["run2"] and "died twice" in s.failed["run2"] and "BrokenProcessPool" in s.failed["run2"]
    assert not tasks[2].path.exists()


@pytest.mark.parametrize("executor", ["serial", "local", "dask"])
def test_worker_counts_below_one_are_clear_errors(tmp_path, executor):
    """--workers -1 (or 0) is a ConfigError for every executor, not a raw ValueError from
    concurrent.futures (L07) or a dask run that computes nothing and exits 0 (L11, L06)."""
    tasks, _ = _tasks(tmp_path, n=1)
    for bad in (-1, 0, 1.5, True):
        with pytest.raises(ConfigError, match="workers must be a whole number >= 1"):
            schedule(tasks, workers=bad, executor=executor, progress=False)
    assert not tasks[0].path.exists()


def test_an_absurd_worker_count_is_capped_with_a_warning():
    with pytest.warns(UserWarning, match="oversubscribe"):
        assert scheduler.check_workers(10**6, "cpu") == 4 * scheduler.default_workers("cpu")
    assert scheduler.check_workers(10**6, "cpu", "tcp://cluster:8786") == 10**6  # a remote cluster's size
    assert scheduler.check_workers(None, "cpu") == scheduler.default_workers("cpu")


def test_a_results_folder_that_cannot_be_written_is_the_config_error_run_gives(tmp_path):
    """The scheduler's lock in a folder that cannot be made or written is the ConfigError the
    record store gives, not a raw OSError from mkdir (F17)."""
    blocker = tmp_path / "results"
    blocker.write_text("a file, not a folder")
    with pytest.raises(ConfigError, match=r"results folder .* is not writable.*VFLKIT_RESULTS"):
        acquire(blocker / "smoke" / "r.json")
    tasks, _ = _tasks(tmp_path, n=1)
    tasks = [Task(**{**tasks[0].__dict__, "path": blocker / "smoke" / "run0.json"})]
    s = schedule(tasks, workers=1, executor="local", progress=False)
    assert s.failed["run0"].startswith("ConfigError: the results folder")


# --------------------------------------------------------------------------- packs


def _demo_tasks(results, seeds=(0, 1)):
    """The demo study's smoke runs (Local and SplitNN, MLPs on MNIST) for ``seeds``, shrunk to a
    few batches: two packable runs per seed."""
    from vflkit import study

    return study.study_tasks("demo", "smoke", seeds=seeds, overrides={"n_train": 256, "n_test": 128, "epochs": 1},
                             results=results)


def test_pack_tasks_makes_one_task_of_the_seeds_of_a_run(tmp_path):
    """pack_tasks groups a study's runs that differ in seed alone into one task with its runs as
    members (the launcher's grouping, vflkit.training.split.group_packs), keeps a run that has
    no sibling as it is, and packs no run with a checkpoint (it resumes alone), nor, under a
    budget, one without an estimate."""
    tasks = _demo_tasks(tmp_path)
    packs = scheduler.pack_tasks(tasks)
    assert len(tasks) == 4 and len(packs) == 2 and all(len(p.members) == 2 for p in packs)
    for p in packs:
        methods = {m.payload["config"]["method"] for m in p.members}
        seeds = sorted(m.payload["config"]["seed"] for m in p.members)
        assert len(methods) == 1 and seeds == [0, 1] and p.run_keys == [m.key for m in p.members]
    assert scheduler.pack_tasks(_demo_tasks(tmp_path, seeds=(0,))) == _demo_tasks(tmp_path, seeds=(0,))
    assert scheduler.pack_tasks(tasks, budgeted=True) == tasks  # no estimates: every run alone
    priced = [dataclasses.replace(t, cost_s=10.0) for t in tasks]
    assert [p.cost_s for p in scheduler.pack_tasks(priced, budgeted=True)] == [20.0, 20.0]
    from vflkit.records import checkpoint_path

    checkpoint_path(tasks[0].path).parent.mkdir(parents=True, exist_ok=True)
    checkpoint_path(tasks[0].path).write_bytes(b"")
    assert [len(p.members) for p in scheduler.pack_tasks(tasks)].count(2) == 1  # its sibling has no pack left


def test_pack_tasks_packs_a_run_on_mnist_with_its_fashion_mnist_twin(tmp_path):
    """A study's run on MNIST and the same run on FashionMNIST (one image shape and size) are
    one pack, whose records are each run's own, at its own key."""
    from vflkit.methods import RunConfig
    from vflkit.records import record_path

    mnist = _demo_tasks(tmp_path, seeds=(0,))
    fmnist = []
    for t in mnist:  # the same runs moved onto FashionMNIST (the demo study trains MNIST only)
        run = RunConfig.from_dict({**t.payload["config"], "dataset": "fashion_mnist"})
        fmnist.append(dataclasses.replace(t, key=run.key, path=record_path(run, "smoke", tmp_path),
                                          payload={**t.payload, "config": run.to_dict()}))
    tasks = mnist + fmnist
    packs = scheduler.pack_tasks(tasks)
    assert len(tasks) == 4 and len(packs) == 2
    for p in packs:
        assert {m.payload["config"]["dataset"] for m in p.members} == {"mnist", "fashion_mnist"}
        assert len({m.payload["config"]["method"] for m in p.members}) == 1
    pack = packs[-1]  # SplitNN's (Local's is the same code path)
    got = pack.fn(pack.payload, device="cpu")
    assert [r["key"] for r in got] == [m.key for m in pack.members]
    assert [r["config"]["dataset"] for r in got] == ["mnist", "fashion_mnist"]


def test_pack_tasks_packs_runs_checkpointed_after_one_epoch(tmp_path):
    """Runs checkpointed after the same epoch (a stopped pack's) are packed again, apart from the
    runs without one; runs checkpointed after different epochs are not packed (a pack would
    start them over); under a budget a checkpointed run (no estimate) is not packed."""
    import torch

    from vflkit.records import checkpoint_path

    tasks = _demo_tasks(tmp_path, seeds=(0, 1, 2))
    local = [t for t in tasks if t.payload["config"]["method"] == "local"]
    for t, epoch in zip(local, (1, 1, 2)):
        checkpoint_path(t.path).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"epoch": epoch}, checkpoint_path(t.path))
    packs = {tuple(m.key for m in p.members) for p in scheduler.pack_tasks(tasks) if p.members}
    splitnn = tuple(t.key for t in tasks if t.payload["config"]["method"] == "splitnn")
    assert packs == {(local[0].key, local[1].key), splitnn}
    torch.save({"epoch": 2}, checkpoint_path(local[1].path))
    packs = {tuple(m.key for m in p.members) for p in scheduler.pack_tasks(tasks) if p.members}
    assert packs == {(local[1].key, local[2].key), splitnn}
    priced = [dataclasses.replace(t, cost_s=None if checkpoint_path(t.path).exists() else 10.0) for t in tasks]
    assert {tuple(m.key for m in p.members) for p in scheduler.pack_tasks(priced, budgeted=True)
            if p.members} == {splitnn}


def test_pack_tasks_packs_multi_vfls_runs_of_one_round_shape(tmp_path):
    """Multi-VFL's paper runs (datasets, scenarios, server optimizers, seeds: one round shape)
    are one pack of all 42 (multi_owner_packed.MAX_RUNS), trained by the packed trainer's task
    function and priced by its counted rounds (one run's estimate x the pack's ratio)."""
    from vflkit import study
    from vflkit.ops import pricing as costs
    from vflkit.training import split as packed

    tasks = [dataclasses.replace(t, cost_s=600.0) for t in study.study_tasks("multi_vfl", "paper", results=tmp_path)]
    (alone,) = scheduler.pack_tasks(tasks, budgeted=True)  # priced as its runs one after another
    assert alone.cost_s == 42 * 600.0
    (pack,) = scheduler.pack_tasks(tasks, budgeted=True, pack_cost=costs.pack_cost_s)
    assert len(pack.members) == len(tasks) == 42 and pack.fn is packed.compute_pack
    config = packed.packable_config("multi_owner", tasks[0].payload["config"])
    ratio = costs.pack_ratio(config, k=42)
    assert ratio is not None and pack.cost_s == pytest.approx(600.0 * ratio) and pack.cost_s < 42 * 600.0 / 5


def test_a_packed_schedule_writes_each_runs_record_as_the_run_alone_would(tmp_path, monkeypatch):
    """With pack=True two seeds of a run are trained as one pack, and each gets a whole record
    at its own path under its own key, with the unpacked record's fields plus ``execution``
    naming the pack; with pack=False (and "auto" on a CPU) nothing is packed."""
    from vflkit.records import record_problem

    tasks = _demo_tasks(tmp_path / "packed")
    s = schedule(tasks, device="cpu", executor="serial", progress=False, pack=True)
    assert sorted(s.computed) == sorted(t.key for t in tasks) and not s.failed
    alone = _demo_tasks(tmp_path / "alone")
    monkeypatch.setattr(scheduler, "pack_tasks", lambda *a, **k: pytest.fail("packed although pack is off"))
    for pack in (False, "auto"):
        s = schedule(alone, device="cpu", executor="serial", progress=False, pack=pack)
        assert not s.failed
    for t, u in zip(tasks, alone):
        assert record_problem(t.path, key=t.key) is None and t.path.name == u.path.name
        rec, solo = json.loads(t.path.read_text()), json.loads(u.path.read_text())
        siblings = [o.key for o in tasks if o.payload["config"]["method"] == t.payload["config"]["method"]]
        assert rec["key"] == t.key and rec["execution"] == {"packed": 2, "pack": siblings}
        assert set(rec) == set(solo) | {"execution"} and "execution" not in solo


def test_a_failed_pack_loses_only_its_own_runs(tmp_path):
    """A pack that fails (its results folder cannot be written) is reported failed run by run,
    and the other pack of the same call is recorded."""
    good = [t for t in _demo_tasks(tmp_path) if t.payload["config"]["method"] == "local"]
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    bad = [dataclasses.replace(t, payload={**t.payload, "results": str(blocker)})
           for t in _demo_tasks(tmp_path) if t.payload["config"]["method"] == "splitnn"]
    s = schedule(good + bad, device="cpu", workers=1, executor="local", progress=False, pack=True)
    assert sorted(s.computed) == sorted(t.key for t in good)
    assert sorted(s.failed) == sorted(t.key for t in bad) and all("ConfigError" in e for e in s.failed.values())


def test_a_pack_that_cannot_end_before_the_deadline_is_not_started(tmp_path):
    """Under a budget a pack starts only if its estimate times SAFETY ends before the deadline,
    the launcher's rule (under a budget a pack that pauses goes on unpacked); its runs are left
    pending."""
    tasks = [dataclasses.replace(t, cost_s=40.0) for t in _demo_tasks(tmp_path, seeds=(0, 1))
             if t.payload["config"]["method"] == "local"]
    # 80 s alone fits 1.5 minutes, 80 s x SAFETY (120 s) does not
    s = schedule(tasks, device="cpu", executor="serial", progress=False, pack=True, budget_minutes=1.5)
    assert sorted(s.pending) == sorted(t.key for t in tasks) and not s.computed
    assert not any(t.path.exists() for t in tasks)


def test_pack_is_true_false_or_auto_and_auto_packs_on_cuda_only():
    """use_packs: "auto" packs on a CUDA device only; anything but True, False, "auto" is refused."""
    assert scheduler.use_packs("auto", "cuda:0") and not scheduler.use_packs("auto", "cpu")
    assert scheduler.use_packs(True, "cpu") and not scheduler.use_packs(False, "cuda")
    for bad in ("yes", 1, None):
        with pytest.raises(ConfigError, match="Invalid pack"):
            scheduler.use_packs(bad, "cpu")


def test_study_command_hands_pack_to_the_scheduler(tmp_path, monkeypatch):
    """``python -m vflkit.study --pack/--no-pack`` reaches the scheduler's ``pack`` (default "auto")."""
    from vflkit import study
    from vflkit.config import project_root

    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    handed = []
    monkeypatch.setattr(study, "schedule", lambda tasks, **kw: handed.append(kw["pack"]) or scheduler.Summary())
    notebook = str(project_root() / "notebooks" / "demo.ipynb")
    for flag in (["--pack"], ["--no-pack"], []):
        assert study.main([notebook, "--profile", "smoke", "--device", "cpu", "--no-notebooks", *flag]) == 0
    assert handed == [True, False, "auto"]


def test_status_says_a_checkpoint_is_unreadable(tmp_path):
    """``--status`` (status_table) calls a run with a readable checkpoint "checkpointed", and one
    whose checkpoint is garbage "checkpoint unreadable" (it starts from epoch 1 when run), not
    "checkpointed" (L21)."""
    import torch

    from vflkit.records import checkpoint_path

    tasks, _ = _tasks(tmp_path, n=3)
    tasks[0].path.parent.mkdir()
    torch.save({"epoch": 2, "key": tasks[0].key}, checkpoint_path(tasks[0].path))
    checkpoint_path(tasks[1].path).write_bytes(b"not a checkpoint at all")
    assert scheduler.status_table(tasks).status.tolist() == ["checkpointed", "checkpoint unreadable", "pending"]


def torchvision_run(payload, *, device, deadline):
    """:func:`toy_run` in a worker that has imported torchvision, as every real run's worker has
    (such a worker process outlives the nanny's 4 s grace at shutdown), noting its dask key."""
    import torch
    import torchvision  # noqa: F401
    from distributed import get_worker

    torch.tanh(torch.randn(256, 256) @ torch.randn(256, 256))  # torch's thread pools started, as in training

    with open(payload["log"] + ".keys", "a") as f:
        f.write(get_worker().get_current_task() + "\n")
    toy_run(payload, device=device, deadline=deadline)


def test_a_finished_dask_study_closes_quietly_and_names_its_tasks(tmp_path):
    """After a successful study on a LocalCluster: no "killing" warnings, no tracebacks on
    stderr; the dashboard link is printed, and each dask task is named after its run."""
    script = tmp_path / "go.py"
    script.write_text(
        "import sys, dataclasses; sys.path.insert(0, %r)\n"
        "from pathlib import Path\n"
        "import test_scheduler as ts\n"
        "from vflkit.scheduler import schedule\n"
        "if __name__ == '__main__':\n"
        "    tasks, _ = ts._tasks(Path(%r), n=2, epochs=1, epoch_s=0.01)\n"
        "    tasks = [dataclasses.replace(t, fn=ts.torchvision_run, label=f'demo: splitnn mnist {i}') for i, t in enumerate(tasks)]\n"
        "    s = schedule(tasks, workers=2, executor='dask', progress=False, poll_s=0.2)\n"
        "    print(s)\n"
        % (str(HERE), str(tmp_path)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and "2 recorded (2 computed now)" in done.stdout, done.stderr
    assert re.search(r"dask dashboard: http://\S+:\d+/status", done.stdout)
    for noise in ("killing", "Traceback", "CommClosedError", "WARNING", "ERROR"):
        assert noise not in done.stderr, done.stderr
    assert sorted((tmp_path / "log.txt.keys").read_text().split()) == ["demo_splitnn_mnist_0-run0",
                                                                       "demo_splitnn_mnist_1-run1"]


def test_a_remote_scheduler_gets_its_dashboard_link_and_named_tasks(tmp_path, monkeypatch, capsys):
    """--executor tcp://host:port prints that scheduler's dashboard, as a LocalCluster's does."""
    from dask.distributed import LocalCluster

    tasks, log = _tasks(tmp_path, n=2, epochs=1, epoch_s=0.01)
    tasks = [dataclasses.replace(t, fn=torchvision_run, label=f"vfedmh: c_vfl mnist {i}") for i, t in enumerate(tasks)]
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        port = cluster.scheduler.services["dashboard"].port
        s = schedule(tasks, workers=1, executor=cluster.scheduler_address, progress=False, poll_s=0.2)
    assert sorted(s.computed) == ["run0", "run1"]
    assert f":{port}/status" in capsys.readouterr().out
    assert sorted(Path(str(log) + ".keys").read_text().split()) == ["vfedmh_c_vfl_mnist_0-run0",
                                                                    "vfedmh_c_vfl_mnist_1-run1"]
    assert scheduler.dask_key(dataclasses.replace(tasks[0], label="")) == "run-run0"


def test_status_is_a_plan_totals_first_by_paper_impossible_in_one_line(capsys):
    """--status --profile paper: the totals on the first line, one line per paper, the runs that
    cannot be made here (MIMIC-III's 560) as one line with why, not one row each."""
    from vflkit import study

    assert study.main(["--status", "--profile", "paper", "--device", "cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.match(r"\[study\] paper profile: \d+ runs without a record: .*left for a GPU .*impossible here$", lines[0])
    assert lines[1] == "[study] by paper:"
    assert len(lines) < 20, f"{len(lines)} lines"
    impossible = [line for line in lines if "MIMIC-III" in line]
    assert len(impossible) == 1 and re.match(r"  apc_vfl: \d+ runs on MIMIC-III: \S", impossible[0]), impossible
    assert "every run, one row each: --status --all" in lines[-2] + lines[-1]


def test_status_all_lists_every_run(tmp_path, monkeypatch, capsys):
    """--status --all keeps the full table: one row per run without a record."""
    from vflkit import records, study

    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    monkeypatch.setattr(records, "record_roots", lambda: [tmp_path])
    assert study.main(["--status", "--profile", "smoke", "--device", "cpu", "notebooks/demo.ipynb"]) == 0
    short = capsys.readouterr().out
    assert study.main(["--status", "--all", "--profile", "smoke", "--device", "cpu", "notebooks/demo.ipynb"]) == 0
    full = capsys.readouterr().out
    keys = [t.key for t in study.study_tasks("demo", "smoke", results=tmp_path)]
    assert keys and all(k in full for k in keys) and not any(k in short for k in keys)
    assert short.splitlines()[0] == full.splitlines()[0]

