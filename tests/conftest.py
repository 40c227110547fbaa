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
