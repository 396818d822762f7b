"""Tests for vflkit.methods: the common interface and the information flow of each method."""

import pytest
import torch

from vflkit.comm import Channel, Party
from vflkit.methods import RunConfig
from vflkit.methods import METHODS, get_method
from vflkit.partition import strips


def _parties(n_parties=4, n=64, seed=0, n_classes=10):
    torch.manual_seed(seed)
    x = torch.randint(0, 256, (n, 1, 28, 28), dtype=torch.uint8)
    y = torch.randint(0, n_classes, (n,))
    parts = strips(n_parties, image_shape=(1, 28, 28)).split(x)
    ch = Channel()
    parties = [
        Party("active" if k == 0 else f"passive_{k}", channel=ch,
              features={"train": parts[k].contiguous(), "test": parts[k].contiguous()},
              labels={"train": y, "test": y} if k == 0 else None,
              transform=lambda t: t.float() / 255)
        for k in range(n_parties)
    ]
    return ch, parties


def _method(name, parties, num_classes=10, models=None, **cfg):
    if models is None:
        mixed = get_method(name).model_mix == "heterogeneous"
        models = tuple("lenet" if mixed and k % 2 else "mlp" for k in range(len(parties)))
    config = RunConfig(paper="demo", dataset="mnist", method=name, models=models,
                       n_parties=len(parties), embedding_dim=16, lr=0.1, **cfg)
    method = get_method(name)(config, parties, num_classes=num_classes)
    method.setup()
    return method


def _snapshot(party):
    return {f"{m}.{n}": p.detach().clone() for m, mod in party.models.items() for n, p in mod.named_parameters()}


def _changed(before, party):
    now = _snapshot(party)
    return {k for k in before if not torch.equal(before[k], now[k])}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_every_method_follows_the_interface(name):
    """Each registered method trains a step, predicts logits per trained model and leaves no message unread."""
    ch, parties = _parties()
    method = _method(name, parties)
    losses = method.train_step(torch.arange(32))
    assert set(losses) == set(method.trained_models())
    logits = method.predict(torch.arange(8), "test")
    assert {k: tuple(v.shape) for k, v in logits.items()} == {k: (8, 10) for k in method.trained_models()}
    assert ch.pending() == 0
    metrics = method.evaluate(batch_size=16)
    assert 0.0 <= metrics["active"]["test_accuracy"] <= 1.0


def test_splitnn_messages_per_step():
    """SplitNN sends each passive embedding up and one cut-layer gradient back, nothing else."""
    ch, parties = _parties()
    method = _method("splitnn", parties)
    method.train_step(torch.arange(32))
    df = ch.ledger.frame()
    sent = sorted(zip(df.sender, df.receiver, df.kind))
    expected = sorted([(f"passive_{k}", "active", "embedding") for k in (1, 2, 3)]
                      + [("active", f"passive_{k}", "gradient") for k in (1, 2, 3)])
    assert sent == expected
    assert (df.nbytes == 32 * 16 * 4).all()  # batch x embedding x float32


def test_splitnn_passive_learns_only_from_the_gradient_message():
    """A passive party's bottom model changes only through the gradient message it receives."""
    ch, parties = _parties()
    method = _method("splitnn", parties)
    before = [_snapshot(p) for p in parties]
    # Intercept: every gradient message is replaced by zeros on the wire.
    original = ch.send

    def zero_gradients(sender, receiver, kind, payload, *, nbytes=None):
        if kind == "gradient":
            payload = torch.zeros_like(payload)
        original(sender, receiver, kind, payload, nbytes=nbytes)

    ch.send = zero_gradients
    method.train_step(torch.arange(32))
    assert _changed(before[0], parties[0])  # the active party learns from its own loss
    for p, b in zip(parties[1:], before[1:]):
        assert not _changed(b, p), f"{p.name} changed without a gradient message"
    ch.send = original
    method.train_step(torch.arange(32))
    for p, b in zip(parties[1:], before[1:]):
        assert _changed(b, p), f"{p.name} did not learn from its gradient message"


def test_local_sends_nothing_and_trains_only_the_active_party():
    """Local touches no passive party and sends no message."""
    ch, parties = _parties()
    method = _method("local", parties)
    method.train_step(torch.arange(32))
    assert len(ch.ledger) == 0
    assert all(not p.models for p in parties[1:])


