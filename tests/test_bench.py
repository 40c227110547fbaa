"""``python -m mini_deepinfer.bench``: it runs end to end, writes every documented key, and the tokens agree.

Scope: the side-by-side benchmark against transformers on the tiny preset with one repetition and tiny
lengths, and its command-line errors. Non-scope: any timing (the machine's speed is not under test).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mini_deepinfer.bench.__main__ import COMPARISON_KEYS, REPORT_KEYS, SIDE_KEYS, TARGETS, prompt_lengths

ROOT = Path(__file__).resolve().parent.parent
BUFFER_MIB = 768  # the parent's bandwidth buffer: larger than either side's own peak on the tiny preset
TINY_RUN = ["--preset", "tiny", "--repeats", "1", "--prefill", "8,20", "--batches", "1,3",
            "--prompt-len", "6", "--new-tokens", "3", "--threads", "1", "--bandwidth-mib", str(BUFFER_MIB)]
VARIANTS = ["ours-bfloat16", "transformers-bfloat16", "ours-graphs"]  # --compile is tests/test_compile.py's


def run_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mini_deepinfer.bench", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    output = tmp_path_factory.mktemp("bench") / "tiny.json"
    proc = run_bench(*TINY_RUN, "--variants", ",".join(VARIANTS), "--variant-batches", "3", "--output",
                     str(output))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(output.read_text(encoding="utf-8"))


@pytest.mark.slow
def test_bench_report_has_every_documented_key(tiny_report: dict) -> None:
    assert list(tiny_report) == list(REPORT_KEYS)
    for side in ("ours", "transformers_side"):
        assert set(SIDE_KEYS) <= set(tiny_report[side]), side
        assert set(tiny_report[side]["prefill"]) == {"8", "20"}
        assert set(tiny_report[side]["decode"]) == {"1", "3"}
    assert set(COMPARISON_KEYS) <= set(tiny_report["comparison"])
    assert set(tiny_report["targets"]) == set(TARGETS)
    assert tiny_report["config"]["decode_prompt_lens"]["3"] == prompt_lengths(3, 6)
    assert list(tiny_report["variants"]) == VARIANTS
    for name, variant in tiny_report["variants"].items():
        assert set(SIDE_KEYS) <= set(variant), name
        # --variant-batches is for the graph-path variants; the others measure --batches
        assert set(variant["decode"]) == ({"3"} if name == "ours-graphs" else {"1", "3"}), name


@pytest.mark.slow
def test_bench_variants_are_measured_in_their_dtype_and_execution_and_set_against_the_same_dtype(
        tiny_report: dict) -> None:
    variants = tiny_report["variants"]
    assert {name: (v["spec"]["engine"], v["spec"]["dtype"], v["spec"]["execution"])
            for name, v in variants.items()} == {
        "ours-bfloat16": ("ours", "bfloat16", "eager"),
        "transformers-bfloat16": ("transformers", "bfloat16", "eager"),
        "ours-graphs": ("ours", "float32", "graphs")}
    assert set(variants["ours-bfloat16"]["prefill"]) == {"8", "20"}
    assert variants["ours-graphs"]["prefill"] == {}  # the graph path runs decode rounds only
    bf16 = variants["ours-bfloat16"]["comparison"]
    theirs = variants["transformers-bfloat16"]["decode"]["3"]["tokens_per_s"]
    assert bf16["transformers"]["decode_speedup"]["3"] == (
        variants["ours-bfloat16"]["decode"]["3"]["tokens_per_s"] / theirs)
    assert set(bf16) == {"ours", "transformers"}
    assert set(variants["transformers-bfloat16"]["comparison"]) == {"ours"}
    # the graph path's greedy tokens are the eager path's, in float32
    assert variants["ours-graphs"]["comparison"]["ours"]["tokens_agree"] == {"decode 3": True}
    assert variants["ours-graphs"]["capture_s"] is not None


@pytest.mark.slow
def test_bench_greedy_tokens_agree_with_transformers(tiny_report: dict) -> None:
    agree = tiny_report["comparison"]["tokens_agree"]
    assert agree == {"prefill": {"8": True, "20": True}, "decode": {"1": True, "3": True}}
    assert tiny_report["comparison"]["all_tokens_agree"] is True
    tokens = tiny_report["ours"]["tokens"]["decode"]["3"]
    assert [len(t) for t in tokens] == [3, 3, 3]


@pytest.mark.slow
def test_bench_peak_memory_is_each_sides_own(tiny_report: dict) -> None:
    """The parent's bandwidth buffer must not show up in a side's peak (``ru_maxrss`` survives fork+exec)."""
    for side in ("ours", "transformers_side"):
        peak = tiny_report[side]["peak_rss_bytes"]
        assert tiny_report[side]["rss_before_load_bytes"] <= peak < BUFFER_MIB * 2**20, side


def test_decode_prompts_differ_in_length_for_a_batch() -> None:
    assert prompt_lengths(1, 32) == [32]
    lengths = prompt_lengths(8, 32)
    assert lengths[0] == 32 and min(lengths) >= 16 and len(set(lengths)) == 8


def test_bench_bad_arguments_print_one_line_and_exit_2() -> None:
    proc = run_bench("--repeats", "0")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error:")
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_bench_half_precision_is_recorded_and_targets_do_not_apply(tmp_path: Path) -> None:
    output = tmp_path / "bf16.json"
    proc = run_bench(*TINY_RUN, "--dtype", "bfloat16", "--output", str(output))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(output.read_text(encoding="utf-8"))
    assert report["dtype"] == "bfloat16" and report["device"]["type"] == "cpu"
    assert all(t["applies"] is False and t["met"] is None for t in report["targets"].values())
    assert report["ours"]["peak_device_bytes"] is None


def test_bench_unavailable_device_prints_one_line_and_exits_2() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    proc = run_bench("--device", "cuda")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "CUDA is not available" in proc.stderr
