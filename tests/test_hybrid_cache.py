"""HybridCache: tensor layout per layer kind, state-slot operations, and slot isolation during forward."""

from __future__ import annotations

import pytest
import torch

from mini_deepinfer.models import Qwen2Config, Qwen35Config, build_model
from mini_deepinfer.models.cache import HybridCache
from mini_deepinfer.runtime.staging import batch_from_sequences

TINY = Qwen35Config(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=8,
    linear_value_head_dim=8,
    layer_types=("linear_attention", "full_attention", "linear_attention", "full_attention"),
    tie_word_embeddings=True,
)


def ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, 128, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tensor_shapes_and_dtypes_per_layer_kind(dtype):
    cache = HybridCache(TINY, kv_capacity=10, state_capacity=3, dtype=dtype, device="cpu")
    assert sorted(cache.key_cache) == sorted(cache.value_cache) == [1, 3]
    assert sorted(cache.conv_state) == sorted(cache.recurrent_state) == [0, 2]
    for i in (1, 3):
        assert cache.key_cache[i].shape == cache.value_cache[i].shape == (10, 2, 16)
        assert cache.key_cache[i].dtype == cache.value_cache[i].dtype == dtype
    for i in (0, 2):
        assert cache.conv_state[i].shape == (3, TINY.linear_conv_dim, 3)
        assert cache.conv_state[i].dtype == dtype
        assert cache.recurrent_state[i].shape == (3, 4, 8, 8)
        assert cache.recurrent_state[i].dtype == torch.float32


def test_nbytes_counts_every_tensor():
    cache = HybridCache(TINY, kv_capacity=10, state_capacity=3, dtype=torch.bfloat16, device="cpu")
    kv = 2 * 2 * 10 * 2 * 16 * 2
    state = 2 * (3 * TINY.linear_conv_dim * 3 * 2 + 3 * 4 * 8 * 8 * 4)
    assert cache.nbytes() == kv + state


def test_qwen2_cache_has_kv_for_every_layer_and_no_state():
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2)
    cache = HybridCache(config, kv_capacity=8, state_capacity=2, dtype=torch.float32, device="cpu")
    assert sorted(cache.key_cache) == [0, 1, 2] and not cache.conv_state and not cache.recurrent_state
    assert cache.read_state(0) == {"conv": [], "recurrent": []}


def test_reset_states_zeroes_only_the_given_slots():
    cache = HybridCache(TINY, kv_capacity=4, state_capacity=3, dtype=torch.float32, device="cpu")
    for t in list(cache.conv_state.values()) + list(cache.recurrent_state.values()):
        t.normal_()
    kept = cache.read_state(2)
    cache.reset_states(torch.tensor([0, 1]))
    for slot in (0, 1):
        assert all(not t.any() for kind in ("conv", "recurrent") for t in cache.read_state(slot)[kind])
    after = cache.read_state(2)
    assert all(torch.equal(a, b) for kind in ("conv", "recurrent") for a, b in zip(kept[kind], after[kind]))


def test_read_state_returns_clones():
    cache = HybridCache(TINY, kv_capacity=4, state_capacity=2, dtype=torch.float32, device="cpu")
    snapshot = cache.read_state(0)
    snapshot["recurrent"][0].fill_(1.0)
    assert not cache.recurrent_state[0].any()


def test_forward_leaves_other_sequences_slots_untouched():
    model = build_model(TINY, seed=0)
    cache = HybridCache(TINY, kv_capacity=64, state_capacity=2, dtype=torch.float32, device="cpu")
    slots_a, slots_b = list(range(0, 32)), list(range(32, 64))
    model(batch_from_sequences([ids(10, 1)], [0], [slots_a], [0]), cache)
    state_a, kv_a = cache.read_state(0), cache.read_kv(torch.arange(0, 32))
    model(batch_from_sequences([ids(12, 2)], [0], [slots_b], [1]), cache)
    model(batch_from_sequences([[5]], [12], [slots_b], [1]), cache)
    after_state, after_kv = cache.read_state(0), cache.read_kv(torch.arange(0, 32))
    for kind in ("conv", "recurrent"):
        assert all(torch.equal(a, b) for a, b in zip(state_a[kind], after_state[kind]))
    for kind in ("key", "value"):
        assert all(torch.equal(a, b) for a, b in zip(kv_a[kind], after_kv[kind]))


def test_conv_window_holds_the_last_pre_convolution_inputs():
    model = build_model(TINY, seed=0)
    cache = HybridCache(TINY, kv_capacity=16, state_capacity=1, dtype=torch.float32, device="cpu")
    tokens = ids(2, 3)  # shorter than the window: the oldest column stays zero
    model(batch_from_sequences([tokens], [0], [list(range(16))], [0]), cache)
    window = cache.conv_state[0][0]
    assert not window[:, 0].any()
    hidden = model.model.layers[0].input_layernorm(model.model.embed_tokens(torch.tensor(tokens)))
    expected = model.model.layers[0].linear_attn.in_proj_qkv(hidden).T
    assert torch.allclose(window[:, 1:], expected, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_model_keeps_float32_recurrent_state(dtype):
    model = build_model(TINY, dtype=dtype, seed=0)
    cache = HybridCache(TINY, kv_capacity=32, state_capacity=1, dtype=dtype, device="cpu")
    slots = list(range(32))
    logits = model(batch_from_sequences([ids(9, 4)], [0], [slots], [0]), cache)
    logits = model(batch_from_sequences([[3]], [9], [slots], [0]), cache)
    assert logits.dtype == dtype and torch.isfinite(logits.float()).all()
    assert all(t.dtype == torch.float32 and t.abs().sum() > 0 for t in cache.recurrent_state.values())
    assert all(t.dtype == dtype for t in cache.conv_state.values())
