"""The Qwen3.5 text model: gated full attention and Gated DeltaNet layers over one flat round.

Scope: the two token mixers and the decoder layer of Qwen3.5 (0.8B, 2B and any shape its config allows),
in plain PyTorch, with parameter names equal to transformers' ``Qwen3_5ForCausalLM``:

- gated full attention (``self_attn``): ``q_proj`` yields a query and an output gate per head, q/k norms
  ``x_hat * (1 + w)``, partial rotary embedding, grouped-query attention over KV slots, ``sigmoid(gate)``
  before ``o_proj``;
- Gated DeltaNet (``linear_attn``): a causal depthwise convolution whose window lives in the state slot,
  L2-normalised queries and keys, and the gated delta rule in float32, run token by token for one new
  token (``recurrent_delta_step``) or in chunks for several (``chunked_delta_rule``); both give the same
  result.

Non-scope: the vision tower and the multi-token-prediction head of the released checkpoints, left padding
(the engine never pads), loading weights (the loader), and slot accounting (the engine).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mini_deepinfer.models.config import LINEAR_ATTENTION, Qwen35Config
from mini_deepinfer.models.forward_batch import ForwardContext
from mini_deepinfer.models.layers import (
    CausalLM,
    Linear,
    SwiGLUMLP,
    ZeroCenteredRMSNorm,
    apply_rotary,
    paged_attention,
)

L2NORM_EPS = 1e-6


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + 1e-6)`` over the last dim (the epsilon sits inside the sum, not a mean)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + L2NORM_EPS)


# --8<-- [start:causal_conv]
def causal_conv_with_window(
    x: torch.Tensor, window: torch.Tensor, weight: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal convolution over time, continuing from a saved window, followed by SiLU.

    Args:
        x: ``[B, L, C]`` new pre-convolution inputs.
        window: ``[B, C, K-1]`` the previous ``K-1`` inputs of each sequence (zeros for a fresh one).
        weight: ``[C, 1, K]`` convolution taps; tap ``K-1`` multiplies the current input.

    Returns:
        ``(y, new_window)``: ``y`` of shape ``[B, L, C]``, and the last ``K-1`` inputs ``[B, C, K-1]``.
    """
    # With K = 4 taps per channel, K multiply-adds over time-major [B, L, C] rows beat F.conv1d on CPU, which
    # has a fixed cost per call and works channel-major (two transposing copies of the inputs). Only the
    # first K-1 outputs read the saved window, so only they are computed from a short [window | x] strip;
    # the rest read shifted views of x, and no copy of the whole input is made. Sums are float32, cast once.
    history, length = weight.shape[-1] - 1, x.shape[1]
    taps = weight[:, 0, :].float()
    y = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    strip = torch.cat([window.transpose(1, 2), x[:, :history]], dim=1)
    tap_sum(strip, taps, out=y[:, :history])
    if length > history:
        tap_sum(x, taps, out=y[:, history:])
    new_window = x[:, length - history :] if length >= history else strip[:, length:]
    return F.silu(y.to(x.dtype), inplace=True), new_window.transpose(1, 2)


def tap_sum(rows: torch.Tensor, taps: torch.Tensor, out: torch.Tensor) -> None:
    """``out[:, t] = sum_j rows[:, t + j] * taps[:, j]`` for the ``out.shape[1]`` outputs, in float32."""
    count = out.shape[1]
    torch.mul(rows[:, :count], taps[:, 0], out=out)
    for j in range(1, taps.shape[-1]):
        out.addcmul_(rows[:, j : j + count], taps[:, j])
# --8<-- [end:causal_conv]


