"""What an exercise is: the lesson, the engine's function(s) the learner writes, the hints, where it runs.

Scope: :class:`Exercise` (one per lesson, listed in ``lessons.py``), :class:`Check` (one named step of a
lesson's check), and :func:`resolve`, which finds the engine's own function behind a target name such as
``mini_deepinfer.core.batch:BatchEngine.schedule``. Non-scope: running anything (``checking.py``), the
starter's text (``starter.py``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from .words import Words


@dataclass(frozen=True)
class Exercise:
    """One lesson's exercise.

    Attributes:
        lesson: the lesson's number, 1 to 15.
        title: the lesson's title.
        page: the lesson page under ``docs/`` without its suffix (``lessons/03-batching``).
        targets: the engine's functions the learner writes, as ``module:qualified.name``.
        in_page: True when the check needs no torch, so the lesson page runs it in the browser too.
        task: what the function(s) must do.
        holds: which invariants the check holds.
        section: the heading id of the lesson section to re-read, and its title.
        checks: the module under ``mini_deepinfer.workbook.checks`` that holds the lesson's ``CHECKS``.
    """

    lesson: int
    title: Words
    page: str
    targets: tuple[str, ...]
    in_page: bool
    task: Words
    holds: Words
    section: tuple[str, Words]
    checks: str

    @property
    def file_name(self) -> str:
        return f"lesson_{self.lesson:02d}.py"

    @property
    def names(self) -> tuple[str, ...]:
        """The function names the learner's file defines (``schedule``, not ``BatchEngine.schedule``)."""
        return tuple(target.rpartition(".")[2].rpartition(":")[2] for target in self.targets)

    @property
    def qualnames(self) -> tuple[str, ...]:
        return tuple(target.partition(":")[2] for target in self.targets)

    def section_link(self, lang: str, anchor: str | None = None) -> str:
        suffix = ".md" if lang == "zh" else ".en.md"
        return f"docs/{self.page}{suffix}#{anchor or self.section[0]}"


@dataclass(frozen=True)
class Check:
    """One named step of a lesson's check.

    ``run`` returns None when the step holds, else what broke (in both languages). ``section`` is the heading
    id of the lesson section to re-read when it breaks (the exercise's own section when empty).
    """

    name: Words
    run: Callable[..., Words | None]  # takes the check's Trial (checking.py)
    section: str = ""


def resolve(target: str) -> tuple[object, str, Callable]:
    """``module:Owner.name`` -> (the object that holds the function, its attribute name, the function)."""
    module_name, _, qualname = target.partition(":")
    owner: object = importlib.import_module(module_name)
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    function = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    return owner, name, function
