"""Pieces shared by the Qwen3.5 and Qwen2 models, and the flat batch they both run.

Scope: ``ForwardBatch`` (the tokens of one engine round, sequences concatenated), the index tensors derived
from it once per forward (``RoundLayout``), RMSNorm variants, rotary embedding (full or partial), the SwiGLU
MLP, paged attention over KV slots, and the ``CausalLM`` base class (embed, layers, final norm, head on the
requested rows).

Non-scope: choosing which tokens run in a round, handing out slots, sampling (the engine and the runner do
those), and the model-specific token mixers (``qwen3_5.py``, ``qwen2.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from mini_deepinfer.cache import HybridCache
from mini_deepinfer.models.config import ModelConfig


# --8<-- [start:forward_batch]
@dataclass
class ForwardBatch:
    """The tokens of one round, sequences concatenated in order.

    Attributes:
        input_ids: ``[T]`` int64, all new tokens of the round.
        positions: ``[T]`` int64, absolute position of each token within its sequence.
        query_lens: ``[B]`` new tokens per sequence (sum == T).
        context_lens: ``[B]`` tokens in the cache after this round = start position + query_len.
        slot_mapping: ``[T]`` int64, KV slot that each new token's key and value are written to.
        kv_slots: ``[B]`` int64 tensors of length ``context_lens[b]``: KV slots of positions 0..context_len-1.
        state_slots: ``[B]`` int64, state slot of each sequence (Qwen2 ignores it).
        fresh_state: ``[B]`` True when the sequence starts at position 0: its convolution window and recurrent
            state are zeroed before this round.
        logits_indices: ``[S]`` int64, rows of the T tokens whose logits are returned.
        capture_states: ``[B]`` or None. True: record this sequence's linear-attention state after each of
            its new tokens in ``cache.captured`` (speculative verification); it then runs token by token.
        state_slot_ids: ``state_slots`` as host integers, or None. With them the model sees, without reading
            a device tensor back, when the decode group's state slots are consecutive (then it updates them
            in place instead of gathering and scattering copies).
    """

    input_ids: torch.Tensor
    positions: torch.Tensor
    query_lens: list[int]
    context_lens: list[int]
    slot_mapping: torch.Tensor
    kv_slots: list[torch.Tensor]
    state_slots: torch.Tensor
    fresh_state: list[bool]
    logits_indices: torch.Tensor
    capture_states: list[bool] | None = None
    state_slot_ids: tuple[int, ...] | None = None
# --8<-- [end:forward_batch]

    @classmethod
    def from_sequences(
        cls,
        new_tokens: Sequence[Sequence[int]],
        start_positions: Sequence[int],
        kv_slots: Sequence[Sequence[int]],
        state_slots: Sequence[int],
        device: torch.device | str = "cpu",
        all_logits: bool = False,
    ) -> ForwardBatch:
        """Lay out one round from per-sequence lists.

        Args:
            new_tokens: The new token ids of each sequence (a prefill chunk or one decode token).
            start_positions: Position of each sequence's first new token (tokens already in the cache).
            kv_slots: KV slots of each sequence, at least ``start + len(new)`` of them (extra ones ignored).
            state_slots: State slot of each sequence.
            device: Device of the returned tensors.
            all_logits: Return logits for every token instead of each sequence's last token.
        """
        query_lens = [len(t) for t in new_tokens]
        context_lens = [s + n for s, n in zip(start_positions, query_lens)]
        if any(n < 1 for n in query_lens):
            raise ValueError("every sequence in a round needs at least one new token")
        if any(len(slots) < c for slots, c in zip(kv_slots, context_lens)):
            raise ValueError("a sequence has fewer KV slots than its context length")
        positions = [p for s, n in zip(start_positions, query_lens) for p in range(s, s + n)]
        mapping = [x for slots, s, c in zip(kv_slots, start_positions, context_lens) for x in slots[s:c]]
        ends = torch.tensor(query_lens).cumsum(0) - 1
        logits_rows = torch.arange(sum(query_lens)) if all_logits else ends

        def tensor(values: Sequence[int]) -> torch.Tensor:
            return torch.tensor(list(values), dtype=torch.int64, device=device)

        return cls(
            input_ids=tensor([t for seq in new_tokens for t in seq]),
            positions=tensor(positions),
            query_lens=query_lens,
            context_lens=context_lens,
            slot_mapping=tensor(mapping),
            kv_slots=[tensor(slots[:c]) for slots, c in zip(kv_slots, context_lens)],
            state_slots=tensor(state_slots),
            fresh_state=[s == 0 for s in start_positions],
            logits_indices=logits_rows.to(device),
            state_slot_ids=tuple(state_slots),
        )


@dataclass
class RoundLayout:
    """Index tensors derived from a ``ForwardBatch`` once and shared by every layer of one forward.

    Sequences with one new token form the *decode group*: their attention and recurrent updates run as one
    batched computation. Sequences with more tokens run one at a time (chunked algorithms over their tokens),
    and so do sequences whose states are captured, whatever their length.
    """

    starts: list[int]
    decode_seqs: list[int]
    prefill_seqs: list[int]
    all_decode: bool
    decode_rows: torch.Tensor
    decode_state_slots: torch.Tensor
    decode_kv_index: torch.Tensor | None
    decode_kv_mask: torch.Tensor | None
    captured: frozenset[int] = frozenset()
    decode_state_range: slice | None = None  # the decode group's state slots, when they are consecutive

    @classmethod
    def build(cls, batch: ForwardBatch) -> RoundLayout:
        lens = batch.query_lens
        if sum(lens) != batch.input_ids.shape[0] or len(batch.context_lens) != len(lens):
            raise ValueError("query_lens and context_lens do not match the batch")
        starts = [0]
        for n in lens[:-1]:
            starts.append(starts[-1] + n)
        captured = frozenset(b for b, c in enumerate(batch.capture_states or ()) if c)
        decode = [b for b, n in enumerate(lens) if n == 1 and b not in captured]
        device = batch.input_ids.device
        rows = torch.tensor([starts[b] for b in decode], dtype=torch.int64, device=device)
        decode_index = torch.tensor(decode, dtype=torch.int64, device=device)
        kv_index, kv_mask = None, None
        if decode:
            kv_index = pad_sequence([batch.kv_slots[b] for b in decode], batch_first=True)
            contexts = [batch.context_lens[b] for b in decode]
            if min(contexts) != max(contexts):
                ctx = torch.tensor(contexts, device=device)
                kv_mask = torch.arange(kv_index.shape[1], device=device)[None, :] < ctx[:, None]
                kv_mask = kv_mask[:, None, None, :]
        ids, state_range = batch.state_slot_ids, None
        if decode and ids is not None:
            first = ids[decode[0]]
            if [ids[b] for b in decode] == list(range(first, first + len(decode))):
                state_range = slice(first, first + len(decode))
        return cls(
            starts=starts,
            decode_seqs=decode,
            prefill_seqs=[b for b in range(len(lens)) if b not in decode],
            all_decode=len(decode) == len(lens),
            decode_rows=rows,
            decode_state_slots=batch.state_slots.index_select(0, decode_index),
            decode_kv_index=kv_index,
            decode_kv_mask=kv_mask,
            captured=captured,
            decode_state_range=state_range,
        )

    def decode_part(self, x: torch.Tensor) -> torch.Tensor:
        """Rows of ``x`` (first dim = tokens) that belong to the decode group, in group order."""
        return x if self.all_decode else x.index_select(0, self.decode_rows)

    # --8<-- [start:decode_states]
    def decode_states(self, states: torch.Tensor) -> torch.Tensor:
        """The decode group's rows of a per-slot state tensor: a view when the slots are consecutive (a
        step may then update them in place), else a gathered copy."""
        if self.decode_state_range is not None:
            return states[self.decode_state_range]
        return states.index_select(0, self.decode_state_slots)

    def store_decode_states(self, states: torch.Tensor, new: torch.Tensor) -> None:
        """Write the decode group's new rows into the per-slot tensor ``states``."""
        if self.decode_state_range is None:
            states.index_copy_(0, self.decode_state_slots, new)
            return
        rows = states[self.decode_state_range]
        if new.data_ptr() != rows.data_ptr():  # nothing to do after a step that updated the view in place
            rows.copy_(new)
    # --8<-- [end:decode_states]


