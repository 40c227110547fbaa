"""The Chinese pages' benchmark tables are in Chinese, and they are the English snippets translated.

Scope: ``site_scripts/performance/zh_tables.py`` and the ``snippets/bench/**/*.zh.md`` it writes beside each
English snippet: each is its English sibling translated as it stands now; a head cell or row label that no
rule covers is refused; no head cell or row label of a Chinese table is left in English beyond the terms the
Chinese pages use as they are; and the Chinese pages that show a benchmark table include the Chinese one.
Non-scope: the numbers (the English snippets' generators and tests) and the quality of the translation (a
reader's job).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from site_scripts.build.common import GeneratorError
from site_scripts.performance.zh_tables import translate

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "snippets" / "bench"
ZH_SNIPPETS = sorted(BENCH.rglob("*.zh.md"))
# English words the Chinese pages use as they are (terms, names, units)
KEPT = {"prefill", "decode", "token", "batch", "prompt", "roofline", "transformers", "eager", "launch", "MLP",
        "Gated", "DeltaNet", "mixer", "norm", "GiB", "GB", "dtype", "torch", "greedy", "checkout",
        "float", "bfloat"}  # the dtype names float32 and bfloat16
ZH_PAGES = [ROOT / "docs" / "performance" / "index.md",
            ROOT / "docs" / "notes" / "cross-round-and-chunking.md"]


def english_sibling(zh: Path) -> Path:
    return zh.with_name(zh.name.replace(".zh.md", ".md"))


def labels(markdown: str) -> list[str]:
    """The head cells and the first cell of each row of every table, code spans removed."""
    lines, found = markdown.splitlines(), []
    for number, line in enumerate(lines):
        if not line.startswith("|") or re.fullmatch(r"[|\s:-]+", line):
            continue
        cells = line.strip().strip("|").split("|")
        is_head = number + 1 < len(lines) and lines[number + 1].startswith("|---")
        found += cells if is_head else cells[:1]
    return [re.sub(r"`[^`]*`", "", c).strip() for c in found]


def test_there_are_chinese_benchmark_snippets() -> None:
    assert len(ZH_SNIPPETS) >= 7


@pytest.mark.parametrize("zh", ZH_SNIPPETS, ids=lambda p: p.relative_to(BENCH).as_posix())
def test_each_chinese_snippet_is_its_english_sibling_translated(zh: Path) -> None:
    english = english_sibling(zh).read_text(encoding="utf-8")
    assert zh.read_text(encoding="utf-8") == translate(english)


@pytest.mark.parametrize("zh", ZH_SNIPPETS, ids=lambda p: p.relative_to(BENCH).as_posix())
def test_no_head_cell_or_row_label_is_left_in_english(zh: Path) -> None:
    text = zh.read_text(encoding="utf-8")
    words = {w for label in labels(text) for w in re.findall(r"[A-Za-z]{2,}", label)}
    assert words <= KEPT, f"English left in {zh.name}: {sorted(words - KEPT)}"


@pytest.mark.parametrize("table", ["| measurement | ours |\n|---|---:|\n| a new label (s) | 1.0 |\n",
                                   "| a new head | ours |\n|---|---:|\n", "`device=cpu, colour=blue`\n",
                                   "A new line under a table.\n"])
def test_what_no_rule_covers_is_refused(table: str) -> None:
    with pytest.raises(GeneratorError):
        translate(table)


@pytest.mark.parametrize("page", ZH_PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_chinese_pages_include_the_chinese_benchmark_tables(page: Path) -> None:
    included = re.findall(r'--8<-- "snippets/bench/([^"]+)"', page.read_text(encoding="utf-8"))
    english = [name for name in included if not name.endswith(".zh.md") and not name.startswith("timelines/")]
    assert included and english == []
