"""The learner's code: load it from their file, swap it into the engine, and show their errors only.

Scope: :func:`load_functions` (compile the learner's text and take the exercise's functions from it; a syntax
error or a missing function is a :class:`BadFile`, one line), :func:`swapped` (for the length of a block, the
engine calls the learner's functions wherever it called its own: the class attribute of a method, and every
module of the package that imported a plain function by name), and :func:`learner_traceback` (an exception's
traceback cut down to the frames in the learner's file). Non-scope: what the check compares (``checking.py``).
"""

from __future__ import annotations

import sys
import traceback
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .exercise import Exercise, resolve

PACKAGE = "mini_deepinfer"


class BadFile(ValueError):
    """The learner's file cannot be checked as it is (a syntax error, a renamed function): exit 2."""


def load_functions(exercise: Exercise, source: str, filename: str) -> dict[str, Callable]:
    """Run the learner's file as a module and return its functions, by the exercise's target names.

    An exception raised while the file itself runs (not a syntax error) propagates: it is the learner's.
    """
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as exc:
        raise BadFile(f"{filename}, line {exc.lineno}: {exc.msg}; fix it, then check again") from None
    module = types.ModuleType(f"workbook_lesson_{exercise.lesson:02d}")
    module.__file__ = filename
    exec(code, module.__dict__)  # noqa: S102 - the learner's own file, run as they would run it
    functions = {}
    for target, name in zip(exercise.targets, exercise.names):
        function = module.__dict__.get(name)
        if not isinstance(function, types.FunctionType):
            raise BadFile(f"{filename} has no function {name}() (the starter's name); keep the name the "
                          f"engine calls")
        functions[target] = function
    return functions


def _holders(original: Callable) -> list[tuple[object, str]]:
    """Every module of the package that holds ``original`` under some name (``from .x import f``)."""
    found = []
    for name, module in list(sys.modules.items()):
        if module is None or not (name == PACKAGE or name.startswith(PACKAGE + ".")):
            continue
        for attr, value in list(vars(module).items()):
            if value is original:
                found.append((module, attr))
    return found


@contextmanager
def swapped(functions: dict[str, Callable]) -> Iterator[Callable[[], None]]:
    """Inside the block the engine runs the learner's functions instead of its own; outside, its own again.

    The block gets a function that puts the engine's own back early (the capstone's greedy check runs the
    engine's own functions after the learner's have generated the text).
    """
    saved: list[tuple[object, str, object]] = []

    def restore() -> None:
        while saved:
            place, attr, value = saved.pop()
            setattr(place, attr, value)

    try:
        for target, function in functions.items():
            owner, name, original = resolve(target)
            places = [(owner, name)] if isinstance(owner, type) else _holders(original)
            for place, attr in places:
                saved.append((place, attr, vars(place)[attr]))
                setattr(place, attr, function)
        yield restore
    finally:
        restore()


def learner_traceback(exc: BaseException, filename: str) -> list[str]:
    """The exception's traceback with only the frames in the learner's file, then its last line."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == filename]
    lines = traceback.format_list(frames)
    last = traceback.format_exception_only(type(exc), exc)[-1]
    head = ["Traceback (only the frames in your file):\n"] if frames else []
    return [line.rstrip("\n") for line in head + lines + [last]]
