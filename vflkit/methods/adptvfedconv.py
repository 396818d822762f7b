"""AdptVFedConv: VGG-16 across the 2x2 tiles of an image, by feature-map transfer.

Li, Sha, Baker, Yu, Shi, Hu, "Adaptive Vertical Federated Learning via Feature Map Transferring
in Mobile Edge Computing" (Algorithm 1, Eqs. 1-5, Sec. 4.1). Four participants hold the four
16x16 tiles of every 32x32 image (``partition.grid(2, 2)``); the server (participant 1, the
active party, top-left tile by default) also holds the labels.

Stage 1, pre-training (Eq. 1)
    The server trains the whole VGG-16-BN on its own tile (W_e^1 + W_clst). Its test accuracy
    per epoch is the paper's **Non-cooperation** row (:func:`train_noncooperation`).
Stage 2, model transfer + local autoencoder (Eqs. 2-3)
    The server sends the first layers (the *cut*, default "2C+1M") to every client through the
    channel (kind ``model_weights``, phase ``setup``); each client fine-tunes them as the
    encoder of a local autoencoder (Adam: extractor lr 1e-5, generator lr 1e-3).
Stage 3, feature-map aggregation (Eqs. 4-5)
    Every participant runs its frozen extractor on its tile; clients send the maps (kind
    ``feature_map``); the server stitches them by position (``Partition.assemble``) and trains
    a fresh classifier W_s (the rest of VGG-16) with cross-entropy. Test accuracy is the same
    protocol on the test tiles (phase ``eval``).

Everything that crosses parties goes through :class:`~vflkit.comm.Channel`, so the ledger
counts it: only the transferred extractor and feature maps ever cross.

Variants (fields of :class:`AdptVFedConvConfig`)
    ``model_transfer=False`` (No model transfer), ``padding="zeros"`` (Zero-padding mode),
    ``finetune`` in {"autoencoder" (paper), "none", "bn_stats"} (ours: isolate what the AE
    adds), ``extraction`` in {"per_epoch" (default, coordinated augmentation), "once"
    (Algorithm 1 literally)}, ``cut`` (Table 3's ten depths). :func:`train_centralized` is the
    Centralized VGG-16 upper bound.

Coordinated augmentation ("per_epoch")
    The paper trains with flips and random crops "in all experiments", yet Algorithm 1
    extracts H^k once. Augmenting stage 3 needs every participant to transform its tile the
    same way for a sample; the transform is drawn from a generator seeded with (seed, epoch),
    a public protocol parameter like the batch order, so no message is needed. A horizontal
    flip of the whole image is exact: each participant flips its tile and the server swaps the
    left and right tiles' positions when stitching. A random crop (shift by (dy, dx)) is
    approximate: each tile is shifted with replicate fill at its own edges, since the pixels
    that would enter from the neighbouring tile are not shared.

``width`` (channel multiplier) below 1 builds a smaller VGG-16 for quick CPU runs and tests;
it is **not the paper's model** (results carry ``paper_model: False``).

Choices where the paper is silent (ours; all are config fields or stated here)
    * The server holds the top-left tile (``server_tile=0``).
    * Stage 1 trains all 13 convs with ``padding`` (cut "13C+5M"), so the transferred layers
      were trained with the padding they run with, and one pre-training serves every cut.
    * W_s is freshly initialised (W_clst "will be dropped"); it pads with zeros as VGG does:
      its input is the whole stitched map, whose border is the image's border.
    * Extractors are frozen in stage 3 and run in eval mode (Algorithm 1 updates only W_s).
    * Tiles are normalised with the dataset's public per-channel mean/std.
    * SGD momentum 0.9, lr 0.05, weight decay 5e-4, batch 128, cosine annealing per stage
      ("simulated annealing"); autoencoder: Adam, 10 epochs, cosine; No model transfer trains
      the random extractor at 1e-3 (1e-5 cannot train one from scratch).
    * ``finetune="bn_stats"`` runs the client's tiles through its extractor in train mode
      without gradients for the autoencoder's epochs: only BatchNorm running statistics move.
    * Test accuracy runs the protocol on the test tiles at every stage-3 epoch; clients
      re-send their test maps each time (ledger phase ``eval``, reported apart from training
      traffic) rather than the server caching them, so a resumed run needs no cache.
    * ``extraction="once"``: the server stores the received maps on its disk beside the
      checkpoint, so resuming does not ask the clients again.

Resume: :func:`train` writes a checkpoint after every epoch of every stage (models,
optimizers, schedulers, histories, ledger, stage and epoch) and continues from it. Every epoch
reseeds torch's generator from (seed, stage, epoch), so the stage and epoch fix all randomness
(dropout, shuffles, augmentation) and a resumed run equals an uninterrupted one (on CPU; CUDA
kernels may not be bitwise deterministic).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..comm import Channel, Party
from ..config import registered_data_digest, resolve_device
from ..data import ImageData, load_dataset
from ..errors import ConfigError
from ..files import move_aside
from ..models import vgg16_bn_centralized, vgg16_bn_generator, vgg16_bn_split
from ..partition import Partition, grid
from ..training import checkpoint as checkpoint_io
from .base import accuracy, make_optimizer

__all__ = [
    "CUTS", "PADDINGS", "FINETUNES", "EXTRACTIONS", "PRETRAIN_CUT",
    "AdptVFedConvConfig", "train", "train_noncooperation", "train_centralized",
    "cost_model", "count_macs", "count_params",
    "shift_images", "flip_images", "augment_tiles", "stitch", "augmentation_params",
]

#: Table 3's extractor depths (C = conv block, M = max-pool).
CUTS: tuple[str, ...] = ("1C", "2C", "2C+1M", "3C+1M", "4C+1M", "4C+2M", "5C+2M", "6C+2M",
                         "7C+2M", "7C+3M")
PADDINGS: tuple[str, ...] = ("replicate", "zeros")
FINETUNES: tuple[str, ...] = ("autoencoder", "none", "bn_stats")
EXTRACTIONS: tuple[str, ...] = ("per_epoch", "once")
#: Stage 1 trains all 13 convs as "extractor" so that ``padding`` applies to every conv: then one
#: pre-training serves every cut (the cut only decides how many leading layers are sent).
PRETRAIN_CUT = "13C+5M"
STAGES: tuple[str, ...] = ("pretrain", "transfer", "finetune", "classifier")


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class AdptVFedConvConfig:
    """Everything that decides one AdptVFedConv run. Defaults: the paper where it speaks, the
    spec's choices (``shared/specs/adptvfedconv.md`` Sec. 1) where it is silent.

    Data: ``dataset`` ("cifar10"; any 3x32x32 :class:`ImageData` may be passed to
    :func:`train`), ``n_train``/``n_test`` (None = all; a subset drawn with ``subset_seed`` so
    training seeds share it), ``seed`` (model init, shuffles, augmentation, dropout),
    ``server_tile`` (which grid tile the server holds; 0 = top-left, the paper is silent).

    Model: ``width`` (channel multiplier; 1 = the paper's VGG-16-BN, anything else is not the
    paper's model), ``cut`` (one of :data:`CUTS` or any VGG-16 prefix such as "2C+1M"),
    ``padding`` ("replicate" = the paper's trick, "zeros" = its ablation; applied to every conv
    of the tile networks, stage 1 included; the server classifier and the centralized model pad
    with zeros).

    Variants: ``model_transfer`` (False = No model transfer: clients start from random
    extractors), ``finetune`` ("autoencoder" paper / "none" / "bn_stats": only BatchNorm
    statistics adapt, weights frozen), ``extraction`` ("per_epoch" with coordinated
    augmentation / "once": Algorithm 1 literally, maps of un-augmented tiles sent once).

    Training (paper silent unless noted): ``pretrain_epochs``, ``finetune_epochs``,
    ``classifier_epochs``, ``centralized_epochs``; SGD (momentum 0.9 via
    :func:`~vflkit.methods.base.make_optimizer`) with ``lr``, ``weight_decay``, ``batch_size``
    and a cosine-annealed lr per stage (our reading of "simulated annealing"); the autoencoder
    uses Adam with ``ae_lr_extractor`` (1e-5, paper) and ``ae_lr_generator`` (1e-3, paper),
    and ``ae_lr_extractor_scratch`` (1e-3) for a random extractor (No model transfer: 1e-5
    cannot train one from scratch); ``augment`` (flip + shift by up to ``tile_shift`` pixels on
    tiles, ``centralized_crop_pad`` on whole images).
    """

    dataset: str = "cifar10"
    n_train: int | None = None
    n_test: int | None = None
    subset_seed: int = 0
    seed: int = 0
    server_tile: int = 0
    width: float = 1.0
    cut: str = "2C+1M"
    padding: str = "replicate"
    model_transfer: bool = True
    finetune: str = "autoencoder"
    extraction: str = "per_epoch"
    pretrain_epochs: int = 60
    finetune_epochs: int = 10
    classifier_epochs: int = 60
    centralized_epochs: int = 60
    batch_size: int = 128
    lr: float = 0.05
    weight_decay: float = 5e-4
    ae_batch_size: int = 128
    ae_lr_extractor: float = 1e-5
    ae_lr_generator: float = 1e-3
    ae_lr_extractor_scratch: float = 1e-3
    augment: bool = True
    tile_shift: int = 2
    centralized_crop_pad: int = 4
    eval_batch_size: int = 512

    def __post_init__(self) -> None:
        for name, allowed in (("padding", PADDINGS), ("finetune", FINETUNES),
                              ("extraction", EXTRACTIONS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"Invalid {name} {getattr(self, name)!r}; choose one of "
                                  f"{', '.join(allowed)}")
        for name in ("pretrain_epochs", "finetune_epochs", "classifier_epochs",
                     "centralized_epochs", "tile_shift", "centralized_crop_pad"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ConfigError(f"{name} must be a non-negative integer, got {v!r}")
        for name in ("batch_size", "ae_batch_size", "eval_batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 2:
                raise ConfigError(f"{name} must be an integer >= 2 (BatchNorm), got {v!r}")
        if not (isinstance(self.width, (int, float)) and self.width > 0):
            raise ConfigError(f"width must be a positive channel multiplier, got {self.width!r}")
        if self.server_tile not in (0, 1, 2, 3):
            raise ConfigError(f"server_tile must be 0..3 (row-major 2x2 grid), got {self.server_tile!r}")

    @property
    def paper_model(self) -> bool:
        """Whether the network is the paper's VGG-16-BN (``width == 1``)."""
        return float(self.width) == 1.0

    def to_dict(self) -> dict[str, Any]:
        """A plain, JSON-able copy of every field."""
        return dataclasses.asdict(self)

    def key(self, fields: Sequence[str] | None = None) -> str:
        """A short hash of ``fields`` (default all): names checkpoint files. With ``dataset``
        among them, a dataset of your own adds its content digest (built-in ones: the name)."""
        d = self.to_dict()
        keyed = {k: d[k] for k in (fields or sorted(d))}
        digest = registered_data_digest(self.dataset) if "dataset" in keyed else None
        if digest is not None:
            keyed["data_digest"] = digest
        blob = json.dumps(keyed, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


#: The fields that decide stage 1: runs agreeing on them share one pre-training (spec headline 4).
_PRETRAIN_FIELDS: tuple[str, ...] = (
    "dataset", "n_train", "n_test", "subset_seed", "seed", "server_tile", "width", "padding",
    "pretrain_epochs", "batch_size", "lr", "weight_decay", "augment", "tile_shift",
    "eval_batch_size",
)
_CENTRALIZED_FIELDS: tuple[str, ...] = (
    "dataset", "n_train", "n_test", "subset_seed", "seed", "width", "centralized_epochs",
    "batch_size", "lr", "weight_decay", "augment", "centralized_crop_pad", "eval_batch_size",
)


# --------------------------------------------------------------------------- randomness


def _derive(*key: Any) -> int:
    """A 63-bit seed from a tuple of public values (seed, stage, epoch, party ...)."""
    return int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "big") >> 1


def _generator(*key: Any) -> torch.Generator:
    return torch.Generator().manual_seed(_derive(*key))


def _batches(n: int, batch_size: int, *key: Any) -> list[torch.Tensor]:
    """A shuffled pass over rows 0..n-1 in batches; a trailing batch of one is dropped
    (BatchNorm cannot train on a single sample)."""
    perm = torch.randperm(n, generator=_generator(*key))
    out = list(perm.split(batch_size))
    if len(out) > 1 and len(out[-1]) < 2:
        out.pop()
    return out


def augmentation_params(n: int, shift: int, *key: Any) -> tuple[torch.Tensor, ...]:
    """(flip, dy, dx) for rows 0..n-1, drawn from a generator seeded with ``key``.

    Stage 3 calls it with the public key (seed, "classifier", epoch), so every participant
    draws the same transform for a sample without any message.
    """
    g = _generator(*key)
    flip = torch.rand(n, generator=g) < 0.5
    dy = torch.randint(-shift, shift + 1, (n,), generator=g)
    dx = torch.randint(-shift, shift + 1, (n,), generator=g)
    return flip, dy, dx


# --------------------------------------------------------------------------- augmentation + stitching


def shift_images(x: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, *,
                 fill: str = "replicate") -> torch.Tensor:
    """Shift each image of ``x`` ``[B, C, h, w]`` by ``(dy[b], dx[b])`` pixels.

    ``out[b, :, i, j] = x[b, :, i - dy, j - dx]``; pixels from outside are the nearest edge
    pixel (``fill="replicate"``) or 0 (``"zeros"``, black for uint8, as torchvision's
    RandomCrop pads). Equal to RandomCrop(h, padding=p) at offset (p - dy, p - dx).
    """
    b, _, h, w = x.shape
    dev = x.device
    rows = torch.arange(h, device=dev)[None, :] - dy.to(dev)[:, None]  # [B, h]
    cols = torch.arange(w, device=dev)[None, :] - dx.to(dev)[:, None]  # [B, w]
    r, c = rows.clamp(0, h - 1), cols.clamp(0, w - 1)
    bidx = torch.arange(b, device=dev)[:, None, None]
    out = x[bidx, :, r[:, :, None], c[:, None, :]].permute(0, 3, 1, 2)  # [B, h, w, C] -> [B, C, h, w]
    if fill == "zeros":
        valid = ((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < w))[:, None, :]
        out = out * valid[:, None].to(out.dtype)
    elif fill != "replicate":
        raise ConfigError(f"Invalid fill {fill!r}; choose replicate or zeros")
    return out.contiguous()


def flip_images(x: torch.Tensor, flip: torch.Tensor) -> torch.Tensor:
    """Mirror (left-right) the images of ``x`` where ``flip`` is True."""
    return torch.where(flip.to(x.device)[:, None, None, None], x.flip(-1), x)


def augment_tiles(x: torch.Tensor, flip: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, *,
                  fill: str = "replicate") -> torch.Tensor:
    """What a participant does to its tile: shift, then mirror (the whole-image transform
    ``flip(shift(X))`` restricted to the tile; the shift fills the tile's own edges)."""
    return flip_images(shift_images(x, dy, dx, fill=fill), flip)


def stitch(partition: Partition, maps: Sequence[torch.Tensor],
           flip: torch.Tensor | None = None) -> torch.Tensor:
    """The server's Eq. 4: put the participants' maps (partition order) in their positions.

    For samples whose tiles were mirrored, the left and right positions are swapped too, so the
    stitched map is the one of the mirrored whole image's tiles.
    """
    plain = partition.assemble(maps)
    if flip is None or not bool(flip.any()):
        return plain
    rows, cols = partition.grid_shape
    mirrored = [maps[r * cols + (cols - 1 - c)] for r in range(rows) for c in range(cols)]
    swapped = partition.assemble(mirrored)
    return torch.where(flip.to(plain.device)[:, None, None, None], swapped, plain)


# --------------------------------------------------------------------------- cost accounting


def count_params(model: nn.Module) -> int:
    """Trainable parameters (weights and biases; BatchNorm running statistics not counted)."""
    return sum(p.numel() for p in model.parameters())


def count_macs(model: nn.Module, input_shape: Sequence[int]) -> int:
    """Multiply-accumulates of one forward pass of one sample of ``input_shape``.

    Counts Conv2d (output elements x in-channels/groups x kernel area), ConvTranspose2d (input
    elements x out-channels/groups x kernel area) and Linear (in x out); BatchNorm, ReLU,
    pooling and padding are not counted (a few per cent of a VGG's work).
    """
    total = 0

    def hook(m: nn.Module, inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        nonlocal total
        if isinstance(m, nn.Conv2d):
            kh, kw = m.kernel_size
            total += out.numel() * (m.in_channels // m.groups) * kh * kw
        elif isinstance(m, nn.ConvTranspose2d):
            kh, kw = m.kernel_size
            total += inp[0].numel() * (m.out_channels // m.groups) * kh * kw
        elif isinstance(m, nn.Linear):
            total += out.numel() // m.out_features * m.in_features * m.out_features

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear))]
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    was_training = model.training
    model.eval()  # BatchNorm statistics untouched
    try:
        with torch.no_grad():
            model(torch.zeros(1, *input_shape, device=device))
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    return int(total)


def _state_nbytes(module: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in module.state_dict().values())


def cost_model(config: AdptVFedConvConfig, *, num_classes: int = 10,
               image_shape: Sequence[int] = (3, 32, 32), n_train: int = 50_000) -> dict[str, Any]:
    """What a cut costs a client, from the architecture alone (no training).

    Returns per-tile extractor MACs and parameters, the feature map's shape and float32 bytes,
    the transferred extractor's bytes (its state_dict: weights and BatchNorm buffers), the raw
    tile's bytes (uint8), and parameter-sharing FL of the same (centralized) VGG-16 per round.
    """
    part = grid(2, 2, image_shape=image_shape)
    tile = part.party_shape(0)
    ext, cls = vgg16_bn_split(num_classes=num_classes, cut=config.cut, padding_mode=config.padding,
                              width=config.width, in_channels=tile[0])
    central = vgg16_bn_centralized(num_classes=num_classes, width=config.width,
                                   in_channels=tile[0])
    with torch.no_grad():
        fmap = tuple(ext.eval()(torch.zeros(1, *tile)).shape[1:])
    stitched = (fmap[0], fmap[1] * part.grid_shape[0], fmap[2] * part.grid_shape[1])
    fmap_bytes = math.prod(fmap) * 4
    central_params = count_params(central)
    fl_bytes = _state_nbytes(central)  # weights + BN buffers, what FedAvg would exchange
    raw = math.prod(tile)  # uint8 pixels
    return {
        "paper_model": config.paper_model,
        "cut": config.cut,
        "tile_shape": list(tile),
        "feature_map_shape": list(fmap),
        "stitched_map_shape": list(stitched),
        "feature_map_bytes_per_sample": fmap_bytes,
        "raw_tile_bytes_per_sample": raw,
        "feature_map_to_raw_ratio": fmap_bytes / raw,
        "raw_tiles_bytes_per_client": raw * n_train,
        "feature_maps_bytes_per_client_per_extraction": fmap_bytes * n_train,
        "extractor_params": count_params(ext),
        "extractor_state_numel": sum(t.numel() for t in ext.state_dict().values()),
        "model_transfer_bytes": _state_nbytes(ext),
        "extractor_macs_per_tile": count_macs(ext, tile),
        "server_classifier_params": count_params(cls),
        "server_classifier_macs_per_sample": count_macs(cls, stitched),
        "centralized_params": central_params,
        "centralized_macs_per_image": count_macs(central, image_shape),
        "fl_bytes_per_round_per_client": {"upload": fl_bytes, "download": fl_bytes},
    }


# --------------------------------------------------------------------------- checkpoint files


def _save_atomic(obj: Any, path: Path, device: torch.device) -> None:
    """Write ``obj`` to ``path`` whole or not at all; a dict also names what computed it
    (:func:`~vflkit.training.checkpoint.computed_by`), which :func:`_load_if_ours` checks."""
    if isinstance(obj, dict):
        obj = {"computed_by": checkpoint_io.computed_by(device), **obj}
    checkpoint_io.write(path, obj, what=f"the checkpoint {path.name}")


def _load_if_ours(path: Path, config_dict: dict[str, Any], fields: Sequence[str],
                  device: torch.device) -> dict | None:
    """The checkpoint at ``path`` if its config agrees on ``fields`` and the same code on the same
    kind of machine wrote it (a record names one environment); a foreign or unreadable one is
    moved aside with a warning (a bad checkpoint costs time, never a wrong result)."""
    if not path.exists():
        return None
    try:
        state = checkpoint_io.read(path)  # weights_only: a planted pickle is refused, never run
        theirs = state.get("config", {})
        if any(theirs.get(k) != config_dict[k] for k in fields):
            raise ValueError("its config is not this run's")
        checkpoint_io.check_computed_by(state, device)
        return state
    except Exception as exc:
        bad = move_aside(path, ".bad")
        warnings.warn(f"ignoring checkpoint {path} ({exc}); moved to {bad.name}", stacklevel=3)
        return None


def _step(opt: torch.optim.Optimizer, loss: torch.Tensor) -> torch.Tensor:
    """One optimiser step on ``loss``; returns it detached, left on the device (no sync)."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def _mean(losses: list[torch.Tensor]) -> float:
    """Mean of a stage's batch losses; kept on the device until the epoch ends (one sync)."""
    return float(torch.stack(losses).mean()) if losses else float("nan")


class _Stop(Exception):
    """Raised after a checkpoint when ``stop_after`` or ``max_seconds`` says to stop."""


# --------------------------------------------------------------------------- the run


def _load_data(config: AdptVFedConvConfig, data: ImageData | None) -> ImageData:
    d = data if data is not None else load_dataset(config.dataset)
    if not isinstance(d, ImageData):
        raise ConfigError(f"AdptVFedConv needs an image dataset, got {type(d).__name__}")
    if config.n_train is not None or config.n_test is not None:
        d = d.subset(n_train=config.n_train, n_test=config.n_test, seed=config.subset_seed)
    c, h, w = d.image_shape
    if h % 2 or w % 2:
        raise ConfigError(f"a 2x2 grid needs even image sides, got {h}x{w}")
    return d


def _sgd(params: Any, config: AdptVFedConvConfig, epochs: int) -> tuple[torch.optim.Optimizer, Any]:
    """SGD, momentum 0.9 (make_optimizer's "sgd_momentum"), weight decay, cosine lr to 0."""
    opt = make_optimizer("sgd_momentum", params, config.lr)
    for group in opt.param_groups:  # make_optimizer has no weight decay; VGG needs some
        group["weight_decay"] = config.weight_decay
    return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, epochs))


