"""C-VFL: compressed vertical federated learning with local iterations on stale embeddings.

Castiglia, Das, Wang, Patterson, "Compressed-VFL: Communication-Efficient Learning with
Vertically Partitioned Data", ICML 2022 (VFedMH's baseline [18]).

SplitNN with a server model (here at the active party, which also holds the labels): each step
every party sends its embedding compressed, the server sends every party the others', and every
party and the server run Q local iterations on these stale embeddings (in full: docs/engine.md,
"C-VFL's step"). Every party computes its own loss: C-VFL's Sec. 3 assumes the labels are
available to all parties.

Standard configuration (the C-VFL paper's headline setting and its code's README example):
Q = 10 local iterations and vector quantisation with b = 3 bits per value (8 levels, 2-D
lattice). Scalar quantisation and top-k sparsification at the same bit budget are options.
The ledger counts compressed sizes: ``b/8`` bytes per quantised value plus the range, and
for top-k ``k`` float32 values with 2-byte indices.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Hashable, Sequence

import torch

from ..errors import ConfigError, check_choice
from .base import VFLMethod, backward_runs, make_optimizer, stacked_cross_entropy
from .splitnn import predict_top, top_model

if TYPE_CHECKING:
    from .pack import Pack

COMPRESSORS: tuple[str, ...] = ("vector", "scalar", "topk", "none")

#: C-VFL's Q in every study (its paper's headline setting and its code's default).
LOCAL_ITERATIONS = 10


def step_size(host_lr: float, local_iterations: int = LOCAL_ITERATIONS) -> float:
    """C-VFL's learning rate in a host paper's study: the host's rate divided by Q.

    Neither host paper (VFedMH, EASTER) gives C-VFL's rate. C-VFL's analysis (Castiglia et al.,
    ICML 2022, Theorem 4.2) bounds the step size by ``1 / (16 Q max(L, L_m))``, and the host's
    rate is the one its authors found stable for Q = 1, so ``host_lr / Q`` keeps C-VFL inside
    the same bound (the argument in full: docs/engine.md, "C-VFL's learning rate").
    """
    if int(local_iterations) < 1:
        raise ConfigError(f"local_iterations must be >= 1, got {local_iterations!r}")
    return float(host_lr) / int(local_iterations)


def _range(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lo, hi = x.min(), x.max()
    return lo, torch.clamp(hi - lo, min=1e-12)


def scalar_quantize(x: torch.Tensor, bits: int, *, generator: torch.Generator | None = None) -> tuple[torch.Tensor, int]:
    """Uniform scalar quantisation to ``2**bits`` levels over x's range, with subtractive dither;
    the decompressed tensor and its bytes on the wire (``bits`` per value, two float32 for the range)."""
    levels = 2**bits
    lo, span = _range(x)
    u = (x - lo) / span * (levels - 1)
    dither = torch.rand(x.shape, generator=generator).to(x.device) - 0.5
    q = torch.clamp(torch.round(u + dither), 0, levels - 1) - dither
    return (q / (levels - 1) * span + lo).to(x.dtype), math.ceil(x.numel() * bits / 8) + 8


def a2_nearest(p: torch.Tensor, s: float) -> torch.Tensor:
    """Nearest point of the hexagonal A2 lattice with spacing ``s`` to each row of ``p`` [N, 2]."""
    h = s * math.sqrt(3)
    c1 = torch.stack([s * torch.round(p[:, 0] / s), h * torch.round(p[:, 1] / h)], 1)
    c2 = torch.stack([s * (torch.round(p[:, 0] / s - 0.5) + 0.5), h * (torch.round(p[:, 1] / h - 0.5) + 0.5)], 1)
    closer = ((p - c1) ** 2).sum(1, keepdim=True) <= ((p - c2) ** 2).sum(1, keepdim=True)
    return torch.where(closer, c1, c2)


def vector_quantize(x: torch.Tensor, bits: int, *, generator: torch.Generator | None = None) -> tuple[torch.Tensor, int]:
    """2-D lattice (A2) vector quantisation at ``bits`` bits per value, with subtractive dither.

    Values are scaled to [0, 1] by x's range and taken in pairs; the lattice spacing makes one
    hexagonal cell ``1 / 4**bits`` of the unit square, i.e. ``2 * bits`` bits per pair as for
    scalar quantisation. Returns what :func:`scalar_quantize` does.
    """
    lo, span = _range(x)
    flat = ((x - lo) / span).reshape(-1)
    pad = flat.numel() % 2
    if pad:
        flat = torch.cat([flat, flat.new_zeros(1)])
    pairs = flat.reshape(-1, 2)
    s = math.sqrt(2 / math.sqrt(3)) / 2**bits
    dither = (torch.rand(pairs.shape, generator=generator).to(x.device) - 0.5) * s
    q = a2_nearest(pairs + dither, s) - dither
    out = q.reshape(-1)[: x.numel()].reshape(x.shape)
    return (out * span + lo).to(x.dtype), math.ceil(x.numel() * bits / 8) + 8


def topk_sparsify(x: torch.Tensor, bits: int) -> tuple[torch.Tensor, int]:
    """Keep the largest-magnitude ``bits/32`` share of each row's entries (same budget as b-bit
    quantisation of float32); returns the sparse tensor and its size (float32 value + 2-byte
    index per kept entry)."""
    rows = x.reshape(x.shape[0], -1) if x.dim() > 1 else x.reshape(1, -1)
    k = max(1, int(rows.shape[1] * bits / 32))
    idx = rows.abs().topk(k, dim=1).indices
    out = torch.zeros_like(rows).scatter_(1, idx, rows.gather(1, idx))
    return out.reshape(x.shape), rows.shape[0] * k * 6


def compress(pack: Pack, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The run's compressor on K runs' tensors ``[K, ...]``: each slice over its own range with
    its own dither (drawn ahead, :meth:`CVFL.draw_ahead`); the tensor and one run's bytes on the wire."""
    bits, kind = int(pack.options["bits"]), pack.options["compressor"]
    x = x.detach()
    if x.dtype == torch.bfloat16:  # an embedding under bf16 autocast: quantised in float32
        x = x.float()
    if pack.k == 1:  # a run alone: its tensor, its dither drawn from its generator as it goes
        gen = pack.methods[0].generator
        if kind in ("vector", "scalar"):
            return (vector_quantize if kind == "vector" else scalar_quantize)(x, bits, generator=gen)
        return topk_sparsify(x, bits) if kind == "topk" else (x, x.numel() * x.element_size())
    n, k = x[0].numel(), x.shape[0]
    if kind == "none":
        return x, n * x.element_size()
    if kind == "topk":
        rows = x.reshape(k, x.shape[1], -1) if x.dim() > 2 else x.reshape(k, 1, -1)
        keep = max(1, int(rows.shape[2] * bits / 32))
        idx = rows.abs().topk(keep, dim=2).indices
        out = torch.zeros_like(rows).scatter_(2, idx, rows.gather(2, idx))
        return out.reshape(x.shape), rows.shape[1] * keep * 6
    dims = tuple(range(1, x.dim()))
    lo = x.amin(dim=dims, keepdim=True)
    span = torch.clamp(x.amax(dim=dims, keepdim=True) - lo, min=1e-12)
    dither = pack.dither.pop(0)
    size = math.ceil(n * bits / 8) + 8
    if kind == "scalar":
        levels = 2**bits
        u = (x - lo) / span * (levels - 1)
        d = dither - 0.5
        q = torch.clamp(torch.round(u + d), 0, levels - 1) - d
        return (q / (levels - 1) * span + lo).to(x.dtype), size
    flat = ((x - lo) / span).reshape(k, -1)
    if n % 2:
        flat = torch.cat([flat, flat.new_zeros(k, 1)], 1)
    s = math.sqrt(2 / math.sqrt(3)) / 2**bits
    d = (dither - 0.5) * s
    q = a2_nearest((flat.reshape(k, -1, 2) + d).reshape(-1, 2), s).reshape(k, -1, 2) - d
    out = q.reshape(k, -1)[:, :n].reshape(x.shape)
    return (out * span + lo).to(x.dtype), size


