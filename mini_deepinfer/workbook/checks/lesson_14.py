"""Lesson 14's check: ``verify_sampled``, probabilistic acceptance, in the engine and by a statistical test.

Scope: the lesson's demo (``model_draft_demo --cpu-example sampling --trace-rounds``: a noisy draft, a request
sampling at temperature 0.1, seed 0) and a sampled crowd of four requests batched with chunked prefill, both
through the real speculative engine; and ``verify_sampled`` called as the runner calls it, on a vocabulary of
five tokens (two drafts drawn from ``Q``, verified against ``P``, one seeded generator): its first rounds'
groups and acceptance tests compared line by line with the engine's, and a draft ``Q`` cannot produce refused
as the engine refuses it. Then, on the learner's runs: each group
is accepted drafts plus one token, and a chi-square test of the delivered tokens against the target's rows
(the first token against ``P[0]``; the second, when the first draft was accepted, against ``P[1]``; the bonus
against ``P[2]``), each at ``ALPHA`` = 1e-3: a correct ``verify_sampled`` fails one of the three with
probability at most 3e-3 for an arbitrary seed. The seeds are fixed, so the check is deterministic (the
reference's p-values at these seeds are 0.94, 0.80 and 0.54); a token of probability 0, or no token at all
where the target expects some, fails at once. Non-scope: the draft's own sampling (``draft.py``), the filters
that make ``p`` and ``q`` (lesson 8).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from mini_deepinfer.runtime.sampling import make_generator
from mini_deepinfer.runtime.speculative import verify

from ..exercise import Check
from ..words import Words
from .spec_scenes import Run, both_caches_returned, crowd, demo, groups_follow_drafts, same_runs

ALPHA = 1e-3  # each of the three tests; at most 3e-3 together (union bound) for a correct verify
TRIALS = 1500  # rounds of two drafts on the small vocabulary
SHOWN = 40  # rounds compared line by line with the engine's
DRAFT_SEED, VERIFY_SEED = 1, 2


def _rows(*values: list[float]) -> torch.Tensor:
    table = torch.tensor(values, dtype=torch.float64)
    return table / table.sum(-1, keepdim=True)


P = _rows([0.5, 0.3, 0.2, 0.0, 0.0], [0.1, 0.1, 0.1, 0.1, 0.6], [0.0, 0.25, 0.25, 0.25, 0.25])
Q = _rows([0.1, 0.2, 0.3, 0.4, 0.0], [0.3, 0.3, 0.2, 0.1, 0.1])  # overlaps P: accepts, rejects, residuals


@dataclass
class VerifyRun(Run):
    """``verify_sampled`` on the small vocabulary: the drafts and delivered group of every round."""

    drafts: list[list[int]] = field(default_factory=list)
    groups: list[list[int]] = field(default_factory=list)


def small_vocabulary(trials: int = TRIALS) -> VerifyRun:
    """``trials`` rounds: two drafts drawn from ``Q`` (their own generator), verified against ``P`` with one
    seeded generator, as a request's rounds are; the first ``SHOWN`` printed with their acceptance tests."""
    torch.manual_seed(0)
    draws = make_generator(DRAFT_SEED)
    columns = [torch.multinomial(Q[i], trials, replacement=True, generator=draws) for i in range(len(Q))]
    run, generator = VerifyRun(), make_generator(VERIFY_SEED)
    for index, drafts in enumerate(torch.stack(columns, 1).tolist()):
        steps: list[verify.AcceptStep] = []
        group = [int(token) for token in verify.verify_sampled(P, Q, drafts, generator, steps)]
        run.drafts.append(drafts)
        run.groups.append(group)
        if index < SHOWN:
            tests = "; ".join(f"{s.token}: p={s.p:.3f} q={s.q:.3f} u={s.u:.6f} "
                              f"{'accepted' if s.accepted else 'rejected'}" for s in steps)
            run.lines.append(f"[round {index}] verify drafts={drafts} ({tests}) -> {group}")
    return run


def refusal() -> Run:
    """A draft that ``Q`` cannot produce (token 4 has probability 0 in row 0): what the verify says."""
    try:
        group = verify.verify_sampled(P, Q, [4, 0], make_generator(VERIFY_SEED))
    except ValueError as exc:
        return Run(lines=[f"refused: {exc}"])
    return Run(lines=[f"delivered {group}"])


