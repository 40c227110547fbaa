"""Lesson 11's check: ``Engine.commit_round``, what happens when a round is read: commit, discard, release.

Scope: the lesson's demo (``python -m mini_deepinfer --pipeline --cancel req-0 --cancel-after-round 2``), the
same demo cancelling either request after other rounds, and synchronously; a batch with chunked prefill where
each kind of stop (eos from the prefill's token, eos from a decode, length, a cancel) hits a request first,
in the middle and last in its rounds, both ways; and prompts that share a prefix, indexed chunk by chunk as
their rounds are read. Compared line by line with the engine's, then the lesson's invariants on the learner's
runs: nothing committed after a stop, every token a read round hands back committed or discarded as stale,
each request's in-flight counters equal to the launched, unread rounds that hold it, no slot given back while
such a round exists nor kept after, ``step()`` returning what was committed, free == capacity at the end.
Non-scope: the commit of one request's tokens (lesson 1), the stop rule and the release itself (lesson 2),
when a round is read (lesson 10).
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
    committed_in_order,
    delivered_as_committed,
    every_token_accounted,
    freed_only_when_idle,
    in_flight_at,
    lesson1,
    released_when_idle,
    same_in,
    slots_returned,
    stepped,
    stops_at_first,
)


def demo() -> Run:
    return lesson1(cancel="req-0", after=2, pipeline=True)


def demo_plain() -> Run:
    return lesson1(pipeline=True)


def cancel_first() -> Run:
    """``req-0`` cancelled after round 1, while its prefill's token is still in flight."""
    return lesson1(cancel="req-0", after=1, pipeline=True)


def cancel_waiting() -> Run:
    return lesson1(cancel="req-1", after=2, pipeline=True)


def cancel_late() -> Run:
    """``req-1`` cancelled after round 7, with its last decode in flight."""
    return lesson1(cancel="req-1", after=7, pipeline=True)


def demo_sync() -> Run:
    return lesson1(cancel="req-0", after=2)


STOPS = {
    "first": [("eos-at-prefill", [40, 41, 42], SamplingParams(max_new_tokens=5, eos_token_ids=(43,))),
              ("eos-at-decode", [50], SamplingParams(max_new_tokens=6, eos_token_ids=(53,))),
              ("length", [60, 61], SamplingParams(max_new_tokens=2))],
    "middle": [("length", [60, 61], SamplingParams(max_new_tokens=2)),
               ("eos-at-prefill", [40, 41, 42], SamplingParams(max_new_tokens=5, eos_token_ids=(43,))),
               ("eos-at-decode", [50], SamplingParams(max_new_tokens=6, eos_token_ids=(53,)))],
    "last": [("eos-at-decode", [50], SamplingParams(max_new_tokens=6, eos_token_ids=(53,))),
             ("length", [60, 61], SamplingParams(max_new_tokens=2)),
             ("eos-at-prefill", [40, 41, 42], SamplingParams(max_new_tokens=5, eos_token_ids=(43,)))],
}
CANCELLED = ("cancelled", [70, 71, 72, 73, 74], SamplingParams(max_new_tokens=8))


def _batch(place: str, pipeline: bool) -> Stepped:
    config = EngineConfig(kv_capacity=64, state_capacity=4, max_num_seqs=4, max_batched_tokens=5,
                          chunked_prefill=True, pipeline=pipeline)
    return stepped(BatchEngine(ToyDrafter(), config), {0: STOPS[place], 1: [CANCELLED]},
                   cancels={4: ["cancelled"]})


def stops_first() -> Stepped:
    return _batch("first", pipeline=True)


def stops_middle() -> Stepped:
    return _batch("middle", pipeline=True)


def stops_last() -> Stepped:
    return _batch("last", pipeline=True)


def stops_sync() -> Stepped:
    return _batch("middle", pipeline=False)


def _prefix(pipeline: bool) -> Stepped:
    config = EngineConfig(kv_capacity=40, state_capacity=3, max_num_seqs=3, max_batched_tokens=4,
                          chunked_prefill=True, prefix_cache=True, prefix_block=2, pipeline=pipeline)
    engine = BatchEngine(ToyDrafter(), config)
    prompt = [5, 6, 7, 8, 9, 10, 11]
    run = stepped(engine, {0: [("first", prompt, SamplingParams(max_new_tokens=6))],
                           3: [("second", prompt[:6] + [1], SamplingParams(max_new_tokens=2))],
                           5: [("third", prompt[:4] + [2, 3], SamplingParams(max_new_tokens=2))]})
    engine.clear_prefix_cache()
    return run


