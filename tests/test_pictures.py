"""The site's pictures: regenerated from the traces they show, readable in both languages, and on their pages.

Scope: every SVG that ``site_scripts/pictures/gen_pictures.py`` (traces, benchmark charts) and
``site_scripts/notes/gen_timeline.py`` (measured round timelines) write into ``docs/assets/pictures/`` equals
what its drawing gives today (so a picture can never drift from the engine); each is a small, non-empty SVG
whose words are text in the picture's language; each is shown on a Chinese page and on its English twin with
alt text in that page's language; no text of any picture starts or ends outside its view box (each
character measured in DejaVu Sans, the font the pictures are laid out with, a CJK character as one em). The
drawing code is also checked on small hand-made traces, so a change to a demo cannot hide a mistake in it.
Non-scope: how a browser renders the pictures (``tests/test_browser.py`` opens every page and fails on a
missing file).
"""

from __future__ import annotations

import math
import re
from functools import cache
from pathlib import Path
from xml.etree import ElementTree

import pytest

from mini_deepinfer.core.trace import TraceEvent
from site_scripts.build.common import ROOT, read_json
from site_scripts.build.regenerate import collect_outputs
from site_scripts.notes import gen_timeline
from site_scripts.pictures import (
    abc_picture,
    gen_pictures,
    lanes_picture,
    picture_labels,
    speculative_picture,
)
from site_scripts.trained import gen_trained_pictures

PICTURES_DIR = ROOT / "docs" / "assets" / "pictures"
DOCS = ROOT / "docs"
SVG = "{http://www.w3.org/2000/svg}"
CJK = re.compile(r"[\u3400-\u9fff\uff00-\uffef]")
IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<path>[^)\s]*assets/pictures/(?P<name>[\w.-]+)\.svg)\)")
WIDE = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")  # CJK: one em each
ANCHOR_SHIFT = {"start": 0.0, "middle": -0.5, "end": -1.0}
MAX_BYTES = 150_000
DRAWN = {**gen_pictures.OUTPUTS, **gen_timeline.OUTPUTS, **gen_trained_pictures.OUTPUTS}  # name -> drawing
LABELS = {
    "abc-rounds": picture_labels.ABC,
    "cross-round-timeline": picture_labels.TIMELINE,
    "speculative-acceptance": picture_labels.SPECULATIVE,
    "speculative-rejection": picture_labels.SPECULATIVE,
    "bench-rounds": picture_labels.ROUNDS_CHART,
    "bench-speculative": picture_labels.SPECULATIVE_CHART,
    "bench-transformers": picture_labels.TRANSFORMERS_CHART,
    "bench-cpu": picture_labels.TRANSFORMERS_CHART,  # cpu-<preset>.json: ours against transformers
    "timeline": picture_labels.MEASURED_TIMELINE,  # timeline-<rounds report>
    "trained-loss": gen_trained_pictures.LABELS,
}
LABEL_SETS = sorted({id(v): (k, v) for k, v in LABELS.items()}.values())


def labels_of(name: str) -> dict[str, dict[str, str]]:
    """The words of picture ``name`` (a benchmark chart is named after its report: bench-rounds-cpu)."""
    key = next(k for k in LABELS if name == k or name.startswith(f"{k}-"))
    return LABELS[key]


def svg_texts(svg: str) -> list[str]:
    """Every text element's content, in document order."""
    root = ElementTree.fromstring(svg)
    return ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]


def label_pattern(line: str) -> re.Pattern[str]:
    """One line of a label as a pattern: each ``{placeholder}`` stands for some text on the same line."""
    return re.compile(".+?".join(re.escape(part) for part in re.split(r"\{[^}]*\}", line)))


