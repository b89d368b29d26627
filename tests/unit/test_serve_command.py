"""`infless serve` warns when its open management routes face more than this machine."""

from __future__ import annotations

import pytest

from infless.serve_command import is_loopback


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("localhost", True), ("::1", True), ("0.0.0.0", False),
     ("10.1.2.3", False), ("gateway.example", False)],
)  # fmt: skip
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