@dataclass
class ForwardContext:
    """What every layer of one forward reads besides its hidden states."""

    batch: ForwardBatch
    cache: HybridCache
    layout: RoundLayout
    cos: torch.Tensor
    sin: torch.Tensor


class RMSNorm(nn.Module):
    """Standard RMSNorm ``w * x_hat`` (Qwen2): normalise in float32, cast to the input dtype, then scale."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)

    def init_random(self, generator: torch.Generator, std: float) -> None:
        nn.init.ones_(self.weight)


class ZeroCenteredRMSNorm(nn.Module):
    """Zero-centred RMSNorm ``x_hat * (1 + w)`` (Qwen3.5): normalise and scale in float32, cast at the end.

    Checkpoints store ``w`` as the offset from one, so a freshly initialised weight is zero.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * (1.0 + self.weight.float())).to(x.dtype)

    def init_random(self, generator: torch.Generator, std: float) -> None:
        nn.init.zeros_(self.weight)


class RotaryEmbedding:
    """Rotary position embedding on the first ``rotary_dim`` dims of each head (rotate-half convention).

    Holds no tensors: the inverse frequencies are recomputed in float32 on each call, so casting the model to
    bfloat16 never touches them.
    """

    def __init__(self, rotary_dim: int, theta: float) -> None:
        self.rotary_dim = rotary_dim
        self.theta = theta

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``cos, sin`` of shape ``[T, rotary_dim]`` for positions ``[T]``, cast to ``dtype``."""
        steps = torch.arange(0, self.rotary_dim, 2, dtype=torch.float32, device=positions.device)
        inv_freq = 1.0 / (self.theta ** (steps / self.rotary_dim))
        freqs = positions.float()[:, None] * inv_freq[None, :]
        angles = torch.cat([freqs, freqs], dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)


# --8<-- [start:rotary]
def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` of shape ``[T, heads, head_dim]`` on its first ``cos.shape[-1]`` dims; the rest pass."""
    rot = cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    half = rot // 2
    rotated_half = torch.cat([-x_rot[..., half:], x_rot[..., :half]], dim=-1)
    x_rot = x_rot * cos[:, None, :] + rotated_half * sin[:, None, :]
    return torch.cat([x_rot, x_pass], dim=-1) if x_pass.shape[-1] else x_rot
