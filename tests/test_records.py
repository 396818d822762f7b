"""Tests for vflkit.records: one envelope, one record path and one run loop for every family."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from vflkit import records
from vflkit.config import project_root
from vflkit.data import ImageData, register_dataset, unregister_dataset
from vflkit.errors import ConfigError
from vflkit.methods import RunConfig
from vflkit.methods.multi_vfl import MultiVFLConfig
from vflkit.studies import apc_vfl, demo, easter, multi_vfl, vfedmh
from vflkit.training import multi_owner, one_shot, split


def _images(name="own_digits", n_train=256, n_test=64, seed=0):
    """A researcher's own 28x28 image data, built from uint8 tensors (labels learnable from pixels)."""
    g = torch.Generator().manual_seed(seed)
    y_train, y_test = torch.arange(n_train) % 10, torch.arange(n_test) % 10

    def images(y):
        x = torch.randint(0, 60, (len(y), 1, 28, 28), dtype=torch.uint8, generator=g)
        for k in range(10):  # a bright column per class, spread over every strip
            x[y == k, :, :, 2 + 2 * k] = 255
        return x

    return ImageData(name, images(y_train), y_train, images(y_test), y_test, tuple(map(str, range(10))),
                     (0.2,), (0.3,))


def _split_run(dataset="mnist", **changes):
    base = dict(paper="demo", dataset=dataset, method="splitnn", models=("mlp",) * 4, lr=0.05, n_train=256,
                n_test=64, epochs=1, batch_size=64, embedding_dim=16)
    return RunConfig(**{**base, **changes})


@pytest.fixture
def own_dataset():
    name = register_dataset(_images())
    yield name
    unregister_dataset(name)


def test_every_family_writes_the_same_envelope(tmp_path, monkeypatch, own_dataset):
    """A split, a Multi-VFL and an APC-VFL run end in records with the same envelope fields,
    each at <results>/<profile>/<paper>/<key>.json."""
    monkeypatch.setattr(multi_owner, "dataset", lambda name: _images("tiny", n_train=600, n_test=40))
    runs = [
        (_split_run(own_dataset), split.train),
        (MultiVFLConfig(rounds=1, samples_per_owner=16, batch_size=8, n_test=20), multi_owner.train),
        (apc_vfl.configs("smoke", overrides={"epochs": 1})[0], one_shot.train),
    ]
    for run, train in runs:
        rec = records.run_one(run, train=train, profile="smoke", device="cpu", results=tmp_path, progress=False)
        path = tmp_path / "smoke" / run.paper / f"{run.key}.json"
        assert records.record_path(run, "smoke", tmp_path) == path and json.loads(path.read_text()) == rec
        assert set(records.ENVELOPE) <= set(rec), type(run).__name__
        assert rec["key"] == run.key and rec["profile"] == "smoke" and rec["config"] == run.to_dict()
        assert rec["diverged"] is None and rec["peak_memory_mb"] > 0 and rec["wall_time_s"] > 0
        assert rec["environment"]["device"] == "cpu" and rec["finished"]


def test_a_researchers_own_dataset_trains_through_the_public_function(tmp_path, own_dataset):
    """register_dataset makes an in-memory dataset a run config can name; SplitNN learns it."""
    rec = split.run(_split_run(own_dataset, epochs=3, lr=0.1), profile="smoke", device="cpu", results=tmp_path,
                    progress=False)
    assert rec["final"]["active"]["test_accuracy"] > 0.5  # chance is 0.1


def test_a_trainer_may_not_overwrite_the_envelope(tmp_path):
    """A result that reuses an envelope name (e.g. its own config) is refused, not merged."""
    with pytest.raises(RuntimeError, match=r"envelope's names \['config'\]"):
        records.run_one(_split_run(), train=lambda run, **kw: {"config": {}}, profile="smoke", results=tmp_path)
    with pytest.raises(RuntimeError, match=r"envelope's names \['received'\]"):  # a made-elsewhere mark of its own
        records.run_one(_split_run(), train=lambda run, **kw: {"received": {}}, profile="smoke", results=tmp_path)
    with pytest.raises(ConfigError, match="on_divergence"):
        records.run_one(_split_run(), train=split.train, profile="smoke", on_divergence="ignore")


@pytest.mark.parametrize("study", [vfedmh, multi_vfl, apc_vfl, demo])
def test_every_study_reads_overrides_the_same_way(study):
    """Every study takes run(profile, device=, seeds=, overrides=); an unknown override key is
    an error that lists it (and the valid ones)."""
    import inspect

    params = inspect.signature(study.STUDY.run).parameters
    assert {"profile", "device", "seeds", "overrides"} <= set(params)
    with pytest.raises(ConfigError, match=r"unknown overrides \['not_a_setting'\]; valid: profile settings"):
        study.configs("smoke", overrides={"not_a_setting": 1})


