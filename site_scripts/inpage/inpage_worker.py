"""The Python side of the in-page runs: what the browser's worker calls to run a toy command or an example.

Scope: the lesson pages' Run buttons (``docs/javascripts/inpage-run.js``) hand a command's flags, or an
example's code, to a Web Worker that runs Pyodide; the worker calls :func:`run_command` or :func:`run_example`
here. Before each run the reader's edits of the engine's files are written over the shipped ones
(:func:`apply_edits`) and the engine's modules are imported afresh, so an edited ``core/engine.py`` takes
effect. A command run also returns the table the page draws from the trace (lesson 1's round table, the
rounds in flight of lesson 10), rebuilt for this run by the same code that writes the page's own table
(``site_scripts/lessons/gen_toy.py``). Output goes to ``sys.stdout`` and ``sys.stderr``, which the worker
streams to the page line by line.

This module runs under CPython as well (the tests call it directly); it imports the engine only when a run
starts. The workbook's exercises of the lessons without torch run here too: :func:`exercise_text` gives a
lesson's starter or solution (generated from the shipped engine files, as ``python -m
mini_deepinfer.workbook`` does) and :func:`check_exercise` runs the lesson's check on the reader's code,
printing what ``check N`` prints.

Non-scope: loading Pyodide, stopping a run (the page ends the worker), anything that needs torch.
"""

from __future__ import annotations

import ast
import json
import shlex
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

COMMANDS = {"mini_deepinfer": "mini_deepinfer.__main__",
            "mini_deepinfer.pipeline_demo": "mini_deepinfer.pipeline_demo"}
"""The commands a page can run (``python -m NAME``) -> the module whose ``main(argv)`` runs."""
NEEDS_TORCH = {"mini_deepinfer.pipeline_demo": "--toy"}
"""A command -> the flag without which it loads torch, which the page does not have."""
EDITABLE = "mini_deepinfer/"  # the reader may edit the engine's files, not this module or the generators
KEEP = {__name__}

_root = Path(".")
_originals: dict[str, str] = {}


def load_originals(root: str) -> str:
    """Remember the shipped text of every engine file under ``root``; return their paths as JSON."""
    global _root
    _root = Path(root)
    _originals.clear()
    for path in sorted(_root.rglob("*.py")):
        relative = path.relative_to(_root).as_posix()
        _originals[relative] = path.read_text(encoding="utf-8")
    if hasattr(sys.stdout, "reconfigure"):  # one message per printed line, as the run goes
        sys.stdout.reconfigure(line_buffering=True)
        sys.stderr.reconfigure(line_buffering=True)
    return json.dumps(editable_files())


def editable_files() -> list[str]:
    """The shipped files a reader may open in the editor."""
    return [path for path in _originals if path.startswith(EDITABLE)]


def original(path: str) -> str:
    """The shipped text of ``path`` (one of :func:`editable_files`)."""
    return _originals[path]


def apply_edits(edits_json: str) -> list[str]:
    """Write the reader's edits (JSON: path -> text) over the shipped files, and the shipped text elsewhere.

    Returns the edited paths. Unknown paths are ignored (an edit kept in the browser for a file that a newer
    build no longer ships).
    """
    edits: dict[str, str] = json.loads(edits_json or "{}")
    for path, text in _originals.items():
        wanted = edits.get(path, text) if path.startswith(EDITABLE) else text
        (_root / path).write_text(wanted, encoding="utf-8")
    _forget_modules()
    return sorted(path for path in edits if path in _originals and edits[path] != _originals[path])


def _forget_modules() -> None:
    """Drop the engine's modules (and the generators that import it) so the next import reads the files."""
    for name in list(sys.modules):
        top = name.partition(".")[0]
        parent_of_this = __name__.startswith(f"{name}.")  # this module's packages stay with it
        if top in ("mini_deepinfer", "site_scripts") and name not in KEEP and not parent_of_this:
            del sys.modules[name]
    import importlib

    importlib.invalidate_caches()