# --8<-- [end:rotary]


SKINNY_ROWS = range(4, 33)
"""Row counts (decode batches) for which ``Linear`` puts the weight on the left on CPU."""
SKINNY_MIN_INPUT = 512
"""...and the smallest input width for which it does."""


# --8<-- [start:linear]
class Linear(nn.Linear):
    """``nn.Linear`` that computes a few rows on CPU as ``(W @ x^T)^T`` instead of ``x @ W^T``.

    The products and sums are the same (only their order differs, so results agree to float rounding). For
    4 to 32 rows and inputs at least 512 wide (every projection of the 0.8B and 2B shapes), CPU GEMM with the
    large weight as the left operand is faster than ``F.linear``: the batch-8 "every linear layer once" rows
    of ``snippets/bench/cpu-qwen3.5-0.8b.md`` time this class against transformers' ``nn.Linear``. Narrow
    inputs (the ``tiny`` preset) keep ``F.linear``: there the product is small and the transposing copy of
    the output is what costs. One row, long prefills and accelerators keep ``F.linear`` too.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skinny = x.dim() == 2 and x.shape[0] in SKINNY_ROWS and self.in_features >= SKINNY_MIN_INPUT
        if x.device.type != "cpu" or not skinny:
            return F.linear(x, self.weight, self.bias)
        out = torch.mm(self.weight, x.t())
        if self.bias is not None:
            out += self.bias[:, None]
        return out.t().contiguous()
# --8<-- [end:linear]


class SwiGLUMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))``, no biases."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in place on the fresh gate projection: no second [T, intermediate] tensor to allocate
        return self.down_proj(F.silu(self.gate_proj(x), inplace=True).mul_(self.up_proj(x)))


def paged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    ctx: ForwardContext,
    scale: float,
) -> torch.Tensor:
    """Write the new keys and values into their KV slots, then attend causally over each sequence's slots.

    Args:
        q: ``[T, Hq, D]`` queries of the round's tokens.
        k: ``[T, Hkv, D]`` new keys (after any norm and rotary embedding).
        v: ``[T, Hkv, D]`` new values.
        key_cache: ``[kv_capacity, Hkv, D]`` this layer's keys, written in place.
        value_cache: ``[kv_capacity, Hkv, D]`` this layer's values, written in place.
        ctx: The forward context (batch, layout).
        scale: Softmax scale, usually ``D ** -0.5``.

    Returns:
        ``[T, Hq, D]`` attention outputs. Query head ``h`` reads key/value head ``h // (Hq // Hkv)``.
    """
    batch, layout = ctx.batch, ctx.layout
    key_cache.index_copy_(0, batch.slot_mapping, k)
    value_cache.index_copy_(0, batch.slot_mapping, v)
    if layout.all_decode:
        return _decode_attention(q, key_cache, value_cache, layout, scale)
    out = torch.empty_like(q)
    if layout.decode_seqs:
        decoded = _decode_attention(layout.decode_part(q), key_cache, value_cache, layout, scale)
        out.index_copy_(0, layout.decode_rows, decoded)
    for b in layout.prefill_seqs:
        start, n = layout.starts[b], batch.query_lens[b]
        slots = batch.kv_slots[b]
        offset = batch.context_lens[b] - n
        out[start : start + n] = _prefill_attention(
            q[start : start + n], key_cache[slots], value_cache[slots], offset, scale
        )
    return out


def _decode_attention(
    q: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor, layout: RoundLayout, scale: float
) -> torch.Tensor:
    """One query per sequence, batched: gather each context (padded to the longest) and mask the padding.

    The query heads sharing a key/value head are laid out as that head's query rows, so no key is repeated.
    """
    batch_size, num_heads, head_dim = q.shape
    keys = key_cache[layout.decode_kv_index].transpose(1, 2)  # [B, Hkv, L, D]
    values = value_cache[layout.decode_kv_index].transpose(1, 2)
    grouped = q.view(batch_size, keys.shape[1], num_heads // keys.shape[1], head_dim)
    out = F.scaled_dot_product_attention(grouped, keys, values, attn_mask=layout.decode_kv_mask, scale=scale)
    return out.reshape(batch_size, num_heads, head_dim)


def _prefill_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, offset: int, scale: float
) -> torch.Tensor:
    """Causal attention of ``Lq`` new queries over ``Lc = offset + Lq`` keys (the first ``offset`` cached)."""
    q_len, k_len = q.shape[0], keys.shape[0]
    mask = None
    if offset:
        key_pos = torch.arange(k_len, device=q.device)
        query_pos = torch.arange(offset, offset + q_len, device=q.device)
        mask = key_pos[None, :] <= query_pos[:, None]
    # A leading batch dim of 1: PyTorch's fused (flash) CPU kernel takes only 4-D inputs; 3-D ones fall back
    # to the unfused path, which materialises every [Lq, Lc] score matrix.
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None],
        keys.transpose(0, 1)[None],
        values.transpose(0, 1)[None],
        attn_mask=mask,
        is_causal=not offset,
        scale=scale,
        enable_gqa=True,
    )
    return out[0].transpose(0, 1)


class DecoderModel(nn.Module):
    """Token embedding, decoder layers and final norm (the checkpoint's ``model.`` prefix)."""

    def __init__(self, vocab_size: int, hidden_size: int, layers: list[nn.Module], norm: nn.Module) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.layers = nn.ModuleList(layers)
        self.norm = norm


class CausalLM(nn.Module):
    """Embed, run the decoder layers over a flat round, normalise, and apply the head to requested rows.

    Subclasses build the layers; each layer is called as ``layer(hidden, ctx)`` on ``[T, hidden]`` rows.
    Parameter names equal transformers' ``*ForCausalLM`` state-dict names, so ``load_state_dict`` works.
    """

    def __init__(self, config: ModelConfig, layers: list[nn.Module], norm: nn.Module) -> None:
        super().__init__()
        self.config = config
        self.model = DecoderModel(config.vocab_size, config.hidden_size, layers, norm)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        self.rotary = RotaryEmbedding(config.rotary_dim, config.rope_theta)
        self.tie_weights()

    def tie_weights(self) -> None:
        """With tied embeddings, make ``lm_head.weight`` the same Parameter as the embedding."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    # --8<-- [start:forward]
    @torch.no_grad()
    def forward(self, batch: ForwardBatch, cache: HybridCache) -> torch.Tensor:
        """Run one round and return logits ``[S, vocab]`` for the rows ``batch.logits_indices``."""
        ctx = self.prepare(batch, cache)
        hidden = self.model.embed_tokens(batch.input_ids)
        for layer in self.model.layers:
            hidden = layer(hidden, ctx)
        hidden = hidden.index_select(0, batch.logits_indices)
        return self.lm_head(self.model.norm(hidden))

    def prepare(self, batch: ForwardBatch, cache: HybridCache) -> ForwardContext:
        """Zero the state slots of fresh sequences and compute what all layers share."""
        if cache.conv_state and any(batch.fresh_state):
            fresh = torch.tensor(batch.fresh_state, device=batch.state_slots.device)
            cache.reset_states(batch.state_slots[fresh])
        dtype = self.model.embed_tokens.weight.dtype
        cos, sin = self.rotary.cos_sin(batch.positions, dtype)
        return ForwardContext(batch, cache, RoundLayout.build(batch), cos, sin)
    # --8<-- [end:forward]

    @torch.no_grad()
    def init_random_weights(self, seed: int = 0) -> None:
        """Fill every parameter like transformers' initialisation: normal(0, initializer_range) for
        projections, convolutions and embeddings, zero biases, and each norm's own neutral weight."""
        device = self.lm_head.weight.device
        generator = torch.Generator(device=device).manual_seed(seed)
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Conv1d, nn.Embedding)):
                module.weight.normal_(0.0, std, generator=generator)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
            elif module is not self and hasattr(module, "init_random"):
                module.init_random(generator, std)
        self.tie_weights()
