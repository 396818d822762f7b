"""Tests for vflkit.models: party models (h, p), VGG-16-BN split, SELU autoencoders, Multi-VFL."""

import pytest
import torch
from torch import nn

from vflkit.errors import ConfigError, PartitionError
from vflkit.models import (
    APC_VFL_ENCODERS,
    MODELS,
    MultiVFLDataOwner,
    TABULAR_MODELS,
    MultiVFLLabelOwner,
    PartyModel,
    SeluAutoencoder,
    apc_vfl_autoencoder,
    get_model,
    vgg16_bn_centralized,
    vgg16_bn_generator,
    vgg16_bn_split,
)

# Full images, MNIST width/height strips (4 parties), 2x2 tiles, EASTER's 10-party strips
# (28/10 -> widths 3 and 2) and CIFAR width strips.
STRIPS = [(1, 28, 28), (3, 32, 32), (1, 28, 7), (1, 7, 28), (1, 14, 14), (3, 16, 16),
          (1, 28, 3), (1, 28, 2), (3, 32, 8)]
RATIOS = [(1, 1), (2, 1), (1, 2)]
CRITEO = {"vocab_sizes": [7, 11, 5], "n_dense": 4}
# ResNet-50/101 are checked once each, in one test, to keep the file fast.
CHEAP = [m for m in MODELS if m not in ("resnet50", "resnet101")]


def _criteo_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    dense = torch.randn(2, CRITEO["n_dense"], generator=g)
    codes = [torch.randint(0, v, (2,), generator=g) for v in CRITEO["vocab_sizes"]]
    sparse = torch.stack(codes, dim=1)
    return dense, sparse


def _build(name: str, shape=(1, 28, 7), **kw) -> PartyModel:
    torch.manual_seed(0)
    if name in TABULAR_MODELS:
        return get_model(name, input_shape=(7,), num_classes=2, **CRITEO, **kw)
    return get_model(name, input_shape=shape, num_classes=10, **kw)


def _input(name: str, shape=(1, 28, 7)):
    if name in TABULAR_MODELS:
        return _criteo_batch()
    return torch.randn(2, *shape, generator=torch.Generator().manual_seed(1))


def _weight_layers(module: nn.Module) -> int:
    return sum(isinstance(m, (nn.Conv2d, nn.Linear)) for m in module.modules())


# --------------------------------------------------------------------------- shapes


@pytest.mark.parametrize("name", ["mlp", "cnn", "lenet"])
@pytest.mark.parametrize("el_pl", RATIOS)
def test_small_models_on_every_strip_shape(name, el_pl):
    """MLP, CNN and LeNet map every strip shape to a [2, 128] embedding and [2, 10] logits."""
    for shape in STRIPS:
        model = _build(name, shape, el_pl=el_pl)
        with torch.no_grad():
            e = model.embed(_input(name, shape))
            logits = model.predict(e)
        assert e.shape == (2, 128) and logits.shape == (2, 10), shape


@pytest.mark.parametrize("name", ["resnet18", "resnet34"])
def test_resnets_on_every_strip_shape(name):
    """ResNet-18/34 with the small-input stem take full images, strips, tiles and 2-wide strips."""
    for shape in STRIPS:
        model = _build(name, shape)
        with torch.no_grad():
            e = model.embed(_input(name, shape))
            logits = model.predict(e)
        assert e.shape == (2, 128) and logits.shape == (2, 10), shape
        assert model.embedding[0][0].in_channels == shape[0]


@pytest.mark.parametrize("name,shape", [("resnet50", (1, 28, 2)), ("resnet101", (3, 32, 8))])
def test_deep_resnets(name, shape):
    """ResNet-50/101: shapes, forward == predict(embed), and gradients reach h and p."""
    model = _build(name, shape).eval()
    x = _input(name, shape)
    with torch.no_grad():
        e = model.embed(x)
        assert e.shape == (2, 128)
        assert torch.allclose(model(x), model.predict(e))
    model.train()
    nn.functional.cross_entropy(model(x), torch.tensor([0, 1])).backward()
    for part in (model.embedding, model.prediction):
        assert all(p.grad is not None for p in part.parameters())


def test_resnet_stem_is_small_input_stem():
    """The ResNet stem is a 3x3 stride-1 convolution without max-pool (no early downsampling)."""
    model = _build("resnet18", (1, 28, 2))
    stem = model.embedding[0]
    conv = stem[0]
    assert conv.kernel_size == (3, 3) and conv.stride == (1, 1)
    assert not any(isinstance(m, nn.MaxPool2d) for m in model.modules())


