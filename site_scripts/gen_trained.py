"""The trained target and draft on the site: their training records and measurements as tables, their text.

Scope: Markdown tables from the committed records under ``trained/`` (``target/training.json``,
``draft/training.json``, ``draft-corpus-only-training.json``, written by ``python -m
site_scripts.train_models``; ``measurements.json``, written by ``python -m site_scripts.measure_trained``):
the models and their bits per character, speculative acceptance against the draft, the width and the
temperature, tokens per second against plain decoding, which tokens the draft gets right, and repetition.
And the terminal output of the pages' ``generate`` commands on ``trained/target`` (greedy, sampled, and
speculative with ``trained/draft``), run as the doc tests run them.

Non-scope: training and measuring (never done at build time: an hour of CPU, and timings change on every
run), the loss-curve picture (``gen_trained_pictures``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from site_scripts.common import ROOT, read_json, run_shell

TRAINED = ROOT / "trained"
LANGUAGES = {"en": "English", "zh": "Chinese"}

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


def record(name: str) -> dict[str, Any]:
    path = TRAINED / f"{name}-training.json" if name.endswith("corpus-only") else \
        TRAINED / name / "training.json"
    return read_json(path)


def measurements() -> dict[str, Any]:
    return read_json(TRAINED / "measurements.json")


def _table(header: list[str], rows: list[list[str]], numeric: bool = True) -> list[str]:
    """A Markdown table; the columns after the first are right-aligned when ``numeric``."""
    rest = "|---:" if numeric else "|---"
    return ["| " + " | ".join(header) + " |", "|---" + rest * (len(header) - 1) + "|",
            *["| " + " | ".join(row) + " |" for row in rows]]


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def models_table() -> str:
    """Shape, training and held-out / unseen bits per character of the target and both drafts."""
    rows = []
    for name, label in (("target", "trained/target"), ("draft", "trained/draft (distilled)"),
                        ("draft-corpus-only", "draft, corpus only (not committed)")):
        made = record(name)
        config, scores, schedule = made["config"], made["scores"], made["schedule"]
        kinds = ", ".join(f"{config['layer_types'].count(k)} {k.split('_')[0]}"
                          for k in ("linear_attention", "full_attention"))
        rows.append([label, f"{config['hidden_size']} x {len(config['layer_types'])} ({kinds})",
                     f"{made['parameters'] / 1e6:.2f} M", f"{schedule['steps']}",
                     f"{made['tokens_seen'] / 1e6:.2f} M", _minutes(made["training"]["wall_s"]),
                     *(f"{scores[key]['bits_per_char']:.2f}" for key in
                       ("held_out_en", "held_out_zh", "unseen_en", "unseen_zh"))])
    header = ["model", "hidden x layers", "parameters", "steps", "tokens seen", "training time",
              "held-out English", "held-out Chinese", "unseen English", "unseen Chinese"]
    target = record("target")
    note = (f"`bits per character; cpu={target['cpu']}, threads={target['threads']}, "
            f"torch={target['torch']}, "
            f"seed={target['seed']}, batch={target['schedule']['batch']} x {target['schedule']['seq_len']} "
            f"tokens, commit={target['commit'][:12]}`")
    return "\n".join([note, "", *_table(header, rows)]) + "\n"


def corpora_table() -> str:
    """Each corpus: package, version, licence, SHA-256, and what it is used for."""
    made = record("target")
    rows = [[f"{c['registry']} `{c['name']}` {c['version']}", c["licence"], f"`{c['sha256'][:16]}…`"]
            for c in made["corpora"]]
    lines = _table(["package", "licence", "SHA-256"], rows, numeric=False)
    uses = [f"- `{key}`: {text}" for key, text in made["sources"].items()]
    return "\n".join([*lines, "", *uses]) + "\n"


def _acceptance_rows(by_key: dict[str, dict[str, Any]], keys: list[str]) -> list[list[str]]:
    rows = []
    for key in keys:
        row = [key]
        for lang in LANGUAGES:
            got = by_key[lang][key]
            row += [f"{got['accepted_per_round']:.2f}", f"{got['accepted']}/{got['proposed']}"]
        rows.append(row)
    return rows


def _acceptance_header(first: str) -> list[str]:
    return [first] + [f"{name} {what}" for name in LANGUAGES.values()
                      for what in ("accepted per round", "drafts accepted")]


def _measured_note(m: dict[str, Any]) -> str:
    return (f"`cpu={m['cpu']}, threads={m['threads']}, torch={m['torch']}, compute={m['compute_dtype']}, "
            f"{len(m['prompts']['en'])} held-out prompts per language, {m['new_tokens']} new tokens each`")


def widths_table() -> str:
    m = measurements()
    keys = list(m["widths"]["en"])
    rows = _acceptance_rows(m["widths"], keys)
    return "\n".join([_measured_note(m), "", *_table(_acceptance_header("width k (greedy)"), rows)]) + "\n"


def temperatures_table() -> str:
    m = measurements()
    keys = list(m["temperatures"]["en"])
    rows = _acceptance_rows(m["temperatures"], keys)
    return "\n".join([_measured_note(m), "", *_table(_acceptance_header("temperature (k=4)"), rows)]) + "\n"


def drafts_table() -> str:
    m = measurements()
    keys = list(m["drafts"]["en"])
    rows = _acceptance_rows(m["drafts"], keys)
    return "\n".join([_measured_note(m), "", *_table(_acceptance_header("draft (k=4, greedy)"), rows)]) + "\n"


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
    return "\n".join([note, "", *_table(header, rows)]) + "\n"


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
            row.append(f"{got['share']:.0%} ({got['agree']}/{got['tokens']})" if got else "-")
        rows.append(row)
    header = ["token kind", *(f"{n}: draft = target" for n in LANGUAGES.values())]
    return "\n".join(_table(header, rows)) + "\n"


def repetition_table() -> str:
    m = measurements()
    rows = [[name, ", ".join(f"{v:.2f}" for v in m["repetition"][lang]["distinct_4grams"])]
            for lang, name in LANGUAGES.items()]
    header = ["prompts", "distinct 4-grams / all 4-grams, 200 greedy tokens each"]
    return "\n".join(_table(header, rows)) + "\n"


def _command(path: str) -> Callable[[], str]:
    return lambda: run_shell(COMMANDS[path])


OUTPUTS: dict[str, Callable[[], str]] = {
    "trained/models.md": models_table,
    "trained/corpora.md": corpora_table,
    "trained/widths.md": widths_table,
    "trained/temperatures.md": temperatures_table,
    "trained/drafts.md": drafts_table,
    "trained/speed.md": speed_table,
    "trained/agreement.md": agreement_table,
    "trained/repetition.md": repetition_table,
    **{path: _command(path) for path in COMMANDS},
}
