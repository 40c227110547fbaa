"""The speculative cost benchmark (``python -m mini_deepinfer.bench.speculative``) runs and writes its JSON.

Nothing here is about time. What is fixed: the document's keys, every case committing the tokens of plain
decoding and returning every slot, and the counts that follow from the drafts (an exact copy is always
accepted, a copy with a shifted head never is, so it needs one target forward per token).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mini_deepinfer.bench.speculative import REPORT_KEYS, format_markdown, main

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "snippets" / "bench" / "speculative-cpu.json"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    output = tmp_path_factory.mktemp("bench") / "speculative.json"
    argv = ["--preset", "tiny", "--repeats", "1", "--new-tokens", "8", "--widths", "2", "--threads", "1",
            "--output", str(output)]
    assert main(argv) == 0
    return json.loads(output.read_text(encoding="utf-8"))


def test_report_has_the_documented_keys_and_every_case_matches_plain_decoding(report):
    assert tuple(report) == REPORT_KEYS and report["benchmark"] == "speculative"
    assert list(report["results"]) == ["plain", "always k=2", "sometimes k=2", "never k=2", "half-depth k=2"]
    assert report["checks"]["tokens_identical"] and report["checks"]["slots_returned"]


def test_an_exact_copy_is_always_accepted_and_a_shifted_head_never(report):
    results = report["results"]
    assert results["always k=2"]["acceptance"] == 1.0
    assert results["never k=2"]["acceptance"] == 0.0
    assert results["never k=2"]["target_forwards_per_token"] == 1.0
    assert results["plain"]["target_forwards_per_token"] == 1.0
    # 8 tokens: the prefill's first token, then groups of 3, 3 and 1 (the width is cut near the end)
    assert results["always k=2"]["target_forwards_per_token"] == 4 / 8


def test_markdown_table_has_one_row_per_case(report):
    table = format_markdown(report)
    assert table.count("\n| ") == 1 + len(report["results"])  # header + cases (the separator starts "|-")


@pytest.mark.parametrize("flag", [["--widths", "0"], ["--widths", "2,x"], ["--repeats", "0"]])
def test_bad_options_are_one_line_errors(capsys, flag):
    assert main(flag) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_the_committed_cpu_results_have_the_same_shape():
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert tuple(committed) == REPORT_KEYS and committed["device"]["type"] == "cpu"
    assert committed["checks"]["tokens_identical"] and committed["checks"]["slots_returned"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_paragraph_under_the_cpu_cost_table_is_made_of_its_numbers(lang, monkeypatch):
    """The performance page's sentence under the table (``gen_speculative.bench_reading``): the range of the
    verify forward's cost and of the draft's share, and the case closest to plain decoding, from the report;
    a faster case changes the verdict."""
    from site_scripts.build.common import read_json
    from site_scripts.lessons import gen_speculative

    report = read_json(gen_speculative.BENCH_JSON)
    cases = {name: r for name, r in report["results"].items() if name != "plain"}
    text = gen_speculative.bench_reading(lang)
    forwards = sorted(r["target_forward_vs_plain"] for r in cases.values())
    drafts = sorted(r["draft_share"] for r in cases.values())
    for value in (f"{forwards[0]:.2f}", f"{forwards[-1]:.2f}", f"{drafts[0]:.0%}", f"{drafts[-1]:.0%}"):
        assert value in text
    best = min(cases, key=lambda name: cases[name]["wall_vs_plain"])
    assert f"`{best}`" in text and f"{cases[best]['wall_vs_plain']:.2f}" in text
    faster = json.loads(json.dumps(report))
    faster["results"]["always k=2"]["wall_vs_plain"] = 0.5
    monkeypatch.setattr(gen_speculative, "read_json", lambda path: faster)
    changed = gen_speculative.bench_reading(lang)
    assert "`always k=2`" in changed and "0.50" in changed and changed != text
