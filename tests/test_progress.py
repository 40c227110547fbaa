"""Progress bars: shown on stderr when it is a terminal, silent otherwise.

Scope: writing a random checkpoint (one step per tensor) and loading a checkpoint (one step per tensor copied)
print a tqdm bar when stderr is a terminal (here a pseudo-terminal with a window size) and nothing at all when
stderr is a pipe or captured, as in the tests, the site's generators and ``--output`` runs piped to files.
Non-scope: the benchmark's bar (``python -m mini_deepinfer.bench`` takes minutes; it uses the same switch,
``disable=not sys.stderr.isatty()``), what the bars look like.
"""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300


def run_on_a_terminal(args: list[str]) -> tuple[int, str]:
    """Run ``python ARGS`` with stderr on a 100-column pseudo-terminal; return the exit code and the text."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # tqdm needs a width
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    shown = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # the other end is closed: the process has exited
            break
        if not data:
            break
        shown.append(data)
    os.close(master)
    return proc.wait(timeout=TIMEOUT_S), b"".join(shown).decode("utf-8", "replace")


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A tiny random checkpoint written with stderr captured, and that stderr."""
    folder = tmp_path_factory.mktemp("progress") / "tiny"
    proc = subprocess.run(
        [sys.executable, "-m", "mini_deepinfer.random_checkpoint", "--preset", "tiny", "--dtype", "float32",
         str(folder)], cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    return folder, proc.stderr


def test_writing_a_random_checkpoint_prints_no_bar_when_stderr_is_not_a_terminal(
        written: tuple[Path, str]) -> None:
    _, stderr = written
    assert stderr == "", f"stderr was not empty: {stderr[:200]!r}"


def test_loading_a_checkpoint_prints_nothing_when_stderr_is_captured(
        written: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from mini_deepinfer.models.loader import load_checkpoint

    load_checkpoint(written[0], torch.float32)
    assert capsys.readouterr().err == ""


def test_loading_a_checkpoint_shows_a_bar_on_a_terminal(written: tuple[Path, str]) -> None:
    code, shown = run_on_a_terminal(["-c", "import sys; from mini_deepinfer.models.loader import "
                                           "load_checkpoint; load_checkpoint(sys.argv[1])", str(written[0])])
    assert code == 0, shown
    assert "loading weights" in shown and "%|" in shown


@pytest.mark.slow
def test_writing_a_random_checkpoint_shows_a_bar_on_a_terminal(tmp_path: Path) -> None:
    code, shown = run_on_a_terminal(["-m", "mini_deepinfer.random_checkpoint", "--preset", "tiny",
                                     str(tmp_path / "tiny")])
    assert code == 0, shown
    assert "random weights" in shown and all(mark in shown for mark in ("%|", "tensor/s"))
