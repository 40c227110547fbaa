"""``python -m mini_deepinfer.workbook``: write the engine yourself, lesson by lesson, and check it.

Scope: the five commands and their files (``start`` and ``solution`` also take ``all``, every lesson in
turn): ``list`` (one line per exercise: lesson, function, ``page`` or
``local``), ``start N`` (write the starter, never over a learner's file unless ``--force``, which keeps a
backup), ``check N`` (0 every check holds, 1 one broke, 2 bad input), ``solution N`` (print the engine's
function; ``--write`` puts it in the learner's file, keeping a backup) and ``run -- FLAGS`` (the capstone:
``generate`` with every function the learner has written). Non-scope: the checks (``checking.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from mini_deepinfer.tools.cli import OneLineParser, UsageError, run_command

from .checking import LearnerRaised, check_source
from .learner import BadFile
from .lessons import EXERCISES, exercise
from .starter import put_solution, solution_text, starter_text
from .words import LANGUAGES, Words, default_language

DEFAULT_DIR = "workbook"

STARTED = Words("wrote {path}: write the body of {names}, then run: python -m mini_deepinfer.workbook "
                "check {lesson}",
                "已写出 {path}：写好 {names} 的函数体，然后运行："
                "python -m mini_deepinfer.workbook check {lesson}")
KEPT = Words("{path} already exists and was left as it is (start {lesson} --force starts over, keeping a "
             "backup)", "{path} 已存在，保持不变（start {lesson} --force 会重新开始，并保留备份）")
BACKUP = Words("kept the old file as {path}", "旧文件已保留为 {path}")
WRITTEN = Words("put the engine's {names} into {path}; check {lesson} now passes",
                "已把引擎的 {names} 写入 {path}；现在 check {lesson} 会通过")
NO_STARTER = "{path} does not exist yet: python -m mini_deepinfer.workbook start {lesson} writes it"
WHERE = {True: "page", False: "local"}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = OneLineParser(prog="python -m mini_deepinfer.workbook",
                           description="Write the engine's functions yourself; check them inside the engine.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    listing = commands.add_parser("list", help="the exercises: lesson, page or local, function")
    listing.add_argument("--lang", choices=LANGUAGES, help="language of titles (default: the locale's)")
    for name, text in (("start", "write the starter for lesson N"),
                       ("check", "run lesson N's checks on your functions"),
                       ("solution", "print the reference (the engine's own function)")):
        sub = commands.add_parser(name, help=text)
        if name == "check":
            sub.add_argument("lesson", type=int_lesson, metavar="N", help="the lesson, 1 to 15")
        else:
            sub.add_argument("lesson", type=lessons_or_all, metavar="N",
                             help="the lesson, 1 to 15, or all (every lesson in turn)")
        sub.add_argument("--dir", default=DEFAULT_DIR, help=f"the workbook folder (default {DEFAULT_DIR}/)")
        sub.add_argument("--lang", choices=LANGUAGES, help="language of messages (default: from the locale)")
        if name == "start":
            sub.add_argument("--force", action="store_true", help="start over (keeps a backup)")
        if name == "solution":
            sub.add_argument("--write", action="store_true",
                             help="replace your function(s) in your file with the engine's (keeps a backup)")
    run = commands.add_parser("run", help="generate text with every function you have written swapped in")
    run.add_argument("--dir", default=DEFAULT_DIR, help=f"the workbook folder (default {DEFAULT_DIR}/)")
    run.add_argument("--lang", choices=LANGUAGES, help="language of messages (default: from the locale)")
    run.add_argument("generate", nargs=argparse.REMAINDER, help="-- then generate's flags")
    args = parser.parse_args(argv)
    args.lang = args.lang or default_language()
    return args


def lessons_or_all(text: str) -> list[int]:
    """``all`` -> every lesson; a number -> that lesson (as :func:`int_lesson` checks it)."""
    return [item.lesson for item in EXERCISES] if text == "all" else [int_lesson(text)]


def each_lesson(command):
    """Run ``command(args)`` for each lesson that ``args.lesson`` lists; the largest exit code wins."""
    def run(args: argparse.Namespace) -> int:
        codes = [command(argparse.Namespace(**{**vars(args), "lesson": lesson})) for lesson in args.lesson]
        return max(codes)
    return run


def int_lesson(text: str) -> int:
    try:
        lesson = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"lesson must be a number from 1 to {len(EXERCISES)}, got {text!r}")
    try:
        exercise(lesson)
    except ValueError as exc:  # 0, 16, ...: argparse shows an ArgumentTypeError's own words
        raise argparse.ArgumentTypeError(str(exc)) from None
    return lesson


def show_list(lang: str) -> int:
    for item in EXERCISES:
        names = " + ".join(f"{name}()" for name in item.qualnames)
        print(f"{item.lesson:>2}  {WHERE[item.in_page]:<5}  {names}  ({item.title(lang)})")
    return 0


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it: never a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def keep_backup(path: Path) -> Path:
    """Copy ``path`` to the first free ``NAME.bak``, ``NAME.bak2``, ... beside it."""
    number = 1
    while (backup := path.with_name(path.name + (".bak" if number == 1 else f".bak{number}"))).exists():
        number += 1
    write_atomically(backup, path.read_text(encoding="utf-8"))
    return backup


def start(args: argparse.Namespace) -> int:
    item, path = exercise(args.lesson), Path(args.dir) / exercise(args.lesson).file_name
    names = ", ".join(f"{name}()" for name in item.names)
    if path.exists() and not args.force:
        print(KEPT(args.lang).format(path=path, lesson=item.lesson))
        return 0
    if path.exists():
        print(BACKUP(args.lang).format(path=keep_backup(path)))
    write_atomically(path, starter_text(item, args.lang))
    print(STARTED(args.lang).format(path=path, names=names, lesson=item.lesson))
    return 0


def learner_file(args: argparse.Namespace) -> Path:
    path = Path(args.dir) / exercise(args.lesson).file_name
    if not path.is_file():
        raise UsageError(NO_STARTER.format(path=path, lesson=args.lesson))
    return path


def read_learner(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not UTF-8 text (byte {exc.start})") from None


def check(args: argparse.Namespace) -> int:
    path = learner_file(args)
    outcome = check_source(exercise(args.lesson), read_learner(path), str(path), args.lang)
    stream = sys.stderr if outcome.code == 2 else sys.stdout
    for line in outcome.lines:
        print(line, file=stream)
    return outcome.code


def solution(args: argparse.Namespace) -> int:
    item = exercise(args.lesson)
    if not args.write:
        print(solution_text(item, args.lang), end="")
        return 0
    path = learner_file(args)
    try:
        text = put_solution(item, read_learner(path), str(path))
    except BadFile as exc:
        raise UsageError(str(exc)) from None
    print(BACKUP(args.lang).format(path=keep_backup(path)))
    write_atomically(path, text)
    names = ", ".join(f"{name}()" for name in item.names)
    print(WRITTEN(args.lang).format(names=names, path=path, lesson=item.lesson))
    return 0


def main_body(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.command == "list":
        return show_list(args.lang)
    if args.command == "run":
        from .capstone import run_capstone, show_raised  # the capstone runs generate (and torch)

        try:
            return run_capstone(Path(args.dir), args.generate, args.lang)
        except LearnerRaised as exc:
            return show_raised(exc, Path(args.dir), args.lang)
    commands = {"start": each_lesson(start), "check": check, "solution": each_lesson(solution)}
    return commands[args.command](args)


def main(argv: list[str] | None = None) -> int:
    return run_command(main_body, argv, errors=(ValueError, OSError))


if __name__ == "__main__":
    sys.exit(main())
