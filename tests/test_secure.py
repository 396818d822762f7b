"""Tests of VFedMH's secure embedding aggregation (paper 000, Eqs. (4)-(7))."""

from __future__ import annotations

import copy
import math
import pickle
from re import escape as re_escape

import numpy as np
import pytest
import torch

from vflkit.comm import Channel, Party
from vflkit.errors import ConfigError, DivergenceError, SecurityError
from vflkit.secure import (
    SCHEMES,
    AggregationError,
    BlindingKeys,
    EmbeddingOverflowError,
    FixedPointRing,
    NonFiniteEmbeddingError,
    RingTensor,
    aggregate,
    benchmark_masking,
    blind,
    check_passive_count,
)

# Upper-tail quantile of N(0, 1) for alpha = 1e-4: statistical checks use a small alpha so that
# a correct implementation passes, and fixed seeds make each outcome deterministic.
_Z = 3.719
_ALPHA = 1e-4


def _parties(n_passive: int, *, scheme: str = "x25519", seed: int = 0) -> dict[int, BlindingKeys]:
    """K passive parties 1..K whose keys have been exchanged through the active party."""
    keys = {k: BlindingKeys(k, scheme=scheme, seed=seed + k) for k in range(1, n_passive + 1)}
    publics = {k: kp.public_key() for k, kp in keys.items()}
    for k, kp in keys.items():
        kp.agree({j: pk for j, pk in publics.items() if j != k})
    return keys


def _ring(x: torch.Tensor) -> np.ndarray:
    return x.numpy().view(np.uint64)


def _chi2_critical(df: int) -> float:
    """Wilson-Hilferty approximation of the chi-square upper quantile at alpha = 1e-4."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + _Z * math.sqrt(h)) ** 3


def _chi2_uniform_bytes(values: np.ndarray, byte: int) -> float:
    counts = np.bincount(((values >> np.uint64(8 * byte)) & np.uint64(0xFF)).astype(np.int64), minlength=256)
    expected = values.size / 256
    return float(((counts - expected) ** 2 / expected).sum())


def _chi2_same_bytes(a: np.ndarray, b: np.ndarray, byte: int) -> float:
    """Chi-square homogeneity statistic of one byte's histogram in two equal-size samples."""
    ca, cb = (np.bincount(((v >> np.uint64(8 * byte)) & np.uint64(0xFF)).astype(np.int64), minlength=256)
              for v in (a, b))
    seen = (ca + cb) > 0
    return float(((ca[seen] - cb[seen]) ** 2 / (ca[seen] + cb[seen])).sum())


def _ks_two_sample(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov statistic on ring values, and its critical value."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    d = np.abs(np.searchsorted(a, grid, side="right") / a.size
               - np.searchsorted(b, grid, side="right") / b.size).max()
    critical = math.sqrt(-math.log(_ALPHA / 2) / 2) * math.sqrt((a.size + b.size) / (a.size * b.size))
    return float(d), critical


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("n_passive", [2, 3, 9])
def test_blinding_factors_cancel_exactly(scheme: str, n_passive: int) -> None:
    """Eq. (5): the K blinding factors sum to exactly zero in the ring, none being zero itself."""
    keys = _parties(n_passive, scheme=scheme)

    factors = [_ring(kp.blinding_factor((16, 8), round=3, step=7)) for kp in keys.values()]
    total = np.zeros((16, 8), dtype=np.uint64)
    for r in factors:
        total += r

    assert np.all(total == 0)
    assert all(np.count_nonzero(r) == r.size for r in factors)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pairwise_shared_keys_agree(scheme: str) -> None:
    """Eq. (4): CK_{k,j} == CK_{j,k}, distinct for each pair, and both ends derive the same stream."""
    keys = _parties(4, scheme=scheme)

    pairs = [(k, j) for k in keys for j in keys if k < j]

    assert all(keys[k].shared_key(j) == keys[j].shared_key(k) for k, j in pairs)
    assert len({keys[k].shared_key(j) for k, j in pairs}) == len(pairs)
    assert all(torch.equal(keys[k].mask_stream(j, (5, 3), round=2, step=9),
                           keys[j].mask_stream(k, (5, 3), round=2, step=9)) for k, j in pairs)


def test_seeded_keys_are_reproducible_and_unseeded_keys_fresh() -> None:
    """A seed fixes the key pair (for notebooks); no seed draws a fresh key from the OS."""
    for scheme in SCHEMES:
        assert BlindingKeys(2, scheme=scheme, seed=5).public_key() == BlindingKeys(2, scheme=scheme, seed=5).public_key()
        assert BlindingKeys(2, scheme=scheme, seed=5).public_key() != BlindingKeys(3, scheme=scheme, seed=5).public_key()
        assert BlindingKeys(2, scheme=scheme).public_key() != BlindingKeys(2, scheme=scheme).public_key()


