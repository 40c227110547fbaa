"""Speculative decoding through the engine: same tokens as plain greedy, caches equal to a cold recomputation.

The target is the demo's random Qwen3.5 (``model_draft_demo.demo_target``, transformers' initialisation scale
0.02); the draft is a perturbed copy that agrees only sometimes, so runs contain full acceptances, partial
acceptances and rejections (each test checks that they do).

The cold-cache tolerance is 1e-5 in float32. Plain decoding on this model already differs from a cold prefill
by about 1e-6 (decode and prefill sum in different orders); a state restored to the wrong position differs
by orders of magnitude more. On a model initialised at 0.1 (``pipeline_demo``) plain decoding alone differs
from a cold prefill by about 7e-5 in the keys, so the bound is a property of the model's scale as well.
"""

from __future__ import annotations

import random

import pytest
import torch

from mini_deepinfer import SamplingParams
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.model_draft_demo import demo_target
from mini_deepinfer.models import build_model
from mini_deepinfer.models.presets import qwen3_5_config
from mini_deepinfer.runtime.factory import build_engine
from mini_deepinfer.tools.checkpoints import perturbed_copy
from mini_deepinfer.tools.checks import cold_difference

PROMPTS = {"A": list(range(1, 42)), "B": [5, 6, 7], "C": [9, 8, 7, 6, 5, 4, 3], "D": [200]}
MAX_NEW = 12
CAPACITY = 256
COLD_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return demo_target()


@pytest.fixture(scope="module")
def draft(target):
    return perturbed_copy(target, noise=0.1, seed=25)


@pytest.fixture(scope="module")
def plain_greedy(target):
    """The reference: each request alone, plain greedy decoding of the target."""
    outputs = {}
    for rid, prompt in PROMPTS.items():
        engine = build_engine(target, EngineConfig(kv_capacity=CAPACITY), batching=False)
        engine.submit(rid, prompt, SamplingParams(max_new_tokens=MAX_NEW))
        engine.run()
        outputs[rid] = engine.requests[rid].output_token_ids
    return outputs


def speculative(target, draft, width: int, batched: bool, capacity: int = CAPACITY, states: int = 4, **kw):
    if batched:
        kw.setdefault("max_batched_tokens", 7)
        kw.update(max_num_seqs=states, chunked_prefill=True)
    config = EngineConfig(kv_capacity=capacity, state_capacity=states, spec_width=width, **kw)
    return build_engine(target, config, draft=draft, batching=batched)


@pytest.mark.parametrize("batched", [False, True], ids=["alone", "batched_chunked"])
@pytest.mark.parametrize("width", [1, 2, 3, 4, 5])
def test_speculative_greedy_equals_plain_greedy_token_for_token(target, draft, plain_greedy, width, batched):
    engine = speculative(target, draft, width, batched)
    for rid, prompt in PROMPTS.items():
        engine.submit(rid, prompt, SamplingParams(max_new_tokens=MAX_NEW))
    engine.run()
    assert {rid: r.output_token_ids for rid, r in engine.requests.items()} == plain_greedy
    stats = engine.runner.stats
    assert 0 < stats["accepted"] < stats["proposed"]  # some drafts were rejected, some accepted
    assert engine.kv_pool.num_free == CAPACITY and engine.state_pool.num_free == 4
    assert engine.runner.draft.free_kv_slots() == CAPACITY and engine.runner.draft.free_state_slots() == 4


def assert_caches_equal_cold_recomputation(engine) -> int:
    """Both caches of every running request against a cold recomputation; returns the comparisons made."""
    runner = engine.runner
    compared = 0
    for req in engine.running:
        committed = (list(req.prompt_token_ids) + req.output_token_ids)[: req.num_computed]
        assert len(req.kv_slots) == req.num_computed
        if req.output_token_ids:
            assert req.num_computed == req.prompt_len + len(req.output_token_ids) - 1
        diff = cold_difference(runner.model, runner.cache, committed, req.kv_slots, req.state_slot)
        assert max(diff.values()) <= COLD_TOLERANCE, ("target", req.request_id, diff)
        held = runner.draft.computed.get(req.request_id, 0)
        assert held <= req.num_computed
        if held:
            diff = cold_difference(runner.draft.model, runner.draft.cache, committed[:held], req.kv_slots,
                                   req.state_slot)
            assert max(diff.values()) <= COLD_TOLERANCE, ("draft", req.request_id, diff)
        compared += 1
    return compared


@pytest.mark.parametrize("seed", range(4))
def test_after_every_round_both_caches_equal_a_cold_recomputation_of_the_committed_prefix(target, seed):
    rng = random.Random(seed)
    width = rng.randint(1, 5)
    # this random target's logits are nearly flat: sampled rounds reject often only at a low temperature
    sampled = seed % 2 == 1
    temperature = rng.choice([0.05, 0.1]) if sampled else 0.0
    draft = perturbed_copy(target, noise=0.5 if sampled else rng.choice([0.1, 0.2, 0.3]), seed=seed)
    engine = speculative(target, draft, width, batched=True, max_batched_tokens=rng.randint(3, 10))
    for i in range(3):
        prompt = [rng.randrange(256) for _ in range(rng.randint(1, 20))]
        engine.submit(f"r{i}", prompt, SamplingParams(max_new_tokens=rng.randint(4, 14),
                                                      temperature=temperature, seed=seed * 10 + i))
    rounds_with_rollback, compared = 0, 0
    while engine.has_unfinished():
        before = len(engine.trace.of_kind("rollback"))
        engine.step()
        rounds_with_rollback += len(engine.trace.of_kind("rollback")) > before
        compared += assert_caches_equal_cold_recomputation(engine)
    assert rounds_with_rollback > 0 and compared > 0
    assert engine.kv_pool.num_free == CAPACITY and engine.runner.draft.free_kv_slots() == CAPACITY


