"""A scripted NVML for tests: `FakeNvml`'s devices, with the readings, facts and failures a
test sets per device, and counts of what was called."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infless.cluster.fake_gpus import (
    NVML_ERROR_NOT_SUPPORTED,
    FakeHandle,
    FakeMemory,
    FakeNvml,
    FakeNvmlError,
    FakeProcess,
    FakeUtilization,
)

NOT_SUPPORTED = None  # a reading set to this raises NVML's "Not Supported"


@dataclass
class Script:
    """One device's answers; None raises "Not Supported"."""

    name: str | bytes = "NVIDIA H100 80GB HBM3"
    memory_used_bytes: int | None = 0
    utilization_pct: int | None = 0
    power_mw: int | None = 0
    mig: list[int] | None = field(default_factory=lambda: [0, 0])
    compute_mode: int | None = 0
    processes: list[FakeProcess] | None = field(default_factory=list)
    mps_processes: list[FakeProcess] | None = field(default_factory=list)
    uuid: str | None = None  # None: the fake's own


class ScriptedNvml(FakeNvml):
    def __init__(
        self, scripts: list[Script], memory_mib: int = 81559, fail_init: bool = False
    ) -> None:
        super().__init__(len(scripts), memory_mib)
        self.scripts = scripts
        self.fail_init = fail_init
        self.inits = 0
        self.shutdowns = 0
        self.utilization_reads = 0

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's names
        if self.fail_init:
            raise FakeNvmlError(9)  # NVML_ERROR_DRIVER_NOT_LOADED
        self.inits += 1
        super().nvmlInit()

    def nvmlShutdown(self) -> None:  # noqa: N802
        super().nvmlShutdown()
        self.shutdowns += 1

    def _script(self, handle: FakeHandle) -> Script:
        return self.scripts[self._device(handle)]

    @staticmethod
    def _given(value: Any) -> Any:
        if value is NOT_SUPPORTED:
            raise FakeNvmlError(NVML_ERROR_NOT_SUPPORTED)
        return value

    # old pynvml answers bytes, so a script may too: wider than FakeNvml's own str
    def nvmlDeviceGetName(  # type: ignore[override]  # noqa: N802
        self, handle: FakeHandle
    ) -> str | bytes:
        return self._script(handle).name

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:  # noqa: N802
        return self._script(handle).uuid or super().nvmlDeviceGetUUID(handle)

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> FakeMemory:  # noqa: N802
        used = self._given(self._script(handle).memory_used_bytes)
        return FakeMemory(total=self.memory_bytes, free=self.memory_bytes - used, used=used)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> FakeUtilization:  # noqa: N802
        self.utilization_reads += 1
        return FakeUtilization(gpu=self._given(self._script(handle).utilization_pct), memory=0)

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:  # noqa: N802
        power: int = self._given(self._script(handle).power_mw)
        return power

    def nvmlDeviceGetMigMode(self, handle: FakeHandle) -> list[int]:  # noqa: N802
        mig: list[int] = self._given(self._script(handle).mig)
        return mig

    def nvmlDeviceGetComputeMode(self, handle: FakeHandle) -> int:  # noqa: N802
        mode: int = self._given(self._script(handle).compute_mode)
        return mode

    def nvmlDeviceGetComputeRunningProcesses(  # noqa: N802
        self, handle: FakeHandle
    ) -> list[FakeProcess]:
        processes: list[FakeProcess] = self._given(self._script(handle).processes)
        return processes

    def nvmlDeviceGetMPSComputeRunningProcesses(  # noqa: N802
        self, handle: FakeHandle
    ) -> list[FakeProcess]:
        processes: list[FakeProcess] = self._given(self._script(handle).mps_processes)
        return processes
