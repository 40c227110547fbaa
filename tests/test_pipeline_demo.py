"""The A/B/C demo (``python -m mini_deepinfer.pipeline_demo``): its story, checked as invariants.

A's long prompt is chunked over several rounds and no round exceeds the budget; B finishes first; C waits at
least one round and then runs in the KV slots and the state slot B gave back; every slot is free at the end;
each request gets the greedy tokens it gets alone. Both synchronous and cross-round execution are checked.
With ``--toy`` (lesson 1's toy runner, no torch) every round is the same; only the token ids differ.
"""

from __future__ import annotations

import re

import pytest
import torch

from mini_deepinfer import SamplingParams
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.pipeline_demo import DEMO_REQUESTS, DemoOptions, demo_model, main, run_demo
from mini_deepinfer.runtime.factory import build_engine


@pytest.fixture(scope="module")
def model():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the command does; a model this small is fastest on one thread
    yield demo_model()
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=[False, True], ids=["synchronous", "cross_round"])
def demo(request, model):
    options = DemoOptions(pipeline=request.param)
    lines: list[str] = []
    engine = run_demo(options, lines.append, model=model)
    return options, engine, lines


@pytest.fixture(scope="module")
def alone(model) -> dict[str, list[int]]:
    """Each demo request run by itself through the one-at-a-time Engine."""
    outputs = {}
    for demo_req in DEMO_REQUESTS:
        capacity = len(demo_req.prompt) + demo_req.max_new_tokens
        engine = build_engine(model, EngineConfig(kv_capacity=capacity), batching=False)
        engine.submit("x", list(demo_req.prompt), SamplingParams(max_new_tokens=demo_req.max_new_tokens))
        engine.run()
        outputs[demo_req.request_id] = engine.requests["x"].output_token_ids
    return outputs


def schedules(engine, request_id: str):
    return [e for e in engine.trace.of_kind("schedule") if e.request_id == request_id]


def test_a_is_prefilled_in_chunks_over_several_rounds_within_the_budget(demo):
    options, engine, _ = demo
    chunks = [e for e in schedules(engine, "A") if e.data["phase"] == "prefill"]
    assert len({e.round_id for e in chunks}) >= 2
    assert all(len(e.data["inputs"]) <= options.max_batched_tokens for e in chunks)
    assert [t for e in chunks for t in e.data["inputs"]] == list(engine.requests["A"].prompt_token_ids)
    starts = [e.data["start_pos"] for e in chunks]
    assert starts == [sum(len(e.data["inputs"]) for e in chunks[:i]) for i in range(len(chunks))]


def test_b_decodes_while_a_is_still_being_prefilled(demo):
    _, engine, _ = demo
    a_prefill_rounds = {e.round_id for e in schedules(engine, "A") if e.data["phase"] == "prefill"}
    b_decode_rounds = {e.round_id for e in schedules(engine, "B") if e.data["phase"] == "decode"}
    assert a_prefill_rounds & b_decode_rounds


def test_no_round_schedules_more_tokens_than_the_budget(demo):
    options, engine, _ = demo
    per_round: dict[int, int] = {}
    for event in engine.trace.of_kind("schedule"):
        per_round[event.round_id] = per_round.get(event.round_id, 0) + len(event.data["inputs"])
    assert max(per_round.values()) <= options.max_batched_tokens


def test_b_finishes_first(demo):
    _, engine, _ = demo
    assert engine.trace.of_kind("finish")[0].request_id == "B"


def test_c_waits_at_least_one_round_then_takes_the_slots_b_released(demo):
    _, engine, lines = demo
    c = engine.requests["C"]
    c_first = schedules(engine, "C")[0]
    b_free = [e for e in engine.trace.of_kind("free") if e.request_id == "B"][0]
    assert c_first.round_id > c.arrival_round
    assert any(line.startswith(f"[round {c.arrival_round}] waiting  C needs") for line in lines)
    assert c_first.round_id > b_free.round_id
    assert set(c_first.data["slots"]) <= set(b_free.data["slots"])
    c_state_slot = [e for e in engine.trace.of_kind("free") if e.request_id == "C"][0].data["state_slot"]
    assert c_state_slot == b_free.data["state_slot"]


def test_every_kv_and_state_slot_is_free_at_the_end(demo):
    options, engine, lines = demo
    assert engine.kv_pool.num_free == engine.kv_pool.capacity == options.kv_slots
    assert engine.state_pool.num_free == engine.state_pool.capacity == options.max_num_seqs
    assert lines[-1] == f"Free slots: KV {options.kv_slots}/{options.kv_slots}, state 3/3"
    assert all(r.finished and r.slots_released for r in engine.requests.values())


def test_each_request_gets_the_tokens_it_gets_alone(demo, alone):
    _, engine, _ = demo
    assert {rid: r.output_token_ids for rid, r in engine.requests.items()} == alone
    assert all(r.finish_reason.value == "length" for r in engine.requests.values())


TOKEN_LISTS = re.compile(r"(?<!slots=)(?<!prompt=)\[[\d, ?]*\]")
"""A list of token ids in a demo line: every bracketed list but the slots and the prompts."""


def without_token_ids(line: str) -> str:
    return TOKEN_LISTS.sub(lambda m: f"<{len(m[0].split(','))} ids>", line)


@pytest.mark.parametrize("pipeline", [False, True], ids=["synchronous", "cross_round"])
def test_the_toy_runner_gets_the_same_rounds_as_the_model(model, pipeline):
    model_lines: list[str] = []
    toy_lines: list[str] = []
    run_demo(DemoOptions(pipeline=pipeline), model_lines.append, model=model)
    toy = run_demo(DemoOptions(pipeline=pipeline, toy=True), toy_lines.append)
    assert toy_lines[0].startswith("Toy runner") and model_lines[0].startswith("Random tiny Qwen3.5")
    assert len(toy_lines) == len(model_lines) > 40
    for toy_line, model_line in zip(toy_lines[1:], model_lines[1:]):
        assert without_token_ids(toy_line) == without_token_ids(model_line)
    assert toy.requests["B"].output_token_ids == [9, 10, 11, 12, 13]  # the toy's tokens: last input + 1
    b_prompt = next(d.prompt for d in DEMO_REQUESTS if d.request_id == "B")
    assert b_prompt[-1] + 1 == 9  # lesson 3: "B's prompt ends in 8, so its first token is 9"


def test_help_is_english_and_exits_0(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "--max-batched-tokens" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--kv-slots", "10"], "KV slots; the cache has 10"),
    (["--no-chunked-prefill"], "never fits the budget of 8 tokens"),
    (["--max-batched-tokens", "0"], "--max-batched-tokens must be an integer >= 1, got 0"),
    (["--max-num-seqs", "two"], "invalid int value"),
    (["--bogus"], "unrecognized arguments"),
])
def test_bad_input_prints_one_line_and_exits_2(model, capsys, argv, message):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and message in captured.err
