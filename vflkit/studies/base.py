"""The study contract: what each paper's study declares once (``STUDY = register(Study(...))``),
and what the CLI, the report, the notebooks and the tests read from it: ``python -m vflkit.study``
schedules its runs, ``python -m vflkit.reproduction`` writes its section, its notebook trains with
:meth:`Study.run` and draws each :class:`Artefact` with :func:`vflkit.report.draw`. A new paper is
one module under ``vflkit/studies/`` and a thin notebook. This module imports neither torch nor
pandas (``python -m vflkit.study --help`` stays light).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence

from ..config import check_device_name, resolve_device
from ..errors import ConfigError
from ..training import FAMILIES, Family, load

if TYPE_CHECKING:
    import pandas as pd

    from ..claims import Claim, Records


#: A study's runs under one profile, by group (artefact): ``configs`` may return a flat list,
#: which :meth:`Study.groups` files under this one name.
RUNS = "runs"


class Evidence(Protocol):
    """The records of one study as the report loaded them, handed to :attr:`Study.beyond`
    (implemented by :mod:`vflkit.reproduction`)."""

    profiles: Sequence[str]

    def get(self, profile: str) -> dict[str, dict[str, Any]]:
        """The records of the study's runs under ``profile``, by key."""

    def first_with_records(self) -> tuple[str, dict[str, dict[str, Any]]] | None:
        """The most completely recorded profile and its records; None when none has any."""

    def groups(self, profile: str) -> dict[str, list[Any]]:
        """The study's runs under ``profile``, by group."""

    def runs(self, profile: str) -> list[Any]:
        """Every run of the study under ``profile``, once each."""

    def key(self, run: Any) -> str:
        """``run.key``, computed once."""

    def notebook(self, section: str) -> str:
        """A markdown link to the study's notebook naming ``section``."""

    def markdown(self, df: pd.DataFrame) -> str:
        """``df`` as a markdown table, as the report prints tables."""


#: What an artefact's ``draw`` returns: a table joined with the paper's numbers, a (figure, data)
#: pair, or several of them by file stem (``"table7_parallel"``).
Drawn = Any


#: An artefact's run selector: (the study's runs by group, profile) -> the runs it is drawn from.
RunSelector = Callable[[Mapping[str, list[Any]], str], list[Any]]


@dataclass(frozen=True)
class Artefact:
    """One table or figure a paper prints: its runs, its files and how it is drawn from records."""

    label: str  # as the paper names it: "Table II", "Fig. 3"
    runs: RunSelector  # (the study's groups, profile) -> its runs
    files: tuple[str, ...]  # glob patterns under figures/<paper>/<profile>/; the first names a single drawing
    #: (the study's groups cut to their recorded runs, those records, profile) -> :data:`Drawn`
    draw: Callable[[Mapping[str, list[Any]], Sequence[dict[str, Any]], str], Drawn] | None = None
    #: how a drawn table is shown (e.g. ours beside the paper's, one column per model); None: as drawn
    view: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    point: tuple[str, ...] = ()  # a figure's columns that name one plotted point (report.save_figure)

    @property
    def stem(self) -> str:
        """The file a single drawing is written to, without its suffix (``table2``, ``fig3``)."""
        return self.files[0].split(".")[0].rstrip("_*")


_KEY_OF: dict[int, tuple[Any, str]] = {}


def key_of(run: Any) -> str:
    """``run.key``, hashed once per run object (the report looks up thousands); the run is kept
    beside its key, so its id is never reused."""
    hit = _KEY_OF.get(id(run))
    if hit is None or hit[0] is not run:
        hit = _KEY_OF[id(run)] = (run, run.key)
    return hit[1]


def unique(runs: Any) -> list[Any]:
    """``runs`` once each (by key), in first-seen order."""
    return list({key_of(r): r for r in runs}.values())


def all_runs(groups: Mapping[str, list[Any]]) -> list[Any]:
    """Every run of ``groups`` (the runs of every artefact) once each, in first-use order."""
    return unique(c for group in groups.values() for c in group)


def groups(*names: str, keep: Callable[[Any], bool] = lambda run: True) -> RunSelector:
    """An artefact's runs: those of the named groups of the study's ``configs`` (no name: all) that
    ``keep`` selects."""
    def runs(by_group: Mapping[str, list[Any]], profile: str) -> list[Any]:
        return unique(c for n in names or by_group for c in by_group.get(n, []) if keep(c))
    return runs


def every_run(keep: Callable[[Any], bool] = lambda run: True) -> RunSelector:
    """An artefact's runs: every run of the study that ``keep`` selects."""
    return groups(keep=keep)


