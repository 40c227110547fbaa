"""What one round runs, and the runner protocol that runs it.

Scope: the round plan the engine hands to a runner (``RoundPlan``, one ``SeqPlan`` per request), the
tokens a runner hands back (``RoundResult``), and the two-call ``Runner`` protocol: ``launch`` starts a
round, ``read`` waits for its sampled tokens. A synchronous engine calls them back to back; a
cross-round engine launches round N+1 before it reads round N.
Non-scope: tensors. Runners (the toy runner, the torch ``ModelRunner``) turn plans into computation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from .request import SamplingParams

# A token the engine has not read yet: the one this request sampled in the previous, still
# launched round. The runner takes it from device memory (cross-round execution).
IN_FLIGHT = None


@dataclass(frozen=True)
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
        num_output_tokens: outputs sampled before this round (committed or in flight), for seeding.
        draft_token_ids: candidate tokens proposed by a draft model (speculative decoding), if any.
        spec_width: draft tokens the runner proposes and the target verifies after ``token_ids`` this
            round (speculative decode); the round computes positions ``start_pos .. start_pos + spec_width``.
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
    num_output_tokens: int = 0
    draft_token_ids: tuple[int, ...] = ()
    spec_width: int = 0

    @property
    def num_tokens(self) -> int:
        """Positions the target computes: the inputs plus the draft tokens it verifies."""
        return len(self.token_ids) + self.spec_width

    @property
    def positions(self) -> range:
        return range(self.start_pos, self.start_pos + self.num_tokens)


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

    ``tokens[request_id]`` is a list: one token for plain decoding, an accepted group for
    speculative decoding. Requests whose prefill chunk did not sample are absent.
    """

    round_id: int
    tokens: dict[str, list[int]] = field(default_factory=dict)
    extra: dict[str, object] = field(default_factory=dict)


class Runner(Protocol):
    """Turns round plans into sampled tokens."""

    def launch(self, plan: RoundPlan) -> object:
        """Start computing ``plan``; return a handle. Must not wait for the results."""
        ...

    def read(self, handle: object) -> RoundResult:
        """Wait for the round behind ``handle`` and return its sampled tokens."""
        ...

    def release(self, request_id: str) -> None:
        """Forget a finished request (its generator, its device-side last token)."""
        ...
