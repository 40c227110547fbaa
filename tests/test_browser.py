"""The built site in a real browser (headless Chromium), served the way it is hosted.

Scope: the session's one build of the site as the publishing workflow makes it (``mike deploy dev``: the site
under ``<site_url>dev/``, a ``versions.json`` beside the versions; the ``hosted`` fixture of
``tests/conftest.py``), served from 127.0.0.1 under that sub-path by a
small static server that answers a missing path with the site's ``404.html``, as GitHub Pages does. Headless
Chromium then opens every page of both languages (the list comes from the build's ``sitemap.xml``) and checks
that no page logs a console error, that no request fails or leaves 127.0.0.1, that each page's language menu
leads to its twin, that code blocks are highlighted and mermaid diagrams drawn, that search finds a lesson by
a Chinese word and by an English word, and that the 404 page works below the sub-path. The same visit of each
lesson page measures its lines against the bounds of ``tests/test_line_widths.py`` (a second visit of the 30
lesson pages would be a minute of a test run), and the same visit of every page measures its tables against
their boxes and its code blocks' first lines against the copy button. Screenshots of both home pages and one
lesson in each language are written to ``build/screenshots/`` (a build artefact, not committed).

Non-scope: what the pages say, and the strict build's own checks (``tests/test_site_build.py``). GitHub Pages
itself: on the hosted site a missing path gets the ``404.html`` at the root of the published branch, which
``mike`` does not write there by itself.

Needs the Debian packages ``chromium`` and ``fonts-noto-cjk`` (``.ci/run`` installs them); without
``/usr/bin/chromium`` every test here is skipped. Playwright drives the system Chromium; it never downloads
a browser of its own.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit
from xml.etree import ElementTree

import pytest
from session_builds import Hosted
from test_line_widths import (
    CODE_VISIBLE_SHARE,
    LESSON_URL,
    LESSONS,
    PHONE,
    Block,
    Boxes,
    cut_report,
    lesson_paths,
    measure_boxes,
    measure_lines,
)

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page, Request, Route

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = ROOT / "build" / "screenshots"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
VIEWPORT = {"width": 1300, "height": 900}  # the window the lesson lines are measured at (test_line_widths)
LOAD_TIMEOUT_MS = 60_000  # a page waits for its network to go quiet; the other test worker shares the CPU
TABS_AT_ONCE = 4
# Every page starts Material's search worker, which fetches the whole search index (4 MB) and builds it: about
# a second of CPU a page. The visits of every page give it an empty worker instead (search then never answers,
# and nothing else changes); the search tests open their pages with the real one.
NO_SEARCH_WORKER = """
const RealWorker = window.Worker;
window.Worker = function (url, options) {
  const search = String(url).includes("/workers/search");
  return new RealWorker(search ? URL.createObjectURL(new Blob([""])) : url, options);
};
"""
DIAGRAM_TIMEOUT_MS = 10_000  # a diagram mermaid cannot parse is never drawn
LESSON = "lessons/01-life-of-a-request/"
SEARCHES = {"zh": "调度", "en": "scheduler"}  # language -> a word that occurs in the lessons of that language
HEADINGS_AND_NAV = ".md-content h1, .md-content h2, .md-content h3, .md-content h4, .md-nav__link"
SHOWING_RAW_IDS = "items => items.map(e => e.textContent.trim()).filter(s => /\\{#[\\w-]+\\}/.test(s))"
SITEMAP_NS = {"s": "http://www.sitemaps.org/schemas/sitemap/0.9"}
# Material replaces each <pre class="mermaid"> by a <div class="mermaid"> and draws the diagram into a closed
# shadow root. OPEN_SHADOW_ROOTS, run in every page before its scripts, opens them so the SVG can be checked.
OPEN_SHADOW_ROOTS = """
const attachShadow = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (init) { return attachShadow.call(this, {...init, mode: "open"}); };
"""
DRAWN_DIAGRAMS = (
    "[...document.querySelectorAll('div.mermaid')]"
    ".filter(d => d.shadowRoot && d.shadowRoot.querySelector('svg g text, svg g foreignObject')).length"
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.is_file(),
        reason="needs /usr/bin/chromium (Debian packages chromium and fonts-noto-cjk; .ci/run installs them)",
    ),
]


@dataclass
class Visit:
    """What the browser saw on one page."""

    url: str
    lang: str
    console_errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    switch: dict[str, str] = field(default_factory=dict)  # hreflang -> absolute href of the language menu
    mermaid_blocks: int = 0
    mermaid_drawn: int = 0
    raw_attributes: list[str] = field(default_factory=list)  # headings or nav entries showing "{#id}"
    blocks: list[Block] = field(default_factory=list)  # a lesson's highlighted blocks at VIEWPORT
    phone_width: int | None = None  # a lesson's width at a phone's viewport
    boxes: Boxes = field(default_factory=lambda: Boxes([], []))  # tables and copy buttons at VIEWPORT


def _handler(root: Path, not_found: Path) -> type[http.server.SimpleHTTPRequestHandler]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        """Static files under ``root``; a missing one gets ``not_found``, status 404 (as on GitHub Pages)."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
            if code != 404:
                super().send_error(code, message, explain)
                return
            body = not_found.read_bytes()
            self.send_response(404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def base_url(hosted: Hosted) -> Iterator[str]:
    """The site's URL on a free loopback port, e.g. ``http://127.0.0.1:PORT/mini-deepinfer/dev/``."""
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), _handler(hosted.root, hosted.site_dir / "404.html")
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}{urlsplit(hosted.site_url).path}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def external_requests() -> list[str]:
    """Every request the browser tried to send anywhere but 127.0.0.1 (each was blocked)."""
    return []


