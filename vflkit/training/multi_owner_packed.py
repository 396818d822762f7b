"""Multi-VFL rounds with their label-owner chains, of one run or several, stepped as one computation.

Issue 40, "Packing" (the GPU review's Multi-VFL section). Within a round of Algorithm 1 the K
label owners train independently: chain k touches only label owner k's model ``W^S_k`` and copy
k of every data owner's model ``W^C_{d,k}``, all starting from the same weights, on its own
batches (drawn from the generator seeded by (seed, round, owner)). So step i of every chain can
run at once: each party's K models are stacked (:class:`~vflkit.training.packed.StackedModel`:
``vmap(functional_call)`` on a GPU, a loop over the slices on a CPU) and one backward pass gives
every chain its own gradients, since the chains' losses are summed and share no parameter.

A step's messages travel as the split family's packs send theirs (:class:`~vflkit.training.packed.PackChannel`):
each data owner's embeddings (and the gradients back) as one stacked tensor, a detached copy
of which the receivers take, each chain computing only from its own slice; every chain's
message is a row in its own run's ledger, with its sender, receiver, size and the step the
unpacked round gives it (:func:`_post`). The round's batches are taken once, each step a slice
of them, so a step dispatches no operation per chain (eight runs' packed step: 328 torch
operations for 40 chains, against 900 for one run's five chains one after another). The
round's ledger rows are then put in the order the unpacked round sends them
(:meth:`~vflkit.comm.Ledger.sort_since`), so the ledger is the unpacked round's row for row. The server's aggregation and the data owners' averaging are
:class:`~vflkit.methods.multi_vfl.MultiVFL`'s own. Equivalence is claimed in float64, to a
tolerance (a vmapped kernel may reduce in another order): tests/test_training_multi_owner_packed.py.

Several runs pack into one round the same way (the study's 42 runs of a profile share every
shape: 210 chains per step), each with its own channel, server and ledger.

The trainer around it (:func:`train_pack`, :func:`run_pack`, :func:`compute_pack`) trains a
pack of runs round by round and writes each run's record as the run alone would (its key, its
path; ``execution`` names the pack): the scheduler and the launcher take it for Multi-VFL's
runs on a GPU (:func:`vflkit.training.packed.pack_key`: runs that share the step's shapes,
the local optimizer, the rounds and the evaluation schedule).

Divergence: a non-finite loss in any chain stops the whole pack (checked once a round, from
the losses summed on the device: no host read inside a step), where the unpacked round would
have stopped at that step; :func:`compute_pack` then trains each run of the pack alone, so
every record is the unpacked trainer's (``on_divergence`` as the family says). A pack keeps
no checkpoint: whoever starts it checks first that its estimate ends before the deadline.
"""

from __future__ import annotations

import itertools
import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from tqdm.auto import tqdm

from .. import records
from ..comm import Channel, wire_copy
from ..config import resolve_device
from ..errors import ConfigError, DivergenceError
from ..methods.multi_vfl import MultiVFL, MultiVFLConfig, _weights
from . import multi_owner
from .packed import StackedModel, _cross_entropy


def _protocol_order(row: tuple[str, str, str, int, int, int, str]) -> tuple[int, int]:
    # rows by step; within the step a chain ends on (its update to the server), the update
    # comes first, as the unpacked round sends it before the next chain's first batch
    return row[5], 0 if row[2] == "model_weights" else 1


