"""Tables of the committed ours-against-transformers benchmark results, for the performance page.

Scope: reading ``snippets/bench/cpu-<preset>.json`` and the accelerator reports in ``GPU_RESULTS``
(written by ``python -m mini_deepinfer.bench``) and rendering, per file, one Markdown snippet: where it ran,
the side-by-side timings, the roofline, the matrix-product floors (decode step and prefill), peak memory,
each target with its verdict, and whether the greedy tokens agreed (per measurement where they did not). For
each kind of CPU the 0.8B shape ran on (``CPU_KINDS``) the targets are today's, and a paragraph made from the
numbers says what the tables show (``snippets/performance/<name>.md`` and ``.zh.md``). The
benchmark itself is never run here: its timings change on every run, so the JSON is committed as measured
and only rendered.

Provenance a report does not carry (how its rounds ran, for reports written before the benchmarks
recorded ``execution``; who measured it and what was done to the file) comes from a ``provenance.json``
beside it, which only fills gaps: :func:`provenance_block` renders it with the report's own ``source_sha``,
and says which file each statement comes from. ``gen_rounds`` uses the same function for the round-benchmark
reports.
Non-scope: explaining the numbers (the page does), the other benchmarks' tables (their own generators).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from site_scripts.build.common import SNIPPETS, GeneratorError, provenance_entries, read_json

CPU_KINDS = ("cpu-qwen3.5-0.8b", "cpu-qwen3.5-0.8b-intel-xeon", "cpu-qwen3.5-0.8b-amd-epyc-avx512")
"""The 0.8B-shape CPU results, one per kind of CPU it ran on (an AMD EPYC with AVX2; an Intel Xeon with
AVX-512 and AMX; an AMD EPYC with AVX-512 and no AMX): the page shows a table for each."""
RESULTS = (*CPU_KINDS, "cpu-tiny")
GPU_RESULTS = ("cuda-h200-207e234/cuda-bf16-qwen3.5-0.8b-eager-207e234",)
"""Accelerator reports, relative to ``snippets/bench/`` (a folder per measurement, with its provenance)."""
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
    rows = ["| measurement | ours | transformers | ours vs transformers |", "|---|---:|---:|---:|"]
    for length, stats in ours["prefill"].items():
        rows.append(f"| prefill, {length} tokens (s) | {_spread(stats)} | "
                    f"{_spread(theirs['prefill'][length])} | {cmp['prefill_speedup'][length]:.2f}x |")
    for batch, stats in ours["decode"].items():
        lens = report["config"]["decode_prompt_lens"][batch]
        prompt = f"prompt {lens[0]}" if len(lens) == 1 else f"prompts {min(lens)}-{max(lens)}"
        rows.append(f"| decode, batch {batch}, {prompt} (ms/step) | {_spread(stats['step_s'], 1000, 1)} | "
                    f"{_spread(theirs['decode'][batch]['step_s'], 1000, 1)} | "
                    f"{cmp['decode_speedup'][batch]:.2f}x |")
        rows.append(f"| decode, batch {batch} (tokens/s) | {stats['tokens_per_s']:.2f} | "
                    f"{theirs['decode'][batch]['tokens_per_s']:.2f} | |")
    if ours.get("peak_device_bytes") is not None:
        rows.append(f"| peak device memory (GiB) | {ours['peak_device_bytes'] / GIB:.2f} | "
                    f"{theirs['peak_device_bytes'] / GIB:.2f} | |")
    rows.append(f"| peak resident memory (GiB) | {ours['peak_rss_bytes'] / GIB:.2f} | "
                f"{theirs['peak_rss_bytes'] / GIB:.2f} | |")
    return rows


def roofline_rows(report: dict[str, Any]) -> list[str]:
    """Bandwidth, roofline step, and the matrix-product floor of each side per batch."""
    ours, theirs, cmp = report["ours"], report["transformers_side"], report["comparison"]
    bw = report["bandwidth"]
    rows = ["| quantity | value |", "|---|---:|",
            f"| weights (bytes read per decode step) | {ours['weight_bytes'] / 1e9:.3f} GB |",
            f"| read bandwidth, best [median] of {len(bw['runs_gb_per_s'])} | "
            f"{bw['best_gb_per_s']:.1f} [{bw['median_gb_per_s']:.1f}] GB/s |",
            f"| decode roofline (weights / best bandwidth) | {_ms(cmp['roofline_step_s'])} ms/step |"]
    for batch in ours["decode"]:
        fractions = cmp["roofline_fraction"][batch], cmp["transformers_roofline_fraction"][batch]
        rows.append(f"| batch {batch}: roofline / step, ours / transformers | "
                    f"{_fraction(fractions[0])} / {_fraction(fractions[1])} |")
        for name, side in (("ours", ours), ("transformers", theirs)):
            floor = side.get("linear_floor", {}).get(batch)
            if floor:
                all_s, head_s = floor["all_s"]["median"], floor["head_s"]["median"]
                rows.append(f"| batch {batch}: every linear layer once, {name} (head alone) | "
                            f"{_ms(all_s)} ms = {floor['all_bytes'] / all_s / 1e9:.1f} GB/s "
                            f"({_ms(head_s)} ms = {floor['head_bytes'] / head_s / 1e9:.1f} GB/s) |")
    return rows


def prefill_floor_rows(report: dict[str, Any]) -> list[str]:
    """Each side's matrix products alone for each prefill length, and their share of its prefill time."""
    ours, theirs = report["ours"], report["transformers_side"]
    if "prefill_linear_floor" not in ours:  # results written before the benchmark measured it
        return []
    rows = ["| prefill | linear layers once, ours | share of our prefill | linear layers once, transformers "
            "| share of their prefill |", "|---|---:|---:|---:|---:|"]
    for length, floor in ours["prefill_linear_floor"].items():
        cells = []
        for side in (ours, theirs):
            seconds = side["prefill_linear_floor"][length]["all_s"]["median"]
            gflops = side["prefill_linear_floor"][length]["flops"] / seconds / 1e9
            share = seconds / side["prefill"][length]["median"]
            cells += [f"{seconds:.3f} s ({gflops:.0f} GFLOP/s)", f"{share:.0%}"]
        rows.append(f"| {length} tokens | " + " | ".join(cells) + " |")
    return rows


