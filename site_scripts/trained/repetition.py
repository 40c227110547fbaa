"""Repetition in the trained target's text, greedy against sampled, in tables and sentences of both languages.

Scope: the table and the sentence of ``measurements.json``'s ``repetition_sampled`` (distinct and all 4-grams
of 200 tokens, greedy and at lesson 8's sampled settings; every share computed from the counts and rounded
once, here); the record's greedy text that loops, with its most repeated line; what lesson 8's sampling run
wrote (how many tokens each setting wrote and why it stopped, read from the run's own output). The sentences'
words, in English and in Chinese, are in ``words.toml`` (table ``repetition``). Non-scope: measuring
(``training/measure.py``), running lesson 8's command (``gen_trained.py``).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from site_scripts.build.common import markdown_table, phrases
from site_scripts.trained.committed import LANGUAGES, measurements, share

WORDS = phrases(__name__)["words"]  # in words.toml, each phrase in English and in Chinese


def _totals(runs: list[dict[str, Any]]) -> tuple[float, float]:
    """(distinct of all 4-grams over the runs, the lowest run's share)."""
    whole = share({k: sum(r[k] for r in runs) for k in ("distinct", "fourgrams")}, "distinct", "fourgrams")
    return whole, min(share(r, "distinct", "fourgrams") for r in runs)


def repetition_table() -> str:
    """Per decoding setting and language: distinct / all 4-grams over the runs, and the lowest run."""
    part = measurements()["repetition_sampled"]
    rows = []
    for setting in part["settings"]:
        row = [setting, str(len(part["en"][setting]))]
        for lang in LANGUAGES:
            runs = part[lang][setting]
            whole, lowest = _totals(runs)
            row += [f"{whole:.2f} ({sum(r['distinct'] for r in runs)}/{sum(r['fourgrams'] for r in runs)})",
                    f"{lowest:.2f}"]
        rows.append(row)
    header = ["decoding", "runs", *(f"{name}: {what}" for name in LANGUAGES.values()
                                    for what in ("distinct / all 4-grams", "lowest run"))]
    note = (f"`{part['new_tokens']} tokens after each of the first {part['prompts']} held-out prompts, "
            f"eos ignored; seeds {part['seeds'][0]}-{part['seeds'][-1]}; cpu={part['cpu']}, "
            f"threads={part['threads']}, torch={part['torch']}, commit={part['commit'][:12]}`")
    return "\n".join([note, "", *markdown_table(header, rows)]) + "\n"


def repetition_summary(zh: bool = False) -> str:
    part, words = measurements()["repetition_sampled"], WORDS["zh" if zh else "en"]
    settings = [s for s in part["settings"] if s != "greedy"]
    greedy = [share(r, "distinct", "fourgrams") for lang in LANGUAGES for r in part[lang]["greedy"]]
    sampled = [_totals(part[lang][s]) for lang in LANGUAGES for s in settings]
    lowest = min(low for _, low in sampled)
    return words["summary"].format(
        g_en=f"{_totals(part['en']['greedy'])[0]:.2f}", g_zh=f"{_totals(part['zh']['greedy'])[0]:.2f}",
        g_lo=f"{min(greedy):.2f}", g_hi=f"{max(greedy):.2f}", runs=len(part["en"][settings[0]]),
        prompts=part["prompts"], seeds=f"{part['seeds'][0]}-{part['seeds'][-1]}",
        s_lo=f"{min(w for w, _ in sampled):.2f}", s_hi=f"{max(w for w, _ in sampled):.2f}",
        s_min=f"{lowest:.2f}", verdict=words["apart" if lowest > max(greedy) else "overlap"])


def greedy_loop_text() -> str:
    return measurements()["repetition"]["en"]["first_text"].rstrip("\n") + "\n"


def greedy_loop_summary(zh: bool = False) -> str:
    """The record's first English greedy text: how many lines, its most repeated line (of 10 characters or
    more) and how often it comes, its distinct 4-grams."""
    m = measurements()
    lines = m["repetition"]["en"]["first_text"].rstrip("\n").split("\n")
    line, count = max(Counter(x for x in lines if len(x) >= 10).items(), key=lambda kv: (kv[1], len(kv[0])))
    counts = m["repetition_sampled"]["en"]["greedy"][0]
    return WORDS["zh" if zh else "en"]["loop"].format(
        speaker=m["prompts"]["en"][0].rstrip("\n").rsplit("\n", 1)[-1], lines=len(lines), line=line,
        count=count, distinct=counts["distinct"], fourgrams=counts["fourgrams"],
        share=f"{share(counts, 'distinct', 'fourgrams'):.2f}")


def sampling_summary(output: str, most: int, zh: bool = False) -> str:
    """What each run of lesson 8's sampling command wrote, from its output: ``== flags`` headers, then
    ``[reason; N output tokens; ...]`` lines."""
    words = WORDS["zh" if zh else "en"]
    runs = re.findall(r"^== (.*)$(?:.|\n)*?^\[(\w+); (\d+) output tokens", output, flags=re.M)
    parts = [words[reason].format(name=flags, n=n) for flags, reason, n in runs]
    return words["stops"].format(most=most, runs=("；" if zh else "; ").join(parts))
