"""Tests for vflkit.files: whole files or none."""

import os
import subprocess
import sys
import threading

import pandas as pd
import pytest

from vflkit import report
from vflkit.files import atomic_path, clean_stale_tmp, write_json


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed mid-write")
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["t.csv"]


def test_concurrent_table_writers_never_leave_a_mixed_file(tmp_path):
    """Many threads writing the same table: the file is always one writer's whole table."""
    tables = [pd.DataFrame({c: [f"w{i}"] * 200 for c in report.TABLE_COLUMNS}) for i in range(8)]
    errors = []

    def write(t):
        try:
            for _ in range(5):
                report.write_table(t, "vfedmh", "smoke", "9", root=tmp_path)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(t,)) for t in tables]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors
    got = pd.read_csv(tmp_path / "vfedmh" / "smoke" / "table9.csv")
    assert len(got) == 200 and got.nunique().max() == 1


def test_stale_temporaries_of_dead_writers_are_cleaned(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".r.json.tmp{dead.pid}-1"
    stale.write_text("{")
    mine = tmp_path / f".s.json.tmp{os.getpid()}-1"
    mine.write_text("{")
    write_json(tmp_path / "r.json", {"a": 1})
    assert clean_stale_tmp(tmp_path) == [stale]
    assert mine.exists() and (tmp_path / "r.json").read_text().startswith("{")