def _print_traceback(error: BaseException, skip: int = 1) -> None:
    """The reader's traceback, without this module's own frames at its top."""
    tb = error.__traceback__
    for _ in range(skip):
        tb = tb.tb_next if tb is not None else None
    traceback.print_exception(type(error), error, tb, file=sys.stderr)


def exit_code(error: SystemExit) -> int:
    """The exit status a terminal shows for ``SystemExit``: 0 for none, the number, or 1 with the message.

    ``--help`` ends in ``SystemExit(0)``: a clean exit, as in a terminal, not a failure with a traceback.
    """
    if error.code is None or isinstance(error.code, int):
        return int(error.code or 0)
    print(error.code, file=sys.stderr)  # sys.exit("message") prints the message and exits with 1
    return 1


def table_for(argv: list[str], table: str) -> str:
    """The table a run of these flags gets: a cross-round run (``--pipeline``) reads each round one step
    late, so it gets the rounds in flight, whatever table its page shows; any other run the one asked for.
    The page's markers (``inpage_hooks``) choose by the same rule; a reader may add ``--pipeline``."""
    return "in-flight" if "--pipeline" in argv else table


def run_command(flags: str, table: str = "", command: str = "mini_deepinfer") -> str:
    """Run ``python -m COMMAND FLAGS``; return JSON ``{"code": exit code, "table": ... or null}``.

    A flag error is the command's own one-line ``error: ...`` with exit code 2, and so is a run that would
    need torch; ``--help`` prints the usage and exits 0; an exception from an edited engine shows as its
    traceback (exit code 1).
    """
    try:
        argv = shlex.split(flags)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return json.dumps({"code": 2, "table": None})
    if command in NEEDS_TORCH and NEEDS_TORCH[command] not in argv:
        print(f"error: without {NEEDS_TORCH[command]} this command loads torch, which the page does not "
              "have; run it in a terminal", file=sys.stderr)
        return json.dumps({"code": 2, "table": None})
    run = Recording()
    try:
        code = run.main(COMMANDS[command], argv)
    except SystemExit as error:  # --help, or an edited engine calling sys.exit
        code = exit_code(error)
    except Exception as error:  # the reader's edit broke something: show it as Python would
        _print_traceback(error, skip=2)
        code = 1
    rows = render_table(table_for(argv, table), run) if run.engines and table else None
    return json.dumps({"code": code, "table": rows})


class Recording:
    """A command's ``main(argv)``, keeping the engine its demo ran and, for the A/B/C demo, the pools after
    each round (for the trace tables)."""

    def __init__(self) -> None:
        self.engines: list[Any] = []
        self.snapshots: Any = None

    def main(self, module_name: str, argv: list[str]) -> int:
        import importlib

        command = importlib.import_module(module_name)
        patched = {"run_demo": self._recording(command.run_demo)}
        if hasattr(command, "drive"):  # the A/B/C demo: snapshot the pools after every step
            patched["drive"] = self._snapshotting(command.drive)
        kept = {name: getattr(command, name) for name in patched}
        for name, function in patched.items():
            setattr(command, name, function)
        try:
            return int(command.main(argv))
        finally:
            for name, function in kept.items():
                setattr(command, name, function)

    def _recording(self, demo: Any) -> Any:
        def recording(*args: Any, **kwargs: Any) -> Any:
            engine = demo(*args, **kwargs)
            self.engines.append(engine)
            return engine
        return recording

    def _snapshotting(self, drive: Any) -> Any:
        from site_scripts.lessons.gen_abc import RoundSnapshots

        def snapshotting(engine: Any, requests: Any, after_step: Any = lambda: None) -> None:
            self.snapshots = RoundSnapshots(engine)

            def both() -> None:
                after_step()
                self.snapshots()
            drive(engine, requests, after_step=both)
        return snapshotting


def _cells(row: str) -> list[str]:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def render_table(kind: str, run: Recording) -> list[list[str]] | None:
    """The rows of the table ``kind`` for a run (cells as the page writes them)."""
    events = run.engines[-1].trace.events
    if kind == "rounds":
        from site_scripts.lessons.gen_toy import _round_rows

        return [_cells(row) for row in _round_rows(events)]
    if kind == "abc-rounds" and run.snapshots is not None:
        from site_scripts.lessons.gen_abc import round_rows

        return [_cells(row) for row in round_rows(events, run.snapshots.after)]
    if kind == "in-flight":
        return in_flight_rows(events)
    return None


