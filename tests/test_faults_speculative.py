"""A speculative runner that fails in a round leaves both models' caches consistent.

The requests whose round was in flight finish with ``error``; the target's KV and state slots and the
draft's (``ModelDraft.free_kv_slots`` / ``free_state_slots``) all return once the other requests drain.
Non-scope: the cross-round pipeline (a speculative round is synchronous) and the toy runner's faults
(``tests/test_faults.py``).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mini_deepinfer import FinishReason, SamplingParams
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.core.speculative import SpeculativeBatchEngine
from mini_deepinfer.model_draft_demo import demo_target
from mini_deepinfer.runtime.factory import new_cache
from mini_deepinfer.runtime.speculative import ModelDraft, SpeculativeRunner
from mini_deepinfer.tools.checkpoints import perturbed_copy

PROMPTS = {"A": list(range(1, 12)), "B": [5, 6, 7], "C": [9, 8, 7, 6, 5]}
CAPACITY, STATES, WIDTH = 96, 3, 3


class RunnerFault(RuntimeError):
    pass


class FaultySpeculativeRunner(SpeculativeRunner):
    """Fails once, in the ``fail_at``-th call of ``launch``, after the draft has proposed."""

    def __init__(self, *args, fail_at: int) -> None:
        super().__init__(*args)
        self.fail_at, self.launches = fail_at, 0

    def launch(self, plan):
        self.launches += 1
        return super().launch(plan)

    def _logit_rows(self, plan, jobs):  # runs after the draft has proposed (its state has moved on)
        if self.launches == self.fail_at:
            raise RunnerFault(f"injected fault in launch #{self.fail_at}")
        return super()._logit_rows(plan, jobs)


@pytest.fixture(scope="module")
def models():
    torch.set_num_threads(1)
    target = demo_target()
    return target, perturbed_copy(target, noise=0.1, seed=25)


def faulty_engine(models, fail_at: int) -> SpeculativeBatchEngine:
    target, draft = models
    runner = FaultySpeculativeRunner(target, new_cache(target, CAPACITY, STATES),
                                     ModelDraft(draft, new_cache(draft, CAPACITY, STATES)), fail_at=fail_at)
    return SpeculativeBatchEngine(runner, EngineConfig(kv_capacity=CAPACITY, state_capacity=STATES,
                                                       max_num_seqs=STATES, max_batched_tokens=8,
                                                       chunked_prefill=True, spec_width=WIDTH))


@settings(max_examples=4, deadline=None)
@given(fail_at=st.integers(1, 5))
def test_a_speculative_fault_finishes_in_flight_requests_with_error_and_both_caches_return_every_slot(
        models, fail_at):
    engine = faulty_engine(models, fail_at)
    for rid, prompt in PROMPTS.items():
        engine.submit(rid, prompt, SamplingParams(max_new_tokens=6))
    errored = set()
    while engine.has_unfinished():
        errored |= {d.request_id for d in engine.step() if d.finish_reason is FinishReason.ERROR}
    assert errored  # the fault hit a round with work in it
    for rid, req in engine.requests.items():
        assert (req.finish_reason is FinishReason.ERROR) == (rid in errored)
    runner = engine.runner
    assert engine.kv_pool.num_free == CAPACITY and engine.state_pool.num_free == STATES
    assert runner.draft.free_kv_slots() == CAPACITY and runner.draft.free_state_slots() == STATES
    assert runner.draft.computed == {} and runner.jobs == {}
    assert runner.cache.snapshots == {} and runner.draft.cache.snapshots == {}, "no state snapshot is left"
