"""VFL methods: one module and one class each, under the papers' names, in three families whose
contracts differ as their protocols do (:mod:`vflkit.training` has one trainer per family; which
method is in which: docs/engine.md, "The families"). The batch-by-batch methods
(:class:`VFLMethod`, configured by :class:`RunConfig`) are registered in :data:`METHODS`, the
one-shot ones (:class:`~.oneshot.OneShotMethod`) in :data:`ONE_SHOT_METHODS`; Multi-VFL
(:class:`~.multi_vfl.MultiVFL`) has its own interface.
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from .aggvfl import AggVFL, HeterAggVFL, HomoAggVFL
from .aligned_splitnn import AlignedSplitNN
from .apc_vfl import APCVFL, APCVFLJoint, Ablation
from .base import OPTIMIZERS, PARTITIONS, RunConfig, VFLMethod, make_optimizer
from .cvfl import CVFL
from .easter import EASTER
from .local import Local
from .oneshot import LocalFeatures, OneShotMethod
from .splitnn import SplitNN
from .vfedmh import HomoVFedMH, VFedMH
from .vfedtrans import VFedTrans

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

#: APC-VFL Fig. 5's one-shot methods by the names their runs use: the class and the settings
#: that make the variant (MSE or MAE distillation).
ONE_SHOT_METHODS: dict[str, tuple[type[OneShotMethod], dict[str, Any]]] = {
    "local": (LocalFeatures, {}),
    "ablation": (Ablation, {}),
    "vfedtrans": (VFedTrans, {}),
    "apc_vfl_mse": (APCVFL, {"distill_loss": "mse"}),
    "apc_vfl_mae": (APCVFL, {"distill_loss": "mae"}),
}


def get_method(name: str) -> type[VFLMethod]:
    """The batch-by-batch method class registered as ``name``."""
    try:
        return METHODS[name]
    except KeyError:
        raise ConfigError(f"Invalid method {name!r}; choose one of {', '.join(sorted(METHODS))}") from None


def get_one_shot_method(name: str, **settings: Any) -> OneShotMethod:
    """The one-shot method registered as ``name``, built with ``settings`` (keyword-only
    hyperparameters of :class:`~.oneshot.OneShotMethod`, plus ``lam`` for the distilling ones)."""
    try:
        cls, fixed = ONE_SHOT_METHODS[name]
    except KeyError:
        raise ConfigError(f"Invalid one-shot method {name!r}; choose one of {', '.join(ONE_SHOT_METHODS)}") from None
    if not issubclass(cls, APCVFL):
        settings.pop("lam", None)  # no encoder, nothing to distil
    return cls(**fixed, **settings)


__all__ = ["METHODS", "ONE_SHOT_METHODS", "OPTIMIZERS", "PARTITIONS", "AlignedSplitNN", "APCVFLJoint", "RunConfig",
           "VFLMethod", "get_method", "get_one_shot_method", "make_optimizer"]