def packed_round(methods: MultiVFL | Sequence[MultiVFL], r: int, *,
                 stacking: str = "auto") -> dict[str, float] | list[dict[str, float]]:
    """Global round ``r`` of each of ``methods`` (what :meth:`MultiVFL.round` does) with every
    label-owner chain of every run stepped together; returns the mean training loss per label
    owner (one dict per run when given a sequence of runs).

    The runs (e.g. a study's runs of one profile: seeds, datasets, scenarios, server optimizers)
    must share the shapes of a step and the local optimizer: data owners, label owners, batch
    size, batches per round, local optimizer and lr. ``stacking``: how each party's stacked
    models run (:data:`vflkit.training.packed.STACKINGS`).
    """
    runs = [methods] if isinstance(methods, MultiVFL) else list(methods)
    for m in runs:
        if r != m.rounds_done + 1:
            raise ConfigError(f"round {r} called after round {m.rounds_done}; rounds run in order 1, 2, ...")
        if "global" not in m.server.models:
            raise ConfigError("call setup() before round()")
    shared = ("n_data_owners", "n_label_owners", "batch_size", "local_optimizer", "local_lr")
    differ = [f for f in shared if len({getattr(m.config, f) for m in runs}) > 1]
    if differ:
        raise ConfigError(f"runs packed in one round must share {', '.join(shared)}; they differ in {differ}")
    batches = {(j, k): m._batches(k, r) for j, m in enumerate(runs) for k in range(len(m.label_owners))}
    n = len(next(iter(batches.values())))
    if any(len(b) != n for b in batches.values()):
        raise ConfigError(f"label owners have {sorted({len(b) for b in batches.values()})} batches in round {r}; "
                          "a packed round needs the same number for every label owner")
    # chain (j, k): run j's label owner k with copy k of each of run j's data owners
    chains = [(j, k) for j, m in enumerate(runs) for k in range(len(m.label_owners))]
    lo_of = {(j, k): runs[j].label_owners[k] for j, k in chains}
    n_do = len(runs[0].data_owners)
    first_rows = [len(m.channel.ledger) for m in runs]
    starts = {c: _weights(lo_of[c].models["top"]) for c in chains}
    copies = [[runs[j].data_owners[d].models[f"copy_{k + 1}"] for j, k in chains] for d in range(n_do)]
    top = StackedModel([lo_of[c].models["top"] for c in chains], stacking=stacking)
    bottoms = [StackedModel(c, stacking=stacking) for c in copies]
    # one optimizer per party over its stacked models: SGD and Adam update elementwise, so
    # slice c follows chain c's own optimizer
    top_opt = runs[0]._local_optimizer(list(top.params.values()))
    bottom_opts = [runs[0]._local_optimizer(list(b.params.values())) for b in bottoms]
    # the chains' losses summed on the device (float64) and read once, after the round
    totals = torch.zeros(len(chains), dtype=torch.float64, device=top.params[next(iter(top.params))].device)
    # each chain's batches of the round taken once (per step only a slice: no per-chain
    # operation inside a step); the same rows as the unpacked round's batch by batch
    sizes = [len(b) for b in batches[chains[0]]]
    if any([len(b) for b in batches[c]] != sizes for c in chains):
        raise ConfigError(f"label owners' batches differ in size in round {r}; a packed round needs them alike")
    offsets = [0, *itertools.accumulate(sizes)]
    ids = {c: torch.cat(batches[c]) for c in chains}
    features = [torch.stack([runs[j].data_owners[d].features("train", ids=ids[j, k]) for j, k in chains])
                for d in range(n_do)]
    labels = torch.stack([lo_of[c].labels("train", ids=ids[c]) for c in chains])
    data_owner = [[runs[j].data_owners[d].name for j, _ in chains] for d in range(n_do)]
    label_owner = [lo_of[c].name for c in chains]
    for i in range(n):
        rows = slice(offsets[i], offsets[i + 1])
        acts = []
        for d, (bottom, opt) in enumerate(zip(bottoms, bottom_opts)):
            opt.zero_grad(set_to_none=True)
            acts.append(bottom(features[d][:, rows]))
        # every chain's embedding from every data owner: one stacked message per data owner,
        # each chain's row in its own run's ledger
        parts = [p.requires_grad_(True) for p in _post(runs, chains, r, n, i, "embedding", acts, data_owner,
                                                         [label_owner] * n_do)]
        top_opt.zero_grad(set_to_none=True)
        # A_k = Concatenate A_{d,k} along the height: dim 3 of the stacked [chains, B, C, h, W]
        losses = _cross_entropy(top(torch.cat(parts, dim=3)), labels[:, rows])
        losses.sum().backward()  # the chains share no parameter: each gets its own loss's gradient
        top_opt.step()
        grads = _post(runs, chains, r, n, i, "gradient", [p.grad for p in parts], [label_owner] * n_do, data_owner)
        for a, g, opt in zip(acts, grads, bottom_opts):
            a.backward(g)
            opt.step()
        totals += losses.detach().to(torch.float64)
    for c, value in zip(chains, totals.tolist()):
        if not math.isfinite(value):
            raise DivergenceError(f"{lo_of[c].name}'s loss was not finite in round {r} of run {c[0]} of the pack "
                                  f"(its sum: {value}): training diverged; lower local_lr or the server lr")
    sums = dict(zip(chains, totals.tolist()))
    top.write_back([lo_of[c].models["top"] for c in chains])
    for bottom, c in zip(bottoms, copies):
        bottom.write_back(c)
    out = []
    for j, m in enumerate(runs):
        for k, lo in enumerate(m.label_owners):
            # Line 9: t_k = W_k^{S,r+1} - W^{S,r}, sent to the server when chain k ends
            now = _weights(lo.models["top"])
            m.channel.at(epoch=r, step=(k + 1) * n, phase="train")
            lo.send(m.server, "model_weights", {name: now[name] - starts[j, k][name] for name in now})
        m.channel.ledger.sort_since(first_rows[j], _protocol_order)
        m._aggregate(r, len(m.label_owners) * n)
        for d in m.data_owners:
            m._average_copies(d)
        m.rounds_done = r
        out.append({lo.name: sums[j, k] / n for k, lo in enumerate(m.label_owners)})
    return out[0] if isinstance(methods, MultiVFL) else out


