"""Measured numbers that a page's prose repeats are the numbers of a generated table.

Scope: every number written in the running text of a page (outside included snippets) with a unit of
time, speed, bandwidth, size or ratio (``ms``, ``毫秒``, ``s``, ``秒``, ``min``, ``minutes``, ``分钟``,
``MB``, ``GiB``, ``×``, ``tok/s``, ``GB/s``, ``TB/s``) and at least two
significant digits: it must appear, at the precision the page writes it, in a table or text under
``snippets/`` (which the generators write and ``test_snippets_current`` keeps current). Non-scope: numbers
in included snippets (they are generated), one-digit numbers such as "1 ms" (too common to trace), numbers
without a unit.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MEASURED = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)\s*"
                      r"(?:ms|毫秒|×|tok/s|GB/s|TB/s|s\b|秒|min\b|minutes?\b|分钟|[KMG]i?B\b)")
DECIMAL = re.compile(r"\d+(?:\.\d+)?")


@functools.cache
def generated_numbers() -> tuple[str, ...]:
    """Every decimal number of the generated tables and texts under snippets/, as written there."""
    files = [p for p in (ROOT / "snippets").rglob("*") if p.suffix in (".md", ".txt")]
    return tuple(n for p in files for n in DECIMAL.findall(p.read_text(encoding="utf-8")))


def significant_digits(number: str) -> int:
    return len(number.replace(".", "").lstrip("0"))


def prose_numbers(page: Path) -> list[tuple[int, str]]:
    """(line, number) of each measured number in the page's own text."""
    found = []
    for line_no, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("--8<--"):
            continue
        numbers = (m.group(1) for m in MEASURED.finditer(line))
        found += [(line_no, n) for n in numbers if significant_digits(n) >= 2]
    return found


def is_generated(number: str, generated: tuple[str, ...]) -> bool:
    """True if some generated number, rounded to the page's decimals, is the page's number."""
    decimals = len(number.partition(".")[2])
    return any(len(g.partition(".")[2]) >= decimals and round(float(g), decimals) == float(number)
               for g in generated)


PAGES = sorted((ROOT / "docs").rglob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_measured_numbers_in_prose_come_from_a_generated_table(page: Path) -> None:
    generated = generated_numbers()
    typed = [f"line {line}: {number}" for line, number in prose_numbers(page)
             if not is_generated(number, generated)]
    assert not typed, f"{page.name}: numbers found in no snippet: {', '.join(typed)}"


def test_a_number_found_nowhere_is_caught() -> None:
    generated = generated_numbers()
    assert is_generated("11.86", generated)
    assert not is_generated("11.87", generated)


def test_seconds_minutes_and_megabytes_in_prose_are_measured_numbers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("took 838 s (about 14 minutes), 约 838 秒, 90 MB, 3.5 GiB, 12 min\n", encoding="utf-8")
    assert [n for _, n in prose_numbers(page)] == ["838", "14", "838", "90", "3.5", "12"]