@cache
def em_width(char: str) -> float:
    """How many ems ``char`` advances in DejaVu Sans, the font the pictures are laid out with; a CJK
    character, which DejaVu Sans lacks, one em (about twice an average Latin character)."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font, LoadFlags

    if WIDE.match(char):
        return 1.0
    font = FT2Font(font_manager.findfont("DejaVu Sans"))
    font.set_size(100, 72)
    return font.load_char(ord(char), flags=LoadFlags.NO_HINTING).linearHoriAdvance / 65536 / 100


def text_ends(element: ElementTree.Element) -> tuple[tuple[float, float], tuple[float, float]]:
    """Where a ``<text>`` element's baseline starts and ends (its ``x``/``y``, ``translate`` and ``rotate``,
    its ``text-anchor`` and font size, each character's width in DejaVu Sans)."""
    style = dict(part.split(":", 1) for part in (element.get("style") or "").split(";") if ":" in part)
    style = {key.strip(): value.strip() for key, value in style.items()}
    size = float(style.get("font-size", "10px").removesuffix("px"))
    x, y, angle = float(element.get("x", 0)), float(element.get("y", 0)), 0.0
    for op, args in re.findall(r"(translate|rotate)\(([^)]*)\)", element.get("transform") or ""):
        numbers = [float(v) for v in re.split(r"[\s,]+", args.strip())]
        if op == "translate":
            x, y = x + numbers[0], y + (numbers[1] if len(numbers) > 1 else 0.0)
        else:
            angle = math.radians(numbers[0])
    length = sum(em_width(c) for c in "".join(element.itertext())) * size
    dx, dy = math.cos(angle), math.sin(angle)
    shift = ANCHOR_SHIFT[style.get("text-anchor", "start")] * length
    start = (x + shift * dx, y + shift * dy)
    return start, (start[0] + length * dx, start[1] + length * dy)


def picture_name(file_name: str) -> tuple[str, str]:
    """``abc-rounds.zh.svg`` -> (``abc-rounds``, ``zh``)."""
    stem, lang, _ = file_name.rsplit(".", 2)
    return stem, lang


def picture_names() -> set[str]:
    """Every picture a generator draws, without its language: ``abc-rounds``."""
    return {picture_name(path)[0] for path in DRAWN}


def page_images(page: Path) -> list[tuple[str, str]]:
    """(picture name, alt text) of every picture a page shows, in order."""
    return [(m["name"], m["alt"]) for m in IMAGE.finditer(page.read_text(encoding="utf-8"))]


def zh_pages() -> list[Path]:
    return sorted(p for p in DOCS.rglob("*.md") if not p.name.endswith(".en.md"))


def en_twin(page: Path) -> Path:
    return page.with_name(page.name[: -len(".md")] + ".en.md")


@pytest.mark.parametrize("path", sorted(DRAWN))
def test_each_picture_regenerated_from_its_trace_equals_the_committed_file(path: str) -> None:
    committed = PICTURES_DIR / path
    assert committed.is_file(), f"{path} is missing; run `python -m site_scripts.build.regenerate`"
    drawn = DRAWN[path]()
    assert drawn == committed.read_text(encoding="utf-8"), (
        f"{path} differs from what its trace draws today; run `python -m site_scripts.build.regenerate`")


def test_every_committed_picture_has_a_generator() -> None:
    assert sorted(p.name for p in PICTURES_DIR.glob("*.svg")) == sorted(DRAWN)


def test_the_pictures_are_written_into_the_docs_folder_that_the_site_serves() -> None:
    paths = collect_outputs(["gen_pictures", "gen_timeline"])
    assert paths and all(p.startswith("docs/assets/pictures/") for p in paths)


@pytest.mark.parametrize("path", sorted(DRAWN))
def test_each_picture_is_a_small_svg_whose_words_are_text(path: str) -> None:
    svg = (PICTURES_DIR / path).read_text(encoding="utf-8")
    assert 0 < len(svg.encode("utf-8")) <= MAX_BYTES
    root = ElementTree.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    assert not list(root.iter(f"{SVG}image")), "a picture must be drawn, not an embedded raster image"
    assert len(svg_texts(svg)) >= 10
    assert "<dc:date>" not in svg, "a date in the file would change it on every build"


@pytest.mark.parametrize("path", sorted(p.name for p in PICTURES_DIR.glob("*.svg")))
def test_no_text_of_a_picture_starts_or_ends_outside_its_view_box(path: str) -> None:
    root = ElementTree.parse(PICTURES_DIR / path).getroot()
    left, top, width, height = (float(v) for v in root.get("viewBox", "").split())
    outside = []
    for element in root.iter(f"{SVG}text"):
        ends = text_ends(element)
        if not all(left <= x <= left + width and top <= y <= top + height for x, y in ends):
            outside.append(f"{''.join(element.itertext())!r} from ({ends[0][0]:.1f}, {ends[0][1]:.1f}) to "
                           f"({ends[1][0]:.1f}, {ends[1][1]:.1f})")
    assert not outside, f"{path} ({width} x {height}) draws text outside: {outside}"


