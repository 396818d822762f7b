"""The committed notebooks are in the form JupyterLab saves them: opening one does not mark it
modified, and saving it unchanged gives no diff."""

import json
import platform
from pathlib import Path

import nbformat
import pytest

from vflkit import studies
from vflkit.study import normalize_notebook

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_is_in_jupyterlab_saved_form(path, tmp_path):
    text = path.read_text()
    nb = json.loads(text)
    assert nb["metadata"]["kernelspec"] == {"display_name": "Python 3 (ipykernel)", "language": "python",
                                            "name": "python3"}, "JupyterLab rewrites the kernelspec on opening"
    version = nb["metadata"]["language_info"]["version"]
    assert version.split(".")[:2] == platform.python_version().split(".")[:2]
    assert "widgets" not in nb["metadata"], "saved widget state (renders as empty progress bars)"
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            assert "application/vnd.jupyter.widget-view+json" not in out.get("data", {})
    # saving through nbformat (what JupyterLab's server does) gives the same bytes
    copy = tmp_path / path.name
    nbformat.write(nbformat.read(path, as_version=4), copy)
    assert copy.read_text() == text
    # and normalising is idempotent: the committed file is already normalised
    normalize_notebook(copy)
    assert json.loads(copy.read_text())["metadata"]["kernelspec"] == nb["metadata"]["kernelspec"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_shows_its_figures(path):
    """A notebook executed under a forced non-interactive backend (MPLBACKEND=Agg) saves its PNGs
    under figures/ but shows a reader none of them; `report.set_style()`, which every study notebook
    calls first, draws inline in a kernel, and this catches a notebook committed without its figures."""
    nb = nbformat.read(path, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    if not any("report.draw(" in cell.source or "save_figure(" in cell.source for cell in code):
        pytest.fail(f"{path.name} draws no artefact: every study draws at least one figure")
    shown = sum("image/png" in out.get("data", {}) for cell in code for out in cell.get("outputs", []))
    assert shown > 0, (f"{path.name} was committed without its figures: does its first code "
                       f"cell call report.set_style()? Then re-execute it (`python -m vflkit.study "
                       f"--commit-notebooks notebooks/{path.name}`)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_parameters_cell_takes_effect(path):
    """An edit of the parameters cell in JupyterLab takes effect: no later cell assigns profile or
    device (papermill's injected-parameters cell did, resetting them to what the notebook was
    committed with)."""
    nb = nbformat.read(path, as_version=4)
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: one cell tagged 'parameters', got {len(tagged)}"
    assert not [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])], \
        f"{path.name} was committed with papermill's injected-parameters cell"
    import re
    later = [c.source for c in nb.cells[tagged[0] + 1:] if c.cell_type == "code"]
    assert not [s for s in later if re.search(r"^(profile|device)\s*=", s, re.M)], \
        f"{path.name}: a cell after the parameters cell reassigns profile or device"


def test_normalize_drops_injected_cell_and_renumbers(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell('profile = "quick"', metadata={"tags": ["parameters"]}, execution_count=1),
        nbformat.v4.new_code_cell('profile = "smoke"', metadata={"tags": ["injected-parameters"]}, execution_count=2),
        nbformat.v4.new_code_cell("1 + 1", execution_count=3, outputs=[nbformat.v4.new_output(
            "execute_result", data={"text/plain": "2"}, execution_count=3)]),
    ])
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    normalize_notebook(path)
    out = nbformat.read(path, as_version=4)
    assert [c.source for c in out.cells] == ['profile = "quick"', "1 + 1"]
    assert [c.execution_count for c in out.cells] == [1, 2]
    assert out.cells[1].outputs[0]["execution_count"] == 2


