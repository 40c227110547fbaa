"""Shared test fixtures: small random checkpoints written once per test session."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# tokenizer_files.CACHE_VARIABLE, named here so that this file imports nothing of the package
TOKENIZER_CACHE_VARIABLE = "MINI_DEEPINFER_TOKENIZER_CACHE"


def pytest_configure(config: pytest.Config) -> None:
    """Two settings every test worker and every command it runs inherit.

    Idle OpenMP threads sleep instead of spinning, in this process, the test workers and every command
    they run (they inherit the environment; torch reads it when it is first imported, after this hook).

    Two test workers each run torch with a thread per core on a two-core machine. GNU OpenMP's default is to
    spin a waiting thread for a while, and that spinning takes the core the other worker needs: with
    ``OMP_WAIT_POLICY=PASSIVE`` the model tests take about 30 % less time and CPU. It changes when a thread
    waits, not what any thread computes, so every result is the same. A value already set is kept.
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # Every random checkpoint the suite writes (dozens, most in a fresh Python) reads the built Qwen3.5
    # tokenizer from here instead of building it again (3 s each); the cache key covers the recipe, the ranks
    # and the tokenizers version (mini_deepinfer.tools.tokenizer_files.tokenizer_file).
    os.environ.setdefault(TOKENIZER_CACHE_VARIABLE, str(ROOT / ".cache" / "tokenizers"))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A random ``tiny`` Qwen3.5 checkpoint in the released layout, with the real Qwen3.5 tokenizer."""
    import torch

    from mini_deepinfer.tools.checkpoints import write_random_checkpoint

    folder = tmp_path_factory.mktemp("weights") / "tiny"
    write_random_checkpoint(folder, "tiny", seed=0, dtype=torch.float32)
    return folder


LOOPBACK_PREFIXES = ("127.", "::1", "localhost", "0:0:0:0:0:0:0:1")


def _is_local(address) -> bool:
    if isinstance(address, (str, bytes)):  # a Unix socket path
        return True
    host = str(address[0]) if isinstance(address, tuple) and address else str(address)
    return host.startswith(LOOPBACK_PREFIXES)


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Every test runs offline: a connection that leaves 127.0.0.1 fails loudly."""
    import socket

    original = socket.socket.connect

    def guarded_connect(self, address):
        if not _is_local(address):
            raise ConnectionRefusedError(f"tests run offline: connection to {address!r} blocked")
        return original(self, address)

    original_ex = socket.socket.connect_ex

    def guarded_connect_ex(self, address):
        if not _is_local(address):
            raise ConnectionRefusedError(f"tests run offline: connection to {address!r} blocked")
        return original_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)


# -- made once per test session, shared by several modules (tests/session_builds.py) -------------------------


@pytest.fixture(scope="session")
def regeneration(request, tmp_path_factory):
    """One part of the snippet generators run once, in a copy of the working tree: a test that reads it runs
    once per part (``session_builds.REGENERATION_PARTS``, ``session_builds.Regeneration``)."""
    from session_builds import regenerate_once

    return regenerate_once(tmp_path_factory.mktemp(f"regeneration-{request.param}"), request.param)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test that reads ``regeneration`` runs for every part, or with ``@pytest.mark.regenerates("NAME")``
    only for the part that holds generator NAME."""
    if "regeneration" not in metafunc.fixturenames:
        return
    from session_builds import REGENERATION_PARTS, regeneration_part

    parts = list(REGENERATION_PARTS)
    mark = metafunc.definition.get_closest_marker("regenerates")
    if mark is not None:
        parts = [part for part in parts if mark.args[0] in regeneration_part(part)]
    metafunc.parametrize("regeneration", parts, indirect=True, scope="session")


@pytest.fixture(scope="session")
def hosted(tmp_path_factory):
    """The site, built once strictly as the publishing workflow builds it (``session_builds.Hosted``)."""
    from session_builds import build_hosted

    return build_hosted(tmp_path_factory.mktemp("pages"))


# -- pytest-xdist: which tests share a worker ----------------------------------------------------------------

# The files whose tests read one of the session's shared builds: all of a build's readers run on the worker
# that made it, so it is made once (a part of the regeneration is a build of its own: the test's parameter
# names it). Each is among the longest pieces of work in the suite: they go out first.
SHARED_BUILDS = {"hosted": "site", "regeneration": "regeneration"}  # session fixture -> its unit of work
SHARED_BUILD_FILES = {
    "tests/test_site_build.py": "site", "tests/test_browser.py": "site", "tests/test_inpage_run.py": "site",
    "tests/test_snippets_current.py": "regeneration", "tests/test_regenerate_clean.py": "regeneration",
}


# Files whose tests share nothing (no module-scoped fixture) and take long: each test is a unit of its own.
ONE_TEST_A_UNIT = {"tests/test_exercises.py"}


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its shared build's (one per part of the regeneration), its own
    where its file is in :data:`ONE_TEST_A_UNIT`, else its file's (a page's code blocks are a file's tests),
    so a module-scoped fixture (a checkpoint, a ``mike`` deployment) is made on one worker only."""
    path = nodeid.split("::", 1)[0]
    if path in SHARED_BUILD_FILES:
        part = re.search(r"\[(\w+)\]$", nodeid) if SHARED_BUILD_FILES[path] == "regeneration" else None
        return SHARED_BUILD_FILES[path] + (f"[{part[1]}]" if part else "")
    return nodeid if path in ONE_TEST_A_UNIT else path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the shared builds' units first; refuse a test that reads a shared build from a file not listed.

    The order is stable otherwise, so a file's tests stay together and run in the order they are written.
    """
    for item in items:
        for fixture, unit in SHARED_BUILDS.items():
            if fixture in getattr(item, "fixturenames", ()) and not work_unit(item.nodeid).startswith(unit):
                raise pytest.UsageError(f"{item.nodeid} reads the {fixture!r} build: add its file to "
                                        f"SHARED_BUILD_FILES in tests/conftest.py, or it is built twice")
    first = list(SHARED_BUILDS.values())

    def rank(item: pytest.Item) -> int:
        unit = work_unit(item.nodeid).split("[", 1)[0]
        return first.index(unit) if unit in first else len(first)

    items.sort(key=rank)


@pytest.hookimpl(optionalhook=True)  # pytest -p no:xdist runs without it
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Send each unit of work (:func:`work_unit`) whole to one worker, in collection order.

    This is pytest-xdist's ``loadscope`` scheduling with our units for scopes. (Its ``loadgroup`` mode would
    read ``xdist_group`` marks, but it renames tests through a node attribute that pytest 9 no longer reads,
    so with pytest 9.2 it groups nothing.)
    """
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    config.option.loadscopereorder = False  # keep the shared builds first, as collected
    return WorkUnitScheduling(config, log)
