"""GPU discovery with a fake NVML, the clean no-GPU path, and MPS environments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from infless.cluster.gpus import (
    GpuDevice,
    cpu_only_env,
    discover_gpus,
    load_nvml,
    mps_daemon_command,
    mps_env,
)


class FakeNvmlError(Exception):
    pass


@dataclass
class Memory:
    total: int
    used: int


class FakeNvml:
    NVMLError = FakeNvmlError

    def __init__(self, names: list[str], fail_init: bool = False) -> None:
        self.names = names
        self.fail_init = fail_init
        self.shutdowns = 0

    def nvmlInit(self) -> None:  # noqa: N802
        if self.fail_init:
            raise FakeNvmlError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:  # noqa: N802
        return index

    def nvmlDeviceGetName(self, handle: Any) -> str | bytes:  # noqa: N802
        name: str = self.names[handle]
        return name.encode()  # old pynvml returns bytes

    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes:  # noqa: N802
        return f"GPU-{handle:04d}"

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:  # noqa: N802
        return Memory(total=11 * 2**30, used=handle * 2**20)


def test_fake_nvml_devices_are_listed() -> None:
    nvml = FakeNvml(["NVIDIA GeForce RTX 2080 Ti", "NVIDIA GeForce RTX 2080 Ti"])
    inventory = discover_gpus(nvml)
    assert inventory.source == "nvml"
    assert inventory.count == 2
    assert inventory.devices[1] == GpuDevice(
        1, "NVIDIA GeForce RTX 2080 Ti", "GPU-0001", 11 * 2**30, 2**20
    )
    assert inventory.share_capacity_pct == (100, 100)
    assert nvml.shutdowns == 1


def test_a_missing_driver_is_a_clean_empty_inventory() -> None:
    inventory = discover_gpus(FakeNvml(["x"], fail_init=True))
    assert inventory.count == 0
    assert inventory.share_capacity_pct == ()
    assert "Driver Not Loaded" in inventory.reason
    assert discover_gpus(FakeNvml([])).reason == "NVML reports no devices"


def test_this_machine_degrades_cleanly() -> None:
    inventory = discover_gpus()  # the real pynvml here, but no driver: never raises
    assert inventory.count >= 0
    if inventory.count == 0:
        assert inventory.reason
    assert discover_gpus(use_system=False).reason.startswith("nvidia-ml-py")
    assert load_nvml() is not None  # nvidia-ml-py is a dependency


def test_mps_environment_for_a_share() -> None:
    device = GpuDevice(0, "gpu", "GPU-0000", 1, 0)
    env = mps_env(device, 30, pipe_dir="/tmp/mps-pipe", memory_fraction=0.2)
    assert env == {
        "CUDA_VISIBLE_DEVICES": "GPU-0000",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/mps-pipe",
        "GPU_MEM_FRACTION": "0.20",
    }
    assert mps_env(2, 10)["CUDA_VISIBLE_DEVICES"] == "2"
    with pytest.raises(ValueError, match="gpu_pct"):
        mps_env(0, 0)
    assert cpu_only_env() == {"CUDA_VISIBLE_DEVICES": ""}
    argv, daemon_env = mps_daemon_command("/tmp/p", "/tmp/l", (0, 1))
    assert argv == ["nvidia-cuda-mps-control", "-d"]
    assert daemon_env["CUDA_VISIBLE_DEVICES"] == "0,1"
