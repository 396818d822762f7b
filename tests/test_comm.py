"""Tests for vflkit.comm: the channel, the ledger and the network model."""

import pytest
import torch

from vflkit.comm import Channel, Ledger, Party, payload_nbytes
from vflkit.network import Link, NetworkModel
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
    """Bytes are as sent; a round is one protocol phase (up, then down: two a step); parties' sums add up."""
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
    # positions: the rows of ids, checked on the host (a packed trainer gathers many batches with them)
    assert p.positions("train", torch.tensor([5, 7, 3])).tolist() == [2, 0, 1]
    with pytest.raises(PartitionError, match=r"does not hold sample ids \[4\]"):
        p.positions("train", torch.tensor([3, 4]))
    assert not p.prechecked  # the check leaves the party as it found it


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


# --------------------------------------------------------------------------- EASTER network pricing


def _star_ledger(epochs=2, steps=2):
    """Per step: 3 passive parties send 1000 B up, then the active party sends 500 B to each."""
    ch = Channel()
    for epoch in range(1, epochs + 1):
        for step in range(steps):
            ch.at(epoch=epoch, step=step, phase="train")
            for k in (1, 2, 3):
                ch.send(f"passive_{k}", "active", "embedding", torch.zeros(250))  # 1000 B
            for k in (1, 2, 3):
                ch.send("active", f"passive_{k}", "gradient", torch.zeros(125))  # 500 B
                ch.recv(f"passive_{k}", "active", "gradient")
            for k in (1, 2, 3):
                ch.recv("active", f"passive_{k}", "embedding")
    return ch.ledger


# 8 Mbps = 1e6 B/s at 10 ms; passive_3 is slow: 0.8 Mbps = 1e5 B/s at 50 ms.
_NET = NetworkModel(default=Link(8.0, 10.0), parties={"passive_3": Link(0.8, 50.0)})


def test_price_parallel_and_shared_uplink_by_hand():
    """Hand-computed times for one step (then x 2 steps x 2 epochs).

    parallel: up = max(0.010 + 0.001, 0.011, 0.050 + 0.010) = 0.060 s,
              down = max(0.010 + 0.0005, 0.0105, 0.050 + 0.005) = 0.055 s -> 0.115 s a step.
    shared uplink: up = 0.011 + 0.011 + 0.060 = 0.082 s, down = 0.0105 * 2 + 0.055 = 0.076 s
              -> 0.158 s a step.
    """
    from vflkit.network import price_links

    ledger = _star_ledger()
    assert ledger.price(_NET) == pytest.approx(4 * 0.115)
    assert ledger.price(_NET, topology="parallel") == pytest.approx(4 * 0.115)
    assert ledger.price(_NET, topology="shared_uplink") == pytest.approx(4 * 0.158)
    rows = ledger.per_link()
    assert list(rows.columns) == ["epoch", "round", "kind", "sender", "receiver", "messages", "bytes", "steps"]
    assert len(rows) == 2 * 6 and set(rows["steps"]) == {2} and set(rows["messages"]) == {2}
    # From the per-link rows alone (what a record keeps), the same times; and to epoch 1 only.
    for topology, per_step in (("parallel", 0.115), ("shared_uplink", 0.158)):
        assert price_links(rows, _NET, topology=topology) == pytest.approx(4 * per_step)
        assert price_links(rows.to_dict(orient="records"), _NET, topology=topology,
                           until_epoch=1) == pytest.approx(2 * per_step)
    # Rows written before the ledger counted phases have no round column: one round per kind.
    assert price_links(rows.drop(columns="round"), _NET) == pytest.approx(4 * 0.115)
    # Two kinds sent as one round pay one round's time under "parallel"; the two directions of
    # a pair are separate (full-duplex) links, so the round lasts max(0.060, 0.055) s.
    merged = price_links(rows, _NET, rounds={"gradient": "embedding"})
    assert merged == pytest.approx(4 * 0.060)
    with pytest.raises(ConfigError, match="topology"):
        price_links(rows, _NET, topology="mesh")


