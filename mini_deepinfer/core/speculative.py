"""Speculative decoding in the engine: a decode that also takes the positions of the drafts it verifies.

Scope: what speculative decoding changes in the engine, and nothing else. ``SpeculativeEngine`` (and
``SpeculativeBatchEngine``, the same change on ``BatchEngine``'s schedule) plans each decode as its last
committed token plus ``decode_width`` draft positions (``SpeculativeSeqPlan``), commits the accepted group
the runner hands back (``SpeculativeResult``), and then ``rollback`` sets the runner's models back to the
committed prefix (``DraftingRunner.rewind``) and gives back the KV slots of rejected positions. The loop,
admission, commit rules and release stay ``Engine``'s.

Non-scope: proposing and verifying drafts (``runtime.speculative``), cross-round execution (a speculative
round reads its tokens before the next round is planned: ``EngineConfig`` refuses both together). This module
imports nothing outside the standard library.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol

from .batch import BatchEngine
from .commit import Delivery
from .config import EngineConfig
from .engine import Engine
from .plan import RoundResult, SeqPlan
from .request import Request
from .runner import Runner
from .trace import Trace

__all__ = ["DraftingRunner", "SpeculativeBatchEngine", "SpeculativeEngine", "SpeculativeResult",
           "SpeculativeSeqPlan", "Verified"]


@dataclass(frozen=True, kw_only=True)
class SpeculativeSeqPlan(SeqPlan):
    """A decode that also verifies ``spec_width`` draft tokens after its input.

    Attributes:
        spec_width: draft tokens the runner proposes and the target verifies after ``token_ids`` this
            round; the round computes positions ``start_pos .. start_pos + spec_width``.
        history: the committed tokens at positions ``0 .. start_pos`` (the last one is ``token_ids[0]``), from
            which a draft model catches up on the tokens it has not seen.
        draft_restore: prefix cache, on the first decode that runs the draft only: ``(length, snapshot)``:
            the draft starts after the reused prefix of ``length`` prompt tokens (its keys are in the shared
            slots, its state in its own copy of that snapshot slot; ``(0, None)``: from position 0).
        draft_saves: with ``draft_restore``: the ``(position, snapshot slot)`` pairs the target kept while
            prefilling; the draft keeps its own state at the same positions, in its own cache.
    """

    spec_width: int = 0
    history: tuple[int, ...] = ()
    draft_restore: tuple[int, int | None] | None = None
    draft_saves: tuple[tuple[int, int], ...] = ()

    @property
    def num_tokens(self) -> int:
        """Positions the target computes: the input plus the draft tokens it verifies."""
        return len(self.token_ids) + self.spec_width


@dataclass(frozen=True)
class Verified:
    """What one speculative decode did, for the trace: the drafts, how many the target accepted, and where
    the draft's cache stands (``computed N -> keep M``)."""

    drafts: list[int]
    accepted: int
    draft_cache: str


@dataclass
class SpeculativeResult(RoundResult):
    """A round of speculative decoding: ``tokens[request_id]`` is the accepted group (1 to k + 1 tokens);
    ``verified`` says, per speculative decode, how it came about."""

    verified: dict[str, Verified] = field(default_factory=dict)


class DraftingRunner(Runner, Protocol):
    """A runner that proposes and verifies drafts, and can go back to a committed length."""

    def rewind(self, request_id: str, length: int) -> None:
        """After a speculative round: keep positions ``0 .. length - 1`` of the request, in every model."""
        ...


