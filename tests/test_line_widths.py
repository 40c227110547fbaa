"""Lesson lines a reader can see: no sideways scrolling at a 1300 px window, and a page that fits a phone.

Scope: the 30 numbered lesson pages (zh and en) of the session's one build of the site, served as
``tests/test_browser.py`` does (the ``hosted`` fixture and its ``base_url``), opened in headless Chromium. At
a 1300 px window it counts the output blocks (```` ```text ```` fences: traces and terminal output) and the
code blocks (every other highlighted block) whose content is wider than the block (``scrollWidth >
clientWidth``): no output block may be, and at least ``CODE_VISIBLE_SHARE`` of the code blocks must be whole.
At a 390 px phone viewport no lesson page may be wider than the screen; a screenshot of lesson 13 there is
written to ``build/screenshots/`` for a person to look at. What makes the lines fit is
``docs/stylesheets/lines.css`` (see its comment).

Without a browser: every section of a Python file embedded in a lesson gets the file's own line numbers
(``site_scripts/mkdocs_hooks.py``), so a ``file:line`` in the text can be found on the page.

Non-scope: what the lines say; every other page of the site (``tests/test_browser.py`` opens them all).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from session_builds import Hosted

# base_url is test_browser's fixture: the session's one build (``hosted``), served the same way
from test_browser import CHROMIUM, CHROMIUM_FLAGS, SCREENSHOTS, base_url  # noqa: F401

from site_scripts.mkdocs_hooks import with_source_line_numbers

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

WINDOW = {"width": 1300, "height": 900}
PHONE = {"width": 390, "height": 844}
LESSONS = 15  # the fourteen and lesson 15, the prefix cache
CODE_VISIBLE_SHARE = 0.9
PHONE_SHOT = "lessons/13-restoring-caches/"
LESSON_DIR = re.compile(r"^\d{2}-")
# Per block: [is an output block, content width, visible width, first line]
BLOCKS = """() => [...document.querySelectorAll('.md-content .highlight code')].map(code => [
  code.closest('.highlight').classList.contains('language-text'),
  code.scrollWidth, code.clientWidth, code.textContent.split(String.fromCharCode(10))[0].slice(0, 60),
])"""
PAGE_WIDTH = "() => document.documentElement.scrollWidth"

NEEDS_CHROMIUM = pytest.mark.skipif(
    not CHROMIUM.is_file(), reason="needs /usr/bin/chromium (see tests/test_browser.py)"
)
SECTION = re.compile(r'-{1,}8<-{1,}[ \t]+"([^":]+\.py:[\w-]+)"')
SECTION_INCLUDE = re.compile(r'^[ \t]*```+[ \t]*[\w+-]+[^\n]*linenums="(?P<first>\d+)"[^\n]*\n'
                             r'[ \t]*-{1,}8<-{1,}[ \t]+"(?P<path>[^":]+\.py):(?P<section>[\w-]+)"', re.M)
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Block:
    """One highlighted block of a lesson page as the browser laid it out."""

    page: str
    output: bool
    width: int
    visible: int
    first_line: str

    @property
    def cut_off(self) -> bool:
        return self.width > self.visible


def lesson_paths(site: Hosted) -> list[str]:
    """Site-relative URLs of the numbered lessons in both languages (``lessons/01-…/``, ``en/lessons/…``)."""
    paths = []
    for prefix in ("", "en/"):
        lessons = site.site_dir / prefix / "lessons"
        paths += [f"{prefix}lessons/{d.name}/" for d in sorted(lessons.iterdir()) if LESSON_DIR.match(d.name)]
    return paths


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_FLAGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


def _open(browser: Browser, viewport: dict[str, int]) -> Page:
    page = browser.new_page(viewport=viewport)
    # nothing but the local server: a font or script from elsewhere would change the layout measured
    page.route("**/*", lambda route, request: (
        route.continue_() if request.url.startswith("http://127.0.0.1") else route.abort()
    ))
    return page


@pytest.fixture(scope="module")
def layouts(browser: Browser, hosted: Hosted, base_url: str) -> tuple[list[Block], dict[str, int]]:  # noqa: F811
    """Every lesson page, opened once: its highlighted blocks laid out at a 1300 px window, then its width
    at the phone's viewport (the same page resized: a second visit per page would double the loading time,
    and the widths are CSS layout, which a resize recomputes as a fresh load does)."""
    page = _open(browser, WINDOW)
    found, widths = [], {}
    for path in lesson_paths(hosted):
        page.set_viewport_size(WINDOW)
        page.goto(base_url + path, wait_until="networkidle")
        found += [Block(path, *row) for row in page.evaluate(BLOCKS)]
        page.set_viewport_size(PHONE)
        widths[path] = page.evaluate(PAGE_WIDTH)
        if path == PHONE_SHOT:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.locator(".language-text.highlight").first.scroll_into_view_if_needed()
            page.screenshot(path=str(Path(SCREENSHOTS, "lesson-13-phone.png")))
    page.close()
    return found, widths


@pytest.fixture(scope="module")
def blocks(layouts: tuple[list[Block], dict[str, int]]) -> list[Block]:
    return layouts[0]


def _report(cut: list[Block]) -> str:
    return "\n".join(f"{b.page}: {b.width} px in {b.visible} px: {b.first_line!r}" for b in cut)


@pytest.mark.slow
@NEEDS_CHROMIUM
def test_all_thirty_lesson_pages_are_measured(hosted: Hosted, blocks: list[Block]) -> None:
    assert len(lesson_paths(hosted)) == 2 * LESSONS
    assert {b.page for b in blocks} == set(lesson_paths(hosted))


@pytest.mark.slow
@NEEDS_CHROMIUM
def test_no_output_block_needs_sideways_scrolling_at_1300_px(blocks: list[Block]) -> None:
    outputs = [b for b in blocks if b.output]
    assert outputs
    cut = [b for b in outputs if b.cut_off]
    assert not cut, f"{len(cut)} of {len(outputs)} output blocks cut off:\n{_report(cut)}"


@pytest.mark.slow
@NEEDS_CHROMIUM
def test_nine_code_blocks_in_ten_are_whole_at_1300_px(blocks: list[Block]) -> None:
    code = [b for b in blocks if not b.output]
    cut = [b for b in code if b.cut_off]
    assert code
    assert 1 - len(cut) / len(code) >= CODE_VISIBLE_SHARE, (
        f"{len(cut)} of {len(code)} code blocks cut off:\n{_report(cut)}"
    )


@pytest.mark.slow
@NEEDS_CHROMIUM
def test_no_lesson_page_is_wider_than_a_phone(layouts: tuple[list[Block], dict[str, int]]) -> None:
    wide = {path: width for path, width in layouts[1].items() if width > PHONE["width"]}
    assert layouts[1] and not wide, f"pages wider than {PHONE['width']} px: {wide}"


@pytest.mark.parametrize("page", sorted((ROOT / "docs" / "lessons").glob("[0-9]*.md")), ids=lambda p: p.name)
def test_embedded_code_is_numbered_with_its_source_file_s_lines(page: Path) -> None:
    """After the hook, each embedded section's first shown line is that line of the source file."""
    numbered = with_source_line_numbers(page.read_text(encoding="utf-8"), ROOT)
    wrong = []
    for match in SECTION_INCLUDE.finditer(numbered):
        lines = (ROOT / match["path"]).read_text(encoding="utf-8").splitlines()
        first = int(match["first"])
        marker = f"--8<-- [start:{match['section']}]"
        if marker not in lines[first - 2] or not lines[first - 1].strip():
            wrong.append(f"{match['path']}:{match['section']} numbered from {first}")
    assert not wrong, wrong
    numbered_ones = {f"{m['path']}:{m['section']}" for m in SECTION_INCLUDE.finditer(numbered)}
    unnumbered = sorted(set(SECTION.findall(numbered)) - numbered_ones)
    assert not unnumbered, f"embedded without line numbers (is the section in the source?): {unnumbered}"
