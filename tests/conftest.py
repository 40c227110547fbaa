"""Shared test fixtures: small random checkpoints written once per test session."""

from __future__ import annotations

import pytest


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
def regeneration(tmp_path_factory):
    """Every snippet generator run once, in a copy of the working tree (``session_builds.Regeneration``)."""
    from session_builds import regenerate_once

    return regenerate_once(tmp_path_factory.mktemp("regeneration"))


@pytest.fixture(scope="session")
def hosted(tmp_path_factory):
    """The site, built once strictly as the publishing workflow builds it (``session_builds.Hosted``)."""
    from session_builds import build_hosted

    return build_hosted(tmp_path_factory.mktemp("pages"))


# -- pytest-xdist: which tests share a worker ----------------------------------------------------------------

# The files whose tests read one of the session's shared builds: all of a build's readers run on the worker
# that made it, so it is made once. Each is the longest single piece of work in the suite: they go out first.
SHARED_BUILDS = {"hosted": "site", "regeneration": "regeneration"}  # session fixture -> its unit of work
SHARED_BUILD_FILES = {
    "tests/test_site_build.py": "site", "tests/test_browser.py": "site", "tests/test_line_widths.py": "site",
    "tests/test_inpage_run.py": "site",
    "tests/test_snippets_current.py": "regeneration", "tests/test_regenerate_clean.py": "regeneration",
}


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: its shared build's, the pages' code blocks' (one unit, since a
    command shown on several pages runs once per worker: the root ``conftest.py``), else its own file's, so
    a module-scoped fixture (a checkpoint, a ``mike`` deployment) is made on one worker only."""
    path = nodeid.split("::", 1)[0]
    if path in SHARED_BUILD_FILES:
        return SHARED_BUILD_FILES[path]
    return "pages" if path.startswith("docs/") else path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the shared builds' units first; refuse a test that reads a shared build from a file not listed.

    The order is stable otherwise, so a file's tests stay together and run in the order they are written.
    """
    for item in items:
        for fixture, unit in SHARED_BUILDS.items():
            if fixture in getattr(item, "fixturenames", ()) and work_unit(item.nodeid) != unit:
                raise pytest.UsageError(f"{item.nodeid} reads the {fixture!r} build: add its file to "
                                        f"SHARED_BUILD_FILES in tests/conftest.py, or it is built twice")
    first = list(SHARED_BUILDS.values())

    def rank(item: pytest.Item) -> int:
        unit = work_unit(item.nodeid)
        return first.index(unit) if unit in first else len(first)

    items.sort(key=rank)


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
