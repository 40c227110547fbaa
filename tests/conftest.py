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

# A test that uses one of these session fixtures runs on the worker that made it, so it is made once; these
# groups go out first, since each is the longest single piece of work in the suite.
SHARED_WORK = {"hosted": "site", "regeneration": "regeneration"}


def work_unit(item: pytest.Item) -> str:
    """The xdist group of a test: the shared piece of work it reads; the pages' code blocks (one group, since
    a command shown on several pages runs once per worker: the root ``conftest.py``); else its own file."""
    for fixture, group in SHARED_WORK.items():
        if fixture in getattr(item, "fixturenames", ()):
            return group
    path = item.nodeid.split("::", 1)[0]
    return "pages" if path.startswith("docs/") else path


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group the tests for ``--dist loadgroup`` and put the shared work first.

    Grouping by file keeps each module-scoped fixture (a checkpoint, a ``mike`` deployment) on one worker;
    grouping by shared fixture keeps each session-scoped build on one worker. The order is stable otherwise,
    so a file's tests stay together and run in the order they are written.
    """
    units = {id(item): work_unit(item) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(units[id(item)]))
    first = list(SHARED_WORK.values())
    items.sort(key=lambda item: first.index(units[id(item)]) if units[id(item)] in first else len(first))
