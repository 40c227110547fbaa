"""Decode rounds on static buffers (the graph path) equal eager execution; padding touches only the dummy
slots.

On CPU nothing is captured: ``DecodeGraphs`` runs the very step a graph would hold, on the bucket's static
buffer, padded to the bucket's shape. So these tests check on a CPU everything of the graph path but the
capture itself: the padded layout, the dummy slots, the gather of tokens still in flight, the buckets.

What "equal" means: the greedy tokens are identical, and both caches (keys, values, convolution windows,
recurrent states) agree within 1e-5. Bit-for-bit equality is not expected: a padded round multiplies more rows
at once and attends over more (masked) keys, and a CPU's matrix kernels and reductions may order their sums
differently for a different shape.
"""

from __future__ import annotations

import pytest
import torch

from mini_deepinfer import SamplingParams
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.models import build_model
from mini_deepinfer.models.presets import qwen3_5_config
from mini_deepinfer.runtime.factory import build_engine, new_cache
from mini_deepinfer.runtime.graphs import DecodeGraphs, powers_of_two_up_to

PROMPTS = {"a": list(range(3, 20)), "b": [7, 8, 9], "c": list(range(40, 46)), "d": [200, 3]}
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def model():
    return build_model(qwen3_5_config("tiny", initializer_range=0.1), torch.float32, "cpu", seed=0)


def run(model, graphs: bool, pipeline: bool, stagger: bool):
    config = EngineConfig(kv_capacity=160, max_num_seqs=3, max_batched_tokens=8, chunked_prefill=True,
                          pipeline=pipeline)
    engine = build_engine(model, config, use_graphs=graphs)
    queue = list(PROMPTS.items())
    while queue or engine.has_unfinished():
        arriving, queue = (queue[:1], queue[1:]) if stagger else (queue, [])
        for rid, prompt in arriving:
            engine.submit(rid, prompt, SamplingParams(max_new_tokens=10 + len(rid)))
        engine.step()
    assert engine.kv_pool.num_free == 160 and engine.state_pool.num_free == 3
    return {rid: r.output_token_ids for rid, r in engine.requests.items()}, engine


@pytest.mark.parametrize("pipeline", [False, True], ids=["synchronous", "cross_round"])
@pytest.mark.parametrize("stagger", [False, True], ids=["together", "staggered"])
def test_static_buffer_decode_gives_the_tokens_of_eager_decode(model, pipeline, stagger):
    eager, eager_engine = run(model, graphs=False, pipeline=pipeline, stagger=stagger)
    static, static_engine = run(model, graphs=True, pipeline=pipeline, stagger=stagger)
    assert static == eager
    assert static_engine.runner.rounds_by_mode["graph"] > 0
    assert eager_engine.runner.rounds_by_mode["graph"] == 0
    assert len(static_engine.runner.graphs.buckets) > 1, "several buckets (rows x context) were used"


def test_padding_rows_touch_only_dummy_slots_and_real_slots_match_an_eager_round(model):
    """Same prompts, prefilled eagerly in both; one decode round each way; every real slot then agrees, and
    the padding row changed nothing but the dummy slots."""
    engines = {}
    for graphs in (False, True):
        engine = build_engine(model, EngineConfig(kv_capacity=64, max_num_seqs=4, max_batched_tokens=64),
                              use_graphs=graphs)
        for rid in ("a", "b", "c"):  # three rows: the bucket of four pads one
            engine.submit(rid, PROMPTS[rid], SamplingParams(max_new_tokens=4))
        engine.step()  # the prefill round, eager in both
        engines[graphs] = engine
    cache = engines[True].runner.cache
    before = {name: t.clone() for name, t in tensors(cache)}
    for engine in engines.values():
        engine.step()  # one decode round
    assert engines[True].runner.rounds_by_mode == {"graph": 1, "eager": 1}
    used_kv = [s for r in engines[True].requests.values() for s in r.kv_slots]
    used_state = [r.state_slot for r in engines[True].requests.values()]
    for (name, ours), (_, theirs) in zip(tensors(cache), tensors(engines[False].runner.cache)):
        rows = used_state if "state" in name else used_kv
        torch.testing.assert_close(ours[rows], theirs[rows], atol=TOLERANCE, rtol=0)
        untouched = [i for i in range(ours.shape[0] - 1) if i not in rows]  # all but the dummy (last) row
        assert torch.equal(ours[untouched], before[name][untouched]), f"{name}: padding wrote a real slot"


