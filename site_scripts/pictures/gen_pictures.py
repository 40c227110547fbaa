"""The site's pictures (SVG, in Chinese and English), drawn from the demos' traces and the benchmark results.

Scope: running each demo once in process to collect its trace events (the events its terminal output is
printed from), and writing every picture in both languages into ``docs/assets/pictures/`` as
``<name>.zh.svg`` and ``<name>.en.svg``. A page shows ``![alt](../assets/pictures/<name>.svg)``; the site's
i18n plugin serves the file of the page's language under that name. Pictures:

* ``abc-rounds``: ``python -m mini_deepinfer.pipeline_demo`` (lessons 3 and 4, the A/B/C walkthrough);
* ``cross-round-timeline``: ``python -m mini_deepinfer`` and ``python -m mini_deepinfer --pipeline``
  (lessons 10 and 11, the cross-round notes);
* ``speculative-acceptance`` and ``speculative-rejection``: ``python -m mini_deepinfer.model_draft_demo
  --cpu-example acceptance`` (lesson 12) and ``--cpu-example rejection --width 3`` (lesson 13, the two-model
  walkthrough);
* ``bench-<file>``: one chart per committed benchmark report ``snippets/bench/<file>.json`` whose
  ``benchmark`` (rounds, speculative, transformers) has a chart; reports are never re-measured here. A
  benchmark with no committed report has no chart yet.

Non-scope: drawing (``abc_picture.py``, ``lanes_picture.py``, ``speculative_picture.py``, ``charts.py``), the
words (``picture_labels.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path

from mini_deepinfer.core.trace import TraceEvent
from site_scripts.build.common import SNIPPETS, read_json
from site_scripts.pictures import abc_picture, charts, lanes_picture, picture_labels, speculative_picture

OUTPUT_DIR = "docs/assets/pictures"
LANGUAGES = ("zh", "en")
SPECULATIVE_WIDTH = 3  # as the pages' commands (the demo's default)


def _quiet(line: str) -> None:
    """Demos print each line through a callback; the pictures need their events only."""


@lru_cache(maxsize=None)
def abc_events() -> tuple[TraceEvent, ...]:
    """The trace of ``python -m mini_deepinfer.pipeline_demo`` (default options)."""
    import torch

    from mini_deepinfer.pipeline_demo import DemoOptions, run_demo

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the command does
    try:
        return tuple(run_demo(DemoOptions(), print_line=_quiet).trace.events)
    finally:
        torch.set_num_threads(threads)


@lru_cache(maxsize=None)
def toy_events(pipeline: bool) -> tuple[TraceEvent, ...]:
    """The trace of ``python -m mini_deepinfer`` (with ``--pipeline`` if asked)."""
    from mini_deepinfer.__main__ import parse_args, run_demo

    return tuple(run_demo(parse_args(["--pipeline"] if pipeline else []), print_line=_quiet).trace.events)


@lru_cache(maxsize=None)
def speculative_events(example: str) -> tuple[TraceEvent, ...]:
    """The trace of ``python -m mini_deepinfer.model_draft_demo --cpu-example EXAMPLE --width 3``."""
    import torch

    from mini_deepinfer.model_draft_demo import EXAMPLES, run_example

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the command does
    try:
        engine, _ = run_example(EXAMPLES[example], SPECULATIVE_WIDTH, False, print_line=_quiet)
        return tuple(engine.trace.events)
    finally:
        torch.set_num_threads(threads)


def abc_rounds(lang: str) -> str:
    from mini_deepinfer.pipeline_demo import DemoOptions

    options = DemoOptions()
    return abc_picture.abc_rounds(abc_events(), picture_labels.ABC[lang], options.max_batched_tokens,
                               options.max_num_seqs)


def cross_round_timeline(lang: str) -> str:
    return lanes_picture.round_timeline(toy_events(False), toy_events(True), picture_labels.TIMELINE[lang])


def speculative_rounds(example: str, lang: str) -> str:
    words = picture_labels.SPECULATIVE[lang]
    return speculative_picture.speculative_rounds(speculative_events(example), words)


TRACE_PICTURES: dict[str, Callable[[str], str]] = {
    "abc-rounds": abc_rounds,
    "cross-round-timeline": cross_round_timeline,
    "speculative-acceptance": partial(speculative_rounds, "acceptance"),
    "speculative-rejection": partial(speculative_rounds, "rejection"),
}
# a report's "benchmark" -> (chart, its words)
BENCH_CHARTS = {
    "rounds": (charts.rounds_chart, picture_labels.ROUNDS_CHART),
    "speculative": (charts.speculative_chart, picture_labels.SPECULATIVE_CHART),
    "transformers": (charts.transformers_chart, picture_labels.TRANSFORMERS_CHART),
}


def bench_chart(report_path: Path, lang: str) -> str:
    report = read_json(report_path)
    chart, labels = BENCH_CHARTS[report["benchmark"]]
    return chart(report, labels[lang])


def bench_pictures() -> dict[str, Callable[[str], str]]:
    """``bench-<stem>`` for each committed ``snippets/bench/<stem>.json`` whose benchmark has a chart."""
    return {f"bench-{path.stem}": partial(bench_chart, path)
            for path in sorted((SNIPPETS / "bench").glob("*.json"))
            if read_json(path).get("benchmark") in BENCH_CHARTS}


PICTURES = {**TRACE_PICTURES, **bench_pictures()}
OUTPUTS = {f"{name}.{lang}.svg": partial(draw, lang) for name, draw in PICTURES.items() for lang in LANGUAGES}

