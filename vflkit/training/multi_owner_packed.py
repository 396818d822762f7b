"""Multi-VFL rounds with their label-owner chains, of one run or several, stepped as one computation.

Issue 40, "Packing" (the GPU review's Multi-VFL section). Within a round of Algorithm 1 the K
label owners train independently: chain k touches only label owner k's model ``W^S_k`` and copy
k of every data owner's model ``W^C_{d,k}``, all starting from the same weights, on its own
batches (drawn from the generator seeded by (seed, round, owner)). So step i of every chain can
run at once: each party's K models are stacked (:class:`~vflkit.training.packed.StackedModel`:
one grouped network on a GPU, :mod:`~vflkit.training.grouped`; a loop over the slices on a CPU) and one backward pass gives
every chain its own gradients, since the chains' losses are summed and share no parameter.

A step's messages travel as the split family's packs send theirs (:class:`~vflkit.training.packed.PackChannel`):
each data owner's embeddings (and the gradients back) as one stacked tensor, a detached copy
of which the receivers take, each chain computing only from its own slice; every chain's
message is a row in its own run's ledger, with its sender, receiver, size and the step the
unpacked round gives it (:func:`_post`). The round's batches are taken once, each step a slice
of them, so a step dispatches no operation per chain (a packed step of 2, 8 or 42 runs: 288
torch operations for their 10 to 210 chains, against 895 for one run's five chains one after
another). The round's ledger rows are then put in the order the unpacked round sends them
(:meth:`~vflkit.comm.Ledger.sort_since`), so the ledger is the unpacked round's row for row. The server's
aggregation and the data owners' averaging are those of :class:`~vflkit.methods.multi_vfl.MultiVFL`
(its server rule, :func:`~vflkit.methods.server_opt.server_step`; the mean of the copies), stacked. Equivalence is claimed in float64, to a
tolerance (a vmapped kernel may reduce in another order): tests/test_training_multi_owner_packed.py.

Several runs pack into one round the same way (the study's 42 runs of a profile share every
shape: 210 chains per step), each with its own channel, server and ledger. A pack held from
round to round (:class:`RoundPack`) also ends each round for all its runs at once: the label
owners' updates, each server's step (runs of one server rule in one call), the new weights
back and the data owners' averaging are stacked operations, the server's step sizes are read
once a round for all runs, and :meth:`RoundPack.evaluate` scores every run's test images in
one stacked pass; the runs' own models are views of the stack meanwhile, so they are current
after every round with no copy. What a round dispatches then hardly grows with the runs
(counted: :func:`vflkit.training.counting.count_round`).

The trainer around it (:func:`train_pack`, :func:`run_pack`, :func:`compute_pack`) trains a
pack of runs round by round and writes each run's record as the run alone would (its key, its
path; ``execution`` names the pack): the scheduler and the launcher take it for Multi-VFL's
runs on a GPU (:func:`vflkit.training.packed.pack_key`: runs that share the step's shapes,
the local optimizer, the rounds and the evaluation schedule).

Divergence: a non-finite loss in any chain stops the whole pack (checked once a round, from
the losses summed on the device: no host read inside a step), where the unpacked round would
have stopped at that step; :func:`compute_pack` then trains each run of the pack alone, so
every record is the unpacked trainer's (``on_divergence`` as the family says). A pack
checkpoints each of its runs as the run alone does (its models are copied out of the stack on
write), so an interrupted pack resumes, a run alone resumes its packed checkpoint and a pack
its runs' own (tests/test_pack_checkpoints.py); whoever starts one still checks first that
its estimate ends before the deadline.
"""

from __future__ import annotations

import itertools
import math
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .. import records
from ..comm import Channel, wire_copy
from ..config import resolve_device
from ..errors import BudgetExhausted, ConfigError, DivergenceError
from ..methods.multi_vfl import MultiVFL, MultiVFLConfig
from ..methods.server_opt import server_step
from . import checkpoint as checkpoint_io
from . import multi_owner
from .packed import StackedModel, _cross_entropy


def _protocol_order(row: tuple[str, str, str, int, int, int, str]) -> tuple[int, int]:
    # rows by step; within the step a chain ends on (its update to the server), the update
    # comes first, as the unpacked round sends it before the next chain's first batch
    return row[5], 0 if row[2] == "model_weights" else 1


