"""Tests of the study contract (vflkit.studies): each paper declares itself once, the CLI and the
report read only the registry, and a sixth paper is one module: a toy study registered here
shows in the scheduler's tasks, ``--status`` and the report, and goes when unregistered."""

import importlib
import re
from pathlib import Path

import pytest

from vflkit import claims, records, reproduction, studies, study
from vflkit.config import project_root
from vflkit.errors import ConfigError
from vflkit.methods import RunConfig
from vflkit.methods.multi_vfl import MultiVFLConfig
from vflkit.studies.base import FAMILIES, Artefact, Study, groups

PAPERS = ("vfedmh", "easter", "multi_vfl", "apc_vfl", "adptvfedconv")


def test_every_study_module_registers_one_study():
    """The registry holds the five papers in the report's order and the demo; each module's
    ``STUDY`` is the registered one, with a known family, its notebook, its module's claims."""
    registered = studies.REGISTRY
    assert set(registered) == {*PAPERS, "demo"}
    assert list(reproduction.TITLES) == list(PAPERS)  # the demo is no paper: no section
    assert studies.module_names() == tuple(sorted(registered))  # check_paper's names, found without importing
    assert reproduction.TITLES["apc_vfl"] == "APC-VFL"
    for name, s in registered.items():
        module = importlib.import_module(f"vflkit.studies.{name}")
        assert module.STUDY is s is studies.get(name)
        assert s.family in FAMILIES and study.STUDY_FAMILY[name] == s.family
        assert (project_root() / s.notebook).exists(), s.notebook
        assert list(s.claims) == list(getattr(module, "CLAIMS", []))
        assert list(s.variant_claims) == list(getattr(module, "VARIANT_CLAIMS", []))
        assert len({a.label for a in s.artefacts}) == len(s.artefacts)
    with pytest.raises(ConfigError, match="registered already"):
        studies.register(Study(name="vfedmh", title="again", family="split", configs=lambda p, **k: []))
    with pytest.raises(ConfigError, match="unknown family"):
        studies.register(Study(name="nofamily", title="x", family="carrier_pigeon", configs=lambda p, **k: []))
    with pytest.raises(ConfigError, match="no study 'nosuch'"):
        studies.get("nosuch")


@pytest.mark.parametrize("name", ["../../escape", "a/b", "..", "", " spaced", "x" * 65, 5])
def test_a_study_name_that_is_no_simple_name_is_refused(name):
    """Y01: a study's name is its records' folder (<results>/<profile>/<name>/), so like a
    profile it is a simple name: one with '..' or '/' once wrote records outside results/."""
    with pytest.raises(ConfigError, match="Invalid study name .*letters, digits, '_' and '-'"):
        studies.register(Study(name=name, title="x", family="split", configs=lambda p, **k: []))
    assert name not in studies.REGISTRY
    with pytest.raises(ConfigError, match="Invalid paper"):
        RunConfig(paper="../../escape", dataset="mnist", method="splitnn", models="mlp")


def test_run_class_names_each_familys_run_class_and_refuses_an_unknown_one():
    """study.run_class is the one public way from a family name to its run class (the launcher
    and the cost model use it); an unknown family is a ConfigError listing the known ones."""
    assert study.run_class("split") is RunConfig
    for family in FAMILIES:
        assert hasattr(study.run_class(family), "from_dict")
    with pytest.raises(ConfigError, match="Invalid family 'no_such'; choose one of split"):
        study.run_class("no_such")


#: Where vflkit outside its study modules may name a paper, and why: a method, a run class or its
#: trainer named as its paper names it (a sixth paper brings its own), never a branch on the
#: paper. Only the quoted names listed are allowed in each file; ``paper ==`` is allowed nowhere.
NAMED_AS_THEIR_PAPER: dict[str, tuple[set[str], str]] = {
    "analysis.py": ({'"vfedmh"', '"easter"'}, "BLINDED_METHODS: the methods whose embeddings are blinded ring "
                    "elements (homo_vfedmh with them): method names"),
    "ops/bench.py": ({'"vfedmh"'}, "benchmark rows of the VFedMH method's secure ring, by method name"),
    "methods/__init__.py": ({'"vfedmh"', '"easter"'}, "the registry of methods by name (get_method)"),
    "methods/apc_vfl.py": ({'"apc_vfl"'}, "the method class's own name"),
    "methods/easter.py": ({'"easter"'}, "the method class's own name"),
    "methods/vfedmh.py": ({'"vfedmh"'}, "the method class's own name"),
    "methods/multi_vfl.py": ({'"multi_vfl"'}, "the run class's paper (its records' folder)"),
    "training/one_shot.py": ({'"apc_vfl"'}, "the run class's paper (its records' folder)"),
    "training/tiles.py": ({'"adptvfedconv"'}, "the run class's paper, and the paper's method among the tiles "
                          "trainer's variants"),
    "training/adptvfedconv.py": ({'"adptvfedconv"'}, "the method a record of this trainer names"),
}


