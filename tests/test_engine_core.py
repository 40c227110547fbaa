"""The request loop with the toy runner: outputs, stops, slots, bad input (lessons 1 and 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mini_deepinfer import Engine, FinishReason, SamplingParams, ToyRunner
from mini_deepinfer.__main__ import main
from mini_deepinfer.core.engine import EngineConfig

ROOT = Path(__file__).resolve().parents[1]
DEMO_ENDING = "req-0: [12, 13, 14] (length)\nreq-1: [21, 22] (eos)\nFree slots: 8/8\n"


def make_engine(slots: int = 8, pipeline: bool = False) -> Engine:
    return Engine(ToyRunner(), EngineConfig(kv_capacity=slots, pipeline=pipeline))


def test_demo_ends_with_outputs_and_all_slots_free(capsys):
    assert main([]) == 0
    assert capsys.readouterr().out.endswith(DEMO_ENDING)


def test_demo_runs_on_bare_python_without_site_packages():
    proc = subprocess.run([sys.executable, "-S", "-m", "mini_deepinfer"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    assert proc.stdout.endswith(DEMO_ENDING)


BLOCKER = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'numpy'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
import runpy
import mini_deepinfer, mini_deepinfer.core.batch, mini_deepinfer.core.pipeline, mini_deepinfer.core.commit
sys.argv = ['mini_deepinfer', '--pipeline']
runpy.run_module('mini_deepinfer', run_name='__main__')
"""