def _rounds(numbers: Iterable[int]) -> str:
    return ", ".join(str(n) for n in numbers) or "—"


def in_flight_rows(events: list[Any]) -> list[list[str]]:
    """One row per step: the round it launched, the round it read, the rounds in flight after it."""
    steps = sorted({e.round_id for e in events if e.kind in ("launch", "read")})
    launched: set[int] = set()
    read: set[int] = set()
    rows = []
    for step in steps:
        now_launched = [e.data["round"] for e in events if e.round_id == step and e.kind == "launch"]
        now_read = [e.data["round"] for e in events if e.round_id == step and e.kind == "read"]
        launched.update(now_launched)
        read.update(now_read)
        rows.append([str(step), _rounds(now_launched), _rounds(now_read), _rounds(sorted(launched - read))])
    return rows


def _echo(lines: list[str]) -> None:
    """Print a statement as the interactive prompt shows it (``>>>`` first, ``...`` after)."""
    for number, line in enumerate(lines):
        print(("... " if number else ">>> ") + line)


def run_example(source: str) -> str:
    """Run an example as an interactive session: each statement echoed, each value shown, errors shown.

    Like the interactive prompt, a statement that raises shows its traceback and the session goes on.
    Returns JSON ``{"code": 0 if nothing raised else 1, "table": null}``.
    """
    try:
        tree = ast.parse(source, "<stdin>")
    except SyntaxError as error:
        traceback.print_exception(type(error), error, None, file=sys.stderr)  # the reader's line, no frames
        return json.dumps({"code": 1, "table": None})
    lines = source.splitlines()
    namespace: dict[str, Any] = {"__name__": "__main__"}
    failed = False
    for node in tree.body:
        _echo(lines[node.lineno - 1:node.end_lineno])
        try:
            exec(compile(ast.Interactive(body=[node]), "<stdin>", "single"), namespace)
        except SystemExit as error:  # like the interactive prompt: exit() ends the session
            return json.dumps({"code": exit_code(error), "table": None})
        except Exception as error:
            _print_traceback(error)
            failed = True
    return json.dumps({"code": int(failed), "table": None})


def run_script(source: str) -> str:
    """Run an example as a script (an untitled ``python`` block); an exception shows as its traceback.

    Returns JSON ``{"code": 0, or 1 if it raised, "table": null}``.
    """
    try:
        exec(compile(source, "<example>", "exec"), {"__name__": "__main__"})
    except SyntaxError as error:
        traceback.print_exception(type(error), error, None, file=sys.stderr)
        return json.dumps({"code": 1, "table": None})
    except SystemExit as error:
        return json.dumps({"code": exit_code(error), "table": None})
    except Exception as error:
        _print_traceback(error)
        return json.dumps({"code": 1, "table": None})
    return json.dumps({"code": 0, "table": None})


def exercise_text(lesson: int, lang: str, which: str) -> str:
    """The starter (``which="starter"``) or the solution of a lesson's workbook exercise, in ``lang``."""
    from mini_deepinfer.workbook.lessons import exercise
    from mini_deepinfer.workbook.starter import solution_text, starter_text

    item = exercise(int(lesson))
    return starter_text(item, lang) if which == "starter" else solution_text(item, lang)


def check_exercise(lesson: int, source: str, lang: str) -> str:
    """Run lesson ``lesson``'s workbook check on the reader's code, printing its lines as ``check N`` does.

    Returns JSON ``{"code": 0 every check holds, 1 one broke, 2 the code cannot be checked, "table": null}``.
    """
    from mini_deepinfer.workbook.checking import check_source
    from mini_deepinfer.workbook.lessons import exercise

    item = exercise(int(lesson))
    outcome = check_source(item, source, item.file_name, lang)
    for line in outcome.lines:
        print(line, file=sys.stderr if outcome.code == 2 else sys.stdout)
    return json.dumps({"code": outcome.code, "table": None})
