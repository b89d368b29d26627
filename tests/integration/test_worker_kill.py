"""A worker SIGKILLed under load: nothing accepted is lost, and a request the surviving
instance cannot serve by its deadline waits for the dead worker's replacement — expected
ready when the function's measured starts say — instead of a 429.

Timings are the package's, not the machine's: every batch sleeps 0.1 s, every start warms
up for about three seconds (long enough for the burst to arrive while it starts, even
on a loaded machine), and the SLO (6 s) is far above both, so the replacement can serve
the overflow in time even on a slow machine. What is asserted is behaviour: each answer is
200, or 429 with Retry-After (never a 5xx, a timeout or a dropped connection), and some of
the burst the survivor could not take was served by the replacement after waiting for it."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.gateway import GatewayProcess, start_gateway
from tests.support.slow_package import slow_package

pytestmark = pytest.mark.timeout(240)

BATCH_S = 0.1  # every batch (of one: max_batch 1)
SLO_MS = 6000
BURST = 120  # more than the survivor can serve within any budget (1.5 x SLO / 0.1 s = 90)
BODY = json.dumps({"inputs": [0.1, 0.2, 0.3, 0.4]}).encode()


def _call(gw: GatewayProcess) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(
        gw.url + "/function/slow", data=BODY, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as error:
        error.read()
        return error.code, dict(error.headers)


def _steady(gw: GatewayProcess, stop: threading.Event, seen: list[int]) -> None:
    """Modest load: about 5 requests per second until told to stop."""
    while not stop.is_set():
        seen.append(_call(gw)[0])
        stop.wait(0.2)


def _wait_starting(gw: GatewayProcess, instance_id: str, old_pid: int) -> None:
    """Until the gateway saw the death and the replacement (same instance id) is starting."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for instance in gw.instances("slow"):
            if instance["id"] == instance_id and instance["pid"] != old_pid:
                assert instance["state"] == "starting", instance  # ~3 s of warm-up ahead
                return
        time.sleep(0.02)
    raise AssertionError("the killed worker was never replaced")


def test_a_killed_worker_loses_nothing_and_its_replacement_takes_what_can_wait(
    tmp_path: Path,
) -> None:
    package = slow_package(tmp_path / "slow", BATCH_S)
    functions = [
        {"name": "slow", "image": str(package), "slo_ms": SLO_MS, "max_batch": 1, "instances": 2}
    ]
    sections = {"batching": {"warmup_rounds": 30}}  # every start: ~3 s of timed batches
    with start_gateway(tmp_path, functions, sections) as gw:
        stop, steady = threading.Event(), list[int]()
        background = threading.Thread(target=_steady, args=(gw, stop, steady))
        background.start()
        try:
            time.sleep(2.0)  # served under load for a while: service times measured
            victim, _ = gw.instances("slow")
            os.kill(victim["pid"], signal.SIGKILL)
            _wait_starting(gw, victim["id"], victim["pid"])
            with concurrent.futures.ThreadPoolExecutor(BURST) as pool:
                burst = list(pool.map(lambda _: _call(gw), range(BURST)))
        finally:
            stop.set()
            background.join()

        statuses = [status for status, _ in burst] + steady
        assert set(statuses) <= {200, 429}, statuses  # nothing admitted was lost
        for status, headers in burst:
            if status == 429:
                assert int(headers["Retry-After"]) >= 1
        waited = [
            headers
            for status, headers in burst
            if status == 200
            and headers["X-Infless-Instance"] == victim["id"]
            and headers["X-Infless-Cold-Start"] == "true"
        ]
        assert waited, "no request of the burst waited for the replacement"
        assert len(gw.wait_ready("slow", 2)) == 2
