"""The compiled decode step (``--compile``) gives the greedy tokens of eager execution, in float32 on a CPU.

``DecodeGraphs(compile=True)`` runs ``decode_step_ref`` through ``torch.compile`` (inductor's C++ backend on
a CPU), one compiled graph per bucket, every bucket compiled when the runner is made. The compiled runner is
built once for this module and reused by each test, as a server keeps its runner from one batch to the next:
compiling takes seconds per bucket on two cores. The reference is a plain eager engine (``use_graphs=False``).

A two-layer model (one linear-attention layer, one full-attention layer) keeps every kind of layer and halves
the compile time; a cache of 96 KV slots and two running requests make four buckets: 1 or 2 rows, 64 or 96
keys.
"""

from __future__ import annotations

import pytest
import torch

from mini_deepinfer import SamplingParams
from mini_deepinfer.bench.__main__ import main as bench_main
from mini_deepinfer.bench.rounds import main as rounds_main
from mini_deepinfer.core.engine import EngineConfig
from mini_deepinfer.generate import main as generate_main
from mini_deepinfer.models import build_model
from mini_deepinfer.models.presets import qwen3_5_config
from mini_deepinfer.runtime.factory import build_engine
from mini_deepinfer.runtime.graphs import decode_step_ref

CONFIG = EngineConfig(kv_capacity=96, max_num_seqs=2, max_batched_tokens=128)
PROMPTS = {"long": list(range(3, 63)), "b": [7, 8, 9], "c": list(range(40, 46))}
"""``long`` has 60 tokens: its context grows past 64 keys while it decodes, into the 96-key bucket."""
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def model():
    config = qwen3_5_config("tiny", initializer_range=0.1, num_hidden_layers=2,
                            layer_types=("linear_attention", "full_attention"))
    return build_model(config, torch.float32, "cpu", seed=0)


@pytest.fixture(scope="module")
def compiled(model):
    """The compiled runner, and how many graphs dynamo compiled while it was made."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # compile here, whatever an earlier test in this process compiled
    before = counters["stats"]["unique_graphs"]
    runner = build_engine(model, CONFIG, use_graphs=True, compile_step=True).runner
    return runner, counters["stats"]["unique_graphs"] - before


def run(model, prompts: dict[str, list[int]], runner=None) -> tuple[dict[str, list[int]], list[tuple]]:
    """Greedy tokens of each request, and the bucket (rows, context) of each graph-path round."""
    engine = build_engine(model, CONFIG, runner=runner)
    buckets = []
    if runner is not None:
        replay = runner.graphs.run

        def recording(seqs):
            tokens = replay(seqs)
            buckets.append(runner.graphs.last)
            return tokens

        runner.graphs.run = recording
    try:
        for rid, prompt in prompts.items():
            engine.submit(rid, prompt, SamplingParams(max_new_tokens=NEW_TOKENS))
        engine.run()
    finally:
        if runner is not None:
            del runner.graphs.run  # the class's method again
    assert all(r.error is None for r in engine.requests.values())
    return {rid: r.output_token_ids for rid, r in engine.requests.items()}, buckets


@pytest.mark.slow
def test_every_bucket_is_compiled_before_any_request_and_no_round_compiles_again(model, compiled):
    from torch._dynamo.utils import counters

    runner, compiled_graphs = compiled
    assert runner.graphs.compiled and runner.graphs.step is not decode_step_ref
    assert compiled_graphs == len(runner.graphs.buckets) == 4
    assert not counters["graph_break"], "the whole step is one graph"
    before = counters["stats"]["unique_graphs"]
    _, buckets = run(model, PROMPTS, runner)
    assert len(set(buckets)) == 3, "rows 2 at 64 and 96 keys, then rows 1"
    assert counters["stats"]["unique_graphs"] == before


@pytest.mark.slow
@pytest.mark.parametrize("names", [["long"], ["long", "b", "c"]], ids=["batch_1", "several_requests"])
def test_the_compiled_step_gives_the_greedy_tokens_of_eager_execution_in_float32(model, compiled, names):
    prompts = {name: PROMPTS[name] for name in names}
    eager, _ = run(model, prompts)
    tokens, buckets = run(model, prompts, compiled[0])
    assert tokens == eager
    assert {context for _, context in buckets} == {64, 96}, "the context crossed a bucket while decoding"
    assert max(rows for rows, _ in buckets) == min(len(names), CONFIG.max_num_seqs)


def test_compiling_the_step_needs_the_graph_path(model):
    with pytest.raises(ValueError, match="compile_step .* needs use_graphs=True"):
        build_engine(model, CONFIG, compile_step=True)


@pytest.mark.parametrize("command", [generate_main, bench_main, rounds_main],
                         ids=["generate", "bench", "rounds"])
def test_compile_with_eager_is_one_line_and_exit_2(command, capsys):
    args = ["--model", "x", "--prompt", "a"] if command is generate_main else []
    assert command([*args, "--compile", "--eager"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("error: --compile compiles the graph path's decode step; it cannot be combined "
                            "with --eager (drop one)\n")
