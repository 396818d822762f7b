"""VFedMH's secure embedding aggregation (paper 000, Section IV.C-D, Eqs. (4)-(7)).

Every passive party ``l_k`` (k = 1..K; the active party is ``l_0``) holds a Diffie-Hellman key
pair (:class:`BlindingKeys`); the active party relays the public keys, and each pair of passive
parties shares a key ``CK_{k,j} = CK_{j,k}`` (Eq. 4) that nobody else can compute, provided the
relayed keys are the parties' own. Party ``k`` blinds its embedding with
``r_k = sum_{j != k} s(k, j) * PRG(CK_{k,j})``, ``s(k, j) = -1 if k > j else +1`` (Eq. 5), sends
``[E_k] = E_k + r_k`` (Eq. 6), and the active party averages ``E = (E_a + sum_k [E_k]) / C``
(Eq. 7): every pair's stream is added once and subtracted once, so the blinding cancels.

Where this departs from reading the paper literally, and why:

* Cancellation is exact only in a ring, not in floats: embeddings are encoded as fixed-point
  integers ``round(x * 2**scale_bits)`` in Z_(2^64) (:class:`FixedPointRing`), where a uniform
  mask makes the blinded embedding uniform too; decoding errs by at most
  ``FixedPointRing.rounding_bound`` per entry.
* ``H(CK_{k,j})`` in Eq. (5), read literally, is ONE number per pair added to every entry, so the
  active party reads every difference ``E_k[i] - E_k[j]`` in the clear. Here every entry gets a
  fresh mask from AES-256-CTR keyed by ``HKDF-SHA256(CK)``, counter block ``(round, step)``: the
  construction of Bonawitz et al.'s secure aggregation that Eq. (5) abbreviates. The literal
  variant (``mode="literal_scalar"``) is kept only to demonstrate that leak.
* With one passive party Eq. (5) has no pair, ``r_1 = 0``: :func:`check_passive_count` refuses
  that unless asked explicitly.

Ring arithmetic on the device, its deferred checks and the tags that let :func:`aggregate` refuse
contributions that cannot cancel: docs/reliability-and-threat-model.md.

Threat model (message by message: docs/reliability-and-threat-model.md): the paper's
honest-but-curious parties, all K passive parties contributing every step (no dropout recovery),
a private channel from each passive party to the active party. The active party learns only
``sum_k E_k`` (with K = 1, ``E_1``); a passive party learns the global embedding and, from its
loss gradient, its batches' labels (:func:`vflkit.attacks.label_leakage`). Unless keys are signed
(:class:`IdentityKey`, :class:`KeyDirectory`; VFedMH's ``authenticate_keys``), a malicious active
party can relay key pairs of its own and unmask any passive embedding; either way it can corrupt
training (masking protects confidentiality, not integrity). Out of scope: label leakage,
collusion, dropout, the directory's own authenticity and timing side channels. Seeded keys
(``seed=``) protect nothing against whoever knows the seed.

This module depends on nothing in vflkit but :mod:`vflkit.errors`.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import secrets
import timeit
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ed25519, x25519
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import ConfigError, DivergenceError, SecurityError, check_choice

SCHEMES = ("x25519", "ffdh")
MODES = ("per_entry", "literal_scalar")


class NonFiniteEmbeddingError(DivergenceError):
    """An embedding to be encoded or aggregated holds NaN or infinity: the model diverged."""


class EmbeddingOverflowError(DivergenceError):
    """An embedding beyond the ring's limit and the default ring's too: no trained model's
    embeddings are that large, so the model diverged (a passive party's blow-up usually reaches
    the ring before its loss turns NaN)."""


class AggregationError(ConfigError):
    """Contributions to :func:`aggregate` whose blinding cannot cancel: one missing, repeated
    or extra, from another ring setting, round, step or mode."""


@dataclass(frozen=True)
class RingTag:
    """What a ring tensor carries for :func:`aggregate`'s checks: its ring and, once blinded, its
    party, the parties whose masks cancel with its own (itself and its peers) and its masks'
    ``round``/``step``/``mode``; nothing secret (the active party knows all of it)."""

    scale_bits: int
    max_parties: int
    party: int | None = None
    parties: tuple[int, ...] = ()
    round: int | None = None
    step: int | None = None
    mode: str | None = None


def _tag_of(x: torch.Tensor) -> RingTag | None:
    return x.ring_tag if isinstance(x, RingTensor) else None


class RingTensor(torch.Tensor):
    """An int64 ring tensor (``encode``/``blind`` output), an ordinary ``torch.Tensor`` to every
    reader, that carries its :class:`RingTag`. Copies (``clone``, ``detach``, ``to``, ...) keep
    the tag, so it survives the channel; any other operation returns a plain tensor (a new value
    is not what the tag describes)."""

    ring_tag: RingTag

    @staticmethod
    def wrap(x: torch.Tensor, tag: RingTag) -> RingTensor:
        out = x.as_subclass(RingTensor)
        out.ring_tag = tag
        return out

    @classmethod
    def __torch_function__(cls, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        with torch._C.DisableTorchFunctionSubclass():
            out = func(*args, **(kwargs or {}))
        tag = _tag_of(args[0]) if args else None
        if func in _TAG_KEEPING and tag is not None and isinstance(out, torch.Tensor) and out.dtype == torch.int64:
            return RingTensor.wrap(out, tag)
        return out

    def __deepcopy__(self, memo: dict) -> RingTensor:
        return RingTensor.wrap(self.as_subclass(torch.Tensor).clone(), self.ring_tag)

    def __reduce_ex__(self, proto: int) -> Any:  # pickled as a plain tensor plus its tag (torch.save, multiprocessing)
        return RingTensor.wrap, (self.as_subclass(torch.Tensor), self.ring_tag)


# The operations that copy or move a tensor without changing its values.
_TAG_KEEPING = frozenset({torch.Tensor.clone, torch.Tensor.detach, torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda,
                          torch.Tensor.contiguous, torch.Tensor.detach_, torch.clone, torch.detach})

#: Ring backends: "torch" computes on the embeddings' device; "numpy" on the host in uint64,
#: the reference the torch path is tested against.
BACKENDS = ("torch", "numpy")

#: A check's reader: given the check's values read back to the host, raise if they are bad.
CheckReader = Callable[[list[float]], None]


class DeferredChecks:
    """Checks computed on the device, read back later in one transfer (not a GPU wait each):
    a 1-D float64 tensor of values per check and a reader that raises the error they call for.
    A trainer takes them every step and reads them with the step's losses."""

    def __init__(self) -> None:
        self._pending: list[tuple[torch.Tensor, CheckReader]] = []

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, values: torch.Tensor, reader: CheckReader) -> None:
        self._pending.append((values, reader))

    def take(self) -> list[tuple[torch.Tensor, CheckReader]]:
        """The checks added since the last take, oldest first; none are kept."""
        pending, self._pending = self._pending, []
        return pending

    def run(self) -> None:
        """Read every pending check now (one transfer) and raise the first failure."""
        run_checks(self.take())


