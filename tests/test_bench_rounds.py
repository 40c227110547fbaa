"""The round benchmark (``python -m mini_deepinfer.bench.rounds``) runs, agrees on tokens, writes its JSON.

No assertion here is about time: timings change from run to run and from machine to machine. What is
fixed is the shape of the document, the token check, and the counts that follow from the protocol (a
cross-round run launches one round more, reads it one step later and discards one token per request).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mini_deepinfer.bench import rounds
from mini_deepinfer.bench.rounds import REPORT_KEYS, SUMMARY_KEYS, format_markdown, main

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "snippets" / "bench" / "rounds-cpu.json"
REQUESTS, NEW_TOKENS = 3, 6


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    output = tmp_path_factory.mktemp("bench") / "rounds.json"
    argv = ["--preset", "tiny", "--repeats", "1", "--requests", str(REQUESTS),
            "--new-tokens", str(NEW_TOKENS), "--output", str(output)]
    assert main(argv) == 0
    return json.loads(output.read_text(encoding="utf-8"))


def test_report_has_the_documented_keys_in_order(report):
    assert tuple(report) == REPORT_KEYS
    assert report["benchmark"] == "rounds" and report["device"]["type"] == "cpu"
    assert report["dtype"] == "float32" and report["torch"]
    assert report["config"]["requests"] == REQUESTS and report["config"]["new_tokens"] == NEW_TOKENS
    for mode in ("synchronous", "cross_round"):
        result = report["results"][mode]
        assert tuple(result["summary"]) == SUMMARY_KEYS
        assert all(set(stats) == {"median", "min", "max"} for stats in result["summary"].values())
        assert len(result["repeats"]) == 1
        assert set(result["median_run"]["first_token_ms"]) == {f"req-{i}" for i in range(REQUESTS)}


def test_both_modes_commit_identical_tokens_and_return_every_slot(report):
    assert report["checks"]["tokens_identical"] is True
    assert report["checks"]["slots_returned"] is True
    assert report["checks"]["output_tokens_per_run"] == REQUESTS * NEW_TOKENS


def test_cross_round_launches_one_more_round_and_discards_one_token_per_request(report):
    sync = report["results"]["synchronous"]["summary"]
    cross = report["results"]["cross_round"]["summary"]
    assert sync["forwards"]["median"] == sync["steps"]["median"] == NEW_TOKENS
    assert cross["forwards"]["median"] == NEW_TOKENS + 1  # the round launched before the stop was read
    assert cross["steps"]["median"] == NEW_TOKENS + 2  # plus one step that only reads
    assert sync["discarded_tokens"]["median"] == 0
    assert cross["discarded_tokens"]["median"] == REQUESTS


def test_cross_round_reads_the_prefill_one_step_later(report):
    sync_rounds = report["results"]["synchronous"]["median_run"]["rounds"]
    cross_rounds = report["results"]["cross_round"]["median_run"]["rounds"]
    assert [r["launched"] for r in sync_rounds[:2]] == ["prefill", "decode"]
    assert [r["read"] for r in sync_rounds[:1]] == [True]
    assert [r["launched"] for r in cross_rounds[:2]] == ["prefill", "decode"]
    assert [r["read"] for r in cross_rounds[:2]] == [False, True]  # first commit: in step 2
    assert cross_rounds[-1]["launched"] == "none" and cross_rounds[-1]["read"]


def test_markdown_table_has_a_row_per_summary_key(report):
    table = format_markdown(report)
    for key in SUMMARY_KEYS:
        assert f"| `{key}` |" in table
    assert "tokens_identical=true" in table


@pytest.mark.parametrize("argv, message", [
    (["--preset", "huge"], "unknown preset"),
    (["--repeats", "0"], "--repeats must be >= 1"),
    (["--new-tokens", "-1"], "--new-tokens must be >= 1"),
    (["--device", "gpu"], "unknown device"),
    (["--dtype", "int8"], "unknown dtype"),
    (["--output", "/no/such/folder/r.json"], "does not exist"),
])
def test_bad_options_end_with_one_line_and_exit_code_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_committed_cpu_results_passed_their_checks():
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert tuple(committed) == REPORT_KEYS
    assert committed["device"]["type"] == "cpu"
    assert committed["checks"]["tokens_identical"] and committed["checks"]["slots_returned"]
    assert set(committed["results"]) == set(rounds.MODES)
