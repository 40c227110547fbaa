"""``verify_greedy`` and ``verify_sampled``: which drafts a round accepts, and what the round then emits.

The distribution tests draw each case's drafts from q and verify them against p many times, then compare the
emitted tokens with p by a chi-square test. Each test rejects at p-value < ``ALPHA`` = 1e-4, so a correct
implementation fails one of them with probability at most 1e-4 for a random seed; the seeds are fixed, so
the outcome is reproducible. There are 7 such tests in this file: at most 7e-4 for all of them together.
Token ids with probability 0 under p must never be emitted at all (checked exactly, not statistically).
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mini_deepinfer.runtime.sampling import draw, make_generator
from mini_deepinfer.runtime.speculative import residual, verify_greedy, verify_sampled

ALPHA = 1e-4
TRIALS = 8_000


def test_verify_greedy_accepts_the_matching_prefix_and_adds_the_targets_correction():
    assert verify_greedy([5, 6, 9, 1], [5, 6, 7]) == [5, 6, 9]


def test_verify_greedy_adds_a_bonus_token_when_every_draft_matches():
    assert verify_greedy([5, 6, 7, 8], [5, 6, 7]) == [5, 6, 7, 8]


def test_verify_greedy_delivers_one_token_when_the_first_draft_is_wrong():
    assert verify_greedy([4, 6, 7, 8], [5, 6, 7]) == [4]


def test_verify_greedy_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="3 drafts need 4 target tokens"):
        verify_greedy([1, 2, 3], [1, 2, 3])


@given(st.lists(st.integers(0, 3), min_size=2, max_size=9), st.data())
def test_verify_greedy_output_is_a_prefix_of_drafts_plus_one_target_token(target, data):
    drafts = data.draw(st.lists(st.integers(0, 3), min_size=len(target) - 1, max_size=len(target) - 1))
    out = verify_greedy(target, drafts)
    a = len(out) - 1
    assert out[:a] == drafts[:a] == target[:a]
    assert out[a] == target[a]
    assert a == len(drafts) or drafts[a] != target[a]


def chi_square_p_value(counts: Counter, probs: torch.Tensor) -> float:
    """p-value of observed token counts against the distribution ``probs`` (tokens of probability 0 fail)."""
    total = sum(counts.values())
    assert all(probs[t] > 0 for t in counts), f"emitted a token of probability 0: {counts}"
    support = [t for t in range(len(probs)) if probs[t] > 0]
    expected = {t: float(probs[t]) * total for t in support}
    stat = sum((counts.get(t, 0) - e) ** 2 / e for t, e in expected.items())
    dof = len(support) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def run_rounds(p: torch.Tensor, q: torch.Tensor, seed: int) -> list[list[int]]:
    """Draw drafts from q and verify them against p, ``TRIALS`` times, with one generator."""
    generator = make_generator(seed)
    groups = []
    for _ in range(TRIALS):
        drafts = [draw(q[i], generator) for i in range(q.shape[0])]
        groups.append(verify_sampled(p, q, drafts, generator))
    return groups


def rows(*values: list[float]) -> torch.Tensor:
    t = torch.tensor(values, dtype=torch.float64)
    return t / t.sum(-1, keepdim=True)


P = rows([0.5, 0.3, 0.2, 0.0, 0.0], [0.1, 0.1, 0.1, 0.1, 0.6], [0.0, 0.25, 0.25, 0.25, 0.25])
CASES = {
    "equal": P[:2].clone(),
    # disjoint from p in row 0 (so row 1 is never reached)
    "disjoint": rows([0.0, 0.0, 0.0, 0.7, 0.3], [0.5, 0.5, 0.0, 0.0, 0.0]),
    "overlapping": rows([0.1, 0.2, 0.3, 0.4, 0.0], [0.3, 0.3, 0.2, 0.1, 0.1]),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    q = CASES[request.param]
    return request.param, q, run_rounds(P, q, seed=list(CASES).index(request.param))


def test_first_emitted_token_is_distributed_as_the_target(case):
    name, _, groups = case
    assert chi_square_p_value(Counter(g[0] for g in groups), P[0]) > ALPHA, name


def test_second_emitted_token_is_distributed_as_the_target_when_the_first_draft_was_accepted(case):
    name, _, groups = case
    seconds = Counter(g[1] for g in groups if len(g) > 1)
    if name == "disjoint":
        assert not seconds  # a draft with p = 0 is never accepted
        return
    assert chi_square_p_value(seconds, P[1]) > ALPHA, name


def test_bonus_token_is_drawn_from_the_last_target_row(case):
    name, _, groups = case
    bonuses = Counter(g[2] for g in groups if len(g) == 3)
    if name != "equal":
        return
    assert len(bonuses) and sum(bonuses.values()) == TRIALS  # q == p: every draft is accepted
    assert chi_square_p_value(bonuses, P[2]) > ALPHA


def test_a_rejection_resamples_from_the_normalised_residual(case):
    name, q, groups = case
    if name != "overlapping":
        return
    rejected_first = Counter(g[0] for g in groups if len(g) == 1)  # the first draft was rejected
    rest = residual(P[0], q[0])
    assert chi_square_p_value(rejected_first, rest / rest.sum()) > ALPHA


def test_a_draft_the_draft_distribution_cannot_produce_is_refused():
    with pytest.raises(ValueError, match="no probability under q"):
        verify_sampled(P, CASES["disjoint"], [0, 0], make_generator(0))


def test_verify_sampled_accepts_float32_inputs_and_works_in_float64():
    p32, q32 = P.float(), CASES["equal"].float()
    assert verify_sampled(p32, q32, [0, 4], make_generator(0))[:2] == [0, 4]