class SpeculativeEngine(Engine):
    """``Engine`` whose decodes verify draft tokens (``config.spec_width`` of them at most, at least one).

    Args:
        runner: a runner that drafts, verifies and rewinds (``runtime.speculative.SpeculativeRunner``).
        config: as for ``Engine``, with ``spec_width >= 1``.
        trace: where trace events go.
    """

    runner: DraftingRunner

    def __init__(self, runner: DraftingRunner, config: EngineConfig, trace: Trace | None = None) -> None:
        if config.spec_width < 1:
            raise ValueError(f"a speculative engine needs spec_width >= 1, got {config.spec_width}")
        super().__init__(runner, config, trace)
        self.drafted: set[str] = set()  # prefix cache: requests whose draft was told where to start

    def release_if_idle(self, req: Request) -> None:
        super().release_if_idle(req)
        if req.slots_released:
            self.drafted.discard(req.request_id)

    # --8<-- [start:plan_decode]
    def plan_decode(self, req: Request, budget: int | None = None) -> SpeculativeSeqPlan:
        """The last committed token, then ``decode_width`` positions for the drafts it verifies."""
        token, width = req.output_token_ids[-1], self.decode_width(req, budget)
        start, new_slots = req.num_computed, self.take_slots(req, 1 + width)
        # draft tokens are proposed inside the runner; the trace shows them as "?" until verified
        self.trace.emit(self.round_id, "schedule", req.request_id, phase="decode",
                        inputs=[token] + [None] * width, start_pos=start, slots=new_slots)
        return SpeculativeSeqPlan(
            request_id=req.request_id, kind="decode", token_ids=(token,), start_pos=start,
            new_slots=tuple(new_slots), context_slots=tuple(req.kv_slots), state_slot=req.state_slot,
            sample=True, params=req.params, spec_width=width,
            history=req.prompt_token_ids + tuple(req.output_token_ids), **self.draft_prefix(req, width))
    # --8<-- [end:plan_decode]

    # --8<-- [start:draft_prefix]
    def draft_prefix(self, req: Request, width: int) -> dict:
        """Prefix cache: on the first decode that runs the draft, where the draft starts (after the reused
        prefix) and where it keeps its own snapshots as it catches up on the prompt (where the target did)."""
        hold = self.prefix_cache.holds[req.request_id] if self.prefix_cache is not None else None
        if hold is None or width == 0 or req.request_id in self.drafted:
            return {}
        self.drafted.add(req.request_id)
        return {"draft_restore": (hold.hit.length, hold.hit.snapshot),
                "draft_saves": tuple(sorted(hold.saves.items()))}

    def index_prompt(self, req: Request, seq: SeqPlan) -> None:
        """The prompt is indexed once BOTH models hold it: after the first decode that ran the draft (which
        catches up on the prompt there), not after the prefill. A request that never drafts is not indexed."""
        if isinstance(seq, SpeculativeSeqPlan) and seq.draft_restore is not None:
            self.prefix_cache.insert(req.request_id, req.prompt_token_ids, req.kv_slots, req.prompt_len)
    # --8<-- [end:draft_prefix]

    # --8<-- [start:decode_width]
    def decode_width(self, req: Request, budget: int | None) -> int:
        """Draft positions this round: ``spec_width``, cut so the verify fits the round's token budget
        and the group (accepted drafts + 1) cannot pass ``max_new_tokens``. The cut keeps every
        position inside the request's reservation (prompt + max_new_tokens)."""
        left = req.params.max_new_tokens - len(req.output_token_ids)
        width = min(self.config.spec_width, left - 1)
        if budget is not None:
            width = min(width, budget - 1)
        return max(width, 0)
    # --8<-- [end:decode_width]

    def commit_sampled(self, round_id: int, seq: SeqPlan, result: RoundResult) -> Delivery:
        """Record what the draft proposed, commit the accepted group, then go back to the committed prefix."""
        req = self.requests[seq.request_id]
        verified = result.verified.get(req.request_id) if isinstance(result, SpeculativeResult) else None
        if verified is not None:
            self.trace.emit(self.round_id, "verify", req.request_id, **asdict(verified))
        delivery = super().commit_sampled(round_id, seq, result)
        if isinstance(seq, SpeculativeSeqPlan) and seq.spec_width and not req.finished:
            self.rollback(req)
        return delivery

    # --8<-- [start:rollback]
    def rollback(self, req: Request) -> None:
        """After a speculative round: go back to the committed prefix, in the runner and in the KV pool.

        The caches must hold ``prompt + output[:-1]``. The runner sets every model's state back to that
        length (``DraftingRunner.rewind``); the KV slots of rejected draft positions go back to the pool.
        Their stale keys and values are harmless: a slot is written before it is read.
        """
        keep = req.prompt_len + len(req.output_token_ids) - 1
        self.runner.rewind(req.request_id, keep)
        freed, req.kv_slots = req.kv_slots[keep:], req.kv_slots[:keep]  # none when every draft was accepted
        req.num_computed = keep
        self.kv_pool.free(freed)
        self.trace.emit(self.round_id, "rollback", req.request_id, slots=freed, kept=keep)
    # --8<-- [end:rollback]


class SpeculativeBatchEngine(SpeculativeEngine, BatchEngine):
    """``BatchEngine``'s schedule with ``SpeculativeEngine``'s decodes: a speculative decode costs
    ``1 + width`` tokens of the round's budget, and its width is cut to what is left."""
