"""Sampling: greedy, temperature, top-k, top-p, seeds, batch invariance and the drawn distribution.

The statistical tests use a chi-square goodness-of-fit test with a false-alarm rate of 1e-6: a correct
sampler fails one run in a million. The generators are seeded, so each test is deterministic (it either
always passes or always fails); the threshold says how unlikely a pass-to-fail flip is when a seed changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.runtime.sampling import (
    _invert_cdf,
    draw,
    greedy_tokens,
    make_generator,
    probabilities,
    sample,
)

FALSE_ALARM_RATE = 1e-6


@dataclass(frozen=True)
class Params:
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


GREEDY = Params(temperature=0.0)


def chi_square_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """P(statistic >= observed) under ``probs``, over the cells with positive probability."""
    keep = probs > 0
    expected = probs[keep] * counts.sum()
    statistic = ((counts[keep].to(torch.float64) - expected) ** 2 / expected).sum()
    dof = torch.tensor((int(keep.sum()) - 1) / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(dof, statistic / 2))


def sampled_counts(logits: torch.Tensor, params: Params, draws: int, seed: int) -> torch.Tensor:
    """Token counts from ``draws`` calls of ``sample`` on the same row with one generator."""
    generator = make_generator(seed)
    rows = 500
    batch = logits.expand(rows, -1)
    counts = torch.zeros(logits.numel(), dtype=torch.int64)
    for _ in range(draws // rows):
        tokens = sample(batch, [params] * rows, [generator] * rows)
        counts += torch.bincount(tokens, minlength=logits.numel())
    return counts


def test_greedy_equals_argmax() -> None:
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0))
    tokens = sample(logits, [GREEDY] * 6, [None] * 6)
    assert tokens.dtype == torch.int64
    assert torch.equal(tokens, logits.argmax(dim=-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_tokens_are_argmax_on_ties_nan_and_infinities(dtype: torch.dtype) -> None:
    nan, inf = float("nan"), float("inf")
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0], [-inf] * 4, [1.0, nan, 5.0, nan], [2.0] * 4,
                           [-inf, 0.0, inf, inf]], dtype=dtype)
    assert greedy_tokens(logits).tolist() == [1, 0, 1, 0, 2] == logits.argmax(dim=-1).tolist()
    # ties spread over a Qwen3.5-sized row, which CPU kernels split between threads
    few_values = torch.randint(0, 4, (3, 248_320), generator=torch.Generator().manual_seed(0)).to(dtype)
    assert torch.equal(greedy_tokens(few_values), few_values.argmax(dim=-1))
    assert int(greedy_tokens(few_values[1])) == int(few_values[1].argmax())


def test_top_k_one_equals_greedy_even_with_ties() -> None:
    logits = torch.randn(8, 40, generator=torch.Generator().manual_seed(1))
    logits[0, 3] = logits[0, 7] = logits[0].max() + 1.0  # a tie: the lower token id wins both ways
    params = [Params(temperature=0.7, top_k=1)] * 8
    tokens = sample(logits, params, [make_generator(i) for i in range(8)])
    assert torch.equal(tokens, logits.argmax(dim=-1))
    assert int(tokens[0]) == 3


def test_tiny_top_p_equals_greedy() -> None:
    logits = torch.randn(8, 40, generator=torch.Generator().manual_seed(2))
    params = [Params(temperature=1.3, top_p=1e-9)] * 8
    tokens = sample(logits, params, [make_generator(i) for i in range(8)])
    assert torch.equal(tokens, logits.argmax(dim=-1))


def test_tiny_temperature_is_greedy_without_overflow() -> None:
    logits = torch.tensor([1.0, 3.0, 2.999, -5.0])
    probs = probabilities(logits, Params(temperature=1e-8))
    assert torch.equal(probs, torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=torch.float64))


BASE = torch.tensor([0.4, 0.3, 0.15, 0.1, 0.05], dtype=torch.float64)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (Params(), [0.4, 0.3, 0.15, 0.1, 0.05]),
        (Params(top_k=2), [0.4 / 0.7, 0.3 / 0.7, 0, 0, 0]),
        (Params(top_p=0.65), [0.4 / 0.7, 0.3 / 0.7, 0, 0, 0]),
        (Params(top_p=0.75), [0.4 / 0.85, 0.3 / 0.85, 0.15 / 0.85, 0, 0]),
        (Params(temperature=0.5), [p * p / 0.285 for p in (0.4, 0.3, 0.15, 0.1, 0.05)]),
        (Params(temperature=0.0), [1, 0, 0, 0, 0]),
    ],
    ids=["plain", "top_k", "top_p_two", "top_p_three", "temperature", "greedy"],
)
def test_filtered_distribution_is_exact_on_a_small_vocabulary(params: Params, expected: list[float]) -> None:
    probs = probabilities(BASE.log(), params)
    assert probs.dtype == torch.float64 and probs.device.type == "cpu"
    torch.testing.assert_close(probs, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-12)


def test_top_p_applies_to_the_top_k_renormalised_set() -> None:
    # Top-k 3 renormalises to [0.47, 0.35, 0.18]: two tokens reach 0.8. On the full distribution three would.
    probs = probabilities(BASE.log(), Params(top_k=3, top_p=0.8))
    torch.testing.assert_close(probs, torch.tensor([0.4 / 0.7, 0.3 / 0.7, 0, 0, 0], dtype=torch.float64))


def test_distribution_is_placed_at_the_right_token_ids() -> None:
    permutation = torch.tensor([3, 0, 4, 1, 2])
    logits = BASE.log()[permutation]
    probs = probabilities(logits, Params(top_k=2))
    expected = torch.tensor([0.4 / 0.7, 0.3 / 0.7, 0, 0, 0], dtype=torch.float64)[permutation]
    torch.testing.assert_close(probs, expected)


def reference_probabilities(logits: torch.Tensor, params: Params) -> torch.Tensor:
    """The definition, spelled out: sort everything (ties: lower id first), cut at k, then at top_p."""
    scaled = (logits - logits.max()) / params.temperature
    values, ids = torch.sort(scaled, descending=True, stable=True)
    if params.top_k:
        values, ids = values[: params.top_k], ids[: params.top_k]
    probs = torch.softmax(values, dim=0)
    if params.top_p < 1.0:
        kept = [j for j in range(len(probs)) if float(probs[:j].sum()) < params.top_p]
        probs = torch.zeros_like(probs).index_copy(0, torch.tensor(kept), probs[kept])
        probs = probs / probs.sum()
    return torch.zeros(logits.numel(), dtype=torch.float64).index_copy(0, ids, probs)


logit_values = st.one_of(st.floats(-20, 20), st.integers(-3, 3).map(float))  # integers make ties likely


@settings(max_examples=80, deadline=None)
@given(
    values=st.lists(logit_values, min_size=1, max_size=12),
    temperature=st.floats(0.05, 5.0),
    top_k=st.integers(0, 14),
    top_p=st.floats(0.01, 1.0),
)
def test_filtered_distribution_keeps_the_smallest_top_set(
    values: list[float], temperature: float, top_k: int, top_p: float
) -> None:
    logits = torch.tensor(values, dtype=torch.float64)
    params = Params(temperature, top_k, top_p)
    probs = probabilities(logits, params)
    kept = probs > 0
    assert math.isclose(float(probs.sum()), 1.0, abs_tol=1e-12)
    assert 1 <= int(kept.sum()) <= (top_k or len(values))
    # Every kept token is at least as likely as every dropped one (compared after the shift by the maximum
    # and the temperature, which can round logits a few ulps apart into a tie).
    scaled = (logits - logits.max()) / temperature
    if not bool(kept.all()):
        assert float(scaled[kept].min()) >= float(scaled[~kept].max())
    torch.testing.assert_close(probs, reference_probabilities(logits, params), rtol=0, atol=1e-12)


def test_ties_at_the_top_k_cut_keep_the_lower_token_ids() -> None:
    logits = torch.tensor([1.0, 2.0, 2.0, 2.0, 0.0])
    probs = probabilities(logits, Params(top_k=2))
    assert probs.tolist() == [0.0, 0.5, 0.5, 0.0, 0.0]


def test_probabilities_of_a_batch_use_one_or_per_row_params() -> None:
    logits = torch.stack([BASE.log(), BASE.log().flip(0)])
    shared = probabilities(logits, Params(top_k=2))
    per_row = probabilities(logits, [Params(top_k=2), GREEDY])
    assert shared.shape == (2, 5)
    torch.testing.assert_close(shared[0], per_row[0])
    torch.testing.assert_close(per_row[1], torch.tensor([0, 0, 0, 0, 1], dtype=torch.float64))


def test_same_seed_gives_same_tokens() -> None:
    logits = torch.randn(1, 1000, generator=torch.Generator().manual_seed(3))
    params = [Params(temperature=1.0, top_p=0.95)]

    def run(seed: int) -> list[int]:
        generator = make_generator(seed)
        return [int(sample(logits, params, [generator])[0]) for _ in range(20)]

    assert run(42) == run(42)
    assert run(42) != run(43)


def test_unseeded_generator_can_be_replayed_from_its_initial_seed() -> None:
    first = make_generator(None)
    replay = make_generator(first.initial_seed())
    assert torch.equal(torch.rand(5, generator=first), torch.rand(5, generator=replay))


def test_row_gives_same_token_alone_and_in_a_batch() -> None:
    vocab = 300
    logits = torch.randn(5, vocab, generator=torch.Generator().manual_seed(4))
    params = [
        Params(temperature=0.9, top_k=50),
        GREEDY,
        Params(temperature=1.2, top_p=0.9),
        Params(temperature=0.6),
        Params(temperature=1.0, top_k=20, top_p=0.8),
    ]
    seeds = [10, 11, 12, 13, 14]
    batch_generators = [make_generator(s) for s in seeds]
    alone_generators = [make_generator(s) for s in seeds]
    order = [3, 0, 4, 2, 1]  # the batch also shuffles the rows
    for _ in range(10):
        batched = sample(logits[order], [params[i] for i in order], [batch_generators[i] for i in order])
        for position, i in enumerate(order):
            alone = sample(logits[i : i + 1], [params[i]], [alone_generators[i]])
            assert int(batched[position]) == int(alone[0])


def test_sample_frequencies_match_probabilities() -> None:
    logits = torch.tensor([2.0, 1.5, 1.4, 0.3, 0.0, -0.5, -1.0, -3.0])
    params = Params(temperature=0.8, top_k=6, top_p=0.9)
    expected = probabilities(logits, params)
    counts = sampled_counts(logits, params, draws=20_000, seed=1234)
    assert int(counts[expected == 0].sum()) == 0
    assert chi_square_p_value(counts, expected) > FALSE_ALARM_RATE


def test_draw_frequencies_match_the_given_probabilities() -> None:
    probs = torch.tensor([0.5, 0.0, 0.2, 0.25, 0.05], dtype=torch.float64)
    generator = make_generator(7)
    counts = torch.bincount(torch.tensor([draw(probs, generator) for _ in range(20_000)]), minlength=5)
    assert int(counts[1]) == 0
    assert chi_square_p_value(counts, probs) > FALSE_ALARM_RATE


def test_chi_square_check_detects_a_wrong_distribution() -> None:
    probs = torch.tensor([0.5, 0.0, 0.2, 0.25, 0.05], dtype=torch.float64)
    generator = make_generator(7)
    counts = torch.bincount(torch.tensor([draw(probs, generator) for _ in range(20_000)]), minlength=5)
    wrong = torch.tensor([0.45, 0.0, 0.25, 0.25, 0.05], dtype=torch.float64)
    assert chi_square_p_value(counts, wrong) < FALSE_ALARM_RATE


def test_draw_never_returns_a_zero_probability_index_even_at_the_top_of_the_range() -> None:
    probs = torch.tensor([0.0, 0.5, 0.5, 0.0], dtype=torch.float64)
    assert int(_invert_cdf(probs, torch.tensor([1.0], dtype=torch.float64))) == 2
    assert int(_invert_cdf(probs, torch.tensor([0.0], dtype=torch.float64))) == 1


def test_each_sampled_token_consumes_exactly_one_uniform() -> None:
    logits = torch.randn(3, 30, generator=torch.Generator().manual_seed(5))
    generator, reference = make_generator(9), make_generator(9)
    sample(logits, [Params(), GREEDY, Params(top_k=3)], [generator, generator, generator])
    torch.rand(2, generator=reference, dtype=torch.float64)
    assert torch.equal(torch.rand(3, generator=generator), torch.rand(3, generator=reference))


def test_low_precision_logits_are_sampled_in_float32() -> None:
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(6)).to(torch.bfloat16)
    tokens = sample(logits, [Params(top_k=1)] * 4, [make_generator(i) for i in range(4)])
    assert torch.equal(tokens, logits.argmax(dim=-1))
    assert math.isclose(float(probabilities(logits[0], Params()).sum()), 1.0, abs_tol=1e-12)


def test_sampled_row_without_generator_is_rejected() -> None:
    with pytest.raises(ValueError, match="row 0 samples"):
        sample(torch.zeros(1, 4), [Params()], [None])


@pytest.mark.parametrize("bad", [dict(temperature=-1.0), dict(temperature=float("nan")), dict(top_k=-1),
                                 dict(top_p=0.0), dict(top_p=1.5), dict(top_p=float("nan"))])
def test_invalid_params_are_rejected_when_the_request_is_made(bad: dict) -> None:
    (name,) = bad
    with pytest.raises(ValueError, match=f"^{name} must be"):
        SamplingParams(**bad)


def test_mismatched_lengths_are_rejected() -> None:
    with pytest.raises(ValueError, match="2 logit rows"):
        sample(torch.zeros(2, 4), [GREEDY], [None])


def test_engine_sampling_params_fit_the_protocol() -> None:
    params = SamplingParams(temperature=1.0, top_k=2, seed=5)
    probs = probabilities(BASE.log(), params)
    torch.testing.assert_close(probs, torch.tensor([0.4 / 0.7, 0.3 / 0.7, 0, 0, 0], dtype=torch.float64))
    assert sample(BASE.log()[None], [params], [make_generator(params.seed)]).item() in (0, 1)
