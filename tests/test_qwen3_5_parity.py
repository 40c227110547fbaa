"""Qwen3.5 parity: our plain-PyTorch model against transformers 5.23's ``Qwen3_5ForCausalLM``.

The tiny models have every norm weight randomised (so ``1 + w`` matters), two layouts of linear heads
(``Hk != Hv`` untied, ``Hk == Hv`` tied) and sequences longer than one 64-token delta-rule chunk.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence

import pytest
import torch

transformers = pytest.importorskip("transformers")

from mini_deepinfer.models import CausalLM, Qwen35Config, build_model  # noqa: E402
from mini_deepinfer.models.cache import HybridCache  # noqa: E402
from mini_deepinfer.models.kernels.deltanet import chunked_delta_rule, recurrent_delta_rule  # noqa: E402
from mini_deepinfer.runtime.staging import batch_from_sequences  # noqa: E402

SLOTS_PER_SEQ = 128
TINY_LAYERS = ["linear_attention", "full_attention", "linear_attention", "full_attention"]


def tiny_hf_config(tied: bool, key_heads: int) -> transformers.Qwen3_5TextConfig:
    return transformers.Qwen3_5TextConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        layer_types=TINY_LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        linear_num_key_heads=key_heads,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_conv_kernel_dim=4,
        tie_word_embeddings=tied,
        initializer_range=0.05,
        rope_parameters={"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
        attn_implementation="eager",
    )


def randomise_norms_and_gates(hf_model: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in hf_model.named_parameters():
            if "norm" in name or "A_log" in name or "dt_bias" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)


def hf_and_ours(hf_config, dtype: torch.dtype = torch.float32) -> tuple[torch.nn.Module, CausalLM]:
    torch.manual_seed(0)
    hf_model = transformers.Qwen3_5ForCausalLM(hf_config).eval()
    randomise_norms_and_gates(hf_model, seed=1)
    ours = build_model(Qwen35Config.from_hf_dict(hf_config.to_dict()), dtype=dtype)
    ours.load_state_dict(hf_model.state_dict())
    return hf_model.to(dtype), ours


@pytest.fixture(scope="module", params=["untied_hk2_hv4", "tied_hk4_hv4"])
def pair(request) -> tuple[torch.nn.Module, CausalLM]:
    tied = request.param.startswith("tied")
    return hf_and_ours(tiny_hf_config(tied=tied, key_heads=2 if not tied else 4))


def new_cache(model: CausalLM, sequences: int = 4) -> HybridCache:
    dtype = model.lm_head.weight.dtype
    return HybridCache(model.config, SLOTS_PER_SEQ * sequences, sequences, dtype, "cpu")


def seq_slots(seq: int) -> list[int]:
    return list(range(seq * SLOTS_PER_SEQ, (seq + 1) * SLOTS_PER_SEQ))


def run_in_chunks(model: CausalLM, ids: Sequence[int], chunks: Sequence[int], seq: int = 0) -> torch.Tensor:
    """Feed ``ids`` through a fresh cache in rounds of the given sizes; return the logits of every token."""
    cache, start, logits = new_cache(model), 0, []
    for size in chunks:
        new = list(ids[start : start + size])
        batch = batch_from_sequences([new], [start], [seq_slots(seq)], [seq], all_logits=True)
        logits.append(model(batch, cache))
        start += size
    assert start == len(ids)
    return torch.cat(logits)


def hf_logits(hf_model: torch.nn.Module, ids: Sequence[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf_model(torch.tensor([list(ids)]), use_cache=False).logits[0]


def greedy(model: CausalLM, prompt: Sequence[int], new_tokens: int) -> list[int]:
    cache, tokens = new_cache(model), list(prompt)
    batch = batch_from_sequences([tokens], [0], [seq_slots(0)], [0])
    for _ in range(new_tokens):
        tokens.append(int(model(batch, cache).argmax(-1)))
        batch = batch_from_sequences([[tokens[-1]]], [len(tokens) - 1], [seq_slots(0)], [0])
    return tokens[len(prompt) :]


def random_ids(n: int, seed: int, vocab: int = 512) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_state_dict_names_match_transformers(pair):
    hf_model, ours = pair
    assert sorted(ours.state_dict()) == sorted(hf_model.state_dict())
    if ours.config.tie_word_embeddings:
        assert ours.lm_head.weight is ours.model.embed_tokens.weight


def test_full_sequence_logits_match_transformers(pair):
    hf_model, ours = pair
    ids = random_ids(70, seed=2)
    diff = (run_in_chunks(ours, ids, [70]) - hf_logits(hf_model, ids)).abs().max().item()
    assert diff < 1e-4


def test_prefill_then_decode_equals_whole_forward_and_transformers(pair):
    hf_model, ours = pair
    ids = random_ids(30, seed=3)
    incremental = run_in_chunks(ours, ids, [20] + [1] * 10)
    whole = run_in_chunks(ours, ids, [30])
    assert (incremental - whole).abs().max().item() < 1e-4
    assert (incremental - hf_logits(hf_model, ids)).abs().max().item() < 1e-4


def test_greedy_generation_matches_transformers_generate(pair):
    hf_model, ours = pair
    prompt = random_ids(8, seed=4)
    with torch.no_grad():
        generated = hf_model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False)
    expected = generated[0, len(prompt) :].tolist()
    assert greedy(ours, prompt, 16) == expected


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_chunked_prefill_equals_whole_prefill(pair, chunk):
    _, ours = pair
    ids = random_ids(75, seed=5)
    chunks = [chunk] * (75 // chunk) + ([75 % chunk] if 75 % chunk else [])
    diff = (run_in_chunks(ours, ids, chunks) - run_in_chunks(ours, ids, [75])).abs().max().item()
    assert diff < 1e-5


def test_mixed_round_equals_each_sequence_alone(pair):
    """Two decode tokens with different contexts, a fresh prefill and a continued chunk, in one round."""
    _, ours = pair
    seqs = [random_ids(13, seed=10), random_ids(6, seed=11), random_ids(9, seed=12), random_ids(10, seed=13)]
    prefixes = [12, 5, 0, 6]  # tokens already in the cache before the mixed round
    schedules = [[p, len(ids) - p] if p else [len(ids)] for ids, p in zip(seqs, prefixes)]
    alone = [run_in_chunks(ours, ids, chunks) for ids, chunks in zip(seqs, schedules)]

    cache = new_cache(ours)
    for b, (ids, p) in enumerate(zip(seqs, prefixes)):
        if p:
            ours(batch_from_sequences([ids[:p]], [0], [seq_slots(b)], [b]), cache)
    new_tokens = [ids[p:] for ids, p in zip(seqs, prefixes)]
    slots = [seq_slots(b) for b in range(4)]
    batch = batch_from_sequences(new_tokens, prefixes, slots, list(range(4)), all_logits=True)
    mixed = ours(batch, cache).split(batch.query_lens)
    for b, (ids, p) in enumerate(zip(seqs, prefixes)):
        assert (mixed[b] - alone[b][p:]).abs().max().item() < 1e-5


def test_last_layer_runs_its_mlp_on_the_logits_rows_only(pair):
    """Two prompts in one round ask for their last rows' logits: the first layer's MLP sees all 22 rows,
    the last layer's only those 2, and the logits equal the same rows of a round that asks for every row."""
    _, ours = pair
    args = ([random_ids(13, seed=20), random_ids(9, seed=21)], [0, 0], [seq_slots(0), seq_slots(1)], [0, 1])
    seen: list[int] = []
    mlps = [ours.model.layers[0].mlp, ours.model.layers[-1].mlp]
    handles = [m.register_forward_hook(lambda _m, inputs, _out: seen.append(len(inputs[0]))) for m in mlps]
    try:
        last_rows = ours(batch_from_sequences(*args), new_cache(ours))
    finally:
        for handle in handles:
            handle.remove()
    assert seen == [22, 2]
    every_row = ours(batch_from_sequences(*args, all_logits=True), new_cache(ours))
    assert (last_rows - every_row[[12, 21]]).abs().max().item() < 1e-5


