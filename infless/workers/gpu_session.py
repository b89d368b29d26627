"""A GPU worker's life on its device: standby, models loaded and unloaded, memory reported.

Worker side (imports torch). There is one `GpuSession` per GPU worker process, made from the
placement of its first message (`Standby`, or `LoadModel` with `gpu` on a fresh start).
`workers.main` runs the socket and asks the session for each step:

- `standby()`: sets the placement's CUDA environment (`gpu_runtime.cuda_env`), creates the
  context and warms the math libraries, then answers `StandbyReady`. It must run before CUDA
  is initialised here, else the environment would not apply (`DeviceAlreadyInitialised`).
- `enter(request)`: a `LoadModel` must name the standby's placement (else
  `PlacementMismatch`). On a fresh start the standby steps run first.
- `open_weights(request)`: opens the GPU tier's copy. It runs before the worker enters its
  tenant's sandbox, which hides the tier's files.
- `build` and `warm_up`: the model on the device (`gpu_load`), and `Ready.gpu`'s report.
- `unload()`: drops the model, its graphs and buffers, and gives the allocator's cache back.
  It forgets the package too: its environment variables, its `src/` on sys.path and the
  modules imported from there (the next package may use the same module names). It answers
  `StandbyReady` with `init_ms` 0.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING

from infless.clock import perf_s
from infless.workers import protocol as p
from infless.workers.gpu_load import build_on_device, warm_up_on_device
from infless.workers.gpu_model import DeviceModel
from infless.workers.gpu_runtime import (
    DeviceAlreadyInitialised,
    DeviceRuntime,
    apply_env,
    runtime_for,
)

if TYPE_CHECKING:
    import torch


class PlacementMismatch(ValueError):
    """A `LoadModel` named another placement than the one this worker stands by on."""


def placement_of(message: p.ToWorker | None) -> p.GpuPlacement | None:
    """The GPU placement a worker's first message puts it on (None: a CPU worker)."""
    if isinstance(message, p.Standby):
        return message.placement
    if isinstance(message, p.LoadModel):
        return message.gpu
    return None


class GpuSession:
    """One GPU worker's device and the model it serves (module docstring); `runtime` and
    `environ` are injectable (tests: a refusing CUDA runtime, a dict for os.environ)."""

    def __init__(
        self,
        placement: p.GpuPlacement,
        runtime: DeviceRuntime | None = None,
        environ: MutableMapping[str, str] | None = None,
    ) -> None:
        self.placement = placement
        self.runtime = runtime_for(placement) if runtime is None else runtime
        self._environ: MutableMapping[str, str] = os.environ if environ is None else environ
        self._device_name: str | None = None  # set once standing by
        self._standby_environ: dict[str, str] = {}
        self._model: DeviceModel | None = None
        self._package_dir: Path | None = None
        self._opened: dict[str, torch.Tensor] | None = None  # the tier's copy, not yet attached

    def standby(self) -> p.StandbyReady:
        if self._device_name is not None:
            raise RuntimeError("this worker stands by already: Standby is its first message")
        if self.runtime.initialised():
            raise DeviceAlreadyInitialised(
                f"CUDA was initialised in worker pid {os.getpid()} before its placement "
                f"(device {self.placement.uuid}, {self.placement.gpu_pct} %) was applied: "
                "CUDA_VISIBLE_DEVICES and the MPS variables would not take effect; start GPU "
                "workers from a process that never initialised CUDA"
            )
        apply_env(self.runtime.env(self.placement), self._environ)
        started = perf_s()
        self._device_name = self.runtime.warm_up_libraries()
        init_ms = (perf_s() - started) * 1000.0
        self._standby_environ = dict(self._environ)
        return self._ready(init_ms)

    def enter(self, request: p.LoadModel) -> None:
        """Check a load's placement; on a fresh start (no `Standby`), stand by first."""
        if request.gpu != self.placement:
            raise PlacementMismatch(
                f"LoadModel.gpu = {request.gpu} but this worker stands by on "
                f"{self.placement}: send a GPU worker loads for its own placement only"
            )
        if self._model is not None:
            raise RuntimeError("this worker serves a model already: send Unload first")
        if self._device_name is None:
            self.standby()

    def open_weights(self, request: p.LoadModel) -> None:
        """Open the GPU tier's copy of the model now, while this worker can still reach
        the tier's files (a sandbox, entered next, hides them); `build` attaches it."""
        self._opened = None
        if request.gpu_weights is not None:
            from infless.weights.gpu_open import open_shared_weights

            self._opened = open_shared_weights(request.gpu_weights, self.runtime.device)

    def build(self, request: p.LoadModel) -> tuple[DeviceModel, float]:
        self._package_dir = Path(request.package_dir)
        opened, self._opened = self._opened, None
        model, attach_started = build_on_device(request, self.runtime, opened)
        self._model = model
        return model, attach_started

    def warm_up(
        self, model: DeviceModel, batch_sizes: list[int], rounds: int
    ) -> tuple[dict[int, float], p.GpuReport]:
        chosen = warm_up_on_device(model, batch_sizes, rounds, self.placement.cuda_graphs)
        report = p.GpuReport(
            device_name=self._device_name or "",
            graph_batch_sizes=chosen.graph_batch_sizes,
            memory_bytes=self.runtime.reserved_bytes(),
            weights_from_tier=model.weights_from_tier,
        )
        return chosen.exec_ms, report

    def unload(self) -> p.StandbyReady:
        model, self._model = self._model, None
        if model is not None:
            model.release()
        if self._package_dir is not None:
            forget_package(self._package_dir)
            self._package_dir = None
        self._environ.clear()
        self._environ.update(self._standby_environ)
        gc.collect()  # a module in a reference cycle would keep its device memory
        self.runtime.release()
        return self._ready(0.0)

    def memory_allocated_bytes(self) -> int:
        return self.runtime.allocated_bytes()

    def _ready(self, init_ms: float) -> p.StandbyReady:
        return p.StandbyReady(
            pid=os.getpid(),
            device_name=self._device_name or "",
            init_ms=init_ms,
            memory_bytes=self.runtime.reserved_bytes(),
        )


def forget_package(package_dir: Path) -> None:
    """Take a package's `src/` off sys.path and drop the modules imported from it."""
    from infless.models.package import SOURCE_DIR

    source = str(package_dir / SOURCE_DIR)
    sys.path[:] = [entry for entry in sys.path if entry != source]
    prefix = source + os.sep
    for name, module in list(sys.modules.items()):
        origin = getattr(module, "__file__", None)
        if isinstance(origin, str) and origin.startswith(prefix):
            del sys.modules[name]
