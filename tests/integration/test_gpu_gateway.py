"""The GPU path through a real gateway, on fake GPUs (`[gpu] fake_devices`: a fake NVML, the
fake device runtime computing on the CPU, the GPU tier's holder in shared memory) with a fake
MPS control daemon: a function with a 30 % share serves from a warm standby worker with its
weights from the tier and answers as the same model on CPU cores does; its instance says
where it runs; a second instance comes from the standby pool; a retired GPU worker goes back
to standby for its tenant; the tier's holder dying restarts the instances that mapped its
copies; without MPS the GPU is time-sliced and says why; /metrics reports the shares."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.gateway import GatewayProcess, start_gateway

pytestmark = pytest.mark.timeout(300)

FAKE_MPS = Path(__file__).resolve().parents[1] / "support" / "fake_mps_control.py"
IMAGE = np.linspace(0.0, 1.0, 28 * 28, dtype=np.float32).reshape(1, 28, 28)
BODY = {"inputs": IMAGE.tolist()}
FUNCTIONS = [
    {"name": "digits-gpu", "image": "mnist", "slo_ms": 1000, "max_batch": 4, "gpu_pct": 30},
    {"name": "digits-cpu", "image": "mnist", "slo_ms": 1000, "max_batch": 4, "gpu_pct": 0},
]


def gpu_sections(mps_control: str) -> dict[str, dict[str, Any]]:
    return {
        "gpu": {
            "fake_devices": 1,
            "fake_memory_mib": 1024,
            "mps_control": mps_control,
            "standby_per_device": 1,
            "default_pct": 50,
        }
    }


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def answer(gw: GatewayProcess, function: str) -> list[float]:
    status, _, body = gw.request("POST", f"/function/{function}", BODY, timeout_s=60)
    assert status == 200, body
    outputs: list[float] = json.loads(body)["outputs"]
    return outputs


def server(gw: GatewayProcess) -> dict[str, Any]:
    (local,) = gw.json("GET", "/system/servers")
    return dict(local)


def standby(gw: GatewayProcess) -> list[dict[str, Any]]:
    return [w for w in gw.json("GET", "/system/instances?state=idle") if w["state"] == "standby"]


def test_a_gpu_function_serves_under_mps_from_standby_workers_and_the_tier(
    tmp_path: Path,
) -> None:
    with start_gateway(tmp_path, FUNCTIONS, gpu_sections(str(FAKE_MPS))) as gw:
        (gpu,) = gw.wait_ready("digits-gpu")
        (cpu,) = gw.wait_ready("digits-cpu")
        # where each instance runs, and how
        assert (gpu["gpuPct"], cpu["gpuPct"]) == (30, 0)
        assert gpu["gpuDevice"].startswith("GPU-fake-0-")
        assert cpu["gpuDevice"] is None
        assert gpu["gpu"]["sharing"] == "mps"
        assert gpu["gpu"]["sharePct"] == 30
        assert gpu["gpu"]["weights"] == "tier"
        assert gpu["gpu"]["startedFrom"] in {"standby", "fresh"}
        assert "gpu" not in cpu
        # the same model answers the same on the (fake) GPU and on CPU cores
        assert np.allclose(answer(gw, "digits-gpu"), answer(gw, "digits-cpu"), atol=1e-6)

        described = server(gw)
        (device,) = described["gpus"]
        assert device["sharing"]["mode"] == "mps"
        assert described["gpuTier"]["state"] == "ready"
        assert described["freeGpuPct"] == [70]
        models = described["gpuTier"]["devices"][0]["models"]
        assert [m["holders"] for m in models] == [[gpu["id"]]]

        # a second instance at the same share starts from the refilled standby pool
        wait_for(lambda: any(w["sharePct"] == 30 for w in standby(gw)), "a 30 % standby worker")
        status, _, _ = gw.request("POST", "/system/scale-function/digits-gpu", {"replicas": 2})
        assert status == 202
        second = next(i for i in gw.wait_ready("digits-gpu", 2) if i["id"] != gpu["id"])
        assert second["gpu"]["startedFrom"] == "standby"
        assert second["gpu"]["weights"] == "tier"  # the same device copy, opened again
        assert np.allclose(answer(gw, "digits-gpu"), answer(gw, "digits-cpu"), atol=1e-6)

        # scaled back to one: the retired worker unloads and waits for its tenant again
        gw.request("POST", "/system/scale-function/digits-gpu", {"replicas": 1})
        wait_for(lambda: any(w["reusedBy"] == "default" for w in standby(gw)), "a reused worker")

        metrics = gw.request("GET", "/metrics")[2].decode()
        assert 'infless_gpu_mps{gpu_uuid="GPU-fake-0-' in metrics
        share = [line for line in metrics.splitlines() if "infless_instance_gpu_share" in line]
        assert any(line.startswith("infless_instance_gpu_share_ratio{") and
                   line.endswith(" 0.3") for line in share)  # fmt: skip


def test_a_lost_tier_holder_restarts_the_instances_that_mapped_its_copies(
    tmp_path: Path,
) -> None:
    with start_gateway(tmp_path, FUNCTIONS[:1], gpu_sections(str(FAKE_MPS))) as gw:
        (before,) = gw.wait_ready("digits-gpu")
        holder_pid = server(gw)["gpuTier"]["pid"]
        os.kill(holder_pid, signal.SIGKILL)

        def replaced() -> bool:
            ready = [i for i in gw.instances("digits-gpu") if i["state"] == "ready"]
            return bool(ready) and ready[0]["pid"] != before["pid"]

        wait_for(replaced, "the instance to restart")
        wait_for(lambda: server(gw)["gpuTier"]["state"] == "ready", "a new holder")
        assert server(gw)["gpuTier"]["pid"] != holder_pid
        assert len(answer(gw, "digits-gpu")) == 10


def test_without_mps_the_gpu_is_time_sliced_and_says_why(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-mps-control")
    with start_gateway(tmp_path, FUNCTIONS[:1], gpu_sections(missing)) as gw:
        (instance,) = gw.wait_ready("digits-gpu")
        assert instance["gpu"]["sharing"] == "time-sliced"
        assert instance["gpuPct"] == 30  # what the planner accounts; the device is shared
        (device,) = server(gw)["gpus"]
        assert device["sharing"]["mode"] == "time-sliced"
        assert "no-such-mps-control" in device["sharing"]["reason"]
        assert len(answer(gw, "digits-gpu")) == 10


def test_the_planner_chooses_a_gpu_share_from_a_gpu_profile(tmp_path: Path) -> None:
    from infless.cluster.fake_gpus import FAKE_NAME
    from infless.profiler.database import GpuLatencyRow, ProfileDatabase

    # a GPU profile of the model on this (fake) device: 2 ms a batch at any measured share,
    # far inside an SLO no CPU configuration meets (5 ms against tens of ms on a core)
    state = tmp_path / "state"
    state.mkdir()
    rows = [
        GpuLatencyRow(FAKE_NAME, "bert-small", b, g, 1, 2.0 + 0.1 * b)
        for b in (1, 2, 4, 8)
        for g in (10, 20, 30, 50, 100)
    ]
    with ProfileDatabase(state / "profiles.sqlite") as db:
        db.add_gpu_latency(rows)
    functions = [{"name": "bert", "image": "bert-small", "slo_ms": 5, "max_batch": 8, "gpu_pct": 0}]
    sections = {
        **gpu_sections(str(FAKE_MPS)),
        "scaling": {"policy": "infless", "tick_s": 0.5},
    }
    tokens = json.dumps({"inputs": {"input_ids": [101] * 64, "attention_mask": [1] * 64}})
    with start_gateway(tmp_path, functions, sections, state_dir=state) as gw:
        gw.wait_ready("bert")  # its first instance: CPU cores only, as the function says

        def planned_on_gpu() -> bool:
            for _ in range(20):  # demand, whatever is answered (most get 429: SLO 5 ms)
                gw.request("POST", "/function/bert", raw=tokens.encode(), timeout_s=30)
            return any(i["gpuPct"] > 0 for i in gw.instances("bert"))

        wait_for(planned_on_gpu, "an instance with a GPU share", timeout_s=120.0)
        on_gpu = next(i for i in gw.instances("bert") if i["gpuPct"] > 0)
        assert on_gpu["gpuPct"] in {10, 20, 30, 50, 100}
        planner = gw.json("GET", "/system/function/bert")["planner"]
        assert not any("no GPU profile" in reason for reason in planner["unpriced"])


def test_a_gpu_worker_that_dies_leaks_nothing_in_the_tier(tmp_path: Path) -> None:
    with start_gateway(tmp_path, FUNCTIONS[:1], gpu_sections(str(FAKE_MPS))) as gw:
        (before,) = gw.wait_ready("digits-gpu")
        os.kill(before["pid"], signal.SIGKILL)

        def holders() -> list[list[str]]:
            models = server(gw)["gpuTier"]["devices"][0]["models"]
            return [m["holders"] for m in models]

        def replaced_and_released() -> bool:
            ready = [i for i in gw.instances("digits-gpu") if i["state"] == "ready"]
            if not ready or ready[0]["pid"] == before["pid"]:
                return False
            # the replacement worker (`<instance>-r1`) holds the copy; the dead one, nothing
            return holders() == [[f"{before['id']}-r1"]]

        wait_for(replaced_and_released, "the replacement, alone holding the copy")
        assert len(answer(gw, "digits-gpu")) == 10
