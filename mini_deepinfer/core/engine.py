"""The engine: one loop that organises rounds (schedule, launch, read, commit).

Scope: submitting and cancelling requests,
admitting them into the cache (KV slots per token, one state slot per request), the ``step()`` loop, the
simplest schedule (one request at a time, whole prompt first, then one decode token per round), and what
follows a read: committing each request's tokens (the rules are ``commit.py``'s), finishing, giving back the
KV slots and state slot of a finished request, and, with ``config.prefix_cache``, reusing the cached blocks
of a prompt that starts like an earlier one (``prefix_cache.py``). ``BatchEngine`` (``batch.py``) replaces
only ``schedule()``; cross-round execution (``pipeline.py``) changes only *when* a launched round is read;
the speculative engines (``speculative.py``) replace only how a decode is planned and what follows its commit.
Non-scope: tensors (runners), the numbers themselves (``config.py``). This module imports nothing outside the
standard library.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import replace

from .commit import Delivery, commit_tokens
from .config import MAX_SPEC_WIDTH, EngineConfig
from .pipeline import StoppingDecodePipeline
from .plan import IN_FLIGHT, RoundPlan, RoundResult, SeqPlan
from .prefix_cache import Hit, PrefixCache
from .request import FinishReason, Request, RequestStatus, SamplingParams, validate_prompt
from .runner import Runner
from .slots import SlotPool
from .trace import Trace

__all__ = ["MAX_SPEC_WIDTH", "Engine", "EngineConfig"]  # the numbers are config.py's, named here as before


class Engine:
    """Runs requests through a runner, one round per ``step()``; one request at a time.

    Args:
        runner: turns round plans into sampled tokens (the toy runner, or a model runner).
        config: capacities and modes (``max_num_seqs``, ``max_batched_tokens`` and ``chunked_prefill`` are
            ``BatchEngine``'s; this schedule runs one request at a time, its whole prompt in one round).
        trace: where trace events go (a new one by default).
    """

    def __init__(self, runner: Runner, config: EngineConfig, trace: Trace | None = None) -> None:
        self.runner = runner
        self.config = config
        self.kv_pool = SlotPool(config.kv_capacity, "kv")
        self.state_pool = SlotPool(config.state_capacity, "state") if config.state_capacity else None
        self.prefix_cache = None
        if config.prefix_cache:
            snapshots = SlotPool(config.prefix_snapshots, "snapshot") if config.prefix_snapshots else None
            self.prefix_cache = PrefixCache(self.kv_pool, snapshots, config.prefix_block)
        self.pipeline = StoppingDecodePipeline() if config.pipeline else None
        self.trace = trace if trace is not None else Trace()
        self.requests: dict[str, Request] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.round_id = 0

    # --8<-- [start:submit]
    def submit(self, request_id: str, prompt_token_ids: list[int],
               params: SamplingParams | None = None) -> Request:
        """Queue a request. Raises ValueError for input the engine can never serve."""
        return self.add(self.new_request(request_id, prompt_token_ids, params))

    def new_request(self, request_id: str, prompt_token_ids: list[int],
                    params: SamplingParams | None = None) -> Request:
        """Check a request against this engine without queueing it (``add`` queues it later)."""
        req = Request(request_id, validate_prompt(request_id, prompt_token_ids), params or SamplingParams())
        self.check_fits(req)
        return req

    def add(self, req: Request) -> Request:
        """Queue a request made by ``new_request``; it is scheduled from the next round on."""
        if req.request_id in self.requests:
            raise ValueError(f"{req.request_id}: a request with this id was already submitted")
        req.arrival_round = self.round_id + 1
        self.requests[req.request_id] = req
        self.trace.emit(self.round_id, "submit", req.request_id, prompt=list(req.prompt_token_ids),
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
        return self.commit_round(done_plan, result)
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
        """True if the request's worst case fits the unreserved KV slots and a state slot is free.

        With a prefix cache the reused prompt tokens need no new slots, and cached blocks that no request
        holds are evicted (least recently used first) when that makes the request fit.
        """
        hit = self.prefix_hit(req)
        need = req.max_cache_tokens() - hit.length
        def kv_ok() -> bool:
            return self.kv_pool.num_free - self.reserved_kv() >= need
        if not kv_ok() and self.prefix_cache is not None:
            self.prefix_cache.evict_until(kv_ok, keep=hit.blocks)
        state_ok = self.state_pool is None or self.state_pool.num_free > 0
        return kv_ok() and state_ok

    def admit(self, req: Request) -> None:
        """Move a waiting request to running; it takes a state slot now and KV slots per token."""
        self.waiting.remove(req)
        if self.state_pool is not None:
            req.state_slot = self.state_pool.allocate(1)[0]
        if self.prefix_cache is not None:
            self.reuse_prefix(req)
        req.status = RequestStatus.RUNNING
        self.running.append(req)
    # --8<-- [end:admit]

    # --8<-- [start:prefix]
    def prefix_hit(self, req: Request) -> Hit:
        """What a waiting request would reuse from the prefix cache (nothing without one)."""
        return self.prefix_cache.match(req.prompt_token_ids) if self.prefix_cache is not None else Hit()

    def reuse_prefix(self, req: Request) -> None:
        """Start the request after its cached prompt tokens: their KV slots become its first slots."""
        hit = self.prefix_cache.acquire(req.request_id, req.prompt_token_ids)
        req.kv_slots = hit.slots
        req.num_computed = req.cached_prompt_tokens = hit.length
        if hit.length:
            self.trace.emit(self.round_id, "reuse", req.request_id, tokens=hit.length, blocks=len(hit.blocks),
                            snapshot=hit.snapshot)

    def prefix_states(self, req: Request, seq: SeqPlan) -> SeqPlan:
        """A prefill chunk's state copies: start from the reused prefix's snapshot (first chunk after a
        hit), and keep the state at each block end and at the prompt's end that the chunk computes."""
        cache, end = self.prefix_cache, seq.start_pos + seq.num_tokens
        first = seq.start_pos == req.cached_prompt_tokens
        restore = cache.holds[req.request_id].hit.snapshot if first else None
        saves = cache.save_points(req.request_id, seq.start_pos, end, req.prompt_len)
        if restore is not None or saves:
            self.trace.emit(self.round_id, "snapshot", req.request_id, restore=restore,
                            saves=[f"{p}->{slot}" for p, slot in saves])
        return replace(seq, restore=restore, saves=saves)

    def index_prompt(self, req: Request, seq: SeqPlan) -> None:
        """After a prefill chunk is read: index the prompt blocks it completed (they are computed now)."""
        if self.prefix_cache is not None and seq.kind == "prefill":
            self.prefix_cache.insert(req.request_id, req.prompt_token_ids, req.kv_slots,
                                     seq.start_pos + seq.num_tokens)

    def clear_prefix_cache(self) -> None:
        """Evict every cached block that no request holds (with nothing running, free == capacity after)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()
    # --8<-- [end:prefix]

    # --8<-- [start:plan]
    # --8<-- [start:plan_prefill]
    def plan_prefill(self, req: Request, n: int) -> SeqPlan:
        """The next ``n`` prompt tokens; the chunk that ends the prompt also samples."""
        start = req.num_computed
        tokens = req.prompt_token_ids[start : start + n]
        seq = self._plan(req, "prefill", tokens, sample=start + n == req.prompt_len)
        return seq if self.prefix_cache is None else self.prefix_states(req, seq)
    # --8<-- [end:plan_prefill]

    # --8<-- [start:plan_decode]
    def plan_decode(self, req: Request, budget: int | None = None) -> SeqPlan:
        """One token: the last output, or the still-unread token of the round in flight.

        ``budget`` is what is left of the round's tokens; one token always fits (``BatchEngine`` checks).
        """
        token = IN_FLIGHT if req.samples_in_flight else req.output_token_ids[-1]
        return self._plan(req, "decode", (token,), sample=True)
    # --8<-- [end:plan_decode]

    def _plan(self, req: Request, kind: str, tokens: tuple, sample: bool) -> SeqPlan:
        start, new_slots = req.num_computed, self.take_slots(req, len(tokens))
        self.trace.emit(self.round_id, "schedule", req.request_id, phase=kind, inputs=list(tokens),
                        start_pos=start, slots=new_slots)
        return SeqPlan(request_id=req.request_id, kind=kind, token_ids=tuple(tokens), start_pos=start,
                       new_slots=tuple(new_slots), context_slots=tuple(req.kv_slots),
                       state_slot=req.state_slot, sample=sample, params=req.params)
    # --8<-- [end:plan]

    def take_slots(self, req: Request, n: int) -> list[int]:
        """Give the request ``n`` more KV slots, for its next ``n`` positions."""
        new_slots = self.kv_pool.allocate(n)
        req.kv_slots.extend(new_slots)
        req.num_computed += n
        return new_slots

    # --8<-- [start:commit_round]
    def commit_round(self, plan: RoundPlan, result: RoundResult) -> list[Delivery]:
        """Process one round that the CPU has just read. Returns what each request delivered."""
        deliveries: list[Delivery] = []
        for seq in plan.seqs:
            req = self.requests[seq.request_id]
            req.rounds_in_flight -= 1
            if seq.sample:
                req.samples_in_flight -= 1
                tokens = result.tokens.get(seq.request_id, [])
                if req.finished:  # it stopped in an earlier round (or was cancelled): this work is stale
                    self.trace.emit(self.round_id, "discard", req.request_id, tokens=tokens,
                                    round=plan.round_id, why=f"already finished: {req.finish_reason.value}")
                else:
                    deliveries.append(self.commit_sampled(plan.round_id, seq, result))
            self.index_prompt(req, seq)
            self.release_if_idle(req)
        return deliveries
    # --8<-- [end:commit_round]

    def commit_sampled(self, round_id: int, seq: SeqPlan, result: RoundResult) -> Delivery:
        """Commit the tokens one request sampled in round ``round_id``; finish it if they stop it."""
        req = self.requests[seq.request_id]
        kept, dropped, reason = commit_tokens(req, result.tokens.get(seq.request_id, []))
        if kept:
            if req.first_token_at is None:
                req.first_token_at = time.perf_counter()
            req.committed_groups.append(list(kept))
            self.trace.emit(self.round_id, "commit", req.request_id, tokens=kept, round=round_id,
                            output=list(req.output_token_ids))
        if dropped:
            self.trace.emit(self.round_id, "discard", req.request_id, tokens=dropped, round=round_id,
                            why=f"after {reason.value}")
        if reason is not None:
            self.finish(req, reason)
        return Delivery(req.request_id, tuple(kept), reason)

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
        if self.prefix_cache is not None:
            self.prefix_cache.release(req.request_id)
        self.runner.release(req.request_id)
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
            self.pipeline.drop()
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
        in_flight = self.pipeline is not None and self.pipeline.in_flight
        return bool(self.waiting or self.running or in_flight)

    def run(self, max_rounds: int = 1_000_000) -> None:
        """Step until every request has finished and every round has been read."""
        while self.has_unfinished():
            if self.round_id >= max_rounds:
                raise RuntimeError(f"engine still busy after {max_rounds} rounds")
            self.step()
