"""Lesson 5's check: ``stage_round``, a round plan laid out as the tensors of one forward, in the real engine.

Scope: the lesson's demo (A 4 prompt tokens and B 10, C 3 after round 1, a budget of 8 on a random tiny
Qwen3.5 with a tied head, as ``site_scripts/lessons/gen_runner.py`` runs it, here to the end), the same with
cross-round execution (tokens still in flight), a crowd of six requests that reuse state slots, prompts that
share a prefix through the prefix cache (restores and saves), speculative verification (snapshot rows) and a
padded decode round as a captured graph lays it out. Every staged tensor and layout field of every round is
compared with the engine's, then the lesson's invariants on the learner's runs: positions and slot mapping
follow the plan, fresh slots are those of requests at position 0, logits rows are the last row of each
sampling request, each request gets the tokens it gets alone; last, the tokens equal the engine's.
Non-scope: the schedule (lessons 3 and 4), the model's maths (lessons 6 and 7), sampling (lesson 8).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import accumulate

from mini_deepinfer.core.config import EngineConfig
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.runtime import staging

from ..exercise import Check
from ..words import Words
from .torch_scenes import Ask, Served, first_token_difference, one_thread, serve, tiny_qwen35

DEMO_ASKS = (Ask("A", (11, 12, 13, 14)), Ask("B", tuple(range(21, 31))), Ask("C", (31, 32, 33), after=1))
CROWD_ASKS = tuple(Ask(f"r{i}", tuple(range(10 * i + 1, 10 * i + 2 + (i * 3) % 7)),
                       SamplingParams(max_new_tokens=1 + (i * 2) % 5), after=i // 2) for i in range(6))
SHARED = tuple(range(40, 49))
PREFIX_ASKS = (Ask("P", SHARED + (7,), SamplingParams(max_new_tokens=2)),
               Ask("Q", SHARED + (8, 9), SamplingParams(max_new_tokens=2), after=4),
               Ask("R", SHARED[:5] + (3,), SamplingParams(max_new_tokens=2), after=4))


def demo() -> Served:
    """The lesson's script: budget 8, chunked prefill, A and B first, C after round 1."""
    config = EngineConfig(kv_capacity=32, state_capacity=3, max_num_seqs=3, max_batched_tokens=8,
                          chunked_prefill=True)
    return serve(tiny_qwen35(0, 1000, tied=True), DEMO_ASKS, config)


def cross_round() -> Served:
    """The demo launched one round ahead: decodes feed tokens the host has not read yet."""
    config = EngineConfig(kv_capacity=32, state_capacity=3, max_num_seqs=3, max_batched_tokens=8,
                          chunked_prefill=True, pipeline=True)
    return serve(tiny_qwen35(0, 1000, tied=True), DEMO_ASKS, config)


def crowd() -> Served:
    """Six requests, three at a time, budget 6: state slots reused, decode groups with gaps in their slots."""
    config = EngineConfig(kv_capacity=64, max_num_seqs=3, max_batched_tokens=6, chunked_prefill=True)
    return serve(tiny_qwen35(), CROWD_ASKS, config)


def alone() -> Served:
    """Each request of the crowd in an engine of its own: the tokens it gets alone."""
    config = EngineConfig(kv_capacity=64, max_num_seqs=3, max_batched_tokens=6, chunked_prefill=True)
    served = Served()
    for ask in CROWD_ASKS:
        one = Ask(ask.request_id, ask.prompt, ask.params)
        served.tokens.update(serve(tiny_qwen35(), [one], config).tokens)
    return served


def prefix() -> Served:
    """Prompts that share a start, in chunks of 3: the prefix cache restores states from snapshots and saves
    new ones (the last chunk of P is one token that saves the state at the prompt's end)."""
    config = EngineConfig(kv_capacity=64, max_num_seqs=2, max_batched_tokens=3, chunked_prefill=True,
                          prefix_cache=True, prefix_block=4)
    return serve(tiny_qwen35(), PREFIX_ASKS, config)


def speculative() -> Served:
    """Speculative decoding (a second random model drafts 2 tokens): verify rows keep a state per position."""
    config = EngineConfig(kv_capacity=64, max_num_seqs=2, max_batched_tokens=16, chunked_prefill=True,
                          spec_width=2)
    asks = (Ask("S", (5, 6, 7, 8), SamplingParams(max_new_tokens=6)),
            Ask("T", (9, 10), SamplingParams(max_new_tokens=5)))
    return serve(tiny_qwen35(), asks, config, draft=tiny_qwen35(1))


def graph_round() -> Served:
    """A decode round padded to 4 rows and 8 keys, as a captured graph lays it out (no model runs)."""
    seqs = [staging.SeqInput(token_ids=(7,), start=3, kv_slots=(4, 9, 2, 5), state_slot=2),
            staging.SeqInput(token_ids=(8,), start=5, kv_slots=(1, 3, 6, 8, 10, 11), state_slot=0,
                             in_flight_row=1)]
    pad = staging.Padding(rows=4, context=8, dummy_kv_slot=30, dummy_state_slot=5)
    with one_thread():
        buffer = staging.Staging()
        layout = staging.stage_round(seqs, buffer, [], pad)
    views = staging.Staging.views(buffer.segments(), buffer.host(pin=False))
    record = {name: view.tolist() for name, view in views.items()}
    record["layout"] = layout
    return Served(rounds=[(None, [record])])