def test_fresh_sequence_ignores_stale_state_in_its_slot(pair):
    _, ours = pair
    cache = new_cache(ours)
    ours(batch_from_sequences([random_ids(20, seed=6)], [0], [seq_slots(0)], [0]), cache)
    ids = random_ids(11, seed=7)
    reused = ours(batch_from_sequences([ids], [0], [seq_slots(0)], [0], all_logits=True), cache)
    assert (reused - run_in_chunks(ours, ids, [11])).abs().max().item() < 1e-6


def test_chunked_delta_rule_equals_recurrent():
    gen = torch.Generator().manual_seed(0)
    batch, heads, length, dk, dv = 2, 3, 37, 8, 6

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen)

    q = torch.nn.functional.normalize(randn(batch, heads, length, dk), dim=-1) * dk**-0.5
    k = torch.nn.functional.normalize(randn(batch, heads, length, dk), dim=-1)
    v, state = randn(batch, heads, length, dv), randn(batch, heads, dk, dv)
    g = -torch.nn.functional.softplus(randn(batch, heads, length))
    beta = torch.sigmoid(randn(batch, heads, length))
    expected_o, expected_state = recurrent_delta_rule(q, k, v, g, beta, state)
    for chunk_size in (4, 8, 32, 64):
        o, final = chunked_delta_rule(q, k, v, g, beta, state, chunk_size=chunk_size)
        assert (o - expected_o).abs().max().item() < 1e-5
        assert (final - expected_state).abs().max().item() < 1e-5


