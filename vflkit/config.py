"""Where vflkit finds data and writes caches and results, and which device it uses (the variables:
docs/profiles-and-scheduler.md). ``./data`` is ``data/`` of the project checkout when run from inside
it (e.g. from ``notebooks/`` in JupyterLab), else of the working directory. The decoded-tensor cache
never lives under the data root: that may be read-only (CI points it at a shared, read-only copy).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import numbers
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, NamedTuple

if TYPE_CHECKING:  # torch is imported where a device is resolved: `--help` needs no torch
    import torch

from .errors import ConfigError
from .gpu import cuda_unavailable_message

DATA_ENV = "VFLKIT_DATA"
CACHE_ENV = "VFLKIT_CACHE"
RESULTS_ENV = "VFLKIT_RESULTS"
FIGURES_ENV = "VFLKIT_FIGURES"

PROFILES: tuple[str, ...] = ("smoke", "quick", "paper")


def check_profile(profile: str) -> str:
    """Return ``profile`` if it is one of :data:`PROFILES`, else raise a ConfigError."""
    if not isinstance(profile, str) or profile not in PROFILES:
        raise ConfigError(f"Invalid profile {profile!r}; choose one of {', '.join(PROFILES)}")
    return profile


def is_simple_name(name: Any) -> bool:
    """Whether ``name`` is also one folder (a profile's or a study's): 1-64 letters, digits, ``_``
    and ``-``, not starting with ``_`` or ``-``."""
    return isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", name) is not None


def check_record_profile(profile: str) -> str:
    """A profile name for records, tables and figures: one of :data:`PROFILES`, or a simple name
    of your own for ad-hoc runs (``results/<name>/``, never committed)."""
    if isinstance(profile, str) and (profile in PROFILES or is_simple_name(profile)):
        return profile
    raise ConfigError(f"Invalid profile {profile!r}; choose one of {', '.join(PROFILES)}, or a name of your own "
                      "made of letters, digits, '_' and '-' for ad-hoc runs")


#: The papers a run may name: filled from above by :mod:`vflkit.studies` (its study modules,
#: listed at its import, and every study registered), so this module reads no layer above it.
_PAPERS: set[str] = set()


def add_papers(*names: str) -> None:
    """Make ``names`` valid values of a run's ``paper`` (:func:`check_paper`)."""
    _PAPERS.update(names)


def drop_paper(name: str) -> None:
    """Make ``name`` no longer a valid ``paper`` (a test's toy study, unregistered)."""
    _PAPERS.discard(name)


def check_paper(paper: str) -> str:
    """Return ``paper`` if it names a study :mod:`vflkit.studies` knows, else raise a ConfigError."""
    if is_simple_name(paper) and paper in _PAPERS:
        return paper
    raise ConfigError(f"Invalid paper {paper!r}; choose one of {', '.join(sorted(_PAPERS))} (paper='demo' for "
                      "runs of your own; a study of your own: vflkit.studies.register)")


def check_seeds(seeds: Any, *, name: str = "seeds") -> tuple[int, ...]:
    """``seeds`` as a tuple of integers; anything else is a one-line ConfigError."""
    if isinstance(seeds, (str, bytes, dict)) or not isinstance(seeds, Iterable):
        raise ConfigError(f"{name} must be a non-empty list of integers, e.g. [0, 1, 2], got {seeds!r}")
    seeds = tuple(seeds)
    if not seeds:
        raise ConfigError(f"{name} is empty; give at least one integer seed, e.g. [0]")
    bad = [s for s in seeds if not is_int(s)]
    if bad:
        raise ConfigError(f"{name} must be integers, got {bad!r} in {list(seeds)!r}")
    out = tuple(int(s) for s in seeds)
    # a repeated seed is one run counted twice: tables would report it as two seeds that agree
    # exactly (std 0) and the claims' noise band would shrink with it
    repeated = sorted({s for s in out if out.count(s) > 1})
    if repeated:
        raise ConfigError(f"{name} lists seed(s) {repeated} more than once in {list(out)!r}; each seed is one "
                          "run, give each once")
    return out


