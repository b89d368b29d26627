"""The live board in a real browser: headless Chromium opens `/ui` on a gateway with basic
auth on (answering the browser's challenge as a person would), sees the example functions'
instances, sees a scaled function's new instance and load arriving, opens a function's
detail, and writes screenshots at two window sizes (and one of the detail) to
`state/screenshots/`; on a fake GPU it shows the instance's share and the standby worker."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.chromium import chromium_binary, open_browser
from tests.support.gateway import REPO_ROOT, GatewayProcess, fake_gpu_sections, start_gateway

SCREENSHOTS = REPO_ROOT / "state" / "screenshots"
FUNCTIONS = [
    {"name": "mnist", "image": "mnist", "slo_ms": 200, "max_batch": 4},
    {"name": "textcnn-69", "image": "textcnn-69", "slo_ms": 50, "max_batch": 4},
]
SECTIONS: dict[str, dict[str, Any]] = {"auth": {"basic_auth": True}, "ui": {"interval_s": 0.5}}
MNIST = json.dumps({"inputs": np.zeros((1, 28, 28)).tolist()}).encode()

pytestmark = pytest.mark.skipif(
    chromium_binary() is None, reason="chromium is not installed: ./scripts/setup.sh installs it"
)


def _basic(password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"admin:{password}".encode()).decode()}


def _blocks(function: str, state: str = "ready") -> str:
    """How many instance blocks of `function` in `state` the page shows (a JS expression)."""
    return (
        f'document.querySelectorAll(\'.block[data-function="{function}"]'
        f'[data-state="{state}"]\').length'
    )


def _load(gw: GatewayProcess, stop: threading.Event, answered: list[int]) -> None:
    """Invoke mnist back to back until told to stop (a client's steady load)."""
    while not stop.is_set():
        status, _, _ = gw.request("POST", "/function/mnist", raw=MNIST, timeout_s=10)
        answered.append(status)


async def test_the_board_shows_instances_scaling_and_load_in_chromium(tmp_path: Path) -> None:
    with start_gateway(tmp_path, FUNCTIONS, SECTIONS, wait_for_functions=False) as gw:
        password = (gw.state_dir / "basic_auth_password").read_text().strip()
        assert gw.request("GET", "/ui")[0] == 401
        assert gw.request("GET", "/ui/events")[0] == 401
        assert gw.request("GET", "/ui", headers=_basic(password))[0] == 200

        async with open_browser(tmp_path / "chromium") as browser:
            await browser.authenticate("admin", password)
            await browser.navigate(gw.url + "/ui")
            for function in ("mnist", "textcnn-69"):
                await browser.wait_for(f"{_blocks(function)} === 1", timeout_s=120)
            assert await browser.evaluate("document.getElementById('link').dataset.state") == (
                "live"
            )
            servers = await browser.evaluate("document.querySelectorAll('.server').length")
            assert servers == 1

            status, _, body = await asyncio.to_thread(
                gw.request, "POST", "/system/scale-function/mnist", None, _basic(password),
                json.dumps({"replicas": 2}).encode(),
            )  # fmt: skip
            assert status == 202, body
            await browser.wait_for(f"{_blocks('mnist')} === 2", timeout_s=120)

            stop, answered = threading.Event(), list[int]()
            load = threading.Thread(target=_load, args=(gw, stop, answered))
            load.start()
            try:
                card = "document.querySelector('.function[data-function=\"mnist\"]')"
                await browser.wait_for(f"Number({card}.dataset.served) > 0")
                await browser.wait_for(f"Number({card}.dataset.offered) > 0")
                served = "state.series.mnist.servedRps.filter((v) => v > 0).length"
                await browser.wait_for(f"{served} >= 4")  # a few points of load to chart
                wide = await browser.screenshot(SCREENSHOTS / "board-wide.png", 1400, 900)
                narrow = await browser.screenshot(SCREENSHOTS / "board-narrow.png", 480, 900)
                await browser.evaluate(f"{card}.click()")
                await browser.wait_for(
                    "document.querySelectorAll('#detail canvas.batches').length === 2"
                )
                await browser.wait_for("document.querySelector('#detail pre.logs') !== null")
                await browser.screenshot(SCREENSHOTS / "board-detail.png", 1400, 900)
            finally:
                stop.set()
                await asyncio.to_thread(load.join)
            assert 200 in answered
            assert not [line for line in browser.console if line.startswith("uncaught")]
    for shot, width in ((wide, 1400), (narrow, 480)):
        png = shot.read_bytes()
        assert png.startswith(b"\x89PNG")
        assert int.from_bytes(png[16:20], "big") == width  # the IHDR's width


async def test_the_board_shows_gpu_shares_and_standby_workers(tmp_path: Path) -> None:
    functions = [
        {"name": "digits-gpu", "image": "mnist", "slo_ms": 1000, "max_batch": 4, "gpu_pct": 30}
    ]
    with start_gateway(tmp_path, functions, fake_gpu_sections()) as gw:
        async with open_browser(tmp_path / "chromium") as browser:
            await browser.navigate(gw.url + "/ui")
            await browser.wait_for(f"{_blocks('digits-gpu')} === 1", timeout_s=120)
            block = "document.querySelector('.block[data-function=\"digits-gpu\"]')"
            assert "g30%" in await browser.evaluate(f"{block}.textContent")
            share = "document.querySelector('.gpu-bar span')"
            await browser.wait_for(f"{share} !== null")
            assert await browser.evaluate(f"{share}.style.width") == "30%"
            await browser.wait_for(
                "document.querySelectorAll('.block[data-kept][data-state=\"standby\"]').length"
            )
            gpu = await browser.evaluate("document.querySelector('.gpu').textContent")
            assert "GPU 0" in gpu
            assert "mps" in gpu
            await browser.screenshot(SCREENSHOTS / "board-gpu.png", 1400, 700)
            assert not [line for line in browser.console if line.startswith("uncaught")]
