"""Checkpoints of a run in progress, shared by the trainers that resume.

A trainer that checkpoints (:mod:`.split` per epoch, :mod:`.multi_owner` per round) saves
everything its run needs to go on as if never stopped: its parties' models, optimizers and
state (:func:`parties_state`), the ledger's rows (:class:`LedgerLog`), its history and elapsed
time, its own position (epoch or round) and any generator it draws from; :func:`save` adds the
run's key and config and every global random state (torch, CUDA, numpy, Python), and writes the
file atomically (:func:`vflkit.files.atomic_path`): a kill mid-write leaves the previous one whole.
:func:`load` gives the checkpoint back only if it is the run's own (:func:`computed_by` too): a bad
checkpoint may cost time, never a wrong record.

The file lives beside the run's record (:func:`vflkit.records.checkpoint_path`), is never
committed, and :func:`vflkit.records.run_one` deletes it once the record is written.
"""

from __future__ import annotations

import functools
import hashlib
import json
import pickle
import random
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol, Sequence

import numpy as np
import torch

from ..comm import Channel, Party
from ..errors import DiskSpaceError
from ..files import atomic_path, check_free_space, is_disk_full, move_aside


class Run(Protocol):
    """What a checkpoint needs of a run config (:class:`vflkit.records.Run`)."""

    @property
    def key(self) -> str: ...

    def to_dict(self) -> dict[str, Any]: ...


# --------------------------------------------------------------------------- state


def parties_state(parties: Iterable[Party], *, volatile: tuple[str, ...] = ()) -> dict[str, list[dict[str, Any]]]:
    """Every party's models, optimizers and ``state`` (less the ``volatile`` entries, which the
    method remakes itself), in party order."""
    parties = list(parties)
    return {
        "models": [{k: m.state_dict() for k, m in p.models.items()} for p in parties],
        "optimizers": [{k: o.state_dict() for k, o in p.optimizers.items()} for p in parties],
        "party_state": [{k: v for k, v in p.state.items() if k not in volatile} for p in parties],
    }


def restore_parties(parties: Iterable[Party], state: dict[str, Any]) -> None:
    """Load what :func:`parties_state` saved into the same parties, built and set up afresh.

    A checkpoint is read onto the CPU (:func:`read`); models and optimizers move their tensors
    back themselves, but a party's ``state`` (Multi-VFL's server moments, say) is plain tensors:
    each goes back to the device of the tensor it replaces in the fresh party, else to the
    party's device (left on the CPU, a run resumed on a GPU would stop at its first round)."""
    for party, models, optims, extra in zip(parties, state["models"], state["optimizers"], state["party_state"]):
        for k, sd in models.items():
            party.models[k].load_state_dict(sd)
        for k, sd in optims.items():
            party.optimizers[k].load_state_dict(sd)
        party.state.update({k: _onto(v, party.state.get(k), party.device) for k, v in extra.items()})


def _onto(saved: Any, fresh: Any, device: torch.device) -> Any:
    """``saved`` with each tensor on the device of its counterpart in ``fresh`` (same structure),
    else on ``device``."""
    if isinstance(saved, torch.Tensor):
        return saved.to(fresh.device if isinstance(fresh, torch.Tensor) else device)
    if isinstance(saved, dict):
        return {k: _onto(v, fresh.get(k) if isinstance(fresh, dict) else None, device) for k, v in saved.items()}
    if isinstance(saved, (list, tuple)):
        same = isinstance(fresh, (list, tuple)) and len(fresh) == len(saved)
        return type(saved)(_onto(v, fresh[i] if same else None, device) for i, v in enumerate(saved))
    return saved


def generators(obj: Any) -> dict[str, torch.Generator]:
    """An object's own random generators (e.g. C-VFL's compression dither), by attribute."""
    return {k: v for k, v in vars(obj).items() if isinstance(v, torch.Generator)}


class LedgerLog:
    """A channel's ledger as a checkpoint holds it: its rows in compressed chunks, each packed
    once, at the checkpoint after its rows were sent (a ledger only grows), so a checkpoint costs
    the rows since the previous one, not the whole ledger (Multi-VFL's grows by millions)."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._chunks: list[bytes] = []
        self._packed = 0  # rows already in self._chunks

    def pack(self) -> dict[str, Any]:
        """The ledger's rows so far, for a checkpoint."""
        rows = self.channel.ledger._rows
        if len(rows) < self._packed:  # the ledger was replaced, not appended to: pack it afresh
            self._chunks, self._packed = [], 0
        if len(rows) > self._packed:
            # JSON, not pickle: a checkpoint is read back with torch.load(weights_only=True), and
            # a pickled chunk inside it would be code run at restore after all
            text = json.dumps(rows[self._packed:], separators=(",", ":"), default=int)
            self._chunks.append(zlib.compress(text.encode(), 1))
            self._packed = len(rows)
        return {"rows": self._packed, "chunks": list(self._chunks), "format": "json"}

    def restore(self, saved: dict[str, Any] | list[Iterable[Any]]) -> None:
        """Make the ledger what it was when ``saved`` was packed (a list of rows: the unchunked
        form). A run set up afresh before restoring has logged its setup messages twice: they go."""
        if isinstance(saved, dict):
            if saved.get("format") != "json":  # pickled chunks (an older vflkit's): never unpickled
                raise ValueError("its ledger is packed in the pickled form of an older vflkit")
            rows = [tuple(r) for chunk in saved["chunks"] for r in json.loads(zlib.decompress(chunk))]
            if len(rows) != saved["rows"]:
                raise ValueError(f"the checkpoint's ledger holds {len(rows)} rows, not {saved['rows']}")
            self._chunks, self._packed = list(saved["chunks"]), len(rows)
        else:
            rows = [tuple(r) for r in saved]
            self._chunks, self._packed = [], 0
        self.channel.ledger.restore(rows)  # also forgets the rounds it had read off the old rows


