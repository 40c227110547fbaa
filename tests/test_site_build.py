"""The site builds with ``mkdocs build --strict`` and the result has what a reader needs.

Scope: the session's one strict build (the ``hosted`` fixture of ``tests/conftest.py``, built as the
publishing workflow builds it; any warning, a missing snippet, a broken link or anchor fails it), then checks
on the HTML: both languages are there, every page links to its other-language version, and no page shows
an unprocessed ``--8<-- "path"`` include. Non-scope: the page text, and the rendering in a browser.
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from session_builds import Hosted

TAG = re.compile(r"<[^>]+>")
# an include line that pymdownx.snippets left alone; section markers ("# --8<-- [start:x]") may show in the
# API page's source views and are not includes
RAW_INCLUDE = re.compile(r'-{1,}8<-{1,}\s+["\']')

pytestmark = pytest.mark.slow  # the site build, made once per session, takes a minute or two


@pytest.fixture(scope="module")
def site(hosted: Hosted) -> Path:
    return hosted.site_dir


def zh_pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("index.html") if p.relative_to(site).parts[0] != "en")


def test_strict_build_writes_both_languages(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "en" / "index.html").is_file()


def test_every_zh_page_has_an_en_page(site: Path) -> None:
    missing = [p for p in zh_pages(site) if not (site / "en" / p.relative_to(site)).is_file()]
    assert not missing


def test_every_page_links_to_both_languages(site: Path) -> None:
    for page in site.rglob("index.html"):
        text = page.read_text(encoding="utf-8")
        assert 'hreflang="zh"' in text and 'hreflang="en"' in text, page.relative_to(site)


def test_language_switch_points_at_the_same_page(site: Path) -> None:
    page = site / "lessons" / "index.html"
    text = page.read_text(encoding="utf-8")
    assert re.search(r'href="\.\./en/lessons/"[^>]*hreflang="en"', text)
    text_en = (site / "en" / "lessons" / "index.html").read_text(encoding="utf-8")
    assert re.search(r'href="\.\./\.\./lessons/"[^>]*hreflang="zh"', text_en)


def test_no_page_shows_a_raw_snippet_include(site: Path) -> None:
    for page in site.rglob("*.html"):
        shown = html.unescape(TAG.sub("", page.read_text(encoding="utf-8")))
        assert not RAW_INCLUDE.search(shown), f"unprocessed include in {page.relative_to(site)}"


def test_mermaid_is_served_by_the_site_itself(site: Path) -> None:
    assert (site / "javascripts" / "mermaid.min.js").stat().st_size > 1_000_000
    text = (site / "index.html").read_text(encoding="utf-8")
    assert 'src="javascripts/mermaid.min.js"' in text
    assert "cdn.jsdelivr" not in text and "fonts.googleapis" not in text


HREF = re.compile(r'(?:href|src)="(?P<url>[^"]*)"')


def links_to_nothing(site: Path, site_path: str) -> set[str]:
    """Every built link or source, in any page of ``site``, to a file the site does not have.

    ``site_path`` is the path of the URL the site was built for: absolute links (the 404 page's, the home
    link) start with it.
    """
    problems = set()
    for page in site.rglob("*.html"):
        for match in HREF.finditer(page.read_text(encoding="utf-8")):
            url = html.unescape(match["url"]).split("#")[0].split("?")[0]
            if not url or re.match(r"[a-z][a-z0-9+.-]*:|//", url):
                continue  # same page, or another site
            if url.startswith("/"):
                assert url.startswith(site_path), f"{page.relative_to(site)}: {url} is outside the site"
                target = site / url.removeprefix(site_path).lstrip("/")
            else:
                target = page.parent / url
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                problems.add(f"{page.relative_to(site)}: {match['url']}")
    return problems


def test_every_internal_link_of_the_built_site_resolves(site: Path, hosted: Hosted) -> None:
    """The strict build checks links in Markdown pages; notebooks are rendered by nbconvert, whose links
    mkdocs neither checks nor rewrites, so this checks every page's built links to a file of the site."""
    problems = links_to_nothing(site, urlsplit(hosted.site_url).path)
    assert not problems, "links to nothing:\n" + "\n".join(sorted(problems))
