"""``python -m mini_deepinfer.random_checkpoint``: write a randomly initialised checkpoint in the released
layout.

Usage::

    python -m mini_deepinfer.random_checkpoint --preset tiny OUTPUT_DIR
    python -m mini_deepinfer.random_checkpoint --preset qwen3.5-0.8b --seed 1 --dtype bfloat16 OUTPUT_DIR

Scope: the command line. The writer (presets, random weights, shards, tokenizer, the staged folder) is
``tools.checkpoints``; its module text says what a checkpoint holds and what it leaves out.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from mini_deepinfer.core.request import MAX_SEED
from mini_deepinfer.tools.checkpoint_options import (
    CHECKPOINT_DTYPE_NAMES,
    CHECKPOINT_PRESETS,
    DEFAULT_MAX_SHARD_SIZE,
)
from mini_deepinfer.tools.cli import OneLineParser, UsageError, printable, run_command

_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(text: str) -> int:
    """``"2GB"``, ``"500MB"``, ``"64KiB"`` or a plain byte count, to bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}; use e.g. 2GB, 500MB or a byte count")
    size = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if size < 1:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}; it must be at least one byte")
    return size


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="python -m mini_deepinfer.random_checkpoint",
        description="Write a randomly initialised checkpoint in the released Hugging Face layout "
        "(config, safetensors weights, tokenizer, chat template, generation config).",
    )
    parser.add_argument("output", metavar="OUTPUT_DIR", type=Path, help="folder to create")
    parser.add_argument("--preset", required=True, choices=CHECKPOINT_PRESETS, help="model shape")
    parser.add_argument("--seed", type=int, default=0, help="random seed, 0..2**64-1 (default 0)")
    parser.add_argument(
        "--dtype", choices=CHECKPOINT_DTYPE_NAMES, default="bfloat16",
        help="weight dtype (default bfloat16)"
    )
    parser.add_argument(
        "--max-shard-size",
        type=parse_size,
        default=DEFAULT_MAX_SHARD_SIZE,
        help="largest weight file before the weights are split into shards (default 2GB)",
    )
    parser.add_argument("--force", action="store_true", help="replace OUTPUT_DIR if it is not empty")
    return parser


def run(argv: list[str]) -> int:
    """Every flag is checked before torch is imported (the writer imports it)."""
    args = build_parser().parse_args(argv)
    if not 0 <= args.seed <= MAX_SEED:
        raise UsageError(f"--seed must be in 0..2**64-1, got {args.seed}")
    from mini_deepinfer.tools.checkpoints import CHECKPOINT_DTYPES, write_random_checkpoint

    summary = write_random_checkpoint(
        args.output, args.preset, args.seed, CHECKPOINT_DTYPES[args.dtype], args.max_shard_size, args.force
    )
    print(printable(summary.describe()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m mini_deepinfer.random_checkpoint``; returns the exit code."""
    return run_command(run, argv, errors=(ValueError, OSError))


if __name__ == "__main__":
    sys.exit(main())
