"""Checks every registered run class, method and study passes (scikit-learn's habit of one file
of common checks): a new study, method or run class is checked here without a test of its own."""

import dataclasses
import importlib
import json
import re

import pytest

from vflkit import studies
from vflkit.config import SHA1_10, SHA256_16, KeyedRun, project_root
from vflkit.errors import ConfigError
from vflkit.methods import METHODS, ONE_SHOT_METHODS, RunConfig, get_one_shot_method
from vflkit.study import FAMILIES, STUDY_FAMILY, run_class

RUN_CLASSES = {family: run_class(family) for family in FAMILIES}


def _flat(groups):
    return [c for g in groups.values() for c in g] if isinstance(groups, dict) else list(groups)


@pytest.mark.parametrize("paper", sorted(STUDY_FAMILY))
def test_study_contract(paper):
    """The study's STUDY: its runs (``configs(profile, seeds=, overrides=)``) are of its family's
    class, one key per distinct config, each rebuilt from its dict with the same key; needs_gpu
    is a bool and run_priority orders every run; ``STUDY.run(profile, device=, seeds=,
    overrides=)`` trains them; every artefact names its runs, its files and how it is drawn; an
    unknown override and an unknown profile are ConfigErrors."""
    import inspect

    study = studies.get(paper)
    cls = RUN_CLASSES[study.family]
    runs = study.runs("smoke")
    assert runs and all(isinstance(r, cls) for r in runs)
    by_key = {}
    for r in runs:
        assert by_key.setdefault(r.key, r) == r, f"{paper}: two different configs share key {r.key}"
        again = cls.from_dict(json.loads(json.dumps(r.to_dict())))
        assert again.key == r.key and again == r
    assert all(isinstance(study.needs_gpu(r), bool) for r in runs)
    sorted(runs, key=lambda r: study.run_priority(r, 0))  # comparable for every run
    assert {"profile", "device", "seeds", "overrides"} <= set(inspect.signature(study.run).parameters)
    for art in (*study.artefacts, *study.extras):
        assert callable(art.draw) and art.files and art.stem, f"{paper}: {art.label} declares no drawing"
        assert {r.key for r in art.runs(study.groups("smoke"), "smoke")} <= set(by_key)
        assert study.artefact(art.label) is art
    with pytest.raises(ConfigError, match="unknown overrides"):
        study.configs("smoke", overrides={"no_such_setting": 1})
    with pytest.raises(ConfigError):
        study.configs("no such profile!")


def _valid_overrides(study):
    """The profile settings and run fields ``study.configs`` accepts as overrides, as its refusal
    of an unknown one lists them."""
    with pytest.raises(ConfigError, match="unknown overrides") as refused:
        study.configs("smoke", overrides={"no_such_setting": 1})
    found = re.search(r"profile settings ([^;]*)(?:; run fields (.*))?$", str(refused.value))
    assert found, f"the refusal does not list the valid overrides: {refused.value}"
    return set(found.group(1).split(", ")), set((found.group(2) or "").split(", ")) - {""}


@pytest.mark.parametrize("paper", sorted(STUDY_FAMILY))
def test_overrides_set_a_run_field_on_every_run_of_every_study(paper):
    """Issue 41: ``overrides`` accepts the same run fields in every study. A number field of the
    study's runs (the first, by name, that is no profile setting and not what makes a run, e.g.
    ``lr``) overridden is set on every run; a run field a study does not take is refused with
    the fields it does take."""
    from vflkit.config import RUN_IDENTITY

    study = importlib.import_module(f"vflkit.studies.{paper}")
    runs = _flat(study.configs("smoke"))
    settings, allowed = _valid_overrides(study)
    numbers = sorted(k for k in runs[0].to_dict() if k not in RUN_IDENTITY and k not in settings
                     and all(type(r.to_dict().get(k)) is float for r in runs))
    usable = [k for k in numbers if k in allowed]
    assert usable, f"{paper}: overrides take none of its runs' number fields {numbers} (they take {sorted(allowed)})"
    field = usable[0]
    value = runs[0].to_dict()[field] / 2
    changed = _flat(study.configs("smoke", overrides={field: value}))
    assert len(changed) == len(runs) and all(r.to_dict()[field] == value for r in changed), (paper, field)
    for refused in set(numbers) - allowed:
        with pytest.raises(ConfigError, match=f"run fields {', '.join(sorted(allowed))}"):
            study.configs("smoke", overrides={refused: 1.0})