def test_binary_tasks_report_f1_and_auc():
    """With two classes, evaluation adds F1 and ROC AUC to accuracy."""
    ch, parties = _parties(n_classes=2)
    method = _method("splitnn", parties, num_classes=2)
    metrics = method.evaluate(batch_size=16)["active"]
    assert set(metrics) == {"test_accuracy", "test_f1", "test_auc"}
    assert 0 <= metrics["test_f1"] <= 1 and 0 <= metrics["test_auc"] <= 1


# --------------------------------------------------------------------------- VFedMH


def _vfedmh(parties, **options):
    return _method("vfedmh", parties, models=("mlp", "lenet", "cnn", "mlp"), options=options)


def test_vfedmh_four_rounds_per_step_and_blinded_embeddings():
    """VFedMH sends blinded embeddings up, E down, predictions up and each loss down: 4 rounds."""
    ch, parties = _parties()
    method = _vfedmh(parties)
    from vflkit.comm import Ledger

    setup = ch.ledger.frame()
    assert set(setup.kind) == {"public_key"} and len(setup) == 6  # 3 keys up, 3 key sets down
    ch.ledger = Ledger()
    seen = {}
    original = ch.send

    def spy(sender, receiver, kind, payload, *, nbytes=None):
        seen.setdefault(kind, []).append(payload)
        original(sender, receiver, kind, payload, nbytes=nbytes)

    ch.send = spy
    method.train_step(torch.arange(32))
    df = ch.ledger.frame()
    sent = sorted(zip(df.sender, df.receiver, df.kind))
    expected = sorted([(f"passive_{k}", "active", kind) for k in (1, 2, 3) for kind in ("embedding", "prediction")]
                      + [("active", f"passive_{k}", kind) for k in (1, 2, 3) for kind in ("global_embedding", "loss")])
    assert sent == expected
    assert ch.ledger.totals()["rounds"] == 4
    # What the active party receives of a passive embedding is int64 ring noise, not floats.
    assert all(e.dtype == torch.int64 for e in seen["embedding"])
    assert min(e.abs().float().mean().item() for e in seen["embedding"]) > 2.0**50


def test_vfedmh_each_party_updates_with_its_own_loss_only():
    """Party k's applied gradient equals the gradient of L_k = CE(p_k(E), y) for its own θ_k,
    where E is the mean of all local embeddings; other parties' losses, which also depend on
    h_k through E, contribute nothing."""
    import copy

    import torch.nn.functional as F

    ch, parties = _parties()
    method = _vfedmh(parties)
    models = {p.name: copy.deepcopy(p.models["model"]) for p in parties}
    ids = torch.arange(32)
    before = {p.name: [w.detach().clone() for w in p.models["model"].parameters()] for p in parties}
    method.train_step(ids)
    applied = {p.name: [(b - w.detach()) / 0.1 for b, w in zip(before[p.name], p.models["model"].parameters())]
                for p in parties}
    # Reference: one centralised graph over all parties (the test may see everything).
    x = {p.name: p.features("train", ids=ids) for p in parties}
    y = parties[0].labels("train", ids=ids)
    e = torch.stack([models[n].embed(x[n]) for n in models]).mean(0)
    for k in models:
        own = list(models[k].parameters())
        loss_k = F.cross_entropy(models[k].predict(e), y)
        grads = torch.autograd.grad(loss_k, own + [w for j in models if j != k for w in models[j].embedding.parameters()],
                                    retain_graph=True)
        for g, a in zip(grads[:len(own)], applied[k]):
            torch.testing.assert_close(a, g, atol=2e-4, rtol=1e-3)
        # L_k does reach the other parties' embedding networks through E ...
        assert any(g.abs().sum() > 0 for g in grads[len(own):])
    # ... yet each party's update matched its own loss alone (checked above for every k).


def test_vfedmh_blinding_does_not_change_training():
    """With and without blinding factors, one step gives the same models (masks cancel)."""
    results = []
    for blinding in (True, False):
        _, parties = _parties()
        torch.manual_seed(1)
        method = _vfedmh(parties, blinding=blinding)
        method.train_step(torch.arange(32))
        results.append(method.predict(torch.arange(16)))
    for k in results[0]:
        torch.testing.assert_close(results[0][k], results[1][k], atol=1e-4, rtol=1e-4)


