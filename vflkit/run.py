"""One run from the command line or a config file, as VFLAIR's and Flower's users start one:

    python -m vflkit.run method=vfedmh dataset=mnist models=mlp,cnn,lenet,mlp epochs=2 n_train=2000
    python -m vflkit.run --config my_run.toml lr=0.01          # the file, then the command line
    python -m vflkit.run --list                                # families, methods, datasets, fields

Each ``key=value`` is a field of the family's run config (``family=split`` by default). Unknown
and missing fields are reported before torch is imported: the fields are read from the run
classes' source. How values are read, the config files and what is printed: docs/command-line.md.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any, NamedTuple, Sequence

from .errors import ConfigError, VFLKitError
from .training import FAMILIES, load, run_class

#: Fields a split-family run gets unless given: the demo study's paper tag (records of ad-hoc
#: runs go to results/<profile>/demo/).
SPLIT_DEFAULTS: dict[str, Any] = {"paper": "demo"}
_WORDS = {"true": True, "false": False, "none": None, "null": None}
#: A family whose command-line fields are its run class's fields with one nested config spread
#: out (``TilesRun.from_dict`` takes ``variant`` and the AdptVFedConv config's fields).
_SPREAD: dict[str, tuple[str, str]] = {"tiles": ("adpt", "vflkit.methods.adptvfedconv:AdptVFedConvConfig")}
#: Where the names --list shows live (module-level literals, read from source like the fields).
_METHODS = ("vflkit.methods", "METHODS")
_ONE_SHOT_METHODS = ("vflkit.methods", "ONE_SHOT_METHODS")
_DATASETS = (("vflkit.data", "IMAGE_DATASETS"), ("vflkit.data", "TABULAR_DATASETS"))
_REQUIRED = object()


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
    """``key=value`` words into a config dict (``options.x=1`` into ``{"options": {"x": 1}}``); a
    field given twice is a ConfigError."""
    out: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"expected key=value, got {pair!r} (e.g. method=vfedmh dataset=mnist)")
        if key in seen:
            raise ConfigError(f"{key} is given twice ({seen[key]} and {pair}); give each field once")
        seen[key] = pair
        if key.startswith("options."):
            if "options" in out and not isinstance(out["options"], dict):
                raise ConfigError(f"options is given as {out['options']!r} and {pair}; give options.<name>=... only")
            out.setdefault("options", {})[key.removeprefix("options.")] = parse_value(value)
        elif key == "options" and "options" in out:
            raise ConfigError("options is given both whole and as options.<name>; give options.<name>=... only")
        else:
            out[key] = parse_value(value)
    return out


def read_config_file(path: Path) -> dict[str, Any]:
    """A run config from a TOML, YAML or JSON file."""
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    if path.suffix not in (".toml", ".yaml", ".yml", ".json"):
        raise ConfigError(f"config file {path}: use .toml, .yaml or .json")
    text = path.read_text()
    try:
        if path.suffix == ".toml":
            data: Any = tomllib.loads(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # a syntax error in the user's file: say where, not a parser traceback
        raise ConfigError(f"config file {path} could not be read: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of run fields, got {type(data).__name__}")
    if "options" in data and not isinstance(data["options"], dict):
        raise ConfigError(f"config file {path}: options must be a mapping of option -> value (e.g. options: "
                          f"{{local_iterations: 2}}), got {data['options']!r}")
    return data


# ------------------------------------------------------------------ the fields, without torch


class Field(NamedTuple):
    """One field of a run config as its class's source declares it."""

    name: str
    default: Any  # the default's source text, or _REQUIRED
    annotation: str = ""  # its type as written in the source, e.g. "int | None"


def _module_file(module: str) -> Path:
    # the file is found by its name: importlib's find_spec would import the parent packages
    # (vflkit.methods imports torch)
    base = Path(__file__).resolve().parent.parent.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    raise ConfigError(f"module {module} is not found beside vflkit.run; is vflkit installed whole?")