@pytest.mark.parametrize("paper", sorted(STUDY_FAMILY))
def test_registered_study_declaration(paper):
    """What the scheduler and the report call on a registered Study (not its module): its runs
    under smoke and paper, their GPU rule and priority, every artefact's runs (a subset of the
    profile's), the runs on data that is not here (a subset), their datasets' titles, the
    artefacts' note, and the price of pending paper runs (``needs`` GPU or CPU, H100 minutes, CPU
    hours)."""
    import pandas as pd

    s = studies.get(paper)
    for profile in ("smoke", "paper"):
        runs = s.runs(profile)
        assert runs and all(isinstance(r, RUN_CLASSES[s.family]) for r in runs), profile
        keys = {r.key for r in runs}
        assert len(keys) == len(runs), f"{paper}/{profile}: Study.runs gives a run twice"
        assert all(isinstance(s.needs_gpu(r), bool) for r in runs)
        sorted(runs, key=lambda r: s.run_priority(r, 0))  # comparable for every run
        for art in s.artefacts:
            assert {r.key for r in s.artefact_runs(art, profile)} <= keys, (paper, profile, art.label)
        assert {r.key for r in s.unavailable(runs)} <= keys
        assert all(isinstance(s.dataset_title(d), str) for d in {r.adpt.dataset if hasattr(r, "adpt") else r.dataset
                                                                  for r in runs})
    assert isinstance(s.artefacts_note(("paper", "quick")), str)
    if s.pending_cost is not None:
        priced = s.pending_cost(s.runs("paper")[:3])
        assert isinstance(priced, pd.DataFrame) and {"needs", "h100_min", "cpu_h"} <= set(priced.columns)
        assert len(priced) and set(priced["needs"]) <= {"GPU", "CPU"}


@pytest.mark.parametrize("family", sorted(RUN_CLASSES))
def test_run_class_refuses_an_unknown_key_and_a_new_defaulted_field_keeps_its_key(family):
    """``from_dict`` rejects a key the class lacks (an old or misspelt record is an error, never
    ignored); a field added with a default (a subclass of the dataclass whose defaults the base
    reads, :meth:`KeyedRun.key_defaults`) leaves the key of a run that keeps the default, and
    changes it once set, so committed records stay where they are."""
    cls = RUN_CLASSES[family]
    paper = next(p for p, f in STUDY_FAMILY.items() if f == family)
    run = _flat(importlib.import_module(f"vflkit.studies.{paper}").configs("smoke"))[0]
    with pytest.raises(ConfigError, match=f"unknown {cls.__name__} keys \\['no_such_field'\\]"):
        cls.from_dict({**run.to_dict(), "no_such_field": 1})
    owner = run.key_defaults()
    extended = dataclasses.make_dataclass("Extended", [("new_knob", int, dataclasses.field(default=0))],
                                          bases=(owner,), frozen=True)

    def init_fields(obj):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if f.init}

    def key(**knob):
        if owner is type(run):
            return extended(**init_fields(run), **knob).key
        # the run spreads a nested config (AdptVFedConv's): extend that one, in place
        nested = next(f.name for f in dataclasses.fields(run) if type(getattr(run, f.name)) is owner)
        return dataclasses.replace(run, **{nested: extended(**init_fields(getattr(run, nested)), **knob)}).key

    assert key() == run.key and key(new_knob=1) != run.key


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_run_class_contract(family):
    """A run class (``run_class`` of every registered family) is a frozen dataclass and a
    :class:`KeyedRun`, whose key hashes its KEYED_FIELDS (a frozen list of its fields) in one of
    the two committed formats, so adding a defaulted field keeps every committed key."""
    cls = run_class(family)
    assert issubclass(cls, KeyedRun) and "key" not in cls.__dict__, f"{cls.__name__} writes its own key"
    assert cls.KEY_FORMAT in (SHA256_16, SHA1_10)
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    paper = next(p for p, f in STUDY_FAMILY.items() if f == family)
    run = _flat(importlib.import_module(f"vflkit.studies.{paper}").configs("smoke"))[0]
    assert isinstance(cls.KEYED_FIELDS, tuple) and set(cls.KEYED_FIELDS) <= set(run.to_dict()), \
        f"{cls.__name__}.KEYED_FIELDS names a field its to_dict() lacks"
    # a file name: 16 hex digits, or (APC-VFL, AdptVFedConv) a readable prefix and 10
    assert re.fullmatch(r"[0-9a-f]{16}" if cls.KEY_FORMAT == SHA256_16 else r"[A-Za-z0-9_]+_[0-9a-f]{10}",
                        run.key), run.key