def test_committed_records_have_the_envelope_and_match_their_file_names():
    """Every committed record (migrated from the older formats) has the common envelope and the
    key of its file name."""
    paths = sorted((project_root() / "results").glob("*/*/*.json"))
    assert paths
    for path in paths:
        rec = json.loads(path.read_text())
        assert set(records.ENVELOPE) <= set(rec), path
        assert rec["key"] == path.stem and rec["profile"] == path.parent.parent.name, path


def test_every_committed_record_is_keyed_by_a_run_of_its_study():
    """A record under results/<profile>/<paper>/ is the record of some run its study lists at
    that profile (any group, variants and sensitivities included); one that no run keys (an old
    cut, an old rate) is retired to retired/, where no loader looks, and stays out of results/."""
    from vflkit import studies
    from vflkit.studies.base import key_of

    root = project_root() / "results"
    orphans = []
    for folder in sorted(f for f in root.glob("*/*") if f.is_dir() and f.parent.name != "device"):
        study = studies.get(folder.name)
        keys = {key_of(run) for runs in study.groups(folder.parent.name).values() for run in runs}
        orphans += [f"{folder.parent.name}/{folder.name}/{p.name}" for p in sorted(folder.glob("*.json"))
                    if p.stem not in keys]
    assert not orphans, f"{len(orphans)} records no run keys (retire them to retired/): {orphans[:5]}"
    retired = sorted((project_root() / "retired").glob("*/*/*.json"))
    assert retired and all(not (root / p.relative_to(project_root() / "retired")).exists() for p in retired)


def test_committed_tables_are_what_the_committed_records_give(tmp_path):
    """Every committed table and figure data file is redrawn, byte for byte, from the committed
    records alone (scripts/regenerate_tables.py)."""
    module = _regenerate_tables_module()
    module.regenerate(tmp_path)
    assert module.compare(tmp_path, project_root() / "figures") == []


