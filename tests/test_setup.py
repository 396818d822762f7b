"""Tests of the project set-up: pins agree, the README's two commands exist, no machine paths."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _pins(text: str) -> dict[str, str]:
    return {m.group(1).lower(): m.group(2) for m in re.finditer(r"^\s*-?\s*([A-Za-z0-9_.-]+)==([^\s#]+)", text, re.M)}


def test_environment_yml_matches_constraints():
    """Every version environment.yml pins is the one constraints.txt pins."""
    conda = _pins((ROOT / "environment.yml").read_text())
    pinned = _pins((ROOT / "constraints.txt").read_text())
    assert conda, "environment.yml pins nothing"
    mismatched = {name: (v, pinned.get(name)) for name, v in conda.items() if pinned.get(name) != v}
    assert not mismatched, f"environment.yml and constraints.txt disagree: {mismatched}"
    assert pinned["torch"] == "2.14.1" and pinned["torchvision"] == "0.29.1"


def test_readme_opens_with_the_two_commands():
    """The README shows `make study` and `make test` before anything else but its findings, and
    CI runs the latter."""
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```")[1]
    assert [line.split("#")[0].strip() for line in first_block.strip().splitlines()] == ["make study", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_no_paths_of_a_particular_machine():
    """Code and docs speak of the project only: no absolute paths of a developer's machine."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    offenders = []
    for name in tracked:
        path = ROOT / name
        if path.suffix not in {".py", ".md", ".ipynb", ".yml", ".toml", ".txt", ""} or not path.is_file():
            continue
        text = path.read_text(errors="ignore")
        if re.search(r"/work/|/home/\w+|/root/|/Users/\w+|\.\./shared", text) and name != "tests/test_setup.py":
            offenders.append(name)
    assert not offenders, f"machine-specific paths in {offenders}"


#: The command-line modules (``python -m vflkit.<name>``): each has ``main(argv)`` and a
#: ``__main__`` guard.
CLI_MODULES = sorted(".".join(p.relative_to(ROOT / "vflkit").with_suffix("").parts)
                     for p in [*(ROOT / "vflkit").glob("*.py"), *(ROOT / "vflkit" / "ops").glob("*.py")]
                     if "\ndef main(" in (text := p.read_text()) and 'if __name__ == "__main__":' in text)
#: Those whose module imports neither torch nor pandas nor a trainer or method (they load when a
#: run or a device is resolved). The others (the benchmark, the report) import torch with the
#: module, but on the command line parse their arguments first: every ``--help`` answers at once.
LIGHT_CLIS = ("ops.launcher", "run", "study")
#: What a command line's ``--help`` must not import (seconds each; a minute on a loaded machine).
#: (the family registry, the package vflkit.training, is light; a trainer is not)
HEAVY = ('torch', 'pandas', 'vflkit.training.split', 'vflkit.methods')


def test_the_light_clis_are_command_line_modules():
    """LIGHT_CLIS is not stale (each is a command-line module), and the search for command-line
    modules finds at least the five vflkit has (a search that found none would test nothing)."""
    assert set(LIGHT_CLIS) <= set(CLI_MODULES)
    assert {"ops.bench", "ops.launcher", "reproduction", "run", "study"} <= set(CLI_MODULES)


def _help_imports(setup: str, call: str) -> list[str]:
    """Run ``setup`` then ``call`` (which asks a CLI for ``--help``) in a fresh interpreter; check
    it printed its usage and exited 0, and return the :data:`HEAVY` modules it had imported."""
    import ast
    import sys

    code = (f"import sys, contextlib, io, importlib, runpy\n{setup}"
            "buf = io.StringIO()\n"
            "try:\n"
            "    with contextlib.redirect_stdout(buf):\n"
            f"        {call}\n"
            "except SystemExit as e:\n"
            "    assert e.code in (0, None), e.code\n"
            "assert buf.getvalue().startswith('usage:'), buf.getvalue()[:200]\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return ast.literal_eval(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", CLI_MODULES)
def test_cli_help_answers_and_the_light_ones_import_no_torch(module):
    """`python -m vflkit.<module> --help` prints its usage and exits 0; for the light CLIs it
    imports neither torch, pandas, the trainers nor the methods."""
    heavy = _help_imports(f"cli = importlib.import_module('vflkit.{module}')\n", "cli.main(['--help'])")
    if module in LIGHT_CLIS:
        assert heavy == [], heavy


@pytest.mark.parametrize("module", CLI_MODULES)
def test_cli_help_on_the_command_line_imports_nothing_heavy(module):
    """`python -m vflkit.<module> --help` prints its usage before torch, pandas, a trainer or a
    method is imported, for every command line (the benchmark's and the report's too)."""
    heavy = _help_imports(f"sys.argv = ['vflkit.{module}', '--help']\n",
                          f"runpy.run_module('vflkit.{module}', run_name='__main__', alter_sys=True)")
    assert heavy == [], heavy


def test_one_version_everywhere_a_reader_cites_it():
    """pyproject.toml, vflkit.__version__, CITATION.cff and the changelog's newest section name
    one version, so results can be cited as of it."""
    import yaml

    import vflkit

    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    newest = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M).group(1)
    assert vflkit.__version__ == version == str(citation["version"]) == newest


def test_citation_and_license_agree_with_the_bibliography_and_pyproject():
    """CITATION.cff cites every paper of vflkit.bibliography by its title and link; the LICENSE
    file is the licence pyproject.toml declares."""
    import yaml

    from vflkit import bibliography

    refs = yaml.safe_load((ROOT / "CITATION.cff").read_text())["references"]
    assert [(r["title"], r["url"]) for r in refs] == [(p.title, p.url) for p in bibliography.PAPERS.values()]
    declared = re.search(r'^license = \{ text = "([^"]+)" \}', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert declared == "MIT" and (ROOT / "LICENSE").read_text().startswith("MIT License\n")
