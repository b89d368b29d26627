"""A fake NVML: the GPUs of `[gpu] fake_devices`, for machines without one (CI, demos).

A documented runtime feature, not a test helper: with `fake_devices = N` the gateway lists
N fake devices through the very code that lists real ones (`cluster.gpus.discover_gpus`),
samples them through the same monitor (`cluster.gpu_monitor`), and the pool plans and
places GPU shares on them; workers compute on the CPU (the fake device runtime). It never
pretends on its own: only that explicit setting makes it, and a machine with real GPUs that
sets it gets fakes instead of them (`GpuConfig.fake_devices` says so).

`FakeNvml` answers every NVML call infless makes, as pynvml does: `nvmlInit` before
anything, errors as `FakeNvml.NVMLError` carrying NVML's code, handles valid until
`nvmlShutdown`. A fake device is idle and empty: no utilisation, no memory in use, no
power draw, no processes, MIG disabled, the default compute mode. Its UUID is stable (the
same index gives the same UUID in every process and run), so the gateway and the workers
agree on it.

Pure: no I/O, no clock; never imports torch.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

FAKE_NAME = "infless fake GPU"
_UUID_NAMESPACE = uuid.UUID("5d0f3c9e-8a1b-4c2d-9e7f-1a2b3c4d5e6f")  # fixed: stable UUIDs

# NVML's return codes that the fake raises (pynvml's NVML_ERROR_* values).
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_COMPUTEMODE_DEFAULT = 0
NVML_DEVICE_MIG_DISABLE = 0

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
}


class FakeNvmlError(Exception):
    """pynvml's `NVMLError`: the NVML return code in `value`, its message as the text."""

    def __init__(self, value: int) -> None:
        super().__init__(_MESSAGES.get(value, f"NVML error {value}"))
        self.value = value


@dataclass(frozen=True, slots=True)
class FakeHandle:
    index: int


@dataclass(frozen=True, slots=True)
class FakeMemory:
    """`nvmlDeviceGetMemoryInfo`'s answer."""

    total: int
    free: int
    used: int


@dataclass(frozen=True, slots=True)
class FakeUtilization:
    """`nvmlDeviceGetUtilizationRates`'s answer (percent)."""

    gpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class FakeProcess:
    """One entry of `nvmlDeviceGetComputeRunningProcesses` (pynvml's field names)."""

    pid: int
    usedGpuMemory: int | None  # noqa: N815 - NVML's own name


def fake_uuid(index: int) -> str:
    """The stable UUID of fake device `index`: `GPU-fake-<index>-<12 hex digits>`."""
    digest = uuid.uuid5(_UUID_NAMESPACE, f"infless fake GPU {index}").hex[:12]
    return f"GPU-fake-{index}-{digest}"


class FakeNvml:
    """`count` idle fake devices of `memory_mib` MiB each, behind pynvml's calls."""

    NVMLError = FakeNvmlError

    def __init__(self, count: int, memory_mib: int) -> None:
        if count < 0 or memory_mib < 1:
            raise ValueError(
                f"FakeNvml(count={count}, memory_mib={memory_mib}): count must be >= 0 and "
                "memory_mib >= 1 ([gpu] fake_devices and fake_memory_mib)"
            )
        self.count = count
        self.memory_bytes = memory_mib * 2**20
        self._opened = 0  # NVML counts nvmlInit calls; each nvmlShutdown undoes one

    # -- the library

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's own names
        self._opened += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self._check_open()
        self._opened -= 1

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._check_open()
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:  # noqa: N802
        self._check_open()
        if not 0 <= index < self.count:
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(index)

    # -- a device

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:  # noqa: N802
        self._device(handle)
        return FAKE_NAME

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:  # noqa: N802
        return fake_uuid(self._device(handle))

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> FakeMemory:  # noqa: N802
        self._device(handle)
        return FakeMemory(total=self.memory_bytes, free=self.memory_bytes, used=0)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> FakeUtilization:  # noqa: N802
        self._device(handle)
        return FakeUtilization(gpu=0, memory=0)

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:  # noqa: N802
        self._device(handle)
        return 0  # milliwatts

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:  # noqa: N802
        self._device(handle)
        return [NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_DISABLE]  # current, pending

    def nvmlDeviceGetComputeMode(self, handle: FakeHandle) -> int:  # noqa: N802
        self._device(handle)
        return NVML_COMPUTEMODE_DEFAULT

    def nvmlDeviceGetComputeRunningProcesses(  # noqa: N802
        self, handle: FakeHandle
    ) -> list[FakeProcess]:
        self._device(handle)
        return []

    def nvmlDeviceGetMPSComputeRunningProcesses(  # noqa: N802
        self, handle: FakeHandle
    ) -> list[FakeProcess]:
        self._device(handle)
        return []

    # -- checks

    def _check_open(self) -> None:
        if self._opened <= 0:
            raise FakeNvmlError(NVML_ERROR_UNINITIALIZED)

    def _device(self, handle: FakeHandle) -> int:
        self._check_open()
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < self.count:
            raise FakeNvmlError(NVML_ERROR_INVALID_ARGUMENT)
        return handle.index
