"""The layers the Qwen3.5 and Qwen2 models share, and the ``CausalLM`` base class.

Scope: RMSNorm variants, rotary embedding (full or partial), the SwiGLU MLP, paged attention over KV slots,
``Folded`` and ``Merged`` (constants and merged projections computed once from the weights, after loading),
and ``CausalLM`` (embed, layers, final norm, head on the requested rows) over one flat round
(``forward_batch.py``). The maths in few kernels lives in ``kernels/``.

Non-scope: choosing which tokens run in a round, handing out slots, sampling (the engine and the runner do
those), laying out the round's index tensors (``forward_batch.py``), and the model-specific token mixers
(``qwen3_5.py``, ``qwen2.py``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from mini_deepinfer.models.cache import HybridCache
from mini_deepinfer.models.config import ModelConfig
from mini_deepinfer.models.forward_batch import ForwardBatch, ForwardContext, RoundLayout
from mini_deepinfer.models.kernels.cpu import Linear, linear
from mini_deepinfer.models.kernels.norm import rms_norm, rms_scale


class Folded:
    """A tensor computed from some weights once, and again only after one of them changed.

    For what a step would otherwise recompute from constant weights every time (``1 + w`` norm scales,
    ``-exp(A_log)``, convolution taps, merged projections). Whether the cached value is current is decided on
    the host from each weight's address, version counter (bumped by every in-place write: ``load_state_dict``,
    a loader's ``copy_``, random initialisation), dtype and device; so loading, casting or moving a model
    needs no extra call, and a step reads no device value. Not a parameter or buffer: ``state_dict`` never
    sees it.
    """

    def __init__(self, compute: Callable[..., object]) -> None:
        self.compute = compute
        self.key: tuple | None = None
        self.value: object = None

    def __call__(self, *weights: torch.Tensor):
        if torch.compiler.is_compiling() and self.key is not None:
            return self.value  # a compiled step cannot read addresses: it reads what an eager step folded
        if self.key != self._key(weights):
            self.value = self.compute(*weights)
            self.key = self._key(weights)  # after computing: ``Merged`` re-points its parts
        return self.value

    @staticmethod
    def _key(weights: tuple[torch.Tensor, ...]) -> tuple:
        return tuple((w.data_ptr(), w._version, w.dtype, w.device) for w in weights)


class Merged:
    """Several ``Linear`` layers on the same input as one matrix product (q/k/v, gate/up, ...).

    The parts keep their checkpoint names, and each part's weight is a view of one merged matrix, so the
    merged weight costs no memory and a load into the parts by name writes into it. ``build_model`` makes
    the merged matrix before anything is loaded (``share_storage``); where the parts are not views of it (a
    model built otherwise, or cast or moved since), the first use concatenates them once and re-points them.
    """

    def __init__(self, *parts: nn.Linear) -> None:
        self.parts = parts
        self.sizes = [p.out_features for p in parts]
        self.weight: torch.Tensor | None = None  # the matrix the parts' weights are views of
        self.bias: torch.Tensor | None = None
        self.folded = Folded(self._merge)

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Each part's output, from one product."""
        tensors = [p.weight for p in self.parts] + [p.bias for p in self.parts if p.bias is not None]
        weight, bias = self.folded(*tensors)
        return list(linear(x, weight, bias).split(self.sizes, dim=-1))

    @torch.no_grad()
    def share_storage(self) -> None:
        """Make the parts views of one new, uninitialised merged weight (and bias); nothing is copied."""
        like = self.parts[0].weight
        weight = torch.empty(sum(self.sizes), like.shape[1], dtype=like.dtype, device=like.device)
        has_bias = self.parts[0].bias is not None
        bias = torch.empty(sum(self.sizes), dtype=like.dtype, device=like.device) if has_bias else None
        self._point_parts_at(weight, bias)

    @torch.no_grad()
    def _merge(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not self._parts_are_views():
            n = len(self.parts)
            bias = torch.cat(tensors[n:]) if len(tensors) > n else None
            self._point_parts_at(torch.cat(tensors[:n]), bias)
        return self.weight, self.bias

    def _point_parts_at(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        for part, w, b in zip(self.parts, weight.split(self.sizes), _split(bias, self.sizes)):
            part.weight.data = w
            if b is not None:
                part.bias.data = b
        self.weight, self.bias = weight, bias

    def _parts_are_views(self) -> bool:
        """Whether each part still is its slice of ``self.weight`` (casting or moving a model replaces it)."""
        if self.weight is None:
            return False
        slices = zip(self.parts, self.weight.split(self.sizes), _split(self.bias, self.sizes))
        return all((p.weight.data_ptr(), p.weight.dtype, p.weight.device) == (w.data_ptr(), w.dtype, w.device)
                   and (b is None or p.bias.data_ptr() == b.data_ptr()) for p, w, b in slices)


def merged_projections(model: nn.Module) -> list[Merged]:
    """Every ``Merged`` of ``model``'s modules (they are plain attributes, not submodules)."""
    return [value for module in model.modules() for value in vars(module).values()
            if isinstance(value, Merged)]


def _split(bias: torch.Tensor | None, sizes: list[int]) -> list[torch.Tensor | None]:
    return [None] * len(sizes) if bias is None else list(bias.split(sizes))


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

    Checkpoints store ``w`` as the offset from one, so a freshly initialised weight is zero. The float32
    scale ``1 + w`` is computed once (``Folded``); ``kernels.norm.rms_norm_ref`` is the textbook form.
    """

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))
        self.scale = Folded(lambda w: rms_scale(w, offset=1.0))

    def forward(self, x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Normalise ``x`` over its last dim; the result in ``dtype`` (default: the input's)."""
        return rms_norm(x, self.scale(self.weight), self.eps, dtype)

    def init_random(self, generator: torch.Generator, std: float) -> None:
        nn.init.zeros_(self.weight)


class RotaryEmbedding:
    """Rotary position embedding on the first ``rotary_dim`` dims of each head (rotate-half convention).

    Not a module: its float32 inverse frequencies are kept per device outside the model's parameters and
    buffers, so casting the model to bfloat16 never touches them.
    """

    def __init__(self, rotary_dim: int, theta: float) -> None:
        self.rotary_dim = rotary_dim
        self.theta = theta
        self.inv_freq: dict[torch.device, torch.Tensor] = {}

    def frequencies(self, device: torch.device) -> torch.Tensor:
        """``theta ** (-2i / rotary_dim)`` in float32, computed once per device."""
        if device not in self.inv_freq:
            steps = torch.arange(0, self.rotary_dim, 2, dtype=torch.float32, device=device)
            self.inv_freq[device] = 1.0 / (self.theta ** (steps / self.rotary_dim))
        return self.inv_freq[device]

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``cos, sin`` of shape ``[T, rotary_dim]`` for positions ``[T]``, cast to ``dtype``.

        The sine's first half is negated (``sin(-a) = -sin(a)``; the cosine is even), which is the sign the
        rotated half needs: ``apply_rotary`` then needs no negation of its own.
        """
        freqs = positions[:, None] * self.frequencies(positions.device)[None, :]
        angles = torch.cat([-freqs, freqs], dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)


# --8<-- [start:rotary]
def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` of shape ``[T, heads, head_dim]`` on its first ``cos.shape[-1]`` dims; the rest pass.

    ``x1, x2`` (the two halves) become ``x1 cos - x2 sin, x2 cos + x1 sin``; ``sin`` carries the minus sign
    of its first half (``RotaryEmbedding.cos_sin``), so the halves are only swapped (``roll``).
    """
    rot = cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    swapped = x_rot.roll(rot // 2, dims=-1)
    x_rot = torch.addcmul(x_rot * cos[:, None, :], swapped, sin[:, None, :])
    return torch.cat([x_rot, x_pass], dim=-1) if x_pass.shape[-1] else x_rot
# --8<-- [end:rotary]


class SwiGLUMLP(nn.Module):
    """``down(silu(gate(x)) * up(x))``, no biases; gate and up as one product (``Merged``)."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = Linear(intermediate_size, hidden_size, bias=False)
        self.gate_up = Merged(self.gate_proj, self.up_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x)  # views of one product's output, used once: updated in place
        return self.down_proj(F.silu(gate, inplace=True).mul_(up))


# --8<-- [start:attention]
CUDA_ATTENTION_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
"""On CUDA, PyTorch may pick cuDNN for ``scaled_dot_product_attention``, which builds a plan for each new key
length, and decode grows the key length every step: host work in every round. These backends need no plan
per length."""


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **options) -> torch.Tensor:
    """``F.scaled_dot_product_attention``, without the cuDNN backend on CUDA."""
    if not q.is_cuda:
        return F.scaled_dot_product_attention(q, k, v, **options)
    with sdpa_kernel(CUDA_ATTENTION_BACKENDS):
        return F.scaled_dot_product_attention(q, k, v, **options)
# --8<-- [end:attention]


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
        start, n = layout.row_offsets[b], batch.query_lens[b]
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
    out = attention(grouped, keys, values, attn_mask=layout.decode_kv_mask, scale=scale)
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
    out = attention(
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
        # Given a weight, nn.Embedding skips its own normal_ fill: the weights come from loading or from
        # init_random_weights anyway, and normal_ on the meta device (build_model) makes torch import its
        # Python meta kernels, sympy included: about 0.8 s of every command that builds a model.
        weight = torch.empty(vocab_size, hidden_size)
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size, _weight=weight)
        self.layers = nn.ModuleList(layers)
        self.norm = norm


class CausalLM(nn.Module):
    """Embed, run the decoder layers over a flat round, normalise, and apply the head to requested rows.

    Subclasses build the layers; each layer is called as ``layer(hidden, ctx)`` on ``[T, hidden]`` rows, the
    last as ``layer(hidden, ctx, keep=rows)``: it returns only those rows (its token mixer still reads every
    row, to write the caches).
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
        """Run one round and return logits ``[S, vocab]`` for the rows ``batch.logits_indices``.

        Nothing reads the last layer's output but the head, so that layer carries on only with those rows
        once its token mixer has written the caches: a 2048-token prompt runs its last output projection and
        MLP on one row.
        """
        ctx = self.prepare(batch, cache)
        hidden = self.model.embed_tokens(batch.input_ids)
        for layer in self.model.layers[:-1]:
            hidden = layer(hidden, ctx)
        every_row = batch.logits_indices.shape[0] == hidden.shape[0]  # the rows come in order: all of them
        hidden = self.model.layers[-1](hidden, ctx, keep=None if every_row else batch.logits_indices)
        return self.lm_head(self.model.norm(hidden))

    def prepare(self, batch: ForwardBatch, cache: HybridCache) -> ForwardContext:
        """Zero the state slots of fresh sequences, load those that start from a cached prefix's snapshot,
        and compute what all layers share.

        How many slots are fresh is a host integer (``layout.fresh_count``): no device value is read here.
        """
        if cache.conv_state and batch.layout.fresh_count:
            cache.reset_states(batch.fresh_slots)
        if batch.layout.restores:
            cache.load_prefix_states(batch.layout.restores)
        dtype = self.model.embed_tokens.weight.dtype
        cos, sin = self.rotary.cos_sin(batch.positions, dtype)
        return ForwardContext(batch=batch, cache=cache, cos=cos, sin=sin)
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