# --8<-- [start:delta_step]
def recurrent_delta_step(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the gated delta rule, for any leading dims ``...`` (e.g. batch, heads).

    With state ``S`` (``dk x dv``): decay ``S *= exp(g)``; predict ``p = k^T S``; correct
    ``S += k (beta (v - p))^T``; read ``o = q^T S`` from the updated state.

    The state is the largest tensor here, so it is read once (for ``q^T S`` and ``k^T S`` together) and
    updated in place; the output uses ``q^T S_new = exp(g) q^T S + (q . k) delta`` instead of a second read.

    Args:
        state: ``[..., dk, dv]`` float32, updated in place.
        q: ``[..., dk]`` normalised and scaled query.
        k: ``[..., dk]`` normalised key.
        v: ``[..., dv]`` value.
        g: ``[...]`` log-decay (<= 0).
        beta: ``[...]`` write strength in (0, 1).

    Returns:
        ``(o, state)`` with ``o`` of shape ``[..., dv]``.
    """
    decay = g.exp()[..., None]
    q_state, k_state = (torch.stack([q, k], dim=-2) @ state).unbind(-2)
    delta = beta[..., None] * (v - decay * k_state)
    state.mul_(decay[..., None]).addcmul_(k[..., :, None], delta[..., None, :])
    out = decay * q_state + (q * k).sum(-1, keepdim=True) * delta
    return out, state
# --8<-- [end:delta_step]


def recurrent_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule token by token over ``[..., L, d]`` inputs (the chunked form's reference)."""
    state, outputs = state.clone(), []
    for t in range(q.shape[-2]):
        o, state = recurrent_delta_step(
            state, q[..., t, :], k[..., t, :], v[..., t, :], g[..., t], beta[..., t]
        )
        outputs.append(o)
    return torch.stack(outputs, dim=-2), state


# --8<-- [start:capture]
def recurrent_delta_states(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule token by token, keeping the state after every token (speculative verification).

    Returns:
        ``(o, states)``: ``o`` of shape ``[..., L, dv]``, ``states`` of shape ``[L, ..., dk, dv]``.
    """
    state, outputs, states = state.clone(), [], []
    for t in range(q.shape[-2]):
        o, state = recurrent_delta_step(
            state, q[..., t, :], k[..., t, :], v[..., t, :], g[..., t], beta[..., t]
        )
        outputs.append(o)
        states.append(state.clone())  # the step updates ``state`` in place
    return torch.stack(outputs, dim=-2), torch.stack(states)


def windows_after_each(window: torch.Tensor, x: torch.Tensor, kernel: int) -> torch.Tensor:
    """The convolution window after each new input: ``[L, C, K-1]`` from ``window [C, K-1]``, ``x [L, C]``."""
    full = torch.cat([window, x.transpose(0, 1)], dim=-1)  # [C, K-1+L]
    return full.unfold(-1, kernel - 1, 1)[:, 1:].transpose(0, 1).contiguous()
# --8<-- [end:capture]


def chunked_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    chunk_size: int = 32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule over ``L`` tokens in chunks: matrix products inside a chunk, a scan across chunks.

    Inside a chunk with cumulative log-decay ``G``, the ``C`` sequential corrections are solved at once from
    the unit lower-triangular system ``(I + strict_lower(diag(beta) K K^T * D)) U = diag(beta) V`` where
    ``D[i, j] = exp(G_i - G_j)`` for ``i >= j``; the state then advances once per chunk.

    Args:
        q: ``[..., L, dk]`` normalised, scaled queries (float32).
        k: ``[..., L, dk]`` normalised keys.
        v: ``[..., L, dv]`` values.
        g: ``[..., L]`` log-decays.
        beta: ``[..., L]`` write strengths.
        state: ``[..., dk, dv]`` initial state.
        chunk_size: Tokens per chunk (fewer when ``L`` is shorter). The work inside a chunk grows with its
            square, the scan's sequential steps with ``L / chunk_size``; 32 keeps the first small for
            128-dim heads. Every size gives the token-by-token result up to rounding (the tests compare).

    Returns:
        ``(o, final_state)`` with ``o`` of shape ``[..., L, dv]``.
    """
    length = q.shape[-2]
    size = min(chunk_size, length)
    pad = (-length) % size
    if pad:
        q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        g, beta = (F.pad(t, (0, pad)) for t in (g, beta))
    n = (length + pad) // size

    # Chunk-major layout [n, ..., C, d]: one copy here, and every step of the scan below reads one
    # contiguous block (strided per-chunk views made each batched product copy its operands first).
    def chunks(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(*t.shape[:-2], n, size, t.shape[-1]).movedim(-3, 0).contiguous()

    q, k, v = chunks(q), chunks(k), chunks(v)
    cum_g = g.reshape(*g.shape[:-1], n, size).movedim(-2, 0).cumsum(-1)
    beta = beta.reshape(*beta.shape[:-1], n, size).movedim(-2, 0)[..., None]

    causal = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
    decay = (cum_g[..., :, None] - cum_g[..., None, :]).masked_fill_(~causal, float("-inf")).exp_()
    k_beta = k * beta
    system = (k_beta @ k.transpose(-1, -2)).mul_(decay)
    # One solve against the identity gives the inverse; two products with it cost less than two solves.
    inverse = _solve_unit_lower(system, torch.eye(size, device=q.device).expand_as(system))
    u = inverse @ (v * beta)
    w = inverse @ (k_beta * cum_g.exp()[..., None])
    intra = (q @ k.transpose(-1, -2)).mul_(decay)
    q_decayed = q * cum_g.exp()[..., None]
    k_decayed_t = (k * (cum_g[..., -1:] - cum_g).exp()[..., None]).transpose(-1, -2).contiguous()
    chunk_decay = cum_g[..., -1].exp()[..., None, None]

    out, state = torch.empty_like(u), state.clone()
    for i in range(n):
        v_new = u[i] - w[i] @ state
        torch.matmul(q_decayed[i], state, out=out[i]).add_(intra[i] @ v_new)
        state.mul_(chunk_decay[i]).add_(k_decayed_t[i] @ v_new)
    out = out.movedim(0, -3)
    return out.reshape(*out.shape[:-3], n * size, out.shape[-1])[..., :length, :], state


def _solve_unit_lower(system: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """Solve ``(I + strict_lower(system)) x = rhs``; the diagonal and upper triangle are not read."""
    return torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)


class GatedRMSNorm(nn.Module):
    """Per-head RMSNorm with a plain weight ``w`` (not ``1 + w``), gated by ``silu(z)``.

    Cast order: normalise in float32, cast to the input dtype, scale by ``w``, multiply by ``silu(z)`` in
    float32, cast back.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
        return ((self.weight * normed) * F.silu(z.float())).to(x.dtype)

    def init_random(self, generator: torch.Generator, std: float) -> None:
        nn.init.ones_(self.weight)


class GatedDeltaNet(nn.Module):
    """The linear-attention token mixer (``linear_attn``); its per-sequence state lives in a state slot."""

    def __init__(self, config: Qwen35Config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_k_heads, self.num_v_heads = config.linear_num_key_heads, config.linear_num_value_heads
        self.k_head_dim, self.v_head_dim = config.linear_key_head_dim, config.linear_value_head_dim
        self.key_dim, self.value_dim = config.linear_key_dim, config.linear_value_dim
        conv_dim, hidden = config.linear_conv_dim, config.hidden_size
        self.in_proj_qkv = Linear(hidden, conv_dim, bias=False)
        self.in_proj_z = Linear(hidden, self.value_dim, bias=False)
        self.in_proj_b = Linear(hidden, self.num_v_heads, bias=False)
        self.in_proj_a = Linear(hidden, self.num_v_heads, bias=False)
        kernel = config.linear_conv_kernel_dim
        self.conv1d = nn.Conv1d(conv_dim, conv_dim, kernel, groups=conv_dim, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.num_v_heads))
        self.A_log = nn.Parameter(torch.zeros(self.num_v_heads))
        self.norm = GatedRMSNorm(self.v_head_dim, eps=config.rms_norm_eps)
        self.out_proj = Linear(self.value_dim, hidden, bias=False)

    def init_random(self, generator: torch.Generator, std: float) -> None:
        nn.init.ones_(self.dt_bias)
        a = torch.empty(self.num_v_heads, device=self.A_log.device).uniform_(0.01, 16, generator=generator)
        self.A_log.copy_(a.log())

    # --8<-- [start:gdn_forward]
    def forward(self, x: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """``x`` is ``[T, hidden]`` (already normed); returns ``[T, hidden]``."""
        tokens = x.shape[0]
        mixed = self.convolve(self.in_proj_qkv(x), ctx)
        q, k, v = self.split_heads(mixed)
        beta = torch.sigmoid(self.in_proj_b(x)).float()
        g = -self.A_log.float().exp() * F.softplus(self.in_proj_a(x).float() + self.dt_bias)
        core = self.delta_rule(q, k, v, g, beta, ctx).to(x.dtype)
        z = self.in_proj_z(x).view(tokens, self.num_v_heads, self.v_head_dim)
        return self.out_proj(self.norm(core, z).reshape(tokens, self.value_dim))
    # --8<-- [end:gdn_forward]

    # --8<-- [start:convolve]
    def convolve(self, mixed: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """Causal convolution of each sequence's ``[q | k | v]`` inputs, continuing its saved window."""
        windows = ctx.cache.conv_state[self.layer_idx]
        layout, batch = ctx.layout, ctx.batch
        out = mixed if layout.all_decode else torch.empty_like(mixed)
        if layout.decode_seqs:
            y, new = causal_conv_with_window(
                layout.decode_part(mixed)[:, None, :], layout.decode_states(windows), self.conv1d.weight
            )
            layout.store_decode_states(windows, new)
            if layout.all_decode:
                return y[:, 0, :]
            out.index_copy_(0, layout.decode_rows, y[:, 0, :])
        for b in layout.prefill_seqs:
            start, n = layout.row_offsets[b], batch.query_lens[b]
            slot = batch.state_slots[b : b + 1]
            old = windows.index_select(0, slot)
            y, new = causal_conv_with_window(mixed[None, start : start + n], old, self.conv1d.weight)
            if b in layout.snapshot_seqs:
                after = windows_after_each(old[0], mixed[start : start + n], self.conv1d.weight.shape[-1])
                ctx.cache.record_snapshots("conv", self.layer_idx, layout.state_slot_ids[b], after)
            windows.index_copy_(0, slot, new)
            out[start : start + n] = y[0]
        return out
    # --8<-- [end:convolve]

    # --8<-- [start:split_heads]
    def split_heads(self, mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Split ``[q | k | v]`` into float32 heads; normalise q and k, scale q, repeat key heads if fewer."""
        tokens = mixed.shape[0]
        q, k, v = torch.split(mixed.float(), [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = l2_normalize(q.view(tokens, self.num_k_heads, self.k_head_dim)) * self.k_head_dim**-0.5
        k = l2_normalize(k.view(tokens, self.num_k_heads, self.k_head_dim))
        repeat = self.num_v_heads // self.num_k_heads
        if repeat > 1:
            q, k = q.repeat_interleave(repeat, dim=1), k.repeat_interleave(repeat, dim=1)
        return q, k, v.view(tokens, self.num_v_heads, self.v_head_dim)
    # --8<-- [end:split_heads]

    def delta_rule(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        g: torch.Tensor,
        beta: torch.Tensor,
        ctx: ForwardContext,
    ) -> torch.Tensor:
        """Run each sequence's tokens from its recurrent state; return ``[T, Hv, dv]`` float32 outputs.

        The decode group takes one batched recurrent step; longer runs use the chunked form per sequence;
        a sequence whose states are captured runs token by token and records the state after each token.
        """
        states = ctx.cache.recurrent_state[self.layer_idx]
        layout, batch = ctx.layout, ctx.batch
        out = torch.empty_like(v)
        if layout.decode_seqs:
            inputs = [layout.decode_part(t) for t in (q, k, v, g, beta)]
            o, new = recurrent_delta_step(layout.decode_states(states), *inputs)
            layout.store_decode_states(states, new)
            if layout.all_decode:
                return o
            out.index_copy_(0, layout.decode_rows, o)
        for b in layout.prefill_seqs:
            rows = slice(layout.row_offsets[b], layout.row_offsets[b] + batch.query_lens[b])
            slot = batch.state_slots[b : b + 1]
            heads_first = [t[rows].transpose(0, 1)[None] for t in (q, k, v, g, beta)]
            if b in layout.snapshot_seqs:
                o, after = recurrent_delta_states(*heads_first, states.index_select(0, slot))
                ctx.cache.record_snapshots("recurrent", self.layer_idx, layout.state_slot_ids[b], after[:, 0])
                new = after[-1]
            else:
                o, new = chunked_delta_rule(*heads_first, states.index_select(0, slot))
            states.index_copy_(0, slot, new)
            out[rows] = o[0].transpose(0, 1)
        return out


class GatedAttention(nn.Module):
    """Full softmax attention with q/k norms, partial rotary embedding and a sigmoid output gate."""

    def __init__(self, config: Qwen35Config, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads, self.num_kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        q_out, kv_out = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        bias = config.attention_bias
        self.q_proj = Linear(config.hidden_size, 2 * q_out, bias=bias)
        self.k_proj = Linear(config.hidden_size, kv_out, bias=bias)
        self.v_proj = Linear(config.hidden_size, kv_out, bias=bias)
        self.o_proj = Linear(q_out, config.hidden_size, bias=bias)
        self.q_norm = ZeroCenteredRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(self.head_dim, eps=config.rms_norm_eps)

    # --8<-- [start:gated_attention]
    def forward(self, x: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """``x`` is ``[T, hidden]`` (already normed); returns ``[T, hidden]``."""
        tokens = x.shape[0]
        # Per head the projection holds [query (D) | gate (D)], heads side by side.
        q, gate = self.q_proj(x).view(tokens, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        q = apply_rotary(self.q_norm(q), ctx.cos, ctx.sin)
        k = self.k_norm(self.k_proj(x).view(tokens, self.num_kv_heads, self.head_dim))
        k = apply_rotary(k, ctx.cos, ctx.sin)
        v = self.v_proj(x).view(tokens, self.num_kv_heads, self.head_dim)
        keys, values = ctx.cache.key_cache[self.layer_idx], ctx.cache.value_cache[self.layer_idx]
        o = paged_attention(q, k, v, keys, values, ctx, self.head_dim**-0.5)
        o = o.reshape(tokens, -1) * torch.sigmoid(gate.reshape(tokens, -1))
        return self.o_proj(o)
    # --8<-- [end:gated_attention]


class Qwen35DecoderLayer(nn.Module):
    """Pre-norm residual layer: one token mixer (``linear_attn`` or ``self_attn``), then the MLP."""

    def __init__(self, config: Qwen35Config, layer_idx: int) -> None:
        super().__init__()
        self.is_linear = config.layer_types[layer_idx] == LINEAR_ATTENTION
        if self.is_linear:
            self.linear_attn = GatedDeltaNet(config, layer_idx)
        else:
            self.self_attn = GatedAttention(config, layer_idx)
        self.mlp = SwiGLUMLP(config.hidden_size, config.intermediate_size)
        self.input_layernorm = ZeroCenteredRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = ZeroCenteredRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(self, hidden: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        mixer = self.linear_attn if self.is_linear else self.self_attn
        hidden = hidden + mixer(self.input_layernorm(hidden), ctx)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class Qwen35ForCausalLM(CausalLM):
    """The Qwen3.5 text model with its head; state-dict names match transformers' ``Qwen3_5ForCausalLM``."""

    def __init__(self, config: Qwen35Config) -> None:
        layers = [Qwen35DecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        super().__init__(config, layers, ZeroCenteredRMSNorm(config.hidden_size, eps=config.rms_norm_eps))
