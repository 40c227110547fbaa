"""How long each workbook check takes, as the contributing page shows it, rendered from the committed record.

Scope: ``snippets/workbook/check-times.json`` (``python -m site_scripts.records.measure_workbook``) as a
table in each language: each lesson, where its check runs, the median wall time of ``check N`` and whether it
kept to its bound (``CORE_BOUND_S`` for a lesson without torch, ``TORCH_BOUND_S`` with), then the machine and
the commit.
Non-scope: measuring (only the record's script does; its figures depend on the machine and its load).
"""

from __future__ import annotations

from site_scripts.build.common import SNIPPETS, read_json
from site_scripts.records.measure_workbook import CORE_BOUND_S, TORCH_BOUND_S

RECORD = SNIPPETS / "workbook" / "check-times.json"
WORDS = {
    "en": {"head": "| Lesson | Runs | `check N` (median) | Bound | Within |", "page": "page and local",
           "local": "local", "yes": "yes", "no": "**no**",
           "measured": "Median of {repeats} runs of `python -m mini_deepinfer.workbook check N` each (a new "
                       "Python every time, imports included), measured at commit `{commit}` on {cpu}, "
                       "{cores} cores, load {before} before and {after} after, {date}, by "
                       "`python -m site_scripts.records.measure_workbook`.",
           "missing": "No measurement is committed yet "
                      "(`python -m site_scripts.records.measure_workbook` makes one)."},
    "zh": {"head": "| 课 | 在哪里运行 | `check N`（中位数） | 上限 | 是否在上限内 |", "page": "页面与本地",
           "local": "本地", "yes": "是", "no": "**否**",
           "measured": "每课运行 {repeats} 次 `python -m mini_deepinfer.workbook check N`"
                       "（每次都是新的 Python，含导入）取中位数；在提交 `{commit}` 上测得：{cpu}，"
                       "{cores} 个核，负载运行前 {before}、运行后 {after}，{date}，"
                       "由 `python -m site_scripts.records.measure_workbook` 测量。",
           "missing": "还没有提交测量结果"
                      "（`python -m site_scripts.records.measure_workbook` 会测一次）。"},
}


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
