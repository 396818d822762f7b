"""Where vflkit finds data and writes caches and results, and which device it uses.

One setting decides where datasets are read from: the environment variable ``VFLKIT_DATA``,
else ``./data`` (``data/`` of the project checkout when run from inside it, e.g. from
``notebooks/`` in JupyterLab, else of the working directory). Decoded tensors are cached under
``VFLKIT_CACHE``, else ``$XDG_CACHE_HOME/vflkit``, else ``~/.cache/vflkit``: the data root may
be read-only (CI points it at a shared, read-only copy), so the cache never lives there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import torch

from .errors import ConfigError

DATA_ENV = "VFLKIT_DATA"
CACHE_ENV = "VFLKIT_CACHE"
RESULTS_ENV = "VFLKIT_RESULTS"
FIGURES_ENV = "VFLKIT_FIGURES"

PROFILES: tuple[str, ...] = ("smoke", "quick", "paper")
PAPERS: tuple[str, ...] = ("vfedmh", "easter", "multi_vfl", "apc_vfl", "adptvfedconv", "demo")


def check_profile(profile: str) -> str:
    """Return ``profile`` if it is one of :data:`PROFILES`, else raise a ConfigError."""
    if profile not in PROFILES:
        raise ConfigError(f"Invalid profile {profile!r}; choose one of {', '.join(PROFILES)}")
    return profile


def check_paper(paper: str) -> str:
    """Return ``paper`` if it is one of :data:`PAPERS`, else raise a ConfigError."""
    if paper not in PAPERS:
        raise ConfigError(f"Invalid paper {paper!r}; choose one of {', '.join(PAPERS)}")
    return paper


def apply_overrides(settings: dict[str, Any], overrides: dict[str, Any] | None, *,
                    run_fields: Iterable[str] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a study's ``overrides`` into changed profile settings and run-config fields.

    Every study reads ``overrides`` the same way: a key that names one of the profile's
    ``settings`` replaces that setting; a key that names a field of the study's run config
    (``run_fields``) is set on every run; any other key is an error that lists the valid ones.
    Lists (papermill passes JSON) become tuples, so that overridden settings compare equal to
    the profile's own and configs stay hashable. Returns ``(settings, run_fields)``.
    """
    overrides = dict(overrides or {})
    fields = set(run_fields)
    unknown = sorted(set(overrides) - set(settings) - fields)
    if unknown:
        raise ConfigError(f"unknown overrides {unknown}; valid: profile settings "
                          f"{', '.join(sorted(settings))}" + (f"; run fields {', '.join(sorted(fields - set(settings)))}"
                                                              if fields - set(settings) else ""))
    merged = dict(settings)
    run: dict[str, Any] = {}
    for k, v in overrides.items():
        if k in settings:
            merged[k] = _tuples(v)
        else:
            run[k] = _tuples(v)
    return merged, run


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def project_root() -> Path:
    """The vflkit checkout containing the working directory, else the working directory.

    Notebooks run with their own folder as working directory in JupyterLab and with the
    project root under ``make study``; both must write to the same ``figures/`` and
    ``results/``.
    """
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "vflkit").is_dir():
            return folder
    return here


def data_root() -> Path:
    """The directory datasets are read from (``$VFLKIT_DATA``, else ``./data``)."""
    value = os.environ.get(DATA_ENV)
    return Path(value).expanduser() if value else project_root() / "data"


def cache_dir() -> Path:
    """A writable directory for decoded-tensor caches, created on first use."""
    value = os.environ.get(CACHE_ENV)
    if value:
        path = Path(value).expanduser()
    else:
        base = os.environ.get("XDG_CACHE_HOME")
        path = (Path(base) if base else Path.home() / ".cache") / "vflkit"
    path.mkdir(parents=True, exist_ok=True)
    return path


def results_dir() -> Path:
    """Where run records are written (``$VFLKIT_RESULTS``, else ``./results``)."""
    value = os.environ.get(RESULTS_ENV)
    return Path(value).expanduser() if value else project_root() / "results"


def figures_dir() -> Path:
    """Where tables and figures are written (``$VFLKIT_FIGURES``, else ``./figures``).

    Point it (and ``VFLKIT_RESULTS``) elsewhere for a run that must not replace the committed
    outputs of its profile, e.g. a tiny slice of the paper profile.
    """
    value = os.environ.get(FIGURES_ENV)
    return Path(value).expanduser() if value else project_root() / "figures"


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """Turn ``"auto"`` into CUDA when available, else CPU; check any explicit choice."""
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"device {device!r} was asked for but CUDA is not available here; "
            "use device='auto' or 'cpu'."
        )
    try:
        return torch.device(device)
    except RuntimeError as exc:
        raise ConfigError(f"Invalid device {device!r}; use 'auto', 'cpu' or 'cuda[:N]'.") from exc