def test_mlp_on_tabular_input():
    """MLP accepts a tabular (n_features,) input, e.g. UCI Credit Card's 23 columns."""
    torch.manual_seed(0)
    model = get_model("mlp", input_shape=(23,), num_classes=2)
    assert model(torch.randn(2, 23)).shape == (2, 2)


@pytest.mark.parametrize("name", CHEAP)
def test_forward_equals_predict_of_embed(name):
    """forward(x) == predict(embed(x)) for every registry model."""
    model = _build(name).eval()
    x = _input(name)
    with torch.no_grad():
        assert torch.allclose(model(x), model.predict(model.embed(x)))


@pytest.mark.parametrize("name", ["mlp", "cnn", "lenet", "resnet18", "deepfm", "wide_deep", "cnn_tabular"])
@pytest.mark.parametrize("dim", [16, 64, 256])
def test_embedding_dim_respected(name, dim):
    """h outputs exactly embedding_dim features and p takes them."""
    model = _build(name, embedding_dim=dim)
    e = model.embed(_input(name))
    assert model.embedding_dim == dim and e.shape == (2, dim)
    assert model.predict(e).shape[0] == 2


# --------------------------------------------------------------------------- EL:PL


@pytest.mark.parametrize("name", ["mlp", "cnn", "lenet", "deepfm", "wide_deep", "cnn_tabular"])
@pytest.mark.parametrize("el_pl", RATIOS)
def test_el_pl_weight_layer_counts(name, el_pl):
    """Weight layers in h and p follow EL:PL exactly; the split layer is embedding_dim wide."""
    model = _build(name, el_pl=el_pl)
    n_el, n_pl = model.layers
    assert n_el * el_pl[1] == n_pl * el_pl[0]
    deep = model.embedding.deep if name in TABULAR_MODELS else model.embedding
    assert sum(isinstance(m, nn.Conv1d) for m in deep.modules()) + _weight_layers(deep) == len(deep) == n_el
    assert _weight_layers(model.prediction) == len(model.prediction) == n_pl
    if name in ("mlp", "cnn", "lenet", "cnn_tabular"):
        split = [m for m in deep[-1].modules() if isinstance(m, nn.Linear)][-1]
        assert split.out_features == 128


def test_el_pl_keeps_paper_depth_where_divisible():
    """LeNet keeps its 6 layers (3 conv + 3 FC) under 1:1, 2:1, 1:2; CNN its 4 under 1:1."""
    assert [_build("lenet", el_pl=r).layers for r in RATIOS] == [(3, 3), (4, 2), (2, 4)]
    cnn = _build("cnn")
    assert cnn.layers == (2, 2)
    # One 3x3 convolution plus the map-sized one at the split (computed as a Linear).
    assert sum(isinstance(m, nn.Conv2d) for m in cnn.embedding.modules()) == 1
    assert not any(isinstance(m, nn.Conv2d) for m in cnn.prediction.modules())


@pytest.mark.parametrize("el_pl,expected", [((1, 1), (3, 3)), ((2, 1), (4, 2)), ((1, 2), (2, 4))])
def test_resnet_el_pl_splits_stages(el_pl, expected):
    """ResNet-18's stem, 4 stages and classifier split by EL:PL with all 8 residual blocks kept."""
    model = _build("resnet18", el_pl=el_pl)
    assert model.layers == expected == (len(model.embedding), len(model.prediction))
    blocks = [m for m in model.modules() if type(m).__name__ == "BasicBlock"]
    assert len(blocks) == 8
    assert model(_input("resnet18")).shape == (2, 10)


def test_resnet_rejects_ratio_that_does_not_split_six():
    """A ratio that does not divide ResNet's 6 layers is a ConfigError listing the valid ones."""
    with pytest.raises(ConfigError, match=r"\(1, 1\)"):
        _build("resnet18", el_pl=(3, 1))


# --------------------------------------------------------------------------- training behaviour


@pytest.mark.parametrize("name", CHEAP)
def test_gradient_reaches_h_and_p(name):
    """A loss on the logits gives every parameter of h and p a gradient, not all zero."""
    model = _build(name)
    target = torch.tensor([0, 1])
    nn.functional.cross_entropy(model(_input(name)), target).backward()
    for part in (model.embedding, model.prediction):
        grads = [p.grad for p in part.parameters() if p.requires_grad and p.numel()]
        assert grads and all(g is not None for g in grads)
        assert sum(g.abs().sum() for g in grads) > 0


