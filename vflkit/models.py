"""The papers' models: VFedMH / EASTER's party models (:func:`get_model`), AdptVFedConv's split
VGG-16-BN, APC-VFL's SELU autoencoders and Multi-VFL's data- and label-owner models.

A party model is an embedding network *h* (``h(theta_k, x) -> E``, a flat ``[B, embedding_dim]``
vector, so VFedMH can average heterogeneous models' embeddings and SplitNN concatenate them)
followed by a prediction network *p* (``p(theta_k, E) -> [B, num_classes]`` logits).
``el_pl = (EL, PL)`` (EASTER Fig. 6: 2:1, 1:1, 1:2) splits the counted layers between them:
``model.embedding`` and ``model.prediction`` are ``nn.Sequential``\\ s of counted layers, so
``model.layers == (len(model.embedding), len(model.prediction))`` (Criteo models:
``model.embedding.deep``). How each family counts its layers, with the depths each ratio
gives, is in ``docs/data-and-models.md``; each choice where the papers are silent is stated
beside the code that makes it. *h* and *p* are one plain network cut in two: every layer but
the last of *p* is followed by ReLU, the embedding included.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from itertools import pairwise
from types import MappingProxyType
from typing import Any

import torch
import torchvision
from torch import nn

from .errors import ConfigError, PartitionError

__all__ = [
    "MODELS", "APC_VFL_ENCODERS", "PartyModel", "get_model", "mlp", "cnn", "lenet", "resnet18",
    "resnet34", "resnet50", "resnet101", "deepfm", "wide_deep", "cnn_tabular", "vgg16_bn_split",
    "vgg16_bn_generator", "vgg16_bn_centralized", "SeluAutoencoder", "apc_vfl_autoencoder",
    "MultiVFLDataOwner", "MultiVFLLabelOwner",
]

MODELS: tuple[str, ...] = (
    "mlp", "cnn", "lenet", "resnet18", "resnet34", "resnet50", "resnet101", "deepfm", "wide_deep",
    "cnn_tabular",
)
#: The Criteo party models: they take ``vocab_sizes`` and ``n_dense`` (one party's columns).
TABULAR_MODELS: tuple[str, ...] = ("deepfm", "wide_deep", "cnn_tabular")

# Width of hidden FC layers inside h (papers silent): wider than the default embedding (128),
# so h narrows towards it.
_H_HIDDEN = 256
# Max spatial grid kept before a ResNet's embedding Linear: the grid CIFAR's 32x32 has at
# ResNet's last stage; it caps the Linear at C*16 inputs (ResNet50 after stage 1: 256*16).
_RESNET_GRID = 4
_RESNET_UNITS = 6  # stem, layer1..layer4, classifier


class PartyModel(nn.Module):
    """A party's model (VFedMH Sec. IV): embedding network h (input -> ``[B, embedding_dim]``)
    then prediction network p (-> ``[B, num_classes]`` logits); ``layers`` = (EL, PL), their
    counted layers (see the module docstring); ``architecture`` its registry name."""

    def __init__(self, embedding: nn.Module, prediction: nn.Module, *, embedding_dim: int,
                 layers: tuple[int, int], architecture: str) -> None:
        super().__init__()
        self.embedding = embedding
        self.prediction = prediction
        self.embedding_dim = embedding_dim
        self.layers = layers
        self.architecture = architecture

    def embed(self, x: Any) -> torch.Tensor:
        return self.embedding(x)

    def predict(self, e: torch.Tensor) -> torch.Tensor:
        return self.prediction(e)

    def forward(self, x: Any) -> torch.Tensor:
        return self.predict(self.embed(x))

    def extra_repr(self) -> str:
        return (f"architecture={self.architecture!r}, embedding_dim={self.embedding_dim}, "
                f"layers={self.layers}")


# --------------------------------------------------------------------------- checks / helpers


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be a positive integer, got {value!r}")
    return value


def _shape(arch: str, input_shape: Any, *, image: bool) -> tuple[int, ...]:
    expected = ("(C, H, W), e.g. (1, 28, 7) for an MNIST strip or (3, 32, 8) for a CIFAR strip"
                if image else "(n_features,) for tabular data or (C, H, W) for images")
    try:
        shape = tuple(int(s) for s in input_shape)
    except TypeError:
        shape = ()
    if not shape or any(s < 1 for s in shape) or (image and len(shape) != 3):
        raise ConfigError(f"{arch} expects input_shape {expected}; got {input_shape!r}")
    return shape


def _el_pl(el_pl: Any) -> tuple[int, int]:
    try:
        a, b = el_pl
    except (TypeError, ValueError):
        raise ConfigError(f"el_pl must be a pair (EL, PL) such as (1, 1) or (2, 1); got {el_pl!r}") from None
    return _positive_int("el_pl[0] (EL)", a), _positive_int("el_pl[1] (PL)", b)


def _split_depth(paper_depth: int, el_pl: tuple[int, int]) -> tuple[int, int]:
    """(EL, PL) layer counts (a layer: one Linear or Conv with its ReLU and pooling): the paper's
    depth if EL+PL divides it, else the nearest multiple (ties: the deeper), so the ratio is exact."""
    a, b = el_pl
    m = max(1, math.floor(paper_depth / (a + b) + 0.5))  # +0.5: ties go to the deeper network
    return m * a, m * b


def _probe(module: nn.Module, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Output shape of one sample (in eval mode: BatchNorm statistics stay untouched)."""
    was_training = module.training
    module.eval()
    with torch.no_grad():
        out = module(torch.zeros(1, *shape))
    module.train(was_training)
    return tuple(out.shape[1:])


