"""What the two in-process benchmarks, ``bench.rounds`` and ``bench.speculative``, share.

Scope: the presets they build (``IN_CODE_PRESETS``: random Qwen3.5 models built in code), their common
command-line options and the checks on them, the provenance part of their JSON (command, date, source, device,
dtype), the text that says where a result was measured, and the plain-text table layout.

Non-scope: what each benchmark measures and reports (its own module), and the comparison with
transformers (``bench.__main__``, which runs each side in its own process and builds no model in code).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mini_deepinfer.tools.cli import UsageError
from mini_deepinfer.tools.records import check_output_path, package_source_sha, utc_now_iso

if TYPE_CHECKING:  # torch loads once the flags are checked: a bad flag or a Ctrl-C never waits for it
    import torch

IN_CODE_PRESETS = ("tiny", "small", "qwen3.5-0.8b")
"""The ``models.presets`` shapes the in-process benchmarks build in code, with random weights."""


def add_common_options(parser: argparse.ArgumentParser, repeats: int, repeats_help: str) -> None:
    """The options both benchmarks take: where and in what dtype to run, the shape, and the output."""
    p = parser
    p.add_argument("--device", default="cpu", help="cpu, cuda[:N] or npu[:N] (default cpu)")
    p.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default float32)")
    p.add_argument("--preset", default="small",
                   help=f"model shape: {' or '.join(IN_CODE_PRESETS)} (default small)")
    p.add_argument("--repeats", type=int, default=repeats, help=f"{repeats_help} (default {repeats})")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens each request generates (default 64)")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--output", type=Path, help="write the results as JSON to this file")


def check_common_options(args: argparse.Namespace, counts: dict[str, int | None]) -> None:
    """Raise ``UsageError`` (one line) for a bad preset, a count below 1 or an unusable output path; then
    apply ``--threads``. ``counts`` maps each option name to its value (None when not given)."""
    if args.preset not in IN_CODE_PRESETS:
        raise UsageError(f"unknown preset {args.preset!r}: use {' or '.join(IN_CODE_PRESETS)}")
    for name, value in counts.items():
        if value is not None and value < 1:
            raise UsageError(f"{name} must be >= 1, got {value}")
    check_threads(args.threads)
    if args.output is not None:
        check_output_path(args.output)
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)


def check_threads(threads: int | None) -> None:
    """``--threads`` may not exceed the machine's CPUs: more threads than cores only measure the operating
    system's scheduler (and past 2**31 torch cannot even take the number)."""
    cpus = os.cpu_count() or 1
    if threads is not None and threads > cpus:
        raise UsageError(f"--threads must be at most the {cpus} CPUs of this machine, got {threads}")


def check_cache_memory(preset: str, kv_capacity: int, state_capacity: int, caches: int, dtype: torch.dtype,
                       device: torch.device, what: str) -> None:
    """Refuse, in one line and before the model is built, a workload whose caches (``caches`` of the preset's
    size at once) need more memory than the device has (``tools.memory``)."""
    from mini_deepinfer.models.presets import qwen3_5_config
    from mini_deepinfer.tools.memory import cache_bytes, check_cache_fits, device_memory

    one = cache_bytes(qwen3_5_config(preset), kv_capacity, state_capacity, dtype.itemsize, dummy_slots=True)
    try:
        check_cache_fits({key: caches * value for key, value in one.items()}, device_memory(device), what)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def check_preset_positions(preset: str, needed: int, what: str) -> None:
    """Refuse, in one line, a request longer than the preset's ``max_position_embeddings``."""
    from mini_deepinfer.models.presets import qwen3_5_config
    from mini_deepinfer.tools.checks import check_positions

    try:
        check_positions(needed, qwen3_5_config(preset).max_position_embeddings, what, f"preset {preset}")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def provenance(benchmark: str, argv: list[str], device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """The first keys of a report: which benchmark, the command, when, from what source, where, in what."""
    import torch

    from mini_deepinfer.runtime.device import device_info, dtype_name

    return {
        "schema": 1, "benchmark": benchmark,
        "command": ["python", "-m", f"mini_deepinfer.bench.{benchmark}", *argv], "date": utc_now_iso(),
        "source_sha": package_source_sha(),
        "device": device_info(device), "dtype": dtype_name(dtype), "torch": torch.__version__,
    }


def model_description(preset: str, model: torch.nn.Module) -> dict[str, Any]:
    """The report's ``config.model``: what was built, its parameter count and the preset's shape."""
    from mini_deepinfer.models.presets import QWEN3_5_SHAPES

    return {"architecture": "Qwen3.5 (random weights, built in code)",
            "parameters": sum(p.numel() for p in model.parameters()), "vocab_size": model.config.vocab_size,
            **QWEN3_5_SHAPES[preset]}


def where(device: dict[str, Any]) -> str:
    """``cpu (<name>)`` or ``cuda (cuda:0 <name>)``, from a report's ``device``."""
    name = device["name"]
    if device["type"] != "cpu":
        name = f"{device['type']}:{device['index']} {name}"
    return f"{device['type']} ({name})"


def load_suffix(device: dict[str, Any]) -> str:
    """``, load_1m=a->b`` when the report recorded the machine's load, else nothing."""
    load = device.get("load_average_1m")
    return "" if load is None else f", load_1m={load['before']:.2f}->{load['after']:.2f}"


def text_table(rows: list[tuple[str, ...]]) -> list[str]:
    """Rows (the first is the header) as left-aligned columns separated by two spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]


def markdown_table(describe_line: str, header: tuple[str, ...], rows: list[tuple[str, ...]],
                   checks: dict[str, Any]) -> list[str]:
    """A report as the site shows it: its description in code style, the table (first column left-aligned,
    the others right-aligned), then its ``tokens_identical`` and ``slots_returned`` checks."""
    lines = [f"`{describe_line}`", "", "| " + " | ".join(header) + " |",
             "|---" + "|---:" * (len(header) - 1) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines + ["", f"`tokens_identical={str(checks['tokens_identical']).lower()}`, "
                    f"`slots_returned={str(checks['slots_returned']).lower()}`"]
