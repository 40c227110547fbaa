"""Stops across rounds: what a cross-round ``BatchEngine`` discards, and when it gives slots back.

Every combination of stop kind (eos, length, cancel) x where the stop comes from (the token sampled by
the prefill, or a token sampled by a decode) x the stopped request's place in the batch (first, middle,
last), with the toy runner ("next = last input + 1"), three requests submitted together, and
``BatchEngine(pipeline=True)``. For eos and length, the stop token is sampled in round S and read in
round S+1, after round S+1 (which decodes the request once more) was launched. A cancel arrives between
rounds, while the round that samples the request's next token is in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from mini_deepinfer import IN_FLIGHT, Engine, FinishReason, SamplingParams, ToyRunner
from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.core.trace import TraceEvent

PROMPTS = {"r0": [10, 11, 12], "r1": [20, 21], "r2": [30, 31, 32, 33]}
POSITIONS = {"first": "r0", "middle": "r1", "last": "r2"}
OTHERS_MAX_NEW = 6
CAPACITY = 64
# After which round a cancel arrives: round 1 (the prefill that samples the first token) or round 3
# (a decode) is then in flight.
CANCEL_AFTER_ROUND = {"prefill": 1, "decode": 3}
KINDS = ["eos", "length", "cancel"]
PHASES = ["prefill", "decode"]


def victim_params(kind: str, phase: str, prompt: list[int]) -> SamplingParams:
    """Parameters that stop the request on its first token (prefill) or its third (decode)."""
    nth = 1 if phase == "prefill" else 3
    if kind == "length":
        return SamplingParams(max_new_tokens=nth)
    if kind == "eos":
        return SamplingParams(max_new_tokens=OTHERS_MAX_NEW, eos_token_ids=(prompt[-1] + nth,))
    return SamplingParams(max_new_tokens=OTHERS_MAX_NEW)


def expected_output(kind: str, phase: str, prompt: list[int]) -> list[int]:
    """What the stopped request keeps: tokens up to the stop; for cancel, what was read before it."""
    kept = {"prefill": 1, "decode": 3} if kind != "cancel" else {"prefill": 0, "decode": 2}
    return [prompt[-1] + i for i in range(1, kept[phase] + 1)]


@dataclass
class Run:
    """A finished run and what the stopped request looked like after every step."""

    engine: BatchEngine
    victim: str
    held_after_step: dict[int, list[int]] = field(default_factory=dict)  # round -> victim's KV slots

    def events(self, kind: str, request_id: str | None = None) -> list[TraceEvent]:
        return [e for e in self.engine.trace.events
                if e.kind == kind and (request_id is None or e.request_id == request_id)]

    def index(self, event: TraceEvent) -> int:
        return self.engine.trace.events.index(event)


def run(kind: str, phase: str, position: str) -> Run:
    victim = POSITIONS[position]
    engine = BatchEngine(ToyRunner(), EngineConfig(kv_capacity=CAPACITY, state_capacity=3, max_num_seqs=3,
                                                   max_batched_tokens=16, pipeline=True))
    for rid, prompt in PROMPTS.items():
        params = victim_params(kind, phase, prompt) if rid == victim else SamplingParams(OTHERS_MAX_NEW)
        engine.submit(rid, prompt, params)
    result = Run(engine, victim)
    while engine.has_unfinished():
        engine.step()
        if kind == "cancel" and engine.round_id == CANCEL_AFTER_ROUND[phase]:
            assert engine.cancel(victim)
        result.held_after_step[engine.round_id] = list(engine.requests[victim].kv_slots)
        assert engine.round_id < 100, "no progress"
    return result


def alone(rid: str) -> list[int]:
    """The request alone in a synchronous one-at-a-time engine: the reference output."""
    engine = Engine(ToyRunner(), EngineConfig(kv_capacity=CAPACITY))
    engine.submit(rid, PROMPTS[rid], SamplingParams(OTHERS_MAX_NEW))
    engine.run()
    return engine.requests[rid].output_token_ids


COMBINATIONS = pytest.mark.parametrize(
    "kind, phase, position", [(k, ph, pos) for k in KINDS for ph in PHASES for pos in POSITIONS])


@COMBINATIONS
def test_a_stopped_request_keeps_its_tokens_up_to_the_stop_and_the_in_flight_one_is_discarded(
        kind, phase, position):
    r = run(kind, phase, position)
    req = r.engine.requests[r.victim]
    assert req.output_token_ids == expected_output(kind, phase, PROMPTS[r.victim])
    assert req.finish_reason is FinishReason(kind if kind != "cancel" else "cancelled")
    [discard] = r.events("discard", r.victim)
    last_input = (list(PROMPTS[r.victim]) + req.output_token_ids)[-1]
    assert discard.data["tokens"] == [last_input + 1]  # the token of the round already in flight
    assert discard.data["why"] == f"already finished: {req.finish_reason.value}"
    assert discard.data["round"] == r.events("schedule", r.victim)[-1].round_id


@COMBINATIONS
def test_slots_of_a_stopped_request_return_right_after_its_last_launched_round_is_read_never_before(
        kind, phase, position):
    r = run(kind, phase, position)
    last_round = r.events("schedule", r.victim)[-1].round_id
    [read] = [e for e in r.events("read") if e.data["round"] == last_round]
    [discard] = r.events("discard", r.victim)
    [free] = r.events("free", r.victim)
    assert free.round_id == read.round_id == last_round + 1
    assert r.index(read) < r.index(discard) < r.index(free)
    for round_id, held in r.held_after_step.items():
        assert bool(held) == (round_id < free.round_id), f"after round {round_id}"
    victim_slots = set(free.data["slots"])
    for event in r.events("schedule"):  # nobody else is handed one of them before they come back
        if event.request_id != r.victim and r.index(event) < r.index(free):
            assert not victim_slots & set(event.data["slots"])
    assert free.data["state_slot"] is not None


@pytest.mark.parametrize("kind", ["eos", "length"])
@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("position", list(POSITIONS))
def test_a_sampled_stop_is_seen_one_round_late_after_the_request_was_launched_once_more(
        kind, phase, position):
    r = run(kind, phase, position)
    [finish] = r.events("finish", r.victim)
    last_commit = r.events("commit", r.victim)[-1]
    stop_round = last_commit.data["round"]  # the round that sampled the stop token
    assert finish.round_id == last_commit.round_id == stop_round + 1
    extra = r.events("schedule", r.victim)[-1]
    assert extra.round_id == stop_round + 1
    assert extra.data["phase"] == "decode" and extra.data["inputs"] == [IN_FLIGHT]
    assert r.index(extra) < r.index(finish)  # launched before the stop was read


@COMBINATIONS
def test_requests_beside_a_stopped_one_commit_what_they_commit_alone(kind, phase, position):
    r = run(kind, phase, position)
    for rid in PROMPTS:
        if rid != r.victim:
            req = r.engine.requests[rid]
            assert req.output_token_ids == alone(rid)
            assert req.finish_reason is FinishReason.LENGTH


@COMBINATIONS
def test_every_kv_and_state_slot_is_free_once_nothing_runs(kind, phase, position):
    r = run(kind, phase, position)
    assert not r.engine.pipeline.in_flight
    assert r.engine.kv_pool.num_free == CAPACITY
    assert r.engine.state_pool.num_free == 3
    assert all(req.slots_released and req.rounds_in_flight == 0 for req in r.engine.requests.values())
