"""The maths of Gated DeltaNet: the causal convolution with a saved window, and the gated delta rule.

Scope: the convolution over several new tokens (``causal_conv_with_window``) and over one
(``causal_conv_step``), both against ``causal_conv_ref`` (``F.conv1d``); the delta rule for one token
(``recurrent_delta_step``, against the textbook ``recurrent_delta_step_ref``; a batch of them a few
sequences at a time on CPU, ``recurrent_delta_step_in_pieces``), token by token with the state
after each token kept (``recurrent_delta_states``, for speculative verification), and in chunks
(``chunked_delta_rule``, against the token-by-token ``recurrent_delta_rule``). ``tests/test_kernels.py``
compares every pair but the last, which ``tests/test_qwen3_5_parity.py`` compares.

Non-scope: the module that owns the weights and state slots (``qwen3_5.GatedDeltaNet``), choosing which
sequences take which path (it does), and the CPU-only multiply-adds (``cpu.tap_sum``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from mini_deepinfer.models.kernels.cpu import tap_sum


# --8<-- [start:causal_conv]
def causal_conv_with_window(
    x: torch.Tensor, window: torch.Tensor, taps: torch.Tensor, out: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal convolution over time, continuing from a saved window, followed by SiLU.

    Args:
        x: ``[B, L, C]`` new pre-convolution inputs.
        window: ``[B, C, K-1]`` the previous ``K-1`` inputs of each sequence (zeros for a fresh one).
        taps: ``[C, K]`` float32 convolution taps; tap ``K-1`` multiplies the current input.
        out: where to write ``y`` (float32, ``[B, L, C]``, rows may be strided); a new tensor if ``None``.

    Returns:
        ``(y, new_window)``: float32 ``y`` of shape ``[B, L, C]``, and the last ``K-1`` inputs
        ``[B, C, K-1]``.
    """
    # Only the first K-1 outputs read the saved window, so only they are computed from a short
    # [window | x] strip; the rest read shifted views of x, and no copy of the whole input is made.
    history, length = taps.shape[-1] - 1, x.shape[1]
    y = torch.empty(x.shape, dtype=torch.float32, device=x.device) if out is None else out
    strip = torch.cat([window.transpose(1, 2), x[:, :history]], dim=1)
    tap_sum(strip, taps, out=y[:, :history])
    if length > history:
        tap_sum(x, taps, out=y[:, history:])
    new_window = x[:, length - history :] if length >= history else strip[:, length:]
    return F.silu(y, inplace=True), new_window.transpose(1, 2)
# --8<-- [end:causal_conv]


