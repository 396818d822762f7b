"""`python -m vflkit.run`: one run from key=value words or a config file."""

import dataclasses
import json
import subprocess
import sys

import pytest

from vflkit import run as cli
from vflkit.errors import ConfigError
from vflkit.methods import RunConfig

TINY = ["method=splitnn", "dataset=mnist", "models=mlp", "epochs=1", "n_train=256", "n_test=256", "batch_size=64"]


def test_values_parse_as_literals_lists_and_options():
    d = cli.parse_pairs(["lr=0.01", "models=mlp,cnn,lenet,mlp", "n_test=None", "options.blinding=false",
                         "dataset=mnist", "el_pl=1,2"])
    assert d == {"lr": 0.01, "models": ["mlp", "cnn", "lenet", "mlp"], "n_test": None,
                 "options": {"blinding": False}, "dataset": "mnist", "el_pl": [1, 2]}
    run = cli.build("split", {**d, "method": "vfedmh"})
    assert isinstance(run, RunConfig) and run.models == ("mlp", "cnn", "lenet", "mlp") and run.el_pl == (1, 2)
    with pytest.raises(ConfigError, match="expected key=value"):
        cli.parse_pairs(["mnist"])
    with pytest.raises(ConfigError, match="Invalid family"):
        cli.build("splitt", d)


