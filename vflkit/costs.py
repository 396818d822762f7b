"""A cost model of runs: training FLOPs counted by torch, and measured FLOP/s per device kind.

:func:`run_flops` counts one training step of a run's party models with
:class:`torch.utils.flop_counter.FlopCounterMode` on the ``meta`` device (no memory, no compute:
the counter reads shapes only), and multiplies it by the steps of the run. The step mirrors what
each method's ``train_step`` computes (:mod:`vflkit.methods`): which party networks run forward,
which backward, and how often (C-VFL's Q local iterations). Only what the counter counts is
counted (matrix products and convolutions, forward and backward); element-wise work, the
optimizer, evaluation (but Multi-VFL's, every round), blinding and messages are left to the
measured rate, which divides the counted FLOPs by whole wall times.

:func:`rate` is that rate: the median of ``run_flops(config) / wall_time_s`` over the committed
records of one device kind (``cpu``/``cuda``) and protocol family, diverged runs and runs shorter
than :data:`MIN_WALL_S` left out.
:func:`estimate_s` divides a run's FLOPs by it.

How far to trust it: a rough guide, not a prediction to the minute: on the split family's
committed CPU records (those of a minute or more) about half the estimates are within a factor
1.5 of the measured wall time, the margin :data:`vflkit.scheduler.SAFETY` keeps. The ``cuda``
rate comes from VFedMH's CIFAR-10 ResNet records, made with nine processes sharing one H100:
against ``results/device/h100-vfedmh-resnets-calibration.json`` (one process alone) its minutes
are several times longer, most for SplitNN and C-VFL, whose bottom ResNets (large convolutions)
run at more FLOP/s than the 1x1 top stages that the count weighs equally.
That rate is a process's while nine shared the card, what a scheduler running several workers
on one GPU needs; the H100-minutes that ``--status``, the report, the notebooks and the launcher
print come from :func:`price`, which divides the same FLOPs by :func:`h100_rate`, measured on one
process alone (:data:`H100_CALIBRATION`).

Covered: the split family (:class:`~vflkit.methods.base.RunConfig`: VFedMH, EASTER, the demo,
image and Criteo parties) and Multi-VFL (:class:`~vflkit.methods.multi_vfl.MultiVFLConfig`).
APC-VFL's one-shot runs and AdptVFedConv's tiles return None, with the reason in
:data:`UNCOUNTED`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch
from torch.utils.flop_counter import FlopCounterMode

if TYPE_CHECKING:
    import pandas as pd

#: Per image dataset: one image's shape, the classes, and the training split's size (the
#: official splits that :func:`vflkit.data.load_dataset` reads), so a run's step count needs no
#: data loaded.
IMAGE_DATASETS: dict[str, tuple[tuple[int, int, int], int, int]] = {
    "mnist": ((1, 28, 28), 10, 60_000),
    "fashion_mnist": ((1, 28, 28), 10, 60_000),
    "cifar10": ((3, 32, 32), 10, 50_000),
    "cifar100": ((3, 32, 32), 100, 50_000),
    "cinic10": ((3, 32, 32), 10, 90_000),
}

#: The protocol families (:data:`vflkit.study.FAMILIES`) whose runs :func:`run_flops` counts.
COUNTED_FAMILIES: tuple[str, ...] = ("split", "multi_owner")
#: Why a run class has no FLOP count (its family's estimate comes from its other seeds only).
UNCOUNTED: dict[str, str] = {
    "OneShotRun": "APC-VFL's one-shot runs (autoencoders, then a downstream model) have no FLOP count yet",
    "TilesRun": "AdptVFedConv's tiled VGG runs have no FLOP count yet",
}

#: Party networks counted per party model: h forward alone (C-VFL's compressed embeddings, no
#: grad), h backward, and p forward+backward with the gradient into its input E (VFedMH line 13).
#: h then p forward+backward (Local, Agg_VFL) is ``h_fwd + h_bwd + p_fb_in`` exactly: the
#: gradient reaches h through p's input either way.
PARTS = ("h_fwd", "h_bwd", "p_fb_in")
#: The active party's top model (SplitNN, C-VFL): forward+backward into the parameters and the
#: input (SplitNN), the parameters only (C-VFL's server), the input only (a C-VFL party's local
#: iteration through the frozen snapshot).
TOP_PARTS = ("fb_in", "fb", "fb_in_only")
#: Bump when what a cached count means changes.
_CACHE_VERSION = 1


def _count(fn: Callable[[], Any]) -> int:
    """The FLOPs torch's counter sees while ``fn`` runs."""
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return int(counter.get_total_flops())


def _backward(out: torch.Tensor) -> None:
    out.backward(torch.ones_like(out))


def _cache_path() -> Path:
    """Where counts persist between processes: counting a ResNet101 takes seconds even on meta
    tensors, and ``--status`` counts every architecture of every study."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vflkit" / "flops.json"


@functools.cache
def _cache_stamp() -> str:
    """What the counts depend on besides their arguments: the model code and torch's counter."""
    import hashlib

    from .config import project_root

    h = hashlib.sha256(f"{_CACHE_VERSION} {torch.__version__}".encode())
    for name in ("costs.py", "models.py", "methods/splitnn.py", "methods/cvfl.py"):
        h.update((project_root() / "vflkit" / name).read_bytes())
    return h.hexdigest()[:16]


@functools.cache
def _disk_cache() -> dict[str, dict[str, float]]:
    try:
        data = json.loads(_cache_path().read_text())
        return data["counts"] if data.get("stamp") == _cache_stamp() else {}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def _cached(key: str, compute: Callable[[], Any], *, save: bool = True) -> Any:
    """``compute()``, remembered on disk under ``key`` (best effort: an unwritable cache only
    costs the count again); with ``save=False`` written by the next :func:`_save_cache`."""
    cache = _disk_cache()
    if key not in cache:
        cache[key] = compute()
        _UNSAVED.add(key)
        if save:
            _save_cache()
    return cache[key]


#: Keys computed since the cache file was last written.
_UNSAVED: set[str] = set()


def _save_cache() -> None:
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


@functools.cache
def party_flops(arch: str, input_shape: tuple[int, ...], num_classes: int, embedding_dim: int,
                el_pl: tuple[int, int], batch: int, cut: str | None = None,
                tabular: tuple[int, int] | None = None) -> dict[str, float]:
    """FLOPs of one party model's pieces (:data:`PARTS`) on a batch of ``batch`` samples.

    Counted on the ``meta`` device; a model whose forward reads its data (the Criteo models check
    their category codes) is counted on a CPU batch of 2 instead and scaled to ``batch``: every
    counted operation is linear in the batch. ``tabular`` is ``(n_dense, n_sparse)`` of a Criteo
    party (the vocabulary sizes change lookups only, which the counter does not count).
    """
    args = (arch, tuple(input_shape), num_classes, embedding_dim, tuple(el_pl), cut, tabular)

    def per_sample() -> dict[str, float]:
        # counted at the run's batch on meta (free), per sample: one entry serves every batch size
        try:
            return {k: v / batch for k, v in _party_flops(*args, batch, "meta").items()}
        except Exception:  # noqa: BLE001 (a data-dependent check cannot run on meta tensors)
            return {k: v / 2 for k, v in _party_flops(*args, 2, "cpu").items()}

    return {k: v * batch for k, v in _cached(f"party {args!r}", per_sample).items()}


