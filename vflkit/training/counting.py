"""What one training step of a run costs, counted by running it: torch operations and FLOPs.

What is counted (:func:`count`, a dispatch counter; element-wise work is an operation but no
FLOP) is the method's own ``train_step`` (a Multi-VFL run's ``round`` and ``evaluate``) on random
data of the run's shapes: a change to a step changes its count, with no second description.
Operations do not depend on the batch size and FLOPs grow linearly with it (both tested): a step
is counted at :data:`OP_COUNT_BATCH` samples. Counts persist between processes in the user's
cache folder, keyed by the code they count.

This module reads no record, no study and no scheduler: pricing (:mod:`vflkit.ops.pricing`)
multiplies these counts by measured rates.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, NamedTuple

import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from ..comm import Channel, Party
from ..config import data_root, project_root
from ..data import CRITEO_DENSE, CRITEO_SPARSE, IMAGE_METADATA, ImageData, TabularData, criteo_file
from ..methods import get_method
from ..methods.base import RunConfig
from ..methods.multi_vfl import MultiVFL, MultiVFLConfig
from ..tabular import build_tabular_parties
from .split import image_partition, precision_context, use_precision
# the stacked trainers (pack counts); the one place this module names them
from .multi_owner import EVAL_IMAGES, RoundPack
from .split import Pack

#: The batch a step is counted at: an op count does not depend on the batch size, and a small
#: batch counts a ResNet101 C-VFL step in seconds on a CPU.
OP_COUNT_BATCH = 4
#: The run classes this module counts (the split family's and Multi-VFL's), and why the others
#: have no count (their family's estimate comes from their other seeds only).
UNCOUNTED: dict[str, str] = {
    "OneShotRun": "APC-VFL's one-shot runs (autoencoders, then a downstream model) have no count yet",
    "TilesRun": "AdptVFedConv's tiled VGG runs have no count yet",
}
#: Test images per Multi-VFL evaluation message (``MultiVFL.evaluate``'s default batch).
MULTI_VFL_EVAL_BATCH = 1000
#: Fields of a :class:`~vflkit.methods.base.RunConfig` that change no step.
NOT_IN_STEP = ("paper", "seed", "epochs", "n_train", "n_test", "lr", "optimizers", "lr_schedule", "lr_gamma",
               "batch_size")
#: Bump when what a cached count means changes.
_CACHE_VERSION = 2


class Counts(NamedTuple):
    """What one call dispatched: torch operations, and the FLOPs torch's counter saw."""

    ops: int
    flops: float


class _Counter(TorchDispatchMode):
    """Counts every dispatched operation, and the FLOPs of those torch's flop counter has a
    formula for (:data:`torch.utils.flop_counter.flop_registry`: products and convolutions,
    forward and backward), without its per-module bookkeeping."""

    def __init__(self) -> None:
        super().__init__()
        self.n, self.flops = 0, 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.n += 1
        formula = flop_registry.get(func._overloadpacket)
        if formula is not None:
            self.flops += formula(*args, **kwargs, out_val=out)
        return out


def count(fn: Callable[[], Any]) -> Counts:
    """The operations and FLOPs of one call of ``fn`` (the random state is left as it was)."""
    with torch.random.fork_rng(), _Counter() as counter:
        fn()
    return Counts(counter.n, float(counter.flops))


# --------------------------------------------------------------------------- the disk cache


def _cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vflkit" / "counts.json"


@functools.cache
def _cache_stamp() -> str:
    """What the counts depend on besides their arguments: the code that steps, and torch (a change
    of how this module counts bumps :data:`_CACHE_VERSION`)."""
    h = hashlib.sha256(f"{_CACHE_VERSION} {torch.__version__}".encode())
    pkg = project_root() / "vflkit"
    for path in sorted([*pkg.glob("methods/*.py"), pkg / "models.py", pkg / "comm.py", pkg / "secure.py"]):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


#: The committed counts (``results/device/op-counts.json``'s ``flops``, written by
#: ``python -m vflkit.ops.pricing --count-ops`` with the op counts, and checked against today's
#: code by the slow tests): a fresh checkout prices its studies without counting every setting.
COMMITTED = "results/device/op-counts.json"


def _committed() -> dict[str, Any]:
    try:
        # the counts committed beside this code (its checkout's, wherever the working directory is)
        doc = json.loads((Path(__file__).resolve().parents[2] / COMMITTED).read_text())
        return dict(doc.get("flops", {})) if doc.get("torch") == torch.__version__ else {}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


