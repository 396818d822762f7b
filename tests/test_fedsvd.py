"""FedSVD (vflkit.methods.fedsvd): the masked factorisation is the plain SVD."""

import pytest
import torch

from vflkit.errors import ConfigError
from vflkit.methods import fedsvd


def _data(m=60, widths=(4, 7), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, sum(widths), generator=g, dtype=torch.float64)
    return x, list(torch.split(x, list(widths), dim=1))


@pytest.mark.parametrize("block_size", [None, 16])
def test_random_orthogonal_is_orthogonal(block_size):
    """P^T P = I, dense or block-diagonal."""
    p = fedsvd.random_orthogonal(50, generator=torch.Generator().manual_seed(1), block_size=block_size)
    assert torch.allclose(p.T @ p, torch.eye(50, dtype=p.dtype), atol=1e-10)
    if block_size:
        assert p[0, 20] == 0 and p[45, 3] == 0  # off-block entries stay zero


@pytest.mark.parametrize("block_size", [None, 16])
def test_masked_svd_reconstructs_plain_svd(block_size):
    """Singular values match numpy's SVD exactly, U = P^T U' matches up to column signs, and
    U S V^T rebuilds X."""
    x, blocks = _data()
    g = torch.Generator().manual_seed(2)
    p = fedsvd.random_orthogonal(x.shape[0], generator=g, block_size=block_size)
    q = fedsvd.random_orthogonal(x.shape[1], generator=g)
    b = fedsvd.column_blocks(q, [blk.shape[1] for blk in blocks])
    masked = [fedsvd.mask(blk, p, bk) for blk, bk in zip(blocks, b)]
    u_m, s, vh_m = fedsvd.masked_svd(masked)
    u, vh = fedsvd.unmask_u(u_m, p), fedsvd.unmask_v(vh_m, q)
    u0, s0, vh0 = torch.linalg.svd(x, full_matrices=False)
    assert torch.allclose(s, s0, atol=1e-10)
    assert torch.allclose((u.T @ u0).abs(), torch.eye(len(s0), dtype=x.dtype), atol=1e-8)
    assert torch.allclose(u @ torch.diag(s) @ vh, x, atol=1e-10)


def test_masked_blocks_hide_the_data():
    """What the server receives is not the participant's data (nor a column subset of it)."""
    x, blocks = _data()
    g = torch.Generator().manual_seed(3)
    p = fedsvd.random_orthogonal(x.shape[0], generator=g, block_size=10)
    q = fedsvd.random_orthogonal(x.shape[1], generator=g)
    b = fedsvd.column_blocks(q, [4, 7])
    sent = fedsvd.mask(blocks[0], p, b[0])
    assert sent.shape == (60, 11)
    assert (sent[:, :4] - blocks[0]).abs().max() > 0.1


def test_bad_widths_fail():
    """Participants' widths that do not add up to Q's size are an error."""
    q = fedsvd.random_orthogonal(5, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ConfigError, match="do not add up"):
        fedsvd.column_blocks(q, [2, 2])
