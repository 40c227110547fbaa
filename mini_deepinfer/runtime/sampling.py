"""Choosing the next token from logits: greedy, temperature, top-k, top-p, per-request seeds.

Scope: one round of sampling for the rows the runner hands over (one row per token to choose), the exact
filtered distribution those draws come from (for speculative verification), a per-request random generator,
and drawing one token from an explicit probability vector.

Non-scope: logits computation (the model), stop decisions (``core/commit.py``), acceptance tests of
speculative decoding (``speculative/verify.py``), and validation of user input: ``SamplingParams``
(``core/request.py``) rejects bad values once, when a request is made, so nothing here checks them again.

Three invariants shape the code:

* **Batch invariance.** A row's token depends only on that row's logits, its parameters and its own
  generator. Greedy rows use one vectorised argmax (``greedy_tokens``: exact, first index wins ties); every
  sampled row is filtered and drawn on its own, so no reduction ever mixes rows.
* **Reproducibility.** Each sampled token consumes exactly one uniform number from its request's generator,
  drawn by inverting the cumulative distribution. Greedy rows consume none. So a seed fixes the tokens,
  whatever the batch around the request.
* **One distribution.** :func:`sample` and :func:`probabilities` share :func:`_distribution`, so the
  distribution verification reasons about is the one sampling draws from (same kept tokens; values equal up
  to the float32 rounding of the working dtype).

Filtering order: temperature, then top-k, then top-p over the renormalised top-k set (the order of
Hugging Face transformers and vLLM, which Qwen's ``generation_config.json`` values assume). DeepInfer's
reference sampler cuts top-p over the whole distribution before top-k, which can keep more tokens.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Protocol

import torch

__all__ = [
    "NON_FINITE",
    "NonFiniteLogitsError",
    "SamplingLike",
    "check_finite",
    "draw",
    "draw_uniforms",
    "flag_non_finite",
    "make_generator",
    "probabilities",
    "sample",
    "uniform",
]


class SamplingLike(Protocol):
    """The fields of ``SamplingParams`` that sampling reads (tests also pass values it would refuse)."""

    @property
    def greedy(self) -> bool: ...  # temperature 0: the argmax

    @property
    def temperature(self) -> float: ...

    @property
    def top_k(self) -> int: ...  # 0 = off

    @property
    def top_p(self) -> float: ...  # 1.0 = off

    @property
    def seed(self) -> int | None: ...


def make_generator(seed: int | None) -> torch.Generator:
    """Create the random generator a request keeps for its whole life, on the CPU.

    A request without a seed still gets its own generator, seeded from a fresh random number, so every run
    can be replayed: read the seed back with ``generator.initial_seed()`` and record it.

    Generators live on the CPU: every uniform number is drawn on the host (:func:`uniform`), so a seed gives
    the same stream on every device, and :func:`sample` and :func:`draw` share one generator per request.

    Args:
        seed: the request's seed, or None for a fresh one.

    Returns:
        A CPU generator seeded with ``seed`` (or the fresh seed).
    """
    generator = torch.Generator()
    generator.manual_seed(secrets.randbits(63) if seed is None else seed)
    return generator


def _working_dtype(logits: torch.Tensor) -> torch.dtype:
    """float64 logits stay float64; anything narrower is lifted to float32."""
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


def _candidates(scaled: torch.Tensor, params: SamplingLike) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens that can survive the cuts, as ``(scaled logits, token ids)``.

    Without a cut every token is a candidate, in vocabulary order (no sort needed). With a cut the
    candidates are sorted by descending logit, ties broken by lower token id, and top-k keeps the first k.
    """
    vocab = scaled.numel()
    top_k = params.top_k if 0 < params.top_k < vocab else 0
    ids = torch.arange(vocab, device=scaled.device)
    if top_k == 0 and params.top_p >= 1.0:
        return scaled, ids
    if top_k and scaled.is_cpu:
        # A full sort of a 250k vocabulary costs tens of ms on a CPU; sort only the tokens that reach the
        # k-th largest logit. All tokens tied with it stay, so the stable sort decides ties as a full sort
        # would. On an accelerator the full sort is cheap, and nonzero() would make the host wait.
        kth_largest = torch.topk(scaled, top_k, sorted=False).values.min()
        ids = torch.nonzero(scaled >= kth_largest).squeeze(1)
    values, order = torch.sort(scaled[ids], descending=True, stable=True)
    keep = top_k or vocab
    return values[:keep], ids[order][:keep]


