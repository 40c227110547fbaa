"""``python -m site_scripts.records.measure_workbook``: how long each lesson's workbook check takes.

Scope: for each lesson, a fresh workbook folder with the engine's own function written in (``start``, then
``solution --write``), then ``python -m mini_deepinfer.workbook check N`` run ``REPEATS`` times as a learner
runs it (a new Python each time, its start and imports included), timed by the wall clock; the median, the
exit codes, the CPU model (``lscpu``), its cores, the load and the commit go to
``snippets/workbook/check-times.json``, which ``site_scripts/records/gen_workbook_times.py`` renders for
the contributing page. The bounds: a check of a lesson without torch within ``CORE_BOUND_S``, one with torch
within ``TORCH_BOUND_S``, on two cores. Non-scope: the in-page check
(``site_scripts/inpage/inpage_measure.py`` measures it in the browser).

Usage: ``python -m site_scripts.records.measure_workbook [--output PATH] [--repeats N]`` (about 2 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mini_deepinfer.workbook.lessons import EXERCISES
from training.record import cpu_model

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "snippets" / "workbook" / "check-times.json"
REPEATS = 3
CORE_BOUND_S = 3.0
TORCH_BOUND_S = 10.0


def workbook(*args: str, folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mini_deepinfer.workbook", *args, "--dir", str(folder)],
                          cwd=ROOT, capture_output=True, text=True, check=False)


def time_lesson(lesson: int, folder: Path, repeats: int) -> dict[str, Any]:
    """The wall times of ``check`` for one lesson, its engine's function written in."""
    for step in (("start", str(lesson)), ("solution", str(lesson), "--write")):
        workbook(*step, folder=folder).check_returncode()
    times, codes = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        codes.append(workbook("check", str(lesson), folder=folder).returncode)
        times.append(time.perf_counter() - started)
    print(f"lesson {lesson}: median {statistics.median(times):.2f} s, exit {codes}", flush=True)
    return {"lesson": lesson, "times_s": [round(t, 2) for t in times],
            "median_s": round(statistics.median(times), 2), "exit_codes": codes}


def measure(repeats: int) -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="workbook-") as scratch:
        lessons = [time_lesson(item.lesson, Path(scratch), repeats) for item in EXERCISES]
    return {"commit": commit, "cpu": cpu_model(), "cores": os.cpu_count(), "repeats": repeats,
            "load_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "lessons": lessons}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m site_scripts.records.measure_workbook",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--output", type=Path, default=RECORD)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    args = parser.parse_args(argv)
    record = measure(args.repeats)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    partial = args.output.with_suffix(".partial")
    partial.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    partial.replace(args.output)
    return 0 if all(set(entry["exit_codes"]) == {0} for entry in record["lessons"]) else 1


if __name__ == "__main__":
    sys.exit(main())
