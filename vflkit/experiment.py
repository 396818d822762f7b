"""Runs: a plain config in, a record of what happened out, written as soon as the run ends.

A :class:`RunConfig` names everything that decides a result (paper, dataset, partition, method,
models and optimizers per party, learning rates, batch size, epochs, seed, subset sizes). Its
hash is the record's key, so rerunning a notebook finds finished runs and skips them, and an
interrupted study resumes at the first run without a record. The device is not part of the
key: a record computed on a GPU is the same experiment as one computed on a CPU, and says
which device it ran on.

Records live in ``<results_dir>/<profile>/<paper>/<key>.json``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch
from tqdm.auto import tqdm

from . import __version__
from .comm import Channel, Party
from .config import project_root, resolve_device, results_dir
from .errors import BudgetExhausted, ConfigError, DivergenceError

PROFILES: tuple[str, ...] = ("smoke", "quick", "paper")
PAPERS: tuple[str, ...] = ("vfedmh", "easter", "multi_vfl", "apc_vfl", "adptvfedconv", "demo")
PARTITIONS: tuple[str, ...] = ("strips_width", "strips_height", "grid", "columns")


def check_profile(profile: str) -> str:
    """Return ``profile`` if it is one of :data:`PROFILES`, else raise a ConfigError."""
    if profile not in PROFILES:
        raise ConfigError(f"Invalid profile {profile!r}; choose one of {', '.join(PROFILES)}")
    return profile


@dataclass(frozen=True)
class RunConfig:
    """Everything that decides one run's result.

    Per-party fields (``models``, ``optimizers``, ``lr``) hold one entry per party in party
    order (party ``active`` holds the labels); a single string/number applies to every party.
    ``options`` carries method-specific settings (e.g. C-VFL's compression); unknown options
    are rejected by the method.
    """

    paper: str
    dataset: str
    method: str
    models: tuple[str, ...]
    optimizers: tuple[str, ...] | str = "sgd"
    lr: tuple[float, ...] | float = 0.05
    partition: str = "strips_width"
    n_parties: int = 4
    active: int = 0
    batch_size: int = 128
    epochs: int = 10
    seed: int = 0
    n_train: int | None = None
    n_test: int | None = None
    embedding_dim: int = 128
    el_pl: tuple[int, int] = (1, 1)
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.paper not in PAPERS:
            raise ConfigError(f"Invalid paper {self.paper!r}; choose one of {', '.join(PAPERS)}")
        if self.partition not in PARTITIONS:
            raise ConfigError(
                f"Invalid partition {self.partition!r}; choose one of {', '.join(PARTITIONS)}"
            )
        for name in ("models", "optimizers", "lr"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
                value = getattr(self, name)
            if isinstance(value, tuple) and len(value) != self.n_parties:
                raise ConfigError(
                    f"{name} has {len(value)} entries but there are {self.n_parties} parties; "
                    "give one per party or a single value for all"
                )
        if isinstance(self.models, str):
            object.__setattr__(self, "models", (self.models,) * self.n_parties)
        object.__setattr__(self, "el_pl", tuple(self.el_pl))
        if not 0 <= self.active < self.n_parties:
            raise ConfigError(f"active={self.active} is not a party index 0..{self.n_parties - 1}")
        for name in ("batch_size", "epochs", "n_parties", "embedding_dim"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")

    def party_value(self, name: str, k: int) -> Any:
        """Party ``k``'s entry of a per-party field."""
        value = getattr(self, name)
        return value[k] if isinstance(value, tuple) else value

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "RunConfig":
        """Build from a dict; an unknown key is an error, never ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown RunConfig keys {unknown}; valid keys: {', '.join(sorted(known))}")
        d = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**d)

    def replace(self, **changes: Any) -> "RunConfig":
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    @property
    def key(self) -> str:
        """Stable hash of the config (first 16 hex digits of SHA-256 of its canonical JSON)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _cpu_name() -> str:
    """The CPU's model name (Linux), else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_state() -> dict[str, Any]:
    """The checkout's commit and whether vflkit's own files differ from it.

    ``vflkit_modified`` is what tells a reader whether the committed code produced a record: a
    run made with uncommitted changes to the package names the commit it started from, not
    the code it ran. Changes outside ``vflkit/`` (notebooks, results) do not affect a run.
    """
    here = Path(__file__).resolve().parent
    out: dict[str, Any] = {}
    if os.environ.get("VFLKIT_GIT_COMMIT"):
        # a copy of the tree without .git (e.g. shipped to a rented GPU) names its commit here;
        # whoever ships it vouches that the copy is that commit's vflkit/
        out["git_commit"] = os.environ["VFLKIT_GIT_COMMIT"]
        out["vflkit_modified"] = os.environ.get("VFLKIT_GIT_MODIFIED", "1") != "0"
        return out
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here,
                                capture_output=True, text=True, timeout=5)
        if commit.returncode == 0:
            out["git_commit"] = commit.stdout.strip()
            status = subprocess.run(["git", "status", "--porcelain", "--", "."], cwd=here,
                                    capture_output=True, text=True, timeout=5)
            if status.returncode == 0:
                out["vflkit_modified"] = bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def environment_info(device: torch.device) -> dict[str, Any]:
    """Device, CPU, library versions and the code's commit, for the record.

    The CPU is part of it because the same seeded run gives different numbers on different
    CPUs: PyTorch's and MKL's kernels are chosen per instruction set (AVX2, AVX-512) and round
    differently, and training amplifies the difference (measured on the APC-VFL autoencoders).
    """
    import numpy
    import torchvision

    info: dict[str, Any] = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine(),
        "cpu": _cpu_name(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "numpy": numpy.__version__,
        "vflkit": __version__,
    }
    info.update(_git_state())
    return info


def record_path(config: RunConfig, profile: str, root: Path | None = None) -> Path:
    """Where the record of ``config`` under ``profile`` lives."""
    return (root or results_dir()) / check_profile(profile) / config.paper / f"{config.key}.json"


def load_record(config: RunConfig, profile: str, root: Path | None = None) -> dict[str, Any] | None:
    """The finished record of ``config``, or None."""
    path = record_path(config, profile, root)
    if not path.exists():
        return None
    with open(path) as f:
        return json.load(f)


def load_recorded(configs: Iterable[Any], *, profile: str,
                  path: Callable[..., Path] = record_path) -> list[dict[str, Any]]:
    """The records an earlier run of ``profile`` wrote for ``configs``; nothing is trained.

    ``path(config, profile, root)`` maps a config to its record (each study's ``record_path``).
    A notebook shows the committed records of a profile it is not running (e.g. the quick
    profile's results beside a smoke run) with this. They are looked for under
    ``VFLKIT_RESULTS`` and then under the project's own ``results/``, where the committed ones
    stay when ``VFLKIT_RESULTS`` points a trial run elsewhere. A missing record is an error
    that says how to make it.
    """
    check_profile(profile)
    configs = list(configs)
    first_missing: list[Path] | None = None
    for root in dict.fromkeys([results_dir(), project_root() / "results"]):
        paths = [path(c, profile, root) for c in configs]
        missing = [p for p in paths if not p.exists()]
        if not missing:
            break
        first_missing = first_missing or missing
    else:
        raise ConfigError(
            f"{len(first_missing)} of {len(configs)} runs of the {profile!r} profile have no record "
            f"(first: {first_missing[0]}); run the notebook with profile={profile!r} "
            f"(or `make study PROFILE={profile}`) to make them"
        )
    records = []
    for p in paths:
        with open(p) as f:
            records.append(json.load(f))
    return records


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    from .files import write_json

    write_json(path, data)  # flushed to disk before the rename that publishes it


def _check_finite(losses: dict[str, float], *, epoch: int, step: int, limit: float) -> None:
    for party, value in losses.items():
        if not math.isfinite(value) or value > limit:
            raise DivergenceError(
                f"the loss of {party} is {value} at epoch {epoch}, batch {step}: training diverged. "
                "Lower the learning rate of that party or check its inputs."
            )


@functools.lru_cache(maxsize=2)
def _dataset(name: str) -> Any:
    """A loaded dataset, kept in memory for the next run of a study (MNIST's gz files take
    about half a second to decode; a study makes dozens of runs on one dataset)."""
    from .data import load_dataset

    return load_dataset(name)


def build_parties(config: RunConfig, *, device: torch.device, channel: Channel) -> tuple[list[Party], int]:
    """Load the dataset, partition it and give each party its slice; returns (parties, n_classes).

    Party names: ``active`` for the party that holds the labels, ``passive_1`` ...
    ``passive_K`` for the others in partition order.
    """
    from .partition import columns, grid, strips

    data = _dataset(config.dataset)
    if hasattr(data, "x_train"):
        data = data.subset(n_train=config.n_train, n_test=config.n_test, seed=config.seed)
        shape = data.image_shape
        if config.partition == "grid":
            side = int(round(math.sqrt(config.n_parties)))
            if side * side != config.n_parties:
                raise ConfigError(f"a grid partition needs a square number of parties, got {config.n_parties}")
            part = grid(side, side, image_shape=shape, active=config.active)
        elif config.partition in ("strips_width", "strips_height"):
            part = strips(config.n_parties, image_shape=shape, axis=config.partition.split("_")[1],
                          active=config.active)
        else:
            raise ConfigError(f"partition {config.partition!r} does not apply to image data")
        train_parts = part.split(data.x_train)
        test_parts = part.split(data.x_test)
        labels = {"train": data.y_train, "test": data.y_test}
        n_classes = data.num_classes

        def transform(x: torch.Tensor) -> torch.Tensor:
            return data.normalize(x, device)
    else:
        raise ConfigError(
            f"build_parties handles image datasets; {config.dataset!r} is tabular and its study "
            "builds its own parties"
        )

    parties: list[Party] = []
    passive_no = 0
    for k in range(part.n_parties):
        if k == part.active:
            name = "active"
        else:
            passive_no += 1
            name = f"passive_{passive_no}"
        parties.append(
            Party(
                name,
                channel=channel,
                # Contiguous copies on the party's device, made once: a strip of a whole dataset
                # is a strided view, slow to index, and per-batch host-to-device copies would
                # sit on the hot path. uint8 is kept; normalising happens per batch.
                features={"train": train_parts[k].contiguous().to(device),
                          "test": test_parts[k].contiguous().to(device)},
                labels={s: y.to(device) for s, y in labels.items()} if k == part.active else None,
                transform=transform,
                device=device,
            )
        )
    return parties, n_classes


def run(
    config: RunConfig,
    *,
    profile: str,
    device: str | torch.device = "auto",
    results: Path | None = None,
    force: bool = False,
    progress: bool = True,
    max_loss: float = 1e4,
    on_divergence: str = "raise",
    deadline: float | None = None,
) -> dict[str, Any]:
    """Run ``config`` (or load its finished record) and return the record.

    ``deadline`` (a ``time.time()`` value, given by the scheduler's budget): when the next epoch
    would end after it, the run checkpoints and raises :class:`BudgetExhausted`; rerunning
    resumes from that checkpoint.

    The record holds the config, per-epoch training loss, test metrics and elapsed seconds of
    every model the method trains, wall time, peak memory, bytes/messages/rounds per epoch and per party, the
    device and library versions. It is written atomically when the run ends.

    A loss that is not finite or exceeds ``max_loss`` raises :class:`DivergenceError`; with
    ``on_divergence="record"`` the run stops there instead, its models are evaluated as they
    are, and the record says where it diverged (``record["diverged"]``): a study then reports
    a method that diverges at the paper's settings rather than stopping.
    """
    if on_divergence not in ("raise", "record"):
        raise ConfigError(f"Invalid on_divergence {on_divergence!r}; choose raise or record")
    from .methods import get_method

    check_profile(profile)
    path = record_path(config, profile, results)
    if path.exists() and not force:
        with open(path) as f:
            return json.load(f)

    dev = resolve_device(device)
    torch.manual_seed(config.seed)
    channel = Channel()
    parties, n_classes = build_parties(config, device=dev, channel=channel)
    method = get_method(config.method)(config, parties, num_classes=n_classes)
    active = method.active
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)

    channel.at(epoch=0, step=0, phase="setup")
    method.setup()
    history: list[dict[str, Any]] = []
    gen = torch.Generator().manual_seed(config.seed)
    train_ids = active.ids["train"]
    n_steps = math.ceil(len(train_ids) / config.batch_size)
    diverged: dict[str, Any] | None = None
    ckpt = checkpoint_path(path)
    first_epoch, offset = 1, 0.0
    if ckpt.exists() and not force:
        state = _load_checkpoint(ckpt, config)
        if state is not None:
            _restore(state, method=method, channel=channel, gen=gen, device=dev)
            history, first_epoch, offset = state["history"], state["epoch"] + 1, state["elapsed_s"]
    start = time.perf_counter() - offset
    bar = tqdm(total=config.epochs * n_steps, initial=(first_epoch - 1) * n_steps,
               desc=f"{config.method} {config.dataset}", disable=not progress, leave=False)
    metrics: dict[str, dict[str, float]] = {}
    for epoch in range(first_epoch, config.epochs + 1):
        # The shuffle is a public protocol parameter (seeded), so parties need no message to
        # agree on the batch order.
        order = train_ids[torch.randperm(len(train_ids), generator=gen)]
        sums: dict[str, float] = {}
        seen = 0
        method.train()
        for step in range(n_steps):
            channel.at(epoch=epoch, step=step, phase="train")
            ids = order[step * config.batch_size:(step + 1) * config.batch_size]
            losses = method.train_step(ids)
            try:
                _check_finite(losses, epoch=epoch, step=step, limit=max_loss)
            except DivergenceError as err:
                if on_divergence == "raise":
                    raise
                diverged = {"epoch": epoch, "step": step, "message": str(err)}
                break
            for k, v in losses.items():
                sums[k] = sums.get(k, 0.0) + v * len(ids)
            seen += len(ids)
            bar.update(1)
        channel.at(epoch=epoch, step=0, phase="eval")
        metrics = _evaluate(method, config)
        for model_key, m in metrics.items():
            # the mean over the batches actually trained (a diverged epoch stops early)
            row = {"epoch": epoch, "model": model_key, "elapsed_s": time.perf_counter() - start,
                   "loss": sums[model_key] / seen if seen and model_key in sums else float("nan")}
            row.update(m)
            history.append(row)
        bar.set_postfix({k: round(v.get("test_accuracy", float("nan")), 3) for k, v in metrics.items()})
        if diverged:
            break
        if epoch < config.epochs:
            _save_checkpoint(ckpt, config=config, epoch=epoch, elapsed_s=time.perf_counter() - start,
                             history=history, method=method, channel=channel, gen=gen, device=dev)
            epoch_s = (time.perf_counter() - start - offset) / (epoch - first_epoch + 1)
            if deadline is not None and time.time() + epoch_s > deadline:
                bar.close()
                raise BudgetExhausted(f"{config.method} {config.dataset} ({config.key}) stopped after epoch "
                                      f"{epoch} of {config.epochs} at the budget; rerun to resume it")
    if not metrics:  # resumed from the last epoch's checkpoint: nothing left to train
        metrics = {r["model"]: {k: v for k, v in r.items() if k.startswith("test_")}
                   for r in history if r["epoch"] == history[-1]["epoch"]}
    bar.close()
    wall = time.perf_counter() - start

    ledger = channel.ledger
    per_epoch = ledger.per_epoch().reset_index().to_dict(orient="records")
    per_party = ledger.per_party().reset_index().to_dict(orient="records")
    peak = (torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    record = {
        "key": config.key,
        "profile": profile,
        "config": config.to_dict(),
        "models": method.trained_models(),
        "history": history,
        "final": {k: v for k, v in metrics.items()},
        "wall_time_s": wall,
        "peak_memory_mb": peak,
        "peak_memory_kind": "cuda_max_allocated" if dev.type == "cuda" else "process_max_rss",
        "comm": {"total": ledger.totals(), "per_epoch": per_epoch, "per_party": per_party,
                 "per_kind": ledger.per_kind().reset_index().to_dict(orient="records"),
                 "eval_total": ledger.totals(phase="eval"), "setup_total": ledger.totals(phase="setup")},
        "environment": environment_info(dev),
        "diverged": diverged,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    record = json.loads(json.dumps(record, default=_json_default))
    _write_json_atomic(path, record)
    ckpt.unlink(missing_ok=True)
    return record


# --------------------------------------------------------------------------- checkpoints


def checkpoint_path(record: Path) -> Path:
    """Where a run's per-epoch checkpoint lives: beside its record (``<key>.ckpt.pt``); it is
    never committed and is deleted once the record is written."""
    return record.with_name(record.stem + ".ckpt.pt")


def _method_generators(method: Any) -> dict[str, torch.Generator]:
    """The method's own random generators (e.g. C-VFL's compression dither), by attribute."""
    return {k: v for k, v in vars(method).items() if isinstance(v, torch.Generator)}


#: Party state that is not carried across a resume: blinding keys are agreed afresh by
#: ``setup()`` (fresh masks still cancel exactly, so training is unchanged) and ``E`` is the
#: last batch's global embedding, recomputed at the next step.
_VOLATILE_STATE = ("keys", "E")


def _save_checkpoint(path: Path, *, config: RunConfig, epoch: int, elapsed_s: float,
                     history: list[dict[str, Any]], method: Any, channel: Channel,
                     gen: torch.Generator, device: torch.device) -> None:
    """Everything a run needs to continue after ``epoch`` as if never stopped, written atomically."""
    state = {
        "key": config.key, "config": config.to_dict(), "epoch": epoch, "elapsed_s": elapsed_s,
        "history": history,
        "models": [{k: m.state_dict() for k, m in p.models.items()} for p in method.parties],
        "optimizers": [{k: o.state_dict() for k, o in p.optimizers.items()} for p in method.parties],
        "party_state": [{k: v for k, v in p.state.items() if k not in _VOLATILE_STATE} for p in method.parties],
        "generators": {k: g.get_state() for k, g in _method_generators(method).items()},
        "ledger": list(channel.ledger._rows),
        "gen": gen.get_state(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    }
    from .files import atomic_path

    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def _load_checkpoint(path: Path, config: RunConfig) -> dict[str, Any] | None:
    """The checkpoint at ``path`` if it belongs to ``config``; an unreadable or foreign one is
    moved aside with a warning (the run then starts from scratch)."""
    import warnings

    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
        if state.get("key") != config.key or state.get("config") != config.to_dict():
            raise ValueError("its config is not this run's")
        return state
    except Exception as exc:  # a bad checkpoint costs time, never a wrong record
        bad = path.with_name(path.name + ".bad")
        os.replace(path, bad)
        warnings.warn(f"ignoring checkpoint {path} ({exc}); moved to {bad.name}, starting from epoch 1",
                      stacklevel=3)
        return None


def _restore(state: dict[str, Any], *, method: Any, channel: Channel, gen: torch.Generator,
             device: torch.device) -> None:
    for party, models, optims, extra in zip(method.parties, state["models"], state["optimizers"],
                                            state["party_state"]):
        for k, sd in models.items():
            party.models[k].load_state_dict(sd)
        for k, sd in optims.items():
            party.optimizers[k].load_state_dict(sd)
        party.state.update(extra)
    for k, g in _method_generators(method).items():
        g.set_state(state["generators"][k])
    # the ledger as it stood after the checkpointed epoch (setup's messages included once)
    channel.ledger._rows[:] = [tuple(r) for r in state["ledger"]]
    gen.set_state(state["gen"])
    torch.set_rng_state(state["torch_rng"])
    if state["cuda_rng"] is not None and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda_rng"], device)


def _evaluate(method: Any, config: RunConfig) -> dict[str, dict[str, float]]:
    """Test metrics; NaN where a diverged model's outputs cannot be scored (e.g. AUC of NaNs)."""
    try:
        return method.evaluate(batch_size=max(config.batch_size, 512))
    except ValueError:
        return {k: {"test_accuracy": float("nan")} for k in method.trained_models()}


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def run_many(
    configs: Iterable[RunConfig],
    *,
    profile: str,
    device: str | torch.device = "auto",
    results: Path | None = None,
    progress: bool = True,
    on_divergence: str = "raise",
) -> list[dict[str, Any]]:
    """Run every config in order, skipping those with a record; returns all records.
    ``on_divergence`` as in :func:`run`."""
    configs = list(configs)
    done = sum(record_path(c, profile, results).exists() for c in configs)
    records = []
    for config in tqdm(configs, desc=f"runs ({done} of {len(configs)} already recorded)",
                       disable=not progress):
        records.append(run(config, profile=profile, device=device, results=results, progress=progress,
                           on_divergence=on_divergence))
    return records


def history_frame(records: Sequence[dict[str, Any]]):
    """Per-epoch metrics of many records as one long DataFrame with the config fields that vary."""
    import pandas as pd

    frames = []
    for r in records:
        df = pd.DataFrame(r["history"])
        cfg = r["config"]
        for k in ("dataset", "method", "seed"):
            df[k] = cfg[k]
        df["architecture"] = df["model"].map(r.get("models", {}))
        df["key"] = r["key"]
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


if __name__ == "__main__":  # pragma: no cover - convenience: python -m vflkit.experiment config.json
    cfg = RunConfig.from_dict(json.load(open(sys.argv[1])))
    print(json.dumps(run(cfg, profile=sys.argv[2] if len(sys.argv) > 2 else "smoke")["final"], indent=1))
