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


@pytest.fixture
def outside_checkout(tmp_path, monkeypatch):
    """A working directory outside any checkout, with vflkit as if installed from a wheel (no
    checkout to fall back to): no committed record, table or notebook is found."""
    from vflkit import config

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(config, "package_checkout", lambda: None)
    return tmp_path