def test_commit_notebooks_refuses_another_profile(capsys):
    from vflkit.study import main, notebook_defaults

    demo = ROOT / "notebooks" / "demo.ipynb"
    assert notebook_defaults(demo)["profile"] == "quick"
    with pytest.raises(SystemExit):
        main(["--profile", "smoke", "--commit-notebooks", str(demo)])
    assert "parameters cell says profile = 'quick'" in capsys.readouterr().err


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_committed_progress_bar_at_zero(path):
    """A bar drawn over runs that were all recorded stays at "0%" in the saved notebook: none is drawn."""
    nb = nbformat.read(path, as_version=4)
    texts = [str(out.get("data", {}).get("text/plain", "")) + str(out.get("text", ""))
             for c in nb.cells if c.cell_type == "code" for out in c.get("outputs", [])]
    assert not [t for t in texts if "0%|" in t], f"{path.name} keeps a 0% progress bar"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_notebook_calls_its_study_one_way(path):
    """One call shape in every notebook: ``<study>.STUDY.run(profile, device=device, seeds=seeds,
    overrides=overrides)`` returns the records; every table and figure of the paper's is drawn by
    ``report.draw(<study>.STUDY, label, profile, ...)`` (which writes its files), never written by
    hand; pending runs come from ``STUDY.pending``. No notebook reaches past these to a per-study
    twin (``results``, ``paper_so_far``, ``recorded``, ``pending``)."""
    import re

    code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
    calls = re.findall(r"records = (\w+)\.STUDY\.run\(profile, device=device, seeds=seeds, overrides=overrides\)", code)
    assert len(calls) == 1, (f"{path.name}: expected one "
                             "`records = <study>.STUDY.run(profile, device=device, seeds=seeds, overrides=overrides)`")
    drawn = set(re.findall(r"report\.draw\(\w+\.STUDY, \"([^\"]+)\"", code))
    for group in re.findall(r"for (?:label|extra) in \(([^)]*)\)", code):  # a loop over labels
        drawn |= set(re.findall(r'"([^"]+)"', group))
    study = studies.get(path.stem)
    assert {a.label for a in study.artefacts} <= drawn, f"{path.name} draws {sorted(drawn)}"
    assert "write_table(" not in code, f"{path.name} writes a table by hand; report.draw writes an artefact's files"
    for twin in (".results(", "paper_so_far(", "paper_figure", ".recorded(\"", "pending(groups"):
        assert twin not in code.replace("STUDY.recorded(", ""), f"{path.name} calls a per-study twin {twin}"


def test_normalize_merges_a_stream_split_by_flushing(tmp_path):
    """Two prints flushed apart are two stdout outputs; the saved notebook has one (no diff after a rerun)."""
    stream = nbformat.v4.new_output
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("show()", execution_count=1, outputs=[
        stream("stream", name="stdout", text="saved fig4.png\n"),
        stream("stream", name="stderr", text="a warning\n"),
        stream("stream", name="stdout", text="saved fig5.png\n"),
        stream("display_data", data={"text/plain": "<Figure>"}),
        stream("stream", name="stdout", text="done\n"),
    ])])
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    normalize_notebook(path)
    outs = nbformat.read(path, as_version=4).cells[0].outputs
    assert [(o.output_type, o.get("text")) for o in outs] == [
        ("stream", "saved fig4.png\nsaved fig5.png\n"), ("display_data", None), ("stream", "done\n")]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_notebook_has_no_stream_split_by_flushing(path):
    """A committed notebook is normalised: a rerun that flushes differently cannot change it."""
    nb = nbformat.read(path, as_version=4)
    split = [i for i, c in enumerate(nb.cells) for a, b in zip(c.get("outputs", []), c.get("outputs", [])[1:])
             if a.get("output_type") == b.get("output_type") == "stream" and a.get("name") == b.get("name")]
    assert not split, f"{path.name}: cells {split} hold consecutive outputs of one stream"


def test_make_lab_turns_jupyterlab_autosave_off():
    """`make lab` serves the committed notebooks with autosave off (JupyterLab 4 autosaves every
    120 s, which rewrote a committed, nbval-checked notebook after one Run All): a server started
    as the Makefile starts it reports autosave's default as false. Saving stays the user's act."""
    import os
    import re
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    recipe = re.search(r"^lab:.*\n\t(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1)
    assert "JUPYTER_CONFIG_PATH=$(CURDIR)/jupyter" in recipe, recipe
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(ROOT / "jupyter")}
    cmd = [sys.executable, "-m", "jupyterlab", "--ServerApp.root_dir=.", "--no-browser", f"--port={port}",
           "--ServerApp.ip=127.0.0.1", "--IdentityProvider.token=t"] + (["--allow-root"] if os.geteuid() == 0 else [])
    server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/lab/api/settings/@jupyterlab/docmanager-extension:plugin"
        request = urllib.request.Request(url, headers={"Authorization": "token t"})
        for _ in range(240):
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    settings = json.load(response)
                break
            except OSError:
                assert server.poll() is None, "jupyter lab exited"
                time.sleep(0.5)
        else:
            raise AssertionError("jupyter lab did not answer in 120 s")
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert settings["schema"]["properties"]["autosave"]["default"] is False
    assert settings["settings"].get("autosave", False) is False