@pytest.mark.parametrize("path", sorted(DRAWN))
def test_each_picture_shows_its_labels_in_its_own_language(path: str) -> None:
    name, lang = picture_name(path)
    texts = svg_texts((PICTURES_DIR / path).read_text(encoding="utf-8"))
    shown = "\n".join(texts)
    labels = labels_of(name)[lang]
    missing = [line for line in labels["title"].split("\n") if not label_pattern(line).search(shown)]
    assert not missing, f"{path} lacks its title: {missing}"
    if lang == "zh":
        assert CJK.search(shown), f"{path} has no Chinese text"
    else:
        assert not CJK.search(shown), f"{path} has Chinese text: {CJK.findall(shown)[:5]}"


# the trace pictures (charts and timelines draw measured numbers, their words are formatted)
@pytest.mark.parametrize("path", [p for p in sorted(gen_pictures.OUTPUTS) if not p.startswith("bench-")])
def test_every_fixed_label_of_a_trace_picture_appears_in_it(path: str) -> None:
    name, lang = picture_name(path)
    texts = svg_texts((PICTURES_DIR / path).read_text(encoding="utf-8"))
    fixed = [v for v in labels_of(name)[lang].values() if "{" not in v]
    missing = [line for value in fixed for line in value.split("\n") if line not in texts]
    assert not missing, f"{path} does not show {missing}"


@pytest.mark.parametrize("name,words", LABEL_SETS)
def test_both_languages_have_the_same_label_keys(name: str, words: dict[str, dict[str, str]]) -> None:
    assert sorted(words["zh"]) == sorted(words["en"])


def test_every_picture_is_shown_on_a_zh_page_and_on_its_en_twin() -> None:
    shown: dict[str, set[str]] = {"zh": set(), "en": set()}
    for page in zh_pages():
        shown["zh"].update(n for n, _ in page_images(page))
        if en_twin(page).exists():
            shown["en"].update(n for n, _ in page_images(en_twin(page)))
    for lang in ("zh", "en"):
        assert not picture_names() - shown[lang], f"pictures shown on no {lang} page"


@pytest.mark.parametrize("page", [p for p in zh_pages() if page_images(p)], ids=lambda p: p.name)
def test_twin_pages_show_the_same_pictures_with_alt_text_in_their_language(page: Path) -> None:
    zh, en = page_images(page), page_images(en_twin(page))
    assert [n for n, _ in zh] == [n for n, _ in en]
    for name, alt in zh:
        assert name in picture_names(), f"{page.name} shows {name}.svg, which no generator draws"
        assert CJK.search(alt), f"{page.name}: the alt text of {name} is not Chinese"
    for name, alt in en:
        assert alt.strip() and not CJK.search(alt), f"{en_twin(page).name}: alt text of {name} is not English"


# ------------------------------------------------------------------------------------------------------------
# The drawing code on hand-made traces.
# ------------------------------------------------------------------------------------------------------------


def event(round_id: int, kind: str, request_id: str | None = None, **data: object) -> TraceEvent:
    return TraceEvent(round_id, kind, request_id, dict(data))


def rejected_round_trace() -> list[TraceEvent]:
    """Prefill, a round whose 3 drafts are all rejected (target keeps 4; draft 6 -> 4 -> 5), a last round."""
    return [
        event(1, "schedule", "A", phase="prefill", inputs=[11, 22, 33], start_pos=0, slots=[0, 1, 2]),
        event(1, "commit", "A", tokens=[25], round=1, output=[25]),
        event(2, "schedule", "A", phase="decode", inputs=[25, None, None, None], start_pos=3,
              slots=[3, 4, 5, 6]),
        event(2, "verify", "A", drafts=[99, 65, 167], accepted=0, draft_cache="computed 6 -> keep 4"),
        event(2, "commit", "A", tokens=[144], round=2, output=[25, 144]),
        event(2, "rollback", "A", slots=[4, 5, 6], kept=4),
        event(3, "schedule", "A", phase="decode", inputs=[144, None, None, None], start_pos=4,
              slots=[4, 5, 6, 7]),
        event(3, "verify", "A", drafts=[35, 67, 112], accepted=3, draft_cache="computed 7 -> keep 7"),
        event(3, "commit", "A", tokens=[35, 67, 112, 243], round=3, output=[25, 144, 35, 67, 112, 243]),
        event(3, "finish", "A", reason="length"),
        event(3, "free", "A", slots=list(range(8)), state_slot=0, free=16, capacity=16),
    ]


