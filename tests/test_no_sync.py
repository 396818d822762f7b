"""Issue 40, sync-free steps: no training step of the split family reads a tensor back to the host.

On a GPU every host read (``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, ``bool()``,
``float()``, ``int()``, an index, a Python ``if`` on a tensor, ``torch.equal``, a boolean mask)
waits for the device to finish its queue. The guard below sees them on a CPU too: a
``TorchFunctionMode`` is told of every such call (they all dispatch through
``__torch_function__``), active only while ``method.train_step`` runs, so the trainer's
periodic loss read (``LossWindow.drain``, between steps) is outside it by construction.

VFedMH's and EASTER's secure ring runs on the device too (:mod:`vflkit.secure`, torch backend):
its checks (NaN/inf or overflowing embeddings, masks that did not cancel) are left in the
trainer's :class:`~vflkit.secure.DeferredChecks` and read with the losses, outside the step.

What a CPU cannot show: a host-to-device copy (a CPU tensor's ``.to(cuda)``) is a no-op here.
The batch index is checked structurally instead: the ids a step gets already live on the
parties' device (the trainer copies each epoch's order once). The other such copy, VFedMH's
blinding masks (drawn by the host PRG ahead of the step), goes from pinned memory with
``non_blocking=True``, a queued copy; on a GPU, :func:`test_no_sync_on_cuda` runs the step
under ``torch.cuda.set_sync_debug_mode("error")``, which raises on any wait.
"""

from __future__ import annotations

import traceback
from collections import Counter
from typing import Any, Callable

import pytest
import torch
from torch.overrides import TorchFunctionMode

from vflkit.comm import Channel, Party, checked_batches
from vflkit.errors import PartitionError
from vflkit.methods import RunConfig, get_method
from vflkit.training import split

#: Tensor calls that read values back to the host (a blocking sync when the tensor is on a GPU).
HOST_READS = frozenset({
    "item", "tolist", "cpu", "numpy", "__array__", "__bool__", "__float__", "__int__", "__index__",
    "__complex__", "is_nonzero", "equal", "nonzero", "unique", "masked_select",
})

#: The split-family methods, each with the model mix its name asks for.
METHODS: dict[str, tuple[str, ...]] = {
    "local": ("mlp",) * 4,
    "splitnn": ("mlp",) * 4,
    "pyvertical": ("mlp",) * 4,
    "agg_vfl": ("mlp",) * 4,
    "homo_aggvfl": ("mlp",) * 4,
    "heter_aggvfl": ("mlp", "lenet", "mlp", "lenet"),
    "c_vfl": ("mlp",) * 4,
    "vfedmh": ("mlp", "lenet", "mlp", "lenet"),
    "homo_vfedmh": ("mlp",) * 4,
    "easter": ("mlp", "lenet", "mlp", "lenet"),
}
SECURE_METHODS = {"vfedmh", "homo_vfedmh", "easter"}


