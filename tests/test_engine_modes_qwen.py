"""One small random Qwen3.5 through every engine mode: the same tokens and the same logits.

Alone, one-at-a-time, batched under any budget, chunked, staggered arrival, and cross-round
(launch N+1 before reading N) must all give identical greedy tokens. float32 logits agree within
1e-4 of each request run alone (a different batch or chunk shape changes the order of float32 sums:
the largest difference measured here is about 5e-5 at a logit scale of 3.6), and within 1e-5 between
synchronous and cross-round runs of the same workload.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
import torch

from mini_deepinfer import Engine, SamplingParams
from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.models import build_model
from mini_deepinfer.models.presets import qwen3_5_config
from mini_deepinfer.runtime.factory import new_cache
from mini_deepinfer.runtime.model_runner import ModelRunner

PROMPTS = {"A": list(range(1, 42)), "B": [5, 6, 7], "C": [9, 8, 7, 6, 5, 4, 3], "D": [200]}
MAX_NEW = 12
CAPACITY = 256
TOLERANCE = 1e-4  # against the request alone
SAME_WORK_TOLERANCE = 1e-5  # synchronous vs cross-round


def tiny_qwen35() -> torch.nn.Module:
    return build_model(qwen3_5_config("tiny", initializer_range=0.1), torch.float32, "cpu", seed=0)


@pytest.fixture(scope="module")
def model():
    return tiny_qwen35()


class LogitsLog(ModelRunner):
    """A ModelRunner that remembers, per request, the logits of every token it sampled, in order."""

    def __init__(self, model):
        super().__init__(model, new_cache(model, CAPACITY, len(PROMPTS)), keep_logits=True)
        self.log: dict[str, list[torch.Tensor]] = defaultdict(list)

    def read(self, handle):
        result = super().read(handle)
        for rid, row in result.logits.items():
            self.log[rid].append(row)
        return result


def run(model, make_engine, stagger: bool = False, cancel: dict[str, int] | None = None):
    """Run PROMPTS through an engine; return outputs, per-token logits, and the engine."""
    runner = LogitsLog(model)
    engine = make_engine(runner)
    queue = list(PROMPTS.items())
    while queue or engine.has_unfinished():
        arriving, queue = (queue[:1], queue[1:]) if stagger else (queue, [])
        for rid, prompt in arriving:
            engine.submit(rid, prompt, SamplingParams(max_new_tokens=MAX_NEW))
        engine.step()
        for rid, at in (cancel or {}).items():
            if engine.round_id == at:
                engine.cancel(rid)
    assert engine.kv_pool.num_free == CAPACITY
    assert engine.state_pool.num_free == len(PROMPTS)
    outputs = {rid: r.output_token_ids for rid, r in engine.requests.items()}
    logits = {rid: runner.log[rid][: len(out)] for rid, out in outputs.items()}
    return outputs, logits, engine


@pytest.fixture(scope="module")
def alone(model):
    """The reference: each request alone in a one-at-a-time engine."""
    outputs, logits = {}, {}
    for rid, prompt in PROMPTS.items():
        runner = LogitsLog(model)
        engine = Engine(runner, EngineConfig(kv_capacity=CAPACITY, state_capacity=len(PROMPTS)))
        engine.submit(rid, prompt, SamplingParams(max_new_tokens=MAX_NEW))
        engine.run()
        outputs[rid] = engine.requests[rid].output_token_ids
        logits[rid] = runner.log[rid]
    return outputs, logits


MODES = {
    "one_at_a_time": dict(kind="one"),
    "batched_whole_prompts": dict(max_batched_tokens=64),
    "chunked_budget_1": dict(max_batched_tokens=1, chunked_prefill=True),
    "chunked_budget_3": dict(max_batched_tokens=3, chunked_prefill=True),
    "chunked_budget_7": dict(max_batched_tokens=7, chunked_prefill=True),
    "max_two_seqs": dict(max_batched_tokens=16, chunked_prefill=True, max_num_seqs=2),
}


def engine_factory(spec: dict, pipeline: bool):
    spec = dict(spec)
    if spec.pop("kind", None) == "one":
        return lambda runner: Engine(runner, EngineConfig(kv_capacity=CAPACITY, state_capacity=len(PROMPTS),
                                                          pipeline=pipeline))
    spec.setdefault("max_num_seqs", len(PROMPTS))
    config = EngineConfig(kv_capacity=CAPACITY, state_capacity=len(PROMPTS), pipeline=pipeline, **spec)
    return lambda runner: BatchEngine(runner, config)


@pytest.mark.parametrize("pipeline", [False, True], ids=["synchronous", "cross_round"])
@pytest.mark.parametrize("stagger", [False, True], ids=["together", "staggered"])
@pytest.mark.parametrize("mode", list(MODES))
def test_every_mode_gives_the_tokens_and_logits_of_each_request_alone(model, alone, mode, stagger, pipeline):
    outputs, logits, engine = run(model, engine_factory(MODES[mode], pipeline), stagger=stagger)
    ref_outputs, ref_logits = alone
    assert outputs == ref_outputs
    compared = 0
    for rid in PROMPTS:
        for got, want in zip(logits[rid], ref_logits[rid], strict=True):
            assert torch.allclose(got, want, atol=TOLERANCE, rtol=0), (mode, rid)
            compared += 1
    assert compared == len(PROMPTS) * MAX_NEW


def test_cross_round_and_synchronous_logits_agree_on_more_than_40_rounds(model):
    spec = dict(max_batched_tokens=2, chunked_prefill=True, max_num_seqs=4)
    sync_out, sync_logits, sync_engine = run(model, engine_factory(spec, False), stagger=True)
    pipe_out, pipe_logits, pipe_engine = run(model, engine_factory(spec, True), stagger=True)
    assert sync_out == pipe_out
    assert sync_engine.round_id >= 40
    for rid in PROMPTS:
        for a, b in zip(sync_logits[rid], pipe_logits[rid], strict=True):
            assert (a - b).abs().max().item() <= SAME_WORK_TOLERANCE


@pytest.mark.parametrize("pipeline", [False, True], ids=["synchronous", "cross_round"])
def test_cancelled_requests_return_every_slot_and_others_are_unaffected(model, alone, pipeline):
    spec = dict(max_batched_tokens=5, chunked_prefill=True)
    outputs, _, engine = run(model, engine_factory(spec, pipeline), cancel={"A": 3, "C": 9})
    ref_outputs, _ = alone
    for rid in ("B", "D"):
        assert outputs[rid] == ref_outputs[rid]
    for rid in ("A", "C"):
        assert outputs[rid] == ref_outputs[rid][: len(outputs[rid])]
