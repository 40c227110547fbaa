"""Cross-round execution as lessons 10 and 11 and the cross-round notes show it.

Scope: the toy demo cross-round with a cancel while a round is in flight; ``generate --pipeline`` with
staggered prompts on a random tiny Qwen3.5 checkpoint (written to a temporary folder, so the repository's
``weights/`` is never touched; the output names no path); and the Markdown tables of the committed
round-benchmark results (``BENCH_JSON`` and the timeline runs ``TIMELINE_JSON`` on the CPU,
``GPU_BENCH_JSON`` on an accelerator, the latter with its provenance as ``gen_performance.provenance_block``
renders it), and lesson 10's sentence that splits the accelerator record's round into host and device time
(``cost_model``). The benchmark itself is never run here: its
timings change on every run, so the reports are committed as measured and only their tables are rendered.
Non-scope: explaining any of it (the pages do).
"""

from __future__ import annotations

import tempfile
from functools import partial
from pathlib import Path

from site_scripts.build.common import SNIPPETS, phrases, read_json, run_module, run_shell
from site_scripts.performance.zh_tables import translate

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
    from site_scripts.performance.bench_tables import provenance_block

    report = read_json(path)
    origin = provenance_block(path, report)
    table = format_markdown(report)
    if origin is None:
        return table
    first, rest = table.split("\n", 1)  # the line that names the device, then the table
    return f"{first}\n\n{origin}\n{rest}"


def gpu_bench_table_zh(path: Path) -> str:
    """The accelerator report's table in Chinese, for the Chinese pages
    (``site_scripts/performance/zh_tables.py``)."""
    return translate(gpu_bench_table(path))


# --- lesson 10's cost model, in figures from the accelerator record ---

COST_MODEL_TEXT = phrases(__name__)["cost_model_text"]
COST_MODEL_WHERE = phrases(__name__)["cost_model_where"]


def cost_model_figures(report: dict) -> dict[str, str]:
    """The figures lesson 10's cost model quotes, as the page writes them, from a rounds report's medians."""
    sync = report["results"]["synchronous"]["summary"]
    cross = report["results"]["cross_round"]["summary"]
    median = {key: value["median"] for key, value in sync.items()}
    host = median["round_host_ms"]  # the round less the read's wait: launch plus the engine's own work
    hideable = median["round_engine_ms"] + median["round_read_wait_ms"]
    return {
        "wall": f"{median['round_wall_ms']:.2f}", "host": f"{host:.2f}",
        "launch": f"{median['round_launch_ms']:.2f}",
        "engine": f"{median['round_engine_ms']:.2f}", "wait": f"{median['round_read_wait_ms']:.3f}",
        "device": f"{median['round_device_ms']:.2f}", "sum": f"{host + median['round_device_ms']:.2f}",
        "times": f"{(host + median['round_device_ms']) / median['round_wall_ms']:.2f}",
        "cross": f"{cross['round_wall_ms']['median']:.2f}",
        "ratio": f"{cross['round_wall_ms']['median'] / median['round_wall_ms']:.3f}",
        "hideable": f"{hideable:.2f}", "share": f"{100 * hideable / median['round_wall_ms']:.1f}",
        "repeats": str(report["config"]["repeats"]),
    }


def cost_model(lang: str, path: Path = GPU_BENCH_JSON[0]) -> str:
    """Lesson 10's measured sentence in ``lang``: the record's round split into its host and device parts."""
    report = read_json(path)
    where = COST_MODEL_WHERE[lang].format(device=report["device"]["name"], dtype=report["dtype"],
                                          sha=report["source_sha"]["sha"][:7])
    return COST_MODEL_TEXT[lang].format(where=where, **cost_model_figures(report))


OUTPUTS = {
    "rounds/toy-pipeline-cancel.txt": lambda: run_module(
        "mini_deepinfer", "--pipeline", "--cancel", "req-0", "--cancel-after-round", "2"),
    "rounds/generate-pipeline.txt": generate_pipeline,
    "bench/rounds-cpu.md": bench_table,
    "bench/rounds-cpu.zh.md": lambda: translate(bench_table()),
    **{path.relative_to(SNIPPETS).with_suffix(".md").as_posix(): partial(bench_table, path)
       for path in TIMELINE_JSON},
    **{path.relative_to(SNIPPETS).with_suffix(".md").as_posix(): partial(gpu_bench_table, path)
       for path in GPU_BENCH_JSON},
    **{path.relative_to(SNIPPETS).with_suffix(".zh.md").as_posix(): partial(gpu_bench_table_zh, path)
       for path in GPU_BENCH_JSON},
    "rounds/cost-model.zh.md": partial(cost_model, "zh"),
    "rounds/cost-model.en.md": partial(cost_model, "en"),
}
