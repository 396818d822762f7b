"""Tests for vflkit.comm: the channel, the ledger and the network model."""

import pytest
import torch

from vflkit.comm import Channel, Ledger, Link, NetworkModel, Party, payload_nbytes
from vflkit.errors import ConfigError, PartitionError


def _two_parties():
    ch = Channel()
    a = Party("active", channel=ch, features={"train": torch.arange(12.).reshape(6, 2)},
              labels={"train": torch.tensor([0, 1, 0, 1, 0, 1])})
    p = Party("passive_1", channel=ch, features={"train": torch.arange(6.).reshape(6, 1)})
    return ch, a, p


def test_send_detaches_and_copies():
    """A receiver gets a copy with no autograd graph: it cannot back-propagate into the sender."""
    ch, a, p = _two_parties()
    w = torch.ones(3, requires_grad=True)
    e = w * 2
    p.send(a, "embedding", e)
    got = a.recv(p, "embedding")
    assert got.grad_fn is None and not got.requires_grad
    got += 1  # the receiver mutating its copy must not touch the sender's tensor
    assert torch.equal(e.detach(), torch.full((3,), 2.0))


def test_gradient_reaches_sender_only_through_a_message():
    """The sender's parameters get a gradient only when it applies a received gradient message."""
    ch, a, p = _two_parties()
    w = torch.ones(2, requires_grad=True)
    e = w * 3
    p.send(a, "embedding", e)
    received = a.recv(p, "embedding").requires_grad_()
    received.sum().backward()
    assert w.grad is None
    a.send(p, "gradient", received.grad)
    e.backward(p.recv(a, "gradient"))
    assert torch.equal(w.grad, torch.full((2,), 3.0))


def test_ledger_counts_bytes_messages_and_rounds():
    """Bytes are as sent; a round is one (epoch, step, kind) phase; parties' sums add up."""
    ch, a, p = _two_parties()
    for step in range(3):
        ch.at(epoch=1, step=step)
        p.send(a, "embedding", torch.zeros(4, 8))  # 128 bytes
        a.send(p, "gradient", torch.zeros(4, 8), nbytes=40)  # e.g. compressed
        a.recv(p, "embedding"), p.recv(a, "gradient")
    totals = ch.ledger.totals()
    assert totals == {"bytes": 3 * (128 + 40), "messages": 6, "rounds": 6}
    per_party = ch.ledger.per_party()
    assert per_party.loc["passive_1", "bytes_sent"] == 3 * 128
    assert per_party.loc["passive_1", "bytes_received"] == 3 * 40
    assert per_party.loc["active", "rounds"] == 6
    assert ch.ledger.per_epoch().loc[1, "rounds"] == 6
    assert ch.pending() == 0


def test_eval_phase_kept_apart():
    """Messages sent while evaluating do not count as training communication."""
    ch, a, p = _two_parties()
    ch.at(epoch=1, step=0, phase="eval")
    p.send(a, "embedding", torch.zeros(10))
    assert ch.ledger.totals()["messages"] == 0
    assert ch.ledger.totals(phase="eval")["bytes"] == 40


def test_unknown_kind_and_self_send_rejected():
    """A typo in a message kind, or a party sending to itself, is an error."""
    ch, a, p = _two_parties()
    with pytest.raises(ConfigError, match="Invalid message kind 'embeding'"):
        p.send(a, "embeding", torch.zeros(1))
    with pytest.raises(ConfigError, match="to itself"):
        a.send(a, "loss", torch.zeros(1))


def test_recv_without_send_names_the_protocol_error():
    """Receiving what was never sent raises an error naming both parties and the kind."""
    ch, a, p = _two_parties()
    with pytest.raises(RuntimeError, match="active expected a gradient message from passive_1"):
        a.recv(p, "gradient")


def test_labels_only_for_the_label_holder():
    """A passive party cannot read labels; lookups by sample id return the right rows."""
    ch, a, p = _two_parties()
    with pytest.raises(PermissionError, match="passive_1 holds no labels"):
        p.labels("train", rows=torch.tensor([0]))
    assert a.labels("train", ids=torch.tensor([3, 4])).tolist() == [1, 0]
    assert p.features("train", ids=torch.tensor([5, 0])).flatten().tolist() == [5.0, 0.0]


def test_party_ids_lookup_and_missing_ids():
    """A party holding other sample ids resolves ids to its own rows and rejects unknown ids."""
    ch = Channel()
    p = Party("passive_1", channel=ch, features={"train": torch.tensor([[10.], [20.], [30.]])},
              ids={"train": torch.tensor([7, 3, 5])})
    assert p.features("train", ids=torch.tensor([5, 7])).flatten().tolist() == [30.0, 10.0]
    with pytest.raises(PartitionError, match=r"does not hold sample ids \[4\]"):
        p.features("train", ids=torch.tensor([4]))