@pytest.fixture(scope="module")
def context(
    base_url: str, external_requests: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrowserContext]:
    from playwright.sync_api import sync_playwright

    origin = "{0.scheme}://{0.netloc}".format(urlsplit(base_url))

    def guard(route: Route, request: Request) -> None:
        network = urlsplit(request.url).scheme in ("http", "https", "ws", "wss")
        if network and not request.url.startswith(origin):
            external_requests.append(request.url)
            route.abort()
        else:
            route.continue_()

    with sync_playwright() as playwright:
        browser_context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport=VIEWPORT,
        )
        browser_context.set_default_timeout(LOAD_TIMEOUT_MS)
        browser_context.route("**/*", guard)
        browser_context.add_init_script(OPEN_SHADOW_ROOTS)
        try:
            yield browser_context
        finally:
            browser_context.close()


def site_pages(hosted: Hosted, base_url: str) -> list[tuple[str, str]]:
    """(language, local URL) of every page in the build's sitemap, both languages."""
    tree = ElementTree.parse(hosted.site_dir / "sitemap.xml")
    pages = []
    for loc in tree.iterfind("s:url/s:loc", SITEMAP_NS):
        url = (loc.text or "").strip()
        assert url.startswith(hosted.site_url), f"sitemap entry outside the site: {url}"
        path = url[len(hosted.site_url):]
        pages.append(("en" if path.startswith("en/") else "zh", base_url + path))
    return pages


def twin_url(base_url: str, url: str) -> str:
    path = url[len(base_url):]
    return base_url + (path[len("en/"):] if path.startswith("en/") else "en/" + path)


def _watch(page: Page, visit: Visit) -> None:
    page.on("console", lambda message: message.type == "error" and visit.console_errors.append(
        f"{message.text} ({message.location.get('url', '')})"
    ))
    page.on("pageerror", lambda error: visit.console_errors.append(f"uncaught: {error}"))
    page.on("response", lambda response: response.status >= 400 and visit.failed.append(
        f"{response.status} {response.url}"
    ))
    page.on("requestfailed", lambda request: visit.failed.append(f"{request.failure} {request.url}"))


def language_menu(page: Page) -> dict[str, str]:
    """hreflang -> absolute URL of each entry in the header's language menu."""
    return page.eval_on_selector_all(
        "a.md-select__link[hreflang]", "links => Object.fromEntries(links.map(a => [a.hreflang, a.href]))"
    )


def start_page(context: BrowserContext, url: str, lang: str, search: bool = True) -> tuple[Page, Visit]:
    """Open ``url`` in a new tab, watching it, without waiting for it to load; without ``search``, the page's
    search worker is an empty one (:data:`NO_SEARCH_WORKER`)."""
    page = context.new_page()
    visit = Visit(url, lang)
    _watch(page, visit)
    if not search:
        page.add_init_script(NO_SEARCH_WORKER)
    page.goto(url, wait_until="commit")
    return page, visit


