"""Tables of the committed ours-against-transformers benchmark results, for the performance page.

Scope: reading ``snippets/bench/cpu-<preset>.json`` and the accelerator reports in ``GPU_RESULTS``
(written by ``python -m mini_deepinfer.bench``) and rendering, per file, one Markdown snippet: where it ran,
the side-by-side timings, the roofline, the matrix-product floors (decode step and prefill), peak memory,
each target with its verdict, and whether the greedy tokens agreed (per measurement where they did not). For
each kind of CPU the 0.8B shape ran on (``CPU_KINDS``) the targets are today's, and a paragraph made from the
numbers says what the tables show (``snippets/performance/<name>.md`` and ``.zh.md``); above each CPU
result's table, a line names its CPU and the vector units its recorded flags show (or that none were
recorded) and quotes the command its record holds (``snippets/performance/<name>-run.md``). The
benchmark itself is never run here: its timings change on every run, so the JSON is committed as measured
and only rendered.

Provenance a report does not carry (how its rounds ran, for reports written before the benchmarks
recorded ``execution``; who measured it and what was done to the file) comes from a ``provenance.json``
beside it, which only fills gaps: ``bench_tables.provenance_block`` renders it with the report's own
``source_sha``, and says which file each statement comes from. ``gen_rounds`` uses the same function for the
round-benchmark reports.
The tables are drawn by ``bench_tables.py`` and the paragraph by ``cpu_reading.py``.
Non-scope: explaining the numbers (the page does), the other benchmarks' tables (their own generators).
"""

from __future__ import annotations

from typing import Any

from site_scripts.build.common import SNIPPETS, read_json
from site_scripts.performance.bench_tables import (
    agreement_line,
    describe,
    prefill_floor_rows,
    provenance_block,
    roofline_rows,
    target_rows,
    timing_rows,
    variant_rows,
)
from site_scripts.performance.cpu_reading import reading, run_line

CPU_KINDS = ("cpu-qwen3.5-0.8b", "cpu-qwen3.5-0.8b-intel-xeon", "cpu-qwen3.5-0.8b-amd-epyc-avx512")
"""The 0.8B-shape CPU results, one per kind of CPU it ran on (an AMD EPYC with AVX2; an Intel Xeon with
AVX-512 and AMX; an AMD EPYC with AVX-512 and no AMX): the page shows a table for each."""
RESULTS = (*CPU_KINDS, "cpu-tiny")
GPU_RESULTS = ("cuda-h200-207e234/cuda-bf16-qwen3.5-0.8b-eager-207e234",)
"""Accelerator reports, relative to ``snippets/bench/`` (a folder per measurement, with its provenance)."""



def targets_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The report's measurements against today's goals (``mini_deepinfer.bench.TARGETS``)."""
    from mini_deepinfer.bench.__main__ import targets

    applies = all(t.get("applies", True) for t in report["targets"].values())
    return targets(report["comparison"], applies)


def render(name: str, chinese: bool = False) -> str:
    """The snippet for ``snippets/bench/<name>.json`` (its tables in Chinese with ``chinese``), or a one-line
    note when it is not committed."""
    from site_scripts.performance.zh_tables import translate

    path = SNIPPETS / "bench" / f"{name}.json"
    if not path.exists():
        return f"`{name}.json` is not committed yet (`python -m mini_deepinfer.bench --output ...`).\n"
    report = read_json(path)
    if name in CPU_KINDS:  # held to today's goals, whenever it was measured
        report = dict(report, targets=targets_of(report))
    makers = (timing_rows, roofline_rows, prefill_floor_rows, target_rows, variant_rows)
    tables = ["\n".join(rows) for rows in (make(report) for make in makers) if rows]
    origin = provenance_block(path, report)
    parts = [describe(report), *([origin] if origin else []), *tables, agreement_line(report)]
    text = "\n\n".join(parts) + "\n"
    return translate(text) if chinese else text


def render_reading(name: str, chinese: bool = False) -> str:
    """The paragraph under the table of ``snippets/bench/<name>.json`` (a CPU kind's), in its own snippet
    (``snippets/performance/``): the tables' Chinese is a translation of theirs, this is written in both."""
    report = read_json(SNIPPETS / "bench" / f"{name}.json")
    said = reading(dict(report, targets=targets_of(report)))
    assert said is not None, f"{name} is not a CPU result"
    return (said[1] if chinese else said[0]) + "\n"


def render_run(name: str, chinese: bool = False) -> str:
    """The line above the table of ``snippets/bench/<name>.json``: its CPU and command, from the record."""
    path = SNIPPETS / "bench" / f"{name}.json"
    said = run_line(read_json(path), path.relative_to(SNIPPETS.parent).as_posix())
    return (said[1] if chinese else said[0]) + "\n"


def render_zh(name: str) -> str:
    """The same snippet in Chinese, for the Chinese performance page
    (``site_scripts/performance/zh_tables.py``)."""
    return render(name, chinese=True)


OUTPUTS = {
    **{f"performance/{name}-run.md": (lambda name=name: render_run(name)) for name in RESULTS},
    **{f"performance/{name}-run.zh.md": (lambda name=name: render_run(name, True)) for name in RESULTS},
    **{f"performance/{name}.md": (lambda name=name: render_reading(name)) for name in CPU_KINDS},
    **{f"performance/{name}.zh.md": (lambda name=name: render_reading(name, True)) for name in CPU_KINDS},
    **{f"bench/{name}.md": (lambda name=name: render(name)) for name in (*RESULTS, *GPU_RESULTS)},
    **{f"bench/{name}.zh.md": (lambda name=name: render_zh(name)) for name in (*RESULTS, *GPU_RESULTS)},
}