def test_no_module_outside_the_studies_keeps_a_per_paper_chain():
    """Per-paper knowledge lives in the study modules: no other module of vflkit branches on a
    paper's name or keeps a table by paper (the CLI, the report, the claims, the reference numbers
    each read the registry), but for the method and run-class names of :data:`NAMED_AS_THEIR_PAPER`."""
    names = "|".join(PAPERS)
    package = project_root() / "vflkit"
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).as_posix()
        if rel.startswith("studies/"):
            continue
        hits = set(re.findall(rf"\bpaper\s*(?:==|!=|(?:not )?in \()|[\"'](?:{names})[\"']", path.read_text()))
        hits = {h.replace("'", '"') for h in hits} - NAMED_AS_THEIR_PAPER.get(rel, (set(), ""))[0]
        if hits:
            found[rel] = hits
    assert not found, f"per-paper names outside vflkit/studies/ (move them into the study, or list why): {found}"
    assert set(NAMED_AS_THEIR_PAPER) <= {p.relative_to(package).as_posix() for p in package.rglob("*.py")}


def test_every_reference_file_is_declared_by_one_study():
    """The papers' printed numbers are each study's declaration (``reference_csv``), not a table
    in the report: every file of vflkit/reference/ belongs to exactly one study, and it loads."""
    from vflkit import report

    declared = [s.reference_csv for s in studies.studies() if s.reference_csv]
    files = sorted(p.name for p in (project_root() / "vflkit" / "reference").glob("*.csv"))
    assert sorted(declared) == files
    for s in studies.studies():
        ref = report.load_reference(s.name)
        assert ref.empty == (not s.reference_csv), s.name
    assert not hasattr(report, "REFERENCE_FILES")


# --------------------------------------------------------------------------- a sixth paper


def toy_configs(profile: str, *, seeds=None, overrides=None) -> dict[str, list[RunConfig]]:
    """Local and SplitNN on 64 MNIST images, one epoch: the demo's kind of run."""
    return {"table1": [RunConfig(paper="toy", dataset="mnist", method=m, models=("mlp",) * 4, lr=0.05,
                                 partition="strips_width", n_parties=4, batch_size=64, n_train=64, n_test=64,
                                 epochs=1, seed=s)
                       for m in ("local", "splitnn") for s in (seeds or (0,))]}


def _splitnn_recorded(recs: claims.Records) -> claims.Verdict:
    """The toy's one clause: agree once its SplitNN run is recorded."""
    runs = [c for c in toy_configs(recs.profile)["table1"] if c.method == "splitnn"]
    found = recs.of(runs)
    return claims.Verdict(claims.AGREE, f"{len(found)} record") if found else claims.not_testable("no record")


def _toy_beyond(evidence) -> list[tuple[str, str]]:
    found = evidence.first_with_records()
    return [("Toy: what is recorded", f"{len(found[1]) if found else 0} runs at the {found and found[0]} profile "
             f"({evidence.notebook('Table 1')})")]