@pytest.mark.parametrize("name", ["mlp", "lenet", "resnet18", "deepfm"])
def test_initialisation_is_deterministic(name):
    """The same seed builds identical weights; another seed builds different ones."""
    a, b = _build(name).state_dict(), _build(name).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    torch.manual_seed(1)
    kw = {"input_shape": (7,), "num_classes": 2, **CRITEO} if name == "deepfm" else \
        {"input_shape": (1, 28, 7), "num_classes": 10}
    c = get_model(name, **kw).state_dict()
    assert any(not torch.equal(a[k], c[k]) for k in a if a[k].is_floating_point())


# --------------------------------------------------------------------------- registry errors


def test_models_tuple_lists_the_registry():
    """MODELS names the ten architectures of the papers (EASTER's Criteo CNN included)."""
    assert set(MODELS) == {"mlp", "cnn", "lenet", "resnet18", "resnet34", "resnet50", "resnet101",
                           "deepfm", "wide_deep", "cnn_tabular"}
    assert set(TABULAR_MODELS) == {"deepfm", "wide_deep", "cnn_tabular"}


def test_unknown_model_lists_valid_names():
    """An unknown name is a ConfigError that lists every valid name."""
    with pytest.raises(ConfigError, match="resnet19") as info:
        get_model("resnet19", input_shape=(3, 32, 8), num_classes=10)
    assert all(name in str(info.value) for name in MODELS)


@pytest.mark.parametrize("name,shape", [("cnn", (784,)), ("lenet", (1, 28)),
                                        ("resnet18", (1, 0, 7)), ("mlp", ()),
                                        ("cnn", (1, 28, 7, 1))])
def test_bad_input_shape_says_what_is_expected(name, shape):
    """A shape the architecture cannot take is a ConfigError saying what it expects."""
    with pytest.raises(ConfigError, match="expects input_shape"):
        get_model(name, input_shape=shape, num_classes=10)


@pytest.mark.parametrize("kwargs,match", [
    ({"el_pl": (0, 1)}, "EL"), ({"el_pl": (1,)}, "pair"), ({"embedding_dim": 0}, "embedding_dim"),
    ({"num_classes": 0}, "num_classes"), ({"vocab_sizes": [3]}, "Unknown option"),
])
def test_bad_options_are_config_errors(kwargs, match):
    """Invalid el_pl, sizes or options meant for another model are ConfigErrors."""
    base = {"input_shape": (1, 28, 7), "num_classes": 10}
    with pytest.raises(ConfigError, match=match):
        get_model("cnn", **{**base, **kwargs})


# --------------------------------------------------------------------------- Criteo


@pytest.mark.parametrize("name", TABULAR_MODELS)
def test_criteo_models_on_dense_sparse_input(name):
    """DeepFM / Wide&Deep / the Criteo CNN take (dense, sparse) or one joined tensor, giving the same 2 logits."""
    model = _build(name).eval()
    dense, sparse = _criteo_batch()
    with torch.no_grad():
        pair = model((dense, sparse))
        joined = model(torch.cat([dense, sparse.float()], dim=1))
    assert pair.shape == (2, 2) and torch.allclose(pair, joined)


def test_deepfm_embedding_holds_first_order_fm_and_deep_parts():
    """DeepFM's embedding is [first-order (1) | FM vector (8) | deep (119)]; FM = pairwise sum."""
    model = _build("deepfm").eval()
    h = model.embedding
    dense, sparse = _criteo_batch()
    with torch.no_grad():
        e = model.embed((dense, sparse))
        emb = h.field_embedding(sparse + h.offsets)
        fields = torch.cat([emb, dense.unsqueeze(-1) * h.dense_vectors], dim=1)
        n = fields.shape[1]
        pairwise = sum(fields[:, i] * fields[:, j] for i in range(n) for j in range(i + 1, n))
    assert h.deep[-1][0].out_features == 128 - 1 - 8
    assert torch.allclose(e[:, 1:9], pairwise, atol=1e-6)


