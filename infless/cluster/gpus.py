"""GPU discovery through NVML (or the fake NVML of `[gpu] fake_devices`), and the environment
that gives an instance its GPU share (MPS).

`inventory_for(cfg)` is the server's GPU inventory as `[gpu]` asks: none when disabled, the
fake devices when `fake_devices` is set, else `discover_gpus()`. `discover_gpus()` uses
nvidia-ml-py (`pynvml`) when it imports and finds a driver; any NVML failure, or no package,
is a clean "no GPUs" inventory with the reason, never an exception, and a device whose
optional facts (MIG mode, compute mode) NVML cannot tell is kept with the defaults. Tests
pass a fake object with the same `nvml*` functions (`NvmlApi`). `mps_env` builds what a
worker needs to run with g % of a device under its MPS daemon
(`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`); the daemons themselves are `cluster.mps`'s.

Shell side: calls NVML (hardware I/O), no clock; never imports torch.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol, TypeVar

from infless.cluster.config import GpuConfig
from infless.cluster.fake_gpus import FakeNvml

log = logging.getLogger(__name__)

T = TypeVar("T")

# nvmlDeviceGetComputeMode's answers (NVML_COMPUTEMODE_*); 1, exclusive-thread, is gone from
# current drivers but still named rather than guessed.
COMPUTE_MODES = {0: "default", 1: "exclusive-thread", 2: "prohibited", 3: "exclusive-process"}
NVML_DEVICE_MIG_ENABLE = 1


class NvmlApi(Protocol):
    """Every pynvml call infless makes: discovery here, sampling in `cluster.gpu_monitor`
    (`cluster.fake_gpus.FakeNvml` answers them all; tests may fake fewer)."""

    def nvmlInit(self) -> None: ...  # noqa: N802 - NVML's own names

    def nvmlShutdown(self) -> None: ...  # noqa: N802

    def nvmlDeviceGetCount(self) -> int: ...  # noqa: N802

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...  # noqa: N802

    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...  # noqa: N802

    def nvmlDeviceGetUUID(self, handle: Any) -> str | bytes: ...  # noqa: N802

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...  # noqa: N802

    def nvmlDeviceGetMigMode(self, handle: Any) -> Any: ...  # noqa: N802 - [current, pending]

    def nvmlDeviceGetComputeMode(self, handle: Any) -> int: ...  # noqa: N802

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...  # noqa: N802 - .gpu %

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...  # noqa: N802 - milliwatts

    # each a list of (.pid, .usedGpuMemory bytes or None); MPS clients are in the second
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]: ...  # noqa: N802

    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: Any) -> list[Any]: ...  # noqa: N802


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    name: str
    uuid: str
    memory_total_bytes: int
    memory_used_bytes: int
    # MIG is on (its current mode): the whole device cannot take MPS clients. A device
    # without MIG support reports False.
    mig_enabled: bool = False
    # "default", "exclusive-process" (one CUDA context: only an MPS server can share it),
    # "prohibited" (no compute at all), or "exclusive-thread" on old drivers.
    compute_mode: str = "default"


@dataclass(frozen=True, slots=True)
class GpuInventory:
    devices: tuple[GpuDevice, ...] = ()
    source: Literal["nvml", "fake", "none"] = "none"  # fake: `[gpu] fake_devices`
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


def inventory_for(cfg: GpuConfig, nvml: NvmlApi | None = None) -> GpuInventory:
    """The GPUs this server's instances may use, as the `[gpu]` section asks.

    Disabled: none. `fake_devices > 0`: that many fake devices (`cluster.fake_gpus`),
    listed through the same `discover_gpus` as real ones, whatever NVML would find. Else
    the devices NVML finds (`nvml` overrides the library, for tests).
    """
    if not cfg.enabled:
        return GpuInventory(reason="[gpu] enabled = false")
    if cfg.fake_devices > 0:
        fake = discover_gpus(FakeNvml(cfg.fake_devices, cfg.fake_memory_mib))
        return replace(fake, source="fake")
    return discover_gpus(nvml)


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
            devices.append(_device(api, error_type, index))
    except (error_type, OSError) as exc:
        return GpuInventory(reason=f"NVML failed while listing devices: {exc}")
    finally:
        with contextlib.suppress(error_type, OSError):
            api.nvmlShutdown()
    if not devices:
        return GpuInventory(source="nvml", reason="NVML reports no devices")
    return GpuInventory(tuple(devices), "nvml")


def _device(api: NvmlApi, error_type: type[BaseException], index: int) -> GpuDevice:
    handle = api.nvmlDeviceGetHandleByIndex(index)
    memory = api.nvmlDeviceGetMemoryInfo(handle)

    def optional(what: str, read: Callable[[Any], T], default: T) -> T:
        # "Not Supported" (no MIG on this model, a compute mode a VM hides) keeps the device
        try:
            return read(handle)
        except error_type as exc:
            log.debug("GPU %d: NVML cannot tell its %s (%s); taking %r", index, what, exc, default)
            return default

    mig = optional("MIG mode", api.nvmlDeviceGetMigMode, [0, 0])
    mode = optional("compute mode", api.nvmlDeviceGetComputeMode, 0)
    return GpuDevice(
        index=index,
        name=_text(api.nvmlDeviceGetName(handle)),
        uuid=_text(api.nvmlDeviceGetUUID(handle)),
        memory_total_bytes=int(memory.total),
        memory_used_bytes=int(memory.used),
        mig_enabled=int(mig[0]) == NVML_DEVICE_MIG_ENABLE,
        compute_mode=COMPUTE_MODES.get(int(mode), f"mode-{mode}"),
    )


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
