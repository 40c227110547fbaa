"""The prefix-cache benchmark (``python -m mini_deepinfer.bench.prefix``) runs and writes its JSON.

Nothing here is about time. What is fixed: every case gives the tokens of the cache-off run and returns every
slot; with a shared system prompt the later requests reuse its whole blocks, and with nothing shared nothing
is reused; the Markdown the site shows has a row per case and the line of what the cache changed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mini_deepinfer.bench.prefix import BLOCK, OWN_TOKENS, REQUESTS, format_markdown, main

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "snippets" / "bench" / "prefix-cpu.json"
SYSTEM_TOKENS = 2 * BLOCK


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    output = tmp_path_factory.mktemp("bench") / "prefix.json"
    argv = ["--preset", "tiny", "--repeats", "1", "--new-tokens", "2", "--threads", "1",
            "--system-tokens", str(SYSTEM_TOKENS), "--output", str(output)]
    assert main(argv) == 0
    return json.loads(output.read_text(encoding="utf-8"))


def test_every_case_gives_the_tokens_of_the_cache_off_run_and_returns_every_slot(report):
    assert list(report["results"]) == ["shared off", "shared on", "unshared off", "unshared on"]
    assert report["checks"] == {"tokens_identical": True, "slots_returned": True}


def test_later_requests_reuse_the_shared_system_prompt_and_nothing_else_is_reused(report):
    results, prompt = report["results"], SYSTEM_TOKENS + OWN_TOKENS
    assert results["shared on"]["prompt_tokens_reused"] == (REQUESTS - 1) * SYSTEM_TOKENS
    reused = (REQUESTS - 1) * SYSTEM_TOKENS
    assert results["shared on"]["prompt_tokens_computed"] == REQUESTS * prompt - reused
    for case in ("shared off", "unshared off", "unshared on"):
        assert results[case]["prompt_tokens_reused"] == 0
        assert results[case]["prompt_tokens_computed"] == REQUESTS * prompt


def test_markdown_has_a_row_per_case_and_the_effects_line(report):
    table = format_markdown(report)
    assert table.count("\n| ") == 1 + len(report["results"])
    found = re.search(r"requests 2-8 reach their first token ([\d.]+)x sooner .* wall time by ([+-][\d.]+) %",
                      table)
    assert found, table
    r = report["results"]
    later = r["shared off"]["ttft_ms_later_requests"] / r["shared on"]["ttft_ms_later_requests"]
    assert float(found[1]) == round(later, 1)


def test_the_committed_cpu_results_have_the_same_shape():
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert committed["benchmark"] == "prefix" and committed["device"]["type"] == "cpu"
    assert committed["checks"] == {"tokens_identical": True, "slots_returned": True}
