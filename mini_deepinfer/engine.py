"""The engine: one loop that organises rounds (schedule, launch, read, commit).

Scope: submitting and cancelling requests, admitting them into the cache (KV slots per token, one
state slot per request), the ``step()`` loop, and the simplest schedule: one request at a time, whole
prompt first, then one decode token per round. ``BatchEngine`` (``batch.py``) replaces only
``schedule()``; cross-round execution (``pipeline.py``) changes only *when* a launched round is read. With
``spec_width`` a decode also takes the positions of the draft tokens it verifies, and ``rollback`` gives back
those that were rejected (speculative decoding; the runner is ``speculative.SpeculativeRunner``).
Non-scope: tensors (runners), deciding what a sampled token means (``commit.py``).
This module imports nothing outside the standard library.
"""

from __future__ import annotations

import time
from collections import deque

from .commit import Delivery, commit_round
from .pipeline import StoppingDecodePipeline
from .plan import IN_FLIGHT, RoundPlan, Runner, SeqPlan
from .request import FinishReason, Request, RequestStatus, SamplingParams, validate_prompt
from .slots import SlotPool
from .trace import Trace


class Engine:
    """Runs requests through a runner, one round per ``step()``.

    Args:
        runner: turns round plans into sampled tokens (the toy runner, or a model runner).
        kv_capacity: KV slots (one per cached token position, across all requests).
        state_capacity: state slots (one per running request) for models with recurrent layers;
            None for runners that keep no per-request state.
        pipeline: launch round N+1 before reading round N (cross-round execution).
        trace: where trace events go (a new one by default).
        spec_width: draft tokens verified per decode round (speculative decoding; 0 = off). The runner
            must propose and verify them (``speculative.SpeculativeRunner``).
    """

    def __init__(self, runner: Runner, kv_capacity: int, state_capacity: int | None = None, *,
                 pipeline: bool = False, trace: Trace | None = None, spec_width: int = 0) -> None:
        if not isinstance(spec_width, int) or spec_width < 0:
            raise ValueError(f"spec_width must be an integer >= 0, got {spec_width!r}")
        if spec_width and pipeline:
            raise ValueError("speculative decoding runs synchronously; it cannot be combined with pipeline")
        self.runner = runner
        self.spec_width = spec_width
        self.kv_pool = SlotPool(kv_capacity, "kv")
        self.state_pool = SlotPool(state_capacity, "state") if state_capacity is not None else None
        self.pipeline = StoppingDecodePipeline() if pipeline else None
        self.trace = trace if trace is not None else Trace()
        self.requests: dict[str, Request] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.round_id = 0

    # --8<-- [start:submit]
    def submit(self, request_id: str, prompt_token_ids: list[int],
               params: SamplingParams | None = None) -> Request:
        """Queue a request. Raises ValueError for input the engine can never serve."""
        prompt = validate_prompt(request_id, prompt_token_ids)
        if request_id in self.requests:
            raise ValueError(f"{request_id}: a request with this id was already submitted")
        req = Request(request_id, prompt, params or SamplingParams(), arrival_round=self.round_id + 1)
        self.check_fits(req)
        self.requests[request_id] = req
        self.trace.emit(self.round_id, "submit", request_id, prompt=list(prompt),
                        max_new_tokens=req.params.max_new_tokens, eos=list(req.params.eos_token_ids))
        if req.params.max_new_tokens == 0:
            self.finish(req, FinishReason.LENGTH)
            self.release_if_idle(req)
        else:
            self.waiting.append(req)
        return req
    # --8<-- [end:submit]

    # --8<-- [start:check_fits]
    def check_fits(self, req: Request) -> None:
        """Refuse a request that could never be admitted, instead of letting it wait forever."""
        need = req.max_cache_tokens()
        if need > self.kv_pool.capacity:
            raise ValueError(
                f"{req.request_id}: prompt of {req.prompt_len} tokens plus max_new_tokens "
                f"{req.params.max_new_tokens} needs {need} KV slots; the cache has {self.kv_pool.capacity}")
    # --8<-- [end:check_fits]

    # --8<-- [start:step]
    def step(self) -> list[Delivery]:
        """One round: schedule, launch, read, commit. Returns what each request delivered."""
        self.round_id += 1
        plan = self.schedule()
        try:
            launched = (plan, self.launch(plan)) if plan.seqs else None
            if self.pipeline is None:
                to_read = launched  # synchronous: read the round just launched
            else:
                to_read = self.pipeline.swap(launched)  # cross-round: read the round launched before
            if to_read is None:
                return []
            done_plan, handle = to_read
            result = self.runner.read(handle)
        except Exception as exc:  # the runner failed: nothing still in flight can be trusted
            return self.abandon_in_flight(exc)
        self.trace.emit(self.round_id, "read", None, round=done_plan.round_id)
        return commit_round(self, done_plan, result)
    # --8<-- [end:step]

    # --8<-- [start:schedule]
    def schedule(self) -> RoundPlan:
        """One request at a time: its whole prompt in one round, then one decode token per round."""
        if not self.running and self.waiting and self.can_admit(self.waiting[0]):
            self.admit(self.waiting[0])
        if not self.running:
            return RoundPlan(self.round_id, ())
        req = self.running[0]
        if req.prefill_done:
            seq = self.plan_decode(req)
        else:
            seq = self.plan_prefill(req, req.prompt_len - req.num_computed)
        return RoundPlan(self.round_id, (seq,))
    # --8<-- [end:schedule]

    # --8<-- [start:launch_round]
    def launch(self, plan: RoundPlan) -> object:
        """Mark the plan's requests as in flight and hand the plan to the runner."""
        for seq in plan.seqs:
            req = self.requests[seq.request_id]
            req.rounds_in_flight += 1
            req.samples_in_flight += int(seq.sample)
        handle = self.runner.launch(plan)
        self.trace.emit(self.round_id, "launch", None, round=plan.round_id,
                        requests=[s.request_id for s in plan.seqs], tokens=plan.num_tokens)
        return handle
    # --8<-- [end:launch_round]

    # --8<-- [start:admit]
    def reserved_kv(self) -> int:
        """KV slots that admitted requests may still take (their worst case minus what they hold)."""
        return sum(r.max_cache_tokens() - len(r.kv_slots) for r in self.running)

    def can_admit(self, req: Request) -> bool:
        """True if the request's worst case fits the unreserved KV slots and a state slot is free."""
        kv_ok = self.kv_pool.num_free - self.reserved_kv() >= req.max_cache_tokens()
        state_ok = self.state_pool is None or self.state_pool.num_free > 0
        return kv_ok and state_ok

    def admit(self, req: Request) -> None:
        """Move a waiting request to running; it takes a state slot now and KV slots per token."""
        self.waiting.remove(req)
        if self.state_pool is not None:
            req.state_slot = self.state_pool.allocate(1)[0]
        req.status = RequestStatus.RUNNING
        self.running.append(req)
    # --8<-- [end:admit]

    # --8<-- [start:plan]
    # --8<-- [start:plan_prefill]
    def plan_prefill(self, req: Request, n: int) -> SeqPlan:
        """The next ``n`` prompt tokens; the chunk that ends the prompt also samples."""
        start = req.num_computed
        tokens = req.prompt_token_ids[start : start + n]
        return self._plan(req, "prefill", tokens, sample=start + n == req.prompt_len)
    # --8<-- [end:plan_prefill]

    # --8<-- [start:plan_decode]
    def plan_decode(self, req: Request, budget: int | None = None) -> SeqPlan:
        """One token: the last output, or the still-unread token of the round in flight.

        With speculative decoding the round also verifies ``spec_width`` draft positions after it.
        """
        token = IN_FLIGHT if req.samples_in_flight else req.output_token_ids[-1]
        width = self.decode_width(req, budget) if self.spec_width else 0
        return self._plan(req, "decode", (token,), sample=True, spec_width=width)
    # --8<-- [end:plan_decode]

    # --8<-- [start:decode_width]
    def decode_width(self, req: Request, budget: int | None) -> int:
        """Draft positions this round: ``spec_width``, cut so the verify fits the round's token budget
        and the group (accepted drafts + 1) cannot pass ``max_new_tokens``. The cut keeps every
        position inside the request's reservation (prompt + max_new_tokens)."""
        left = req.params.max_new_tokens - len(req.output_token_ids)
        width = min(self.spec_width, left - 1)
        if budget is not None:
            width = min(width, budget - 1)
        return max(width, 0)
    # --8<-- [end:decode_width]

    def _plan(self, req: Request, kind: str, tokens: tuple, sample: bool, spec_width: int = 0) -> SeqPlan:
        start = req.num_computed
        new_slots = self.kv_pool.allocate(len(tokens) + spec_width)
        req.kv_slots.extend(new_slots)
        req.num_computed += len(new_slots)
        outputs_so_far = len(req.output_token_ids) + req.samples_in_flight
        # draft tokens are proposed inside the runner; the trace shows them as "?" until verified
        self.trace.emit(self.round_id, "schedule", req.request_id, phase=kind,
                        inputs=list(tokens) + [None] * spec_width, start_pos=start, slots=new_slots)
        return SeqPlan(req.request_id, kind, tuple(tokens), start, tuple(new_slots), tuple(req.kv_slots),
                       req.state_slot, sample, req.params, outputs_so_far, spec_width=spec_width)
    # --8<-- [end:plan]

    # --8<-- [start:rollback]
    def rollback(self, req: Request) -> None:
        """After a speculative round: keep the KV slots of the committed prefix only.

        The cache must hold ``prompt + output[:-1]``; the slots of rejected draft positions go back
        to the pool. Their stale keys and values are harmless: a slot is written before it is read.
        """
        keep = req.prompt_len + len(req.output_token_ids) - 1
        if keep >= req.num_computed:
            return
        freed, req.kv_slots = req.kv_slots[keep:], req.kv_slots[:keep]
        req.num_computed = keep
        self.kv_pool.free(freed)
        self.trace.emit(self.round_id, "rollback", req.request_id, slots=freed, kept=keep)
    # --8<-- [end:rollback]

    # --8<-- [start:cancel]
    def cancel(self, request_id: str) -> bool:
        """Stop a request now. Returns False if it had already finished.

        Its slots come back at once if no launched round uses them, else when that round is read.
        """
        req = self.requests.get(request_id)
        if req is None:
            raise ValueError(f"cannot cancel {request_id!r}: no such request")
        if req.finished:
            return False
        self.finish(req, FinishReason.CANCELLED)
        self.release_if_idle(req)
        return True
    # --8<-- [end:cancel]

    # --8<-- [start:finish_release]
    def finish(self, req: Request, reason: FinishReason) -> None:
        """Mark a request finished; it is scheduled no more."""
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        req.finished_at = time.perf_counter()
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.running:
            self.running.remove(req)
        self.trace.emit(self.round_id, "finish", req.request_id, reason=reason.value)

    def release_if_idle(self, req: Request) -> None:
        """Return a finished request's slots, but only once no launched round reads or writes them."""
        if not req.finished or req.rounds_in_flight > 0 or req.slots_released:
            return
        req.slots_released = True
        slots, req.kv_slots = req.kv_slots, []
        self.kv_pool.free(slots)
        state_slot, req.state_slot = req.state_slot, None
        if state_slot is not None:
            self.state_pool.free([state_slot])
        release = getattr(self.runner, "release", None)
        if release is not None:
            release(req.request_id)
        if slots or state_slot is not None:
            self.trace.emit(self.round_id, "free", req.request_id, slots=slots, state_slot=state_slot,
                            free=self.kv_pool.num_free, capacity=self.kv_pool.capacity)
    # --8<-- [end:finish_release]

    # --8<-- [start:abandon]
    def abandon_in_flight(self, exc: Exception) -> list[Delivery]:
        """After a runner failure: finish every request with launched, unread work as ``error``.

        Their tokens in flight are never read and their slots return at once, since no round that
        uses them will be read. Requests with nothing in flight are untouched and keep running.
        """
        if self.pipeline is not None:
            self.pipeline.pending = None
        message = f"{type(exc).__name__}: {exc}"
        self.trace.emit(self.round_id, "error", None, error=message)
        failed = [r for r in self.requests.values() if r.rounds_in_flight > 0]
        for req in failed:
            req.rounds_in_flight = req.samples_in_flight = 0
            if not req.finished:
                req.error = message
                self.finish(req, FinishReason.ERROR)
            self.release_if_idle(req)
        return [Delivery(r.request_id, (), FinishReason.ERROR) for r in failed if r.error == message]
    # --8<-- [end:abandon]

    def has_unfinished(self) -> bool:
        """True while any request is waiting or running, or a launched round is still unread."""
        pending = self.pipeline is not None and self.pipeline.pending is not None
        return bool(self.waiting or self.running or pending)

    def run(self, max_rounds: int = 1_000_000) -> None:
        """Step until every request has finished and every round has been read."""
        while self.has_unfinished():
            if self.round_id >= max_rounds:
                raise RuntimeError(f"engine still busy after {max_rounds} rounds")
            self.step()
