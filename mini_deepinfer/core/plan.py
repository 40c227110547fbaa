"""What one round runs: the plan the engine hands to a runner, and the tokens the runner hands back.

Scope: ``RoundPlan`` (one ``SeqPlan`` per scheduled request, decodes first) and ``RoundResult`` (the sampled
tokens the CPU reads back), plain data that both sides of the runner protocol (``core/runner.py``) share.
Non-scope: tensors, and deciding anything: the engine fills plans, runners turn them into computation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .request import SamplingParams

# A token the engine has not read yet: the one this request sampled in the previous, still
# launched round. The runner takes it from device memory (cross-round execution).
IN_FLIGHT = None


@dataclass(frozen=True, kw_only=True)
class SeqPlan:
    """One request's share of a round.

    Attributes:
        request_id: the request.
        kind: "prefill" (a chunk of the prompt) or "decode" (the last committed output token).
        token_ids: input tokens; ``IN_FLIGHT`` (None) marks the token sampled in the previous round.
        start_pos: position of ``token_ids[0]`` = tokens already in this request's cache.
        new_slots: KV slot written by each position the round computes (``num_tokens`` of them).
        context_slots: KV slots of positions ``0 .. start_pos + num_tokens - 1``, in order.
        state_slot: the request's convolution/recurrent state slot (None for runners without one).
        sample: whether this round samples a token for the request (last prefill chunk, or decode).
        params: the request's sampling parameters.
        restore: prefix cache: before this chunk, set the state slot to this snapshot slot (the state after
            the ``start_pos`` reused prompt tokens). None: the state continues (or starts at zero).
        saves: prefix cache: ``(position, snapshot slot)`` pairs: keep the state after ``position`` tokens.
    """

    request_id: str
    kind: Literal["prefill", "decode"]
    token_ids: tuple[int | None, ...]
    start_pos: int
    new_slots: tuple[int, ...]
    context_slots: tuple[int, ...]
    state_slot: int | None
    sample: bool
    params: SamplingParams
    restore: int | None = None
    saves: tuple[tuple[int, int], ...] = ()

    @property
    def num_tokens(self) -> int:
        """Positions the round computes for this request."""
        return len(self.token_ids)


@dataclass(frozen=True)
class RoundPlan:
    """Everything one round computes: the scheduled sequences, decodes first."""

    round_id: int
    seqs: tuple[SeqPlan, ...]

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.seqs)


@dataclass
class RoundResult:
    """What the CPU reads back from a round: sampled tokens per request that sampled.

    ``tokens[request_id]`` is a list: one token per plain decode (a runner that delivers several per round
    returns a subclass that says why). Requests whose prefill chunk did not sample are absent.
    """

    round_id: int
    tokens: dict[str, list[int]] = field(default_factory=dict)

