"""Lesson 8's check: ``_distribution``, one row of logits filtered by temperature, top-k and top-p.

Scope: seeded sampling through the real engine (a random tiny Qwen3.5, five requests with different
temperatures, top-k, top-p and seeds, batched, one greedy), the lesson's demo (the five-token logits
``log([0.4, 0.3, 0.15, 0.1, 0.05])`` under each setting of its table, and eight draws of seed 7, alone and as
one row of a batch of four), compared with the engine's; then the filtered rows themselves (the demo's, a
40-token row with ties, and the same row in bfloat16) against the engine's, against the textbook filter
written out here (softmax of ``logits / T``, the k largest with lower ids first on ties, then the smallest
prefix of the renormalised top-k set whose mass reaches top_p), the kept probabilities summing to 1, and a
tiny temperature on huge logits staying finite. Non-scope: drawing from the distribution (``_invert_cdf``),
greedy rows (``argmax``), speculative acceptance (lesson 14).
"""

from __future__ import annotations

import torch

from mini_deepinfer.core.config import EngineConfig
from mini_deepinfer.core.request import SamplingParams
from mini_deepinfer.runtime import sampling

from ..exercise import Check
from ..words import Words
from .torch_scenes import (
    THE_ENGINE,
    Ask,
    Served,
    fill,
    first_token_difference,
    one_thread,
    serve,
    tensor_difference,
    tiny_qwen35,
)

P = SamplingParams
DEMO_LOGITS = torch.tensor((0.4, 0.3, 0.15, 0.1, 0.05), dtype=torch.float64).log()
DEMO_SETTINGS = {"temperature 1": P(temperature=1.0), "temperature 0.5": P(temperature=0.5),
                 "temperature 2": P(temperature=2.0), "top_k 2": P(temperature=1.0, top_k=2),
                 "top_p 0.75": P(temperature=1.0, top_p=0.75),
                 "top_k 3, top_p 0.8": P(temperature=1.0, top_k=3, top_p=0.8)}
ROW_SETTINGS = {"temperature 0.7": P(temperature=0.7), "top_k 1": P(temperature=1.3, top_k=1),
                "top_k 7": P(temperature=1.0, top_k=7), "top_p 0.3": P(temperature=1.0, top_p=0.3),
                "top_k 10, top_p 0.9": P(temperature=0.8, top_k=10, top_p=0.9),
                "top_k 100 (more than the vocabulary)": P(temperature=1.0, top_k=100),
                "top_p 1e-9 (one token)": P(temperature=1.0, top_p=1e-9),
                "temperature 1e-5": P(temperature=1e-5)}
HUGE = torch.tensor([3e34, 2e34, 1e34, 0.0], dtype=torch.float32)
ASKS = (Ask("warm", (5, 6, 7), P(max_new_tokens=6, temperature=0.8, seed=1)),
        Ask("top_k", (8, 9), P(max_new_tokens=6, temperature=1.5, top_k=5, seed=2)),
        Ask("top_p", (10, 11, 12, 13), P(max_new_tokens=6, temperature=1.5, top_p=0.5, seed=3)),
        Ask("both", (14,), P(max_new_tokens=6, temperature=1.0, top_k=3, top_p=0.8, seed=4)),
        Ask("greedy", (15, 16), P(max_new_tokens=4)))


def row_with_ties() -> torch.Tensor:
    """40 float32 logits; the two largest are equal, and so are the 7th to 9th largest (top-k ties)."""
    row = torch.randn(40, generator=torch.Generator().manual_seed(8)).mul_(2.0)
    order = row.argsort(descending=True)
    row[order[1]] = row[order[0]]
    row[order[7]] = row[order[8]] = row[order[6]]
    return row


def rows() -> list[tuple[Words, torch.Tensor, SamplingParams]]:
    """(name, logits, parameters) of every filtered row the check looks at."""
    found = [(Words(f"the demo's logits, {name}", f"演示的 logits，{name}"), DEMO_LOGITS, params)
             for name, params in DEMO_SETTINGS.items()]
    found += [(Words(f"a 40-token row with ties, {name}", f"含并列值的 40 个 token 的一行，{name}"),
               row_with_ties(), params) for name, params in ROW_SETTINGS.items()]
    found.append((Words("the 40-token row in bfloat16, top_k 5", "bfloat16 的那 40 个 token 的一行，top_k 5"),
                  row_with_ties().bfloat16(),
                  P(temperature=0.9, top_k=5)))
    found.append((Words("logits near 3e34 at temperature 1e-5", "约 3e34 的 logits，温度 1e-5"), HUGE,
                  P(temperature=1e-5)))
    return found


def engine_run() -> Served:
    """Five requests batched: four sampled with their own seeds, one greedy."""
    config = EngineConfig(kv_capacity=64, max_num_seqs=5, max_batched_tokens=32, chunked_prefill=True)
    return serve(tiny_qwen35(), ASKS, config)


