"""BatchEngine with the toy runner: budget, chunking, waiting for slots, and the one-at-a-time oracle."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mini_deepinfer import Engine, FinishReason, SamplingParams, ToyRunner
from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.engine import EngineConfig


def oracle_outputs(prompt: list[int], params: SamplingParams) -> list[int]:
    """The request run alone through the one-at-a-time Engine."""
    engine = Engine(ToyRunner(), EngineConfig(kv_capacity=len(prompt) + params.max_new_tokens))
    engine.submit("x", prompt, params)
    engine.run()
    return engine.requests["x"].output_token_ids


def test_decodes_are_scheduled_before_prefills_and_budget_is_respected():
    engine = BatchEngine(ToyRunner(), EngineConfig(kv_capacity=64, max_num_seqs=4, max_batched_tokens=3,
                                                   chunked_prefill=True))
    engine.submit("a", [1], SamplingParams(max_new_tokens=4))
    engine.step()  # a prefills
    engine.submit("b", [10, 11, 12, 13, 14], SamplingParams(max_new_tokens=2))
    engine.step()
    scheduled = engine.trace.of_kind("schedule")[-2:]
    assert [(e.request_id, e.data["phase"], len(e.data["inputs"])) for e in scheduled] == [
        ("a", "decode", 1), ("b", "prefill", 2)]


def test_prompt_waits_for_a_round_where_it_fits_without_chunking():
    engine = BatchEngine(ToyRunner(), EngineConfig(kv_capacity=64, max_num_seqs=4, max_batched_tokens=4,
                                                   chunked_prefill=False))
    engine.submit("a", [1, 2, 3], SamplingParams(max_new_tokens=3))
    engine.submit("b", [5, 6, 7, 8], SamplingParams(max_new_tokens=1))
    engine.step()
    assert [e.request_id for e in engine.trace.of_kind("schedule")] == ["a"]  # 3 + 4 > 4: b waits
    engine.run()
    assert engine.requests["b"].output_token_ids == [9]


def test_prompt_longer_than_budget_without_chunking_is_refused_at_submit():
    engine = BatchEngine(ToyRunner(), EngineConfig(kv_capacity=64, max_batched_tokens=4,
                                                   chunked_prefill=False))
    with pytest.raises(ValueError, match="never fits the budget of 4 tokens"):
        engine.submit("a", [1, 2, 3, 4, 5], SamplingParams(max_new_tokens=1))


def test_request_waits_for_slots_and_takes_the_ones_a_finished_request_released():
    engine = BatchEngine(ToyRunner(), EngineConfig(kv_capacity=6, max_num_seqs=4, max_batched_tokens=16))
    engine.submit("b", [1, 2], SamplingParams(max_new_tokens=2))  # reserves 4 of 6 slots
    engine.submit("c", [7, 8], SamplingParams(max_new_tokens=2))  # needs 4: waits
    engine.step()
    assert engine.requests["c"].status.value == "waiting"
    engine.run()
    c_slots = [e for e in engine.trace.of_kind("schedule") if e.request_id == "c"][0].data["slots"]
    b_first = [e for e in engine.trace.of_kind("schedule") if e.request_id == "b"][0].data["slots"]
    assert set(c_slots) <= set(b_first) | {2, 3}
    assert engine.requests["c"].output_token_ids == [9, 10]


def test_max_num_seqs_limits_admitted_requests():
    engine = BatchEngine(ToyRunner(), EngineConfig(kv_capacity=64, max_num_seqs=2, max_batched_tokens=64))
    for i in range(4):
        engine.submit(f"r{i}", [i * 10], SamplingParams(max_new_tokens=3))
    engine.step()
    assert len(engine.running) == 2


requests_strategy = st.lists(
    st.tuples(
        st.integers(0, 6),  # arrival round
        st.integers(1, 12),  # prompt length
        st.integers(0, 6),  # max_new_tokens
        st.one_of(st.none(), st.integers(1, 6)),  # eos offset: the eos token is the n-th output
        st.one_of(st.none(), st.integers(1, 25)),  # cancel after this round
    ),
    min_size=1, max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reqs=requests_strategy, budget=st.integers(1, 16), max_num_seqs=st.integers(1, 4),
       chunked=st.booleans(), pipeline=st.booleans(), spare_slots=st.integers(0, 20))
def test_batching_keeps_budget_returns_every_slot_and_matches_the_one_at_a_time_oracle(
        reqs, budget, max_num_seqs, chunked, pipeline, spare_slots):
    if not chunked:
        budget = max(budget, max(r[1] for r in reqs))  # otherwise the prompt is refused at submit
    capacity = max(r[1] + r[2] for r in reqs) + spare_slots
    runner = ToyRunner()
    engine = BatchEngine(runner, EngineConfig(kv_capacity=capacity, state_capacity=max_num_seqs,
                                              max_num_seqs=max_num_seqs, max_batched_tokens=budget,
                                              chunked_prefill=chunked, pipeline=pipeline))
    params, cancels = {}, {}
    pending = sorted(enumerate(reqs), key=lambda x: x[1][0])
    while pending or engine.has_unfinished():
        while pending and pending[0][1][0] <= engine.round_id:
            i, (_, plen, max_new, eos_at, cancel_at) = pending.pop(0)
            prompt = list(range(100 * i, 100 * i + plen))
            eos = (prompt[-1] + eos_at,) if eos_at else ()
            params[f"r{i}"] = (prompt, SamplingParams(max_new_tokens=max_new, eos_token_ids=eos))
            engine.submit(f"r{i}", prompt, params[f"r{i}"][1])
            if cancel_at is not None:
                cancels[f"r{i}"] = engine.round_id + cancel_at
        engine.step()
        plan_tokens = sum(len(e.data["inputs"]) for e in engine.trace.of_kind("schedule")
                          if e.round_id == engine.round_id)
        assert plan_tokens <= budget
        assert len(engine.running) <= max_num_seqs
        for rid, at in cancels.items():
            if at == engine.round_id:
                engine.cancel(rid)
        for req in engine.running:  # the cache holds exactly the committed prefix (synchronous)
            if not pipeline and req.prefill_done:
                committed_prefix = list(req.prompt_token_ids) + req.output_token_ids[:-1]
                assert runner.cached_tokens(req.kv_slots) == committed_prefix
        assert engine.round_id < 500, "no progress"
    assert engine.kv_pool.num_free == capacity
    assert engine.state_pool.num_free == max_num_seqs
    for rid, (prompt, p) in params.items():
        req = engine.requests[rid]
        assert req.finished and req.slots_released
        expected = oracle_outputs(prompt, p)
        if req.finish_reason is FinishReason.CANCELLED:
            assert req.output_token_ids == expected[: len(req.output_token_ids)]
        else:
            assert req.output_token_ids == expected