def test_masks_are_fresh_per_round_and_step_and_repeatable() -> None:
    """Different (round, step) give unrelated masks; the same (round, step) gives the same mask."""
    kp = _parties(3)[2]

    base = _ring(kp.blinding_factor((64, 32), round=1, step=1))
    again = _ring(kp.blinding_factor((64, 32), round=1, step=1))
    others = [_ring(kp.blinding_factor((64, 32), round=r, step=s)) for r, s in [(1, 2), (2, 1), (0, 0)]]

    assert np.array_equal(base, again)
    for other in others:
        assert np.mean(other == base) < 0.01
    # Streams of consecutive steps must not overlap as shifted copies of one another.
    assert not np.isin(others[0].ravel(), base.ravel()).any()


@pytest.mark.parametrize("scale_bits", [4, 16, 24])
@pytest.mark.parametrize("shape", [(1,), (7, 3), (128, 128), (2, 3, 4)])
def test_aggregate_matches_plain_mean_within_bound(shape: tuple[int, ...], scale_bits: int) -> None:
    """Eq. (7): the decoded ring sum is the plain mean to within the stated rounding bound."""
    gen = torch.Generator().manual_seed(sum(shape) + scale_bits)
    ring = FixedPointRing(scale_bits=scale_bits)
    keys = _parties(3)
    embeddings = {k: 10 * torch.randn(shape, generator=gen) for k in [0, *keys]}
    blinded = [blind(embeddings[k], kp, ring=ring, round=0, step=1) for k, kp in keys.items()]
    exact = torch.stack([e.double() for e in embeddings.values()]).mean(0)
    magnitude = max(float(e.abs().max()) for e in embeddings.values())

    mean64 = aggregate(embeddings[0], blinded, ring=ring, dtype=torch.float64)
    mean32 = aggregate(embeddings[0], blinded, ring=ring)

    assert mean32.dtype == torch.float32 and mean32.shape == torch.Size(shape)
    assert float((mean64 - exact).abs().max()) <= ring.mean_error_bound(magnitude, dtype=torch.float64)
    assert float((mean32.double() - exact).abs().max()) <= ring.mean_error_bound(magnitude)
    # The bound is the fixed-point one, not a float tolerance: coarse encodings do err by it.
    if scale_bits == 4 and exact.numel() > 8:
        assert float((mean64 - exact).abs().max()) > 0.1 * ring.rounding_bound


def test_aggregate_is_exact_near_the_magnitude_limit() -> None:
    """Values close to max_abs, of both signs, still aggregate without overflow or wrap-around."""
    ring = FixedPointRing(max_parties=4)
    keys = _parties(3, seed=40)
    gen = torch.Generator().manual_seed(1)
    signs = torch.where(torch.rand((3, 50), generator=gen) < 0.5, -1.0, 1.0).double()
    embeddings = [s * ring.max_abs * (1 - 1e-6 * torch.rand(50, generator=gen).double()) for s in signs]
    active = torch.full((50,), ring.max_abs, dtype=torch.float64)
    blinded = [blind(e, keys[k], ring=ring, round=5, step=5) for k, e in zip(keys, embeddings)]

    mean = aggregate(active, blinded, ring=ring, dtype=torch.float64)

    exact = (active + sum(embeddings)) / 4
    assert float((mean - exact).abs().max()) <= ring.mean_error_bound(ring.max_abs, dtype=torch.float64)
    # max_parties values at the limit fit in int64, so the ring sum never wraps.
    assert 4 * round(ring.max_abs * 2**ring.scale_bits) <= 2**63 - 1


def test_encode_refuses_overflow_and_non_finite_values() -> None:
    """Magnitudes above max_abs and NaN/inf are refused with a clear error."""
    ring = FixedPointRing(max_parties=4)
    above = float(np.nextafter(ring.max_abs, np.inf))

    ring.encode(torch.tensor([ring.max_abs, -ring.max_abs], dtype=torch.float64))
    # beyond the default ring's limit (~1.4e11) no trained model's embedding lies: a divergence
    with pytest.raises(EmbeddingOverflowError, match="exceeds the ring's limit .*the model diverged"):
        ring.encode(torch.tensor([0.0, -above], dtype=torch.float64))
    with pytest.raises(DivergenceError, match="exceeds the ring's limit .*the model diverged"):
        FixedPointRing().encode(torch.tensor([3e11]))
    # a magnitude the default ring holds, refused by a narrow ring: the setting is the problem
    with pytest.raises(ConfigError, match="use fewer scale_bits") as err:
        FixedPointRing(scale_bits=52).encode(torch.tensor([5.7]))
    assert not isinstance(err.value, DivergenceError)
    with pytest.raises(DivergenceError, match="NaN"):
        ring.encode(torch.tensor([1.0, float("nan")]))
    with pytest.raises(ConfigError, match="max_parties"):
        aggregate(torch.zeros(2), [ring.encode(torch.zeros(2))] * 4, ring=ring)