def test_a_rollback_returns_exactly_the_slots_of_the_rejected_positions(target, draft):
    engine = speculative(target, draft, 3, batched=False)
    engine.submit("A", [11, 22, 33], SamplingParams(max_new_tokens=12))
    engine.step()  # prefill
    engine.step()  # the first decode round: every draft is rejected (see the demo)
    (rollback,) = engine.trace.of_kind("rollback")
    req = engine.requests["A"]
    assert rollback.data == {"slots": [4, 5, 6], "kept": 4}
    assert req.kv_slots == [0, 1, 2, 3] and engine.kv_pool.num_free == 16 - 4 + (CAPACITY - 16)


def test_the_draft_cache_is_kept_to_the_committed_prefix_and_topped_up_next_round(target, draft):
    engine = speculative(target, draft, 3, batched=False)
    engine.submit("A", [11, 22, 33], SamplingParams(max_new_tokens=12))
    seen = []
    while engine.has_unfinished():
        engine.step()
        for detail in engine.runner.details.values():
            seen.append((detail.draft.computed, detail.draft.kept, len(detail.proposal.inputs[0])))
    # computed 6 -> keep 4 -> the next top-up has 1 input (position 4), the cache then holds 5 positions
    assert seen[0][:2] == (6, 4) and seen[1][2] == 1
    assert any(computed == kept and topup == 2 for (computed, kept, _), (_, _, topup) in zip(seen, seen[1:]))


def test_a_speculative_decode_spends_its_verified_positions_from_the_token_budget(target, draft):
    engine = speculative(target, draft, 5, batched=True, max_batched_tokens=4)
    for rid, prompt in PROMPTS.items():
        engine.submit(rid, prompt, SamplingParams(max_new_tokens=MAX_NEW))
    engine.run()
    launched = engine.trace.of_kind("launch")
    assert max(e.data["tokens"] for e in launched) == 4
    decodes = [e for e in engine.trace.of_kind("schedule") if e.data["phase"] == "decode"]
    widths = [len(e.data["inputs"]) - 1 for e in decodes]
    assert max(widths) == 3  # the budget of 4 cuts the width of 5 to 3


def test_the_last_group_never_passes_max_new_tokens_and_the_reservation_holds(target, draft):
    engine = speculative(target, draft, 5, batched=False, capacity=3 + 4, states=1)
    engine.submit("A", [1, 2, 3], SamplingParams(max_new_tokens=4))
    engine.run()
    req = engine.requests["A"]
    assert len(req.output_token_ids) == 4 and engine.kv_pool.num_free == 7


def test_cancel_between_rounds_keeps_whole_groups_and_both_caches_return_every_slot(target, draft):
    engine = speculative(target, draft, 3, batched=False)
    engine.submit("A", [11, 22, 33], SamplingParams(max_new_tokens=12))
    while engine.has_unfinished():
        for delivery in engine.step():
            if len(engine.requests["A"].output_token_ids) >= 2:
                engine.cancel("A")
    req = engine.requests["A"]
    assert req.finish_reason.value == "cancelled"
    assert req.output_token_ids == [t for g in req.committed_groups for t in g]
    assert engine.kv_pool.num_free == CAPACITY and engine.runner.draft.free_kv_slots() == CAPACITY
    assert engine.runner.draft.free_state_slots() == 4 and not engine.runner.draft.cache.snapshots


def test_speculation_together_with_pipeline_is_refused(target, draft):
    with pytest.raises(ValueError, match="pipeline cannot be combined"):
        speculative(target, draft, 3, batched=False, pipeline=True)


def test_a_draft_with_another_vocabulary_is_refused(target):
    other = build_model(qwen3_5_config("tiny", vocab_size=300), torch.float32, "cpu", seed=0)
    with pytest.raises(ValueError, match="vocabulary"):
        build_engine(target, EngineConfig(kv_capacity=16, spec_width=3), draft=other)


@pytest.mark.parametrize("width", [-1, 17])
def test_draft_width_outside_0_to_16_is_refused(width):
    with pytest.raises(ValueError, match="0..16"):
        EngineConfig(kv_capacity=16, spec_width=width)


def test_a_draft_without_a_width_or_a_width_without_a_draft_is_refused(target, draft):
    with pytest.raises(ValueError, match="with a draft model and 0 without one"):
        build_engine(target, EngineConfig(kv_capacity=16), draft=draft)
    with pytest.raises(ValueError, match="with a draft model and 0 without one"):
        build_engine(target, EngineConfig(kv_capacity=16, spec_width=2))


def test_sampled_speculative_runs_are_reproducible_from_the_seed(target, draft):
    outputs = []
    for _ in range(2):
        engine = speculative(target, draft, 3, batched=True)
        for i, (rid, prompt) in enumerate(PROMPTS.items()):
            engine.submit(rid, prompt, SamplingParams(max_new_tokens=MAX_NEW, temperature=0.9, seed=i))
        engine.run()
        outputs.append({rid: r.output_token_ids for rid, r in engine.requests.items()})
    assert outputs[0] == outputs[1]
