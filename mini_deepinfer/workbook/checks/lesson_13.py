"""Lesson 13's check: ``SpeculativeEngine.rollback`` and ``SpeculativeRunner.rewind`` after a rejection.

Scope: the lesson's demo (``model_draft_demo --cpu-example rejection --width 3 --trace-rounds``, whose lines
include its own cold-cache check after every round), and two crowds of four requests batched with chunked
prefill (one greedy, one sampling at temperature 0.1 with a noisier draft), both caches of every running
request compared with a cold recomputation of its committed prefix after every round
(``tools.checks.cold_difference``, as ``tests/test_speculative_engine.py`` does). Compared line by line with
the engine's runs; then, on the learner's runs: tokens equal to plain greedy; after every round the engine
holds prompt + output - 1 positions, the target's cache (KV, convolution windows, recurrent states) and the
draft's equal a cold recomputation, no snapshot is left; every slot of both caches returned. Non-scope: how
the target keeps its snapshots during the verify and how the draft rewinds itself (``ModelDraft.rewind``:
the engine's own here).
"""

from __future__ import annotations

from collections.abc import Callable

from ..exercise import Check
from ..words import Words
from .spec_scenes import (
    COLD_TOLERANCE,
    Look,
    Run,
    both_caches_returned,
    crowd,
    demo,
    equals_plain_greedy,
    same_runs,
)

GREEDY_CROWD = (crowd, 3, 0.2, 1, 7, True)
SAMPLED_CROWD = (crowd, 3, 0.5, 3, 8, True, 0.1)
SCENARIOS = ((demo, "rejection"), GREEDY_CROWD, SAMPLED_CROWD)
GREEDY = ((demo, "rejection"), GREEDY_CROWD)
WATCHED = (GREEDY_CROWD, SAMPLED_CROWD)


def _name(scenario: tuple) -> str:
    return f"{scenario[0].__name__}{tuple(scenario[1:])}"


def on_runs(scenarios: tuple, invariant: Callable[[str, Run], Words | None]) -> Callable:
    """A check step: the invariant holds on the learner's run of each scenario."""
    def step(trial) -> Words | None:
        for scenario in scenarios:
            broken = invariant(_name(scenario), trial.learner(*scenario))
            if broken is not None:
                return broken
        return None
    return step


def after_every_round(broken_in: Callable[[Look], Words | None]) -> Callable:
    """A check step: what was seen after every round of the learner's watched crowds holds."""
    def step(trial) -> Words | None:
        for scenario in WATCHED:
            for seen in trial.learner(*scenario).looks:
                broken = broken_in(seen)
                if broken is not None:
                    return Words(f"{_name(scenario)}: {broken.en}", f"{_name(scenario)}：{broken.zh}")
        return None
    return step


HOLDS = Words("after round {round}, {request} holds {computed} positions and {slots} KV slots; after a "
              "speculative round it must hold prompt + output - 1 = {committed}",
              "第 {round} 轮之后，{request} 持有 {computed} 个位置、{slots} 个 KV 槽位；投机轮之后应当持有 "
              "prompt + output - 1 = {committed} 个")


def holds_committed_prefix(seen: Look) -> Words | None:
    if seen.committed is None or seen.num_computed == seen.committed == seen.kv_slots:
        return None
    return HOLDS.format(round=seen.round_id, request=seen.request_id, computed=seen.num_computed,
                        slots=seen.kv_slots, committed=seen.committed)


COLD = Words("after round {round}, {request}'s {which} cache differs from a cold recomputation of the "
             "committed prefix by {diff:.2e} (allowed {tolerance:g})",
             "第 {round} 轮之后，{request} 的{which_zh}缓存与已提交前缀的冷重算相差 {diff:.2e}"
             "（允许 {tolerance:g}）")


def target_equals_cold(seen: Look) -> Words | None:
    if seen.target <= COLD_TOLERANCE:
        return None
    return COLD.format(round=seen.round_id, request=seen.request_id, which="target", which_zh="目标模型",
                       diff=seen.target, tolerance=COLD_TOLERANCE)


def draft_equals_cold(seen: Look) -> Words | None:
    if seen.draft is None or seen.draft <= COLD_TOLERANCE:
        return None
    return COLD.format(round=seen.round_id, request=seen.request_id, which="draft", which_zh="草稿模型",
                       diff=seen.draft, tolerance=COLD_TOLERANCE)


LEFT = Words("after round {round}, the target's cache still keeps {count} snapshots: the restore uses them "
             "up (or drops them when every draft was accepted)",
             "第 {round} 轮之后，目标模型的缓存还留着 {count} 份快照：恢复应当用掉它们（全部接受时直接丢弃）")


def no_snapshot_left(seen: Look) -> Words | None:
    return None if seen.snapshots == 0 else LEFT.format(round=seen.round_id, count=seen.snapshots)


CHECKS = (
    Check(Words("the demo's rounds (and a greedy and a sampled crowd) equal the engine's, line by line",
                "演示的每一轮（以及一组 greedy 请求和一组采样请求）与引擎逐行一致"), same_runs(SCENARIOS)),
    Check(Words("after every round the engine holds prompt + output - 1 positions and as many KV slots",
                "每轮之后引擎持有 prompt + output - 1 个位置和同样多的 KV 槽位"),
          after_every_round(holds_committed_prefix), "three-parts"),
    Check(Words("after every round the target's KV, convolution windows and recurrent states equal a cold "
                "recomputation of the committed prefix",
                "每轮之后目标模型的 KV、卷积窗口和递归状态等于对已提交前缀的冷重算"),
          after_every_round(target_equals_cold), "capture"),
    Check(Words("after every round the draft's cache equals a cold recomputation of what it holds",
                "每轮之后草稿模型的缓存等于对它所持前缀的冷重算"),
          after_every_round(draft_equals_cold), "draft"),
    Check(Words("no snapshot is left after a round, and every slot of both caches is returned at the end",
                "每轮之后不留快照，结束时两份缓存的所有槽位都已归还"),
          lambda trial: after_every_round(no_snapshot_left)(trial)
          or on_runs(SCENARIOS, both_caches_returned)(trial), "three-parts"),
    Check(Words("speculative greedy delivers the tokens of plain greedy decoding",
                "投机 greedy 交付的 token 与普通 greedy 解码相同"),
          on_runs(GREEDY, equals_plain_greedy), "three-parts"),
)
