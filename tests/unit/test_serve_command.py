"""`infless serve` warns when its open management routes face more than this machine, and
fits its connection bound to the open-file limit (raised first, as far as it may be)."""

from __future__ import annotations

import resource
from collections.abc import Callable

import pytest

from infless.serve_command import FD_RESERVE, connection_bound, is_loopback


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("localhost", True), ("::1", True), ("0.0.0.0", False),
     ("10.1.2.3", False), ("gateway.example", False)],
)  # fmt: skip
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


class Limits:
    """Stands in for `resource`'s open-file limit: what `setrlimit` may raise it to."""

    def __init__(self, soft: int, hard: int, settable: bool = True) -> None:
        self.soft, self.hard, self.settable = soft, hard, settable

    def get(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def set(self, which: int, limits: tuple[int, int]) -> None:
        if not self.settable:
            raise ValueError("not allowed")
        self.soft, self.hard = limits


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Limits]:
    def install(soft: int, hard: int, settable: bool = True) -> Limits:
        fake = Limits(soft, hard, settable)
        monkeypatch.setattr(resource, "getrlimit", fake.get)
        monkeypatch.setattr(resource, "setrlimit", fake.set)
        return fake

    return install


def test_the_open_file_limit_is_raised_to_fit_the_connections(
    limits: Callable[..., Limits],
) -> None:
    fake = limits(soft=1024, hard=1 << 20)
    assert connection_bound(4096) == 4096
    assert fake.soft == 4096 + FD_RESERVE


def test_connections_are_lowered_to_the_hard_limit_saying_so(
    limits: Callable[..., Limits], caplog: pytest.LogCaptureFixture
) -> None:
    fake = limits(soft=1024, hard=2048)
    assert connection_bound(4096) == 2048 - FD_RESERVE
    assert fake.soft == 2048
    assert "gateway.max_connections = 4096" in caplog.text
    assert "ulimit -n" in caplog.text


def test_a_limit_that_cannot_be_raised_bounds_the_connections(
    limits: Callable[..., Limits],
) -> None:
    limits(soft=1024, hard=1 << 20, settable=False)
    assert connection_bound(4096) == 1024 - FD_RESERVE


def test_a_limit_already_high_enough_is_left_alone(limits: Callable[..., Limits]) -> None:
    fake = limits(soft=1 << 16, hard=1 << 20)
    assert connection_bound(4096) == 4096
    assert fake.soft == 1 << 16
