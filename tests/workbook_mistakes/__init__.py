"""Plausible wrong versions of each workbook exercise, one module per lesson (``lesson_NN.py``).

Each module holds ``MISTAKES``: a tuple of :class:`Mistake`, a learner's likely error written as edits of the
engine's own function (the text ``solution N`` prints). ``tests/test_workbook_mistakes.py`` applies each one
and requires the lesson's check to reject it (exit code 1), the reference to pass, and the starter to fail.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    """``why`` a learner might write it; ``edits``: (old, new) pairs, each ``old`` found exactly once."""

    why: str
    edits: tuple[tuple[str, str], ...]


def mistake(why: str, *pairs: tuple[str, str]) -> Mistake:
    return Mistake(why, tuple(pairs))
