"""The prefix cache as lesson 15 and the performance page show it.

Scope: lesson 15's command (``generate --prefix-cache`` with two prompts that start alike, on the random
``tiny`` checkpoint that ``gen_generate`` writes into its temporary workspace, run exactly as the page prints
it), the table of what one state snapshot costs against one token's KV for each Qwen3.5 preset (computed from
the shapes), and the Markdown table of the committed CPU benchmark. The benchmark is never run here: its
timings change on every run, so ``snippets/bench/prefix-cpu.json`` is committed as measured and only its
table is rendered.
Non-scope: explaining any of it (the pages do).
"""

from __future__ import annotations

from site_scripts.build.common import SNIPPETS, read_json
from site_scripts.lessons.gen_generate import CHECKPOINT_LINE, run_example
from site_scripts.performance.zh_tables import translate

BENCH_JSON = SNIPPETS / "bench" / "prefix-cpu.json"
COMMAND = """\
python -m mini_deepinfer.generate --model weights/tiny --raw --max-new-tokens 2 --cache-capacity 64 \\
  --prompt "The cache keeps every token of a prompt. Question one:" \\
  --prompt "The cache keeps every token of a prompt. Question two:" \\
  --prefix-cache --prefix-block 4 --stagger-prompts --trace-rounds"""
SHOWN_BLOCKS = {"prefix-cache/run.txt": f"{CHECKPOINT_LINE}\n{COMMAND}"}
"""Lesson 15's block, which this generator runs (the checkpoint line once, as ``gen_generate`` does)."""


def memory_table() -> str:
    """Rows: preset, linear layers, one snapshot (float32), one token's KV (float32), the snapshot in tokens
    of KV, and the snapshots of a 1,024-token prompt at the default block of 64 tokens."""
    from mini_deepinfer.bench.prefix import memory_per_snapshot
    from mini_deepinfer.core.config import EngineConfig
    from mini_deepinfer.models.presets import QWEN3_5_SHAPES, qwen3_5_config

    block = EngineConfig(kv_capacity=1).prefix_block
    rows = []
    for name in QWEN3_5_SHAPES:
        sizes = memory_per_snapshot(name)
        snap, kv = sizes["snapshot_bytes"], sizes["kv_bytes_per_token"]
        layers = len(qwen3_5_config(name).linear_attention_layers)
        per_prompt = 1024 // block
        rows.append(f"| `{name}` | {layers} | {_size(snap)} | {_size(kv)} | {snap / kv:.0f} | "
                    f"{per_prompt} ({_size(per_prompt * snap)}) |\n")
    return "".join(rows)


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def bench_table() -> str:
    """The committed CPU benchmark as a Markdown table."""
    from mini_deepinfer.bench.prefix import format_markdown

    return format_markdown(read_json(BENCH_JSON))


OUTPUTS = {
    "prefix-cache/run.txt": lambda: run_example(COMMAND),
    "prefix-cache/memory.md": memory_table,
    "bench/prefix-cpu.md": bench_table,
    "bench/prefix-cpu.zh.md": lambda: translate(bench_table()),
}
