"""Signed key bundles for VFedMH's key agreement (issue 42; reliability review, case X42).

The active party relays the passive parties' key-agreement public keys. Unauthenticated, a
dishonest relay hands party 1 keys of its own and unmasks party 1's embedding from one blinded
message; with signed bundles (``authenticate_keys``) every substituted, replayed, dropped or
added key is refused with SecurityError, and the masks, hence training, stay bit-identical.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vflkit.config import project_root
from vflkit.errors import SecurityError
from vflkit.methods import RunConfig
from vflkit.secure import AggregationError, BlindingKeys, FixedPointRing, IdentityKey, KeyDirectory, blind

RUN = "run-a"


def _identities(n_passive: int, seed: int = 0) -> dict[int, IdentityKey]:
    return {k: IdentityKey(k, seed=seed + k) for k in range(1, n_passive + 1)}


def _directory(identities: dict[int, IdentityKey], run: str = RUN) -> KeyDirectory:
    return KeyDirectory({k: ik.public_key() for k, ik in identities.items()}, run=run)


def _bundles(keys: dict[int, BlindingKeys], identities: dict[int, IdentityKey], *, run: str = RUN,
             agreement: int = 0) -> dict[int, bytes]:
    return {k: kp.signed_public_key(identities[k], run=run, agreement=agreement) for k, kp in keys.items()}


def _ring_u64(x: torch.Tensor) -> np.ndarray:
    return x.numpy().view(np.uint64)


def _unmask(blinded: torch.Tensor, victim_public: bytes, fakes: dict[int, BlindingKeys], ring: FixedPointRing,
            *, victim: int = 1) -> torch.Tensor:
    """What a relay that gave the victim the public keys of ``fakes`` computes: each fake key's
    shared key with the victim gives one of the victim's mask streams, so it can subtract the
    victim's whole blinding factor from the blinded embedding and decode the embedding."""
    tag = blinded.ring_tag
    r = np.zeros(tuple(blinded.shape), dtype=np.uint64)
    for j, fake in fakes.items():
        fake.agree({victim: victim_public}, allow_insecure=True)
        stream = _ring_u64(fake.mask_stream(victim, tuple(blinded.shape), round=tag.round, step=tag.step))
        r = r - stream if victim > j else r + stream  # the victim's sign s(victim, j), Eq. (5)
    plain = (_ring_u64(blinded.as_subclass(torch.Tensor)) - r).view(np.int64)
    return ring.decode(torch.from_numpy(plain.copy()), dtype=torch.float64)


# -- the primitives (vflkit.secure) ------------------------------------------------------------


def test_signed_bundles_leave_the_masks_bit_identical() -> None:
    """Signing changes what travels, not the key agreement: the blinding factors are the same."""
    identities = _identities(3)
    directory = _directory(identities)
    plain = {k: BlindingKeys(k, seed=10 + k) for k in identities}
    signed = {k: BlindingKeys(k, seed=10 + k) for k in identities}
    publics = {k: kp.public_key() for k, kp in plain.items()}
    bundles = _bundles(signed, identities)
    for k in identities:
        plain[k].agree({j: pk for j, pk in publics.items() if j != k})
        signed[k].agree({j: b for j, b in bundles.items() if j != k}, directory=directory)
    for k in identities:
        assert len(bundles[k]) == len(publics[k]) + 64
        assert np.array_equal(_ring_u64(plain[k].blinding_factor((8, 5), round=2, step=3)),
                              _ring_u64(signed[k].blinding_factor((8, 5), round=2, step=3)))


