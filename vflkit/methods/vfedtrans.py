"""VFedTrans (Huang et al., WWW 2023) with FedSVD, as APC-VFL compares against it (Appendix E).

The aligned samples' federated representation is FedSVD's left singular vectors U of the
joint aligned data ``[X_t | X_d]`` (Chai et al. 2022, :mod:`vflkit.methods.fedsvd`), learnt
with a trusted key generator and a third-party server in five information exchanges (kinds
``"mask"``, ``"masked_matrix"``; in full: docs/engine.md, "VFedTrans's exchanges").

U is then distilled into the active participant's final encoder exactly as APC-VFL's joint
representation is (Eq. 5; MAE, as Huang et al. propose), so VFedTrans is :class:`APCVFL` with
its teacher hook overridden. The encoder's latent width is FedSVD's rank, x_total: the
"embedding dimension constraint" APC-VFL Sec. 6.1 points out.

The enhanced features are the raw task features *and* the distilled representation,
``[X_task | g3A(X_task)]``, as VFedTrans's own pipeline builds them before its downstream model
(Chung-ju/VFedTrans, ``train_lrd.py``: ``LocalRepresentationDistillation.representation_distillation_step``
concatenates ``X_task`` with the representation; ``main.py`` step 3 scores that). APC-VFL Sec. 6
speaks of scoring "the representations obtained from the final encoder"; that reading, the
representation alone, is scored in the same run as the variant ``"representation_only"``
(:meth:`~vflkit.methods.oneshot.OneShotMethod.variants`), so the two are compared on one encoder.

Deviations from the reference, kept: U is scaled by sqrt(|D_A|) (see
:meth:`VFedTrans.teacher_representations`), and the autoencoder, its loss (Eq. 5 with sums) and
Adam's learning rate are APC-VFL's (Appendix B), not VFedTrans's own (its ``configs/ae.yaml``
uses lr 0.01 and its own network): the paper compares the methods on one training setting.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from ..comm import Party
from ..errors import ConfigError
from . import fedsvd
from .apc_vfl import APCVFL

#: FedSVD's efficient mask: Haar blocks of this many rows (the VFedTrans code's default).
MASK_BLOCK_SIZE = 100


class VFedTrans(APCVFL):
    """VFedTrans: FedSVD representations of the aligned samples, distilled into g3A.

    Parameters
    ----------
    distill_loss : {"mae", "mse"}, default "mae"
        Huang et al. 2023a's representation distillation uses MAE.
    mask_block_size : int or None, default 100
        Rows of each Haar block of the mask A; None draws one dense Haar matrix (exact but
        cubic in |D_A|). Either way A travels as the dense |D_A| x |D_A| matrix Appendix E
        prices.
    **kwargs
        :class:`~vflkit.methods.apc_vfl.APCVFL`'s lam and the shared training settings.
    """

    name: ClassVar[str] = "vfedtrans"

    def __init__(self, *, distill_loss: str = "mae", mask_block_size: int | None = MASK_BLOCK_SIZE,
                 **kwargs) -> None:
        super().__init__(distill_loss=distill_loss, **kwargs)
        if mask_block_size is not None and (not isinstance(mask_block_size, int) or mask_block_size < 1):
            raise ConfigError(f"mask_block_size must be a positive integer or None, got {mask_block_size!r}")
        self.mask_block_size = mask_block_size

    def teacher_representations(self, active: Party, passive: Party) -> tuple[torch.Tensor, torch.Tensor]:
        aligned = self.aligned_ids(active, passive)
        if aligned.numel() == 0:
            raise ConfigError("VFedTrans needs at least one aligned sample")
        channel = active.channel
        key_gen = Party("key_generator", channel=channel)
        server = Party("server", channel=channel)
        x_t = active.features("train", ids=aligned)
        x_d = passive.features("train", ids=aligned)
        n = int(aligned.numel())

        # 1-2: the key generator's masks. It learns only the participants' column counts.
        channel.at(epoch=0, step=0, phase="train")
        widths = (x_t.shape[1], x_d.shape[1])
        g = self.generator(5)
        a = fedsvd.random_orthogonal(n, generator=g, block_size=self.mask_block_size, dtype=torch.float32)
        q = fedsvd.random_orthogonal(sum(widths), generator=g)
        b_t, b_d = (b.float() for b in fedsvd.column_blocks(q, widths))
        key_gen.send(active, "mask", {"A": a, "B": b_t})
        key_gen.send(passive, "mask", {"A": a, "B": b_d})
        del a

        # 3-4: each participant masks its own block.
        channel.at(step=1)
        for party, x in ((active, x_t), (passive, x_d)):
            m = party.recv(key_gen, "mask")
            if party is active:  # it keeps A to unmask U~ later
                party.state["fedsvd_mask"] = m["A"]
            party.send(server, "masked_matrix", fedsvd.mask(x, m["A"], m["B"]))
            del m

        # 5: the server factorises the sum and returns U~ to the active participant.
        channel.at(step=2)
        u_masked, _, _ = fedsvd.masked_svd([server.recv(active, "masked_matrix"),
                                            server.recv(passive, "masked_matrix")])
        server.send(active, "masked_matrix", u_masked)
        u = fedsvd.unmask_u(active.recv(server, "masked_matrix"), active.state.pop("fedsvd_mask"))
        # U's columns have unit norm, so entries are ~1/sqrt(|D_A|): scaled by sqrt(|D_A|) they
        # have unit mean square like the standardised features, else Eq. 5's distillation
        # term would vanish as |D_A| grows. Neither paper states a scale; this one is local.
        z = u.float() * math.sqrt(n)
        return self._own_rows(active, aligned), z

    def _transform(self, x_active: torch.Tensor) -> torch.Tensor:
        # The reference pipeline's enhanced features: raw task features beside the representation.
        return torch.cat([x_active, self.g3.encode(x_active)], dim=1)

    def _variants(self, x_active: torch.Tensor) -> dict[str, torch.Tensor]:
        # APC-VFL Sec. 6's reading: the final encoder's representation alone.
        return {"representation_only": self.g3.encode(x_active)}


def footprint_vfedtrans(n_aligned: int, x_t: int, x_d: int) -> int:
    """APC-VFL's Eq. 10, VFedTrans's bytes: (2|D_A|^2 + x_t x + x_d x + |D_A| x_t + |D_A| x_d + |D_A| x) * 4,
    x = x_t + x_d (the masks A and B, the masked blocks, U~)."""
    x = x_t + x_d
    return (2 * n_aligned ** 2 + x_t * x + x_d * x + n_aligned * x_t + n_aligned * x_d + n_aligned * x) * 4


__all__ = ["MASK_BLOCK_SIZE", "VFedTrans", "footprint_vfedtrans"]