def step(pack: Pack, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """C-VFL's step over K runs (:attr:`VFLMethod.step`): the steps of docs/engine.md, "C-VFL's step". The
    active party's own embedding is compressed too: it is forwarded to the passive parties."""
    a, ch = pack.active, pack.channel
    passive = [n for n in pack.names if n != a]
    q = int(pack.options["local_iterations"])
    top = pack.model(a, "top")
    if pack.k > 1 and not pack.dither:  # no draw ahead (a caller stepping by itself): this step's only
        CVFL.draw_ahead(pack, [ids.shape[1]])
    sizes: dict[str, int] = {}
    xs = {group: pack.x(group[0], ids) if len(group) == 1 else torch.cat([pack.x(n, ids) for n in group])
          for group in pack.groups}
    with torch.no_grad():
        fresh: dict[str, torch.Tensor] = {}  # each party's embedding, computed by its group's call
        for group in pack.groups:
            out = pack.models[(group[0] if len(group) == 1 else group, "bottom")](xs[group])
            if len(group) == 1:
                fresh[group[0]] = out
            else:  # party-major slices
                fresh.update((n, out[g * pack.k:(g + 1) * pack.k]) for g, n in enumerate(group))
        for n in passive:
            h, sizes[n] = compress(pack, fresh[n])
            ch.send(n, a, "embedding", h, nbytes=sizes[n])
        stale = {n: ch.recv(a, n, "embedding") for n in passive}
        stale[a], sizes[a] = compress(pack, fresh[a])
        top_state, top_bytes = {}, 0
        for name, value in top.stacked_params().items():  # state_dict order: the top has no buffers
            top_state[name], nb = compress(pack, value)
            top_bytes += nb
    y = pack.y(ids)
    for n in passive:
        others = {m: e for m, e in stale.items() if m != n}
        ch.send(a, n, "embedding", others, nbytes=sum(sizes[m] for m in others))
        ch.send(a, n, "model_weights", top_state, nbytes=top_bytes)
        ch.send(a, n, "labels", y)
    # what each party computes from: its own features and model, and what it received (the
    # active party: its own top, not yet updated, the server's iterations coming after)
    got: dict[str, tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor]] = {}
    for n in pack.names:
        if n == a:
            got[n] = ({k: v.detach() for k, v in top.stacked_params().items()}, stale, y)
        else:
            got[n] = (ch.recv(n, a, "model_weights"), ch.recv(n, a, "embedding"), ch.recv(n, a, "labels"))
    for group in pack.groups:
        x = xs[group]
        if len(group) == 1:
            n = group[0]
            frozen, embeddings, labels = got[n]
            bottom, opt = pack.model(n, "bottom"), pack.optimizers[(n, "local")]
            for _ in range(q):
                opt.zero_grad(set_to_none=True)
                own = bottom(x)
                z = torch.cat([own if m == n else embeddings[m] for m in pack.names], -1)
                backward_runs(stacked_cross_entropy(top.call_with(frozen, z), labels))
                opt.step()
            continue
        # G parties as one stacked model, party-major [G x K]: slice g*K+k is party g's run k,
        # fed party g's features and computing against party g's own messages
        frozen = {k: torch.cat([got[n][0][k] for n in group]) for k in got[group[0]][0]}
        labels = torch.cat([got[n][2] for n in group])
        # the top's input with each party's own slot left open (zeros), filled each iteration
        # with its fresh embedding by a select: exact, and its gradient reaches that slot only
        fixed = torch.cat([torch.cat([torch.zeros_like(stale[m]) if m == n else got[n][1][m] for m in pack.names], 2)
                           for n in group])
        mask = pack.slots[group]
        bottom, opt = pack.models[(group, "bottom")], pack.optimizers[(group, "local")]
        for _ in range(q):
            opt.zero_grad(set_to_none=True)
            own = bottom(x)
            z = torch.where(mask, own.repeat(1, 1, len(pack.names)), fixed)
            backward_runs(stacked_cross_entropy(top.call_with(frozen, z), labels))
            opt.step()
    z = torch.cat([stale[m] for m in pack.names], -1)
    opt = pack.optimizers[(a, "top")]
    for _ in range(q):
        opt.zero_grad(set_to_none=True)
        loss = stacked_cross_entropy(top(z), y)
        backward_runs(loss)
        opt.step()
    return {"active": loss.detach()}