def _post(runs: Sequence[MultiVFL], chains: Sequence[tuple[int, int]], r: int, n: int, i: int, kind: str,
          payloads: Sequence[torch.Tensor], senders: Sequence[Sequence[str]],
          receivers: Sequence[Sequence[str]]) -> list[torch.Tensor]:
    """Send each of ``payloads`` ([chains, ...]: chain c's slice from ``senders[d][c]`` to
    ``receivers[d][c]``) as one stacked message: each chain's row goes to its own run's ledger,
    stamped with the step the unpacked round gives it (label owner k's step i: ``k * n + i``),
    in the unpacked round's order (chain by chain, data owner by data owner); the receivers get
    a detached copy, as through :class:`~vflkit.comm.Channel` (each slice only to its chain)."""
    for c, (j, k) in enumerate(chains):
        ledger = runs[j].channel.ledger
        for d, p in enumerate(payloads):
            one = p.numel() // p.shape[0] * p.element_size()  # chain c's slice, as it travels
            ledger.add(senders[d][c], receivers[d][c], kind, one, r, k * n + i, "train")
    return [wire_copy(p) for p in payloads]


#: What the runs of one pack must share (the step's shapes, the local optimizer, the rounds
#: and when they evaluate); they may differ in anything else (dataset, scenario, server
#: optimizer, seed).
SHARED = ("n_data_owners", "n_label_owners", "batch_size", "samples_per_owner", "local_epochs", "local_steps",
          "local_optimizer", "local_lr", "rounds", "eval_every", "variant")


#: The most runs in one Multi-VFL pack: the paper profile's 42 at once (about 3.3 GB of a
#: round's batches on the GPU for their 210 chains; their packed step is counted at 498
#: operations, against 900 for one run's five chains one after another).
MAX_RUNS = 42


def pack_key(config: MultiVFLConfig) -> tuple[Any, ...]:
    """What Multi-VFL runs must share to train as one pack (:data:`SHARED`)."""
    return ("multi_owner_packed", *(getattr(config, f) for f in SHARED))


