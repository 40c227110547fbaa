"""``python -m site_scripts.records.measure_suite``: how long the README's two commands take, freshly cloned.

Scope: clone the repository's ``HEAD`` into a scratch folder outside it, run ``make setup`` there (the set-up
part of ``make test``: ``.venv``, torch and every dependency from pip's cache, DeepInfer's sdist, Pyodide),
``make serve`` twice until the site answers (the first regenerates every snippet; the second, with nothing
changed, finds every generator up to date), then ``make test`` (every test, on the two workers; the set-up is
then already done) and ``make test-quick``, each timed by the wall clock. It writes what was measured to
``snippets/suite/timings.json``: each command's wall time, exit status and pytest's closing line; the commit,
the CPU model (``lscpu``), its cores, the load average before and after; whether pip's cache served
``make setup``; and how long one build of the Qwen3.5 tokenizer takes (what the suite's tokenizer cache saves
for each random checkpoint it writes). ``site_scripts/records/gen_suite.py`` renders the table the
contributing page shows.

Usage: ``python -m site_scripts.records.measure_suite [--output PATH]`` (about 20 minutes on two cores; CI's
own run of ``make test`` is the other place the figure shows, in its log's slowest tests).

Non-scope: the first set-up on a machine with nothing cached (it downloads every dependency; its time is the
network's, and no record holds one), and any single test's time (``--durations`` lists those).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from mini_deepinfer.tools.tokenizer_files import build_tokenizer
from training.record import cpu_model

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "snippets" / "suite" / "timings.json"
COMMANDS = ("make setup", "make serve", "make serve (again)", "make test", "make test-quick")
SITE = "http://127.0.0.1:8000/"  # where make serve serves the site
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


def served(command: str, cwd: Path, timeout_s: float = 900.0) -> dict[str, Any]:
    """Start ``make serve`` in ``cwd``, time it until the site answers, then stop it (its whole process
    group); the result as :func:`timed` gives it, ``summary`` saying whether the site was served."""
    started = time.perf_counter()
    with subprocess.Popen(["make", "serve"], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, start_new_session=True) as proc:
        while proc.poll() is None and time.perf_counter() - started < timeout_s and not _answers(SITE):
            time.sleep(0.5)
        wall, answered = time.perf_counter() - started, proc.poll() is None and _answers(SITE)
        os.killpg(proc.pid, signal.SIGTERM)
        output = proc.communicate()[0]
    print(f"{command}: {wall:.0f} s, {'served' if answered else 'not served'}", flush=True)
    return {"command": command, "wall_s": round(wall, 1), "returncode": 0 if answered else 1,
            "summary": "served" if answered else None, "slowest": [],
            "tail": "" if answered else output[-1500:]}


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def tokenizer_build_s(repeats: int = 3) -> float:
    """The median wall time of building the Qwen3.5 tokenizer from its ranks, in this process."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        build_tokenizer("qwen3.5")
        times.append(time.perf_counter() - started)
    return round(statistics.median(times), 2)


def pip_cache_used() -> bool:
    """Whether pip may serve ``make setup`` from its cache here (``PIP_NO_CACHE_DIR`` unset, a cache folder
    that holds files), so that the set-up time is that of a later set-up, not of a first one."""
    if os.environ.get("PIP_NO_CACHE_DIR"):
        return False
    folder = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True,
                            check=False).stdout.strip()
    return bool(folder) and Path(folder).is_dir() and any(Path(folder).iterdir())


def measure(scratch: Path) -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    clone = scratch / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    load_before, pip_cache = os.getloadavg()[0], pip_cache_used()
    if _answers(SITE):
        raise SystemExit(f"error: something already serves {SITE}; stop it first")
    runs = [(served if command.startswith("make serve") else timed)(command, clone) for command in COMMANDS]
    return {"commit": commit, "cpu": cpu_model(), "cores": os.cpu_count(),
            "load_1m": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "pip_cache": pip_cache,
            "tokenizer_build_s": tokenizer_build_s(), "runs": runs}


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