def test_criteo_input_errors():
    """Category codes out of range or the wrong number of columns are PartitionErrors."""
    model = _build("wide_deep")
    dense, sparse = _criteo_batch()
    with pytest.raises(PartitionError, match="vocab"):
        model((dense, sparse + 100))
    with pytest.raises(PartitionError, match="dense"):
        model((dense[:, :2], sparse))


def test_criteo_models_need_vocab_and_dense_counts():
    """Missing vocab_sizes/n_dense or an input_shape that disagrees is a ConfigError."""
    with pytest.raises(ConfigError, match="vocab_sizes"):
        get_model("deepfm", input_shape=(7,), num_classes=2)
    with pytest.raises(ConfigError, match=r"\(7,\)"):
        get_model("deepfm", input_shape=(9,), num_classes=2, **CRITEO)


def test_cnn_tabular_convolves_over_field_embeddings():
    """The Criteo CNN reads the [B, k, F] field matrix (dense fields = value x vector, sparse
    fields looked up) and, at 1:1, is conv + pool then the embedding layer, then 2 FC."""
    model = _build("cnn_tabular").eval()
    h = model.embedding
    dense, sparse = _criteo_batch()
    with torch.no_grad():
        fields = h.fields((dense, sparse))
        emb = h.field_embedding(sparse + h.offsets)
    assert fields.shape == (2, 8, CRITEO["n_dense"] + len(CRITEO["vocab_sizes"]))
    assert torch.allclose(fields[:, :, :4], (dense.unsqueeze(-1) * h.dense_vectors).transpose(1, 2))
    assert torch.allclose(fields[:, :, 4:], emb.transpose(1, 2))
    assert model.layers == (2, 2)
    assert isinstance(h.deep[0][0], nn.Conv1d) and h.deep[0][0].in_channels == 8
    assert isinstance(h.deep[0][-1], nn.MaxPool1d)
    # One column only (a party of Table VI may hold a single field): padding and ceil pooling.
    one = get_model("cnn_tabular", input_shape=(1,), num_classes=2, vocab_sizes=[], n_dense=1)
    assert one(torch.randn(3, 1)).shape == (3, 2)


# --------------------------------------------------------------------------- AdptVFedConv VGG-16-BN


def _assemble(maps: list[torch.Tensor]) -> torch.Tensor:
    """2x2 tiles' maps (row-major) -> one map, as the AdptVFedConv server does."""
    return torch.cat([torch.cat(maps[:2], dim=3), torch.cat(maps[2:], dim=3)], dim=2)


def test_vgg_split_default_cut_shapes():
    """cut=1: 3x16x16 tile -> 64x8x8; the assembled 64x16x16 map -> server classifier -> logits."""
    torch.manual_seed(0)
    extractor, classifier = vgg16_bn_split(num_classes=10)
    tiles = torch.randn(2, 3, 32, 32).split(16, dim=2)
    maps = [extractor(t) for row in tiles for t in row.split(16, dim=3)]
    assert all(m.shape == (2, 64, 8, 8) for m in maps)
    assert classifier(_assemble(maps)).shape == (2, 10)
    assert sum(isinstance(m, nn.Conv2d) for m in extractor.modules()) == 2
    assert sum(isinstance(m, nn.Conv2d) for m in classifier.modules()) == 11
    fc = [m.out_features for m in classifier.modules() if isinstance(m, nn.Linear)]
    assert fc == [4096, 4096, 10]


@pytest.mark.parametrize("cut,map_shape,n_conv", [
    (2, (128, 4, 4), 4), ("3C+1M", (128, 8, 8), 3),
    ("7C+3M", (256, 2, 2), 7), ("2C", (64, 16, 16), 2),
])
def test_vgg_split_deeper_cuts(cut, map_shape, n_conv):
    """Deeper extractors (Table 3, Fig. 4) give the expected maps; the classifier takes them."""
    torch.manual_seed(0)
    extractor, classifier = vgg16_bn_split(num_classes=10, cut=cut)
    f = extractor(torch.randn(2, 3, 16, 16))
    assert f.shape == (2, *map_shape)
    assert sum(isinstance(m, nn.Conv2d) for m in extractor.modules()) == n_conv
    assert classifier(_assemble([f] * 4)).shape == (2, 10)


def test_vgg_classifier_also_takes_one_tile_map():
    """The server classifier accepts one tile's 64x8x8 map (server pre-training on its own tile)."""
    torch.manual_seed(0)
    _, classifier = vgg16_bn_split(num_classes=10)
    assert classifier(torch.randn(2, 64, 8, 8)).shape == (2, 10)


