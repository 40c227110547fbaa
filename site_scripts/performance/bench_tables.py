"""The tables of one ours-against-transformers benchmark report, as the performance page shows them.

Scope: from one report (``python -m mini_deepinfer.bench``), the Markdown pieces of its snippet: the line that
says where and how it ran (:func:`describe`), its provenance (:func:`provenance_block`, with what a
``provenance.json`` beside it adds), the side-by-side timings, the roofline, the matrix-product floors
(decode step and prefill), the variants, each target with its verdict, and whether the greedy tokens agreed.
Non-scope: which reports are rendered and into which files (``gen_performance.py``), the paragraph under a
CPU table (``cpu_reading.py``), the Chinese (``zh_tables.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from site_scripts.build.common import SNIPPETS, GeneratorError, markdown_table, provenance_entries

PROVENANCE_KEYS = ("execution", "source")
GIB = 2**30


def _ms(seconds: float) -> str:
    """Milliseconds with one decimal, two below 1 ms (an accelerator's roofline step is a fraction of one)."""
    value = seconds * 1000
    return f"{value:.1f}" if value >= 1 else f"{value:.2f}"


def _fraction(value: float) -> str:
    """Two decimals, or two significant digits below 0.1 (so that 0.0085 does not read as 0.01)."""
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"


def provenance_block(path: Path, report: dict[str, Any]) -> str | None:
    """``source_sha`` and ``execution`` of a report, with what ``provenance.json`` beside it adds; None when
    neither the report nor that file says how its rounds ran (the CPU reports)."""
    where = path.parent / "provenance.json"
    committed = {report.name for report in path.parent.glob("*.json")} - {where.name}
    extra = provenance_entries(where, "reports", PROVENANCE_KEYS, committed, "report").get(path.name, {})
    if "execution" in extra and "execution" in report:
        raise GeneratorError(f"{where.name}: {path.name} states its execution itself")
    if "execution" not in report and not extra:
        return None
    shown = where.relative_to(SNIPPETS.parent).as_posix()
    sha = report.get("source_sha") or {}
    state = {True: "dirty", False: "clean"}.get(sha.get("dirty"), "dirty: unknown")
    lines = [f"- `source_sha`: `{sha['sha'][:12]}` ({state})" if sha.get("sha")
             else "- `source_sha`: not recorded"]
    if "execution" in report:
        lines.append(f"- `execution`: `{json.dumps(report['execution'])}`")
    elif "execution" in extra:
        lines.append(f"- `execution`: {extra['execution']} — stated in `{shown}`, not in the report")
    if "source" in extra:
        lines.append(f"- `{shown}`: {extra['source']}")
    return "\n".join(lines)


def _spread(stats: dict[str, Any], scale: float = 1.0, digits: int = 3) -> str:
    """``median [min-max]`` of a summary, times ``scale``."""
    if stats["min"] == stats["max"]:
        return f"{stats['median'] * scale:.{digits}f}"
    return (f"{stats['median'] * scale:.{digits}f} "
            f"[{stats['min'] * scale:.{digits}f}-{stats['max'] * scale:.{digits}f}]")


def describe(report: dict[str, Any]) -> str:
    """One line: device, threads, versions, dtype, model, repetitions, date and machine load."""
    device, config, load = report["device"], report["config"], report["load_average"]
    loads = [x for x in (load.get("start"), load.get("end")) if x]
    load_text = "->".join(f"{x[0]:.2f}" for x in loads) or "-"
    sha = (report.get("source_sha") or {}).get("sha")
    vector = ""
    if device["type"] == "cpu":
        flags = device.get("cpu_flags")
        vector = (f"vector={device['cpu_isa']} ({' '.join(flags) or 'no flags listed'}), "
                  if device.get("cpu_isa") else "vector=not recorded, ")
    return (f"`device={device['type']} ({device['name']}), {vector}"
            f"commit={sha[:12] if sha else 'not recorded'}, threads={config['threads']}, "
            f"torch={report['torch']}, "
            f"transformers={report['transformers']}, dtype={report['dtype']}, preset={config['preset']} "
            f"(random weights), repeats={config['repeats']} after {config['warmup_runs']} warm-up, "
            f"new_tokens={config['new_tokens']}, date={report['date']}, load_1m={load_text}`")


def timing_rows(report: dict[str, Any]) -> list[str]:
    """Prefill seconds and decode milliseconds per step, both sides, median [min-max], and the ratio."""
    ours, theirs, cmp = report["ours"], report["transformers_side"], report["comparison"]
    rows = []
    for length, stats in ours["prefill"].items():
        rows.append([f"prefill, {length} tokens (s)", _spread(stats), _spread(theirs["prefill"][length]),
                     f"{cmp['prefill_speedup'][length]:.2f}x"])
    for batch, stats in ours["decode"].items():
        lens = report["config"]["decode_prompt_lens"][batch]
        prompt = f"prompt {lens[0]}" if len(lens) == 1 else f"prompts {min(lens)}-{max(lens)}"
        rows.append([f"decode, batch {batch}, {prompt} (ms/step)", _spread(stats["step_s"], 1000, 1),
                     _spread(theirs["decode"][batch]["step_s"], 1000, 1),
                     f"{cmp['decode_speedup'][batch]:.2f}x"])
        rows.append([f"decode, batch {batch} (tokens/s)", f"{stats['tokens_per_s']:.2f}",
                     f"{theirs['decode'][batch]['tokens_per_s']:.2f}", None])
    if ours.get("peak_device_bytes") is not None:
        rows.append(["peak device memory (GiB)", f"{ours['peak_device_bytes'] / GIB:.2f}",
                     f"{theirs['peak_device_bytes'] / GIB:.2f}", None])
    rows.append(["peak resident memory (GiB)", f"{ours['peak_rss_bytes'] / GIB:.2f}",
                 f"{theirs['peak_rss_bytes'] / GIB:.2f}", None])
    return markdown_table(["measurement", "ours", "transformers", "ours vs transformers"], rows)


def roofline_rows(report: dict[str, Any]) -> list[str]:
    """Bandwidth, roofline step, and the matrix-product floor of each side per batch."""
    ours, theirs, cmp = report["ours"], report["transformers_side"], report["comparison"]
    bw = report["bandwidth"]
    rows = [["weights (bytes read per decode step)", f"{ours['weight_bytes'] / 1e9:.3f} GB"],
            [f"read bandwidth, best [median] of {len(bw['runs_gb_per_s'])}",
             f"{bw['best_gb_per_s']:.1f} [{bw['median_gb_per_s']:.1f}] GB/s"],
            ["decode roofline (weights / best bandwidth)", f"{_ms(cmp['roofline_step_s'])} ms/step"]]
    for batch in ours["decode"]:
        fractions = cmp["roofline_fraction"][batch], cmp["transformers_roofline_fraction"][batch]
        rows.append([f"batch {batch}: roofline / step, ours / transformers",
                     f"{_fraction(fractions[0])} / {_fraction(fractions[1])}"])
        for name, side in (("ours", ours), ("transformers", theirs)):
            floor = side.get("linear_floor", {}).get(batch)
            if floor:
                all_s, head_s = floor["all_s"]["median"], floor["head_s"]["median"]
                rows.append([f"batch {batch}: every linear layer once, {name} (head alone)",
                             f"{_ms(all_s)} ms = {floor['all_bytes'] / all_s / 1e9:.1f} GB/s "
                             f"({_ms(head_s)} ms = {floor['head_bytes'] / head_s / 1e9:.1f} GB/s)"])
    return markdown_table(["quantity", "value"], rows)


def prefill_floor_rows(report: dict[str, Any]) -> list[str]:
    """Each side's matrix products alone for each prefill length, and their share of its prefill time."""
    ours, theirs = report["ours"], report["transformers_side"]
    if "prefill_linear_floor" not in ours:  # results written before the benchmark measured it
        return []
    rows = []
    for length, floor in ours["prefill_linear_floor"].items():
        cells = [f"{length} tokens"]
        for side in (ours, theirs):
            seconds = side["prefill_linear_floor"][length]["all_s"]["median"]
            gflops = side["prefill_linear_floor"][length]["flops"] / seconds / 1e9
            share = seconds / side["prefill"][length]["median"]
            cells += [f"{seconds:.3f} s ({gflops:.0f} GFLOP/s)", f"{share:.0%}"]
        rows.append(cells)
    header = ["prefill", "linear layers once, ours", "share of our prefill",
              "linear layers once, transformers", "share of their prefill"]
    return markdown_table(header, rows)


def variant_rows(report: dict[str, Any]) -> list[str]:
    """The sides ``--variants`` added (bfloat16, the graph path, compiled): each measurement, and its ratio
    against our main side and against transformers in the variant's dtype (>1: the variant is faster)."""
    variants = report.get("variants") or {}
    if not variants:
        return []
    rows = []
    for variant in variants.values():
        spec, cmp = variant["spec"], variant["comparison"]
        name = f"{spec['engine']}, {spec['dtype']}, {spec['execution']}"
        theirs = cmp.get("transformers", {})
        measured = [(f"decode, batch {b} (tokens/s)", f"{d['tokens_per_s']:.2f}", "decode_speedup", b,
                     f"decode {b}") for b, d in variant["decode"].items()]
        measured += [(f"prefill, {n} tokens (s)", f"{p['median']:.3f}", "prefill_speedup", n, f"prefill {n}")
                     for n, p in variant["prefill"].items()]
        for label, value, kind, key, tokens in measured:
            against = [f"{c[kind][key]:.2f}x" if key in c.get(kind, {}) else ""
                       for c in (cmp["ours"], theirs)]
            same = "yes" if cmp["ours"]["tokens_agree"].get(tokens) else "no"
            rows.append([f"{name}: {label}", value, against[0], against[1], same])
        if spec["execution"] == "compiled" and variant.get("capture_s"):
            rows.append([f"{name}: compiling every decode bucket, per process (s)",
                         _spread(variant["capture_s"], digits=1), None, None, None])
    header = ["measurement", "value", "against ours", "against transformers, same dtype",
              "greedy tokens as ours"]
    return markdown_table(header, rows, align="lrrrl")


def target_rows(report: dict[str, Any]) -> list[str]:
    rows = []
    for name, t in report["targets"].items():
        sign = "<=" if name == "peak_memory" else ">="
        value = "-" if t["value"] is None else _fraction(t["value"])
        met = "not measured" if t["met"] is None else ("yes" if t["met"] else "**no**")
        if not t.get("applies", True):
            met = "does not apply (the targets are set for CPU, float32)"
        rows.append([t["what"], f"{sign} {t['threshold']}", value, met])
    return markdown_table(["target", "threshold", "measured", "met"], rows, align="lrrl")


def agreement_line(report: dict[str, Any]) -> str:
    """Whether both sides' greedy tokens agreed: one flag, or each measurement's where some did not."""
    cmp = report["comparison"]
    if cmp["all_tokens_agree"]:
        return "`tokens_agree=true` (greedy, every measurement)"
    names = {"prefill": "prefill {} tokens", "decode": "decode batch {}"}
    each = [f"{names.get(phase, phase + ' {}').format(key)} {str(agree).lower()}"
            for phase, by_key in cmp["tokens_agree"].items() for key, agree in by_key.items()]
    return f"`tokens_agree=false` (greedy; per measurement: {', '.join(each)})"
