"""Lesson lines a reader can see: no sideways scrolling at a 1300 px window, and a page that fits a phone.

Scope: the 30 numbered lesson pages (zh and en) of the session's one build of the site, measured in headless
Chromium during the one visit ``tests/test_browser.py`` makes to every page (:func:`measure_lines`; the tests
that hold the bounds below are there, under the same names, since they read that module's visits). At a
1300 px window it counts the output blocks (```` ```text ```` fences: traces and terminal output) and the
code blocks (every other highlighted block) whose content is wider than the block (``scrollWidth >
clientWidth``): no output block may be, and at least ``CODE_VISIBLE_SHARE`` of the code blocks must be whole.
At a 390 px phone viewport no lesson page may be wider than the screen; a screenshot of lesson 13 there is
written to ``build/screenshots/`` for a person to look at. What makes the lines fit is
``docs/stylesheets/lines.css`` (see its comment).

The same visit measures, on every page of the site at 1300 px (:func:`measure_boxes`): each table's width
against the box it sits in (Material's scrolling wrapper), so no table is wider than its box; and, on each
highlighted block that carries Material's copy button, whether the button covers any character of the block's
first line as laid out (the stylesheet keeps that line short of the button).

Without a browser (here): every section of a Python file embedded in a lesson gets the file's own line
numbers (``site_scripts/build/mkdocs_hooks.py``), so a ``file:line`` in the text can be found on the page.

Non-scope: what the lines say; every other page of the site (``tests/test_browser.py`` opens them all).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from site_scripts.build.mkdocs_hooks import with_source_line_numbers

if TYPE_CHECKING:
    from playwright.sync_api import Page
    from session_builds import Hosted

WINDOW = {"width": 1300, "height": 900}
PHONE = {"width": 390, "height": 844}
LESSONS = 15  # the fourteen and lesson 15, the prefix cache
CODE_VISIBLE_SHARE = 0.9
PHONE_SHOT = "lessons/13-restoring-caches/"
LESSON_DIR = re.compile(r"^\d{2}-")
LESSON_URL = re.compile(r"/((?:en/)?lessons/\d{2}-[^/]+/)$")  # a numbered lesson's site-relative path
# Per block: [is an output block, content width, visible width, first line]
BLOCKS = """() => [...document.querySelectorAll('.md-content .highlight code')].map(code => [
  code.closest('.highlight').classList.contains('language-text'),
  code.scrollWidth, code.clientWidth, code.textContent.split(String.fromCharCode(10))[0].slice(0, 60),
])"""
PAGE_WIDTH = "() => document.documentElement.scrollWidth"
# Per table: [width it takes, width of its box, its header row]
TABLES = """() => [...document.querySelectorAll('.md-content table')].map(table => [
  Math.round(Math.max(table.scrollWidth, table.getBoundingClientRect().width)),
  (table.closest('.md-typeset__scrollwrap') || table.parentElement).clientWidth,
  table.rows.length ? table.rows[0].textContent.replace(/\\s+/g, ' ').trim().slice(0, 60) : '',
])"""
# Per block with a copy button: [a character of its first line lies under the button, the block scrolls
# sideways, its first line]. The first line is the first line box: it ends at a newline or where it wraps.
COPY_BUTTONS = """() => [...document.querySelectorAll('.md-content .highlight pre')].flatMap(pre => {
  const nav = pre.querySelector(':scope > .md-code__nav'), code = pre.querySelector(':scope > code');
  if (!nav || !code) return [];
  const b = nav.getBoundingClientRect(), range = document.createRange();
  const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
  let top = null, covered = false;
  lines: for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.data.length; i++) {
      if (node.data[i] === '\\n') break lines;
      if (!node.data[i].trim()) continue;
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const r = range.getBoundingClientRect();
      if (top === null) top = r.top;
      if (r.top > top + r.height / 2) break lines;
      covered = covered || (r.right > b.left && r.left < b.right && r.bottom > b.top && r.top < b.bottom);
    }
  }
  return [[covered, code.scrollWidth > code.clientWidth, code.textContent.split('\\n')[0].slice(0, 60)]];
})"""

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


def measure_lines(page: Page, url: str, window: dict[str, int],
                  screenshots: Path) -> tuple[list[Block], int] | None:
    """On a lesson page loaded at ``window`` (1300 px wide): its highlighted blocks as laid out, then its
    width at the phone's viewport (the same page resized: a second visit would double the loading time, and
    the widths are CSS layout, which a resize recomputes as a fresh load does). None for other pages."""
    path = LESSON_URL.search(url)
    if path is None:
        return None
    assert window["width"] == WINDOW["width"], "the lines are measured at WINDOW"
    blocks = [Block(path[1], *row) for row in page.evaluate(BLOCKS)]
    page.set_viewport_size(PHONE)
    width = page.evaluate(PAGE_WIDTH)
    if path[1] == PHONE_SHOT:
        screenshots.mkdir(parents=True, exist_ok=True)
        page.locator(".language-text.highlight").first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshots / "lesson-13-phone.png"))
    return blocks, width


@dataclass(frozen=True)
class Boxes:
    """What a page of the site showed at WINDOW: its tables, its blocks' first lines by the copy button."""

    tables: list[tuple[int, int, str]]  # (width the table takes, width of its box, its header row)
    copy_blocks: list[tuple[bool, bool, str]]  # (first line under the copy button, block scrolls, first line)


def measure_boxes(page: Page) -> Boxes:
    """The tables and the copy buttons of a page loaded at WINDOW (call it before :func:`measure_lines`,
    which resizes the page to a phone's)."""
    return Boxes([tuple(row) for row in page.evaluate(TABLES)],
                 [tuple(row) for row in page.evaluate(COPY_BUTTONS)])


def cut_report(cut: list[Block]) -> str:
    return "\n".join(f"{b.page}: {b.width} px in {b.visible} px: {b.first_line!r}" for b in cut)


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
