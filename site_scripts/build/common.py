"""What the site's scripts share: where things are, how a demo command runs, and the generators' error.

Scope: the repository root and ``snippets/`` folder, :class:`GeneratorError`, :class:`MachineDependent` (the
outputs whose digits depend on the machine's arithmetic), :func:`command_env` (the
environment of every command a generator or a doc test runs), :func:`run_module` (a command of the package,
forked from a Python that has imported torch) and :func:`run_shell` (a command run exactly as the doc tests
run it), :func:`read_json` (a committed report),
:func:`provenance_entries` (a ``provenance.json`` beside committed reports or records, checked) and
:func:`markdown_table` (the one table writer of the generated pages), :func:`by_language` (a table of
phrases, each written in both languages side by side) and :func:`phrases` (such tables kept as data, in the
family's ``words.toml``). Non-scope:
finding and checking generators (``regenerate.py``), what any snippet says (its generator).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

__all__ = [
    "ROOT", "SNIPPETS", "GeneratorError", "MachineDependent",
    "LANGUAGES", "by_language", "command_env", "markdown_table", "preloaded_python", "provenance_entries",
    "read_json", "run_module", "run_shell",
]

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = ROOT / "snippets"
LANGUAGES = ("en", "zh")  # the order of a phrase's two languages in a table for :func:`by_language`
COMMAND_TIMEOUT_S = 1800


class GeneratorError(RuntimeError):
    """A generator module is malformed, or a command it ran failed."""


@dataclass(frozen=True)
class MachineDependent:
    """Outputs whose last digits depend on the machine that computes them, and what must hold on any machine.

    Half-precision sums on a CPU round in an order set by its vector instructions (which kernels ATen and
    oneDNN pick), so the same code prints other digits on another CPU. ``regenerate --check`` compares these
    outputs exactly only where the line of ``record`` (an output naming the kernels) is the committed one;
    elsewhere it checks ``claims`` on the numbers this machine computes instead.

    Attributes:
        record: the output (a path in the generator's ``OUTPUTS``) that names what the digits depend on.
        outputs: the outputs whose digits depend on it.
        claims: returns the statements of the pages that do not hold on this machine's numbers (empty: all
            hold).
    """

    record: str
    outputs: tuple[str, ...]
    claims: Callable[[], list[str]]


def command_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for demo commands, shared by the generators and the doc tests.

    The interpreter's own ``bin/`` comes first on PATH (so ``python`` in a shell block is this virtual
    environment's), and hashing, terminal width and output encoding are fixed so that output is reproducible.
    """
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update({"PYTHONHASHSEED": "0", "COLUMNS": "80", "PYTHONIOENCODING": "utf-8"})
    env.update(extra or {})
    return env


def run_module(*args: str, env: Mapping[str, str] | None = None) -> str:
    """Run ``python -m <args>`` from the repository root and return its stdout.

    The command is forked from a helper Python that has imported torch and nothing of this package
    (``preloaded_python``; one helper per set of ``env``, kept for the rest of this process): it runs from
    the module's ``__main__`` as a fresh ``python -m`` would, in the same environment, without paying for
    torch's import (1 to 1.5 s) each time; a regeneration runs dozens of commands.

    Args:
        *args: the module name and its arguments, e.g. ``run_module("mini_deepinfer")``.
        env: extra environment variables, on top of :func:`command_env`.

    Raises:
        GeneratorError: the command exited non-zero (the message carries its stderr).
    """
    proc = preloaded_python(env).run_module(ROOT, *args, timeout=COMMAND_TIMEOUT_S)
    if proc.returncode != 0:
        shown = " ".join(["python", "-m", *args])
        raise GeneratorError(f"`{shown}` exited {proc.returncode}:\n{proc.stderr}")
    return proc.stdout


_HELPERS: dict[tuple[tuple[str, str], ...], Any] = {}


def preloaded_python(extra: Mapping[str, str] | None = None):
    """The helper Python (``preloaded_python.PreloadedPython``) whose commands run in :func:`command_env` with
    ``extra`` variables: started on first use, shared by every generator of this process, closed at exit."""
    from site_scripts.build.preloaded_python import PreloadedPython

    key = tuple(sorted((extra or {}).items()))
    if key not in _HELPERS:
        _HELPERS[key] = PreloadedPython(env=command_env(extra))
        atexit.register(_HELPERS[key].close)
    return _HELPERS[key]