def _party_flops(arch: str, input_shape: tuple[int, ...], num_classes: int, embedding_dim: int,
                 el_pl: tuple[int, int], cut: str | None, tabular: tuple[int, int] | None,
                 batch: int, device: str) -> dict[str, float]:
    from .models import get_model

    kwargs: dict[str, Any] = {"cut": cut} if cut is not None else {}
    if tabular is not None:
        kwargs.update(n_dense=tabular[0], vocab_sizes=[2] * tabular[1])
    with torch.device(device):
        model = get_model(arch, input_shape=input_shape, num_classes=num_classes,
                          embedding_dim=embedding_dim, el_pl=el_pl, **kwargs)
        x = torch.zeros(batch, *input_shape)  # zeros: valid category codes on a CPU batch
    model.train()
    # one forward and one backward pass, counted in three pieces (as VFedMH runs them)
    held: dict[str, torch.Tensor] = {}

    def embed() -> None:
        held["e"] = model.embed(x)

    def predict() -> None:
        held["e_in"] = held["e"].detach().requires_grad_(True)
        _backward(model.predict(held["e_in"]))

    out = {"h_fwd": _count(embed), "p_fb_in": _count(predict),
           "h_bwd": _count(lambda: held["e"].backward(held["e_in"].grad))}
    return {k: float(v) for k, v in out.items()}


@functools.cache
def top_flops(n_parties: int, embedding_dim: int, num_classes: int, batch: int) -> dict[str, float]:
    """FLOPs of the active party's top model (:func:`vflkit.methods.splitnn.top_model`) per
    :data:`TOP_PARTS`, on a batch of ``batch`` concatenated embeddings."""
    from .methods.splitnn import top_model

    with torch.device("meta"):
        top = top_model(n_parties, embedding_dim, num_classes)
        z = torch.zeros(batch, n_parties * embedding_dim)
        z_in = torch.zeros(batch, n_parties * embedding_dim, requires_grad=True)

    def frozen() -> None:
        top.requires_grad_(False)
        try:
            _backward(top(z_in))
        finally:
            top.requires_grad_(True)

    return {"fb_in": float(_count(lambda: _backward(top(z_in)))), "fb": float(_count(lambda: _backward(top(z)))),
            "fb_in_only": float(_count(frozen))}


# --------------------------------------------------------------------------- split family


@dataclass(frozen=True)
class _Party:
    arch: str
    input_shape: tuple[int, ...]
    tabular: tuple[int, int] | None = None


def _image_parties(run: Any) -> tuple[list[tuple[int, ...]], int]:
    """Each party's input shape and the classes, from the partition of one dummy image (as
    :func:`vflkit.training.split.build_parties` cuts the dataset)."""
    from .training.split import image_partition

    shape, n_classes, _ = IMAGE_DATASETS[run.dataset]
    part = image_partition(run, shape)
    return [tuple(x.shape[1:]) for x in part.split(torch.zeros(1, *shape, dtype=torch.uint8))], n_classes


def _criteo_parties(run: Any) -> tuple[list[tuple[int, ...]], list[tuple[int, int]], int]:
    """Each Criteo party's input shape and (n_dense, n_sparse), from the column partition alone
    (:func:`vflkit.tabular.build_tabular_parties` without the table)."""
    from .data import CRITEO_DENSE, CRITEO_SPARSE
    from .partition import PartsPartition
    from .tabular import tabular_partition

    part = tabular_partition((*CRITEO_DENSE, *CRITEO_SPARSE), run.n_parties, active=run.active,
                             n_parts=run.feature_parts)
    groups = (part.partition if isinstance(part, PartsPartition) else part).slices
    kinds = [(sum(n in CRITEO_DENSE for n in g), sum(n not in CRITEO_DENSE for n in g)) for g in groups]
    return [(d + s,) for d, s in kinds], kinds, 2


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
    if run.dataset in IMAGE_DATASETS:
        full: int | None = IMAGE_DATASETS[run.dataset][2]
    elif run.dataset == "criteo":
        from .config import data_root
        from .data import _CRITEO_FILES, _resolve_file

        path = _resolve_file(data_root(), "criteo", None, _CRITEO_FILES)
        if path is None:
            full = None
        else:
            rows = _criteo_rows(str(path), path.stat().st_mtime)
            full = rows - int(round(rows * 0.2))  # the 80/20 split of vflkit.tabular.encode_table
    else:
        full = None
    if full is None:
        return run.n_train
    return full if run.n_train is None else min(run.n_train, full)


def _parties(run: Any) -> tuple[list[_Party], int]:
    archs = [run.party_value("models", k) for k in range(run.n_parties)]
    if run.dataset == "criteo":
        shapes, kinds, n_classes = _criteo_parties(run)
        return [_Party(a, s, t) for a, s, t in zip(archs, shapes, kinds)], n_classes
    shapes, n_classes = _image_parties(run)
    return [_Party(a, s) for a, s in zip(archs, shapes)], n_classes


#: Fields of a :class:`~vflkit.methods.base.RunConfig` that change no step's FLOPs.
_NOT_IN_STEP = ("paper", "seed", "epochs", "n_train", "n_test", "lr", "optimizers", "lr_schedule", "lr_gamma")


def step_flops(run: Any) -> float:
    """FLOPs of one training step of a split-family run at its batch size, mirroring its
    method's ``train_step``."""
    # the seeds and lengths of one setting share a step: --status rates a thousand records
    key = json.dumps({k: v for k, v in run.to_dict().items() if k not in _NOT_IN_STEP}, sort_keys=True)
    return _step_flops(key, run)


_STEPS: dict[str, float] = {}


def _step_flops(key: str, run: Any) -> float:
    if key not in _STEPS:
        _STEPS[key] = _count_step(run)
    return _STEPS[key]


def _count_step(run: Any) -> float:
    parties, n_classes = _parties(run)
    b = run.batch_size

    def pieces(p: _Party) -> dict[str, float]:
        cut = run.resnet_cut if p.arch.startswith("resnet") else None
        return party_flops(p.arch, p.input_shape, n_classes, run.embedding_dim, tuple(run.el_pl), b, cut, p.tabular)

    each = [pieces(p) for p in parties]
    method = run.method
    whole = [e["h_fwd"] + e["h_bwd"] + e["p_fb_in"] for e in each]
    if method == "local":  # the active party's model alone
        return whole[run.active]
    if method in ("agg_vfl", "homo_aggvfl", "heter_aggvfl"):  # every whole model, summed logits
        return sum(whole)
    if method in ("vfedmh", "homo_vfedmh", "easter"):
        # every party trains its own h and p: p back into its copy of E, then h from E's
        # gradient; the same products as its whole model's pass
        return sum(whole)
    top = top_flops(run.n_parties, run.embedding_dim, n_classes, b)
    if method in ("splitnn", "pyvertical"):  # bottoms, and the top back into the embeddings
        return sum(e["h_fwd"] + e["h_bwd"] for e in each) + top["fb_in"]
    if method == "c_vfl":
        from .methods.cvfl import CVFL

        q = int({**CVFL.defaults, **run.options}["local_iterations"])
        # embeddings once without grad; then Q local iterations at every party (its bottom,
        # the frozen top snapshot back into the input) and Q server iterations on the top
        return (sum(e["h_fwd"] for e in each) + q * sum(e["h_fwd"] + e["h_bwd"] + top["fb_in_only"] for e in each)
                + q * top["fb"])
    raise ValueError(f"no FLOP count for method {method!r}")