@pytest.fixture
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A toy study registered for one test, with results and figures in a temporary folder."""
    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("VFLKIT_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("VFLKIT_OFFLINE", "1")
    s = studies.register(Study(
        name="toy", title="Toy", family="split", configs=toy_configs, notebook="notebooks/toy.ipynb",
        artefacts=(Artefact("Table 1", groups("table1"), ("table1.*",)),),
        claims=[claims.Claim("toy", "Table 1", "SplitNN's run is recorded", _splitnn_recorded)],
        needs_gpu=lambda run: run.method == "splitnn", beyond=_toy_beyond))
    yield s
    studies.unregister("toy")


def test_a_toy_study_is_scheduled_and_reported_from_its_declaration_alone(toy, tmp_path):
    """Registering a study is all a new paper needs: its runs become scheduler tasks (with its
    GPU rule), ``status`` lists the unrecorded ones, and the report gives it an overview line, a
    section with its artefact, claims and finding; unregistered, it is gone everywhere."""
    assert reproduction.TITLES["toy"] == "Toy" and study.STUDY_FAMILY["toy"] == "split"
    runs = {c.method: c for c in toy.runs("quick")}
    # the SplitNN run recorded (a fake trainer: nothing is trained), the Local run not
    records.run_one(runs["splitnn"], train=lambda run, **kw: {"final": {"active": {"test_accuracy": 0.5}}},
                    profile="quick", device="cpu", progress=False)
    here, gpu = study.select_tasks(["toy"], "quick", "cpu")
    assert {t.key for t in here} == {runs["local"].key} and {t.key for t in gpu} == {runs["splitnn"].key}
    assert all(t.payload["family"] == "split" and t.label.startswith("toy: ") for t in here + gpu)
    table = study.status(["toy"], profile="quick", device="cpu", include_gpu_runs=True)
    assert table.key.tolist() == [runs["local"].key] and table.status.tolist() == ["pending"]

    (tmp_path / "figures" / "toy" / "quick").mkdir(parents=True)
    (tmp_path / "figures" / "toy" / "quick" / "table1.csv").write_text("method,score\nsplitnn,0.5\n")
    text = reproduction.build_report(("paper", "quick"), tmp_path / "figures", papers=["toy"])
    overview = text.split("## Overview", 1)[1].split("\n## ", 1)[0]
    assert "| [Toy](#toy) | 1 quick in part |" in overview
    section = text.split("\n## Toy\n", 1)[1]
    assert "Notebook: [notebooks/toy.ipynb](../notebooks/toy.ipynb)" in section
    row = next(line for line in section.splitlines() if line.startswith("| Table 1 |"))
    # the paper profile's two runs, priced by the one estimator (pricing.price) from the toy's own
    # GPU rule: SplitNN needs a GPU, Local does not
    assert "quick in part (1 of 2 runs)" in row and "pending: GPU (1 run, est. " in row and "CPU (1 run)" in row
    assert "[quick/table1.csv](toy/quick/table1.csv)" in row
    assert "Toy prints no table of numbers" in section
    claims_part = section.split("### Claims", 1)[1]
    assert "| Table 1 | SplitNN's run is recorded |  | agree | 1 record |" in claims_part
    assert "### Toy: what is recorded\n\n1 runs at the quick profile ([toy notebook](../notebooks/toy.ipynb)" in text

    studies.unregister("toy")
    assert "toy" not in reproduction.TITLES and "toy" not in study.STUDY_FAMILY
    with pytest.raises(ConfigError, match="no study 'toy'"):
        study.study_tasks("toy", "quick")


def test_demo_comparison_is_worded_from_its_table():
    """The demo's result sentence comes from summary()'s table: both accuracies and their gap."""
    import pandas as pd

    from vflkit.studies import demo

    table = pd.DataFrame({"method": ["local", "splitnn", "splitnn"], "test_accuracy_pct": [36.9, 97.0, 97.4]})
    assert demo.comparison(table) == ("SplitNN reaches 97.2 % test accuracy and Local 36.9 % (mean over seeds): "
                                      "the passive parties' embeddings add 60.3 points.")
    assert demo.comparison(table.iloc[1:]) == "SplitNN and Local are not both recorded yet."


@pytest.mark.parametrize("configs", [
    lambda p, **k: ["run-a", "run-b"],  # Y04: strings, not runs
    lambda p, **k: [None],
    lambda p, **k: {"table1": RunConfig(paper="demo", dataset="mnist", method="local", models=("mlp",) * 4)},
    lambda p, **k: 5,
    lambda p, **k: [MultiVFLConfig(dataset="mnist")],  # another family's run
])
def test_a_study_whose_configs_are_not_runs_is_a_clear_error(configs):
    """A registered study whose ``configs`` returns something other than runs of its family's
    run class (strings, a run where a group's list belongs, a number, another family's runs) is
    a ConfigError naming the study and what it returned, not an AttributeError in the scheduler."""
    studies.register(Study(name="notruns", title="Not runs", family="split", configs=configs))
    try:
        with pytest.raises(ConfigError, match=r"study 'notruns': configs\('smoke'\) returned .*RunConfig"):
            study.study_tasks("notruns", "smoke")
        with pytest.raises(ConfigError, match="study 'notruns'"):
            studies.get("notruns").runs("smoke")
    finally:
        studies.unregister("notruns")


def test_a_study_may_give_its_runs_as_any_iterable():
    """``configs`` may return its runs as a generator or tuple, per group or as one list."""
    run = RunConfig(paper="demo", dataset="mnist", method="local", models=("mlp",) * 4)
    s = Study(name="iterable", title="Iterable", family="split",
              configs=lambda p, **k: {"t1": (r for r in [run]), "t2": (run,)})
    assert s.groups("smoke") == {"t1": [run], "t2": [run]} and s.runs("smoke") == [run]
