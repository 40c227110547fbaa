"""Lesson 7's printout: what a KV slot and a state slot cost, and what carrying the state across chunks buys.

Scope: two parts. (1) Bytes per KV slot and per state slot for the real Qwen3.5-0.8B and 2B shapes (the
presets of ``mini_deepinfer.random_checkpoint``), in float32 and bfloat16, from a ``HybridCache`` built on the
meta device (nothing is allocated), and what ``generate``'s default capacities come to. (2) A 40-token prompt
through a random tiny Qwen3.5, whole and in chunks: the largest differences of the logits, the recurrent
state and the convolution window against the whole prompt, and the same with the state wrongly reset at
the second chunk. Differences are printed as the power of ten they stay under (``< 1e-5``), so the text does
not change with the last digits of float32 sums.
``python -m site_scripts.lessons.gen_hybrid_cache`` prints the same text the generator writes.
Non-scope: slot accounting (the engine's ``SlotPool``), bfloat16 tolerances (the BF16 notes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from mini_deepinfer.generate import DEFAULT_CAPACITY
from mini_deepinfer.models import Qwen35Config, build_model, config_from_hf_dict
from mini_deepinfer.models.cache import HybridCache
from mini_deepinfer.models.presets import qwen3_5_config
from mini_deepinfer.runtime.staging import batch_from_sequences
from mini_deepinfer.tools.checkpoints import preset
from site_scripts.build.common import run_module
from site_scripts.lessons.gen_qwen35_layers import bucket  # lesson 6's buckets of differences

PRESETS = ("qwen3.5-0.8b", "qwen3.5-2b")
DTYPES = (torch.float32, torch.bfloat16)
DEFAULT_MAX_NUM_SEQS = 8  # generate's --max-num-seqs default, which is also its number of state slots
MIB = 2**20

TINY = qwen3_5_config("tiny", vocab_size=1000, tie_word_embeddings=True)
PROMPT_LEN = 40
SCHEDULES: dict[str, tuple[list[int], set[int]]] = {  # label -> (chunk sizes, chunks whose state is reset)
    "5, 7, 1, 27": ([5, 7, 1, 27], set()),
    "1 x 40 (token by token)": ([1] * 40, set()),
    "13, 13, 14": ([13, 13, 14], set()),
    "5, 7, 1, 27, reset at 2nd": ([5, 7, 1, 27], {1}),
}
# ---------------------------------------------------------------------------------------------------------
# Part 1: sizes.
# ---------------------------------------------------------------------------------------------------------


def slot_bytes(config: Qwen35Config, dtype: torch.dtype) -> tuple[int, int, int]:
    """Bytes of one KV slot, of one state slot's convolution windows, and of its recurrent states."""
    kv = HybridCache(config, 1, 0, dtype, "meta").nbytes()
    state = HybridCache(config, 1, 1, dtype, "meta")
    conv = sum(t[0].numel() * t.element_size() for t in state.conv_state.values())
    recurrent = sum(t[0].numel() * t.element_size() for t in state.recurrent_state.values())
    return kv, conv, recurrent


def table(rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns with a rule under the header row."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return [lines[0], "  ".join("-" * w for w in widths), *lines[1:]]


def layout(config: Qwen35Config) -> list[str]:
    return [
        f"  KV: {len(config.full_attention_layers)} full-attention layers, key and value, "
        f"{config.num_key_value_heads} heads x {config.head_dim} each (model dtype)",
        f"  state: {len(config.linear_attention_layers)} Gated DeltaNet layers, window "
        f"{config.linear_conv_dim} x {config.linear_conv_kernel_dim - 1} (model dtype) + recurrent "
        f"{config.linear_num_value_heads} x {config.linear_key_head_dim} x {config.linear_value_head_dim}"
        " (float32)",
    ]


def sizes() -> str:
    rows = [("shape", "dtype", "KV slot", "state slot", "= window + recurrent", "= KV slots",
             f"{DEFAULT_CAPACITY} KV + {DEFAULT_MAX_NUM_SEQS} state")]
    layouts: dict[tuple[str, ...], list[str]] = {}
    for name in PRESETS:
        config = config_from_hf_dict(preset(name).config)
        layouts.setdefault(tuple(layout(config)), []).append(name)
        for dtype in DTYPES:
            kv, conv, recurrent = slot_bytes(config, dtype)
            state = conv + recurrent
            total = DEFAULT_CAPACITY * kv + DEFAULT_MAX_NUM_SEQS * state
            rows.append((name, str(dtype).removeprefix("torch."), f"{kv // 1024} KiB",
                         f"{state / MIB:.2f} MiB", f"{conv / MIB:.2f} + {recurrent / MIB:.2f} MiB",
                         f"{state / kv:.0f}", f"{total / MIB:.2f} MiB"))
    notes = [line for lines, names in layouts.items() for line in (" and ".join(names) + ":", *lines)]
    return "\n".join([*table(rows), "", *notes]) + "\n"


# ---------------------------------------------------------------------------------------------------------
# Part 2: the state across chunks.
# ---------------------------------------------------------------------------------------------------------


def run(model: torch.nn.Module, ids: list[int], chunks: Sequence[int], reset: set[int]) -> tuple:
    """Logits of every token, and the cache afterwards; chunks listed in ``reset`` start from a zero state."""
    cache = HybridCache(TINY, PROMPT_LEN, 1, torch.float32, "cpu")
    slots, start, logits = list(range(PROMPT_LEN)), 0, []
    for index, size in enumerate(chunks):
        piece = ids[start : start + size]
        batch = batch_from_sequences([piece], [start], [slots], [0], all_logits=True)
        if index in reset:  # the mistake this row shows: forget the state between chunks
            cache.reset_states(torch.tensor([0]))
        logits.append(model(batch, cache))
        start += size
    return torch.cat(logits), cache


def max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b))


def chunks_table() -> str:
    torch.set_num_threads(1)
    model = build_model(TINY, torch.float32, "cpu", seed=0)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, TINY.vocab_size, (PROMPT_LEN,), generator=generator).tolist()
    whole_logits, whole = run(model, ids, [PROMPT_LEN], set())
    reference, positions = whole.read_state(0), torch.arange(PROMPT_LEN)
    rows = [("chunks of the 40-token prompt", "logits", "last logits", "recurrent", "window", "keys")]
    for label, (chunks, reset) in SCHEDULES.items():
        logits, cache = run(model, ids, chunks, reset)
        state = cache.read_state(0)
        rows.append((
            label,
            bucket(float((logits - whole_logits).abs().max())),
            bucket(float((logits[-1] - whole_logits[-1]).abs().max())),
            bucket(max_diff(state["recurrent"], reference["recurrent"])),
            bucket(max_diff(state["conv"], reference["conv"])),
            bucket(max_diff(cache.read_kv(positions)["key"], whole.read_kv(positions)["key"])),
        ))
    title = ("max |difference| against the whole prompt in one chunk (random tiny Qwen3.5, float32):\n"
             "logits of all 40 tokens and of the last one; recurrent state, convolution window and keys "
             "in the cache afterwards")
    return title + "\n" + "\n".join(table(rows)) + "\n"


def main_text() -> str:
    return sizes() + "\n" + chunks_table()


OUTPUTS: dict[str, Callable[[], str]] = {
    "hybrid-cache/cache.txt": lambda: run_module("site_scripts.lessons.gen_hybrid_cache"),
}

if __name__ == "__main__":
    print(main_text(), end="")
