"""The examples of docs/command-line.md and docs/own-data.md run verbatim and print what they show."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
NUMBER = re.compile(r"\b\d+(?:\.\d+)?\b")


def blocks(page: str) -> list[tuple[str, str]]:
    """The fenced code blocks of ``docs/<page>`` as (language, text), in order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer((DOCS / page).read_text())]


def shown_matches(expected: list[str], actual: list[str]) -> bool:
    """The shown output lines appear in ``actual`` in order; ``...`` skips lines, and a number
    may differ in its digits (scores and times are the machine's)."""
    pos = 0
    skipping = False
    for line in expected:
        if line == "...":
            skipping = True
            continue
        pattern = re.compile(NUMBER.sub(r"<<N>>", re.escape(line)).replace("<<N>>", r"\d+(?:\.\d+)?") + "$")
        while pos < len(actual) and not pattern.match(actual[pos]):
            if not skipping:
                return False
            pos += 1
        if pos == len(actual):
            return False
        pos += 1
        skipping = False
    return skipping or pos == len(actual)


def run_page(page: str, folder: Path) -> None:
    """Write the page's file blocks (first line ``# <name>``), run its ``console`` blocks and
    its ``python`` blocks (one interpreter, in order), checking each shown output."""
    env = {**os.environ, "VFLKIT_RESULTS": str(folder / "results"), "VFLKIT_FIGURES": str(folder / "figures"),
           "PYTHONPATH": str(DOCS.parent)}
    python: list[str] = []
    for lang, text in blocks(page):
        first = text.splitlines()[0] if text.strip() else ""
        if lang in ("toml", "yaml", "json") and first.startswith("# "):
            (folder / first[2:].strip()).write_text(text)
        elif lang == "console":
            lines = text.rstrip("\n").splitlines()
            cmds = [i for i, line in enumerate(lines) if line.startswith("$ ")]
            for n, i in enumerate(cmds):
                words = shlex.split(lines[i][2:])
                assert words[0] == "python", lines[i]
                done = subprocess.run([sys.executable, *words[1:]], cwd=folder, env=env, capture_output=True,
                                      text=True, timeout=600)
                shown = lines[i + 1:cmds[n + 1] if n + 1 < len(cmds) else len(lines)]
                out = done.stdout if done.returncode == 0 else done.stderr
                assert done.returncode in (0, 2) and shown_matches(shown, out.splitlines()), \
                    f"{page}: {lines[i]}\nrc {done.returncode}\nshown:\n" + "\n".join(shown) + \
                    f"\ngot:\n{done.stdout}\n{done.stderr[-3000:]}"
        elif lang == "python":
            python.append(text)
    if python:
        script = folder / "page.py"
        script.write_text("\n".join(python))
        done = subprocess.run([sys.executable, str(script)], cwd=folder, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{page}'s Python failed:\n{done.stderr[-3000:]}"


def test_the_matcher_checks_lines_and_lets_numbers_differ():
    """The comparison the pages rely on: numbers may differ, words may not."""
    assert shown_matches(["a 53.40 %", "...", "end"], ["a 61.2 %", "x", "y", "end"])
    assert not shown_matches(["a 53.40 %"], ["b 53.40 %"])
    assert not shown_matches(["a"], ["a", "extra"])
    assert shown_matches(["key 2ce3d2d4f4212f9b"], ["key 2ce3d2d4f4212f9b"])
    assert not shown_matches(["key 2ce3d2d4f4212f9b"], ["key 2ce3d2d4f4212f9c"])


@pytest.mark.parametrize("page", ["command-line.md", "own-data.md"])
def test_a_docs_page_runs_verbatim(page, tmp_path):
    run_page(page, tmp_path)
