"""Qwen2 (e.g. DeepSeek-R1-Distill-Qwen-1.5B): a plain pre-norm decoder with softmax attention.

Scope: the Qwen2 attention (q/k/v biases, rotary embedding over the whole head, grouped-query attention
over KV slots), its decoder layer and the causal LM, with parameter names equal to transformers'
``Qwen2ForCausalLM``. It runs the same ``forward(batch, cache)`` as Qwen3.5; its cache has no
linear-attention layers, so the batch's state slots are ignored.

Non-scope: sliding-window attention (the supported checkpoints do not use it) and rotary scaling.
"""

from __future__ import annotations

import torch
from torch import nn

from mini_deepinfer.models.config import Qwen2Config
from mini_deepinfer.models.forward_batch import ForwardContext
from mini_deepinfer.models.layers import (
    CausalLM,
    Linear,
    RMSNorm,
    SwiGLUMLP,
    apply_rotary,
    paged_attention,
)


class Qwen2Attention(nn.Module):
    """Softmax attention with biased q/k/v projections and full-head rotary embedding."""

    def __init__(self, config: Qwen2Config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        q_out, kv_out = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.q_proj = Linear(config.hidden_size, q_out, bias=True)
        self.k_proj = Linear(config.hidden_size, kv_out, bias=True)
        self.v_proj = Linear(config.hidden_size, kv_out, bias=True)
        self.o_proj = Linear(q_out, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, ctx: ForwardContext, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` is ``[T, hidden]`` (already normed); returns ``[T, hidden]``, or only the rows ``keep``."""
        tokens = x.shape[0]
        q = apply_rotary(self.q_proj(x).view(tokens, self.num_heads, self.head_dim), ctx.cos, ctx.sin)
        k = apply_rotary(self.k_proj(x).view(tokens, self.num_kv_heads, self.head_dim), ctx.cos, ctx.sin)
        v = self.v_proj(x).view(tokens, self.num_kv_heads, self.head_dim)
        keys, values = ctx.cache.key_cache[self.layer_idx], ctx.cache.value_cache[self.layer_idx]
        o = paged_attention(q, k, v, keys, values, ctx, self.head_dim**-0.5)
        return self.o_proj((o if keep is None else o.index_select(0, keep)).flatten(1))


class Qwen2DecoderLayer(nn.Module):
    """Pre-norm residual layer: attention, then the MLP, each after a standard RMSNorm."""

    def __init__(self, config: Qwen2Config, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = Qwen2Attention(config, layer_idx)
        self.mlp = SwiGLUMLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self, hidden: torch.Tensor, ctx: ForwardContext, keep: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[T, hidden]`` -> ``[T, hidden]``, or with ``keep`` (last layer) those rows after attention."""
        mixed = self.self_attn(self.input_layernorm(hidden), ctx, keep)
        hidden = mixed + (hidden if keep is None else hidden.index_select(0, keep))
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class Qwen2ForCausalLM(CausalLM):
    """Qwen2 with its head; state-dict names match transformers' ``Qwen2ForCausalLM``."""

    def __init__(self, config: Qwen2Config) -> None:
        layers = [Qwen2DecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        super().__init__(config, layers, RMSNorm(config.hidden_size, eps=config.rms_norm_eps))