def test_blinded_embedding_is_uniform_in_the_ring() -> None:
    """A blinded embedding's top and low bytes pass a chi-square test of uniformity."""
    ring = FixedPointRing()
    keys = _parties(3, seed=10)
    zeros = torch.zeros(256, 256)

    blinded = _ring(blind(zeros, keys[2], ring=ring, round=1, step=1)).ravel()
    literal = _ring(blind(zeros, keys[2], ring=ring, round=1, step=1, mode="literal_scalar")).ravel()

    critical = _chi2_critical(255)
    assert _chi2_uniform_bytes(blinded, byte=7) < critical
    assert _chi2_uniform_bytes(blinded, byte=0) < critical
    # The same test does reject a non-uniform ring tensor (power check).
    assert _chi2_uniform_bytes(literal, byte=7) > critical
    assert _chi2_uniform_bytes(_ring(ring.encode(torch.randn(256, 256))).ravel(), byte=7) > critical


def test_blinded_zeros_and_ones_are_indistinguishable() -> None:
    """Blinded all-zeros and all-ones embeddings pass two-sample chi-square and KS tests."""
    ring = FixedPointRing()
    keys = _parties(3, seed=20)
    shape = (256, 256)

    a = _ring(blind(torch.zeros(shape), keys[1], ring=ring, round=4, step=1)).ravel()
    b = _ring(blind(torch.ones(shape), keys[1], ring=ring, round=4, step=2)).ravel()

    critical = _chi2_critical(255)
    assert _chi2_same_bytes(a, b, byte=7) < critical
    assert _chi2_same_bytes(a, b, byte=2) < critical  # the byte holding encode(1) = 2**16
    d, d_critical = _ks_two_sample(a, b)
    assert d < d_critical
    plain_a, plain_b = (_ring(ring.encode(torch.full(shape, v))).ravel() for v in (0.0, 1.0))
    assert _chi2_same_bytes(plain_a, plain_b, byte=2) > critical


def test_literal_scalar_blinding_leaks_differences_between_entries() -> None:
    """Eq. (5) read literally (one H(CK) per party) reveals E_k[i] - E_k[0] from one blinded embedding."""
    ring = FixedPointRing()
    keys = _parties(3, seed=30)
    embedding = torch.randn(40, 8, generator=torch.Generator().manual_seed(3))
    encoded = _ring(ring.encode(embedding)).ravel()

    literal = _ring(blind(embedding, keys[1], ring=ring, round=0, step=0, mode="literal_scalar")).ravel()
    real = _ring(blind(embedding, keys[1], ring=ring, round=0, step=0)).ravel()

    # What the active party computes from the single blinded tensor it received:
    leaked = literal - literal[0]
    assert np.array_equal(leaked, encoded - encoded[0])
    recovered = ring.decode(torch.from_numpy(leaked.view(np.int64)), dtype=torch.float64)
    true_diff = (embedding - embedding.flatten()[0]).flatten().double()
    assert float((recovered - true_diff).abs().max()) <= 2 * ring.rounding_bound
    assert np.mean((real - real[0]) == (encoded - encoded[0])) < 0.01


def test_literal_scalar_blinding_still_cancels() -> None:
    """The literal variant's factors also sum to zero, so its leak is not a broken aggregate."""
    ring = FixedPointRing()
    keys = _parties(3, seed=35)
    embeddings = [torch.randn(6, generator=torch.Generator().manual_seed(k)) for k in keys]

    blinded = [blind(e, keys[k], ring=ring, round=0, step=0, mode="literal_scalar")
               for k, e in zip(keys, embeddings)]
    mean = aggregate(None, blinded, ring=ring, dtype=torch.float64)

    assert torch.allclose(mean, torch.stack(embeddings).double().mean(0), atol=ring.rounding_bound, rtol=0)


