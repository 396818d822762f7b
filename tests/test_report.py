"""Tests for vflkit.report: reference numbers, the joined long format, and the writers."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from vflkit import report
from vflkit.errors import ConfigError


def test_reference_numbers_ship_with_the_package():
    """Each paper's printed numbers load, in the reference long format."""
    ref = report.load_reference("vfedmh")
    assert list(ref.columns[:9]) == list(report.KEY_COLUMNS) + ["value", "std"]
    row = ref[(ref.table == "II") & (ref.dataset == "MNIST") & (ref.method == "VFedMH") & (ref.model == "CNN")]
    assert row["value"].item() == pytest.approx(97.58)
    assert len(report.load_reference("multi_vfl")) == 0  # Multi-VFL prints no table of numbers
    for paper in ("easter", "apc_vfl", "adptvfedconv"):
        assert len(report.load_reference(paper)) > 0


def test_join_puts_paper_numbers_beside_ours(tmp_path):
    """Our rows get the paper's value/std; rows the paper lacks get none; the CSV has every column."""
    ours = pd.DataFrame([
        {"table": "II", "dataset": "MNIST", "method": "Local", "setting": "local", "model": "CNN",
         "metric": "test_accuracy_pct", "value": 30.0, "std": 1.0, "n_runs": 3},
        {"table": "II", "dataset": "MNIST", "method": "Local", "setting": "local", "model": "Tiny",
         "metric": "test_accuracy_pct", "value": 20.0, "std": 0.0, "n_runs": 1},
    ])
    joined = report.join_reference(ours, "vfedmh", profile="quick")
    assert joined["paper_value"].iloc[0] == pytest.approx(23.47)
    assert joined["paper_std"].iloc[0] == pytest.approx(2.36)
    assert pd.isna(joined["paper_value"].iloc[1])
    assert (joined["paper"] == "VFedMH").all() and (joined["profile"] == "quick").all()
    path = report.write_table(joined, "vfedmh", "quick", "II", root=tmp_path)
    assert path == tmp_path / "vfedmh" / "quick" / "tableII.csv"
    assert list(pd.read_csv(path).columns) == list(report.TABLE_COLUMNS)
    pivot = report.side_by_side(joined, index=["method"], columns="model")
    assert pivot.loc["Local", "CNN"] == "30.00 ± 1.00 (paper 23.47 ± 2.36)"
    # a cell no row fills (here SplitNN/Tiny) reads "not recorded", never NaN
    more = report.join_reference(ours.assign(method="SplitNN").iloc[:1], "vfedmh", profile="quick")
    pivot = report.side_by_side(pd.concat([joined, more]), index=["method"], columns="model")
    assert pivot.loc["SplitNN", "Tiny"] == report.NOT_RECORDED and pivot.notna().all().all()


def test_save_figure_writes_png_and_data(tmp_path):
    """A figure is saved as PNG with the data it plots beside it as CSV."""
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    png = report.save_figure(fig, pd.DataFrame({"x": [1, 2], "y": [3, 4]}), "demo", "smoke", "1", root=tmp_path)
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert pd.read_csv(tmp_path / "demo" / "smoke" / "fig1.csv").shape == (2, 2)


def test_figures_go_where_vflkit_figures_points(tmp_path, monkeypatch):
    """VFLKIT_FIGURES moves every table and figure (so a trial run leaves figures/ alone)."""
    monkeypatch.setenv("VFLKIT_FIGURES", str(tmp_path))
    assert report.output_dir("demo", "paper") == tmp_path / "demo" / "paper"
    monkeypatch.delenv("VFLKIT_FIGURES")
    assert report.output_dir("demo", "paper", root=tmp_path / "x").parent.parent == tmp_path / "x"


def test_bad_names_rejected():
    """Unknown papers and incomplete tables are errors."""
    with pytest.raises(ConfigError, match="Invalid paper 'vfed'"):
        report.load_reference("vfed")
    with pytest.raises(ConfigError, match="table lacks columns"):
        report.write_table(pd.DataFrame({"value": [1]}), "vfedmh", "smoke", "II")


def test_provenance_groups_records_by_machine_and_names_their_commits():
    """One row per device/CPU/torch with the run count and its commits (the most used first, then
    how many more); old records without the CPU still show."""
    env = {"git_commit": "abc1234", "vflkit_modified": False, "device": "cpu", "cpu": "X", "torch": "2"}
    records = [{"environment": env, "finished": "2026-01-01"}, {"environment": env, "finished": "2026-01-02"},
               {"environment": {"git_commit": "old", "device": "cpu", "torch": "2"}}]
    records += [{"environment": {**env, "git_commit": f"c{i}"}, "finished": "2026-01-03"} for i in range(3)]
    records += [{"environment": {**env, "git_commit": "c0"}, "finished": None}]  # migrated: no time kept
    df = report.provenance(records)
    assert df["runs"].tolist() == [6, 1]
    assert df.loc[0, "commits"] == "abc1234, c0, c1 +1 more" and df.loc[1, "commits"] == "old"
    assert (df.loc[0, "first_finished"], df.loc[0, "last_finished"]) == ("2026-01-01", "2026-01-03")
    assert df.loc[1, "cpu"] == "not recorded" and df.loc[1, "last_finished"] == ""


