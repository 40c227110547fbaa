"""The trained target and draft on the site: their training records and measurements as tables, their text.

Scope: Markdown tables from the committed records under ``trained/`` (``target/training.json``,
``draft/training.json``, ``draft-corpus-only-training.json``, written by ``python -m
training``; ``measurements.json``, written by ``python -m training.measure``):
the models and their bits per character, speculative acceptance against the draft, the width and the
temperature, tokens per second against plain decoding, which tokens the draft gets right (the sentences
under them come from ``sentences.py``, the records are read by ``committed.py``); repetition, greedy and
sampled (``repetition.py``).
And the terminal output of the pages' ``generate`` commands on ``trained/target`` (greedy, sampled, and
speculative with ``trained/draft``), run as the doc tests run them.

Non-scope: training and measuring (never done at build time: an hour of CPU, and timings change on every
run), the loss-curve picture (``gen_trained_pictures``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from site_scripts.build.common import markdown_table, run_shell
from site_scripts.trained import repetition
from site_scripts.trained.committed import LANGUAGES, agreed, measurements, per_round, record
from site_scripts.trained.sentences import (
    agreement_summary,
    corpora_summary,
    drafts_summary,
    recipe_summary,
    reproduce_summary,
    seeded_summary,
    speed_summary,
    temperatures_summary,
    widths_summary,
)

# --8<-- [start:commands]
GENERATE = "python -m mini_deepinfer.generate --model trained/target --raw"
COMMANDS: dict[str, str] = {
    "trained/generate-greedy.txt": f"""\
{GENERATE} --prompt $'ACT I.\\nSCENE I. A street.\\n\\n' \\
  --max-new-tokens 60 --cache-capacity 128""",
    "trained/generate-poem.txt": f"""\
{GENERATE} --prompt $'春望\\n杜甫\\n' \\
  --max-new-tokens 40 --cache-capacity 128""",
    "trained/sampling.txt": f"""\
for flags in "" "--temperature 0.8 --seed 0" "--temperature 1.5 --seed 0" \\
    "--temperature 1.5 --top-k 5 --seed 0" "--temperature 1.5 --top-p 0.5 --seed 0"; do
  echo "== ${{flags:-greedy}}"
  {GENERATE} --prompt $'KING.\\n' --max-new-tokens 40 \\
    --cache-capacity 128 $flags
done""",
    "trained/speculative.txt": f"""\
{GENERATE} --draft-model trained/draft --speculative \\
  --draft-width 4 --check-greedy --prompt $'ACT I.\\nSCENE I. A street.\\n\\n' \\
  --prompt $'春望\\n杜甫\\n' --max-new-tokens 48 --cache-capacity 256""",
}
# --8<-- [end:commands]
SHOWN_BLOCKS = COMMANDS
"""Snippet -> the block the pages show above it, which this generator runs as written (``run_shell``)."""


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


MODELS = (("target", "trained/target"), ("draft", "trained/draft (distilled)"),
          ("draft-corpus-only", "draft, corpus only (not committed)"))
SHAPE_HEADER = ["model", "hidden x layers", "parameters", "steps", "tokens seen", "training time",
                "trained on"]
SCORE_HEADER = ["model (bits per character)", *(f"{part} {lang}" for part in ("held-out", "unseen")
                                                for lang in ("English", "Chinese"))]


def models_table() -> str:
    """Shape and training of the target and both drafts, then their held-out / unseen bits per character:
    two tables, so that each fits the page's width."""
    shapes, scores = [], []
    for name, label in MODELS:
        made = record(name)
        config, schedule = made["config"], made["schedule"]
        kinds = ", ".join(f"{config['layer_types'].count(k)} {k.split('_')[0]}"
                          for k in ("linear_attention", "full_attention"))
        shapes.append([label, f"{config['hidden_size']} x {len(config['layer_types'])} ({kinds})",
                       f"{made['parameters'] / 1e6:.2f} M", f"{schedule['steps']}",
                       f"{made['tokens_seen'] / 1e6:.2f} M", _minutes(made["training"]["wall_s"]),
                       f"{made['cpu']}, {made['threads']} threads"])
        scores.append([label, *(f"{made['scores'][key]['bits_per_char']:.2f}" for key in
                                ("held_out_en", "held_out_zh", "unseen_en", "unseen_zh"))])
    target = record("target")
    note = (f"`target: torch={target['torch']}, seed={target['seed']}, batch={target['schedule']['batch']} x "
            f"{target['schedule']['seq_len']} tokens, commit={target['commit'][:12]}`")
    tables = [*markdown_table(SHAPE_HEADER, shapes), "", *markdown_table(SCORE_HEADER, scores)]
    return "\n".join([note, "", *tables]) + "\n"


# --8<-- [start:targets]
QUALITY_TARGETS = (  # (what, where in the records, at most / at least, threshold)
    ("held-out English, bits per character", ("target", "held_out_en"), "at most", 1.8),
    ("held-out Chinese, bits per character", ("target", "held_out_zh"), "at most", 6.7),
    ("English, draft tokens accepted per round (width 4, greedy)", ("widths", "en"), "at least", 2.0),
    ("Chinese, draft tokens accepted per round (width 4, greedy)", ("widths", "zh"), "at least", 2.0),
)
# --8<-- [end:targets]


def target_values() -> list[tuple[str, str, float, float, bool]]:
    """Each quality target with the measured value: (what, bound, threshold, value, met)."""
    scores, widths = record("target")["scores"], measurements()["widths"]
    found = []
    for what, (where, key), bound, threshold in QUALITY_TARGETS:
        value = scores[key]["bits_per_char"] if where == "target" else per_round(widths[key]["4"])
        met = value <= threshold if bound == "at most" else value >= threshold
        found.append((what, bound, threshold, value, met))
    return found