def test_fewer_than_two_passive_parties_are_refused_unless_allowed() -> None:
    """K < 2 raises SecurityError (r_1 = 0 unmasks E_1); allow_insecure=True permits it."""
    ring = FixedPointRing()
    embedding = torch.randn(4, 3, generator=torch.Generator().manual_seed(4))

    with pytest.raises(SecurityError, match="r_1 = 0"):
        check_passive_count(1)
    with pytest.raises(SecurityError, match="at least 2 passive parties"):
        check_passive_count(0)
    with pytest.raises(SecurityError, match="r_1 = 0"):
        BlindingKeys(1, seed=0).agree({})
    check_passive_count(1, allow_insecure=True)
    check_passive_count(2)
    lone = BlindingKeys(1, seed=0)
    lone.agree({}, allow_insecure=True)
    sent = blind(embedding, lone, ring=ring, round=0, step=0)
    with pytest.raises(SecurityError):
        aggregate(torch.zeros(4, 3), [sent], ring=ring)

    mean = aggregate(torch.zeros(4, 3), [sent], ring=ring, allow_insecure=True)

    # Why it is refused: the lone party's blinding factor is zero, so what it sends is E_1 itself.
    assert torch.equal(sent, ring.encode(embedding))
    assert torch.allclose(mean, embedding / 2, atol=ring.rounding_bound, rtol=0)


def test_blinding_twice_at_the_same_round_and_step_is_refused() -> None:
    """The same masks on two tensors would reveal their difference, so blind() refuses a reuse."""
    ring = FixedPointRing()
    kp = _parties(2, seed=50)[1]
    blind(torch.zeros(3), kp, ring=ring, round=2, step=3)

    with pytest.raises(SecurityError, match="round=2, step=3"):
        blind(torch.ones(3), kp, ring=ring, round=2, step=3)
    blind(torch.ones(3), kp, ring=ring, round=2, step=4)


def test_invalid_inputs_raise_clear_errors() -> None:
    """Unknown names list the choices; keys of the wrong scheme, bad counters and shapes are refused."""
    ring = FixedPointRing()
    keys = _parties(2, seed=60)
    ffdh = BlindingKeys(1, scheme="ffdh", seed=1)

    with pytest.raises(ConfigError, match="x25519, ffdh"):
        BlindingKeys(1, scheme="rsa")
    with pytest.raises(ConfigError, match="per_entry, literal_scalar"):
        blind(torch.zeros(2), keys[1], ring=ring, round=0, step=0, mode="scalar")
    with pytest.raises(ConfigError, match="call agree"):
        BlindingKeys(1, seed=1).blinding_factor((2,), round=0, step=0)
    with pytest.raises(ConfigError, match="not a valid ffdh public key"):
        ffdh.agree({2: keys[2].public_key()})
    with pytest.raises(ConfigError, match="not a valid ffdh public key"):
        ffdh.agree({2: (1).to_bytes(256, "big")})
    with pytest.raises(ConfigError, match="not a valid x25519 public key"):
        keys[1].agree({2: ffdh.public_key()})
    with pytest.raises(ConfigError, match="itself"):
        keys[1].agree({1: keys[1].public_key()})
    with pytest.raises(ConfigError, match=r"round must be an integer in \[0, 2\*\*32\)"):
        keys[1].blinding_factor((2,), round=2**32, step=0)
    with pytest.raises(ConfigError, match="one shape"):
        aggregate(torch.zeros(3), [ring.encode(torch.zeros(2))] * 2, ring=ring)
    with pytest.raises(ConfigError, match="int64 ring tensor"):
        aggregate(torch.zeros(2), [torch.zeros(2)] * 2, ring=ring)


def test_modp_group_is_the_rfc3526_safe_prime() -> None:
    """The fixed ffdh group is a 2048-bit safe prime in which 2 generates the order-q subgroup."""
    from vflkit.secure import _MODP14_G, _MODP14_P

    def probably_prime(n: int) -> bool:
        d, s = n - 1, 0
        while d % 2 == 0:
            d, s = d // 2, s + 1
        for a in (2, 3, 5, 7, 11, 13, 17, 19):
            x = pow(a, d, n)
            if x in (1, n - 1):
                continue
            for _ in range(s - 1):
                x = pow(x, 2, n)
                if x == n - 1:
                    break
            else:
                return False
        return True

    p, q = _MODP14_P, (_MODP14_P - 1) // 2

    assert p.bit_length() == 2048 and p >> 1984 == 2**64 - 1 and p % 2**64 == 2**64 - 1
    assert probably_prime(p) and probably_prime(q)
    assert pow(_MODP14_G, q, p) == 1


def test_benchmark_masking_reports_each_primitive() -> None:
    """The benchmark hook runs on a tiny setting and reports its four timings (values unchecked)."""
    result = benchmark_masking(n_passive=2, shape=(4, 4), repeats=1)

    assert set(result) == {"pair_stream_ms", "blinding_factor_ms", "blind_ms", "aggregate_ms"}
    assert all(math.isfinite(v) and v >= 0 for v in result.values())


