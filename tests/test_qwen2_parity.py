"""Qwen2 parity: our plain-PyTorch model against transformers 5.23's ``Qwen2ForCausalLM`` (untied head)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch

transformers = pytest.importorskip("transformers")

from mini_deepinfer.models import CausalLM, Qwen2Config, build_model  # noqa: E402
from mini_deepinfer.models.cache import HybridCache  # noqa: E402
from mini_deepinfer.runtime.staging import batch_from_sequences  # noqa: E402

SLOTS_PER_SEQ = 96


@pytest.fixture(scope="module")
def pair() -> tuple[torch.nn.Module, CausalLM]:
    hf_config = transformers.Qwen2Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        initializer_range=0.05,
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
    ours = build_model(Qwen2Config.from_hf_dict(hf_config.to_dict()))
    ours.load_state_dict(hf_model.state_dict())
    return hf_model, ours


def run_in_chunks(model: CausalLM, ids: Sequence[int], chunks: Sequence[int]) -> torch.Tensor:
    cache = HybridCache(model.config, SLOTS_PER_SEQ, 1, torch.float32, "cpu")
    slots, start, logits = list(range(SLOTS_PER_SEQ)), 0, []
    for size in chunks:
        new = ids[start : start + size]
        batch = batch_from_sequences([new], [start], [slots], [0], all_logits=True)
        logits.append(model(batch, cache))
        start += size
    return torch.cat(logits)


def hf_logits(hf_model: torch.nn.Module, ids: Sequence[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf_model(torch.tensor([list(ids)]), use_cache=False).logits[0]


def random_ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, 512, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def test_state_dict_names_match_transformers_and_head_is_untied(pair):
    hf_model, ours = pair
    assert sorted(ours.state_dict()) == sorted(hf_model.state_dict())
    assert ours.lm_head.weight is not ours.model.embed_tokens.weight


def test_full_sequence_logits_match_transformers(pair):
    hf_model, ours = pair
    ids = random_ids(50, seed=2)
    assert (run_in_chunks(ours, ids, [50]) - hf_logits(hf_model, ids)).abs().max().item() < 1e-4


def test_chunked_prefill_and_decode_equal_whole_forward(pair):
    _, ours = pair
    ids = random_ids(40, seed=3)
    whole = run_in_chunks(ours, ids, [40])
    assert (run_in_chunks(ours, ids, [7, 13, 1, 19]) - whole).abs().max().item() < 1e-5
    assert (run_in_chunks(ours, ids, [30] + [1] * 10) - whole).abs().max().item() < 1e-5


def test_greedy_generation_matches_transformers_generate(pair):
    hf_model, ours = pair
    prompt = random_ids(8, seed=4)
    with torch.no_grad():
        generated = hf_model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False)
    expected = generated[0, len(prompt) :].tolist()
    cache = HybridCache(ours.config, SLOTS_PER_SEQ, 1, torch.float32, "cpu")
    slots, tokens = list(range(SLOTS_PER_SEQ)), list(prompt)
    batch = batch_from_sequences([tokens], [0], [slots], [0])
    for _ in range(16):
        tokens.append(int(ours(batch, cache).argmax(-1)))
        batch = batch_from_sequences([[tokens[-1]]], [len(tokens) - 1], [slots], [0])
    assert tokens[8:] == expected


def test_batched_decode_equals_each_sequence_alone(pair):
    _, ours = pair
    seqs, prefixes = [random_ids(9, seed=5), random_ids(4, seed=6)], [8, 3]
    alone = [run_in_chunks(ours, ids, [p, 1]) for ids, p in zip(seqs, prefixes)]
    cache = HybridCache(ours.config, 2 * SLOTS_PER_SEQ, 2, torch.float32, "cpu")
    slots = [list(range(b * SLOTS_PER_SEQ, (b + 1) * SLOTS_PER_SEQ)) for b in range(2)]
    for b, (ids, p) in enumerate(zip(seqs, prefixes)):
        ours(batch_from_sequences([ids[:p]], [0], [slots[b]], [b]), cache)
    batch = batch_from_sequences([[ids[p]] for ids, p in zip(seqs, prefixes)], prefixes, slots, [0, 1])
    logits = ours(batch, cache)
    for b in range(2):
        assert (logits[b] - alone[b][-1]).abs().max().item() < 1e-5


def test_last_layer_runs_its_mlp_on_the_logits_rows_only(pair):
    """Two prompts in one round: the last layer's MLP sees their 2 last rows, not all 15, and the logits
    equal those rows of a round that asks for every row's logits."""
    _, ours = pair
    slots = [list(range(b * SLOTS_PER_SEQ, (b + 1) * SLOTS_PER_SEQ)) for b in range(2)]
    args = ([random_ids(9, seed=7), random_ids(6, seed=8)], [0, 0], slots, [0, 1])
    seen: list[int] = []
    handle = ours.model.layers[-1].mlp.register_forward_hook(lambda _m, x, _o: seen.append(len(x[0])))
    try:
        last_rows = ours(batch_from_sequences(*args), HybridCache(ours.config, 2 * SLOTS_PER_SEQ, 2,
                                                                    torch.float32, "cpu"))
    finally:
        handle.remove()
    assert seen == [2]
    every_row = ours(batch_from_sequences(*args, all_logits=True),
                     HybridCache(ours.config, 2 * SLOTS_PER_SEQ, 2, torch.float32, "cpu"))
    assert (last_rows - every_row[[8, 14]]).abs().max().item() < 1e-5