def test_homo_and_heter_variants_check_the_model_mix():
    """Homo_ variants refuse mixed models, Heter_aggVFL refuses identical ones."""
    from vflkit.errors import ConfigError

    _, parties = _parties()
    with pytest.raises(ConfigError, match="homogeneous"):
        _method("homo_vfedmh", parties, models=("mlp", "cnn", "mlp", "mlp"))
    with pytest.raises(ConfigError, match="heterogeneous"):
        _method("heter_aggvfl", parties, models=("mlp",) * 4)


#: Protocol phases per training step of each method (VFedMH Fig. 3: 4 against the baselines' 2).
PHASES_PER_STEP = {"local": 0, "splitnn": 2, "pyvertical": 2, "c_vfl": 2, "agg_vfl": 2, "homo_aggvfl": 2,
                   "heter_aggvfl": 2, "vfedmh": 4, "homo_vfedmh": 4, "easter": 4}


@pytest.mark.parametrize("name", sorted(METHODS))
def test_ledger_counts_each_methods_protocol_phases(name):
    """Two steps of every method: rounds = phases per step x 2, the same in the totals, per
    epoch, for every party that communicates, and in the per-link rows that price the run."""
    from vflkit.network import Link, NetworkModel, price_links

    assert set(PHASES_PER_STEP) == set(METHODS)
    ch, parties = _parties()
    method = _method(name, parties, **({"options": {"local_iterations": 2}} if name == "c_vfl" else {}))
    from vflkit.comm import Ledger

    ch.ledger = Ledger()  # leave out the set-up (VFedMH's keys)
    for step in range(2):
        ch.at(epoch=1, step=step, phase="train")
        method.train_step(torch.arange(16 * step, 16 * step + 16))
    expected = 2 * PHASES_PER_STEP[name]
    ledger = ch.ledger
    assert ledger.totals()["rounds"] == expected
    if expected:
        assert ledger.per_epoch().loc[1, "rounds"] == expected
        assert set(ledger.per_party()["rounds"]) == {expected}
        net = NetworkModel(default=Link(8.0, 10.0))
        assert price_links(ledger.per_link(), net) == pytest.approx(ledger.price(net))


# --------------------------------------------------------------------------- Agg_VFL, C-VFL


def test_aggvfl_sends_predictions_up_and_their_gradients_down():
    """Agg_VFL: each passive party sends its logits and receives dL/dR_k, nothing else."""
    ch, parties = _parties()
    method = _method("agg_vfl", parties)
    method.train_step(torch.arange(32))
    df = ch.ledger.frame()
    assert sorted(zip(df.sender, df.kind)) == sorted(
        [(f"passive_{k}", "prediction") for k in (1, 2, 3)] + [("active", "gradient")] * 3)
    assert (df.nbytes == 32 * 10 * 4).all()  # batch x classes x float32


@pytest.mark.parametrize("compressor", ["scalar", "vector"])
def test_quantizers_stay_within_one_cell(compressor):
    """b-bit quantisation errs by at most one lattice cell of x's range and costs b bits per value."""
    from vflkit.methods.cvfl import scalar_quantize, vector_quantize

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=gen)
    fn = scalar_quantize if compressor == "scalar" else vector_quantize
    for bits in (2, 3, 8):
        q, nbytes = fn(x, bits, generator=gen)
        span = (x.max() - x.min()).item()
        assert (q - x).abs().max().item() <= span / (2**bits - 1) * 1.01
        assert nbytes == 64 * 32 * bits // 8 + 8
    assert (fn(x, 8, generator=gen)[0] - x).abs().mean() < (fn(x, 2, generator=gen)[0] - x).abs().mean()


def test_topk_keeps_the_largest_entries():
    """Top-k keeps bits/32 of each row, the largest in magnitude."""
    from vflkit.methods.cvfl import topk_sparsify

    x = torch.arange(1.0, 65.0).reshape(2, 32)
    out, nbytes = topk_sparsify(x, 8)
    assert (out != 0).sum(1).tolist() == [8, 8]
    assert torch.equal(out[0, -8:], x[0, -8:])
    assert nbytes == 2 * 8 * 6


