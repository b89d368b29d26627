"""MPS decisions without a daemon: each reason a GPU is shared time-sliced, `mps = "on"`
refusing, the sharing description, and the daemons' directories and environment. (Daemons
that run are tests/integration/test_mps_control.py's.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from infless.cluster.config import GpuConfig
from infless.cluster.fake_gpus import fake_uuid
from infless.cluster.gpus import GpuDevice, GpuInventory
from infless.cluster.mps import (
    GpuSharing,
    MpsControl,
    MpsUnavailable,
    daemon_dirs,
    daemon_env,
    time_sliced_reason,
)
from tests.support.clock import FakeClock

H100 = GpuDevice(0, "NVIDIA H100", "GPU-5f1e6a8c-0000-4000-8000-000000000000", 80 * 2**30, 0)
CONTROL = "/usr/bin/nvidia-cuda-mps-control"
PIPE = Path("/run/infless/mps") / H100.uuid / "pipe"


def reason(cfg: GpuConfig, device: GpuDevice = H100, control: str | None = CONTROL) -> str:
    return time_sliced_reason(cfg, False, device, control, PIPE)


def test_mps_may_run_on_a_plain_device() -> None:
    assert reason(GpuConfig()) == ""
    assert reason(GpuConfig(mps="on")) == ""


def test_each_reason_for_time_slicing_is_precise() -> None:
    assert reason(GpuConfig(mps="off")) == "[gpu] mps = off"
    mig = reason(GpuConfig(), GpuDevice(1, "A100", "GPU-a", 1, 0, mig_enabled=True))
    assert mig.startswith("MIG is enabled on GPU 1 (GPU-a)")
    assert "nvidia-smi -i 1 -mig 0" in mig
    prohibited = reason(GpuConfig(), GpuDevice(2, "A100", "GPU-b", 1, 0, compute_mode="prohibited"))
    assert "GPU 2 (GPU-b) is in the prohibited compute mode" in prohibited
    missing = reason(GpuConfig(mps_control="nvidia-cuda-mps-control"), control=None)
    assert missing.startswith("[gpu] mps_control = 'nvidia-cuda-mps-control' is not on PATH")
    assert "full path" in missing
    not_a_program = reason(GpuConfig(mps_control="/opt/cuda/bin/mps"), control=None)
    assert not_a_program.startswith("[gpu] mps_control = '/opt/cuda/bin/mps' is not an executable")
    deep = Path("/" + "d" * 60) / "mps" / H100.uuid / "pipe"
    too_long = time_sliced_reason(GpuConfig(), False, H100, CONTROL, deep)
    assert "too long for the daemon's unix sockets" in too_long
    assert "shorter root" in too_long


def test_fake_devices_get_no_daemon_unless_a_program_is_named() -> None:
    fake = GpuDevice(0, "infless fake GPU", fake_uuid(0), 2**30, 0)
    default = time_sliced_reason(GpuConfig(), True, fake, CONTROL, PIPE)
    assert default.startswith("fake devices: no MPS daemon")
    by_path = GpuConfig(mps_control="/usr/local/bin/nvidia-cuda-mps-control")
    assert time_sliced_reason(by_path, True, fake, CONTROL, PIPE).startswith("fake devices")
    named = GpuConfig(mps_control="/opt/tests/fake_mps_control.py")
    assert time_sliced_reason(named, True, fake, "/opt/tests/fake_mps_control.py", PIPE) == ""


def test_sharing_is_described_for_the_servers_route() -> None:
    share = GpuSharing(H100.uuid, 0, "mps", str(PIPE), "", adopted=False)
    assert share.describe() == {
        "uuid": H100.uuid,
        "index": 0,
        "mode": "mps",
        "pipeDir": str(PIPE),
        "reason": "",
        "adopted": False,
    }
    sliced = GpuSharing("GPU-x", 1, "time-sliced", None, "[gpu] mps = off", adopted=False)
    assert sliced.describe()["pipeDir"] is None
    assert sliced.describe()["mode"] == "time-sliced"


def test_each_daemon_has_its_own_directories_and_device() -> None:
    pipe, log = daemon_dirs(Path("/run/x"), "GPU-1")
    assert (pipe, log) == (Path("/run/x/mps/GPU-1/pipe"), Path("/run/x/mps/GPU-1/log"))
    assert daemon_env("GPU-1", pipe, log) == {
        "CUDA_VISIBLE_DEVICES": "GPU-1",
        "CUDA_MPS_PIPE_DIRECTORY": "/run/x/mps/GPU-1/pipe",
        "CUDA_MPS_LOG_DIRECTORY": "/run/x/mps/GPU-1/log",
    }


async def test_mps_off_shares_every_gpu_time_sliced_and_starts_nothing(tmp_path: Path) -> None:
    exclusive = GpuDevice(1, "H100", "GPU-e", 1, 0, compute_mode="exclusive-process")
    inventory = GpuInventory((H100, exclusive), "nvml")
    control = MpsControl(GpuConfig(mps="off"), inventory, tmp_path, FakeClock())
    shares = await control.start()
    assert [(s.uuid, s.mode, s.pipe_dir, s.adopted) for s in shares] == [
        (H100.uuid, "time-sliced", None, False),
        ("GPU-e", "time-sliced", None, False),
    ]
    assert shares[0].reason == "[gpu] mps = off"
    assert "exclusive-process compute mode, so only one process at a time" in shares[1].reason
    assert control.sharing("GPU-e") == shares[1]
    assert control.all() == shares
    assert not (tmp_path / "mps").exists()  # no directories, no daemon
    await control.stop()
    await control.stop()  # idempotent


async def test_fake_devices_with_the_default_program_are_time_sliced(tmp_path: Path) -> None:
    inventory = GpuInventory((GpuDevice(0, "fake", fake_uuid(0), 1, 0),), "fake")
    control = MpsControl(GpuConfig(), inventory, tmp_path, FakeClock())
    [share] = await control.start()
    assert share.mode == "time-sliced"
    assert share.reason.startswith("fake devices: no MPS daemon")


async def test_mps_on_refuses_a_gpu_that_cannot_run_it(tmp_path: Path) -> None:
    cfg = GpuConfig(mps="on", mps_control=str(tmp_path / "no-such-program"))
    control = MpsControl(cfg, GpuInventory((H100,), "nvml"), tmp_path, FakeClock())
    with pytest.raises(MpsUnavailable) as refused:
        await control.start()
    text = str(refused.value)
    assert f"GPU 0 ({H100.uuid}) cannot run MPS" in text
    assert "is not an executable file" in text
    assert 'mps = "auto"' in text


async def test_unknown_gpus_and_an_unstarted_control_are_named(tmp_path: Path) -> None:
    control = MpsControl(GpuConfig(mps="off"), GpuInventory((H100,), "nvml"), tmp_path, FakeClock())
    with pytest.raises(LookupError, match="start\\(\\) has not run"):
        control.sharing(H100.uuid)
    await control.start()
    with pytest.raises(LookupError, match=f"'GPU-nope' has no sharing mode here .*{H100.uuid}"):
        control.sharing("GPU-nope")
    empty = MpsControl(GpuConfig(), GpuInventory(), tmp_path, FakeClock())
    assert await empty.start() == []