def _committed_records():
    """Every committed record file, by paper: ``results/<profile>/<paper>/<key>.json``."""
    import subprocess

    root = project_root()
    listed = subprocess.run(["git", "ls-files", "-z", "--", "results/*/*/*.json"], cwd=root, capture_output=True,
                            text=True, check=True).stdout.split("\0")
    by_paper = {}
    for name in filter(None, listed):
        _, profile, paper, _ = name.split("/")
        by_paper.setdefault(paper, []).append(root / name)
    return by_paper


@pytest.mark.parametrize("paper", sorted(STUDY_FAMILY))
def test_every_committed_record_sits_at_its_config_key(paper):
    """Every committed record of the study (every profile; JSON loading and hashing only, about
    a second for all of them) rebuilds from its ``config`` to the key it is filed under and that
    it records: the one key scheme keeps every committed key."""
    cls = run_class(STUDY_FAMILY[paper])
    paths = _committed_records().get(paper, [])
    if paper != "demo":  # the demo's records are ad-hoc examples
        assert paths, f"no committed record of {paper}"
    moved = []
    for path in paths:
        rec = json.loads(path.read_text())
        if not cls.from_dict(rec["config"]).key == rec["key"] == path.stem:
            moved.append(path.relative_to(project_root()))
    assert not moved, f"{len(moved)} of {len(paths)} committed {paper} records no longer sit at their key: {moved[:5]}"


def test_the_committed_records_cover_every_run_class():
    """The test above checks each run class against committed records: every family's class has
    some (a family without records would have its key scheme checked by nothing)."""
    covered = {STUDY_FAMILY[paper] for paper in _committed_records() if paper in STUDY_FAMILY}
    assert covered == set(FAMILIES)


@dataclasses.dataclass(frozen=True)
class _Toy(KeyedRun):
    """A run class of the smallest kind, to check the base's scheme by hand."""

    KEYED_FIELDS = ("dataset", "seed")
    dataset: str = "mnist"
    seed: int = 0
    later: float = 1.0  # a field added after the first records

    def to_dict(self):
        return dataclasses.asdict(self)


def test_keyed_run_hashes_its_keyed_fields_and_a_later_field_only_off_its_default():
    """KeyedRun's key is the digest of the canonical JSON of KEYED_FIELDS plus any later field
    that left its default; a readable prefix and the SHA-1 format are the two declared hooks."""
    import hashlib

    def digest(payload, fmt):
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":") if fmt.compact else None)
        return hashlib.new(fmt.hash, blob.encode()).hexdigest()[:fmt.digits]

    assert _Toy().key == digest({"dataset": "mnist", "seed": 0}, SHA256_16) and len(_Toy().key) == 16
    assert _Toy(later=2.0).key == digest({"dataset": "mnist", "seed": 0, "later": 2.0}, SHA256_16)

    @dataclasses.dataclass(frozen=True)
    class Named(_Toy):
        KEY_FORMAT = SHA1_10

        def key_prefix(self):
            return f"{self.dataset}_s{self.seed}"

    assert Named(seed=3).key == "mnist_s3_" + digest({"dataset": "mnist", "seed": 3}, SHA1_10)


def test_keyed_run_refuses_a_class_without_or_with_edited_keyed_fields():
    """A run class must declare its frozen KEYED_FIELDS, and a subclass may not redefine its
    base's (every record of the base would move): both are TypeErrors when the class is made."""
    with pytest.raises(TypeError, match="declares no KEYED_FIELDS"):
        type("NoFields", (KeyedRun,), {})
    with pytest.raises(TypeError, match="redefines KEYED_FIELDS"):
        type("Edited", (_Toy,), {"KEYED_FIELDS": ("dataset",)})
    with pytest.raises(ConfigError, match=r"unknown _Toy keys \['sed'\]; valid keys: dataset, later, seed"):
        _Toy.refuse_unknown({"sed": 1}, ["dataset", "seed", "later"])


