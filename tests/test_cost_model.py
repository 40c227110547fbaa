"""Lesson 10's cost model: its measured sentence is the accelerator record's, and the H + D model stays gone.

Scope: the sentence ``site_scripts/lessons/gen_rounds.py`` writes for lesson 10 from the committed H200 rounds
report (``cost_model``), in both languages: it is current, it quotes the report's medians, and the lesson
includes it instead of stating a round as host time plus device time. Non-scope: the report's own table and
checks (``test_bench_rounds.py``), and whether the model's reasoning is sound (the page argues it).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from site_scripts.lessons import gen_rounds

ROOT = Path(__file__).resolve().parent.parent
LANGS = ("zh", "en")
LESSON = {"zh": ROOT / "docs" / "lessons" / "10-cross-round.md",
          "en": ROOT / "docs" / "lessons" / "10-cross-round.en.md"}


def snippet(lang: str) -> str:
    return (ROOT / "snippets" / "rounds" / f"cost-model.{lang}.md").read_text(encoding="utf-8")


def medians(mode: str) -> dict[str, float]:
    report = json.loads(gen_rounds.GPU_BENCH_JSON[0].read_text(encoding="utf-8"))
    return {key: value["median"] for key, value in report["results"][mode]["summary"].items()}


@pytest.mark.parametrize("lang", LANGS)
def test_the_cost_model_sentence_is_current(lang: str) -> None:
    assert snippet(lang) == gen_rounds.cost_model(lang)


@pytest.mark.parametrize("lang", LANGS)
def test_the_cost_model_sentence_quotes_the_records_medians(lang: str) -> None:
    sync, cross = medians("synchronous"), medians("cross_round")
    host_plus_device = sync["round_host_ms"] + sync["round_device_ms"]
    expected = [f"{sync['round_wall_ms']:.2f}", f"{sync['round_launch_ms']:.2f}",
                f"{sync['round_device_ms']:.2f}", f"{sync['round_read_wait_ms']:.3f}",
                f"{host_plus_device:.2f}", f"{cross['round_wall_ms']:.2f}"]
    numbers = re.findall(r"\d+\.\d+", snippet(lang))
    assert [figure for figure in expected if figure not in numbers] == []
    assert host_plus_device > 1.5 * sync["round_wall_ms"]  # the overlap the sentence reports


@pytest.mark.parametrize("lang", LANGS)
def test_lesson_10_includes_the_sentence_and_no_round_of_host_plus_device_time(lang: str) -> None:
    page = LESSON[lang].read_text(encoding="utf-8")
    assert f'--8<-- "snippets/rounds/cost-model.{lang}.md"' in page
    assert not re.search(r"(?:一轮是|a round takes)\s*H \+ D", page)