def test_a_run_from_the_command_line_and_from_a_file_is_one_run(tmp_path, capsys):
    assert cli.main([*TINY, "--results", str(tmp_path), "--device", "cpu", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["final"] and all(0 < m["test_accuracy"] <= 1 for m in first["final"].values())
    conf = tmp_path / "run.toml"
    conf.write_text("\n".join(f'{k} = {json.dumps(cli.parse_value(v))}' for k, v in (w.split("=") for w in TINY)))
    assert cli.main(["--config", str(conf), "--results", str(tmp_path), "--device", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["key"] == first["key"], "the same config is the same record"
    # the command line overrides the file: another run
    assert cli.main(["--config", str(conf), "seed=1", "--results", str(tmp_path), "--device", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["key"] != first["key"]
    # a YAML file of the same fields (a list as YAML writes it) is the same run again
    import yaml

    fields = dict(w.split("=") for w in TINY)
    conf = tmp_path / "run.yaml"
    conf.write_text(yaml.safe_dump({**{k: cli.parse_value(v) for k, v in fields.items()}, "models": ["mlp"] * 4}))
    assert "- mlp" in conf.read_text()
    assert cli.main(["--config", str(conf), "--results", str(tmp_path), "--device", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["key"] == first["key"]


def test_a_bad_field_is_a_clear_error_without_traceback(tmp_path, capsys):
    assert cli.main([*TINY, "epoch=3", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown split fields ['epoch']" in err and "Traceback" not in err
    bad = tmp_path / "x.yaml"
    bad.write_text("method: [unclosed")
    assert cli.main(["--config", str(bad)]) == 2
    assert "could not be read" in capsys.readouterr().err


def test_a_field_given_twice_is_an_error():
    """seed=0 seed=1 does not silently train seed 1."""
    with pytest.raises(ConfigError, match="seed is given twice"):
        cli.parse_pairs(["seed=0", "seed=1"])
    with pytest.raises(ConfigError, match="options.bits is given twice"):
        cli.parse_pairs(["options.bits=8", "options.bits=4"])


@pytest.mark.parametrize("text", ['{"method": "c_vfl", "options": 5}', '{"method": "c_vfl", "options": [1]}'])
def test_options_of_the_wrong_shape_in_a_file_is_a_one_line_error(tmp_path, capsys, text):
    """"options": 5 in a file is not a raw TypeError when options.x=... is merged into it."""
    conf = tmp_path / "run.json"
    conf.write_text(text)
    assert cli.main(["--config", str(conf), "options.local_iterations=2", "dataset=mnist", "models=mlp"]) == 2
    err = capsys.readouterr().err
    assert "options must be a mapping" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    conf.write_text('{"method": "c_vfl", "options": {"bits": 8}}')
    assert cli.main(["--config", str(conf), "options=5", "dataset=mnist", "models=mlp"]) == 2
    assert "options must be a mapping" in capsys.readouterr().err


def _cli(*words: str) -> subprocess.CompletedProcess:
    """The CLI in a fresh interpreter that also reports whether torch got imported."""
    code = ("import sys; from vflkit import run; rc = run.main(sys.argv[1:]); "
            "print('torch imported' if 'torch' in sys.modules else 'no torch', file=sys.stderr); sys.exit(rc)")
    return subprocess.run([sys.executable, "-c", code, *words], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("words, message", [
    (["method=splitnn", "dataset=mnist", "models=mlp", "epoch=3"], "unknown split fields ['epoch']"),
    (["method=foo", "dataset=mnist"], "missing split field(s) models"),
    (["method=foo", "dataset=mnist", "models=mlp"], "Invalid method 'foo'; choose one of local, splitnn"),
    (["family=one_shot", "method=apc_vfl", "dataset=breast_cancer"],
     "missing one_shot field(s) kind, n_aligned, n_active_features, seed"),
    (["family=tiles", "dataset=cifar10"], "missing tiles field(s) variant"),
    (["family=multi_owner", "rounds=2", "round=3"], "unknown multi_owner fields ['round']"),
    (["method=splitnn", "dataset=mnist", "models=mlp", "epochs=two"], "epochs must be an integer, got 'two' (str)"),
    (["method=splitnn", "dataset=mnist", "models=mlp", "lr_gamma=fast"], "lr_gamma must be a number, got 'fast'"),
    (["method=splitnn", "dataset=mnist", "models=mlp", "options=5"], "options must be a mapping"),
    (["family=multi_owner", "disjoint=3"], "disjoint must be true or false, got 3"),
    (["family=split,tiles", "method=splitnn"], "Invalid family ['split', 'tiles']; choose one of split"),
])
def test_a_missing_or_wrong_field_is_one_line_before_torch(words, message):
    """Unknown and missing fields and an unknown method are reported before torch loads (seconds)."""
    done = _cli(*words)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and message in err[0] and err[1:] == ["no torch"], done.stderr


def test_list_shows_families_methods_datasets_and_fields_with_defaults():
    """--list is the CLI's reference: every family, method, dataset and field with its default."""
    done = _cli("--list")
    out = done.stdout
    assert done.returncode == 0 and done.stderr.strip() == "no torch"
    for word in ("split, multi_owner, one_shot, tiles", "vfedmh", "c_vfl", "apc_vfl_mse", "fashion_mnist",
                 "breast_cancer", "epochs=10", "lr=0.05", "rounds=500", "variant", "n_aligned", "lr=0.001"):
        assert word in out, word


@pytest.mark.parametrize("family", ["split", "multi_owner", "one_shot", "tiles"])
def test_the_fields_read_from_source_are_the_run_classes_fields(family):
    """--list and the checks read the classes' source; the classes themselves must agree."""
    from vflkit.study import run_class

    cls = run_class(family)
    real = {f.name: f for f in dataclasses.fields(cls)}
    if family == "tiles":
        from vflkit.methods.adptvfedconv import AdptVFedConvConfig

        real.pop("adpt")
        real.update({f.name: f for f in dataclasses.fields(AdptVFedConvConfig)})
    listed = {f.name: f for f in cli.fields_of(family)}
    assert set(listed) == set(real)
    for name, f in real.items():
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        assert (listed[name].default is cli._REQUIRED) == (required and name not in cli.SPLIT_DEFAULTS), name
        if f.default is not dataclasses.MISSING and name not in cli.SPLIT_DEFAULTS:
            assert eval(listed[name].default) == f.default, name  # noqa: S307 (our own source text)


def test_the_result_is_in_percent_with_its_path_and_whether_it_was_trained(tmp_path, capsys):
    """The printed result says trained or loaded, where the record is, and scores in percent."""
    words = [*TINY, "--results", str(tmp_path), "--device", "cpu"]
    assert cli.main(words) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("trained: ") and "/cli/demo/" in first and ".json" in first, out
    assert " %" in out and "test_accuracy" in out
    assert cli.main(words) == 0
    again = capsys.readouterr().out
    assert again.startswith("loaded: ") and again.splitlines()[1:] == out.splitlines()[1:]
