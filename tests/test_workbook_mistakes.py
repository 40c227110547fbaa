"""Every workbook check rejects the starter and each plausible mistake, and passes the engine's own function.

Scope: for each lesson with mistakes in ``tests/workbook_mistakes/lesson_NN.py`` (at least five each): the
reference (``solution N``) passes (exit 0), the untouched starter fails kindly (exit 1, "still the starter"),
and each mistake, applied to the reference as its edits say, fails (exit 1, never 2: a mistake is code that
runs). Non-scope: mutants made by machine (``test_workbook_mutants.py``), the command line
(``test_workbook.py``).
"""

from __future__ import annotations

import importlib

import pytest

from mini_deepinfer.workbook.checking import check_source
from mini_deepinfer.workbook.lessons import EXERCISES, exercise
from mini_deepinfer.workbook.starter import solution_text, starter_text

MIN_MISTAKES = 5
FILENAME = "lesson.py"
TORCH_LESSONS = {item.lesson for item in EXERCISES if not item.in_page}


def mistakes_of(lesson: int) -> tuple:
    try:
        module = importlib.import_module(f"tests.workbook_mistakes.lesson_{lesson:02d}")
    except ModuleNotFoundError:
        return ()
    return module.MISTAKES


def lessons_with_mistakes() -> list[int]:
    return [item.lesson for item in EXERCISES if mistakes_of(item.lesson)]


def marks(lesson: int) -> list:
    return [pytest.mark.slow] if lesson in TORCH_LESSONS else []


CASES = [pytest.param(lesson, index, id=f"lesson{lesson:02d}-{index}", marks=marks(lesson))
         for lesson in lessons_with_mistakes() for index in range(len(mistakes_of(lesson)))]


def apply(text: str, edits) -> str:
    for old, new in edits:
        assert text.count(old) == 1, f"the edit's text is not found exactly once in the reference: {old!r}"
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("lesson", lessons_with_mistakes())
def test_every_lesson_keeps_at_least_five_mistakes(lesson):
    assert len(mistakes_of(lesson)) >= MIN_MISTAKES


@pytest.mark.parametrize("lesson", [pytest.param(n, marks=marks(n)) for n in lessons_with_mistakes()])
def test_the_reference_passes_and_the_starter_fails_kindly(lesson):
    item = exercise(lesson)
    passed = check_source(item, solution_text(item, "en"), FILENAME, "en")
    assert passed.code == 0, "\n".join(passed.lines)
    starter = check_source(item, starter_text(item, "en"), FILENAME, "en")
    assert starter.code == 1 and "still the starter" in starter.lines[-1], "\n".join(starter.lines)


@pytest.mark.parametrize(("lesson", "index"), CASES)
def test_the_check_rejects_a_plausible_mistake(lesson, index):
    item, wrong = exercise(lesson), mistakes_of(lesson)[index]
    text = apply(solution_text(item, "en"), wrong.edits)
    outcome = check_source(item, text, FILENAME, "en", fail_fast=True)
    assert outcome.code == 1, f"the check let through: {wrong.why}\n" + "\n".join(outcome.lines)
