"""Fault: SIGTERM while requests are in flight and more keep coming (a rolling update, a
node drained). The gateway drains: what it accepted is answered, what comes after gets 503
`draining` (JSON, Retry-After), its workers stop, its store is removed, and it exits 0."""

from __future__ import annotations

import json
import signal
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.support.faults import (
    Reply,
    own_store,
    post,
    running,
    slow_body,
    slow_package,
    slow_tag,
)
from tests.support.gateway import start_gateway

IN_FLIGHT = 6
DELAY_MS = 3000.0  # long enough that SIGTERM lands while every one of them is in flight, and
# that the drain still runs when the next request comes (a loaded machine included)


def test_sigterm_answers_what_was_accepted_and_refuses_the_rest(tmp_path: Path) -> None:
    package = slow_package(tmp_path / "slow")
    function = {"name": "slow", "image": str(package), "slo_ms": 30000, "max_batch": 4}
    function["instances"] = 2
    with start_gateway(tmp_path, [function], sections=own_store(tmp_path)) as gateway:
        workers = gateway.worker_pids()
        store = tmp_path / "store"
        assert any(store.rglob("*")), "the store holds the model's tensors"
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            accepted = [
                pool.submit(post, gateway.url, "/function/slow", slow_body(DELAY_MS, tag), tag)
                for tag in range(IN_FLIGHT)
            ]
            _wait_accepted(gateway.url, IN_FLIGHT)
            gateway.process.send_signal(signal.SIGTERM)
            refused = _first_refusal(gateway.url)
            replies = [future.result() for future in accepted]

        assert [(r.status, slow_tag(r.body)) for r in replies] == [
            (200, tag) for tag in range(IN_FLIGHT)
        ], "every accepted request is answered, with its own answer"
        assert (refused.status, refused.code) == (503, "draining"), refused
        assert gateway.process.wait(timeout=60) == 0
        assert not [pid for pid in workers if running(pid)], "the workers stopped"
        assert not store.exists(), "the store was removed (store.clear_on_shutdown)"


def _wait_accepted(url: str, count: int) -> None:
    """Until the gateway has taken `count` invocations of `slow` (its own count)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url + "/system/function/slow", timeout=10) as response:
            if json.loads(response.read())["invocationCount"] >= count:
                return
        time.sleep(0.02)
    raise AssertionError(f"the gateway did not take {count} requests")


def _first_refusal(url: str) -> Reply:
    """Requests after SIGTERM until one is refused; any taken before the drain began must
    be answered."""
    for tag in range(1000, 1100):
        reply = post(url, "/function/slow", slow_body(0.0, tag), tag)
        if reply.status != 200:
            return reply
        assert slow_tag(reply.body) == tag
    raise AssertionError("no request was refused after SIGTERM")
