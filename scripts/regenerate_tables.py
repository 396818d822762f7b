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
    """Write the tables and figure data of the committed records under ``out/<paper>/<profile>/``."""
    import matplotlib.pyplot as plt

    from vflkit import report
    from vflkit.studies import adptvfedconv, apc_vfl, demo, easter, multi_vfl, vfedmh
    from vflkit.records import load_recorded

    def fig(result, paper, profile, number):
        figure, data = result
        report.save_figure(figure, data, paper, profile, number, root=out)
        plt.close(figure)

    # VFedMH, quick
    groups, recs = vfedmh.recorded("quick")
    for n, fn in (("2", vfedmh.table2), ("3", vfedmh.table3), ("4", vfedmh.table4)):
        report.write_table(fn(groups, recs, "quick"), "vfedmh", "quick", n, root=out)
    for n, fn in (("3", vfedmh.fig3), ("4", vfedmh.fig4), ("5", vfedmh.fig5)):
        fig(fn(groups, recs), "vfedmh", "quick", n)
    fig(vfedmh.blinding_figure(vfedmh.blinding_demo()), "vfedmh", "quick", "blinding")

    # Multi-VFL, quick
    recs = multi_vfl.recorded("quick")
    summary = multi_vfl.summary(recs)
    report.write_table(multi_vfl.long_table(summary, "quick"), "multi_vfl", "quick", name="final_accuracy", root=out)
    report.write_table(multi_vfl.long_traffic(multi_vfl.bytes_per_round(recs), "quick"), "multi_vfl", "quick",
                       name="traffic", root=out)
    fig(multi_vfl.figure2(recs), "multi_vfl", "quick", "2")
    fig(multi_vfl.figure3(recs), "multi_vfl", "quick", "3")

    # EASTER, quick (as notebooks/easter.ipynb draws them)
    groups, recs = easter.recorded("quick")
    s = easter.settings("quick")
    report.write_table(easter.table2(groups, recs, "quick"), "easter", "quick", "2", root=out)
    report.write_table(easter.table4(groups, recs, "quick"), "easter", "quick", "4", root=out)
    report.write_table(easter.table5(groups, recs, "quick", s["table5_datasets"]), "easter", "quick", "5", root=out)
    times = easter.comm_times(groups, recs, s["table5_datasets"])
    fig(easter.fig4(times), "easter", "quick", "4")
    fig(easter.fig5(times), "easter", "quick", "5")
    report.write_table(easter.table6(groups, recs, "quick"), "easter", "quick", "6", root=out)
    t7 = easter.table7(groups, recs, "quick")
    for topology in ("parallel", "shared_uplink"):
        report.write_table(t7[t7["topology"] == topology], "easter", "quick", name=f"table7_{topology}", root=out)
    fig(easter.fig6(groups, recs), "easter", "quick", "6")

    # AdptVFedConv, quick (as notebooks/adptvfedconv.ipynb draws them)
    recs = adptvfedconv.recorded("quick")
    t2 = adptvfedconv.table2(recs, profile="quick")
    report.write_table(t2, "adptvfedconv", "quick", "2", root=out)
    curve = adptvfedconv.curves(recs)
    report.save_figure(adptvfedconv.plot_fig3(curve, t2), curve, "adptvfedconv", "quick", "3", root=out)
    t3 = adptvfedconv.table3(recs, profile="quick")
    report.write_table(t3, "adptvfedconv", "quick", "3", root=out)
    report.save_figure(adptvfedconv.plot_fig4(t3), t3, "adptvfedconv", "quick", "4", root=out)
    report.write_table(adptvfedconv.extensions(recs, profile="quick"), "adptvfedconv", "quick", name="extensions",
                       root=out)
    plt.close("all")

    # Demo, quick
    recs = load_recorded(demo.configs("quick"), profile="quick")
    fig(demo.figure(recs), "demo", "quick", "1")

    # APC-VFL, quick
    profile = "quick"
    recs, lr_recs = apc_vfl.split_lr(apc_vfl.recorded(profile))
    if lr_recs:  # the lr-0.01 sensitivity runs: their Table 2 only
        report.write_table(apc_vfl.table2(lr_recs, profile=profile), "apc_vfl", profile, name="table2_lr0.01",
                           root=out)
    f5 = apc_vfl.fig5_frame(recs)
    report.save_figure(apc_vfl.plot_fig5(f5), apc_vfl.fig5_long(f5, profile=profile), "apc_vfl", profile, "5",
                       root=out)
    f6 = apc_vfl.fig6_frame(recs)
    report.save_figure(apc_vfl.plot_fig6(f6), f6, "apc_vfl", profile, "6", root=out)
    detail = apc_vfl.detail_frame(recs)
    for ds in dict.fromkeys(detail["dataset"]):
        report.save_figure(apc_vfl.plot_detail(detail, ds), detail[detail["dataset"] == ds], "apc_vfl",
                           profile, f"7_{ds}", root=out)
    report.write_table(apc_vfl.table2(recs, profile=profile), "apc_vfl", profile, "2", root=out)
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
