"""Set-up: the Python that `make` asks for, and the fetching of DeepInfer's sdist.

Scope: ``make check-python``, the check that ``make test`` and ``make serve`` run before they create ``.venv``
or install anything, against this interpreter and against every other interpreter found on this machine
(``/usr/bin/python3``, those on PATH, pyenv's), each in a scratch copy of the Makefile, where a refused one
must leave nothing behind; that the Makefile's ``PYTHON_FLOOR`` is the highest Requires-Python among the
installed pins of the extras, and that the READMEs and the run guide state it; the order of the set-up steps
(``make -n``); the toy demo on an interpreter older than the floor; and ``site_scripts/build/fetch_sdist.py``
without a network: it reuses an archive with the right SHA-256 and unpacks it, removes a wrong one, and
reports a failed download or a wrong command line in one line. Non-scope: the download itself (the set-up
does it; tests never download), and installing anything on the other interpreters.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = ROOT / "Makefile"
SETUP_FILES = ["Makefile", "pyproject.toml", "docs/reference/deepinfer-refs.json"]  # what the targets read
TESTED_EXTRAS = ("model", "parity", "docs", "test")  # what `make` installs ([all]); npu is left out
VERSION_OF = "import sys; sys.stdout.write('%d.%d.%d' % tuple(sys.version_info[:3]))"
MAKE_ERROR = re.compile(r"^make(\[\d+\])?: \*\*\* \[.*\] Error \d+$")

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def python_floor() -> str:
    return re.search(r"^PYTHON_FLOOR\s*:?=\s*(\S+)\s*$", MAKEFILE.read_text(encoding="utf-8"), re.M)[1]


def check_line(interpreter: str, version: str) -> str:
    return f"{interpreter} is Python {version}; the site and the tests need Python {python_floor()} or newer"


def make_env() -> dict[str, str]:
    """This environment, without what a calling make would pass down to a nested one."""
    return {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEFILES"}}


def run_make(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", "-C", str(folder), *args], capture_output=True,
                          text=True, env=make_env(), stdin=subprocess.DEVNULL, timeout=120)


def scratch_copy(tmp_path: Path) -> Path:
    """The files the set-up targets read, copied to a scratch folder (no package, no .venv)."""
    folder = tmp_path / "checkout"
    for name in SETUP_FILES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, folder / name)
    return folder


def files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


# -- interpreters on this machine --------------------------------------------------------------------------


def _candidates() -> list[Path]:
    found = [Path("/usr/bin/python3"), *sorted(Path("/usr/bin").glob("python3.*")),
             *sorted(Path("/usr/local/bin").glob("python3*"))]
    found += [Path(p) for p in (shutil.which(f"python3.{minor}") for minor in range(6, 20)) if p]
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    found += sorted(pyenv.glob("*/bin/python"))
    return [p for p in found if re.fullmatch(r"python(\d+(\.\d+)?)?", p.name)]


def other_interpreters() -> list[tuple[str, str]]:
    """(path, version) of one working interpreter here for each version other than this one's."""
    seen_files = {Path(sys.executable).resolve()}
    seen_versions = {"%d.%d.%d" % sys.version_info[:3]}
    found = []
    for path in _candidates():
        real = path.resolve()
        if real in seen_files or not os.access(real, os.X_OK):
            continue
        seen_files.add(real)
        try:
            proc = subprocess.run([str(path), "-c", VERSION_OF], capture_output=True, text=True, timeout=30,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            continue
        # a pyenv shim for a version that pyenv does not select fails here
        if proc.returncode == 0 and re.fullmatch(r"\d+\.\d+\.\d+", proc.stdout):
            if proc.stdout not in seen_versions:
                seen_versions.add(proc.stdout)
                found.append((str(path), proc.stdout))
    return found


def older(version: str) -> bool:
    return Version(version) < Version(python_floor())


def as_params(found: list[tuple[str, str]]) -> list:
    """One parameter set per (path, version), or one skipped set when there is none."""
    skip = pytest.mark.skip(reason="no such second interpreter on this machine")
    none = pytest.param(None, None, id="none", marks=skip)
    return [pytest.param(path, version, id=f"{version}-{path}") for path, version in found] or [none]


OTHERS = other_interpreters()
OLDER = [(path, version) for path, version in OTHERS if older(version)]
OLDER_BUT_3_10_UP = [(path, version) for path, version in OLDER if Version(version) >= Version("3.10")]


# -- the check ---------------------------------------------------------------------------------------------


@needs_make
def test_this_interpreter_passes_the_check(tmp_path: Path) -> None:
    folder = scratch_copy(tmp_path)
    version = "%d.%d.%d" % sys.version_info[:3]
    proc = run_make(folder, "check-python", f"PYTHON={sys.executable}")
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert proc.stdout == check_line(sys.executable, version) + "\n"
    assert files_under(folder) == files_under(scratch_copy(tmp_path / "fresh")), "the check left a file"


@needs_make
@pytest.mark.parametrize(("interpreter", "version"), as_params(OTHERS))
def test_another_interpreter_gets_one_line_from_the_check(interpreter: str, version: str,
                                                          tmp_path: Path) -> None:
    folder = scratch_copy(tmp_path)
    proc = run_make(folder, "check-python", f"PYTHON={interpreter}")
    if not older(version):
        assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
        assert proc.stdout == check_line(interpreter, version) + "\n"
        return
    assert proc.returncode == 2 and proc.stdout == ""
    ours, *rest = proc.stderr.splitlines()
    assert ours.startswith(check_line(interpreter, version) + "; run make again with PYTHON set to"), ours
    assert all(MAKE_ERROR.match(line) for line in rest), f"more than make's own line: {rest}"


@needs_make
@pytest.mark.parametrize(("interpreter", "version"), as_params(OLDER))
@pytest.mark.parametrize("target", ["test", "serve"])
def test_make_stops_an_older_interpreter_before_creating_anything(interpreter: str, version: str, target: str,
                                                                  tmp_path: Path) -> None:
    folder = scratch_copy(tmp_path)
    before = files_under(folder)
    proc = run_make(folder, target, f"PYTHON={interpreter}")
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.splitlines()[0].startswith(check_line(interpreter, version)), proc.stderr
    assert files_under(folder) == before, "a refused interpreter must leave nothing behind (no .venv)"


@needs_make
@pytest.mark.parametrize(("interpreter", "version"), as_params(OLDER_BUT_3_10_UP[:1]))
def test_a_venv_of_an_older_interpreter_is_refused_before_installing(interpreter: str, version: str,
                                                                      tmp_path: Path) -> None:
    folder = scratch_copy(tmp_path)
    venv = [interpreter, "-m", "venv", "--without-pip", str(folder / ".venv")]
    subprocess.run(venv, check=True, timeout=120, capture_output=True)
    before = files_under(folder)
    proc = run_make(folder, "test", f"PYTHON={sys.executable}")
    assert proc.returncode == 2, proc.stdout
    line = proc.stderr.splitlines()[0]
    advice = "; .venv was made with it: remove .venv"
    assert line.startswith(check_line(".venv/bin/python", version) + advice), line
    assert files_under(folder) == before, "nothing may be installed into a .venv of a refused interpreter"


@needs_make
@pytest.mark.parametrize("target", ["test", "serve"])
def test_the_check_comes_before_anything_is_created_or_installed(target: str) -> None:
    """``make -n -B`` prints every step of the set-up, in order, and runs none of them."""
    proc = run_make(ROOT, "-n", "-B", target)
    assert proc.returncode == 0, proc.stderr
    steps = proc.stdout.splitlines()

    def first(pattern: str) -> int:
        return next(i for i, line in enumerate(steps) if re.search(pattern, line))

    check = first(r"\bPYTHON_FLOOR\b|need Python")
    assert check < first(r" -m venv ") < first(r"pip install \"torch==") < first(r"pip install -e")
    if target == "test":  # only the tests read the sdist
        assert first(r"pip install -e") < first(r"-m site_scripts\.build\.fetch_sdist ")
        assert first(r"-m site_scripts\.build\.fetch_sdist ") < first(r"DEEPINFER_SDIST=/\S+ \S+ -m pytest")


# -- the floor ---------------------------------------------------------------------------------------------


def installed_requires_python(extras: tuple[str, ...]) -> dict[str, SpecifierSet]:
    """Requires-Python of each installed pin of ``extras`` (skips when one is not installed)."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        optional = tomllib.load(f)["project"]["optional-dependencies"]
    found = {}
    for extra in extras:
        for pin in optional[extra]:
            name, _ = pin.split("==")
            try:
                found[pin] = SpecifierSet(metadata.metadata(name).get("Requires-Python") or "")
            except metadata.PackageNotFoundError:
                pytest.skip(f"{pin} is not installed (make installs it)")
    return found


def lowest_python_for(extras: tuple[str, ...]) -> Version:
    """The highest ``>=`` bound among the pins' Requires-Python, checked to admit every pin."""
    specs = installed_requires_python(extras)
    bounds = [Version(s.version) for spec in specs.values() for s in spec if s.operator == ">="]
    floor = max(bounds)
    refused = [pin for pin, spec in specs.items() if not spec.contains(floor)]
    assert not refused, f"Python {floor} does not satisfy {refused}"
    return floor


def test_the_makefile_floor_is_the_highest_requires_python_of_the_pins() -> None:
    assert Version(python_floor()) == lowest_python_for(TESTED_EXTRAS)


def test_the_floor_is_above_what_pyproject_promises_the_package() -> None:
    """The core promises less than the extras need: the toy demo runs on a bare, older Python."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        promised = SpecifierSet(tomllib.load(f)["project"]["requires-python"])
    assert promised.contains(python_floor())
    assert promised.contains("3.10.0"), "the READMEs promise the toy demo on Python 3.10"


@pytest.mark.parametrize(("name", "phrase"), [
    ("README.md", "需要 Python {floor} 或更新"),
    ("README.en.md", "need Python {floor} or newer"),
    ("docs/guide/run-guide.md", "Python {floor} 或更新"),
    ("docs/guide/run-guide.en.md", "Python {floor} or newer"),
])
def test_the_pages_state_the_floor(name: str, phrase: str) -> None:
    text = (ROOT / name).read_text(encoding="utf-8")
    assert phrase.format(floor=python_floor()) in text


@pytest.mark.parametrize(("name", "phrase"), [
    ("docs/guide/run-guide.md", "Python {floor} 或更新"),
    ("docs/guide/run-guide.en.md", "Python {floor} or newer"),
])
def test_the_run_guide_states_what_the_model_extra_needs(name: str, phrase: str) -> None:
    text = (ROOT / name).read_text(encoding="utf-8")
    assert phrase.format(floor=lowest_python_for(("model",))) in text


@pytest.mark.parametrize(("interpreter", "version"), as_params(OLDER_BUT_3_10_UP))
def test_the_toy_demo_runs_on_a_bare_older_python(interpreter: str, version: str) -> None:
    """The READMEs promise ``python -m mini_deepinfer`` on Python 3.10+, with nothing installed."""
    demo = (ROOT / "snippets" / "toy" / "demo.txt").read_text(encoding="utf-8")
    proc = subprocess.run([interpreter, "-S", "-m", "mini_deepinfer"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL, env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == demo


# -- fetching the sdist, offline ---------------------------------------------------------------------------


def fake_sdist(folder: Path, top: str = "deepinfer-0.1.0") -> tuple[Path, str]:
    """A small .tar.gz with one top folder, and its SHA-256."""
    archive = folder / f"{top}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        body = b"class LLM:\n    def generate(self):\n        pass\n"
        info = tarfile.TarInfo(f"{top}/deepinfer/entrypoints/llm.py")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return archive, hashlib.sha256(archive.read_bytes()).hexdigest()


def write_refs(path: Path, sha256: str) -> Path:
    entry = {"name": "deepinfer", "version": "0.1.0", "file": "deepinfer-0.1.0.tar.gz", "sha256": sha256,
             "checked_on": "2026-11-29"}
    path.write_text(json.dumps({"sdist": entry, "mechanisms": []}), encoding="utf-8")
    return path


def fetch(*args: str) -> subprocess.CompletedProcess[str]:
    """The script, with an index that does not exist (so a download fails at once, offline)."""
    code = ("import sys; from site_scripts.build import fetch_sdist as f; "
            "f.SIMPLE_INDEX = 'file:///nonexistent/{name}/'; sys.exit(f.main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=make_env(),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def test_fetch_reuses_an_archive_with_the_right_sha256_and_unpacks_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    _, digest = fake_sdist(cache)
    refs = write_refs(tmp_path / "refs.json", digest)
    dest = cache / "sdist"
    (dest / "stale").mkdir(parents=True)  # an earlier unpacking is replaced
    proc = fetch(str(dest), "--refs", str(refs))
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert proc.stdout.count("\n") == 1 and "already downloaded" in proc.stdout
    assert (dest / "deepinfer" / "entrypoints" / "llm.py").read_text(encoding="utf-8").startswith("class LLM")
    assert not (dest / "stale").exists()
    assert sorted(p.name for p in cache.iterdir()) == ["deepinfer-0.1.0.tar.gz", "sdist"]


def test_fetch_removes_a_wrong_archive_and_reports_a_failed_download_in_one_line(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    archive, _ = fake_sdist(cache)
    refs = write_refs(tmp_path / "refs.json", "0" * 64)
    proc = fetch(str(cache / "sdist"), "--refs", str(refs))
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith("fetch_sdist: cannot download deepinfer-0.1.0.tar.gz from PyPI: "), line
    assert not archive.exists(), "a wrong archive must not be kept"
    assert not (cache / "sdist").exists()


def test_a_wrong_sha256_is_one_clear_line(tmp_path: Path) -> None:
    from site_scripts.build.fetch_sdist import FetchError, verify

    archive, digest = fake_sdist(tmp_path)
    verify(archive, digest, tmp_path / "refs.json")
    with pytest.raises(FetchError) as caught:
        verify(archive, "0" * 64, tmp_path / "refs.json")
    message = str(caught.value)
    assert "\n" not in message and digest in message and "0" * 64 in message and "refs.json" in message


def test_fetch_without_a_destination_is_one_line_and_exit_2() -> None:
    proc = fetch()
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and proc.stderr.startswith("fetch_sdist: "), proc.stderr
