"""Writing the snippets is incremental: a generator runs again only when its inputs or its outputs changed.

Scope: ``site_scripts/build/regenerate.py`` in write mode with ``site_scripts/build/stamps.py``, on a tiny
fake family of generators in a temporary git repository (``fam/gen_a.py`` imports ``fam/helper.py`` and reads
``data.txt``; ``fam/gen_b.py`` reads nothing; ``mini_deepinfer/`` stands for the engine every generator
shares): what is skipped, what runs again and why, what ``--check`` and ``--all`` do, the first line's counts,
the heartbeat of a long generator. Non-scope: the real generators (``test_snippets_current.py`` runs them).
"""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from site_scripts.build import regenerate
from site_scripts.build.common import GeneratorError

FILES = {
    "fam/__init__.py": "",
    "fam/gen_a.py": "from fam import helper\n",
    "fam/helper.py": "WORD = 'a'\n",
    "fam/gen_b.py": "import json\n",
    "fam/words.toml": "[gen_a]\n",
    "data.txt": "read by gen_a\n",
    "mini_deepinfer/core.py": "ENGINE = 1\n",
}


class Family:
    """The fake family in ``root``; ``runs`` counts each generator's runs."""

    def __init__(self, root: Path) -> None:
        self.root, self.runs = root, Counter()
        self.fail = False

    def gen_a(self) -> str:
        self.runs["gen_a"] += 1
        return (self.root / "data.txt").read_text(encoding="utf-8")

    def gen_b(self) -> str:
        self.runs["gen_b"] += 1
        if self.fail:
            raise GeneratorError("gen_b: broken")
        return "b\n"

    def outputs(self, names: list[str]) -> dict:
        every = {"snippets/a.txt": ("gen_a", self.gen_a), "snippets/b.txt": ("gen_b", self.gen_b)}
        return {path: owner for path, owner in every.items() if owner[0] in names}

    def run(self, *args: str) -> Counter:
        """``regenerate`` with ``args``; returns how many times each generator ran."""
        before = Counter(self.runs)
        assert regenerate.main(list(args)) == 0
        return self.runs - before

    def edit(self, path: str, text: str) -> None:
        (self.root / path).write_text(text, encoding="utf-8")


@pytest.fixture
def family(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Family:
    root = tmp_path.resolve()
    for path, text in FILES.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    fake = Family(root)
    monkeypatch.setattr(regenerate, "ROOT", root)
    monkeypatch.setattr(regenerate, "generator_names", lambda only=None: ["gen_a", "gen_b"])
    monkeypatch.setattr(regenerate, "generator_modules", lambda: {"gen_a": "fam.gen_a", "gen_b": "fam.gen_b"})
    monkeypatch.setattr(regenerate, "collect_outputs", fake.outputs)
    monkeypatch.setattr(regenerate, "machine_dependent", lambda names: [])
    return fake


def test_a_second_run_with_nothing_changed_runs_no_generator(family: Family, capsys) -> None:
    assert family.run() == {"gen_a": 1, "gen_b": 1}
    assert family.run() == {}
    assert "2 generators, 2 up to date (inputs unchanged), 0 to run" in capsys.readouterr().err


@pytest.mark.parametrize(("path", "runs"), [
    ("data.txt", {"gen_a": 1}),  # a file it read while it ran
    ("fam/helper.py", {"gen_a": 1}),  # a module it imports
    ("fam/gen_b.py", {"gen_b": 1}),  # its own module
    ("fam/words.toml", {"gen_a": 1, "gen_b": 1}),  # the phrase tables beside their modules
    ("mini_deepinfer/core.py", {"gen_a": 1, "gen_b": 1}),  # the engine, which every generator shares
    ("mini_deepinfer/new.py", {"gen_a": 1, "gen_b": 1}),  # a new file of the engine
])
def test_a_changed_input_reruns_exactly_the_generators_that_read_or_import_it(
        family: Family, path: str, runs: dict[str, int]) -> None:
    family.run()
    family.edit(path, "changed\n")
    assert family.run() == runs
    assert family.run() == {}, "the rerun stamped it"


def test_an_output_edited_or_deleted_by_hand_is_written_again(family: Family) -> None:
    family.run()
    family.edit("snippets/a.txt", "edited by hand\n")
    (family.root / "snippets/b.txt").unlink()
    assert family.run() == {"gen_a": 1, "gen_b": 1}
    assert (family.root / "snippets/a.txt").read_text(encoding="utf-8") == FILES["data.txt"]
    assert (family.root / "snippets/b.txt").is_file()


def test_check_and_all_run_every_generator_whatever_the_stamps(family: Family) -> None:
    family.run()
    assert family.run("--check") == {"gen_a": 1, "gen_b": 1}
    assert family.run("--all") == {"gen_a": 1, "gen_b": 1}


def test_the_first_line_counts_the_generators_that_run_and_says_why(family: Family, capsys) -> None:
    family.run()
    family.edit("data.txt", "changed\n")
    capsys.readouterr()
    family.run()
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "regenerating snippets: 2 generators, 1 up to date (inputs unchanged), 1 to run"
    assert err[1] == "  data.txt changed: gen_a"


def test_a_failed_generator_is_not_stamped_and_runs_again(family: Family) -> None:
    family.fail = True
    assert regenerate.main([]) == 1
    family.fail = False
    assert family.run() == {"gen_b": 1}, "gen_a finished before gen_b failed, and was stamped"


def test_a_long_generator_says_it_is_still_running(family: Family, capsys, monkeypatch) -> None:
    monkeypatch.setattr(regenerate, "HEARTBEAT_S", 0.02)
    monkeypatch.setattr(family, "gen_b", lambda: time.sleep(0.2) or "b\n")
    family.run()
    assert "  gen_b still running, 0 s" in capsys.readouterr().err
