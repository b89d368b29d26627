"""The device a GPU worker computes on, behind one small interface: real CUDA or the fake device.

Worker side (imports torch). CUDA is touched only inside `CudaRuntime`'s methods, never at
import, so the zygote that imports this module stays CUDA-free. `DeviceRuntime` is
everything the GPU worker's model, warm-up and lifecycle need from a device.
`runtime_for(placement)` is the one place that tells CUDA from the fake device
(`GpuPlacement.runtime`):

- `CudaRuntime`: the worker's one visible device, as `cuda:0`. `cuda_env` puts the
  placement's uuid in `CUDA_VISIBLE_DEVICES` and, under MPS, the daemon's pipe and the
  instance's share. It gives pinned host buffers, `torch.cuda.CUDAGraph` and the caching
  allocator's counters.
- `FakeRuntime` (`[gpu] fake_devices`, machines without a GPU): the CPU through the same
  code path, with no CUDA environment and no CUDA call. Its "pinned" buffers are plain
  tensors. A graph records its static buffers at capture and replays by running the module
  eagerly into them, so the capture, replay, pad and slice branches run in CI. Its memory
  counts the weights it was given as a private copy.

The environment (`cuda_env`) is a pure function; `apply_env` writes it into a mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from infless.workers.protocol import GpuPlacement

Compute = Callable[[Sequence[torch.Tensor]], dict[str, torch.Tensor]]
FAKE_DEVICE_NAME = "infless fake GPU"
GRAPH_WARMUP_ITERATIONS = 3  # on a side stream before capture, as torch's CUDA graph docs ask
MPS_KEYS = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")


class DeviceAlreadyInitialised(RuntimeError):
    """CUDA was initialised in this process before its placement's environment was set."""


