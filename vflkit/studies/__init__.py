"""Per-paper studies: which runs each profile makes, and the tables and figures drawn from them.

Each study module declares itself once (a :class:`~vflkit.studies.base.Study`, :func:`register`);
:data:`REGISTRY` holds them all, filled by importing every module of this package on first use.
Importing this package alone loads no study (nor torch).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from types import MappingProxyType
from typing import Any

from ..config import add_papers, drop_paper, is_simple_name
from ..errors import ConfigError
from .base import FAMILIES, Artefact, Study

_REGISTRY: dict[str, Study] = {}
#: modules of this package that are not studies
_NOT_STUDIES = frozenset({"base"})


def register(study: Study) -> Study:
    """Add ``study`` to the registry and return it; a second study of one name, an unknown family
    and a name that is no simple name (:func:`vflkit.config.is_simple_name`) are errors."""
    if not is_simple_name(study.name):  # its records' folder: <results>/<profile>/<name>/
        raise ConfigError(f"Invalid study name {study.name!r}; a study's name is its records' folder: use letters, "
                          "digits, '_' and '-' (at most 64, starting with a letter or digit)")
    if study.family not in FAMILIES:
        raise ConfigError(f"study {study.name!r}: unknown family {study.family!r}; known: {', '.join(FAMILIES)}")
    old = _REGISTRY.get(study.name)
    if old is not None and old is not study:
        raise ConfigError(f"a study named {study.name!r} is registered already ({old.title})")
    from ..claims import declare  # here: a study module imports the claims anyway

    _REGISTRY[study.name] = study
    add_papers(study.name)
    declare(study)
    return study


def unregister(name: str) -> Study | None:
    """Remove the study ``name`` (a test's toy study); returns it, or None if none was registered."""
    from ..claims import forget

    if name not in module_names():
        drop_paper(name)
    study = _REGISTRY.pop(name, None)
    if study is not None:
        forget(study)
    return study


@functools.cache
def module_names() -> tuple[str, ...]:
    """The study modules of this package, found without importing them."""
    return tuple(sorted(info.name for info in pkgutil.iter_modules(__path__)
                        if info.name not in _NOT_STUDIES and not info.name.startswith("_")))


add_papers(*module_names())  # a run may name a study module before it is imported


@functools.cache
def _load_all() -> None:
    """Import every study module of this package once (each registers its study)."""
    for name in module_names():
        importlib.import_module(f"{__name__}.{name}")


def studies() -> list[Study]:
    """Every registered study in the report's order (``order``, then name)."""
    _load_all()
    return sorted(_REGISTRY.values(), key=lambda s: (s.order, s.name))


def get(name: str) -> Study:
    """The study ``name``; an unknown name is an error listing the known ones."""
    if name not in _REGISTRY:
        _load_all()
    if name not in _REGISTRY:
        raise ConfigError(f"no study {name!r}; registered: {', '.join(s.name for s in studies())}")
    return _REGISTRY[name]


def is_registered(name: str) -> bool:
    """Whether a study ``name`` is registered already (loads no module)."""
    return name in _REGISTRY


def __getattr__(attr: str) -> Any:
    # REGISTRY is read-only and always whole: built on access, after every study module is imported
    if attr == "REGISTRY":
        return MappingProxyType({s.name: s for s in studies()})
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")


__all__ = ["REGISTRY", "Artefact", "Study", "get", "is_registered", "module_names", "register", "studies",
           "unregister"]
