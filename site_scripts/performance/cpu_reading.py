"""The paragraph under a CPU benchmark table, and the line above it, written in English and in Chinese from
the report.

Scope: :func:`run_line` (the CPU, the vector units its recorded flags show or that none were recorded, and
the command as the record holds it), :func:`reading` (how our decode and prefill compare with transformers',
against the read roofline and the matrix-product floor, and which goals were met), :func:`decode_bounds`
(the step a missed decode goal would need) and :func:`variants_reading` (the bfloat16, graph-path and
compiled variants), each giving ``(English, Chinese)`` from one table of phrases per language (``PHRASES``).
The phrases are data: the table ``[cpu_reading.words]`` of ``words.toml`` beside this module, each phrase's
English and Chinese side by side. Non-scope: the tables themselves (``bench_tables.py``), which reports get a
paragraph (``gen_performance.py``).
"""

from __future__ import annotations

import shlex
from typing import Any

from site_scripts.build.common import GeneratorError, phrases
from site_scripts.performance.bench_tables import _fraction, _ms

VECTOR_UNITS = {"avx2": "AVX2", "avx512f": "AVX-512", "amx_tile": "AMX"}
"""The vector units a record's ``cpu_flags`` (a subset of ``mini_deepinfer.runtime.device.VECTOR_FLAGS``)
show, each by the flag that shows it."""
PHRASES = phrases(__name__)["words"]  # each phrase in English and in Chinese, in words.toml


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
