"""A function with a 30 % GPU share through a real gateway on a real GPU (skipped without
one): it serves, its answers equal the same model's on CPU cores within fp32 tolerance
(atol 1e-4 on probabilities: the worker computes fp32 in IEEE fp32, no TF32), and
/system/instances shows its <b, c, g>, device, MPS state, where its worker came from and
that its weights are the GPU tier's copy; /system/servers the GPU's sharing and the tier."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.support.gateway import start_gateway

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.timeout(240),
]

IMAGE = np.linspace(0.0, 1.0, 28 * 28, dtype=np.float32).reshape(1, 28, 28)
FUNCTIONS = [
    {"name": "digits-gpu", "image": "mnist", "slo_ms": 200, "max_batch": 8, "gpu_pct": 30},
    {"name": "digits-cpu", "image": "mnist", "slo_ms": 200, "max_batch": 8, "gpu_pct": 0},
]


def test_a_thirty_percent_function_serves_like_the_cpu_path(
    tmp_path: Path, built_models: Path
) -> None:
    mps = "auto" if shutil.which("nvidia-cuda-mps-control") else "off"
    sections = {"gpu": {"mps": mps, "standby_per_device": 1}}
    with start_gateway(tmp_path, FUNCTIONS, sections) as gw:
        (gpu,) = gw.wait_ready("digits-gpu", timeout_s=180)
        (cpu,) = gw.wait_ready("digits-cpu")
        assert cpu["gpuPct"] == 0
        assert (gpu["cpus"], gpu["gpuPct"]) == (1, 30)
        assert gpu["batchSize"] >= 1
        assert gpu["gpuDevice"].startswith("GPU-")
        described = gpu["gpu"]
        assert described["sharing"] == ("mps" if mps == "auto" else "time-sliced")
        assert described["weights"] == "tier"
        assert described["startedFrom"] in {"standby", "fresh"}
        body = {"inputs": IMAGE.tolist()}
        answers = {}
        for function in ("digits-gpu", "digits-cpu"):
            status, _, reply = gw.request("POST", f"/function/{function}", body, timeout_s=60)
            assert status == 200, reply
            answers[function] = np.array(json.loads(reply)["outputs"], dtype=np.float64)
        assert np.allclose(answers["digits-gpu"], answers["digits-cpu"], atol=1e-4)
        (server,) = gw.json("GET", "/system/servers")
        (device,) = [d for d in server["gpus"] if d["uuid"] == gpu["gpuDevice"]]
        print("GPU sharing:", device["sharing"])  # the reason, when MPS could not run
        assert device["sharing"]["mode"] == described["sharing"]
        assert server["gpuTier"]["state"] == "ready"
        assert server["freeGpuPct"][device["index"]] == 70
