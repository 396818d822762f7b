"""Server optimizers of Multi-VFL: FedAvg, FedAdam, FedYogi and FedDemonAdam.

Multi-VFL (Algorithm 1, ``ServerAggregation``) aggregates the label owners' model updates
``t = W_k^{S,r+1} - W^{S,r}`` with one of four rules. FedAdam and FedYogi are Reddi et al.,
"Adaptive Federated Optimization", ICLR 2021 (Algorithm 2); FedDemonAdam applies the decaying
momentum of Chen et al., "Demon: Improved Neural Network Training with Momentum Decay"
(ICASSP 2022) to FedAdam's first moment.

Two variants of the adaptive rules:

``"paper"`` (the default, used by the study's figures) is Multi-VFL's ``ServerAggregation`` as
printed::

    demon:  beta1_r = beta1 (1 - r/R) / ((1 - beta1) + beta1 (1 - r/R));  m <- beta1_r m + t
    else:   m <- beta1 m + (1 - beta1) t
    v <- beta2 v + (1 - beta2) m^2                 (Yogi: v <- v - (1 - beta2) m^2 sign(v - m^2))
    W <- W + sqrt(1 - beta2^r) / (1 - beta1^r) * eta_s * m / (sqrt(v) + tau)

It squares the first moment ``m``, not the update, and carries Adam's bias correction.

``"reddi"`` is Reddi et al.'s Algorithm 2: the second moment squares the update ``t``
(Yogi: ``v <- v - (1 - beta2) t^2 sign(v - t^2)``), ``v`` starts at ``tau^2`` and there is no
bias correction. FedDemonAdam's ``"reddi"`` form keeps Demon's ``m <- beta1_r m + t``.

FedAvg moves the global model by the mean update (server learning rate 1), i.e. the new model
is the average of the label owners' models, as the paper describes it (Sec. 4.1).

Everything here is a pure function of tensors: the round's state goes in, the new state comes
out, so each rule can be checked against a hand-computed step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import ConfigError

SERVER_OPTIMIZERS: tuple[str, ...] = ("fedavg", "fedadam", "fedyogi", "feddemonadam")
VARIANTS: tuple[str, ...] = ("paper", "reddi")

Weights = dict[str, torch.Tensor]


@dataclass(frozen=True)
class ServerOptimizer:
    """A server aggregation rule and its hyperparameters (defaults: Multi-VFL Table 2).

    Parameters
    ----------
    beta1 : float, default 0.9
        First-moment decay (Demon's initial value for FedDemonAdam).
    lr : float, default 1e-3
        Server learning rate eta_s (not used by FedAvg).
    tau : float, default 1e-3
        Stability constant added to sqrt(v).
    variant : {"paper", "reddi"}, default "paper"
        Multi-VFL's printed rule or Reddi et al.'s (see the module docstring).
    total_rounds : int, default 500
        R, the horizon of Demon's momentum schedule (the run's number of rounds).
    """

    name: str = "fedavg"
    beta1: float = 0.9
    beta2: float = 0.99
    lr: float = 1e-3
    tau: float = 1e-3
    variant: str = "paper"
    total_rounds: int = 500

    def __post_init__(self) -> None:
        if self.name not in SERVER_OPTIMIZERS:
            raise ConfigError(f"Invalid server optimizer {self.name!r}; choose one of "
                              f"{', '.join(SERVER_OPTIMIZERS)}")
        if self.variant not in VARIANTS:
            raise ConfigError(f"Invalid server-optimizer variant {self.variant!r}; choose one of "
                              f"{', '.join(VARIANTS)}")
        for field_name in ("beta1", "beta2"):
            value = getattr(self, field_name)
            if not 0.0 <= value < 1.0:
                raise ConfigError(f"{field_name} must be in [0, 1), got {value}")
        if self.lr <= 0 or self.tau <= 0:
            raise ConfigError(f"server lr and tau must be > 0, got lr={self.lr}, tau={self.tau}")
        if not isinstance(self.total_rounds, int) or self.total_rounds < 1:
            raise ConfigError(f"total_rounds must be a positive integer, got {self.total_rounds!r}")


def demon_beta1(beta1: float, r: int, total_rounds: int) -> float:
    """Demon's momentum at round ``r`` of ``R`` (module docstring), from the initial ``beta1``
    every round as Demon defines it. Algorithm 1 writes ``beta1 <- ...`` inside ServerAggregation,
    which read literally would compound the decay; we take it as Demon's schedule, which it cites."""
    left = 1.0 - r / total_rounds
    return beta1 * left / ((1.0 - beta1) + beta1 * left)


