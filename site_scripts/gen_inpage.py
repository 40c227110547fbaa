"""The in-page runs' measurements as the contributing page shows them, rendered from the committed record.

Scope: ``snippets/inpage/timings.json``, which ``python -m site_scripts.inpage_measure`` writes after driving
headless Chromium against a local build (site size added, click to the first output line, repeat run), as a
markdown table with the machine it was measured on. Non-scope: measuring (the record's script does that, and
only when asked: its figures depend on the machine and its load, so regenerating never re-measures).
"""

from __future__ import annotations

from typing import Any

from site_scripts.common import SNIPPETS, read_json

RECORD = SNIPPETS / "inpage" / "timings.json"


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.2f} s"


def _megabytes(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB ({size:,} bytes)"


def timings_table(record: dict[str, Any] | None = None) -> str:
    """The table: one row per figure, then the machine, browser, runtime and commit it was measured on."""
    record = record if record is not None else read_json(RECORD)
    first, repeat, machine = record["first_run"], record["repeat_run"], record["machine"]
    rows = [
        ("Site size added (Pyodide runtime, engine zip, script, worker, stylesheet)",
         _megabytes(record["site_bytes_added"])),
        ("First run in a new tab: click to first output line (loads the runtime)",
         _seconds(first["click_to_first_line_ms"])),
        ("First run in a new tab: click to the last line", _seconds(first["click_to_end_ms"])),
        ("Repeat run: click to first output line", _seconds(repeat["click_to_first_line_ms"])),
        ("Repeat run: click to the last line", _seconds(repeat["click_to_end_ms"])),
        ("Measured with", f"{record['runtime']}, {machine['browser']} (headless), {machine['server']}, "
                          f"{machine['cpus']} CPUs ({machine['system']}), commit {record['commit']}"),
    ]
    return "| What | Value |\n| --- | --- |\n" + "".join(f"| {what} | {value} |\n" for what, value in rows)


OUTPUTS = {"inpage/timings.md": timings_table}
