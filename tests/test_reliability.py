"""Bad input and Ctrl-C at the command line: exit code 2 (or 130), one stderr line, no traceback, no record.

The committed table ``snippets/reliability/bad-inputs.md`` is checked against a fresh run by
``tests/test_snippets_current.py``; here its rows are read back and held to the rules, and a real process is
interrupted while it generates.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from site_scripts.common import command_env

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "snippets" / "reliability" / "bad-inputs.md"


def table_rows() -> list[list[str]]:
    """The body rows of the committed table, as lists of cells (``\\|`` kept inside a cell)."""
    lines = TABLE.read_text(encoding="utf-8").splitlines()[2:]
    return [[c.strip().replace("\\|", "|") for c in line.strip("|").split(" | ")] for line in lines]


def test_every_bad_input_in_the_table_exits_2_with_one_error_line():
    rows = table_rows()
    assert len(rows) >= 20
    for case, command, stderr, code in rows:
        assert code == "2", case
        assert command.startswith("`python -m mini_deepinfer.generate ") and "/tmp" not in command, case
        assert stderr.startswith("`error: ") and stderr.endswith("`") and "\n" not in stderr, case
        assert "Traceback" not in stderr


def test_the_table_covers_each_case_once():
    cases = [row[0] for row in table_rows()]
    assert len(cases) == len(set(cases))
    assert cases == sorted(cases)


def test_a_failed_run_leaves_no_output_file(tiny_checkpoint, tmp_path):
    record = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "mini_deepinfer.generate", "--model", str(tiny_checkpoint),
                           "--prompt", "Hello", "--raw", "--max-new-tokens", "-1", "--output", str(record)],
                          cwd=ROOT, env=command_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert not record.exists()


@pytest.mark.slow
def test_ctrl_c_while_generating_exits_130_with_one_line_and_no_record(tiny_checkpoint, tmp_path):
    record = tmp_path / "run.json"
    argv = [sys.executable, "-u", "-m", "mini_deepinfer.generate", "--model", str(tiny_checkpoint),
            "--prompt", "Hello", "--raw", "--ignore-eos", "--max-new-tokens", "100000",
            "--cache-capacity", "100100", "--stream", "--output", str(record)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=command_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.read(1)  # the first streamed byte: it is generating
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = err.decode("utf-8")
    assert proc.returncode == 130, text
    assert text == "error: interrupted\n"
    assert not record.exists()