def test_vgg_replication_padding_is_used():
    """padding_mode='replicate' sets every extractor conv to replicate and changes its output."""
    torch.manual_seed(0)
    zeros, zero_cls = vgg16_bn_split(num_classes=10)
    rep, rep_cls = vgg16_bn_split(num_classes=10, padding_mode="replicate")
    rep.load_state_dict(zeros.state_dict())
    convs = [m for m in rep.modules() if isinstance(m, nn.Conv2d)]
    assert convs and all(m.padding_mode == "replicate" for m in convs)
    assert all(m.padding_mode == "zeros" for m in rep_cls.modules() if isinstance(m, nn.Conv2d))
    x = torch.rand(2, 3, 16, 16) + 1  # positive pixels: zero padding darkens the border
    zeros.eval(), rep.eval()
    with torch.no_grad():
        assert not torch.allclose(zeros(x), rep(x))


def test_vgg_bad_options():
    """An unknown padding mode or a cut that is not a VGG-16 prefix is a ConfigError."""
    with pytest.raises(ConfigError, match="replicate"):
        vgg16_bn_split(num_classes=10, padding_mode="reflect")
    with pytest.raises(ConfigError, match="prefix"):
        vgg16_bn_split(num_classes=10, cut="1C+1M")
    with pytest.raises(ConfigError, match="1..5"):
        vgg16_bn_split(num_classes=10, cut=0)


@pytest.mark.parametrize("cut,map_shape", [(1, (64, 8, 8)), (2, (128, 4, 4))])
def test_vgg_generator_inverts_the_extractor(cut, map_shape):
    """The generator maps the extractor's output back to a 3x16x16 tile with (ConvT, BN, ReLU)."""
    torch.manual_seed(0)
    generator = vgg16_bn_generator(cut=cut)
    assert generator(torch.randn(2, *map_shape)).shape == (2, 3, 16, 16)
    n_conv = 2 if cut == 1 else 4
    assert sum(isinstance(m, nn.ConvTranspose2d) for m in generator.modules()) == n_conv
    assert sum(isinstance(m, nn.BatchNorm2d) for m in generator.modules()) == n_conv - 1
    assert isinstance(generator[-1], nn.ConvTranspose2d)  # linear output: normalised pixels


def test_vgg_centralized_on_32x32():
    """The centralized VGG-16-BN maps a 32x32 image to logits through the 512-input head."""
    torch.manual_seed(0)
    model = vgg16_bn_centralized(num_classes=100)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 100)
    assert model.classifier[0].in_features == 512


# --------------------------------------------------------------------------- APC-VFL


def test_selu_autoencoder_is_symmetric():
    """Encoder widths follow layers, the decoder mirrors them; SELU but a linear output layer."""
    torch.manual_seed(0)
    ae = SeluAutoencoder([5, 64, 128])
    enc = [(m.in_features, m.out_features) for m in ae.encoder if isinstance(m, nn.Linear)]
    dec = [(m.in_features, m.out_features) for m in ae.decoder if isinstance(m, nn.Linear)]
    assert enc == [(5, 64), (64, 128)] and dec == [(128, 64), (64, 5)]
    assert isinstance(ae.encoder[-1], nn.SELU) and isinstance(ae.decoder[-1], nn.Linear)
    x = torch.randn(2, 5)
    assert ae.encode(x).shape == (2, 128) and ae(x).shape == (2, 5)
    assert torch.allclose(ae(x), ae.decode(ae.encode(x)))


def test_apc_vfl_table3_widths():
    """The four autoencoders have Table 3's widths; g2A takes g1A's and g1P's latents joined."""
    assert APC_VFL_ENCODERS["g1A"] == ("a", 64, 128) and APC_VFL_ENCODERS["g1P"] == ("p", 128, 256)
    got = {w: apc_vfl_autoencoder(w, a=3, p=20).layers for w in APC_VFL_ENCODERS}
    assert got == {"g1A": (3, 64, 128), "g1P": (20, 128, 256), "g2A": (384, 256, 256),
                   "g3A": (3, 256, 256)}
    assert got["g1A"][-1] + got["g1P"][-1] == got["g2A"][0]


