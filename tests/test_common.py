"""Checks every registered run class, method and study passes (scikit-learn's habit of one file
of common checks): a new study, method or run class is checked here without a test of its own."""

import dataclasses
import importlib
import json
import re

import pytest

from vflkit import studies
from vflkit.config import project_root
from vflkit.errors import ConfigError
from vflkit.methods import METHODS, ONE_SHOT_METHODS, RunConfig, get_one_shot_method
from vflkit.study import FAMILIES, STUDY_FAMILY, _load

RUN_CLASSES = {family: _load(spec[1]) for family, spec in FAMILIES.items()}


def _flat(groups):
    return [c for g in groups.values() for c in g] if isinstance(groups, dict) else list(groups)


@pytest.mark.parametrize("paper", sorted(STUDY_FAMILY))
def test_study_contract(paper):
    """configs(profile, seeds=, overrides=) gives runs of its family's class, one key per distinct
    config, each rebuilt from its dict with the same key; needs_gpu is a bool and run_priority
    orders every run; run(profile, device=, seeds=, overrides=) exists; an unknown override and
    an unknown profile are ConfigErrors."""
    import inspect

    study = importlib.import_module(f"vflkit.studies.{paper}")
    cls = RUN_CLASSES[STUDY_FAMILY[paper]]
    runs = _flat(study.configs("smoke"))
    assert runs and all(isinstance(r, cls) for r in runs)
    by_key = {}
    for r in runs:
        assert by_key.setdefault(r.key, r) == r, f"{paper}: two different configs share key {r.key}"
        again = cls.from_dict(json.loads(json.dumps(r.to_dict())))
        assert again.key == r.key and again == r
    assert all(isinstance(getattr(study, "needs_gpu", lambda r: False)(r), bool) for r in runs)
    if hasattr(study, "run_priority"):
        sorted(runs, key=lambda r: study.run_priority(r, 0))  # comparable for every run
    assert {"profile", "device", "seeds", "overrides"} <= set(inspect.signature(study.run).parameters)
    with pytest.raises(ConfigError, match="unknown overrides"):
        study.configs("smoke", overrides={"no_such_setting": 1})
    with pytest.raises(ConfigError):
        study.configs("no such profile!")


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
    ignored); a field added with a default (a subclass here) leaves the key of a run that keeps
    the default, and changes it once set, so committed records stay where they are."""
    cls = RUN_CLASSES[family]
    paper = next(p for p, f in STUDY_FAMILY.items() if f == family)
    run = _flat(importlib.import_module(f"vflkit.studies.{paper}").configs("smoke"))[0]
    with pytest.raises(ConfigError, match="unknown"):
        cls.from_dict({**run.to_dict(), "no_such_field": 1})
    config = run.adpt if family == "tiles" else run  # AdptVFedConv's run keys its nested config
    extended = dataclasses.make_dataclass("Extended", [("new_knob", int, dataclasses.field(default=0))],
                                          bases=(type(config),), frozen=True)
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}

    def key(**knob):
        made = extended(**fields, **knob)
        return type(run)(run.variant, made).key if family == "tiles" else made.key

    assert key() == run.key and key(new_knob=1) != run.key


@pytest.mark.parametrize("family", sorted(RUN_CLASSES))
def test_run_class_contract(family):
    """A run class is a frozen dataclass whose key is 16 hex digits of its KEYED_FIELDS (a frozen
    list of its fields), so adding a defaulted field keeps every committed key."""
    cls = RUN_CLASSES[family]
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    names = {f.name for f in dataclasses.fields(cls)}
    if family == "tiles":  # a variant and a nested config, keyed flat
        nested = _load("vflkit.methods.adptvfedconv:AdptVFedConvConfig")
        names = {"variant"} | {f.name for f in dataclasses.fields(nested)}
    keyed = getattr(cls, "KEYED_FIELDS", None)
    assert keyed is not None and set(keyed) - {"paper"} <= names, f"{cls.__name__}.KEYED_FIELDS names no field of it"
    paper = next(p for p, f in STUDY_FAMILY.items() if f == family)
    run = _flat(importlib.import_module(f"vflkit.studies.{paper}").configs("smoke"))[0]
    # a file name: 16 hex digits, or (APC-VFL, AdptVFedConv) a readable prefix and a hash
    assert re.fullmatch(r"([A-Za-z0-9_]+_)?[0-9a-f]{10,16}", run.key), run.key


@pytest.mark.parametrize("paper", sorted(STUDY_FAMILY))
def test_a_committed_record_sits_at_its_config_key(paper):
    """One committed record per study and profile (not every record: this must not grow with
    them) rebuilds to the key it is filed under."""
    cls = RUN_CLASSES[STUDY_FAMILY[paper]]
    seen = 0
    for profile in ("quick", "paper"):
        files = sorted((project_root() / "results" / profile / paper).glob("*.json"))
        if files:
            rec = json.loads(files[0].read_text())
            assert cls.from_dict(rec["config"]).key == rec["key"] == files[0].stem
            seen += 1
    if paper != "demo":  # the demo's records are never committed
        assert seen, f"no committed record of {paper}"


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


def test_a_new_defaulted_field_keeps_every_key():
    """Adding a field with a default to a run's config (here AdptVFedConv's nested one, which
    used to hash its whole config) keeps the key of every run that leaves it at its default."""
    from vflkit.methods import adptvfedconv as A
    from vflkit.studies import adptvfedconv
    from vflkit.training.tiles import TilesRun

    @dataclasses.dataclass(frozen=True)
    class Extended(A.AdptVFedConvConfig):
        new_knob: int = 0

    run = adptvfedconv.all_runs(adptvfedconv.configs("smoke"))[0]
    fields = {f.name: getattr(run.adpt, f.name) for f in dataclasses.fields(run.adpt)}
    assert TilesRun(run.variant, Extended(**fields)).key == run.key
    assert TilesRun(run.variant, Extended(**fields, new_knob=1)).key != run.key
    plain = RunConfig(paper="demo", dataset="mnist", method="splitnn", models="mlp")
    assert "resnet_cut" not in RunConfig.KEYED_FIELDS and plain.key == plain.replace(resnet_cut="stages").key
