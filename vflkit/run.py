"""One run from the command line or a config file, as VFLAIR's and Flower's users start one:

    python -m vflkit.run method=vfedmh dataset=mnist models=mlp,cnn,lenet,mlp epochs=2 n_train=2000
    python -m vflkit.run --config my_run.toml lr=0.01          # the file, then the command line

Each ``key=value`` is a field of the family's run config (``family=split``, the default: every
field of :class:`vflkit.methods.RunConfig`; ``multi_owner``, ``one_shot`` and ``tiles`` name the
other trainers' configs). Values are read as Python/JSON literals where they parse (``2``,
``0.01``, ``true``, ``None``), a comma makes a list (``models=mlp,cnn,lenet,mlp``), and
``options.<name>=value`` sets one method option. A ``.toml``, ``.yaml`` or ``.json`` file holds
the same keys (``[options]`` as a table). The record goes where every run's goes, under the
profile ``--profile`` (default ``cli``: an ad-hoc profile, never committed), and a second call
with the same config reuses it; the final metrics are printed as JSON.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from .errors import ConfigError, VFLKitError
from .study import FAMILIES, _load, run_class

#: Fields a split-family run gets unless given: the demo study's paper tag (records of ad-hoc
#: runs go to results/<profile>/demo/).
SPLIT_DEFAULTS: dict[str, Any] = {"paper": "demo"}
_WORDS = {"true": True, "false": False, "none": None, "null": None}


def parse_value(text: str) -> Any:
    """A command-line value: a literal where it parses, a list where it has a comma, else the string."""
    if "," in text:
        return [parse_value(part) for part in text.split(",") if part != ""]
    if text.lower() in _WORDS:
        return _WORDS[text.lower()]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_pairs(pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` words into a config dict (``options.x=1`` into ``{"options": {"x": 1}}``)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"expected key=value, got {pair!r} (e.g. method=vfedmh dataset=mnist)")
        if key.startswith("options."):
            out.setdefault("options", {})[key.removeprefix("options.")] = parse_value(value)
        else:
            out[key] = parse_value(value)
    return out


def read_config_file(path: Path) -> dict[str, Any]:
    """A run config from a TOML, YAML or JSON file."""
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    text = path.read_text()
    try:
        if path.suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            raise ConfigError(f"config file {path}: use .toml, .yaml or .json")
    except ConfigError:
        raise
    except Exception as exc:  # a syntax error in the user's file: say where, not a parser traceback
        raise ConfigError(f"config file {path} could not be read: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of run fields, got {type(data).__name__}")
    return data


def build(family: str, fields: dict[str, Any]) -> Any:
    """The family's run config from ``fields`` (an unknown field is the run class's error)."""
    cls = run_class(family)  # an unknown family: a ConfigError listing the known ones
    if family == "split":
        fields = {**SPLIT_DEFAULTS, **fields}
    if hasattr(cls, "from_dict"):
        return cls.from_dict(fields)
    try:
        return cls(**fields)
    except TypeError as exc:
        raise ConfigError(f"{cls.__name__}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vflkit.run", description=__doc__.splitlines()[0],
                                     epilog="e.g. python -m vflkit.run method=splitnn dataset=mnist models=mlp "
                                            "epochs=1 n_train=1000")
    parser.add_argument("fields", nargs="*", metavar="key=value", help="run config fields (family=... picks the trainer)")
    parser.add_argument("--config", type=Path, default=None, help="a .toml, .yaml or .json file of fields")
    parser.add_argument("--profile", default="cli", help="the records' profile folder (default: cli, never committed)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda[:N]")
    parser.add_argument("--results", default=None, help="results folder (default: $VFLKIT_RESULTS or ./results)")
    parser.add_argument("--force", action="store_true", help="recompute even if a record exists")
    args = parser.parse_args(argv)
    try:
        fields = read_config_file(args.config) if args.config else {}
        given = parse_pairs(args.fields)
        if "options" in given and "options" in fields:
            given["options"] = {**fields["options"], **given["options"]}
        fields.update(given)
        if not fields:
            parser.error("give at least method=... and dataset=... (or --config FILE)")
        family = fields.pop("family", "split")
        run = build(family, fields)
        trainer = _load(FAMILIES[family][0])
        record = trainer.run(run, profile=args.profile, device=args.device, results=args.results, force=args.force)
    except VFLKitError as exc:  # what is wrong and what to do, without a traceback
        print(f"vflkit.run: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"key": record["key"], "final": record["final"],
                      "diverged": bool(record.get("diverged")), "wall_time_s": record.get("wall_time_s")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