def rng_state(device: torch.device) -> dict[str, Any]:
    """Every global random state: torch's, the device's CUDA generator, numpy's and Python's, in
    the types ``torch.load(weights_only=True)`` reads (tensors, lists, numbers, strings)."""
    kind, key, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    return {
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
        "numpy_rng": {"kind": kind, "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "gauss": float(gauss)},
        "python_rng": random.getstate(),
    }


def restore_rng(state: dict[str, Any], device: torch.device) -> None:
    """Set the global random states :func:`rng_state` saved (those the checkpoint holds)."""
    torch.set_rng_state(state["torch_rng"])
    if state.get("cuda_rng") is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda_rng"], device)
    saved = state.get("numpy_rng")
    if isinstance(saved, dict):
        np.random.set_state((saved["kind"], saved["key"].numpy().astype(np.uint32), saved["pos"],
                             saved["has_gauss"], saved["gauss"]))
    elif saved is not None:
        np.random.set_state(saved)
    if state.get("python_rng") is not None:
        version, internal, gauss = state["python_rng"]
        random.setstate((version, tuple(internal), gauss))


# --------------------------------------------------------------------------- files


@functools.lru_cache(maxsize=4)
def source_digest(package: Path | None = None) -> str:
    """SHA-256 of the files of ``package`` (default vflkit itself; paths and contents, less
    ``__pycache__``), taken once per process: for vflkit, when this module is imported (below).

    Not the commit: a commit that changes only the README or a notebook leaves the computation
    as it was, and a checkout with uncommitted changes computes something no commit names.
    """
    package = package or Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for file in sorted(f for f in package.rglob("*") if f.is_file() and "__pycache__" not in f.parts):
        digest.update(file.relative_to(package).as_posix().encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


# Taken now, with the modules a run imports, not at its first checkpoint: files edited while a
# run trains its first epoch would otherwise be named as the code it ran. (About 10 ms.)
source_digest()


def computed_by(device: torch.device) -> dict[str, str]:
    """What must not change between the epochs of one record: vflkit's source, PyTorch's version,
    where the numbers are computed (the GPU's name, or the CPU instruction set PyTorch
    dispatches to, whose kernels round differently) and torch's thread count, as a CPU kernel
    splits its sums by thread: a run paused at 1 thread and resumed at 2 would give a record no
    uninterrupted run reproduces. Such a checkpoint is recomputed at this count rather than the
    process's count changed to the checkpoint's (``environment.torch_threads`` would be untrue).
    """
    where = (torch.cuda.get_device_name(device) if device.type == "cuda"
             else f"cpu {torch.backends.cpu.get_cpu_capability()}")
    return {"vflkit_source": source_digest(), "torch": str(torch.__version__), "device": where,
            "torch_threads": str(torch.get_num_threads())}


def check_computed_by(state: dict[str, Any], device: torch.device) -> None:
    """Raise ValueError naming what differs if ``state`` (a checkpoint) was not computed by this
    code on this kind of machine (:func:`computed_by`; one that does not say counts as other)."""
    here, there = computed_by(device), state.get("computed_by") or {}
    if there != here:
        changed = ", ".join(k for k in here if there.get(k) != here[k])
        raise ValueError(f"it was computed with another {changed} (a record names one environment)")


def save(path: Path, run: Run, state: dict[str, Any], *, device: torch.device) -> None:
    """Write ``state`` with what the module docstring lists to ``path``, atomically."""
    full = {"key": run.key, "config": run.to_dict(), "computed_by": computed_by(device), **rng_state(device),
            **state}
    write(path, full, what=f"the checkpoint of run {run.key}")


def _nbytes(obj: Any) -> int:
    """About what ``torch.save`` writes for ``obj``: its tensors' and byte strings' sizes."""
    if isinstance(obj, torch.Tensor):
        return obj.nelement() * obj.element_size()
    if isinstance(obj, (bytes, str)):
        return len(obj)
    if isinstance(obj, dict):
        return sum(_nbytes(k) + _nbytes(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    return 16


def _own_storage(obj: Any) -> Any:
    """``obj`` with every tensor that views a larger storage copied out: ``torch.save`` writes a
    view's whole storage (a packed run's model is a slice of its pack's stack)."""
    if isinstance(obj, torch.Tensor):
        return obj.clone() if obj.untyped_storage().nbytes() > obj.nelement() * obj.element_size() else obj
    if isinstance(obj, dict):
        return {k: _own_storage(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_own_storage(v) for v in obj)
    return obj


def write(path: Path, obj: Any, *, what: str) -> None:
    """``torch.save`` of ``obj`` to ``path``, atomically, after checking that its file system has
    room for it (a :class:`~vflkit.errors.DiskSpaceError` saying how much and where); a write
    that still runs out of space is the same error, not torch's obscure "unexpected pos"."""
    obj = _own_storage(obj)
    need = int(_nbytes(obj) * 1.1) + 2**20  # pickle's framing and the file system's blocks
    check_free_space(path.parent, need, what)
    try:
        with atomic_path(path) as tmp:
            torch.save(obj, tmp)
    except (OSError, RuntimeError) as exc:
        if not is_disk_full(exc):
            raise
        raise DiskSpaceError(f"{what} ran out of space in {path.parent} (about {need / 2**20:.1f} MiB needed): "
                             f"{exc}; free some space, or point VFLKIT_RESULTS (or results=) to a disk with room"
                             ) from exc


def read(path: Path) -> Any:
    """A checkpoint file's content, read with ``torch.load(weights_only=True)``: tensors, dicts,
    lists, numbers and strings only. Any other object is refused (a ``ValueError`` saying so),
    never unpickled: a checkpoint lives in a results folder others may write (a shared file
    system, a cluster's workers), and unpickling runs whatever code a planted file names."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        why = next((ln for ln in lines if "Unpickler error" in ln), lines[0] if lines else type(exc).__name__)
        raise ValueError(f"it holds objects a checkpoint never holds, refused unread (loading it could run code): "
                         f"{why.split('. Please use')[0][:200]}") from None


#: What a checkpoint counts its progress in: the split family's epochs, Multi-VFL's rounds.
UNITS = ("epoch", "round")


def saved_progress(path: Path) -> tuple[str, int] | None:
    """The epoch or round a checkpoint at ``path`` was saved after (``("epoch", 3)``), read
    without reading its tensors (memory-mapped); None where there is none or it cannot be read
    (:func:`load` then moves it aside when its run starts)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # noqa: BLE001 (unreadable: its run finds out, and says so, when it loads it)
        return None
    got = [(u, state[u]) for u in UNITS if isinstance(state, dict) and isinstance(state.get(u), int)]
    return got[0] if got else None


def load_all(paths: Sequence[Path], runs: Sequence[Run], *, device: torch.device,
             unit: str, check: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]] | None:
    """The checkpoints of a pack's runs (a run alone's too; :func:`load`, each its own) when every run has one
    saved after the same ``unit`` ("epoch" or "round"): a pack resumes all its runs or none.
    None where no run has one; where only some do, or after different ones, None too, with a
    warning that the pack starts over and replaces them. ``check`` as for :func:`load`."""
    states = [load(Path(p), run, device=device, fresh=f"{unit} 1", check=check) for p, run in zip(paths, runs)]
    done = sorted({s[unit] for s in states if s is not None})
    if not done:
        return None
    if len(done) > 1 or any(s is None for s in states):
        found = sum(s is not None for s in states)
        warnings.warn(f"{found} of this pack's {len(states)} runs have a checkpoint (of {unit} "
                      f"{', '.join(map(str, done))}): the pack starts from {unit} 1 and replaces them after it "
                      "(train the runs alone to resume each from its own)", stacklevel=3)
        return None
    return states


def load(path: Path, run: Run, *, device: torch.device, fresh: str = "epoch 1",
         check: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any] | None:
    """The checkpoint at ``path`` if there is one and it belongs to ``run``, else None.

    An unreadable or foreign one (another key or config, :func:`computed_by` differs from
    ``device``'s, :func:`read` refuses it, or the trainer's ``check`` raises ``ValueError``) is
    moved to ``<name>.bad`` (numbered if taken) with a warning that the run starts from ``fresh``.
    """
    if not path.exists():
        return None
    try:
        state = read(path)
        if not isinstance(state, dict):
            raise ValueError(f"it holds a {type(state).__name__}, not a checkpoint")
        if state.get("key") != run.key or state.get("config") != run.to_dict():
            raise ValueError("its config is not this run's")
        check_computed_by(state, device)
        if check is not None:
            check(state)
        return state
    except Exception as exc:  # a bad checkpoint costs time, never a wrong record
        bad = move_aside(path, ".bad")
        warnings.warn(f"ignoring checkpoint {path} ({exc}); moved to {bad.name}, starting from {fresh}",
                      stacklevel=3)
        return None


__all__ = ["LedgerLog", "check_computed_by", "computed_by", "generators", "load", "load_all", "parties_state",
           "read", "restore_parties", "restore_rng", "rng_state", "save", "saved_progress", "source_digest", "write"]
