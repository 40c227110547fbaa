"""The test suite itself runs offline: connections that leave the machine are blocked."""

from __future__ import annotations

import socket

import pytest


def test_a_connection_that_leaves_loopback_is_blocked():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with pytest.raises(ConnectionRefusedError, match="offline"):
            sock.connect(("93.184.216.34", 80))


def test_loopback_connections_still_work():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=5):
            pass