def variant_rows(report: dict[str, Any]) -> list[str]:
    """The sides ``--variants`` added (bfloat16, the graph path, compiled): each measurement, and its ratio
    against our main side and against transformers in the variant's dtype (>1: the variant is faster)."""
    variants = report.get("variants") or {}
    if not variants:
        return []
    rows = ["| measurement | value | against ours | against transformers, same dtype "
            "| greedy tokens as ours |", "|---|---:|---:|---:|---|"]
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
            rows.append(f"| {name}: {label} | {value} | {against[0]} | {against[1]} | {same} |")
        if spec["execution"] == "compiled" and variant.get("capture_s"):
            rows.append(f"| {name}: compiling every decode bucket, per process (s) | "
                        f"{_spread(variant['capture_s'], digits=1)} | | | |")
    return rows


def target_rows(report: dict[str, Any]) -> list[str]:
    rows = ["| target | threshold | measured | met |", "|---|---:|---:|---|"]
    for name, t in report["targets"].items():
        sign = "<=" if name == "peak_memory" else ">="
        value = "-" if t["value"] is None else _fraction(t["value"])
        met = "not measured" if t["met"] is None else ("yes" if t["met"] else "**no**")
        if not t.get("applies", True):
            met = "does not apply (the targets are set for CPU, float32)"
        rows.append(f"| {t['what']} | {sign} {t['threshold']} | {value} | {met} |")
    return rows


def agreement_line(report: dict[str, Any]) -> str:
    """Whether both sides' greedy tokens agreed: one flag, or each measurement's where some did not."""
    cmp = report["comparison"]
    if cmp["all_tokens_agree"]:
        return "`tokens_agree=true` (greedy, every measurement)"
    names = {"prefill": "prefill {} tokens", "decode": "decode batch {}"}
    each = [f"{names.get(phase, phase + ' {}').format(key)} {str(agree).lower()}"
            for phase, by_key in cmp["tokens_agree"].items() for key, agree in by_key.items()]
    return f"`tokens_agree=false` (greedy; per measurement: {', '.join(each)})"


