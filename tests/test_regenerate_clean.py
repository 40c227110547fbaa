"""Regenerating the snippets (what ``make serve`` and ``make build`` do first) never dirties the working tree.

Scope: ``site_scripts/build/regenerate.py`` in write mode. Output whose digits depend on the machine
(``MACHINE_DEPENDENT``, the BF16 note's half-precision sums) is left as committed when this machine differs
from the one that wrote it: only the machine differs there, not the code. The slow tests write, in a clone of
a copy of the working tree, what the session's one run of every generator rendered (the ``regeneration``
fixture, one part at a time: ``regenerate --from FILE --only NAMES``), and check ``git status
--porcelain``. Non-scope: whether the snippets are current (``test_snippets_current.py``) and what they say
(their generators).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from session_builds import Regeneration, git

from site_scripts.build import regenerate
from site_scripts.build.common import MachineDependent

ROOT = Path(__file__).resolve().parent.parent
KERNELS = "snippets/bf16/kernels.txt"
ELSEWHERE = "kernels   a machine unlike this one\n"


def fake_group() -> MachineDependent:
    return MachineDependent("snippets/x/record.txt", ("snippets/x/digits.md",), lambda: [])


def test_output_from_another_machine_is_kept_and_the_rest_is_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(regenerate, "ROOT", tmp_path)
    (tmp_path / "snippets/x").mkdir(parents=True)
    (tmp_path / "snippets/x/record.txt").write_text("kernels   the other machine\n", encoding="utf-8")
    texts = {"snippets/x/record.txt": "kernels   this machine\n", "snippets/x/digits.md": "1.25\n",
             "snippets/x/other.md": "same everywhere\n"}
    kept, notes = regenerate.kept_from_other_machine(texts, [fake_group()])
    assert kept == {"snippets/x/other.md": "same everywhere\n"}
    assert len(notes) == 1 and "snippets/x/record.txt" in notes[0]


def test_output_written_on_this_machine_is_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(regenerate, "ROOT", tmp_path)
    (tmp_path / "snippets/x").mkdir(parents=True)
    (tmp_path / "snippets/x/record.txt").write_text("kernels   this machine\n", encoding="utf-8")
    texts = {"snippets/x/record.txt": "kernels   this machine\n", "snippets/x/digits.md": "1.25\n"}
    kept, notes = regenerate.kept_from_other_machine(texts, [fake_group()])
    assert kept == texts and notes == []


def clone(regeneration: Regeneration, tmp_path: Path) -> Path:
    repo = tmp_path / "clone"
    source = str(regeneration.repo)
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", source, str(repo)], check=True)
    return repo


def write_rendered(regeneration: Regeneration, repo: Path, *args: str) -> None:
    """``regenerate`` in write mode in ``repo``, with the texts the session's one run rendered."""
    proc = subprocess.run(
        [sys.executable, "-m", "site_scripts.build.regenerate", "--from", str(regeneration.texts), *args],
        cwd=repo, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.regenerates("bf16")
def test_regenerating_bf16_written_on_another_machine_leaves_a_clone_clean(
    regeneration: Regeneration, tmp_path: Path
) -> None:
    repo = clone(regeneration, tmp_path)
    (repo / KERNELS).write_text(ELSEWHERE, encoding="utf-8")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-qam", "another machine")
    write_rendered(regeneration, repo, "--only", "bf16")
    assert git(repo, "status", "--porcelain") == ""
    assert (repo / KERNELS).read_text(encoding="utf-8") == ELSEWHERE


@pytest.mark.slow
def test_regenerating_everything_leaves_a_clone_clean(regeneration: Regeneration, tmp_path: Path) -> None:
    """Run for each part of the session's regeneration: together, every generator."""
    repo = clone(regeneration, tmp_path)
    write_rendered(regeneration, repo, "--only", regeneration.generators)
    assert git(repo, "status", "--porcelain") == ""
