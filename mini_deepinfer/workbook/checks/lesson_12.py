"""Lesson 12's check: ``verify_greedy``, the greedy decision of a speculative round, inside the real engine.

Scope: the lesson's demo (``model_draft_demo --cpu-example acceptance --trace-rounds``, an exact copy as the
draft), the next lesson's draft that guesses wrong (``--cpu-example rejection``), and a crowd of four requests
batched with chunked prefill, all through ``SpeculativeEngine`` / ``SpeculativeBatchEngine`` with a
``SpeculativeRunner``; plus one verify with the wrong number of target tokens, which the engine refuses.
Compared line by line with the engine's runs; then the lesson's invariants on the learner's runs: tokens equal
to plain greedy decoding of the target, each group the accepted drafts plus one token, every slot of both
caches returned. Non-scope: restoring the caches (lesson 13), sampled requests (lesson 14).
"""

from __future__ import annotations

from mini_deepinfer.runtime.speculative import verify

from ..exercise import Check
from ..words import Words
from .spec_scenes import (
    Run,
    both_caches_returned,
    crowd,
    demo,
    equals_plain_greedy,
    groups_follow_drafts,
    same_runs,
)


def refusal() -> Run:
    """Three drafts with three target tokens (four are needed): what the verify says."""
    try:
        delivered = verify.verify_greedy([7, 8, 9], [7, 8, 9])
    except ValueError as exc:
        return Run(lines=[f"refused: {exc}"])
    return Run(lines=[f"delivered {delivered}"])


SCENARIOS = (
    (demo, "acceptance"),
    (demo, "rejection"),
    (crowd, 4, 0.3, 2),
)
RUNS = (*SCENARIOS, (refusal,))


def each_run(invariant):
    """A check step: the invariant holds on the learner's run of every scenario."""
    def step(trial) -> Words | None:
        for scenario, *args in SCENARIOS:
            broken = invariant(f"{scenario.__name__}{tuple(args)}", trial.learner(scenario, *args))
            if broken is not None:
                return broken
        return None
    return step


CHECKS = (
    Check(Words("the demo's rounds (and a draft that guesses wrong, and a batched crowd) equal the engine's, "
                "line by line", "演示的每一轮（以及会猜错的草稿、合批的一组请求）与引擎逐行一致"),
          same_runs(RUNS)),
    Check(Words("each round's group is the accepted drafts, then one token of the target",
                "每一轮的 token 组是被接受的草稿，再加目标模型自己的一个 token"),
          each_run(groups_follow_drafts), "runner"),
    Check(Words("speculative greedy delivers the tokens of plain greedy decoding, token for token",
                "投机 greedy 交付的 token 与普通 greedy 解码逐个相同"),
          each_run(equals_plain_greedy), "runner"),
    Check(Words("every KV and state slot of both caches returned at the end",
                "结束时两份缓存的所有 KV 与状态槽位都已归还"), each_run(both_caches_returned), "draft"),
)
