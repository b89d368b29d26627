"""GPU discovery through NVML, and the environment that gives an instance its GPU share (MPS).

`discover_gpus()` uses nvidia-ml-py (`pynvml`) when it imports and finds a driver; any NVML
failure, or no package, is a clean "no GPUs" inventory with the reason, never an exception.
Tests pass a fake object with the same `nvml*` functions (`NvmlApi`). `mps_env` builds what
a worker needs to run with g % of a device under the server's MPS daemon
(`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`), and `mps_daemon_command` what starts that daemon.

Shell side: calls NVML (hardware I/O), no clock; never imports torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class NvmlApi(Protocol):
    """The part of pynvml this module calls (a fake in tests)."""

    def nvmlInit(self) -> None: ...  # noqa: N802 - NVML's own names

    def nvmlShutdown(self) -> None: ...  # noqa: N802

    def nvmlDeviceGetCount(self) -> int: ...  # noqa: N802

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...  # noqa: N802

    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...  # noqa: N802

    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...  # noqa: N802

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...  # noqa: N802


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    name: str
    uuid: str
    memory_total_bytes: int
    memory_used_bytes: int


@dataclass(frozen=True, slots=True)
class GpuInventory:
    devices: tuple[GpuDevice, ...] = ()
    source: str = "none"  # "nvml" or "none"
    reason: str = ""  # why there are no GPUs

    @property
    def count(self) -> int:
        return len(self.devices)

    @property
    def share_capacity_pct(self) -> tuple[int, ...]:
        """Each device's schedulable share for the planner (`ServerView.gpu_pct`)."""
        return tuple(100 for _ in self.devices)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def load_nvml() -> NvmlApi | None:
    """The pynvml module, or None when nvidia-ml-py is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    module: NvmlApi = pynvml
    return module


def discover_gpus(nvml: NvmlApi | None = None, *, use_system: bool = True) -> GpuInventory:
    """Every GPU NVML reports; a clean empty inventory when there is no NVML or no driver.

    `nvml` overrides the library (tests); with `use_system=False` and no override, no
    library is loaded at all.
    """
    api = nvml if nvml is not None else (load_nvml() if use_system else None)
    if api is None:
        return GpuInventory(reason="nvidia-ml-py (pynvml) is not installed")
    error_type: type[BaseException] = getattr(api, "NVMLError", OSError)
    try:
        api.nvmlInit()
    except (error_type, OSError) as exc:
        return GpuInventory(reason=f"NVML is not available: {exc}")
    try:
        devices = []
        for index in range(api.nvmlDeviceGetCount()):
            handle = api.nvmlDeviceGetHandleByIndex(index)
            memory = api.nvmlDeviceGetMemoryInfo(handle)
            devices.append(
                GpuDevice(
                    index=index,
                    name=_text(api.nvmlDeviceGetName(handle)),
                    uuid=_text(api.nvmlDeviceGetUUID(handle)),
                    memory_total_bytes=int(memory.total),
                    memory_used_bytes=int(memory.used),
                )
            )
    except (error_type, OSError) as exc:
        return GpuInventory(reason=f"NVML failed while listing devices: {exc}")
    finally:
        with contextlib.suppress(error_type, OSError):
            api.nvmlShutdown()
    if not devices:
        return GpuInventory(source="nvml", reason="NVML reports no devices")
    return GpuInventory(tuple(devices), "nvml")


def mps_env(
    device: GpuDevice | int,
    gpu_pct: int,
    pipe_dir: str | None = None,
    log_dir: str | None = None,
    memory_fraction: float | None = None,
) -> dict[str, str]:
    """Environment for a worker holding `gpu_pct` % of one device under the MPS daemon."""
    if not 0 < gpu_pct <= 100:
        raise ValueError(f"gpu_pct = {gpu_pct}: an instance's GPU share must be in 1..100")
    env = {
        "CUDA_VISIBLE_DEVICES": device.uuid if isinstance(device, GpuDevice) else str(device),
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(gpu_pct),
    }
    if pipe_dir is not None:
        env["CUDA_MPS_PIPE_DIRECTORY"] = pipe_dir
    if log_dir is not None:
        env["CUDA_MPS_LOG_DIRECTORY"] = log_dir
    if memory_fraction is not None:
        if not 0 < memory_fraction <= 1:
            raise ValueError(f"memory_fraction = {memory_fraction}: must be in (0, 1]")
        env["GPU_MEM_FRACTION"] = f"{memory_fraction:.2f}"  # INFless's own variable
    return env


def cpu_only_env() -> dict[str, str]:
    """Environment for a worker without a GPU share: no device is visible."""
    return {"CUDA_VISIBLE_DEVICES": ""}


def mps_daemon_command(
    pipe_dir: str, log_dir: str, devices: tuple[int, ...] = ()
) -> tuple[list[str], Mapping[str, str]]:
    """The argv and environment that start the server's MPS control daemon."""
    env = {"CUDA_MPS_PIPE_DIRECTORY": pipe_dir, "CUDA_MPS_LOG_DIRECTORY": log_dir}
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices)
    return ["nvidia-cuda-mps-control", "-d"], env