class DeviceGraph(Protocol):
    """One captured forward at fixed input shapes: replay recomputes into the same outputs."""

    def capture(
        self, compute: Compute, static_inputs: Sequence[torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """Capture `compute(static_inputs)`; its outputs, which every replay rewrites."""
        ...

    def replay(self) -> None: ...


class DeviceRuntime(Protocol):
    @property
    def device(self) -> torch.device: ...

    def initialised(self) -> bool:
        """Whether CUDA was initialised in this process already (its env would not apply)."""
        ...

    def env(self, placement: GpuPlacement) -> dict[str, str]: ...

    def warm_up_libraries(self) -> str:
        """Create the context and warm the math libraries; the device's name."""
        ...

    def host_buffer(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """A host buffer the device copies from and into asynchronously (pinned)."""
        ...

    def to_device(self, module: nn.Module) -> nn.Module:
        """The module with its weights copied to the device (a private copy)."""
        ...

    def synchronize(self) -> None: ...

    def new_graph(self) -> DeviceGraph: ...

    def keeps_graph(self, eager_ms: float, replay_ms: float) -> bool:
        """Whether a batch size is served by its graph, given both measured times."""
        ...

    def allocated_bytes(self) -> int:
        """Device memory in this process's tensors."""
        ...

    def reserved_bytes(self) -> int:
        """Device memory this process's allocator holds."""
        ...

    def release(self) -> None:
        """Give cached, unused device memory back (after a model was dropped)."""
        ...


def cuda_env(placement: GpuPlacement) -> dict[str, str]:
    """The CUDA environment of a worker at `placement` (pure). Only its device is visible,
    so it computes on `cuda:0`; under MPS it is a client of the device's daemon at its
    share; time-sliced (no pipe directory) it sets no MPS variable."""
    env = {"CUDA_VISIBLE_DEVICES": placement.uuid}
    if placement.mps_pipe_dir is not None:
        env["CUDA_MPS_PIPE_DIRECTORY"] = placement.mps_pipe_dir
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(placement.gpu_pct)
    return env


def apply_env(env: Mapping[str, str], environ: MutableMapping[str, str]) -> None:
    """Set `env` in `environ`, and drop inherited MPS variables `env` does not set: a worker
    meant to be time-sliced must not join a daemon named by its parent's environment."""
    for key in MPS_KEYS:
        if key not in env:
            environ.pop(key, None)
    environ.update(env)


def runtime_for(placement: GpuPlacement) -> DeviceRuntime:
    if placement.runtime == "fake":
        return FakeRuntime()
    return CudaRuntime()


_cuda: Any = torch.cuda  # some of its functions are untyped


def _cuda_initialised() -> bool:
    """torch's lazy initialisation ran here, or this process was forked from one where it
    had (CUDA does not survive fork: torch calls that a bad fork)."""
    in_bad_fork: Callable[[], bool] = getattr(_cuda, "_is_in_bad_fork", lambda: False)
    return bool(_cuda.is_initialized() or in_bad_fork())


def _full_fp32() -> None:
    """fp32 computes in IEEE fp32 (torch lets cuDNN convolutions use TF32 by default): an
    fp32 function answers as its CPU path does; reduced precision is what the bf16 variant
    is for. Through the `allow_tf32` flags: torch 2.13 reads them without warning, and they
    keep its op-less TF32 queries consistent (setting only the per-op `fp32_precision`
    flags makes those queries raise)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


class CudaRuntime:
    """The worker's one visible CUDA device, `cuda:0`."""

    def __init__(self, is_initialised: Callable[[], bool] = _cuda_initialised) -> None:
        self._is_initialised = is_initialised  # injectable: tests refuse without a GPU
        self._device = torch.device("cuda", 0)

    @property
    def device(self) -> torch.device:
        return self._device

    def initialised(self) -> bool:
        return self._is_initialised()

    def env(self, placement: GpuPlacement) -> dict[str, str]:
        return cuda_env(placement)

    def warm_up_libraries(self) -> str:
        _full_fp32()
        _cuda.init()
        torch.cuda.set_device(self._device)
        dtypes = [torch.float32, torch.float16]
        if torch.cuda.is_bf16_supported():
            dtypes.append(torch.bfloat16)
        for dtype in dtypes:
            images = torch.ones((2, 3, 16, 16), dtype=dtype, device=self._device)
            kernel = torch.ones((8, 3, 3, 3), dtype=dtype, device=self._device)
            torch.nn.functional.conv2d(images, kernel, padding=1)  # cuDNN's handle
            matrix = torch.ones((64, 64), dtype=dtype, device=self._device)
            torch.matmul(matrix, matrix)  # cuBLAS's handle and workspace
        staged = self.host_buffer((64, 64), torch.float32).fill_(1.0)  # the pinned allocator
        staged.to(self._device, non_blocking=True)
        torch.cuda.synchronize(self._device)
        return str(torch.cuda.get_device_name(self._device))

    def host_buffer(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=dtype, pin_memory=True)

    def to_device(self, module: nn.Module) -> nn.Module:
        return module.to(self._device)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self._device)

    def new_graph(self) -> DeviceGraph:
        return CudaGraph()

    def keeps_graph(self, eager_ms: float, replay_ms: float) -> bool:
        return replay_ms < eager_ms

    def allocated_bytes(self) -> int:
        return int(torch.cuda.memory_allocated(self._device))

    def reserved_bytes(self) -> int:
        return int(torch.cuda.memory_reserved(self._device))

    def release(self) -> None:
        torch.cuda.empty_cache()


class CudaGraph:
    """`torch.cuda.CUDAGraph` as torch's docs capture it: warm up on a side stream (lazy
    initialisation and allocations happen there, not in the graph), then capture."""

    def __init__(self) -> None:
        self._graph: Any = None

    def capture(
        self, compute: Compute, static_inputs: Sequence[torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        side = _cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(GRAPH_WARMUP_ITERATIONS):
                compute(static_inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = compute(static_inputs)
        self._graph = graph
        return outputs

    def replay(self) -> None:
        self._graph.replay()


class FakeRuntime:
    """The fake device: the CPU, through the GPU worker's code path (module docstring)."""

    def __init__(self) -> None:
        self._device = torch.device("cpu")
        self._weights_bytes = 0

    @property
    def device(self) -> torch.device:
        return self._device

    def initialised(self) -> bool:
        return False  # there is no CUDA here to have been initialised

    def env(self, placement: GpuPlacement) -> dict[str, str]:
        return {}

    def warm_up_libraries(self) -> str:
        return FAKE_DEVICE_NAME

    def host_buffer(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=dtype)

    def to_device(self, module: nn.Module) -> nn.Module:
        tensors = (*module.parameters(), *module.buffers())
        self._weights_bytes += sum(t.numel() * t.element_size() for t in tensors)
        return module  # already "on" the device: the CPU

    def synchronize(self) -> None:
        return None

    def new_graph(self) -> DeviceGraph:
        return FakeGraph()

    def keeps_graph(self, eager_ms: float, replay_ms: float) -> bool:
        # a fake replay runs eagerly: its time says nothing about a graph's. Keeping every
        # graph runs the replay, pad and slice branches wherever the fake device is used.
        return True

    def allocated_bytes(self) -> int:
        return self._weights_bytes

    def reserved_bytes(self) -> int:
        return self._weights_bytes

    def release(self) -> None:
        self._weights_bytes = 0


class FakeGraph:
    """Records the static buffers at capture; a replay runs the computation eagerly on the
    static inputs and copies the results into the static outputs, as a CUDA graph would."""

    def __init__(self) -> None:
        self.compute: Compute | None = None
        self.static_inputs: list[torch.Tensor] = []
        self.static_outputs: dict[str, torch.Tensor] = {}
        self.replays = 0

    def capture(
        self, compute: Compute, static_inputs: Sequence[torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        self.compute = compute
        self.static_inputs = list(static_inputs)
        self.static_outputs = {n: t.clone() for n, t in compute(self.static_inputs).items()}
        return self.static_outputs

    def replay(self) -> None:
        if self.compute is None:
            raise RuntimeError("replay of a graph that was never captured")
        for name, value in self.compute(self.static_inputs).items():
            self.static_outputs[name].copy_(value)
        self.replays += 1
