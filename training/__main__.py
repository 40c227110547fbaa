"""``python -m training``: train the site's small Qwen3.5-shaped target and draft, or check the record.

Usage::

    python -m training                    # fetch the corpora, train, write trained/
    python -m training --smoke OUT        # a few steps of every stage, into OUT
    python -m training --check 300        # retrain the target's first 300 steps, compare with its record

Scope: the command line (its flags, and that every error is one line on stderr and exit code 2:
``run.command``). Non-scope: the steps (``run.py`` calls them in order), measuring the models with the
engine (``python -m training.measure``).
"""

from __future__ import annotations

import sys
from argparse import ArgumentTypeError
from pathlib import Path

from mini_deepinfer.tools.cli import OneLineParser, UsageError
from training.run import DRAFTS, FULL, OUTPUT, SEED, SMOKE, command, run


def parser() -> OneLineParser:
    parser = OneLineParser(prog="python -m training",
                           description="Train the site's small target and draft, or check the record.")
    parser.add_argument("output", nargs="?", type=Path, default=OUTPUT, help="folder for target/ and draft/")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--smoke", action="store_true", help="a few steps of every stage (checks the code)")
    parser.add_argument("--drafts-only", action="store_true",
                        help="train only the drafts, from the target already in OUTPUT/target")
    parser.add_argument("--draft", choices=DRAFTS, action="append",
                        help="with --drafts-only: train only this draft (repeatable; default both)")
    parser.add_argument("--check", type=positive_int, metavar="STEPS",
                        help="train the target for STEPS steps, compare with OUTPUT/target/training.json and "
                        "write what it found to OUTPUT/target-check.json (exit 1 if one is over 2%% off)")
    return parser


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


def body(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.draft and not args.drafts_only:
        raise UsageError("--draft chooses among the drafts of --drafts-only; add --drafts-only or drop it")
    if args.check:
        from training.check import check_against_record

        return check_against_record(args.output / "target", args.check)
    run(args.output, SMOKE if args.smoke else FULL, args.seed, limit_docs=200 if args.smoke else None,
        drafts_only=args.drafts_only, drafts=args.draft or DRAFTS)
    return 0


def main(argv: list[str] | None = None) -> int:
    return command(body, argv)


if __name__ == "__main__":
    sys.exit(main())
