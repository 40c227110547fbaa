"""What every command line shares: one-line errors, exit codes, flag names, shared options.

Scope: :class:`OneLineParser` (argparse that raises :class:`UsageError` instead of printing usage), the
:func:`run_command` wrapper every command's ``main`` goes through (an input error becomes one line on stderr
and exit code 2, Ctrl-C exit code 130, never a traceback), :func:`in_flag_terms` (the library's messages in
the command's flag names), the ``--graphs`` / ``--eager`` pair and ``--compile``, and an argparse type for
comma-separated numbers. Standard library only. Non-scope: what any command does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager

__all__ = [
    "OneLineParser", "UsageError", "add_execution_options", "execution_choice", "in_flag_terms",
    "positive_ints", "run_command",
]


class UsageError(ValueError):
    """Bad command-line input: printed as one line, exit code 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus a message on errors; we raise, and ``run_command`` prints one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


# --8<-- [start:run_command]
def run_command(body: Callable[[list[str]], int], argv: Sequence[str] | None = None,
                errors: tuple[type[BaseException], ...] = (ValueError,)) -> int:
    """Run a command's ``body(argv)`` and turn input errors into one line on stderr and exit code 2.

    Every input error in this package is a ``ValueError`` with a one-line message (``UsageError`` for flags,
    the library's own checks for everything else); ``errors`` adds others a command expects (file errors for
    commands that write folders). Ctrl-C ends with exit code 130.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return body(argv)
    except errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
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