# --8<-- [start:distribution]
def _distribution(row: torch.Tensor, params: SamplingLike) -> tuple[torch.Tensor, torch.Tensor]:
    """Filter one row of logits: temperature, top-k, then top-p over the renormalised top-k set.

    Args:
        row: logits ``[V]`` of one token position.
        params: non-greedy sampling parameters.

    Returns:
        ``(probs, ids)``: ``probs[j]`` is the probability of token ``ids[j]``; tokens cut by top-p have
        probability 0 and tokens cut by top-k are absent; the rest sum to 1.
    """
    work = row.to(_working_dtype(row))
    # Subtract the maximum before dividing so a tiny temperature cannot overflow to inf.
    scaled = (work - work.max()) / params.temperature
    values, ids = _candidates(scaled, params)
    probs = torch.softmax(values, dim=0)
    if params.top_p < 1.0:
        # Candidates are sorted here. Keep token j while the mass strictly before it is below top_p: the
        # smallest prefix that reaches top_p, never empty (the mass before the first token is 0).
        mass_before = torch.cumsum(probs, dim=0) - probs
        probs = torch.where(mass_before < params.top_p, probs, torch.zeros_like(probs))
        probs = probs / probs.sum()
    return probs, ids
# --8<-- [end:distribution]


# --8<-- [start:draw_one]
def uniform(generator: torch.Generator) -> float:
    """One uniform number in [0, 1) from ``generator`` (which lives on the CPU)."""
    return float(torch.rand(1, generator=generator, dtype=torch.float64))


def draw_uniforms(params: Sequence[SamplingLike],
                  generators: Sequence[torch.Generator | None]) -> list[float] | None:
    """One uniform per sampled row, drawn on the host from the row's generator (0.0 for greedy rows, which
    consume none); None when every row is greedy. A runner sends them to the device with the round's inputs.

    Raises:
        ValueError: mismatched lengths, or a sampled row without a generator.
    """
    if len(params) != len(generators):
        raise ValueError(f"{len(params)} params but {len(generators)} generators")
    if all(p.greedy for p in params):
        return None
    uniforms = []
    for i, (row_params, generator) in enumerate(zip(params, generators)):
        if row_params.greedy:
            uniforms.append(0.0)
        elif generator is None:
            raise ValueError(f"row {i} samples (temperature {row_params.temperature}) but has no generator")
        else:
            uniforms.append(uniform(generator))
    return uniforms