def causal_conv_step(
    x: torch.Tensor, window: torch.Tensor, taps: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The convolution for one new input per sequence, in four kernels: ``x [B, C]`` -> float32 ``[B, C]``.

    The strip ``[window | x]`` is the whole receptive field; its last ``K-1`` columns are the new window.
    """
    strip = torch.cat([window, x[..., None]], dim=-1)  # [B, C, K]
    return F.silu((strip * taps).sum(-1), inplace=True), strip[..., 1:]


def causal_conv_ref(x: torch.Tensor, window: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Textbook form: ``silu(conv1d([window | x]))`` with ``weight [C, 1, K]``, float32 ``[B, L, C]``."""
    full = torch.cat([window, x.transpose(1, 2)], dim=-1).float()
    return F.silu(F.conv1d(full, weight.float(), groups=weight.shape[0])).transpose(1, 2)


# --8<-- [start:delta_step]
def recurrent_delta_step(
    state: torch.Tensor,
    qk: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the gated delta rule, for any leading dims ``...`` (e.g. batch, heads).

    With state ``S`` (``dk x dv``): decay ``S *= exp(g)``; predict ``p = k^T S``; correct
    ``S += k (beta (v - p))^T``; read ``o = q^T S`` from the updated state (``recurrent_delta_step_ref``).

    The state is the largest tensor here, so it is read once (for ``q^T S`` and ``k^T S`` together) and
    updated in place; the output uses ``q^T S_new = exp(g) q^T S + (q . k) delta`` instead of a second read.

    Args:
        state: ``[..., dk, dv]`` float32, updated in place.
        qk: ``[..., 2, dk]`` the normalised, scaled query and the normalised key.
        v: ``[..., dv]`` value.
        g: ``[...]`` log-decay (<= 0).
        beta: ``[...]`` write strength in (0, 1).

    Returns:
        ``(o, state)`` with ``o`` of shape ``[..., dv]``.
    """
    decay = g.exp()[..., None]
    q_state, k_state = (qk @ state).unbind(-2)
    delta = beta[..., None] * (v - decay * k_state)
    q, k = qk.unbind(-2)
    state.mul_(decay[..., None]).addcmul_(k[..., :, None], delta[..., None, :])
    out = torch.addcmul(decay * q_state, (q * k).sum(-1, keepdim=True), delta)
    return out, state
# --8<-- [end:delta_step]


CACHE_BYTES_PER_THREAD = 1 << 20
"""State bytes per CPU thread that ``recurrent_delta_step_in_pieces`` updates at a time: no more than one
core's L2 cache holds on the x86 server CPUs this was written for (1 to 2 MiB)."""


def recurrent_delta_step_in_pieces(
    state: torch.Tensor, qk: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``recurrent_delta_step`` over a batch (first dim), a few sequences at a time on CPU.

    One step reads the state once and updates it in place twice (decay, then correct). A whole batch's
    state (1 MiB per sequence and layer at the 0.8B shape) leaves the CPU's caches between those kernels;
    a piece of ``CACHE_BYTES_PER_THREAD`` per thread stays in them, so the two updates read it from cache.
    The pieces only split the batch: every number is computed by the same kernels as in one call
    (``tests/test_kernels.py`` compares). Accelerators and compiled graphs take one call.
    """
    if state.device.type != "cpu" or torch.compiler.is_compiling():
        return recurrent_delta_step(state, qk, v, g, beta)
    per_sequence = state[0].numel() * state.element_size()
    rows = max(1, CACHE_BYTES_PER_THREAD * torch.get_num_threads() // per_sequence)
    if rows >= state.shape[0]:
        return recurrent_delta_step(state, qk, v, g, beta)
    pieces = [recurrent_delta_step(*parts)[0]
              for parts in zip(*(t.split(rows) for t in (state, qk, v, g, beta)))]
    return torch.cat(pieces), state


def recurrent_delta_step_ref(
    state: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
    beta: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Textbook form of one token: decay, predict, correct, read. Returns ``(o, new_state)``."""
    state = state * g.exp()[..., None, None]
    predicted = (k[..., :, None] * state).sum(-2)
    state = state + k[..., :, None] * (beta[..., None] * (v - predicted))[..., None, :]
    return (q[..., :, None] * state).sum(-2), state


def recurrent_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gated delta rule token by token over ``[..., L, d]`` inputs (the chunked form's reference)."""
    outputs, states = recurrent_delta_states(q, k, v, g, beta, state)
    return outputs, states[-1]


# --8<-- [start:snapshots]
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
    qk = torch.stack([q, k], dim=-2)  # [..., L, 2, dk]
    for t in range(q.shape[-2]):
        o, state = recurrent_delta_step(state, qk[..., t, :, :], v[..., t, :], g[..., t], beta[..., t])
        outputs.append(o)
        states.append(state.clone())  # the step updates ``state`` in place
    return torch.stack(outputs, dim=-2), torch.stack(states)


def windows_after_each(window: torch.Tensor, x: torch.Tensor, kernel: int) -> torch.Tensor:
    """The convolution window after each new input: ``[L, C, K-1]`` from ``window [C, K-1]``, ``x [L, C]``."""
    full = torch.cat([window, x.transpose(0, 1)], dim=-1)  # [C, K-1+L]
    return full.unfold(-1, kernel - 1, 1)[:, 1:].transpose(0, 1).contiguous()
# --8<-- [end:snapshots]


CHUNK_SIZE = 32
"""Tokens per chunk of ``chunked_delta_rule`` unless told otherwise."""


def chunked_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    chunk_size: int = CHUNK_SIZE,
    after_chunk: Callable[[int, torch.Tensor], None] | None = None,
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
        after_chunk: called after each chunk with the tokens done so far (at most ``L``: padding leaves the
            state as it is) and the state then; the prefix cache keeps its snapshots this way.

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
    beta = beta.reshape(*beta.shape[:-1], n, size).movedim(-2, 0)

    causal = torch.ones(size, size, dtype=torch.bool, device=q.device).tril()
    decay = (cum_g[..., :, None] - cum_g[..., None, :]).masked_fill_(~causal, float("-inf")).exp_()
    # diag(beta) scales the small [C, C] matrices, never the [C, d] keys and values:
    # diag(beta) K K^T = (K K^T) * beta_i (rows), and inverse diag(beta) V = (inverse * beta_j) V (columns).
    system = (k @ k.transpose(-1, -2)).mul_(decay).mul_(beta[..., :, None])
    # One solve against the identity gives the inverse; two products with it cost less than two solves.
    inverse = _solve_unit_lower(system, torch.eye(size, device=q.device).expand_as(system))
    u = (inverse * beta[..., None, :]) @ v
    w = (inverse * (beta * cum_g.exp())[..., None, :]) @ k
    intra = (q @ k.transpose(-1, -2)).mul_(decay)
    q_decayed = q * cum_g.exp()[..., None]
    # k^T scaled per column, written straight into a contiguous [d, C] layout (one pass, no separate copy).
    k_decayed_t = torch.mul(k.transpose(-1, -2), (cum_g[..., -1:] - cum_g).exp()[..., None, :],
                            out=k.new_empty(*k.shape[:-2], k.shape[-1], size))
    chunk_decay = cum_g[..., -1].exp()[..., None, None]

    # The scan works on 3-D [batch, rows, cols] blocks, so that each product with the state and the sum it
    # feeds is one baddbmm (a fused multiply-add) instead of a product and a separate addition.
    batch_shape = state.shape[:-2]
    u, w, intra, q_decayed, k_decayed_t, chunk_decay = (
        t.reshape(n, -1, *t.shape[-2:]) for t in (u, w, intra, q_decayed, k_decayed_t, chunk_decay))
    state = state.reshape(-1, *state.shape[-2:]).clone()
    # Outputs in token order ([batch, chunk, C, dv]): the result below is a view, not a reordering copy.
    # Each step computes into two contiguous buffers (no allocation inside the loop; ``out=`` a strided
    # slice of ``out`` measured slower on CPU), then copies its outputs into place.
    out = u.new_empty(state.shape[0], n, size, u.shape[-1])
    v_new, o = torch.empty_like(u[0]), torch.empty_like(u[0])
    for i in range(n):
        torch.baddbmm(u[i], w[i], state, alpha=-1, out=v_new)  # u - w @ state
        torch.bmm(intra[i], v_new, out=o).baddbmm_(q_decayed[i], state)
        out[:, i] = o
        state.mul_(chunk_decay[i]).baddbmm_(k_decayed_t[i], v_new)
        if after_chunk is not None:
            after_chunk(min((i + 1) * size, length), state.view(*batch_shape, *state.shape[-2:]))
    out = out.view(*batch_shape, n * size, out.shape[-1])
    return out[..., :length, :], state.view(*batch_shape, *state.shape[-2:])


def _solve_unit_lower(system: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    """Solve ``(I + strict_lower(system)) x = rhs``; the diagonal and upper triangle are not read."""
    return torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