class _Run:
    """One AdptVFedConv run: parties, models, the three stages and their checkpoints."""

    def __init__(self, config: AdptVFedConvConfig, *, device: torch.device, data: ImageData,
                 channel: Channel, checkpoint_dir: Path | None, pretrain_dir: Path | None) -> None:
        self.cfg = config
        self.device = device
        self.data = data
        self.channel = channel
        self.num_classes = data.num_classes
        self.part = grid(2, 2, image_shape=data.image_shape, active=config.server_tile)
        self.ckpt = (checkpoint_dir / f"adptvfedconv-{config.key()}.pt") if checkpoint_dir else None
        pdir = pretrain_dir or checkpoint_dir
        self.pretrain_file = (pdir / f"adptvfedconv-pretrain-{config.key(_PRETRAIN_FIELDS)}.pt"
                              if pdir else None)
        self.once_file = (checkpoint_dir / f"adptvfedconv-{config.key()}.maps.pt"
                          if checkpoint_dir else None)
        # Participants in partition order; the paper's numbering: server = 1, clients 2..K.
        tiles_tr, tiles_te = self.part.split(data.x_train), self.part.split(data.x_test)
        self.parties: list[Party] = []
        n_client = 1
        for k in range(self.part.n_parties):
            server = k == self.part.active
            if not server:
                n_client += 1
            name = "server" if server else f"client_{n_client}"
            labels = {"train": data.y_train.to(device), "test": data.y_test.to(device)} if server else None
            self.parties.append(Party(
                name, channel=channel, device=device, labels=labels,
                features={"train": tiles_tr[k].contiguous().to(device),
                          "test": tiles_te[k].contiguous().to(device)}))
        self.server = self.parties[self.part.active]
        self.clients = [p for p in self.parties if p is not self.server]
        self.tile = self.part.party_shape(self.part.active)
        self._build()
        self.progress = {s: 0 for s in STAGES}
        self.history: dict[str, Any] = {
            "pretrain": {"train_loss": [], "test_accuracy": []},
            "finetune": {c.name: {"recon_loss": []} for c in self.clients},
            "classifier": {"train_loss": [], "test_accuracy": []},
        }
        self.uploaded = {split: {c.name: 0 for c in self.clients} for split in ("train", "eval")}
        self.elapsed = 0.0
        self.once_maps: torch.Tensor | None = None

    # -- models ----------------------------------------------------------------------------

    def _seeded(self, *key: Any) -> None:
        torch.manual_seed(_derive(self.cfg.seed, *key))

    def _build(self) -> None:
        cfg, dev, nc = self.cfg, self.device, self.num_classes
        kw = dict(num_classes=nc, padding_mode=cfg.padding, width=cfg.width, in_channels=self.tile[0])
        # Each model's initialisation depends on (seed, its name) only, not on build order.
        self._seeded("init", "pretrain")
        ext, head = vgg16_bn_split(cut=PRETRAIN_CUT, **kw)
        self.server.models["pretrain"] = nn.Sequential(ext, head).to(dev)  # W_e^1 + W_clst
        self._seeded("init", "server_classifier")
        # W_s: a fresh classifier ("W_clst ... will be dropped"); zero padding (whole map).
        self.server.models["classifier"] = vgg16_bn_split(cut=cfg.cut, **kw)[1].to(dev)
        self.server.models["extractor"] = vgg16_bn_split(cut=cfg.cut, **kw)[0].to(dev)
        for c in self.clients:
            self._seeded("init", c.name, "extractor")
            c.models["extractor"] = vgg16_bn_split(cut=cfg.cut, **kw)[0].to(dev)
            self._seeded("init", c.name, "generator")
            c.models["generator"] = vgg16_bn_generator(cut=cfg.cut, width=cfg.width,
                                                       out_channels=self.tile[0]).to(dev)
        self.optim: dict[str, tuple[torch.optim.Optimizer, Any]] = {
            "pretrain": _sgd(self.server.models["pretrain"].parameters(), cfg, cfg.pretrain_epochs),
            "classifier": _sgd(self.server.models["classifier"].parameters(), cfg,
                               cfg.classifier_epochs),
        }
        ext_lr = cfg.ae_lr_extractor if cfg.model_transfer else cfg.ae_lr_extractor_scratch
        for c in self.clients:
            opt = make_optimizer("adam", [
                {"params": list(c.models["extractor"].parameters()), "lr": ext_lr},
                {"params": list(c.models["generator"].parameters()), "lr": cfg.ae_lr_generator},
            ], cfg.ae_lr_generator)
            self.optim[c.name] = (opt, torch.optim.lr_scheduler.CosineAnnealingLR(
                opt, T_max=max(1, cfg.finetune_epochs)))

    # -- checkpoints -----------------------------------------------------------------------

    def _state(self) -> dict[str, Any]:
        # Once W_e^1 has been copied out, the pre-training network and its optimizer are no
        # longer needed (the pre-training file keeps the network): leaving them out halves a
        # paper-scale checkpoint (~0.5 GB -> ~0.27 GB) written every stage-3 epoch.
        done = bool(self.progress["transfer"])
        return {
            "config": self.cfg.to_dict(), "progress": dict(self.progress), "history": self.history,
            "uploaded": self.uploaded, "elapsed_s": self.elapsed,
            "models": {p.name: {k: m.state_dict() for k, m in p.models.items()
                                if not (done and k == "pretrain")} for p in self.parties},
            "optim": {k: (o.state_dict(), s.state_dict()) for k, (o, s) in self.optim.items()
                      if not (done and k == "pretrain")},
            "ledger": list(self.channel.ledger._rows),
        }

    def _restore(self, state: dict[str, Any]) -> None:
        for p in self.parties:
            for k, sd in state["models"][p.name].items():
                p.models[k].load_state_dict(sd)
        for k, (o, s) in state["optim"].items():
            self.optim[k][0].load_state_dict(o)
            self.optim[k][1].load_state_dict(s)
        self.progress = dict(state["progress"])
        self.history = state["history"]
        self.uploaded = state["uploaded"]
        self.elapsed = state["elapsed_s"]
        self.channel.ledger.restore(state["ledger"])

    def resume(self) -> None:
        """Continue from this run's checkpoint, else from a shared pre-training, else start."""
        if self.ckpt is not None:
            state = _load_if_ours(self.ckpt, self.cfg.to_dict(), sorted(self.cfg.to_dict()), self.device)
            if state is not None:
                self._restore(state)
                if self.progress["classifier"] and self.cfg.extraction == "once":
                    self.once_maps = torch.load(self.once_file, map_location=self.device, weights_only=True)
                return
        if self.pretrain_file is not None:
            state = _load_if_ours(self.pretrain_file, self.cfg.to_dict(), _PRETRAIN_FIELDS, self.device)
            if state is not None and state["complete"]:
                self.server.models["pretrain"].load_state_dict(state["model"])
                self.history["pretrain"] = state["history"]
                self.progress["pretrain"] = self.cfg.pretrain_epochs

    def checkpoint(self, stage: str, epoch: int, start: float, stop: Callable[[str, int], bool]) -> None:
        """Record progress, write the checkpoint, and stop if asked to."""
        self.progress[stage] = epoch
        now = time.perf_counter()
        self.elapsed += now - start
        if self.ckpt is not None:
            _save_atomic(self._state(), self.ckpt, self.device)
        if stage == "pretrain" and self.pretrain_file is not None:
            _save_atomic({"config": self.cfg.to_dict(), "history": self.history["pretrain"],
                          "model": self.server.models["pretrain"].state_dict(),
                          "complete": epoch == self.cfg.pretrain_epochs}, self.pretrain_file, self.device)
        if stop(stage, epoch):
            raise _Stop

    # -- helpers ---------------------------------------------------------------------------

    def _tiles(self, party: Party, split: str, ids: torch.Tensor,
               aug: tuple[torch.Tensor, ...] | None) -> torch.Tensor:
        """A party's normalised tiles for ``ids``, augmented with ``aug`` = (flip, dy, dx) rows.

        Stage 1 and the autoencoder draw ``aug`` from the party's own key (local, no message);
        stage 3 from the public key. The same family everywhere (shift with replicate fill at
        the tile's edges + flip), so each extractor trains on the kind of tile it later sees.
        """
        x = party.features(split, ids=ids)
        if aug is not None:
            x = augment_tiles(x, *(a[ids] for a in aug), fill="replicate")
        return self.data.normalize(x)

    def _local_aug(self, n: int, *key: Any) -> tuple[torch.Tensor, ...] | None:
        return augmentation_params(n, self.cfg.tile_shift, self.cfg.seed, *key) if self.cfg.augment else None

    # -- stage 1 ---------------------------------------------------------------------------

    def pretrain(self, stop: Callable[[str, int], bool]) -> None:
        """Eq. 1: the server trains VGG-16 on its own tile; test accuracy = Non-cooperation."""
        net = self.server.models["pretrain"]
        opt, sched = self.optim["pretrain"]
        n = self.server.n_samples("train")
        for epoch in range(self.progress["pretrain"] + 1, self.cfg.pretrain_epochs + 1):
            start = time.perf_counter()
            self._seeded("pretrain", epoch)
            aug = self._local_aug(n, "pretrain-aug", epoch)
            net.train()
            losses = []
            for ids in _batches(n, self.cfg.batch_size, self.cfg.seed, "pretrain", epoch):
                x = self._tiles(self.server, "train", ids, aug)
                loss = F.cross_entropy(net(x), self.server.labels("train", ids=ids))
                losses.append(_step(opt, loss))
            sched.step()
            self.history["pretrain"]["train_loss"].append(_mean(losses))
            self.history["pretrain"]["test_accuracy"].append(self._eval_pretrain())
            self.checkpoint("pretrain", epoch, start, stop)

    @torch.no_grad()
    def _eval_pretrain(self) -> float:
        net = self.server.models["pretrain"].eval()
        n = self.server.n_samples("test")
        correct = 0
        for ids in torch.arange(n).split(self.cfg.eval_batch_size):
            logits = net(self._tiles(self.server, "test", ids, None))
            correct += int((logits.argmax(1) == self.server.labels("test", ids=ids)).sum())
        net.train()
        return correct / n

    # -- stage 2 ---------------------------------------------------------------------------

    def transfer(self, stop: Callable[[str, int], bool]) -> None:
        """Eq. 2: W_e^k <- W_e^1, sent through the channel (setup phase)."""
        if self.progress["transfer"]:
            return
        start = time.perf_counter()
        n_layers = len(self.server.models["extractor"])
        # The server's own W_e^1 is the leading layers of its pre-trained network.
        self.server.models["extractor"].load_state_dict(
            self.server.models["pretrain"][0][:n_layers].state_dict())
        if self.cfg.model_transfer:
            self.channel.at(epoch=0, step=0, phase="setup")
            weights = self.server.models["extractor"].state_dict()
            for c in self.clients:
                self.server.send(c, "model_weights", dict(weights))
            for c in self.clients:
                c.models["extractor"].load_state_dict(c.recv(self.server, "model_weights"))
        # else: No model transfer; each client keeps its own random initialisation.
        self.checkpoint("transfer", 1, start, stop)

    def finetune(self, stop: Callable[[str, int], bool]) -> None:
        """Eq. 3: each client adapts its extractor to its tiles (local; no message)."""
        cfg = self.cfg
        if cfg.finetune == "none":
            return
        for epoch in range(self.progress["finetune"] + 1, cfg.finetune_epochs + 1):
            start = time.perf_counter()
            for c in self.clients:
                self._seeded("finetune", c.name, epoch)
                n = c.n_samples("train")
                aug = self._local_aug(n, "finetune-aug", c.name, epoch)
                ext, gen = c.models["extractor"], c.models["generator"]
                opt, sched = self.optim[c.name]
                ext.train()
                gen.train()
                losses = []
                for ids in _batches(n, cfg.ae_batch_size, cfg.seed, "finetune", c.name, epoch):
                    x = self._tiles(c, "train", ids, aug)
                    if cfg.finetune == "bn_stats":
                        # Weights frozen; a train-mode pass moves BatchNorm's running statistics
                        # to this client's tiles (what the tiny extractor lr mostly changes).
                        with torch.no_grad():
                            ext(x)
                        continue
                    loss = F.mse_loss(gen(ext(x)), x)
                    losses.append(_step(opt, loss))
                if cfg.finetune == "autoencoder":
                    sched.step()
                    self.history["finetune"][c.name]["recon_loss"].append(
                        _mean(losses))
                ext.eval()
            self.checkpoint("finetune", epoch, start, stop)

    # -- stage 3 ---------------------------------------------------------------------------

    @torch.no_grad()
    def _feature_maps(self, split: str, ids: torch.Tensor,
                      aug: tuple[torch.Tensor, ...] | None) -> torch.Tensor:
        """One round of Eq. 4: clients send their maps of ``ids``; the server stitches them."""
        own = None
        for p in self.parties:
            ext = p.models["extractor"].eval()  # frozen after stage 2 (Algorithm 1)
            h = ext(self._tiles(p, split, ids, aug))
            if p is self.server:
                own = h
            else:
                p.send(self.server, "feature_map", h)
                self.uploaded["eval" if self.channel.phase == "eval" else "train"][p.name] += len(ids)
        maps = [own if p is self.server else self.server.recv(p, "feature_map") for p in self.parties]
        return stitch(self.part, maps, None if aug is None else aug[0][ids])

    def _extract_once(self) -> None:
        """Algorithm 1 line 22 literally: maps of the un-augmented training tiles, sent once."""
        if self.once_maps is not None:
            return
        n = self.server.n_samples("train")
        chunks = []
        for step, ids in enumerate(torch.arange(n).split(self.cfg.eval_batch_size)):
            self.channel.at(epoch=0, step=step, phase="train")
            chunks.append(self._feature_maps("train", ids, None))
        self.once_maps = torch.cat(chunks)
        if self.once_file is not None:
            # The server keeps what it received on its own disk, so a resumed run does not
            # ask the clients again.
            _save_atomic(self.once_maps, self.once_file, self.device)

    def classifier(self, stop: Callable[[str, int], bool]) -> None:
        """Eq. 5: the server trains W_s on the stitched maps."""
        cfg = self.cfg
        net = self.server.models["classifier"]
        opt, sched = self.optim["classifier"]
        n = self.server.n_samples("train")
        if cfg.extraction == "once" and cfg.classifier_epochs:
            self._extract_once()
        for epoch in range(self.progress["classifier"] + 1, cfg.classifier_epochs + 1):
            start = time.perf_counter()
            self._seeded("classifier", epoch)
            # Public protocol parameter: every participant derives the same transforms.
            aug = (augmentation_params(n, cfg.tile_shift, cfg.seed, "classifier-aug", epoch)
                   if cfg.augment and cfg.extraction == "per_epoch" else None)
            losses = []
            for step, ids in enumerate(_batches(n, cfg.batch_size, cfg.seed, "classifier", epoch)):
                if cfg.extraction == "once":
                    h = self.once_maps[ids.to(self.once_maps.device)]
                else:
                    self.channel.at(epoch=epoch, step=step, phase="train")
                    h = self._feature_maps("train", ids, aug)
                net.train()
                loss = F.cross_entropy(net(h), self.server.labels("train", ids=ids))
                losses.append(_step(opt, loss))
            sched.step()
            self.history["classifier"]["train_loss"].append(_mean(losses))
            self.history["classifier"]["test_accuracy"].append(self._eval_classifier(epoch))
            self.checkpoint("classifier", epoch, start, stop)

    @torch.no_grad()
    def _eval_classifier(self, epoch: int) -> float:
        """Test accuracy through the same protocol on the test tiles (phase "eval")."""
        net = self.server.models["classifier"].eval()
        n = self.server.n_samples("test")
        correct = 0
        for step, ids in enumerate(torch.arange(n).split(self.cfg.eval_batch_size)):
            self.channel.at(epoch=epoch, step=step, phase="eval")
            logits = net(self._feature_maps("test", ids, None))
            correct += int((logits.argmax(1) == self.server.labels("test", ids=ids)).sum())
        self.channel.at(phase="train")
        net.train()
        return correct / n

    # -- result ----------------------------------------------------------------------------

    def result(self, complete: bool) -> dict[str, Any]:
        """Curves, final/best accuracy and the cost accounting (JSON-able)."""
        cfg = self.cfg
        n_train = self.server.n_samples("train")
        arch = cost_model(cfg, num_classes=self.num_classes, image_shape=self.data.image_shape,
                          n_train=n_train)
        ledger = self.channel.ledger.frame(phase=None)
        per_client: dict[str, Any] = {}
        for c in self.clients:
            sent = ledger[(ledger["sender"] == c.name) & (ledger["kind"] == "feature_map")]
            got = ledger[(ledger["receiver"] == c.name) & (ledger["kind"] == "model_weights")]
            train_b = int(sent[sent["phase"] == "train"]["nbytes"].sum())
            eval_b = int(sent[sent["phase"] == "eval"]["nbytes"].sum())
            n_up = self.uploaded["train"][c.name]
            per_client[c.name] = {
                "model_transfer_bytes": int(got["nbytes"].sum()),
                "upload_bytes_train": train_b,
                "upload_bytes_eval": eval_b,
                "samples_uploaded_train": n_up,
                "upload_bytes_per_sample": train_b / n_up if n_up else None,
            }
        per_sample = [v["upload_bytes_per_sample"] for v in per_client.values()
                      if v["upload_bytes_per_sample"] is not None]
        fl_up = arch["fl_bytes_per_round_per_client"]["upload"]
        client_total = [v["model_transfer_bytes"] + v["upload_bytes_train"] for v in per_client.values()]
        costs = {
            **arch,
            "per_client": per_client,
            # From the ledger: bytes a client uploads per training sample it extracts.
            "upload_bytes_per_sample_per_client": per_sample[0] if per_sample else None,
            "model_transfer_bytes_per_client": per_client[self.clients[0].name]["model_transfer_bytes"],
            "client_train_bytes_total": max(client_total) if client_total else 0,
            # Whole-run client traffic (transfer + train uploads) in rounds of parameter-sharing
            # FL of the same VGG-16 (upload only), and against sending the raw tiles once.
            "client_train_bytes_in_fl_rounds": (max(client_total) / fl_up) if client_total else 0.0,
            "client_train_bytes_over_raw_tiles": (max(client_total) / arch["raw_tiles_bytes_per_client"]
                                                  if client_total else 0.0),
            "ledger_per_kind": {k: {"bytes": int(r["bytes"]), "messages": int(r["messages"])}
                                for k, r in self.channel.ledger.per_kind(phase=None).iterrows()},
        }
        curve = self.history["classifier"]["test_accuracy"]
        pre = self.history["pretrain"]["test_accuracy"]

        def summary(c: list[float]) -> dict[str, Any]:
            if not c:
                return {"final_accuracy": None, "best_accuracy": None, "best_epoch": None}
            best = max(range(len(c)), key=lambda i: c[i])
            return {"final_accuracy": c[-1], "best_accuracy": c[best], "best_epoch": best + 1}

        return {
            "method": "adptvfedconv", "config": cfg.to_dict(), "paper_model": cfg.paper_model,
            "complete": complete, "progress": dict(self.progress), "device": str(self.device),
            "n_train": n_train, "n_test": self.server.n_samples("test"),
            **summary(curve),
            "noncooperation": summary(pre),
            "history": self.history,
            "costs": costs,
            "elapsed_s": self.elapsed,
        }