@functools.cache
def _disk_cache() -> dict[str, Any]:
    """The counts known: the committed ones, overlaid by the user's cache of this code's."""
    counts = _committed()
    _FROM_COMMITTED.update(counts)
    try:
        data = json.loads(_cache_path().read_text())
        if data.get("stamp") == _cache_stamp():
            counts.update(data["counts"])
            _FROM_COMMITTED.difference_update(data["counts"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return counts


#: Keys whose count came from :data:`COMMITTED` alone.
_FROM_COMMITTED: set[str] = set()


def forget_committed() -> None:
    """Count again what only the committed table knew (before that table is rewritten)."""
    cache = _disk_cache()
    for key in _FROM_COMMITTED:
        cache.pop(key, None)
    _FROM_COMMITTED.clear()


def known_flops() -> dict[str, Any]:
    """Every FLOP count known now, by its cache key (what :data:`COMMITTED` keeps)."""
    return {k: v for k, v in _disk_cache().items() if k.startswith(("step ", "multi_vfl "))}


def cached(key: str, compute: Callable[[], Any], *, save: bool = True) -> Any:
    """``compute()``, remembered on disk under ``key`` (best effort: an unwritable cache only
    costs the count again); with ``save=False`` written by the next :func:`save_cache`."""
    cache = _disk_cache()
    if key not in cache:
        cache[key] = compute()
        _UNSAVED.add(key)
        if save:
            save_cache()
    return cache[key]


#: Keys computed since the cache file was last written.
_UNSAVED: set[str] = set()


def save_cache() -> None:
    """Write the counts computed since the last write."""
    if not _UNSAVED:
        return
    _UNSAVED.clear()
    path = _cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"stamp": _cache_stamp(), "counts": _disk_cache()}, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass


# --------------------------------------------------------------------------- the split family


def step_key(run: Any) -> str:
    """A split-family setting: its config less what changes no step (seed, length, learning
    rate, batch size). The key of the committed op counts too."""
    return json.dumps({k: v for k, v in run.to_dict().items() if k not in NOT_IN_STEP}, sort_keys=True)


def _random_criteo(rows: int) -> TabularData:
    """A Criteo-shaped table of random values: its 13 dense and 26 categorical columns."""
    g = torch.Generator().manual_seed(0)
    dense = {c: torch.rand(rows, generator=g).numpy() for c in CRITEO_DENSE}
    sparse = {c: [f"v{int(v)}" for v in torch.randint(0, 3, (rows,), generator=g)] for c in CRITEO_SPARSE}
    features = pd.DataFrame({**dense, **sparse})
    target = pd.Series((torch.arange(rows) % 2).numpy(), index=features.index)
    return TabularData("criteo", features, target, "binary", categorical=tuple(CRITEO_SPARSE))


def random_method(run: Any, batch: int = OP_COUNT_BATCH, device: str = "cpu") -> tuple[Any, Callable[[int], torch.Tensor]]:
    """``run``'s method set up on ``device`` on random data of its dataset's shapes (four batches
    of ``batch`` training samples), and the sample ids of its ``i``-th batch. On ``meta`` nothing
    is computed or stored: the counter reads shapes only."""
    small = run.replace(batch_size=batch, n_train=None, n_test=None)
    channel = Channel()
    dev = torch.device(device)
    if run.dataset == "criteo":
        parties, n_classes = build_tabular_parties(small, device=dev, channel=channel, data=_random_criteo(5 * batch))
    else:
        shape, n_classes, _ = IMAGE_METADATA[run.dataset]
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, 256, (4 * batch, *shape), dtype=torch.uint8, generator=g)
        y = torch.randint(0, n_classes, (4 * batch,), generator=g).to(dev)
        names = iter(range(1, small.n_parties))
        parties = [Party("active" if k == small.active else f"passive_{next(names)}", channel=channel,
                         features={"train": piece.contiguous().to(dev)}, labels={"train": y} if k == small.active else None,
                         transform=lambda t: t.float() / 255, device=dev)
                   for k, piece in enumerate(image_partition(small, shape).split(x))]
    torch.manual_seed(small.seed)
    with dev:
        method = get_method(small.method)(small, parties, num_classes=n_classes)
        use_precision(small, method)
        method.setup()
    return method, lambda i: torch.arange(i * batch, (i + 1) * batch)


def count_step(run: Any, batch: int = OP_COUNT_BATCH, *, pack: int | None = None, group_parties: bool = True,
               stacking: str = "vmap", device: str = "cpu") -> Counts:
    """One training step of split-family run ``run`` after a warm-up step: its method's own
    ``train_step`` on ``batch`` random samples (on ``device``: ``meta`` computes nothing). With
    ``pack=K``: one step of the packed trainer (stacked as ``stacking`` says, on the CPU) of K such
    runs (seeds 0..K-1), C-VFL's alike parties stacked unless ``group_parties`` is False. A
    ``precision="bf16"`` run is counted under its CPU autocast."""
    if pack is None:
        method, ids = random_method(run, batch, device)
        step, batch_ids = method.train_step, ids
    else:
        runs = [random_method(run.replace(seed=k), batch) for k in range(pack)]
        packed = Pack([m for m, _ in runs], stacking=stacking, group_parties=group_parties)
        step, batch_ids = packed.train_step, (lambda i: runs[0][1](i).expand(pack, -1))
    with torch.random.fork_rng(), precision_context(run, torch.device("cpu")):
        torch.manual_seed(0)
        step(batch_ids(0))
        return count(lambda: step(batch_ids(1)))


