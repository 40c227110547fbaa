"""The contributing page's map of the repository: each room's files, lines and contents, from the tree.

Scope: :func:`rooms` walks the folders a contributor meets (the engine's four, the commands, the benchmarks,
the workbook, each family of ``site_scripts/``, training, the tests) and counts each one's files and lines of
code (``.py`` and ``.sh``); what a room holds is the first paragraph of its package's docstring (up to its
non-scope), so the table changes when the tree does. :func:`rooms_table` renders it in each language, lines
rounded to the nearest hundred so that a small edit leaves the page as it is;
``tests/test_repository_rooms.py`` holds the exact counts to the layout's limits. Non-scope: the import rules
between the rooms (``tests/test_package_layout.py``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from site_scripts.build.common import ROOT, markdown_table, phrases

CODE_SUFFIXES = (".py", ".sh")
ENGINE = ("mini_deepinfer/core", "mini_deepinfer/runtime", "mini_deepinfer/models", "mini_deepinfer/tools")
WORDS = phrases(__name__)["words"]  # in words.toml, each phrase in English and in Chinese


@dataclass(frozen=True)
class Room:
    """One folder of the map: which room it belongs to, its files and lines, and what it holds."""

    kind: str  # a key of WORDS: engine, commands, benchmarks, workbook, site scripts, training, tests
    folder: str  # relative to the repository root
    files: int  # its code files (CODE_SUFFIXES; caches and data files are not counted)
    lines: int  # lines of the code files (CODE_SUFFIXES)
    holds: str  # the package docstring's first paragraph; empty where the folder has no package docstring


def files_in(folder: Path, recursive: bool = True) -> list[Path]:
    """The files of ``folder`` (and of its subfolders with ``recursive``), without ``__pycache__``."""
    found = folder.rglob("*") if recursive else folder.glob("*")
    return sorted(p for p in found if p.is_file() and "__pycache__" not in p.parts)


def code_files(folder: Path, recursive: bool = True) -> list[Path]:
    """The code files of ``folder`` (and of its subfolders with ``recursive``)."""
    return [p for p in files_in(folder, recursive) if p.suffix in CODE_SUFFIXES]


def code_lines(files: list[Path]) -> int:
    """Lines of ``files``, as ``wc -l`` counts them (a last line without a newline counts too)."""
    return sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files)


def docstring_summary(package: Path) -> str:
    """The first paragraph of ``package/__init__.py``'s docstring, up to its non-scope, on one line, with
    Markdown's backticks."""
    init = package / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) if init.is_file() else None
    if not doc:
        return ""
    scope = doc.split("\n\n")[0].split("Non-scope:")[0]
    return " ".join(scope.split()).replace("``", "`")


def _room(kind: str, folder: str, root: Path, recursive: bool = True) -> Room:
    files = code_files(root / folder, recursive)
    return Room(kind, folder, len(files), code_lines(files), docstring_summary(root / folder))


def rooms(root: Path = ROOT) -> list[Room]:
    """Every room of the map, in the order a reader meets them; a folder that does not exist is left out."""
    found = [_room("engine", folder, root) for folder in ENGINE]
    found.append(_room("commands", "mini_deepinfer", root, recursive=False))
    found += [_room(kind, folder, root) for kind, folder in
              (("benchmarks", "mini_deepinfer/bench"), ("workbook", "mini_deepinfer/workbook"))
              if (root / folder).is_dir()]
    families = sorted(p for p in (root / "site_scripts").iterdir() if p.is_dir() and p.name != "__pycache__")
    found += [_room("site scripts", f"site_scripts/{p.name}", root) for p in families]
    found += [_room(kind, folder, root) for kind, folder in (("training", "training"), ("tests", "tests"))
              if (root / folder).is_dir()]
    return found


def total(found: list[Room], kind: str) -> int:
    """The lines of every room of one kind."""
    return sum(room.lines for room in found if room.kind == kind)


def about(lines: int) -> str:
    """``~2,500``: lines rounded to the nearest hundred (a small edit leaves the page unchanged)."""
    return f"~{round(lines, -2):,}"


def _holds(room: Room, words: dict[str, str], root: Path) -> str:
    if room.kind == "commands":
        names = [p.stem for p in code_files(root / room.folder, recursive=False) if p.stem != "__init__"]
        return words["command_modules"].format(names=", ".join(f"`{name}`" for name in names))
    if room.kind == "tests":
        return words["test_files"]
    return room.holds


def rooms_table(lang: str, root: Path = ROOT) -> str:
    """The map in ``lang``: one row per folder, then one sentence with the totals."""
    words, found = WORDS[lang], rooms(root)
    rows = [[words[room.kind], f"`{room.folder}/`", str(room.files), about(room.lines),
             _holds(room, words, root)] for room in found]
    summary = words["summary"].format(
        engine=about(total(found, "engine")), site=about(total(found, "site scripts")),
        training=about(total(found, "training")), tests=about(total(found, "tests")))
    return "\n".join(markdown_table(words["head"], rows, align="llrrl")) + "\n\n" + summary + "\n"


OUTPUTS: dict[str, Callable[[], str]] = {
    "rooms/rooms.md": lambda: rooms_table("en"),
    "rooms/rooms.zh.md": lambda: rooms_table("zh"),
}
