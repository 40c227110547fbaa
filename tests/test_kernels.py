"""Each fast path in ``models/kernels/`` gives its plain reference's result; merged weights and folded
constants follow every change of the weights; and a decode step at the 0.8B shape launches no more kernels
than the performance page says (and never more than ``GRAPH_PATH_CEILING``).
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from mini_deepinfer import EngineConfig, SamplingParams
from mini_deepinfer.models import build_model
from mini_deepinfer.models.kernels import cpu, deltanet
from mini_deepinfer.models.kernels.cpu import SKINNY_MIN_INPUT, Linear
from mini_deepinfer.models.kernels.deltanet import (
    causal_conv_ref,
    causal_conv_step,
    causal_conv_with_window,
    recurrent_delta_step,
    recurrent_delta_step_in_pieces,
    recurrent_delta_step_ref,
)
from mini_deepinfer.models.kernels.norm import (
    l2_normalize,
    l2_normalize_ref,
    rms_norm,
    rms_norm_ref,
    rms_scale,
)
from mini_deepinfer.models.layers import Folded, SwiGLUMLP, merged_projections
from mini_deepinfer.models.presets import qwen3_5_config
from mini_deepinfer.runtime.factory import build_engine
from site_scripts.build.common import ROOT

GRAPH_PATH_CEILING = 1_300
"""Kernels per graph-path decode step at the 0.8B shape that the plain-PyTorch model must stay under."""


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("offset", [0.0, 1.0])
@pytest.mark.parametrize("magnitude", [1.0, 1e-3])  # 1e-3: mean(x^2) is about eps, so eps must be right
def test_rms_norm_equals_textbook_rms_norm(dtype, offset, magnitude):
    x, weight = (randn(5, 3, 64) * magnitude).to(dtype), randn(64, seed=1) * 0.3
    ours = rms_norm(x, rms_scale(weight, offset), 1e-6)
    expected = rms_norm_ref(x, weight, 1e-6, offset)
    assert ours.dtype == dtype
    tolerance = 1e-5 if dtype == torch.float32 else 1e-2
    torch.testing.assert_close(ours.float(), expected.float(), atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("magnitude", [1.0, 1e-3])
def test_l2_normalize_equals_textbook_form(magnitude):
    x = randn(4, 2, 16, 32) * magnitude
    torch.testing.assert_close(l2_normalize(x), l2_normalize_ref(x), atol=1e-6, rtol=1e-5)


def test_causal_conv_in_pieces_equals_whole_and_conv1d():
    x, weight = randn(1, 10, 5), randn(5, 1, 4, seed=1)
    taps = weight[:, 0, :]
    whole, whole_window = causal_conv_with_window(x, torch.zeros(1, 5, 3), taps)
    torch.testing.assert_close(whole, causal_conv_ref(x, torch.zeros(1, 5, 3), weight), atol=1e-6, rtol=0)
    window, pieces = torch.zeros(1, 5, 3), []
    for start, end in [(0, 2), (2, 3), (3, 6), (6, 10)]:  # shorter than, equal to and longer than the window
        y, window = causal_conv_with_window(x[:, start:end], window, taps)
        pieces.append(y)
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, atol=1e-6, rtol=0)
    assert torch.equal(window, whole_window)
    assert torch.equal(whole_window[0], x[0, -3:].T)


def test_causal_conv_writes_into_the_rows_it_is_given():
    x, weight, window = randn(1, 10, 5), randn(5, 1, 4, seed=1), randn(1, 5, 3, seed=2)
    rows = torch.full((1, 12, 7), float("nan"))[:, 1:11, 1:6]  # strided rows inside a larger tensor
    y, _ = causal_conv_with_window(x, window, weight[:, 0, :], out=rows)
    assert y.data_ptr() == rows.data_ptr()  # no output of its own, and no copy into the rows
    torch.testing.assert_close(rows, causal_conv_ref(x, window, weight), atol=1e-6, rtol=0)


def test_one_token_convolution_equals_conv1d_and_shifts_the_window():
    x, window, weight = randn(3, 6), randn(3, 6, 3, seed=1), randn(6, 1, 4, seed=2)
    y, new = causal_conv_step(x, window, weight[:, 0, :])
    expected = causal_conv_ref(x[:, None, :], window, weight)[:, 0]
    torch.testing.assert_close(y, expected, atol=1e-6, rtol=0)
    assert torch.equal(new, torch.cat([window[..., 1:], x[..., None]], dim=-1))


def delta_inputs(*lead: int, dk: int = 8, dv: int = 6, seed: int = 0) -> list[torch.Tensor]:
    q = F.normalize(randn(*lead, dk, seed=seed), dim=-1) * dk**-0.5
    k = F.normalize(randn(*lead, dk, seed=seed + 1), dim=-1)
    v = randn(*lead, dv, seed=seed + 2)
    g = -F.softplus(randn(*lead, seed=seed + 3))
    beta = torch.sigmoid(randn(*lead, seed=seed + 4))
    return [q, k, v, g, beta]


def test_one_read_delta_step_equals_textbook_step():
    q, k, v, g, beta = delta_inputs(2, 3)
    state = randn(2, 3, 8, 6, seed=9)
    expected_o, expected_state = recurrent_delta_step_ref(state, q, k, v, g, beta)
    o, new = recurrent_delta_step(state.clone(), torch.stack([q, k], dim=-2), v, g, beta)
    torch.testing.assert_close(o, expected_o, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(new, expected_state, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("batch", [1, 5, 8])
def test_delta_step_in_cache_sized_pieces_equals_one_batched_step(monkeypatch, batch):
    q, k, v, g, beta = delta_inputs(batch, 3)
    qk, state = torch.stack([q, k], dim=-2), randn(batch, 3, 8, 6, seed=9)
    expected_o, expected_state = recurrent_delta_step(state.clone(), qk, v, g, beta)
    # Two sequences' state per piece (at one thread), so batches 5 and 8 run in 3 and 4 pieces.
    monkeypatch.setattr(deltanet, "CACHE_BYTES_PER_THREAD", 2 * state[0].numel() * state.element_size())
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    pieces = []
    monkeypatch.setattr(deltanet, "recurrent_delta_step",
                        lambda state, *rest: pieces.append(len(state)) or recurrent_delta_step(state, *rest))
    updated = state.clone()
    o, new = recurrent_delta_step_in_pieces(updated, qk, v, g, beta)
    assert pieces == [2] * (batch // 2) + [1] * (batch % 2)
    assert new.data_ptr() == updated.data_ptr()  # updated in place, as one call does
    torch.testing.assert_close(o, expected_o, atol=0, rtol=0)
    torch.testing.assert_close(new, expected_state, atol=0, rtol=0)


@pytest.mark.parametrize("rows", [1, 4, 8, 32, 33])
@pytest.mark.parametrize("bias", [False, True])
def test_linear_weight_left_form_equals_f_linear(rows, bias):
    layer = Linear(SKINNY_MIN_INPUT, 48, bias=bias)
    if bias:
        torch.nn.init.normal_(layer.bias)
    x = torch.randn(rows, SKINNY_MIN_INPUT)
    out = layer(x)
    assert out.is_contiguous()
    assert torch.allclose(out, F.linear(x, layer.weight, layer.bias), atol=1e-5)


@pytest.mark.parametrize("avx512", [False, True], ids=["other-cpu", "avx512"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3, 4, 8, 9, 32])
def test_linear_every_cpu_form_equals_f_linear_and_blocks_only_float32_on_avx512(rows, dtype, avx512,
                                                                                 monkeypatch):
    """Whatever the CPU, each form gives F.linear's numbers; ``blocked`` runs for 4-8 float32 rows on AVX-512
    only (a spy counts its calls), with a bias, and not where the weight's rows are no multiple of a block."""
    monkeypatch.setattr(cpu, "AVX512", avx512)
    calls = []
    real = cpu.blocked
    monkeypatch.setattr(cpu, "blocked", lambda *a, **k: calls.append(1) or real(*a, **k))
    for out_features in (3 * cpu.BLOCK, 3 * cpu.BLOCK + 1):
        layer = Linear(SKINNY_MIN_INPUT, out_features, bias=True).to(dtype)
        torch.nn.init.normal_(layer.bias)
        x = torch.randn(rows, SKINNY_MIN_INPUT, dtype=dtype)
        out = layer(x)
        assert out.is_contiguous() and out.dtype == dtype
        expected = F.linear(x.float(), layer.weight.float(), layer.bias.float())
        tolerance = 1e-4 if dtype == torch.float32 else 0.1
        torch.testing.assert_close(out.float(), expected, atol=tolerance, rtol=tolerance)
    blocks = avx512 and dtype == torch.float32 and rows in cpu.BLOCKED_ROWS
    assert len(calls) == (1 if blocks else 0)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_cpu_row_is_a_matrix_vector_product_in_bfloat16_only(dtype, bias, monkeypatch):
    """One row in bfloat16 goes through ``torch.mv`` (a spy counts its calls) and gives F.linear's numbers;
    one float32 row and two bfloat16 rows do not take it."""
    calls = []
    real = torch.mv
    monkeypatch.setattr(cpu.torch, "mv", lambda *a: calls.append(1) or real(*a))
    layer = Linear(SKINNY_MIN_INPUT, 40, bias=bias).to(dtype)
    for rows in (1, 2):
        x = torch.randn(rows, SKINNY_MIN_INPUT, dtype=dtype)
        out = layer(x)
        assert out.shape == (rows, 40) and out.dtype == dtype
        torch.testing.assert_close(out, F.linear(x, layer.weight, layer.bias), atol=0.05, rtol=0.02)
    assert len(calls) == (1 if dtype == torch.bfloat16 else 0)


