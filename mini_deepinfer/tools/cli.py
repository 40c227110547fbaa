"""What every command line shares: one-line errors, exit codes, flag names, shared options.

Scope: :class:`OneLineParser` (argparse that raises :class:`UsageError` instead of printing usage), the
:func:`run_command` wrapper every command's ``main`` goes through (an input error becomes one line on stderr
and exit code 2; Ctrl-C, SIGTERM and SIGHUP one line and exit code 128 + the signal's number, 130 for Ctrl-C,
after every writer has removed what it left half-written; never a traceback), :func:`printable` (control
characters in a message escaped, so that a crafted path or prompt cannot print a second, forged line),
:func:`in_flag_terms` (the library's messages in the command's flag names), :class:`FlagNeeds` and
:class:`FlagUnusedWith` (an option that means something only with another, or nothing with another, refused
where it would do nothing), the ``--graphs`` / ``--eager`` pair and
``--compile``, and an argparse type for comma-separated numbers. Standard library only.
Non-scope: what any command does.
"""

from __future__ import annotations

import _thread
import argparse
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FlagNeeds", "FlagUnusedWith", "Interrupted", "OneLineParser", "STOP_SIGNALS", "UsageError",
    "add_execution_options", "argument_bytes", "argument_text", "check_flag_needs", "execution_choice",
    "in_flag_terms", "positive_ints", "printable", "run_command", "stop_signals_raise",
]

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""What a shell (Ctrl-C, a closed terminal) or a supervisor (``kill``, systemd, docker stop) sends to stop a
command; each one unwinds the command so that its writers clean up."""


REDELIVER_S = 0.01  # how long after a swallowed stop it is delivered again (see stop_signals_raise)


class UsageError(ValueError):
    """Bad command-line input: printed as one line, exit code 2."""


CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""What a terminal or a line-by-line reader of a log acts on: C0 and C1 controls (newline, carriage return,
the escape that starts an ANSI sequence), DEL, and Unicode's line and paragraph separators."""


def printable(text: str) -> str:
    """``text`` with every control character written as its Python escape (``\\n``, ``\\r``, ``\\x1b``).

    A message names what the user gave (a path, a prompt file, a template, a token); printed as it is, a name
    holding a newline would print a second line that a log reader takes for another message, and an ANSI
    sequence would recolour or erase the terminal. Every other character, Chinese included, stays as it is.
    """
    return CONTROL_CHARACTERS.sub(lambda match: repr(match.group())[1:-1], text)


def _given(args: argparse.Namespace, flag: str) -> bool:
    """Whether ``flag`` was given: any value counts, 0 included; None and False are the parser's "not given"
    (a flag in a :class:`FlagNeeds` or :class:`FlagUnusedWith` table has no other default)."""
    value = getattr(args, flag.lstrip("-").replace("-", "_"))
    return value is not None and value is not False


@dataclass(frozen=True)
class FlagNeeds:
    """``flag`` means something only when ``needs`` is given (a true or non-zero value; ``condition`` says
    which when that is narrower). Given alone it would change nothing, and a run record would show it as if it
    had been tuned: it is refused instead. The flag has no default in the parser (None or False), so the check
    sees whether it was given; its default applies where it is used."""

    flag: str
    needs: str
    condition: str = ""

    def broken_by(self, args: argparse.Namespace) -> bool:
        return _given(args, self.flag) and not getattr(args, self.needs.lstrip("-").replace("-", "_"))

    def message(self) -> str:
        return f"{self.flag} is used only with {self.needs}{' ' + self.condition if self.condition else ''}"


@dataclass(frozen=True)
class FlagUnusedWith:
    """``flag`` means nothing when ``other`` is given: the command then does something else, which does not
    read it. Both given are refused, as :class:`FlagNeeds` refuses a flag given alone."""

    flag: str
    other: str

    def broken_by(self, args: argparse.Namespace) -> bool:
        return _given(args, self.flag) and _given(args, self.other)

    def message(self) -> str:
        return f"{self.flag} is not used with {self.other}"


