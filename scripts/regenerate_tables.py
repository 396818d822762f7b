"""Redraw every committed table and figure data file from the committed records, and compare.

``python scripts/regenerate_tables.py [OUT]`` rebuilds, from ``results/<profile>/<paper>/``
only (nothing is trained), the CSVs the notebooks write to ``figures/<paper>/<profile>/`` for
the committed quick records of every study into ``OUT`` (default: a temporary folder), and
lists every committed CSV that differs. The paper profile's CSVs, written as far as recorded,
are redrawn and compared by ``tests/test_reproduction.py`` (one place, since they grow with
every new record). It is how a change to the record format or the analysis code is
checked against the committed numbers (exit status 1 when one differs). The blinding figure's data comes from a
seeded demonstration, not from records, and is compared as well.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")


def regenerate(out: Path) -> None:
    """Write the tables and figure data of the committed quick records under ``out/<paper>/<profile>/``:
    every artefact of every study (the paper's and the study's own extras) as its notebook draws
    it (:func:`vflkit.report.draw`), and VFedMH's blinding demonstration."""
    import matplotlib.pyplot as plt

    from vflkit import report, studies
    from vflkit.studies import vfedmh

    for study in studies.studies():
        _, records = study.recorded("quick")
        for art in (*study.artefacts, *study.extras):
            report.draw(study, art.label, "quick", records=records, root=out, display=False)
    fig, data = vfedmh.blinding_figure(vfedmh.blinding_demo())
    report.save_figure(fig, data, "vfedmh", "quick", "blinding", root=out)
    plt.close("all")


def committed_csvs(committed: Path) -> list[Path]:
    """The CSVs at ``committed/<paper>/<profile>/`` that git tracks: a user's own outputs there
    (a smoke profile's, ignored by git) are not the committed tables. Outside a git checkout (a
    source archive), every such file, as the Makefile lists the notebooks."""
    import subprocess

    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", "*.csv"], cwd=committed, capture_output=True,
                                timeout=60)
    except (OSError, subprocess.SubprocessError):
        listed = None
    if listed is None or listed.returncode != 0:
        return sorted(committed.glob("*/*/*.csv"))
    names = [Path(n) for n in listed.stdout.decode().split("\0") if n]
    return sorted(committed / n for n in names if len(n.parts) == 3)


def compare(out: Path, committed: Path) -> list[str]:
    """The committed CSVs (:func:`committed_csvs`) whose regenerated copy differs or is missing."""
    bad = []
    for ours in committed_csvs(committed):
        if ours.parent.name == "paper":
            continue  # the paper profile as far as recorded: tests/test_reproduction.py redraws it
        theirs = out / ours.relative_to(committed)
        if not ours.exists():
            bad.append(f"{ours}: tracked by git but missing here (git checkout -- it)")
        elif not theirs.exists():
            bad.append(f"{ours}: not regenerated")
        elif theirs.read_bytes() != ours.read_bytes():
            bad.append(f"{ours}: differs from {theirs}")
    return bad


def main(argv: list[str]) -> int:
    from vflkit.config import project_root

    out = Path(argv[0]) if argv else Path(tempfile.mkdtemp(prefix="vflkit-tables-"))
    os.environ.setdefault("VFLKIT_OFFLINE", "1")
    regenerate(out)
    bad = compare(out, project_root() / "figures")
    for line in bad:
        print(line)
    print(f"{len(bad)} committed CSVs differ (regenerated under {out})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