def first_moment(m: torch.Tensor, t: torch.Tensor, beta1: float, *, demon: bool) -> torch.Tensor:
    """``beta1 m + t`` for Demon, else ``beta1 m + (1 - beta1) t``."""
    return beta1 * m + t if demon else beta1 * m + (1.0 - beta1) * t


def second_moment(v: torch.Tensor, x: torch.Tensor, beta2: float, *, yogi: bool) -> torch.Tensor:
    """Adam's ``beta2 v + (1 - beta2) x^2`` or Yogi's ``v - (1 - beta2) x^2 sign(v - x^2)``."""
    x2 = x * x
    if yogi:
        return v - (1.0 - beta2) * x2 * torch.sign(v - x2)
    return beta2 * v + (1.0 - beta2) * x2


def init_state(weights: Weights, opt: ServerOptimizer) -> dict[str, Weights]:
    """Zero first moments; second moments at 0 (paper) or ``tau^2`` (Reddi et al.'s v_{-1})."""
    v0 = 0.0 if opt.variant == "paper" else opt.tau ** 2
    return {"m": {k: torch.zeros_like(w) for k, w in weights.items()},
            "v": {k: torch.full_like(w, v0) for k, w in weights.items()}}


def server_step(weights: Weights, update: Weights, state: dict[str, Weights], opt: ServerOptimizer,
                r: int) -> tuple[Weights, dict[str, Weights]]:
    """One ServerAggregation: the new global weights and optimizer state after round ``r``.

    Parameters
    ----------
    weights
        The global model ``W^{S,r}`` (name -> tensor).
    update
        The aggregated update ``t``: the mean over label owners of ``W_k^{S,r+1} - W^{S,r}``.
    state
        ``{"m": ..., "v": ...}`` from :func:`init_state` or the previous step (not modified).
    r
        The round, counted from 1 (bias correction and Demon's schedule depend on it).
    """
    if r < 1:
        raise ConfigError(f"rounds count from 1, got r={r}")
    if set(update) != set(weights):
        raise ConfigError("the update and the weights name different tensors: "
                          f"{sorted(set(update) ^ set(weights))}")
    if opt.name == "fedavg":
        return {k: w + update[k] for k, w in weights.items()}, state
    demon = opt.name == "feddemonadam"
    yogi = opt.name == "fedyogi"
    beta1 = demon_beta1(opt.beta1, r, opt.total_rounds) if demon else opt.beta1
    m = {k: first_moment(state["m"][k], update[k], beta1, demon=demon) for k in weights}
    if opt.variant == "paper":
        v = {k: second_moment(state["v"][k], m[k], opt.beta2, yogi=yogi) for k in weights}
        # Line 7's beta1 is the one line 2 just set: Demon's scheduled value for FedDemonAdam.
        scale = opt.lr * math.sqrt(1.0 - opt.beta2 ** r) / (1.0 - beta1 ** r)
    else:
        v = {k: second_moment(state["v"][k], update[k], opt.beta2, yogi=yogi) for k in weights}
        scale = opt.lr
    new = {k: w + scale * m[k] / (v[k].sqrt() + opt.tau) for k, w in weights.items()}
    return new, {"m": m, "v": v}


def constant_update_steps(opt: ServerOptimizer, rounds: int, *, t: float = 1e-9) -> list[float]:
    """Per round 1..``rounds``, ``opt``'s server step over the update when every update is the same
    tiny ``t`` (so that sqrt(v) << tau), by :func:`server_step` itself."""
    w, ratios = {"w": torch.zeros(1, dtype=torch.float64)}, []
    state = init_state(w, opt)
    for r in range(1, rounds + 1):
        new, state = server_step(w, {"w": torch.full((1,), t, dtype=torch.float64)}, state, opt, r)
        ratios.append(float((new["w"] - w["w"]) / t))
        w = new
    return ratios