def tensors(cache):
    for i in sorted(cache.key_cache):
        yield f"key.{i}", cache.key_cache[i]
        yield f"value.{i}", cache.value_cache[i]
    for i in sorted(cache.conv_state):
        yield f"conv_state.{i}", cache.conv_state[i]
        yield f"recurrent_state.{i}", cache.recurrent_state[i]


def test_sampled_rows_and_prefill_rounds_run_eagerly(model):
    engine = build_engine(model, EngineConfig(kv_capacity=64, max_num_seqs=2, max_batched_tokens=64),
                          use_graphs=True)
    engine.submit("s", PROMPTS["b"], SamplingParams(max_new_tokens=5, temperature=0.7, seed=3))
    engine.run()
    assert engine.runner.rounds_by_mode == {"graph": 0, "eager": 5}


def test_buckets_are_powers_of_two_up_to_the_capacities(model):
    cache = new_cache(model, kv_capacity=300, state_capacity=6, dummy_slots=True)
    graphs = DecodeGraphs(model, cache)
    assert graphs.rows == [1, 2, 4, 6] and graphs.max_rows == 6
    assert graphs.contexts == [64, 128, 256, 300]
    assert powers_of_two_up_to(1) == [1]


def test_graphs_need_a_cache_with_dummy_slots(model):
    with pytest.raises(ValueError, match="dummy slots"):
        DecodeGraphs(model, new_cache(model, kv_capacity=16, state_capacity=1))


def test_every_bucket_exists_before_the_first_request_and_none_is_made_once_rounds_run(model, monkeypatch):
    engine = build_engine(model, EngineConfig(kv_capacity=160, max_num_seqs=3, max_batched_tokens=64),
                          use_graphs=True)
    graphs = engine.runner.graphs
    before = dict(graphs.buckets)
    assert set(before) == {(r, c) for r in graphs.rows for c in graphs.contexts}
    assert engine.runner.capture_s == graphs.capture_s > 0, "the start-up time is there for the record"

    def no_new_bucket(*_):
        raise AssertionError("a bucket was made while requests run")

    monkeypatch.setattr(DecodeGraphs, "_new_bucket", no_new_bucket)
    for rid, prompt in PROMPTS.items():
        engine.submit(rid, prompt, SamplingParams(max_new_tokens=60))  # "a" crosses 64 keys: a second bucket
    engine.run()
    assert not [r.error for r in engine.requests.values() if r.error]
    assert engine.runner.rounds_by_mode["graph"] > 0
    assert graphs.buckets.keys() == before.keys() and all(graphs.buckets[k] is b for k, b in before.items())


def test_the_sampled_token_buffer_has_its_final_size_and_refuses_to_grow(model):
    engine = build_engine(model, EngineConfig(kv_capacity=64, max_num_seqs=2, max_batched_tokens=64),
                          use_graphs=True)
    runner = engine.runner
    address = runner.sampled.data_ptr()
    assert runner.sampled.numel() == runner.graphs.max_rows == 2 and runner.graphs.sampled is runner.sampled
    engine.submit("a", PROMPTS["a"], SamplingParams(max_new_tokens=4))
    engine.run()
    assert runner.sampled.data_ptr() == address
    with pytest.raises(RuntimeError, match="never grows"):
        runner._keep_sampled([], torch.zeros(3, dtype=torch.int64))
    assert runner.sampled.data_ptr() == address
