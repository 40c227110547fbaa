"""The pages and the READMEs say how many lessons there are as the lesson files count them.

Scope: every "N lessons" (English) and "N 课" (Chinese, a numeral of ten or more) in ``README*.md`` and
``docs/**/*.md`` names the number of lesson pages ``docs/lessons/NN-*.md``; the one exception is lesson
15's own framing, "beyond the fourteen" / "the last of the fourteen lessons" / "十四课之外" /
"十四课到此结束", which names the first fourteen. Non-scope: lesson numbers ("lesson 15", "第 15 课").
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted(p for p in (ROOT / "docs" / "lessons").glob("[0-9][0-9]-*.md")
                 if not p.name.endswith(".en.md"))
EN_NUMBERS = {word: n for n, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
ZH_NUMBERS = {"十" + d: 10 + i for i, d in enumerate(["", *"一二三四五六七八九"])}
EN_COUNT = re.compile(r"(?<![\w-])(?P<before>beyond the |last of the )?(?P<n>%s) lessons\b"
                      % "|".join(EN_NUMBERS), re.IGNORECASE)
ZH_COUNT = re.compile(r"(?<!第)(?P<n>十[一二三四五六七八九]?)课(?P<after>之外|到此结束)?")
PAGES = sorted([*ROOT.glob("README*.md"), *(ROOT / "docs").rglob("*.md")])


def counts(text: str) -> list[int]:
    """The lesson counts a text states, lesson 15's framing of "the fourteen" left out."""
    found = [EN_NUMBERS[m["n"].lower()] for m in EN_COUNT.finditer(text) if not m["before"]]
    found += [ZH_NUMBERS[m["n"]] for m in ZH_COUNT.finditer(text) if not m["after"]]
    return found


def test_there_are_fifteen_lesson_files_and_the_framing_names_the_first_fourteen():
    assert len(LESSONS) == 15
    assert counts("the last of the fourteen lessons; 十四课之外; The fifteen lessons; 十五课") == [15, 15]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_lesson_count_a_page_states_is_the_number_of_lesson_files(page: Path):
    stated = counts(page.read_text(encoding="utf-8"))
    assert all(n == len(LESSONS) for n in stated), f"{page.name} says {stated}; there are {len(LESSONS)}"
