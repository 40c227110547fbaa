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

The projections that read the same input run as one product (``Merged``), and the constants derived from
weights are computed once (``Folded``); the parameters keep the checkpoint's names.

Non-scope: the maths of the convolution and the delta rule (``kernels/deltanet.py``), the vision
tower and the multi-token-prediction head of the released checkpoints, left padding (the engine never
pads), loading weights (the loader), and slot accounting (the engine).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mini_deepinfer.models.config import LINEAR_ATTENTION, Qwen35Config
from mini_deepinfer.models.forward_batch import ForwardContext
from mini_deepinfer.models.kernels.deltanet import (
    CHUNK_SIZE,
    causal_conv_step,
    causal_conv_with_window,
    chunked_delta_rule,
    recurrent_delta_states,
    recurrent_delta_step_in_pieces,
    windows_after_each,
)
from mini_deepinfer.models.kernels.norm import l2_normalize, rms_norm, rms_scale
from mini_deepinfer.models.layers import (
    CausalLM,
    Folded,
    Linear,
    Merged,
    SwiGLUMLP,
    ZeroCenteredRMSNorm,
    apply_rotary,
    paged_attention,
)


class GatedRMSNorm(nn.Module):
    """Per-head RMSNorm with a plain weight ``w`` (not ``1 + w``), gated by ``silu(z)``.

    Normalise and scale in float32, multiply by ``silu(z)`` in float32, cast once to ``dtype``.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.scale = Folded(rms_scale)

    def forward(self, x: torch.Tensor, z: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        normed = rms_norm(x, self.scale(self.weight), self.eps, torch.float32)
        gate = F.silu(z.float(), inplace=True)
        return torch.mul(normed, gate, out=torch.empty_like(normed, dtype=dtype))  # rounded once to dtype

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
        self.in_proj = Merged(self.in_proj_qkv, self.in_proj_z, self.in_proj_b, self.in_proj_a)
        self.taps = Folded(lambda w: w[:, 0, :].float())  # [C, K]
        self.decay_rate = Folded(lambda a_log, dt_bias: (-a_log.float().exp(), dt_bias.float()))

    def init_random(self, generator: torch.Generator, std: float) -> None:
        nn.init.ones_(self.dt_bias)
        a = torch.empty(self.num_v_heads, device=self.A_log.device).uniform_(0.01, 16, generator=generator)
        self.A_log.copy_(a.log())

    # --8<-- [start:gdn_forward]
    def forward(self, x: torch.Tensor, ctx: ForwardContext, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` is ``[T, hidden]`` (already normed); returns ``[T, hidden]``, or only the rows ``keep``."""
        tokens = x.shape[0]
        mixed, z, b, a = self.in_proj(x)  # in_proj_qkv, in_proj_z, in_proj_b, in_proj_a: one product
        qk, v = self.split_heads(self.convolve(mixed, ctx))
        beta = torch.sigmoid(b)
        neg_a, dt_bias = self.decay_rate(self.A_log, self.dt_bias)  # -exp(A_log), in float32
        g = neg_a * F.softplus(a + dt_bias)
        core = self.delta_rule(qk, v, g, beta, ctx)  # every row: the state is updated token by token
        z = z.view(tokens, self.num_v_heads, self.v_head_dim)
        if keep is not None:
            core, z = core.index_select(0, keep), z.index_select(0, keep)
        return self.out_proj(self.norm(core, z, x.dtype).flatten(1))
    # --8<-- [end:gdn_forward]

    # --8<-- [start:convolve]
    def convolve(self, mixed: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        """Causal convolution of each sequence's ``[q | k | v]`` inputs, continuing its saved window.

        Returns float32 ``[T, conv_dim]``.
        """
        windows, taps = ctx.cache.conv_state[self.layer_idx], self.taps(self.conv1d.weight)
        layout, batch = ctx.layout, ctx.batch
        if layout.decode_seqs:
            y, new = causal_conv_step(layout.decode_part(mixed), layout.decode_states(windows), taps)
            layout.store_decode_states(windows, new)
            if layout.all_decode:
                return y
        out = torch.empty(mixed.shape, dtype=torch.float32, device=mixed.device)
        if layout.decode_seqs:
            out.index_copy_(0, layout.decode_rows, y)
        for b in layout.prefill_seqs:
            start, n = layout.row_offsets[b], batch.query_lens[b]
            slot = batch.state_slots[b : b + 1]
            old = windows.index_select(0, slot)
            rows = slice(start, start + n)  # the sequence's outputs are written straight into ``out``
            _, new = causal_conv_with_window(mixed[None, rows], old, taps, out=out[None, rows])
            if b in layout.snapshot_seqs:  # a verify keeps the window after each position (lesson 13)
                after = windows_after_each(old[0], mixed[rows], self.conv1d.weight.shape[-1])
                ctx.cache.record_snapshots("conv", self.layer_idx, layout.state_slot_ids[b], after)
            width = old.shape[-1]
            for tokens, snapshot in layout.saves_of(b):  # prefix cache: the window after that many tokens
                last = mixed[start + max(tokens - width, 0) : start + tokens].transpose(0, 1).to(old.dtype)
                window = torch.cat([old[0], last], -1)[:, -width:]
                ctx.cache.keep_prefix_state("conv", self.layer_idx, snapshot, window)
            windows.index_copy_(0, slot, new)
        return out
    # --8<-- [end:convolve]

    # --8<-- [start:split_heads]
    def split_heads(self, mixed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Split float32 ``[q | k | v]`` into heads; normalise q and k, scale q, repeat key heads if fewer.

        Returns ``qk`` ``[T, Hv, 2, dk]`` (query and key of each head side by side) and ``v`` ``[T, Hv, dv]``.
        """
        tokens = mixed.shape[0]
        qk, v = torch.split(mixed, [2 * self.key_dim, self.value_dim], dim=-1)
        qk = l2_normalize(qk.view(tokens, 2, self.num_k_heads, self.k_head_dim))  # q and k in one go
        qk[:, 0].mul_(self.k_head_dim**-0.5)
        repeat = self.num_v_heads // self.num_k_heads
        if repeat > 1:
            qk = qk.repeat_interleave(repeat, dim=2)
        return qk.transpose(1, 2), v.view(tokens, self.num_v_heads, self.v_head_dim)
    # --8<-- [end:split_heads]

    def delta_rule(
        self, qk: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, ctx: ForwardContext
    ) -> torch.Tensor:
        """Run each sequence's tokens from its recurrent state; return ``[T, Hv, dv]`` float32 outputs.

        The decode group takes one batched recurrent step (on CPU a few sequences at a time); longer runs
        use the chunked form per sequence; a sequence with snapshots runs token by token and records the
        state after each token.
        """
        states = ctx.cache.recurrent_state[self.layer_idx]
        layout, batch = ctx.layout, ctx.batch
        if layout.decode_seqs:
            inputs = [layout.decode_part(t) for t in (qk, v, g, beta)]
            o, new = recurrent_delta_step_in_pieces(layout.decode_states(states), *inputs)
            layout.store_decode_states(states, new)
            if layout.all_decode:
                return o
        out = torch.empty_like(v)
        if layout.decode_seqs:
            out.index_copy_(0, layout.decode_rows, o)
        for b in layout.prefill_seqs:
            rows = slice(layout.row_offsets[b], layout.row_offsets[b] + batch.query_lens[b])
            slot = batch.state_slots[b : b + 1]
            q, k = qk[rows].unbind(-2)
            heads_first = [t.transpose(0, 1)[None] for t in (q, k, v[rows], g[rows], beta[rows])]
            # --8<-- [start:snapshot_or_chunked]
            if b in layout.snapshot_seqs:  # a verify (lesson 13): token by token, keeping every state
                o, after = recurrent_delta_states(*heads_first, states.index_select(0, slot))
                ctx.cache.record_snapshots("recurrent", self.layer_idx, layout.state_slot_ids[b], after[:, 0])
                new = after[-1]
            else:  # a prompt chunk: the chunked algorithm, only the last state (and the prefix cache's)
                old = states.index_select(0, slot)
                o, new = self.chunked_in_pieces(heads_first, old, layout.saves_of(b), ctx)
            # --8<-- [end:snapshot_or_chunked]
            states.index_copy_(0, slot, new)
            out[rows] = o[0].transpose(0, 1)
        return out


    # --8<-- [start:chunked_in_pieces]
    def chunked_in_pieces(
        self, heads_first: list[torch.Tensor], state: torch.Tensor, saves: list[tuple[int, int]],
        ctx: ForwardContext,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The chunked delta rule over one sequence, keeping the state at each prefix-cache save point
        (``saves``: tokens into the chunk, snapshot slot). A point on a kernel chunk boundary is kept as the
        kernel passes it (``after_chunk``); the run is cut only at one that is not (with blocks a multiple of
        ``CHUNK_SIZE``, only the first). Inputs are ``[1, H, L, ...]``; returns the outputs and last state."""
        length, wanted = heads_first[0].shape[2], dict(saves)
        outputs, begin = [], 0
        while begin < length:
            end = next((t for t in sorted(wanted) if t > begin and (t - begin) % CHUNK_SIZE), length)
            def keep(done: int, now: torch.Tensor, begin: int = begin) -> None:
                if begin + done in wanted:
                    ctx.cache.keep_prefix_state("recurrent", self.layer_idx, wanted[begin + done], now[0])
            o, state = chunked_delta_rule(*[t[:, :, begin:end] for t in heads_first], state,
                                          after_chunk=keep if wanted else None)
            outputs.append(o)
            keep(end - begin, state)
            begin = end
        return (outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)), state  # cat of one copies
    # --8<-- [end:chunked_in_pieces]


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
        self.qkv_proj = Merged(self.q_proj, self.k_proj, self.v_proj)

    # --8<-- [start:gated_attention]
    def forward(self, x: torch.Tensor, ctx: ForwardContext, keep: torch.Tensor | None = None) -> torch.Tensor:
        """``x`` is ``[T, hidden]`` (already normed); returns ``[T, hidden]``, or only the rows ``keep``."""
        tokens = x.shape[0]
        q_gate, k, v = self.qkv_proj(x)  # q_proj, k_proj, v_proj: one product
        # Per head q_proj holds [query (D) | gate (D)], heads side by side.
        q, gate = q_gate.view(tokens, self.num_heads, 2 * self.head_dim).chunk(2, dim=-1)
        q = apply_rotary(self.q_norm(q), ctx.cos, ctx.sin)
        k = self.k_norm(k.view(tokens, self.num_kv_heads, self.head_dim))
        k = apply_rotary(k, ctx.cos, ctx.sin)
        v = v.view(tokens, self.num_kv_heads, self.head_dim)
        keys, values = ctx.cache.key_cache[self.layer_idx], ctx.cache.value_cache[self.layer_idx]
        o = paged_attention(q, k, v, keys, values, ctx, self.head_dim**-0.5)
        if keep is not None:
            o, gate = o.index_select(0, keep), gate.index_select(0, keep)
        return self.o_proj((o * torch.sigmoid(gate)).flatten(1))
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

    def forward(
        self, hidden: torch.Tensor, ctx: ForwardContext, keep: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``[T, hidden]`` -> ``[T, hidden]``, or with ``keep`` (last layer) those rows after the mixer."""
        mixer = self.linear_attn if self.is_linear else self.self_attn
        mixed = mixer(self.input_layernorm(hidden), ctx, keep)
        hidden = mixed + (hidden if keep is None else hidden.index_select(0, keep))
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class Qwen35ForCausalLM(CausalLM):
    """The Qwen3.5 text model with its head; state-dict names match transformers' ``Qwen3_5ForCausalLM``."""

    def __init__(self, config: Qwen35Config) -> None:
        layers = [Qwen35DecoderLayer(config, i) for i in range(config.num_hidden_layers)]
        super().__init__(config, layers, ZeroCenteredRMSNorm(config.hidden_size, eps=config.rms_norm_eps))
