"""Check a built static site: every page, image and internal link resolves.

``python -m vflkit.sitecheck _build/site`` walks every HTML file of the site (``make docs``
builds it) and reports each ``href``/``src`` inside the site that names a missing file, or a
``#fragment`` that no element of its page carries; it exits 1 if there is any. Sphinx's ``-W``
catches links it resolves itself; this catches what it passes through untouched (raw HTML in
the report, notebook outputs, links to anchors of other pages).
"""

from __future__ import annotations

import argparse
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

__all__ = ["Page", "broken_links", "main"]


class Page(HTMLParser):
    """One HTML file's ids and the links (``href``, ``src``) it makes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("id", "name"):
                self.ids.add(value)
            elif (name == "href" and tag in ("a", "link")) or (name == "src" and tag in ("img", "script")):
                self.links.append(value)


def _parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(errors="replace"))
    return page


def broken_links(site: Path) -> list[str]:
    """``"page: link (why)"`` for every internal link of ``site`` that does not resolve."""
    site = Path(site).resolve()
    pages = {p: _parse(p) for p in sorted(site.rglob("*.html"))}
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "data:", "javascript:")):
                continue  # outside the site (checked by no one offline)
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(site)}: {link}"
            if not target.is_file():
                broken.append(f"{where} (no such file)")
            elif not target.is_relative_to(site):
                broken.append(f"{where} (outside the site)")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where} (no element with id {parts.fragment!r})")
    return broken


def main(argv: list[str] | None = None) -> int:
    """``python -m vflkit.sitecheck SITE``: print each broken link; 1 if any, else 0."""
    parser = argparse.ArgumentParser(prog="python -m vflkit.sitecheck", description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built site's folder (make docs: _build/site)")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        print(f"{args.site}: no index.html; build the site first with `make docs`", file=sys.stderr)
        return 1
    broken = broken_links(args.site)
    for line in broken:
        print(line)
    n_pages = sum(1 for _ in args.site.rglob("*.html"))
    print(f"[sitecheck] {n_pages} pages, {len(broken)} broken internal links", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