SCENARIOS = ((demo, "sampling"), (crowd, 3, 0.5, 3, 8, False, 0.1))


def each_engine_run(trial) -> Words | None:
    """On the learner's sampled engine runs: groups made of accepted drafts, every slot returned."""
    for scenario, *args in SCENARIOS:
        name = f"{scenario.__name__}{tuple(args)}"
        run = trial.learner(scenario, *args)
        broken = groups_follow_drafts(name, run) or both_caches_returned(name, run)
        if broken is not None:
            return broken
    return None


NOT_A_GROUP = Words("round {round} on the small vocabulary: drafts {drafts} gave {group}; a round delivers "
                    "the accepted drafts (a prefix of the drafts), then one token, and stops at the first "
                    "rejection",
                    "小词表上的第 {round} 轮：草稿 {drafts} 给出了 {group}；"
                    "一轮交付被接受的草稿（草稿的前缀），再加一个 token，并在第一次拒绝时停止")


def groups_are_prefixes(trial) -> Words | None:
    run = trial.learner(small_vocabulary)
    for index, (drafts, group) in enumerate(zip(run.drafts, run.groups)):
        if not 1 <= len(group) <= len(drafts) + 1 or group[:-1] != drafts[: len(group) - 1]:
            return NOT_A_GROUP.format(round=index, drafts=drafts, group=group)
    return None


def p_value(counts: Counter, probs: torch.Tensor) -> float:
    """Chi-square p-value of token counts against ``probs``; 0.0 if a token of probability 0 was seen, or
    none at all."""
    total = sum(counts.values())
    if total == 0 or any(not 0 <= token < len(probs) or probs[token] <= 0 for token in counts):
        return 0.0
    support = [token for token in range(len(probs)) if probs[token] > 0]
    expected = {token: float(probs[token]) * total for token in support}
    statistic = sum((counts.get(t, 0) - e) ** 2 / e for t, e in expected.items())
    half = torch.tensor([(len(support) - 1) / 2, statistic / 2], dtype=torch.float64)
    return float(torch.special.gammaincc(half[0], half[1]))


def position_counts(groups: list[list[int]], position: int) -> Counter:
    """The delivered token at ``position`` of the rounds that reached it with every earlier draft accepted."""
    return Counter(group[position] for group in groups if len(group) > position)


NOT_P = Words("on the small vocabulary, the {which} token delivered in {count} rounds has counts {counts}; "
              "the target's row {row} expects {expected} (chi-square p-value {p:.1e} < {alpha:g}): the "
              "delivered tokens are not distributed as sampling the target alone",
              "小词表上，{count} 轮交付的{which_zh} token 的计数是 {counts}；"
              "目标模型第 {row} 行的期望是 {expected}（卡方检验 p 值 {p:.1e} < {alpha:g}）："
              "交付的 token 不服从目标模型单独采样的分布")
WHICH = (("first", "第一个"), ("second", "第二个"), ("bonus", "额外"))


def distributed_as_target(trial) -> Words | None:
    groups = trial.learner(small_vocabulary).groups
    for row, (which, which_zh) in enumerate(WHICH):
        counts = position_counts(groups, row)
        total = sum(counts.values())
        p = p_value(counts, P[row])
        if p < ALPHA:
            expected = [round(float(x) * total) for x in P[row]]
            return NOT_P.format(which=which, which_zh=which_zh, count=total, row=row, alpha=ALPHA, p=p,
                                counts=[counts.get(t, 0) for t in range(len(P[row]))], expected=expected)
    return None


CHECKS = (
    Check(Words("the demo's rounds, a sampled crowd and seeded verifies on a small vocabulary equal the "
                "engine's",
                "演示的每一轮、一组采样请求以及小词表上固定种子的验证与引擎一致"),
          same_runs((*SCENARIOS, (small_vocabulary, SHOWN), (refusal,)))),
    Check(Words("a round delivers accepted drafts then one token, and stops at the first rejection; every "
                "slot of both caches returned", "一轮交付被接受的草稿再加一个 token，并在第一次拒绝时停止；"
                "两份缓存的所有槽位都归还"),
          lambda trial: groups_are_prefixes(trial) or each_engine_run(trial)),
    Check(Words("the delivered tokens are distributed as sampling the target alone (chi-square, 1e-3 each)",
                "交付的 token 服从目标模型单独采样的分布（卡方检验，每项 1e-3）"), distributed_as_target),
)