PHRASES = {  # the paragraph under a CPU table, in each language (``reading``)
    "en": {
        "start": "On this CPU ({cpu}, {isa}) our decode made ", "no_isa": "vector kernels not recorded",
        "first": "{v}x transformers' tokens per second at batch {b}", "next": "{v}x at batch {b}",
        "and": ", ",
        "step": "; a batch-1 step took {step} ms, against a read roofline of {roof} ms ({fraction} of it",
        "floor": "; our matrix products alone read {floor} GB/s, faster than the bandwidth test's "
                 "{best} GB/s, so on this CPU that roofline is too low",
        "prefill": "); transformers took {prefill}x our time to prefill {longest} tokens. ",
        "goals": "Of the {n} goals measured, {met} {verb} met", "verbs": ("is", "are"),
        "missed": "; not met: ", "miss": "{what} ({value} against {threshold})", "between": "; ", "end": ".",
        "bound": " At batch {b}, {threshold}x would need a step of {need} ms; every linear layer once took "
                 "{ours} ms on our side and {theirs} ms on transformers', before the rest of the step.",
        "bf16": " In bfloat16, our decode's tokens per second against our float32: {ours}; against "
                "transformers' bfloat16: {theirs}; our float32 prefill of {longest} tokens took {prefill}x "
                "our bfloat16 time.",
        "ratios": "{v}x at batch {b}",
        "compiled": " Compiled (`--compile`), against our eager float32 steps: {ratio}, after {low} to "
                    "{high} s of compiling in each process (torch keeps what it compiled in a cache on disk, "
                    "so a later process compiles less).",
        "graphs": " On the graph path (`--graphs`: static buffers, nothing captured on a CPU), against our "
                  "eager float32 steps: {ratio}.",
        "eager_wins": " Eager, the default, was the faster of the two at every batch.",
        "payback": " A compiled step at batch {b} saved {saved} ms, so even the shortest compile took about "
                   "{steps} decode steps to pay back.",
        "none": " This run measured no bfloat16, graph-path or compiled variant.",
    },
    "zh": {
        "start": "在这块 CPU（{cpu}，{isa}）上，我们 decode 每秒的 token 数是 ", "no_isa": "没有记录向量指令",
        "first": "batch {b} 时 transformers 的 {v} 倍", "next": "batch {b} 时 transformers 的 {v} 倍",
        "and": "，",
        "step": "；batch 1 一步用 {step} 毫秒，读带宽的 roofline 是 {roof} 毫秒（达到 {fraction}",
        "floor": "；单是我们的矩阵乘就读到 {floor} GB/s，比带宽测试的 {best} GB/s 还快，"
                 "所以在这块 CPU 上那条 roofline 定得太低",
        "prefill": "）；{longest} 个 token 的 prefill，transformers 用的时间是我们的 {prefill} 倍。",
        "goals": "测到的 {n} 项目标里达到 {met} 项", "verbs": ("", ""),
        "missed": "；没有达到的：", "miss": "{what}（{value}，目标 {threshold}）", "between": "；",
        "end": "。",
        "bound": "batch {b} 要到 {threshold} 倍，一步得在 {need} 毫秒内；单是把每个线性层算一遍，"
                 "我们这边就用了 {ours} 毫秒，transformers 那边用了 {theirs} 毫秒，还没算这一步的其余部分。",
        "bf16": "用 bfloat16 时，我们 decode 每秒的 token 数相对我们的 float32：{ours}；相对 transformers "
                "的 bfloat16：{theirs}；{longest} 个 token 的 prefill，我们 float32 用的时间是 bfloat16 的 "
                "{prefill} 倍。",
        "ratios": "batch {b} 时 {v} 倍",
        "compiled": "编译后（`--compile`），我们 decode 每秒的 token 数相对 eager 的 float32：{ratio}；"
                    "每个进程先要编译 {low} 到 {high} 秒（torch 把编译结果存在磁盘缓存里，"
                    "后来的进程编译得少）。",
        "graphs": "走图路径（`--graphs`：静态缓冲区，在 CPU 上不捕获）时，"
                  "我们 decode 每秒的 token 数相对 eager 的 float32：{ratio}。",
        "eager_wins": "每个 batch 都是 eager（默认）更快。",
        "payback": "batch {b} 时编译后的一步省下 {saved} 毫秒，所以即使编译最快的那次，"
                   "也要大约 {steps} 个 decode 步才把编译时间挣回来。",
        "none": "这次运行没有测 bfloat16、图路径或编译的变体。",
    },
}