def test_chunked_delta_rule_takes_one_head_without_batch_dims():
    """``[..., L, d]`` with ``...`` empty: one head's ``[L, d]`` inputs give the batched call's result."""
    gen = torch.Generator().manual_seed(1)
    length, dk, dv = 37, 8, 6
    q = torch.nn.functional.normalize(torch.randn(length, dk, generator=gen), dim=-1) * dk**-0.5
    k = torch.nn.functional.normalize(torch.randn(length, dk, generator=gen), dim=-1)
    v, state = torch.randn(length, dv, generator=gen), torch.randn(dk, dv, generator=gen)
    g = -torch.nn.functional.softplus(torch.randn(length, generator=gen))
    beta = torch.sigmoid(torch.randn(length, generator=gen))
    o, final = chunked_delta_rule(q, k, v, g, beta, state, chunk_size=8)
    batched_o, batched_final = chunked_delta_rule(*(t[None] for t in (q, k, v, g, beta, state)), chunk_size=8)
    assert o.shape == (length, dv) and final.shape == (dk, dv)
    assert torch.equal(o, batched_o[0]) and torch.equal(final, batched_final[0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_runs_close_to_transformers(dtype):
    hf_model, ours = hf_and_ours(tiny_hf_config(tied=False, key_heads=2), dtype=dtype)
    ids = random_ids(40, seed=8)
    ref = hf_logits(hf_model, ids).float()
    ours_logits = run_in_chunks(ours, ids, [33, 1, 6]).float()
    assert ours_logits.dtype == torch.float32 and torch.isfinite(ours_logits).all()
    assert (ours_logits - ref).abs().max().item() < 0.05 * ref.abs().max().item()


REAL_08B = dict(
    vocab_size=248320,
    hidden_size=1024,
    intermediate_size=3584,
    num_hidden_layers=24,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=256,
    linear_num_key_heads=16,
    linear_num_value_heads=16,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    tie_word_embeddings=True,
    max_position_embeddings=262144,
    rope_parameters={
        "rope_type": "default",
        "rope_theta": 10000000,
        "partial_rotary_factor": 0.25,
        "mrope_section": [11, 11, 10],
        "mrope_interleaved": True,
    },
)


@pytest.mark.slow
def test_real_0_8b_shape_logits_match_transformers():
    torch.manual_seed(0)
    hf_config = transformers.Qwen3_5TextConfig(**REAL_08B, attn_implementation="eager")
    hf_model = transformers.Qwen3_5ForCausalLM(hf_config).eval()
    randomise_norms_and_gates(hf_model, seed=1)
    ids = random_ids(17, seed=9, vocab=248320)
    ref = hf_logits(hf_model, ids)
    config = Qwen35Config.from_hf_dict(hf_config.to_dict())
    ours = build_model(config)
    ours.load_state_dict(hf_model.state_dict())
    del hf_model
    gc.collect()
    assert config.num_parameters() == sum(p.numel() for p in ours.parameters())
    ours_logits = run_in_chunks(ours, ids, [16, 1])
    assert (ours_logits - ref).abs().max().item() < 1e-4
