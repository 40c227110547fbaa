"""``python -m MODULE ARGS`` in a folder, forked from a Python that has already imported torch.

Scope: what runs many short commands of this package: the exercises' tests, in scratch copies of it
(``tests/test_exercises.py``), and the snippet generators (``common.run_module``, and the reliability table's
bad inputs). Importing torch is 0.85 to 1.5 s of each such run, more than most of those commands take to run.
One helper process imports torch, and nothing of this package; for each command it forks, and the child does
what ``python -m`` started in that folder would: the folder first on ``sys.path``, ``sys.argv`` set, the
module run as ``__main__`` (``runpy``), stdin empty, stdout and stderr into files, the exit code from
``SystemExit``. The package is imported afresh in every child, from the folder, so a run sees the copy's code
as the test changed it.

The helper's environment (``env``) is every child's: variables that Python reads as it starts
(``PYTHONHASHSEED``, ``PYTHONIOENCODING``) are set for the helper, and so hold in each command as they would
in a fresh ``python -m``.

Non-scope: anything that needs a Python of its own (``pytest`` in the copy, signals, an environment or locale
of its own, interpreter flags): those callers start ``sys.executable`` themselves.
"""

from __future__ import annotations

import json
import select
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# The helper's loop. It forks before torch has run anything, so no thread pool exists yet to be lost in the
# child (forking after torch's OpenMP threads have started is what makes fork unsafe with torch).
HELPER = r"""
import json, os, runpy, sys, traceback
import torch  # noqa: F401  (the point of this process)

def run(job):
    os.chdir(job["cwd"])
    sys.path[0] = job["cwd"]  # as `python -m` run in that folder
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        os.dup2(os.open(job[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), fd)
    sys.argv = [job["module"], *job["args"]]
    code = 0
    try:
        runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        run(job)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status), flush=True)
"""


@dataclass(frozen=True)
class Finished:
    """What ``subprocess.run(..., capture_output=True, text=True)`` would have returned, in its names."""

    returncode: int
    stdout: str
    stderr: str


class PreloadedPython:
    """The helper process; ``run_module`` sends it one command at a time."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", HELPER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env)
        self.folder = Path(tempfile.mkdtemp(prefix="preloaded-python-"))

    def run_module(self, cwd: Path, module: str, *args: str, timeout: float) -> Finished:
        out, err = self.folder / "stdout", self.folder / "stderr"
        job = {"cwd": str(cwd), "module": module, "args": list(args), "stdout": str(out), "stderr": str(err)}
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            self.process.kill()
            raise TimeoutError(f"python -m {module} {' '.join(args)} ran for more than {timeout} s")
        code = int(self.process.stdout.readline())
        return Finished(code, out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8"))

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)
