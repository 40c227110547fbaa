"""What the trained-models page and lesson 8 say about the trained pair is what the records under ``trained/``
and the generated outputs hold.

Scope: every figure shown beside its counts, and every acceptance figure, is the quotient of the record's
counts rounded once (never a rounded copy rounded again); the sentence on how far training repeats comes from
the recorded rerun (``trained/target-check.json``); the corpora's sizes and split come from
``measurements.json``'s ``corpora``, which agrees with the split rule; the sampled repetition was measured at
lesson 8's own settings and the sentence's verdict follows from its counts; lesson 8 shows a record's greedy
loop and says how many tokens each of its runs wrote, as the run's output says; the loss picture's title
names each CPU and number of threads of the training records; the generated tables fit the page's box.
Non-scope: making the figures (``training``), the snippets being current (``tests/test_snippets_current.py``),
the built page in a browser (``tests/test_browser.py``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
SNIPPETS = ROOT / "snippets" / "trained"
TRAINED = ROOT / "trained"
LANGS = ("en", "zh")
SUFFIX = {"en": "", "zh": ".zh"}


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def load(name: str) -> dict[str, Any]:
    return json.loads(read(TRAINED / name))


def table_rows(text: str) -> list[list[str]]:
    """The cells of every row of the Markdown tables in ``text`` (header rows included, rules left out)."""
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines()
            if line.startswith("|") and not set(line.strip()) <= set("|-: ")]


@pytest.mark.parametrize("part", ["widths", "temperatures", "drafts"])
def test_acceptance_tables_round_the_records_counts_once(part: str) -> None:
    record = load("measurements.json")[part]
    rows = {row[0]: row[1:] for row in table_rows(read(SNIPPETS / f"{part}.md"))}
    for key in record["en"]:
        for i, lang in enumerate(LANGS):
            got = record[lang][key]
            shown, counts = rows[key][2 * i], rows[key][2 * i + 1]
            assert shown == f"{got['accepted'] / got['verify_rounds']:.2f}", (part, key, lang, shown)
            assert counts == f"{got['accepted']}/{got['proposed']}"


def test_a_figure_beside_its_counts_is_their_quotient_rounded_once() -> None:
    """``75% (123/165)``, ``0.33 (197/591)``: in every generated table and sentence of the trained pair."""
    found = 0
    for path in sorted(SNIPPETS.glob("*.md")):
        for shown, num, den in re.findall(r"(\d+(?:\.\d+)?%?) \((\d+)/(\d+)\)", read(path)):
            places = len(shown.rstrip("%").partition(".")[2])
            value = int(num) / int(den) * (100 if shown.endswith("%") else 1)
            assert shown.rstrip("%") == f"{value:.{places}f}", (path.name, shown, num, den)
            found += 1
    assert found >= 15, f"only {found} figures with counts in snippets/trained/"


@pytest.mark.parametrize("lang", LANGS)
def test_summaries_give_the_counts_quotients_rounded_once(lang: str) -> None:
    m = load("measurements.json")
    widths = read(SNIPPETS / f"widths-summary{SUFFIX[lang]}.md")
    for lang_of in LANGS:
        for k in ("4", "8"):
            got = m["widths"][lang_of][k]
            assert f"{got['accepted'] / got['verify_rounds']:.2f}" in widths, (lang_of, k, widths)
        one = m["widths"][lang_of]["1"]
        assert f"{one['accepted'] / one['proposed']:.0%}" in widths
    agreement = read(SNIPPETS / f"agreement-summary{SUFFIX[lang]}.md")
    for kinds in m["agreement_by_kind"].values():
        for kind in kinds.values():
            if kind["tokens"] >= 10:
                assert f"{kind['agree'] / kind['tokens']:.0%}" in agreement, (kind, agreement)
    targets = {row[0]: row[2] for row in table_rows(read(SNIPPETS / "targets.md"))}
    zh_four = m["widths"]["zh"]["4"]
    assert targets["Chinese, draft tokens accepted per round (width 4, greedy)"] == \
        f"{zh_four['accepted'] / zh_four['verify_rounds']:.2f}"


def _off(item: dict[str, Any]) -> float:
    return abs(item["rerun"] - item["recorded"]) / item["recorded"]


@pytest.mark.parametrize("lang", LANGS)
def test_the_sentence_on_repeating_training_is_the_recorded_reruns(lang: str) -> None:
    check, made = load("target-check.json"), load("target/training.json")
    text = read(SNIPPETS / f"seeded-summary{SUFFIX[lang]}.md")
    losses = max(_off(i) for i in check["compared"] if i["what"].endswith(": loss"))
    held = max(_off(i) for i in check["compared"] if "held_out" in i["what"])
    for expected in (check["cpu"], made["cpu"], f"{losses:.2%}", f"{held:.2%}", str(check["threads"])):
        assert expected in text, (expected, text)
    other_cpu = {"en": "another CPU", "zh": "另一种 CPU"}[lang]
    assert (other_cpu in text) == (check["cpu"] != made["cpu"]), text
    page = read(ROOT / "docs" / "guide" / ("trained-models.md" if lang == "zh" else "trained-models.en.md"))
    training = page.split("{#training}")[1].split("{#text}")[0]
    assert f'--8<-- "snippets/trained/seeded-summary{SUFFIX[lang]}.md"' in training
    assert "deterministic" not in page and "确定的" not in page


def test_the_recorded_corpora_agree_with_the_split_rule_and_the_archives() -> None:
    from training.corpora import ARCHIVES

    part = load("measurements.json")["corpora"]
    assert set(part["archive_bytes"]) == {a.file for a in ARCHIVES}
    for lang in LANGS:
        every, docs = part["held_out_every"], part["documents"]
        assert docs["held_out"][lang] == (docs["train"][lang] + docs["held_out"][lang]) // every, lang
    assert len(part["held_out_titles_en"]) == part["documents"]["held_out"]["en"]


@pytest.mark.parametrize("lang", LANGS)
def test_the_corpora_sentence_gives_the_recorded_sizes_and_counts(lang: str) -> None:
    part = load("measurements.json")["corpora"]
    text = read(SNIPPETS / f"corpora-summary{SUFFIX[lang]}.md")
    total = sum(part["archive_bytes"].values()) / 1e6
    for expected in (f"{total:.1f} MB", *(f"{size / 1e6:.1f} MB" for size in part["archive_bytes"].values()),
                     f" {part['documents']['held_out']['zh']} ", f" {part['held_out_every']}"):
        assert expected in text, (expected, text)
    page = read(ROOT / "docs" / "guide" / ("trained-models.md" if lang == "zh" else "trained-models.en.md"))
    assert f'--8<-- "snippets/trained/corpora-summary{SUFFIX[lang]}.md"' in page
    assert not re.search(r"(about|约) ?\d+ ?(MB|poems|首)", page), "a corpus figure typed on the page"


def test_sampled_repetition_was_measured_at_lesson_eights_settings() -> None:
    from site_scripts.trained.gen_trained import COMMANDS
    from training.measure import SAMPLED

    flags = re.findall(r'"(--temperature[^"]*)"', COMMANDS["trained/sampling.txt"])
    names = {"temperature": "temperature", "top-k": "top_k", "top-p": "top_p"}
    wanted = [{names[k]: float(v) if "." in v else int(v) for k, v in re.findall(r"--([\w-]+) (\S+)", f)
               if k != "seed"} for f in flags]
    recorded = load("measurements.json")["repetition_sampled"]["settings"]
    assert list(SAMPLED.values()) == wanted == [v for k, v in recorded.items() if k != "greedy"]


def test_the_recorded_greedy_counts_are_the_earlier_greedy_shares() -> None:
    m = load("measurements.json")
    for lang in LANGS:
        counts = m["repetition_sampled"][lang]["greedy"]
        assert [round(r["distinct"] / r["fourgrams"], 3) for r in counts] == \
            m["repetition"][lang]["distinct_4grams"], lang


@pytest.mark.parametrize("lang", LANGS)
def test_the_repetition_verdict_follows_from_the_counts(lang: str) -> None:
    part = load("measurements.json")["repetition_sampled"]
    shares = {s: [r["distinct"] / r["fourgrams"] for la in LANGS for r in part[la][s]]
              for s in part["settings"]}
    greedy_high = max(shares.pop("greedy"))
    sampled_low = min(min(v) for v in shares.values())
    text = read(SNIPPETS / f"repetition-summary{SUFFIX[lang]}.md")
    apart = {"en": "does not loop as greedy text does", "zh": "不像 greedy 那样打转"}[lang]
    assert (apart in text) == (sampled_low > greedy_high), text
    assert f"{sampled_low:.2f}" in text and f"{greedy_high:.2f}" in text


@pytest.mark.parametrize("lang", LANGS)
def test_lesson_eight_shows_a_recorded_greedy_loop_and_what_each_run_wrote(lang: str) -> None:
    page = read(ROOT / "docs" / "lessons" / ("08-sampling.md" if lang == "zh" else "08-sampling.en.md"))
    real = page.split("{#real-text}")[1].split("{#code}")[0]
    for snippet in ("greedy-loop.txt", f"greedy-loop-summary{SUFFIX[lang]}.md",
                    f"repetition-summary{SUFFIX[lang]}.md", f"sampling-summary{SUFFIX[lang]}.md"):
        assert f'--8<-- "snippets/trained/{snippet}"' in real, snippet
    assert "lesson 5" not in real and "第 5 课" not in real
    loop = read(SNIPPETS / "greedy-loop.txt")
    assert loop.rstrip("\n") == load("measurements.json")["repetition"]["en"]["first_text"].rstrip("\n")
    line, count = re.search(r"[“](.+?)[”].*?(\d+)", read(SNIPPETS / f"greedy-loop-summary{SUFFIX[lang]}.md")
                            .split(":", 1)[-1].split("：", 1)[-1]).groups()
    assert loop.split("\n").count(line) == int(count) >= 3, (line, count)


@pytest.mark.parametrize("lang", LANGS)
def test_the_sampling_sentence_counts_the_tokens_each_run_wrote(lang: str) -> None:
    output = read(SNIPPETS / "sampling.txt")
    runs = re.findall(r"^\[(\w+); (\d+) output tokens", output, flags=re.M)
    text = read(SNIPPETS / f"sampling-summary{SUFFIX[lang]}.md")
    parts = re.split(r"; |；", re.split(r": |：", text, maxsplit=1)[1])  # one part per run, in order
    shown = [(re.findall(r"`(\w+)`", p)[-1], re.findall(r"(?<![\d.])\d+(?![\d.])", p)[-1]) for p in parts]
    assert shown == runs, (shown, runs)
    assert any(reason == "eos" for reason, _ in runs), "no sampling run stops at eos now: reread lesson 8"


@pytest.mark.parametrize("lang", LANGS)
def test_the_loss_picture_names_each_machine_the_records_trained_on(lang: str) -> None:
    svg = read(ROOT / "docs" / "assets" / "pictures" / f"trained-loss.{lang}.svg")
    title = re.search(r"(Training curves|训练曲线)[^<]*", svg).group(0)
    for name in ("target/training.json", "draft/training.json", "draft-corpus-only-training.json"):
        made = load(name)
        assert made["cpu"] in title and f"{made['threads']}" in title, (name, title)
    assert "1 thread" not in title and "1 个线程" not in title


CHAR_PX, CELL_PX, BOX_PX = 8.75, 32, 1050
"""Chromium with this site's stylesheet draws the old 11-column models table 1139 px wide at its narrowest:
8.75 px per character of a cell's longest word plus 32 px of padding per cell (within 15 % on the trained
tables). The content box at a 1300 px window is 1050 px."""


def narrowest_px(rows: list[list[str]]) -> float:
    longest = [max(len(w) for row in rows for w in re.split(r"[\s-]+", row[i].replace("`", "")) if w)
               for i in range(len(rows[0]))]
    return sum(longest) * CHAR_PX + CELL_PX * len(longest)


@pytest.mark.parametrize("name", ["models.md", "corpora.md", "widths.md", "repetition.md", "agreement.md"])
def test_each_trained_table_fits_the_pages_box(name: str) -> None:
    blocks = re.split(r"\n(?!\|)", read(SNIPPETS / name))
    for block in blocks:
        rows = table_rows(block)
        if rows:
            assert narrowest_px(rows) <= BOX_PX, (name, rows[0], narrowest_px(rows))