def check_flag_needs(args: argparse.Namespace, table: Sequence[FlagNeeds | FlagUnusedWith]) -> None:
    """Raise :class:`UsageError` for the first rule of ``table`` that the given flags break."""
    for rule in table:
        if rule.broken_by(args):
            raise UsageError(rule.message())


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus a message on errors; we raise, and ``run_command`` prints one line.

    ``needs`` is the command's table of options that mean something only with another (:class:`FlagNeeds`);
    ``parse_args`` refuses each one given alone.
    """

    def __init__(self, *args: Any, needs: Sequence[FlagNeeds | FlagUnusedWith] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.needs = tuple(needs)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        parsed = super().parse_args(args, namespace)
        check_flag_needs(parsed, self.needs)
        return parsed


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived; ``signum`` says which.

    A subclass on purpose: when a bare ``KeyboardInterrupt`` leaves code that ``exec`` or ``eval`` runs from a
    string (dataclasses and namedtuples build their methods that way, so importing torch does it thousands of
    times), CPython notes it as unhandled and, at exit, ends the process by SIGINT (status -2) even though
    the command caught it and asked for 130. CPython notes only the exact class, never a subclass.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextmanager
def stop_signals_raise() -> Iterator[None]:
    """Inside the block, the first of :data:`STOP_SIGNALS` raises :class:`Interrupted`.

    Later signals are ignored from then on, also after the block: the command is cleaning up and ending, and a
    second Ctrl-C must interrupt neither the removal of a half-written folder nor the interpreter's exit.
    Without a signal the previous handlers come back when the block ends. Outside the main thread (where
    Python runs no signal handler) the block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        if not received:
            received.append(signum)
            raise Interrupted(signum)

    def unraisable(info: object) -> None:
        # A handler runs wherever the main thread is. Inside a finalizer or a weakref callback (importlib's
        # module locks have one) its exception cannot propagate: CPython reports it as "ignored" and goes on,
        # and the stop would be lost. Report nothing; deliver the signal again a moment later, when the
        # callback has returned, and the handler raises once more, where the exception can unwind the command.
        exc = getattr(info, "exc_value", None)
        if isinstance(exc, Interrupted) and received == [exc.signum]:
            received.clear()
            threading.Timer(REDELIVER_S, _thread.interrupt_main, args=(exc.signum,)).start()
        else:
            previous_hook(info)

    previous = _set_handlers(dict.fromkeys(STOP_SIGNALS, handler))
    previous_hook, sys.unraisablehook = sys.unraisablehook, unraisable
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        _set_handlers({signum: signal.SIG_IGN if received else old for signum, old in previous.items()})


def _set_handlers(handlers: Mapping[int, object]) -> dict[int, object]:
    """Install each handler; return the ones replaced. A signal the platform refuses (a browser's Python
    has no SIGHUP to catch) is left alone."""
    previous = {}
    for signum, handler in handlers.items():
        try:
            previous[signum] = signal.signal(signum, handler)
        except (OSError, ValueError):
            continue
    return previous


def interrupted_line(exc: KeyboardInterrupt) -> tuple[str, int]:
    """The stderr line and exit code of a stop: ``error: interrupted``, 130 (Ctrl-C); 128 + N for signal N."""
    signum = getattr(exc, "signum", signal.SIGINT)
    if signum == signal.SIGINT:
        return "error: interrupted", 130
    return f"error: interrupted by {signal.Signals(signum).name}", 128 + signum


def escape_what_stdout_cannot_show() -> None:
    """Under a locale whose encoding is not UTF-8 (``LC_ALL=C`` is ASCII), a character the encoding lacks is
    printed as an escape (``\\u4f60``), not a failure after the whole run."""
    encoding = (getattr(sys.stdout, "encoding", None) or "").lower().replace("-", "")
    if encoding not in ("utf8", "utf_8") and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(errors="backslashreplace")