def count_step_ops(run: Any, batch: int = OP_COUNT_BATCH, **pack: Any) -> int:
    """The torch operations of one training step of ``run`` (:func:`count_step`)."""
    return count_step(run, batch, **pack).ops


def step_flops(run: Any) -> float:
    """FLOPs of one training step of split-family run ``run`` at its batch size: its method's
    step counted at :data:`OP_COUNT_BATCH` samples (remembered per setting), scaled. Counted on
    the ``meta`` device (shapes only, no compute), or on the CPU where the step reads its data
    (VFedMH's blinding, the Criteo models' category check)."""
    def per_sample() -> float:
        try:
            return count_step(run, device="meta").flops / OP_COUNT_BATCH
        except Exception:  # noqa: BLE001 (a step that reads its data cannot run on meta tensors)
            return count_step(run).flops / OP_COUNT_BATCH

    return cached(f"step {step_key(run)}", per_sample) * run.batch_size


@functools.cache
def _criteo_rows(path: str, mtime: float) -> int:
    """Data rows of a Criteo file (a header line is not one); ``mtime`` keys the cache."""
    with open(path, "rb") as f:
        first = f.readline()
        rows = 1 + sum(1 for _ in f) if first.strip() else 0
    head = first.decode(errors="replace").split(",")[0].strip().strip('"').lower()
    return rows - (head in ("id", "label"))


def train_size(run: Any) -> int | None:
    """The run's training samples: ``n_train``, capped at the dataset's training split; None
    where the split's size is unknown without the data (a Criteo file that is absent)."""
    full: int | None = None
    if run.dataset in IMAGE_METADATA:
        full = IMAGE_METADATA[run.dataset][2]
    elif run.dataset == "criteo" and (path := criteo_file(data_root())) is not None:
        rows = _criteo_rows(str(path), path.stat().st_mtime)
        full = rows - int(round(rows * 0.2))  # the 80/20 split of vflkit.tabular.encode_table
    if full is None:
        return run.n_train
    return full if run.n_train is None else min(run.n_train, full)


def steps(run: Any) -> int | None:
    """Training steps of a split-family run: batches per epoch times epochs."""
    n = train_size(run)
    return None if n is None else math.ceil(n / run.batch_size) * run.epochs


# --------------------------------------------------------------------------- Multi-VFL


def _multi_vfl_method(dataset: str, n_data_owners: int, n_label_owners: int, batch: int, n_steps: int, seed: int,
                      n_test: int = 8) -> MultiVFL:
    shape, n_classes, _ = IMAGE_METADATA[dataset]
    g = torch.Generator().manual_seed(0)
    n = n_label_owners * batch * n_steps
    data = ImageData(dataset, torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=g),
                     torch.arange(n) % n_classes, torch.randint(0, 256, (n_test, *shape), dtype=torch.uint8, generator=g),
                     torch.arange(n_test) % n_classes, tuple(str(i) for i in range(n_classes)), (0.5,) * shape[0],
                     (0.25,) * shape[0])
    config = MultiVFLConfig(dataset=dataset, scenario="iid", n_data_owners=n_data_owners, n_label_owners=n_label_owners,
                            samples_per_owner=batch * n_steps, batch_size=batch, local_steps=n_steps, n_test=n_test,
                            seed=seed)
    method = MultiVFL(config, data)
    method.setup()
    return method


