"""The in-page runs' measurements as the contributing page shows them, rendered from the committed record.

Scope: ``snippets/inpage/timings.json``, which ``python -m site_scripts.inpage.inpage_measure`` writes after
driving headless Chromium against a local build (site size added, click to the first output line, repeat run),
as a markdown table in each language with the command the measured Run box ran and the machine it was
measured on. The times are in milliseconds, so a first and a last line a few milliseconds apart stay apart.
Non-scope: measuring (the record's script does that, and only when asked: its figures depend on the machine
and its load, so regenerating never re-measures).
"""

from __future__ import annotations

from typing import Any

from site_scripts.build.common import ROOT, SNIPPETS, read_json

RECORD = SNIPPETS / "inpage" / "timings.json"


QUICKSTART = ROOT / "docs" / "quickstart.en.md"
ROWS = {
    "en": {
        "head": "| What | Value |",
        "size": "Site size added (Pyodide runtime, engine zip, script, worker, stylesheet)",
        "size_value": "{mb:.1f} MB ({size:,} bytes)",
        "command": "Command run (the quick start's first Run box)",
        "first_line": "First run in a new tab: click to first output line (loads the runtime)",
        "first_end": "First run in a new tab: click to the last line",
        "repeat_line": "Repeat run: click to first output line",
        "repeat_end": "Repeat run: click to the last line",
        "exercise": "Workbook exercise ({page}), new tab: page opened to the first check's result "
                    "(loads the runtime; the starter, exit code {code})",
        "measured": "Measured with",
        "measured_value": "{runtime}, {browser} (headless), {server}, {cpus} CPUs, {cpu} ({system}), "
                          "commit {commit}; by `python -m site_scripts.inpage.inpage_measure`",
    },
    "zh": {
        "head": "| 项目 | 值 |",
        "size": "站点增加的大小（Pyodide 运行时、引擎 zip、脚本、worker、样式表）",
        "size_value": "{mb:.1f} MB（{size:,} 字节）",
        "command": "运行的命令（快速上手页的第一个运行框）",
        "first_line": "新标签页里第一次运行：点击到第一行输出（要加载运行时）",
        "first_end": "新标签页里第一次运行：点击到最后一行",
        "repeat_line": "再运行一次：点击到第一行输出",
        "repeat_end": "再运行一次：点击到最后一行",
        "exercise": "练习册练习（{page}），新标签页：打开页面到第一次检查出结果（要加载运行时；起步代码，"
                    "退出码 {code}）",
        "measured": "测量环境",
        "measured_value": "{runtime}，{browser}（无头），{server}，{cpus} 个 CPU，{cpu}（{system}），"
                          "提交 {commit}；由 `python -m site_scripts.inpage.inpage_measure` 测得",
    },
}


def _milliseconds(ms: int) -> str:
    return f"{ms:,} ms"


def measured_command(record: dict[str, Any]) -> str:
    """The command the measured Run box ran: the record's, or (records from before it was kept) the first
    command of the quick start, which is the box ``inpage_measure`` clicks."""
    if record.get("command"):
        return record["command"]
    text = QUICKSTART.read_text(encoding="utf-8")
    return text.split("```bash\n", 1)[1].split("\n", 1)[0]


def timings_table(record: dict[str, Any] | None = None, lang: str = "en") -> str:
    """The table: one row per figure, then the machine, browser, runtime and commit it was measured on."""
    record = record if record is not None else read_json(RECORD)
    first, repeat, words = record["first_run"], record["repeat_run"], ROWS[lang]
    machine = {"cpu": "CPU model not recorded", **record["machine"]}
    size = record["site_bytes_added"]
    rows = [
        (words["size"], words["size_value"].format(mb=size / 1_000_000, size=size)),
        (words["command"], f"`{measured_command(record)}`"),
        (words["first_line"], _milliseconds(first["click_to_first_line_ms"])),
        (words["first_end"], _milliseconds(first["click_to_end_ms"])),
        (words["repeat_line"], _milliseconds(repeat["click_to_first_line_ms"])),
        (words["repeat_end"], _milliseconds(repeat["click_to_end_ms"])),
        *([(words["exercise"].format(page=exercise["page"], code=exercise["exit_code"]),
            _milliseconds(exercise["open_to_result_ms"]))] if (exercise := record.get("exercise")) else []),
        (words["measured"], words["measured_value"].format(runtime=record["runtime"], commit=record["commit"],
                                                           **machine)),
    ]
    return f"{words['head']}\n| --- | --- |\n" + "".join(f"| {what} | {value} |\n" for what, value in rows)


OUTPUTS = {"inpage/timings.md": timings_table, "inpage/timings.zh.md": lambda: timings_table(lang="zh")}
