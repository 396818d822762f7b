"""FedSVD: lossless federated SVD with random orthogonal masks (Chai et al., KDD 2022).

Pure functions; :mod:`vflkit.methods.vfedtrans` runs them as a protocol between a key
generator, the participants and a third-party server (APC-VFL Appendix E).

Each participant sends its column block masked by random orthogonal ``P`` and its rows of
``Q``; the server factorises the sum ``P X Q``, whose singular values are X's, and a participant
holding P unmasks the left singular vectors; the server only ever sees masked matrices (why this
is exact: docs/engine.md, "FedSVD").

``P`` is built as Chai et al.'s "efficient" mask: a block-diagonal matrix of independent Haar
random orthogonal blocks (``block_size`` rows each); a dense Haar matrix over 10000 aligned
samples needs a 10000 x 10000 QR, minutes on a laptop CPU. ``block_size=None`` gives the dense
one.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..errors import ConfigError


def random_orthogonal(n: int, *, generator: torch.Generator, block_size: int | None = None,
                      dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A random orthogonal ``n x n`` matrix: Haar (QR of a Gaussian matrix with the signs of
    R's diagonal fixed), or block-diagonal with Haar blocks of ``block_size`` (the last block
    takes the remainder) when ``block_size`` is given."""
    if not isinstance(n, int) or n < 1:
        raise ConfigError(f"n must be a positive integer, got {n!r}")
    if block_size is not None and (not isinstance(block_size, int) or block_size < 1):
        raise ConfigError(f"block_size must be a positive integer or None, got {block_size!r}")

    def haar(m: int) -> torch.Tensor:
        q, r = torch.linalg.qr(torch.randn(m, m, generator=generator, dtype=torch.float64))
        return (q * torch.sign(torch.diagonal(r))).to(dtype)

    if block_size is None or block_size >= n:
        return haar(n)
    sizes = [block_size] * (n // block_size)
    sizes[-1] += n - sum(sizes)
    return torch.block_diag(*(haar(m) for m in sizes))


def column_blocks(q: torch.Tensor, widths: Sequence[int]) -> list[torch.Tensor]:
    """``B_k``: the rows of ``Q`` that multiply participant k's columns (``widths[k]`` each)."""
    if sum(widths) != q.shape[0]:
        raise ConfigError(f"participants' widths {list(widths)} do not add up to Q's {q.shape[0]} rows")
    return list(torch.split(q, list(widths), dim=0))


def mask(x_k: torch.Tensor, p: torch.Tensor, b_k: torch.Tensor) -> torch.Tensor:
    """Participant k's masked block ``X'_k = P X_k B_k`` (rows x all columns)."""
    x_k = x_k.to(p.dtype)
    if x_k.shape[0] != p.shape[0] or x_k.shape[1] != b_k.shape[0]:
        raise ConfigError(f"cannot mask X_k {tuple(x_k.shape)} with P {tuple(p.shape)} and B_k {tuple(b_k.shape)}")
    return p @ (x_k @ b_k)


def masked_svd(masked: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The server's step: add the masked blocks and take the thin SVD ``U' S V'^T`` of the sum."""
    total = torch.stack(list(masked)).sum(dim=0)
    u, s, vh = torch.linalg.svd(total, full_matrices=False)
    return u, s, vh


def unmask_u(u_masked: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """A participant's step: the left singular vectors of X, ``U = P^T U'``."""
    return p.T @ u_masked


def unmask_v(vh_masked: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """The right singular vectors of X (as ``V^T``): ``V^T = V'^T Q^T``."""
    return vh_masked @ q.T


__all__ = ["column_blocks", "mask", "masked_svd", "random_orthogonal", "unmask_u", "unmask_v"]