def _regenerate_tables_module():
    import importlib.util

    path = project_root() / "scripts" / "regenerate_tables.py"
    spec = importlib.util.spec_from_file_location("regenerate_tables", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_tables_check_ignores_a_users_own_local_outputs(tmp_path):
    """The committed-tables check compares what git tracks under figures/, never an ignored file
    a user's own smoke run left there (figures/<paper>/smoke/fig5.csv: "not regenerated"); a
    tracked table that differs is still found, and outside a git checkout every file is compared."""
    module = _regenerate_tables_module()
    root = project_root()
    assert subprocess.run(["git", "check-ignore", "-q", "figures/apc_vfl/smoke/fig5.csv"], cwd=root).returncode == 0
    repo, out = tmp_path / "checkout", tmp_path / "out"
    (repo / "figures" / "apc_vfl" / "quick").mkdir(parents=True)
    (repo / "figures" / "apc_vfl" / "quick" / "table2.csv").write_text("a\n1\n")
    (repo / ".gitignore").write_text((root / ".gitignore").read_text())
    (out / "apc_vfl" / "quick").mkdir(parents=True)
    (out / "apc_vfl" / "quick" / "table2.csv").write_text("a\n1\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(git + ["add", "-A"], cwd=repo, check=True)
    subprocess.run(git + ["commit", "-q", "-m", "tables"], cwd=repo, check=True)
    planted = repo / "figures" / "apc_vfl" / "smoke" / "fig5.csv"  # a user's own smoke run
    planted.parent.mkdir()
    planted.write_text("x\n")
    assert module.compare(out, repo / "figures") == []
    (out / "apc_vfl" / "quick" / "table2.csv").write_text("a\n2\n")
    assert [line.split(": ")[1] for line in module.compare(out, repo / "figures")] == [
        f"differs from {out / 'apc_vfl' / 'quick' / 'table2.csv'}"]
    import shutil

    shutil.rmtree(repo / ".git")  # no git checkout (a source archive): every file under figures/
    assert any(line.startswith(f"{planted}: not regenerated") for line in module.compare(out, repo / "figures"))


def test_ad_hoc_profile_of_ones_own_is_recorded_apart_and_ignored_by_git(tmp_path):
    """A variant run under a profile name of one's own is recorded under that name, which git
    ignores; a name that is not a plain word is an error."""
    import subprocess

    from vflkit.config import check_record_profile, project_root
    from vflkit.errors import ConfigError
    from vflkit.methods import RunConfig
    from vflkit.records import record_path

    cfg = RunConfig(paper="demo", dataset="mnist", method="splitnn", models=("mlp",) * 4)
    path = record_path(cfg, "mine", tmp_path)
    assert path.parent.parent.name == "mine"
    root = project_root()
    ignored = subprocess.run(["git", "check-ignore", "-q", "results/mine/demo/x.json"], cwd=root).returncode
    kept = subprocess.run(["git", "check-ignore", "-q", "results/quick/demo/x.json"], cwd=root).returncode
    assert ignored == 0 and kept == 1
    for bad in ("../quick", "", "a b", 3):
        with pytest.raises(ConfigError, match="Invalid profile"):
            check_record_profile(bad)


def test_load_available_skips_missing_records_and_checks_the_present_ones(tmp_path, monkeypatch):
    """A profile that accumulates: the records present are returned (checked), the rest skipped."""
    from vflkit import records
    from vflkit.errors import ConfigError
    from vflkit.methods import RunConfig

    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    runs = [RunConfig(paper="demo", dataset="mnist", method="splitnn", models=("mlp",) * 4, seed=s,
                      n_train=256, n_test=128, epochs=1) for s in (0, 1)]
    assert records.load_available(runs, profile="mine") == []
    from vflkit.training import split

    done = split.run(runs[0], profile="mine", device="cpu", progress=False)
    got = records.load_available(runs, profile="mine")
    assert [r["key"] for r in got] == [done["key"]]
    records.record_path(runs[1], "mine", tmp_path).write_text("{ half a record")
    with pytest.raises(ConfigError):
        records.load_available(runs, profile="mine")


def test_a_study_run_on_a_cpu_trains_no_run_its_study_says_needs_a_gpu(tmp_path, monkeypatch):
    """The in-notebook path follows the engine's rule: on a CPU, the runs ``needs_gpu`` names are
    not trained (a warning counts them); their records are used where they exist, also in the
    other record root (the committed ones while ``results`` points elsewhere); with
    ``needs_gpu=None`` everything trains. Nothing to train or show is a clear error."""
    trained = []

    def train(run, **kw):
        trained.append(run.key)
        return {"final": {"m": {"test_accuracy": 0.5}}}

    runs = [_split_run(seed=s) for s in range(4)]
    big = lambda run: run.seed >= 2  # noqa: E731  (seeds 2 and 3 "need a GPU")
    here, committed = tmp_path / "here", tmp_path / "committed"
    monkeypatch.setattr(records, "record_roots", lambda: [here, committed])
    records.run_one(runs[3], train=train, profile="mine", device="cpu", results=committed)  # made on a GPU
    trained.clear()
    with pytest.warns(UserWarning, match="1 of 4 runs need a GPU"):
        got = records.run_many(runs, train=train, profile="mine", device="cpu", results=here, progress=False,
                               needs_gpu=big)
    assert trained == [runs[0].key, runs[1].key]
    assert [r["key"] for r in got] == [runs[0].key, runs[1].key, runs[3].key]
    assert not records.record_path(runs[2], "mine", here).exists()
    with pytest.raises(ConfigError, match=r"every run \(1\) needs a GPU and none has a record"):
        records.run_many(runs[2:3], train=train, profile="mine", device="cpu", results=here, progress=False,
                         needs_gpu=big)
    records.run_many(runs, train=train, profile="mine", device="cpu", results=here, progress=False, needs_gpu=None)
    assert trained[2:] == [runs[2].key, runs[3].key]  # run 3 too: into this results folder


@pytest.mark.parametrize("study", [vfedmh, easter, multi_vfl])
def test_each_studys_run_hands_the_run_loop_its_needs_gpu(study, monkeypatch):
    """vfedmh, easter and multi_vfl name GPU runs; their STUDY's ``run`` passes that rule on."""
    seen = {}
    monkeypatch.setattr(records, "run_many", lambda runs, **kw: seen.update(kw) or [])
    study.STUDY.run("smoke", device="cpu", progress=False)
    assert seen["needs_gpu"] is study.needs_gpu


def test_peak_memory_is_the_runs_own_in_a_process_that_ran_before():
    """A scheduler worker computes run after run: the peak it records for a run must not be an
    earlier run's. In a fresh process (this test process may already hold gigabytes that an
    allocation reuses), allocate ~400 MiB and free it (an earlier run), then read the peak as a
    run that starts now would."""
    code = """
import numpy as np, torch
from vflkit import records
big = np.ones(400 * 2**20 // 8)
big[::4096] = 2.0  # touch every page
del big
lifetime, lifetime_kind = records._peak_memory(torch.device("cpu"))
assert lifetime_kind == "process_max_rss" and lifetime > 400, (lifetime_kind, lifetime)
assert records._reset_peak_rss(), "this Linux kernel does not let a process reset its peak RSS"
peak, kind = records._peak_memory(torch.device("cpu"), True)
assert kind == "process_peak_rss_during_run", kind
assert 0 < peak < lifetime - 300, (peak, lifetime)
print("ok", lifetime, peak)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(Path(__file__).parents[1]))
    assert out.returncode == 0 and out.stdout.startswith("ok"), out.stderr[-2000:]


def test_the_environment_names_the_instruction_set_the_kernels_use(monkeypatch):
    """A record names the instruction set PyTorch dispatches to, and oneDNN's limit where one is
    set: a CPU's name alone ("AMD EPYC") does not tell AVX2 hosts from AVX-512 ones."""
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    env = records.environment_info(torch.device("cpu"))
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and "onednn_max_cpu_isa" not in env
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert records.environment_info(torch.device("cpu"))["onednn_max_cpu_isa"] == "AVX2"
    pinned = subprocess.run([sys.executable, "-c", "import torch; from vflkit import records; "
                             "print(records.environment_info(torch.device('cpu'))['cpu_capability'])"],
                            env={**os.environ, "ATEN_CPU_CAPABILITY": "default"},
                            capture_output=True, text=True, check=True)
    assert pinned.stdout.strip() == "DEFAULT"


def test_a_registered_datasets_records_are_keyed_by_its_content(tmp_path):
    """Other data registered under the same name (here the training labels shuffled, as after
    fixing a dataset) is another run: never handed the first data's record (R17)."""
    import warnings

    first = _images("own_r17")
    name = register_dataset(first)
    try:
        run = _split_run(name, epochs=1)
        key = run.key  # a key names the data registered when it is computed
        rec = split.run(run, profile="smoke", device="cpu", results=tmp_path, progress=False)
        assert rec["key"] == key
        assert register_dataset(_images("own_r17")) == name and _split_run(name, epochs=1).key == key
        shuffled = ImageData(name, first.x_train, first.y_train[torch.randperm(256, generator=torch.Generator()
                                                                                   .manual_seed(1))],
                             first.x_test, first.y_test, first.classes, first.mean, first.std)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            register_dataset(shuffled)
        again = _split_run(name, epochs=1)
        assert again.key != key
        rec2 = split.run(again, profile="smoke", device="cpu", results=tmp_path, progress=False)
        assert rec2["key"] == again.key != key
        assert len(list((tmp_path / "smoke" / "demo").glob("*.json"))) == 2  # trained afresh, both kept
    finally:
        unregister_dataset(name)


def _wine(name: str):
    """scikit-learn's wine table (13 numeric columns, 3 classes) as a TabularData."""
    from sklearn.datasets import load_wine

    from vflkit.data import TabularData

    wine = load_wine(as_frame=True)
    return TabularData(name, wine.data, wine.target, "multiclass")


def _shuffle_labels_in_place(data) -> None:
    """Shuffle a registered dataset's training labels where they are, as a notebook cell fixing
    its labels would: the same objects, other values."""
    perm = torch.randperm(len(data.target if hasattr(data, "target") else data.y_train),
                          generator=torch.Generator().manual_seed(1))
    if hasattr(data, "target"):
        data.target.iloc[:] = data.target.to_numpy()[perm.numpy()]
    else:
        data.y_train.numpy()[:] = data.y_train.numpy()[perm.numpy()]  # through a view torch does not count


@pytest.mark.parametrize("kind", ["table", "images"])
def test_a_registered_dataset_edited_in_place_is_not_handed_its_old_record(tmp_path, kind):
    """T08: a registered dataset whose labels were shuffled in place after a run is another run:
    the next lookup says the data changed (a warning), keys it anew and trains it afresh."""
    data = _wine("own_t08_table") if kind == "table" else _images("own_t08_images")
    name = register_dataset(data)
    try:
        changes = {"models": "mlp", "n_parties": 3, "n_train": None, "n_test": None, "batch_size": 16} \
            if kind == "table" else {}
        run = _split_run(name, epochs=1, **changes)
        first = split.run(run, profile="smoke", device="cpu", results=tmp_path, progress=False)
        _shuffle_labels_in_place(data)
        with pytest.warns(UserWarning, match=f"dataset {name!r} changed since its content digest was taken"):
            again = split.run(run, profile="smoke", device="cpu", results=tmp_path, progress=False)
        assert again["key"] != first["key"] and again["key"] == run.key  # the run is keyed by the data now
        assert len(list((tmp_path / "smoke" / "demo").glob("*.json"))) == 2  # trained afresh, both kept
    finally:
        unregister_dataset(name)


def test_built_in_datasets_keep_their_committed_keys_while_own_data_is_registered():
    """Only a dataset of your own adds a content digest to the key: the committed records of the
    built-in datasets keep theirs (a few of each family checked with a dataset registered)."""
    from vflkit.training.tiles import TilesRun

    name = register_dataset(_images("own_keys"))
    try:
        classes = {"vfedmh": RunConfig, "demo": RunConfig, "easter": RunConfig, "adptvfedconv": TilesRun,
                   "multi_vfl": MultiVFLConfig}
        checked = 0
        for paper, cls in classes.items():
            for path in sorted((project_root() / "results" / "quick" / paper).glob("*.json"))[:3]:
                rec = json.loads(path.read_text())
                assert cls.from_dict(rec["config"]).key == rec["key"] == path.stem, path
                checked += 1
        assert checked >= 10
        own_key = _split_run(name).key
    finally:
        unregister_dataset(name)
    assert _split_run(name).key != own_key  # the registered data's digest was in its key


def test_a_generic_table_registers_and_trains_with_a_tabular_method(tmp_path):
    """README (Your own data): a TabularData (a DataFrame and a target) trains in the split trainer.
    scikit-learn's wine table (13 numeric columns, 3 classes) was refused by encode_criteo; now
    its numeric columns are standardised, a categorical one coded, and it trains."""
    import pandas as pd
    from sklearn.datasets import load_wine

    from vflkit.data import TabularData
    from vflkit.tabular import encode_table

    wine = load_wine(as_frame=True)
    features = wine.data.assign(kind=pd.Series(["red", "white"] * 89, index=wine.data.index))  # categorical
    table = TabularData("wine_test", features, wine.target, "multiclass")
    encoded = encode_table(table)
    assert encoded.feature_names[-1] == "kind" and encoded.vocab_sizes == {"kind": 3}
    assert abs(float(encoded.x_train[:, :13].mean())) < 1e-5  # standardised with the training rows
    name = register_dataset(table)
    try:
        run = _split_run(name, models="mlp", n_parties=3, n_train=None, n_test=None, epochs=15, batch_size=16)
        rec = split.run(run, profile="smoke", device="cpu", results=tmp_path, progress=False)
        assert rec["final"]["active"]["test_accuracy"] > 0.8  # chance is 0.4
    finally:
        unregister_dataset(name)


@pytest.mark.parametrize("mark", [None, "lent-gpu", {"from": "", "at": "2026-12-06T18:00:00+0000"},
                                  {"from": "gpu", "at": "yesterday"}, {"from": "gpu"},
                                  {"from": "gpu", "at": "2026-12-06T18:00:00+0000", "extra": 1}])
def test_a_received_mark_that_names_no_machine_or_time_is_not_a_record(tmp_path, mark):
    """A record's ``received`` mark (vflkit.ops.windows.receive) must name the machine and the time:
    a mark that does not is a broken record, named as such; a whole mark loads, and a record
    without one (made here, every committed record) loads as before."""
    run = demo.configs("smoke")[0]
    rec = {**dict.fromkeys(records.ENVELOPE), "key": run.key, "profile": "smoke", "config": run.to_dict(),
           "final": {"accuracy": 0.5}}
    path = records.record_path(run, "smoke", tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(rec))
    assert records.check_record(path, run, "smoke") == rec
    path.write_text(json.dumps({**rec, records.RECEIVED: {"from": "gpu", "at": "2026-12-06T18:00:00+0000"}}))
    assert records.record_problem(path, key=run.key) is None
    path.write_text(json.dumps({**rec, records.RECEIVED: mark}))
    assert "'received' mark" in records.record_problem(path, key=run.key)
    with pytest.raises(records.BadRecord, match="'received' mark"):
        records.check_record(path, run, "smoke")


def test_records_by_key_and_recorded_runs_in_run_order():
    """by_key takes a list of records or records by key; recorded pairs each run that has a record
    with it, in the runs' order, skipping the rest."""
    recs = [{"key": "b", "v": 2}, {"key": "a", "v": 1}]
    assert records.by_key(recs) == {"b": recs[0], "a": recs[1]}
    assert records.by_key(records.by_key(recs)) == records.by_key(recs)
    runs = [SimpleNamespace(key=k) for k in ("a", "c", "b")]
    for given in (recs, records.by_key(recs)):
        assert [(run.key, r["v"]) for run, r in records.recorded(runs, given)] == [("a", 1), ("b", 2)]