def finish_page(page: Page, visit: Visit) -> None:
    """Wait until the page is loaded, its network quiet and its diagrams drawn; note what it shows."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    page.wait_for_load_state("networkidle")
    visit.mermaid_blocks = page.locator("pre.mermaid, div.mermaid").count()
    if visit.mermaid_blocks:
        try:
            all_drawn = f"() => {DRAWN_DIAGRAMS} === {visit.mermaid_blocks}"
            page.wait_for_function(all_drawn, timeout=DIAGRAM_TIMEOUT_MS)
        except PlaywrightTimeoutError:
            pass  # reported by test_every_mermaid_diagram_is_drawn
        visit.mermaid_drawn = page.evaluate(DRAWN_DIAGRAMS)
    visit.switch = language_menu(page)
    visit.raw_attributes = page.eval_on_selector_all(HEADINGS_AND_NAV, SHOWING_RAW_IDS)
    visit.boxes = measure_boxes(page)
    measured = measure_lines(page, visit.url, VIEWPORT, SCREENSHOTS)  # last: it resizes the page to a phone's
    if measured is not None:
        visit.blocks, visit.phone_width = measured


def open_page(context: BrowserContext, url: str, lang: str) -> tuple[Page, Visit]:
    """Open ``url`` in a new tab and wait for it (see :func:`finish_page`)."""
    page, visit = start_page(context, url, lang)
    finish_page(page, visit)
    return page, visit


@pytest.fixture(scope="module")
def visits(context: BrowserContext, hosted: Hosted, base_url: str) -> list[Visit]:
    """Every page of the site, opened once, TABS_AT_ONCE at a time (most of a visit is waiting)."""
    pages = site_pages(hosted, base_url)
    seen = []
    for first in range(0, len(pages), TABS_AT_ONCE):
        batch = [start_page(context, url, lang, search=False)
                 for lang, url in pages[first:first + TABS_AT_ONCE]]
        for page, visit in batch:
            finish_page(page, visit)
            page.close()
            seen.append(visit)
    return seen


def test_sitemap_lists_every_page_in_both_languages(visits: list[Visit], base_url: str) -> None:
    urls = {visit.url for visit in visits}
    zh = [visit.url for visit in visits if visit.lang == "zh"]
    assert zh and len(zh) * 2 == len(urls)
    assert all(twin_url(base_url, url) in urls for url in zh)


def test_every_page_loads_without_console_errors(visits: list[Visit]) -> None:
    errors = {visit.url: visit.console_errors for visit in visits if visit.console_errors}
    assert not errors


# -- lesson lines, measured in the same visits (bounds and measurement: tests/test_line_widths.py) -----------


def test_all_thirty_lesson_pages_are_measured(hosted: Hosted, visits: list[Visit], base_url: str) -> None:
    measured = {block.page for visit in visits for block in visit.blocks}
    assert len(lesson_paths(hosted)) == 2 * LESSONS
    assert measured == set(lesson_paths(hosted))
    assert {visit.url[len(base_url):] for visit in visits if visit.phone_width} == measured


def test_no_output_block_needs_sideways_scrolling_at_1300_px(visits: list[Visit]) -> None:
    outputs = [b for visit in visits for b in visit.blocks if b.output]
    assert outputs
    cut = [b for b in outputs if b.cut_off]
    assert not cut, f"{len(cut)} of {len(outputs)} output blocks cut off:\n{cut_report(cut)}"


def test_nine_code_blocks_in_ten_are_whole_at_1300_px(visits: list[Visit]) -> None:
    code = [b for visit in visits for b in visit.blocks if not b.output]
    cut = [b for b in code if b.cut_off]
    assert code
    assert 1 - len(cut) / len(code) >= CODE_VISIBLE_SHARE, (
        f"{len(cut)} of {len(code)} code blocks cut off:\n{cut_report(cut)}"
    )


def test_no_lesson_page_is_wider_than_a_phone(visits: list[Visit]) -> None:
    widths = {visit.url: visit.phone_width for visit in visits if visit.phone_width is not None}
    wide = {url: width for url, width in widths.items() if width > PHONE["width"]}
    assert widths and not wide, f"pages wider than {PHONE['width']} px: {wide}"


def test_no_table_on_any_page_is_wider_than_its_box_at_1300_px(visits: list[Visit], base_url: str) -> None:
    tables = {visit.url[len(base_url):]: visit.boxes.tables for visit in visits if visit.boxes.tables}
    assert any(not LESSON_URL.search("/" + path) for path in tables), "no table measured outside the lessons"
    wide = {path: [f"{width} px in {box} px: {header!r}" for width, box, header in rows if width > box]
            for path, rows in tables.items()}
    wide = {path: rows for path, rows in wide.items() if rows}
    assert not wide, f"tables wider than their box: {wide}"


def test_no_copy_button_covers_the_first_line_of_a_code_block(visits: list[Visit], base_url: str) -> None:
    # every block of a lesson; elsewhere the blocks that fit their box (one that scrolls can scroll clear)
    held = [(visit.url[len(base_url):], block) for visit in visits for block in visit.boxes.copy_blocks
            if LESSON_URL.search(visit.url) or not block[1]]
    assert sum(1 for path, _ in held if LESSON_URL.search("/" + path)) > 100
    covered = [f"{path}: {line!r}" for path, (under, _, line) in held if under]
    assert not covered, f"{len(covered)} first lines under the copy button:\n" + "\n".join(covered)


def test_no_request_fails(visits: list[Visit]) -> None:
    failed = {visit.url: visit.failed for visit in visits if visit.failed}
    assert not failed


def test_no_request_leaves_loopback(visits: list[Visit], external_requests: list[str]) -> None:
    assert visits and not external_requests


def test_language_menu_leads_each_page_to_its_twin(visits: list[Visit], base_url: str) -> None:
    wrong = {}
    for visit in visits:
        twin = twin_url(base_url, visit.url)
        expected = {visit.lang: visit.url, ("zh" if visit.lang == "en" else "en"): twin}
        if visit.switch != expected:
            wrong[visit.url] = visit.switch
    assert not wrong


def test_choosing_a_language_opens_the_twin_page(context: BrowserContext, base_url: str) -> None:
    page, _ = open_page(context, base_url + LESSON, "zh")
    for lang, expected in (("en", base_url + "en/" + LESSON), ("zh", base_url + LESSON)):
        page.hover(".md-header .md-select")
        with page.expect_navigation():
            page.click(f'.md-header a.md-select__link[hreflang="{lang}"]')
        assert page.url == expected
        assert page.locator("html").get_attribute("lang") == lang
    page.close()


def test_no_heading_or_nav_entry_shows_a_raw_heading_id(visits: list[Visit]) -> None:
    raw = {visit.url: sorted(set(visit.raw_attributes)) for visit in visits if visit.raw_attributes}
    assert not raw


def test_every_mermaid_diagram_is_drawn(visits: list[Visit]) -> None:
    assert {visit.lang for visit in visits if visit.mermaid_blocks} == {"zh", "en"}
    undrawn = {
        visit.url: f"{visit.mermaid_drawn} of {visit.mermaid_blocks} drawn"
        for visit in visits if visit.mermaid_drawn != visit.mermaid_blocks
    }
    assert not undrawn


@pytest.mark.parametrize("lang_prefix", ["", "en/"])
def test_code_blocks_are_highlighted_with_a_copy_button(
    context: BrowserContext, base_url: str, lang_prefix: str
) -> None:
    page, _ = open_page(context, base_url + lang_prefix + LESSON, "")
    code = page.locator(".md-content .highlight code")
    assert code.count() > 0
    assert page.locator(".md-content .highlight code span[class]").count() > 0  # pygments tokens
    # the copy button is added by Material's JavaScript
    assert page.locator('.md-content .highlight button.md-code__button[data-md-type="copy"]').count() > 0
    page.close()


@pytest.mark.parametrize("lang", sorted(SEARCHES))
def test_search_finds_a_lesson_in_the_language_of_the_query(
    context: BrowserContext, base_url: str, lang: str
) -> None:
    home = base_url + ("en/" if lang == "en" else "")
    page, _ = open_page(context, home, lang)
    page.click(".md-search__input")
    page.keyboard.type(SEARCHES[lang])
    # Material searches on keyup; Chinese characters arrive as inserted text, without one (as after an IME)
    page.keyboard.press("End")
    page.wait_for_selector(".md-search-result__item")
    hits = page.eval_on_selector_all(".md-search-result__item a", "links => links.map(a => a.href)")
    lessons = base_url + ("en/lessons/" if lang == "en" else "lessons/")
    assert any(hit.startswith(lessons) for hit in hits), hits
    page.close()


def test_missing_page_gets_the_404_page_below_the_sub_path(context: BrowserContext, base_url: str) -> None:
    missing = base_url + "lessons/no-such-lesson/"
    page = context.new_page()
    visit = Visit(missing, "")
    _watch(page, visit)
    response = page.goto(missing, wait_until="networkidle")
    assert response is not None and response.status == 404
    assert page.locator("h1#not-found").count() == 1
    # the document's own 404 is the only failure; stylesheets, scripts and fonts all load
    assert visit.failed == [f"404 {missing}"]
    assert all(missing in error for error in visit.console_errors), visit.console_errors
    assert page.eval_on_selector(".md-header", "e => getComputedStyle(e).position") == "sticky"
    homes = page.eval_on_selector_all(".md-content a[href]", "links => links.map(a => a.href)")
    assert homes == [base_url, base_url + "en/"]
    assert language_menu(page) == {"zh": base_url, "en": base_url + "en/"}  # the two home pages
    with page.expect_navigation():
        page.click(f'.md-content a[href$="{urlsplit(base_url).path}en/"]')
    assert page.url == base_url + "en/"
    page.close()


@pytest.mark.parametrize(
    ("name", "path"),
    [("zh-home", ""), ("en-home", "en/"), ("zh-lesson", LESSON), ("en-lesson", "en/" + LESSON)],
)
def test_screenshot_is_written(context: BrowserContext, base_url: str, name: str, path: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    target = SCREENSHOTS / f"{name}.png"
    page, _ = open_page(context, base_url + path, "")
    page.screenshot(path=str(target))
    page.close()
    assert target.stat().st_size > 10_000