def demo_draws() -> Served:
    """The demo's eight draws of seed 7 at temperature 1, alone and as row 1 of a batch of four."""
    neighbours = ((torch.tensor([2.0, 0.0, 1.0, -1.0, 0.5]), P(temperature=0.0), None),
                  (torch.tensor([0.0, 0.0, 0.0, 0.0, 3.0]), P(temperature=0.7, seed=1), 1),
                  (torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), P(temperature=1.5, top_k=2, seed=2), 2))
    served = Served()
    with one_thread():
        for name in ("temperature 1", "top_k 3, top_p 0.8"):
            params, generator = DEMO_SETTINGS[name], sampling.make_generator(7)
            served.tokens[f"seed 7, {name}"] = [int(sampling.sample(DEMO_LOGITS[None], [params], [generator]))
                                                for _ in range(8)]
        generators = [sampling.make_generator(seed) if seed is not None else None for *_, seed in neighbours]
        batch = [(neighbours[0][0], neighbours[0][1], generators[0]),
                 (DEMO_LOGITS.float(), P(temperature=1.0), sampling.make_generator(7)),
                 *[(n[0], n[1], g) for n, g in zip(neighbours[1:], generators[1:])]]
        logits = torch.stack([row for row, _, _ in batch])
        draws = [sampling.sample(logits, [p for _, p, _ in batch], [g for *_, g in batch]).tolist()
                 for _ in range(8)]
        served.tokens["seed 7, row 1 of a batch of four"] = [d[1] for d in draws]
    return served


def filtered() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``_distribution`` of every row, and ``probabilities`` (the same, in vocabulary order, float64)."""
    with one_thread():
        return [(*sampling._distribution(row, params), sampling.probabilities(row, params))
                for _, row, params in rows()]


def same_as_engine(trial) -> Words | None:
    for scene in (engine_run, demo_draws):
        want, got = trial.engine(scene).tokens, trial.learner(scene).tokens
        differs = first_token_difference(scene.__name__, want, got)
        if differs is not None:
            return differs
    return None


DISTRIBUTION = Words("{row}, the distribution", "{row}，分布")
IDS_DIFFER = Words("{row}: you keep the tokens {actual}, the engine {expected}",
                   "{row}：你保留的 token 是 {actual}，引擎保留的是 {expected}")


def distributions_equal_engine(trial) -> Words | None:
    for (name, _, _), want, got in zip(rows(), trial.engine(filtered), trial.learner(filtered)):
        want_probs, want_ids, want_vocab = want
        got_probs, got_ids, got_vocab = got
        kept = sorted(got_ids[got_probs > 0].tolist())
        expected = sorted(want_ids[want_probs > 0].tolist())
        if kept != expected:
            return fill(IDS_DIFFER, row=name, actual=kept, expected=expected)
        differs = tensor_difference(fill(DISTRIBUTION, row=name), THE_ENGINE, want_vocab, got_vocab, 1e-6)
        if differs is not None:
            return differs
    return None


def textbook(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The filter as the lesson states it, in float64 and vocabulary order."""
    probs = torch.softmax(logits.double() / params.temperature, dim=0)
    order = torch.sort(logits.double(), descending=True, stable=True).indices
    if params.top_k:
        order = order[: params.top_k]
    kept = probs[order] / probs[order].sum()
    before = torch.cumsum(kept, dim=0) - kept
    kept = torch.where(before < params.top_p, kept, torch.zeros_like(kept))
    out = torch.zeros_like(probs)
    out[order] = kept / kept.sum()
    return out


THE_TEXTBOOK = Words("the lesson's filter: softmax(logits / T), the top-k, then the smallest prefix that "
                     "reaches top_p",
                     "本课所说的过滤：softmax(logits / T)，取 top-k，再取概率之和达到 top_p 的最短前缀")


def distributions_are_the_filter(trial) -> Words | None:
    for (name, row, params), (_, _, got) in zip(rows()[:-1], trial.learner(filtered)):
        want = textbook(row, params)
        differs = tensor_difference(fill(DISTRIBUTION, row=name), THE_TEXTBOOK, want, got, 1e-6)
        if differs is not None:
            return differs
    return None


NOT_ONE = Words("{row}: the probabilities you return sum to {total:.6f}, not 1",
                "{row}：你返回的概率之和是 {total:.6f}，不是 1")


def kept_sum_to_one(trial) -> Words | None:
    for (name, _, _), (probs, _, _) in zip(rows()[:-1], trial.learner(filtered)):  # the huge row: next step
        total = float(probs.double().sum())
        if not abs(total - 1.0) <= 1e-5:
            return fill(NOT_ONE, row=name, total=total)
    return None


OVERFLOW = Words("logits near 3e34 at temperature 1e-5: your distribution is {probs} (divided first, "
                 "3e34 / 1e-5 overflows to inf); subtract the maximum before dividing",
                 "logits 约为 3e34、温度 1e-5：你的分布是 {probs}（先除的话 3e34 / 1e-5 溢出为 inf）；"
                 "应先减去最大值再除")


def tiny_temperature_stays_finite(trial) -> Words | None:
    probs = trial.learner(filtered)[-1][2]
    if torch.isfinite(probs).all() and float(probs[0]) == 1.0:
        return None
    return OVERFLOW.format(probs=[round(p, 4) for p in probs.tolist()])


CHECKS = (
    Check(Words("seeded samples through the engine and the demo's eight draws of seed 7 equal the engine's",
                "经引擎的固定种子采样以及演示中种子 7 的八次抽取都与引擎一致"), same_as_engine),
    Check(Words("the distribution is softmax(logits / T), cut to the top-k, then to the smallest prefix that "
                "reaches top_p", "分布是 softmax(logits / T)，截到 top-k，再截到达到 top_p 的最短前缀"),
          distributions_are_the_filter, "filter"),
    Check(Words("the kept probabilities sum to 1", "保留的概率之和为 1"), kept_sum_to_one, "filter"),
    Check(Words("a tiny temperature cannot overflow", "很小的温度也不会溢出"), tiny_temperature_stays_finite,
          "filter"),
    Check(Words("the kept tokens and the distribution equal the engine's under every filter",
                "每种过滤下保留的 token 与分布都与引擎一致"), distributions_equal_engine, "filter"),
)