@pytest.mark.parametrize("name", sorted(METHODS))
def test_method_contract(name):
    """A registered method has its registry name, option defaults, refuses an unknown option
    before any data is loaded, and builds on a smoke config of its kind."""
    cls = METHODS[name]
    assert isinstance(cls.defaults, dict)
    assert cls.name == name or (name == "pyvertical" and cls.name == "splitnn")
    models = ("mlp", "cnn", "lenet", "mlp") if getattr(cls, "model_mix", None) == "heterogeneous" else "mlp"
    cfg = RunConfig(paper="demo", dataset="mnist", method=name, models=models, n_train=64, n_test=64, epochs=1)
    with pytest.raises(ConfigError, match="unknown options"):
        cfg.replace(options={"no_such_option": 1})
    assert cfg.key and cls.name


@pytest.mark.parametrize("name", sorted(ONE_SHOT_METHODS))
def test_one_shot_method_contract(name):
    """A registered one-shot method (APC-VFL's Fig. 5) builds with its keyword-only defaults and
    a seed, refuses an unknown setting and a bad value, and an unknown name is a ConfigError
    listing the registered ones."""
    from vflkit.methods.oneshot import OneShotMethod

    method = get_one_shot_method(name, epochs=1, seed=3, lam=0.5)
    assert isinstance(method, OneShotMethod) and method.seed == 3 and method.epochs == 1
    assert isinstance(method, ONE_SHOT_METHODS[name][0])
    with pytest.raises(TypeError):
        get_one_shot_method(name, no_such_setting=1)
    with pytest.raises(ConfigError, match="positive integer"):
        get_one_shot_method(name, epochs=0)
    with pytest.raises(ConfigError, match=f"choose one of .*{name}"):
        get_one_shot_method(name + "_no_such")


def test_every_server_optimizer_and_variant_keys_its_runs_apart():
    """Multi-VFL's registered server optimizers and variants each build a run with a key of its
    own; an unregistered one is a ConfigError."""
    from vflkit.methods.multi_vfl import MultiVFLConfig
    from vflkit.methods.server_opt import SERVER_OPTIMIZERS, VARIANTS

    runs = [MultiVFLConfig(server_optimizer=o, variant=v) for o in SERVER_OPTIMIZERS for v in VARIANTS]
    assert len({r.key for r in runs}) == len(runs)
    with pytest.raises(ConfigError):
        MultiVFLConfig(server_optimizer="fedsgd_no_such")
    with pytest.raises(ConfigError):
        MultiVFLConfig(variant="no_such")


def test_a_field_added_later_is_not_keyed_at_its_default():
    """RunConfig's later fields (``resnet_cut``, ``precision``) are not among its KEYED_FIELDS:
    a run that keeps (or is normalised to) their default keeps its committed key."""
    plain = RunConfig(paper="demo", dataset="mnist", method="splitnn", models="mlp")
    assert not {"resnet_cut", "precision"} & set(RunConfig.KEYED_FIELDS)
    assert plain.key == plain.replace(resnet_cut="stages").key == plain.replace(resnet_cut="layers").key
    assert plain.key == plain.replace(precision="fp32").key != plain.replace(precision="bf16").key


# --------------------------------------------------------------------------- data of your own


def _digits(side):
    """scikit-learn's digits (1797 images of 8x8, 10 classes) as uint8 images ``side`` pixels
    square, as a torchvision user would resize them; the first 1500 train."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    from vflkit.data import ImageData

    digits = load_digits()
    x = torch.from_numpy((digits.images * 255 / 16).astype(np.uint8))[:, None]
    if side != 8:
        x = torch.nn.functional.interpolate(x.float(), size=(side, side), mode="bilinear").round().to(torch.uint8)
    y = torch.from_numpy(digits.target).long()
    return ImageData(f"digits{side}_common", x[:1500], y[:1500], x[1500:], y[1500:], tuple(map(str, range(10))))


def _wine():
    """scikit-learn's wine table (13 numeric columns, 3 classes) with a categorical column added."""
    import pandas as pd
    from sklearn.datasets import load_wine

    from vflkit.data import TabularData

    wine = load_wine(as_frame=True)
    kind = pd.Series(["red", "white", "rose"] * 59 + ["red"], index=wine.data.index)
    return TabularData("wine_common", wine.data.assign(kind=kind), wine.target, "multiclass", categorical=("kind",))


def _own_split(name):
    return RunConfig(paper="demo", dataset=name, method="splitnn", models=("mlp",) * 3, n_parties=3, n_train=None,
                     n_test=None, epochs=5, batch_size=16, lr=0.05, embedding_dim=16)