# --8<-- [start:run_command]
def run_command(body: Callable[[list[str]], int], argv: Sequence[str] | None = None,
                errors: tuple[type[BaseException], ...] = (ValueError,)) -> int:
    """Run a command's ``body(argv)`` and turn input errors into one line on stderr and exit code 2.

    Every input error in this package is a ``ValueError`` with a one-line message (``UsageError`` for flags,
    the library's own checks for everything else); ``errors`` adds others a command expects (file errors for
    commands that write folders). Ctrl-C ends with exit code 130, SIGTERM and SIGHUP with 128 + their number,
    each after the block it interrupted has cleaned up (``stop_signals_raise``). A reader of stdout that goes
    away (``| head``) ends the command quietly with 141, as SIGPIPE ends other tools.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    escape_what_stdout_cannot_show()
    try:
        with stop_signals_raise():
            return body(argv)
    except BrokenPipeError:  # before ``errors``, which may hold OSError
        # Output still buffered would fail again when Python flushes stdout at exit; send it nowhere (the
        # advice of the signal module's "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except errors as exc:
        print(f"error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        line, code = interrupted_line(exc)
        print(line, file=sys.stderr)
        return code
# --8<-- [end:run_command]


# --8<-- [start:in_flag_terms]
@contextmanager
def in_flag_terms(flags: Mapping[str, str]) -> Iterator[None]:
    """Report the library's own checks in the command's words.

    The library checks each value once, where it is made (``EngineConfig``, ``SamplingParams``), and its
    messages start with the parameter's name. Inside this block such a ``ValueError`` is raised again as a
    ``UsageError`` that names the flag instead: ``max_num_seqs must be ...`` becomes ``--max-num-seqs must be
    ...``. Other errors pass unchanged.
    """
    try:
        yield
    except UsageError:
        raise
    except ValueError as exc:
        name, _, rest = str(exc).partition(" ")
        if name not in flags:
            raise
        raise UsageError(f"{flags[name]} {rest}") from None
# --8<-- [end:in_flag_terms]


def argument_bytes(arg: str) -> bytes:
    """The bytes a command-line argument arrived as. Python decodes them with the locale's encoding (ASCII
    under ``LC_ALL=C``) and keeps each byte it cannot decode as a lone surrogate; this undoes that."""
    try:
        return os.fsencode(arg)
    except UnicodeEncodeError:  # text handed over in-process (``main([...])``), not from a command line
        return arg.encode("utf-8", "surrogateescape")


def argument_text(arg: str) -> str:
    """An argument as UTF-8 text whatever the locale; bytes that are not UTF-8 become ``\\xNN`` escapes."""
    return argument_bytes(arg).decode("utf-8", "backslashreplace")


def positive_ints(text: str) -> list[int]:
    """``"512,2048"`` -> ``[512, 2048]``; every value must be a positive integer (an argparse type)."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def add_execution_options(parser: argparse.ArgumentParser, graphs_note: str = "") -> None:
    """``--graphs`` / ``--eager``: decode rounds on captured graphs, or never (neither: the device's default,
    ``runtime.factory.use_graphs``); ``--compile``: the graph path's decode step through ``torch.compile``
    (implies ``--graphs``). ``graphs_note`` ends the help of ``--graphs`` with what the command does when it
    meets flags under which no round can run as a graph."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--graphs", action="store_true",
                       help="run greedy decode rounds as captured graphs (cuda, npu; on cpu the same static "
                            "buffers, without capture); other rounds run eagerly" + graphs_note)
    group.add_argument("--eager", action="store_true", help="never run rounds as graphs")
    parser.add_argument("--compile", action="store_true",
                        help="compile the graph path's decode step with torch.compile (inductor: Triton on "
                             "cuda, C++ on cpu), every bucket before the first request; implies --graphs, "
                             "so it cannot be combined with --eager")


def execution_choice(args: argparse.Namespace) -> bool | None:
    """True for ``--graphs`` or ``--compile``, False for ``--eager``, None when none was given."""
    if args.compile and args.eager:
        raise UsageError("--compile compiles the graph path's decode step; it cannot be combined with "
                         "--eager (drop one)")
    return True if args.graphs or args.compile else False if args.eager else None