def test_scheduling_core_imports_no_torch_or_numpy():
    proc = subprocess.run([sys.executable, "-c", BLOCKER], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith(DEMO_ENDING)


@pytest.mark.parametrize("pipeline", [False, True])
def test_outputs_and_finish_reasons(pipeline):
    engine = make_engine(pipeline=pipeline)
    engine.submit("a", [10, 11], SamplingParams(max_new_tokens=3))
    engine.submit("b", [20], SamplingParams(max_new_tokens=4, eos_token_ids=(22,)))
    engine.run()
    assert engine.requests["a"].output_token_ids == [12, 13, 14]
    assert engine.requests["a"].finish_reason is FinishReason.LENGTH
    assert engine.requests["b"].output_token_ids == [21, 22]
    assert engine.requests["b"].finish_reason is FinishReason.EOS
    assert engine.kv_pool.num_free == engine.kv_pool.capacity


@pytest.mark.parametrize("pipeline", [False, True])
def test_eos_as_first_token_stops_after_one_token(pipeline):
    engine = make_engine(pipeline=pipeline)
    engine.submit("a", [4], SamplingParams(max_new_tokens=5, eos_token_ids=(5,)))
    engine.run()
    assert engine.requests["a"].output_token_ids == [5]
    assert engine.requests["a"].finish_reason is FinishReason.EOS
    assert engine.kv_pool.num_free == 8


def test_ignore_eos_runs_to_length():
    engine = make_engine()
    engine.submit("a", [4], SamplingParams(max_new_tokens=3, eos_token_ids=(5,), ignore_eos=True))
    engine.run()
    assert engine.requests["a"].output_token_ids == [5, 6, 7]


def test_max_new_tokens_zero_finishes_at_submit_without_slots():
    engine = make_engine()
    req = engine.submit("a", [1, 2], SamplingParams(max_new_tokens=0))
    assert req.finished and req.finish_reason is FinishReason.LENGTH and req.output_token_ids == []
    assert not engine.has_unfinished()
    assert engine.kv_pool.num_free == 8


@pytest.mark.parametrize("pipeline", [False, True])
def test_max_new_tokens_one_gives_one_token(pipeline):
    engine = make_engine(pipeline=pipeline)
    engine.submit("a", [1, 2], SamplingParams(max_new_tokens=1))
    engine.run()
    assert engine.requests["a"].output_token_ids == [3]
    assert engine.kv_pool.num_free == 8


def _rounds_of_full_run(pipeline: bool) -> int:
    engine = make_engine(pipeline=pipeline)
    engine.submit("a", [10, 11], SamplingParams(max_new_tokens=3))
    engine.submit("b", [20], SamplingParams(max_new_tokens=4, eos_token_ids=(22,)))
    engine.run()
    return engine.round_id


@pytest.mark.parametrize("pipeline", [False, True])
@pytest.mark.parametrize("victim", ["a", "b"])
def test_free_slots_equal_capacity_after_cancel_at_every_round(pipeline, victim):
    for cancel_round in range(0, _rounds_of_full_run(pipeline) + 1):
        engine = make_engine(pipeline=pipeline)
        engine.submit("a", [10, 11], SamplingParams(max_new_tokens=3))
        engine.submit("b", [20], SamplingParams(max_new_tokens=4, eos_token_ids=(22,)))
        if cancel_round == 0:
            engine.cancel(victim)
        while engine.has_unfinished():
            engine.step()
            if engine.round_id == cancel_round:
                engine.cancel(victim)
        assert engine.kv_pool.num_free == engine.kv_pool.capacity, f"cancel after round {cancel_round}"
        req = engine.requests[victim]
        assert req.finished and req.slots_released


@pytest.mark.parametrize("pipeline", [False, True])
def test_slots_of_a_stopped_request_return_only_after_its_last_launched_round_is_read(pipeline):
    engine = make_engine(pipeline=pipeline)
    engine.submit("a", [1], SamplingParams(max_new_tokens=1))
    engine.step()  # round 1: prefill samples the only token
    if pipeline:
        assert not engine.requests["a"].finished  # round 1 is not read yet
        engine.step()  # round 2 launches a decode for "a", then reads round 1 and finds the stop
        assert engine.requests["a"].finished
        assert engine.kv_pool.num_free == 6  # round 2 still writes slot 1: nothing returns yet
        engine.step()  # round 3 reads round 2 and discards its token
        assert engine.kv_pool.num_free == 8
        assert engine.trace.of_kind("discard")[0].data["tokens"] == [3]
    else:
        assert engine.requests["a"].finished and engine.kv_pool.num_free == 8


def test_cache_holds_prompt_plus_outputs_except_the_last():
    runner = ToyRunner()
    engine = Engine(runner, EngineConfig(kv_capacity=16))
    engine.submit("a", [3, 4, 5], SamplingParams(max_new_tokens=5))
    while engine.has_unfinished():
        engine.step()
        req = engine.requests["a"]
        if not req.finished:
            expected = list(req.prompt_token_ids) + req.output_token_ids[:-1]
            assert runner.cached_tokens(req.kv_slots) == expected


@pytest.mark.parametrize("bad_prompt", [[], None, [1, -2], [1.5], "abc"])
def test_bad_prompt_is_rejected_with_a_clear_error(bad_prompt):
    engine = make_engine()
    with pytest.raises(ValueError, match="prompt"):
        engine.submit("a", bad_prompt)
    assert not engine.requests


@pytest.mark.parametrize("kwargs", [{"max_new_tokens": -1}, {"temperature": -0.5}, {"top_p": 0.0},
                                    {"top_k": -3}])
def test_bad_sampling_params_are_rejected(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)


def test_duplicate_request_id_is_rejected():
    engine = make_engine()
    engine.submit("a", [1], SamplingParams(max_new_tokens=2))
    with pytest.raises(ValueError, match="already submitted"):
        engine.submit("a", [2], SamplingParams(max_new_tokens=2))


def test_cancel_of_unknown_id_is_rejected():
    with pytest.raises(ValueError, match="no such request"):
        make_engine().cancel("nope")


def test_cancel_of_a_finished_request_returns_false():
    engine = make_engine()
    engine.submit("a", [1], SamplingParams(max_new_tokens=1))
    engine.run()
    assert engine.cancel("a") is False


def test_request_that_can_never_fit_the_cache_is_refused_at_submit():
    engine = make_engine(slots=4)
    with pytest.raises(ValueError, match="needs 6 KV slots; the cache has 4"):
        engine.submit("a", [1, 2, 3], SamplingParams(max_new_tokens=3))
    assert not engine.has_unfinished()


def test_cancel_while_waiting_frees_nothing_and_finishes():
    engine = make_engine()
    engine.submit("a", [1], SamplingParams(max_new_tokens=2))
    engine.submit("b", [5], SamplingParams(max_new_tokens=2))
    engine.cancel("b")
    engine.run()
    assert engine.requests["b"].finish_reason is FinishReason.CANCELLED
    assert engine.requests["b"].output_token_ids == []
    assert engine.kv_pool.num_free == 8


def test_cli_rejects_unknown_cancel_id_with_exit_code_2(capsys):
    assert main(["--cancel", "req-9"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error:")
