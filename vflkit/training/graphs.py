"""A pack's step captured once per batch shape and replayed: CUDA graphs, and their CPU stand-in.

Replay reruns the same kernels on the same memory, so a step may be captured only if it reads
everything that changes from one step to the next out of device memory that stays put (the
batch's ids, C-VFL's dither), writes its results in place (parameters, optimizer state, BatchNorm
statistics) and reads nothing back to the host. What changes on the host (the ledger's rows) is
counted outside the graph.

:class:`StepGraph` holds one captured step, by backend: ``"cuda"`` (:class:`torch.cuda.CUDAGraph`)
or ``"tape"`` (CPU, for tests and dry runs; no speed-up), which records every aten operation the
step dispatches and fails where a CUDA graph would. :class:`GraphedStep` applies it to a
:class:`~vflkit.methods.pack.Pack`'s public :meth:`~vflkit.methods.pack.Pack.eager_step`, one
graph per batch shape. The backends' contract in full: docs/engine.md, "CUDA graphs and the tape".
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..errors import ConfigError, check_choice
from ..methods.pack import Pack

#: How a step is captured: a CUDA graph, or the CPU stand-in that keeps its contract (module doc).
GRAPH_BACKENDS: tuple[str, ...] = ("cuda", "tape")

#: Eager steps of a batch shape before it is captured: the CUDA graph documentation's warm-up
#: (algorithm choice, lazily made optimizer state) with a margin.
WARMUP_STEPS = 3


def _check_backend(backend: str) -> None:
    check_choice("graph backend", backend, GRAPH_BACKENDS)


class GraphCaptureError(RuntimeError):
    """A step that cannot be captured (it reads a value back to the host, or is not static)."""


class _Recorder(TorchDispatchMode):
    """Runs every aten operation and records it with its result (the tape's capture)."""

    def __init__(self, ops: list[tuple[Any, tuple, dict, Any]]) -> None:
        super().__init__()
        self.ops = ops

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten._local_scalar_dense.default:
            raise GraphCaptureError("a captured step read a value back to the host (.item(), bool(), float() of a "
                                    "tensor): a CUDA graph cannot; keep the value on the device")
        out = func(*args, **kwargs)
        self.ops.append((func, args, kwargs, out))
        return out


class StepGraph:
    """One step function captured (:meth:`capture`) and replayed (:meth:`replay`)."""

    def __init__(self, backend: str) -> None:
        _check_backend(backend)
        self.backend = backend
        self._ops: list[tuple[Any, tuple, dict, Any]] = []
        self._graph: Any = None

    def capture(self, fn: Callable[[], Any]) -> Any:
        """Capture ``fn()`` and leave its effect done once (a CUDA capture runs nothing: it is
        replayed once here); its outputs, overwritten by every replay."""
        if self.backend == "tape":
            with _Recorder(self._ops):
                return fn()
        self._graph = torch.cuda.CUDAGraph()
        # a private memory pool per graph: a shared one is safe only for graphs replayed in the
        # order they were captured, and a pack replays its full batches and its last one in turn
        with torch.cuda.graph(self._graph):
            out = fn()
        self._graph.replay()
        return out

    @torch.no_grad()
    def replay(self) -> None:
        """Run the captured step again, on the tensors it was captured with."""
        if self._graph is not None:
            self._graph.replay()
            return
        for func, args, kwargs, out in self._ops:
            result = func(*args, **kwargs)
            # a fresh result goes where the capture's was (the graph's static memory); an
            # in-place result or a view is the captured tensor's memory already
            for kept, new in zip(tree_flatten(out)[0], tree_flatten(result)[0]):
                if isinstance(kept, torch.Tensor) and kept.data_ptr() != new.data_ptr():
                    kept.copy_(new)


def graph_blocker(pack: Pack, backend: str) -> str | None:
    """Why ``pack``'s step cannot be captured by ``backend``, or None: an optimizer that keeps
    its step count on the host. SGD keeps none (its momentum buffers live beside the
    parameters); Adam is made ``capturable`` on a GPU (its count on the device), a form torch
    refuses on a CPU, where it reads the count back each step; Adagrad has no such form."""
    for opt in pack.optimizers.values():
        if isinstance(opt, torch.optim.SGD) or (isinstance(opt, torch.optim.Adam) and backend == "cuda"):
            continue
        return f"{type(opt).__name__} keeps its step count on the host"
    return None


class _Captured:
    """One batch shape's graph: its input buffers, outputs and the messages of its step."""

    def __init__(self, graph: StepGraph, ids: torch.Tensor, dither: list[torch.Tensor]) -> None:
        self.graph, self.ids, self.dither = graph, ids, dither
        self.out: dict[str, torch.Tensor] = {}
        self.sends: list[tuple[str, str, str, int]] = []


class GraphedStep:
    """``pack``'s step, captured per batch shape after :data:`WARMUP_STEPS` eager steps of it."""

    def __init__(self, pack: Pack, backend: str, *, warmup: int | None = None) -> None:
        _check_backend(backend)
        if backend == "cuda" and pack.device.type != "cuda":
            raise ConfigError(f"CUDA graphs need a pack on a CUDA device, not {pack.device}; "
                              "the 'tape' backend stands in on a CPU")
        blocker = graph_blocker(pack, backend)
        if blocker:
            raise ConfigError(f"this pack's step cannot be captured: {blocker}")
        if backend == "cuda":  # Adam's step count on the device, before its state is made
            for opt in pack.optimizers.values():
                if isinstance(opt, torch.optim.Adam):
                    for group in opt.param_groups:
                        group["capturable"] = True
                        for p in group["params"]:  # a resumed pack's count exists already, on the host
                            if "step" in opt.state.get(p, {}):
                                opt.state[p]["step"] = opt.state[p]["step"].to(p.device)
        self.pack, self.backend = pack, backend
        self.warmup = WARMUP_STEPS if warmup is None else warmup
        #: steps run eagerly, captured and replayed (what a test or a benchmark checks)
        self.counts = {"eager": 0, "captured": 0, "replayed": 0}
        self._graphs: dict[int, _Captured] = {}
        self._eager: dict[int, int] = {}
        self._side = torch.cuda.Stream(pack.device) if backend == "cuda" else None
        self._n_dither = pack.dither_per_step()  # once: it reads the top's state_dict

    def forget(self) -> None:
        """Drop the captured graphs (a learning rate changed: it is baked into them)."""
        self._graphs.clear()

    def __call__(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """One protocol step of every run, as ``Pack.train_step``; its losses are the caller's
        to keep (a copy of the graph's outputs)."""
        b = int(ids.shape[1])
        captured = self._graphs.get(b)
        if captured is not None:
            return self._replay(captured, ids)
        if self._eager.get(b, 0) < self.warmup:
            self._eager[b] = self._eager.get(b, 0) + 1
            return self._run_eager(ids)
        return self._capture(b, ids)

    def _run_eager(self, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        pack = self.pack
        self.counts["eager"] += 1
        if self._side is None:
            return pack.eager_step(ids)
        # the CUDA graph documentation's warm-up: on a side stream, ordered after the work before it
        self._side.wait_stream(torch.cuda.current_stream(pack.device))
        with torch.cuda.stream(self._side):
            out = pack.eager_step(ids)
        torch.cuda.current_stream(pack.device).wait_stream(self._side)
        return out

    def _dither_pieces(self, b: int) -> list[torch.Tensor]:
        """This step's dither (C-VFL), taken off the pack's drawn-ahead list; none for the others."""
        pack, n = self.pack, self._n_dither
        if not n:
            return []
        if len(pack.dither) < n:
            pack.draw_dither([b])
        pieces, pack.dither[:] = pack.dither[:n], pack.dither[n:]
        return pieces

    def _capture(self, b: int, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        pack = self.pack
        dither = [d.clone() for d in self._dither_pieces(b)]
        captured = _Captured(StepGraph(self.backend), ids.clone(), dither)
        pack.dither[:0] = dither  # the step takes its dither from the captured pieces
        pack.channel.sends = captured.sends
        try:
            captured.out = captured.graph.capture(lambda: pack.eager_step(captured.ids))
        finally:
            pack.channel.sends = None
        self._graphs[b] = captured
        self.counts["captured"] += 1
        return {k: v.clone() for k, v in captured.out.items()}

    def _replay(self, captured: _Captured, ids: torch.Tensor) -> dict[str, torch.Tensor]:
        captured.ids.copy_(ids)
        for kept, new in zip(captured.dither, self._dither_pieces(int(ids.shape[1]))):
            kept.copy_(new)
        captured.graph.replay()
        self.counts["replayed"] += 1
        self.pack.channel.count(captured.sends)
        return {k: v.clone() for k, v in captured.out.items()}


__all__ = ["GRAPH_BACKENDS", "GraphCaptureError", "GraphedStep", "StepGraph", "WARMUP_STEPS", "graph_blocker"]


def capture(pack: Pack, backend: str) -> None:
    """From now on, each batch shape of ``pack``'s step is captured once and replayed
    (:class:`GraphedStep`; ``backend`` "cuda", or "tape" on a CPU)."""
    pack.graphed = GraphedStep(pack, backend)