def test_apc_vfl_autoencoder_errors():
    """An unknown encoder name or a missing feature count is a ConfigError."""
    with pytest.raises(ConfigError, match="g1A"):
        apc_vfl_autoencoder("g4A")
    with pytest.raises(ConfigError, match="a="):
        apc_vfl_autoencoder("g3A", p=4)


# --------------------------------------------------------------------------- Multi-VFL


def test_multi_vfl_strips_rejoin_into_label_owner_input():
    """4 strips 1x7x28 -> data owners -> 32x7x28 -> joined 32x28x28 -> label owner -> [2, 10]."""
    torch.manual_seed(0)
    owners = [MultiVFLDataOwner() for _ in range(4)]
    label_owner = MultiVFLLabelOwner(num_classes=10)
    strips = torch.randn(2, 1, 28, 28).split(7, dim=2)
    outs = [owner(s) for owner, s in zip(owners, strips)]
    assert all(o.shape == (2, 32, 7, 28) for o in outs)
    assert label_owner(torch.cat(outs, dim=2)).shape == (2, 10)
    convs = [m for m in owners[0].modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 1
    assert (convs[0].in_channels, convs[0].out_channels, convs[0].kernel_size) == (1, 32, (3, 3))
    weights = [type(m) for m in label_owner if isinstance(m, (nn.Conv2d, nn.Linear))]
    assert weights == [nn.Conv2d, nn.Linear, nn.Linear]


def test_resnet_cut_by_weighted_layers_gives_resnet50_and_resnet101_different_embedding_networks():
    """EASTER's "the number of layers in both ... was the same": under the "layers" reading h holds
    half a ResNet's weighted layers (at a block boundary), so ResNet50 and ResNet101, which the
    six-unit "stages" reading cut to the same h, train different bottom networks; ResNet18 is cut
    alike by both readings, module for module."""
    import torch
    from vflkit.models import get_model, resnet_cut_blocks

    shape = (3, 32, 8)
    expected = {"resnet18": (9, 9), "resnet34": (17, 17), "resnet50": (25, 25), "resnet101": (49, 52)}
    sizes = {}
    for arch, layers in expected.items():
        m = get_model(arch, input_shape=shape, num_classes=10, cut="layers")
        assert m.layers == layers and sum(layers) == int(arch[6:])
        out = m(torch.randn(2, *shape))
        assert out.shape == (2, 10)
        out.sum().backward()
        assert all(p.grad is not None for p in m.parameters())
        sizes[arch] = sum(p.numel() for p in m.embedding.parameters())
        stages = get_model(arch, input_shape=shape, num_classes=10)
        sizes[arch, "stages"] = sum(p.numel() for p in stages.embedding.parameters())
    assert sizes["resnet50", "stages"] == sizes["resnet101", "stages"]  # the defect of the old reading
    assert sizes["resnet101"] > sizes["resnet50"]
    torch.manual_seed(0)
    a = get_model("resnet18", input_shape=shape, num_classes=10, cut="layers").state_dict()
    torch.manual_seed(0)
    b = get_model("resnet18", input_shape=shape, num_classes=10, cut="stages").state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert resnet_cut_blocks("resnet101", (1, 1), "layers") == 16  # 49 | 52: a tie goes to the smaller h
    with pytest.raises(ConfigError, match="resnet cut 'half'"):
        resnet_cut_blocks("resnet50", (1, 1), "half")


def test_a_run_config_keeps_its_key_where_the_resnet_readings_agree():
    """resnet_cut="layers" changes the key only of configs whose ResNets it cuts differently:
    a ResNet18 run (cut alike) and a run without ResNets keep the key of their records."""
    from vflkit.methods import RunConfig

    def cfg(models, cut):
        return RunConfig(paper="vfedmh", dataset="cifar10", method="splitnn", models=models, resnet_cut=cut)

    assert cfg(("resnet18",) * 4, "layers").key == cfg(("resnet18",) * 4, "stages").key
    assert cfg(("resnet18",) * 4, "layers").resnet_cut == "stages"
    assert cfg(("lenet",) * 4, "layers").key == cfg(("lenet",) * 4, "stages").key
    assert cfg(("resnet50",) * 4, "layers").key != cfg(("resnet50",) * 4, "stages").key
    assert cfg(("resnet18", "resnet50", "resnet101", "resnet18"), "layers").resnet_cut == "layers"
    with pytest.raises(ConfigError, match="Invalid resnet_cut 'half'"):
        cfg(("resnet50",) * 4, "half")