def test_slow_devices_raise_time_only_on_a_shared_uplink():
    """Table VII: 0..3 low-performance passive parties. Parallel links cost the same for 1, 2, 3
    slow devices; a shared uplink rises with each, by hand: a step of the run above with
    high = (8 Mbps, 10 ms), low = (0.8 Mbps, 50 ms, compute x 2), 0.4 s of compute per step."""
    from vflkit.network import Device, compute_seconds, device_mix, training_time

    ledger = _star_ledger(epochs=1, steps=1)
    high, low = Device(Link(8.0, 10.0)), Device(Link(0.8, 50.0), compute_factor=2.0)
    passive = ["passive_1", "passive_2", "passive_3"]
    mixes = [device_mix(passive, n, high=high, low=low) for n in range(4)]
    assert [sum(d is low for d in m.values()) for m in mixes] == [0, 1, 2, 3]
    assert mixes[1]["passive_3"] is low and mixes[1]["active"] is high
    up = {"high": 0.011, "low": 0.060}
    down = {"high": 0.0105, "low": 0.055}
    for topology in ("parallel", "shared_uplink"):
        times = [training_time(ledger.per_link(), m, step_seconds=0.4, steps_per_epoch=1,
                               topology=topology) for m in mixes]
        for n, t in enumerate(times):
            kinds = ["high"] * (3 - n) + ["low"] * n
            if topology == "parallel":
                comm = max(up[k] for k in kinds) + max(down[k] for k in kinds)
            else:
                comm = sum(up[k] for k in kinds) + sum(down[k] for k in kinds)
            # compute: 4 parties share 0.4 s -> 0.1 s each; one slow device doubles the step.
            assert t["communication_s"] == pytest.approx(comm)
            assert t["compute_s"] == pytest.approx(0.1 if n == 0 else 0.2)
            assert t["total_s"] == pytest.approx(t["communication_s"] + t["compute_s"])
        totals = [t["communication_s"] for t in times]
        if topology == "parallel":
            assert totals[1] == pytest.approx(totals[2]) == pytest.approx(totals[3])
        else:
            assert totals[0] < totals[1] < totals[2] < totals[3]
    assert compute_seconds({"active": 0.3, "passive_1": 0.1}, 10,
                           {"active": high, "passive_1": low}) == pytest.approx(3.0)


def test_latency_classes_and_seeded_draws():
    """Fig. 5: low 1-30, medium 30-50, high 50-100 ms at 50 Mbps; drawn latencies are seeded,
    lie in their class and average near the midpoint link's price."""
    from vflkit.network import LATENCY_CLASSES, class_link, price_links

    assert LATENCY_CLASSES == {"low": (1.0, 30.0), "medium": (30.0, 50.0), "high": (50.0, 100.0)}
    assert class_link("medium") == Link(50.0, 40.0)
    rows = _star_ledger(epochs=3, steps=50).per_link()
    transfer_parallel = 150 * (1000 + 500) * 8 / 50e6  # 150 steps, busiest link per round
    for topology, n_latencies in (("parallel", 150 * 2), ("shared_uplink", 150 * 6)):
        mid = price_links(rows, NetworkModel(default=class_link("high")), topology=topology)
        a = price_links(rows, NetworkModel(default=Link(50.0, 0.0)), topology=topology, latency_ms="high", seed=1)
        b = price_links(rows, NetworkModel(default=Link(50.0, 0.0)), topology=topology, latency_ms="high", seed=1)
        assert a == b
        base = price_links(rows, NetworkModel(default=Link(50.0, 0.0)), topology=topology)
        assert base + n_latencies * 0.050 <= a <= base + n_latencies * 0.100
        assert a == pytest.approx(mid, rel=0.03)
        if topology == "parallel":
            assert base == pytest.approx(transfer_parallel)
    with pytest.raises(ConfigError, match="latency class"):
        class_link("extreme")


