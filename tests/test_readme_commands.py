"""The READMEs give the same two set-up commands, link to each other, and CI runs the test command.

Scope: README.md (Chinese), README.en.md (English) and .ci/run, as text. Non-scope: running the commands
(CI does that by running .ci/run).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
READMES = ["README.md", "README.en.md"]
SHELL_FENCE = re.compile(r"^```(?:bash|sh|shell|console)[^\n]*\n(.*?)^```", re.S | re.M)


def shell_lines(text: str) -> list[str]:
    lines = (line.strip() for block in SHELL_FENCE.findall(text) for line in block.splitlines())
    return [line for line in lines if line]


def read(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", READMES)
def test_readme_gives_exactly_the_two_setup_commands(name: str) -> None:
    make_lines = [line for line in shell_lines(read(name)) if line.startswith("make")]
    assert make_lines == ["make serve", "make test"]


@pytest.mark.parametrize(("name", "other"), [("README.md", "README.en.md"), ("README.en.md", "README.md")])
def test_readme_links_to_its_other_language(name: str, other: str) -> None:
    head = read(name)[:600]
    assert f"]({other})" in head, f"{name} should link to {other} near the top"


@pytest.mark.parametrize("name", READMES)
def test_readme_shows_the_real_end_of_the_toy_demo(name: str) -> None:
    demo_tail = (ROOT / "snippets" / "toy" / "demo.txt").read_text(encoding="utf-8").splitlines()[-3:]
    text = read(name)
    assert "python -m mini_deepinfer" in shell_lines(text)
    assert "\n".join(demo_tail) in text


def test_ci_runs_the_readme_test_command() -> None:
    lines = [line.strip() for line in read(".ci/run").splitlines()]
    commands = [line for line in lines if line and not line.startswith("#")]
    assert "make test" in commands
    assert "set -euo pipefail" in commands


@pytest.mark.parametrize("name", READMES)
def test_readme_relative_links_point_at_files_that_exist(name: str) -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", read(name))
    local = [t for t in targets if "://" not in t]
    assert local, f"{name} links to no file of the repository"
    assert [t for t in local if not (ROOT / t).exists()] == []