def run_checks(checks: Sequence[tuple[torch.Tensor, CheckReader]]) -> None:
    """Read ``checks`` back in one transfer and call each reader in order (the first bad one raises)."""
    if not checks:
        return
    values = iter(torch.cat([v.reshape(-1).to(torch.float64) for v, _ in checks]).tolist())
    for v, reader in checks:
        reader(list(itertools.islice(values, v.numel())))


def _verify(checks: DeferredChecks | None, values: torch.Tensor, reader: CheckReader) -> None:
    """Read ``values`` now (``checks`` None: a host read, the error raised here) or defer them."""
    if checks is None:
        run_checks([(values, reader)])
    else:
        checks.add(values, reader)


_LOW = 0xFFFFFFFF
_HALF = 1 << 32


def _wrapping_sum(terms: Sequence[torch.Tensor]) -> torch.Tensor:
    """The sum of int64 ring tensors modulo 2^64, bit for bit numpy's uint64 sum, with no int64
    overflow (undefined behaviour in C++, which torch does not document): each term is
    ``hi * 2^32 + lo`` (``lo`` in [0, 2^32), ``hi`` in [-2^31, 2^31)); under 2^30 terms both sums
    stay in range, the carry moves to ``hi``, which is reduced modulo 2^32."""
    if not terms:
        raise ConfigError("_wrapping_sum needs at least one term.")
    lo = sum((t & _LOW for t in terms[1:]), terms[0] & _LOW)
    hi = sum((t >> 32 for t in terms[1:]), terms[0] >> 32) + (lo >> 32)
    hi = ((hi + (1 << 31)) & _LOW) - (1 << 31)
    return hi * _HALF + (lo & _LOW)