def _invert_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index ``i`` with ``cdf[i-1] <= u * total < cdf[i]``: a zero-probability entry is never chosen.

    Args:
        probs: non-negative weights ``[N]`` (need not sum exactly to 1).
        u: a ``[1]`` uniform number in [0, 1).

    Returns:
        A ``[1]`` int64 index on ``probs.device`` (no host synchronisation).
    """
    cdf = torch.cumsum(probs, dim=0)
    index = torch.searchsorted(cdf, u * cdf[-1], right=True)
    # Rounding can push u * total up to total itself; fall back to the last token that has mass.
    positions = torch.arange(probs.numel(), device=probs.device)
    last_positive = torch.where(probs > 0, positions, torch.zeros_like(positions)).max()
    return torch.minimum(index, last_positive)


def _sample_row(row: torch.Tensor, params: SamplingLike, u: torch.Tensor) -> torch.Tensor:
    """Draw one token for one row with the uniform ``u`` (``[1]``, on the row's device); ``[1]`` int64 out."""
    probs, ids = _distribution(row, params)
    position = _invert_cdf(probs, u.to(probs.dtype))
    return ids[position]
# --8<-- [end:draw_one]


def greedy_tokens(logits: torch.Tensor) -> torch.Tensor:
    """The index of the largest logit along the last dimension (int64): ``argmax``, computed as
    ``max(dim=-1).indices``. Both give the first index of the largest value, a NaN counting as largest
    (``tests/test_sampling.py`` compares them on ties and NaN). ``max`` because on CPU it was the faster of
    the two over a 248,320-logit Qwen3.5 row, timed once on an Intel Xeon when this was written; no
    benchmark of the repository records it."""
    return logits.max(dim=-1).indices


# --8<-- [start:sample]
def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingLike],
    generators: Sequence[torch.Generator | None] | None = None,
    uniforms: torch.Tensor | None = None,
) -> torch.Tensor:
    """Choose one token per row.

    Args:
        logits: ``[S, V]``, one row per token to choose, on any device and dtype.
        params: the sampling parameters of each row (rows of one request share them).
        generators: each row's generator; may be None only for greedy rows. A generator shared by several
            rows is consumed in row order. Not needed when ``uniforms`` are given.
        uniforms: ``[S]`` float64 on ``logits.device``, drawn beforehand with :func:`draw_uniforms` (a model
            runner sends them with the round's inputs, so sampling never copies from the host).

    Returns:
        ``[S]`` int64 token ids on ``logits.device``.

    Raises:
        ValueError: mismatched lengths, or a sampled row without a generator.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be [S, V], got shape {tuple(logits.shape)}")
    if len(params) != logits.shape[0]:
        raise ValueError(f"{logits.shape[0]} logit rows but {len(params)} params")
    if uniforms is None and any(not p.greedy for p in params):
        drawn = draw_uniforms(params, generators if generators is not None else [None] * len(params))
        uniforms = torch.tensor(drawn, dtype=torch.float64).to(logits.device)
    tokens = greedy_tokens(logits)
    for i, row_params in enumerate(params):
        if not row_params.greedy:
            tokens[i : i + 1] = _sample_row(logits[i], row_params, uniforms[i : i + 1])
    return tokens
# --8<-- [end:sample]


def _row_probabilities(row: torch.Tensor, params: SamplingLike) -> torch.Tensor:
    """The filtered distribution of one row in vocabulary order, float64 on the CPU, summing to 1."""
    if params.greedy:
        one_hot = torch.zeros(row.numel(), dtype=torch.float64)
        one_hot[int(greedy_tokens(row))] = 1.0
        return one_hot
    kept_probs, ids = _distribution(row, params)
    probs = torch.zeros(row.numel(), dtype=torch.float64)
    probs[ids.cpu()] = kept_probs.cpu().to(torch.float64)
    return probs / probs.sum()


def probabilities(
    logits: torch.Tensor, params: SamplingLike | Sequence[SamplingLike]
) -> torch.Tensor:
    """The distribution :func:`sample` draws from, as float64 on the CPU.

    Greedy rows give a one-hot vector on the argmax. The kept tokens are exactly those :func:`sample` can
    return; the values are the working-dtype probabilities, widened to float64 and renormalised.

    Args:
        logits: ``[V]`` or ``[S, V]``.
        params: one parameter set for all rows, or one per row.

    Returns:
        float64 CPU tensor with the shape of ``logits``; each row sums to 1.
    """
    if logits.dim() == 1:
        if isinstance(params, Sequence):
            raise ValueError("logits [V] take one SamplingParams, not a sequence")
        return _row_probabilities(logits, params)
    if logits.dim() != 2:
        raise ValueError(f"logits must be [V] or [S, V], got shape {tuple(logits.shape)}")
    row_params = list(params) if isinstance(params, Sequence) else [params] * logits.shape[0]
    if len(row_params) != logits.shape[0]:
        raise ValueError(f"{logits.shape[0]} logit rows but {len(row_params)} params")
    return torch.stack([_row_probabilities(row, p) for row, p in zip(logits, row_params)])


def draw(probs: torch.Tensor, generator: torch.Generator) -> int:
    """Draw one index from an explicit probability vector, consuming one uniform number.

    Speculative verification uses it for the residual distribution ``max(0, p - q)`` after a rejection.

    Args:
        probs: ``[V]`` non-negative weights (float64 recommended); they are normalised here.
        generator: the request's generator.

    Returns:
        The chosen index; an entry with zero probability is never chosen.

    Raises:
        ValueError: not 1-D, negative or non-finite entries, or no mass at all.
    """
    if probs.dim() != 1:
        raise ValueError(f"probs must be [V], got shape {tuple(probs.shape)}")
    weights = probs.detach().to(device="cpu", dtype=torch.float64)
    if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
        raise ValueError("probs must be finite and non-negative")
    if not float(weights.sum()) > 0.0:
        raise ValueError("probs has no mass to draw from")
    u = torch.tensor([uniform(generator)], dtype=torch.float64)
    return int(_invert_cdf(weights, u))


# --8<-- [start:non_finite]
NON_FINITE = -1
"""The token of a row whose logits hold NaN or infinity: no vocabulary has it, so it cannot be sampled."""


class NonFiniteLogitsError(RuntimeError):
    """A round produced NaN or infinite logits for some request (broken weights, or an overflow)."""


def flag_non_finite(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Replace the token of every row whose logits are not all finite by ``NON_FINITE``, on the device.

    The flag travels with the tokens, so the host learns of it in the read it makes anyway; checking here with
    ``bool(...)`` would make the host wait for the round. A row's sum is NaN or infinite exactly when one of
    its logits is (or when finite logits are so large that their sum overflows, itself a broken model); one
    reduction is much cheaper than ``isfinite`` over the whole ``[S, vocab]`` tensor.
    """
    finite = torch.isfinite(logits.sum(dim=-1))
    return torch.where(finite, tokens, torch.full_like(tokens, NON_FINITE))


def check_finite(round_id: int, request_ids: Sequence[str], tokens: Sequence[int]) -> None:
    """Raise ``NonFiniteLogitsError`` naming the round and the requests whose token carries the flag."""
    bad = list(dict.fromkeys(rid for rid, token in zip(request_ids, tokens) if token == NON_FINITE))
    if bad:
        raise NonFiniteLogitsError(f"round {round_id}: non-finite logits (NaN or inf) for {', '.join(bad)}")
# --8<-- [end:non_finite]
