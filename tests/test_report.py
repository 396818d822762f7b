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


def test_provenance_groups_records_by_commit_and_cpu():
    """One row per commit/CPU with the run count; old records without the CPU still show."""
    env = {"git_commit": "abc1234", "vflkit_modified": False, "device": "cpu", "cpu": "X", "torch": "2"}
    records = [{"environment": env, "finished": "2026-01-01"}, {"environment": env, "finished": "2026-01-02"},
               {"environment": {"git_commit": "old", "device": "cpu", "torch": "2"}}]
    df = report.provenance(records)
    assert df["runs"].tolist() == [2, 1]
    assert df.loc[0, "last_finished"] == "2026-01-02" and df.loc[1, "cpu"] == "not recorded"


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