def test_without_signatures_a_relay_substituting_its_own_keys_unmasks_an_embedding() -> None:
    """The threat (X42): unauthenticated, party 1 agrees to the relay's keys, and the relay
    recovers party 1's embedding from one blinded message to within the ring's rounding."""
    ring = FixedPointRing()
    keys = {k: BlindingKeys(k, seed=20 + k) for k in (1, 2, 3)}
    fakes = {j: BlindingKeys(j, seed=900 + j) for j in (2, 3)}  # the active party's own key pairs
    keys[1].agree({j: fake.public_key() for j, fake in fakes.items()})  # accepted without a word
    embedding = torch.randn(16, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    blinded = blind(embedding, keys[1], ring=ring, round=0, step=4)
    recovered = _unmask(blinded, keys[1].public_key(), fakes, ring)
    assert float((recovered - embedding).abs().max()) <= ring.rounding_bound
    # while the blinded message alone is ring noise, nothing like the embedding
    assert float(blinded.as_subclass(torch.Tensor).abs().double().mean()) > 2.0**50


@pytest.mark.parametrize("forgery", ["relay_key_relay_signature", "relay_key_genuine_signature",
                                     "relay_key_unsigned"])
def test_a_substituted_key_is_refused(forgery: str) -> None:
    """With a key directory, a key the relay substituted for party 2's is refused, however the
    relay dresses it: signed by its own identity, carrying party 2's genuine signature, or bare."""
    identities = _identities(3)
    directory = _directory(identities)
    keys = {k: BlindingKeys(k, seed=30 + k) for k in identities}
    bundles = _bundles(keys, identities)
    fake = BlindingKeys(2, seed=999)
    relay_identity = IdentityKey(2, seed=12345)  # the relay's own Ed25519 key, not in the directory
    if forgery == "relay_key_relay_signature":
        bundles[2] = fake.signed_public_key(relay_identity, run=RUN)
    elif forgery == "relay_key_genuine_signature":
        bundles[2] = fake.public_key() + bundles[2][-64:]
    else:
        bundles[2] = fake.public_key()
    with pytest.raises(SecurityError, match="party 2's"):
        keys[1].agree({2: bundles[2], 3: bundles[3]}, directory=directory)
    assert keys[1].peers == ()  # nothing agreed


@pytest.mark.parametrize("replay", ["other_agreement", "other_run", "other_party"])
def test_a_replayed_bundle_is_refused(replay: str) -> None:
    """A genuine bundle replayed from another key agreement, another run, or as another
    party's does not verify: the signature covers the run, the agreement and the party."""
    identities = _identities(3)
    directory = _directory(identities)
    keys = {k: BlindingKeys(k, seed=40 + k) for k in identities}
    current = _bundles(keys, identities, agreement=1)
    if replay == "other_agreement":
        old = _bundles({2: BlindingKeys(2, seed=7)}, identities, agreement=0)[2]
        relayed, match = {2: old, 3: current[3]}, "key agreement 1"
    elif replay == "other_run":
        old = _bundles({2: BlindingKeys(2, seed=7)}, identities, run="run-b", agreement=1)[2]
        relayed, match = {2: old, 3: current[3]}, "run-a"
    else:
        relayed, match = {2: current[3], 3: current[3]}, "party 2's"
    with pytest.raises(SecurityError, match=match):
        keys[1].agree(relayed, directory=directory, agreement=1)
    keys[1].agree({2: current[2], 3: current[3]}, directory=directory, agreement=1)  # the genuine set passes
    assert keys[1].peers == (2, 3)


@pytest.mark.parametrize("relayed_parties", [(2,), (2, 3, 4)])
def test_a_dropped_or_added_peer_is_refused(relayed_parties: tuple[int, ...]) -> None:
    """The relay may not choose party 1's peers: dropping one shrinks party 1's mask, adding
    one slips in a key no registered identity vouches for."""
    identities = _identities(3)
    directory = _directory(identities)
    keys = {k: BlindingKeys(k, seed=50 + k) for k in (1, 2, 3, 4)}
    bundles = _bundles(keys, {**identities, 4: IdentityKey(4, seed=4)})
    with pytest.raises(SecurityError, match="dropped or added"):
        keys[1].agree({j: bundles[j] for j in relayed_parties}, directory=directory)


# -- VFedMH (vflkit.methods.vfedmh) -----------------------------------------------------------


def _parties(n_parties: int = 4, n: int = 64):
    """A channel and ``n_parties`` parties holding vertical strips of random 28x28 images."""
    from vflkit.comm import Channel, Party
    from vflkit.partition import strips

    torch.manual_seed(0)
    x = torch.randint(0, 256, (n, 1, 28, 28), dtype=torch.uint8)
    y = torch.randint(0, 10, (n,))
    parts = strips(n_parties, image_shape=(1, 28, 28)).split(x)
    ch = Channel()
    parties = [Party("active" if k == 0 else f"passive_{k}", channel=ch,
                     features={"train": parts[k].contiguous(), "test": parts[k].contiguous()},
                     labels={"train": y, "test": y} if k == 0 else None, transform=lambda t: t.float() / 255)
               for k in range(n_parties)]
    return ch, parties


def _vfedmh(parties, **options):
    from vflkit.methods import get_method

    config = RunConfig(paper="demo", dataset="mnist", method="vfedmh", models=("mlp", "lenet", "cnn", "mlp"),
                       n_parties=len(parties), embedding_dim=16, lr=0.1, options=options)
    return get_method("vfedmh")(config, parties, num_classes=10)


def _substituting_relay(ch, fakes: dict[int, BlindingKeys], *, sign_as: dict[int, IdentityKey] | None = None):
    """Make the channel's active party relay ``fakes``' public keys to passive_1 in place of
    the real ones (signed with the relay's own identities when ``sign_as`` is given), and
    capture passive_1's blinded embeddings."""
    captured: list[torch.Tensor] = []
    original = ch.send

    def send(sender, receiver, kind, payload, *, nbytes=None):
        if (sender, receiver, kind) == ("active", "passive_1", "public_key"):
            payload = {j: (fake.public_key() if sign_as is None else fake.signed_public_key(sign_as[j], run="forged"))
                       for j, fake in fakes.items()}
        if (sender, kind) == ("passive_1", "embedding"):
            captured.append(payload)
        original(sender, receiver, kind, payload, nbytes=nbytes)

    ch.send = send
    return captured


def test_vfedmh_refuses_a_relay_that_substitutes_keys_only_with_authenticate_keys() -> None:
    """Through VFedMH's own setup: with ``authenticate_keys`` the substituted keys raise
    SecurityError before any embedding is sent; without it setup passes, and the active party
    decodes passive_1's test embedding from the blinded message it receives."""
    fakes = {j: BlindingKeys(j, seed=700 + j) for j in (2, 3)}
    ch, parties = _parties()
    _substituting_relay(ch, fakes, sign_as={j: IdentityKey(j, seed=800 + j) for j in fakes})
    method = _vfedmh(parties, authenticate_keys=True)
    with pytest.raises(SecurityError, match="not signed by party 2's registered identity"):
        method.setup()

    ch, parties = _parties()
    captured = _substituting_relay(ch, fakes)
    method = _vfedmh(parties)
    method.setup()  # nothing noticed
    ids = torch.arange(8)
    passive_1 = parties[1]
    with torch.no_grad():
        truth = passive_1.models["model"].embed(passive_1.features("test", ids=ids)).double()
    # The honest aggregation notices that passive_1's mask no longer cancels, but only after
    # the blinded embedding reached the active party.
    with pytest.raises(AggregationError, match="did not cancel"):
        method.predict(ids, "test")
    (blinded,) = captured
    ring = method.ring
    recovered = _unmask(blinded, passive_1.state["keys"].public_key(), fakes, ring)
    assert float((recovered - truth).abs().max()) <= ring.rounding_bound


def test_easter_authenticates_keys_too_and_at_c2_signs_for_no_peer() -> None:
    """EASTER takes the option from VFedMH. At C = 2 (allow_single_passive) the lone passive
    party has no peer, so the directory's peer set is empty; a key slipped in is refused."""
    from vflkit.methods import get_method

    for n_parties in (4, 2):
        ch, parties = _parties(n_parties)
        config = RunConfig(paper="demo", dataset="mnist", method="easter", models=("mlp",) * n_parties,
                           n_parties=n_parties, embedding_dim=16, lr=0.1,
                           options={"authenticate_keys": True, "allow_single_passive": n_parties == 2})
        method = get_method("easter")(config, parties, num_classes=10)
        method.setup()
        method.train_step(torch.arange(16))
        assert ch.pending() == 0
    with pytest.raises(SecurityError, match="dropped or added"):
        parties[1].state["keys"].agree({2: BlindingKeys(2, seed=3).public_key()}, allow_insecure=True,
                                       directory=method._directory, agreement=1)


def test_vfedmh_authenticate_keys_trains_bit_identically_and_counts_the_signatures(tmp_path, monkeypatch) -> None:
    """A tiny VFedMH run with and without signed bundles: the same losses and accuracies to the
    bit, the same training traffic; the setup phase carries one 64-byte signature more per key
    relayed (K up, K(K-1) down)."""
    from vflkit.training.split import train

    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path))
    base = dict(paper="demo", dataset="mnist", method="vfedmh", models=("mlp",) * 4, lr=0.05, n_train=128,
                n_test=64, epochs=1, batch_size=64, embedding_dim=16)
    runs = {}
    for authenticate in (False, True):
        cfg = RunConfig(**base, options={"authenticate_keys": authenticate})
        runs[authenticate] = train(cfg, device=torch.device("cpu"), progress=False)
    off, on = runs[False], runs[True]
    strip = lambda history: [{k: v for k, v in row.items() if k != "elapsed_s"} for row in history]  # noqa: E731
    assert strip(on["history"]) == strip(off["history"])
    assert on["final"] == off["final"]
    assert on["comm"]["total"] == off["comm"]["total"]
    assert on["comm"]["per_link"] == off["comm"]["per_link"]
    k = 3
    setup_on, setup_off = on["comm"]["setup_total"], off["comm"]["setup_total"]
    assert setup_on["messages"] == setup_off["messages"] == 2 * k
    assert setup_on["bytes"] - setup_off["bytes"] == 64 * (k + k * (k - 1))