@functools.lru_cache(maxsize=None)
def _constants(module: str) -> dict[str, ast.expr | tuple[str, str]]:
    """The module-level ``NAME = value`` (or ``NAME: T = value``) assignments of ``module``,
    and the names it imports from a sibling module as ``(module, name)`` to look up there."""
    out: dict[str, ast.expr | tuple[str, str]] = {}
    package = module.split(".") if _module_file(module).name == "__init__.py" else module.split(".")[:-1]
    for node in ast.parse(_module_file(module).read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level and node.module:
            source = ".".join([*package[:len(package) - node.level + 1], node.module])
            for alias in node.names:
                out[alias.asname or alias.name] = (source, alias.name)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out[node.target.id] = node.value
    return out


def _constant(module: str, name: str) -> ast.expr | None:
    """The literal a module-level name of ``module`` is assigned (followed through imports)."""
    value = _constants(module).get(name)
    return _constant(*value) if isinstance(value, tuple) else value


def _names_of(module: str, name: str) -> list[str]:
    """The string keys (a dict) or items (a tuple) of a module-level literal."""
    node = _constant(module, name)
    items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", [])
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def _default_text(module: str, node: ast.expr) -> str:
    """A field default as a reader wants it: a named module constant resolved to its literal,
    ``field(default_factory=dict)`` as ``{}``."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "field":
        for kw in node.keywords:
            if kw.arg == "default":
                return _default_text(module, kw.value)
            if kw.arg == "default_factory":
                factory = ast.unparse(kw.value)
                return {"dict": "{}", "list": "[]", "tuple": "()"}.get(factory, f"{factory}()")
    if isinstance(node, ast.Name) and (value := _constant(module, node.id)) is not None:
        return _default_text(module, value)
    return ast.unparse(node)


@functools.lru_cache(maxsize=None)
def _class_fields(spec: str) -> tuple[Field, ...]:
    """The dataclass fields of ``module:Class`` read from its source (ClassVars left out)."""
    module, _, name = spec.partition(":")
    tree = ast.parse(_module_file(module).read_text())
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    if cls is None:
        raise ConfigError(f"run class {spec} is not found in its module's source")
    out = []
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        if "ClassVar" in ast.unparse(node.annotation):
            continue
        default = _REQUIRED if node.value is None else _default_text(module, node.value)
        out.append(Field(node.target.id, default, ast.unparse(node.annotation)))
    return tuple(out)


def fields_of(family: str) -> tuple[Field, ...]:
    """The fields a ``family=...`` run takes on the command line, with their defaults (read from
    source); an unknown family is a ConfigError."""
    if not isinstance(family, str) or family not in FAMILIES:  # a list from a file is not hashable
        raise ConfigError(f"Invalid family {family!r}; choose one of {', '.join(FAMILIES)}")
    out = list(_class_fields(FAMILIES[family].run_class))
    if family in _SPREAD:
        nested, spec = _SPREAD[family]
        out = [f for f in out if f.name != nested] + list(_class_fields(spec))
    if family == "split":  # the CLI's default paper tag
        out = [f._replace(default=repr(SPLIT_DEFAULTS[f.name])) if f.name in SPLIT_DEFAULTS else f for f in out]
    return tuple(out)


#: The plain annotations whose values are checked before torch: what a value of each must be.
_SHAPES: dict[str, tuple[str, Any]] = {
    "int": ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "int | None": ("an integer or None", lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool))),
    "float": ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "bool": ("true or false", lambda v: isinstance(v, bool)),
    "str": ("a name", lambda v: isinstance(v, str)),
    "dict[str, Any]": ("a mapping (options.<name>=value on the command line)", lambda v: isinstance(v, dict)),
}


def check_fields(family: str, fields: dict[str, Any]) -> None:
    """One-line ConfigErrors for unknown and missing fields, a value of the wrong plain type and an
    unknown method, before the run class (and torch) is imported; the run class checks the rest."""
    known = fields_of(family)
    names = [f.name for f in known]
    unknown = sorted(set(fields) - set(names) - ({"paper"} if family == "multi_owner" else set()))
    if unknown:
        raise ConfigError(f"unknown {family} fields {unknown}; valid fields: {', '.join(names)} "
                          "(python -m vflkit.run --list shows their defaults)")
    missing = [f.name for f in known if f.default is _REQUIRED and f.name not in fields]
    if missing:
        raise ConfigError(f"missing {family} field(s) {', '.join(missing)}; give them as key=value "
                          "(python -m vflkit.run --list shows every field)")
    for f in known:  # a value of the wrong type: its field, what it must be and what was given
        shape = _SHAPES.get(f.annotation)
        if f.name in fields and shape is not None and not shape[1](fields[f.name]):
            raise ConfigError(f"{f.name} must be {shape[0]}, got {fields[f.name]!r} ({type(fields[f.name]).__name__})")
    if family == "split" and isinstance(fields.get("method"), str):
        methods = _names_of(*_METHODS)
        if fields["method"].strip().lower() not in methods:
            raise ConfigError(f"Invalid method {fields['method']!r}; choose one of {', '.join(methods)}")


def listing() -> str:
    """What ``--list`` prints: the families, methods, datasets and every family's fields."""
    lines = [f"families (family=..., default split): {', '.join(FAMILIES)}",
             f"methods of the split family (method=...): {', '.join(_names_of(*_METHODS))}",
             f"methods of the one_shot family (method=...): {', '.join(_names_of(*_ONE_SHOT_METHODS))}",
             f"built-in datasets (dataset=...): {', '.join(n for m in _DATASETS for n in _names_of(*m))}"
             " (data of your own: register it in Python, see docs/own-data.md)"]
    for family in FAMILIES:
        lines.append(f"\nfields of family={family} (a name alone is required; name=default):")
        shown = [f.name if f.default is _REQUIRED else f"{f.name}={f.default}" for f in fields_of(family)]
        lines.append("  " + "  ".join(shown))
    return "\n".join(lines)


# ------------------------------------------------------------------ the run


def build(family: str, fields: dict[str, Any]) -> Any:
    """The family's run config from ``fields`` (an unknown field is the run class's error)."""
    cls = run_class(family)  # an unknown family: a ConfigError listing the known ones
    return cls.from_dict({**SPLIT_DEFAULTS, **fields} if family == "split" else fields)


def _percent(name: str, value: Any) -> str:
    if isinstance(value, float) and any(w in name for w in ("accuracy", "f1", "auc")):
        return f"{name} {100 * value:.2f} %"
    return f"{name} {value:.4g}" if isinstance(value, float) else f"{name} {value}"


def summary(record: dict[str, Any], path: Path, status: str) -> str:
    """The printed result: trained or loaded, the record's path, each final metric (scores in percent)."""
    try:
        shown = os.path.relpath(path)
    except ValueError:
        shown = str(path)
    wall = record.get("wall_time_s")
    lines = [f"{status}: {shown}" + (f" ({wall:.1f} s of training)" if isinstance(wall, (int, float)) else "")]
    final = record.get("final") or {}
    if final and all(isinstance(v, dict) for v in final.values()):
        lines += [f"  {party}: " + ", ".join(_percent(k, v) for k, v in m.items()) for party, m in final.items()]
    else:
        lines.append("  " + ", ".join(_percent(k, v) for k, v in final.items()))
    if record.get("diverged"):
        lines.append(f"  diverged: {record['diverged']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vflkit.run", description=__doc__.splitlines()[0],
                                     epilog="e.g. python -m vflkit.run method=splitnn dataset=mnist models=mlp "
                                            "epochs=1 n_train=1000; --list shows every family, method, dataset "
                                            "and field with its default")
    parser.add_argument("fields", nargs="*", metavar="key=value", help="run config fields (family=... picks the trainer)")
    parser.add_argument("--list", action="store_true", help="show the families, methods, datasets and fields, and exit")
    parser.add_argument("--config", type=Path, default=None, help="a .toml, .yaml or .json file of fields")
    parser.add_argument("--profile", default="cli", help="the records' profile folder (default: cli, never committed)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda[:N]")
    parser.add_argument("--results", default=None, help="results folder (default: $VFLKIT_RESULTS or ./results)")
    parser.add_argument("--force", action="store_true", help="recompute even if a record exists")
    parser.add_argument("--json", action="store_true", help="print the result as JSON (fractions, not percent)")
    args = parser.parse_args(argv)
    if args.list:
        print(listing())
        return 0
    try:
        fields = read_config_file(args.config) if args.config else {}
        given = parse_pairs(args.fields)
        if "options" in given and not isinstance(given["options"], dict):
            raise ConfigError(f"options must be a mapping: give options.<name>=value, got options={given['options']!r}")
        if "options" in given and "options" in fields:
            given["options"] = {**fields["options"], **given["options"]}
        fields.update(given)
        if not fields:
            parser.error("give at least method=... and dataset=... (or --config FILE); --list shows the fields")
        family = fields.pop("family", "split")
        check_fields(family, fields)  # before torch: unknown, missing, a method no one has
        from . import records

        run = build(family, fields)
        path = records.record_path(run, args.profile, args.results)
        before = path.stat().st_mtime_ns if path.exists() else None
        trainer = load(FAMILIES[family].trainer)
        record = trainer.run(run, profile=args.profile, device=args.device, results=args.results, force=args.force)
    except VFLKitError as exc:  # what is wrong and what to do, without a traceback
        print(f"vflkit.run: {exc}", file=sys.stderr)
        return 2
    status = "loaded" if before is not None and path.exists() and path.stat().st_mtime_ns == before else "trained"
    if args.json:
        print(json.dumps({"key": record["key"], "status": status, "path": str(path), "final": record["final"],
                          "diverged": bool(record.get("diverged")), "wall_time_s": record.get("wall_time_s")},
                         indent=2))
    else:
        print(summary(record, path, status))
    return 0


if __name__ == "__main__":
    sys.exit(main())