def _own_multi_owner(name):
    from vflkit.methods.multi_vfl import MultiVFLConfig

    return MultiVFLConfig(dataset=name, scenario="iid", samples_per_owner=200, rounds=2, batch_size=32,
                          local_optimizer="adam", n_test=None)


def _own_one_shot(name):
    from vflkit.training.one_shot import OneShotRun

    return OneShotRun(kind="fig5", dataset=name, method="apc_vfl_mse", n_aligned=60, n_active_features=3, seed=0,
                      epochs=5, folds=3)


def _own_tiles(name):
    from vflkit.training.tiles import TilesRun

    # VGG-16 needs tiles of 8x8 or more to learn in a few epochs: digits resized to 16x16
    return TilesRun.make("adptvfedconv", dataset=name, n_train=600, width=0.25, pretrain_epochs=1,
                         finetune_epochs=1, classifier_epochs=4, batch_size=32, ae_batch_size=32, eval_batch_size=100)


#: Per protocol family: the data of your own it trains on (a table with a categorical column
#: where the family takes tables, else digits), a tiny run of it (seconds on a CPU), and the
#: record's test accuracy. A new family fails the test below until it has an entry.
OWN_DATA_RUNS = {
    "split": (_wine, _own_split, lambda rec: rec["final"]["active"]["test_accuracy"]),
    "multi_owner": (lambda: _digits(8), _own_multi_owner, lambda rec: rec["final"]["test_accuracy"]),
    "one_shot": (_wine, _own_one_shot, lambda rec: rec["final"]["accuracy"]),
    "tiles": (lambda: _digits(16), _own_tiles, lambda rec: rec["final_accuracy"]),
}
#: How far above the majority class's share a tiny run must score (digits: 0.10, wine: 0.40).
OWN_DATA_MARGIN = 0.25


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_trainer_learns_a_dataset_of_your_own_registered_twice(family, tmp_path):
    """Bring your own data (issue 41): every family's trainer takes a registered scikit-learn
    dataset of the kind it trains on and scores OWN_DATA_MARGIN above the majority class;
    registering equal data again warns of nothing, keeps the run's key, and the second run
    reuses the first's record."""
    import warnings

    import numpy as np

    from vflkit.data import ImageData, register_dataset, registered_digest, unregister_dataset

    assert family in OWN_DATA_RUNS, f"add a tiny run of your own data for family {family!r} to OWN_DATA_RUNS"
    make_data, make_run, accuracy = OWN_DATA_RUNS[family]
    trainer = importlib.import_module(FAMILIES[family].trainer)
    data = make_data()
    name = register_dataset(data)
    try:
        run = make_run(name)
        assert isinstance(run, RUN_CLASSES[family]) and registered_digest(name) in json.dumps(run.key_dict())
        rec = trainer.run(run, profile="smoke", device="cpu", results=tmp_path, progress=False)
        labels = np.asarray(data.y_test if isinstance(data, ImageData) else data.target)
        majority = np.bincount(labels).max() / len(labels)
        assert accuracy(rec) >= majority + OWN_DATA_MARGIN, (accuracy(rec), majority)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert register_dataset(make_data()) == name  # equal data, built afresh: harmless
        assert make_run(name).key == run.key
        again = trainer.run(make_run(name), profile="smoke", device="cpu", results=tmp_path, progress=False)
        assert again["finished"] == rec["finished"] and len(list(tmp_path.rglob("*.json"))) == 1
    finally:
        unregister_dataset(name)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_trainer_given_the_other_kind_of_data_says_which_it_takes(family):
    """A run naming a registered dataset of the kind its trainer cannot use is refused when it
    is built, with the kind it takes and how to register it; only the split trainer takes both
    (README, Your own data)."""
    from vflkit.data import ImageData, register_dataset, unregister_dataset

    make_data, make_run, _ = OWN_DATA_RUNS[family]
    kind = "image" if isinstance(make_data(), ImageData) else "tabular"
    name = register_dataset(_wine() if kind == "image" else _digits(8))
    try:
        try:
            make_run(name)
        except ConfigError as refused:
            assert f"takes {kind} data" in str(refused) and "register_dataset" in str(refused), str(refused)
        else:
            assert family == "split", f"{family} built a run on {name!r}, data of the kind it does not take"
    finally:
        unregister_dataset(name)