def check_seeds_once(seeds: Any, overrides: Any, keys: Iterable[str] = ("seeds",)) -> None:
    """A ConfigError when seeds are given both as a study's ``seeds`` argument and in its
    ``overrides`` (under one of ``keys``): neither may silently win."""
    if seeds is None or not isinstance(overrides, dict):
        return
    both = [k for k in keys if k in overrides]
    if both:
        raise ConfigError(f"seeds are given twice: seeds={seeds!r} and overrides[{both[0]!r}]="
                          f"{overrides[both[0]]!r}; give them in one place")


def is_int(value: Any) -> bool:
    """An integer, not a bool (numpy integers count)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_int(name: str, value: Any, *, minimum: int | None = None, optional: bool = False) -> None:
    """A ConfigError unless ``value`` is an integer (not a float, not a bool) >= ``minimum``
    (None too where ``optional``)."""
    if optional and value is None:
        return
    what = "an integer" + (f" >= {minimum}" if minimum is not None else "") + (" or None" if optional else "")
    if not is_int(value):
        raise ConfigError(f"{name} must be {what}, got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name} must be {what}, got {value!r}")


def check_rate(name: str, value: Any) -> None:
    """A ConfigError unless ``value`` is a finite, positive number (not a string, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigError(f"{name} must be a positive number such as 0.01, got {value!r} ({type(value).__name__})")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")


def check_name(name: str, value: Any) -> str:
    """``value`` stripped and lower-cased (dataset and method names), so that ``" MNIST "``
    and ``"mnist"`` are one run; a non-string is a ConfigError."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name} must be a non-empty name such as 'mnist', got {value!r}")
    return value.strip().lower()


class KeyFormat(NamedTuple):
    """How a run class turns its keyed payload (:meth:`KeyedRun.key_dict`) into the hash part
    of its key: a :mod:`hashlib` algorithm, the hex digits kept, and the JSON spacing."""

    hash: str
    digits: int
    compact: bool  # json.dumps with separators (",", ":"); else its default (", ", ": ")


#: The split and Multi-VFL runs' keys: 16 hex digits of SHA-256 of compact canonical JSON.
SHA256_16 = KeyFormat("sha256", 16, compact=True)
#: The APC-VFL and AdptVFedConv runs' hash after their readable prefix: 10 hex digits of SHA-1 of
#: canonical JSON with json.dumps' default spacing.
SHA1_10 = KeyFormat("sha1", 10, compact=False)


class KeyedRun:
    """The one key scheme of every run class (a mixin for frozen dataclasses); the key names the
    run's record and hashes :meth:`key_dict`. A subclass declares :attr:`KEYED_FIELDS` and
    ``to_dict()``; the scheme and its hooks: docs/records-and-claims.md, "Run keys"."""

    #: The fields every key hashes, default or not. Never edit a class's list: every committed
    #: key hashes it (a subclass may not redefine its base's, :meth:`__init_subclass__`).
    KEYED_FIELDS: ClassVar[tuple[str, ...]]
    #: The digest of the keyed payload (the format the class's committed keys have).
    KEY_FORMAT: ClassVar[KeyFormat] = SHA256_16

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        keyed = cls.__dict__.get("KEYED_FIELDS")
        inherited = next((getattr(b, "KEYED_FIELDS") for b in cls.__mro__[1:] if "KEYED_FIELDS" in b.__dict__),
                         None)
        if keyed is None and inherited is None:
            raise TypeError(f"{cls.__name__} declares no KEYED_FIELDS (the frozen tuple of fields its keys hash)")
        if keyed is not None and (not isinstance(keyed, tuple) or not all(isinstance(k, str) for k in keyed)):
            raise TypeError(f"{cls.__name__}.KEYED_FIELDS must be a tuple of field names, got {keyed!r}")
        if keyed is not None and inherited is not None and keyed != inherited:
            # a subclass keys the same runs; another list would move every record of its base
            raise TypeError(f"{cls.__name__} redefines KEYED_FIELDS of its base; add a defaulted field instead")
        if not isinstance(cls.KEY_FORMAT, KeyFormat):
            raise TypeError(f"{cls.__name__}.KEY_FORMAT must be a KeyFormat, got {cls.KEY_FORMAT!r}")

    def to_dict(self) -> dict[str, Any]:
        """The run's plain JSON-able dict (its record's ``config``); every subclass defines it."""
        raise NotImplementedError(f"{type(self).__name__} defines no to_dict()")

    def key_prefix(self) -> str:
        """A readable start of the key (APC-VFL's and AdptVFedConv's committed file names have
        one); "" (none) unless a subclass says otherwise."""
        return ""

    def key_defaults(self) -> type:
        """The dataclass whose field defaults decide which later fields are hashed: the run's
        own class, unless its ``to_dict()`` spreads a nested config (AdptVFedConv's)."""
        return type(self)

    def key_dict(self) -> dict[str, Any]:
        """The part of ``to_dict()`` the key hashes (see the class docstring)."""
        keyed = set(self.KEYED_FIELDS)
        defaults = _default_texts(self.key_defaults())
        out = {k: v for k, v in self.to_dict().items()
               if k in keyed or k not in defaults or _text(v) != defaults[k]}
        dataset = getattr(self, "dataset", None)
        digest = registered_data_digest(dataset) if isinstance(dataset, str) else None
        if digest is not None:  # built-in datasets: the name alone, so committed keys stay
            out["data_digest"] = digest
        return out

    @property
    def key(self) -> str:
        """The record's file name: :meth:`key_prefix`, then the digest of :meth:`key_dict`."""
        fmt = self.KEY_FORMAT
        blob = json.dumps(self.key_dict(), sort_keys=True, separators=(",", ":") if fmt.compact else None)
        digest = hashlib.new(fmt.hash, blob.encode()).hexdigest()[:fmt.digits]
        prefix = self.key_prefix()
        return f"{prefix}_{digest}" if prefix else digest

    @classmethod
    def refuse_unknown(cls, d: dict[str, Any], known: Iterable[str]) -> None:
        """A ConfigError naming the keys of ``d`` (a record's ``config``) that are not ``known``:
        an old or misspelt record is an error, never ignored."""
        known = set(known)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown {cls.__name__} keys {unknown}; valid keys: {', '.join(sorted(known))}")


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


@functools.lru_cache(maxsize=None)
def _default_texts(cls: type) -> dict[str, str]:
    """Each defaulted field of the dataclass ``cls`` as canonical JSON (computed once per class)."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = _text(f.default)
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            out[f.name] = _text(f.default_factory())  # type: ignore[misc]
    return out


def registered_data_digest(dataset: str, *, recheck: bool = False) -> str | None:
    """The content digest of a dataset of your own registered under ``dataset``
    (:func:`vflkit.data.registered_digest`), None for a built-in or unregistered name: run keys
    add it. Nothing is registered before :mod:`vflkit.data` is imported, so it is not imported here."""
    data = sys.modules.get("vflkit.data")
    return data.registered_digest(dataset, recheck=recheck) if data is not None else None


#: How a researcher brings data of each kind (the end of every "needs ... data" error).
REGISTER_HOW: dict[str, str] = {
    "image": ("register images of your own with vflkit.data.register_dataset(ImageData(name, x_train, y_train, "
              "x_test, y_test, classes)) or ImageData.from_torchvision(name, train, test)"),
    "tabular": ("register a table of your own with vflkit.data.register_dataset(TabularData(name, features, "
                "target, task))"),
}


def registered_kind(dataset: str) -> str | None:
    """``"image"`` or ``"tabular"`` for a dataset of your own registered under ``dataset``, None
    for any other name (without importing :mod:`vflkit.data`, as :func:`registered_data_digest`)."""
    data = sys.modules.get("vflkit.data")
    if data is None or not isinstance(dataset, str) or not data.is_registered(dataset):
        return None
    return "image" if isinstance(data.load_dataset(dataset), data.ImageData) else "tabular"


def check_dataset(dataset: str, *, method: str, kind: str, builtin: Iterable[str]) -> None:
    """A ConfigError unless ``dataset`` is one of ``builtin`` or a registered dataset of ``kind``
    (``"image"`` or ``"tabular"``), naming the data ``method`` takes and how to register it."""
    builtin = tuple(builtin)
    if isinstance(dataset, str) and dataset.strip().lower() in builtin:
        return
    found = registered_kind(dataset)
    if found == kind:
        return
    what = f"{dataset!r} is registered as {found} data" if found is not None else f"Invalid dataset {dataset!r}"
    raise ConfigError(f"{what}; {method} takes {kind} data: choose one of {', '.join(builtin)}, or "
                      f"{REGISTER_HOW[kind]}")


def apply_overrides(settings: dict[str, Any], overrides: dict[str, Any] | None, *,
                    run_fields: Iterable[str] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a study's ``overrides`` into ``(settings, run_fields)``: a key naming one of the
    profile's ``settings`` replaces it, one naming a field of ``run_fields`` is set on every run,
    any other is an error listing the valid ones. Lists (papermill's JSON) become tuples."""
    if overrides is not None and not isinstance(overrides, dict):
        raise ConfigError(f"overrides must be a dict of setting -> value, got {overrides!r}")
    overrides = dict(overrides or {})
    fields = set(run_fields)
    unknown = sorted(set(overrides) - set(settings) - fields)
    if unknown:
        raise ConfigError(f"unknown overrides {unknown}; valid: profile settings "
                          f"{', '.join(sorted(settings))}" + (f"; run fields {', '.join(sorted(fields - set(settings)))}"
                                                              if fields - set(settings) else ""))
    for k, v in overrides.items():
        if k in settings:
            if k.endswith("seeds") and v is not None:  # seeds, criteo_seeds, fig6_seeds, ...
                overrides[k] = check_seeds(v, name=f"overrides[{k!r}]" if k != "seeds" else "seeds")
            else:
                _check_like(f"overrides[{k!r}]", v, settings[k])
    merged = {**settings, **{k: _tuples(v) for k, v in overrides.items() if k in settings}}
    return merged, {k: _tuples(v) for k, v in overrides.items() if k not in settings}


#: Fields a study sets per run (which data, method, models and seed make the run, and the
#: method's options): an override cannot set them on every run; the profile settings choose them.
RUN_IDENTITY: tuple[str, ...] = ("paper", "dataset", "method", "models", "seed", "options")


def split_run_overrides(settings: dict[str, Any], overrides: dict[str, Any] | None,
                        run_class: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`apply_overrides` for a study of ``run_class`` runs: any field but :data:`RUN_IDENTITY`
    may be overridden, and is set on every run, its baselines' included (``{"lr": 0.01}``)."""
    fields = [f.name for f in dataclasses.fields(run_class) if f.name not in RUN_IDENTITY]
    return apply_overrides(settings, overrides, run_fields=fields)


def override_runs(runs: Any, fields: dict[str, Any]) -> Any:
    """``runs`` (a list of run configs, or a dict of such lists) with ``fields`` set on each."""
    if not fields:
        return runs
    if isinstance(runs, dict):
        return {k: override_runs(v, fields) for k, v in runs.items()}
    return [r.replace(**fields) for r in runs]


def _is_sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _check_like(name: str, value: Any, default: Any) -> None:
    """A ConfigError when an override does not have its setting's list shape (``'mnist'`` where
    the profile has a list would be iterated letter by letter); scalars are left to their readers."""
    if _is_sequence(default):
        if not _is_sequence(value):
            raise ConfigError(f"{name} must be a list like {_plain(default)!r}, got {value!r}")
        inner = [d for d in default if d is not None]
        if inner and all(_is_sequence(d) for d in inner):
            for i, v in enumerate(value):
                _check_like(f"{name}[{i}]", v, inner[0])
    elif isinstance(default, dict) and isinstance(value, dict):
        for k, v in value.items():
            if k in default:
                _check_like(f"{name}[{k!r}]", v, default[k])


def _plain(value: Any) -> Any:
    """Tuples as lists, as a user (or papermill's YAML) writes them."""
    return [_plain(v) for v in value] if _is_sequence(value) else value


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def project_root() -> Path:
    """The vflkit checkout containing the working directory; else the checkout this vflkit was
    imported from; else the working directory. A notebook writes the same ``figures/`` and
    ``results/`` from its own folder (JupyterLab), the root (``make study``) or elsewhere."""
    cwd = os.getcwd()
    return _checkout_above(cwd) or package_checkout() or Path(cwd)


def package_checkout() -> "Path | None":
    """The checkout the imported ``vflkit`` package lives in (an editable install, or the
    checkout on ``PYTHONPATH``); None for an installed wheel."""
    return _checkout_above(str(Path(__file__).resolve().parent.parent))


@functools.lru_cache(maxsize=32)
def _checkout_above(folder: str) -> "Path | None":
    # looked up once per folder: every record path asks (tens of thousands of times in a
    # report), and a checkout does not move while a process runs
    here = Path(folder)
    for candidate in (here, *here.parents):
        if (candidate / "pyproject.toml").is_file() and (candidate / "vflkit").is_dir():
            return candidate
    return None


def data_root() -> Path:
    """The directory datasets are read from (``$VFLKIT_DATA``, else ``./data``)."""
    value = os.environ.get(DATA_ENV)
    return Path(value).expanduser() if value else project_root() / "data"


def cache_dir() -> Path:
    """A writable directory for decoded-tensor caches, created on first use: ``$VFLKIT_CACHE``, else
    ``$XDG_CACHE_HOME/vflkit``, else ``~/.cache/vflkit``."""
    value, base = os.environ.get(CACHE_ENV), os.environ.get("XDG_CACHE_HOME")
    path = Path(value).expanduser() if value else (Path(base) if base else Path.home() / ".cache") / "vflkit"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # e.g. the variable names a file
        raise ConfigError(f"the cache folder {path} cannot be used ({exc.strerror or exc}); point {CACHE_ENV} "
                          "at a writable folder") from None
    return path


def results_dir() -> Path:
    """Where run records are written (``$VFLKIT_RESULTS``, else ``./results``)."""
    value = os.environ.get(RESULTS_ENV)
    return Path(value).expanduser() if value else project_root() / "results"


def figures_dir() -> Path:
    """Where tables and figures are written (``$VFLKIT_FIGURES``, else ``./figures``)."""
    value = os.environ.get(FIGURES_ENV)
    return Path(value).expanduser() if value else project_root() / "figures"


def check_device_name(device: "str | torch.device") -> None:
    """A ConfigError for a device name torch does not know ('tpu', 'gpu'), whether or not this
    machine has the device (before any record is looked up, so a typo is never accepted)."""
    import torch

    if isinstance(device, torch.device) or device == "auto":
        return
    try:
        torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"Invalid device {device!r}; use 'auto', 'cpu' or 'cuda[:N]'.") from exc


def resolve_device(device: "str | torch.device" = "auto") -> "torch.device":
    """Turn ``"auto"`` into CUDA when available, else CPU; check any explicit choice."""
    import torch

    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    check_device_name(device)  # the one parse of a device name, and its error
    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(cuda_unavailable_message(str(device)))
    return torch.device(device)
