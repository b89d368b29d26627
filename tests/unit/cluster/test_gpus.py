"""GPU discovery with a scripted NVML (MIG, compute modes, calls NVML does not support), the
inventory `[gpu]` asks for (disabled, fake devices), the clean no-GPU path, and MPS
environments."""

from __future__ import annotations

import pytest

from infless.cluster.config import GpuConfig
from infless.cluster.fake_gpus import FAKE_NAME, fake_uuid
from infless.cluster.gpus import (
    GpuDevice,
    cpu_only_env,
    discover_gpus,
    inventory_for,
    load_nvml,
    mps_env,
)
from tests.support.nvml import NOT_SUPPORTED, Script, ScriptedNvml


def test_devices_are_listed_with_their_memory_and_defaults() -> None:
    nvml = ScriptedNvml(
        [Script(name=b"NVIDIA GeForce RTX 2080 Ti"), Script(memory_used_bytes=2**20)],
        memory_mib=11 * 1024,
    )
    inventory = discover_gpus(nvml)
    assert inventory.source == "nvml"
    assert inventory.count == 2
    assert inventory.devices[0].name == "NVIDIA GeForce RTX 2080 Ti"  # bytes decoded
    assert inventory.devices[1] == GpuDevice(
        index=1,
        name="NVIDIA H100 80GB HBM3",
        uuid=fake_uuid(1),
        memory_total_bytes=11 * 2**30,
        memory_used_bytes=2**20,
        mig_enabled=False,
        compute_mode="default",
    )
    assert inventory.share_capacity_pct == (100, 100)
    assert (nvml.inits, nvml.shutdowns) == (1, 1)


def test_mig_and_compute_modes_are_read() -> None:
    inventory = discover_gpus(
        ScriptedNvml(
            [
                Script(mig=[1, 1]),
                Script(mig=[0, 1], compute_mode=3),  # MIG pending is not MIG on
                Script(compute_mode=2),
                Script(compute_mode=1),
            ]
        )
    )
    facts = [(d.mig_enabled, d.compute_mode) for d in inventory.devices]
    assert facts == [
        (True, "default"),
        (False, "exclusive-process"),
        (False, "prohibited"),
        (False, "exclusive-thread"),
    ]


def test_a_device_whose_facts_nvml_cannot_tell_is_kept_with_the_defaults() -> None:
    inventory = discover_gpus(
        ScriptedNvml([Script(mig=NOT_SUPPORTED, compute_mode=NOT_SUPPORTED), Script()])
    )
    assert inventory.count == 2
    assert (inventory.devices[0].mig_enabled, inventory.devices[0].compute_mode) == (
        False,
        "default",
    )


def test_a_listing_failure_or_a_missing_driver_is_a_clean_empty_inventory() -> None:
    inventory = discover_gpus(ScriptedNvml([Script()], fail_init=True))
    assert inventory.count == 0
    assert inventory.share_capacity_pct == ()
    assert "NVML is not available" in inventory.reason
    assert discover_gpus(ScriptedNvml([])).reason == "NVML reports no devices"
    broken = discover_gpus(ScriptedNvml([Script(memory_used_bytes=NOT_SUPPORTED)]))
    assert (broken.count, broken.source) == (0, "none")
    assert broken.reason == "NVML failed while listing devices: Not Supported"


def test_inventory_for_follows_the_gpu_section() -> None:
    nvml = ScriptedNvml([Script()])
    disabled = inventory_for(GpuConfig(enabled=False, fake_devices=2), nvml)
    assert (disabled.count, disabled.source, disabled.reason) == (
        0,
        "none",
        "[gpu] enabled = false",
    )
    assert nvml.inits == 0  # not even asked

    fake = inventory_for(GpuConfig(fake_devices=3, fake_memory_mib=1024), nvml)
    assert (fake.source, fake.count, fake.reason) == ("fake", 3, "")
    assert {d.name for d in fake.devices} == {FAKE_NAME}
    assert [d.uuid for d in fake.devices] == [fake_uuid(i) for i in range(3)]
    assert all(d.memory_total_bytes == 2**30 for d in fake.devices)
    assert nvml.inits == 0  # fake devices, whatever NVML has

    real = inventory_for(GpuConfig(), nvml)
    assert (real.source, real.count) == ("nvml", 1)


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
