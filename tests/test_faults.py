"""A runner that fails at any round leaves the engine consistent (sync and cross-round).

In-flight work is discarded, the requests it belonged to finish with ``error``, their slots return,
and every other request drains normally with the tokens it would have had anyway.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mini_deepinfer import Engine, FinishReason, SamplingParams, ToyRunner
from mini_deepinfer.core.batch import BatchEngine
from mini_deepinfer.core.engine import EngineConfig


class RunnerFault(RuntimeError):
    pass


class FaultyRunner(ToyRunner):
    """The toy runner, failing once: in ``launch`` or ``read`` of the chosen call."""

    def __init__(self, fail_at: int, where: str) -> None:
        super().__init__()
        self.fail_at, self.where, self.calls = fail_at, where, {"launch": 0, "read": 0}

    def _maybe_fail(self, name: str) -> None:
        self.calls[name] += 1
        if name == self.where and self.calls[name] == self.fail_at:
            raise RunnerFault(f"injected fault in {name} #{self.fail_at}")

    def launch(self, plan):
        self._maybe_fail("launch")
        return super().launch(plan)

    def read(self, handle):
        self._maybe_fail("read")
        return super().read(handle)


def alone(prompt, params):
    engine = Engine(ToyRunner(), EngineConfig(kv_capacity=64))
    engine.submit("x", prompt, params)
    engine.run()
    return engine.requests["x"].output_token_ids


@settings(max_examples=120, deadline=None)
@given(fail_at=st.integers(1, 12), where=st.sampled_from(["launch", "read"]), pipeline=st.booleans(),
       budget=st.integers(1, 8), n_requests=st.integers(1, 5), seed=st.integers(0, 1000))
def test_a_runner_fault_finishes_in_flight_requests_with_error_and_returns_every_slot(
        fail_at, where, pipeline, budget, n_requests, seed):
    runner = FaultyRunner(fail_at, where)
    engine = BatchEngine(runner, EngineConfig(kv_capacity=128, state_capacity=4, max_num_seqs=4,
                                              max_batched_tokens=budget, chunked_prefill=True,
                                              pipeline=pipeline))
    params = {}
    for i in range(n_requests):
        prompt = list(range(10 * i + seed % 7, 10 * i + seed % 7 + 1 + (seed + i) % 9))
        params[f"r{i}"] = (prompt, SamplingParams(max_new_tokens=1 + (seed * (i + 1)) % 6))
        engine.submit(f"r{i}", *params[f"r{i}"])
    engine.run(max_rounds=500)
    assert engine.kv_pool.num_free == 128 and engine.state_pool.num_free == 4
    errored = [r for r in engine.requests.values() if r.finish_reason is FinishReason.ERROR]
    fired = runner.calls[where] >= fail_at
    assert bool(errored) <= fired
    if fired:
        assert engine.trace.of_kind("error"), "the fault is in the trace"
    for rid, req in engine.requests.items():
        assert req.finished and req.slots_released and req.rounds_in_flight == 0
        expected = alone(*params[rid])
        if req.finish_reason is FinishReason.ERROR:
            assert req.output_token_ids == expected[: len(req.output_token_ids)]
            assert "injected fault" in req.error
        else:
            assert req.output_token_ids == expected


def test_requests_without_work_in_flight_keep_running_after_a_fault():
    runner = FaultyRunner(fail_at=2, where="launch")
    engine = BatchEngine(runner, EngineConfig(kv_capacity=64, max_num_seqs=1, max_batched_tokens=16))
    engine.submit("a", [1, 2], SamplingParams(max_new_tokens=3))
    engine.submit("b", [7], SamplingParams(max_new_tokens=2))  # waits: max_num_seqs=1
    engine.run()
    assert engine.requests["a"].finish_reason is FinishReason.ERROR
    assert engine.requests["b"].output_token_ids == [8, 9]
    assert engine.kv_pool.num_free == 64
