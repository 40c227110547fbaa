"""How long each workbook check takes, as the contributing page shows it, rendered from the committed record.

Scope: ``snippets/workbook/check-times.json`` (``python -m site_scripts.records.measure_workbook``) as a
table in each language: each lesson, where its check runs, the median wall time of ``check N`` and whether it
kept to its bound (``CORE_BOUND_S`` for a lesson without torch, ``TORCH_BOUND_S`` with), then the machine and
the commit.
Non-scope: measuring (only the record's script does; its figures depend on the machine and its load).
"""

from __future__ import annotations

from site_scripts.build.common import SNIPPETS, phrases, read_json
from site_scripts.records.measure_workbook import CORE_BOUND_S, TORCH_BOUND_S

RECORD = SNIPPETS / "workbook" / "check-times.json"
WORDS = phrases(__name__)["words"]


def table(lang: str) -> str:
    from mini_deepinfer.workbook.lessons import exercise

    words = WORDS[lang]
    if not RECORD.exists():
        return words["missing"] + "\n"
    record = read_json(RECORD)
    rows = [words["head"], "|---|---|---|---|---|"]
    for entry in record["lessons"]:
        in_page = exercise(entry["lesson"]).in_page
        bound = CORE_BOUND_S if in_page else TORCH_BOUND_S
        within = words["yes"] if entry["median_s"] <= bound else words["no"]
        where = words["page" if in_page else "local"]
        rows.append(f"| {entry['lesson']} | {where} | {entry['median_s']:.2f} s | {bound:.0f} s | {within} |")
    load = record["load_1m"]
    note = words["measured"].format(repeats=record["repeats"], commit=record["commit"][:7], cpu=record["cpu"],
                                    cores=record["cores"], before=load["before"], after=load["after"],
                                    date=record["date"][:10])
    return "\n".join(rows) + "\n\n" + note + "\n"


OUTPUTS = {f"workbook/check-times.{lang}.md": (lambda lang=lang: table(lang)) for lang in ("en", "zh")}
