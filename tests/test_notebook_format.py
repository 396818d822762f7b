"""The committed notebooks are in the form JupyterLab saves them: opening one does not mark it
modified, and saving it unchanged gives no diff."""

import json
import platform
from pathlib import Path

import nbformat
import pytest

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
    if not any("save_figure(" in cell.source for cell in code):
        pytest.fail(f"{path.name} saves no figure: every study draws at least one")
    shown = sum("image/png" in out.get("data", {}) for cell in code for out in cell.get("outputs", []))
    assert shown > 0, (f"{path.name} was committed without its figures: does its first code "
                       f"cell call report.set_style()? Then re-execute it (`python -m vflkit.study "
                       f"--commit-notebooks notebooks/{path.name}`)")