def targets_table() -> str:
    """The quality the models were trained for against what the records measured."""
    rows = [[what, f"{bound} {threshold}", f"{value:.2f}", "yes" if met else "**no**"]
            for what, bound, threshold, value, met in target_values()]
    return "\n".join(markdown_table(["figure", "target", "measured", "met"], rows)) + "\n"


SHA_SHOWN = 12  # hex digits of a corpus's SHA-256 in the table; the whole hash is in the training record


def corpora_table() -> str:
    """Each corpus: package, version, licence, the start of its SHA-256, and what it is used for."""
    made = record("target")
    rows = [[f"{c['registry']} `{c['name']}` {c['version']}", c["licence"], f"`{c['sha256'][:SHA_SHOWN]}`"]
            for c in made["corpora"]]
    lines = markdown_table(["package", "licence", f"SHA-256 (first {SHA_SHOWN} digits; all 64 in "
                            "`trained/target/training.json`)"], rows, align="lll")
    uses = [f"- `{key}`: {text}" for key, text in made["sources"].items()]
    return "\n".join([*lines, "", *uses]) + "\n"


def _acceptance_rows(by_key: dict[str, dict[str, Any]], keys: list[str]) -> list[list[str]]:
    rows = []
    for key in keys:
        row = [key]
        for lang in LANGUAGES:
            got = by_key[lang][key]
            row += [f"{per_round(got):.2f}", f"{got['accepted']}/{got['proposed']}"]
        rows.append(row)
    return rows


def _acceptance_header(first: str) -> list[str]:
    return [first] + [f"{name} {what}" for name in LANGUAGES.values()
                      for what in ("accepted per round", "drafts accepted")]


def _measured_note(m: dict[str, Any]) -> str:
    return (f"`cpu={m['cpu']}, threads={m['threads']}, torch={m['torch']}, compute={m['compute_dtype']}, "
            f"{len(m['prompts']['en'])} held-out prompts per language, {m['new_tokens']} new tokens each`")


def _acceptance_table(key: str, first: str) -> str:
    """Acceptance per setting of ``measurements.json``'s ``key`` (widths, temperatures, drafts), per
    language."""
    m = measurements()
    rows = _acceptance_rows(m[key], list(m[key]["en"]))
    return "\n".join([_measured_note(m), "", *markdown_table(_acceptance_header(first), rows)]) + "\n"


def speed_table() -> str:
    m = measurements()
    rows = []
    for lang, name in LANGUAGES.items():
        plain = m["speed"][lang]["plain"]["wall_s"]
        for case, got in m["speed"][lang].items():
            rows.append([name, case, f"{got['tokens_per_s']:.1f}", f"{got['wall_s']:.3f}",
                         f"{got['wall_s'] / plain:.2f}"])
    note = (f"`cpu={m['cpu']}, threads={m['threads']}, one greedy request of {2 * m['new_tokens']} tokens, "
            "median of 3 runs after one warm-up`")
    header = ["prompt", "decoding", "tokens/s", "wall s", "time vs plain"]
    return "\n".join([note, "", *markdown_table(header, rows)]) + "\n"


def agreement_table() -> str:
    m = measurements()
    kinds: list[str] = []
    for lang in LANGUAGES:
        kinds += [k for k in m["agreement_by_kind"][lang] if k not in kinds]
    rows = []
    for kind in kinds:
        row = [kind]
        for lang in LANGUAGES:
            got = m["agreement_by_kind"][lang].get(kind)
            row.append(f"{agreed(got):.0%} ({got['agree']}/{got['tokens']})" if got else "-")
        rows.append(row)
    header = ["token kind", *(f"{n}: draft = target" for n in LANGUAGES.values())]
    return "\n".join(markdown_table(header, rows)) + "\n"


@functools.cache
def command_output(path: str) -> str:
    """The output of one of the pages' commands, run once per build (its snippet and its summary share it)."""
    return run_shell(COMMANDS[path])


def _command(path: str) -> Callable[[], str]:
    return lambda: command_output(path)


def _sampling_summary(zh: bool) -> str:
    most = int(re.search(r"--max-new-tokens (\d+)", COMMANDS["trained/sampling.txt"]).group(1))
    return repetition.sampling_summary(command_output("trained/sampling.txt"), most, zh)


OUTPUTS: dict[str, Callable[[], str]] = {
    "trained/models.md": models_table,
    "trained/targets.md": targets_table,
    **{f"trained/{name}-summary{suffix}.md": (lambda f=f, zh=zh: f(zh))
       for name, f in (("widths", widths_summary), ("drafts", drafts_summary),
                       ("agreement", agreement_summary), ("temperatures", temperatures_summary),
                       ("speed", speed_summary), ("recipe", recipe_summary),
                       ("reproduce", reproduce_summary), ("seeded", seeded_summary),
                       ("corpora", corpora_summary), ("repetition", repetition.repetition_summary),
                       ("greedy-loop", repetition.greedy_loop_summary), ("sampling", _sampling_summary))
       for suffix, zh in (("", False), (".zh", True))},
    "trained/corpora.md": corpora_table,
    **{f"trained/{key}.md": functools.partial(_acceptance_table, key, first) for key, first in (
        ("widths", "width k (greedy)"), ("temperatures", "temperature (k=4)"),
        ("drafts", "draft (k=4, greedy)"))},
    "trained/speed.md": speed_table,
    "trained/agreement.md": agreement_table,
    "trained/repetition.md": repetition.repetition_table,
    "trained/greedy-loop.txt": repetition.greedy_loop_text,
    **{path: _command(path) for path in COMMANDS},
}