def count_round(dataset: str, n_data_owners: int, n_label_owners: int, k: int = 1,
                batch: int = OP_COUNT_BATCH) -> dict[str, Counts]:
    """One Multi-VFL training round (round 2, no evaluation) of ``k`` runs packed (a
    :class:`~vflkit.training.multi_owner.RoundPack`) or of one run alone (k = 1), split
    into ``per_step`` (what one more batch per label owner adds) and ``fixed`` (the server's
    aggregation, the data owners' averaging); for a pack also ``eval_per_message``, one
    evaluation message of :data:`MULTI_VFL_EVAL_BATCH` test images for all k runs."""
    def build(n_steps: int, n_test: int = 8) -> tuple[Callable[[int], Any], RoundPack | None]:
        runs = [_multi_vfl_method(dataset, n_data_owners, n_label_owners, batch, n_steps, seed=s, n_test=n_test)
                for s in range(k)]
        pack = RoundPack(runs, stacking="vmap") if k > 1 else None
        step = runs[0].round if pack is None else pack.round
        step(1)
        return step, pack

    def one_round(n_steps: int) -> Counts:  # one pack alive at a time: large packs take GBs
        step, _ = build(n_steps)
        return count(lambda: step(2))

    one, two = one_round(1), one_round(2)
    out = {"per_step": Counts(two.ops - one.ops, two.flops - one.flops),
           "fixed": Counts(2 * one.ops - two.ops, 2 * one.flops - two.flops)}
    if k > 1:
        # as on a GPU, where the label owners' stacked model takes EVAL_IMAGES[0] test images of
        # the k runs at a time; a call's operations do not depend on its size, so the message is
        # counted with 2 images a call
        calls = math.ceil(MULTI_VFL_EVAL_BATCH / max(1, EVAL_IMAGES[0] // k))
        _, pack = build(1, n_test=2 * calls)
        assert pack is not None
        out["eval_per_message"] = count(lambda: pack.evaluate(batch_size=2 * calls, chunk=2))
    return out


def count_evaluation(dataset: str, n_data_owners: int, n_test: int = 8) -> Counts:
    """One Multi-VFL evaluation over ``n_test`` test images in one message (the label owner's
    model takes the whole message, as on a GPU)."""
    method = _multi_vfl_method(dataset, n_data_owners, 5, OP_COUNT_BATCH, 1, seed=0, n_test=n_test)
    return count(lambda: method.evaluate(batch_size=n_test, eval_chunk=n_test))


def multi_vfl_flops(run: Any) -> float:
    """Training and evaluation FLOPs of a Multi-VFL run: its rounds' counted steps (scaled to
    its batch) and aggregations, and every evaluation's forward over its test images."""
    shape = (run.dataset, run.n_data_owners, run.n_label_owners)

    def per_round() -> dict[str, float]:
        got = count_round(*shape)
        return {"per_sample": got["per_step"].flops / OP_COUNT_BATCH, "fixed": got["fixed"].flops,
                "eval_per_image": count_evaluation(run.dataset, run.n_data_owners).flops / 8}

    c = cached(f"multi_vfl {shape!r}", per_round)
    n_steps = run.local_steps or math.ceil(run.samples_per_owner / run.batch_size) * run.local_epochs
    evaluations = run.rounds // run.eval_every + (run.rounds % run.eval_every != 0)
    n_test = run.n_test or 10_000  # MNIST's and FashionMNIST's test sets
    return (run.rounds * (c["fixed"] + n_steps * run.batch_size * c["per_sample"])
            + evaluations * n_test * c["eval_per_image"])


# --------------------------------------------------------------------------- a run


def uncounted(run: Any) -> str | None:
    """Why ``run`` has no count, or None when it has one."""
    name = type(run).__name__
    if name in UNCOUNTED:
        return UNCOUNTED[name]
    if name not in ("RunConfig", "MultiVFLConfig"):
        return f"{name} is no run class this module counts"
    if run.dataset not in IMAGE_METADATA and (name == "MultiVFLConfig" or run.dataset != "criteo"):
        return f"dataset {run.dataset!r} has no shapes in vflkit.data.IMAGE_METADATA"
    if name == "RunConfig" and train_size(run) is None:
        return f"the training size of {run.dataset!r} is unknown without its data"
    return None


def run_flops(run: Any) -> float | None:
    """Training FLOPs of one run: one step's (:func:`step_flops`) times its steps; a Multi-VFL
    run's rounds and evaluations (:func:`multi_vfl_flops`). None where :func:`uncounted` gives a
    reason."""
    if uncounted(run) is not None:
        return None
    if type(run).__name__ == "MultiVFLConfig":
        return multi_vfl_flops(run)
    n = train_size(run)
    assert n is not None
    return step_flops(run) * n / run.batch_size * run.epochs


def bench_setting(method: str, model: str, batch: int) -> Any:
    """The setting ``python -m vflkit.ops.bench`` steps: 4 parties of ``model`` on MNIST's width
    strips, embedding 128."""
    return RunConfig(paper="demo", dataset="mnist", method=method, models=(model,) * 4, n_parties=4,
                     batch_size=batch, embedding_dim=128)


__all__ = ["Counts", "MULTI_VFL_EVAL_BATCH", "NOT_IN_STEP", "OP_COUNT_BATCH", "UNCOUNTED", "bench_setting", "cached",
           "count", "count_evaluation", "count_round", "count_step", "count_step_ops", "multi_vfl_flops",
           "random_method", "known_flops", "run_flops", "save_cache", "step_flops", "step_key", "steps", "train_size", "uncounted"]
