"""C-VFL: compressed vertical federated learning with local iterations on stale embeddings.

Castiglia, Das, Wang, Patterson, "Compressed-VFL: Communication-Efficient Learning with
Vertically Partitioned Data", ICML 2022 (VFedMH's baseline [18]).

SplitNN with a server model (here at the active party, which also holds the labels). Each
step, on a mini-batch:

1. every party computes its embedding h_k(x_k) and sends it *compressed* to the server;
2. the server sends every party the other parties' compressed embeddings, the compressed
   server model and the batch labels (C-VFL lets every party compute its own loss: its
   Sec. 3 assumes the labels are available to all parties);
3. every party runs Q local iterations on its own bottom model against those stale embeddings
   and the server model's snapshot, while the server runs Q iterations on its model over the
   compressed embeddings.

Standard configuration (the C-VFL paper's headline setting and its code's README example):
Q = 10 local iterations and vector quantisation with b = 3 bits per value (8 levels, 2-D
lattice). Scalar quantisation and top-k sparsification at the same bit budget are options.
The ledger counts compressed sizes: ``b/8`` bytes per quantised value plus the range, and
for top-k ``k`` float32 values with 2-byte indices.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from ..errors import ConfigError
from .base import VFLMethod
from .splitnn import top_model

COMPRESSORS: tuple[str, ...] = ("vector", "scalar", "topk", "none")

#: C-VFL's Q in every study (its paper's headline setting and its code's default).
LOCAL_ITERATIONS = 10


def step_size(host_lr: float, local_iterations: int = LOCAL_ITERATIONS) -> float:
    """C-VFL's learning rate in a host paper's study: the host's rate divided by Q.

    Neither host paper (VFedMH, EASTER) gives C-VFL's rate: they state one rate for their own
    method and leave the baselines' open. C-VFL's analysis (Castiglia et al., ICML 2022,
    Theorem 4.2) bounds the step size by ``1 / (16 Q max(L, L_m))``: the admissible step
    shrinks as 1/Q, because a party's Q local steps on one batch against stale embeddings
    add up before anyone corrects them. The host's rate is the one its authors found stable
    for a single step per batch (Q = 1), so the rate that keeps C-VFL inside the same bound is
    ``host_lr / Q``. C-VFL's own code agrees in magnitude: Q = 10 at 1e-3 (ModelNet) and 1e-4
    (CIFAR-10), i.e. ten times below the usual single-step SGD rates of those set-ups. With
    Q = 1 the rule gives the host's rate unchanged (the equal-compute control).

    The host's rate at Q = 10 (VFedMH: 0.05 for a total step of 0.5 per batch, a regime no
    C-VFL experiment ran) is kept by the studies as a labelled sensitivity row; at it 9 of
    VFedMH's 18 MNIST/FashionMNIST C-VFL runs diverged or stayed at chance.
    """
    if int(local_iterations) < 1:
        raise ConfigError(f"local_iterations must be >= 1, got {local_iterations!r}")
    return float(host_lr) / int(local_iterations)


def _range(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    lo, hi = x.min(), x.max()
    return lo, torch.clamp(hi - lo, min=1e-12)


def scalar_quantize(x: torch.Tensor, bits: int, *, generator: torch.Generator | None = None) -> tuple[torch.Tensor, int]:
    """Uniform scalar quantisation to ``2**bits`` levels over x's range, with subtractive dither.

    Returns the decompressed tensor and its size on the wire in bytes (``bits`` per value plus
    two float32 for the range).
    """
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
    scalar quantisation. Returns the decompressed tensor and its size in bytes.
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


class CVFL(VFLMethod):
    """C-VFL with Q local iterations and compressed embeddings and server model.

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
        if self.options["compressor"] not in COMPRESSORS:
            raise ConfigError(f"Invalid compressor {self.options['compressor']!r}; choose one of {', '.join(COMPRESSORS)}")
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

    def compress(self, x: torch.Tensor) -> tuple[torch.Tensor, int]:
        """The configured compressor: (decompressed tensor, bytes on the wire)."""
        bits, kind = int(self.options["bits"]), self.options["compressor"]
        x = x.detach()
        if x.dtype == torch.bfloat16:  # an embedding under bf16 autocast: quantised in float32
            x = x.float()
        if kind == "vector":
            return vector_quantize(x, bits, generator=self._gen)
        if kind == "scalar":
            return scalar_quantize(x, bits, generator=self._gen)
        if kind == "topk":
            return topk_sparsify(x, bits)
        return x, x.numel() * x.element_size()

    def _compressed_top(self) -> tuple[dict[str, torch.Tensor], int]:
        state, size = {}, 0
        for name, value in self.active.models["top"].state_dict().items():
            state[name], n = self.compress(value)
            size += n
        return state, size

    def train_step(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        a = self.active
        q = int(self.options["local_iterations"])
        # 1. Compressed embeddings to the server. The active party's own is compressed too, as
        # it is forwarded to the passive parties (C-VFL's server sees only compressed ones).
        sizes: dict[str, int] = {}
        with torch.no_grad():
            for p in self.passive:
                h, sizes[p.name] = self.compress(p.models["bottom"](p.features("train", ids=ids)))
                p.send(a, "embedding", h, nbytes=sizes[p.name])
            stale = {p.name: a.recv(p, "embedding") for p in self.passive}
            stale[a.name], sizes[a.name] = self.compress(a.models["bottom"](a.features("train", ids=ids)))
        y = a.labels("train", ids=ids)
        # 2. Server -> each passive party: the others' embeddings, the server model, the labels.
        top_state, top_bytes = self._compressed_top()
        for p in self.passive:
            others = {name: e for name, e in stale.items() if name != p.name}
            a.send(p, "embedding", others, nbytes=sum(sizes[name] for name in others))
            a.send(p, "model_weights", top_state, nbytes=top_bytes)
            a.send(p, "labels", y)
        # 3. Q local iterations at every party on its own bottom model.
        losses: dict[str, torch.Tensor] = {}
        for p in self.parties:
            if p is a:
                top = copy.deepcopy(a.models["top"])
                embeddings, labels = stale, y
            else:
                top = copy.deepcopy(a.models["top"])  # architecture only; weights from the message
                top.load_state_dict(p.recv(a, "model_weights"))
                embeddings, labels = p.recv(a, "embedding"), p.recv(a, "labels")
            top.requires_grad_(False)
            x = p.features("train", ids=ids)
            for _ in range(q):
                p.optimizers["local"].zero_grad(set_to_none=True)
                own = p.models["bottom"](x)
                z = torch.cat([own if party is p else embeddings[party.name] for party in self.parties], 1)
                loss = F.cross_entropy(top(z), labels)
                loss.backward()
                p.optimizers["local"].step()
        # The server's Q iterations on its model over the embeddings it received.
        z = torch.cat([stale[party.name] for party in self.parties], 1)
        for _ in range(q):
            a.optimizers["top"].zero_grad(set_to_none=True)
            loss = F.cross_entropy(a.models["top"](z), y)
            loss.backward()
            a.optimizers["top"].step()
        losses["active"] = loss.detach()
        return losses

    @torch.no_grad()
    def predict(self, ids: torch.Tensor, split: str = "test") -> dict[str, torch.Tensor]:
        # Inference sends embeddings uncompressed: compression is a training-time saving.
        a = self.active
        for p in self.passive:
            p.send(a, "embedding", p.models["bottom"](p.features(split, ids=ids)))
        z = [a.models["bottom"](a.features(split, ids=ids)) if p is a else a.recv(p, "embedding")
             for p in self.parties]
        return {"active": a.models["top"](torch.cat(z, 1))}

    def trained_models(self) -> dict[str, str]:
        return {"active": self.config.party_value("models", self.party_index(self.active))}