def test_a_rejected_round_reads_computed_6_keep_4_top_up_to_5() -> None:
    first, last = speculative_picture.speculative_rounds_of(rejected_round_trace())
    assert (first.start, first.input_token, first.drafts, first.accepted, first.committed) == (
        3, 25, [99, 65, 167], 0, [144])
    assert (first.target_before, first.target_after) == (7, 4)
    assert (first.draft_computed, first.draft_kept, first.draft_topup) == (6, 4, 5)
    assert (last.accepted, last.committed[-1], last.draft_topup) == (3, 243, None)


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_speculative_picture_writes_the_cache_lengths_of_its_trace(lang: str) -> None:
    words = picture_labels.SPECULATIVE[lang]
    texts = svg_texts(speculative_picture.speculative_rounds(rejected_round_trace(), words))
    assert words["draft_lengths"].format(computed=6, kept=4, topup=5) in texts
    assert words["target_lengths"].format(before=7, after=4) in texts
    assert words["round_title"].format(round=2, k=3, accepted=0, last=words["correction"], token=144) in texts


def test_a_trace_without_verify_events_has_no_speculative_picture() -> None:
    with pytest.raises(ValueError, match="no verify event"):
        speculative_picture.speculative_rounds(rejected_round_trace()[:2], picture_labels.SPECULATIVE["en"])


def test_a_slot_counts_for_the_round_that_frees_it_and_belongs_to_its_next_holder_after() -> None:
    trace = [
        event(1, "schedule", "B", phase="prefill", inputs=[5, 6], start_pos=0, slots=[0, 1]),
        event(2, "schedule", "B", phase="decode", inputs=[7], start_pos=2, slots=[2]),
        event(2, "free", "B", slots=[0, 1, 2], state_slot=0, free=4, capacity=4),
        event(3, "schedule", "C", phase="prefill", inputs=[9], start_pos=0, slots=[0]),
        event(3, "free", "C", slots=[0], state_slot=0, free=4, capacity=4),
    ]
    kv, state = abc_picture.slot_holders(trace)
    assert kv[2] == {0: "B", 1: "B", 2: "B"} and kv[3] == {0: "C"}
    assert state == {1: {0: "B"}, 2: {0: "B"}, 3: {0: "C"}}
    assert abc_picture.first_takeover(trace, state=True) == (3, 0, "C", "B")
    assert abc_picture.first_takeover(trace, state=False) == (3, 0, "C", "B")


def test_a_round_launched_before_the_previous_one_is_read_goes_on_a_second_device_track() -> None:
    trace = [
        event(1, "launch", round=1, requests=["r"], tokens=2),
        event(2, "launch", round=2, requests=["r"], tokens=1),
        event(2, "read", round=1),
        event(3, "read", round=2),
        event(4, "launch", round=4, requests=["r"], tokens=1),
        event(4, "read", round=4),
    ]
    in_flight = lanes_picture.in_flight(lanes_picture.cpu_events(trace))
    assert in_flight == [(1, 0, 2, 0), (2, 1, 3, 1), (4, 4, 5, 0)]


@pytest.mark.parametrize("path", [p for p in sorted(gen_pictures.OUTPUTS) if p.startswith("bench-")])
def test_each_benchmark_chart_names_the_device_dtype_and_date_of_its_report(path: str) -> None:
    name, _ = picture_name(path)
    report = read_json(ROOT / "snippets" / "bench" / f"{name.removeprefix('bench-')}.json")
    shown = "\n".join(svg_texts((PICTURES_DIR / path).read_text(encoding="utf-8")))
    for fact in (report["device"]["name"], report["dtype"], report["date"][:10]):
        assert fact in shown, f"{path} does not say {fact!r}"


def side(prefill_s: float, tokens_per_s: float) -> dict[str, object]:
    timing = {"median": prefill_s, "min": prefill_s * 0.9, "max": prefill_s * 1.2}
    return {"prefill": {"512": timing}, "decode": {"1": {"tokens_per_s": tokens_per_s}}}


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_the_transformers_chart_draws_a_report_of_its_benchmark(lang: str) -> None:
    from site_scripts.pictures import charts

    report = {"benchmark": "transformers", "date": "2030-01-02T03:04:05+00:00", "dtype": "float32",
              "device": {"type": "cpu", "name": "Example CPU"}, "config": {"preset": "tiny", "repeats": 3},
              "ours": side(0.5, 20.0), "transformers_side": side(0.8, 12.5)}
    words = picture_labels.TRANSFORMERS_CHART[lang]
    shown = svg_texts(charts.transformers_chart(report, words))
    assert words["prompt_tokens"].format(n=512) in shown and words["batch"].format(n=1) in shown
    assert any("Example CPU" in t and "float32" in t and "2030-01-02" in t for t in shown)
