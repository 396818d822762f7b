"""`python -m vflkit.run`: one run from key=value words or a config file."""

import json

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
    assert cli.main([*TINY, "--results", str(tmp_path), "--device", "cpu"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["final"] and all(0 < m["test_accuracy"] <= 1 for m in first["final"].values())
    conf = tmp_path / "run.toml"
    conf.write_text("\n".join(f'{k} = {json.dumps(cli.parse_value(v))}' for k, v in (w.split("=") for w in TINY)))
    assert cli.main(["--config", str(conf), "--results", str(tmp_path), "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["key"] == first["key"], "the same config is the same record"
    # the command line overrides the file: another run
    assert cli.main(["--config", str(conf), "seed=1", "--results", str(tmp_path), "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["key"] != first["key"]
    # a YAML file of the same fields (a list as YAML writes it) is the same run again
    import yaml

    fields = dict(w.split("=") for w in TINY)
    conf = tmp_path / "run.yaml"
    conf.write_text(yaml.safe_dump({**{k: cli.parse_value(v) for k, v in fields.items()}, "models": ["mlp"] * 4}))
    assert "- mlp" in conf.read_text()
    assert cli.main(["--config", str(conf), "--results", str(tmp_path), "--device", "cpu"]) == 0
    assert json.loads(capsys.readouterr().out)["key"] == first["key"]


def test_a_bad_field_is_a_clear_error_without_traceback(tmp_path, capsys):
    assert cli.main([*TINY, "epoch=3", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown RunConfig keys ['epoch']" in err and "Traceback" not in err
    bad = tmp_path / "x.yaml"
    bad.write_text("method: [unclosed")
    assert cli.main(["--config", str(bad)]) == 2
    assert "could not be read" in capsys.readouterr().err