def reading(report: dict[str, Any]) -> tuple[str, str] | None:
    """What the tables of a CPU result say, in one paragraph made from its numbers: ``(English, Chinese)``.

    None for other devices (their pages say what they measured)."""
    device, cmp = report["device"], report["comparison"]
    if device["type"] != "cpu" or "1" not in cmp["decode_speedup"]:
        return None
    floor = report["ours"].get("linear_floor", {}).get("1")
    floor_gb = floor["all_bytes"] / floor["all_s"]["median"] / 1e9 if floor else 0.0
    best_gb = report["bandwidth"]["best_gb_per_s"]
    longest = max(cmp["prefill_speedup"], key=int)
    goals = [t for t in report["targets"].values() if t["met"] is not None]
    missed = [t for t in goals if not t["met"]]
    values = dict(cpu=device["name"], step=_ms(report["ours"]["decode"]["1"]["step_s"]["median"]),
                  roof=_ms(cmp["roofline_step_s"]), fraction=_fraction(cmp["roofline_fraction"]["1"]),
                  floor=f"{floor_gb:.1f}", best=f"{best_gb:.1f}", longest=longest,
                  prefill=f"{cmp['prefill_speedup'][longest]:.2f}", n=len(goals),
                  met=len(goals) - len(missed))
    said = []
    for lang, words in PHRASES.items():
        what = (lambda w: w) if lang == "en" else _what_zh
        speeds = [words["first" if i == 0 else "next"].format(v=f"{v:.2f}", b=b)
                  for i, (b, v) in enumerate(cmp["decode_speedup"].items())]
        misses = [words["miss"].format(what=what(t["what"]), value=_short_of(t), threshold=t["threshold"])
                  for t in missed]
        verb = words["verbs"][values["met"] != 1]
        said.append("".join([
            words["start"].format(cpu=device["name"], isa=device.get("cpu_isa") or words["no_isa"]),
            words["and"].join(speeds), words["step"].format(**values),
            # the products read faster than the bandwidth test: that roofline is too low
            words["floor"].format(**values) if floor_gb > best_gb else "",
            words["prefill"].format(**values), words["goals"].format(**values, verb=verb),
            words["missed"] + words["between"].join(misses) if missed else "", words["end"]]))
    extra, bound = variants_reading(report), decode_bounds(report)
    return said[0] + bound[0] + extra[0], said[1] + bound[1] + extra[1]


def decode_bounds(report: dict[str, Any]) -> tuple[str, str]:
    """For each decode goal against transformers that is missed: the step it would need, next to the time
    both sides' matrix products alone took at that batch (``linear_floor``), in both languages; empty strings
    where none is missed."""
    english, chinese = "", ""
    sides = (report["ours"], report["transformers_side"])
    for batch in ("1", "4", "8"):
        target = report["targets"].get(f"decode_batch{batch}_vs_transformers")
        floors = [side.get("linear_floor", {}).get(batch) for side in sides]
        if not target or target["met"] is not False or None in floors:
            continue
        need = report["transformers_side"]["decode"][batch]["step_s"]["median"] / target["threshold"]
        values = dict(b=batch, threshold=target["threshold"], need=_ms(need),
                      ours=_ms(floors[0]["all_s"]["median"]), theirs=_ms(floors[1]["all_s"]["median"]))
        english += PHRASES["en"]["bound"].format(**values)
        chinese += PHRASES["zh"]["bound"].format(**values)
    return english, chinese


