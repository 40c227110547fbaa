"""Speculative verification: which of a round's drafted tokens the target accepts.

Scope: :func:`verify_greedy` and :func:`verify_sampled`, pure functions on token ids and probabilities that
decide which tokens one round delivers (the accepted drafts plus one token from the target), the residual
distribution a rejected draft is resampled from, and :class:`AcceptStep`, one acceptance test for traces.
Non-scope: running any model (``draft.py``, ``runner.py``), committing the tokens (the engine).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mini_deepinfer.runtime.sampling import draw, uniform

__all__ = ["AcceptStep", "residual", "verify_greedy", "verify_sampled"]


# --8<-- [start:verify_greedy]
def verify_greedy(target_argmax: Sequence[int], drafts: Sequence[int]) -> list[int]:
    """The tokens a greedy round delivers: the drafts the target agrees with, then the target's own token.

    Args:
        target_argmax: the target's argmax at each of the ``k + 1`` verified positions.
        drafts: the ``k`` proposed tokens; ``drafts[i]`` was fed at the position after ``target_argmax[i]``'s.

    Returns:
        The longest prefix of ``drafts`` equal to ``target_argmax``, plus the target's next token: the
        correction at the first mismatch, or the bonus token when every draft matched (1 to k + 1 tokens).
    """
    if len(target_argmax) != len(drafts) + 1:
        raise ValueError(f"{len(drafts)} drafts need {len(drafts) + 1} target tokens, "
                         f"got {len(target_argmax)}")
    accepted = []
    for draft, target in zip(drafts, target_argmax):
        if draft != target:
            break
        accepted.append(draft)
    return accepted + [int(target_argmax[len(accepted)])]
# --8<-- [end:verify_greedy]


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``max(0, p - q)``: where the target wants more mass than the draft offered (unnormalised)."""
    return torch.clamp(p - q, min=0.0)


def _check_verify_inputs(p: torch.Tensor, q: torch.Tensor, drafts: Sequence[int]) -> None:
    k = len(drafts)
    if p.dim() != 2 or q.dim() != 2 or p.shape[0] != k + 1 or q.shape[0] != k or p.shape[1] != q.shape[1]:
        raise ValueError(f"need p [k+1, V] and q [k, V] for k = {k} drafts, got {tuple(p.shape)} "
                         f"and {tuple(q.shape)}")
    for i, token in enumerate(drafts):
        if not 0 <= token < q.shape[1] or q[i, token] <= 0:
            raise ValueError(f"draft {i} (token {token}) has no probability under q: it cannot come from q")


@dataclass(frozen=True)
class AcceptStep:
    """One acceptance test of :func:`verify_sampled`, for traces: the draft, p and q of it, the uniform u."""

    token: int
    p: float
    q: float
    u: float
    accepted: bool


# --8<-- [start:verify_sampled]
def verify_sampled(
    p: torch.Tensor, q: torch.Tensor, drafts: Sequence[int], generator: torch.Generator,
    steps: list[AcceptStep] | None = None,
) -> list[int]:
    """Speculative sampling: the delivered tokens are distributed exactly as sampling the target alone.

    Draft ``i`` is accepted with probability ``min(1, p_i(d_i) / q_i(d_i))``. At the first rejection the
    token is drawn from ``norm(max(0, p_i - q_i))`` and the round stops; when every draft is accepted a
    bonus token is drawn from ``p_k``. Everything is computed in float64 on the CPU.

    Args:
        p: ``[k + 1, V]`` the target's (filtered) distributions at the verified positions.
        q: ``[k, V]`` the distributions the drafts were drawn from.
        drafts: the ``k`` drafted tokens.
        generator: the request's generator (one uniform per tested draft, one per final draw).
        steps: if given, each acceptance test is appended to it.

    Returns:
        1 to ``k + 1`` tokens: the accepted drafts, then the resampled or bonus token.
    """
    p, q = (t.detach().to(device="cpu", dtype=torch.float64) for t in (p, q))
    _check_verify_inputs(p, q, drafts)
    accepted: list[int] = []
    for i, token in enumerate(drafts):
        u, ratio = uniform(generator), float(p[i, token] / q[i, token])
        accept = u < min(1.0, ratio)
        if steps is not None:
            steps.append(AcceptStep(int(token), float(p[i, token]), float(q[i, token]), u, accept))
        if accept:
            accepted.append(int(token))
            continue
        rest = residual(p[i], q[i])
        # p == q never rejects; a rejection left with no residual mass can only come from rounding
        return accepted + [draw(rest if float(rest.sum()) > 0 else p[i], generator)]
    return accepted + [draw(p[len(drafts)], generator)]
# --8<-- [end:verify_sampled]