def test_committed_vfedmh_records_keep_their_keys() -> None:
    """The new option is hashed only when given, so every committed VFedMH/EASTER record keeps
    its key; a run with signed bundles gets a key of its own (its setup ledger differs)."""
    paths = sorted((project_root() / "results").glob("*/vfedmh/*.json")) + sorted(
        (project_root() / "results").glob("*/easter/*.json"))
    records = [json.loads(p.read_text()) for p in paths]
    records = [r for r in records if r.get("config", {}).get("method") in ("vfedmh", "homo_vfedmh", "easter")]
    assert records, "no committed VFedMH or EASTER record"
    for rec in records:
        cfg = RunConfig.from_dict(rec["config"])
        assert cfg.key == rec["key"], rec["key"]
        assert "authenticate_keys" not in rec["config"]["options"]
    signed = RunConfig.from_dict({**records[0]["config"],
                                  "options": {**records[0]["config"]["options"], "authenticate_keys": True}})
    assert signed.key != records[0]["key"]


@pytest.mark.parametrize("method", ["vfedmh", "easter"])
def test_authenticate_keys_without_blinding_is_refused(method: str) -> None:
    """A13: blinding=False exchanges no key, so authenticate_keys=True authenticates nothing;
    it was accepted and recorded as authenticated, and is now a ConfigError saying so."""
    from vflkit.errors import ConfigError

    base = dict(paper="demo", dataset="mnist", method=method, models=("mlp",) * 4, embedding_dim=16)
    with pytest.raises(ConfigError, match="authenticate_keys=True signs blinding's key exchange, and blinding=False"):
        RunConfig(**base, options={"authenticate_keys": True, "blinding": False})
    RunConfig(**base, options={"authenticate_keys": True})  # with blinding (the default): accepted
    RunConfig(**base, options={"authenticate_keys": False, "blinding": False})
