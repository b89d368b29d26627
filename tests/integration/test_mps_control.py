"""MPS daemons with real processes: the fake control program (tests/support/fake_mps_control.py)
as `[gpu] mps_control` on two fake GPUs. One daemon per GPU, each on its own pipe directory
and device; a daemon already answering is adopted and left running at `stop()`; a daemon that
never answers, or does not start, leaves its GPU time-sliced with the reason and nothing
running; `mps = "on"` refuses such a GPU."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from infless.clock import RealClock
from infless.cluster import mps_process as proc
from infless.cluster.config import GpuConfig
from infless.cluster.gpus import GpuInventory, inventory_for
from infless.cluster.mps import MpsControl, MpsUnavailable, daemon_dirs, daemon_env

FAKE_CONTROL = Path(__file__).resolve().parents[1] / "support" / "fake_mps_control.py"


@pytest.fixture
def root() -> Iterator[Path]:
    """A short directory: the daemons' unix sockets live under it (108 bytes at most)."""
    directory = Path(tempfile.mkdtemp(prefix="mps-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def config(**overrides: object) -> GpuConfig:
    settings: dict[str, object] = {
        "fake_devices": 2,
        "mps_control": str(FAKE_CONTROL),
        "mps_timeout_s": 10.0,
        **overrides,
    }
    return GpuConfig(**settings)  # type: ignore[arg-type]  # msgspec checks the values


def answers(root: Path, uuid: str) -> bool:
    pipe_dir, log_dir = daemon_dirs(root, uuid)
    env = proc.base_env(daemon_env(uuid, pipe_dir, log_dir))
    command = proc.ControlCommand(str(FAKE_CONTROL), env, "get_server_list", proc.PROBE_S)
    return proc.run_command(command).ok


def running_on(root: Path, uuid: str) -> list[int]:
    """The pids of every process serving that GPU's pipe directory (the daemon's env)."""
    pipe_dir, _ = daemon_dirs(root, uuid)
    return [p.pid for p in proc.processes_with("CUDA_MPS_PIPE_DIRECTORY", str(pipe_dir))]


def start_by_hand(root: Path, uuid: str) -> None:
    pipe_dir, log_dir = daemon_dirs(root, uuid)
    pipe_dir.mkdir(parents=True)
    log_dir.mkdir(parents=True)
    env = proc.base_env(daemon_env(uuid, pipe_dir, log_dir))
    subprocess.run([str(FAKE_CONTROL), "-d"], env=env, check=True, timeout=30)


def quit_by_hand(root: Path, uuid: str) -> None:
    pipe_dir, log_dir = daemon_dirs(root, uuid)
    env = proc.base_env(daemon_env(uuid, pipe_dir, log_dir))
    proc.run_command(proc.ControlCommand(str(FAKE_CONTROL), env, "quit", proc.PROBE_S))
    proc.end_processes(str(pipe_dir), "CUDA_MPS_PIPE_DIRECTORY")  # waits for its exit


async def test_one_daemon_per_gpu_until_stop(root: Path) -> None:
    cfg = config()
    inventory = inventory_for(cfg)
    control = MpsControl(cfg, inventory, root, RealClock())
    try:
        shares = await control.start()
        assert [(s.uuid, s.mode, s.adopted, s.reason) for s in shares] == [
            (d.uuid, "mps", False, "") for d in inventory.devices
        ]
        for device, share in zip(inventory.devices, shares, strict=True):
            pipe_dir, log_dir = daemon_dirs(root, device.uuid)
            assert share.pipe_dir == str(pipe_dir)
            assert (pipe_dir / "control").is_socket()
            assert f"CUDA_VISIBLE_DEVICES={device.uuid}" in (log_dir / "control.log").read_text()
            assert answers(root, device.uuid)
            assert len(running_on(root, device.uuid)) == 1
        assert control.sharing(inventory.devices[1].uuid) == shares[1]
    finally:
        await control.stop()
    for device in inventory.devices:
        assert not answers(root, device.uuid)
        assert running_on(root, device.uuid) == []
    await control.stop()  # idempotent


async def test_a_daemon_already_answering_is_adopted_and_left_running(root: Path) -> None:
    cfg = config()
    inventory = inventory_for(cfg)
    theirs, ours = inventory.devices
    start_by_hand(root, theirs.uuid)
    try:
        control = MpsControl(cfg, inventory, root, RealClock())
        adopted, started = await control.start()
        assert (adopted.mode, adopted.adopted) == ("mps", True)
        assert adopted.reason.startswith("adopted: an MPS control daemon already answered on")
        assert (started.mode, started.adopted) == ("mps", False)
        await control.stop()
        assert answers(root, theirs.uuid)  # not ours to stop
        assert not answers(root, ours.uuid)
        assert running_on(root, ours.uuid) == []
    finally:
        quit_by_hand(root, theirs.uuid)


async def test_a_daemon_that_never_answers_leaves_its_gpu_time_sliced_and_nothing_running(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MPS_MODE", "silent")
    cfg = config(mps_timeout_s=1.0)
    inventory = inventory_for(cfg)
    control = MpsControl(cfg, inventory, root, RealClock())
    shares = await control.start()
    for device, share in zip(inventory.devices, shares, strict=True):
        assert (share.mode, share.pipe_dir, share.adopted) == ("time-sliced", None, False)
        assert "did not answer" in share.reason
        assert "within 1 s (gpu.mps_timeout_s)" in share.reason
        assert "silent mode, never answering" in share.reason  # the log's last lines
        assert running_on(root, device.uuid) == []
    await control.stop()


async def test_mps_on_refuses_a_gpu_whose_daemon_does_not_start(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MPS_MODE", "fail")
    cfg = config(mps="on", fake_devices=1)
    inventory: GpuInventory = inventory_for(cfg)
    [device] = inventory.devices
    control = MpsControl(cfg, inventory, root, RealClock())
    with pytest.raises(MpsUnavailable) as refused:
        await control.start()
    text = str(refused.value)
    assert f"GPU 0 ({device.uuid}) cannot run MPS" in text
    assert "-d` exited with 1: fake MPS: refusing to start" in text
    assert running_on(root, device.uuid) == []


async def test_mps_on_stops_the_daemons_it_started_when_one_gpu_cannot_run_it(
    root: Path,
) -> None:
    cfg = config(mps="on")
    inventory = inventory_for(cfg)
    good, bad = inventory.devices
    # a file where the bad GPU's directories must go: that one cannot get a daemon
    (root / "mps").mkdir()
    (root / "mps" / bad.uuid).write_text("in the way")
    control = MpsControl(cfg, inventory, root, RealClock())
    with pytest.raises(MpsUnavailable, match=f"GPU 1 \\({bad.uuid}\\) cannot run MPS"):
        await control.start()
    assert not answers(root, good.uuid)  # started, then stopped before the refusal
    assert running_on(root, good.uuid) == []