# --------------------------------------------------------------------------- operations per step

#: The committed op counts, under ``results/``: the torch operations one training step of each
#: split-family setting dispatches (``python -m vflkit.costs --count-ops`` writes them).
OP_COUNTS = "device/op-counts.json"
#: The batch a step is counted at: an op count does not depend on the batch size (tested), and a
#: small batch counts a ResNet101 C-VFL step in seconds on a CPU.
OP_COUNT_BATCH = 4


def op_key(run: Any) -> str:
    """A split-family setting's key in :data:`OP_COUNTS`: its config less what changes no step
    (seed, length, learning rate, and the batch size)."""
    return json.dumps({k: v for k, v in run.to_dict().items() if k not in (*_NOT_IN_STEP, "batch_size")},
                      sort_keys=True)


def count_step_ops(run: Any, batch: int = OP_COUNT_BATCH, *, pack: int | None = None,
                   group_parties: bool = True, stacking: str = "vmap") -> int:
    """The torch operations one training step of image run ``run`` dispatches (after a warm-up
    step), its method's own ``train_step`` on random images of the dataset's shape, on the CPU.
    With ``pack=K``: one step of the packed trainer (:mod:`vflkit.training.packed`, stacked as
    ``stacking`` says) of K such runs (seeds 0..K-1) together, C-VFL's alike parties stacked
    unless ``group_parties`` is False. Vmapped by default, although a GPU now stacks convolutional models grouped
    (:func:`vflkit.training.packed.device_stacking`, 0.4-1.0x vmap's operations): the GPU
    measurements the costs rest on (seconds per operation, the CUDA-graphs gain) were taken on
    vmapped packs, so the vmapped count is the one they support until a GPU times the grouped
    step (``python -m vflkit.bench --packed`` prints both).

    Why operations: on a GPU these runs are launch-bound, not FLOP-bound. The GPU measurements
    under ``results/device/`` (the H100 calibration, the H200 benchmark) find a nearly constant
    time per dispatched operation across settings whose FLOP/s differ several-fold.
    A run of ``precision="bf16"`` is counted under its autocast, casts included.
    """
    from .training.split import precision_context

    if pack is None:
        method = _random_run(run, batch)
        step, ids = method.train_step, torch.arange(4 * batch)
    else:
        from .training.split import Pack

        packed = Pack([_random_run(run.replace(seed=k), batch) for k in range(pack)], stacking=stacking,
                      group_parties=group_parties)
        step, ids = packed.train_step, torch.arange(4 * batch).expand(pack, -1)
    with torch.random.fork_rng(), precision_context(run, torch.device("cpu")):
        torch.manual_seed(0)
        step(ids[..., :batch])
        return _count_ops(lambda: step(ids[..., batch:2 * batch]))


def _random_run(run: Any, batch: int) -> Any:
    """``run``'s method, set up, on four batches of random images of its dataset's shape (the
    parties on the CPU): what :func:`count_step_ops` counts."""
    from .comm import Channel, Party
    from .methods import get_method
    from .training.split import image_partition, use_precision

    shape, n_classes, _ = IMAGE_DATASETS[run.dataset]
    small = run.replace(batch_size=batch)
    g = torch.Generator().manual_seed(0)
    n = 4 * batch
    x = torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=g)
    y = torch.randint(0, n_classes, (n,), generator=g)
    channel = Channel()
    names = iter(range(1, small.n_parties))
    parties = [Party("active" if k == small.active else f"passive_{next(names)}", channel=channel,
                     features={"train": piece.contiguous()}, labels={"train": y} if k == small.active else None,
                     transform=lambda t: t.float() / 255, device=torch.device("cpu"))
               for k, piece in enumerate(image_partition(small, shape).split(x))]
    torch.manual_seed(small.seed)
    method = get_method(small.method)(small, parties, num_classes=n_classes)
    use_precision(small, method)
    method.setup()
    return method


def _op_table(root: Path | None = None) -> dict[str, int]:
    r = _root_with(OP_COUNTS, root)
    return _read_op_table(str(r / OP_COUNTS)) if r else {}


def _root_with(name: str, root: Path | None = None) -> Path | None:
    """The results folder that holds the measurement file ``name``: ``root``, else the checkout
    of the working directory, else the one this package is in (a notebook or test run elsewhere
    prices runs the same); None where none does."""
    roots = [root] if root is not None else [committed_root(), Path(__file__).resolve().parents[1] / "results"]
    return next((r for r in roots if (r / name).is_file()), None)


@functools.cache
def _read_packed_table(path: str) -> dict[str, int]:
    try:
        return {row["setting"]: int(row["packed_ops"]) for row in json.loads(Path(path).read_text())["steps"]
                if row.get("packed_ops") is not None}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


