"""The generated files under snippets/ are current: regenerating them changes nothing.

Scope: running every generator of ``site_scripts/gen_*.py`` (``python -m site_scripts.regenerate --check``)
and comparing with the files the pages include; digits that depend on the CPU's kernels are compared only on
the machine that wrote them, and the pages' claims about them everywhere. Non-scope: what the generators
write (their owners test that).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from site_scripts import regenerate
from site_scripts.common import MachineDependent

ROOT = Path(__file__).resolve().parent.parent


def test_regenerating_snippets_changes_nothing() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "site_scripts.regenerate", "--check"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800,
    )
    assert proc.returncode == 0, f"stale snippets; run `make snippets`:\n{proc.stdout}{proc.stderr}"


def _group(claims: list[str]) -> MachineDependent:
    return MachineDependent(record="kernels.txt", outputs=("table.md",), claims=lambda: claims)


def test_machine_dependent_digits_are_compared_only_on_the_machine_that_wrote_them(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(regenerate, "ROOT", tmp_path)
    (tmp_path / "kernels.txt").write_text("kernels   AVX512\n", encoding="utf-8")
    texts = {"kernels.txt": "kernels   AVX512\n", "table.md": "1.5e-02\n", "other.txt": "x\n"}
    compared, notes, broken = regenerate.set_aside_other_machine(texts, [_group([])])
    assert compared == texts and notes == [] and broken == []

    elsewhere = {**texts, "kernels.txt": "kernels   AVX2\n", "table.md": "1.4e-02\n"}
    compared, notes, broken = regenerate.set_aside_other_machine(elsewhere, [_group([])])
    assert compared == {"other.txt": "x\n"} and len(notes) == 1 and broken == []


def test_a_failing_claim_fails_the_check_on_any_machine(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(regenerate, "ROOT", tmp_path)
    (tmp_path / "kernels.txt").write_text("kernels   AVX512\n", encoding="utf-8")
    for line in ("kernels   AVX512\n", "kernels   AVX2\n"):
        texts = {"kernels.txt": line, "table.md": "1.5e-02\n"}
        _, _, broken = regenerate.set_aside_other_machine(texts, [_group(["bfloat16 moves more"])])
        assert broken == ["kernels.txt: bfloat16 moves more"]
