"""Doc tests: every shell and Python block shown on the site runs, and its shown output must match (Sybil).

Scope: collecting the code blocks of the Chinese pages ``docs/**/*.md`` as pytest items. Non-scope: code
embedded from the package with ``--8<--`` (the package's own tests cover it), and the English twins (see
below).

Conventions for page authors:

* Every ```` ```python ````, ```` ```bash ```` and ```` ```sh ```` fence runs (attributes after the language,
  such as ``title="..."``, are allowed), in a subprocess with the repository root as working directory. Shell
  blocks run under ``bash -euo pipefail``. A non-zero exit fails the test, and the report shows stderr.
* The subprocess environment is the one the snippet generators use
  (``site_scripts.build.common.command_env``):
  this interpreter's ``bin/`` first on PATH, so ``python`` in a shell block is the virtual environment's;
  ``PYTHONHASHSEED=0``, ``COLUMNS=80`` and ``PYTHONIOENCODING=utf-8``.
* A fence followed by ``<!--pytest-codeblocks:expected-output-->`` and a second fence must print exactly that
  second fence's text on stdout. When the second fence holds only ``--8<-- "path"`` lines (the usual case: a
  generated file under ``snippets/``), stdout must equal those files' contents, concatenated. A lesson's run
  section is therefore::

      ```bash
      python -m mini_deepinfer
      ```
      <!--pytest-codeblocks:expected-output-->
      ```text
      --8<-- "snippets/toy/demo.txt"
      ```

* A block shown on several pages (the same language and code) runs once per test process; each page's shown
  output is compared with that run.
* A block that a snippet generator runs itself, as written, to make the one file its shown output includes
  (the generator's ``SHOWN_BLOCKS`` maps that file to this very code) is not run here: ``make test``'s
  regeneration runs it and compares its output with the committed file (``tests/test_snippets_current.py``).
  A block that differs from its generator's by a character runs here as any other.
* ```` ```pycon ```` fences are doctests (``ELLIPSIS`` and ``NORMALIZE_WHITESPACE`` on), run in the pytest
  process.
* A fence whose body is only ``--8<--`` includes is not run.
* Markers, each an HTML comment on its own line right before the fence (several may stack):
  ``<!-- docs-test: skip -->`` does not run the block (say why in the page's source, next to the marker);
  ``<!-- docs-test: slow -->`` gives the block pytest's ``slow`` marker (it still runs in ``make test``;
  ``pytest -m "not slow"`` leaves it out).

Only the Chinese pages are collected. ``tests/test_docs_twin.py`` requires every ``page.en.md`` to have the
same code blocks (bodies identical), the same includes and the same markers as its ``page.md``, so running
the English blocks as well would run each command twice and test nothing more.
"""

from __future__ import annotations

import functools
import importlib
import re
import subprocess
import sys
from dataclasses import dataclass
from doctest import ELLIPSIS, NORMALIZE_WHITESPACE
from pathlib import Path

import pytest
from sybil import Document, Example, Region, Sybil
from sybil.evaluators.doctest import DocTestEvaluator
from sybil.parsers.abstract.doctest import DocTestStringParser

from site_scripts.build.common import command_env

ROOT = Path(__file__).resolve().parent
TIMEOUT_S = 1800
FENCE = re.compile(
    r"(?P<marks>(?:^[ \t]*<!--\s*docs-test:\s*[\w-]+\s*-->[ \t]*\n)*)"
    r"^(?P<indent>[ \t]*)```(?P<lang>python|bash|sh|pycon)\b[^\n]*\n(?P<code>.*?)\n(?P=indent)```[ \t]*$"
    r"(?:\s*<!--\s*pytest-codeblocks:expected-output\s*-->[ \t]*\n"
    r"(?P=indent)```[^\n]*\n(?P<out>.*?)\n(?P=indent)```)?",
    re.S | re.M,
)
MARK = re.compile(r"docs-test:\s*([\w-]+)")
KNOWN_MARKS = {"skip", "slow"}
INCLUDE = re.compile(r'^\s*-{1,}8<-{1,}\s+"(?P<path>[^"]+)"\s*$')
SNIPPET_ONLY = re.compile(r"^(\s*-{1,}8<-{1,}\s+\S.*\n?)+$")
DOCTEST = DocTestStringParser(DocTestEvaluator(ELLIPSIS | NORMALIZE_WHITESPACE))
SLOW_REGIONS: set[tuple[str, int]] = set()  # (document path, region start) of blocks marked slow