STAGED_SCENES = (demo, cross_round, crowd, prefix, speculative, graph_round)
PLAIN_SCENES = (demo, cross_round, crowd, prefix)  # one forward per plan, laid out from the plan alone


def _rounds(served: Served) -> list[tuple[object, dict[str, object]]]:
    return [(plan, staged) for plan, records in served.rounds for staged in records]


def _round_name(plan: object) -> str:
    return "?" if plan is None else str(plan.round_id)


STAGED_DIFFERS = Words("{scene}, round {round}: {name} is\n    {actual}\nthe engine stages\n    {expected}",
                       "{scene}，第 {round} 轮：{name} 是\n    {actual}\n引擎暂存的是\n    {expected}")
ROUNDS_DIFFER = Words("{scene}: yours staged {actual} forwards, the engine {expected}",
                      "{scene}：你的运行暂存了 {actual} 次前向，引擎是 {expected} 次")


def same_staging(trial) -> Words | None:
    """Every staged tensor and layout field of every round equals the engine's."""
    for scene in STAGED_SCENES:
        want, got = _rounds(trial.engine(scene)), _rounds(trial.learner(scene))
        for (plan, expected), (_, actual) in zip(want, got):
            for name, value in expected.items():
                if actual.get(name) != value:
                    return STAGED_DIFFERS.format(scene=scene.__name__, round=_round_name(plan), name=name,
                                                 actual=actual.get(name), expected=value)
        if len(want) != len(got):
            return ROUNDS_DIFFER.format(scene=scene.__name__, actual=len(got), expected=len(want))
    return None


def same_tokens(trial) -> Words | None:
    for scene in STAGED_SCENES[:-1]:
        want, got = trial.engine(scene).tokens, trial.learner(scene).tokens
        differs = first_token_difference(scene.__name__, want, got)
        if differs is not None:
            return differs
    return None


FIELD_OFF_PLAN = Words("{scene}, round {round}: {name} is {actual}; the plan says {expected}",
                       "{scene}，第 {round} 轮：{name} 是 {actual}；按计划应是 {expected}")


def _from_plan(plan) -> dict[str, list[int]]:
    """What the lesson says each field holds, computed from the plan's ``SeqPlan``s."""
    ends = [end - 1 for end in accumulate(len(s.token_ids) for s in plan.seqs)]
    return {
        "positions": [p for s in plan.seqs for p in range(s.start_pos, s.start_pos + len(s.token_ids))],
        "slot_mapping": [x for s in plan.seqs for x in s.new_slots],
        "kv_slots": {b: list(s.context_slots) for b, s in enumerate(plan.seqs) if len(s.token_ids) > 1},
        "fresh_slots": [s.state_slot for s in plan.seqs if s.start_pos == 0],
        "logits_indices": [ends[b] for b, s in enumerate(plan.seqs) if s.sample],
        "layout.context_lens": [s.start_pos + len(s.token_ids) for s in plan.seqs],
    }


def follows_plan(names: tuple[str, ...]) -> Callable:
    """A step: in every round of the learner's plain scenes, the fields ``names`` are what the plan says."""
    def check(trial) -> Words | None:
        for scene in PLAIN_SCENES:
            for plan, staged in _rounds(trial.learner(scene)):
                expected = _from_plan(plan)
                for name in names:
                    actual = staged[name]
                    if name == "kv_slots":
                        actual = {b: v for b, v in actual.items() if b in expected[name]}
                    if actual != expected[name]:
                        return FIELD_OFF_PLAN.format(scene=scene.__name__, round=plan.round_id, name=name,
                                                     actual=actual, expected=expected[name])
        return None
    return check


NOT_ALONE = Words("batched with others, {request} gets {batched}; alone it gets {alone}: a request's rows "
                  "must not see another request's positions, slots or state",
                  "与其他请求合批时 {request} 得到 {batched}；单独运行时得到 {alone}：一条请求的行不能读到"
                  "其他请求的位置、槽位或状态")


def as_if_alone(trial) -> Words | None:
    batched, single = trial.learner(crowd).tokens, trial.engine(alone).tokens
    for rid, tokens in single.items():
        if batched.get(rid) != tokens:
            return NOT_ALONE.format(request=rid, batched=batched.get(rid), alone=tokens)
    return None


CHECKS = (
    Check(Words("every staged tensor of every round (demo, cross-round, crowd, prefix cache, speculative, "
                "graph) equals the engine's",
                "每一轮暂存的每个张量（演示、跨轮、人多、前缀缓存、投机、图）都与引擎一致"),
          same_staging),
    Check(Words("positions count on from each request's start_pos; slot_mapping is its new_slots; a prompt "
                "chunk reads its whole context",
                "位置从每条请求的 start_pos 往后数；slot_mapping 是它的 new_slots；"
                "prompt 块读取它的整个上下文"),
          follows_plan(("positions", "slot_mapping", "kv_slots", "layout.context_lens")), "prepare"),
    Check(Words("fresh_slots holds the state slot of every request that starts at position 0, and no other",
                "fresh_slots 恰好是从位置 0 开始的请求的状态槽位"),
          follows_plan(("fresh_slots",)), "prepare"),
    Check(Words("logits rows are the last row of each request that samples",
                "logits 行是每条采样请求的最后一行"),
          follows_plan(("logits_indices",)), "prepare"),
    Check(Words("each request gets the tokens it gets alone", "每条请求得到的 token 与它单独运行时相同"),
          as_if_alone, "what-to-notice"),
    Check(Words("the model's tokens equal the engine's", "模型产出的 token 与引擎一致"), same_tokens),
)