def _step(n_passive: int = 3, *, seed: int = 70, shape: tuple[int, ...] = (16, 8), ring: FixedPointRing | None = None,
          round: int = 0, step: int = 0) -> tuple[FixedPointRing, dict[int, torch.Tensor], list[torch.Tensor]]:
    """One step of K passive parties: their embeddings and blinded embeddings."""
    ring = ring or FixedPointRing()
    keys = _parties(n_passive, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    embeddings = {k: torch.randn(shape, generator=gen) for k in [0, *keys]}
    blinded = [blind(embeddings[k], kp, ring=ring, round=round, step=step) for k, kp in keys.items()]
    return ring, embeddings, blinded


def _untagged(x: torch.Tensor) -> torch.Tensor:
    """The same int64 bits without their RingTag, as a caller building ring tensors by hand has them."""
    return x.as_subclass(torch.Tensor).clone()


def test_ring_tag_travels_through_the_channel_and_aggregation_stays_exact() -> None:
    """A blinded embedding keeps its ring, party and step through send/recv; the aggregate is unchanged."""
    ring, emb, blinded = _step()
    channel = Channel()
    active = Party("active", channel=channel)
    passive = [Party(f"passive_{k}", channel=channel) for k in (1, 2, 3)]
    for p, b in zip(passive, blinded):
        p.send(active, "embedding", b)
    received = [active.recv(p, "embedding") for p in passive]

    tag = received[1].ring_tag
    assert isinstance(received[1], RingTensor) and received[1].dtype == torch.int64
    assert (tag.scale_bits, tag.max_parties, tag.party, tag.parties, tag.round, tag.step) == (16, 1024, 2, (1, 2, 3), 0, 0)
    assert channel.ledger.totals()["bytes"] == 3 * 16 * 8 * 8  # still counted as int64 entries
    exact = torch.stack([e.double() for e in emb.values()]).mean(0)
    for contributions in (received, [_untagged(b) for b in received]):
        mean = aggregate(emb[0], contributions, ring=ring, dtype=torch.float64)
        assert float((mean - exact).abs().max()) <= ring.mean_error_bound(float(exact.abs().max() * 4),
                                                                           dtype=torch.float64)
    assert type(blinded[0] + blinded[1]) is torch.Tensor  # arithmetic makes a new, untagged value
    for copied in (copy.deepcopy(blinded[2]), pickle.loads(pickle.dumps(blinded[2]))):
        assert copied.ring_tag == blinded[2].ring_tag and torch.equal(copied, blinded[2])


def test_missing_repeated_or_extra_contributions_are_refused() -> None:
    """A missing, repeated or surplus blinded embedding breaks cancellation and is an AggregationError."""
    ring, emb, blinded = _step()
    b1, b2, b3 = blinded

    with pytest.raises(AggregationError, match=r"no blinded embedding from passive party \[3\] \(got \[1, 2\] of \[1, 2, 3\]\)"):
        aggregate(emb[0], [b1, b2], ring=ring, n_parties=4)
    with pytest.raises(AggregationError, match="passive party 1's blinded embedding is passed more than once"):
        aggregate(emb[0], [b1, b2, b1], ring=ring, n_parties=4)
    with pytest.raises(AggregationError, match=r"5 contributions \(4 blinded \+ the active embedding\) for n_parties=4"):
        aggregate(emb[0], [b1, b2, b3, b1], ring=ring, n_parties=4)
    # Without tags the range check finds the leftover mask: the sum is uniform in the ring.
    plain = [_untagged(b) for b in blinded]
    for wrong in ([plain[0], plain[1]], [plain[0], plain[1], plain[0]], [plain[0], plain[1], plain[2], plain[2]]):
        with pytest.raises(AggregationError, match="blinding factors did not cancel"):
            aggregate(emb[0], wrong, ring=ring)
    assert isinstance(AggregationError("x"), ConfigError)


def test_contributions_of_another_step_or_key_agreement_are_refused() -> None:
    """Masks of different (round, step) or of two separate key agreements do not cancel."""
    ring, emb, blinded = _step()
    _, _, later = _step(round=0, step=1)
    _, _, other = _step(seed=90)

    with pytest.raises(AggregationError, match=r"round=0, step=1 .* masks of different steps"):
        aggregate(emb[0], [blinded[0], blinded[1], later[2]], ring=ring)
    _, _, four = _step(4, seed=95)
    with pytest.raises(AggregationError, match="different key agreements"):
        aggregate(emb[0], [blinded[0], blinded[1], four[2]], ring=ring)
    # Same party numbers, different keys: no tag can tell, the range check does.
    with pytest.raises(AggregationError, match="did not cancel"):
        aggregate(emb[0], [blinded[0], blinded[1], other[2]], ring=ring)


@pytest.mark.parametrize("other", [FixedPointRing(scale_bits=8), FixedPointRing(max_parties=16)])
def test_parties_on_different_ring_settings_are_refused(other: FixedPointRing) -> None:
    """An embedding encoded in another ring setting would decode to garbage; its tag says so."""
    ring = FixedPointRing()
    keys = _parties(3, seed=80)
    emb = torch.ones(5)
    blinded = [blind(emb, keys[1], ring=ring, round=0, step=0), blind(emb, keys[2], ring=other, round=0, step=0),
               blind(emb, keys[3], ring=ring, round=0, step=0)]

    with pytest.raises(AggregationError, match=rf"blinded embedding 1 was encoded in {re_escape(repr(other))}, "
                                               r"but it is read with FixedPointRing\(scale_bits=16"):
        aggregate(emb, blinded, ring=ring)
    with pytest.raises(AggregationError, match="encode with one ring"):
        ring.decode(other.encode(emb))
    assert FixedPointRing() == ring and other != ring
    assert torch.equal(other.decode(other.encode(emb)), emb)


def test_non_finite_embeddings_raise_a_catchable_divergence_error() -> None:
    """NaN/inf on a passive party (blind) or the active party (aggregate) is a NonFiniteEmbeddingError."""
    ring, emb, blinded = _step()
    keys = _parties(3, seed=100)

    with pytest.raises(NonFiniteEmbeddingError, match=r"passive party 2\) got NaN or infinite .* \(1 of 3 entries\)"):
        blind(torch.tensor([0.0, float("inf"), 1.0]), keys[2], ring=ring, round=0, step=0)
    bad_active = emb[0].clone()
    bad_active[3, 4] = float("nan")
    with pytest.raises(NonFiniteEmbeddingError, match="active embedding with NaN"):
        aggregate(bad_active, blinded, ring=ring)
    # A runner that records divergence catches DivergenceError (and FloatingPointError).
    assert issubclass(NonFiniteEmbeddingError, DivergenceError) and issubclass(NonFiniteEmbeddingError, FloatingPointError)
    assert not issubclass(NonFiniteEmbeddingError, ConfigError)


def test_prefetched_blinding_factor_is_the_one_computed_on_demand() -> None:
    """BlindingKeys.prefetch computes the same factor off the critical path; a request for
    another shape or counter discards it and computes its own."""
    keys = _parties(3)
    kp = keys[1]
    expected = kp.blinding_factor((32, 8), round=0, step=5)
    kp.prefetch((32, 8), round=0, step=5)
    assert kp._ahead is not None
    assert torch.equal(kp.blinding_factor((32, 8), round=0, step=5), expected)
    assert kp._ahead is None  # used once
    kp.prefetch((32, 8), round=0, step=6)
    other = kp.blinding_factor((16, 8), round=0, step=6)  # last batch: smaller
    assert kp._ahead is None and other.shape == (16, 8)
    assert torch.equal(other, kp.blinding_factor((16, 8), round=0, step=6))


def test_untagged_contributions_too_small_to_verify_are_refused():
    """X11: with one entry, a missing untagged contribution passes the range check about once in
    500; such small untagged aggregations are refused, tagged ones of any size are checked by
    their tags, and untagged ones of realistic size are still range-checked."""
    import torch

    from vflkit.secure import AggregationError, FixedPointRing, aggregate

    ring = FixedPointRing()
    plain = [ring.encode(torch.full((1,), 0.5)).as_subclass(torch.Tensor) for _ in range(2)]
    with pytest.raises(AggregationError, match="too few to verify"):
        aggregate(None, plain, ring=ring)
    big = [ring.encode(torch.full((8, 8), 0.5)).as_subclass(torch.Tensor) for _ in range(2)]
    assert torch.allclose(aggregate(None, big, ring=ring, n_parties=2), torch.full((8, 8), 0.5))


# --------------------------------------------------------------------------- torch backend (issue 40)
# The ring runs in torch on the embeddings' device; the numpy backend, the host implementation
# it replaced, is the reference it must equal bit for bit.

_I64 = np.iinfo(np.int64)


def _edge_int64(n: int, seed: int) -> torch.Tensor:
    """int64 ring elements: the extremes and 32-bit boundaries, then uniform random bits."""
    edges = [_I64.min, _I64.min + 1, -2**63 + 2**32, -2**32 - 1, -2**32, -2**31 - 1, -2**31, -1, 0, 1,
             2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 2**32, _I64.max - 1, _I64.max]
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False).view(np.int64)
    return torch.from_numpy(np.concatenate([np.array(edges, dtype=np.int64), bits]))


