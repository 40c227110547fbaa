"""Soak: 500 requests with random lengths, arrivals and cancellations through cross-round execution
with chunked prefill; the invariants of the design are checked after every round."""

from __future__ import annotations

import random

import pytest

from mini_deepinfer import FinishReason, SamplingParams, ToyRunner
from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.engine import EngineConfig

CAPACITY, STATES, BUDGET = 96, 6, 12


def check_invariants(engine, runner) -> None:
    held = sum(len(r.kv_slots) for r in engine.requests.values() if not r.slots_released)
    assert engine.kv_pool.num_free + held == CAPACITY, "each KV slot is free or held by one request"
    states = sum(r.state_slot is not None for r in engine.requests.values())
    assert engine.state_pool.num_free + states == STATES
    # by identity: a Request is a dataclass, whose == compares every field (a list's `in` would, per request)
    queued = {id(req) for req in (*engine.running, *engine.waiting)}
    for req in engine.requests.values():
        if req.slots_released:
            assert req.finished and req.rounds_in_flight == 0
        if req.finished:
            assert id(req) not in queued, "a finished request is neither running nor waiting"
        committed = list(req.prompt_token_ids) + req.output_token_ids[:-1]
        if req.prefill_done and not req.slots_released and req.output_token_ids:
            cached = runner.cached_tokens(req.kv_slots[: len(committed)])
            assert cached == committed, "the cache holds prompt + committed outputs except the last"
        assert len(req.output_token_ids) <= req.params.max_new_tokens


@pytest.mark.slow
def test_soak_500_requests_cross_round_chunked_with_cancellations_keeps_every_invariant():
    rng = random.Random(20261129)
    runner = ToyRunner()
    engine = BatchEngine(runner, EngineConfig(kv_capacity=CAPACITY, state_capacity=STATES,
                                              max_num_seqs=STATES, max_batched_tokens=BUDGET,
                                              chunked_prefill=True, pipeline=True))
    arrivals = sorted((rng.randrange(0, 1500), i) for i in range(500))
    cancels: dict[int, list[str]] = {}
    rounds = 0
    while arrivals or engine.has_unfinished():
        while arrivals and arrivals[0][0] <= engine.round_id:
            _, i = arrivals.pop(0)
            prompt = [rng.randrange(0, 1000) for _ in range(rng.randint(1, 40))]
            eos = (prompt[-1] + rng.randint(1, 30),)
            params = SamplingParams(max_new_tokens=rng.randint(0, 30), eos_token_ids=eos)
            engine.submit(f"r{i}", prompt, params)
            if rng.random() < 0.2:
                cancels.setdefault(engine.round_id + rng.randint(0, 20), []).append(f"r{i}")
        seen = len(engine.trace.events)
        engine.step()
        scheduled = sum(len(e.data["inputs"]) for e in engine.trace.events[seen:]  # this step's events
                        if e.kind == "schedule" and e.round_id == engine.round_id)
        assert scheduled <= BUDGET
        for rid in cancels.pop(engine.round_id, []):
            engine.cancel(rid)
        check_invariants(engine, runner)
        rounds += 1
        assert rounds < 20_000
    assert engine.kv_pool.num_free == CAPACITY and engine.state_pool.num_free == STATES
    reasons = {r.finish_reason for r in engine.requests.values()}
    assert reasons == {FinishReason.LENGTH, FinishReason.EOS, FinishReason.CANCELLED}
    assert len(engine.requests) == 500