def test_seeds_stamp_says_when_points_have_fewer_seeds():
    """A figure whose curves stand on different numbers of seeds says so: one count where every
    point has the same seeds, the fewest and most otherwise, and the data's seeds without a point."""
    data = pd.DataFrame({"method": ["A"] * 3 + ["B"], "x": [1.0] * 4, "seed": [0, 1, 2, 0], "y": [1.0, 2, 3, 4]})
    assert report.seeds_stamp(data, point=["method", "x"]) == "1–3 seeds a point"
    assert report.seeds_stamp(data[data["method"] == "A"], point=["method", "x"]) == "3 seeds"
    assert report.seeds_stamp(data) == "3 seeds"
    assert report.seeds_stamp(data[data["seed"] == 0]) == "1 seed"
    assert report.seeds_stamp(data.drop(columns="seed"), point=["method"]) == ""
    with pytest.raises(ConfigError, match=r"point names columns \['dataset'\]"):
        report.seeds_stamp(data, point=["dataset"])


def _joined_table() -> pd.DataFrame:
    ours = pd.DataFrame([{"table": "II", "dataset": "MNIST", "method": "Local", "setting": "local", "model": "CNN",
                          "metric": "test_accuracy_pct", "value": 30.0, "std": 1.0, "n_runs": 3}])
    return report.join_reference(ours, "vfedmh", profile="quick")


def test_write_table_of_nothing_recorded_writes_nothing(tmp_path):
    """An empty table (no run recorded yet) leaves the committed CSV alone and returns None; a
    table with rows is written as before."""
    committed = tmp_path / "vfedmh" / "paper" / "table2.csv"
    committed.parent.mkdir(parents=True)
    committed.write_text("kept\n")
    assert report.write_table(pd.DataFrame(), "vfedmh", "paper", "2", root=tmp_path) is None
    assert committed.read_text() == "kept\n"
    assert report.write_table(_joined_table(), "vfedmh", "paper", "2", root=tmp_path) == committed
    assert pd.read_csv(committed)["value"].tolist() == [30.0]
    with pytest.raises(ConfigError, match="not both"):  # a bad call still fails on an empty table
        report.write_table(pd.DataFrame(), "vfedmh", "paper", root=tmp_path)


def test_side_by_side_and_show_word_an_empty_table():
    """A table with rows is shown as is; an empty one, through side_by_side too, as the note given."""
    shown = report.show(report.side_by_side(_joined_table(), index=["method"], columns="model"), empty="none yet")
    assert isinstance(shown, pd.DataFrame) and shown.loc["Local", "CNN"].startswith("30.00 ± 1.00")
    note = report.show(report.side_by_side(pd.DataFrame(), index=["method"], columns="model"),
                       empty="No paper-profile run of Table II recorded yet.")
    assert isinstance(note, report.Note) and note == "No paper-profile run of Table II recorded yet."
    assert note._repr_markdown_() == repr(note) == str(note)  # shown as text, not as a quoted string


def test_pending_summary_counts_runs_and_minutes_or_keeps_its_columns():
    """Pending runs are counted with their H100 minutes per dataset and need; none gives an empty
    frame with the same columns and index names."""
    pending = pd.DataFrame({"dataset": ["CIFAR10", "CIFAR10", "MNIST"], "method": ["a", "b", "c"],
                            "needs": ["GPU", "GPU", "CPU"], "h100_min": [10.0, 5.0, None]})
    out = report.pending_summary(pending)
    assert out.loc[("CIFAR10", "GPU"), "runs"] == 2 and out.loc[("CIFAR10", "GPU"), "h100_minutes"] == 15.0
    empty = report.pending_summary(pd.DataFrame())
    assert empty.empty and list(empty.columns) == ["runs", "h100_minutes"]
    assert list(empty.index.names) == ["dataset", "needs"]


def test_draw_writes_an_artefact_from_its_records_or_says_none_is_recorded(tmp_path):
    """``report.draw`` draws an artefact from the records given, writes its files and returns the
    drawing (a figure closed when not shown); with none of its runs recorded it writes nothing and
    returns an empty drawing (no figure); an artefact the study lacks is an error naming those it has."""
    from vflkit.studies import demo

    _, recs = demo.STUDY.recorded("quick")
    fig, data = report.draw(demo.STUDY, "Fig. 1", "quick", records=recs, root=tmp_path, display=False)
    assert len(data) and {p.name for p in (tmp_path / "demo" / "quick").iterdir()} == {"fig1.png", "fig1.csv"}
    assert not plt.fignum_exists(fig.number)
    assert report.draw(demo.STUDY, "Fig. 1", "quick", records=[], root=tmp_path / "none", display=False)[0] is None
    assert not (tmp_path / "none").exists()
    with pytest.raises(KeyError, match="no artefact 'Table 9'; it has Fig. 1"):
        report.draw(demo.STUDY, "Table 9", "quick", display=False)
