"""Every pending GPU run planned into windows on time-limited GPU machines, and run there.

``plan``, ``prepare``, ``dry-run`` and ``receive`` run here; ``check``, ``unpack``, ``start``,
``lane`` and ``collect`` on the GPU machine (the call scripts say which); ``pack`` here writes
CIFAR-10's packed arrays, which ``prepare --packed`` cuts into chunks. The library it runs is
:mod:`vflkit.ops.windows`, imported once a command is chosen, so ``--help`` imports no torch; how
a window works: docs/own-gpu.md, "On a time-limited GPU".
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from ..config import results_dir
from ..errors import ConfigError, DatasetCorruptError
from .machines import (CARRY_DIR, DEFAULT_MACHINE, DEFAULT_WORK, DEFAULT_WORKERS, DEVICE_KINDS, DEVICE_LACKS,
                       MACHINES, SLOW_CPU_MIN, check_packages)

#: The library's logger, whose planning stages the command line shows on stderr.
_log = logging.getLogger("vflkit.ops.windows")


def parser() -> argparse.ArgumentParser:
    """The command line, here and on the machine (every call's commands parse with it)."""
    ap = argparse.ArgumentParser(prog="python -m vflkit.ops.launcher", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    helps = {"plan": "plan every pending GPU run into windows",
             "prepare": "plan, then write what a real window's calls carry (.launch/) and print the calls",
             "dry-run": "plan, then rehearse the first window's calls on the CPU"}
    for name, what in helps.items():
        p = sub.add_parser(name, help=what)
        p.add_argument("--machine", default=DEFAULT_MACHINE.name, choices=sorted(MACHINES),
                       help="the kind of time-limited GPU machine a window is a job on (default "
                            f"{DEFAULT_MACHINE.name}; its limits: vflkit.ops.machines.MACHINES)")
        p.add_argument("--deadline-min", type=float, default=None,
                       help="a window's length in minutes (default: the machine's job time less its give-back)")
        p.add_argument("--include-slow-cpu", type=float, nargs="?", const=SLOW_CPU_MIN, default=None, metavar="MIN",
                       help="also plan the CPU-sized runs estimated above MIN CPU-minutes (default "
                            f"{SLOW_CPU_MIN:.0f}), first: C-VFL's paper runs")
        p.add_argument("--device-kind", default="h100", choices=sorted(DEVICE_KINDS))
        p.add_argument("--workers", type=int, default=DEFAULT_WORKERS, help="processes sharing the GPU")
        p.add_argument("--profile", default="paper")
        p.add_argument("--papers", default=None, help="only these studies (comma-separated)")
        p.add_argument("--rates", type=Path, default=None, help="a measured rate file (see windows.load_rate_file)")
        p.add_argument("--json", type=Path, default=None, help="write the plan here")
        if name == "dry-run":
            p.add_argument("--folder", type=Path, required=True, help="where the rehearsal writes")
            p.add_argument("--windows", type=int, default=1, help="windows to execute (default 1)")
        if name == "prepare":
            p.add_argument("--packed", type=Path, default=None, help="the folder `pack` wrote CIFAR-10's arrays to")
            p.add_argument("--no-wheels", action="store_true",
                           help="carry no wheels (the machine then lacks " + ", ".join(DEVICE_LACKS) + ")")
            p.add_argument("--carry", type=Path, default=None, help=argparse.SUPPRESS)  # tests: not .launch/
    work = ("--work", dict(type=Path, default=Path(DEFAULT_WORK)))
    device = ("--device", dict(default="cuda"))
    stand_in = ("--stand-in", dict(action="store_true", help="train each run's smoke stand-in (the rehearsal)"))
    window = ("--window", dict(type=int, required=True))
    machine_commands = {
        "check": ("(machine) which packages are missing",
                  [("--out", dict(type=Path, default=Path(os.environ.get("OUT", "."))))]),
        "unpack": ("(machine) store a carried data chunk", [("folder", dict(type=Path)), work]),
        "start": ("(machine) start a window's lanes, detached",
                  [("plan", dict(type=Path)), window, work, device,
                   ("--deadline-in", dict(type=float, required=True, help="seconds from now to the lanes' deadline")),
                   stand_in]),
        "lane": ("(machine) one lane's packs; started by start",
                 [("plan", dict(type=Path)), window, ("--lane", dict(type=int, required=True)), work, device,
                  ("--deadline", dict(type=float, required=True)), stand_in]),
        "collect": ("(machine) return the records finished so far in $OUT",
                    [work, ("--out", dict(type=Path, default=Path(os.environ.get("OUT", "out")))),
                     ("--wait", dict(type=float, default=0.0)),
                     ("--wait-cap", dict(type=float, default=None, help=argparse.SUPPRESS)),
                     ("--stop-mps-when-idle", dict(action="store_true"))]),
        "receive": ("take the records a call brought back into results/",
                    [("files_at", dict(type=Path)), ("--results", dict(type=Path, default=None))]),
        "pack": ("write CIFAR-10's packed arrays (here, where the data is)", [("out", dict(type=Path))]),
    }
    for name, (what, args) in machine_commands.items():
        p = sub.add_parser(name, help=what)
        for flag, kw in args:
            p.add_argument(flag, **kw)
    return ap


def main(argv: list[str] | None = None) -> int:
    """``python -m vflkit.ops.launcher <command>``: a ConfigError or DatasetCorruptError is one line
    on stderr, what is wrong and what to do, and exit code 2, as ``python -m vflkit.study`` does;
    other errors keep their traceback (a lane's, on the GPU machine, is what its log has to show)."""
    a = parser().parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[launcher] %(message)s"))
    level = _log.level
    _log.addHandler(handler)
    _log.setLevel(logging.INFO)
    try:
        if a.cmd == "check":  # on a bare machine, before its wheels: nothing of the library imported
            check_packages(a.out)
            return 0
        return _command(a)
    except (ConfigError, DatasetCorruptError) as exc:
        print(f"vflkit.ops.launcher: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    finally:
        _log.removeHandler(handler)
        _log.setLevel(level)


def _command(a: argparse.Namespace) -> int:
    """Run the parsed command ``a`` through the library; its exit code."""
    from . import windows as w  # the library: torch and the engine, once a command is chosen

    if a.cmd in ("plan", "prepare", "dry-run"):
        papers = a.papers.split(",") if a.papers else None
        machine = MACHINES[a.machine]
        kw = dict(profile=a.profile, workers=a.workers, papers=papers, rate_file=a.rates,
                  slow_cpu_min=a.include_slow_cpu, machine=machine)
        deadline_s = machine.deadline_s if a.deadline_min is None else a.deadline_min * 60
        if a.cmd == "prepare":
            pl = w.prepare(deadline_s, a.device_kind, carry=a.carry, wheels=not a.no_wheels, packed=a.packed, **kw)
        else:
            pl = w.plan(deadline_s, a.device_kind, **kw)
        print(w.plan_table(pl))
        if a.json:
            a.json.write_text(json.dumps(pl.to_dict(), indent=1))
        if a.cmd == "prepare":
            print(w.call_sequence(pl))
            print(f"[launcher] prepared {len(pl.windows)} windows under {a.carry or CARRY_DIR}/: plan.json, "
                  f"{sum(len(win.calls) for win in pl.windows)} calls, wheels {pl.wheels_bytes / 2**20:.1f} MiB")
        if a.cmd == "dry-run":
            rep = w.dry_run(pl, a.folder, windows=a.windows)
            failed = [c for c in rep["calls"] if c.get("rc", 0) != 0]
            print(f"[launcher] dry run: {len(rep['calls'])} calls written, "
                  f"{sum('rc' in c for c in rep['calls'])} executed ({len(failed)} failed), "
                  f"{len(rep['received'])} stand-in records received, {len(rep['refused'])} refused, "
                  f"{len(rep['failed_runs'])} stand-ins failed; "
                  f"packages missing here: {rep['missing_packages'] or 'none'}; under {a.folder}")
            for key, why in rep["failed_runs"].items():
                print(f"[launcher] stand-in {key} failed: {why.splitlines()[0]}")
            return 1 if failed or rep["refused"] or rep["failed_runs"] else 0
    elif a.cmd == "unpack":
        w.unpack(a.folder, a.work)
    elif a.cmd == "start":
        w.start(a.plan, a.window, work=a.work, device=a.device, deadline_in=a.deadline_in, stand_in=a.stand_in)
    elif a.cmd == "lane":
        w.lane(a.plan, a.window, a.lane, work=a.work, device=a.device, deadline=a.deadline, stand_in=a.stand_in)
    elif a.cmd == "collect":
        wait = a.wait if a.wait_cap is None else min(a.wait, a.wait_cap)
        w.collect(a.work, a.out, wait=wait, stop_mps=a.stop_mps_when_idle)
    elif a.cmd == "receive":
        taken, refused = w.receive(a.files_at, a.results or results_dir())
        print(f"[launcher] {len(taken)} records taken, {len(refused)} refused" +
              "".join(f"\n  refused {r}" for r in refused))
        return 1 if refused else 0
    elif a.cmd == "pack":
        print("[launcher] packed:", w.pack_cifar10(a.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
