"""VFL methods: one module and one class each, all with the :class:`VFLMethod` interface."""

from __future__ import annotations

from ..errors import ConfigError
from .base import OPTIMIZERS, VFLMethod, make_optimizer
from .aggvfl import AggVFL, HeterAggVFL, HomoAggVFL
from .cvfl import CVFL
from .easter import EASTER
from .local import Local
from .splitnn import SplitNN
from .vfedmh import HomoVFedMH, VFedMH

#: Registry name -> method class. Aliases map the papers' names to the same class.
METHODS: dict[str, type[VFLMethod]] = {
    "local": Local,
    "splitnn": SplitNN,
    "pyvertical": SplitNN,
    "c_vfl": CVFL,
    "agg_vfl": AggVFL,
    "homo_aggvfl": HomoAggVFL,
    "heter_aggvfl": HeterAggVFL,
    "vfedmh": VFedMH,
    "homo_vfedmh": HomoVFedMH,
    "easter": EASTER,
}


def get_method(name: str) -> type[VFLMethod]:
    """The method class registered as ``name``."""
    try:
        return METHODS[name]
    except KeyError:
        raise ConfigError(f"Invalid method {name!r}; choose one of {', '.join(sorted(METHODS))}") from None


__all__ = ["METHODS", "OPTIMIZERS", "VFLMethod", "get_method", "make_optimizer"]