def train_pack(configs: Sequence[MultiVFLConfig], *, device: torch.device | str = "cpu", progress: bool = False,
               stacking: str = "auto") -> list[dict[str, Any]]:
    """Train ``configs`` (runs of one :func:`pack_key`) as one pack, round by round
    (:func:`packed_round`); each run's results as :func:`vflkit.training.multi_owner.train`
    returns them (its history rows by :func:`~vflkit.training.multi_owner.round_row`, its
    evaluation its own), plus ``execution``. Timings are the pack's. A diverging chain raises
    :class:`DivergenceError` for the pack (see the module's note)."""
    configs = list(configs)
    if not configs or len({pack_key(c) for c in configs}) != 1 or len({c.key for c in configs}) != len(configs):
        raise ConfigError("a Multi-VFL pack holds distinct runs that share " + ", ".join(SHARED))
    device = resolve_device(device)
    start = time.perf_counter()
    methods = []
    for cfg in configs:  # each built as the unpacked trainer builds it
        m = MultiVFL(cfg, multi_owner._data(cfg), device=device, channel=Channel())
        m.setup()
        methods.append(m)
    rounds = configs[0].rounds
    histories: list[list[dict[str, Any]]] = [[] for _ in configs]
    for r in tqdm(range(1, rounds + 1), desc=f"Multi-VFL x{len(configs)}", disable=not progress, leave=False):
        for m, losses, history in zip(methods, packed_round(methods, r, stacking=stacking), histories):
            row = multi_owner.round_row(m, r, losses)
            row["elapsed_s"] = time.perf_counter() - start
            history.append(row)
    wall = time.perf_counter() - start
    keys = [c.key for c in configs]
    return [{**multi_owner.results(h, m.channel, wall, None), "execution": {"packed": len(configs), "pack": keys}}
            for m, h in zip(methods, histories)]


def run_pack(configs: Sequence[MultiVFLConfig], *, profile: str, device: torch.device | str = "auto",
             results: str | Path | None = None, force: bool = False, progress: bool = False,
             on_divergence: str = "raise") -> list[dict[str, Any]]:
    """The records of ``configs``, in their order: recorded ones loaded, the others trained as
    one pack (:func:`train_pack`) and written through the record store's one path
    (:func:`vflkit.records.run_together`). Where the pack diverges, each of its runs is trained
    alone instead (:func:`vflkit.training.multi_owner.train`), so that every record, a
    diverged one included, is the unpacked trainer's."""

    def train_all(todo: list[MultiVFLConfig], dev: torch.device, checkpoints: list[Path]) -> list[dict[str, Any]]:
        try:
            return train_pack(todo, device=dev, progress=progress)
        except DivergenceError:
            return [multi_owner.train(c, device=dev, checkpoint=ckpt, progress=progress, on_divergence=on_divergence)
                    for c, ckpt in zip(todo, checkpoints)]

    return records.run_together(configs, train_all=train_all, profile=profile, device=device, results=results,
                                force=force, on_divergence=on_divergence)


def compute_pack(payloads: Sequence[Mapping[str, Any]], *, device: torch.device | str = "auto",
                 deadline: float | None = None) -> list[dict[str, Any]]:
    """The records of Multi-VFL study payloads (``{"family": "multi_owner", "config",
    "profile", "results"}``) trained as one pack by :func:`run_pack`: a pack's task function,
    as :func:`vflkit.training.packed.compute_pack` is for the split family's."""
    from ..studies.base import FAMILIES  # here: the studies import the trainers

    payloads = list(payloads)
    places = {(p["profile"], str(p["results"])) for p in payloads}
    if len(places) != 1 or any(p.get("family") != "multi_owner" for p in payloads):
        raise ConfigError("a Multi-VFL pack writes Multi-VFL records under one profile and results folder")
    profile, results = next(iter(places))
    configs = [MultiVFLConfig.from_dict(dict(p["config"])) for p in payloads]
    return run_pack(configs, profile=profile, device=device, results=Path(results),
                    on_divergence=FAMILIES["multi_owner"].on_divergence)


__all__ = ["MAX_RUNS", "SHARED", "compute_pack", "pack_key", "packed_round", "run_pack", "train_pack"]