class HostReadCounter(TorchFunctionMode):
    """Counts host reads by (name, vflkit file, function); also ``.to("cpu")`` device copies."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[tuple[str, str, str]] = Counter()

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        read = name in HOST_READS
        # a copy to the host, spelt as such (a party's own .to(device) is not: on a CPU it is a no-op)
        read |= name == "to" and any(a == "cpu" for a in (*args[1:], *kwargs.values()))
        # a boolean mask's result has a data-dependent shape: the host must read the mask
        read |= (name == "__getitem__" and len(args) > 1 and isinstance(args[1], torch.Tensor)
                 and args[1].dtype == torch.bool)
        if read:
            frames = [f for f in traceback.extract_stack()[:-1] if "/vflkit/" in f.filename.replace("\\", "/")]
            where = (frames[-1].filename.replace("\\", "/").split("/vflkit/")[-1], frames[-1].name) if frames \
                else ("<outside vflkit>", "")
            self.reads[(name, *where)] += 1
        return func(*args, **kwargs)


def _config(method: str, models: tuple[str, ...], **changes: Any) -> RunConfig:
    base = dict(paper="easter" if method == "easter" else "vfedmh", dataset="mnist", method=method,
                models=models, n_train=256, n_test=128, epochs=1, batch_size=128, embedding_dim=16)
    base.update(changes)
    return RunConfig(**base)


def _guarded_run(monkeypatch: pytest.MonkeyPatch, cfg: RunConfig) -> tuple[list[Counter], dict[str, Any]]:
    """Train ``cfg`` with every ``train_step`` under the counter; the reads of each step."""
    cls = get_method(cfg.method)
    real_step = cls.train_step
    per_step: list[Counter] = []

    def guarded_step(self: Any, ids: torch.Tensor) -> Any:
        # the batch index is already on the parties' device: no per-step host-to-device copy
        assert all(ids.device == p.device for p in self.parties)
        with HostReadCounter() as counter:
            out = real_step(self, ids)
        per_step.append(counter.reads)
        return out

    monkeypatch.setattr(cls, "train_step", guarded_step)
    result = split.train(cfg, device=torch.device("cpu"), progress=False)
    return per_step, result


@pytest.mark.parametrize("method", sorted(METHODS))
def test_training_step_makes_no_host_read(monkeypatch, method):
    """Every step of every split-family method, VFedMH's and EASTER's secure ring included
    (fixed-point arithmetic on the device, its checks read by the trainer with the losses):
    no host read. The ring takes the path a GPU takes (torch): on a CPU its default is numpy,
    whose reads wait for nothing there (the host is the device)."""
    if method in SECURE_METHODS:
        monkeypatch.setattr(get_method(method), "ring_backend", "torch")
    per_step, result = _guarded_run(monkeypatch, _config(method, METHODS[method]))
    assert len(per_step) == 2 and result["diverged"] is None
    for step, reads in enumerate(per_step):
        assert not reads, f"{method} step {step} reads back to the host: {dict(reads)}"


@pytest.mark.parametrize("method", sorted(SECURE_METHODS))
def test_guard_sees_the_host_ring(monkeypatch, method):
    """The guard looks inside the secure ring: the host backend (numpy; the only one before
    issue 40, the CPU's default now) is caught reading every step, where torch reads nothing."""
    monkeypatch.setattr(get_method(method), "ring_backend", "numpy")
    per_step, _ = _guarded_run(monkeypatch, _config(method, METHODS[method]))
    for reads in per_step:
        assert {("secure.py", "_encode_numpy"), ("secure.py", "_to_ring")} <= {k[1:] for k in reads}, reads


def test_guard_sees_a_host_read(monkeypatch):
    """The guard is not blind: a step that reads its loss with ``.item()`` or branches on a
    tensor is caught (and named by its vflkit file and function)."""
    cls = get_method("splitnn")
    real_step = cls.train_step

    def reading_step(self: Any, ids: torch.Tensor) -> Any:
        losses = real_step(self, ids)
        loss = next(iter(losses.values()))
        loss.item()
        if loss > 1e9:  # a Python if on a tensor: __bool__
            pass
        return losses

    monkeypatch.setattr(cls, "train_step", reading_step)
    per_step, _ = _guarded_run(monkeypatch, _config("splitnn", METHODS["splitnn"]))
    names = {k[0] for k in per_step[0]}
    assert {"item", "__bool__"} <= names


def test_periodic_loss_read_is_outside_the_step(monkeypatch):
    """The trainer's batched loss read (one per SYNC_EVERY_CUDA steps on a GPU, every step on a
    CPU) happens between steps, where the guard is off; the losses the record holds are the
    same whether read every step or in one batch."""
    cfg = _config("splitnn", METHODS["splitnn"], n_train=512)
    _, every = _guarded_run(monkeypatch, cfg)
    drained: list[int] = []
    real_drain = split.LossWindow.drain

    def counting_drain(self: Any) -> Any:
        drained.append(len(self._pending))
        return real_drain(self)

    monkeypatch.setattr(split.LossWindow, "drain", counting_drain)
    monkeypatch.setattr(split, "SYNC_EVERY_CUDA", 50)
    real_init = split.LossWindow.__init__
    monkeypatch.setattr(split.LossWindow, "__init__",
                        lambda self, *, epoch, limit, every, runs=1: real_init(self, epoch=epoch, limit=limit, every=50,
                                                                             runs=runs))
    _, batched = _guarded_run(monkeypatch, cfg)
    assert drained == [4]  # one read for the epoch's 4 steps
    strip = lambda h: [{k: v for k, v in r.items() if k != "elapsed_s"} for r in h]  # noqa: E731
    assert strip(batched["history"]) == strip(every["history"])


def _party(n: int = 6) -> Party:
    return Party("passive_1", channel=Channel(), features={"train": torch.arange(n * 2.0).reshape(n, 2)},
                 ids={"train": torch.arange(10, 10 + n)})


def test_batches_from_checked_ids_need_no_read():
    """Under ``checked_batches`` a party takes a batch (id lookup included) without reading the
    index back; ``check_ids`` does that check once, on the host, and refuses ids it lacks."""
    p = _party()
    order = torch.tensor([15, 10, 12, 11, 14, 13])
    p.check_ids("train", order)
    with pytest.raises(PartitionError, match=r"passive_1 does not hold sample ids \[16\]"):
        p.check_ids("train", torch.tensor([10, 16]))
    with pytest.raises(PartitionError, match="negative"):
        p.check_ids("train", torch.tensor([10, -1]))
    expected = p.features("train", ids=order[:3])
    with checked_batches([p]), HostReadCounter() as counter:
        got = p.features("train", ids=order[:3])
        p.check_ids("train", torch.tensor([10]))  # the check itself is never skipped ...
    assert torch.equal(got, expected)
    assert {k[2] for k in counter.reads} == {"check_ids", "_rows"}  # ... and is the only reader
    assert not p.prechecked
    with pytest.raises(PartitionError):  # outside, every batch is checked as before
        p.features("train", ids=torch.tensor([16]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: CUDA's own sync detector")
@pytest.mark.parametrize("method", ["vfedmh", "easter"])
def test_no_sync_on_cuda(monkeypatch, method):
    """On a GPU, CUDA's sync detector raises on any wait inside a step (host reads and blocking
    copies alike; the first step is left out: its mask was not drawn ahead into pinned memory)."""
    cls = get_method(method)
    real_step = cls.train_step
    steps: list[int] = []

    def strict_step(self: Any, ids: torch.Tensor) -> Any:
        steps.append(len(steps))
        if len(steps) == 1:
            return real_step(self, ids)
        torch.cuda.set_sync_debug_mode("error")
        try:
            return real_step(self, ids)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(cls, "train_step", strict_step)
    cfg = _config(method, METHODS[method], n_train=512)
    result = split.train(cfg, device=torch.device("cuda"), progress=False)
    assert len(steps) == 4 and result["diverged"] is None