def _onto(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``x`` on ``device``: a host tensor goes to a GPU from pinned memory without a wait (the
    copy is queued on the stream; torch keeps the pinned block until it is done)."""
    if x.device == device:
        return x
    if device.type == "cuda" and x.device.type == "cpu":
        return (x if x.is_pinned() else x.pin_memory()).to(device, non_blocking=True)
    return x.to(device)


def _ring_tensor(x: torch.Tensor, what: str, ring: FixedPointRing | None = None) -> torch.Tensor:
    """``x`` checked as an int64 ring tensor of ``ring`` (by its tag), as a plain tensor where it lies."""
    if not isinstance(x, torch.Tensor) or x.dtype != torch.int64:
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise ConfigError(f"{what} must be an int64 ring tensor (from encode or blind), got {got}.")
    tag = _tag_of(x)
    if ring is not None and tag is not None and (tag.scale_bits, tag.max_parties) != ring.params:
        # Another scale reads as another value and another max_parties as another range: the
        # sum would decode to garbage without any other sign.
        raise AggregationError(f"{what} was encoded in FixedPointRing(scale_bits={tag.scale_bits}, max_parties="
                               f"{tag.max_parties}), but it is read with {ring!r}; every party must encode with one "
                               "ring: build one FixedPointRing and give it to all of them.")
    return x.detach().as_subclass(torch.Tensor)


# RFC 3526 group 14 (2048-bit MODP), a safe prime with generator 2: fixed, standard parameters
# (generating them at run time takes minutes and buys nothing). Python's pow(), because
# cryptography 50 deprecated its finite-field DH; it is not constant-time (timing side channels
# are outside the paper's honest-but-curious model).
_MODP14_P = int(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74"
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437"
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF05"
    "98DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB"
    "9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B"
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF695581718"
    "3995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF", 16)
_MODP14_G = 2
_FFDH_PUBLIC_BYTES = 256
_X25519_PUBLIC_BYTES = 32

# Domain-separation labels: the HKDF info names the protocol, the scheme and the pair in
# ascending order, so that k and j derive the same CK_{k,j} and no other pair or use can.
_KDF_LABEL = b"vflkit/VFedMH/blinding-factor/v1"
_MAX_COUNTER = 2**32  # round and step each take 4 bytes of the 16-byte AES-CTR counter block
# What an identity key signs starts with its own label, so that a signature over a key bundle
# can never be read as a signature over anything else.
_BUNDLE_LABEL = b"vflkit/VFedMH/key-bundle/v1"
_SIGNATURE_BYTES = 64  # Ed25519 (RFC 8032)
_IDENTITY_BYTES = 32


def check_passive_count(n_passive: int, *, allow_insecure: bool = False) -> None:
    """Raise :class:`SecurityError` for fewer than two passive parties (K = ``n_passive``)
    unless ``allow_insecure`` (e.g. a two-party experiment that only measures cost)."""
    if isinstance(n_passive, bool) or not isinstance(n_passive, int) or n_passive < 0:
        raise ConfigError(f"n_passive must be a non-negative integer, got {n_passive!r}.")
    if n_passive >= 2 or allow_insecure:
        return
    why = ("with one passive party Eq. (5) has no other party to share a key with, so its blinding factor is "
           "r_1 = 0 and the active party reads E_1 in the clear" if n_passive == 1
           else "there is no passive party, so there is no embedding to protect")
    raise SecurityError(f"Secure embedding aggregation needs at least 2 passive parties, got {n_passive}: {why}. "
                        "Add a passive party, or pass allow_insecure=True if you accept that the active party "
                        "sees the plain embedding.")


def _check_counter(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < _MAX_COUNTER:
        raise ConfigError(f"{name} must be an integer in [0, 2**32), got {value!r}.")
    return int(value)


def _shape(shape: Sequence[int] | torch.Size | int) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in shape):
        raise ConfigError(f"shape must be a sequence of non-negative integers, got {shape!r}.")
    return tuple(int(d) for d in shape)


_ZEROS = memoryview(bytes(0))


def _zeros(n_bytes: int) -> memoryview:
    """A read-only run of zero bytes, kept between calls so each mask stream does not allocate one."""
    global _ZEROS
    if len(_ZEROS) < n_bytes:
        _ZEROS = memoryview(bytes(n_bytes))
    return _ZEROS[:n_bytes]


def _to_torch(ring_u64: np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
    # np.require: an array (ufuncs on 0-d arrays return numpy scalars) that torch can share
    out = torch.from_numpy(np.require(ring_u64, requirements=["C", "W"]).view(np.int64))
    return out if torch.device(device).type == "cpu" else out.to(device)


def _to_ring(x: torch.Tensor, what: str, ring: FixedPointRing | None = None) -> np.ndarray:
    """The numpy backend's view of a ring tensor: checked, read back to the host as uint64."""
    return _ring_tensor(x, what, ring).cpu().numpy().view(np.uint64)


@dataclass(frozen=True, kw_only=True)
class FixedPointRing:
    """Fixed-point encoding of real embeddings into the ring Z_(2^64) (int64 bit patterns):
    ``encode(x) = round(x * 2**scale_bits)``, sums wrap modulo 2^64, ``decode`` reads two's
    complement and divides by ``2**scale_bits``.

    Parameters
    ----------
    scale_bits : int, default 16
        Fractional bits: an error of at most 7.6e-6 per entry (:attr:`rounding_bound`), far
        below float32 training noise.
    max_parties : int, default 1024
        The most values ever summed (C); magnitudes are limited to :attr:`max_abs` (about 1.4e11
        at the defaults) so that C of them cannot overflow int64. The paper uses up to 10 parties.
    """

    scale_bits: int = 16
    max_parties: int = 1024

    def __post_init__(self) -> None:
        scale_bits, max_parties = self.scale_bits, self.max_parties
        if isinstance(scale_bits, bool) or not isinstance(scale_bits, int) or not 0 <= scale_bits <= 52:
            raise ConfigError(f"scale_bits must be an integer in [0, 52], got {scale_bits!r}.")
        if isinstance(max_parties, bool) or not isinstance(max_parties, int) or not 1 <= max_parties <= 2**20:
            raise ConfigError(f"max_parties must be an integer in [1, 2**20], got {max_parties!r}.")
        object.__setattr__(self, "_scale", float(2**scale_bits))
        # The largest float64 integer q with max_parties * q <= 2**63 - 1: float(q) may round up.
        q_max = (2**63 - 1) // max_parties
        q_max_f = float(q_max)
        object.__setattr__(self, "_q_max", float(np.nextafter(q_max_f, 0.0)) if q_max_f > q_max else q_max_f)

    @property
    def params(self) -> tuple[int, int]:
        return self.scale_bits, self.max_parties

    def _tag(self, **provenance: Any) -> RingTag:
        return RingTag(self.scale_bits, self.max_parties, **provenance)

    @property
    def rounding_bound(self) -> float:
        """Largest encoding error per entry, ``0.5 * 2**-scale_bits``; also the fixed-point part
        of :func:`aggregate`'s error (K such errors, divided by C >= K; the masks add none)."""
        return 0.5 / self._scale

    def mean_error_bound(self, magnitude: float, *, dtype: torch.dtype = torch.float32) -> float:
        """Bound on ``|aggregate(...) - exact mean|`` per entry when every ``|E| <= magnitude``.

        ``rounding_bound`` (fixed point) + ``2**-51 * magnitude`` (float64 decoding and
        averaging) + half an ulp of ``dtype`` at the result (the final cast; float32: 2**-24
        relative). For float32 results the cast dominates once ``|E| > 2**(23 - scale_bits)``.
        """
        eps = torch.finfo(dtype).eps
        return self.rounding_bound + 2.0**-51 * magnitude + 0.5 * eps * (magnitude + self.rounding_bound)

    @property
    def max_abs(self) -> float:
        """Largest |x| that :meth:`encode` accepts: ``max_parties`` such values sum without overflow."""
        return self._q_max / self._scale

    def encode(self, x: torch.Tensor, *, checks: DeferredChecks | None = None,
               backend: str = "torch") -> torch.Tensor:
        """``x`` (real, any device) as a :class:`RingTensor` ``round(x * 2**scale_bits)`` (ties to
        even) on ``x``'s device. Its checks go to ``checks`` (None: read at once, raising here);
        ``backend="numpy"`` is the host reference.

        Raises :class:`NonFiniteEmbeddingError` for NaN/inf, :class:`EmbeddingOverflowError` for
        ``|x|`` beyond :attr:`max_abs` and the default ring's limit (the model diverged), and
        ConfigError where only this ring's settings leave too little room.
        """
        check_choice("backend", backend, BACKENDS)
        encoded = _to_torch(self._encode_numpy(x), x.device) if backend == "numpy" else self._encode(x, checks=checks)
        return RingTensor.wrap(encoded, self._tag())

    def decode(self, x: torch.Tensor, *, dtype: torch.dtype = torch.float32, backend: str = "torch") -> torch.Tensor:
        """An int64 ring tensor (a sum of encodings) as reals, where ``x`` lies; a
        :class:`RingTensor` of another ring setting is refused (:class:`AggregationError`)."""
        check_choice("backend", backend, BACKENDS)
        if backend == "numpy":  # the reference, in numpy
            values = _to_ring(x, "decode's input", self).view(np.int64).astype(np.float64) / self._scale
            return torch.from_numpy(np.asarray(values)).to(device=x.device, dtype=dtype)
        # int64 -> float64 rounds to nearest even, as numpy's astype; dividing by 2**s is exact
        return (_ring_tensor(x, "decode's input", self).to(torch.float64) / self._scale).to(dtype)

    @staticmethod
    def _check_real(x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor) or x.is_complex() or x.dtype == torch.bool:
            raise ConfigError(f"encode needs a real-valued torch tensor, got {getattr(x, 'dtype', type(x))}.")

    def _encode(self, x: torch.Tensor, who: str = "encode", checks: DeferredChecks | None = None) -> torch.Tensor:
        self._check_real(x)
        # float32 -> float64 and scaling by a power of two are exact, so rounding is the only
        # error; torch.round rounds ties to even, as numpy's rint (on the CPU and on CUDA)
        scaled = x.detach().to(torch.float64) * self._scale
        rounded = torch.round(scaled)
        if scaled.numel():
            # NaN/inf count and the largest |x * 2**s|: max |rint(v)| = rint(max |v|), since
            # rint is monotone and odd, so the reader decides as the numpy backend does
            values = torch.stack([torch.isfinite(scaled).logical_not().sum().to(torch.float64), scaled.abs().amax()])
            _verify(checks, values, functools.partial(self._read_encoding_check, who=who, size=scaled.numel()))
        # A refused entry (NaN, inf, beyond the limit; the error comes when the check is read)
        # encodes as 0, not as a float-to-int conversion beyond int64 (undefined in C++).
        return torch.where(rounded.abs() <= self._q_max, rounded, 0.0).to(torch.int64)

    def _encode_numpy(self, x: torch.Tensor, who: str = "encode") -> np.ndarray:
        self._check_real(x)
        # float32 -> float64 and scaling by a power of two are exact, so rint is the only error.
        scaled = x.detach().to("cpu", torch.float64).numpy() * self._scale
        if scaled.size:
            finite = np.isfinite(scaled)
            largest = float(np.abs(scaled).max()) if finite.all() else float("nan")
            self._read_encoding_check([float((~finite).sum()), largest], who=who, size=scaled.size)
        return np.rint(scaled).astype(np.int64).view(np.uint64)

    def _read_encoding_check(self, values: list[float], *, who: str, size: int) -> None:
        """Raise what an encoding's ``[NaN/inf count, max |x * 2**s|]`` calls for, if anything."""
        bad, largest = values
        if bad:
            raise NonFiniteEmbeddingError(f"{who} got NaN or infinite embedding values ({int(bad)} of {size} entries): "
                                          "the model diverged; lower the learning rate or clip gradients before "
                                          "aggregating.")
        if float(np.rint(largest)) <= self._q_max:
            return
        worst = largest / self._scale
        limit = (f"the ring's limit {self.max_abs:.4g} (scale_bits={self.scale_bits}, "
                 f"max_parties={self.max_parties}: {self.max_parties} such values would overflow "
                 "int64 when summed)")
        if worst <= _DEFAULT_MAX_ABS:  # the ring chosen is too narrow, not the model wrong
            raise ConfigError(f"{who}: embedding magnitude {worst:.4g} exceeds {limit}. The default ring "
                              f"(scale_bits=16, max_parties=1024) holds up to {_DEFAULT_MAX_ABS:.4g}: use fewer "
                              "scale_bits or a smaller max_parties.")
        raise EmbeddingOverflowError(f"{who}: embedding magnitude {worst:.4g} exceeds {limit}: the model diverged (its "
                                     "embeddings grew without bound); lower the learning rate of that party or clip "
                                     "gradients.")


#: Beyond the default ring's limit (about 1.37e11) an embedding is a diverged model's.
_DEFAULT_MAX_ABS = FixedPointRing().max_abs


@functools.cache
def _prefetcher() -> ThreadPoolExecutor:
    """The one background thread (per process) that computes prefetched blinding factors."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="vflkit-masks")


def _bundle_message(scheme: str, party: int, run: str, agreement: int, public_key: bytes) -> bytes:
    """What ``party``'s identity key signs for one key agreement; every field but the last is
    length-prefixed or fixed-size, so a bundle verifies for one (scheme, party, run, agreement)."""
    run_bytes = run.encode()
    return b"".join((
        _BUNDLE_LABEL, len(scheme).to_bytes(1, "big"), scheme.encode(), party.to_bytes(4, "big"),
        len(run_bytes).to_bytes(2, "big"), run_bytes, agreement.to_bytes(4, "big"), public_key,
    ))


def _private_bytes(label: str, party: Any, seed: Any) -> bytes:
    """``party``'s (checked: >= 1) 32-byte private key: the OS's randomness, or ``SHA-256(label, seed, party)``."""
    if isinstance(party, bool) or not isinstance(party, int) or party < 1:
        raise ConfigError(f"party must be a passive party's index 1..K (>= 1), got {party!r}.")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"seed must be an integer or None, got {seed!r}.")
    return secrets.token_bytes(32) if seed is None else hashlib.sha256(f"{label}|{seed}|{party}".encode()).digest()


def _check_run(run: Any) -> str:
    if not isinstance(run, str) or not run or len(run.encode()) >= 2**16:
        raise ConfigError(f"run must be a non-empty string (the run's identifier) under 64 KiB, got {run!r}.")
    return run


class IdentityKey:
    """Passive party ``party``'s long-term Ed25519 identity key, which signs its key-agreement
    public key (:meth:`BlindingKeys.signed_public_key`). Its public half reaches the peers through
    a :class:`KeyDirectory` set up before training, never through the active party.

    ``seed`` None draws the key from the OS's randomness; an integer derives it from
    ``SHA-256(seed, party)`` for tests (it then authenticates nothing against whoever knows it).
    """

    def __init__(self, party: int, *, seed: int | None = None) -> None:
        raw = _private_bytes("vflkit-identity-key", party, seed)
        self.party = party
        self._private = ed25519.Ed25519PrivateKey.from_private_bytes(raw)

    def __repr__(self) -> str:
        return f"IdentityKey(party={self.party})"

    def public_key(self) -> bytes:
        """The 32 bytes to register in the :class:`KeyDirectory`."""
        return self._private.public_key().public_bytes_raw()

    def sign(self, message: bytes) -> bytes:
        return self._private.sign(message)


class KeyDirectory:
    """What every passive party knows before training, independently of the active party (in a
    deployment a PKI or a directory exchanged out of band; here built outside the channel):
    ``identities`` ``{k: IdentityKey(k).public_key()}`` and the ``run``'s identifier, fresh for
    every run (bundles of another run do not verify here). A relayed key bundle is accepted only
    with its party's registered signature over this run and the expected key agreement (:meth:`open`).
    """

    def __init__(self, identities: dict[int, bytes], *, run: str) -> None:
        if not isinstance(identities, dict) or not identities:
            raise ConfigError("identities must be a non-empty dict {passive party index: Ed25519 public key bytes}.")
        verifiers = {}
        for k, pk in identities.items():
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise ConfigError(f"identity party index must be a passive party's index >= 1, got {k!r}.")
            if not isinstance(pk, (bytes, bytearray)) or len(pk) != _IDENTITY_BYTES:
                raise ConfigError(f"identity of party {k} must be {_IDENTITY_BYTES} bytes of an Ed25519 "
                                  f"public key (IdentityKey.public_key()), got {pk!r:.60}.")
            verifiers[k] = ed25519.Ed25519PublicKey.from_public_bytes(bytes(pk))
        self._verifiers = verifiers
        self.run = _check_run(run)

    def __repr__(self) -> str:
        return f"KeyDirectory(parties={list(self.parties)}, run={self.run!r})"

    @property
    def parties(self) -> tuple[int, ...]:
        return tuple(sorted(self._verifiers))

    def open(self, party: int, bundle: bytes, *, scheme: str, agreement: int) -> bytes:
        """The public key inside ``bundle`` (``public key || signature``), once verified as
        signed by ``party``'s registered identity over ``scheme``, this run and ``agreement``; else
        :class:`SecurityError` (substituted, altered or replayed)."""
        agreement = _check_counter("agreement", agreement)
        if party not in self._verifiers:
            raise SecurityError(f"a key bundle was relayed for party {party!r}, which has no identity in the key "
                                f"directory (registered: {list(self.parties)}): refusing a key nobody can vouch for.")
        if not isinstance(bundle, (bytes, bytearray)) or len(bundle) <= _SIGNATURE_BYTES:
            got = f"{len(bundle)} bytes" if isinstance(bundle, (bytes, bytearray)) else type(bundle).__name__
            raise SecurityError(f"the key relayed as party {party}'s carries no signature ({got}): with a key "
                                "directory every key must arrive as BlindingKeys.signed_public_key(...), public key "
                                "|| signature.")
        public_key, signature = bytes(bundle[:-_SIGNATURE_BYTES]), bytes(bundle[-_SIGNATURE_BYTES:])
        try:
            self._verifiers[party].verify(signature, _bundle_message(scheme, party, self.run, agreement, public_key))
        except InvalidSignature:
            raise SecurityError(f"the key relayed as party {party}'s is not signed by party {party}'s registered "
                                f"identity for this run ({self.run!r}) and key agreement {agreement} ({scheme}): "
                                "whoever relayed it substituted or altered it, or replayed a bundle of another run, "
                                "key agreement or party. Refusing it: agreeing to it could let the relaying party "
                                "compute this party's masks.") from None
        return public_key


class BlindingKeys:
    """Passive party ``party``'s (k in 1..K) key pair, pairwise shared keys and blinding factors
    (Eqs. 4-5). It sends ``public_key()`` to the active party, which relays them all; it calls
    ``agree({j: public_key_j for every other j})``, then :func:`blind` each step. Nothing else is
    sent. Authenticated: it sends ``signed_public_key(identity, ...)`` and agrees with
    ``directory=``, which refuses a key its party's identity did not sign (the masks are the same).

    ``scheme``: X25519 (RFC 7748, through ``cryptography``) or "ffdh" (RFC 3526's group 14, see
    above). ``seed`` None draws the private key from the OS's randomness, as a deployment must;
    an integer derives it from ``SHA-256(seed, scheme, party)`` for tests and notebooks (seeded
    keys protect nothing against whoever knows the seed).
    """

    def __init__(self, party: int, *, scheme: str = "x25519", seed: int | None = None) -> None:
        raw = _private_bytes(f"vflkit-blinding-key|{scheme}", party, seed)
        check_choice("scheme", scheme, SCHEMES)
        self.party = party
        self.scheme = scheme
        if scheme == "x25519":
            self._private = x25519.X25519PrivateKey.from_private_bytes(raw)
            self._public = self._private.public_key().public_bytes_raw()
        else:
            # A 256-bit exponent is the usual size for group 14 (>= 2x its ~112-bit strength,
            # NIST SP 800-56A) and keeps pow() fast.
            self._private = 2 + int.from_bytes(raw, "big")
            self._public = pow(_MODP14_G, self._private, _MODP14_P).to_bytes(_FFDH_PUBLIC_BYTES, "big")
        self._agreed = False
        self._ciphers: dict[int, algorithms.AES] = {}
        self._literal: dict[int, int] = {}
        self._used: set[tuple[int, int]] = set()
        self._ahead: tuple[tuple[tuple[int, ...], int, int], Future] | None = None

    def __repr__(self) -> str:
        return f"BlindingKeys(party={self.party}, scheme={self.scheme!r}, peers={list(self.peers)})"

    def public_key(self) -> bytes:
        """The bytes to send to the active party (32 for x25519, 256 for ffdh)."""
        return self._public

    def signed_public_key(self, identity: IdentityKey, *, run: str, agreement: int = 0) -> bytes:
        """``public_key() || signature``, the signature ``identity``'s over the scheme, this
        party, ``run`` and ``agreement`` (the key agreement's index in the run): it verifies for
        exactly one party, run and key agreement."""
        if not isinstance(identity, IdentityKey):
            raise ConfigError(f"identity must be an IdentityKey, got {type(identity).__name__}.")
        if identity.party != self.party:
            raise ConfigError(f"party {self.party} cannot sign its key with party {identity.party}'s identity key.")
        message = _bundle_message(self.scheme, self.party, _check_run(run), _check_counter("agreement", agreement),
                                  self._public)
        return self._public + identity.sign(message)

    @property
    def peers(self) -> tuple[int, ...]:
        return tuple(sorted(self._ciphers))

    def agree(self, peers: dict[int, bytes], *, allow_insecure: bool = False,
              directory: KeyDirectory | None = None, agreement: int = 0) -> None:
        """Derive ``CK_{k,j}`` (Eq. 4) with every other passive party j of ``peers``
        (``{j: public key}``; with ``directory``, ``{j: signed bundle}``). ``allow_insecure``
        permits no peer (K = 1, :func:`check_passive_count`).

        ``directory`` authenticates the keys: each must be signed by its party's identity there
        for this run and ``agreement`` (the agreement's index in the run, fresh after a resume),
        and ``peers`` must be the directory's other parties, else :class:`SecurityError`. None
        accepts the keys as relayed (the paper's honest-but-curious model: a dishonest relay can
        substitute its own keys and unmask this party's embeddings).
        """
        if not isinstance(peers, dict):
            raise ConfigError(f"peers must be a dict {{party index: public key bytes}}, got {type(peers).__name__}.")
        for j, pk in peers.items():
            if isinstance(j, bool) or not isinstance(j, int) or j < 1:
                raise ConfigError(f"peer index must be a passive party's index >= 1, got {j!r}.")
            if j == self.party:
                raise ConfigError(f"peers must not include this party itself ({j}); pass the other passive parties.")
            if not isinstance(pk, (bytes, bytearray)):
                raise ConfigError(f"public key of party {j} must be bytes, got {type(pk).__name__}.")
        if directory is not None:
            peers = self._verified(peers, directory, agreement)
        check_passive_count(len(peers) + 1, allow_insecure=allow_insecure)
        ciphers, literal = {}, {}
        for j, pk in peers.items():
            secret = self._exchange(j, bytes(pk))
            lo, hi = sorted((self.party, j))
            info = b"|".join((_KDF_LABEL, self.scheme.encode(), f"{lo}-{hi}".encode()))
            # One HKDF output: 32 bytes of CK_{k,j} for the AES stream, 8 for the literal H(CK),
            # so the insecure literal variant never reuses any key material of the real one.
            okm = HKDF(algorithm=hashes.SHA256(), length=40, salt=None, info=info).derive(secret)
            ciphers[j] = algorithms.AES(okm[:32])
            literal[j] = int.from_bytes(okm[32:], "little")
        self._ciphers, self._literal = ciphers, literal
        self._agreed = True

    def _verified(self, peers: dict[int, bytes], directory: KeyDirectory, agreement: int) -> dict[int, bytes]:
        """The public keys inside ``peers``' bundles, each checked against ``directory``."""
        if not isinstance(directory, KeyDirectory):
            raise ConfigError(f"directory must be a KeyDirectory, got {type(directory).__name__}.")
        if self.party not in directory.parties:
            raise ConfigError(f"party {self.party} has no identity in {directory!r}; register every passive party.")
        expected = set(directory.parties) - {self.party}
        if set(peers) != expected:
            # A relay that drops peers shrinks this party's mask (with none left, r_k = 0) and
            # one that adds a party slips in a key no identity vouches for: both are refused.
            raise SecurityError(f"party {self.party} was relayed keys of parties {sorted(peers)}, but the key "
                                f"directory registers {sorted(expected)} as its peers: the relaying party dropped or "
                                "added a key. Refusing to agree on a set of peers other than the directory's.")
        return {j: directory.open(j, bundle, scheme=self.scheme, agreement=agreement) for j, bundle in peers.items()}

    def _exchange(self, j: int, pk: bytes) -> bytes:
        try:
            expected = _X25519_PUBLIC_BYTES if self.scheme == "x25519" else _FFDH_PUBLIC_BYTES
            if len(pk) != expected:
                raise ValueError(f"{len(pk)} bytes, expected {expected}")
            if self.scheme == "x25519":
                return self._private.exchange(x25519.X25519PublicKey.from_public_bytes(pk))
            y = int.from_bytes(pk, "big")
            # For a safe-prime group the range check is the required validation (RFC 7919 sec.
            # 5.1); the full subgroup test would guard only the private exponent's parity.
            if not 2 <= y <= _MODP14_P - 2:
                raise ValueError("not in [2, p-2]")
            # Padded to the size of p, as RFC 2631 and TLS do, so both sides hash the same bytes.
            return pow(y, self._private, _MODP14_P).to_bytes(_FFDH_PUBLIC_BYTES, "big")
        except (ValueError, UnsupportedAlgorithm) as exc:  # cryptography raises ValueError
            raise ConfigError(f"public key of party {j} is not a valid {self.scheme} public key ({exc}); every passive "
                              f"party must use scheme={self.scheme!r} and send public_key() unchanged.") from exc

    def shared_key(self, peer: int) -> bytes:
        """``CK_{k,peer}``, the 32-byte key this party shares with ``peer``. Secret: never send it."""
        self._require(peer)
        return self._ciphers[peer].key

    def mask_stream(self, peer: int, shape: Sequence[int] | int, *, round: int, step: int) -> torch.Tensor:
        """``PRG(CK_{k,peer})``: one uniform int64 per entry of ``shape``, AES-256-CTR keyed by
        ``CK`` from counter block ``round || step || 0`` (4 + 4 + 8 bytes, big-endian)."""
        self._require(peer)
        return _to_torch(self._stream(peer, _shape(shape), round, step))

    def blinding_factor(self, shape: Sequence[int] | int, *, round: int, step: int) -> torch.Tensor:
        """``r_k`` of Eq. (5), one mask per entry (int64, CPU): the same for the same
        ``(round, step)``, and the K parties' factors sum to exactly 0 in the ring."""
        shape = _shape(shape)
        self._require()
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == (shape, round, step):
            return ahead[1].result()
        return self._blinding_factor(shape, round, step)

    def prefetch(self, shape: Sequence[int] | int, *, round: int, step: int, pin_memory: bool = False) -> None:
        """Start computing :meth:`blinding_factor` for ``(round, step)`` on a background thread
        (it depends on no data), off the training step's critical path; ``pin_memory`` leaves it
        in pinned host memory for a GPU. A later call for another shape or counter discards it."""
        shape = _shape(shape)
        self._require()
        self._ahead = ((shape, round, step),
                       _prefetcher().submit(self._blinding_factor, shape, round, step, pin_memory))

    def _blinding_factor(self, shape: tuple[int, ...], round: int, step: int, pin_memory: bool = False) -> torch.Tensor:
        r = np.zeros(shape, dtype=np.uint64)
        for j in self._ciphers:  # s(k, j) of Eq. (5), wrapping modulo 2^64
            (np.subtract if self.party > j else np.add)(r, self._stream(j, shape, round, step), out=r)
        out = _to_torch(r)
        return out.pin_memory() if pin_memory else out

    def literal_blinding_factor(self) -> torch.Tensor:
        """INSECURE, for demonstration only: Eq. (5) read literally, ``sum_{j != k} s(k, j)
        H(CK_{k,j})`` as one 0-d int64 added to every entry in every round: it cancels, but
        leaves all differences between entries of an embedding in the clear."""
        self._require()
        r = sum(-h if self.party > j else h for j, h in self._literal.items()) % 2**64
        return _to_torch(np.array(r, dtype=np.uint64))

    def _stream(self, peer: int, shape: tuple[int, ...], round: int, step: int) -> np.ndarray:
        nonce = (_check_counter("round", round).to_bytes(4, "big")
                 + _check_counter("step", step).to_bytes(4, "big") + bytes(8))
        n = int(np.prod(shape, dtype=np.int64))
        # Encrypting zeros yields the raw keystream; update_into writes it straight into the
        # array (it asks for block_size - 1 spare bytes, hence the two extra words).
        out = np.empty(n + 2, dtype=np.uint64)
        encryptor = Cipher(self._ciphers[peer], modes.CTR(nonce)).encryptor()
        encryptor.update_into(_zeros(8 * n), out.view(np.uint8))
        return out[:n].reshape(shape)

    def _require(self, peer: int | None = None) -> None:
        """Raise unless the keys are agreed (and one shared with ``peer``)."""
        if not self._agreed:
            raise ConfigError(f"party {self.party} has no shared keys yet; call agree() with the other passive "
                              "parties' public keys first.")
        if peer is not None and peer not in self._ciphers:
            raise ConfigError(f"party {self.party} shares no key with party {peer!r}; known peers: "
                              f"{list(self.peers) or 'none'}.")

    def _mark_used(self, round: int, step: int) -> None:
        key = (_check_counter("round", round), _check_counter("step", step))
        if key in self._used:
            raise SecurityError(f"party {self.party} already blinded a tensor at round={round}, step={step}: the "
                                "same masks on two tensors reveal their difference to the active party. Use a "
                                "distinct (round, step) for every tensor blinded (e.g. a separate round range "
                                "for evaluation batches).")
        self._used.add(key)


def blind(embedding: torch.Tensor, keys: BlindingKeys, *, ring: FixedPointRing, round: int,
          step: int, mode: str = "per_entry", checks: DeferredChecks | None = None,
          backend: str = "torch") -> torch.Tensor:
    """Eq. (6): what passive party k sends, ``[E_k] = encode(E_k) + r_k``, a :class:`RingTensor`
    whose :class:`RingTag` lets :func:`aggregate` refuse contributions that would not cancel. No
    gradient flows through it.

    ``round``/``step`` (in [0, 2**32)) select fresh masks: each pair may blind one tensor only
    (a second raises :class:`SecurityError`). ``mode="literal_scalar"`` adds
    :meth:`BlindingKeys.literal_blinding_factor` instead (INSECURE, the leak's demonstration).
    ``checks`` and ``backend`` as :meth:`FixedPointRing.encode`.
    """
    check_choice("mode", mode, MODES)
    if not isinstance(keys, BlindingKeys):
        raise ConfigError(f"keys must be a BlindingKeys, got {type(keys).__name__}.")
    if not isinstance(ring, FixedPointRing):
        raise ConfigError(f"ring must be a FixedPointRing, got {type(ring).__name__}.")
    check_choice("backend", backend, BACKENDS)
    who = f"blind (passive party {keys.party})"
    # encoded (and checked, unless deferred) before the mask is used: a refused embedding leaves its (round, step) free
    encoded = ring._encode_numpy(embedding, who) if backend == "numpy" else ring._encode(embedding, who, checks)
    if mode == "literal_scalar":
        r = keys.literal_blinding_factor()
    else:
        keys._require()
        keys._mark_used(round, step)
        r = keys.blinding_factor(tuple(encoded.shape), round=round, step=step)
    tag = ring._tag(party=keys.party, parties=tuple(sorted({keys.party, *keys.peers})),
                    round=int(round), step=int(step), mode=mode)
    if backend == "numpy":
        return RingTensor.wrap(_to_torch(np.add(encoded, r.numpy().view(np.uint64)), embedding.device), tag)
    return RingTensor.wrap(_wrapping_sum([encoded, _onto(r, encoded.device)]), tag)


def aggregate(active_embedding: torch.Tensor | None, blinded: Sequence[torch.Tensor], *,
              ring: FixedPointRing, n_parties: int | None = None, allow_insecure: bool = False,
              dtype: torch.dtype = torch.float32, checks: DeferredChecks | None = None,
              backend: str = "torch") -> torch.Tensor:
    """Eq. (7), the active party's global embedding ``E = (E_a + sum_k [E_k]) / C``: the blinded
    embeddings of all K passive parties summed in the ring (the masks cancel exactly), decoded,
    added to ``E_a`` (its own, never blinded; None if it contributes none) in float64 and divided
    by C = ``n_parties`` (default: the contributions). Within ``ring.mean_error_bound(max |E|,
    dtype=dtype)`` of the exact mean, on ``active_embedding``'s device (else the first blinded's).

    ``checks`` (None: read at once) takes the device's checks (a non-finite ``E_a``, masks that
    did not cancel); the tags' checks always raise here. ``backend="numpy"`` is the host
    reference, bit for bit the same. Raises :class:`AggregationError` for contributions that
    cannot cancel (too many, one missing or repeated, another ring, step or key agreement, or,
    untagged, a sum outside what K encodings reach) and :class:`NonFiniteEmbeddingError`.
    """
    blinded = list(blinded)
    check_passive_count(len(blinded), allow_insecure=allow_insecure)
    contributions = len(blinded) + (active_embedding is not None)
    if contributions == 0:
        raise ConfigError("aggregate needs an active embedding or at least one blinded embedding.")
    if contributions > ring.max_parties:
        raise ConfigError(f"{contributions} embeddings exceed the ring's max_parties={ring.max_parties}; their "
                          "sum could overflow. Build the FixedPointRing with a larger max_parties.")
    n = contributions if n_parties is None else n_parties
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"n_parties must be a positive integer, got {n_parties!r}.")
    if contributions > n:
        raise AggregationError(f"{contributions} contributions ({len(blinded)} blinded"
                               + (" + the active embedding" if active_embedding is not None else "")
                               + f") for n_parties={n}: each party contributes one embedding, so some contribution is "
                               "repeated or n_parties is wrong; pass each passive party's blinded embedding once.")
    shapes = {tuple(t.shape) for t in [*blinded, active_embedding] if t is not None}
    if len(shapes) > 1:
        raise ConfigError(f"all embeddings must have one shape to be aggregated, got {sorted(shapes)}.")
    shape = shapes.pop()
    check_choice("backend", backend, BACKENDS)
    device = active_embedding.device if active_embedding is not None else blinded[0].device
    if active_embedding is not None and not active_embedding.is_floating_point():
        raise ConfigError(f"active_embedding must be a float tensor, got {active_embedding.dtype}.")
    host = backend == "numpy"  # the host reference: the ring sum in numpy uint64, every check read at once
    checks = None if host else checks
    active = None
    if active_embedding is not None:
        active = active_embedding.detach().to("cpu" if host else device, torch.float64)
        if host:  # the reference checks in numpy: no torch operation on the host path
            active_host = active.numpy()
            _read_active_check([float((~np.isfinite(active_host)).sum())])
        elif active.numel():
            _verify(checks, torch.isfinite(active).logical_not().sum().to(torch.float64).reshape(1),
                    _read_active_check)
    if host:
        ring_u64 = np.zeros(shape, dtype=np.uint64)
        for i, b in enumerate(blinded):
            ring_u64 += _to_ring(b, f"blinded embedding {i}", ring)
        ring_sum = torch.from_numpy(ring_u64.view(np.int64))
    else:
        parts = [_onto(_ring_tensor(b, f"blinded embedding {i}", ring), device) for i, b in enumerate(blinded)]
        ring_sum = _wrapping_sum(parts) if parts else torch.zeros(shape, dtype=torch.int64, device=device)
    _check_contributions(blinded)
    _check_cancelled(ring_sum, len(blinded), ring, untagged=any(_tag_of(b) is None for b in blinded),
                     checks=checks)
    if host:  # the reference's own float64 steps, in numpy: what the torch steps below must equal
        mean = ring_u64.view(np.int64).astype(np.float64) / ring._scale
        mean = (mean if active is None else mean + active_host) / n
        return torch.from_numpy(np.asarray(mean)).to(device=device, dtype=dtype)
    # int64 -> float64, / 2**s (exact), + E_a, / C: each correctly rounded in float64 on any device
    total = ring_sum.to(torch.float64) / ring._scale
    if active is not None:
        total = total + active
    return (total / n).to(device=device, dtype=dtype)


def _read_active_check(values: list[float]) -> None:
    if values[0]:
        raise NonFiniteEmbeddingError("aggregate got an active embedding with NaN or infinite values: the active "
                                      "party's model diverged; lower the learning rate or clip gradients.")


def _check_contributions(blinded: list[torch.Tensor]) -> None:
    """From the tags of blinded embeddings: one per passive party of one key agreement, all of
    one (round, step) and mode. Untagged int64 tensors are only range-checked."""
    by_party: dict[int, RingTag] = {}
    for i, b in enumerate(blinded):
        tag = _tag_of(b)
        if tag is None or tag.party is None:
            continue
        if tag.party in by_party:
            raise AggregationError(f"passive party {tag.party}'s blinded embedding is passed more than once (again at "
                                   f"position {i}): its mask would not cancel. Pass each passive party's blinded "
                                   "embedding once.")
        by_party[tag.party] = tag
    if not by_party:
        return
    first_party, first = next(iter(by_party.items()))
    for party, tag in by_party.items():
        if tag.parties != first.parties:
            raise AggregationError(f"passive party {party} agreed keys with parties {list(tag.parties)}, party "
                                   f"{first_party} with {list(first.parties)}: masks of different key agreements do "
                                   "not cancel. Aggregate only the parties of one agreement.")
        if tag.mode != first.mode or (tag.mode == "per_entry" and (tag.round, tag.step) != (first.round, first.step)):
            raise AggregationError(f"passive party {party}'s embedding was blinded at round={tag.round}, "
                                   f"step={tag.step} ({tag.mode}), party {first_party}'s at round={first.round}, "
                                   f"step={first.step} ({first.mode}): masks of different steps or modes do not "
                                   "cancel. Aggregate the embeddings of one step together.")
    missing = sorted(set(first.parties) - set(by_party))
    if missing:
        raise AggregationError(f"no blinded embedding from passive part{'y' if len(missing) == 1 else 'ies'} {missing} "
                               f"(got {sorted(by_party)} of {list(first.parties)}): without every party's mask the "
                               "sum is noise. Pass every passive party's blinded embedding of this step.")


#: The largest chance an untagged aggregation with a contribution missing may pass the range
#: check unnoticed; below it, untagged embeddings are too small to verify and are refused.
UNTAGGED_MISS_BOUND = 2.0 ** -40


def _check_cancelled(ring_sum: torch.Tensor, k: int, ring: FixedPointRing, *, untagged: bool = False,
                     checks: DeferredChecks | None = None) -> None:
    """The masks cancelled only if |sum| <= k * q_max everywhere: a leftover mask is uniform in
    the ring and lands there with probability about 2 k q_max / 2^64 per entry. ``untagged``
    embeddings so small that a miss is likelier than :data:`UNTAGGED_MISS_BOUND` are refused."""
    size = ring_sum.numel()
    if k == 0 or size == 0:
        return
    limit = k * int(ring._q_max)
    if untagged:
        per_entry = min(1.0, (2 * limit + 1) / 2.0 ** 64)
        if per_entry ** size > UNTAGGED_MISS_BOUND:
            raise AggregationError(f"{size} entries of untagged blinded embeddings are too few to verify that every "
                                   "passive party's contribution is present (a missing one would pass the range "
                                   f"check with probability {per_entry ** size:.1e}); pass the tagged tensors "
                                   "blind() returns")
    outside = ((ring_sum > limit) | (ring_sum < -limit)).sum().to(torch.float64).reshape(1)

    def read(values: list[float]) -> None:
        if values[0]:
            raise AggregationError(f"the sum of the {k} blinded embeddings lies outside what {k} encodings in {ring!r} "
                                   f"can reach in {int(values[0])} of {size} entries: the blinding factors did not "
                                   "cancel. A passive party's contribution is missing, repeated, or from another "
                                   "step, key agreement or ring; pass each passive party's blinded embedding of one "
                                   "step exactly once.")

    _verify(checks, outside, read)


def benchmark_masking(*, n_passive: int = 10, shape: Sequence[int] = (128, 128), repeats: int = 50,
                      scheme: str = "x25519") -> dict[str, float]:
    """Median milliseconds of one pair's stream, one party's ``r_k``, one :func:`blind` and the
    :func:`aggregate` of ``n_passive`` embeddings of ``shape``, for the project's benchmark."""
    check_passive_count(n_passive)
    ring = FixedPointRing()
    keys = {k: BlindingKeys(k, scheme=scheme, seed=k) for k in range(1, n_passive + 1)}
    for k, kp in keys.items():
        kp.agree({j: other.public_key() for j, other in keys.items() if j != k})
    gen = torch.Generator().manual_seed(0)
    embedding = torch.randn(tuple(shape), generator=gen)
    counter = iter(range(2**31))

    def median_ms(fn) -> float:
        fn()  # warm-up
        return 1e3 * float(np.median(timeit.repeat(fn, repeat=repeats, number=1)))

    blinded = [blind(embedding, kp, ring=ring, round=0, step=0) for kp in keys.values()]
    return {
        "pair_stream_ms": median_ms(lambda: keys[1].mask_stream(2, shape, round=1, step=next(counter))),
        "blinding_factor_ms": median_ms(lambda: keys[1].blinding_factor(shape, round=1, step=next(counter))),
        "blind_ms": median_ms(lambda: blind(embedding, keys[1], ring=ring, round=2, step=next(counter))),
        "aggregate_ms": median_ms(lambda: aggregate(embedding, blinded, ring=ring)),
    }