@pytest.mark.parametrize("n_terms", [1, 2, 3, 10])
def test_wrapping_sum_equals_numpy_uint64_arithmetic(n_terms: int) -> None:
    """The torch ring sum (32-bit halves, no int64 overflow) equals numpy's uint64 sum, whose
    wraparound modulo 2^64 is defined, on every bit: extremes, 32-bit boundaries, random bits."""
    from vflkit.secure import _wrapping_sum

    terms = [_edge_int64(2000, seed=k).roll(k) for k in range(n_terms)]
    expected = np.zeros(terms[0].shape, dtype=np.uint64)
    for t in terms:
        expected += t.numpy().view(np.uint64)

    got = _wrapping_sum(terms)

    assert got.dtype == torch.int64
    assert np.array_equal(got.numpy().view(np.uint64), expected)
    # a 0-d term (the literal scalar mask) broadcasts like numpy's
    scalar = torch.tensor(_I64.max)
    assert np.array_equal(_wrapping_sum([terms[0], scalar]).numpy().view(np.uint64),
                          terms[0].numpy().view(np.uint64) + np.uint64(_I64.max))


def _torch_vs_numpy_inputs() -> list[torch.Tensor]:
    """Embeddings that stress the encoding: ties at half a unit (round half to even), -0.0,
    the ring's limit and just below it (max_parties=4), float32 and float64, random values."""
    ring = FixedPointRing(max_parties=4)
    units = torch.arange(-6, 7, dtype=torch.float64)
    ties = (units + 0.5) / 2**16  # exact halves of the last fractional bit: rint's ties
    limit = ring.max_abs
    near = torch.tensor([limit, -limit, float(np.nextafter(limit, 0)), -float(np.nextafter(limit, 0)),
                         limit * (1 - 2**-40), 0.0, -0.0], dtype=torch.float64)
    gen = torch.Generator().manual_seed(3)
    return [ties, ties.float(), near, 100 * torch.randn(64, 16, generator=gen),
            torch.randn(5, 7, generator=gen).double() * 1e9]


