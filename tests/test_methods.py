"""Tests for vflkit.methods: the common interface and the information flow of each method."""

import pytest
import torch

from vflkit.comm import Channel, Party
from vflkit.experiment import RunConfig
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


def _method(name, parties, num_classes=10, **cfg):
    config = RunConfig(paper="demo", dataset="mnist", method=name, models=("mlp",) * len(parties),
                       n_parties=len(parties), embedding_dim=16, lr=0.1, **cfg)
    return get_method(name)(config, parties, num_classes=num_classes)


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
