"""Lesson 1's check: ``commit_tokens`` and ``Engine.commit_sampled``, the commit of what a round sampled.

Scope: lesson 1's demo (``python -m mini_deepinfer``) as the lesson runs it, with ``--pipeline`` and with
a cancel; the same two requests and a small batch driven step by step; and a toy that hands back several
tokens per round (lesson 12's drafts, one model: "last + 1"), so a stop can fall inside a group. Compared line
by line with the engine's, then the commit's invariants on the learner's runs: tokens committed in order and
once, nothing after a stop, one commit group per round and what ``step()`` delivers equal to it, the first
token's time recorded once, the toy cache holding prompt + output[:-1], every slot returned.
Non-scope: the stop rule itself and the release of slots (lesson 2), stale rounds (lesson 11).
"""

from __future__ import annotations

from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.config import EngineConfig
from mini_deepinfer.core.engine import Engine
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.core.speculative import SpeculativeEngine

from ..exercise import Check
from ..words import Words
from .toy_scenes import (
    Run,
    Stepped,
    ToyDrafter,
    committed_in_order,
    delivered_as_committed,
    every_token_accounted,
    lesson1,
    same_in,
    slots_returned,
    stepped,
    stops_at_first,
)

TWO_REQUESTS = {0: [("req-0", [10, 11], SamplingParams(max_new_tokens=3)),
                    ("req-1", [20], SamplingParams(max_new_tokens=4, eos_token_ids=(22,)))]}


def demo() -> Run:
    return lesson1()


def demo_pipeline() -> Run:
    return lesson1(pipeline=True)


def demo_cancel() -> Run:
    return lesson1(cancel="req-0", after=2)


def two_requests() -> Stepped:
    """The demo's two requests, driven one step at a time."""
    return stepped(Engine(ToyDrafter(), EngineConfig(kv_capacity=8)), TWO_REQUESTS)


def groups() -> Stepped:
    """Several tokens a round: ``b`` meets eos inside a group, ``c`` ignores its eos, ``a`` ends on length."""
    engine = SpeculativeEngine(ToyDrafter(), EngineConfig(kv_capacity=32, spec_width=3))
    return stepped(engine, {0: [
        ("a", [10, 11], SamplingParams(max_new_tokens=7)),
        ("b", [20], SamplingParams(max_new_tokens=8, eos_token_ids=(26,))),
        ("c", [30], SamplingParams(max_new_tokens=5, eos_token_ids=(32,), ignore_eos=True))]})


def batch() -> Stepped:
    """Three requests in one batch: an eos sampled by the prefill, a length stop, a cancel."""
    engine = BatchEngine(ToyDrafter(), EngineConfig(kv_capacity=32, state_capacity=3, max_num_seqs=3,
                                                   max_batched_tokens=4, chunked_prefill=True))
    return stepped(engine, {0: [("x", [40, 41], SamplingParams(max_new_tokens=4, eos_token_ids=(42,))),
                                ("y", [50, 51, 52], SamplingParams(max_new_tokens=3)),
                                ("z", [60], SamplingParams(max_new_tokens=9))]}, cancels={4: ["z"]})


SCENARIOS = (demo, demo_pipeline, demo_cancel, two_requests, groups, batch)
STEPPED = (two_requests, groups, batch)


def in_order(trial) -> Words | None:
    for scenario in SCENARIOS:
        run = trial.learner(scenario)
        broken = committed_in_order(run) or stops_at_first(run)
        if broken is not None:
            return broken
    return None


GROUPS = Words("{request}: committed_groups is {groups}, but its commit events were {events}",
               "{request}：committed_groups 是 {groups}，而它的 commit 事件是 {events}")

def one_group_a_round(trial) -> Words | None:
    for scenario in STEPPED:
        run = trial.learner(scenario)
        for rid, req in run.engine.requests.items():
            events = [list(e.data["tokens"]) for e in run.events
                      if e.kind == "commit" and e.request_id == rid]
            if req.committed_groups != events:
                return GROUPS.format(request=rid, groups=req.committed_groups, events=events)
        broken = delivered_as_committed(run)
        if broken is not None:
            return broken
    return None


FIRST_TOKEN = Words("{request}: after round {round} first_token_at is {got}; it is set once, when the first "
                    "token is committed ({first}), and never changed",
                    "{request}：第 {round} 轮之后 first_token_at 是 {got}；"
                    "它只在提交第一个 token 时（第 {first} 轮）设一次，之后不再改")


def first_token_once(trial) -> Words | None:
    for scenario in STEPPED:
        run = trial.learner(scenario)
        firsts = {}
        for event in run.events:
            if event.kind == "commit":
                firsts.setdefault(event.request_id, event.round_id)
        seen: dict[str, float] = {}
        for round_id, held in run.after:
            for rid, state in held.items():
                set_now = rid in firsts and round_id >= firsts[rid]
                expected = seen.setdefault(rid, state.first_token_at) if set_now else None
                if state.first_token_at != expected or (set_now and expected is None):
                    return FIRST_TOKEN.format(request=rid, round=round_id, got=state.first_token_at,
                                              first=firsts.get(rid, "-"))
    return None


CACHE = Words("after round {round}, {request}'s cache holds {cache}; prompt + output[:-1] is {committed}",
              "第 {round} 轮之后，{request} 的缓存里是 {cache}；prompt + output[:-1] 是 {committed}")


def cache_holds_committed(trial) -> Words | None:
    for scenario in STEPPED:
        for round_id, held in trial.learner(scenario).after:
            for rid, state in held.items():
                if state.decoding and state.cache != state.committed:
                    return CACHE.format(round=round_id, request=rid, cache=list(state.cache),
                                        committed=list(state.committed))
    return None


def accounted(trial) -> Words | None:
    for scenario in STEPPED:
        broken = every_token_accounted(trial.learner(scenario))
        if broken is not None:
            return broken
    return None


def every_slot_returned(trial) -> Words | None:
    for scenario in SCENARIOS:
        broken = slots_returned(trial.learner(scenario))
        if broken is not None:
            return broken
    return None


CHECKS = (
    Check(Words("lesson 1's demo (also --pipeline, a cancel, a batch, several tokens a round) equals the "
                "engine's, line by line",
                "第 1 课的演示（以及 --pipeline、取消、合批、一轮多个 token）与引擎逐行一致"),
          same_in(SCENARIOS)),
    Check(Words("tokens committed in order and each once, none after a stop",
                "token 按顺序提交、每个只提交一次，停止之后不再提交"), in_order, "commit"),
    Check(Words("every token a round hands back is committed or, after a stop, discarded",
                "一轮交回的每个 token 要么提交，要么（停止之后）丢弃"), accounted, "commit"),
    Check(Words("one commit group a round: committed_groups and what step() delivers equal the commits",
                "每轮一个提交组：committed_groups 与 step() 交付的内容都等于这一轮的提交"), one_group_a_round,
          "commit"),
    Check(Words("the first token's time is recorded once, at the first commit",
                "首个 token 的时间只记一次，在第一次提交时"), first_token_once, "commit"),
    Check(Words("while a request decodes, its cache holds prompt + output[:-1]",
                "请求 decode 期间，缓存里是 prompt + output[:-1]"), cache_holds_committed, "what-to-notice"),
    Check(Words("every KV and state slot returned at the end", "结束时所有 KV 与状态槽位都已归还"),
          every_slot_returned),
)