def variants_reading(report: dict[str, Any]) -> tuple[str, str]:
    """The sentences on the bfloat16, graph-path and compiled variants of a CPU result (``--variants``), in
    both languages; for a run that measured none, a sentence that says so."""
    variants = report.get("variants") or {}
    bf16 = next((v for v in variants.values()
                 if v["spec"]["engine"] == "ours" and v["spec"]["dtype"] == "bfloat16"), None)
    compiled = next((v for v in variants.values() if v["spec"]["execution"] == "compiled"), None)
    graphs = next((v for v in variants.values() if v["spec"]["execution"] == "graphs"), None)
    said = []
    for words in PHRASES.values():
        text = "" if bf16 or compiled or graphs else words["none"]
        if bf16 is not None:
            cmp = bf16["comparison"]
            longest = max(cmp["ours"]["prefill_speedup"], key=int)
            ratios = {what: listed(cmp[what]["decode_speedup"], words) for what in ("ours", "transformers")}
            text += words["bf16"].format(ours=ratios["ours"], theirs=ratios["transformers"], longest=longest,
                                         prefill=f"{cmp['ours']['prefill_speedup'][longest]:.2f}")
        if graphs is not None:
            speedups = graphs["comparison"]["ours"]["decode_speedup"]
            text += words["graphs"].format(ratio=listed(speedups, words))
            text += words["eager_wins"] if max(speedups.values()) < 1 else ""
        if compiled is not None:
            seconds, speedups = compiled["capture_s"], compiled["comparison"]["ours"]["decode_speedup"]
            text += words["compiled"].format(ratio=listed(speedups, words), low=f"{seconds['min']:.0f}",
                                             high=f"{seconds['max']:.0f}")
            text += payback(report, compiled, words)
        said.append(text)
    return said[0], said[1]


def listed(speedups: dict[str, float], words: dict[str, str]) -> str:
    """``1.09x at batch 1, 1.08x at batch 4`` (or its Chinese) from ``{batch: ratio}``."""
    return words["and"].join(words["ratios"].format(v=f"{v:.2f}", b=b) for b, v in speedups.items())


def payback(report: dict[str, Any], compiled: dict[str, Any], words: dict[str, str]) -> str:
    """How many decode steps at the smallest compiled batch the shortest compile took to repay (the time it
    saved per step against our eager float32 step); empty where compiling saved nothing."""
    batch = min(compiled["decode"], key=int)
    saved = (report["ours"]["decode"][batch]["step_s"]["median"]
             - compiled["decode"][batch]["step_s"]["median"])
    if saved <= 0:
        return ""
    steps = float(f"{compiled['capture_s']['min'] / saved:.2g}")  # two significant figures: 23,000
    return words["payback"].format(b=batch, saved=_ms(saved), steps=f"{steps:,.0f}")


def targets_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The report's measurements against today's goals (``mini_deepinfer.bench.TARGETS``)."""
    from mini_deepinfer.bench.__main__ import targets

    applies = all(t.get("applies", True) for t in report["targets"].values())
    return targets(report["comparison"], applies)


def _short_of(target: dict[str, Any]) -> str:
    """A missed goal's value, with a third decimal where two would show it equal to its threshold."""
    shown = _fraction(target["value"])
    return f"{target['value']:.3f}" if float(shown) == target["threshold"] else shown


def _what_zh(what: str) -> str:
    """A target's description in Chinese, as the targets table gives it."""
    from site_scripts.performance.zh_tables import LABELS, PATTERNS, _apply

    found = LABELS.get(what) or _apply(PATTERNS, what)
    if found is None:
        raise GeneratorError(f"zh_tables: no Chinese for the target {what!r}")
    return found


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


def render_zh(name: str) -> str:
    """The same snippet in Chinese, for the Chinese performance page
    (``site_scripts/performance/zh_tables.py``)."""
    return render(name, chinese=True)


OUTPUTS = {
    **{f"performance/{name}.md": (lambda name=name: render_reading(name)) for name in CPU_KINDS},
    **{f"performance/{name}.zh.md": (lambda name=name: render_reading(name, True)) for name in CPU_KINDS},
    **{f"bench/{name}.md": (lambda name=name: render(name)) for name in (*RESULTS, *GPU_RESULTS)},
    **{f"bench/{name}.zh.md": (lambda name=name: render_zh(name)) for name in (*RESULTS, *GPU_RESULTS)},
}