def test_merged_projection_equals_its_parts_and_follows_a_load():
    mlp = SwiGLUMLP(16, 24)
    x = randn(3, 16)

    def plain(m: SwiGLUMLP) -> torch.Tensor:
        return m.down_proj(F.silu(m.gate_proj(x)) * m.up_proj(x))

    torch.testing.assert_close(mlp(x), plain(mlp))
    assert mlp.gate_proj.weight.data_ptr() == mlp.gate_up.folded.value[0].data_ptr()  # a view, no copy
    other = SwiGLUMLP(16, 24)
    mlp.load_state_dict(other.state_dict())  # by the checkpoint's names, into the merged weight
    assert set(mlp.state_dict()) == {"gate_proj.weight", "up_proj.weight", "down_proj.weight"}
    torch.testing.assert_close(mlp(x), plain(other))


def test_a_built_model_loads_into_its_merged_weights_and_its_first_step_copies_none():
    model = build_model(qwen3_5_config("tiny"), torch.float32, "cpu", seed=0)
    merged = merged_projections(model)
    assert len(merged) == 2 * len(model.model.layers)  # per layer: gate/up, and q/k/v or qkv/z/b/a
    before = [(m.weight.data_ptr(), [p.weight.data_ptr() for p in m.parts]) for m in merged]
    reference = build_model(qwen3_5_config("tiny"), torch.float32, "cpu", seed=1)
    model.load_state_dict(reference.state_dict())  # by the checkpoint's names, into the merged matrices
    engine = build_engine(model, EngineConfig(kv_capacity=16, max_num_seqs=1))
    engine.submit("a", [1, 2, 3], SamplingParams(max_new_tokens=3))
    engine.run()
    assert [(m.weight.data_ptr(), [p.weight.data_ptr() for p in m.parts]) for m in merged] == before
    expected = build_engine(reference, EngineConfig(kv_capacity=16, max_num_seqs=1))
    expected.submit("a", [1, 2, 3], SamplingParams(max_new_tokens=3))
    expected.run()
    assert engine.requests["a"].output_token_ids == expected.requests["a"].output_token_ids


