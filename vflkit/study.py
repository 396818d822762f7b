"""Compute a profile's pending runs on the scheduler, then execute the study notebooks:
``python -m vflkit.study`` (``make study``).

The runs of every notebook's study without a record are computed first (resuming where an
interrupted or budgeted call stopped); each notebook is then executed with papermill, only
drawing, and the report is regenerated. The steps, options and cost rule: docs/profiles-and-scheduler.md.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from .config import PROFILES, project_root, resolve_device, results_dir
from .errors import ConfigError, VFLKitError
from .files import move_aside, write_json
from .gpu import shared_gpu
from .scheduler import Summary, Task, default_workers, schedule, status_table
from . import studies
from .training import FAMILIES, load, run_class


def __getattr__(name: str) -> Any:
    # STUDY_FAMILY, each registered study's family by name, is a view of the registry: built on
    # access, since filling the registry imports the studies (and torch), which --help must not
    if name == "STUDY_FAMILY":
        return {s.name: s.family for s in studies.studies()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def compute(payload: dict[str, Any], *, device: str, deadline: float | None) -> None:
    """One run of a study, in a worker process (the scheduler's task function)."""
    from . import records

    trainer, _, on_div = FAMILIES[payload["family"]]
    run = run_class(payload["family"]).from_dict(payload["config"])
    records.run_one(run, train=load(trainer).train, profile=payload["profile"], device=device,
                    results=Path(payload["results"]), progress=False, on_divergence=on_div, deadline=deadline)


def study_tasks(paper: str, profile: str, *, seeds: Any = None, overrides: dict[str, Any] | None = None,
                results: Path | None = None, recompute_before: str | None = None) -> list[Task]:
    """The runs of study ``paper`` under ``profile`` as scheduler tasks, once each, ordered by the
    study's ``run_priority``, with its ``needs_gpu(run)`` in the payload. With ``recompute_before``
    (a commit), records finished before it are moved aside (``.json.old``) to be recomputed, and a
    file that is not a whole record (``.json.bad``) with a warning."""
    from . import records

    stale_after = records.commit_date(recompute_before) if recompute_before is not None else None
    study = studies.get(paper)
    groups = study.groups(profile, seeds=seeds, overrides=overrides, cache=False)
    root = results or results_dir()
    tasks: dict[str, Task] = {}
    for rank, runs in enumerate(groups.values()):
        for run in runs:
            if run.key in tasks:
                continue
            path = records.record_path(run, profile, root)
            if stale_after is not None and path.exists():
                problem = records.record_problem(path, key=run.key, profile=profile)
                if problem is not None:  # not a record at all: it is recomputed in any case
                    records.move_aside(path, problem)
                elif records.older_than(json.loads(path.read_text()), stale_after):
                    move_aside(path, ".old")
            label = " ".join(str(v) for v in (getattr(run, "method", ""), getattr(run, "dataset", ""),
                                              getattr(run, "seed", "")) if v != "")
            tasks[run.key] = Task(key=run.key, path=path, fn=compute, label=f"{paper}: {label}",
                                  priority=study.run_priority(run, rank),
                                  payload={"family": study.family, "config": run.to_dict(), "profile": profile,
                                           "results": str(root), "needs_gpu": bool(study.needs_gpu(run))})
    return list(tasks.values())


def execute(notebook: Path, *, profile: str, device: str, out: Path | None = None) -> Path:
    """Run one notebook with papermill; returns the executed copy's path (``out``, default
    ``notebooks/_executed/<profile>/<name>``, which git ignores)."""
    import papermill

    root = project_root()
    out = out if out is not None else root / "notebooks" / "_executed" / profile / notebook.name
    out.parent.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(str(notebook), str(out), parameters={"profile": profile, "device": device},
                               cwd=str(root), progress_bar=False, log_output=False)
    return out


def _durations_path(profile: str) -> Path:
    """Where each notebook's last execution time under ``profile`` is kept (git ignores it)."""
    return project_root() / "notebooks" / "_executed" / profile / "durations.json"


def last_duration(notebook: Path, profile: str) -> float | None:
    """Seconds the last execution of ``notebook`` under ``profile`` took here; None if unknown."""
    try:
        return float(json.loads(_durations_path(profile).read_text())[notebook.name])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _save_duration(notebook: Path, profile: str, seconds: float) -> None:
    path = _durations_path(profile)
    try:
        durations = json.loads(path.read_text())
    except (OSError, ValueError):
        durations = {}
    write_json(path, {**durations, notebook.name: round(seconds, 1)})


def notebook_defaults(path: Path) -> dict[str, Any]:
    """The values the notebook's ``parameters`` cell assigns (``profile``, ``device``, ...), read
    as papermill reads them, without executing anything."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    if not cells:
        raise ConfigError(f"{path} has no cell tagged 'parameters'; papermill cannot set its profile")
    values: dict[str, Any] = {}
    for node in ast.parse(cells[0].source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue  # an expression, not a literal default
    return values


def normalize_notebook(path: Path) -> None:
    """Rewrite ``path`` in the form JupyterLab saves it (its kernelspec, ``language_info`` and
    :func:`nbformat.write`), so a committed notebook opens unmodified, without papermill's
    injected-parameters cell and run metadata or saved widget state (noise in every diff; a saved
    progress bar renders empty). Consecutive outputs of one stream are merged, so a rerun of an
    unchanged notebook writes the same bytes."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nb.metadata.pop("widgets", None)
    nb.metadata.pop("papermill", None)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                                    "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                                    "pygments_lexer": "ipython3", "version": platform.python_version()}
    # the injected cell would reset what a reader types in the parameters cell, whose defaults
    # are what the committed outputs were made with
    nb.cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    count = 0
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code" and cell.get("execution_count") is not None:
            count += 1  # as a kernel run top to bottom numbers them
            cell.execution_count = count
            for out in cell.get("outputs", []):
                if "execution_count" in out:
                    out["execution_count"] = count
        if cell.get("outputs"):
            # stderr (the executing machine's paths and commit) is not the notebook's content; a
            # progress bar's widget output without its widget is an empty box
            cell.outputs = [o for o in cell.outputs if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
            for out in cell.outputs:
                out.get("data", {}).pop("application/vnd.jupyter.widget-view+json", None)
            cell.outputs = [o for o in _merge_streams(cell.outputs)
                            if not (o.get("output_type") == "display_data" and not o.get("data"))]
    nbformat.write(nb, path)


def _merge_streams(outputs: list[Any]) -> list[Any]:
    """``outputs`` with each run of consecutive outputs of one stream as one output (the kernel
    splits a stream's text as it happens to flush it)."""
    merged: list[Any] = []
    for out in outputs:
        last = merged[-1] if merged else {}
        if out.get("output_type") == last.get("output_type") == "stream" and last.get("name") == out.get("name"):
            last["text"] = last["text"] + out["text"]
        else:
            merged.append(out)
    return merged


def select_tasks(papers: Sequence[str], profile: str, device: str, *, datasets: Sequence[str] | None = None,
                 include_gpu_runs: bool = False, recompute_before: str | None = None) -> tuple[list[Task], list[Task]]:
    """The runs of ``papers`` under ``profile`` that ``device`` computes (with their estimated
    cost), and those it leaves for a GPU (on a CPU, ``needs_gpu`` unless ``include_gpu_runs``)."""
    tasks = [t for p in papers for t in study_tasks(p, profile, recompute_before=recompute_before)]
    if datasets is not None:
        tasks = only_datasets(tasks, datasets)
    gpu: list[Task] = []
    if not device.startswith("cuda") and not include_gpu_runs:
        gpu = [t for t in tasks if t.payload["needs_gpu"]]
        tasks = [t for t in tasks if not t.payload["needs_gpu"]]
    return estimate_costs(tasks, device), gpu


def _setting(config: dict[str, Any]) -> str:
    """A run's party models and method options, short: ``cnn x4, local_iterations=10``."""
    models = config.get("models")
    if isinstance(models, (list, tuple)):
        models = (f"{models[0]} x{len(models)}" if len(set(models)) == 1 and len(models) > 1
                  else "/".join(map(str, models)))
    parts = [str(models)] if models else []
    parts += [f"{k}={v}" for k, v in sorted((config.get("options") or {}).items())]
    return ", ".join(parts)


def status(papers: Sequence[str], *, profile: str, device: str = "auto", datasets: Sequence[str] | None = None,
           include_gpu_runs: bool = False) -> "pandas.DataFrame":
    """What is left of ``papers`` under ``profile``, computing nothing: one row per run without a
    record, its status (running, checkpointed, checkpoint unreadable, pending, or impossible here:
    ``Study.unavailable``), its estimated minutes on ``device`` and their source
    (:func:`estimate_costs`), whether it is left for a GPU, and for those its H100 minutes and their
    source (``h100_min``, ``h100_estimate``: :func:`vflkit.ops.pricing.price`, as the report)."""
    dev = str(resolve_device(device))
    here, gpu = select_tasks(papers, profile, dev, datasets=datasets, include_gpu_runs=include_gpu_runs)
    gpu = estimate_costs(gpu, dev)  # what the runs left for a GPU would cost here (why they are left)
    table = status_table(here + gpu)
    table["estimate"] = [t.payload.get("cost_source") if t.cost_s is not None else None for t in here + gpu]
    table["needs_gpu"] = [False] * len(here) + [True] * len(gpu)
    priced = _h100_prices(gpu)
    table["h100_min"] = [None] * len(here) + [None if m is None else round(m, 1) for m, _ in priced]
    table["h100_estimate"] = [None] * len(here) + [src for _, src in priced]
    impossible = _unavailable_keys(here + gpu, profile)
    table.loc[table.key.isin(impossible) & (table.status != "recorded"), "status"] = IMPOSSIBLE
    table.insert(1, "setting", [_setting(t.payload["config"]) for t in here + gpu])
    table["paper"] = [t.path.parent.name for t in here + gpu]  # a record's folder is its study's name
    table["dataset"] = [t.payload["config"].get("dataset") for t in here + gpu]
    return table[table.status != "recorded"].reset_index(drop=True)


#: ``--status``'s state of a run its study declares unavailable (the report's words too).
IMPOSSIBLE = "impossible here"


def _task_runs(tasks: Sequence[Task]) -> dict[str, list[tuple[int, Any]]]:
    """``tasks``' runs by study (a record's folder is its study's name), with their positions."""
    out: dict[str, list[tuple[int, Any]]] = {}
    for i, t in enumerate(tasks):
        out.setdefault(t.path.parent.name, []).append((i, run_class(t.payload["family"]).from_dict(t.payload["config"])))
    return out


def _h100_prices(tasks: Sequence[Task]) -> list[tuple[float | None, str | None]]:
    """Each task's H100 minutes and their source, from :func:`vflkit.ops.pricing.price`."""
    from .ops import pricing

    out: list[tuple[float | None, str | None]] = [(None, None)] * len(tasks)
    for paper, runs in _task_runs(tasks).items():
        priced = pricing.price(studies.get(paper), [r for _, r in runs])
        for (i, _), m, src in zip(runs, priced["h100_min"], priced["source"]):
            if m == m and m is not None:  # not NaN
                out[i] = (float(m), src)
    return out


def _unavailable_keys(tasks: Sequence[Task], profile: str) -> set[str]:
    """The keys of the tasks whose study declares their run unavailable (``Study.unavailable``)."""
    if profile != "paper":  # the studies declare the paper profile's runs on absent data only
        return set()
    return {r.key for paper, runs in _task_runs(tasks).items() for r in studies.get(paper).unavailable([r for _, r in runs])}


def compute_pending(papers: list[str], *, profile: str, device: str = "auto", workers: int | None = None,
                    budget_minutes: float | None = None, executor: str = "local",
                    progress: bool = True, recompute_before: str | None = None,
                    datasets: Sequence[str] | None = None, include_gpu_runs: bool = False,
                    lock_wait_minutes: float | None = None, pack: bool | str = "auto", mps: bool = True) -> Summary:
    """Compute the runs of ``papers`` under ``profile`` that have no record yet (with ``datasets``,
    those on them). On a CPU the runs a study says need a GPU are listed in the summary's
    ``needs_gpu``, not started, unless ``include_gpu_runs``. ``pack``: train runs that differ in
    seed and dataset alone as packs ("auto": on CUDA only; :func:`vflkit.scheduler.pack_tasks`).
    ``mps``: start CUDA MPS for several workers where it can (:func:`vflkit.gpu.shared_gpu`)."""
    from .ops.pricing import pack_cost_s
    from .records import is_valid_record

    dev = str(resolve_device(device))
    tasks, gpu = select_tasks(papers, profile, dev, datasets=datasets, include_gpu_runs=include_gpu_runs,
                              recompute_before=recompute_before)
    lanes = (workers or default_workers(dev)) if mps and executor == "local" and tasks else 1
    with shared_gpu(lanes, dev) as said:
        if said:
            print(f"[study] {said}", flush=True)
        summary = schedule(tasks, device=dev, workers=workers, budget_minutes=budget_minutes, executor=executor,
                           progress=progress, lock_wait_minutes=lock_wait_minutes, pack=pack, pack_cost=pack_cost_s)
    summary.needs_gpu = [t.key for t in gpu if not is_valid_record(t.path, key=t.key)]
    left = [t for t in tasks if not is_valid_record(t.path, key=t.key)]
    summary.left_estimated_s = sum(t.cost_s for t in left if t.cost_s is not None)
    summary.left_unestimated = sum(t.cost_s is None for t in left)
    return summary


def _seedless_key(family: str, config: dict[str, Any]) -> str | None:
    """The key ``config``'s run would have at seed 0 (through the family's run class, as the record
    store compares configs); None for a config the class refuses."""
    try:
        return run_class(family).from_dict({**config, "seed": 0}).key
    except Exception:  # a record of another version of the run class: no sibling
        return None


#: The learning rate every run of a rate-free sibling group is keyed at (:func:`_rateless_key`).
_RATE_PROBE = 1.0


def _rateless_key(family: str, config: dict[str, Any]) -> str | None:
    """A key shared by every seed and learning rate of one run (its seedless key at
    :data:`_RATE_PROBE`, prefixed); None without an ``lr`` or where the class refuses the probe."""
    if "lr" not in config:
        return None
    key = _seedless_key(family, {**config, "lr": _RATE_PROBE})
    return None if key is None else f"any-rate:{key}"


#: Datasets of one shape and size (60,000 training and 10,000 test images of 28x28x1, 10
#: classes): a run costs the same on either, so where a run has no recorded seed its twin's
#: seeds price it better than its FLOPs (for these small networks a FLOP count can miss the
#: wall time by a factor of two or more).
TWIN_DATASETS: dict[str, str] = {"mnist": "fashion_mnist", "fashion_mnist": "mnist"}


def estimate_costs(tasks: Sequence[Task], device: str, *, lanes: int | None = None) -> list[Task]:
    """``tasks`` with ``cost_s`` set for each one without a record or checkpoint, and
    ``payload["cost_source"]``: "seeds", "twin seeds" (:data:`TWIN_DATASETS`) or "rate seeds", the
    median wall time of the recorded runs on the same kind of device (this machine's kind first) that
    differ from it only in the seed, the dataset or the learning rate; else "ops" or "flops", its price
    with ``lanes`` processes sharing a GPU (:func:`vflkit.ops.pricing.estimate`). ``device``: ``cpu``,
    ``cuda[:N]`` or a GPU kind (``h100``, ``h200``). Why: docs/profiles-and-scheduler.md (Budget)."""
    from .records import checkpoint_path, is_valid_record, record_roots

    model_kind = device.split(":")[0]
    kind = "cpu" if model_kind == "cpu" else "cuda"  # records name the device, not the card
    pending = [t for t in tasks if not is_valid_record(t.path, key=t.key) and not checkpoint_path(t.path).exists()]
    families = {t.path.parent: t.payload["family"] for t in pending}
    # and the same study's records in the other record root (the committed ones)
    families.update({root / f.parent.name / f.name: fam for f, fam in list(families.items()) for root in record_roots()})
    here = _machine_kind(kind)
    times: dict[str, dict[str, tuple[float, bool]]] = {}
    for folder, family in families.items():
        for f in folder.glob("*.json"):
            try:
                rec = json.loads(f.read_text())
                if str(rec["environment"]["device"]).split(":")[0] != kind or rec.get("diverged"):
                    continue
                same = here is not None and _machine_kind(kind, rec["environment"]) == here
                for sibling in {_seedless_key(family, rec["config"]), _rateless_key(family, rec["config"])} - {None}:
                    times.setdefault(sibling, {})[rec["key"]] = (float(rec["wall_time_s"]), same)
            except (OSError, ValueError, KeyError, TypeError):
                continue  # not a finished record (the record store judges it when the run is looked up)

    def siblings(t: Task) -> dict[str, dict[str, tuple[float, bool]]]:
        config, family = t.payload["config"], t.payload["family"]
        twin = TWIN_DATASETS.get(config.get("dataset"))
        return {"seeds": times.get(_seedless_key(family, config), {}),
                "twin seeds": times.get(_seedless_key(family, {**config, "dataset": twin}), {}) if twin else {},
                "rate seeds": times.get(_rateless_key(family, config), {})}  # None is never a key of times

    # the machine first, the dataset second: a twin's seed made here prices a run better than
    # its own seed made on another kind of CPU
    found = {t.key: siblings(t) for t in pending}
    estimates: dict[str, tuple[float, str]] = {}
    for here_only in (True, False):
        for source in ("seeds", "twin seeds", "rate seeds"):
            for key in (k for k in found if k not in estimates):
                if walls := [w for w, same in found[key][source].values() if same or not here_only]:
                    estimates[key] = (statistics.median(walls), source)
    for t in pending:
        if t.key not in estimates and (got := _model_estimate(t, model_kind, lanes)) is not None:
            estimates[t.key] = got
    return [dataclasses.replace(t, cost_s=estimates[t.key][0], payload={**t.payload, "cost_source": estimates[t.key][1]})
            if t.key in estimates else t for t in tasks]


def _machine_kind(kind: str, env: dict[str, Any] | None = None) -> tuple[Any, ...] | None:
    """What sets a record's speed besides its run (a CPU's name and instruction set, a GPU's name),
    of the record's ``env`` or of this machine (None where it has no such device)."""
    if env is None:
        import torch

        from .records import machine_info

        if kind == "cuda" and not torch.cuda.is_available():
            return None
        env = machine_info(torch.device(kind))  # not environment_info: no git state wanted
    return (env.get("device_name"),) if kind == "cuda" else (env.get("cpu"), env.get("cpu_capability"))


def _model_estimate(task: Task, kind: str, lanes: int | None = None) -> tuple[float, str] | None:
    """(seconds, "ops" or "flops") from :func:`vflkit.ops.pricing.estimate`; None where it has none."""
    from .ops import pricing  # the operating wing above: this CLI prints its prices

    family = task.payload["family"]
    try:
        run = run_class(family).from_dict(task.payload["config"])
    except Exception:  # a config its class refuses has no estimate (running it will say why)
        return None
    return pricing.estimate(run, kind, family, lanes)


def only_datasets(tasks: Sequence[Task], datasets: Sequence[str]) -> list[Task]:
    """The tasks whose run is on one of ``datasets`` (an unknown name is an error)."""
    from .data import DATASETS

    unknown = sorted(set(datasets) - set(DATASETS))
    if unknown:
        raise ConfigError(f"--datasets: unknown dataset(s) {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(DATASETS))}")
    return [t for t in tasks if t.payload["config"].get("dataset") in set(datasets)]


#: The states ``--status`` lists run by run without ``--all``: few, and each asks for a look
#: (another process computes it, it resumes from a checkpoint, its file is not a record).
_NOTABLE = ("running", "checkpointed", "broken")


def _hours(minutes: float) -> str:
    return f"about {minutes / 60:,.1f} h" if minutes >= 60 else f"about {minutes:,.0f} min"


def _part(table: "pandas.DataFrame") -> str:
    """What ``table``'s runs (one study's, or all) add up to: here, for a GPU, impossible here."""
    impossible = table[table.status == IMPOSSIBLE]
    rest = table[table.status != IMPOSSIBLE]
    here, gpu = rest[~rest.needs_gpu], rest[rest.needs_gpu]
    parts = []
    if len(here):
        counts = ", ".join(f"{n} {state}" for state, n in here.status.value_counts().items())
        unpriced = int(here.estimated_min.isna().sum())
        parts.append(f"{len(here)} to compute here ({counts}; {_hours(here.estimated_min.sum())} where estimated"
                     + (f", {unpriced} without an estimate" if unpriced else "") + ")")
    if len(gpu):
        unpriced = int(gpu.h100_min.isna().sum())
        parts.append(f"{len(gpu)} left for a GPU (about {gpu.h100_min.sum():,.0f} H100-minutes where estimated"
                     + (f", {unpriced} without" if unpriced else "") + ")")
    if len(impossible):
        parts.append(f"{len(impossible)} {IMPOSSIBLE}")
    return ", ".join(parts)


def _print_status(papers: Sequence[str], *, show_all: bool = False, **kwargs: Any) -> int:
    """``--status``: the totals, a line per paper, a line per study whose runs cannot be made here
    (and why), then the runs that need a look; every run, one row each, with ``show_all``."""
    import pandas as pd

    from .ops.pricing import GPU_LABEL

    table = status(papers, **kwargs)
    profile = kwargs["profile"]
    if table.empty:
        print(f"[study] every run of {', '.join(papers) or 'these notebooks'} ({profile}) is recorded")
        return 0
    possible = table[table.status != IMPOSSIBLE]
    print(f"[study] {profile} profile: {len(possible)} runs without a record: {_part(table)}")
    print("[study] by paper:")
    width = max(len(p) for p in table.paper)
    for paper, rows in table.groupby("paper", sort=False):
        print(f"  {paper + ':':<{width + 1}} {_part(rows)}")
    impossible = table[table.status == IMPOSSIBLE]
    if len(impossible):
        print(f"[study] {IMPOSSIBLE}:")
        for paper, rows in impossible.groupby("paper", sort=False):
            study = studies.get(paper)
            titles = sorted({study.dataset_title(d) for d in rows.dataset if d is not None})
            print(f"  {paper}: {len(rows)} runs on {', '.join(titles)}: {study.unavailable_why(titles)}")
    if show_all:
        with pd.option_context("display.max_rows", None, "display.width", 200, "display.max_colwidth", 60):
            print(table.drop(columns=["paper", "dataset"]).to_string(index=False))
    else:
        for row in table[table.status.isin(_NOTABLE)].itertuples():
            print(f"  {row.run} [{row.setting}] {row.key}: {row.status}")
        print("[study] every run, one row each: --status --all")
    if possible.needs_gpu.any() and possible.h100_min.notna().any():
        print(f"[study] H100-minutes from ops or flops are {GPU_LABEL}; from study: the study's own rule")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vflkit.study", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to execute, in order (default: every notebooks/*.ipynb)")
    parser.add_argument("--profile", default="quick", choices=PROFILES)
    parser.add_argument("--device", default="auto", help="auto (CUDA when present), cpu or cuda[:N]")
    parser.add_argument("--workers", type=int, default=None, help="parallel runs (default: one per core; 8 per GPU)")
    parser.add_argument("--budget", type=float, default=None, metavar="MINUTES",
                        help="start no run after this many minutes; runs in flight checkpoint and stop")
    parser.add_argument("--executor", default="local", help="local, serial, dask, or a dask scheduler address")
    parser.add_argument("--lock-wait", type=float, default=None, metavar="MINUTES",
                        help="wait at most this long for runs another process holds the lock of (default: while "
                             "its holder keeps the lock fresh), then leave them pending")
    parser.add_argument("--pack", action=argparse.BooleanOptionalAction, default="auto",
                        help="train the runs that differ in seed and dataset alone as one batched pack each (default: on a "
                             "CUDA device only; on a CPU it gains little)")
    parser.add_argument("--no-mps", action="store_true",
                        help="on a CUDA device, do not start CUDA MPS for the workers (default: started where it can be)")
    parser.add_argument("--no-notebooks", action="store_true", help="compute the runs only")
    parser.add_argument("--datasets", default=None, metavar="NAME[,NAME]",
                        help="compute only the runs on these datasets (e.g. a paper profile's CPU-sized "
                             "part: --datasets mnist,fashion_mnist,criteo); implies --no-notebooks")
    parser.add_argument("--include-gpu-runs", action="store_true",
                        help="on a CPU, compute the runs the studies say need a GPU too (default: leave them pending)")
    parser.add_argument("--recompute-before", metavar="COMMIT", default=None,
                        help="recompute records finished before this commit (they are kept as .json.old)")
    parser.add_argument("--commit-notebooks", action="store_true",
                        help="write the executed notebooks over notebooks/*.ipynb (the committed ones)")
    parser.add_argument("--no-report", action="store_true",
                        help="do not regenerate figures/REPORT.md after the notebooks")
    parser.add_argument("--status", action="store_true",
                        help="plan, computing nothing: the runs without a record (to compute here, left for a "
                             "GPU, impossible here) in totals, by paper, with their estimated minutes")
    parser.add_argument("--all", action="store_true", dest="show_all",
                        help="with --status: also every run without a record, one row each")
    args = parser.parse_args(argv)
    if not args.notebooks:
        args.notebooks = sorted((project_root() / "notebooks").glob("*.ipynb"))
        if not args.notebooks:  # outside a checkout: say so, not "every run is recorded"
            parser.error(f"no notebooks under {project_root() / 'notebooks'}: run from the vflkit checkout "
                         "(its root or a folder in it), or name the notebooks")
    missing = [str(nb) for nb in args.notebooks if not Path(nb).is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)} (the studies' notebooks are notebooks/*.ipynb)")
    if args.commit_notebooks:
        # the committed notebook keeps its parameters cell and not papermill's injected one, so its
        # outputs must be those of the parameters it shows
        for nb in args.notebooks:
            shown = notebook_defaults(nb).get("profile")
            if shown != args.profile:
                parser.error(f"--commit-notebooks with --profile {args.profile}: {nb}'s parameters cell says "
                             f"profile = {shown!r}, so its committed outputs would not be the ones it shows; "
                             f"commit with --profile {shown}, or drop --commit-notebooks (the executed copy goes "
                             f"to notebooks/_executed/{args.profile}/)")
    of_notebook = {Path(s.notebook).name: s.name for s in studies.studies()}  # each study's notebook (Study.notebook)
    papers = [of_notebook[nb.name] for nb in args.notebooks if nb.name in of_notebook]
    unknown = [str(nb) for nb in args.notebooks if nb.name not in of_notebook]
    datasets = None if args.datasets is None else args.datasets.split(",")
    if args.status:
        return _print_status(papers, profile=args.profile, device=args.device, datasets=datasets,
                             include_gpu_runs=args.include_gpu_runs, show_all=args.show_all)
    if unknown:
        print(f"[study] no study module for {', '.join(unknown)}: executed without precomputed runs", flush=True)
    start = time.perf_counter()
    summary = compute_pending(papers, profile=args.profile, device=args.device, workers=args.workers,
                              budget_minutes=args.budget, executor=args.executor,
                              recompute_before=args.recompute_before,
                              datasets=datasets, include_gpu_runs=args.include_gpu_runs,
                              lock_wait_minutes=args.lock_wait, pack=args.pack, mps=not args.no_mps)
    print(f"[study] runs: {summary}", flush=True)
    for key, holder in summary.still_locked.items():
        print(f"[study] run {key} is still locked by {holder}: left pending", flush=True)
    if summary.left_estimated_s or summary.left_unestimated:
        print(f"[study] still to compute here: about {summary.left_estimated_s / 3600:.1f} hours of runs with an "
              f"estimate (their other seeds, or their FLOPs), and {summary.left_unestimated} runs without one", flush=True)
    for key, err in summary.failed.items():
        print(f"[study] run {key} failed: {err}", flush=True)
    if summary.failed:
        return 1
    if summary.needs_gpu:
        print(f"[study] {len(summary.needs_gpu)} runs need a GPU and were not started on {args.device}: "
              f"run on a GPU (--device cuda), or pass --include-gpu-runs to compute them here", flush=True)
    if args.no_notebooks or args.datasets is not None or summary.paused or summary.pending or summary.needs_gpu:
        if summary.paused or summary.pending:
            print("[study] notebooks not executed: runs are pending; run again to continue", flush=True)
        elif summary.needs_gpu:
            print("[study] notebooks not executed: some of their runs are left for a GPU", flush=True)
        return 0
    for i, nb in enumerate(args.notebooks, 1):
        # a line before each notebook: one executes for minutes and says nothing until it ends
        last = last_duration(nb, args.profile)
        print(f"[study] executing {nb} ({i} of {len(args.notebooks)}"
              f"{f', about {last:.0f} s last time' if last is not None else ''})", flush=True)
        t0 = time.perf_counter()
        out = execute(nb, profile=args.profile, device=args.device)
        took = time.perf_counter() - t0
        _save_duration(nb, args.profile, took)
        if args.commit_notebooks:
            normalize_notebook(out)
            shutil.copyfile(out, nb)
        print(f"[study] {nb} executed in {took:.0f} s -> {nb if args.commit_notebooks else out}", flush=True)
    if not args.no_report:
        # after the notebooks: the report reads the tables they have just written
        from .report import shown_path
        from .reproduction import write_report

        t0 = time.perf_counter()
        path = write_report()
        print(f"[study] report written in {time.perf_counter() - t0:.0f} s -> {shown_path(path)}", flush=True)
    print(f"[study] done in {time.perf_counter() - start:.0f} s", flush=True)
    return 0


def cli(argv: list[str] | None = None) -> int:
    """:func:`main` for the command line: a vflkit error is printed as its message, no traceback."""
    try:
        return main(argv)
    except VFLKitError as exc:
        print(f"vflkit.study: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