def prefix() -> Stepped:
    """A prompt indexed chunk by chunk as its rounds are read; two later prompts reuse its start."""
    return _prefix(pipeline=True)


def prefix_sync() -> Stepped:
    return _prefix(pipeline=False)


STEPPED = (stops_first, stops_middle, stops_last, stops_sync, prefix, prefix_sync)
SCENARIOS = (demo, demo_plain, cancel_first, cancel_waiting, cancel_late, demo_sync, *STEPPED)


def named(scenario, words: Words) -> Words:
    """``words``, said of one scenario."""
    return Words(f"{scenario.__name__}: {words.en}", f"{scenario.__name__}：{words.zh}")


def each(invariant, scenarios=SCENARIOS):
    """A check step: ``invariant`` holds in each of the learner's runs of ``scenarios``."""
    def check(trial) -> Words | None:
        for scenario in scenarios:
            broken = invariant(trial.learner(scenario))
            if broken is not None:
                return named(scenario, broken)
        return None
    return check


def nothing_after_a_stop(run: Run) -> Words | None:
    return committed_in_order(run) or stops_at_first(run)


COUNTED = Words("after step {step}, {request} counts {counted} rounds in flight; {unread} launched, unread "
                "rounds hold it", "第 {step} 步之后，{request} 记的在飞行中轮数是 {counted}；"
                "而已发出、尚未读回、含有它的轮次有 {unread} 个")


def counts_rounds(run: Stepped) -> Words | None:
    """After each step, a request's ``rounds_in_flight`` is the number of launched, unread rounds with it."""
    unread_after: dict[int, dict[str, int]] = {}  # step -> request -> rounds holding it, after its last event
    for event, unread in in_flight_at(run.events):
        holding: dict[str, int] = {}
        for requests in unread.values():
            for rid in requests:
                holding[rid] = holding.get(rid, 0) + 1
        unread_after[event.round_id] = holding
    for step, held in run.after:
        last = max((s for s in unread_after if s <= step), default=None)
        for rid, state in held.items():
            unread = unread_after[last].get(rid, 0) if last is not None else 0
            if state.rounds_in_flight != unread:
                return COUNTED.format(step=step, request=rid, counted=state.rounds_in_flight, unread=unread)
    return None


ZERO = Words("{request} still counts {rounds} rounds and {samples} samples in flight once every round is "
             "read",
             "所有轮次都读回之后，{request} 仍记着 {rounds} 个在飞行中的轮次、{samples} 个在飞行中的采样")


def counters_back_to_zero(run: Run) -> Words | None:
    for rid, req in run.engine.requests.items():
        if req.rounds_in_flight or req.samples_in_flight:
            return ZERO.format(request=rid, rounds=req.rounds_in_flight, samples=req.samples_in_flight)
    return None


def counted(run: Stepped) -> Words | None:
    return counts_rounds(run) or counters_back_to_zero(run)


def released(run: Run) -> Words | None:
    return freed_only_when_idle(run) or (released_when_idle(run) if isinstance(run, Stepped) else None)


CHECKS = (
    Check(Words("lesson 11's demo, other cancels, every kind of stop in a batch and a prefix cache, across "
                "rounds and synchronously, equal the engine's, line by line",
                "第 11 课的演示、其他时机的取消、合批中的各种停止与前缀缓存，跨轮与同步，都与引擎逐行一致"),
          same_in(SCENARIOS)),
    Check(Words("nothing is committed after a stop", "停止之后不再提交任何 token"),
          each(nothing_after_a_stop)),
    Check(Words("every token a read round hands back is committed, or discarded when its request has "
                "finished",
                "读回的一轮交回的每个 token 要么提交，要么（请求已结束时）丢弃"),
          each(every_token_accounted, STEPPED)),
    Check(Words("each request counts exactly the launched, unread rounds that hold it; none once all are "
                "read",
                "每条请求记的在飞行中轮数恰好是含有它的已发出、尚未读回的轮次；全部读回后为零"),
          each(counted, STEPPED), "rounds-in-flight"),
    Check(Words("slots come back only after the last round that uses them is read, and right then",
                "槽位只在最后一个用到它们的轮次读回之后归还，并且就在那时归还"), each(released)),
    Check(Words("step() returns what the read round committed", "step() 返回读回的那一轮提交的内容"),
          each(delivered_as_committed, STEPPED)),
    Check(Words("every KV and state slot returned at the end", "结束时所有 KV 与状态槽位都已归还"),
          each(slots_returned)),
)
