"""Tests of the project set-up: pins agree, the README's two commands exist, no machine paths."""

import re
import subprocess
from pathlib import Path

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


def test_study_cli_help_imports_no_torch():
    """`python -m vflkit.study --help` answers at once: parsing the command line imports neither
    torch nor the trainers (they load when a run or a device is resolved)."""
    import subprocess
    import sys

    code = ("import sys, contextlib, io\nfrom vflkit import study\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    study.main(['--help'])\n"
            "print(sorted(m for m in ('torch', 'pandas', 'vflkit.training', 'vflkit.methods') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
