"""Cold starts end to end: an idle function is released to zero, prewarmed before its next
periodic request, and that request is served warm (HHP with 1-second bins, fast clock)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from tests.support.gateway import GatewayProcess, start_gateway

PERIOD_S = 4.0
SAMPLE = {"inputs": np.zeros((1, 28, 28)).tolist()}


def _invoke(gw: GatewayProcess) -> dict[str, str]:
    status, headers, body = gw.request("POST", "/function/periodic", SAMPLE)
    assert status == 200, body
    return headers


def test_idle_function_is_released_then_prewarmed_and_served_warm(tmp_path: Path) -> None:
    sections: dict[str, dict[str, Any]] = {
        "coldstart": {"policy": "hhp", "tick_s": 0.1, "release_grace_s": 0.0},
        "coldstart.params": {"bin_s": 1.0, "range_min": 120, "min_its": 3},
    }
    deployment = {
        "service": "periodic",
        "image": "mnist",
        "labels": {"com.openfaas.scale.zero": "true", "com.infless.max.batch": "1"},
        "annotations": {"com.infless.latency_target": "20ms"},
    }
    with start_gateway(tmp_path, sections=sections) as gw:
        assert gw.request("POST", "/system/functions", deployment)[0] == 202
        gw.wait_ready("periodic")
        cold_flags: list[bool] = []
        zero_seen_between: list[bool] = []
        next_at = time.monotonic()
        for _ in range(8):
            time.sleep(max(0.0, next_at - time.monotonic()))
            cold_flags.append(_invoke(gw)["X-Infless-Cold-Start"] == "true")
            next_at += PERIOD_S
            time.sleep(PERIOD_S / 2)
            zero_seen_between.append(gw.instances("periodic") == [])
        status = gw.json("GET", "/system/function/periodic")
        policy = status["coldStartPolicy"]
        assert policy["policy"] == "hhp"
        # once the histogram has enough idle times, windows follow the period...
        assert 0 < policy["prewarmS"] < PERIOD_S
        # ...so the function is released between requests and prewarmed before each one
        assert any(zero_seen_between[-3:]), zero_seen_between
        assert policy["releases"] >= 2
        assert policy["prewarms"] >= 2
        assert cold_flags[-3:] == [False, False, False], cold_flags
