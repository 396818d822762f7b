"""Fixtures shared by the test files."""
import pytest
import torch

from vflkit import data


@pytest.fixture
def float64(monkeypatch):
    """A test in float64: models built in float64, features normalised then cast (the packed
    trainers' equivalence tests compare packed and unpacked runs at this precision)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    real = data.ImageData.normalize
    monkeypatch.setattr(data.ImageData, "normalize",
                        lambda self, x, device=None: real(self, x, device).to(torch.float64))
    yield
    torch.set_default_dtype(before)