@dataclass(frozen=True, eq=False)
class Study:
    """What one paper's study declares; the defaults are what most studies do alike."""

    name: str  # the study module's name, the records' ``paper`` and the figures' folder
    title: str  # as the paper is named (the report's headings)
    family: str  # a key of :data:`FAMILIES`: trainer, run class, divergence policy
    #: ``configs(profile, *, seeds=None, overrides=None)``: the runs, by group or as a list
    configs: Callable[..., dict[str, list[Any]] | list[Any]]
    #: the tables and figures the paper prints, in its order
    artefacts: tuple[Artefact, ...] = ()
    claims: Sequence[Claim] = ()  # the study's CLAIMS
    variant_claims: Sequence[Claim] = ()  # the same clauses on our variants (VARIANT_CLAIMS)
    needs_gpu: Callable[[Any], bool] = lambda run: False
    #: (run, rank of its group) -> sort key; default: the first group's runs (the headline table) first
    run_priority: Callable[[Any, int], tuple] = lambda run, rank: (0 if rank == 0 else 1,)
    #: the runs a GPU measurement under ``results/device/`` timed, for :mod:`vflkit.ops.pricing`
    calibration: Callable[[], Sequence[Any]] = lambda: ()
    #: the study's price of pending runs the FLOP count cannot price (columns ``needs``, ``h100_min``,
    #: ``cpu_h``; :func:`vflkit.ops.pricing.price`); None: such a run has no estimate
    pending_cost: Callable[[Sequence[Any]], pd.DataFrame] | None = None
    unavailable: Callable[[Sequence[Any]], list[Any]] = lambda runs: []  # runs on data that is not here
    #: why those runs cannot be made, given their datasets' titles
    unavailable_why: Callable[[Sequence[str]], str] = lambda titles: "data not here"
    dataset_title: Callable[[str], str] = lambda dataset: dataset  # a dataset as the paper names it
    #: a paragraph after the artefact table, given the report's profiles ("" for none)
    artefacts_note: Callable[[Sequence[str]], str] = lambda profiles: ""
    #: findings beyond the paper: (heading, markdown) pairs from the study's records
    beyond: Callable[[Evidence], list[tuple[str, str]]] | None = None
    in_report: bool = True  # the demo is not a paper: no section of its own
    order: int = 100  # the report's order of papers (then by name)
    notebook: str = ""  # relative to the project root; default notebooks/<name>.ipynb
    #: the numbers the paper prints, a file of ``vflkit/reference/`` ("" for none)
    reference_csv: str = ""
    #: the paper's key in :mod:`vflkit.bibliography` ("" for a study that reproduces none)
    cites: str = ""
    #: tables written (file names) whose rows are shown beside the paper's but not counted as
    #: comparisons, each with why (:func:`vflkit.reproduction.compare`)
    uncounted_tables: Mapping[str, str] = field(default_factory=dict)
    #: datasets (as the tables name them) shown beside the paper's but not counted, each with why
    uncounted_datasets: Mapping[str, str] = field(default_factory=dict)
    #: our tables and figures, drawn as :attr:`artefacts` are but not listed as the paper's
    extras: tuple[Artefact, ...] = ()
    #: a pending run's columns in :meth:`pending` (what a reader tells runs apart by)
    describe: Callable[[Any], dict[str, Any]] = lambda run: {"run": run.key}
    _groups: dict[str, dict[str, list[Any]]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.notebook:
            object.__setattr__(self, "notebook", f"notebooks/{self.name}.ipynb")

    def groups(self, profile: str, *, seeds: Any = None, overrides: dict[str, Any] | None = None,
               cache: bool = True) -> dict[str, list[Any]]:
        """``configs(profile)`` as group -> runs; the profile's own built once, those with
        ``seeds``/``overrides`` or without ``cache`` (the scheduler's) each time."""
        if seeds is not None or overrides is not None or not cache:
            return self._as_groups(self.configs(profile, seeds=seeds, overrides=overrides), profile)
        if profile not in self._groups:
            self._groups[profile] = self._as_groups(self.configs(profile), profile)
        return self._groups[profile]

    def _as_groups(self, cfg: Any, profile: str) -> dict[str, list[Any]]:
        """``cfg`` (what ``configs`` returned) as group -> runs, each checked to be of the family's run
        class (else a ConfigError naming the study and what it returned, not a far-away missing ``key``)."""
        name = FAMILIES[self.family].run_class.partition(":")[2]
        cls = load(FAMILIES[self.family].run_class)
        where = f"study {self.name!r}: configs({profile!r}) returned"
        want = f"return a list of {name} runs (the {self.family!r} family's), or a dict of group -> such lists"
        out: dict[str, list[Any]] = {}
        for group, given in (cfg.items() if isinstance(cfg, Mapping) else [(RUNS, cfg)]):
            # a list, tuple or generator of runs
            if isinstance(given, (str, bytes, Mapping)) or not isinstance(given, Iterable):
                what = f"a {type(given).__name__}" + (f" as group {group!r}" if isinstance(cfg, Mapping) else "")
                raise ConfigError(f"{where} {what}; {want}")
            out[group] = list(given)
            for r in out[group]:
                if not isinstance(r, cls):
                    raise ConfigError(f"{where} {repr(r)[:80]} in group {group!r}, a {type(r).__name__}, not a run; "
                                      f"{want}")
        return out

    def runs(self, profile: str) -> list[Any]:
        """Every run of the study under ``profile``, once each."""
        return all_runs(self.groups(profile))

    def artefact_runs(self, artefact: Artefact, profile: str) -> list[Any]:
        """The runs ``artefact`` is drawn from under ``profile``."""
        return artefact.runs(self.groups(profile), profile)

    def artefact(self, label: str) -> Artefact:
        """The artefact ``label`` names: the paper's (:attr:`artefacts`) or ours (:attr:`extras`)."""
        for art in (*self.artefacts, *self.extras):
            if art.label == label:
                return art
        raise KeyError(f"{self.title} has no artefact {label!r}; it has "
                       f"{', '.join(a.label for a in (*self.artefacts, *self.extras))}")

    def run(self, profile: str, *, device: Any = "auto", seeds: Any = None, overrides: dict[str, Any] | None = None,
            results: Any = None, progress: bool = True, recompute_before: str | None = None) -> list[dict[str, Any]]:
        """Train (or load) every run of the profile once and return their records (the family's
        ``run_many`` under its divergence policy). On a CPU the runs :attr:`needs_gpu` names are not
        trained; their records are used where they exist."""
        from .. import records as store  # here: it imports torch, and this module stays light

        family = FAMILIES[self.family]
        trainer = importlib.import_module(family.trainer)
        runs = all_runs(self.groups(profile, seeds=seeds, overrides=overrides))
        check_device_name(device)
        if resolve_device(device).type != "cuda" and all(self.needs_gpu(r) for r in runs):
            return store.load_available(runs, profile=profile)
        return trainer.run_many(runs, profile=profile, device=device, results=results, progress=progress,
                                on_divergence=family.on_divergence, recompute_before=recompute_before,
                                needs_gpu=self.needs_gpu)

    def recorded(self, profile: str, *, seeds: Any = None, overrides: dict[str, Any] | None = None,
                 records: Sequence[dict[str, Any]] | None = None) -> tuple[dict[str, list[Any]], list[dict[str, Any]]]:
        """The profile's run groups cut to the recorded runs, and those records (``records``, a
        notebook's own run, or those on disk; nothing is trained)."""
        from .. import records as store

        groups = self.groups(profile, seeds=seeds, overrides=overrides)
        if records is None:
            records = store.load_available(all_runs(groups), profile=profile)
        have = {r["key"] for r in records}
        return {g: [c for c in runs if key_of(c) in have] for g, runs in groups.items()}, list(records)

    def recorded_runs(self, records: Records) -> list[dict[str, Any]]:
        """A claim's ``records`` in the order of the profile's runs, found once for all its clauses."""
        return records.derived("runs", lambda: records.of(self.runs(records.profile)))

    def pending_runs(self, profile: str, *, label: str | None = None, seeds: Any = None,
                     overrides: dict[str, Any] | None = None) -> list[Any]:
        """The runs of the profile (or of artefact ``label``) with no record that can be made here."""
        from .. import records as store

        groups = self.groups(profile, seeds=seeds, overrides=overrides)
        runs = self.artefact(label).runs(groups, profile) if label else all_runs(groups)
        have = {r["key"] for r in store.load_available(runs, profile=profile)}
        todo = [c for c in runs if key_of(c) not in have]
        skip = {key_of(c) for c in self.unavailable(todo)}
        return [c for c in todo if key_of(c) not in skip]

    def pending(self, profile: str, *, label: str | None = None, seeds: Any = None,
                overrides: dict[str, Any] | None = None,
                price: Callable[["Study", list[Any]], pd.DataFrame] | None = None) -> pd.DataFrame:
        """:meth:`pending_runs`, one row each (:attr:`describe`), with ``price``
        (:func:`vflkit.ops.pricing.price`) their ``needs``, ``h100_min``, ``cpu_h``."""
        import pandas as pd

        todo = self.pending_runs(profile, label=label, seeds=seeds, overrides=overrides)
        cols = ["needs", "h100_min", "cpu_h"] if price is not None else []
        if not todo:
            return pd.DataFrame(columns=cols)
        rows = pd.DataFrame([self.describe(c) for c in todo])
        if price is None:
            return rows
        return pd.concat([rows, price(self, todo).reset_index(drop=True)[cols]], axis=1)

__all__ = ["FAMILIES", "RUNS", "Artefact", "Drawn", "Evidence", "Family", "RunSelector", "Study", "all_runs",
           "every_run", "groups", "key_of", "unique"]