def test_cvfl_exchanges_compressed_embeddings_model_and_labels_once_per_step():
    """C-VFL's Q local iterations need no messages: one compressed exchange per batch."""
    ch, parties = _parties()
    method = _method("c_vfl", parties, options={"local_iterations": 3})
    before = [_snapshot(p) for p in parties]
    method.train_step(torch.arange(32))
    df = ch.ledger.frame()
    kinds = sorted(zip(df.sender, df.kind))
    assert kinds == sorted([(f"passive_{k}", "embedding") for k in (1, 2, 3)]
                           + [("active", kind) for kind in ("embedding", "model_weights", "labels")] * 3)
    up = df[df.kind == "embedding"].nbytes.iloc[0]
    assert up == 32 * 16 * 3 // 8 + 8  # 3 bits per value instead of 32
    for p, b in zip(parties, before):
        assert _changed(b, p)


def test_vfedmh_full_embedding_gradient_gives_each_h_c_times_its_share():
    """The 1/C option: with ``embedding_gradient="full"`` every embedding network's SGD step is
    exactly C times the default's (∂L_k/∂E against ∂L_k/∂E / C), and each prediction network's
    step is unchanged: the one difference between the two readings of Eq. 7."""
    steps = {}
    for reading in ("share", "full"):
        _, parties = _parties()
        torch.manual_seed(1)
        method = _vfedmh(parties, blinding=False, embedding_gradient=reading)
        before = {p.name: _snapshot(p) for p in parties}
        method.train_step(torch.arange(32))
        steps[reading] = {p.name: {k: before[p.name][k] - v for k, v in _snapshot(p).items()} for p in parties}
    c = len(parties)
    for name, delta in steps["share"].items():
        for k, d in delta.items():
            expect = c * d if k.startswith("model.embedding.") else d
            torch.testing.assert_close(steps["full"][name][k], expect, atol=1e-6, rtol=1e-4)
    assert any(k.startswith("model.embedding.") for k in steps["share"]["active"])


def test_vfedmh_refuses_an_unknown_embedding_gradient():
    from vflkit.errors import ConfigError

    _, parties = _parties()
    with pytest.raises(ConfigError, match="embedding_gradient 'half'.*share, full"):
        _vfedmh(parties, embedding_gradient="half")


def test_heter_aggvfl_scores_each_partys_own_prediction_beside_the_ensemble():
    """Heter_aggVFL's record holds both readings of Table III: the summed ensemble (its one
    trained model) and each party's own R_k alone, which sum to the ensemble's logits."""
    ch, parties = _parties()
    method = _method("heter_aggvfl", parties)
    method.train_step(torch.arange(32))
    metrics = method.evaluate(batch_size=16)
    assert set(metrics) == {"active"} and ch.pending() == 0
    own = {k.split(":", 1)[1]: v for k, v in metrics["active"].items() if k.startswith("own_test_accuracy:")}
    assert set(own) == {p.name for p in parties} and all(0.0 <= v <= 1.0 for v in own.values())
    ids = torch.arange(64)
    with torch.no_grad():
        method.eval()
        total, mine, received = method._predictions(ids, "test")
        for p in method.passive:
            p.state.pop("R", None)
    torch.testing.assert_close(total, mine + sum(received))
    from vflkit.methods.base import accuracy
    assert own["active"] == accuracy(mine, parties[0].labels("test", ids=ids))


def test_heter_aggvfl_scores_both_readings_from_one_test_pass():
    """Both readings come from one round 1 a test batch: the ledger counts each passive party's
    prediction once per batch, exactly as Agg_VFL's evaluation does (a second pass doubled it)."""
    counts = {}
    for name in ("agg_vfl", "heter_aggvfl"):
        ch, parties = _parties()
        method = _method(name, parties, models=("mlp", "lenet", "mlp", "lenet"))
        ch.at(phase="eval")
        metrics = method.evaluate(batch_size=16)
        counts[name] = ch.ledger.totals(phase="eval")
        assert ch.pending() == 0
    assert counts["heter_aggvfl"] == counts["agg_vfl"]
    assert counts["agg_vfl"]["messages"] == 3 * (64 // 16)  # three passive parties, four batches
    assert any(k.startswith("own_test_accuracy:") for k in metrics["active"])
