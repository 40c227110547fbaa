"""Which page blocks the doc tests run: a block that a generator runs as written is left to the regeneration.

Scope: ``run_by_a_generator`` and ``generated_blocks`` of the repository's root ``conftest.py`` (the doc
tests' collector) and the generators' ``SHOWN_BLOCKS``. Non-scope: running the blocks (the doc tests, and the
regeneration that ``tests/test_snippets_current.py`` checks).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def doc_collector():
    """The root ``conftest.py`` as a module of its own (``conftest`` here is ``tests/conftest.py``)."""
    spec = importlib.util.spec_from_file_location("doc_collector", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


DOCS = doc_collector()
BLOCKS = DOCS.generated_blocks()


def block(code: str, *includes: str):
    return DOCS.Block("bash", code + "\n", "".join(f'--8<-- "{path}"\n' for path in includes))


def test_the_generators_that_run_page_blocks_are_found() -> None:
    assert {"snippets/generate/batched.txt", "snippets/trained/sampling.txt"} <= set(BLOCKS)


@pytest.mark.parametrize("path", sorted(BLOCKS))
def test_a_block_a_generator_runs_as_written_is_left_to_the_regeneration(path: str) -> None:
    assert DOCS.run_by_a_generator(block(BLOCKS[path], path))


@pytest.mark.parametrize("path", sorted(BLOCKS))
def test_a_block_that_differs_by_a_character_or_shows_more_still_runs(path: str) -> None:
    code = BLOCKS[path]
    assert not DOCS.run_by_a_generator(block(code.replace("--", "-- ", 1), path))
    assert not DOCS.run_by_a_generator(block(code, path, "snippets/toy/demo.txt"))
    assert not DOCS.run_by_a_generator(block(code, "snippets/toy/demo.txt"))
    assert not DOCS.run_by_a_generator(DOCS.Block("bash", code + "\n", None))


def test_each_block_a_generator_declares_makes_one_of_its_outputs() -> None:
    """A generator lists a block only for a file it writes; which function writes it is the generator's."""
    from site_scripts.build.regenerate import generator_modules

    for name, dotted in generator_modules().items():
        module = importlib.import_module(dotted)
        assert set(getattr(module, "SHOWN_BLOCKS", {})) <= set(module.OUTPUTS), name


def test_a_page_shows_each_declared_block_so_the_doc_tests_leave_it_out() -> None:
    pages = "".join(page.read_text(encoding="utf-8") for page in (ROOT / "docs").rglob("*.md")
                    if not page.name.endswith(".en.md"))
    assert [path for path, code in BLOCKS.items() if code not in pages] == []
