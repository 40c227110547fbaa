"""``python -m site_scripts.records.measure_suite``: how long the README's test command takes, freshly cloned.

Scope: clone the repository's ``HEAD`` into a scratch folder outside it, run ``make setup`` there (the set-up
part of ``make test``: ``.venv``, torch and every dependency from pip's cache, DeepInfer's sdist, Pyodide),
then ``make test`` (every test, on the two workers; the set-up is then already done) and ``make test-quick``,
each timed by the wall clock, and write what was measured to ``snippets/suite/timings.json``: each command's
wall time, exit status and pytest's closing line, the commit, the CPU model (``lscpu``), its cores, and the
load average before and after. ``site_scripts/records/gen_suite.py`` renders the table the contributing page
shows.

Usage: ``python -m site_scripts.records.measure_suite [--output PATH]`` (about 15 minutes on two cores; CI's
own run of ``make test`` is the other place the figure shows, in its log's slowest tests).

Non-scope: the first set-up on a machine with nothing cached (it downloads about a gigabyte; the contributing
page states the one measured), and any single test's time (``--durations`` lists those).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from training.record import cpu_model

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "snippets" / "suite" / "timings.json"
COMMANDS = ("make setup", "make test", "make test-quick")
SUMMARY = re.compile(r"^=+ (.*\d+ passed.*) in [\d.]+s.* =+$", re.M)
SLOWEST = re.compile(r"^=+ slowest \d+ durations =+\n(.*?)\n(?:\(|=)", re.M | re.S)


def timed(command: str, cwd: Path) -> dict[str, Any]:
    """Run ``command`` in ``cwd``; its wall time, exit status and pytest's closing counts (if it printed
    them)."""
    started = time.perf_counter()
    env = {**os.environ, "CI": "true"} if command == "make test" else os.environ  # make test as CI runs it
    proc = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, check=False,
                          env=env)
    wall = time.perf_counter() - started
    found, slowest = SUMMARY.findall(proc.stdout), SLOWEST.search(proc.stdout)
    print(f"{command}: {wall:.0f} s, exit {proc.returncode}", flush=True)
    return {"command": command, "wall_s": round(wall, 1), "returncode": proc.returncode,
            "summary": found[-1] if found else None,
            "slowest": slowest[1].splitlines() if slowest else [],  # pytest's --durations list
            "tail": proc.stdout[-1500:] if proc.returncode else ""}


def measure(scratch: Path) -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    clone = scratch / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    load_before = os.getloadavg()[0]
    runs = [timed(command, clone) for command in COMMANDS]
    return {"commit": commit, "cpu": cpu_model(), "cores": os.cpu_count(),
            "load_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m site_scripts.records.measure_suite",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--output", type=Path, default=RECORD)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="suite-") as scratch:
        record = measure(Path(scratch))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    partial = args.output.with_suffix(".partial")
    partial.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    partial.replace(args.output)
    return 0 if all(run["returncode"] == 0 for run in record["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
