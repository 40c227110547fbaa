"""The capstone: ``generate`` with every function the learner has written, the engine's own for the rest.

Scope: finding which of the fifteen exercises the learner has written (a file in the workbook folder whose
functions are no longer the starter's ``raise NotImplementedError``), saying so first, then running
``python -m mini_deepinfer.generate`` with the given flags and those functions swapped in. With
``--check-greedy`` the delivered tokens are compared, after the run, with a plain greedy run of the target by
the engine's own functions (``generate``'s own check, run once the learner's functions are swapped out
again). Non-scope: checking each function (``check N`` does that, lesson by lesson).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

from mini_deepinfer.tools.cli import UsageError

from .checking import LearnerRaised
from .learner import BadFile, learner_traceback, load_functions, swapped
from .lessons import EXERCISES
from .words import Words

YOURS = Words("Your functions ({count} of {total} lessons): {lessons}",
              "你写的函数（{total} 课中的 {count} 课）：{lessons}")
ENGINES = Words("The engine's own: {lessons}", "引擎自己的：{lessons}")
NONE = Words("none", "无")
ALL = Words("All fifteen are yours: the text below comes from your own engine.",
            "十五个全是你写的：下面的文字来自你自己的引擎。")
RAISED = Words("your code raised an exception while generate ran:", "generate 运行时你的代码抛出了异常：")


def is_starter(function: ast.FunctionDef) -> bool:
    """True when the body is still the starter's: a docstring, comments, ``raise NotImplementedError``."""
    body = function.body[1:] if ast.get_docstring(function) is not None else function.body
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def written(folder: Path) -> dict[int, tuple[Path, dict[str, Callable]]]:
    """The lessons whose file in ``folder`` holds the learner's own functions, with those functions."""
    found = {}
    for item in EXERCISES:
        path = folder / item.file_name
        if not path.is_file():
            continue
        source = path.read_text(encoding="utf-8")
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            where = f"{path}, line {exc.lineno}"
            raise UsageError(f"{where}: {exc.msg}; fix it (check {item.lesson} says more)") from None
        defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in item.names]
        if not defs or all(is_starter(node) for node in defs):
            continue
        try:
            found[item.lesson] = (path, load_functions(item, source, str(path)))
        except BadFile as exc:
            raise UsageError(str(exc)) from None
    return found


def ranges(lessons: list[int]) -> str:
    return ", ".join(str(n) for n in lessons)


def run_capstone(folder: Path, flags: list[str], lang: str) -> int:
    """Say which lessons are the learner's, then run ``generate`` with them swapped in."""
    from mini_deepinfer import generate

    flags = flags[1:] if flags[:1] == ["--"] else flags
    mine = written(folder)
    others = [item.lesson for item in EXERCISES if item.lesson not in mine]
    listed = ranges(sorted(mine)) or NONE(lang)
    print(YOURS(lang).format(count=len(mine), total=len(EXERCISES), lessons=listed))
    print(ALL(lang) if not others else ENGINES(lang).format(lessons=ranges(others)))
    functions = {target: fn for _, chosen in mine.values() for target, fn in chosen.items()}
    with swapped(functions) as restore:
        own_check = generate.run_check_greedy

        def check_with_engine_functions(*args, **kwargs):
            restore()  # the learner's text is written; the reference run uses the engine's own functions
            return own_check(*args, **kwargs)

        generate.run_check_greedy = check_with_engine_functions
        try:
            return generate.run(flags)
        except (ValueError, OSError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - an error in the learner's code: show their frames only
            raise LearnerRaised(exc) from exc
        finally:
            generate.run_check_greedy = own_check


def show_raised(exc: LearnerRaised, folder: Path, lang: str) -> int:
    """Print the learner's exception with the frames of their files only; exit code 1."""
    print(RAISED(lang))
    for item in EXERCISES:
        lines = learner_traceback(exc.original, str(folder / item.file_name))
        if len(lines) > 1:
            print("\n".join(lines))
            return 1
    print(learner_traceback(exc.original, "")[-1])
    return 1
