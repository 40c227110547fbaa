"""Lesson 3's check: ``BatchEngine.schedule``, the token-budget schedule, on the A/B/C demo and two variants.

Scope: the A/B/C demo with the toy runner (``pipeline_demo --toy``) as the lesson runs it, the same with a
budget of 5 and with whole prompts only, and a crowd of six short requests under ``max_num_seqs`` 2; compared
line by line with the engine's, then the lesson's invariants on the learner's runs. Non-scope: chunk sizes
(lesson 4 writes ``_chunk_size``; here the engine's own is used).
"""

from __future__ import annotations

from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.config import EngineConfig
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.core.toy import ToyRunner

from ..exercise import Check
from ..words import Words
from .toy_scenes import Run, abc, committed_in_order, drive, same_in, slots_returned


def demo() -> Run:
    return abc()


def small_budget() -> Run:
    return abc(max_batched_tokens=5)


def whole_prompts() -> Run:
    return abc(chunked_prefill=False, max_batched_tokens=18)


def crowd() -> Run:
    """Six requests, two at a time, budget 4: who waits, who decodes, and in which order they start."""
    config = EngineConfig(kv_capacity=64, state_capacity=2, max_num_seqs=2, max_batched_tokens=4,
                          chunked_prefill=True)
    engine = BatchEngine(ToyRunner(), config)
    arrivals = {0: [(f"r{i}", [10 * i + j for j in range(1 + i % 3)],
                     SamplingParams(max_new_tokens=2 + i % 2)) for i in range(4)],
                2: [("r4", [40, 41, 42, 43, 44], SamplingParams(max_new_tokens=2)),
                    ("r5", [50], SamplingParams(max_new_tokens=3))]}
    return drive(engine, arrivals)


def more_decodes_than_budget() -> Run:
    """Four decoding requests and a budget of 3: one decode a round waits, in turn."""
    config = EngineConfig(kv_capacity=64, state_capacity=4, max_num_seqs=4, max_batched_tokens=3,
                          chunked_prefill=True)
    engine = BatchEngine(ToyRunner(), config)
    arrivals = {0: [(f"d{i}", [100 * i], SamplingParams(max_new_tokens=4)) for i in range(4)]}
    return drive(engine, arrivals)


SCENARIOS = (demo, small_budget, whole_prompts, crowd, more_decodes_than_budget)


def _rounds(run: Run) -> dict[int, list]:
    rounds: dict[int, list] = {}
    for event in run.events:
        if event.kind == "schedule":
            rounds.setdefault(event.round_id, []).append(event)
    return rounds


OVER = Words("round {round} computes {tokens} tokens for {seqs} requests; the budget is {budget} tokens and "
             "{max_seqs} requests",
             "第 {round} 轮为 {seqs} 条请求计算了 {tokens} 个 token；"
             "预算是 {budget} 个 token、{max_seqs} 条请求")


def within_budget(trial) -> Words | None:
    for scenario in SCENARIOS:
        run = trial.learner(scenario)
        config = run.engine.config
        for round_id, seqs in _rounds(run).items():
            tokens = sum(len(event.data["inputs"]) for event in seqs)
            if tokens > config.max_batched_tokens or len(seqs) > config.max_num_seqs:
                return OVER.format(round=round_id, tokens=tokens, seqs=len(seqs),
                                   budget=config.max_batched_tokens, max_seqs=config.max_num_seqs)
    return None


LATE_DECODE = Words("round {round}: {request}'s decode comes after a prompt chunk; decodes go first",
                    "第 {round} 轮：{request} 的 decode 排在 prompt 块之后；decode 应当先排")


def decodes_first(trial) -> Words | None:
    for scenario in SCENARIOS:
        for round_id, seqs in _rounds(trial.learner(scenario)).items():
            phases = [event.data["phase"] for event in seqs]
            if "decode" in phases and "prefill" in phases[: len(phases) - phases[::-1].index("decode")]:
                later = seqs[phases.index("prefill"):]
                request = next(e.request_id for e in later if e.data["phase"] == "decode")
                return LATE_DECODE.format(round=round_id, request=request)
    return None


OVERTAKEN = Words("{later} started before {earlier}, which arrived first: waiting requests start in arrival "
                  "order", "{later} 比先到的 {earlier} 先开始：等待中的请求应按到达顺序开始")


def arrival_order(trial) -> Words | None:
    for scenario in SCENARIOS:
        run = trial.learner(scenario)
        submitted = [e.request_id for e in run.events if e.kind == "submit"]
        started: list[str] = []
        for event in run.events:
            if event.kind == "schedule" and event.request_id not in started:
                started.append(event.request_id)
        order = [rid for rid in submitted if rid in started]
        for earlier, later in zip(order, started):
            if earlier != later:
                return OVERTAKEN.format(later=later, earlier=earlier)
    return None


def every_slot_returned(trial) -> Words | None:
    for scenario in SCENARIOS:
        run = trial.learner(scenario)
        broken = slots_returned(run) or committed_in_order(run)
        if broken is not None:
            return broken
    return None


CHECKS = (
    Check(Words("the A/B/C rounds (and four variants) equal the engine's, line by line",
                "A/B/C 的每一轮（及四个变体）与引擎逐行一致"), same_in(SCENARIOS)),
    Check(Words("no round computes more than the budget or runs more than max_num_seqs requests",
                "没有一轮超出 token 预算或 max_num_seqs"), within_budget),
    Check(Words("in every round, decode tokens come before prompt tokens",
                "每一轮里 decode 都排在 prompt 之前"),
          decodes_first),
    Check(Words("waiting requests start in arrival order", "等待中的请求按到达顺序开始"), arrival_order,
          "admission"),
    Check(Words("tokens committed in order, and every KV and state slot returned at the end",
                "token 按顺序提交，结束时所有 KV 与状态槽位都已归还"), every_slot_returned),
)
