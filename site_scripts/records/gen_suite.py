"""How long the test suite takes, as the contributing page shows it, rendered from the committed record.

Scope: ``snippets/suite/timings.json``, written by ``python -m site_scripts.records.measure_suite`` on a clean
clone (``make setup`` with pip's cache, ``make serve`` twice, ``make test`` and ``make test-quick``), as a
table in each language: each command's wall time and result, and whether it kept to its bound (``BOUNDS``:
``make test`` within 12 minutes, ``make test-quick`` within 2, the first ``make serve`` serving within 5 and a
second, with nothing changed, within 30 s), then the machine and commit it was measured on.
Non-scope: measuring (only the record's script does; its figures depend on the machine and its load).
"""

from __future__ import annotations

from typing import Any

from site_scripts.build.common import SNIPPETS, phrases, read_json

RECORD = SNIPPETS / "suite" / "timings.json"
SUITE_BOUND_S = 12 * 60  # the whole suite on two cores once set up
QUICK_BOUND_S = 2 * 60  # the quick loop
FIRST_SERVE_BOUND_S = 5 * 60  # a fresh clone's first make serve, every snippet regenerated
SERVE_AGAIN_BOUND_S = 30  # a later make serve with nothing changed
BOUNDS = {"make test": SUITE_BOUND_S, "make test-quick": QUICK_BOUND_S, "make serve": FIRST_SERVE_BOUND_S,
          "make serve (again)": SERVE_AGAIN_BOUND_S}
WORDS = phrases(__name__)["words"]  # in words.toml, each phrase in English and in Chinese

NOT_MEASURED = phrases(__name__)["not_measured"]


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s ({seconds / 60:.1f} min)"


def within(record: dict[str, Any]) -> dict[str, bool]:
    """For each bounded command of the record: did it pass, inside its bound?"""
    return {run["command"]: run["returncode"] == 0 and run["wall_s"] <= BOUNDS[run["command"]]
            for run in record["runs"] if run["command"] in BOUNDS}


def timings_table(record: dict[str, Any] | None = None, lang: str = "en") -> str:
    if record is None and not RECORD.is_file():
        return NOT_MEASURED[lang]
    record = record if record is not None else read_json(RECORD)
    words, kept = WORDS[lang], within(record)
    rows = []
    for run in record["runs"]:
        result = run["summary"] or f"exit {run['returncode']}"
        bound = BOUNDS.get(run["command"])
        verdict = (words["yes"] if kept[run["command"]] else words["no"]) if bound else words["none"]
        rows.append(f"| `{run['command']}` | {_duration(run['wall_s'])} | {result} | "
                    f"{_duration(bound) if bound else words['none']} | {verdict} |\n")
    note = words["measured"].format(commit=record["commit"][:7], cpu=record["cpu"], cores=record["cores"],
                                    before=record["load_1m"]["before"], after=record["load_1m"]["after"],
                                    date=record["date"])
    table = f"{words['head']}\n|---|---:|---|---:|---|\n" + "".join(rows)
    return f"{table}\n{note}{_setting(record, lang)}\n"


def _setting(record: dict[str, Any], lang: str) -> str:
    """What the record says of pip's cache and of one tokenizer build, where it says it."""
    words, said = WORDS[lang], []
    if "pip_cache" in record:
        said.append(words["pip_cache"] if record["pip_cache"] else words["no_pip_cache"])
    if "tokenizer_build_s" in record:
        said.append(words["tokenizer"].format(seconds=record["tokenizer_build_s"]))
    return "".join((" " if lang == "en" else "") + sentence for sentence in said)


OUTPUTS = {
    "suite/timings.md": lambda: timings_table(lang="en"),
    "suite/timings.zh.md": lambda: timings_table(lang="zh"),
}