@dataclass(frozen=True)
class Block:
    """A shell or Python block to run, with the output the page shows (None: not compared)."""

    lang: str
    code: str
    expected: str | None


def _dedent(block: str, indent: str) -> str:
    return "".join(line[len(indent):] + "\n" for line in block.splitlines())


def _expected_output(shown: str) -> str:
    """The shown output; a body of only ``--8<-- "path"`` lines stands for those files' contents."""
    lines = [line for line in shown.splitlines() if line.strip()]
    includes = [INCLUDE.match(line) for line in lines]
    if not lines or not all(includes):
        return shown
    return "".join((ROOT / match["path"]).read_text(encoding="utf-8") for match in includes if match)


# Several pages show the same command (lessons 3 and 4 and the A/B/C walkthrough all run pipeline_demo): each
# distinct block runs once per test process, and every page that shows it is compared with that one run.
_RUNS: dict[tuple[str, str], subprocess.CompletedProcess[str]] = {}


def _completed(block: Block) -> subprocess.CompletedProcess[str]:
    """The block run once from the repository root (cached by language and code for this process)."""
    key = (block.lang, block.code)
    if key not in _RUNS:
        if block.lang == "python":
            cmd = [sys.executable, "-c", block.code]
        else:
            cmd = ["bash", "-euo", "pipefail", "-c", block.code]
        _RUNS[key] = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=command_env(),
                                    timeout=TIMEOUT_S)
    return _RUNS[key]


def _run(example: Example) -> str | None:
    block: Block = example.parsed
    proc = _completed(block)
    if proc.returncode != 0:
        return f"exit {proc.returncode}\n--- code ---\n{block.code}--- stderr ---\n{proc.stderr}"
    if block.expected is not None:
        expected = _expected_output(block.expected)
        if proc.stdout != expected:
            return f"shown output differs\n--- shown ---\n{expected}--- actual ---\n{proc.stdout}"
    return None


@functools.cache
def generated_blocks() -> dict[str, str]:
    """``snippets/PATH`` -> the block that a generator runs to write that file (its ``SHOWN_BLOCKS``)."""
    from site_scripts.build.regenerate import generator_modules

    found: dict[str, str] = {}
    for module in map(importlib.import_module, generator_modules().values()):
        shown = getattr(module, "SHOWN_BLOCKS", {})
        found.update({f"snippets/{name}": block for name, block in shown.items()})
    return found


def run_by_a_generator(block: Block) -> bool:
    """Whether ``block`` is, character for character, the block a generator runs to make its shown output."""
    lines = (block.expected or "").strip().splitlines()
    include = INCLUDE.match(lines[0]) if len(lines) == 1 else None
    return bool(include) and generated_blocks().get(include["path"]) == block.code.rstrip("\n")


def _marks(text: str, document: Document) -> set[str]:
    marks = set(MARK.findall(text))
    unknown = marks - KNOWN_MARKS
    if unknown:
        raise ValueError(f"{document.path}: unknown docs-test marker(s) {sorted(unknown)}")
    return marks


def parse_fences(document: Document):
    """Yield one Sybil region per block to run (pycon: one per ``>>>`` example)."""
    for match in FENCE.finditer(document.text):
        code = _dedent(match["code"], match["indent"])
        marks = _marks(match["marks"], document)
        if "skip" in marks or SNIPPET_ONLY.match(code):
            continue
        if match["lang"] == "pycon":
            offset = match.start("code")
            regions = [
                Region(offset + r.start, offset + r.end, r.parsed, r.evaluator)
                for r in DOCTEST(code, document.path)
            ]
        else:
            out = None if match["out"] is None else _dedent(match["out"], match["indent"])
            block = Block(match["lang"], code, out)
            regions = [] if run_by_a_generator(block) else [Region(match.start(), match.end(), block, _run)]
        for region in regions:
            if "slow" in marks:
                SLOW_REGIONS.add((document.path, region.start))
            yield region


# Sybil matches patterns with PurePath.match (right-anchored, no recursive "**"), relative to `path`:
# "*.md" under docs/ is every page at any depth.
pytest_collect_file = Sybil(
    parsers=[parse_fences], path="docs", patterns=["*.md"], excludes=["*.en.md"]
).pytest()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give the doc-test items of blocks marked ``<!-- docs-test: slow -->`` the ``slow`` marker."""
    for item in items:
        example = getattr(item, "example", None)
        if isinstance(example, Example) and (example.path, example.start) in SLOW_REGIONS:
            item.add_marker(pytest.mark.slow)