#: What the runs of one round's pack must share: the shapes of a step and the local optimizer.
STEP_SHARED = ("n_data_owners", "n_label_owners", "batch_size", "local_optimizer", "local_lr")


#: Test images the label owners' stacked model takes at once in :meth:`RoundPack.evaluate`, over
#: all runs of the pack (on a GPU, on a CPU): on a GPU about 5 GB of activations (~300 kB an
#: image through the label owner's model), so the 42 runs of a paper pack score a message of
#: 1,000 test images in 3 calls; on a CPU as many as the unpacked evaluation's chunks of 100.
EVAL_IMAGES: tuple[int, int] = (16_384, 4_096)


class RoundPack:
    """Runs of Multi-VFL (:class:`~vflkit.methods.multi_vfl.MultiVFL`, set up) held stacked
    from round to round: every party model of every run is a slice of one stacked tensor per
    parameter, and the runs' own models (and the server's moments) are views of those slices,
    so a run's objects are current after every round with no copy.

    A round (:meth:`round`) steps every label-owner chain of every run at once, then ends as
    Algorithm 1 does, for all runs together: each label owner's update t_k (Line 9) as one
    stacked subtraction, the server's mean of its run's K updates and its optimizer step
    (Line 10; runs with the same server rule in one call of
    :func:`~vflkit.methods.server_opt.server_step`, which is elementwise), the new weights back
    to the label owners, and each data owner's copies averaged (Lines 11-13). Every message
    (embeddings, gradients, the label owners' updates, the server's new weights, the
    evaluation's embeddings) is a row in its own run's ledger, with its sender, receiver,
    size and the step the unpacked round gives it, and travels as a detached copy
    (:func:`_post`). The server's step sizes (:meth:`MultiVFL.server_stats`) are computed
    for all runs on the device and read once a round. :meth:`evaluate` evaluates every run's
    aggregated model at once on its own test images.

    So the operations of a round do not grow with the runs beyond the stacked computation
    (counted in :func:`vflkit.training.counting.count_round`). :meth:`release` gives each run's models
    their own storage again (a view would pin the whole stack: a checkpoint of it would hold
    every run).
    """

    def __init__(self, methods: Sequence[MultiVFL], *, stacking: str = "auto") -> None:
        runs = list(methods)
        if not runs:
            raise ConfigError("a pack needs at least one run")
        for m in runs:
            if "global" not in m.server.models:
                raise ConfigError("call setup() before round()")
        differ = [f for f in STEP_SHARED if len({getattr(m.config, f) for m in runs}) > 1]
        if differ:
            raise ConfigError(f"runs packed in one round must share {', '.join(STEP_SHARED)}; they differ in {differ}")
        if len({m.rounds_done for m in runs}) > 1:
            raise ConfigError("runs packed together must have run the same rounds")
        self.runs = runs
        self.n_runs, self.n_owners = len(runs), len(runs[0].label_owners)
        # chain (j, k): run j's label owner k with copy k of each of run j's data owners
        self.chains = [(j, k) for j in range(self.n_runs) for k in range(self.n_owners)]
        n_do = len(runs[0].data_owners)
        tops = [runs[j].label_owners[k].models["top"] for j, k in self.chains]
        copies = [[runs[j].data_owners[d].models[f"copy_{k + 1}"] for j, k in self.chains] for d in range(n_do)]
        globals_ = [[m.data_owners[d].models["global"] for m in runs] for d in range(n_do)]
        self.top = StackedModel(tops, stacking=stacking)
        self.bottoms = [StackedModel(c, stacking=stacking) for c in copies]
        self.globals = [StackedModel(g, stacking=stacking) for g in globals_]
        self.server = StackedModel([m.server.models["global"] for m in runs], stacking=stacking)
        with torch.no_grad():
            names = list(self.server.params)
            self.moments = {which: {n: torch.stack([m.server.state["opt"][which][n] for m in runs]) for n in names}
                            for which in ("m", "v")}
            self.initial = {n: torch.stack([m.server.state["initial"][n] for m in runs]) for n in names}
        for stacked, modules in [(self.top, tops), *zip(self.bottoms, copies), *zip(self.globals, globals_),
                                 (self.server, [m.server.models["global"] for m in runs])]:
            _bind(stacked.params, modules)
        for j, m in enumerate(runs):
            m.server.state["opt"] = {w: {n: t[j] for n, t in moments.items()} for w, moments in self.moments.items()}
        # the runs with one server rule step together (FedAvg, FedAdam, ...: a run's own hyperparameters)
        device = self.top.params[next(iter(self.top.params))].device
        groups: dict[Any, list[int]] = {}
        for j, m in enumerate(runs):
            groups.setdefault(m.server_optimizer, []).append(j)
        self.groups = [(opt, torch.tensor(idx, device=device)) for opt, idx in groups.items()]
        self.device = device
        self.released = False
        self._test: Sequence[torch.Tensor] | None = None
        # each data owner's training strips, transformed once: runs of one dataset hold the same
        # images, so a strip is kept once and each chain points at its run's ([distinct, N, ...])
        self._train, self._strip_of = zip(*[_distinct([runs[j].data_owners[d] for j, _ in self.chains], "train", device)
                                           for d in range(n_do)])
        # each chain's label owner's own training labels, [chains, samples per label owner]
        held = [runs[j].label_owners[k].held_labels("train") for j, k in self.chains]
        if len({len(y) for y in held}) > 1:
            raise ConfigError("label owners packed together must hold as many samples each")
        self._labels = torch.stack(held)

    # -- a round -------------------------------------------------------------------------

    def round(self, r: int) -> list[dict[str, float]]:
        """Global round ``r`` of every run; the mean training loss per label owner, one dict per run."""
        runs, chains = self.runs, self.chains
        self._check_held()
        for m in runs:
            if r != m.rounds_done + 1:
                raise ConfigError(f"round {r} called after round {m.rounds_done}; rounds run in order 1, 2, ...")
        # each chain's samples of the round, its batches end to end (the unpacked round's batch by batch)
        orders = {(j, k): m._round_order(k, r) for j, m in enumerate(runs) for k in range(self.n_owners)}
        sizes = orders[chains[0]][1]
        if any(orders[c][1] != sizes for c in chains):
            raise ConfigError(f"label owners' batches differ in number or size in round {r}; "
                              "a packed round needs them alike")
        n = len(sizes)
        lo_of = {(j, k): runs[j].label_owners[k] for j, k in chains}
        n_do = len(runs[0].data_owners)
        first_rows = [len(m.channel.ledger) for m in runs]
        with torch.no_grad():
            starts = {name: p.clone() for name, p in self.top.params.items()}  # W^{S,r} of every chain
        top, bottoms = self.top, self.bottoms
        # one optimizer per party over its stacked models, made afresh each round as the unpacked
        # round makes its own: SGD and Adam update elementwise, so slice c follows chain c's own
        top_opt = runs[0]._local_optimizer(list(top.params.values()))
        bottom_opts = [runs[0]._local_optimizer(list(b.params.values())) for b in bottoms]
        # the chains' losses summed on the device (float64) and read once, after the round
        totals = torch.zeros(len(chains), dtype=torch.float64, device=self.device)
        # each chain's batches of the round taken once (per step only a slice: no per-chain
        # operation inside a step)
        offsets = [0, *itertools.accumulate(sizes)]
        ids = {c: order for c, (order, _) in orders.items()}
        # where each party holds its chain's samples, found on the host and sent over at once
        held_at = torch.stack([torch.stack([runs[j].data_owners[d].positions("train", ids[j, k]) for j, k in chains])
                               for d in range(n_do)] + [torch.stack([lo_of[c].positions("train", ids[c]) for c in chains])])
        held_at = held_at.to(self.device, non_blocking=True)
        features = [x[u[:, None], at] for x, u, at in zip(self._train, self._strip_of, held_at)]
        labels = torch.gather(self._labels, 1, held_at[-1])
        data_owner = [[runs[j].data_owners[d].name for j, _ in chains] for d in range(n_do)]
        label_owner = [lo_of[c].name for c in chains]
        ledgers = [runs[j].channel.ledger for j, _ in chains]
        for i in range(n):
            rows = slice(offsets[i], offsets[i + 1])
            steps = [k * n + i for _, k in chains]
            acts = []
            for bottom, opt, x in zip(bottoms, bottom_opts, features):
                opt.zero_grad(set_to_none=True)
                acts.append(bottom(x[:, rows]))
            # every chain's embedding from every data owner: one stacked message per data owner,
            # each chain's row in its own run's ledger
            parts = [p.requires_grad_(True) for p in _post(acts, "embedding", ledgers, data_owner,
                                                            [label_owner] * n_do, r, steps)]
            top_opt.zero_grad(set_to_none=True)
            # A_k = Concatenate A_{d,k} along the height: dim 3 of the stacked [chains, B, C, h, W]
            losses = _cross_entropy(top(torch.cat(parts, dim=3)), labels[:, rows])
            losses.sum().backward()  # the chains share no parameter: each gets its own loss's gradient
            top_opt.step()
            grads = _post([p.grad for p in parts], "gradient", ledgers, [label_owner] * n_do, data_owner, r, steps)
            for a, g, opt in zip(acts, grads, bottom_opts):
                a.backward(g)
                opt.step()
            totals += losses.detach().to(torch.float64)
        sums = totals.tolist()
        for c, value in zip(chains, sums):
            if not math.isfinite(value):
                raise DivergenceError(f"{lo_of[c].name}'s loss was not finite in round {r} of run {c[0]} of the pack "
                                      f"(its sum: {value}): training diverged; lower local_lr or the server lr")
        self._end_round(r, n, starts, label_owner, ledgers)
        for j, m in enumerate(runs):
            m.channel.ledger.sort_since(first_rows[j], _protocol_order)
            m.rounds_done = r
        return [{lo_of[j, k].name: sums[j * self.n_owners + k] / n for k in range(self.n_owners)}
                for j in range(self.n_runs)]

    @torch.no_grad()
    def _end_round(self, r: int, n: int, starts: dict[str, torch.Tensor], label_owner: list[str],
                   ledgers: list[Any]) -> None:
        """Lines 9-13 for every run: updates to the server, its step, the new weights back, the
        data owners' averaging (what :meth:`MultiVFL.round` does after its chains)."""
        runs, n_runs, n_owners = self.runs, self.n_runs, self.n_owners

        def per_run(t: torch.Tensor) -> torch.Tensor:  # [chains, ...] -> [runs, label owners, ...]
            return t.view(n_runs, n_owners, *t.shape[1:])

        # Line 9: t_k = W_k^{S,r+1} - W^{S,r}, sent to the server when chain k ends
        names = list(self.server.params)
        t = {name: self.top.params[name] - starts[name] for name in names}
        server = [runs[j].server.name for j, _ in self.chains]
        got = _post(t, "model_weights", ledgers, label_owner, server, r, [(k + 1) * n for _, k in self.chains])
        # Line 10 (as MultiVFL._aggregate): each run's server averages its K updates and steps
        mean = {name: per_run(got[name]).mean(1) for name in names}
        weights = {name: p.clone() for name, p in self.server.params.items()}
        for opt, idx in self.groups:
            new, state = server_step({name: w[idx] for name, w in weights.items()},
                                     {name: u[idx] for name, u in mean.items()},
                                     {which: {name: x[idx] for name, x in ms.items()} for which, ms in self.moments.items()},
                                     opt, r)
            for name in names:
                self.server.params[name].index_copy_(0, idx, new[name])
                for which in self.moments:
                    self.moments[which][name].index_copy_(0, idx, state[which][name])
        self._server_stats(r, weights, mean)
        # the new weights to every label owner (one message per label owner, as the unpacked round)
        steps = [n_owners * n + 2] * len(self.chains)
        wire = {name: p.repeat_interleave(n_owners, dim=0) for name, p in self.server.params.items()}
        new = _post(wire, "model_weights", ledgers, server, label_owner, r, steps)
        for name, p in self.top.params.items():
            p.copy_(new[name])
        # Lines 11-13: each data owner's copies averaged into its model, every copy restarting from it
        for bottom, global_ in zip(self.bottoms, self.globals):
            for name, p in bottom.params.items():
                avg = per_run(p).mean(1)
                global_.params[name].copy_(avg)
                per_run(p).copy_(avg.unsqueeze(1).expand_as(per_run(p)))

    def _server_stats(self, r: int, weights: dict[str, torch.Tensor], update: dict[str, torch.Tensor]) -> None:
        """Each run's :meth:`MultiVFL.server_stats` for round ``r`` (its ``_step_stats``), computed
        for all runs on the device and read in one transfer."""
        names = list(weights)

        def sq(parts: Sequence[torch.Tensor]) -> torch.Tensor:  # [runs]: each run's squared norm, float64
            return sum(p.double().pow(2).flatten(1).sum(1) for p in parts)

        new = self.server.params
        norms = [sq([update[n] for n in names]), sq([new[n] - weights[n] for n in names]),
                 sq([new[n] - self.initial[n] for n in names])]
        adaptive = [j for j, m in enumerate(self.runs) if m.server_optimizer.name != "fedavg"]
        quantiles = []
        if adaptive:  # sqrt(v) of the runs whose rule keeps v
            rows = torch.tensor(adaptive, device=self.device)
            sqrt_v = torch.cat([self.moments["v"][n][rows].flatten(1) for n in names], dim=1).clamp_min(0).sqrt()
            stride = max(1, sqrt_v.shape[1] // 4_000_000)  # as MultiVFL._step_stats
            for one in sqrt_v[:, ::stride]:
                quantiles.append(torch.stack([one.median().double(), torch.quantile(one.double(), 0.99)]))
        values = torch.cat([torch.stack(norms).sqrt().flatten(), *quantiles]).tolist()
        n_runs = self.n_runs
        q = dict(zip(adaptive, zip(values[3 * n_runs::2], values[3 * n_runs + 1::2])))
        for j, m in enumerate(self.runs):
            median, p99 = q.get(j, (float("nan"), float("nan")))
            m.server_log[r] = {"update_norm": values[j], "server_step_norm": values[n_runs + j],
                               "distance_from_init": values[2 * n_runs + j],
                               "median_sqrt_v": median, "p99_sqrt_v": p99}

    # -- evaluation ----------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self, *, batch_size: int = 1000, chunk: int | None = None) -> list[dict[str, float]]:
        """Every run's :meth:`MultiVFL.evaluate`, at once: its data owners' averaged models send
        the embeddings of ``batch_size`` of its own test images per message to its
        ``label_owner_1``, whose model (the server's, just received) scores them. ``chunk``:
        test images per run that the label owners' stacked model takes at a time (default: as
        many as keep [runs x chunk] near :data:`EVAL_IMAGES` images)."""
        runs = self.runs
        self._check_held()
        if self._test is None:  # each run's test strips, as its data owners hold them (each distinct one once)
            self._test, self._test_of = zip(*[_distinct([m.data_owners[d] for m in runs], "test", self.device)
                                              for d in range(len(runs[0].data_owners))])
            self._test_labels = torch.stack([m.evaluator.labels("test") for m in runs])
        n = self._test_labels.shape[1]
        chunk = chunk or max(1, EVAL_IMAGES[self.device.type == "cpu"] // self.n_runs)
        ledgers = [m.channel.ledger for m in runs]
        senders = [[m.data_owners[d].name for m in runs] for d in range(len(self._test))]
        receivers = [[m.evaluator.name for m in runs]] * len(self._test)
        # label owner 1's model: chain (j, 0) of each run
        top = {name: p.view(self.n_runs, self.n_owners, *p.shape[1:])[:, 0] for name, p in self.top.params.items()}
        correct = torch.zeros(self.n_runs, dtype=torch.float64, device=self.device)
        loss_sum = torch.zeros_like(correct)
        for start in range(0, n, batch_size):
            rows = slice(start, min(start + batch_size, n))
            acts = [g(x[u, rows]) for g, x, u in zip(self.globals, self._test, self._test_of)]
            # the runs of a pack have run the same rounds: each message at that round, step 0
            parts = _post(acts, "embedding", ledgers, senders, receivers, runs[0].rounds_done, [0] * self.n_runs,
                          phase="eval")
            y = self._test_labels[:, rows]
            hits = torch.zeros(self.n_runs, dtype=torch.float32, device=self.device)
            for i in range(0, y.shape[1], chunk):
                logits = self.top.call_with(top, torch.cat([p[:, i:i + chunk] for p in parts], dim=3))
                yi = y[:, i:i + chunk]
                hits += (logits.argmax(dim=2) == yi).sum(1)
                loss_sum += F.cross_entropy(logits.flatten(0, 1), yi.flatten(), reduction="none").view_as(yi).double().sum(1)
            # the message's accuracy as the unpacked evaluation computes it (a float32 mean), times its images
            correct += (hits / y.shape[1]).double() * y.shape[1]
        return [{"test_accuracy": c / n, "test_loss": s / n} for c, s in zip(correct.tolist(), loss_sum.tolist())]

    def _check_held(self) -> None:
        if self.released:
            raise ConfigError("this pack was released: its runs no longer see its tensors; make a new RoundPack")

    def release(self) -> None:
        """Give each run's models and server moments their own storage again (see the class note);
        the pack is then done with."""
        self.released = True
        for m in self.runs:
            for party in m.parties:
                for model in party.models.values():
                    for p in model.parameters():
                        p.data = p.data.clone()
            m.server.state["opt"] = {w: {n: t.clone() for n, t in ms.items()} for w, ms in m.server.state["opt"].items()}


def _distinct(parties: Sequence[Any], split: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``split`` features of ``parties`` (one per chain or run: the same data owner of each
    run), transformed, each distinct strip once: ``([distinct, N, ...], which strip each party
    holds)``. Runs of one dataset hold the same images, so a pack keeps them once."""
    held: list[torch.Tensor] = []
    strips: list[torch.Tensor] = []
    which = []
    for party in parties:
        x = party.held_features(split)
        u = next((i for i, h in enumerate(held) if h is x or (h.shape == x.shape and torch.equal(h, x))), None)
        if u is None:
            held.append(x)
            strips.append(party.features(split))
            u = len(held) - 1
        which.append(u)
    return torch.stack(strips), torch.tensor(which, device=device)


def _bind(stacked: dict[str, torch.Tensor], modules: Sequence[torch.nn.Module]) -> None:
    """Make module k's parameters views of slice k of ``stacked``: what the stack learns, the
    module holds (the party models of Multi-VFL have no buffers)."""
    for k, module in enumerate(modules):
        if any(True for _ in module.buffers()):
            raise ConfigError("a Multi-VFL pack holds models without buffers")
        for name, p in module.named_parameters():
            p.data = stacked[name].detach()[k]


def packed_round(methods: MultiVFL | Sequence[MultiVFL], r: int, *,
                 stacking: str = "auto") -> dict[str, float] | list[dict[str, float]]:
    """Global round ``r`` of each of ``methods`` (what :meth:`MultiVFL.round` does) with every
    label-owner chain of every run stepped together (a :class:`RoundPack` for one round);
    returns the mean training loss per label owner (one dict per run when given a sequence).

    The runs (e.g. a study's runs of one profile: seeds, datasets, scenarios, server optimizers)
    must share the shapes of a step and the local optimizer (:data:`STEP_SHARED`). ``stacking``:
    how each party's stacked models run (:data:`vflkit.training.packed.STACKINGS`).
    """
    runs = [methods] if isinstance(methods, MultiVFL) else list(methods)
    pack = RoundPack(runs, stacking=stacking)
    try:
        out = pack.round(r)
    finally:
        pack.release()
    return out[0] if isinstance(methods, MultiVFL) else out


def _post(payloads: Any, kind: str, ledgers: Sequence[Any], senders: Any, receivers: Any, r: int,
          steps: Sequence[int], phase: str = "train") -> Any:
    """Send ``payloads`` (a list of stacked tensors [slices, ...], one per data owner, or a
    dict of them: one model's weights) as one stacked message: slice c (a chain; a run, for the
    evaluation) travels from ``senders[..][c]`` to ``receivers[..][c]`` and is a row in
    ``ledgers[c]``, stamped with round ``r``, ``steps[c]`` and ``phase``, in the unpacked
    round's order (chain by chain, then data owner by data owner); the receivers get a
    detached copy, as through :class:`~vflkit.comm.Channel` (each slice only to its chain)."""
    if isinstance(payloads, dict):  # one message of several tensors per slice
        one = sum(p.numel() // p.shape[0] * p.element_size() for p in payloads.values())
        for c, ledger in enumerate(ledgers):
            ledger.add(senders[c], receivers[c], kind, one, r, steps[c], phase)
        return {name: wire_copy(p) for name, p in payloads.items()}
    for c, ledger in enumerate(ledgers):
        for d, p in enumerate(payloads):
            one = p.numel() // p.shape[0] * p.element_size()  # chain c's slice, as it travels
            ledger.add(senders[d][c], receivers[d][c], kind, one, r, steps[c], phase)
    return [wire_copy(p) for p in payloads]


#: What the runs of one pack must share (the step's shapes, the local optimizer, the rounds
#: and when they evaluate); they may differ in anything else (dataset, scenario, server
#: optimizer, seed).
SHARED = ("n_data_owners", "n_label_owners", "batch_size", "samples_per_owner", "local_epochs", "local_steps",
          "local_optimizer", "local_lr", "rounds", "eval_every", "n_test", "variant")


#: The most runs in one Multi-VFL pack: the paper profile's 42 at once (about 3.3 GB of a
#: round's batches on the GPU for their 210 chains, beside 0.4 GB of the two datasets' strips,
#: each held once by the pack; their packed step is counted at 288
#: operations, against 895 for one run's five chains one after another).
MAX_RUNS = 42


def pack_key(config: MultiVFLConfig) -> tuple[Any, ...]:
    """What Multi-VFL runs must share to train as one pack (:data:`SHARED`)."""
    return ("multi_owner_packed", *(getattr(config, f) for f in SHARED))


def train_pack(configs: Sequence[MultiVFLConfig], *, device: torch.device | str = "cpu", progress: bool = False,
               stacking: str = "auto", checkpoints: Sequence[Path] | None = None,
               deadline: float | None = None) -> list[dict[str, Any]]:
    """Train ``configs`` (runs of one :func:`pack_key`) as one pack, round by round (a
    :class:`RoundPack` held throughout); each run's results as :func:`vflkit.training.multi_owner.train`
    returns them (its history rows by :func:`~vflkit.training.multi_owner.round_row`, its
    evaluation its own), plus ``execution``. Timings are the pack's. A diverging chain raises
    :class:`DivergenceError` for the pack (see the module's note).

    ``checkpoints`` (one path per run): after a round (every round but the last, at most every
    :data:`~vflkit.training.multi_owner.CHECKPOINT_EVERY_S` seconds) each run is saved at its
    path as the run alone saves it, and a pack whose runs all hold a checkpoint of one round
    continues after it (:func:`~vflkit.training.checkpoint.load_all`), so either trainer
    resumes the other's runs. With ``deadline`` too, a pack whose next round would end after it
    checkpoints and stops with :class:`~vflkit.errors.BudgetExhausted`, as a run alone does."""
    configs = list(configs)
    if not configs or len({pack_key(c) for c in configs}) != 1 or len({c.key for c in configs}) != len(configs):
        raise ConfigError("a Multi-VFL pack holds distinct runs that share " + ", ".join(SHARED))
    if checkpoints is not None and len(checkpoints) != len(configs):
        raise ConfigError(f"a pack of {len(configs)} runs needs as many checkpoint paths; got {len(checkpoints)}")
    device = resolve_device(device)
    start = time.perf_counter()
    methods = []
    for cfg in configs:  # each built as the unpacked trainer builds it
        m = MultiVFL(cfg, multi_owner._data(cfg), device=device, channel=Channel())
        m.setup()
        methods.append(m)
    rounds = configs[0].rounds
    histories: list[list[dict[str, Any]]] = [[] for _ in configs]
    logs = [checkpoint_io.LedgerLog(m.channel) for m in methods]
    first = 1
    states = checkpoint_io.load_all(checkpoints, configs, device=device, unit="round") if checkpoints else None
    if states is not None:  # before the pack binds the runs' models to its stack
        for k, (m, state, log) in enumerate(zip(methods, states, logs)):
            multi_owner.restore_checkpoint(state, method=m, ledger_log=log, device=device)
            histories[k] = state["history"]
        first, start = states[0]["round"] + 1, time.perf_counter() - max(s["elapsed_s"] for s in states)
    pack = RoundPack(methods, stacking=stacking)
    resumed_at = last_saved = time.perf_counter()
    for r in tqdm(range(first, rounds + 1), total=rounds, initial=first - 1, desc=f"Multi-VFL x{len(configs)}",
                  disable=not progress, leave=False):
        losses = pack.round(r)
        # every run evaluates when the unpacked trainer would (the pack shares eval_every and rounds)
        due = r % configs[0].eval_every == 0 or r == rounds
        evaluations = pack.evaluate() if due else [None] * len(configs)
        for m, loss, evaluation, history in zip(methods, losses, evaluations, histories):
            row = multi_owner.round_row(m, r, loss, evaluation=evaluation)
            row["elapsed_s"] = time.perf_counter() - start
            history.append(row)
        if checkpoints is None or r == rounds:
            continue
        now = time.perf_counter()
        stop = deadline is not None and time.time() + (now - resumed_at) / (r - first + 1) > deadline
        if stop or now - last_saved >= multi_owner.CHECKPOINT_EVERY_S:
            for m, cfg, path, history, log in zip(methods, configs, checkpoints, histories, logs):
                multi_owner.save_checkpoint(path, config=cfg, r=r, elapsed_s=now - start, history=history, method=m,
                                            ledger_log=log, device=device)  # a run's slices copied out on write
            last_saved = time.perf_counter()
        if stop:
            pack.release()
            raise BudgetExhausted(f"a pack of {len(configs)} Multi-VFL runs stopped after round {r} of {rounds} at "
                                  "the budget; rerun to resume it")
    pack.release()
    wall = time.perf_counter() - start
    keys = [c.key for c in configs]
    return [{**multi_owner.results(h, m.channel, wall, None), "execution": {"packed": len(configs), "pack": keys}}
            for m, h in zip(methods, histories)]


def run_pack(configs: Sequence[MultiVFLConfig], *, profile: str, device: torch.device | str = "auto",
             results: str | Path | None = None, force: bool = False, progress: bool = False,
             on_divergence: str = "raise", deadline: float | None = None) -> list[dict[str, Any]]:
    """The records of ``configs``, in their order: recorded ones loaded, the others trained as
    one pack (:func:`train_pack`) and written through the record store's one path
    (:func:`vflkit.records.run_together`). Where the pack diverges, each of its runs is trained
    alone instead (:func:`vflkit.training.multi_owner.train`, from round 1), so that every
    record, a diverged one included, is the unpacked trainer's; each is recorded as it finishes,
    so a deadline that stops a later one (with :class:`~vflkit.errors.BudgetExhausted`) loses
    none finished. Each run is checkpointed beside its record where the run alone is
    (:func:`train_pack`; ``deadline`` stops the pack there)."""

    def train_all(todo: list[MultiVFLConfig], dev: torch.device, checkpoints: list[Path]) -> list[dict[str, Any]]:
        try:
            return train_pack(todo, device=dev, progress=progress, checkpoints=checkpoints, deadline=deadline)
        except DivergenceError as err:
            for ckpt in checkpoints:  # the pack's: alone, every run starts over, as the unpacked trainer
                ckpt.unlink(missing_ok=True)
            raise _PackDiverged() from err

    try:
        return records.run_together(configs, train_all=train_all, profile=profile, device=device, results=results,
                                    force=force, on_divergence=on_divergence)
    except _PackDiverged:
        # one run at a time through the record store: each record is written before the next
        # run starts (a pack's records are written together, after all of its runs)
        return [multi_owner.run(c, profile=profile, device=device, results=results, force=force, progress=progress,
                                on_divergence=on_divergence, deadline=deadline) for c in configs]


class _PackDiverged(Exception):
    """A pack's divergence, as :func:`run_pack` trains its runs alone after it (a record found
    diverged stays the record store's :class:`~vflkit.errors.DivergenceError`)."""


def compute_pack(payloads: Sequence[Mapping[str, Any]], *, device: torch.device | str = "auto",
                 deadline: float | None = None) -> list[dict[str, Any]]:
    """The records of Multi-VFL study payloads (``{"family": "multi_owner", "config",
    "profile", "results"}``) trained as one pack by :func:`run_pack`: a pack's task function,
    as :func:`vflkit.training.packed.compute_pack` is for the split family's."""
    from . import FAMILIES

    payloads = list(payloads)
    places = {(p["profile"], str(p["results"])) for p in payloads}
    if len(places) != 1 or any(p.get("family") != "multi_owner" for p in payloads):
        raise ConfigError("a Multi-VFL pack writes Multi-VFL records under one profile and results folder")
    profile, results = next(iter(places))
    configs = [MultiVFLConfig.from_dict(dict(p["config"])) for p in payloads]
    return run_pack(configs, profile=profile, device=device, results=Path(results),
                    on_divergence=FAMILIES["multi_owner"].on_divergence, deadline=deadline)


__all__ = ["MAX_RUNS", "SHARED", "RoundPack", "compute_pack", "pack_key", "packed_round", "run_pack", "train_pack"]
