"""How the suite shares two CPU cores: its units of work and the environment its processes run in.

Scope: ``tests/conftest.py``: which unit of work a test belongs to (:func:`conftest.work_unit`, what the
pytest-xdist scheduler sends whole to one worker) and the ``OMP_WAIT_POLICY`` that the session sets for
itself, its workers and every command they run. Non-scope: the shared builds themselves
(``tests/session_builds.py``) and what their readers check.
"""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import work_unit


def test_idle_openmp_threads_sleep_in_the_workers_and_in_the_commands_they_run() -> None:
    assert os.environ.get("OMP_WAIT_POLICY") == "PASSIVE"
    child = subprocess.run([sys.executable, "-c", "import os; print(os.environ['OMP_WAIT_POLICY'])"],
                           capture_output=True, text=True, check=True)
    assert child.stdout == "PASSIVE\n"


def test_each_part_of_the_regeneration_is_a_unit_shared_by_its_readers() -> None:
    current = "tests/test_snippets_current.py::test_regenerating_snippets_changes_nothing[rest]"
    clean = "tests/test_regenerate_clean.py::test_regenerating_everything_leaves_a_clone_clean[rest]"
    other = "tests/test_regenerate_clean.py::test_regenerating_everything_leaves_a_clone_clean[generate]"
    assert work_unit(current) == work_unit(clean) == "regeneration[rest]"
    assert work_unit(other) == "regeneration[generate]"


def test_the_site_s_readers_share_one_unit_and_other_files_are_units_of_their_own() -> None:
    assert work_unit("tests/test_browser.py::test_x") == "site"
    assert work_unit("tests/test_inpage_run.py::test_y") == "site"
    assert work_unit("tests/test_loader.py::test_a[1]") == work_unit("tests/test_loader.py::test_b")
    assert work_unit("docs/lessons/01-life-of-a-request.md::line:5,column:1") == (
        "docs/lessons/01-life-of-a-request.md")


def test_each_exercise_is_a_unit_of_its_own() -> None:
    test = "tests/test_exercises.py::test_the_command_in_the_changed_copy_prints_what_the_page_says"
    assert work_unit(f"{test}[lesson-03]") != work_unit(f"{test}[lesson-04]")
