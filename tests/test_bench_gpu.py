"""``python -m mini_deepinfer.bench.gpu``: what a CPU can check of the one command that measures a GPU.

The command itself runs only on a GPU or NPU. Here: it refuses a CPU in one line, its steps write into the
layout of ``snippets/`` (``bench/``, ``records/``) with no file written twice, and every step is a command of
this package. With CUDA at hand, the no-stall check and graphs against eager run for real.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from mini_deepinfer.bench.gpu import graphs_equal_eager, launches_without_sync, main, steps


def test_bench_gpu_refuses_a_cpu_in_one_line(capsys):
    assert main(["--device", "cpu"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ("error: bench.gpu measures an accelerator: use --device "
                                                    "cuda[:N] or npu[:N]\n")


def test_every_step_is_a_command_of_the_package_and_writes_its_own_file(tmp_path):
    outputs = []
    for name, argv in steps("cuda:0", tmp_path / "weights", tmp_path / "out"):
        assert importlib.util.find_spec(argv[0]) is not None, f"{name}: no module {argv[0]}"
        if "--output" in argv:
            path = Path(argv[argv.index("--output") + 1])
            assert path.parent.name in ("bench", "records") and path.parent.parent == tmp_path / "out", name
            outputs.append(path)
    assert len(outputs) == len(set(outputs)) >= 10
    names = [name for name, _ in steps("cuda:0", tmp_path, tmp_path)]
    assert any("graphs" in n for n in names) and any("eager" in n for n in names)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_steady_decode_launches_make_no_synchronising_call_on_cuda(graphs):
    result = launches_without_sync("cuda:0", graphs)
    assert result["passed"], result["error"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_graphs_give_the_greedy_tokens_of_eager_execution_on_cuda():
    assert graphs_equal_eager("cuda:0")["passed"]