def test_a_cast_model_merges_its_weights_again_on_first_use():
    model = build_model(qwen3_5_config("tiny"), torch.float32, "cpu", seed=0)
    x = randn(2, model.config.hidden_size)
    mlp = model.model.layers[0].mlp
    expected = mlp(x).to(torch.bfloat16)
    model.to(torch.bfloat16)
    assert mlp.gate_up.weight.dtype == torch.float32  # the parts were replaced; the old matrix is stale
    torch.testing.assert_close(mlp(x.to(torch.bfloat16)), expected, atol=0.05, rtol=0.05)
    assert mlp.gate_up.weight.dtype == torch.bfloat16
    assert mlp.gate_proj.weight.data_ptr() == mlp.gate_up.weight.data_ptr()


def test_folded_constant_is_recomputed_after_an_in_place_write_only():
    weight, calls = torch.zeros(4), []
    folded = Folded(lambda w: calls.append(1) or w + 1)
    folded(weight)
    folded(weight)
    assert len(calls) == 1
    weight.copy_(torch.ones(4))
    assert torch.equal(folded(weight), torch.full((4,), 2.0)) and len(calls) == 2


@pytest.fixture(scope="module")
def kernel_counts():
    from site_scripts.performance.gen_kernels import count_decode_step, random_model

    model = random_model()
    return {"eager": count_decode_step(model, graphs=False),
            "graph path": count_decode_step(model, graphs=True)}


def committed_totals() -> list[int]:
    text = (ROOT / "snippets" / "bench" / "kernels.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| **total**"))
    return [int(n.replace(",", "")) for n in re.findall(r"\*\*([\d,]+)\*\*", row)]


def test_decode_step_kernels_do_not_rise_above_the_page_or_the_ceiling(kernel_counts):
    eager, graph = (sum(kernel_counts[p].by_part.values()) for p in ("eager", "graph path"))
    page_eager, page_graph = committed_totals()
    assert graph <= GRAPH_PATH_CEILING, f"{graph} kernels per graph-path decode step"
    assert eager <= page_eager and graph <= page_graph, (
        f"kernels per decode step rose: eager {eager} (page {page_eager}), graph path {graph} "
        f"(page {page_graph}); regenerate with --only kernels if a rise is meant")


def test_decode_step_has_no_bfloat16_round_trips(kernel_counts):
    """Casts per step: one per Gated DeltaNet layer (its output gate goes to float32 for SiLU, as in
    transformers) and rotary's two; no norm, convolution or delta rule casts down and back up (384 casts
    per step before, 16 per layer)."""
    assert kernel_counts["graph path"].by_op["_to_copy"] <= 18 + 2
