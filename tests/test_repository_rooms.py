"""The repository's rooms keep their sizes: the engine is the biggest, the site's scripts grouped and short.

Scope: exact line and file counts from the tree (``site_scripts/records/gen_rooms.py`` counts them for the
contributing page's map): the engine (``mini_deepinfer/core``, ``runtime``, ``models`` and ``tools`` together)
holds more lines of code than ``site_scripts/`` and than any other top-level folder of code (``tests/`` is
not counted, and ``mini_deepinfer/`` is the folder the engine is part of); no folder of ``site_scripts/``
holds more than 12 files besides its phrase tables (``words.toml``, data the family's modules read:
``site_scripts.build.common.phrases``); no file of ``site_scripts/`` has more than 400 lines, none of
``training/`` more than 250; every family of ``site_scripts/`` has a package docstring (the map shows it)
and is named in both READMEs' layout notes; both contributing pages include the map. Non-scope: whether the
map's snippet is current (``tests/test_snippets_current.py`` regenerates every snippet).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from site_scripts.build.common import WORDS_FILE
from site_scripts.records.gen_rooms import ENGINE, code_files, code_lines, docstring_summary, files_in

ROOT = Path(__file__).resolve().parents[1]
SITE_SCRIPTS = ROOT / "site_scripts"
MOST_FILES_PER_FOLDER = 12
MOST_LINES = {"site_scripts": 400, "training": 250}
NOT_CODE_ROOMS = {"tests", "docs", "snippets", "trained", "mini_deepinfer"}
FAMILIES = sorted(p for p in SITE_SCRIPTS.iterdir() if p.is_dir() and p.name != "__pycache__")


def lines_of(folder: Path) -> int:
    return code_lines(code_files(folder))


def top_level_code_folders() -> list[Path]:
    """Top-level folders holding code, other than the tests and the package the engine is part of."""
    return [p for p in sorted(ROOT.iterdir()) if p.is_dir() and not p.name.startswith(".")
            and p.name not in NOT_CODE_ROOMS and not p.name.endswith(".egg-info") and code_files(p)]


def test_the_engine_holds_more_lines_than_the_site_scripts_and_any_other_top_level_folder() -> None:
    engine = sum(lines_of(ROOT / folder) for folder in ENGINE)
    others = {p.name: lines_of(p) for p in top_level_code_folders()}
    assert "site_scripts" in others and "training" in others, others
    bigger = {name: lines for name, lines in others.items() if lines >= engine}
    assert not bigger, f"the engine ({', '.join(ENGINE)}) holds {engine} lines; these hold as many: {bigger}"


def test_site_scripts_is_grouped_into_families_with_only_the_package_file_at_its_top() -> None:
    top = [p.name for p in files_in(SITE_SCRIPTS, recursive=False)]
    assert top == ["__init__.py"], f"site_scripts/ holds files of no family: {top}"
    assert FAMILIES, "site_scripts/ has no family folders"


@pytest.mark.parametrize("folder", FAMILIES, ids=lambda p: p.name)
def test_no_site_scripts_folder_holds_more_than_twelve_files(folder: Path) -> None:
    for sub in [folder, *(p for p in folder.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        files = [p for p in files_in(sub, recursive=False) if p.name != WORDS_FILE]
        assert len(files) <= MOST_FILES_PER_FOLDER, (
            f"{sub.relative_to(ROOT)} holds {len(files)} files (at most {MOST_FILES_PER_FOLDER}): "
            f"split it into families")


@pytest.mark.parametrize("room", sorted(MOST_LINES))
def test_no_site_script_or_training_file_is_over_its_line_limit(room: str) -> None:
    limit = MOST_LINES[room]
    long = {p.relative_to(ROOT).as_posix(): n for p in code_files(ROOT / room)
            if (n := code_lines([p])) > limit}
    assert not long, f"over {limit} lines (split along what they draw or write): {long}"


@pytest.mark.parametrize("folder", FAMILIES, ids=lambda p: p.name)
def test_every_site_scripts_family_says_what_it_holds_and_is_named_in_the_readmes(folder: Path) -> None:
    assert docstring_summary(folder), f"{folder.relative_to(ROOT)}/__init__.py has no docstring for the map"
    name = f"site_scripts/{folder.name}/"
    for page in ("README.md", "README.en.md"):
        assert name in (ROOT / page).read_text(encoding="utf-8"), f"{page} does not name {name}"


def test_both_contributing_pages_include_the_map() -> None:
    for page, snippet in (("contributing.md", "rooms.zh.md"), ("contributing.en.md", "rooms.md")):
        text = (ROOT / "docs" / "about" / page).read_text(encoding="utf-8")
        assert f'--8<-- "snippets/rooms/{snippet}"' in text, page
