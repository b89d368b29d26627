"""Warm-instance transformation through a real gateway: an idle resnet-34 worker becomes a
resnet-50 instance, answers as a freshly loaded resnet-50 does, and says so."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch

from infless.models.loader import load_model
from tests.support.gateway import TEST_MODEL_REPOSITORY, start_gateway

SOURCE, DEST = "resnet-34", "resnet-50"


@pytest.fixture(scope="module", autouse=True)
def family_models() -> None:
    subprocess.run(
        [sys.executable, "-m", "infless.cli", "models", "build", SOURCE, DEST,
         "--repository", str(TEST_MODEL_REPOSITORY)],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip


def _image() -> np.ndarray:
    return np.random.default_rng(5).standard_normal((3, 224, 224)).astype(np.float32)


def _wait(predicate: object, what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_an_idle_resnet34_worker_serves_resnet50_after_transformation(tmp_path: Path) -> None:
    functions = [
        {"name": SOURCE, "image": SOURCE, "slo_ms": 5000, "max_batch": 1, "instances": 1},
        {"name": DEST, "image": DEST, "slo_ms": 5000, "max_batch": 1, "instances": 0},
    ]
    with start_gateway(tmp_path, functions) as gw:
        [source] = gw.wait_ready(SOURCE, 1)
        assert gw.json("GET", f"/system/function/{DEST}")["structure"]["described"] is False
        gw.json("POST", f"/system/scale-function/{SOURCE}", {"replicas": 0})
        _wait(
            lambda: (
                [w["pid"] for w in gw.json("GET", "/system/instances?state=idle")]
                == [source["pid"]]
            ),
            "the resnet-34 worker to be kept idle",
        )
        assert gw.instances(SOURCE) == []  # idle workers are not live instances
        for name in (SOURCE, DEST):  # with an idle worker, the tenant's packages are described
            _wait(
                lambda n=name: gw.json("GET", f"/system/function/{n}")["structure"]["described"],
                f"{name}'s structure",
            )

        gw.json("POST", f"/system/scale-function/{DEST}", {"replicas": 1})
        [dest] = gw.wait_ready(DEST, 1)
        assert dest["pid"] == source["pid"]  # the same process, transformed
        assert psutil.pid_exists(source["pid"])
        assert gw.json("GET", "/system/instances?state=idle") == []
        event = dest["history"][-1]
        assert event["event"] == "transformed"
        assert event["from"] == SOURCE
        assert event["fromInstance"] == source["id"]
        assert event["path"] == "transform"
        assert {c["path"] for c in event["candidates"]} >= {"transform", "zygote"}
        assert event["plan"]["steps"]["edge"] == 1
        assert event["plan"]["steps"]["add"] > 0  # resnet-50 has more operations
        assert event["tookMs"] > 0
        assert dest["start"]["transformMs"] > 0

        image = _image()
        status, _, body = gw.request("POST", f"/function/{DEST}", {"inputs": image.tolist()})
        assert status == 200, body
        answer = np.asarray(json.loads(body)["outputs"], dtype=np.float32)

    _, fresh = load_model(TEST_MODEL_REPOSITORY / DEST)  # as a fresh worker (one thread) would
    torch.set_num_threads(1)
    with torch.inference_mode():
        expected = torch.softmax(fresh(torch.from_numpy(image[None])), dim=-1)[0].numpy()
    np.testing.assert_allclose(answer, expected, rtol=1e-5, atol=1e-6)
