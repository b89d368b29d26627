"""MPS and NVML on a real GPU (skipped without CUDA or `nvidia-cuda-mps-control`): infless
starts the real control daemon on device 0, a child Python process, the daemon's client at
a 30 % share, runs a matmul on CUDA and is listed by the daemon (and by NVML, with its
device memory); `stop()` leaves no daemon and no MPS server. The monitor samples the real
devices."""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from asyncio.subprocess import PIPE
from collections.abc import Iterator
from pathlib import Path

import pytest

from infless.clock import RealClock
from infless.cluster import mps_process as proc
from infless.cluster.config import GpuConfig
from infless.cluster.gpu_monitor import GpuMonitor, nvml_factory_for
from infless.cluster.gpus import COMPUTE_MODES, GpuInventory, inventory_for
from infless.cluster.mps import MpsControl, daemon_dirs

CONTROL = shutil.which(GpuConfig().mps_control)
CHILD_TIMEOUT_S = 90.0  # a fresh process to its first CUDA answer: ~7 s measured
CHILD = """
import sys
import torch
x = torch.randn(2048, 2048, device="cuda")
y = x @ x
torch.cuda.synchronize()
print("ready", bool(torch.isfinite(y).all()), flush=True)
sys.stdin.readline()
"""


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _cuda(), reason="needs CUDA (torch.cuda.is_available() is False)"),
]


@pytest.fixture
def root() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="mps-", dir="/tmp"))  # short: unix sockets
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def pids(answer: proc.ControlAnswer) -> list[int]:
    assert answer.ok, answer.output
    return [int(word) for word in answer.output.split() if word.isdigit()]


@pytest.mark.skipif(CONTROL is None, reason="needs nvidia-cuda-mps-control on PATH")
async def test_a_real_daemon_serves_a_client_at_its_share_and_stop_leaves_nothing(
    root: Path,
) -> None:
    assert CONTROL is not None
    inventory = inventory_for(GpuConfig())
    device = inventory.devices[0]
    cfg = GpuConfig(mps="on")  # a GPU without MPS fails here, with the reason
    control = MpsControl(cfg, GpuInventory((device,), "nvml"), root, RealClock())
    pipe_dir, log_dir = daemon_dirs(root, device.uuid)
    client_env = proc.base_env(
        {"CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir), "CUDA_MPS_LOG_DIRECTORY": str(log_dir)}
    )

    async def ask(command: str) -> proc.ControlAnswer:
        call = proc.ControlCommand(CONTROL, client_env, command, 30.0)
        return await asyncio.to_thread(proc.run_command, call)

    try:
        [share] = await control.start()
        assert (share.mode, share.adopted, share.pipe_dir) == ("mps", False, str(pipe_dir))
        assert pids(await ask("get_server_list")) == []  # no client yet, no server
        env = proc.base_env(
            {
                "CUDA_VISIBLE_DEVICES": device.uuid,
                "CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir),
                "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
            }
        )
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD, env=env, stdin=PIPE, stdout=PIPE
        )
        assert child.stdin is not None
        assert child.stdout is not None
        try:
            line = await asyncio.wait_for(child.stdout.readline(), CHILD_TIMEOUT_S)
            assert line.split() == [b"ready", b"True"]
            [server] = pids(await ask("get_server_list"))
            assert child.pid in pids(await ask(f"get_client_list {server}"))
            monitor = GpuMonitor(nvml_factory_for(cfg), [device], 60.0, RealClock())
            [sample] = await monitor.refresh()
            await monitor.stop()
            # infless_instance_gpu_memory_bytes needs NVML to list MPS clients
            assert sample.process_memory_bytes.get(child.pid, 0) > 0, sample
        finally:
            child.stdin.write(b"\n")
            child.stdin.close()
            await asyncio.wait_for(child.wait(), 60)
    finally:
        await control.stop()
    assert not (await ask("get_server_list")).ok
    assert proc.processes_with("CUDA_MPS_PIPE_DIRECTORY", str(pipe_dir)) == []


async def test_the_inventory_and_the_monitor_read_the_real_devices() -> None:
    cfg = GpuConfig()
    inventory = inventory_for(cfg)
    assert inventory.source == "nvml"
    assert inventory.count >= 1
    for device in inventory.devices:
        assert device.uuid.startswith(("GPU-", "MIG-"))
        assert device.compute_mode in COMPUTE_MODES.values()
    monitor = GpuMonitor(nvml_factory_for(cfg), inventory.devices, 60.0, RealClock())
    samples = await monitor.refresh()
    await monitor.stop()
    assert [s.uuid for s in samples] == [d.uuid for d in inventory.devices]
    for sample, device in zip(samples, inventory.devices, strict=True):
        assert sample.memory_total_bytes == device.memory_total_bytes
        assert sample.utilization_ratio is not None
        assert 0.0 <= sample.utilization_ratio <= 1.0
