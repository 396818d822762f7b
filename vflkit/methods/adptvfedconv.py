"""AdptVFedConv: VGG-16 across the 2x2 tiles of an image, by feature-map transfer.

Li, Sha, Baker, Yu, Shi, Hu, "Adaptive Vertical Federated Learning via Feature Map Transferring
in Mobile Edge Computing" (Algorithm 1, Eqs. 1-5, Sec. 4.1). Four participants hold the four
16x16 tiles of every 32x32 image (``partition.grid(2, 2)``); the server (participant 1, the
active party, top-left tile by default) also holds the labels.

Stage 1 pre-trains VGG-16-BN on the server's tile (Eq. 1, the Non-cooperation row); stage 2
transfers its first layers (the *cut*) to the clients, which fine-tune them as the encoder of a
local autoencoder (Eqs. 2-3); stage 3 trains a classifier on the stitched feature maps (Eqs.
4-5). Only the transferred extractor and the feature maps cross parties, through the counted
:class:`~vflkit.comm.Channel`. The stages, the variants (fields of :class:`AdptVFedConvConfig`)
and the coordinated augmentation in full: docs/engine.md, "AdptVFedConv".

``width`` below 1 builds a smaller VGG-16 for quick CPU runs: **not the paper's model**
(results carry ``paper_model: False``).

Choices where the paper is silent (ours; all are config fields or stated here)
    * Stage 3 augments (``extraction="per_epoch"``, the default): the paper trains with flips and
      random crops "in all experiments", yet Algorithm 1 extracts H^k once. Every participant
      draws the same transform from a generator seeded with (seed, epoch), a public protocol
      parameter, so no message is needed; a crop is approximate, each tile shifted with
      replicate fill at its own edges (the neighbouring tiles' pixels are not shared).
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
    * ``finetune`` "none" and "bn_stats" isolate what the autoencoder adds; "bn_stats": the
      client's tiles run through its extractor in train mode without gradients for the
      autoencoder's epochs (only BatchNorm statistics move).
    * Test accuracy is taken at every stage-3 epoch; clients re-send their test maps each time
      (phase ``eval``, reported apart) rather than the server caching them: resuming needs no cache.
    * ``extraction="once"``: the server stores the received maps on its disk beside the
      checkpoint, so resuming does not ask the clients again.

The trainer (stages, checkpoints, resume, the two baselines) is
:mod:`vflkit.training.adptvfedconv`; this module holds the config, augmentation, stitching and cost model.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..config import registered_data_digest
from ..errors import ConfigError
from ..models import vgg16_bn_centralized, vgg16_bn_split
from ..partition import Partition, grid

__all__ = [
    "CUTS", "PADDINGS", "FINETUNES", "EXTRACTIONS", "PRETRAIN_CUT", "STAGES",
    "AdptVFedConvConfig", "cost_model", "count_macs", "count_params",
    "shift_images", "flip_images", "augment_tiles", "stitch", "augmentation_params",
]

#: Table 3's extractor depths (C = conv block, M = max-pool).
CUTS: tuple[str, ...] = ("1C", "2C", "2C+1M", "3C+1M", "4C+1M", "4C+2M", "5C+2M", "6C+2M",
                         "7C+2M", "7C+3M")
PADDINGS: tuple[str, ...] = ("replicate", "zeros")
FINETUNES: tuple[str, ...] = ("autoencoder", "none", "bn_stats")
EXTRACTIONS: tuple[str, ...] = ("per_epoch", "once")
#: Stage 1 trains all 13 convs as "extractor" (why: the module docstring's choices).
PRETRAIN_CUT = "13C+5M"
STAGES: tuple[str, ...] = ("pretrain", "transfer", "finetune", "classifier")


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class AdptVFedConvConfig:
    """Everything that decides one AdptVFedConv run. Defaults: the paper where it speaks, the
    choices listed in the module docstring where it is silent (variants: docs/engine.md).

    Data: ``dataset`` (a built-in image dataset or images registered with
    :func:`vflkit.data.register_dataset`: any channel count, even sides for the 2x2 grid),
    ``n_train``/``n_test`` (None = all; a subset drawn with ``subset_seed`` so training seeds
    share it), ``seed`` (model init, shuffles, augmentation, dropout).

    Model: ``width`` (1 = the paper's VGG-16-BN), ``cut`` (one of :data:`CUTS` or any VGG-16
    prefix), ``padding`` ("replicate" = the paper's trick, "zeros" = its ablation; every conv of
    the tile networks, stage 1 included; the server classifier and the centralized model pad
    with zeros).

    Training: SGD (momentum 0.9 via :func:`~vflkit.methods.base.make_optimizer`) with ``lr``,
    ``weight_decay``, ``batch_size``, cosine-annealed per stage; the autoencoder: Adam with
    ``ae_lr_extractor`` (1e-5, paper), ``ae_lr_generator`` (1e-3, paper) and
    ``ae_lr_extractor_scratch`` for a random extractor; ``augment``: flip + shift by up to
    ``tile_shift`` pixels on tiles, ``centralized_crop_pad`` on whole images.
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


# --------------------------------------------------------------------------- randomness


def _derive(*key: Any) -> int:
    """A 63-bit seed from a tuple of public values (seed, stage, epoch, party ...)."""
    return int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "big") >> 1


def _generator(*key: Any) -> torch.Generator:
    return torch.Generator().manual_seed(_derive(*key))


def augmentation_params(n: int, shift: int, *key: Any) -> tuple[torch.Tensor, ...]:
    """(flip, dy, dx) for rows 0..n-1, seeded with ``key``: stage 3 passes the public key
    (seed, "classifier", epoch), so every participant draws the same transform without a message."""
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
    """The server's Eq. 4: the participants' maps (partition order) in their positions; for
    mirrored samples left and right swap too, giving the mirrored whole image's map."""
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
    """What a cut costs a client, from the architecture alone: the transferred extractor's
    bytes are its state_dict (weights and BatchNorm buffers), raw tiles are uint8, feature maps
    float32, and FL is parameter sharing of the centralized VGG-16 per round."""
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
