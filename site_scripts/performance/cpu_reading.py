"""The paragraph under a CPU benchmark table, and the line above it, written in English and in Chinese from
the report.

Scope: :func:`run_line` (the CPU, the vector units its recorded flags show or that none were recorded, and
the command as the record holds it), :func:`reading` (how our decode and prefill compare with transformers',
against the read roofline and the matrix-product floor, and which goals were met), :func:`decode_bounds`
(the step a missed decode goal would need) and :func:`variants_reading` (the bfloat16, graph-path and
compiled variants), each giving ``(English, Chinese)`` from one table of phrases per language (``PHRASES``).
Non-scope: the tables themselves (``bench_tables.py``), which reports get a paragraph
(``gen_performance.py``).
"""

from __future__ import annotations

import shlex
from typing import Any

from site_scripts.build.common import GeneratorError, by_language
from site_scripts.performance.bench_tables import _fraction, _ms

VECTOR_UNITS = {"avx2": "AVX2", "avx512f": "AVX-512", "amx_tile": "AMX"}
"""The vector units a record's ``cpu_flags`` (a subset of ``mini_deepinfer.runtime.device.VECTOR_FLAGS``)
show, each by the flag that shows it."""
PHRASES = by_language({  # the lines around a CPU table: each phrase in English, then in Chinese
    "run": ("**{cpu}** ({units}); the command, as its record holds it: `{command}`{moved}.",
            "**{cpu}**（{units}）；记录里的命令：`{command}`{moved}。"),
    "no_flags": ("CPU flags not recorded",
                 "没有记录 CPU 标志"),
    "units": ("recorded flags: {have}",
              "记录的标志：{have}"),
    "lacking": (", no {lacking}",
                "，没有 {lacking}"),
    "no_units": ("recorded flags: none of {lacking}",
                 "记录的标志里没有 {lacking}"),
    "list": (", ",
             "、"),
    "both": (" and ",
             " 和 "),
    "either": (" or ",
               " 或 "),
    "no_command": ("not recorded",
                   "没有记录"),
    "moved": (" (it wrote `{wrote}`; that file is committed as `{committed}`)",
              "（它写出的是 `{wrote}`，提交为 `{committed}`）"),
    "start": ("On this CPU ({cpu}, {isa}) our decode made ",
              "在这块 CPU（{cpu}，{isa}）上，我们 decode 每秒的 token 数是 "),
    "no_isa": ("vector kernels not recorded",
               "没有记录向量指令"),
    "first": ("{v}x transformers' tokens per second at batch {b}",
              "batch {b} 时 transformers 的 {v} 倍"),
    "next": ("{v}x at batch {b}",
             "batch {b} 时 transformers 的 {v} 倍"),
    "and": (", ",
            "，"),
    "step": ("; a batch-1 step took {step} ms, against a read roofline of {roof} ms ({fraction} of it",
             "；batch 1 一步用 {step} 毫秒，读带宽的 roofline 是 {roof} 毫秒（达到 {fraction}"),
    "floor": ("; our matrix products alone read {floor} GB/s, faster than the bandwidth test's {best} "
              "GB/s, so on this CPU that roofline is too low",
              "；单是我们的矩阵乘就读到 {floor} GB/s，比带宽测试的 {best} GB/s 还快，所以在这块 CPU 上那条 "
              "roofline 定得太低"),
    "prefill": ("); transformers took {prefill}x our time to prefill {longest} tokens. ",
                "）；{longest} 个 token 的 prefill，transformers 用的时间是我们的 {prefill} 倍。"),
    "goals": ("Of the {n} goals measured, {met} {verb} met",
              "测到的 {n} 项目标里达到 {met} 项"),
    "verbs": (("is", "are"),
              ("", "")),
    "missed": ("; not met: ",
               "；没有达到的："),
    "miss": ("{what} ({value} against {threshold})",
             "{what}（{value}，目标 {threshold}）"),
    "between": ("; ",
                "；"),
    "end": (".",
            "。"),
    "bound": (" At batch {b}, {threshold}x would need a step of {need} ms; every linear layer once took "
              "{ours} ms on our side and {theirs} ms on transformers', before the rest of the step.",
              "batch {b} 要到 {threshold} 倍，一步得在 {need} 毫秒内；单是把每个线性层算一遍，"
              "我们这边就用了 {ours} 毫秒，transformers 那边用了 {theirs} 毫秒，还没算这一步的其余部分。"),
    "bf16": (" In bfloat16, our decode's tokens per second against our float32: {ours}; against "
             "transformers' bfloat16: {theirs}; our float32 prefill of {longest} tokens took {prefill}x "
             "our bfloat16 time.",
             "用 bfloat16 时，我们 decode 每秒的 token 数相对我们的 float32：{ours}；相对 transformers 的 "
             "bfloat16：{theirs}；{longest} 个 token 的 prefill，我们 float32 用的时间是 bfloat16 的 "
             "{prefill} 倍。"),
    "ratios": ("{v}x at batch {b}",
               "batch {b} 时 {v} 倍"),
    "compiled": (" Compiled (`--compile`), against our eager float32 steps: {ratio}, after {low} to {high} "
                 "s of compiling in each process (torch keeps what it compiled in a cache on disk, so a "
                 "later process compiles less).",
                 "编译后（`--compile`），我们 decode 每秒的 token 数相对 eager 的 float32：{ratio}；"
                 "每个进程先要编译 {low} 到 {high} 秒（torch 把编译结果存在磁盘缓存里，"
                 "后来的进程编译得少）。"),
    "graphs": (" On the graph path (`--graphs`: static buffers, nothing captured on a CPU), against our "
               "eager float32 steps: {ratio}.",
               "走图路径（`--graphs`：静态缓冲区，在 CPU 上不捕获）时，我们 decode 每秒的 token 数相对 "
               "eager 的 float32：{ratio}。"),
    "eager_wins": (" Eager, the default, was the faster of the two at every batch.",
                   "每个 batch 都是 eager（默认）更快。"),
    "payback": (" A compiled step at batch {b} saved {saved} ms, so even the shortest compile took about "
                "{steps} decode steps to pay back.",
                "batch {b} 时编译后的一步省下 {saved} 毫秒，所以即使编译最快的那次，也要大约 {steps} 个 "
                "decode 步才把编译时间挣回来。"),
    "none": (" This run measured no bfloat16, graph-path or compiled variant.",
             "这次运行没有测 bfloat16、图路径或编译的变体。"),
})


