"""Checks every registered run class, method and study passes (scikit-learn's habit of one file
of common checks): a new study, method or run class is checked here without a test of its own."""

import dataclasses
import importlib
import json
import re

import pytest

from vflkit.config import project_root
from vflkit.errors import ConfigError
from vflkit.methods import METHODS, RunConfig
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