@functools.cache
def _read_op_table(path: str) -> dict[str, int]:
    try:
        return {row["setting"]: int(row["ops"]) for row in json.loads(Path(path).read_text())["steps"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def step_ops(run: Any, root: Path | None = None) -> int | None:
    """The committed op count of ``run``'s training step (:data:`OP_COUNTS`); None where the
    table has none (Criteo's parties, a setting added since it was written)."""
    if type(run).__name__ != "RunConfig":
        return None
    return _op_table(root).get(op_key(run))


#: The pack a packed op count is taken at: the paper profiles' three seeds.
PACK_COUNTED = 3
#: The methods whose packed step the op table counts too: C-VFL, 72 % of the GPU remainder's
#: H100-minutes, whose seed packs a GPU ran at the per-op time of its runs alone (the packing
#: gain their op counts predict agreed with the measured one within about 15 %).
PACKED_COUNTED: tuple[str, ...] = ("c_vfl",)


def pack_ratio(run: Any, root: Path | None = None, k: int = PACK_COUNTED) -> float | None:
    """The time of one packed step of runs like ``run`` over one step of ``run`` alone, as a
    launch-bound run: the packed step's operations (:data:`PACK_COUNTED` runs, C-VFL's alike
    parties stacked, ``count_step_ops(pack=3)``) over the run's own. A pack of k such runs then
    takes ``ratio`` times one run's time alone (the vmapped step's operations barely grow with
    k: 2,495 at k = 1 and 2,529 at k = 3 for C-VFL with four MLPs), a gain of k / ratio. None
    where the table has no packed count (:data:`PACKED_COUNTED`). A Multi-VFL run's: a round of
    ``k`` runs packed over one run's round alone (:func:`multi_vfl_pack_ratio`)."""
    if type(run).__name__ == "MultiVFLConfig":
        return multi_vfl_pack_ratio(run, k, root)
    if type(run).__name__ != "RunConfig":
        return None
    r = _root_with(OP_COUNTS, root)
    packed = _read_packed_table(str(r / OP_COUNTS)).get(op_key(run)) if r else None
    ops = step_ops(run, root)
    return packed / ops if packed and ops else None


# --------------------------------------------------------------------------- Multi-VFL


#: The pack sizes a Multi-VFL round is counted at (:func:`write_op_counts`): one run alone, two,
#: eight and 42 packed (the largest pack, :data:`vflkit.training.multi_owner_packed.MAX_RUNS`);
#: other sizes lie on the line through the two counted around them.
MULTI_VFL_COUNTED_K: tuple[int, ...] = (1, 2, 8, 42)


def multi_vfl_pack_ratio(run: Any, k: int, root: Path | None = None) -> float | None:
    """The time of one round of ``k`` Multi-VFL runs like ``run`` packed
    (:class:`vflkit.training.multi_owner_packed.RoundPack`, vmapped) over one round of ``run``
    alone, as launch-bound runs: their torch operations, from the committed counts
    (:data:`OP_COUNTS`' ``multi_owner`` rows: each round split into what every batch step adds
    and what the round adds once, and an evaluation message, of the pack where counted, else
    k runs' alone), scaled to ``run``'s steps. None where they have no row for its shapes."""
    r = _root_with(OP_COUNTS, root)
    table = _read_multi_vfl_table(str(r / OP_COUNTS)) if r else {}
    shape = (run.dataset, run.n_data_owners, run.n_label_owners)
    rounds = {kk: v for (ds, do, lo, kk), v in table.get("rounds", {}).items() if (ds, do, lo) == shape}
    n_test = run.n_test or 10_000  # MNIST's and FashionMNIST's test sets
    evaluation = table.get("eval", {}).get((run.dataset, run.n_data_owners))
    if 1 not in rounds or evaluation is None or k < 1:
        return None
    if k in rounds:
        packed = dict(rounds[k])
    else:  # on the line through the counted packs around k (the last two beyond them)
        counted = sorted((kk, v) for kk, v in rounds.items() if kk > 1)
        if len(counted) < 2:
            return None
        i = next((i for i, (kk, _) in enumerate(counted) if kk > k), len(counted) - 1)
        (k1, a), (k2, b) = counted[max(i - 1, 0)], counted[max(i, 1)]
        packed = {f: a[f] + (b[f] - a[f]) * (k - k1) / (k2 - k1) for f in a if f in b}
    n = run.local_steps or math.ceil(run.samples_per_owner / run.batch_size) * run.local_epochs
    messages = math.ceil(n_test / MULTI_VFL_EVAL_BATCH)
    alone = rounds[1]
    one = alone["fixed"] + n * alone["per_step"] + messages * evaluation
    # a pack evaluates its runs together where its evaluation was counted (k > 1), else each alone
    packed_eval = packed.get("eval_per_message", k * evaluation) if k > 1 else evaluation
    return (packed["fixed"] + n * packed["per_step"] + messages * packed_eval) / one


@functools.cache
def _read_multi_vfl_table(path: str) -> dict[str, dict[tuple, Any]]:
    try:
        doc = json.loads(Path(path).read_text()).get("multi_owner", {})
        return {"rounds": {(r["dataset"], r["n_data_owners"], r["n_label_owners"], r["k"]):
                           {f: float(r[f]) for f in ("per_step", "fixed", "eval_per_message") if f in r}
                           for r in doc.get("rounds", [])},
                "eval": {(r["dataset"], r["n_data_owners"]): float(r["per_message"]) for r in doc.get("eval", [])}}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


#: Test images per evaluation message (MultiVFL.evaluate's default batch).
MULTI_VFL_EVAL_BATCH = 1000


def count_multi_vfl(dataset: str, n_data_owners: int, n_label_owners: int) -> dict[str, list[dict[str, Any]]]:
    """The ``multi_vfl`` rows of :data:`OP_COUNTS` for one shape: a round's operations at each
    :data:`MULTI_VFL_COUNTED_K` and one evaluation message's (seconds to a minute on a CPU)."""
    rounds = [{"dataset": dataset, "n_data_owners": n_data_owners, "n_label_owners": n_label_owners, "k": k,
               **_multi_vfl_round_ops(dataset, n_data_owners, n_label_owners, OP_COUNT_BATCH, k)}
              for k in MULTI_VFL_COUNTED_K]
    return {"rounds": rounds, "eval": [{"dataset": dataset, "n_data_owners": n_data_owners,
                                        "per_message": _multi_vfl_eval_ops(dataset, n_data_owners)}]}


def _multi_vfl_method(dataset: str, n_data_owners: int, n_label_owners: int, batch: int, steps: int, seed: int,
                      n_test: int = 8) -> Any:
    from .data import ImageData
    from .methods.multi_vfl import MultiVFL, MultiVFLConfig

    shape, n_classes, _ = IMAGE_DATASETS[dataset]
    g = torch.Generator().manual_seed(0)
    n = n_label_owners * batch * steps
    data = ImageData(dataset, torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=g),
                     torch.arange(n) % n_classes, torch.randint(0, 256, (n_test, *shape), dtype=torch.uint8, generator=g),
                     torch.arange(n_test) % n_classes, tuple(str(i) for i in range(n_classes)), (0.5,) * shape[0],
                     (0.25,) * shape[0])
    config = MultiVFLConfig(dataset=dataset, scenario="iid", n_data_owners=n_data_owners, n_label_owners=n_label_owners,
                            samples_per_owner=batch * steps, batch_size=batch, local_steps=steps, n_test=n_test,
                            seed=seed)
    method = MultiVFL(config, data)
    method.setup()
    return method


def _multi_vfl_round_ops(dataset: str, n_data_owners: int, n_label_owners: int, batch: int, k: int) -> dict[str, float]:
    """Operations of one training round (round 2, no evaluation) of ``k`` runs packed (k > 1, a
    :class:`~vflkit.training.multi_owner_packed.RoundPack` held across rounds, as the packed
    trainer holds it) or of one run alone (k = 1): ``per_step``, what one more batch per label
    owner adds, and ``fixed``, the rest (the server's aggregation, the data owners' averaging);
    for a pack also ``eval_per_message``, one evaluation message of
    :data:`MULTI_VFL_EVAL_BATCH` test images for all k runs."""
    from .training.multi_owner import EVAL_IMAGES, RoundPack

    def build(steps: int, n_test: int = 8) -> tuple[Callable[[int], Any], Any]:
        runs = [_multi_vfl_method(dataset, n_data_owners, n_label_owners, OP_COUNT_BATCH, steps, seed=s, n_test=n_test)
                for s in range(k)]
        pack = RoundPack(runs, stacking="vmap") if k > 1 else None
        step = (lambda r: runs[0].round(r)) if k == 1 else pack.round
        step(1)
        return step, pack

    def count(steps: int) -> int:  # one pack alive at a time: 42 runs' take ~7 GB of a CPU's memory
        step, _ = build(steps)
        return _count_ops(lambda: step(2))

    one = count(1)
    two = count(2)
    out = {"per_step": float(two - one), "fixed": float(2 * one - two)}
    if k > 1:
        # as on a GPU, where the label owners' stacked model takes EVAL_IMAGES[0] test images of
        # the k runs at a time: a message of MULTI_VFL_EVAL_BATCH images in that many calls. The
        # calls' operations do not depend on their sizes, so the message is counted with 2 images
        # a call (42 runs' real message would need ~20 GB of a CPU's memory to count)
        calls = math.ceil(MULTI_VFL_EVAL_BATCH / max(1, EVAL_IMAGES[0] // k))
        _, pack = build(1, n_test=2 * calls)
        out["eval_per_message"] = float(_count_ops(lambda: pack.evaluate(batch_size=2 * calls, chunk=2)))
    return out


def _multi_vfl_eval_ops(dataset: str, n_data_owners: int) -> float:
    """Operations of one evaluation message of :data:`MULTI_VFL_EVAL_BATCH` test images, as on
    a GPU (the label owner's model takes the whole message)."""
    batch = MULTI_VFL_EVAL_BATCH
    method = _multi_vfl_method(dataset, n_data_owners, 5, OP_COUNT_BATCH, 1, seed=0, n_test=batch)
    return float(_count_ops(lambda: method.evaluate(batch_size=batch, eval_chunk=batch)))


def _count_ops(fn: Callable[[], Any]) -> int:
    """The torch operations ``fn()`` dispatches."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Ops(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            self.n += 1
            return func(*args, **(kwargs or {}))

    with torch.random.fork_rng(), _Ops() as ops:
        fn()
    return ops.n


@functools.cache
def multi_vfl_flops(dataset: str, n_data_owners: int, batch: int) -> dict[str, float]:
    """Per sample of a Multi-VFL run (:mod:`vflkit.methods.multi_vfl`): ``train``, one
    split-learning step (every data owner's conv forward and backward into its weights, the
    label owner's model forward and backward into its weights and the joined activations);
    ``eval``, the forward of every data owner and the label owner."""
    from .models import MultiVFLDataOwner, MultiVFLLabelOwner
    from .partition import strips

    shape, n_classes, _ = IMAGE_DATASETS[dataset]
    part = strips(n_data_owners, image_shape=shape, axis="height")  # bands of rows, as the method cuts
    bands = [tuple(x.shape[1:]) for x in part.split(torch.zeros(1, *shape, dtype=torch.uint8))]
    with torch.device("meta"):
        owners = [MultiVFLDataOwner() for _ in bands]
        top = MultiVFLLabelOwner(n_classes, input_hw=shape[1:])
        xs = [torch.zeros(batch, *b) for b in bands]

    def step() -> None:
        acts = [m(x) for m, x in zip(owners, xs)]
        parts = [a.detach().requires_grad_(True) for a in acts]
        _backward(top(torch.cat(parts, dim=2)))
        torch.autograd.backward(acts, [p.grad for p in parts])

    def forward() -> None:
        with torch.no_grad():
            top(torch.cat([m(x) for m, x in zip(owners, xs)], dim=2))

    return {"train": _count(step) / batch, "eval": _count(forward) / batch}


def _multi_vfl_run_flops(run: Any) -> float:
    """Rounds x label owners x the samples each trains on per round, plus every evaluation's
    forward over the test images (each round by default: at 500 rounds that is work too)."""
    per = multi_vfl_flops(run.dataset, run.n_data_owners, run.batch_size)
    samples = run.local_epochs * run.samples_per_owner
    if run.local_steps is not None:
        samples = min(samples, run.local_steps * run.batch_size)
    evaluations = run.rounds // run.eval_every + (run.rounds % run.eval_every != 0)
    n_test = run.n_test or 10_000  # MNIST's and FashionMNIST's test sets
    return run.rounds * run.n_label_owners * samples * per["train"] + evaluations * n_test * per["eval"]


def uncounted(run: Any) -> str | None:
    """Why ``run`` has no FLOP count, or None when it has one."""
    name = type(run).__name__
    if name in UNCOUNTED:
        return UNCOUNTED[name]
    if name == "MultiVFLConfig":
        return None if run.dataset in IMAGE_DATASETS else f"dataset {run.dataset!r} has no metadata in vflkit.costs"
    if name != "RunConfig":
        return f"{name} is no run class the cost model knows"
    if run.dataset not in IMAGE_DATASETS and run.dataset != "criteo":
        return f"dataset {run.dataset!r} has no metadata in vflkit.costs"
    if train_size(run) is None:
        return f"the training size of {run.dataset!r} is unknown without its data"
    return None


def run_flops(run: Any) -> float | None:
    """Training FLOPs of one run: one step's FLOPs (:func:`step_flops`) times steps per epoch
    (training samples / batch size) times epochs; a Multi-VFL run's rounds (:func:`_multi_vfl_run_flops`).
    None where :func:`uncounted` gives a reason."""
    if uncounted(run) is not None:
        return None
    if type(run).__name__ == "MultiVFLConfig":
        return _multi_vfl_run_flops(run)
    n = train_size(run)
    assert n is not None
    return step_flops(run) * n / run.batch_size * run.epochs


# --------------------------------------------------------------------------- rates


def _paper_family(paper: str) -> str | None:
    from .study import STUDY_FAMILY

    return STUDY_FAMILY.get(paper)


def committed_root() -> Path:
    """The committed records: the project's ``results/``."""
    from .config import project_root

    return project_root() / "results"


#: Records shorter than this are left out of the rates: their time is mostly what the FLOP count
#: does not see (loading, evaluation, key agreement), so they would make every long run look slow
#: (the quick profile's Criteo runs, seconds long, measure a fifth of the paper runs' FLOP/s).
MIN_WALL_S = 60.0


def record_rates(root: Path | None = None) -> dict[tuple[str, str], list[float]]:
    """FLOP/s of every finished, not diverged record under ``root`` (default the committed
    ones) that ran at least :data:`MIN_WALL_S` and whose run has a FLOP count, by (device kind,
    family)."""
    rates: dict[tuple[str, str], list[float]] = {}
    for path in sorted((root or committed_root()).glob("*/*/*.json")):
        family = _paper_family(path.parent.name)
        if family not in COUNTED_FAMILIES:
            continue  # no FLOP count, no rate: not worth reading
        stat = path.stat()
        # a record's FLOP/s, remembered by its file's identity: reading a thousand records'
        # histories and ledgers is most of what rating them costs
        got = _cached(f"record {path.resolve()} {stat.st_mtime_ns} {stat.st_size}",
                      lambda: _record_rate(path, family), save=False)
        if got is not None:
            rates.setdefault((got[0], family), []).append(got[1])
    _save_cache()
    return rates


def _record_rate(path: Path, family: str) -> tuple[str, float] | None:
    """(device kind, FLOP/s) of one record; None for a diverged, short or uncounted one."""
    try:
        rec = json.loads(path.read_text())
        if rec.get("diverged") or float(rec.get("wall_time_s") or 0) < MIN_WALL_S:
            return None
        from .study import run_class

        flops = run_flops(run_class(family).from_dict(rec["config"]))
        kind = str(rec["environment"]["device"]).split(":")[0]
    except Exception:  # noqa: BLE001 (a record of another version of its run class)
        return None
    return (kind, flops / float(rec["wall_time_s"])) if flops else None


@functools.cache
def _rates(root: str) -> dict[tuple[str, str], float]:
    return {k: statistics.median(v) for k, v in record_rates(Path(root)).items()}


def rate(kind: str, family: str, root: Path | None = None) -> float | None:
    """Measured FLOP/s of ``family``'s runs on device kind ``kind`` (``cpu``, ``cuda``; a
    ``cuda:N`` counts as ``cuda``): the median over the committed records; None without one."""
    return _rates(str(root or committed_root())).get((kind.split(":")[0], family))


# --------------------------------------------------------------------------- H100-minutes

#: The H100 rate's evidence, under ``results/``: seconds per training step of each of VFedMH's 13
#: Table II CIFAR-10 ResNet configurations (``scripts/gpu_runs.py calibrate``), one
#: process alone on one H100 80GB, through the ordinary engine (epoch 2 of 2, 20 steps each).
H100_CALIBRATION = "device/h100-vfedmh-resnets-calibration.json"
#: What the H100 estimates are, said wherever they are printed.
H100_LABEL = ("estimated from the torch operations of a training step (results/" + OP_COUNTS
              + ") at the seconds per operation measured on results/" + H100_CALIBRATION
              + " (one process alone on one H100; these runs are launch-bound), from FLOPs at that "
              "calibration's rate where a run has no op count; not measured on a whole run")


def _calibrated(root: str) -> list[tuple[Any, float]]:
    """(config, seconds per step) of each row of :data:`H100_CALIBRATION` under ``root``: the
    seed-0 Table II CIFAR-10 setting it ran; [] without the file."""
    try:
        rows = json.loads((Path(root) / H100_CALIBRATION).read_text())
    except (OSError, ValueError):
        return []
    from .studies import vfedmh

    runs = [c for c in vfedmh.configs("paper")["table2"]
            if c.dataset == "cifar10" and c.seed == 0 and vfedmh.needs_gpu(c)]
    out = []
    for row in rows:
        match = [c for c in runs if c.method == row["method"] and "/".join(sorted(set(c.models))) == row["models"]]
        if match:  # the configuration the calibration ran: seed 0 of Table II's setting
            out.append((match[0], float(row["s_per_step"])))
    return out


@functools.cache
def _h100_rate(root: str) -> float | None:
    """FLOP/s of the split family on one H100 alone: the calibrated configurations' training
    FLOPs per step (:func:`step_flops`) summed, over their seconds per step summed.

    Why this calibration and not the committed ``cuda`` records (:func:`rate`): those 8 records
    were made by 9 processes time-slicing one H100, so a record's wall time is not the GPU time
    its run needs; their per-process median (2.3 TFLOP/s) priced VFedMH's 114 pending ResNet runs
    at 11,271 "H100-minutes", 5.9x the calibration's 1,923 for the same runs (the run count was
    equal: the whole gap is the rate). The calibration measured each configuration alone, and all
    13 of them (C-VFL, the most costly, has no record). Pooled (FLOPs over seconds, 13.5
    TFLOP/s) rather than a median of per-configuration rates (5-24 TFLOP/s: large bottom
    convolutions run faster than 1x1 stages), the rate gives back the calibration's own total for
    Table II's mix; one run's estimate can still be 2-3x off (Local's small steps run at 5).
    Used only where a run has no op count (:func:`launch_bound_s` is the estimate otherwise).
    """
    got = _calibrated(root)
    seconds = sum(s for _, s in got)
    return sum(step_flops(c) for c, _ in got) / seconds if seconds else None


#: One time-limited H200 job's measurements, under ``results/``: its packed benchmark (each setting
#: alone on the GPU, samples/s of three seeds stepped one after another) measures the H200's
#: seconds per operation (as any benchmark file there does), and its stopped Multi-VFL run the
#: seconds of a Multi-VFL round.
H200_WINDOW = "device/h200-2026-11-26-window.json"


def bench_setting(method: str, model: str, batch: int) -> Any:
    """The setting ``python -m vflkit.bench`` steps: 4 parties of ``model`` on MNIST's width
    strips, embedding 128 (:func:`vflkit.bench._setup`)."""
    from .methods.base import RunConfig

    return RunConfig(paper="demo", dataset="mnist", method=method, models=(model,) * 4, n_parties=4,
                     batch_size=batch, embedding_dim=128)


def benchmarks(root: str) -> tuple[tuple[Path, str | None, dict[str, Any]], ...]:
    """The packed benchmarks a GPU wrote under ``root/device/`` (``python -m vflkit.bench --packed
    --json``; a GPU job's file that holds one too), in name order: each file, its GPU kind
    (:func:`_gpu_kind` of its ``device``; None for another GPU) and its document. The one reader
    of these files for the cost model, the launcher and the README (not cached: the cost model
    caches what it derives, :func:`_op_seconds`, :func:`_graph_gains`)."""
    out = []
    for path in sorted((Path(root) / "device").glob("*.json")):
        try:
            doc = json.loads(path.read_text())
            doc["bench_packed"]["rows"]
            kind = _gpu_kind(str(doc["device"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a benchmark's file
        out.append((path, kind, doc))
    return tuple(out)


@functools.cache
def _op_seconds(root: str) -> dict[str, list[float]]:
    """Seconds per dispatched operation of each measured setting, by GPU kind: the H100
    calibration's rows, and the rows of every packed benchmark a GPU wrote under
    ``results/device/`` (``python -m vflkit.bench --packed --json``; its ``device`` names the GPU),
    each over its committed op count."""
    out: dict[str, list[float]] = {}
    for config, s in _calibrated(root):
        if (ops := step_ops(config, Path(root))) is not None:
            out.setdefault("h100", []).append(s / ops)
    for _, kind, doc in benchmarks(root):
        bench = doc["bench_packed"]
        for row in bench["rows"] if kind else []:
            ops = step_ops(bench_setting(row["method"], row["model"], bench["batch"]), Path(root))
            if ops is not None:  # "alone": the pack's runs stepped one after another, one at a time
                out.setdefault(kind, []).append(bench["batch"] / row["alone_samples_per_s"] / ops)
    return out


def captured_gain(row: dict[str, Any]) -> float | None:
    """How many times faster a packed benchmark row's captured step ran than the same pack eager:
    the trainer's stacking (``auto``), in a benchmark from before grouped stacking the vmapped
    pack (then the trainer's); None where the row timed no captured step."""
    eager = row.get("auto_samples_per_s") or row.get("vmap_samples_per_s")
    return row["graphs_samples_per_s"] / eager if row.get("graphs_samples_per_s") and eager else None


@functools.cache
def _graph_gains(root: str) -> dict[tuple[str, str, str], list[float]]:
    """Per (GPU kind, method, model): how many times faster each committed packed benchmark's
    captured step ran than the same pack eager (:func:`captured_gain`)."""
    out: dict[tuple[str, str, str], list[float]] = {}
    for _, kind, doc in benchmarks(root):
        for row in doc["bench_packed"]["rows"] if kind else []:
            if (gain := captured_gain(row)) is not None:
                out.setdefault((kind, row["method"], row["model"]), []).append(gain)
    return out


def graphs_gain(method: str, models: Sequence[str], kind: str, root: Path | None = None) -> float | None:
    """How many times faster a packed step of ``method`` runs captured in CUDA graphs than eagerly
    vmapped on one GPU of ``kind``: the median of the committed benchmarks' rows of that method
    with every party on ``models``' one architecture (measured on MNIST's width strips; taken
    for any dataset, as the launch-bound step's operations do not depend on the image size).
    None where no benchmark measured it, or the parties' models differ (not benchmarked)."""
    if len(set(models)) != 1:
        return None
    r = _root_with(OP_COUNTS, root) or committed_root()
    got = _graph_gains(str(r)).get((kind, method, next(iter(models))))
    return statistics.median(got) if got else None


def op_seconds(kind: str = "h100", root: Path | None = None) -> float | None:
    """Seconds one dispatched torch operation of a training step takes on one GPU of ``kind``
    (``h100``, ``h200``) with nothing else on it: the median over the committed measurements
    (:func:`_op_seconds`); None without one."""
    r = _root_with(OP_COUNTS, root)
    got = _op_seconds(str(r)).get(kind) if r else None
    return statistics.median(got) if got else None


def multi_vfl_minutes(run: Any, kind: str = "h100", root: Path | None = None) -> float | None:
    """Minutes a Multi-VFL run needs on one GPU of ``kind`` alone, from the paper run an H200
    job trained part of (:data:`H200_WINDOW`: its rounds done in its seconds, 13 processes
    sharing the GPU): over :func:`sharing_slowdown` (the split family's), at ``kind``'s seconds
    per op against the H200's (:func:`op_seconds`), scaled by ``run``'s FLOPs against that run's.
    None without the measurement. Its least certain link is the sharing factor, measured on the
    split family's runs, not on Multi-VFL's."""
    root = root or committed_root()
    got = _multi_vfl_round(str(root))
    share, here, there = sharing_slowdown(root), op_seconds(kind, root), op_seconds("h200", root)
    if got is None or None in (share, here, there):
        return None
    measured, per_round = got
    return per_round / share * here / there * measured.rounds * run_flops(run) / run_flops(measured) / 60


@functools.cache
def _multi_vfl_round(root: str) -> tuple[Any, float] | None:
    """(config, seconds per round) of the Multi-VFL paper run the H200 job stopped; None
    without it."""
    from .studies import multi_vfl

    try:
        stopped = json.loads((Path(root) / H200_WINDOW).read_text())["stopped_runs"]
    except (OSError, ValueError, KeyError):
        return None
    by_key = {c.key: c for c in multi_vfl.configs("paper")}
    got = [(by_key[r["key"]], r) for r in stopped if r.get("unit") == "round" and r["key"] in by_key]
    return (got[0][0], got[0][1]["elapsed_s"] / got[0][1]["done"]) if got else None


def launch_bound_s(run: Any, kind: str = "h100") -> float | None:
    """Seconds ``run`` trains on one GPU of ``kind`` alone, as a launch-bound run: its steps
    times its step's operations (:func:`step_ops`) times :func:`op_seconds`. None without an op
    count or a measurement. Evaluation is left out, as in the FLOP count."""
    ops, per = step_ops(run), op_seconds(kind)
    n = train_size(run) if ops is not None else None
    if ops is None or per is None or n is None:
        return None
    return math.ceil(n / run.batch_size) * run.epochs * ops * per


def h100_rate(family: str, root: Path | None = None) -> float | None:
    """FLOP/s of ``family``'s runs on one H100 with nothing else on it (:func:`_h100_rate`): the
    split family only; None for the others (no H100 measurement yet). The calibration is read
    from ``root``, else the checkout of the working directory, else the one this package is in
    (a notebook or test run elsewhere prices runs the same)."""
    if family != "split":
        return None
    r = _root_with(H100_CALIBRATION, root)
    return _h100_rate(str(r)) if r else None


def h100_minutes(run: Any, family: str) -> float | None:
    """Minutes ``run`` needs on one H100 alone (:data:`H100_LABEL`): launch-bound, from its op
    count (:func:`launch_bound_s`); where it has none, its training FLOPs over
    :func:`h100_rate`. None where neither exists."""
    if family == "split" and (s := launch_bound_s(run, "h100")) is not None:
        return s / 60
    try:
        flops = run_flops(run)
    except Exception:  # noqa: BLE001 (a config the counter cannot build is simply unestimated)
        return None
    r = h100_rate(family)
    return flops / r / 60 if flops and r else None


#: :func:`price`'s ``source`` values.
FROM_FLOPS, FROM_STUDY = "flops", "study"


def price(study: Any, runs: Sequence[Any]) -> "pd.DataFrame":
    """The pending ``runs`` of ``study`` priced, one row each: ``needs`` ("GPU"/"CPU", the study's
    ``needs_gpu``), ``h100_min``, ``cpu_h`` and ``source``. A GPU run's H100-minutes are
    :func:`h100_minutes` (``source`` "flops"); a run without one (AdptVFedConv's tiles and
    APC-VFL's one-shot runs have no FLOP count, :data:`UNCOUNTED`; Multi-VFL has no H100 rate)
    takes the study's own measured-cost rule, ``Study.pending_cost`` (``source`` "study"), or
    none. The one estimator behind ``--status``, the report, the notebooks and the launcher."""
    import numpy as np
    import pandas as pd

    cols = ["needs", "h100_min", "cpu_h", "source", "h100_min_packed"]
    rows: list[dict[str, Any]] = []
    rest: list[int] = []
    for i, run in enumerate(runs):
        gpu = bool(study.needs_gpu(run))
        minutes = h100_minutes(run, study.family) if gpu else None
        ops = gpu and study.family == "split" and launch_bound_s(run, "h100") is not None
        rows.append({"needs": "GPU" if gpu else "CPU", "h100_min": np.nan if minutes is None else minutes,
                     "cpu_h": np.nan, "source": (FROM_OPS if ops else FROM_FLOPS) if minutes is not None else None})
        if minutes is None:
            rest.append(i)
    if rest and study.pending_cost is not None:
        own = study.pending_cost([runs[i] for i in rest]).reset_index(drop=True)
        for j, i in enumerate(rest):
            got = own.iloc[j]
            priced = pd.notna(got["h100_min"]) or pd.notna(got["cpu_h"])
            rows[i] = {"needs": got["needs"], "h100_min": got["h100_min"], "cpu_h": got["cpu_h"],
                       "source": FROM_STUDY if priced else None}
    for i, share in packed_shares(runs).items():
        if rows[i]["source"] in (FROM_OPS, FROM_STUDY) and rows[i]["h100_min"] == rows[i]["h100_min"]:
            rows[i]["h100_min_packed"] = rows[i]["h100_min"] * share
    for row in rows:
        row.setdefault("h100_min_packed", row["h100_min"])
    return pd.DataFrame(rows, columns=cols)


def packed_shares(runs: Sequence[Any]) -> dict[int, float]:
    """Index -> the share of its time alone that run ``runs[i]`` costs when the engine trains it
    packed on a GPU (:func:`vflkit.scheduler.pack_tasks`: the runs of one pack key, C-VFL's
    seeds on datasets of one shape or Multi-VFL's runs of one step shape, at most ``MAX_PACK``
    a pack): ``pack_ratio / k`` for a pack of k >= 2 whose packed step the op table counts
    (:func:`pack_ratio`); runs without are left out (alone, share 1)."""
    from .scheduler import MAX_PACK
    from .training.split import group_packs

    index = {id(r): i for i, r in enumerate(runs)}
    counted = [r for r in runs if pack_ratio(r) is not None]
    shares: dict[int, float] = {}
    for pack in group_packs(counted, max_size=MAX_PACK)[0]:
        ratio = pack_ratio(pack[0], k=len(pack)) if len(pack) >= 2 else None
        if ratio is not None:
            shares.update((index[id(r)], ratio / len(pack)) for r in pack)
    return shares


def _gpu_kind(name: str) -> str | None:
    """``h100``/``h200`` from a record's ``environment.device_name``; None for another GPU."""
    return next((k for k in ("h100", "h200") if k in name.lower()), None)


@functools.cache
def _sharing(root: str) -> tuple[float, ...]:
    r = Path(root)
    out = []
    from .study import run_class

    for path in sorted(r.glob("*/*/*.json")):
        if _paper_family(path.parent.name) != "split":
            continue
        try:
            text = path.read_text()
            if '"cuda' not in text:
                continue  # a CPU record (most of them): not parsed
            rec = json.loads(text)
            env = rec["environment"]
            if str(env["device"]).split(":")[0] != "cuda" or rec.get("diverged"):
                continue
            kind = _gpu_kind(str(env.get("device_name", "")))
            alone = launch_bound_s(run_class("split").from_dict(rec["config"]), kind) if kind else None
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if alone:
            out.append(float(rec["wall_time_s"]) / alone)
    return tuple(out)


def sharing_slowdown(root: Path | None = None) -> float | None:
    """How much longer a run takes while several processes share its GPU, as the committed
    ``cuda`` records were made (9 processes on an H100, 13 under MPS on an H200): the median of
    each record's wall time over its launch-bound time alone on that GPU (:func:`launch_bound_s`).
    None without such a record."""
    got = _sharing(str(root or committed_root()))
    return statistics.median(got) if got else None


#: :func:`estimate`'s source for a launch-bound estimate (op count x seconds per op x sharing).
FROM_OPS = "ops"
#: :func:`estimate`'s source for a Multi-VFL run priced from measured rounds (:func:`multi_vfl_minutes`).
FROM_ROUNDS = "rounds"


def estimate(run: Any, kind: str, family: str) -> tuple[float, str] | None:
    """(seconds, source) ``run`` should take on device kind ``kind`` (``cpu``, ``cuda``), or None.

    On ``cuda``, as a scheduler's or the launcher's workers share a GPU: a split-family run
    with an op count is launch-bound, its time alone on an H100 (:func:`launch_bound_s`) times
    :func:`sharing_slowdown` (source "ops"); a Multi-VFL run, :func:`multi_vfl_minutes` times
    the same (source "rounds"); otherwise, and on the CPU, its FLOPs over the rate
    the committed records of that kind measured (:func:`rate`; source "flops")."""
    kind = kind.split(":")[0]
    if kind == "cuda" and family == "split":
        alone, f = launch_bound_s(run, "h100"), sharing_slowdown()
        if alone is not None and f is not None:
            return alone * f, FROM_OPS
    if kind == "cuda" and family == "multi_owner":
        minutes, f = multi_vfl_minutes(run), sharing_slowdown()
        if minutes is not None and f is not None:
            return minutes * 60 * f, FROM_ROUNDS
    try:
        flops = run_flops(run)
    except Exception:  # noqa: BLE001 (a config the counter cannot build is simply unestimated)
        return None
    r = rate(kind, family) if flops is not None else None
    return (flops / r, FROM_FLOPS) if r else None


def estimate_s(run: Any, kind: str, family: str) -> float | None:
    """Seconds ``run`` should take on device kind ``kind`` (:func:`estimate`); None without one."""
    got = estimate(run, kind, family)
    return got[0] if got else None


__all__ = ["COUNTED_FAMILIES", "captured_gain", "FROM_FLOPS", "FROM_OPS", "FROM_ROUNDS", "FROM_STUDY", "H100_CALIBRATION", "H100_LABEL", "H200_WINDOW", "IMAGE_DATASETS",
           "OP_COUNTS", "UNCOUNTED", "bench_setting", "count_step_ops", "estimate", "estimate_s", "h100_minutes", "h100_rate", "launch_bound_s",
           "count_multi_vfl", "multi_vfl_flops", "multi_vfl_minutes", "multi_vfl_pack_ratio", "MULTI_VFL_COUNTED_K", "op_key", "op_seconds", "pack_ratio", "packed_shares", "party_flops", "price", "rate", "record_rates", "run_flops",
           "sharing_slowdown", "step_flops", "step_ops", "top_flops", "train_size", "uncounted", "write_op_counts"]



def write_op_counts(root: Path | None = None) -> Path:
    """Count every image setting of the split family's paper runs, the H100 calibration's and
    the benchmark's (:func:`count_step_ops`), and write them to :data:`OP_COUNTS` under
    ``root`` (default the committed ``results/``); for a :data:`PACKED_COUNTED` method's paper
    setting run with several seeds (the runs that pack), its packed step too. Minutes on a CPU."""
    from . import studies

    root = root or committed_root()
    settings: dict[str, Any] = {}
    seeds: dict[str, set[int]] = {}  # a setting's seeds: a packed step is counted where they pack
    for study in studies.studies():
        if study.family != "split":
            continue
        for group in study.groups("paper").values():
            for run in group:
                if run.dataset in IMAGE_DATASETS:
                    settings.setdefault(op_key(run), run)
                    seeds.setdefault(op_key(run), set()).add(run.seed)
    for config, _ in _calibrated(str(root)):
        settings.setdefault(op_key(config), config)
    for method in ("local", "splitnn", "agg_vfl", "c_vfl"):
        for model in ("mlp", "cnn", "lenet", "resnet18"):
            settings.setdefault(op_key(bench_setting(method, model, 128)), bench_setting(method, model, 128))
    rows = []
    for i, (key, run) in enumerate(sorted(settings.items())):
        rows.append({"setting": key, "ops": count_step_ops(run)})
        if run.method in PACKED_COUNTED and len(seeds.get(key, ())) >= 2:
            rows[-1]["packed_ops"] = count_step_ops(run, pack=PACK_COUNTED)
        print(f"[costs] {i + 1}/{len(settings)} {run.method} {'/'.join(run.models)} {run.dataset}: "
              f"{rows[-1]['ops']} ops a step" + (f", {rows[-1]['packed_ops']} a packed step of {PACK_COUNTED}"
                                                  if "packed_ops" in rows[-1] else ""), file=sys.stderr, flush=True)
    multi: dict[str, list[dict[str, Any]]] = {"rounds": [], "eval": []}
    shapes = {(c.dataset, c.n_data_owners, c.n_label_owners)
              for study in studies.studies() if study.family == "multi_owner" for c in study.runs("paper")}
    for shape in sorted(shapes):
        for name, found in count_multi_vfl(*shape).items():
            multi[name] += found
        print(f"[costs] Multi-VFL {'/'.join(map(str, shape))}: {multi['rounds'][-1]}", file=sys.stderr, flush=True)
    path = root / OP_COUNTS
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"what": "torch operations one training step dispatches, by split-family setting "
                                       "(vflkit.costs.count_step_ops at batch %d; python -m vflkit.costs --count-ops); "
                                       "packed_ops: one step of a pack of %d such runs (count_step_ops(pack=%d))"
                                       % (OP_COUNT_BATCH, PACK_COUNTED, PACK_COUNTED)
                                       + "; multi_owner: a Multi-VFL round's operations per batch step and once a round, "
                                       "alone (k = 1) and k runs packed (with a pack's evaluation message), and one run's evaluation message "
                                       "(vflkit.costs.count_multi_vfl)", "torch": torch.__version__,
                               "steps": rows, "multi_owner": multi}, indent=1) + "\n")
    tmp.replace(path)
    _read_op_table.cache_clear()
    _read_packed_table.cache_clear()
    _read_multi_vfl_table.cache_clear()
    _op_seconds.cache_clear()
    return path


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(prog="python -m vflkit.costs", description="the cost model's committed inputs")
    ap.add_argument("--count-ops", action="store_true", help=f"write results/{OP_COUNTS} (minutes)")
    if ap.parse_args().count_ops:
        print(write_op_counts())
    else:
        ap.print_help()
