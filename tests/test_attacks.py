"""Tests for vflkit.attacks: a passive party recovers labels from VFedMH's round-4 message."""

import torch
import torch.nn.functional as F

from vflkit.attacks import infer_labels, label_leakage
from vflkit.methods import RunConfig


def test_argmin_of_cross_entropy_gradient_is_the_label():
    torch.manual_seed(0)
    r = torch.randn(64, 10, requires_grad=True)
    y = torch.randint(0, 10, (64,))
    (g,) = torch.autograd.grad(F.cross_entropy(r, y), r)
    assert torch.equal(infer_labels(g), y)
    # a random gradient of the same shape does not give the labels
    assert (infer_labels(torch.randn(64, 10)) == y).float().mean() < 0.5


def test_passive_party_recovers_every_label_of_a_real_vfedmh_run():
    cfg = RunConfig(paper="vfedmh", dataset="mnist", method="vfedmh", models=("mlp", "cnn", "mlp", "lenet"),
                    n_train=512, n_test=128, epochs=1, batch_size=128, embedding_dim=32)
    out = label_leakage(cfg, device="cpu", passive="passive_2")
    assert out["labels"] == 512
    assert out["recovered"] == 1.0
