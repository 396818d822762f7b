"""Tests for vflkit.reproduction: the report names every printed number and every claim of the
five papers with a status, compares what is recorded, and survives a profile with no records."""

import re
from pathlib import Path

import pandas as pd
import pytest

from vflkit import claims, report, reproduction, studies, study
from vflkit.config import figures_dir, project_root
from vflkit.report import KEY_COLUMNS, TABLE_COLUMNS, load_reference
from vflkit.scheduler import Summary

PROFILES = ("paper", "quick")
#: Clauses judged without any record: AdptVFedConv prices its communication at the paper's scale
#: from the architecture alone.
RECORD_FREE = {("AdptVFedConv", "Sec. 5")}
CELL_COLUMNS = 13  # table, dataset, method, setting, model, metric, paper, ours, gap, within, status, counted, ours from


def _cells(line: str) -> list[str]:
    """A markdown table row's cells, escaped pipes restored."""
    parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [p.strip().replace("\\|", "|") for p in parts]


def _rows(text: str, n: int) -> list[list[str]]:
    """The body rows of the markdown tables in ``text`` with ``n`` columns (no header, no rule)."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        cells = _cells(line) if line.startswith("|") else []
        is_rule = bool(cells) and all(set(c) <= set("-") for c in cells)
        is_header = i + 1 < len(lines) and lines[i + 1].startswith("|---")
        if len(cells) == n and not is_rule and not is_header:
            out.append(cells)
    return out


def _section(text: str, heading: str, level: int = 2) -> str:
    """The text under ``heading`` (at ``level``) up to the next heading of that level or above."""
    marks = "#" * level
    match = re.search(rf"^{marks} {re.escape(heading)}.*?$(.*?)(?=^#{{1,{level}}} |\Z)", text, re.M | re.S)
    assert match, f"no section {marks} {heading}"
    return match.group(1)


def _number_rows(section: str) -> dict[tuple[str, ...], list[list[str]]]:
    """The rows of the printed-cell tables of a paper's section, by key columns."""
    rows: dict[tuple[str, ...], list[list[str]]] = {}
    for cells in _rows(section, CELL_COLUMNS):
        rows.setdefault(tuple(cells[:6]), []).append(cells)
    return rows


def _reference(paper: str) -> pd.DataFrame:
    ref = load_reference(paper)
    return ref.assign(**{c: ref[c].fillna("").astype(str) for c in KEY_COLUMNS})


@pytest.fixture(scope="module")
def committed() -> str:
    """The committed report, figures/REPORT.md, as written: rebuilding it costs minutes that grow
    with the records, so the fast tier checks it was built from the committed records and tables
    (its stamp) and reads it; the slow tier rebuilds it and compares."""
    path = figures_dir() / "REPORT.md"
    assert path.exists(), "figures/REPORT.md is missing: run `make report` and commit it"
    return path.read_text()