def test_sweep_prices_bandwidths_then_latency_classes_and_record_time_reads_the_records_compute():
    """Figs. 4-5's sweep: one row per bandwidth at the fixed latency, then one per latency class at
    the class bandwidth (the mean of seeded draws); Table VII's time of a record to an epoch is its
    wall time per step as compute plus its traffic priced on the devices."""
    from vflkit.network import Device, sweep, price_links, record_time, training_time

    rows = _star_ledger(epochs=2, steps=2).per_link()
    t = sweep(rows, until_epoch=1, bandwidths=(8.0, 80.0), latency_ms=10.0, latency_classes=("low", "high"), draws=3)
    assert t.columns.tolist() == ["bandwidth_mbps", "latency", "seconds"]
    assert t["latency"].tolist() == ["10 ms", "10 ms", "low", "high"] and t["bandwidth_mbps"].tolist()[2:] == [50.0] * 2
    assert t["seconds"][0] == pytest.approx(price_links(rows, NetworkModel(Link(8.0, 10.0)), until_epoch=1))
    high = [price_links(rows, NetworkModel(Link(50.0, 0.0)), until_epoch=1, latency_ms="high", seed=d)
            for d in range(3)]
    assert t["seconds"][3] == pytest.approx(sum(high) / 3) and t["seconds"][0] > t["seconds"][1]
    record = {"comm": {"per_link": rows.to_dict(orient="records")},
              "history": [{"epoch": 1, "elapsed_s": 0.8}, {"epoch": 2, "elapsed_s": 1.6}]}
    devices = {"active": Device(), "passive_3": Device(compute_factor=2.0)}
    assert record_time(record, devices, until_epoch=2, topology="shared_uplink") == training_time(
        rows, devices, step_seconds=0.4, steps_per_epoch=2, topology="shared_uplink", until_epoch=2)


def test_price_record_needs_per_link_rows():
    """A record is priced from comm.per_link, stored as the trainers write it (columns and rows)
    or as older records hold it (a dict per row), alike; a record without it says what is missing."""
    import json

    from vflkit.network import link_rows, price_record
    from vflkit.training.split import comm_summary

    ledger = _star_ledger()
    rows = ledger.per_link().to_dict(orient="records")
    stored = comm_summary(ledger)["per_link"]
    assert set(stored) == {"columns", "data"} and link_rows(stored).equals(link_rows(rows))
    assert len(json.dumps(stored)) < 0.5 * len(json.dumps(rows))
    assert price_record({"comm": {"per_link": rows}}, _NET) == pytest.approx(4 * 0.115)
    assert price_record({"comm": {"per_link": stored}}, _NET) == pytest.approx(4 * 0.115)
    with pytest.raises(ConfigError, match="per_link"):
        price_record({"comm": {"per_epoch": []}}, _NET)


def _cvfl_like_ledger(steps=3):
    """Per step, C-VFL's pattern: 3 passive embeddings up, then the active party sends each
    passive party three kinds at once (the others' embeddings, the server model, the labels)."""
    ch = Channel()
    for step in range(steps):
        ch.at(epoch=1, step=step, phase="train")
        for k in (1, 2, 3):
            ch.send(f"passive_{k}", "active", "embedding", torch.zeros(250))  # 1000 B
        for k in (1, 2, 3):
            ch.send("active", f"passive_{k}", "embedding", torch.zeros(250))
            ch.send("active", f"passive_{k}", "model_weights", torch.zeros(250))
            ch.send("active", f"passive_{k}", "labels", torch.zeros(250))
    return ch.ledger


def test_rounds_are_protocol_phases_not_message_kinds():
    """One phase carrying three kinds is one round; the same kind up and down is two: C-VFL's
    step is 2 rounds (the old (epoch, step, kind) count said 3), in every view of the ledger."""
    ledger = _cvfl_like_ledger(steps=3)
    assert ledger.rounds() == [0, 0, 0] + [1] * 9 + [0, 0, 0] + [1] * 9 + [0, 0, 0] + [1] * 9
    assert ledger.totals()["rounds"] == 3 * 2
    assert ledger.per_epoch().loc[1, "rounds"] == 3 * 2
    assert set(ledger.per_party()["rounds"]) == {3 * 2}
    assert ledger.per_party(by_epoch=True).loc[(1, "passive_2"), "rounds"] == 3 * 2
    # Priced by phase: the down round lasts as long as its busiest link, which carries three
    # messages back to back: 3 x (10 ms + 1 ms) at 8 Mbps; the up round 11 ms.
    net = NetworkModel(default=Link(8.0, 10.0))
    assert ledger.price(net) == pytest.approx(3 * (0.011 + 3 * 0.011))
    from vflkit.network import price_links
    assert price_links(ledger.per_link(), net) == pytest.approx(ledger.price(net))