@pytest.mark.parametrize("case", range(5))
def test_torch_backend_equals_the_numpy_reference(case: int) -> None:
    """encode, blind (masks added), the ring sum, decode and aggregate: the torch backend gives
    the numpy backend's bits and floats exactly, including ties and values at the ring's limit,
    where the blinded sums wrap around 2^64 and the plain sum of 4 encodings nears 2^63."""
    ring = FixedPointRing(max_parties=4)
    x = _torch_vs_numpy_inputs()[case]
    emb = {0: x, 1: -x.flip(0), 2: x * 0.5, 3: x.roll(1, 0)}

    enc_t, enc_n = ring.encode(x), ring.encode(x, backend="numpy")
    assert torch.equal(enc_t, enc_n) and enc_t.ring_tag == enc_n.ring_tag
    assert torch.equal(ring.decode(enc_t, dtype=torch.float64), ring.decode(enc_n, dtype=torch.float64, backend="numpy"))

    blinded = {}
    for backend in ("torch", "numpy"):
        keys = _parties(3, seed=7)  # the same keys, hence masks, for both backends
        blinded[backend] = [blind(emb[k], kp, ring=ring, round=2, step=case, backend=backend) for k, kp in keys.items()]
    for bt, bn in zip(blinded["torch"], blinded["numpy"]):
        assert torch.equal(bt, bn) and bt.ring_tag == bn.ring_tag
    for dtype in (torch.float32, torch.float64):
        mean_t = aggregate(emb[0], blinded["torch"], ring=ring, dtype=dtype)
        mean_n = aggregate(emb[0], blinded["numpy"], ring=ring, dtype=dtype, backend="numpy")
        assert mean_t.dtype == dtype and torch.equal(mean_t, mean_n)
    # the masks cancel to the plain ring sum of the encodings, in both
    plain = sum(ring.encode(emb[k], backend="numpy").numpy().view(np.uint64) for k in (1, 2, 3))
    from vflkit.secure import _wrapping_sum
    assert np.array_equal(_wrapping_sum([b.as_subclass(torch.Tensor) for b in blinded["torch"]]).numpy()
                          .view(np.uint64), plain)


def test_encode_rounds_ties_to_even_as_numpy() -> None:
    """Half units round to the even neighbour (torch.round, numpy's rint): 0.5 -> 0, 1.5 -> 2, -2.5 -> -2."""
    ring = FixedPointRing(scale_bits=0)
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999999, 2.5000001], dtype=torch.float64)
    assert ring.encode(x).tolist() == [0, 2, 2, 0, -2, -2, 2, 3]
    assert torch.equal(ring.encode(x), ring.encode(x, backend="numpy"))


