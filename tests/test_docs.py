"""Tests of the book (``make docs``): the site checker finds what is broken, and the built site,
every page, figure and internal link resolving, opens in a real headless browser.

The tests marked ``docs`` build the site with Sphinx (the ``docs`` extra) and drive Chromium;
``make docs`` runs them after its build, and CI (``.ci/run``) installs Chromium where it is
missing, so they never skip: without Sphinx or Chromium they fail and say what to install.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vflkit import sitecheck

ROOT = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _site(tmp_path: Path, pages: dict[str, str]) -> Path:
    site = tmp_path / "site"
    for name, html in pages.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(html)
    return site


def test_sitecheck_reports_a_missing_page_figure_and_anchor(tmp_path):
    """A link to a missing page, an image that is not there and an anchor no element carries are
    each reported with the page that makes them; a link out of the site is not checked."""
    site = _site(tmp_path, {
        "index.html": '<a href="docs/a.html#here">ok</a> <a href="docs/a.html#gone">x</a> <a href="nope.html">x</a>'
                      '<img src="fig.png"> <a href="https://example.org/x.html">out</a> <a href="#top">self</a>'
                      '<h1 id="top">t</h1>',
        "docs/a.html": '<section id="here"><a href="../index.html">up</a></section>'})
    broken = sitecheck.broken_links(site)
    assert broken == ["index.html: docs/a.html#gone (no element with id 'gone')",
                      "index.html: nope.html (no such file)", "index.html: fig.png (no such file)"]
    (site / "fig.png").write_bytes(b"")
    assert len(sitecheck.broken_links(site)) == 2


def test_sitecheck_command_line_exits_1_on_a_broken_link(tmp_path, capsys):
    """`python -m vflkit.sitecheck SITE` prints each broken link and exits 1; 0 when none."""
    site = _site(tmp_path, {"index.html": '<a href="missing.html">x</a>'})
    assert sitecheck.main([str(site)]) == 1
    assert "index.html: missing.html (no such file)" in capsys.readouterr().out
    (site / "missing.html").write_text("<p>here</p>")
    assert sitecheck.main([str(site)]) == 0


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The book built from this checkout as `make docs` builds it (warnings are errors); the
    folder ``VFLKIT_BOOK`` names instead, where set (`make docs-check` passes the one it built)."""
    if os.environ.get("VFLKIT_BOOK"):
        return Path(os.environ["VFLKIT_BOOK"]).resolve()
    try:
        import myst_nb  # noqa: F401
        import sphinx  # noqa: F401
    except ImportError as missing:
        pytest.fail(f"{missing.name} is not installed: pip install -e '.[docs]' (make docs does)")
    out = tmp_path_factory.mktemp("book") / "site"
    run = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-c", "docs", "-b", "html",
                          ".", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-4000:]
    return out


@pytest.mark.docs
def test_the_book_has_every_page_and_no_broken_internal_link(built):
    """The README, every docs/ page, the report and the six notebooks are pages of the site, and
    every page, figure and internal link of it resolves."""
    want = ["README.html", "CHANGELOG.html", "figures/REPORT.html",
            *(f"docs/{p.stem}.html" for p in (ROOT / "docs").glob("*.md")),
            *(f"notebooks/{p.stem}.html" for p in (ROOT / "notebooks").glob("*.ipynb"))]
    assert [p for p in want if not (built / p).is_file()] == []
    assert sitecheck.broken_links(built) == []
    # the notebooks are rendered with their committed outputs (figures), not run again
    assert "<img" in (built / "notebooks" / "vfedmh.html").read_text()


def _browser() -> str:
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found is None:
        pytest.fail("no headless browser: install Chromium (apt-get install chromium; .ci/run does)")
    return found


def _dom(browser: str, url: str, tmp_path: Path) -> str:
    """The page's DOM after its scripts ran, as headless Chromium leaves it. Its profile, cache
    and config go to ``tmp_path``, nothing to the user's home."""
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)}
    run = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}/profile",
                          "--virtual-time-budget=10000", "--dump-dom", url],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


@pytest.mark.docs
def test_the_book_opens_in_a_headless_browser(built, tmp_path):
    """Opened from disk in Chromium, the site's root leads to the book's contents, the README
    shows the findings and the notebooks' table, the report its findings, and the search (the
    site's JavaScript) finds the papers' terms."""
    browser = _browser()
    home = _dom(browser, (built / "index.html").as_uri(), tmp_path)
    assert "<title>vflkit — vflkit" in home and "toctree-l1" in home, home[:500]
    readme = _dom(browser, (built / "README.html").as_uri(), tmp_path)
    assert "What was found" in readme and "arxiv.org/abs/2310.13367v2" in readme
    report = _dom(browser, (built / "figures" / "REPORT.html").as_uri(), tmp_path)
    assert 'id="findings"' in report and "report_vfedmh.png" in report
    search = _dom(browser, (built / "search.html").as_uri() + "?q=blinding", tmp_path)
    assert "Search finished, found" in search and "found 0 pages" not in search


def test_the_readmes_own_data_block_runs_verbatim():
    """The README's one block of Python registers the table it says, as written (docs/own-data.md
    goes on from there)."""
    from vflkit.data import is_registered, unregister_dataset

    readme = (ROOT / "README.md").read_text()
    blocks = [b.split("\n", 1)[1] for b in readme.split("```")[1::2] if b.startswith("python\n")]
    assert len(blocks) == 1, "the README shows own data in one block"
    try:
        exec(compile(blocks[0], "README.md", "exec"), {})
        assert is_registered("my_wine")
    finally:
        unregister_dataset("my_wine")
