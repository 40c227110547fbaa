"""The generated files under snippets/ are current: regenerating them changes nothing.

Scope: running every generator of ``site_scripts/gen_*.py`` (``python -m site_scripts.build.regenerate
--check``, once per test session in copies of the working tree, in parts that two workers share: the
``regeneration`` fixture) and comparing with the files the pages include; digits that depend on the CPU's
kernels are compared only on the machine that wrote them, and the pages' claims about them everywhere.
Non-scope: what the generators write (their owners test that).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from session_builds import REGENERATION_PARTS, Regeneration, regeneration_part

from site_scripts.build import regenerate
from site_scripts.build.common import MachineDependent


@pytest.mark.slow
def test_regenerating_snippets_changes_nothing(regeneration: Regeneration) -> None:
    """Run for each part of the session's regeneration: together, every generator."""
    assert regeneration.returncode == 0, (
        f"stale snippets from {regeneration.generators}; run `make snippets`:\n{regeneration.report}")


def test_the_regeneration_parts_run_every_generator_once() -> None:
    parts = [regeneration_part(part) for part in REGENERATION_PARTS]
    every = [name.removeprefix("gen_") for name in regenerate.generator_names()]
    assert sorted(name for names in parts for name in names) == every
    assert all(parts), "a part with no generator"


def _group(claims: list[str]) -> MachineDependent:
    return MachineDependent(record="kernels.txt", outputs=("table.md",), claims=lambda: claims)


def _committed(folder: Path) -> dict[str, str]:
    """A committed kernels line and table, written on an AVX512 machine, plus one ordinary snippet."""
    texts = {"kernels.txt": "kernels   AVX512\n", "table.md": "1.5e-02\n", "other.txt": "x\n"}
    for path, text in texts.items():
        (folder / path).write_text(text, encoding="utf-8")
    return texts


def test_machine_dependent_digits_are_compared_only_on_the_machine_that_wrote_them(
    tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(regenerate, "ROOT", tmp_path)
    committed = _committed(tmp_path)
    same_machine = {**committed, "table.md": "1.4e-02\n"}
    assert regenerate.check(same_machine, [_group([])], 1) == 1
    assert "table.md (regenerated)" in capsys.readouterr().out

    elsewhere = {**same_machine, "kernels.txt": "kernels   AVX2\n"}
    assert regenerate.check(elsewhere, [_group([])], 1) == 0
    assert "the digits of table.md were not compared" in capsys.readouterr().out
    assert regenerate.check({**elsewhere, "other.txt": "y\n"}, [_group([])], 1) == 1, "the rest is compared"


def test_a_failing_claim_fails_the_check_on_any_machine(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(regenerate, "ROOT", tmp_path)
    committed = _committed(tmp_path)
    for line in ("kernels   AVX512\n", "kernels   AVX2\n"):
        texts = {**committed, "kernels.txt": line}
        assert regenerate.check(texts, [_group([])], 1) == 0
        assert regenerate.check(texts, [_group(["bfloat16 moves more"])], 1) == 1
        assert "claim fails: kernels.txt: bfloat16 moves more" in capsys.readouterr().out
