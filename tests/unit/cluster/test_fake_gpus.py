"""The fake NVML of `[gpu] fake_devices` behaves as pynvml does: init first, NVML's error
codes, stable UUIDs, idle and empty devices."""

from __future__ import annotations

import re

import pytest

from infless.cluster.fake_gpus import (
    FAKE_NAME,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_UNINITIALIZED,
    FakeHandle,
    FakeNvml,
    FakeNvmlError,
    fake_uuid,
)


def test_calls_before_init_or_after_shutdown_are_refused_like_nvml() -> None:
    nvml = FakeNvml(2, 1024)
    with pytest.raises(FakeNvmlError) as refused:
        nvml.nvmlDeviceGetCount()
    assert refused.value.value == NVML_ERROR_UNINITIALIZED
    nvml.nvmlInit()
    nvml.nvmlInit()  # NVML counts them: one shutdown leaves it open
    handle = nvml.nvmlDeviceGetHandleByIndex(1)
    nvml.nvmlShutdown()
    assert nvml.nvmlDeviceGetName(handle) == FAKE_NAME
    nvml.nvmlShutdown()
    with pytest.raises(FakeNvmlError, match="Uninitialized"):
        nvml.nvmlDeviceGetUUID(handle)
    with pytest.raises(FakeNvmlError, match="Uninitialized"):
        nvml.nvmlShutdown()


def test_a_device_outside_the_count_is_an_invalid_argument() -> None:
    nvml = FakeNvml(1, 1024)
    nvml.nvmlInit()
    with pytest.raises(FakeNvmlError) as refused:
        nvml.nvmlDeviceGetHandleByIndex(1)
    assert refused.value.value == NVML_ERROR_INVALID_ARGUMENT
    with pytest.raises(FakeNvmlError, match="Invalid Argument"):
        nvml.nvmlDeviceGetMemoryInfo(FakeHandle(5))


def test_fake_devices_are_idle_empty_and_named_stably() -> None:
    nvml = FakeNvml(2, 512)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    assert (memory.total, memory.used, memory.free) == (512 * 2**20, 0, 512 * 2**20)
    assert nvml.nvmlDeviceGetUtilizationRates(handle).gpu == 0
    assert nvml.nvmlDeviceGetPowerUsage(handle) == 0
    assert nvml.nvmlDeviceGetMigMode(handle) == [0, 0]
    assert nvml.nvmlDeviceGetComputeMode(handle) == 0
    assert nvml.nvmlDeviceGetComputeRunningProcesses(handle) == []
    assert nvml.nvmlDeviceGetMPSComputeRunningProcesses(handle) == []
    uuids = [nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(2)]
    assert uuids == [fake_uuid(0), fake_uuid(1)]
    assert uuids[0] != uuids[1]
    assert re.fullmatch(r"GPU-fake-1-[0-9a-f]{12}", uuids[1])
    other = FakeNvml(4, 2048)  # another process, another size: the same names
    other.nvmlInit()
    assert other.nvmlDeviceGetUUID(other.nvmlDeviceGetHandleByIndex(1)) == uuids[1]


def test_a_wrong_size_names_the_settings() -> None:
    with pytest.raises(ValueError, match="fake_devices and fake_memory_mib"):
        FakeNvml(1, 0)
