"""Lesson 6's printout: the shapes of Qwen3.5's two kinds of layer, and how closely ours match transformers.

Scope: two parts. (1) The parameter shapes of layer 0 (Gated DeltaNet) and layer 3 (gated attention) of the
real Qwen3.5-0.8B shape, read from our model built on the meta device (no memory, no weights). (2) A parity
table: tiny random models built by transformers 5.23 (``Qwen3_5ForCausalLM`` in two head layouts, and
``Qwen2ForCausalLM``), the same weights loaded into ours, and the largest logit difference for a full
forward, prefill followed by decode steps, and chunked against whole prefill; plus whether 16 greedy
tokens equal transformers' ``generate``. Differences are printed as the power of ten they stay under
(``< 1e-5``), so the text does not change with the last digits of float32 sums.
``python -m site_scripts.lessons.gen_qwen35_layers`` prints the same text the generator writes.
Non-scope: the tests (``tests/test_qwen3_5_parity.py`` and ``tests/test_qwen2_parity.py`` assert their own
bounds, quoted in the table's last column), bfloat16 (the BF16 notes), real weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from mini_deepinfer.models import CausalLM, build_model, config_from_hf_dict
from mini_deepinfer.models.cache import HybridCache
from mini_deepinfer.models.kernels.deltanet import chunked_delta_rule, recurrent_delta_rule
from mini_deepinfer.runtime.staging import batch_from_sequences
from mini_deepinfer.tools.checkpoints import preset
from site_scripts.build.common import run_module

SLOTS = 128
LAYOUTS = {"Hk 2, Hv 4, untied head": (False, 2), "Hk 4, Hv 4, tied head": (True, 4)}
CHUNKS = (1, 3, 7, 64)
FLOOR_EXPONENT = -5


def bucket(diff: float) -> str:
    """``< 1e-k`` for the smallest k with ``diff < 10**-k``; below 1e-5 (0 included) it is ``< 1e-5``.

    The floor keeps the text stable: below 1e-5 the digits depend on the CPU's float32 summation order.
    """
    exponent = math.floor(math.log10(diff)) + 1 if diff > 0 else FLOOR_EXPONENT
    return f"< 1e{max(exponent, FLOOR_EXPONENT)}"


def random_ids(n: int, seed: int, vocab: int = 512) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


# ---------------------------------------------------------------------------------------------------------
# Part 1: shapes of the real 0.8B layers.
# ---------------------------------------------------------------------------------------------------------


def layer_shapes() -> str:
    config = config_from_hf_dict(preset("qwen3.5-0.8b").config)
    model = build_model(config, torch.float32, "meta")
    kinds = "".join("F" if t == "full_attention" else "L" for t in config.layer_types)
    lines = [f"Qwen3.5-0.8B shape: {config.num_hidden_layers} layers {kinds}  (L = Gated DeltaNet, "
             "F = gated attention)"]
    for index in (0, 3):
        layer = model.model.layers[index]
        mixer = "linear_attn" if layer.is_linear else "self_attn"
        lines.append(f"layer {index} ({mixer})")
        for name, param in getattr(layer, mixer).named_parameters():
            lines.append(f"  {mixer}.{name:<20} {list(param.shape)}")
    lines.append(f"rotary dims per attention head: {config.rotary_dim} of {config.head_dim}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------------
# Part 2: parity with transformers.
# ---------------------------------------------------------------------------------------------------------


def run_in_chunks(model: CausalLM, ids: Sequence[int], chunks: Sequence[int]) -> torch.Tensor:
    """Logits of every token, feeding ``ids`` through a fresh cache in rounds of the given sizes."""
    cache = HybridCache(model.config, SLOTS, 1, torch.float32, "cpu")
    start, logits = 0, []
    for size in chunks:
        batch = batch_from_sequences([ids[start : start + size]], [start], [list(range(SLOTS))], [0],
                                     all_logits=True)
        logits.append(model(batch, cache))
        start += size
    return torch.cat(logits)


def pieces(total: int, size: int) -> list[int]:
    return [size] * (total // size) + ([total % size] if total % size else [])


def greedy(model: CausalLM, prompt: list[int], new_tokens: int) -> list[int]:
    cache, tokens = HybridCache(model.config, SLOTS, 1, torch.float32, "cpu"), list(prompt)
    slots = list(range(SLOTS))
    batch = batch_from_sequences([tokens], [0], [slots], [0])
    for _ in range(new_tokens):
        tokens.append(int(model(batch, cache).argmax(-1)))
        batch = batch_from_sequences([[tokens[-1]]], [len(tokens) - 1], [slots], [0])
    return tokens[len(prompt) :]


def qwen35_pair(tied: bool, key_heads: int) -> tuple[Any, CausalLM]:
    """A tiny transformers Qwen3.5 with randomised norms and gates, and ours with the same weights."""
    import transformers

    hf_config = transformers.Qwen3_5TextConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        layer_types=["linear_attention", "full_attention"] * 2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, linear_num_key_heads=key_heads, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4, tie_word_embeddings=tied, initializer_range=0.05,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    hf_model = transformers.Qwen3_5ForCausalLM(hf_config).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in hf_model.named_parameters():
            if "norm" in name or "A_log" in name or "dt_bias" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    return hf_model, loaded_copy(hf_model, hf_config)


def qwen2_pair() -> tuple[Any, CausalLM]:
    """A tiny transformers Qwen2 (untied head, randomised norms and biases) and ours with its weights."""
    import transformers

    hf_config = transformers.Qwen2Config(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.05,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    hf_model = transformers.Qwen2ForCausalLM(hf_config).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in hf_model.named_parameters():
            if "norm" in name:
                param.copy_(1 + 0.5 * torch.randn(param.shape, generator=generator))
            elif name.endswith("bias"):
                param.copy_(0.5 * torch.randn(param.shape, generator=generator))
    return hf_model, loaded_copy(hf_model, hf_config)


def loaded_copy(hf_model: Any, hf_config: Any) -> CausalLM:
    ours = build_model(config_from_hf_dict(hf_config.to_dict()))
    ours.load_state_dict(hf_model.state_dict())
    return ours


def hf_logits(hf_model: Any, ids: Sequence[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf_model(torch.tensor([list(ids)]), use_cache=False).logits[0]


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


def pair_rows(hf_model: Any, ours: CausalLM) -> list[str]:
    """One cell per check for one model pair."""
    ids, short, prompt = random_ids(70, seed=2), random_ids(30, seed=3), random_ids(8, seed=4)
    full = max_diff(run_in_chunks(ours, ids, [70]), hf_logits(hf_model, ids))
    decode = max_diff(run_in_chunks(ours, short, [20] + [1] * 10), hf_logits(hf_model, short))
    whole = run_in_chunks(ours, ids, [70])
    chunked = max(max_diff(run_in_chunks(ours, ids, pieces(70, c)), whole) for c in CHUNKS)
    with torch.no_grad():
        expected = hf_model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False)
    same = greedy(ours, prompt, 16) == expected[0, len(prompt) :].tolist()
    return [bucket(full), bucket(decode), bucket(chunked), "identical" if same else "DIFFERENT"]


def kernel_row() -> str:
    """Chunked delta rule against the token-by-token loop, on random float32 inputs."""
    gen = torch.Generator().manual_seed(0)
    normalize = torch.nn.functional.normalize
    q = normalize(torch.randn(2, 3, 37, 8, generator=gen), dim=-1) * 8**-0.5
    k = normalize(torch.randn(2, 3, 37, 8, generator=gen), dim=-1)
    v, state = torch.randn(2, 3, 37, 6, generator=gen), torch.randn(2, 3, 8, 6, generator=gen)
    g = -torch.nn.functional.softplus(torch.randn(2, 3, 37, generator=gen))
    beta = torch.sigmoid(torch.randn(2, 3, 37, generator=gen))
    expected, _ = recurrent_delta_rule(q, k, v, g, beta, state)
    chunked = [chunked_delta_rule(q, k, v, g, beta, state, chunk_size=c)[0] for c in (4, 8, 64)]
    return bucket(max(max_diff(o, expected) for o in chunked))


CHECKS = (
    ("full forward, 70 tokens", "< 1e-4"),
    ("prefill 20 + 10 decode steps", "< 1e-4"),
    ("chunked (1, 3, 7, 64) vs whole", "< 1e-5"),
    ("16 greedy tokens vs generate", "identical"),
)
COLUMNS = ("3.5 untied", "3.5 tied", "Qwen2")


def parity_table() -> str:
    torch.set_num_threads(1)
    cells = [pair_rows(*qwen35_pair(tied, key_heads)) for tied, key_heads in LAYOUTS.values()]
    cells.append(pair_rows(*qwen2_pair()))
    header = ["ours vs transformers 5.23, float32", *COLUMNS, "test bound"]
    rows = [[name, *(col[i] for col in cells), bound] for i, (name, bound) in enumerate(CHECKS)]
    rows.append(["chunked vs token-by-token delta rule", kernel_row(), "", "", "< 1e-5"])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()

    notes = ["", *(f"{column}: Qwen3.5 tiny, {layout}" for column, layout in zip(COLUMNS, LAYOUTS)),
             "rows 1-3: max |Δlogits|; last row: max |Δ output| of the two delta-rule forms"]
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows), *notes]) + "\n"


def main_text() -> str:
    return layer_shapes() + "\n" + parity_table()


OUTPUTS: dict[str, Callable[[], str]] = {
    "qwen35/layers.txt": lambda: run_module("site_scripts.lessons.gen_qwen35_layers"),
}

if __name__ == "__main__":
    print(main_text(), end="")