def run_line(report: dict[str, Any], committed: str) -> tuple[str, str]:
    """The line above a CPU result's table: its CPU, the vector units its recorded ``cpu_flags`` show (or
    that none were recorded) and its ``command``, quoted as recorded, with where the file it wrote is
    committed (``committed``) when that is not where it wrote it: ``(English, Chinese)``."""
    flags, command = report["device"].get("cpu_flags"), report.get("command")
    wrote = command[command.index("--output") + 1] if command and "--output" in command[:-1] else None
    said = []
    for words in PHRASES.values():
        units = _units(flags, words)
        moved = "" if wrote in (None, committed) else words["moved"].format(wrote=wrote, committed=committed)
        said.append(words["run"].format(cpu=report["device"]["name"], units=units, moved=moved,
                                        command=shlex.join(command) if command else words["no_command"]))
    return said[0], said[1]


def _units(flags: list[str] | None, words: dict[str, str]) -> str:
    """``recorded flags: AVX2 and AVX-512, no AMX`` (or the Chinese), or that no flags were recorded."""
    if flags is None:
        return words["no_flags"]
    have = [unit for flag, unit in VECTOR_UNITS.items() if flag in flags]
    lacking = words["either"].join(unit for unit in VECTOR_UNITS.values() if unit not in have)
    if not have:
        return words["no_units"].format(lacking=lacking)
    listed = words["list"].join(have[:-1]) + words["both"] + have[-1] if len(have) > 1 else have[0]
    return words["units"].format(have=listed) + (words["lacking"].format(lacking=lacking) if lacking else "")


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