def _stopper(stop_after: tuple[str, int] | None, max_seconds: float | None,
             deadline: float | None = None) -> Callable[[str, int], bool]:
    """When to stop after a checkpoint: at ``stop_after``, past ``max_seconds``, or when the next
    epoch, taken to last as long as the one just checkpointed, would end after ``deadline``
    (a ``time.time()`` value: the scheduler's budget)."""
    begun = time.perf_counter()
    last = [begun]

    def stop(stage: str, epoch: int) -> bool:
        now = time.perf_counter()
        epoch_s, last[0] = now - last[0], now
        if stop_after is not None and (stage, epoch) == tuple(stop_after):
            return True
        if deadline is not None and time.time() + epoch_s > deadline:
            return True
        return max_seconds is not None and now - begun >= max_seconds

    return stop


def train(config: AdptVFedConvConfig, *, device: str | torch.device = "auto",
          checkpoint_dir: str | Path | None = None, data: ImageData | None = None,
          channel: Channel | None = None, pretrain_dir: str | Path | None = None,
          stages: Sequence[str] = STAGES, stop_after: tuple[str, int] | None = None,
          max_seconds: float | None = None, deadline: float | None = None) -> dict[str, Any]:
    """Run AdptVFedConv's three stages; resume from ``checkpoint_dir`` if it holds this run.

    Parameters
    ----------
    config
        The run.
    device
        "auto" (CUDA if available), "cpu", "cuda[:N]".
    checkpoint_dir
        Where the per-epoch checkpoint (and, for ``extraction="once"``, the server's received
        maps) live; None: no checkpoints. A completed run's checkpoint returns its result
        without training.
    data
        An :class:`ImageData` to use instead of ``load_dataset(config.dataset)``.
    channel
        The channel to count messages on (default a new one); pass one to inspect the ledger.
    pretrain_dir
        Where stage 1's network is kept and looked for (default ``checkpoint_dir``): runs that
        agree on stage 1's fields (e.g. every cut of Table 3) share one pre-training.
    stages
        The stages to run (default all); ``("pretrain",)`` is Non-cooperation.
    stop_after
        ``(stage, epoch)``: return after that epoch's checkpoint (``complete=False``).
    max_seconds
        Return after the first checkpoint past this many seconds (short GPU windows).
    deadline
        A ``time.time()`` value: return after the last checkpoint whose next epoch (as long as
        the last one) would not end before it.

    Returns
    -------
    dict
        ``history`` (per-epoch ``pretrain`` train loss and test accuracy = Non-cooperation,
        ``finetune`` reconstruction loss per client, ``classifier`` train loss and test
        accuracy), ``final_accuracy``/``best_accuracy``/``best_epoch`` of stage 3,
        ``noncooperation`` (the same for stage 1), ``costs`` (see :func:`cost_model`, plus the
        ledger's per-client bytes), ``complete``, ``progress``, ``config``, ``paper_model``.
    """
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise ConfigError(f"unknown stages {unknown}; choose from {', '.join(STAGES)}")
    dev = resolve_device(device)
    run = _Run(config, device=dev, data=_load_data(config, data), channel=channel or Channel(),
               checkpoint_dir=Path(checkpoint_dir) if checkpoint_dir else None,
               pretrain_dir=Path(pretrain_dir) if pretrain_dir else None)
    run.resume()
    stop = _stopper(stop_after, max_seconds, deadline)
    try:
        for stage in STAGES:
            if stage in stages:
                getattr(run, stage)(stop)
    except _Stop:
        return run.result(complete=False)
    done = (config.pretrain_epochs == run.progress["pretrain"]
            and ("transfer" not in stages or run.progress["transfer"] == 1)
            and ("classifier" not in stages or run.progress["classifier"] == config.classifier_epochs))
    return run.result(complete=done)


