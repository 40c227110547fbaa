"""The probabilistic sampling notebook runs, and running it again prints exactly what is committed.

Both language versions are executed by ``nbclient`` (the engine behind ``jupyter nbconvert --execute``) from
the repository root; every code cell's text output must equal the committed one. The notebook's own checks
(exact enumeration, chi-square tests with a stated false-alarm rate) are therefore re-run in CI, and a page
whose outputs no longer match the code fails here.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "docs" / "notebooks").glob("probabilistic-sampling*.ipynb"))


def text_outputs(notebook: nbformat.NotebookNode) -> list[str]:
    """The printed text of every code cell, in order (stream chunks of one cell joined)."""
    texts = []
    for cell in notebook.cells:
        if cell.cell_type == "code":
            texts.append("".join(out.get("text", "") for out in cell.outputs if out.output_type == "stream"))
    return texts


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_reexecutes_to_its_committed_outputs(path: Path):
    committed = nbformat.read(path, as_version=4)
    fresh = nbformat.read(path, as_version=4)
    NotebookClient(fresh, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(ROOT)}}).execute()
    errors = [o for c in fresh.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert text_outputs(fresh) == text_outputs(committed)
    printed = "".join(text_outputs(fresh))
    assert printed.count("equals p: True") == 3 and "FAILED" not in printed and printed.count("passed") == 3


def test_both_language_versions_run_the_same_code():
    zh, en = (nbformat.read(ROOT / "docs" / "notebooks" / name, as_version=4)
              for name in ("probabilistic-sampling.ipynb", "probabilistic-sampling.en.ipynb"))
    assert [c.source for c in zh.cells if c.cell_type == "code"] == [
        c.source for c in en.cells if c.cell_type == "code"]