def test_a_party_answering_opens_a_new_round():
    """VFedMH's four phases: up, down, up, down (the sender had received in the current round);
    rounds restart at every step, are kept apart per phase of the run, and survive a restore."""
    ch = Channel()
    for step in range(2):
        ch.at(epoch=1, step=step, phase="train")
        for kind, up in (("embedding", True), ("global_embedding", False), ("prediction", True), ("loss", False)):
            for k in (1, 2, 3):
                ch.send(*((f"passive_{k}", "active") if up else ("active", f"passive_{k}")), kind, torch.zeros(2))
    ch.at(epoch=1, step=0, phase="eval")
    ch.send("passive_1", "active", "embedding", torch.zeros(2))
    ledger = ch.ledger
    assert ledger.totals() == {"bytes": 2 * 12 * 8, "messages": 24, "rounds": 8}
    assert ledger.totals(phase="eval")["rounds"] == 1
    assert set(ledger.per_party()["rounds"]) == {8}
    restored = Ledger()
    restored.add("x", "y", "loss", 1, 9, 9, "train")
    restored.rounds()
    restored.restore(ledger._rows)
    assert restored.totals() == ledger.totals() and restored.rounds() == ledger.rounds()


def test_sort_since_puts_rows_in_protocol_order_and_rounds_follow():
    """Rows sent out of the protocol's order and sorted back give the protocol's rounds, even
    after the rounds were read once (the cache is dropped)."""
    def send(ch, sender, receiver, kind):
        ch.send(sender, receiver, kind, torch.zeros(2))

    protocol, shuffled = Channel(), Channel()
    protocol.at(epoch=1, step=0)
    send(protocol, "label_owner_1", "server", "model_weights")  # an update, then the next chain's step
    send(protocol, "data_owner_1", "label_owner_2", "embedding")
    send(protocol, "label_owner_2", "data_owner_1", "gradient")
    shuffled.at(epoch=1, step=0)
    send(shuffled, "data_owner_1", "label_owner_2", "embedding")
    send(shuffled, "label_owner_2", "data_owner_1", "gradient")
    send(shuffled, "label_owner_1", "server", "model_weights")
    assert shuffled.ledger.rounds() == [0, 1, 1] and protocol.ledger.rounds() == [0, 0, 1]
    shuffled.ledger.sort_since(0, lambda row: 0 if row[2] == "model_weights" else 1)
    assert shuffled.ledger._rows == protocol.ledger._rows
    assert shuffled.ledger.rounds() == [0, 0, 1]


def test_bf16_payloads_travel_as_float32():
    """A bfloat16 tensor (a model under bf16 autocast) is widened to float32 on the wire, exactly,
    and counted at 4 bytes per entry: a bf16 run's messages and ledger are an fp32 run's."""
    channel = Channel()
    sent = torch.randn(3, 5).bfloat16()
    channel.send("passive_1", "active", "embedding", {"e": sent, "ring": torch.zeros(2, dtype=torch.int64)})
    got = channel.recv("active", "passive_1", "embedding")
    assert got["e"].dtype == torch.float32 and torch.equal(got["e"], sent.float())
    assert got["ring"].dtype == torch.int64
    assert channel.ledger.totals()["bytes"] == 3 * 5 * 4 + 2 * 8


def test_hold_swaps_in_an_equal_tensor_and_refuses_another_shape():
    """A party holds a view of a pack's stacked data in place of its own (its batches then come
    from the view), but a tensor of another shape or labels for a party without any are refused."""
    _, a, p = _two_parties()
    assert p.aligned("train")
    stacked = torch.stack([p.held_features("train"), p.held_features("train") + 100])
    p.hold("train", features=stacked[1])
    assert p.held_features("train").data_ptr() == stacked[1].data_ptr()
    assert torch.equal(p.features("train", ids=torch.tensor([2])), torch.tensor([[102.]]))
    with pytest.raises(PartitionError, match="got"):
        a.hold("train", features=torch.zeros(6, 3))
    with pytest.raises(PermissionError):
        p.held_labels("train")
    with pytest.raises(PartitionError, match="no labels"):
        p.hold("train", labels=torch.zeros(6, dtype=torch.long))
    a.hold("train", labels=a.held_labels("train").clone())
    assert a.transform(torch.ones(1)) == 1  # the identity when none was given
    shuffled = Party("passive_2", channel=Channel(), features={"train": torch.zeros(3, 1)},
                     ids={"train": torch.tensor([2, 0, 1])})
    assert not shuffled.aligned("train")
