"""Lesson 2's check: ``stop_reason`` (eos, then length) and ``Engine.release_if_idle`` (giving slots back).

Scope: the lesson's demo (``python -m mini_deepinfer --cancel req-0 --cancel-after-round 2``), the plain
demo, a cancel of a request still waiting, and both with ``--pipeline``; then small batches driven step by
step, with state slots, synchronous and cross-round: an eos sampled by the prefill, eos and length on the same
token, an ignored eos, ``max_new_tokens=0``, a late arrival cancelled while it decodes; and a prefix cache
whose blocks the requests hold until they are released. Compared line by line with the engine's, then the
lesson's invariants on the learner's runs: each output ends at its first stop with that reason, free ==
capacity (KV and state) when nothing runs, no slot given back while a launched round uses it, a finished
request with nothing in flight holding no slot, the runner told once per request.
Non-scope: the commit around the stop check (lesson 1), admission (lesson 3's ``can_admit``).
"""

from __future__ import annotations

from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.config import EngineConfig
from mini_deepinfer.core.request import SamplingParams

from ..exercise import Check
from ..words import Words
from .toy_scenes import (
    Run,
    Stepped,
    ToyDrafter,
    freed_only_when_idle,
    lesson1,
    released_when_idle,
    runner_told_once,
    same_in,
    slots_returned,
    stepped,
    stops_at_first,
)


def demo_cancel() -> Run:
    return lesson1(cancel="req-0", after=2)


def demo() -> Run:
    return lesson1()


def cancel_waiting() -> Run:
    return lesson1(cancel="req-1", after=1)


def pipeline_cancel() -> Run:
    return lesson1(cancel="req-0", after=2, pipeline=True)


def pipeline_cancel_waiting() -> Run:
    return lesson1(cancel="req-1", after=1, pipeline=True)


def _stops(pipeline: bool) -> Stepped:
    engine = BatchEngine(ToyDrafter(), EngineConfig(kv_capacity=40, state_capacity=4, max_num_seqs=4,
                                                    max_batched_tokens=6, chunked_prefill=True,
                                                    pipeline=pipeline))
    return stepped(engine, {
        0: [("eos-at-prefill", [40, 41], SamplingParams(max_new_tokens=4, eos_token_ids=(42,))),
            ("eos-and-length", [50], SamplingParams(max_new_tokens=2, eos_token_ids=(52,))),
            ("ignored-eos", [60], SamplingParams(max_new_tokens=3, eos_token_ids=(61,), ignore_eos=True)),
            ("nothing", [70], SamplingParams(max_new_tokens=0))],
        2: [("late", [80, 81, 82], SamplingParams(max_new_tokens=6, eos_token_ids=(99,)))]},
        cancels={4: ["late"]}, ask_again=True)


def stops() -> Stepped:
    """Every way to stop, synchronously; the caller asks ``release_if_idle`` again after each step."""
    return _stops(pipeline=False)


def stops_pipeline() -> Stepped:
    """The same, cross-round: a stop is seen one round late, and the slots come back one round later still."""
    return _stops(pipeline=True)


def _prefix(pipeline: bool) -> Stepped:
    engine = BatchEngine(ToyDrafter(), EngineConfig(kv_capacity=16, max_num_seqs=2, prefix_cache=True,
                                                    prefix_block=2, pipeline=pipeline))
    run = stepped(engine, {0: [("first", [5, 6, 7, 8, 9], SamplingParams(max_new_tokens=2))],
                           3: [("again", [5, 6, 7, 8, 1], SamplingParams(max_new_tokens=3))]})
    engine.clear_prefix_cache()
    return run


def prefix() -> Stepped:
    """Two prompts that share 4 tokens; after both finish the prefix cache is cleared."""
    return _prefix(pipeline=False)


def prefix_pipeline() -> Stepped:
    return _prefix(pipeline=True)


SCENARIOS = (demo_cancel, demo, cancel_waiting, pipeline_cancel, pipeline_cancel_waiting, stops,
             stops_pipeline, prefix, prefix_pipeline)
STEPPED = (stops, stops_pipeline, prefix, prefix_pipeline)


def each(invariant, scenarios=SCENARIOS):
    """A check step: ``invariant`` holds in each of the learner's runs of ``scenarios``."""
    def check(trial) -> Words | None:
        for scenario in scenarios:
            broken = invariant(trial.learner(scenario))
            if broken is not None:
                name = scenario.__name__
                return Words(f"scenario {name}: {broken.en}", f"场景 {name}：{broken.zh}")
        return None
    return check


CHECKS = (
    Check(Words("lesson 2's demo (and a cancel while waiting, --pipeline, every way to stop, a prefix cache) "
                "equals the engine's, line by line",
                "第 2 课的演示（以及等待中取消、--pipeline、各种停止方式、前缀缓存）与引擎逐行一致"),
          same_in(SCENARIOS)),
    Check(Words("each output ends at its first stop: eos first (unless ignore_eos), then length",
                "每个输出都停在第一个停止条件上：先看 eos（ignore_eos 时不看），再看长度"),
          each(stops_at_first), "stop-check"),
    Check(Words("with nothing running, free == capacity for KV and state slots",
                "没有请求在跑时，KV 与状态槽位都是 free == capacity"), each(slots_returned),
          "what-to-notice"),
    Check(Words("no slot is given back while a launched, unread round still uses it",
                "已发出、尚未读回的轮次还在用的槽位不会被归还"), each(freed_only_when_idle)),
    Check(Words("a finished request with no round in flight holds no slot after the step",
                "已结束、没有在飞行中轮次的请求，在这一步之后不再占槽位"), each(released_when_idle, STEPPED)),
    Check(Words("the runner is told once to forget each finished request",
                "每条结束的请求，runner 只被告知忘掉一次"), each(runner_told_once, STEPPED)),
)