def run_shell(command: str, timeout_s: int = COMMAND_TIMEOUT_S) -> str:
    """Run a shell line the way the doc tests do (``bash -euo pipefail``, repository root); return stdout.

    Raises:
        GeneratorError: the command exited non-zero (the message carries its stderr).
    """
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=ROOT, env=command_env(),
                          capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise GeneratorError(f"`{command}` exited {proc.returncode}:\n{proc.stderr}")
    return proc.stdout


def by_language(phrases: Mapping[str, tuple[Any, Any]]) -> dict[str, dict[str, Any]]:
    """``{"en": {key: English}, "zh": {key: Chinese}}`` from ``{key: (English, Chinese)}``.

    A generator that writes a sentence in both languages keeps each phrase's two languages on adjacent lines
    (one table, one key each), so a phrase cannot be added to one language and forgotten in the other.
    """
    return {lang: {key: pair[i] for key, pair in phrases.items()} for i, lang in enumerate(LANGUAGES)}


WORDS_FILE = "words.toml"  # a family's phrase tables, beside its modules


def phrases(module: str) -> dict[str, Any]:
    """The phrase tables of the generator module named ``module`` (its ``__name__``): the table named after
    the module's short name in ``words.toml`` of its family's folder.

    The sentences a generator fills in are data, not code: they are kept in TOML (read with the standard
    library's ``tomllib``), each phrase's English and Chinese side by side, so a translator edits one file and
    the module keeps only the logic. A table whose entries each have ``en`` and ``zh`` reads as
    :func:`by_language` gives it (``phrases(__name__)["words"]["en"]["head"]``); any other table as written.
    """
    package, _, name = module.rpartition(".")
    path = ROOT / Path(*package.split(".")) / WORDS_FILE
    tables = tomllib.loads(path.read_text(encoding="utf-8"))[name]
    return {key: _languages(table) for key, table in tables.items()}


def _languages(table: Any) -> Any:
    """``{"en": {...}, "zh": {...}}`` for a table whose every entry is ``{en = ..., zh = ...}``; any other
    table as it is."""
    if isinstance(table, dict) and table and all(isinstance(e, dict) and set(e) == set(LANGUAGES)
                                                 for e in table.values()):
        return {lang: {key: entry[lang] for key, entry in table.items()} for lang in LANGUAGES}
    return table


def markdown_table(header: Sequence[str | None], rows: Iterable[Sequence[str | None]],
                   align: str | None = None) -> list[str]:
    """The lines of a Markdown table: ``| a | b |``; a cell that is None is written ``| |``.

    ``align`` gives each column's alignment, ``l`` (left) or ``r`` (right); by default the first column is
    left-aligned and the others, which hold numbers, right-aligned.
    """
    align = align or "l" + "r" * (len(header) - 1)
    if len(align) != len(header):
        raise GeneratorError(f"a table of {len(header)} columns with alignment {align!r}")
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    return [_table_row(header), rule, *(_table_row(row) for row in rows)]


def _table_row(cells: Sequence[str | None]) -> str:
    return "|" + "|".join(" " if cell is None else f" {cell} " for cell in cells) + "|"


def read_json(path: Path) -> Any:
    """A committed JSON file (a benchmark report, a provenance file), parsed."""
    return json.loads(path.read_text(encoding="utf-8"))


def provenance_entries(where: Path, section: str, keys: Collection[str], committed: Collection[str],
                       what: str) -> dict[str, dict[str, str]]:
    """The entries of ``where[section]``, file name -> {key: text}; empty when ``where`` does not exist.

    A provenance file states what a committed report or record does not carry itself; it only fills gaps.

    Raises:
        GeneratorError: ``where`` is not a JSON object, an entry names a file not in ``committed``, or an
            entry has a key not in ``keys`` or a value that is not text.
    """
    if not where.exists():
        return {}
    try:
        data = read_json(where)
    except json.JSONDecodeError as error:
        raise GeneratorError(f"{where.name}: not JSON ({error})") from None
    entries = data.get(section, {}) if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        raise GeneratorError(f"{where.name}: not a JSON object with '{section}'")
    for name, entry in entries.items():
        if name not in committed:
            raise GeneratorError(f"{where.name}: {name} is not a committed {what}")
        if not isinstance(entry, dict) or set(entry) - set(keys) or not all(
                isinstance(value, str) for value in entry.values()):
            got = sorted(entry) if isinstance(entry, dict) else type(entry).__name__
            raise GeneratorError(f"{where.name}: {name}: keys are {', '.join(keys)}, values text; got {got}")
    return entries