class CVFL(VFLMethod):
    """C-VFL (module docstring).

    Options
    -------
    compressor : {"vector", "scalar", "topk", "none"}, default "vector"
    bits : int, default 3
        Bits per value (C-VFL's b).
    local_iterations : int, default 10
        Q, local iterations per exchange.
    """

    name = "c_vfl"
    defaults = {"compressor": "vector", "bits": 3, "local_iterations": LOCAL_ITERATIONS}

    def build(self) -> None:
        cfg = self.config
        check_choice("compressor", self.options["compressor"], COMPRESSORS)
        if int(self.options["local_iterations"]) < 1 or not 1 <= int(self.options["bits"]) <= 16:
            raise ConfigError("C-VFL needs local_iterations >= 1 and 1 <= bits <= 16, got "
                              f"{self.options['local_iterations']} and {self.options['bits']}")
        for party in self.parties:
            party.models["bottom"] = self.party_model(party).embedding
            party.optimizers["local"] = self.make_optimizer(party, party.models["bottom"].parameters())
        # The same two-layer head as SplitNN, so the two differ only in C-VFL's mechanics.
        a = self.active
        a.models["top"] = top_model(len(self.parties), cfg.embedding_dim, self.num_classes).to(a.device)
        a.optimizers["top"] = self.make_optimizer(a, a.models["top"].parameters())
        # named _gen in vars(): a checkpoint stores a method's generators under their attribute names
        self._gen = torch.Generator().manual_seed(cfg.seed)

    @property
    def generator(self) -> torch.Generator:
        """The compressor's random draws (its dither), seeded with the run's seed."""
        return self._gen

    step = staticmethod(step)

    @classmethod
    def pack_parties(cls, pack: Pack, *, together: bool) -> None:
        """C-VFL's parties whose bottom models are alike, trained as one stacked model.

        A party's Q local iterations use only its own features, bottom model and messages, so they
        are independent of the other parties'. Parties with the same architecture, input shape,
        optimizer and rate are stacked party-major ([G x K]: party g's K runs, then the next
        party's) and iterate as one call a layer. A pack of one run keeps every party apart (its
        own models, the run's kernels); so does ``together=False``.
        """
        pack.groups = [(n,) for n in pack.names]
        if pack.k == 1 or not together:
            return
        first = pack.methods[0]
        cfg = first.config

        def alike(j: int) -> Hashable:
            bottom = first.parties[j].models["bottom"]
            return (repr(bottom), tuple((n, tuple(t.shape)) for n, t in bottom.state_dict().items()),
                    tuple(pack.features[pack.names[j]].shape[2:]), cfg.party_value("optimizers", j),
                    float(cfg.party_value("lr", j)))

        groups: dict[Hashable, list[int]] = {}
        for j in range(len(pack.names)):
            groups.setdefault(alike(j), []).append(j)
        pack.groups = []
        for members in groups.values():
            names = tuple(pack.names[j] for j in members)
            pack.groups.append(names)
            if len(names) == 1:  # alone: its own stacked model and optimizer
                continue
            for n in names:  # replaced by the group's
                del pack.models[(n, "bottom")], pack.optimizers[(n, "local")]
            modules = [m.parties[j].models["bottom"] for j in members for m in pack.methods]
            stacked = pack.stack(modules)
            pack.models[(names, "bottom")] = stacked
            # where each slice's own embedding goes in the top's input: built once, here (a
            # tensor made from host values inside a step would be a copy to the device each step)
            slot = torch.tensor([[m == n for m in pack.names] for n in names])
            pack.slots[names] = slot.repeat_interleave(pack.k, 0).repeat_interleave(cfg.embedding_dim, 1)[:, None, :].to(
                pack.device)
            # the run alone's optimizer parameter order (built over bottom.parameters())
            params = [stacked.params[n] for n, _ in modules[0].named_parameters()]
            pack.optimizers[(names, "local")] = make_optimizer(cfg.party_value("optimizers", members[0]), params,
                                                               float(cfg.party_value("lr", members[0])))

    @classmethod
    def draws_per_step(cls, pack: Pack) -> int:
        """Dither tensors one step takes: every party's embedding and each of the top's
        parameters (the dithered compressors only)."""
        if pack.options["compressor"] not in ("vector", "scalar"):
            return 0
        return len(pack.names) + len(pack.methods[0].active.models["top"].state_dict())

    @classmethod
    def draw_ahead(cls, pack: Pack, batch_sizes: Sequence[int]) -> None:
        """Draw the dither of the coming steps from each run's own generator, in the order the
        step takes it, and move it to the device in one copy."""
        if pack.options["compressor"] not in ("vector", "scalar"):
            return
        vector = pack.options["compressor"] == "vector"
        e = pack.methods[0].config.embedding_dim
        top = [tuple(t.shape) for t in pack.methods[0].active.models["top"].state_dict().values()]
        shapes = []  # per step: every party's embedding (passive ones, then the active one), the top
        for b in batch_sizes:
            for shape in [(b, e)] * len(pack.names) + top:
                n = math.prod(shape)
                shapes.append(((n + n % 2) // 2, 2) if vector else shape)  # vector: values in pairs
        flat = torch.stack([torch.cat([torch.rand(shape, generator=m.generator).reshape(-1) for shape in shapes])
                            for m in pack.methods]).to(pack.device, non_blocking=True)
        pieces = torch.split(flat, [math.prod(s) for s in shapes], dim=1)
        pack.dither = [d.reshape(pack.k, *shape) for d, shape in zip(pieces, shapes)]

    # Inference sends embeddings uncompressed: compression is a training-time saving.
    predict = predict_top