def train_noncooperation(config: AdptVFedConvConfig, **kwargs: Any) -> dict[str, Any]:
    """Non-cooperation (Table 2): the server's stage 1 alone, VGG-16 on its own tile.

    Same arguments as :func:`train`; its pre-training file is the one a full run with the same
    stage-1 fields reuses. Returns ``curve`` (test accuracy per epoch) and its summary.
    """
    out = train(config, stages=("pretrain",), **kwargs)
    return {"method": "noncooperation", "config": config.to_dict(), "paper_model": config.paper_model,
            "complete": out["complete"], "curve": out["history"]["pretrain"]["test_accuracy"],
            "train_loss": out["history"]["pretrain"]["train_loss"], **out["noncooperation"],
            "elapsed_s": out["elapsed_s"]}


# --------------------------------------------------------------------------- centralized


def train_centralized(config: AdptVFedConvConfig, *, device: str | torch.device = "auto",
                      checkpoint_dir: str | Path | None = None, data: ImageData | None = None,
                      stop_after: int | None = None, max_seconds: float | None = None,
                      deadline: float | None = None) -> dict[str, Any]:
    """Centralized VGG-16 (Table 2's upper bound): one party, whole 32x32 images, zero padding,
    standard augmentation (RandomCrop(32, pad ``centralized_crop_pad``) + flip), SGD as stage 1
    for ``centralized_epochs``. Checkpointed per epoch like :func:`train`; ``stop_after`` is an
    epoch; ``deadline`` as in :func:`train`.
    """
    cfg = config
    dev = resolve_device(device)
    d = _load_data(cfg, data)
    torch.manual_seed(_derive(cfg.seed, "init", "centralized"))
    net = vgg16_bn_centralized(num_classes=d.num_classes, width=cfg.width,
                               in_channels=d.image_shape[0]).to(dev)
    opt, sched = _sgd(net.parameters(), cfg, cfg.centralized_epochs)
    x_tr, y_tr = d.x_train.to(dev), d.y_train.to(dev)
    x_te, y_te = d.x_test.to(dev), d.y_test.to(dev)
    ckpt = (Path(checkpoint_dir) / f"centralized-{cfg.key(_CENTRALIZED_FIELDS)}.pt"
            if checkpoint_dir else None)
    hist: dict[str, list[float]] = {"train_loss": [], "test_accuracy": []}
    first, elapsed = 1, 0.0
    if ckpt is not None:
        state = _load_if_ours(ckpt, cfg.to_dict(), _CENTRALIZED_FIELDS, dev)
        if state is not None:
            net.load_state_dict(state["model"])
            opt.load_state_dict(state["optim"])
            sched.load_state_dict(state["sched"])
            hist, first, elapsed = state["history"], state["epoch"] + 1, state["elapsed_s"]
    begun = time.perf_counter()
    n = len(y_tr)
    complete = True
    for epoch in range(first, cfg.centralized_epochs + 1):
        start = time.perf_counter()
        torch.manual_seed(_derive(cfg.seed, "centralized", epoch))
        flip, dy, dx = augmentation_params(n, cfg.centralized_crop_pad, cfg.seed, "centralized-aug", epoch)
        net.train()
        losses = []
        for ids in _batches(n, cfg.batch_size, cfg.seed, "centralized", epoch):
            x = x_tr[ids.to(dev)]
            if cfg.augment:
                x = flip_images(shift_images(x, dy[ids], dx[ids], fill="zeros"), flip[ids])
            loss = F.cross_entropy(net(d.normalize(x)), y_tr[ids.to(dev)])
            losses.append(_step(opt, loss))
        sched.step()
        net.eval()
        with torch.no_grad():
            correct = sum(int((net(d.normalize(x_te[i])).argmax(1) == y_te[i]).sum())
                          for i in torch.arange(len(y_te), device=dev).split(cfg.eval_batch_size))
        hist["train_loss"].append(_mean(losses))
        hist["test_accuracy"].append(correct / len(y_te))
        elapsed += time.perf_counter() - start
        if ckpt is not None:
            _save_atomic({"config": cfg.to_dict(), "model": net.state_dict(), "optim": opt.state_dict(),
                          "sched": sched.state_dict(), "history": hist, "epoch": epoch,
                          "elapsed_s": elapsed}, ckpt, dev)
        epoch_s = time.perf_counter() - start
        if (stop_after is not None and epoch == stop_after) or (
                max_seconds is not None and time.perf_counter() - begun >= max_seconds) or (
                deadline is not None and epoch < cfg.centralized_epochs and time.time() + epoch_s > deadline):
            complete = epoch == cfg.centralized_epochs
            break
    curve = hist["test_accuracy"]
    best = max(range(len(curve)), key=lambda i: curve[i]) if curve else None
    return {
        "method": "centralized_vgg16", "config": cfg.to_dict(), "paper_model": cfg.paper_model,
        "complete": complete and len(curve) == cfg.centralized_epochs, "device": str(dev),
        "curve": curve, "train_loss": hist["train_loss"],
        "final_accuracy": curve[-1] if curve else None,
        "best_accuracy": curve[best] if curve else None,
        "best_epoch": best + 1 if curve else None,
        "n_train": n, "n_test": len(y_te),
        "params": count_params(net), "macs_per_image": count_macs(net, d.image_shape),
        "elapsed_s": elapsed,
    }
