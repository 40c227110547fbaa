"""BatchEngine: many requests per round under a token budget, with optional chunked prefill.

Scope: only the scheduling policy. Each round first gives one decode token to every running request
that has finished its prompt (up to the budget), then spends what is left of the budget on prompts:
unfinished chunked prompts first, then waiting requests in arrival order, admitting them while
``max_num_seqs`` and the cache allow. With chunked prefill a prompt longer than the remaining budget is
split across rounds; without it the prompt waits for a round where it fits whole. Everything else (the
loop, launch, read, commit, release) is ``Engine``'s, unchanged.
Non-scope: preemption. A request is admitted only when its worst case (prompt + max_new_tokens) fits,
so a running request never runs out of slots; DeepInfer admits optimistically and preempts instead.
"""

from __future__ import annotations

from .engine import Engine
from .plan import RoundPlan, SeqPlan
from .request import Request, RequestStatus


class BatchEngine(Engine):
    """``Engine`` with a batching schedule.

    The config's ``max_num_seqs`` caps the requests running at once, ``max_batched_tokens`` is the token
    budget of one round (every position a plan computes counts), and ``chunked_prefill``
    splits a prompt that does not fit the remaining budget across rounds.
    """

    @property
    def max_num_seqs(self) -> int:
        return self.config.max_num_seqs

    @property
    def max_batched_tokens(self) -> int:
        return self.config.max_batched_tokens

    @property
    def chunked_prefill(self) -> bool:
        return self.config.chunked_prefill

    def check_fits(self, req: Request) -> None:
        super().check_fits(req)
        if not self.chunked_prefill and req.prompt_len > self.max_batched_tokens:
            raise ValueError(
                f"{req.request_id}: prompt of {req.prompt_len} tokens never fits the budget of "
                f"{self.max_batched_tokens} tokens per round; use chunked prefill or a larger budget")

    # --8<-- [start:schedule]
    def schedule(self) -> RoundPlan:
        """Decode tokens first, then prompt tokens while the budget lasts."""
        budget = self.max_batched_tokens
        seqs: list[SeqPlan] = []
        for req in [r for r in self.running if r.prefill_done]:
            if budget == 0:
                break
            seqs.append(self.plan_decode(req, budget))
            budget -= seqs[-1].num_tokens  # the positions this decode computes
        for req in self._prefill_candidates():
            if budget == 0:
                break
            chunk = self._chunk_size(req, budget)
            if chunk == 0:
                break  # first come, first served: later prompts do not overtake this one
            if req.status is RequestStatus.WAITING:
                self.admit(req)
            seqs.append(self.plan_prefill(req, chunk))
            budget -= chunk
        return RoundPlan(self.round_id, tuple(seqs))
    # --8<-- [end:schedule]

    # --8<-- [start:chunk]
    def _prefill_candidates(self) -> list[Request]:
        """Admitted prompts still being prefilled (chunked), then waiting requests that can be admitted."""
        started = [r for r in self.running if not r.prefill_done]
        return started + list(self.waiting)

    def _chunk_size(self, req: Request, budget: int) -> int:
        """How many of the request's remaining prompt tokens run this round (0 = not this round)."""
        start = req.num_computed
        if req.status is RequestStatus.WAITING:
            if len(self.running) >= self.max_num_seqs or not self.can_admit(req):
                return 0
            start = self.prefix_hit(req).length  # where it will start: after its cached prompt tokens
        remaining = req.prompt_len - start
        if remaining <= budget:
            return remaining
        return budget if self.chunked_prefill else 0
    # --8<-- [end:chunk]