@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_both_backends_refuse_alike(backend: str) -> None:
    """NaN/inf, a diverged magnitude, a narrow ring and masks that do not cancel raise the same
    errors, with the same messages, in both backends."""
    ring = FixedPointRing(max_parties=4)
    bad = {
        "nan": (torch.tensor([1.0, float("nan"), float("inf")]), NonFiniteEmbeddingError, "(2 of 3 entries)"),
        "overflow": (torch.tensor([0.0, -3e11]), EmbeddingOverflowError, "magnitude 3e+11 exceeds the ring's limit"),
    }
    for x, error, text in bad.values():
        with pytest.raises(error, match=re_escape(text)):
            FixedPointRing().encode(x, backend=backend)
    with pytest.raises(ConfigError, match="use fewer scale_bits"):
        FixedPointRing(scale_bits=52).encode(torch.tensor([5.7]), backend=backend)
    keys = _parties(3, seed=11)
    blinded = [blind(torch.ones(64), kp, ring=ring, round=0, step=0, backend=backend) for kp in keys.values()]
    with pytest.raises(NonFiniteEmbeddingError, match="active embedding"):
        aggregate(torch.full((64,), float("nan")), blinded, ring=ring, backend=backend)
    leftover = [_untagged(b) for b in blinded[:2]]  # party 3's mask is missing: no cancellation
    with pytest.raises(AggregationError, match="did not cancel"):
        aggregate(torch.ones(64), leftover, ring=ring, backend=backend, n_parties=4)


def test_deferred_checks_raise_when_read_not_before() -> None:
    """With a DeferredChecks the torch backend reads nothing back: a NaN embedding, an overflow
    and a sum whose masks did not cancel are computed on the device and raised only by run(),
    in the order they arose, with the errors an immediate check gives."""
    from vflkit.secure import DeferredChecks

    ring = FixedPointRing(max_parties=4)
    checks = DeferredChecks()
    keys = _parties(3, seed=12)
    nan = torch.tensor([0.0, float("nan")] * 32)
    blinded = [blind(nan if k == 2 else torch.ones(64), kp, ring=ring, round=0, step=0, checks=checks)
               for k, kp in keys.items()]
    mean = aggregate(torch.ones(64), blinded, ring=ring, checks=checks)
    assert len(checks) == 5  # 3 encodings, the active embedding, the cancellation
    assert torch.isfinite(mean).all()  # a refused entry encodes as 0 until the check is read
    with pytest.raises(NonFiniteEmbeddingError, match=re_escape("blind (passive party 2) got NaN or infinite "
                                                                "embedding values (32 of 64 entries)")):
        checks.run()
    assert len(checks) == 0
    checks.run()  # nothing pending: nothing raised
    FixedPointRing().encode(torch.tensor([3e11]), checks=checks)
    with pytest.raises(EmbeddingOverflowError):
        checks.run()


@pytest.mark.parametrize("method", ["vfedmh", "easter"])
def test_training_records_are_the_same_with_either_ring_backend(monkeypatch, method: str) -> None:
    """A tiny VFedMH and EASTER run (2 epochs, 3 passive parties) trained with the torch ring and
    with the numpy reference: the same losses, test accuracies and ledger, bit for bit."""
    from vflkit.methods import RunConfig, get_method
    from vflkit.training import split

    cfg = RunConfig(paper=method, dataset="mnist", method=method, models=("mlp", "lenet", "mlp", "lenet"),
                    n_train=384, n_test=128, epochs=2, batch_size=128, embedding_dim=16)
    results = {}
    for backend in ("numpy", "torch"):
        monkeypatch.setattr(get_method(method), "ring_backend", backend)
        results[backend] = split.train(cfg, device=torch.device("cpu"), progress=False)
    strip = lambda r: {**r, "wall_time_s": None,  # noqa: E731
                       "history": [{k: v for k, v in row.items() if k != "elapsed_s"} for row in r["history"]]}
    assert strip(results["torch"]) == strip(results["numpy"])
    assert results["torch"]["history"][-1]["loss"] > 0


def test_vfedmh_picks_its_ring_backend_by_device() -> None:
    """VFedMH's default ring ("auto") is numpy on the CPU and torch on an accelerator; a forced
    backend holds on every device."""
    from types import SimpleNamespace

    from vflkit.methods.vfedmh import VFedMH

    pick = lambda backend, device: VFedMH._backend(SimpleNamespace(ring_backend=backend), torch.device(device))  # noqa: E731
    assert VFedMH.ring_backend == "auto"
    assert (pick("auto", "cpu"), pick("auto", "cuda"), pick("auto", "mps")) == ("numpy", "torch", "torch")
    assert (pick("torch", "cpu"), pick("numpy", "cuda")) == ("torch", "numpy")
