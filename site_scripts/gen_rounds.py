"""Cross-round execution as lessons 10 and 11 and the cross-round notes show it.

Scope: the toy demo cross-round with a cancel while a round is in flight; ``generate --pipeline`` with
staggered prompts on a random tiny Qwen3.5 checkpoint (written to a temporary folder, so the repository's
``weights/`` is never touched; the output names no path); and the Markdown table of the committed
round-benchmark results. The benchmark itself is never run here: its timings change on every run, so
``snippets/bench/rounds-cpu.json`` is committed as measured and only its table is rendered.
Non-scope: explaining any of it (the pages do).
"""

from __future__ import annotations

import json
import tempfile

from site_scripts.common import SNIPPETS, run_module, run_shell

BENCH_JSON = SNIPPETS / "bench" / "rounds-cpu.json"
GENERATE_ARGS = ("--raw --prompt Hello --prompt 'KV cache' --max-new-tokens 3 --cache-capacity 32 "
                 "--max-num-seqs 2 --pipeline --stagger-prompts --trace-rounds")




def generate_pipeline() -> str:
    """The page's two commands, with the checkpoint in a temporary folder instead of ``weights/tiny``."""
    with tempfile.TemporaryDirectory() as folder:
        weights = f"{folder}/tiny"
        return run_shell(f"python -m mini_deepinfer.random_checkpoint --preset tiny --force {weights} "
                         f"> /dev/null\npython -m mini_deepinfer.generate --model {weights} {GENERATE_ARGS}")


def bench_table() -> str:
    """The committed CPU benchmark results as a Markdown table."""
    from mini_deepinfer.bench.rounds import format_markdown

    return format_markdown(json.loads(BENCH_JSON.read_text(encoding="utf-8")))


OUTPUTS = {
    "rounds/toy-pipeline-cancel.txt": lambda: run_module(
        "mini_deepinfer", "--pipeline", "--cancel", "req-0", "--cancel-after-round", "2"),
    "rounds/generate-pipeline.txt": generate_pipeline,
    "bench/rounds-cpu.md": bench_table,
}