@pytest.fixture
def empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outside_checkout: Path) -> Path:
    """A working directory outside any checkout, with empty results and figures folders: no
    record and no table of any profile is found."""
    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("VFLKIT_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("VFLKIT_OFFLINE", "1")
    return tmp_path


def test_the_committed_report_was_built_from_the_committed_records_and_tables(committed: str) -> None:
    """figures/REPORT.md ends with the stamp of the records and notebook outputs it was built from:
    a record or table added or changed since (and no `make report`) fails here, in a second."""
    stamp = committed.rstrip("\n").rsplit("\n", 1)[-1]
    assert reproduction.STAMP_PATTERN.fullmatch(stamp), f"figures/REPORT.md ends without its stamp: {stamp!r}"
    assert stamp == reproduction.inputs_stamp(PROFILES).strip(), \
        "figures/REPORT.md is stale (records or tables changed since it was built): run `make report` and commit it"


def test_the_stamp_changes_with_a_record_a_table_or_a_table_file_name(empty: Path) -> None:
    """The stamp is a function of what the report reads: a new record, an edited CSV and a renamed
    PNG each change it; a record of a profile the report does not read does not."""
    record = empty / "results" / "quick" / "demo" / "0123456789abcdef.json"
    record.parent.mkdir(parents=True)
    table = empty / "figures" / "demo" / "quick" / "table1.csv"
    table.parent.mkdir(parents=True)
    table.write_text("value\n1\n")
    png = table.with_name("fig1.png")
    png.write_bytes(b"\x89PNG")
    stamps = [reproduction.inputs_stamp(PROFILES)]
    record.write_text("{}")
    stamps.append(reproduction.inputs_stamp(PROFILES))
    table.write_text("value\n2\n")
    stamps.append(reproduction.inputs_stamp(PROFILES))
    png.rename(png.with_name("fig2.png"))
    stamps.append(reproduction.inputs_stamp(PROFILES))
    assert len(set(stamps)) == 4
    # the committed results/ is read beside VFLKIT_RESULTS (as the report reads it): one record more
    first, last = (reproduction.STAMP_PATTERN.fullmatch(s.strip()).groups()[:2] for s in (stamps[0], stamps[-1]))
    assert (int(last[0]) - int(first[0]), last[1]) == (1, "2")
    other = empty / "results" / "smoke" / "demo" / "fedcba9876543210.json"
    other.parent.mkdir(parents=True)
    other.write_text("{}")
    assert reproduction.inputs_stamp(PROFILES) == stamps[-1]


@pytest.mark.slow  # minutes on a 2-core CPU, growing with the records: the fast tier checks the stamp
def test_the_committed_report_is_the_one_the_records_give(committed: str, tmp_path: Path) -> None:
    """figures/REPORT.md is regenerated whenever records, tables or the code that reads them
    change: a stale committed report would tell readers numbers the records no longer give."""
    out = tmp_path / "REPORT.md"
    assert reproduction.write_report(PROFILES, out) == out
    assert out.read_text() == committed, "figures/REPORT.md is stale: run `make report` and commit it"


def test_every_printed_number_has_a_row_and_a_status(committed: str) -> None:
    """Each row of each reference CSV appears in its paper's section, with the paper's value and
    a status; a cell the committed tables record is compared, with the gap ours - paper."""
    for paper, title in reproduction.TITLES.items():
        rows = _number_rows(_section(committed, title))
        ref = _reference(paper)
        for _, r in ref.iterrows():
            key = tuple(r[c] for c in KEY_COLUMNS if c != "paper")
            assert key in rows, f"{title}: reference row {key} missing from the report"
            for cells in rows[key]:
                assert cells[10] in reproduction.CELL_STATUSES, cells
                assert cells[6].startswith(reproduction._num(r["value"])), (cells, r["value"])
        # the report's own tables name nothing the paper does not print
        assert set(rows) <= {tuple(r[c] for c in KEY_COLUMNS if c != "paper") for _, r in ref.iterrows()}
        # a row of a committed table with a printed key must be compared, its gap ours - paper
        for csv in sorted((figures_dir() / paper / "quick").glob("*.csv")):
            ours = pd.read_csv(csv, dtype={c: str for c in KEY_COLUMNS})
            if not set(TABLE_COLUMNS) <= set(ours.columns):
                continue
            ours = ours.assign(**{c: ours[c].fillna("").astype(str) for c in KEY_COLUMNS})
            for _, o in ours.merge(ref[list(KEY_COLUMNS) + ["value"]], on=list(KEY_COLUMNS),
                                   suffixes=("", "_paper")).iterrows():
                key = tuple(o[c] for c in KEY_COLUMNS if c != "paper")
                statuses = {cells[10] for cells in rows[key]}
                assert statuses <= {reproduction.COMPARED, reproduction.NO_PAPER_VALUE, reproduction.DIVERGED}, \
                    (key, statuses)
                if o["profile"] == "quick" and not pd.isna(o["value_paper"]):
                    gaps = [cells[8] for cells in rows[key] if cells[7].startswith(reproduction._num(o["value"]))]
                    # a quick value shows unless the paper profile records the cell
                    if gaps:
                        assert gaps[0] == reproduction._num(o["value"] - o["value_paper"], sign=True)


def test_every_claim_appears_per_profile_with_a_status(committed: str) -> None:
    """Each clause of each study's CLAIMS is judged in the report at the paper and the quick
    profile; each figure-only claim of the reference README is listed with a status."""
    readme = reproduction.readme_claims()
    assert len(readme) == 11  # the README's table, parsed whole
    for paper, title in reproduction.TITLES.items():
        section = _section(committed, title)
        claims_part = _section(section, "Claims", level=3)
        for profile in PROFILES:
            part = _section(claims_part, f"{profile} profile", level=4)
            judged = {(c[0], c[1]): c[3] for c in _rows(part, 5)}  # artefact, clause, reading, status, evidence
            for clause in studies.get(paper).claims:
                assert judged.get((clause.artefact, clause.clause)) in claims.STATUSES, (title, profile, clause.clause)
        part = _section(section, "The reference README's figure-only claims", level=3)
        listed = {(c[0], c[1], c[2]): c[3] for c in _rows(part, 5)}
        for _, r in readme[readme["paper"] == title].iterrows():
            for profile in PROFILES:
                assert listed.get((r["figure"], r["claim"], profile)) in claims.STATUSES, (title, r["figure"])


def test_variant_clauses_are_shown_apart_and_not_counted_as_the_papers(committed: str) -> None:
    """A study's VARIANT_CLAIMS (sensitivity rows, our design choices) are judged in their own
    sub-section, never in the paper's Claims table nor in the overview's counts."""
    papers = [p for p in reproduction.TITLES if studies.get(p).variant_claims]
    assert {"vfedmh", "easter", "adptvfedconv"} <= set(papers)
    for paper in papers:
        section = _section(committed, reproduction.TITLES[paper])
        ours = _section(section, "The same clauses on our variants (not the paper's claims, not counted above)", level=3)
        paper_claims = _section(section, "Claims", level=3)
        for profile in PROFILES:
            judged = {(c[0], c[1]): c[3] for c in _rows(_section(ours, f"{profile} profile", level=4), 5)}
            mine = {(c[0], c[1]): c[3] for c in _rows(_section(paper_claims, f"{profile} profile", level=4), 5)}
            for clause in studies.get(paper).variant_claims:
                assert judged.get((clause.artefact, clause.clause)) in claims.STATUSES, (paper, clause.clause)
                assert (clause.artefact, clause.clause) not in mine


def test_every_artefact_has_a_row_with_a_status_and_its_notebook(committed: str) -> None:
    """One row per table and figure the paper prints, with a status and a link to its notebook."""
    for paper, title in reproduction.TITLES.items():
        part = _section(_section(committed, title), "Artefacts", level=3)
        rows = {c[0]: c for c in _rows(part, 4)}
        assert list(rows) == [a.label for a in reproduction.ARTEFACTS[paper]]
        for cells in rows.values():
            assert cells[2], cells
            assert f"](../notebooks/{paper}.ipynb)" in cells[3]
    # APC-VFL's MIMIC-III-only artefacts cannot be made here, whatever is recorded
    apc = _section(_section(committed, "APC-VFL"), "Artefacts", level=3)
    table4 = next(c for c in _rows(apc, 4) if c[0] == "Table 4")
    assert table4[2].startswith(reproduction.IMPOSSIBLE) and "MIMIC-III" in table4[2]


def test_no_records_reads_not_recorded_and_not_testable(empty: Path) -> None:
    """Without any record or table, every printed number is "not recorded" and every claim "not
    testable at this profile"; the report is still written, whole."""
    out = reproduction.write_report(PROFILES, empty / "REPORT.md")
    text = out.read_text()
    for paper, title in reproduction.TITLES.items():
        section = _section(text, title)
        rows = _number_rows(section)
        assert len(rows) == len(_reference(paper).drop_duplicates(list(KEY_COLUMNS)))
        assert {cells[10] for rs in rows.values() for cells in rs} <= {reproduction.NOT_RECORDED}
        claims_part = _section(section, "Claims", level=3)
        judged = _rows(claims_part, 5)
        assert len(judged) == len(PROFILES) * len(studies.get(paper).claims)
        assert {c[3] for c in judged if (title, c[0]) not in RECORD_FREE} == {claims.NOT_TESTABLE}
        arts = _section(section, "Artefacts", level=3)
        for cells in _rows(arts, 4):
            assert cells[1] == "none"
            assert "no records yet" in cells[2] or "not run" in cells[2] or cells[2].startswith(reproduction.IMPOSSIBLE)
    assert not list(empty.glob("report_*.png"))  # nothing compared, nothing to plot


def test_numbers_prefer_the_paper_profile_and_judge_the_gap(empty: Path) -> None:
    """Ours is the paper profile's value where its table has the cell, else the quick profile's;
    the gap is judged against the paper's std, ours and 2 points; a study's relabelled model
    column (AdptVFedConv's width-reduced VGG-16) still finds the printed cell."""
    def write(paper: str, profile: str, rows: list[dict]) -> None:
        folder = empty / "figures" / paper / profile
        folder.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(rows).reindex(columns=list(TABLE_COLUMNS)).to_csv(folder / "table2.csv", index=False)

    cell = {"paper": "VFedMH", "table": "II", "dataset": "MNIST", "method": "Local", "setting": "local",
            "metric": "test_accuracy_pct"}  # the paper prints 23.47 ± 2.36 (CNN), 35.57 ± 3.14 (LeNet)
    write("vfedmh", "quick", [{**cell, "model": "CNN", "value": 30.0, "std": 1.0, "n_runs": 3, "profile": "quick"},
                              {**cell, "model": "LeNet", "value": 36.0, "std": 0.1, "n_runs": 3, "profile": "quick"}])
    write("vfedmh", "paper", [{**cell, "model": "CNN", "value": 24.0, "std": 1.0, "n_runs": 3, "profile": "paper"}])
    write("adptvfedconv", "quick", [{"paper": "AdptVFedConv", "table": "2", "dataset": "CIFAR-10",
                                     "method": "AdptVFedConv", "setting": "", "model": "VGG-16 at width 1/8",
                                     "metric": "top1_accuracy_pct", "value": 25.0, "n_runs": 1, "profile": "quick"}])
    cells = reproduction.compare("vfedmh", PROFILES)

    def row(model: str) -> pd.Series:
        hit = cells[(cells["table"] == "II") & (cells["dataset"] == "MNIST") & (cells["method"] == "Local")
                    & (cells["model"] == model)]
        assert len(hit) == 1
        return hit.iloc[0]

    cnn, lenet = row("CNN"), row("LeNet")
    assert (cnn["profile"], cnn["value"], cnn["gap"]) == ("paper", 24.0, pytest.approx(0.53))
    assert cnn["within"] == "paper std, our std, ±2 points"
    assert (lenet["profile"], lenet["gap"]) == ("quick", pytest.approx(0.43))
    assert lenet["within"] == "paper std, ±2 points"  # our std of 0.1 does not cover 0.43
    assert row("MLP")["status"] == reproduction.NOT_RECORDED
    summary = reproduction.table_summary(reproduction.compare("vfedmh", PROFILES)).set_index("table")
    # the quick LeNet value is shown with its gap but counts as no comparison (reduced scale)
    assert summary.loc["II", "compared"] == 1 and summary.loc["II", "within ±2 points"] == "1 of 1"
    assert summary.loc["II", "shown, not counted"] == 1 and not lenet["counted"] and cnn["counted"]
    adpt = reproduction.compare("adptvfedconv", PROFILES)
    hit = adpt[(adpt["table"] == "2") & (adpt["dataset"] == "CIFAR-10") & (adpt["method"] == "AdptVFedConv")]
    assert len(hit) == 1 and hit["status"].item() == reproduction.COMPARED
    assert hit["gap"].item() == pytest.approx(25.0 - 91.30) and hit["our_model"].item() == "VGG-16 at width 1/8"
    # the report's figure plots ours against the paper's
    png = reproduction.plot_comparison("vfedmh", reproduction.compare("vfedmh", PROFILES), empty / "v.png")
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"


def test_readme_claims_map_onto_the_clauses_of_their_figures() -> None:
    """A README claim is judged through the clauses whose artefact names its figure (a range
    "Figs. 4–5" names both, "Fig. 3" is not "Fig. 34"); with none it is not testable, "no
    predicate yet"."""
    evaluated = pd.DataFrame([
        {"artefact": "Fig. 3", "clause": "a", "status": claims.AGREE, "profile": "quick"},
        {"artefact": "Table 2 / Fig. 4", "clause": "b", "status": claims.DISAGREE, "profile": "quick"},
        {"artefact": "Fig. 5", "clause": "c", "status": claims.NOT_TESTABLE, "profile": "quick"},
        {"artefact": "Fig. 34", "clause": "d", "status": claims.DISAGREE, "profile": "quick"},
    ]).assign(paper="X", evidence="")
    readme = pd.DataFrame([{"paper": "X", "figure": f, "claim": f"claim of {f}"}
                           for f in ("Fig. 3", "Figs. 4–5", "Fig. 5", "Fig. 9")])
    got = reproduction.map_readme(readme, evaluated).set_index("figure")
    assert got.loc["Fig. 3", "status"] == claims.AGREE
    assert got.loc["Figs. 4–5", "status"] == claims.DISAGREE and "2 clauses" in got.loc["Figs. 4–5", "evidence"]
    assert got.loc["Fig. 5", "status"] == claims.NOT_TESTABLE
    assert (got.loc["Fig. 9", "status"], got.loc["Fig. 9", "evidence"]) == (claims.NOT_TESTABLE, "no predicate yet")


def test_make_study_ends_by_writing_the_report(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``python -m vflkit.study`` writes the report after the notebooks (and not with --no-report)."""
    calls: list[str] = []
    monkeypatch.setattr(study, "_durations_path", lambda profile: tmp_path / "durations.json")
    monkeypatch.setattr(study, "compute_pending", lambda *a, **k: Summary())
    monkeypatch.setattr(study, "execute", lambda nb, **k: calls.append(f"notebook {nb.name}") or nb)
    monkeypatch.setattr(reproduction, "write_report", lambda *a, **k: calls.append("report") or Path("REPORT.md"))
    assert study.main(["notebooks/demo.ipynb", "--profile", "smoke"]) == 0
    assert calls == ["notebook demo.ipynb", "report"]
    calls.clear()
    assert study.main(["notebooks/demo.ipynb", "--profile", "smoke", "--no-report"]) == 0
    assert calls == ["notebook demo.ipynb"]


def _paper_tables_from_records() -> dict[tuple[str, str], pd.DataFrame]:
    """What the quick notebooks write under figures/<paper>/paper/, from the committed records:
    every artefact of VFedMH and EASTER, APC-VFL's Fig. 5 and Table 2, as each is drawn."""
    import tempfile

    import matplotlib.pyplot as plt

    from vflkit import studies

    out = {}
    with tempfile.TemporaryDirectory() as root:
        for name, labels in (("vfedmh", None), ("easter", None), ("apc_vfl", ("Fig. 5", "Table 2"))):
            st = studies.get(name)
            _, recs = st.recorded("paper")
            for label in labels or [a.label for a in st.artefacts]:
                drawn = report.draw(st, label, "paper", records=recs, root=root, display=False)
                parts = drawn if isinstance(drawn, dict) else {st.artefact(label).stem: drawn}
                for stem, part in parts.items():
                    if isinstance(part, tuple):
                        plt.close(part[0])
                        part = part[1]
                    if part is not None:
                        out[(name, f"{stem}.csv")] = part
    return {k: v for k, v in out.items() if len(v)}


@pytest.mark.slow  # reads every paper record, a number that grows each session
def test_the_committed_paper_tables_are_the_ones_the_paper_records_give() -> None:
    """The paper profile's tables as far as recorded (figures/<paper>/paper/, which the report
    compares) are rewritten whenever paper records are added: a stale CSV fails here."""
    expected = _paper_tables_from_records()
    assert expected, "no paper-profile records are committed"
    for (paper, name), table in expected.items():
        path = figures_dir() / paper / "paper" / name
        assert path.exists(), f"{path.name} of {paper} is missing: re-execute notebooks/{paper}.ipynb and commit"
        columns = report.table_columns(table) if name.startswith("table") else list(table.columns)
        want = table[columns].to_csv(index=False)
        assert path.read_text() == want, f"{paper}/paper/{name} is stale: re-execute notebooks/{paper}.ipynb"
    written = {(p.parent.parent.name, p.name) for p in figures_dir().glob("*/paper/*.csv")}
    assert written == set(expected), "a paper-profile CSV no record gives (or one not checked here)"


def test_report_and_readme_open_with_the_findings(committed: str) -> None:
    """The report's first section after the overview is its findings (each clause a profile
    decides, with its evidence), then what the papers do not report, then the papers; the README
    opens with the same findings, generated (`make report` rewrites its block)."""
    order = [committed.index(h) for h in ("## Overview", reproduction.FINDINGS_HEADING, "## Beyond the papers", "## VFedMH")]
    assert order == sorted(order)
    findings = committed.split(reproduction.FINDINGS_HEADING, 1)[1].split("\n## ", 1)[0]
    for title in reproduction.TITLES.values():
        assert f"- **[{title}](#{title.lower()})**" in findings
    decided = [line for line in findings.splitlines() if line.startswith("  - *")]
    assert decided and all(reproduction.EVIDENCE in line for line in decided)
    readme = (project_root() / "README.md").read_text()
    start = readme.index(reproduction.README_START)
    assert start < readme.index("```"), "the README opens with the findings, before the commands"
    block = readme[start:readme.index(reproduction.README_END) + len(reproduction.README_END)]
    assert block == reproduction.readme_findings(committed), "the README's findings are stale: run `make report`"


def test_a_cell_whose_every_run_diverged_is_not_compared(empty: Path) -> None:
    """A table's cell with no value and diverged runs (analysis.summarise_runs) reads "diverged"
    in the report, with its own status; a cell with some diverged runs says how many."""
    folder = empty / "figures" / "vfedmh" / "quick"
    folder.mkdir(parents=True)
    cell = {"paper": "VFedMH", "table": "II", "dataset": "MNIST", "method": "Local", "setting": "local",
            "metric": "test_accuracy_pct", "profile": "quick"}
    pd.DataFrame([{**cell, "model": "CNN", "value": float("nan"), "n_runs": 0, "diverged": 3},
                  {**cell, "model": "LeNet", "value": 36.0, "std": 0.1, "n_runs": 2, "diverged": 1}]).reindex(
        columns=[*TABLE_COLUMNS, "diverged"]).to_csv(folder / "table2.csv", index=False)
    cells = reproduction.compare("vfedmh", PROFILES)
    mnist = cells[(cells["table"] == "II") & (cells["dataset"] == "MNIST") & (cells["method"] == "Local")]
    cnn, lenet = (mnist[mnist["model"] == m].iloc[0] for m in ("CNN", "LeNet"))
    assert cnn["status"] == reproduction.DIVERGED and pd.isna(cnn["gap"])
    assert lenet["status"] == reproduction.COMPARED and lenet["diverged"] == 1
    view = reproduction._cells_view(mnist).set_index("model")["ours"]
    assert view["CNN"] == "diverged (3 runs)" and view["LeNet"].endswith("(2 runs; 1 more diverged)")


def test_runs_status_counts_the_records_and_prices_what_is_pending(empty: Path) -> None:
    """With no record, every paper-profile run of a study is pending with the study's estimate
    (AdptVFedConv's runs are a GPU's); the notebooks open with this line."""
    from vflkit.studies import adptvfedconv

    n = len(adptvfedconv.STUDY.runs("paper"))
    text = reproduction.runs_status("adptvfedconv")
    assert text.startswith(f"0 of {n} runs recorded; pending: GPU ({n} runs, est. ")
    assert text.endswith(" H100 min)")
    assert reproduction.runs_status("adptvfedconv", "quick") == f"0 of {len(adptvfedconv.STUDY.runs('quick'))} runs recorded"


def test_runs_status_of_a_reduced_profile_adds_up_its_records_wall_times() -> None:
    """The quick profile's line says what its committed records' wall times add up to (what
    recomputing it costs), from the records themselves."""
    from vflkit import records as store
    from vflkit.studies import multi_vfl

    recs = store.load_available(multi_vfl.configs("quick"), profile="quick")
    hours = sum(r["wall_time_s"] for r in recs) / 3600
    assert hours > 0.1
    assert reproduction.runs_status("multi_vfl", "quick") == (
        f"{len(recs)} of {len(multi_vfl.configs('quick'))} runs recorded; their wall times add up to {hours:.1f} h")


def test_readme_own_gpu_block_adds_up_the_estimator_and_names_its_evidence(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    """The README's own-GPU block is generated from own_gpu_minutes (pricing.price per paper): its
    total is the papers' sum, the FLOP estimate names the records of its rate, and update_readme
    writes it between its markers."""
    from vflkit.ops import pricing as costs

    rows = pd.DataFrame([
        {"paper": "A", "name": "a", "runs": 3, "h100_min": 100.4, "h100_min_packed": 40.2, "unpriced": 0,
         "cpu_h": float("nan"), "how": "from FLOPs at the measured H100 rate (1)"},
        {"paper": "B", "name": "b", "runs": 2, "h100_min": float("nan"), "h100_min_packed": float("nan"), "unpriced": 2,
         "cpu_h": 7.0, "how": ""}])
    monkeypatch.setattr(reproduction, "own_gpu_minutes", lambda recs=None: rows)
    block = reproduction.readme_own_gpu()
    assert "| A | 3 | 100 | 40 |" in block
    assert "| B | 2 | — | — | none (its own rule, `b.pending_cost`, prices them at 7 CPU-hours) |" in block
    assert "about 100 H100-minutes (1.7 hours)" in block and "2 runs without an H100 estimate" in block
    assert "about 40 H100-minutes (0.7 hours); predicted from op counts" in block
    assert costs.GPU_LABEL in block and costs.OP_COUNTS in costs.GPU_LABEL
    readme = tmp_path / "README.md"
    readme.write_text(f"{reproduction.README_START}\n{reproduction.README_END}\nx\n"
                      f"{reproduction.README_GPU_START}\nold\n{reproduction.README_GPU_END}\ny\n")
    monkeypatch.setattr(reproduction, "readme_findings", lambda report: reproduction.README_START + reproduction.README_END)
    assert reproduction.update_readme("", readme)
    assert block in readme.read_text() and "old" not in readme.read_text()
    committed = (project_root() / "docs" / "own-gpu.md").read_text()
    assert reproduction.README_GPU_START in committed and reproduction.README_GPU_END in committed


def _block(page: str, start: str, end: str) -> str:
    """The generated block between ``start`` and ``end`` in the committed ``page``."""
    text = (project_root() / page).read_text()
    return text[text.index(start):text.index(end) + len(end)]


def test_readme_status_is_the_reports_overview(committed: str) -> None:
    """The status table is generated: the report's overview, with its runs recorded and pending
    per profile, its links into the report; docs/studies.md carries the fresh one, its links
    rebased to the page's folder."""
    block = reproduction.readme_status(committed)
    assert block.startswith(reproduction.README_STATUS_START) and block.endswith(reproduction.README_STATUS_END)
    assert "runs (paper)" in block and "runs recorded" in block and "](figures/REPORT.md#vfedmh)" in block
    on_page = _block("docs/studies.md", reproduction.README_STATUS_START, reproduction.README_STATUS_END)
    assert on_page == reproduction._rebase(block, 1), "docs/studies.md's status table is stale: run `make report`"
    assert "](../figures/REPORT.md#vfedmh)" in on_page


def test_readme_notebooks_table_links_each_paper_and_states_its_runs(committed: str) -> None:
    """The README's table of notebooks names every notebook with its paper's link from the
    bibliography and the report overview's runs per profile; the committed README carries it."""
    from vflkit import bibliography

    block = reproduction.readme_notebooks(committed)
    rows = _rows(block, 5)
    assert [r[0] for r in rows] == [f"[{Path(s.notebook).stem}]({s.notebook})"
                                    for s in [*reproduction._reported(), studies.get("demo")]]
    overview = reproduction._overview_rows(committed)
    for study, row in zip(reproduction._reported(), rows):
        assert bibliography.link(study.cites) in row[1] and f"](figures/REPORT.md#{study.title.lower()})" in row[1]
        assert row[3] == overview[study.title]["runs (quick)"] and row[4] == overview[study.title]["runs (paper)"]
        assert "pending" not in row[4] or "est." in row[4], "a pending cost is marked as estimated"
    assert _block("README.md", reproduction.README_NOTEBOOKS_START, reproduction.README_NOTEBOOKS_END) == block, \
        "the README's table of notebooks is stale: run `make report`"


def test_generated_blocks_are_written_where_their_markers_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """update_generated writes each block into whichever page of the README and docs/ carries
    its markers, with its links rebased to the page's folder, and leaves other pages alone."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(f"a\n{reproduction.README_START}\nold\n{reproduction.README_END}\nb\n")
    (tmp_path / "docs" / "x.md").write_text(f"{reproduction.README_STATUS_START}\nold\n{reproduction.README_STATUS_END}\n")
    (tmp_path / "docs" / "plain.md").write_text("nothing generated\n")
    monkeypatch.setattr(reproduction, "readme_findings",
                        lambda report: f"{reproduction.README_START}[r](figures/REPORT.md#x){reproduction.README_END}")
    monkeypatch.setattr(reproduction, "readme_status", lambda report: (
        f"{reproduction.README_STATUS_START}[r](figures/REPORT.md#y) [w](https://x.org) [a](#z){reproduction.README_STATUS_END}"))
    monkeypatch.setattr(reproduction, "GENERATED_BLOCKS", (
        (reproduction.README_START, reproduction.README_END, "readme_findings"),
        (reproduction.README_STATUS_START, reproduction.README_STATUS_END, "readme_status")))
    import vflkit.config

    monkeypatch.setattr(vflkit.config, "project_root", lambda: tmp_path)
    monkeypatch.setattr(reproduction, "project_root", lambda: tmp_path)  # imported by name there
    written = reproduction.update_generated("")
    assert written == [tmp_path / "README.md", tmp_path / "docs" / "x.md"]
    assert "[r](figures/REPORT.md#x)" in (tmp_path / "README.md").read_text()
    assert (tmp_path / "docs" / "x.md").read_text() == (
        f"{reproduction.README_STATUS_START}[r](../figures/REPORT.md#y) [w](https://x.org) [a](#z)"
        f"{reproduction.README_STATUS_END}\n")
    assert (tmp_path / "docs" / "plain.md").read_text() == "nothing generated\n"


def test_the_references_page_lists_the_bibliography() -> None:
    """docs/references.md carries every entry of vflkit.bibliography, generated."""
    block = reproduction.references_list()
    from vflkit import bibliography

    assert all(bibliography.citation(key) in block for key in bibliography.PAPERS)
    assert _block("docs/references.md", reproduction.REFERENCES_START, reproduction.REFERENCES_END) == block


def test_the_changelog_states_the_verdicts_and_what_changed_since_the_last_version(committed: str,
                                                                                  tmp_path: Path) -> None:
    """The changelog's block gives the overview's claims per paper and profile, and names what
    changed against the last released version's frozen table; the committed one is fresh."""
    rows = reproduction._overview_rows(committed)
    vfedmh = rows["VFedMH"]
    log = tmp_path / "CHANGELOG.md"
    log.write_text(f"## 9.9.9\n\n{reproduction.VERDICTS_START}\n{reproduction.VERDICTS_END}\n\n## 9.9.8\n\n"
                   "| paper | claims (paper) | claims (quick) |\n|---|---|---|\n"
                   f"| VFedMH | 0 agree, 0 disagree, 1 not testable at this profile | {vfedmh['claims (quick)']} |\n"
                   f"| EASTER | {rows['EASTER']['claims (paper)']} | {rows['EASTER']['claims (quick)']} |\n")
    block = reproduction.changelog_verdicts(committed, log)
    body = {r[0]: r for r in _rows(block, 4)}
    assert "changed since 9.9.8" in block
    assert body["VFedMH"][1:3] == [vfedmh["claims (paper)"], vfedmh["claims (quick)"]]
    assert body["VFedMH"][3] == f"paper: 0 agree, 0 disagree, 1 not testable at this profile → {vfedmh['claims (paper)']}"
    assert body["EASTER"][3] == "none" and body["Multi-VFL"][3] == "—"
    assert _block("CHANGELOG.md", reproduction.VERDICTS_START, reproduction.VERDICTS_END) == \
        reproduction.changelog_verdicts(committed), "CHANGELOG.md's verdicts are stale: run `make report`"


def test_each_paper_section_opens_with_its_citation() -> None:
    """Under each paper's heading the report cites the paper with its link, then its notebook."""
    from vflkit import bibliography

    for study in reproduction._reported():
        lines = reproduction.paper_lines(study)
        assert lines[0] == f"Paper: {bibliography.citation(study.cites)}\n"
        assert bibliography.get(study.cites).url in lines[0] and study.notebook in lines[1]


def test_the_stamp_covers_the_committed_records_when_results_point_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In the checkout with ``VFLKIT_RESULTS`` pointing at a trial folder, the report reads that
    folder and the committed results/: its stamp counts both, so a report built so cannot carry
    the stamp of the trial folder alone."""
    from vflkit.config import project_root

    monkeypatch.chdir(project_root())
    monkeypatch.setenv("VFLKIT_RESULTS", str(tmp_path / "results"))
    committed = sum(1 for p in PROFILES for _ in (project_root() / "results").glob(f"{p}/*/*.json"))
    assert committed > 0
    n = int(reproduction.STAMP_PATTERN.fullmatch(reproduction.inputs_stamp(PROFILES).strip()).group(1))
    assert n == committed


def test_the_report_says_each_paper_as_it_goes(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                                               tmp_path: Path) -> None:
    """`make report` prints a line per paper on stderr as its section is built (not one line at
    the end of minutes), and nothing of it on stdout."""
    from types import SimpleNamespace

    from vflkit.studies.base import Study

    toys = {n: Study(name=n, title=n.upper(), family="split", configs=lambda *a, **k: []) for n in ("a", "b")}
    seen: list[str] = []

    def section(paper, *a, **k):
        seen.append(capsys.readouterr().err)  # what was printed before this paper's section
        return f"## {paper}\n"

    monkeypatch.setattr(reproduction, "studies", SimpleNamespace(get=toys.__getitem__))
    monkeypatch.setattr(reproduction, "_paper_section", section)
    monkeypatch.setattr(reproduction, "findings_section", lambda *a, **k: [])
    monkeypatch.setattr(reproduction, "inputs_stamp", lambda profiles: "")
    reproduction.build_report(("quick",), tmp_path, papers=["a", "b"])
    out = capsys.readouterr()
    assert "[report]" not in seen[0] and re.search(r"\[report\] A: section 1 of 2 in \d+ s", seen[1])
    assert re.search(r"\[report\] B: section 2 of 2 in \d+ s", out.err) and "[report]" not in out.out


def test_the_shared_gpu_hours_follow_the_measured_sharing_slowdown():
    from vflkit import reproduction
    from vflkit.ops import pricing

    (_, line), share = reproduction.shared_gpu_hours(6000.0), pricing.slowdown(pricing.DEFAULT_LANES)
    assert f"{6000.0 * share / pricing.DEFAULT_LANES / 60:,.0f} hours" in line and f"{share:.1f}x slower" in line
    assert reproduction.shared_gpu_hours(float("nan")) == []


def test_measured_gpu_lines_report_cuda_graphs_from_the_benchmarks() -> None:
    """Each committed benchmark with captured rows adds a line of the graphs' gain over the eager
    vmapped step and the TFLOP/s of the pack, computed from its rows."""
    import json

    from vflkit.ops import pricing as costs

    lines = reproduction.measured_gpu_rates()
    for path in sorted((costs.committed_root() / "device").glob("*bench*.json")):
        bench = json.loads(path.read_text())["bench_packed"]
        graphed = [r for r in bench["rows"] if r.get("graphs_samples_per_s")]
        if not graphed:
            continue
        at = next(i for i, line in enumerate(lines) if f"`{path.name}`" in line)
        r = graphed[0]
        gain = f"{r['method']} {r['model']} {r['graphs_samples_per_s'] / r['vmap_samples_per_s']:.1f}x"
        assert "captured in CUDA graphs" in lines[at + 1] and gain in lines[at + 1]


def _judged(rows: list[tuple], variant_rows: list[tuple] = ()) -> dict[str, pd.DataFrame]:
    """Hand-built claim tables of one paper (VFedMH's title), as evaluate_claims gives them:
    rows (artefact, clause, profile, status, evidence, reading, tested)."""
    cols = ["artefact", "clause", "profile", "status", "evidence", "reading", "tested"]

    def frame(rs):
        return pd.DataFrame(list(rs), columns=cols).assign(paper="VFedMH")[claims.COLUMNS]
    return {"vfedmh": frame(rows), f"vfedmh{reproduction.VARIANTS_SUFFIX}": frame(variant_rows)}


def test_the_largest_profile_that_tested_a_clause_speaks_for_it() -> None:
    """A quick-profile disagree is not a finding where the paper profile looked at records and
    found the difference within noise; it is where the paper profile has no records."""
    NT, DIS = claims.NOT_TESTABLE, claims.DISAGREE
    within = _judged([("Table III", "A beats B", "paper", NT, "A > B in 6 of 9 cells; ...: within the seeds' noise", "", True),
                      ("Table III", "A beats B", "quick", DIS, "A > B in 0 of 3 cells; -4.7", "", True)])
    lines = reproduction.findings_section(within, ["paper", "quick"])
    assert not any("A beats B" in line for line in lines)
    unrecorded = _judged([("Table III", "A beats B", "paper", NT, "no records", "", False),
                          ("Table III", "A beats B", "quick", DIS, "A > B in 0 of 3 cells; -4.7", "", True)])
    lines = reproduction.findings_section(unrecorded, ["paper", "quick"])
    assert any(line.startswith("  - *disagree* at the quick profile — Table III: A beats B") for line in lines)


def test_a_verdict_another_reading_changes_is_marked_with_both_verdicts() -> None:
    """A clause whose verdict differs under a labelled reading shows both verdicts and which
    reading gives which, in the report's findings and in the README's block, with its cell split."""
    main = [("Table II", "EASTER beats PyVertical", "paper", claims.DISAGREE,
             "MNIST: EASTER > PyVertical in 0 of 3 cells; paired difference -0.28 ± 0.08 points (mean ± s.e., "
             "3 seeds as the replicates (...))", "1/C reading", True)]
    twin = [("Table II (no 1/C)", "EASTER beats PyVertical", "paper", claims.NOT_TESTABLE,
             "within the seeds' noise", "no 1/C", True)]
    lines = reproduction.findings_section(_judged(main, twin), ["paper", "quick"])
    line = next(x for x in lines if "EASTER beats PyVertical" in x)
    assert "contingent on the reading: *disagree* under 1/C reading; *not testable at this profile* under no 1/C" in line
    assert "ahead in 0 of 3 cells" in line and "the seed as the replicate" in line
    report = "\n".join([*lines, "## Beyond the papers\n", "## VFedMH\n"])
    readme = reproduction.readme_findings(report)
    assert "  - *disagree* under 1/C reading — Table II: EASTER beats PyVertical (ahead in 0 of 3 cells); " \
           "*not testable* under no 1/C" in readme
    same = reproduction.findings_section(_judged(main, [twin[0][:3] + (claims.DISAGREE,) + twin[0][4:]]),
                                         ["paper", "quick"])
    assert "the same under every reading" in next(x for x in same if "EASTER beats PyVertical" in x)
    # a twin with no records yet says nothing: "not recorded", and the clause is not marked
    unrecorded = reproduction.findings_section(
        _judged(main, [twin[0][:3] + (claims.NOT_TESTABLE, "no recorded pair", "no 1/C", False)]), ["paper", "quick"])
    line = next(x for x in unrecorded if "EASTER beats PyVertical" in x)
    assert "*not recorded* under no 1/C" in line and "contingent" not in line


def test_the_report_counts_how_often_quick_decides_as_the_paper_profile() -> None:
    A, D = claims.AGREE, claims.DISAGREE
    judged = _judged([("Fig. 1", "x", "paper", A, "", "", True), ("Fig. 1", "x", "quick", A, "", "", True),
                      ("Fig. 2", "y", "paper", A, "", "", True), ("Fig. 2", "y", "quick", D, "", "", True)])
    text = "\n".join(reproduction.findings_section(judged, ["paper", "quick"]))
    assert "of the 2 clauses both decide, the quick profile decides 1 the same way" in text
    assert "Fig. 2: y: *agree* at the paper profile, *disagree* at the quick profile" in text


def test_provenance_counts_the_records_received_from_another_machine() -> None:
    """The report's provenance line of an artefact says how many of its records were received
    from another machine (vflkit.ops.windows.receive's mark); with none received it says nothing of it."""
    def rec(seed: int, received: bool) -> dict:
        out = {"config": {"seed": seed}, "finished": "2026-12-06T10:00:00+0000",
               "environment": {"device": "cuda", "device_name": "NVIDIA H100", "git_commit": "abc1234"}}
        return {**out, "received": {"from": "lent-gpu", "at": "2026-12-06T11:00:00+0000"}} if received else out

    here = reproduction._provenance("paper", range(3), [rec(0, False), rec(1, False)])
    assert "received" not in here
    line = reproduction._provenance("paper", range(3), [rec(0, True), rec(1, False), rec(2, True)])
    assert line.startswith(here.split(";")[0].replace("2 of 3", "3 of 3"))
    assert line.endswith("; 2 received from another machine")



def _write_table(empty: Path, paper: str, profile: str, name: str, rows: list[dict]) -> None:
    folder = empty / "figures" / paper / profile
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).reindex(columns=list(TABLE_COLUMNS)).to_csv(folder / name, index=False)


def _beside(cells: pd.DataFrame, **key: str) -> pd.DataFrame:
    """compare()'s rows of one printed cell."""
    hit = cells
    for col, value in key.items():
        hit = hit[hit[col] == value]
    return hit


def test_a_sensitivity_table_is_shown_beside_the_paper_but_not_counted(empty: Path) -> None:
    """APC-VFL's lr-0.01 rows (table2_lr0.01.csv) sit beside the paper's cell with their gap, but
    the count of compared cells and of those within 2 points is the paper-rate rows' alone."""
    cell = {"paper": "APC-VFL", "table": "2", "dataset": "BreastCancerWisconsin", "method": "APC-VFL",
            "setting": "aligned=100", "model": "", "metric": "accuracy", "n_runs": 5, "profile": "paper"}
    _write_table(empty, "apc_vfl", "paper", "table2.csv", [{**cell, "value": 0.93, "std": 0.022}])
    _write_table(empty, "apc_vfl", "paper", "table2_lr0.01.csv", [{**cell, "value": 0.88, "std": 0.068}])
    cells = reproduction.compare("apc_vfl", PROFILES)
    hit = _beside(cells, table="2", dataset="BreastCancerWisconsin", method="APC-VFL", setting="aligned=100",
                  metric="accuracy")
    assert len(hit) == 2 and set(hit["status"]) == {reproduction.COMPARED}
    assert hit["counted"].tolist() == [True, False]  # the counted row first
    assert hit["value"].tolist() == [0.93, 0.88]
    assert "lr 0.01" in hit["not_counted"].iloc[1] and hit["not_counted"].iloc[0] == ""
    summary = reproduction.table_summary(cells).set_index("table")
    assert summary.loc["2", "compared"] == 1 and summary.loc["2", "shown, not counted"] == 1
    assert summary.loc["2", f"within ±{reproduction.POINTS:g} points"] == "0 of 1"  # 0.93 against 0.956: 2.6 points
    view = reproduction._cells_view(hit)
    assert view["counted"].tolist()[0] == "yes" and view["counted"].tolist()[1].startswith("no: ")


def test_both_heter_aggvfl_readings_and_every_rate_sit_beside_the_papers_cell(empty: Path) -> None:
    """VFedMH Table III shows Heter_aggVFL as the ensemble (counted) and as each party's own
    logits (labelled, not counted) beside the paper's 36.29; Table IV shows the paper's rate 0.05
    (counted) and the optimizer's standard rate (labelled, not counted) beside the paper's Adam."""
    t3 = {"paper": "VFedMH", "table": "III", "dataset": "MNIST", "setting": "", "model": "CNN",
          "metric": "test_accuracy_pct", "std": 0.1, "n_runs": 3, "profile": "paper"}
    _write_table(empty, "vfedmh", "paper", "table3.csv",
                 [{**t3, "method": "Heter_aggVFL", "value": 98.47},
                  {**t3, "method": "Heter_aggVFL (own logits)", "value": 40.0},
                  {**t3, "method": "Heter_aggVFL", "model": "LeNet", "value": 98.47}])
    t4 = {"paper": "VFedMH", "table": "IV", "dataset": "MNIST", "method": "VFedMH", "model": "LeNet",
          "metric": "test_accuracy_pct", "std": 0.1, "n_runs": 3, "profile": "paper"}
    _write_table(empty, "vfedmh", "paper", "table4.csv",
                 [{**t4, "setting": "optimizer=Adam", "value": 56.87},
                  {**t4, "setting": "optimizer=Adam, lr=0.001", "value": 98.2}])
    cells = reproduction.compare("vfedmh", PROFILES)
    heter = _beside(cells, table="III", dataset="MNIST", method="Heter_aggVFL", model="CNN")
    assert heter["value"].tolist() == [98.47, 40.0] and heter["counted"].tolist() == [True, False]
    assert heter["paper_value"].tolist() == [36.29, 36.29]
    assert heter["our_label"].iloc[1] == "Heter_aggVFL (own logits)" and "own logits" in heter["not_counted"].iloc[1]
    adam = _beside(cells, table="IV", dataset="MNIST", setting="optimizer=Adam", model="LeNet")
    assert adam["value"].tolist() == [56.87, 98.2] and adam["counted"].tolist() == [True, False]
    assert adam["our_label"].iloc[1] == "optimizer=Adam, lr=0.001" and "lr=0.001" in adam["not_counted"].iloc[1]
    summary = reproduction.table_summary(cells).set_index("table")
    assert summary.loc["III", "compared"] == 2 and summary.loc["IV", "compared"] == 1  # III: CNN, LeNet
    assert summary.loc["III", "shown, not counted"] == 1 and summary.loc["IV", "shown, not counted"] == 1
    assert "(as Heter_aggVFL (own logits))" in reproduction._cells_view(heter)["ours from"].iloc[1]
    # a reading the paper profile lacks shows from the quick profile, beside the paper profile's ensemble
    _write_table(empty, "vfedmh", "quick", "table3.csv",
                 [{**t3, "method": m, "model": "LeNet", "value": v, "profile": "quick"}
                  for m, v in (("Heter_aggVFL", 97.0), ("Heter_aggVFL (own logits)", 23.0))])
    lenet = _beside(reproduction.compare("vfedmh", PROFILES), table="III", dataset="MNIST", method="Heter_aggVFL",
                    model="LeNet")
    assert lenet[["profile", "value", "counted"]].values.tolist() == [["paper", 98.47, True], ["quick", 23.0, False]]
    assert lenet["not_counted"].iloc[1] == ("another reading (own logits) of Heter_aggVFL; "
                                            "quick profile: reduced scale, not the paper's")


def test_reduced_scale_values_are_shown_but_not_counted(empty: Path) -> None:
    """A value on another model (AdptVFedConv's VGG-16 at width 1/8) or from the quick profile
    (fewer images and epochs than the paper) is shown beside the paper's cell, not counted."""
    _write_table(empty, "adptvfedconv", "quick", "table2.csv", [
        {"paper": "AdptVFedConv", "table": "2", "dataset": "CIFAR-10", "method": "AdptVFedConv", "setting": "",
         "model": "VGG-16 at width 1/8", "metric": "top1_accuracy_pct", "value": 29.19, "std": 1.6, "n_runs": 3,
         "profile": "quick"}])
    adpt = reproduction.compare("adptvfedconv", PROFILES)
    hit = _beside(adpt, table="2", dataset="CIFAR-10", method="AdptVFedConv")
    assert len(hit) == 1 and hit["status"].item() == reproduction.COMPARED and not hit["counted"].item()
    assert "VGG-16 at width 1/8" in hit["not_counted"].item()
    assert reproduction.table_summary(adpt).set_index("table").loc["2", "compared"] == 0


def test_a_stand_in_datasets_values_are_shown_but_not_counted(empty: Path) -> None:
    """EASTER's Criteo values come from a 1,999-row sample of the paper's 45 M rows: beside the
    paper's number with their gap, not counted; MNIST's in the same table are."""
    base = {"paper": "EASTER", "table": "II", "method": "EASTER", "setting": "heterogeneous", "model": "party1",
            "std": 0.1, "n_runs": 3, "profile": "paper"}
    _write_table(empty, "easter", "paper", "table2.csv", [
        {**base, "dataset": "MNIST", "metric": "test_accuracy_pct", "value": 97.69},
        {**base, "dataset": "CRITEO", "metric": "test_auc_pct", "value": 65.0}])
    cells = reproduction.compare("easter", PROFILES)
    mnist = _beside(cells, table="II", dataset="MNIST", method="EASTER", model="party1")
    criteo = _beside(cells, table="II", dataset="CRITEO", method="EASTER", model="party1")
    assert mnist["counted"].tolist() == [True] and criteo["counted"].tolist() == [False]
    assert "45 M" in criteo["not_counted"].item() and criteo["status"].item() == reproduction.COMPARED
    assert reproduction.table_summary(cells).set_index("table").loc["II", "compared"] == 1


def test_readme_times_are_the_measured_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's command times come from scripts/time_commands.py's file, with the machine and
    commit they were measured on; without the file the block says they are not measured."""
    import json as json_mod

    monkeypatch.setattr(reproduction, "project_root", lambda: tmp_path)  # the file: <root>/results/device/
    assert "Not measured yet" in reproduction.readme_times()
    (tmp_path / "results" / "device").mkdir(parents=True)
    (tmp_path / "results" / reproduction.COMMAND_TIMES).write_text(json_mod.dumps({"commands": {"make test": {
        "command": "make test", "seconds": 780, "exit_status": 0, "closing_line": "1300 passed in 770.00s",
        "tree_clean_after": True, "commit": "abc1234", "when": "2026-12-06",
        "machine": {"cpu": "AMD EPYC", "cores": 2, "load_average_at_start": 0.4}}}}))
    block = reproduction.readme_times()
    assert "`make test` took 13 min on a fresh clone (AMD EPYC, 2 cores, load average 0.4" in block
    assert "`abc1234`" in block and "1300 passed" in block and "tree clean after it" in block
