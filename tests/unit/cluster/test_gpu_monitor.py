"""The GPU monitor on a scripted NVML and the fake clock: a round at start and one every
interval, readings NVML cannot give left out, processes merged, NVML opened once and shut
at stop, no NVML at all is no samples."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from infless.cluster.config import GpuConfig
from infless.cluster.fake_gpus import FakeNvml, FakeProcess, fake_uuid
from infless.cluster.gpu_monitor import GpuMonitor, GpuSample, nvml_factory_for
from infless.cluster.gpus import GpuDevice, discover_gpus, load_nvml
from tests.support.clock import FakeClock
from tests.support.nvml import NOT_SUPPORTED, Script, ScriptedNvml

T = TypeVar("T")
INTERVAL_S = 5.0


async def inline(call: Callable[[], T]) -> T:
    """The monitor's offload, on the loop: rounds finish while the fake clock advances."""
    return call()


def monitor_of(nvml: ScriptedNvml, clock: FakeClock) -> tuple[GpuMonitor, list[GpuDevice]]:
    devices = list(discover_gpus(nvml).devices)
    nvml.inits = nvml.shutdowns = 0  # count the monitor's own
    return GpuMonitor(lambda: nvml, devices, INTERVAL_S, clock, offload=inline), devices


async def test_samples_at_start_and_every_interval_until_stopped() -> None:
    clock = FakeClock()
    script = Script(utilization_pct=37, memory_used_bytes=2**30, power_mw=312_500)
    nvml = ScriptedNvml([script, Script()])
    monitor, devices = monitor_of(nvml, clock)
    assert monitor.samples() == []  # nothing before the first round
    monitor.start()
    await clock.advance(0)
    first = monitor.samples()
    assert [s.uuid for s in first] == [d.uuid for d in devices]
    assert first[0] == GpuSample(
        uuid=devices[0].uuid,
        index=0,
        sampled_at_s=clock.now(),
        utilization_ratio=0.37,
        memory_used_bytes=2**30,
        memory_total_bytes=81559 * 2**20,
        power_watts=312.5,
        process_memory_bytes={},
    )
    script.utilization_pct = 90
    await clock.advance(INTERVAL_S - 1)
    assert monitor.samples()[0].utilization_ratio == 0.37  # not yet
    await clock.advance(1)
    assert monitor.samples()[0].utilization_ratio == 0.9
    assert monitor.samples()[0].sampled_at_s == clock.now()
    assert nvml.inits == 1  # opened once, not per round
    await monitor.stop()
    assert nvml.shutdowns == 1
    reads = nvml.utilization_reads
    await clock.advance(INTERVAL_S * 3)
    assert nvml.utilization_reads == reads  # no round after stop
    assert clock.sleeper_count == 0


async def test_readings_nvml_cannot_give_are_left_out_and_processes_merged() -> None:
    nvml = ScriptedNvml(
        [
            Script(
                power_mw=NOT_SUPPORTED,
                utilization_pct=NOT_SUPPORTED,
                processes=[FakeProcess(101, 512 * 2**20), FakeProcess(102, None)],
                mps_processes=[FakeProcess(103, 2**20), FakeProcess(101, 600 * 2**20)],
            ),
            Script(mps_processes=NOT_SUPPORTED, processes=[FakeProcess(7, 3)]),
        ]
    )
    monitor, _ = monitor_of(nvml, FakeClock())
    first, second = await monitor.refresh()
    assert (first.power_watts, first.utilization_ratio) == (None, None)
    assert first.memory_total_bytes == 81559 * 2**20  # the rest of the sample stands
    assert first.process_memory_bytes == {101: 600 * 2**20, 103: 2**20}  # 102: withheld
    assert second.process_memory_bytes == {7: 3}


async def test_no_nvml_or_no_driver_is_no_samples() -> None:
    devices = [GpuDevice(0, "H100", "GPU-0", 1, 0)]
    clock = FakeClock()
    absent = GpuMonitor(lambda: None, devices, INTERVAL_S, clock, offload=inline)
    assert await absent.refresh() == []
    broken = ScriptedNvml([Script()], fail_init=True)
    no_driver = GpuMonitor(lambda: broken, devices, INTERVAL_S, clock, offload=inline)
    no_driver.start()
    await clock.advance(INTERVAL_S)
    assert no_driver.samples() == []
    await no_driver.stop()
    assert broken.shutdowns == 0  # never opened, never shut


async def test_a_device_now_under_another_uuid_is_not_sampled() -> None:
    nvml = ScriptedNvml([Script(), Script()])
    monitor, devices = monitor_of(nvml, FakeClock())
    nvml.scripts[0].uuid = "GPU-replaced"  # the inventory's device 0 is gone
    samples = await monitor.refresh()
    assert [s.uuid for s in samples] == [devices[1].uuid]


async def test_a_round_runs_off_the_event_loop_by_default() -> None:
    nvml = ScriptedNvml([Script(utilization_pct=5)])
    devices = list(discover_gpus(nvml).devices)
    nvml.shutdowns = 0
    monitor = GpuMonitor(lambda: nvml, devices, INTERVAL_S, FakeClock())  # asyncio.to_thread
    [sample] = await monitor.refresh()
    assert sample.utilization_ratio == 0.05
    await monitor.stop()
    assert nvml.shutdowns == 1


def test_the_factory_follows_the_gpu_section() -> None:
    fake = nvml_factory_for(GpuConfig(fake_devices=2, fake_memory_mib=64))()
    assert isinstance(fake, FakeNvml)
    fake.nvmlInit()
    assert fake.nvmlDeviceGetUUID(fake.nvmlDeviceGetHandleByIndex(1)) == fake_uuid(1)
    assert nvml_factory_for(GpuConfig()) is load_nvml
    with pytest.raises(ValueError, match=r"gpu\.metrics_interval_s = 0"):
        GpuMonitor(load_nvml, [], 0, FakeClock())