def _init_like_torchvision(module: nn.Module, *, linear_std: float | None = None) -> None:
    """torchvision's ResNet/VGG initialisation (He fan-out for convs, BN at 1/0)."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            m.reset_running_stats()
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear) and linear_std is not None:
            nn.init.normal_(m.weight, 0, linear_std)
            nn.init.zeros_(m.bias)


def _he(module: nn.Module) -> nn.Module:
    """He-normal weights and zero biases for the Linear/Conv layers of a unit ending in ReLU.

    PyTorch's default (uniform, a=sqrt(5)) gives a sixth of He's weight variance, so signals
    shrink layer after layer and plain SGD barely moves a 4-layer MLP (MNIST 28x7 strips,
    3000 samples, 3 epochs at lr 0.05: Local 10% -> 29%, SplitNN 44% -> 77% with He).
    """
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return module


def _embedding_units(convs: Sequence[tuple[int, int, bool]], shape: tuple[int, ...], n_el: int,
                     embedding_dim: int, *, conv: type[nn.Module], pool: type[nn.Module]
                     ) -> tuple[list[nn.Module], tuple[int, ...]]:
    """The ``n_el`` layers of an embedding network *h*, each a He-initialised unit: the
    architecture's convolutions (``conv``/``pool``: 2-D for images, 1-D over table fields) while
    they last, fully connected layers after them, and at the split the layer to the embedding.
    Returns the units and the shape they output. "Same" padding and ceil-mode pools let strips
    as narrow as one pixel pass (EASTER's 10 parties on MNIST: 28x2 strips)."""
    units: list[nn.Module] = []
    for i in range(n_el):
        at_split = i == n_el - 1
        if i < len(convs) and not at_split:
            out, size, pooled = convs[i]
            layers: list[nn.Module] = [conv(shape[0], out, size, padding=size // 2), nn.ReLU()]
            if pooled:
                layers.append(pool(2, ceil_mode=True))
        else:
            # A fully connected layer, or at the split a convolution spanning its whole input map
            # (as LeNet-5's C5), computed as Flatten + Linear: the same map, since a map-sized
            # kernel is slow on CPU. (Average-pooling the map down to embedding_dim numbers
            # instead, globally or to 2x2, trained CNN to a far lower test accuracy.)
            width = embedding_dim if at_split else _H_HIDDEN
            layers = [nn.Linear(math.prod(shape), width), nn.ReLU()]
            if len(shape) > 1:
                layers.insert(0, nn.Flatten())
        unit = _he(nn.Sequential(*layers))
        shape = _probe(unit, shape)
        units.append(unit)
    return units, shape


def _prediction_network(n_pl: int, embedding_dim: int, num_classes: int) -> nn.Sequential:
    """p: ``n_pl`` Linear layers, hidden ones ``embedding_dim`` wide with ReLU (papers silent: so
    moving a layer between h and p changes depth, not width)."""
    units: list[nn.Module] = [_he(nn.Sequential(nn.Linear(embedding_dim, embedding_dim), nn.ReLU()))
                              for _ in range(n_pl - 1)]
    units.append(nn.Linear(embedding_dim, num_classes))
    return nn.Sequential(*units)


# --------------------------------------------------------------------------- MLP / CNN / LeNet

# Per family: convolutions (out_channels, kernel, max-pool after it) and the paper's depth
# (VFedMH Sec. V-A). CNN widths 32/64 as in PyTorch's MNIST example; LeNet's 6/16/120 and its
# single pooling layer as in LeNet-5 (C1, S2, C3, C5).
_PLAIN: dict[str, tuple[tuple[tuple[int, int, bool], ...], int]] = {
    "mlp": ((), 3),
    "cnn": (((32, 3, True), (64, 3, True)), 4),
    "lenet": (((6, 5, True), (16, 5, False), (120, 5, False)), 6),
}


def _plain(arch: str, input_shape: Sequence[int], num_classes: int, embedding_dim: int,
           el_pl: tuple[int, int]) -> PartyModel:
    convs, depth = _PLAIN[arch]
    shape = _shape(arch, input_shape, image=bool(convs))
    n_el, n_pl = _split_depth(depth, _el_pl(el_pl))
    units, shape = _embedding_units(convs, shape, n_el, embedding_dim, conv=nn.Conv2d, pool=nn.MaxPool2d)
    return PartyModel(nn.Sequential(*units), _prediction_network(n_pl, embedding_dim, num_classes),
                      embedding_dim=embedding_dim, layers=(n_el, n_pl), architecture=arch)


def mlp(*, input_shape: Sequence[int], num_classes: int, embedding_dim: int = 128,
        el_pl: tuple[int, int] = (1, 1)) -> PartyModel:
    """MLP, "a three-layer fully connected network" (VFedMH Sec. V-A; EASTER Sec. V-A).

    Takes images (flattened) or tabular ``(n_features,)`` inputs. Defaults: embedding 128,
    EL:PL 1:1, which needs an even depth, hence 4 layers: h = in -> 256 -> 128,
    p = 128 -> 128 -> classes (2:1 and 1:2 keep the paper's 3; docs/data-and-models.md has the table).
    """
    return _plain("mlp", input_shape, num_classes, embedding_dim, el_pl)


def cnn(*, input_shape: Sequence[int], num_classes: int, embedding_dim: int = 128,
        el_pl: tuple[int, int] = (1, 1)) -> PartyModel:
    """CNN with 2 convolutional and 2 fully connected layers (VFedMH Sec. V-A).

    Defaults: embedding 128, EL:PL 1:1: h = 3x3 conv (32) + max-pool, then the map-sized
    convolution to the embedding; p = two FC layers (128 -> 128 -> classes).
    """
    return _plain("cnn", input_shape, num_classes, embedding_dim, el_pl)


def lenet(*, input_shape: Sequence[int], num_classes: int, embedding_dim: int = 128,
          el_pl: tuple[int, int] = (1, 1)) -> PartyModel:
    """LeNet: 3 convolutional, 1 pooling and 3 fully connected layers (VFedMH Sec. V-A).

    Defaults: embedding 128, EL:PL 1:1: h = C1 (5x5, 6) + S2 max-pool, C3 (5x5, 16) and the
    map-sized C5 to the embedding, as in LeNet-5; p = three FC layers (128 -> 128 -> 128 ->
    classes).
    """
    return _plain("lenet", input_shape, num_classes, embedding_dim, el_pl)


# --------------------------------------------------------------------------- ResNets


#: Residual blocks per stage, and weighted layers per block, of each ResNet.
RESNET_BLOCKS: dict[str, tuple[tuple[int, ...], int]] = {
    "resnet18": ((2, 2, 2, 2), 2), "resnet34": ((3, 4, 6, 3), 2),
    "resnet50": ((3, 4, 6, 3), 3), "resnet101": ((3, 4, 23, 3), 3)}
#: The readings of a ResNet's "layers" for the EL:PL cut (:func:`resnet_cut_blocks`).
RESNET_CUTS: tuple[str, ...] = ("stages", "layers")


def resnet_cut_blocks(arch: str, el_pl: tuple[int, int] = (1, 1), cut: str = "stages") -> int:
    """How many residual blocks *h* holds (after the stem) under reading ``cut``.

    ``"layers"`` (the studies' choice): EASTER Sec. V-A says "the number of layers in both the
    local embedding and predicting models was the same", and a ResNet-N has N weighted layers
    (stem, 2 or 3 per block, classifier), so *h* takes the blocks whose layer count is nearest
    EL / (EL + PL) of N (a tie to fewer). ``"stages"`` (the default, which the committed records
    use): six units (stem, four stages, classifier), a ratio that does not split them a
    ConfigError; it gives ResNet50 and ResNet101 the same *h* (they differ only in their
    third stage, all in *p*), so SplitNN's and C-VFL's two columns would train the same bottom
    network. A config whose models both readings cut alike keeps the default, so its key stays.
    """
    if cut not in RESNET_CUTS:
        raise ConfigError(f"Invalid resnet cut {cut!r}; choose one of {', '.join(RESNET_CUTS)}")
    blocks, per = RESNET_BLOCKS[arch]
    a, b = _el_pl(el_pl)
    if cut == "stages":
        if (_RESNET_UNITS * a) % (a + b):
            valid = ", ".join(str(r) for r in ((1, 1), (2, 1), (1, 2), (5, 1), (1, 5)))
            raise ConfigError(f"{arch} has {_RESNET_UNITS} layers (stem, 4 residual stages, classifier); "
                              f"el_pl={el_pl!r} does not split them; choose one of {valid}")
        return sum(blocks[:_RESNET_UNITS * a // (a + b) - 1])
    total = 1 + per * sum(blocks) + 1
    target = total * a / (a + b)
    return min(range(sum(blocks) + 1), key=lambda k: (abs(1 + per * k - target), k))


def _resnet(arch: str, input_shape: Sequence[int], num_classes: int, embedding_dim: int,
            el_pl: tuple[int, int], cut: str = "stages") -> PartyModel:
    c, h, w = _shape(arch, input_shape, image=True)
    k = resnet_cut_blocks(arch, el_pl, cut)
    blocks, per = RESNET_BLOCKS[arch]
    net = getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)
    # Small, narrow inputs: 3x3 stride-1 stem and no max-pool (the usual CIFAR adaptation).
    net.conv1 = nn.Conv2d(c, 64, kernel_size=3, stride=1, padding=1, bias=False)
    _init_like_torchvision(net.conv1)
    stages = [net.layer1, net.layer2, net.layer3, net.layer4]
    # s: the first stage not wholly in h, j: its blocks in h (the cut at a stage boundary: j = 0)
    s = next((i for i in range(len(blocks)) if sum(blocks[:i + 1]) > k), len(blocks))
    j = k - sum(blocks[:s])
    h_units: list[nn.Module] = [nn.Sequential(net.conv1, net.bn1, net.relu), *stages[:s]]
    if j:
        h_units.append(stages[s][:j])
    ch, mh, mw = _probe(nn.Sequential(*h_units), (c, h, w))
    grid = (min(mh, _RESNET_GRID), min(mw, _RESNET_GRID))
    head = _he(nn.Sequential(nn.Linear(ch * grid[0] * grid[1], embedding_dim), nn.ReLU()))
    h_units[-1] = nn.Sequential(h_units[-1], nn.AdaptiveAvgPool2d(grid), nn.Flatten(), *head)
    if s < len(blocks):
        # The rest of stage s runs on the embedding as a 1x1 map (residual MLP blocks, whose
        # BatchNorm needs training batches of 2 or more), its first block rebuilt for
        # embedding_dim input channels by torchvision's own stage builder (which reads net.inplanes).
        net.inplanes = embedding_dim
        rest = net._make_layer(type(stages[0][0]), 64 * 2**s, blocks[s] - j, stride=1 if s == 0 or j else 2)
        _init_like_torchvision(rest)
        p_units = [nn.Sequential(nn.Unflatten(1, (embedding_dim, 1, 1)), rest), *stages[s + 1:],
                   nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), net.fc)]
    else:
        p_units = [nn.Linear(embedding_dim, num_classes)]
    n_el = len(h_units) if cut == "stages" else 1 + per * k
    n_pl = _RESNET_UNITS - n_el if cut == "stages" else 1 + per * sum(blocks) + 1 - n_el
    return PartyModel(nn.Sequential(*h_units), nn.Sequential(*p_units),
                      embedding_dim=embedding_dim, layers=(n_el, n_pl), architecture=arch)


def _resnet_builder(arch: str, cited: str) -> Callable[..., PartyModel]:
    """The public builder of ResNet ``arch``, citing where the papers name it."""
    def build(*, input_shape: Sequence[int], num_classes: int, embedding_dim: int = 128,
              el_pl: tuple[int, int] = (1, 1), cut: str = "stages") -> PartyModel:
        return _resnet(arch, input_shape, num_classes, embedding_dim, el_pl, cut)

    build.__name__ = build.__qualname__ = arch
    build.__doc__ = f"ResNet-{arch.removeprefix('resnet')} ({cited}), torchvision's, small-input stem."
    return build


resnet18 = _resnet_builder("resnet18", "VFedMH Sec. V-A, Table II; EASTER Sec. V-A")
resnet34 = _resnet_builder("resnet34", "EASTER Sec. V-A, CIFAR-10/100 and CINIC-10")
resnet50 = _resnet_builder("resnet50", "VFedMH Sec. V-A; EASTER Sec. V-A")
resnet101 = _resnet_builder("resnet101", "VFedMH Sec. V-A, Table II")


# --------------------------------------------------------------------------- Criteo


class _CriteoFields(nn.Module):
    """What the Criteo party models share: their columns' input format and its checks."""

    def __init__(self, n_dense: int, vocab_sizes: Sequence[int]) -> None:
        super().__init__()
        self.n_dense = n_dense
        self.n_sparse = len(vocab_sizes)
        vocab = torch.tensor(list(vocab_sizes), dtype=torch.long)
        self.register_buffer("vocab", vocab, persistent=False)
        # One table for all fields (offsets select a field's rows): one lookup per batch.
        self.register_buffer("offsets", vocab.cumsum(0) - vocab, persistent=False)

    def _inputs(self, x: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(x, (tuple, list)):
            dense, sparse = x
        else:  # one [B, n_dense + n_sparse] tensor: dense columns first, then the category codes
            if x.dim() != 2 or x.shape[1] != self.n_dense + self.n_sparse:
                raise PartitionError(f"expected [B, {self.n_dense + self.n_sparse}] ({self.n_dense} dense + "
                                     f"{self.n_sparse} sparse columns) or a (dense, sparse) pair; "
                                     f"got {tuple(x.shape)}")
            dense, sparse = x[:, :self.n_dense], x[:, self.n_dense:]
        if dense.shape[-1] != self.n_dense or sparse.shape[-1] != self.n_sparse:
            raise PartitionError(f"this party's model was built for {self.n_dense} dense and {self.n_sparse} "
                                 f"sparse columns; got {dense.shape[-1]} and {sparse.shape[-1]}")
        sparse = sparse.long()
        if self.n_sparse and ((sparse < 0) | (sparse >= self.vocab)).any():
            raise PartitionError(f"category codes outside [0, vocab_size) for vocab_sizes={self.vocab.tolist()}; "
                                 "encode unseen categories to a reserved index")
        return dense.float(), sparse


class _CriteoEmbedding(_CriteoFields):
    """h of DeepFM / Wide&Deep on one party's Criteo columns.

    Output ``[first-order term (1) | FM interaction vector (k, DeepFM only) | deep (rest)]``.
    DeepFM's logit is first-order + sum(FM vector) + w . deep and Wide&Deep's is wide + w . deep:
    both are linear in this concatenation, so a Linear p reproduces them exactly and deeper p
    generalise them. The FM vector is kept per factor (not summed) so it carries k numbers.
    Dense features are FM fields too, their vector scaled by the value (DeepFM Sec. 2.1).
    """

    def __init__(self, *, n_dense: int, vocab_sizes: Sequence[int], field_dim: int,
                 deep: nn.Sequential, fm: bool) -> None:
        super().__init__(n_dense, vocab_sizes)
        self.fm = fm
        total = max(1, sum(vocab_sizes))
        self.field_embedding = nn.Embedding(total, field_dim)
        self.first_order_sparse = nn.Embedding(total, 1)
        nn.init.zeros_(self.first_order_sparse.weight)
        self.first_order_dense = nn.Linear(n_dense, 1, bias=False) if n_dense else None
        self.bias = nn.Parameter(torch.zeros(1))
        self.dense_vectors = nn.Parameter(torch.randn(n_dense, field_dim) * 0.01) if fm else None
        self.deep = deep

    def forward(self, x: Any) -> torch.Tensor:
        dense, sparse = self._inputs(x)
        idx = sparse + self.offsets
        emb = self.field_embedding(idx)  # [B, F, k]
        first = self.bias + self.first_order_sparse(idx).sum(1)
        if self.first_order_dense is not None:
            first = first + self.first_order_dense(dense)
        deep = self.deep(torch.cat([dense, emb.flatten(1)], dim=1))
        if not self.fm:
            return torch.cat([first, deep], dim=1)
        fields = torch.cat([emb, dense.unsqueeze(-1) * self.dense_vectors], dim=1)
        s = fields.sum(1)
        interaction = 0.5 * (s * s - (fields * fields).sum(1))  # FM's O(kF) identity, per factor
        return torch.cat([first, interaction, deep], dim=1)


def _criteo_columns(arch: str, input_shape: Sequence[int] | None, vocab_sizes: Sequence[int], n_dense: int,
                    field_embedding_dim: int) -> tuple[list[int], int, int]:
    """A Criteo model's columns checked: ``(vocab_sizes, n_dense + n_sparse, field_embedding_dim)``."""
    if vocab_sizes is None or n_dense is None:
        raise ConfigError(f"{arch} needs vocab_sizes= (one category count per sparse column of "
                          "this party) and n_dense= (its number of dense columns)")
    vocab_sizes = [_positive_int("vocab_sizes entries", v) for v in vocab_sizes]
    if isinstance(n_dense, bool) or not isinstance(n_dense, int) or n_dense < 0:
        raise ConfigError(f"n_dense must be an integer >= 0, got {n_dense!r}")
    n_features = n_dense + len(vocab_sizes)
    if n_features == 0:
        raise ConfigError(f"{arch} needs at least one column: n_dense=0 and vocab_sizes is empty")
    if input_shape is not None and tuple(input_shape) != (n_features,):
        raise ConfigError(f"{arch} expects input_shape (n_dense + n_sparse,) = ({n_features},) for "
                          f"n_dense={n_dense} and {len(vocab_sizes)} sparse columns; got {tuple(input_shape)!r}")
    return vocab_sizes, n_features, _positive_int("field_embedding_dim", field_embedding_dim)


def _criteo(arch: str, input_shape: Sequence[int] | None, num_classes: int, embedding_dim: int,
            el_pl: tuple[int, int], vocab_sizes: Sequence[int], n_dense: int,
            field_embedding_dim: int) -> PartyModel:
    vocab_sizes, _, k = _criteo_columns(arch, input_shape, vocab_sizes, n_dense, field_embedding_dim)
    fm = arch == "deepfm"
    extra = 1 + (k if fm else 0)
    if embedding_dim <= extra:
        parts = "first-order term + FM vector" if fm else "wide term"
        raise ConfigError(f"{arch} needs embedding_dim > {extra} ({parts}); got {embedding_dim}")
    # Deep component: 2 hidden layers + output, counted like the MLP.
    n_el, n_pl = _split_depth(3, _el_pl(el_pl))
    width = n_dense + len(vocab_sizes) * k
    units: list[nn.Module] = []
    for i in range(n_el):
        out = embedding_dim - extra if i == n_el - 1 else _H_HIDDEN
        units.append(_he(nn.Sequential(nn.Linear(width, out), nn.ReLU())))
        width = out
    h = _CriteoEmbedding(n_dense=n_dense, vocab_sizes=vocab_sizes, field_dim=k,
                         deep=nn.Sequential(*units), fm=fm)
    return PartyModel(h, _prediction_network(n_pl, embedding_dim, num_classes),
                      embedding_dim=embedding_dim, layers=(n_el, n_pl), architecture=arch)


def deepfm(*, vocab_sizes: Sequence[int], n_dense: int, input_shape: Sequence[int] | None = None,
           num_classes: int = 2, embedding_dim: int = 128, el_pl: tuple[int, int] = (1, 1),
           field_embedding_dim: int = 8) -> PartyModel:
    """DeepFM (Guo et al. 2017) on a party's Criteo columns (EASTER Sec. V-A).

    Input: ``(dense float [B, n_dense], sparse int64 [B, n_sparse])`` or one ``[B, n_dense +
    n_sparse]`` tensor (dense first). The embedding is [first-order | FM vector | deep part].
    Defaults: 2 classes (so cross-entropy serves every dataset), field embeddings of size 8,
    embedding 128, EL:PL 1:1.
    """
    return _criteo("deepfm", input_shape, num_classes, embedding_dim, el_pl, vocab_sizes, n_dense,
                   field_embedding_dim)


def wide_deep(*, vocab_sizes: Sequence[int], n_dense: int, input_shape: Sequence[int] | None = None,
              num_classes: int = 2, embedding_dim: int = 128, el_pl: tuple[int, int] = (1, 1),
              field_embedding_dim: int = 8) -> PartyModel:
    """Wide & Deep (Cheng et al. 2016) on a party's Criteo columns (EASTER Sec. V-A).

    The wide part is linear in the raw columns (no hand-made cross features); the embedding
    is [wide term | deep part]. Input and defaults as :func:`deepfm`.
    """
    return _criteo("wide_deep", input_shape, num_classes, embedding_dim, el_pl, vocab_sizes,
                   n_dense, field_embedding_dim)


class _CriteoFieldCNN(_CriteoFields):
    """h of the Criteo CNN: field embeddings, then 1-D convolutions across the fields.

    Every column is a field with a ``k``-vector: a sparse column looks its code up, a dense
    column scales a learned vector by its value (as DeepFM's dense fields). The ``[B, F, k]``
    field matrix is read as ``k`` channels over ``F`` positions (the party's columns in
    order), and ``units`` (the counted layers, as the image CNN's) run on it.
    """

    def __init__(self, *, n_dense: int, vocab_sizes: Sequence[int], field_dim: int,
                 units: nn.Sequential) -> None:
        super().__init__(n_dense, vocab_sizes)
        self.field_embedding = nn.Embedding(max(1, sum(vocab_sizes)), field_dim)
        self.dense_vectors = nn.Parameter(torch.randn(n_dense, field_dim) * 0.01)
        self.deep = units

    def fields(self, x: Any) -> torch.Tensor:
        """``[B, k, F]``: one channel per embedding factor, one position per column."""
        dense, sparse = self._inputs(x)
        parts = [dense.unsqueeze(-1) * self.dense_vectors]
        if self.n_sparse:
            parts.append(self.field_embedding(sparse + self.offsets))
        return torch.cat(parts, dim=1).transpose(1, 2)

    def forward(self, x: Any) -> torch.Tensor:
        return self.deep(self.fields(x))


def cnn_tabular(*, vocab_sizes: Sequence[int], n_dense: int, input_shape: Sequence[int] | None = None,
                num_classes: int = 2, embedding_dim: int = 128, el_pl: tuple[int, int] = (1, 1),
                field_embedding_dim: int = 8) -> PartyModel:
    """The "CNN" of EASTER's Criteo experiments (Sec. V-A2; the paper gives no architecture).

    Our choice: a CNN over field embeddings, counted like the image :func:`cnn` (2 conv +
    2 FC, so EL:PL 1:1 is 2 | 2). h = field embeddings (k = 8; dense columns as value x
    learned vector) read as ``[B, k, F]``, Conv1d(k -> 32, 3, padding 1) + ReLU +
    MaxPool1d(2, ceil), then the map-sized layer to the embedding (Flatten + Linear + ReLU, the
    same map as a convolution spanning the whole field axis, as in :func:`cnn`); p = two FC
    layers (128 -> 128 -> classes). A second Conv1d(32 -> 64) comes in only where EL:PL gives
    h three layers or more. Padding and ceil-mode pooling let a party with a single column
    pass. Input and defaults as :func:`deepfm`.
    """
    vocab_sizes, n_fields, k = _criteo_columns("cnn_tabular", input_shape, vocab_sizes, n_dense, field_embedding_dim)
    n_el, n_pl = _split_depth(4, _el_pl(el_pl))
    convs = ((32, 3, True), (64, 3, False))
    units, shape = _embedding_units(convs, (k, n_fields), n_el, embedding_dim, conv=nn.Conv1d, pool=nn.MaxPool1d)
    h = _CriteoFieldCNN(n_dense=n_dense, vocab_sizes=vocab_sizes, field_dim=k,
                        units=nn.Sequential(*units))
    return PartyModel(h, _prediction_network(n_pl, embedding_dim, num_classes),
                      embedding_dim=embedding_dim, layers=(n_el, n_pl), architecture="cnn_tabular")


# --------------------------------------------------------------------------- registry

_BUILDERS: dict[str, Callable[..., PartyModel]] = {
    "mlp": mlp, "cnn": cnn, "lenet": lenet, "resnet18": resnet18, "resnet34": resnet34,
    "resnet50": resnet50, "resnet101": resnet101, "deepfm": deepfm, "wide_deep": wide_deep,
    "cnn_tabular": cnn_tabular,
}
_OPTIONS = {name: ("vocab_sizes", "n_dense", "field_embedding_dim") for name in TABULAR_MODELS} | {
    name: ("cut",) for name in RESNET_BLOCKS}
_REQUIRED = {name: ("vocab_sizes", "n_dense") for name in TABULAR_MODELS}


def get_model(name: str, *, input_shape: tuple[int, ...], num_classes: int,
              embedding_dim: int = 128, el_pl: tuple[int, int] = (1, 1),
              **kwargs: Any) -> PartyModel:
    """Party model ``name`` (one of :data:`MODELS`) for one party's samples of ``input_shape``
    (``(C, H, W)`` or ``(n_features,)``): the embedding size (EASTER Fig. 6a) and the ratio of
    layers in h to p (Fig. 6b); ``kwargs``: ``cut`` for the ResNets, ``vocab_sizes``,
    ``n_dense``, ``field_embedding_dim`` for the Criteo models."""
    if name not in _BUILDERS:
        raise ConfigError(f"Invalid model {name!r}; choose one of {', '.join(MODELS)}")
    allowed = _OPTIONS.get(name, ())
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        takes = (f"it takes {', '.join(allowed)}" if allowed
                 else "it takes none (vocab_sizes, n_dense are for deepfm, wide_deep, cnn_tabular)")
        raise ConfigError(f"Unknown option(s) {', '.join(unknown)} for model {name!r}; {takes}")
    missing = [k for k in _REQUIRED.get(name, ()) if k not in kwargs]
    if missing:
        raise ConfigError(f"Model {name!r} needs {' and '.join(missing)}: vocab_sizes= (one category count "
                          "per sparse column of this party) and n_dense= (its number of dense columns)")
    _positive_int("num_classes", num_classes)
    _positive_int("embedding_dim", embedding_dim)
    return _BUILDERS[name](input_shape=input_shape, num_classes=num_classes,
                           embedding_dim=embedding_dim, el_pl=el_pl, **kwargs)


# --------------------------------------------------------------------------- AdptVFedConv

_PADDING_MODES = ("zeros", "replicate")
_CUT_RE = re.compile(r"^\s*(\d+)\s*C\s*(?:\+\s*(\d+)\s*M)?\s*$", re.IGNORECASE)


# VGG-16's configuration "D" (torchvision's cfgs["D"]): conv widths and "M" for max-pools.
_VGG16_CFG: tuple[int | str, ...] = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                                     512, 512, 512, "M", 512, 512, 512, "M")


def _vgg_width(width: Any) -> float:
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not width > 0:
        raise ConfigError(f"width must be a positive channel multiplier such as 1 (the paper's "
                          f"VGG-16) or 0.125; got {width!r}")
    return float(width)


def _scaled(channels: int, width: float) -> int:
    return max(1, round(channels * width))


def _vgg16_features_meta(width: float) -> nn.Sequential:
    cfg = [v if v == "M" else _scaled(int(v), width) for v in _VGG16_CFG]
    with torch.device("meta"):
        return torchvision.models.vgg.make_layers(cfg, batch_norm=True)


def _pad(module: nn.Module, padding_mode: str) -> None:
    """Give every convolution in ``module`` ``padding_mode``."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            m.padding_mode = padding_mode


def _vgg16_bn(num_classes: int, in_channels: int, width: float, padding_mode: str) -> torchvision.models.VGG:
    """torchvision's VGG-16-BN with a 512-input head (1x1 maps) and ceil-mode max-pools, its
    options checked (``padding_mode`` is applied by the caller, to the convolutions it pads;
    ``width`` as :func:`vgg16_bn_split`): at width 1 the modules and their initialisation are
    those of ``torchvision.models.vgg16_bn``."""
    if padding_mode not in _PADDING_MODES:
        raise ConfigError(f"Invalid padding_mode {padding_mode!r}; choose one of {', '.join(_PADDING_MODES)}")
    num_classes, in_channels = _positive_int("num_classes", num_classes), _positive_int("in_channels", in_channels)
    width = _vgg_width(width)
    # Built on the meta device: torchvision's head expects 224x224 inputs (a 25088x4096 layer,
    # ~2 s to initialise) and is replaced here; real tensors are created and initialised below.
    features = _vgg16_features_meta(width)
    c_last = _scaled(512, width)
    fc = _scaled(4096, width)
    with torch.device("meta"):
        net = torchvision.models.VGG(features, num_classes=num_classes, init_weights=False)
        net.features[0] = nn.Conv2d(in_channels, _scaled(64, width), kernel_size=3, padding=1)
        net.avgpool = nn.AdaptiveAvgPool2d(1)  # 16x16 tiles or 32x32 images end at 512x1x1
        # Paper: 512 -> 4096 -> 4096 -> classes with dropout 0.5 (torchvision's head, resized).
        net.classifier[0] = nn.Linear(c_last, fc)
        net.classifier[3] = nn.Linear(fc, fc)
        net.classifier[6] = nn.Linear(fc, num_classes)
        for i, m in enumerate(net.features):
            if isinstance(m, nn.MaxPool2d):
                # Same as VGG on even sizes; lets a 1x1 map pass (deep cuts, a single tile's map).
                net.features[i] = nn.MaxPool2d(2, 2, ceil_mode=True)
    net = net.to_empty(device="cpu")
    # torchvision draws the FC weights from N(0, 0.01). Its per-layer signal gain is
    # 0.01 * sqrt(fan_in), so a narrower head shrinks the logits (and the gradients reaching
    # the convs) by sqrt(width) per layer: at width 1/8 the quick profile's VGG stayed at
    # chance. Scaling the std by 1/sqrt(width) keeps torchvision's gains at every width; at
    # width 1 it is torchvision's initialisation exactly.
    _init_like_torchvision(net, linear_std=0.01 / math.sqrt(width))
    return net


def _feature_cut(features: nn.Sequential, cut: int | str) -> int:
    """The index in ``features`` where the client feature extractor ends."""
    if isinstance(cut, str):
        match = _CUT_RE.match(cut)
        if not match:
            raise ConfigError(f"Invalid cut {cut!r}; give an int (number of max-pools) or "
                              "Table 3's notation such as '2C+1M', '3C+1M', '7C'")
        n_conv, n_pool = int(match.group(1)), int(match.group(2) or 0)
    elif isinstance(cut, int) and not isinstance(cut, bool):
        if not 1 <= cut <= 5:
            raise ConfigError(f"cut={cut} must be 1..5 (VGG-16's max-pools in the extractor)")
        n_pool, n_conv = cut, None
    else:
        raise ConfigError(f"cut must be an int or a string like '2C+1M'; got {cut!r}")
    convs = pools = 0
    for i, m in enumerate(features):
        convs += isinstance(m, nn.Conv2d)
        pools += isinstance(m, nn.MaxPool2d)
        if n_conv is None and pools == n_pool:
            return i + 1
        block_end = isinstance(m, (nn.ReLU, nn.MaxPool2d))
        if n_conv is not None and convs == n_conv and pools == n_pool and block_end:
            return i + 1
    raise ConfigError(f"cut {cut!r} is not a prefix of VGG-16 (13 conv blocks, 5 max-pools: "
                      "2C+1M, 4C+2M, 7C+3M, 10C+4M, 13C+5M and the conv counts between)")


def vgg16_bn_split(*, num_classes: int, cut: int | str = 1, padding_mode: str = "zeros",
                   in_channels: int = 3, width: float = 1.0) -> tuple[nn.Sequential, nn.Sequential]:
    """AdptVFedConv's VGG-16-BN as ``(client feature extractor, server classifier)``.

    AdptVFedConv Sec. 4: a 3x16x16 tile -> extractor (2 conv blocks + the first max-pool)
    -> 64x8x8; the server assembles the 2x2 tiles' maps into 64x16x16 -> remaining VGG-16-BN
    blocks -> 512x1x1 -> FC 4096, 4096, ``num_classes`` with dropout 0.5. The classifier's
    ceil-mode max-pools also take a single tile's map (the server's pre-training on its own tile).

    ``cut`` (Fig. 4 / Table 3): an int counts max-pools (default 1 = "2C+1M"), a string uses
    Table 3's notation ("1C", "2C", "2C+1M", ..., "7C+3M"). ``padding_mode`` "replicate" is the
    paper's replication padding, on the extractor's convolutions only (the cut boundaries exist
    only in the clients' tiles). ``width`` multiplies every conv and hidden FC width (1: the
    paper's VGG-16-BN; e.g. 0.125 for quick CPU runs, then not the paper's model).
    """
    net = _vgg16_bn(num_classes, in_channels, width, padding_mode)
    end = _feature_cut(net.features, cut)
    extractor = net.features[:end]
    _pad(extractor, padding_mode)
    return extractor, nn.Sequential(net.features[end:], net.avgpool, nn.Flatten(1), net.classifier)


def vgg16_bn_generator(*, cut: int | str = 1, out_channels: int = 3,
                       width: float = 1.0) -> nn.Sequential:
    """The inverse of :func:`vgg16_bn_split`'s extractor: the client autoencoder's decoder.

    AdptVFedConv Sec. 4: each (Conv, BN, ReLU) block becomes a (ConvTranspose, BN, ReLU)
    block and each max-pool an upsampling layer, in reverse order; 64x8x8 -> 3x16x16 for the
    default cut. The last block is a bare ConvTranspose2d (no BN/ReLU) so it can output
    normalised pixels, which are negative as often as positive. ``width`` is the extractor's
    channel multiplier (see :func:`vgg16_bn_split`).
    """
    features = _vgg16_features_meta(_vgg_width(width))  # only the layer structure is needed
    end = _feature_cut(features, cut)
    layers: list[nn.Module] = []
    blocks = list(features[:end])
    for m in reversed(blocks):
        if isinstance(m, nn.MaxPool2d):
            layers.append(nn.Upsample(scale_factor=2, mode="nearest"))
        elif isinstance(m, nn.Conv2d):
            first = m is blocks[0]
            out = _positive_int("out_channels", out_channels) if first else m.in_channels
            layers.append(nn.ConvTranspose2d(m.out_channels, out, kernel_size=3, padding=1))
            if not first:
                layers += [nn.BatchNorm2d(out), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


def vgg16_bn_centralized(*, num_classes: int, padding_mode: str = "zeros",
                         in_channels: int = 3, width: float = 1.0) -> nn.Module:
    """The centralized VGG-16-BN upper bound for 32x32 images (AdptVFedConv Table 2): the split
    extractor + classifier as one network, so its head is the paper's 512 -> 4096 -> 4096 ->
    ``num_classes`` (dropout 0.5), not the common CIFAR 512 -> classes head. ``padding_mode``
    ("zeros" default, or "replicate") applies to every convolution; ``width`` as in
    :func:`vgg16_bn_split` (1 = the paper's model)."""
    net = _vgg16_bn(num_classes, in_channels, width, padding_mode)
    _pad(net.features, padding_mode)
    return net


# --------------------------------------------------------------------------- APC-VFL autoencoders


class SeluAutoencoder(nn.Module):
    """Symmetric autoencoder with SELU activations (APC-VFL Sec. 4, Appendix B Table 3).

    Encoder: Linear + SELU through ``layers`` (e.g. ``[a, 64, 128]``); SELU follows the last
    encoder layer too, as Table 3 lists SELU for the encoder with no exception, so the latent
    z is SELU-activated. Decoder: the widths mirrored, SELU between layers, the output layer
    linear (standardised features are any real number). Weights are LeCun-normal, the
    initialisation SELU's self-normalisation assumes (Klambauer et al. 2017).
    """

    def __init__(self, layers: Sequence[int]) -> None:
        super().__init__()
        widths = [_positive_int("layer width", w) for w in layers]
        if len(widths) < 2:
            raise ConfigError("layers needs at least input and latent widths, e.g. [a, 64, 128]; "
                              f"got {list(layers)}")
        self.layers = tuple(widths)
        self.encoder = nn.Sequential(*(m for i, o in pairwise(widths) for m in (nn.Linear(i, o), nn.SELU())))
        dec = [m for i, o in pairwise(widths[::-1]) for m in (nn.Linear(i, o), nn.SELU())]
        self.decoder = nn.Sequential(*dec[:-1])  # the output layer linear
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, nonlinearity="linear")  # = LeCun normal
                nn.init.zeros_(m.bias)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return self.decoder(z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


#: APC-VFL Appendix B Table 3: encoder widths; "a" = active participant's features (2..5),
#: "p" = passive participant's. g2A's 384 = g1A's 128 + g1P's 256 (the joint representation).
APC_VFL_ENCODERS: MappingProxyType[str, tuple[int | str, ...]] = MappingProxyType({
    "g1A": ("a", 64, 128),
    "g1P": ("p", 128, 256),
    "g2A": (384, 256, 256),
    "g3A": ("a", 256, 256),
})


def apc_vfl_autoencoder(which: str, *, a: int | None = None,
                        p: int | None = None) -> SeluAutoencoder:
    """The APC-VFL autoencoder ``which`` ("g1A", "g1P", "g2A", "g3A") of Table 3.

    ``a`` (active participant's feature count) is needed by g1A and g3A, ``p`` (passive
    participant's) by g1P; defaults None.
    """
    if which not in APC_VFL_ENCODERS:
        raise ConfigError(f"Invalid APC-VFL encoder {which!r}; "
                          f"choose one of {', '.join(APC_VFL_ENCODERS)}")
    sizes = {"a": a, "p": p}
    widths = []
    for w in APC_VFL_ENCODERS[which]:
        if isinstance(w, str):
            if sizes[w] is None:
                who = "active" if w == "a" else "passive"
                raise ConfigError(f"{which} needs {w}= (the {who} participant's feature count)")
            w = _positive_int(w, sizes[w])
        widths.append(w)
    return SeluAutoencoder(widths)


# --------------------------------------------------------------------------- Multi-VFL


class MultiVFLDataOwner(nn.Sequential):
    """A Multi-VFL data owner's model: one Conv2d(1 -> 32, kernel 3) + ReLU (Multi-VFL Sec. 4).

    Padding 1 keeps a strip's size (7x28 -> 32x7x28), so the 4 data owners' outputs re-join
    along the height into the 32x28x28 map the label owners take.
    """

    def __init__(self, in_channels: int = 1) -> None:
        in_channels = _positive_int("in_channels", in_channels)
        super().__init__(nn.Conv2d(in_channels, 32, 3, padding=1), nn.ReLU())


class MultiVFLLabelOwner(nn.Sequential):
    """A Multi-VFL label owner's model: one conv and two linear layers (Multi-VFL Sec. 4).

    Widths are PyTorch's MNIST example, whose first conv the data owners hold: Conv2d(32 -> 64,
    kernel 3, no padding) + ReLU + MaxPool(2) -> Linear(64*13*13 -> 128) + ReLU ->
    Linear(128 -> ``num_classes``) (default 10). ``input_hw`` is the joined map's size
    (default (28, 28)).
    """

    def __init__(self, num_classes: int = 10, *, input_hw: tuple[int, int] = (28, 28)) -> None:
        h, w = (_positive_int("input_hw", s) for s in input_hw)
        if h < 4 or w < 4:
            raise ConfigError("input_hw must be at least (4, 4) for the 3x3 convolution and the "
                              f"pooling; got {input_hw!r}")
        flat = 64 * ((h - 2) // 2) * ((w - 2) // 2)
        super().__init__(
            nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(flat, 128), nn.ReLU(),
            nn.Linear(128, _positive_int("num_classes", num_classes)),
        )
