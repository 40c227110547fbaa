"""Checking the learner's functions: the lesson's scenario with theirs and with the engine's, then invariants.

Scope: :class:`Trial` (runs a scenario once with the engine's own functions and once with the learner's
swapped in, each run kept for the later steps), :func:`check_source` (load the learner's text, run the
lesson's ``CHECKS`` in order, and say in the learner's language what held, the first step that broke, and
which section of the lesson to re-read), and :class:`Outcome` (its lines and exit code: 0 all held, 1 a step
broke or the learner's code raised, 2 the file cannot be checked). The first step of every lesson compares
with the engine; it does not stop the check, so the first broken invariant is named too. An exception in the
learner's code stops the check and is shown with the frames of their file only.
Non-scope: the scenarios and invariants (``checks/lesson_NN.py``), files and flags (``__main__.py``).
"""

from __future__ import annotations

import importlib
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from .exercise import Exercise
from .learner import BadFile, learner_traceback, load_functions, swapped
from .words import Words

ENGINE_RUNS: dict[tuple, object] = {}
"""Each scenario's run with the engine's own functions, by (scenario, arguments). The engine's runs are
deterministic (fixed seeds, one thread), so a process runs each once; the page's worker imports this module
afresh after an edit of the engine's files, which starts it empty."""
TIME_LIMIT_S = 60  # a scenario that runs longer has a loop that never ends (every scenario takes < 10 s)

PASSED = Words("  ok  {name}", "  通过  {name}")
BROKE = Words("  FAIL  {name}", "  未通过  {name}")
REREAD = Words("        re-read: lesson {lesson}, {link}", "        回去读：第 {lesson} 课，{link}")
ALL_HELD = Words("lesson {lesson}: every check holds. Your {names} runs inside the engine as its own does.",
                 "第 {lesson} 课：全部检查通过。你写的 {names} 在引擎里跑出了与引擎自己的版本相同的结果。")
SOME_BROKE = Words("lesson {lesson}: {failed} of {total} checks broke; the first one above says where to "
                   "look.",
                   "第 {lesson} 课：{total} 项检查中有 {failed} 项未通过；看上面第一项，它指明了该读哪一节。")
STARTER = Words("lesson {lesson}: {name}() is still the starter (it raises NotImplementedError). Write its "
                "body "
                "in {file}, then run the check again. Stuck? Read {link}.",
                "第 {lesson} 课：{name}() 还是起步代码（抛出 NotImplementedError）。在 {file} 里写好函数体，"
                "再检查一次。卡住了？读 {link}。")
RAISED = Words("lesson {lesson}: your code raised an exception while the check ran {name}:",
               "第 {lesson} 课：检查运行「{name}」时，你的代码抛出了异常：")
TOO_LONG = Words("the scenario ran for more than {seconds} s: a loop that never ends?",
                 "场景运行超过 {seconds} 秒：是不是有一个不会结束的循环？")


class LearnerRaised(Exception):
    """The learner's code raised while a scenario ran (``original`` is the learner's exception)."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


class TookTooLong(Exception):
    """A scenario ran past ``TIME_LIMIT_S``."""


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Raise :class:`TookTooLong` after ``seconds`` (on the main thread, where SIGALRM exists; in the page the
    reader's Stop button ends the worker instead)."""
    usable = (hasattr(signal, "SIGALRM") and hasattr(signal, "alarm")  # Pyodide has the name, not the call
              and threading.current_thread() is threading.main_thread())
    if not usable:
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise TookTooLong()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Trial:
    """The learner's functions for one check, and the scenarios already run (each runs once per side)."""

    functions: dict[str, Callable]
    _runs: dict[tuple, object] = field(default_factory=dict)

    def engine(self, scenario: Callable, *args: object) -> object:
        """``scenario(*args)`` with the engine's own functions: run once per process (:data:`ENGINE_RUNS`),
        since every check of a lesson compares with the same runs (the tests check many wrong versions)."""
        key = (scenario, args)
        if key not in ENGINE_RUNS:
            ENGINE_RUNS[key] = scenario(*args)
        return ENGINE_RUNS[key]

    def learner(self, scenario: Callable, *args: object) -> object:
        """``scenario(*args)`` with the learner's functions swapped in."""
        key = ("learner", scenario, args)
        if key not in self._runs:
            try:
                with swapped(self.functions), time_limit(TIME_LIMIT_S):
                    self._runs[key] = scenario(*args)
            except (TookTooLong, LearnerRaised):
                raise
            except Exception as exc:  # noqa: BLE001 - any error of the learner's code is theirs to see
                raise LearnerRaised(exc) from exc
        return self._runs[key]


