"""Cross-round execution as lessons 10 and 11 and the cross-round notes show it.

Scope: the toy demo cross-round with a cancel while a round is in flight; ``generate --pipeline`` with
staggered prompts on a random tiny Qwen3.5 checkpoint (written to a temporary folder, so the repository's
``weights/`` is never touched; the output names no path); and the Markdown tables of the committed
round-benchmark results (``BENCH_JSON`` and the timeline runs ``TIMELINE_JSON`` on the CPU,
``GPU_BENCH_JSON`` on an accelerator, the latter with its provenance as ``gen_performance.provenance_block``
renders it). The benchmark itself is never run here: its
timings change on every run, so the reports are committed as measured and only their tables are rendered.
Non-scope: explaining any of it (the pages do).
"""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path

from site_scripts.common import SNIPPETS, read_json, run_module, run_shell

BENCH_JSON = SNIPPETS / "bench" / "rounds-cpu.json"
GPU_BENCH_JSON = (SNIPPETS / "bench" / "cuda-h200-207e234" / "rounds-cuda-bf16-eager-207e234.json",)
TIMELINE_JSON = tuple(sorted((SNIPPETS / "bench" / "timelines").glob("rounds-*.json")))  # the timeline runs
GENERATE_ARGS = ("--raw --prompt Hello --prompt 'KV cache' --max-new-tokens 3 --cache-capacity 32 "
                 "--max-num-seqs 2 --pipeline --stagger-prompts --trace-rounds")


def generate_pipeline() -> str:
    """The page's two commands, with the checkpoint in a temporary folder instead of ``weights/tiny``."""
    with tempfile.TemporaryDirectory() as folder:
        weights = f"{folder}/tiny"
        return run_shell(f"python -m mini_deepinfer.random_checkpoint --preset tiny --force {weights} "
                         f"> /dev/null\npython -m mini_deepinfer.generate --model {weights} {GENERATE_ARGS}")


def bench_table(path: Path = BENCH_JSON) -> str:
    """A committed CPU benchmark report as a Markdown table, with how its rounds ran when it says."""
    from mini_deepinfer.bench.rounds import format_markdown

    report = read_json(path)
    table = format_markdown(report)
    execution = report["config"].get("execution")
    if execution is None:  # reports from before graph execution do not say
        return table
    counts = ", ".join(f"{n} {mode}" for mode, n in execution["rounds"].items())
    how = "graphs (static buffers; a CPU captures nothing)" if execution["graphs"] else "eager"
    first, rest = table.split("\n", 1)
    return f"{first}\n\n- `execution`: {how}; runner rounds over all runs: {counts}\n{rest}"


def gpu_bench_table(path: Path) -> str:
    """A committed accelerator report: its table, with where it came from and how its rounds ran."""
    from mini_deepinfer.bench.rounds import format_markdown
    from site_scripts.gen_performance import provenance_block

    report = read_json(path)
    origin = provenance_block(path, report)
    table = format_markdown(report)
    if origin is None:
        return table
    first, rest = table.split("\n", 1)  # the line that names the device, then the table
    return f"{first}\n\n{origin}\n{rest}"


OUTPUTS = {
    "rounds/toy-pipeline-cancel.txt": lambda: run_module(
        "mini_deepinfer", "--pipeline", "--cancel", "req-0", "--cancel-after-round", "2"),
    "rounds/generate-pipeline.txt": generate_pipeline,
    "bench/rounds-cpu.md": bench_table,
    **{path.relative_to(SNIPPETS).with_suffix(".md").as_posix(): partial(bench_table, path)
       for path in TIMELINE_JSON},
    **{path.relative_to(SNIPPETS).with_suffix(".md").as_posix(): partial(gpu_bench_table, path)
       for path in GPU_BENCH_JSON},
}
