"""Tests for vflkit.bibliography: every paper vflkit reproduces or implements has one entry with a
link a reader can open, and every notebook's first cell cites its paper from it."""

import json
import re
from pathlib import Path

import pytest

from vflkit import bibliography, studies
from vflkit.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
#: The baselines the papers compare with, each implemented in vflkit/methods/.
BASELINES = ("castiglia2022cvfl", "romanini2021pyvertical", "huang2023vfedtrans", "chai2022fedsvd")


def _first_cell(notebook: str) -> str:
    """A committed notebook's first cell, as its markdown."""
    cell = json.loads((ROOT / notebook).read_text())["cells"][0]
    assert cell["cell_type"] == "markdown", f"{notebook} opens with a {cell['cell_type']} cell"
    return "".join(cell["source"])


def test_every_paper_and_baseline_has_an_entry_with_a_link():
    """The five reported studies and the four baselines each have a title, authors, a venue and
    an https link that is their DOI or arXiv entry where they have one."""
    reported = [s.name for s in studies.studies() if s.in_report]
    assert len(reported) == 5 and {studies.get(s).cites for s in reported} | set(BASELINES) == set(bibliography.PAPERS)
    for paper in bibliography.PAPERS.values():
        assert paper.title and paper.authors and paper.venue and paper.url.startswith("https://")
        if paper.doi:
            assert paper.url == f"https://doi.org/{paper.doi}"
        elif paper.arxiv:
            assert paper.url == f"https://arxiv.org/abs/{paper.arxiv}"
        else:
            assert paper.note, f"{paper.key}: a link that is neither DOI nor arXiv says what it is"


def test_vfedmh_and_easter_cite_the_arxiv_version_their_numbers_come_from():
    """VFedMH and EASTER share one arXiv entry: the second version is VFedMH's, the third EASTER's."""
    assert bibliography.get(studies.get("vfedmh").cites).arxiv == "2310.13367v2"
    assert bibliography.get(studies.get("easter").cites).arxiv == "2310.13367v3"


def test_an_unknown_paper_is_refused_with_the_known_ones():
    """A name not in the bibliography fails in one line listing the names it knows."""
    with pytest.raises(ConfigError, match="choose one of wang2023vfedmh, wang2025easter"):
        bibliography.get("vfedhm")


@pytest.mark.parametrize("study", [s for s in studies.studies() if s.in_report], ids=lambda s: s.name)
def test_each_notebook_opens_by_citing_its_paper(study):
    """The notebook's first cell carries its paper's line from the bibliography, verbatim, and no
    internal file id of the paper's text."""
    first = _first_cell(study.notebook)
    assert bibliography.notebook_line(study.cites) in first
    assert not re.search(r"\b\d{3}_[0-9a-f]{16}\b", first), "an internal paper id in the notebook's first cell"


def test_the_demo_cites_the_method_it_runs():
    """The demo runs SplitNN against Local: its first cell cites PyVertical's SplitNN paper."""
    assert bibliography.citation(studies.get("demo").cites) in _first_cell(studies.get("demo").notebook)


def test_bibtex_has_every_entry_with_its_link():
    """bibtex() writes one entry per paper, keyed by vflkit's name, with its url."""
    text = bibliography.bibtex()
    for key, paper in bibliography.PAPERS.items():
        assert re.search(rf"^@\w+\{{{key},$", text, re.M) and f"url = {{{paper.url}}}" in text