@dataclass
class Outcome:
    """What a check says, line by line, and its exit code."""

    code: int
    lines: list[str]


def lesson_checks(exercise: Exercise) -> list:
    """The lesson's ``CHECKS`` (its module is imported only now: a torch lesson imports torch here)."""
    return list(importlib.import_module(f"{__package__}.checks.{exercise.checks}").CHECKS)


def check_source(exercise: Exercise, source: str, filename: str, lang: str,
                 fail_fast: bool = False) -> Outcome:
    """Check the learner's text (``filename`` is how their file is named in messages and tracebacks).

    ``fail_fast`` stops at the first broken step, the comparison included (the tests that only ask whether a
    wrong version fails use it; a learner is always told the first broken invariant too).
    """
    try:
        functions = load_functions(exercise, source, filename)
    except BadFile as exc:
        return Outcome(2, [f"error: {exc}"])
    except Exception as exc:  # noqa: BLE001 - the learner's file raised while it ran
        return Outcome(1, [RAISED(lang).format(lesson=exercise.lesson, name=filename),
                           *learner_traceback(exc, filename)])
    return run_checks(exercise, Trial(functions), filename, lang, fail_fast)


def run_checks(exercise: Exercise, trial: Trial, filename: str, lang: str,
               fail_fast: bool = False) -> Outcome:
    """Run the lesson's steps in order. The first (the comparison with the engine) does not stop the check;
    any later step that breaks does: it is the first broken invariant."""
    lines, broken, checks = [], 0, lesson_checks(exercise)
    for index, check in enumerate(checks):
        name = check.name(lang)
        try:
            what = check.run(trial)
        except LearnerRaised as exc:
            return Outcome(1, lines + raised_lines(exercise, exc.original, name, filename, lang))
        except TookTooLong:
            what = TOO_LONG.format(seconds=TIME_LIMIT_S)
        if what is None:
            lines.append(PASSED(lang).format(name=name))
            continue
        lines.append(BROKE(lang).format(name=name))
        lines.extend(f"        {line}" for line in what(lang).splitlines())
        if not broken:
            link = exercise.section_link(lang, check.section or None)
            lines.append(REREAD(lang).format(lesson=exercise.lesson, link=link))
        broken += 1
        if index > 0 or fail_fast:
            break
    if broken:
        return Outcome(1, lines + [SOME_BROKE(lang).format(lesson=exercise.lesson, failed=broken,
                                                           total=len(checks))])
    names = ", ".join(f"{name}()" for name in exercise.names)
    return Outcome(0, lines + [ALL_HELD(lang).format(lesson=exercise.lesson, names=names)])


def raised_lines(exercise: Exercise, exc: BaseException, name: str, filename: str, lang: str) -> list[str]:
    """A starter still in place gets a kind line; any other exception its traceback, cut to the learner's
    file."""
    where = last_frame_in(exc, filename)
    if isinstance(exc, NotImplementedError) and where in exercise.names:
        return [STARTER(lang).format(lesson=exercise.lesson, name=where, file=filename,
                                     link=exercise.section_link(lang))]
    return [RAISED(lang).format(lesson=exercise.lesson, name=name), *learner_traceback(exc, filename)]


def last_frame_in(exc: BaseException, filename: str) -> str | None:
    """The name of the learner's function the exception was raised in (None: not in their file)."""
    found, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            found = tb.tb_frame.f_code.co_name
        tb = tb.tb_next
    return found