def test_payload_sizes():
    """Sizes: float32 4 bytes, int64 8 bytes per entry, bytes by length, dicts summed."""
    assert payload_nbytes(torch.zeros(3, dtype=torch.float32)) == 12
    assert payload_nbytes(torch.zeros(3, dtype=torch.int64)) == 24
    assert payload_nbytes(b"x" * 32) == 32
    assert payload_nbytes({"w": torch.zeros(2), "b": torch.zeros(1)}) == 12
    with pytest.raises(TypeError, match="nbytes="):
        payload_nbytes(object())


def test_network_price():
    """A round lasts as long as its busiest link; rounds add up; slow parties slow their links."""
    ledger = Ledger()
    ch = Channel(ledger)
    ch.at(epoch=1, step=0)
    ch.send("p1", "a", "embedding", b"x" * 1_000_000)  # 8 Mbit
    ch.send("p2", "a", "embedding", b"x" * 500_000)
    ch.at(step=1)
    ch.send("a", "p1", "gradient", b"x" * 1_000_000)
    net = NetworkModel(default=Link(bandwidth_mbps=8.0, latency_ms=10.0))
    # round 1: max(0.01 + 1.0, 0.01 + 0.5); round 2: 0.01 + 1.0
    assert ledger.price(net) == pytest.approx(2.02)
    slow = NetworkModel(default=Link(8.0, 10.0), parties={"p1": Link(bandwidth_mbps=4.0, latency_ms=50.0)})
    assert ledger.price(slow) == pytest.approx(2 * (0.05 + 2.0))
    with pytest.raises(ConfigError, match="bandwidth must be > 0"):
        Link(bandwidth_mbps=0)


def test_out_of_range_ids_of_an_aligned_party():
    """With ids 0..N-1, an id beyond the party's samples is a PartitionError, not a wrong row."""
    ch, a, p = _two_parties()
    with pytest.raises(PartitionError, match=r"passive_1 does not hold sample ids \[6\]"):
        p.features("train", ids=torch.tensor([1, 6]))
    with pytest.raises(PartitionError, match=r"active does not hold sample ids \[9\]"):
        a.labels("train", ids=torch.tensor([9]))


@pytest.mark.parametrize("ids, match", [
    (torch.tensor([0, -1, 2]), r"negative sample ids \(e\.g\. \[-1\]\)"),
    (torch.tensor([4, 7, 4]), r"more than once \(e\.g\. \[4\]\)"),
    (torch.tensor([0.0, 1.0, 2.0]), "integer sample ids"),
    (torch.tensor([[0, 1, 2]]), "1-D tensor"),
    (torch.tensor([0, 1]), "2 sample ids for 3 train rows; give one id per row"),
])
def test_party_refuses_bad_sample_ids(ids, match):
    """Ids handed to a party are checked once: negative, repeated, non-integer or miscounted ids are errors."""
    with pytest.raises(PartitionError, match=match):
        Party("passive_1", channel=Channel(), features={"train": torch.zeros(3, 1)}, ids={"train": ids})


def test_party_refuses_ids_for_a_split_it_does_not_hold():
    with pytest.raises(PartitionError, match=r"split\(s\) \['test'\] but it holds no features"):
        Party("passive_1", channel=Channel(), features={"train": torch.zeros(3, 1)},
              ids={"train": torch.arange(3), "test": torch.arange(3)})


def test_negative_or_mask_lookups_are_errors_not_the_last_row():
    """A negative id or row (which torch would read from the end) or a bool mask is refused."""
    ch, a, p = _two_parties()
    with pytest.raises(PartitionError, match=r"passive_1 does not hold sample ids \[-1\] of train"):
        p.features("train", ids=torch.tensor([0, -1]))
    with pytest.raises(PartitionError, match=r"active does not hold rows \[-2\]"):
        a.labels("train", rows=torch.tensor([-2]))
    with pytest.raises(PartitionError, match="must be an integer tensor"):
        p.features("train", ids=torch.tensor([True, False, True, False, True, False]))
    q = Party("passive_2", channel=ch, features={"train": torch.tensor([[10.], [20.]])},
              ids={"train": torch.tensor([7, 3])})
    with pytest.raises(PartitionError, match=r"does not hold sample ids \[-7\]"):
        q.features("train", ids=torch.tensor([-7]))
    assert q.features("train", ids=torch.tensor([3])).tolist() == [[20.0]]
