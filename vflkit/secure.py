"""VFedMH's secure embedding aggregation (paper 000, Section IV.C-D, Eqs. (4)-(7)).

Every passive party ``l_k`` (k = 1..K; the active party is ``l_0``) holds a Diffie-Hellman key
pair (:class:`BlindingKeys`). It sends its public key to the active party, which relays all of
them to every passive party; each pair of passive parties then shares a key
``CK_{k,j} = CK_{j,k}`` (Eq. 4) that nobody else, the active party included, can compute,
provided the keys it relays are the parties' own (see "Threat model" below).
Party ``k`` blinds its embedding with ``r_k = sum_{j != k} s(k, j) * PRG(CK_{k,j})``,
``s(k, j) = -1 if k > j else +1`` (Eq. 5), sends ``[E_k] = E_k + r_k`` (Eq. 6), and the active
party averages ``E = (E_a + sum_k [E_k]) / C`` (Eq. 7): every pair's stream is added once and
subtracted once, so ``sum_k r_k = 0`` and the blinding cancels.

How this differs from reading the paper literally, and why:

* Cancellation is exact only in a ring, not in floats. Embeddings are encoded as fixed-point
  integers ``round(x * 2**scale_bits)`` in Z_(2^64) (:class:`FixedPointRing`); the ring sum is
  exact and decoding it gives the plain mean to within ``FixedPointRing.rounding_bound``
  (``0.5 * 2**-scale_bits`` per entry). A mask that is uniform in the ring makes the blinded
  embedding uniform too, i.e. it reveals nothing; a float mask cannot do that.
* Read literally, ``H(CK_{k,j})`` in Eq. (5) is ONE number per pair added to every entry, so
  the active party reads every difference ``E_k[i] - E_k[j]`` in the clear from a single blinded
  embedding. The real scheme here draws one fresh mask per entry from a cryptographic stream
  (AES-256-CTR keyed by ``HKDF-SHA256(CK)``, its counter block set by ``(round, step)``), the
  construction of Bonawitz et al.'s secure aggregation that Eq. (5) abbreviates. The literal
  variant is kept (``mode="literal_scalar"``, :meth:`BlindingKeys.literal_blinding_factor`)
  only to demonstrate that leak.
* With one passive party Eq. (5) has no pair to sum over, ``r_1 = 0``, and the active party
  reads ``E_1`` in the clear; :func:`check_passive_count` refuses that unless asked explicitly.

Ring arithmetic runs in torch on the embeddings' device (a GPU step never waits for the host):
ring elements are ``torch.int64`` tensors (the bits of Z_(2^64) read as two's complement). torch
int64 add/sub happen to wrap on CPU, but that is C++ signed overflow, undefined behaviour that
torch does not document, so nothing here relies on it: sums modulo 2^64 are taken on 32-bit
halves (:func:`_wrapping_sum`), where no intermediate value leaves int64's range. The masks
``r_k`` come from the host PRG (AES-CTR through ``cryptography``, summed in numpy ``uint64``,
whose wraparound is defined), drawn ahead by a prefetch thread into pinned memory. The checks
(NaN/inf, overflow, masks that did not cancel) are computed on the device and read at once, or
collected (:class:`DeferredChecks`) and read with the losses. ``backend="numpy"`` (host
``uint64``) is the reference the torch path is tested against bit for bit, and VFedMH's choice
on a CPU (``VFedMH.ring_backend="auto"``), where the host is the device.

Misuse that would break cancellation is refused rather than decoded into noise: every ring
tensor is a :class:`RingTensor` carrying a :class:`RingTag` (its ring's parameters and, once
blinded, its party, key agreement and ``(round, step)``), so :func:`aggregate` detects a
missing, repeated or surplus contribution, mixed ring settings or steps, and, for plain int64
tensors without a tag, a sum outside the range K encodings can reach (a leftover mask makes it
uniform in the ring). NaN/inf embeddings raise :class:`NonFiniteEmbeddingError` and finite
ones beyond the default ring's limit :class:`EmbeddingOverflowError`, both a
:class:`~vflkit.errors.DivergenceError` (the model diverged).

Threat model
------------
The paper's model: honest-but-curious parties (each follows the protocol and learns what it
can from what it receives), all K passive parties contribute every step (no dropout recovery),
and a private channel between each passive party and the active party. What each party learns,
message by message:

* The active party relays the public keys (they reveal no ``CK``); receives each blinded
  ``[E_k]``, uniform in the ring to anyone without party k's pair keys, so it reveals nothing
  alone; and sums them to ``sum_k E_k``, which Eq. (7) needs and which is all it learns of the
  embeddings (with K = 1 that sum is ``E_1``: :func:`check_passive_count`). The predictions
  ``R_k`` (round 3) reach it in the clear.
* A passive party k receives the others' public keys (nothing secret), the global embedding
  ``E`` (round 2; hence the sum of the other C - 1 embeddings, with C = 2 the active party's
  own) and its loss message (round 4: ``L_k`` and ``dL_k/dR_k``, from which it can infer the
  batch's labels: :func:`vflkit.attacks.label_leakage` recovers them all).

A malicious active party (outside the paper's model) relays the keys, so it can:

* without signed key bundles (the default): relay key pairs of its own as party j's. Party k
  then shares ``CK_{k,j}`` with the active party, which computes ``r_k`` and reads ``E_k`` from a
  single blinded message (``tests/test_key_authentication.py`` reproduces it). It can also drop peers from the set it relays, shrinking ``r_k``.
* with signed key bundles (:class:`IdentityKey`, :class:`KeyDirectory`,
  :meth:`BlindingKeys.signed_public_key`; VFedMH's option ``authenticate_keys``): it cannot.
  Each passive party signs its key-agreement public key with its Ed25519 identity key, over the
  scheme, its index, the run's identifier and the key agreement's index; its peers verify the
  signature against identity keys they hold from before training, from a directory (a PKI, or
  keys exchanged out of band) that does not pass through the active party. A substituted,
  altered or replayed key (another run, agreement or party) and a dropped or added peer raise
  :class:`~vflkit.errors.SecurityError`. The masks, hence training, are identical; the setup
  messages carry a 64-byte signature per key. Off by default so that records keep their ledgers.
* either way: send a wrong global embedding or crafted gradients (corrupting the passive models
  or probing them, e.g. for model inversion), or stop aggregating. Masking protects the
  confidentiality of the embeddings, not the integrity of training.

Out of scope: label leakage through the loss gradients (above), what ``E`` reveals (the sum of
the other embeddings), collusion (a passive party colluding with the active party can unmask a
K = 2 partner; no scheme of this kind prevents that), the authenticity of the directory itself
(the PKI's job), dropout, and timing side channels (the FFDH scheme's ``pow`` is not
constant-time). Seeded keys (``seed=``) are for tests and protect nothing against whoever
knows the seed.

This module depends on nothing in vflkit but :mod:`vflkit.errors`.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import threading
import time
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

from .errors import ConfigError, DivergenceError, SecurityError

SCHEMES = ("x25519", "ffdh")
MODES = ("per_entry", "literal_scalar")


class NonFiniteEmbeddingError(DivergenceError):
    """An embedding to be encoded or aggregated holds NaN or infinity: the model diverged.

    A :class:`~vflkit.errors.DivergenceError`, so a runner that records divergence can record
    this one (a passive party's diverged embedding) instead of crashing.
    """


class EmbeddingOverflowError(DivergenceError):
    """An embedding to be encoded is finite but beyond the ring's limit, and beyond what the
    default ring holds too: no trained model's embeddings are that large, so the model diverged.

    A :class:`~vflkit.errors.DivergenceError`, so ``on_divergence="record"`` records the run
    (a passive party's blow-up usually reaches the ring before its loss turns NaN).
    """


class AggregationError(ConfigError):
    """Contributions to :func:`aggregate` whose blinding cannot cancel: one missing, repeated
    or extra, from another ring setting, round, step or mode."""


@dataclass(frozen=True)
class RingTag:
    """What a ring tensor carries with it so that :func:`aggregate` can check its use.

    ``scale_bits``/``max_parties`` are the :class:`FixedPointRing` it was encoded in. For a
    blinded embedding, ``party`` is its passive party k, ``parties`` the passive parties whose
    masks cancel with its own (k and the peers it agreed keys with), and ``round``/``step``/
    ``mode`` select its masks. None of it is secret: the active party knows all of it anyway.
    """

    scale_bits: int
    max_parties: int
    party: int | None = None
    parties: tuple[int, ...] = ()
    round: int | None = None
    step: int | None = None
    mode: str | None = None

    def ring_text(self) -> str:
        return f"FixedPointRing(scale_bits={self.scale_bits}, max_parties={self.max_parties})"


def _tag_of(x: torch.Tensor) -> RingTag | None:
    return x.ring_tag if isinstance(x, RingTensor) else None


class RingTensor(torch.Tensor):
    """An int64 ring tensor (``encode``/``blind`` output) that carries its :class:`RingTag`.

    It is an ordinary ``torch.Tensor`` for every reader (``numpy()``, ``torch.equal``, a
    channel's byte count). Copies (``clone``, ``detach``, ``to``, ...) keep the tag, so it
    survives :mod:`vflkit.comm`'s channel; any other operation returns a plain tensor, because
    a new value is no longer what the tag describes.
    """

    ring_tag: RingTag

    @staticmethod
    def wrap(x: torch.Tensor, tag: RingTag) -> RingTensor:
        """``x`` (int64) viewed as a RingTensor tagged ``tag``."""
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

    def __reduce_ex__(self, proto: int) -> Any:
        # pickled as a plain tensor plus its tag (torch.save, multiprocessing)
        return RingTensor.wrap, (self.as_subclass(torch.Tensor), self.ring_tag)


# The operations that copy or move a tensor without changing its values.
_TAG_KEEPING = frozenset({
    torch.Tensor.clone, torch.Tensor.detach, torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda,
    torch.Tensor.contiguous, torch.Tensor.detach_, torch.clone, torch.detach,
})

#: Ring backends: "torch" computes on the embeddings' device; "numpy" on the host in uint64,
#: the reference the torch path is tested against.
BACKENDS = ("torch", "numpy")

#: A check's reader: given the check's values read back to the host, raise if they are bad.
CheckReader = Callable[[list[float]], None]


class DeferredChecks:
    """Checks computed on the device, read back later in one transfer.

    Each check is a 1-D float64 tensor of values (counts, magnitudes) and a reader that raises
    the error those values call for. Ring arithmetic given a ``DeferredChecks`` adds its checks
    here instead of reading each at once (a GPU wait per check); a trainer takes them every step
    (:meth:`take`) and reads them with the step's losses (the split trainer's loss window, every
    :data:`~vflkit.training.split.SYNC_EVERY_CUDA` steps on a GPU, every step on a CPU).
    """

    def __init__(self) -> None:
        self._pending: list[tuple[torch.Tensor, CheckReader]] = []

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, values: torch.Tensor, reader: CheckReader) -> None:
        """Keep ``values`` (1-D float64, on any device) to be read later by ``reader``."""
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
    values = torch.cat([v.reshape(-1).to(torch.float64) for v, _ in checks]).tolist()
    start = 0
    for v, reader in checks:
        reader(values[start:start + v.numel()])
        start += v.numel()


def _verify(checks: DeferredChecks | None, values: torch.Tensor, reader: CheckReader) -> None:
    """Read ``values`` now (``checks`` None: a host read, the error raised here) or defer them."""
    if checks is None:
        run_checks([(values, reader)])
    else:
        checks.add(values, reader)


_LOW = 0xFFFFFFFF
_HALF = 1 << 32


def _wrapping_sum(terms: Sequence[torch.Tensor]) -> torch.Tensor:
    """The sum of int64 ring tensors modulo 2^64 (as int64 two's complement), by broadcasting.

    Computed on 32-bit halves so that no int64 operation overflows (signed overflow is
    undefined in C++, so torch promises nothing about it): each term is ``hi * 2^32 + lo`` with
    ``lo = x & (2^32 - 1)`` in [0, 2^32) and ``hi = x >> 32`` in [-2^31, 2^31); summing fewer
    than 2^30 terms keeps both sums in range; the carry moves from ``lo`` to ``hi``, ``hi`` is
    reduced to [-2^31, 2^31) (i.e. modulo 2^32), and ``hi * 2^32 + lo`` lies in [-2^63, 2^63).
    Equal, bit for bit, to numpy's uint64 sum, whose wraparound is defined.
    """
    if not terms:
        raise ConfigError("_wrapping_sum needs at least one term.")
    lo = terms[0] & _LOW
    hi = terms[0] >> 32
    for t in terms[1:]:
        lo = lo + (t & _LOW)
        hi = hi + (t >> 32)
    hi = hi + (lo >> 32)
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
        raise AggregationError(
            f"{what} was encoded in {tag.ring_text()}, but it is read with {ring!r}; every party "
            "must encode with one ring: build one FixedPointRing and give it to all of them."
        )
    return x.detach().as_subclass(torch.Tensor)


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"Invalid backend {backend!r}; choose one of {', '.join(BACKENDS)}.")


# RFC 3526 group 14 (2048-bit MODP): p = 2^2048 - 2^1984 - 1 + 2^64 * (floor(2^1918 pi) + 124476),
# a safe prime with generator 2. Fixed, standard parameters: generating DH parameters at run time
# takes seconds to minutes and buys nothing. The group arithmetic uses Python's pow():
# cryptography 50 deprecated its finite-field DH (dh.DHParameterNumbers warns and is to be
# removed), and modular exponentiation is all this scheme needs. pow() is not constant-time;
# timing side channels are outside the paper's honest-but-curious model.
_MODP14_P = int(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74"
    "020BBEA63B139B22514A08798E3404DDEF9519B3CD3A431B302B0A6DF25F1437"
    "4FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3DC2007CB8A163BF05"
    "98DA48361C55D39A69163FA8FD24CF5F83655D23DCA3AD961C62F356208552BB"
    "9ED529077096966D670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B"
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9DE2BCBF695581718"
    "3995497CEA956AE515D2261898FA051015728E5A8AACAA68FFFFFFFFFFFFFFFF",
    16,
)
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
    """Refuse secure aggregation with fewer than two passive parties.

    Parameters
    ----------
    n_passive : int
        K, the number of passive parties whose embeddings are blinded.
    allow_insecure : bool, default False
        Permit K < 2 anyway (e.g. a two-party experiment that only measures cost).

    Raises
    ------
    SecurityError
        If ``n_passive < 2`` and ``allow_insecure`` is False.
    """
    if isinstance(n_passive, bool) or not isinstance(n_passive, int) or n_passive < 0:
        raise ConfigError(f"n_passive must be a non-negative integer, got {n_passive!r}.")
    if n_passive >= 2 or allow_insecure:
        return
    if n_passive == 1:
        why = ("with one passive party Eq. (5) has no other party to share a key with, so its "
               "blinding factor is r_1 = 0 and the active party reads E_1 in the clear")
    else:
        why = "there is no passive party, so there is no embedding to protect"
    raise SecurityError(
        f"Secure embedding aggregation needs at least 2 passive parties, got {n_passive}: {why}. "
        "Add a passive party, or pass allow_insecure=True if you accept that the active party "
        "sees the plain embedding."
    )


def _check_counter(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not (
        0 <= value < _MAX_COUNTER
    ):
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
    array = np.asarray(ring_u64)  # ufuncs on 0-d arrays return numpy scalars
    if not (array.flags.c_contiguous and array.flags.writeable):
        array = array.copy()
    out = torch.from_numpy(array.view(np.int64))
    return out if torch.device(device).type == "cpu" else out.to(device)


def _to_ring(x: torch.Tensor, what: str, ring: FixedPointRing | None = None) -> np.ndarray:
    """The numpy backend's view of a ring tensor: checked, read back to the host as uint64."""
    return _ring_tensor(x, what, ring).cpu().numpy().view(np.uint64)


class FixedPointRing:
    """Fixed-point encoding of real embeddings into the ring Z_(2^64) (int64 bit patterns).

    ``encode(x) = round(x * 2**scale_bits)``; sums wrap modulo 2^64; ``decode`` reads the
    result as a two's-complement integer and divides by ``2**scale_bits``.

    Parameters
    ----------
    scale_bits : int, default 16
        Fractional bits s. The encoding error is at most ``0.5 * 2**-s`` per entry
        (:attr:`rounding_bound`). 16 bits (error <= 7.6e-6) is far below float32 training noise
        and leaves room for magnitudes up to ``max_abs`` (about 1.4e11 at the defaults).
    max_parties : int, default 1024
        The most values that are ever summed (C). Magnitudes are limited to ``max_abs`` so that
        C encoded values cannot overflow int64. The paper uses up to 10 parties; 1024 leaves a
        wide margin and still allows |x| up to about 1.4e11.
    """

    def __init__(self, *, scale_bits: int = 16, max_parties: int = 1024) -> None:
        if isinstance(scale_bits, bool) or not isinstance(scale_bits, int) or not 0 <= scale_bits <= 52:
            raise ConfigError(f"scale_bits must be an integer in [0, 52], got {scale_bits!r}.")
        if isinstance(max_parties, bool) or not isinstance(max_parties, int) or not 1 <= max_parties <= 2**20:
            raise ConfigError(f"max_parties must be an integer in [1, 2**20], got {max_parties!r}.")
        self.scale_bits = scale_bits
        self.max_parties = max_parties
        self._scale = float(2**scale_bits)
        # The largest float64 integer q with max_parties * q <= 2**63 - 1: float(q) may round up.
        q_max = (2**63 - 1) // max_parties
        q_max_f = float(q_max)
        if q_max_f > q_max:
            q_max_f = float(np.nextafter(q_max_f, 0.0))
        self._q_max = q_max_f

    def __repr__(self) -> str:
        return f"FixedPointRing(scale_bits={self.scale_bits}, max_parties={self.max_parties})"

    @property
    def params(self) -> tuple[int, int]:
        """``(scale_bits, max_parties)``: two rings with equal params encode alike."""
        return self.scale_bits, self.max_parties

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FixedPointRing) and other.params == self.params

    def __hash__(self) -> int:
        return hash(self.params)

    def _tag(self, **provenance: Any) -> RingTag:
        return RingTag(self.scale_bits, self.max_parties, **provenance)

    @property
    def rounding_bound(self) -> float:
        """Largest encoding error per entry, ``0.5 * 2**-scale_bits`` (7.6e-6 at the default 16).

        It also bounds the fixed-point part of :func:`aggregate`'s error: each of the K encoded
        summands errs by at most this much and their sum is divided by C >= K. The masks add no
        error at all. :meth:`mean_error_bound` adds the float rounding of the decoded result.
        """
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
        """Encode a real tensor as an int64 ring tensor ``round(x * 2**scale_bits)``.

        Ties round to even. The result is on ``x``'s device.

        The result is a :class:`RingTensor` tagged with this ring's parameters.

        Parameters
        ----------
        x : Tensor
            Real values (any float dtype, any device).
        checks : DeferredChecks or None, default None
            Where to leave the range checks below, computed on ``x``'s device, for a trainer
            to read later; None reads them at once (a host read), raising here.
        backend : {"torch", "numpy"}, default "torch"
            "numpy": the host reference implementation (reads ``x`` back; checks at once).

        Raises
        ------
        NonFiniteEmbeddingError
            If ``x`` holds NaN or infinity (a :class:`~vflkit.errors.DivergenceError`).
        EmbeddingOverflowError
            If some ``|x|`` exceeds :attr:`max_abs` and the default ring's limit too (the model
            diverged; a :class:`~vflkit.errors.DivergenceError`).
        ConfigError
            If some ``|x|`` exceeds :attr:`max_abs` but the default ring would hold it: this
            ring's ``scale_bits``/``max_parties`` leave too little room (summing
            ``max_parties`` such values would overflow int64).
        """
        _check_backend(backend)
        if backend == "numpy":
            return RingTensor.wrap(_to_torch(self._encode_numpy(x), x.device), self._tag())
        return RingTensor.wrap(self._encode(x, checks=checks), self._tag())

    def decode(self, x: torch.Tensor, *, dtype: torch.dtype = torch.float32, backend: str = "torch") -> torch.Tensor:
        """Decode an int64 ring tensor (a sum of encodings) to reals; ``dtype`` default float32.

        Computed where ``x`` lies (``backend="numpy"``: on the host, the reference). A
        :class:`RingTensor` from another ring setting is refused (:class:`AggregationError`).
        """
        _check_backend(backend)
        if backend == "numpy":
            values = _to_ring(x, "decode's input", self).view(np.int64).astype(np.float64) / self._scale
            return torch.from_numpy(np.asarray(values)).to(device=x.device, dtype=dtype)
        # int64 -> float64 rounds to nearest even, as numpy's astype; dividing by 2**s is exact
        return (_ring_tensor(x, "decode's input", self).to(torch.float64) / self._scale).to(dtype)

    @staticmethod
    def _check_real(x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor) or x.is_complex() or x.dtype == torch.bool:
            raise ConfigError(f"encode needs a real-valued torch tensor, got {getattr(x, 'dtype', type(x))}.")

    def _encode(self, x: torch.Tensor, who: str = "encode", checks: DeferredChecks | None = None) -> torch.Tensor:
        """The encoding as a plain int64 tensor on ``x``'s device; its checks go to ``checks``
        (None: read at once)."""
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
        """The numpy backend's encoding (the reference): on the host, as uint64, checked at once."""
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
            raise NonFiniteEmbeddingError(
                f"{who} got NaN or infinite embedding values ({int(bad)} of {size} entries): the model "
                "diverged; lower the learning rate or clip gradients before aggregating."
            )
        if float(np.rint(largest)) <= self._q_max:
            return
        worst = largest / self._scale
        limit = (f"the ring's limit {self.max_abs:.4g} (scale_bits={self.scale_bits}, "
                 f"max_parties={self.max_parties}: {self.max_parties} such values would overflow "
                 "int64 when summed)")
        default_max_abs = _DEFAULT_MAX_ABS
        if worst <= default_max_abs:
            # the default ring would hold it: the ring chosen is too narrow, not the model wrong
            raise ConfigError(
                f"{who}: embedding magnitude {worst:.4g} exceeds {limit}. The default ring "
                f"(scale_bits=16, max_parties=1024) holds up to {default_max_abs:.4g}: use fewer "
                "scale_bits or a smaller max_parties."
            )
        # Beyond the default's ~1.4e11 no trained model's embedding lies: it blew up, finite
        # still (its loss may not be NaN yet), which is a divergence, not a setting to change.
        raise EmbeddingOverflowError(
            f"{who}: embedding magnitude {worst:.4g} exceeds {limit}: the model diverged (its "
            "embeddings grew without bound); lower the learning rate of that party or clip gradients."
        )


#: :attr:`FixedPointRing.max_abs` at the defaults (about 1.37e11): an embedding beyond it is a
#: diverged model's, one below it but beyond a narrower ring's limit a ring setting's problem.
_DEFAULT_MAX_ABS = FixedPointRing().max_abs


_PREFETCHER: ThreadPoolExecutor | None = None
_PREFETCHER_LOCK = threading.Lock()


def _prefetcher() -> ThreadPoolExecutor:
    """One background thread per process computes the blinding factors asked ahead
    (:meth:`BlindingKeys.prefetch`): the passive parties of a simulation share it."""
    global _PREFETCHER
    with _PREFETCHER_LOCK:
        if _PREFETCHER is None:
            _PREFETCHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vflkit-masks")
        return _PREFETCHER


def _bundle_message(scheme: str, party: int, run: str, agreement: int, public_key: bytes) -> bytes:
    """What party ``party``'s identity key signs for one key agreement.

    Every field but the last is length-prefixed or fixed-size, so no two contexts encode to the
    same bytes: a bundle signed for one (scheme, party, run, agreement) verifies for no other.
    """
    run_bytes = run.encode()
    return b"".join((
        _BUNDLE_LABEL, len(scheme).to_bytes(1, "big"), scheme.encode(), party.to_bytes(4, "big"),
        len(run_bytes).to_bytes(2, "big"), run_bytes, agreement.to_bytes(4, "big"), public_key,
    ))


def _check_run(run: Any) -> str:
    if not isinstance(run, str) or not run or len(run.encode()) >= 2**16:
        raise ConfigError(f"run must be a non-empty string (the run's identifier) under 64 KiB, got {run!r}.")
    return run


class IdentityKey:
    """A passive party's long-term Ed25519 identity key: it signs the party's key-agreement
    public key for each key agreement (:meth:`BlindingKeys.signed_public_key`).

    Its public half reaches the other passive parties through a :class:`KeyDirectory` set up
    before training (a PKI or a pre-shared directory), never through the active party: a key
    the active party relays is only as trustworthy as the signature it carries.

    Parameters
    ----------
    party : int
        The passive party's index k in 1..K.
    seed : int or None, default None
        None draws the key from the OS's randomness. An integer derives it from
        ``SHA-256(seed, party)`` for reproducible tests: anyone who knows the seed can sign as
        this party, so a seeded identity authenticates nothing against that person.
    """

    def __init__(self, party: int, *, seed: int | None = None) -> None:
        if isinstance(party, bool) or not isinstance(party, int) or party < 1:
            raise ConfigError(f"party must be a passive party's index 1..K (>= 1), got {party!r}.")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ConfigError(f"seed must be an integer or None, got {seed!r}.")
        self.party = party
        if seed is None:
            self._private = ed25519.Ed25519PrivateKey.generate()
        else:
            material = hashlib.sha256(f"vflkit-identity-key|{seed}|{party}".encode()).digest()
            self._private = ed25519.Ed25519PrivateKey.from_private_bytes(material)

    def __repr__(self) -> str:
        return f"IdentityKey(party={self.party})"

    def public_key(self) -> bytes:
        """The 32-byte Ed25519 public key to register in the :class:`KeyDirectory`."""
        return self._private.public_key().public_bytes_raw()

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``message``."""
        return self._private.sign(message)


class KeyDirectory:
    """What every passive party knows before training, independently of the active party.

    It holds each passive party's identity public key (:class:`IdentityKey`) and the run's
    identifier. In a deployment it is a PKI or a directory the parties exchanged out of band;
    here the simulation builds it directly, outside the channel. A key bundle relayed by the
    active party is accepted only if it carries the signature of the identity registered here
    for its party, over this run and the expected key agreement (:meth:`open`).

    Parameters
    ----------
    identities : dict[int, bytes]
        ``{k: IdentityKey(k).public_key()}`` for every passive party k.
    run : str
        The run's identifier, fresh for every run (e.g. the run's config key plus a random
        nonce): bundles of another run do not verify here.
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
        """The passive parties with a registered identity, ascending."""
        return tuple(sorted(self._verifiers))

    def open(self, party: int, bundle: bytes, *, scheme: str, agreement: int) -> bytes:
        """The key-agreement public key inside ``bundle``, once its signature is verified.

        ``bundle`` is ``public key || signature`` (:meth:`BlindingKeys.signed_public_key`); the
        signature must be party ``party``'s registered identity's, over ``scheme``, ``party``,
        this directory's run and ``agreement``.

        Raises
        ------
        SecurityError
            If ``party`` has no registered identity, the bundle carries no signature, or the
            signature does not verify: the key was substituted or altered by whoever relayed
            it, or replayed from another run, key agreement or party.
        """
        agreement = _check_counter("agreement", agreement)
        if party not in self._verifiers:
            raise SecurityError(
                f"a key bundle was relayed for party {party!r}, which has no identity in the key "
                f"directory (registered: {list(self.parties)}): refusing a key nobody can vouch for."
            )
        if not isinstance(bundle, (bytes, bytearray)) or len(bundle) <= _SIGNATURE_BYTES:
            got = f"{len(bundle)} bytes" if isinstance(bundle, (bytes, bytearray)) else type(bundle).__name__
            raise SecurityError(
                f"the key relayed as party {party}'s carries no signature ({got}): with a key directory "
                "every key must arrive as BlindingKeys.signed_public_key(...), public key || signature."
            )
        public_key, signature = bytes(bundle[:-_SIGNATURE_BYTES]), bytes(bundle[-_SIGNATURE_BYTES:])
        try:
            self._verifiers[party].verify(signature, _bundle_message(scheme, party, self.run, agreement, public_key))
        except InvalidSignature:
            raise SecurityError(
                f"the key relayed as party {party}'s is not signed by party {party}'s registered identity "
                f"for this run ({self.run!r}) and key agreement {agreement} ({scheme}): whoever relayed it "
                "substituted or altered it, or replayed a bundle of another run, key agreement or party. "
                "Refusing it: agreeing to it could let the relaying party compute this party's masks."
            ) from None
        return public_key


class BlindingKeys:
    """One passive party's key pair, pairwise shared keys and blinding factors (Eqs. 4-5).

    Protocol: ``public_key()`` is sent to the active party, which relays every passive party's
    public key to the others; each party calls ``agree({j: public_key_j for every other j})``,
    then ``blind(...)`` (or :meth:`blinding_factor`) for each step. Nothing else is ever sent.
    Authenticated variant: each party sends ``signed_public_key(identity, ...)`` instead and
    calls ``agree(bundles, directory=..., agreement=...)``, which refuses a key that its
    party's registered identity did not sign for this run and agreement (the masks are the same).

    Parameters
    ----------
    party : int
        This passive party's index k in 1..K (the active party is l_0 and holds no keys).
    scheme : {"x25519", "ffdh"}, default "x25519"
        Key agreement: X25519 (RFC 7748, through ``cryptography``) or finite-field DH in
        RFC 3526's fixed 2048-bit MODP group 14 (through Python's ``pow``, see above).
    seed : int or None, default None
        None draws the private key from the OS's randomness (``cryptography``'s key generation,
        or :mod:`secrets` for ffdh), as a real deployment must. An integer derives it deterministically from
        ``SHA-256(seed, scheme, party)`` for reproducible tests and notebooks: anyone who knows
        the seed knows the key, so seeded keys protect nothing against that person.
    """

    def __init__(self, party: int, *, scheme: str = "x25519", seed: int | None = None) -> None:
        if isinstance(party, bool) or not isinstance(party, int) or party < 1:
            raise ConfigError(f"party must be a passive party's index 1..K (>= 1), got {party!r}.")
        if scheme not in SCHEMES:
            raise ConfigError(f"Invalid scheme {scheme!r}; choose one of {', '.join(SCHEMES)}.")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ConfigError(f"seed must be an integer or None, got {seed!r}.")
        self.party = party
        self.scheme = scheme
        material = None
        if seed is not None:
            material = hashlib.sha256(f"vflkit-blinding-key|{scheme}|{seed}|{party}".encode()).digest()
        if scheme == "x25519":
            self._private = (x25519.X25519PrivateKey.from_private_bytes(material)
                             if material is not None else x25519.X25519PrivateKey.generate())
            self._public = self._private.public_key().public_bytes_raw()
        else:
            # A 256-bit exponent is the usual size for group 14 (>= 2x its ~112-bit strength,
            # NIST SP 800-56A) and keeps pow() fast.
            raw = material if material is not None else secrets.token_bytes(32)
            self._private = 2 + int.from_bytes(raw, "big")
            y = pow(_MODP14_G, self._private, _MODP14_P)
            self._public = y.to_bytes(_FFDH_PUBLIC_BYTES, "big")
        self._agreed = False
        self._ciphers: dict[int, algorithms.AES] = {}
        self._pair_keys: dict[int, bytes] = {}
        self._literal: dict[int, int] = {}
        self._used: set[tuple[int, int]] = set()
        self._ahead: tuple[tuple[tuple[int, ...], int, int], Future] | None = None

    def __repr__(self) -> str:
        return f"BlindingKeys(party={self.party}, scheme={self.scheme!r}, peers={sorted(self._pair_keys)})"

    def public_key(self) -> bytes:
        """The bytes to send to the active party (32 for x25519, 256 for ffdh)."""
        return self._public

    def signed_public_key(self, identity: IdentityKey, *, run: str, agreement: int = 0) -> bytes:
        """The key bundle to send instead of :meth:`public_key`: ``public_key() || signature``.

        The signature is ``identity``'s (this party's, registered in the peers'
        :class:`KeyDirectory`) over the scheme, this party's index, ``run`` and ``agreement``
        (the key agreement's index in the run), so a bundle verifies for exactly one party, run
        and key agreement. 64 bytes longer than the public key.
        """
        if not isinstance(identity, IdentityKey):
            raise ConfigError(f"identity must be an IdentityKey, got {type(identity).__name__}.")
        if identity.party != self.party:
            raise ConfigError(f"party {self.party} cannot sign its key with party {identity.party}'s identity key.")
        message = _bundle_message(self.scheme, self.party, _check_run(run), _check_counter("agreement", agreement),
                                  self._public)
        return self._public + identity.sign(message)

    @property
    def peers(self) -> tuple[int, ...]:
        """The other passive parties this party shares a key with, ascending."""
        return tuple(sorted(self._pair_keys))

    def agree(self, peers: dict[int, bytes], *, allow_insecure: bool = False,
              directory: KeyDirectory | None = None, agreement: int = 0) -> None:
        """Derive ``CK_{k,j}`` with every other passive party j (Eq. 4).

        Parameters
        ----------
        peers : dict[int, bytes]
            ``{j: public_key of party j}`` for every OTHER passive party (K - 1 entries); with
            ``directory``, ``{j: signed_public_key of party j}``.
        allow_insecure : bool, default False
            Permit an empty ``peers`` (K = 1, r_1 = 0); see :func:`check_passive_count`.
        directory : KeyDirectory or None, default None
            Authenticate the keys: each must be a bundle signed by its party's identity in
            ``directory`` for its run and ``agreement``, and ``peers`` must hold every other
            party of the directory. None accepts the keys as relayed (the paper's
            honest-but-curious model: a dishonest relay can substitute its own keys and unmask
            this party's embeddings; see the module docstring).
        agreement : int, default 0
            The index of this key agreement in the run (a fresh one for every agreement, e.g.
            after a resume); only read with ``directory``.

        Raises
        ------
        SecurityError
            With ``directory``: a key that is unsigned, signed by another identity or for
            another run, agreement or party, or a peer of the directory missing or added.
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
        ciphers, pair_keys, literal = {}, {}, {}
        for j, pk in peers.items():
            secret = self._exchange(j, bytes(pk))
            lo, hi = sorted((self.party, j))
            info = b"|".join((_KDF_LABEL, self.scheme.encode(), f"{lo}-{hi}".encode()))
            # One HKDF output: 32 bytes of CK_{k,j} for the AES stream, 8 for the literal H(CK),
            # so the insecure literal variant never reuses any key material of the real one.
            okm = HKDF(algorithm=hashes.SHA256(), length=40, salt=None, info=info).derive(secret)
            pair_keys[j] = okm[:32]
            ciphers[j] = algorithms.AES(okm[:32])
            literal[j] = int.from_bytes(okm[32:], "little")
        self._ciphers, self._pair_keys, self._literal = ciphers, pair_keys, literal
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
            raise SecurityError(
                f"party {self.party} was relayed keys of parties {sorted(peers)}, but the key directory "
                f"registers {sorted(expected)} as its peers: the relaying party dropped or added a key. "
                "Refusing to agree on a set of peers other than the directory's."
            )
        return {j: directory.open(j, bundle, scheme=self.scheme, agreement=agreement) for j, bundle in peers.items()}

    def _exchange(self, j: int, pk: bytes) -> bytes:
        try:
            if self.scheme == "x25519":
                if len(pk) != _X25519_PUBLIC_BYTES:
                    raise ValueError(f"{len(pk)} bytes, expected {_X25519_PUBLIC_BYTES}")
                return self._private.exchange(x25519.X25519PublicKey.from_public_bytes(pk))
            if len(pk) != _FFDH_PUBLIC_BYTES:
                raise ValueError(f"{len(pk)} bytes, expected {_FFDH_PUBLIC_BYTES}")
            y = int.from_bytes(pk, "big")
            # For a safe-prime group the range check is the required validation (RFC 7919
            # sec. 5.1): it excludes the elements of order 1 and 2 that would fix the secret. The
            # full subgroup test y^q = 1 costs a 2047-bit exponentiation per peer and
            # would guard only the parity of the private exponent.
            if not 2 <= y <= _MODP14_P - 2:
                raise ValueError("not in [2, p-2]")
            # Padded to the size of p, as RFC 2631 and TLS do, so both sides hash the same bytes.
            return pow(y, self._private, _MODP14_P).to_bytes(_FFDH_PUBLIC_BYTES, "big")
        except (ValueError, UnsupportedAlgorithm) as exc:  # cryptography raises ValueError
            raise ConfigError(
                f"public key of party {j} is not a valid {self.scheme} public key ({exc}); every "
                f"passive party must use scheme={self.scheme!r} and send public_key() unchanged."
            ) from exc

    def shared_key(self, peer: int) -> bytes:
        """``CK_{k,peer}``, the 32-byte key this party shares with ``peer``. Secret: never send it."""
        self._require(peer)
        return self._pair_keys[peer]

    def mask_stream(self, peer: int, shape: Sequence[int] | int, *, round: int, step: int) -> torch.Tensor:
        """``PRG(CK_{k,peer})`` at ``(round, step)``: one uniform int64 per entry of ``shape``.

        AES-256-CTR keyed by ``CK`` with initial counter block ``round || step || 0`` (4 + 4 + 8
        bytes, big-endian), so distinct ``(round, step)`` never share a counter block and both
        parties of a pair generate the same stream.
        """
        self._require(peer)
        return _to_torch(self._stream(peer, _shape(shape), round, step))

    def blinding_factor(self, shape: Sequence[int] | int, *, round: int, step: int) -> torch.Tensor:
        """``r_k`` of Eq. (5), one mask per entry: ``sum_{j != k} s(k, j) PRG(CK_{k,j})`` (int64, CPU).

        ``s(k, j) = -1 if k > j else +1``, so the ``r_k`` of all K parties sum to exactly 0 in the
        ring. Pure: the same ``(round, step)`` always gives the same factor.
        """
        shape = _shape(shape)
        self._require_agreed()
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] == (shape, round, step):
            return ahead[1].result()
        return self._blinding_factor(shape, round, step)

    def prefetch(self, shape: Sequence[int] | int, *, round: int, step: int, pin_memory: bool = False) -> None:
        """Start computing :meth:`blinding_factor` for ``(round, step)`` on a background thread.

        The blinding factors do not depend on the data, only on the keys and the counter, so
        the next step's can be generated while this step trains, off its critical path. The
        factor is the same as computed on demand (the cryptography is unchanged); a later
        :meth:`blinding_factor` for another shape or counter discards it and computes its own.
        ``pin_memory`` (for a GPU) leaves it in pinned host memory, from which :func:`blind`
        copies it to the device without waiting for the copy.
        """
        shape = _shape(shape)
        self._require_agreed()
        self._ahead = ((shape, round, step),
                       _prefetcher().submit(self._blinding_factor, shape, round, step, pin_memory))

    def _blinding_factor(self, shape: tuple[int, ...], round: int, step: int,
                         pin_memory: bool = False) -> torch.Tensor:
        r = np.zeros(shape, dtype=np.uint64)
        for j in self._ciphers:
            stream = self._stream(j, shape, round, step)
            if self.party > j:
                r -= stream
            else:
                r += stream
        out = _to_torch(r)
        return out.pin_memory() if pin_memory else out

    def literal_blinding_factor(self) -> torch.Tensor:
        """INSECURE, for demonstration only: Eq. (5) read literally, one scalar per party.

        ``r_k = sum_{j != k} s(k, j) H(CK_{k,j})`` as a 0-d int64 tensor added to every entry;
        the same for every round, as in the paper's notation. It cancels like the real factor but
        leaves all differences between entries of an embedding in the clear.
        """
        self._require_agreed()
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

    def _require_agreed(self) -> None:
        if not self._agreed:
            raise ConfigError(
                f"party {self.party} has no shared keys yet; call agree() with the other passive "
                "parties' public keys first."
            )

    def _require(self, peer: int) -> None:
        if peer not in self._ciphers:
            raise ConfigError(
                f"party {self.party} shares no key with party {peer!r}; known peers: "
                f"{list(self.peers) or 'none (call agree() first)'}."
            )

    def _mark_used(self, round: int, step: int) -> None:
        key = (_check_counter("round", round), _check_counter("step", step))
        if key in self._used:
            raise SecurityError(
                f"party {self.party} already blinded a tensor at round={round}, step={step}: the "
                "same masks on two tensors reveal their difference to the active party. Use a "
                "distinct (round, step) for every tensor blinded (e.g. a separate round range "
                "for evaluation batches)."
            )
        self._used.add(key)


def blind(embedding: torch.Tensor, keys: BlindingKeys, *, ring: FixedPointRing, round: int,
          step: int, mode: str = "per_entry", checks: DeferredChecks | None = None,
          backend: str = "torch") -> torch.Tensor:
    """Eq. (6): the blinded embedding ``[E_k] = encode(E_k) + r_k`` (int64 ring tensor).

    The result is a :class:`RingTensor` whose :class:`RingTag` names the ring, party k, the
    parties its masks cancel with and ``(round, step, mode)``, so :func:`aggregate` can refuse
    a set of contributions that would not cancel. A NaN/inf embedding raises
    :class:`NonFiniteEmbeddingError`. This is what passive party k sends to the active party. Each ``(round, step)`` may be used
    for one tensor only (a second call raises :class:`SecurityError`). No gradient flows through
    it: the active party cannot differentiate through masks.

    Parameters
    ----------
    embedding : Tensor
        The local embedding ``E_k`` (any shape, real).
    keys : BlindingKeys
        Party k's keys, after :meth:`BlindingKeys.agree`.
    ring : FixedPointRing
        The encoding shared by all parties.
    round, step : int
        Training round and step (batch) in [0, 2**32); they select fresh masks.
    mode : {"per_entry", "literal_scalar"}, default "per_entry"
        "literal_scalar" adds :meth:`BlindingKeys.literal_blinding_factor` instead: INSECURE,
        kept only to demonstrate the leak of the literal reading of Eq. (5).
    checks : DeferredChecks or None, default None
        Where to leave the encoding's checks (NaN/inf, beyond the ring) for a trainer to read
        later; None reads them at once, raising here (see :meth:`FixedPointRing.encode`).
    backend : {"torch", "numpy"}, default "torch"
        "torch": encode and add the mask on the embedding's device, the mask copied there from
        pinned host memory without a wait. "numpy": the host reference (checks at once).
    """
    if mode not in MODES:
        raise ConfigError(f"Invalid mode {mode!r}; choose one of {', '.join(MODES)}.")
    if not isinstance(keys, BlindingKeys):
        raise ConfigError(f"keys must be a BlindingKeys, got {type(keys).__name__}.")
    if not isinstance(ring, FixedPointRing):
        raise ConfigError(f"ring must be a FixedPointRing, got {type(ring).__name__}.")
    _check_backend(backend)
    who = f"blind (passive party {keys.party})"
    # encoded (and checked, unless deferred) before the mask is used: a refused embedding
    # leaves its (round, step) free
    encoded = ring._encode_numpy(embedding, who) if backend == "numpy" else ring._encode(embedding, who, checks)
    if mode == "literal_scalar":
        r = keys.literal_blinding_factor()
    else:
        keys._require_agreed()
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
    """Eq. (7): the global embedding ``E = (E_a + sum_k [E_k]) / C``, computed by the active party.

    The blinded embeddings are summed in the ring (the masks cancel exactly), decoded, added to
    the active party's own embedding in float64 and divided by C. Against the exact mean the
    error is at most ``ring.rounding_bound`` per entry plus float rounding; the full bound is
    ``ring.mean_error_bound(max |E|, dtype=dtype)``.

    Parameters
    ----------
    active_embedding : Tensor or None
        ``E_a``, the active party's own embedding (not blinded: it never leaves the active
        party), or None if the active party contributes no embedding.
    blinded : sequence of Tensor
        ``[E_k]`` from all K passive parties (int64, same shape). Every one is needed.
    ring : FixedPointRing
        The encoding the passive parties used.
    n_parties : int or None, default None
        C; None means K + 1 (K without an active embedding).
    allow_insecure : bool, default False
        Permit K < 2; see :func:`check_passive_count`.
    dtype : torch.dtype, default torch.float32
        Result dtype. The result is on ``active_embedding``'s device (else the first blinded's).
    checks : DeferredChecks or None, default None
        Where to leave the checks computed on the device (a non-finite active embedding,
        blinding that did not cancel) for a trainer to read later; None reads them at once,
        raising here. The checks of the tags (which parties, steps, rings) need no read and
        always raise here.
    backend : {"torch", "numpy"}, default "torch"
        "torch": the ring sum, decoding and mean on the result's device. "numpy": the host
        reference, bit for bit the same result (checks at once).

    Raises
    ------
    AggregationError
        If the contributions cannot cancel: more than ``n_parties``, a passive party's
        embedding missing or repeated, embeddings of different rings, steps or key agreements
        (read from their :class:`RingTag`), or, for untagged int64 tensors, a sum outside the
        range K encodings can reach (a leftover mask makes it uniform in the ring).
    NonFiniteEmbeddingError
        If ``active_embedding`` holds NaN or infinity.
    """
    blinded = list(blinded)
    check_passive_count(len(blinded), allow_insecure=allow_insecure)
    contributions = len(blinded) + (active_embedding is not None)
    if contributions == 0:
        raise ConfigError("aggregate needs an active embedding or at least one blinded embedding.")
    if contributions > ring.max_parties:
        raise ConfigError(
            f"{contributions} embeddings exceed the ring's max_parties={ring.max_parties}; their "
            "sum could overflow. Build the FixedPointRing with a larger max_parties."
        )
    n = contributions if n_parties is None else n_parties
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"n_parties must be a positive integer, got {n_parties!r}.")
    if contributions > n:
        raise AggregationError(
            f"{contributions} contributions ({len(blinded)} blinded"
            + (" + the active embedding" if active_embedding is not None else "")
            + f") for n_parties={n}: each party contributes one embedding, so some contribution is "
            "repeated or n_parties is wrong; pass each passive party's blinded embedding once."
        )
    shapes = {tuple(b.shape) for b in blinded}
    if active_embedding is not None:
        shapes.add(tuple(active_embedding.shape))
    if len(shapes) > 1:
        raise ConfigError(f"all embeddings must have one shape to be aggregated, got {sorted(shapes)}.")
    shape = shapes.pop()
    _check_backend(backend)
    device = active_embedding.device if active_embedding is not None else blinded[0].device
    if active_embedding is not None and not active_embedding.is_floating_point():
        raise ConfigError(f"active_embedding must be a float tensor, got {active_embedding.dtype}.")
    if backend == "numpy":
        return _aggregate_numpy(active_embedding, blinded, ring=ring, n=n, shape=shape, device=device, dtype=dtype)
    active = None
    if active_embedding is not None:
        active = active_embedding.detach().to(torch.float64)
        if active.numel():
            _verify(checks, torch.isfinite(active).logical_not().sum().to(torch.float64).reshape(1),
                    _read_active_check)
    parts = [_onto(_ring_tensor(b, f"blinded embedding {i}", ring), device) for i, b in enumerate(blinded)]
    ring_sum = _wrapping_sum(parts) if parts else torch.zeros(shape, dtype=torch.int64, device=device)
    _check_contributions(blinded)
    _check_cancelled(ring_sum, len(blinded), ring, untagged=any(_tag_of(b) is None for b in blinded),
                     checks=checks)
    # the numpy backend's operations in its order, each correctly rounded in float64 on any
    # device: int64 -> float64, / 2**s (exact), + E_a, / C
    total = ring_sum.to(torch.float64) / ring._scale
    if active is not None:
        total = total + active
    return (total / n).to(dtype)


def _read_active_check(values: list[float]) -> None:
    if values[0]:
        raise NonFiniteEmbeddingError(
            "aggregate got an active embedding with NaN or infinite values: the active party's "
            "model diverged; lower the learning rate or clip gradients."
        )


def _aggregate_numpy(active_embedding: torch.Tensor | None, blinded: list[torch.Tensor], *, ring: FixedPointRing,
                     n: int, shape: tuple[int, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """:func:`aggregate` on the host in numpy uint64: the reference the torch backend equals."""
    active_host: np.ndarray | None = None
    if active_embedding is not None:
        # One copy to the host, which the sum below needs anyway; checked there, so a device
        # embedding costs one read back rather than two (a bool() of a device flag, then the copy).
        active_host = active_embedding.detach().to("cpu", torch.float64).numpy()
        _read_active_check([float((~np.isfinite(active_host)).sum())])
    ring_sum = np.zeros(shape, dtype=np.uint64)
    for i, b in enumerate(blinded):
        ring_sum += _to_ring(b, f"blinded embedding {i}", ring)
    _check_contributions(blinded)
    _check_cancelled(torch.from_numpy(ring_sum.view(np.int64)), len(blinded), ring,
                     untagged=any(_tag_of(b) is None for b in blinded))
    total = ring_sum.view(np.int64).astype(np.float64) / ring._scale
    if active_host is not None:
        total = total + active_host
    return torch.from_numpy(np.asarray(total / n)).to(device=device, dtype=dtype)


def _check_contributions(blinded: list[torch.Tensor]) -> None:
    """From the tags of blinded embeddings: one per passive party of one key agreement, all of
    one (round, step) and mode. Untagged int64 tensors are only range-checked."""
    by_party: dict[int, RingTag] = {}
    for i, b in enumerate(blinded):
        tag = _tag_of(b)
        if tag is None or tag.party is None:
            continue
        if tag.party in by_party:
            raise AggregationError(
                f"passive party {tag.party}'s blinded embedding is passed more than once (again at "
                f"position {i}): its mask would not cancel. Pass each passive party's blinded embedding once."
            )
        by_party[tag.party] = tag
    if not by_party:
        return
    first_party, first = next(iter(by_party.items()))
    for party, tag in by_party.items():
        if tag.parties != first.parties:
            raise AggregationError(
                f"passive party {party} agreed keys with parties {list(tag.parties)}, party {first_party} "
                f"with {list(first.parties)}: masks of different key agreements do not cancel. Aggregate "
                "only the parties of one agreement."
            )
        if tag.mode != first.mode or (tag.mode == "per_entry" and (tag.round, tag.step) != (first.round, first.step)):
            raise AggregationError(
                f"passive party {party}'s embedding was blinded at round={tag.round}, step={tag.step} "
                f"({tag.mode}), party {first_party}'s at round={first.round}, step={first.step} ({first.mode}): "
                "masks of different steps or modes do not cancel. Aggregate the embeddings of one step together."
            )
    missing = sorted(set(first.parties) - set(by_party))
    if missing:
        raise AggregationError(
            f"no blinded embedding from passive part{'y' if len(missing) == 1 else 'ies'} {missing} "
            f"(got {sorted(by_party)} of {list(first.parties)}): without every party's mask the sum is "
            "noise. Pass every passive party's blinded embedding of this step."
        )


#: The largest chance an untagged aggregation with a contribution missing may pass the range
#: check unnoticed; below it, untagged embeddings are too small to verify and are refused.
UNTAGGED_MISS_BOUND = 2.0 ** -40


def _check_cancelled(ring_sum: torch.Tensor, k: int, ring: FixedPointRing, *, untagged: bool = False,
                     checks: DeferredChecks | None = None) -> None:
    """The masks cancelled only if the sum lies where k encodings can reach, |sum| <= k * q_max.

    A sum with a mask left over is uniform in the ring and lands there with probability about
    2 k q_max / 2^64 per entry, so this catches a missing or repeated untagged contribution
    unless the embedding has very few entries: then (``untagged``) the chance of a miss,
    that probability to the power of the entries, must stay under :data:`UNTAGGED_MISS_BOUND`,
    else the aggregation is refused rather than possibly wrong (tagged embeddings are checked by
    their tags, whatever their size). The count of entries outside is computed where
    ``ring_sum`` (int64) lies and read by ``checks`` (None: at once).
    """
    size = ring_sum.numel()
    if k == 0 or size == 0:
        return
    limit = k * int(ring._q_max)
    if untagged:
        per_entry = min(1.0, (2 * limit + 1) / 2.0 ** 64)
        if per_entry ** size > UNTAGGED_MISS_BOUND:
            raise AggregationError(
                f"{size} entries of untagged blinded embeddings are too few to verify that every "
                "passive party's contribution is present (a missing one would pass the range check with "
                f"probability {per_entry ** size:.1e}); pass the tagged tensors blind() returns")
    outside = ((ring_sum > limit) | (ring_sum < -limit)).sum().to(torch.float64).reshape(1)

    def read(values: list[float]) -> None:
        if values[0]:
            raise AggregationError(
                f"the sum of the {k} blinded embeddings lies outside what {k} encodings in {ring!r} can reach "
                f"in {int(values[0])} of {size} entries: the blinding factors did not cancel. A passive "
                "party's contribution is missing, repeated, or from another step, key agreement or ring; pass "
                "each passive party's blinded embedding of one step exactly once."
            )

    _verify(checks, outside, read)


def benchmark_masking(*, n_passive: int = 10, shape: Sequence[int] = (128, 128), repeats: int = 50,
                      scheme: str = "x25519") -> dict[str, float]:
    """Median milliseconds of the masking primitives, for the project's benchmark.

    Returns ``pair_stream_ms`` (one ``PRG(CK_{k,j})`` over ``shape``), ``blinding_factor_ms``
    (one party's ``r_k``: ``n_passive - 1`` streams), ``blind_ms`` (encode + ``r_k``, one party)
    and ``aggregate_ms`` (the active party's sum and decode of ``n_passive`` embeddings).
    Defaults: 10 passive parties, 128 x 128 entries, 50 repeats.
    """
    check_passive_count(n_passive)
    ring = FixedPointRing()
    keys = {k: BlindingKeys(k, scheme=scheme, seed=k) for k in range(1, n_passive + 1)}
    publics = {k: kp.public_key() for k, kp in keys.items()}
    for k, kp in keys.items():
        kp.agree({j: pk for j, pk in publics.items() if j != k})
    gen = torch.Generator().manual_seed(0)
    embedding = torch.randn(tuple(shape), generator=gen)
    counter = iter(range(2**31))

    def median_ms(fn) -> float:
        fn()  # warm-up
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return 1e3 * float(np.median(times))

    blinded = [blind(embedding, kp, ring=ring, round=0, step=0) for kp in keys.values()]
    return {
        "pair_stream_ms": median_ms(lambda: keys[1].mask_stream(2, shape, round=1, step=next(counter))),
        "blinding_factor_ms": median_ms(lambda: keys[1].blinding_factor(shape, round=1, step=next(counter))),
        "blind_ms": median_ms(lambda: blind(embedding, keys[1], ring=ring, round=2, step=next(counter))),
        "aggregate_ms": median_ms(lambda: aggregate(embedding, blinded, ring=ring)),
    }
