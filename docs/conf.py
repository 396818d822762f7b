"""Sphinx configuration of vflkit's book: ``make docs`` (``sphinx-build -c docs . _build/site``).

The source folder is the project's root, so the README, ``docs/``, ``figures/REPORT.md`` and the
committed notebooks are rendered where they are, their relative links intact; ``include_patterns``
keeps everything else (records, data, the package) out. The notebooks are rendered as committed,
with their outputs, and never executed (``nb_execution_mode = "off"``): they are the quick
profile's executed copies that ``make study`` writes and nbval checks.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

project = "vflkit"
author = "The vflkit authors"
release = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
version = release

extensions = ["myst_nb"]
root_doc = "docs/index"
include_patterns = ["README.md", "CHANGELOG.md", "docs/*.md", "figures/REPORT.md", "notebooks/*.ipynb"]
exclude_patterns = ["_build", ".venv", "notebooks/_executed"]

# notebooks: rendered from their committed outputs, never run
nb_execution_mode = "off"
# headings get GitHub's anchors, so the README's and the report's links into sections resolve
myst_heading_anchors = 4
myst_enable_extensions = ["dollarmath"]
# The report and the notebooks are generated, with headings that step from ## to #### (a profile
# under a paper's Claims); the rule is about hand-written pages, so it is not an error here.
suppress_warnings = ["myst.header"]

html_theme = "alabaster"
html_title = f"vflkit {release}"
html_static_path: list[str] = []
html_theme_options = {"nosidebar": False, "page_width": "1200px"}
# a static site that opens from disk (file://) as well as from a server
html_copy_source = False
html_show_sourcelink = False


def _root_redirect(app, exception) -> None:
    """An ``index.html`` at the site's root that opens the book's first page (the root document
    lives in ``docs/`` so that the README renders as itself)."""
    if exception is None and app.builder.format == "html":
        (Path(app.outdir) / "index.html").write_text(
            '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>vflkit</title>'
            '<meta http-equiv="refresh" content="0; url=docs/index.html"></head>'
            '<body><a href="docs/index.html">vflkit</a></body></html>\n')


def setup(app):
    app.connect("build-finished", _root_redirect)
