"""A model served on a device: pinned staging buffers, CUDA graphs per batch size, pad and slice.

Worker side (imports torch). `DeviceModel` is a `LoadedModel` whose `forward` computes on its
runtime's device (`gpu_runtime`); so do `run` and the handler path, `serve`. It computes in
one of two ways:

- eager: each input is copied into a pinned host buffer, kept per (input, shape, dtype) and
  reused (`HostBuffers`, a bounded LRU), then sent with `.to(device, non_blocking=True)`.
  The outputs come back into pinned buffers the same way. One synchronise per batch.
- graphs (`capture_batch`; the warm-up keeps those whose replay measured faster): a batch of
  n rows replays the graph of the smallest captured batch size >= n (`graph_size_for`). Its
  rows are copied into the graph's static inputs, and the rows after them are zeros; the
  outputs are sliced back to n rows. Padding is sound because rows never interact in
  inference: every module is in eval mode, so there are no batch statistics.

Outputs are returned as arrays the caller owns (copies), because the staging buffers are
reused by the next batch. Everything runs under `torch.inference_mode()`.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from infless.weights.attach import torch_dtype
from infless.workers import protocol as p
from infless.workers.handling import Arrays
from infless.workers.model import LoadedModel

if TYPE_CHECKING:
    from infless.handlers import Handler
    from infless.models.package import PackageManifest
    from infless.workers.gpu_runtime import DeviceGraph, DeviceRuntime

MAX_HOST_BUFFERS = 64  # pinned memory is the OS's to lend: shapes seen long ago give it back


class HostBuffers:
    """Pinned host buffers by (role, name, shape, dtype), reused batch after batch, at most
    `capacity` of them (least recently used dropped first)."""

    def __init__(self, runtime: DeviceRuntime, capacity: int = MAX_HOST_BUFFERS) -> None:
        self._runtime = runtime
        self._capacity = capacity
        self._buffers: OrderedDict[tuple[object, ...], torch.Tensor] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buffers)

    def get(self, role: str, name: str, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        key = (role, name, tuple(shape), dtype)
        buffer = self._buffers.get(key)
        if buffer is None:
            buffer = self._runtime.host_buffer(shape, dtype)
            self._buffers[key] = buffer
            while len(self._buffers) > self._capacity:
                self._buffers.popitem(last=False)
        else:
            self._buffers.move_to_end(key)
        return buffer

    def clear(self) -> None:
        self._buffers.clear()


def graph_size_for(rows: int, sizes: Sequence[int]) -> int | None:
    """The smallest captured batch size (`sizes`, ascending) that holds `rows`, or None."""
    at = bisect.bisect_left(sizes, rows)
    return sizes[at] if at < len(sizes) else None


class CapturedBatch:
    """One graph at one batch size: its static device inputs and outputs, and the pinned host
    buffers that feed and drain them."""

    def __init__(
        self,
        runtime: DeviceRuntime,
        graph: DeviceGraph,
        batch_size: int,
        inputs: dict[str, tuple[torch.Tensor, torch.Tensor]],  # name -> (host, static device)
        outputs: dict[str, tuple[torch.Tensor, torch.Tensor]],  # name -> (static device, host)
    ) -> None:
        self.batch_size = batch_size
        self.graph = graph
        self._runtime = runtime
        self._inputs = inputs
        self._outputs = outputs

    def fits(self, arrays: Arrays) -> bool:
        """Whether these inputs (any number of rows) have the graph's row shape and dtype."""
        for name, (host, _) in self._inputs.items():
            array = arrays.get(name)
            if array is None or array.shape[1:] != tuple(host.shape[1:]):
                return False
            if torch_dtype(array.dtype.name) != host.dtype:
                return False
        return True

    def run(self, arrays: Arrays) -> Arrays:
        """Pad the rows to the graph's batch with zeros, replay, slice the outputs back."""
        rows = _rows(arrays)
        with torch.inference_mode():  # the static tensors were made in it
            for name, (host, static) in self._inputs.items():
                staged = host.numpy()
                staged[:rows] = arrays[name]
                staged[rows:] = 0
                static.copy_(host, non_blocking=True)
            self.graph.replay()
            for static, host in self._outputs.values():
                host.copy_(static, non_blocking=True)
            self._runtime.synchronize()
        return {name: host.numpy()[:rows].copy() for name, (_, host) in self._outputs.items()}


class DeviceModel(LoadedModel):
    """A loaded model computing on `runtime`'s device (module docstring)."""

    def __init__(
        self,
        manifest: PackageManifest,
        module: Any,
        handler: Handler | None,
        runtime: DeviceRuntime,
        weights_from_tier: bool,
    ) -> None:
        super().__init__(manifest, module, handler)
        self.runtime = runtime
        self.weights_from_tier = weights_from_tier
        self._staging = HostBuffers(runtime)
        self._graphs: dict[int, CapturedBatch] = {}
        self._graph_sizes: list[int] = []  # ascending

    @property
    def graph_batch_sizes(self) -> list[int]:
        return list(self._graph_sizes)

    @property
    def fixed_shapes(self) -> bool:
        """Whether every input has a fixed shape past the batch (graphs need that)."""
        return all(d >= 0 for spec in self.manifest.inputs for d in spec.shape)

    def input_arrays(self, inputs: dict[str, p.TensorData]) -> Arrays:
        # read-only views are enough: the bytes are copied once, into the staging buffers
        return {
            name: np.frombuffer(t.data, dtype=t.dtype).reshape(t.shape)
            for name, t in inputs.items()
        }

    def forward(self, arrays: Arrays) -> Arrays:
        with torch.inference_mode():
            size = graph_size_for(_rows(arrays), self._graph_sizes)
            if size is not None and self._graphs[size].fits(arrays):
                return self._graphs[size].run(arrays)
            return self.forward_eager(arrays)

    def forward_eager(self, arrays: Arrays) -> Arrays:
        """The batch without graphs: staged in, computed on the device, staged out."""
        with torch.inference_mode():
            device = self.runtime.device
            tensors = []
            for name in self.input_names:
                array = arrays[name]
                host = self._staging.get("in", name, array.shape, torch_dtype(array.dtype.name))
                np.copyto(host.numpy(), array)
                tensors.append(host.to(device, non_blocking=True))
            outputs = self.compute(tensors)
            staged = {}
            for name in self.output_names:
                value = outputs[name]
                host = self._staging.get("out", name, value.shape, value.dtype)
                host.copy_(value, non_blocking=True)
                staged[name] = host
            self.runtime.synchronize()
            return {name: host.numpy().copy() for name, host in staged.items()}

    def capture_batch(self, batch_size: int) -> CapturedBatch:
        """A graph of the forward at `batch_size` (example shapes); raises what capture
        raised when an operation cannot be captured. Not used until `keep_graph`."""
        with torch.inference_mode():
            device = self.runtime.device
            inputs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
            for spec in self.manifest.inputs:
                shape = (batch_size, *spec.shape)
                dtype = torch_dtype(spec.dtype)
                static = torch.zeros(shape, dtype=dtype, device=device)
                inputs[spec.name] = (self.runtime.host_buffer(shape, dtype), static)
            graph = self.runtime.new_graph()
            static_inputs = [inputs[name][1] for name in self.input_names]
            results = graph.capture(self.compute, static_inputs)
            outputs = {
                name: (
                    results[name],
                    self.runtime.host_buffer(results[name].shape, results[name].dtype),
                )
                for name in self.output_names
            }
            self.runtime.synchronize()
        return CapturedBatch(self.runtime, graph, batch_size, inputs, outputs)

    def keep_graph(self, captured: CapturedBatch) -> None:
        self._graphs[captured.batch_size] = captured
        self._graph_sizes = sorted(self._graphs)

    def release(self) -> None:
        """Drop the module, graphs and buffers (the device memory they hold goes back to the
        allocator once nothing else refers to them)."""
        self._graphs.clear()
        self._graph_sizes = []
        self._staging.clear()
        self.module = None


def _rows(arrays: Arrays) -> int:
    return int(next(iter(arrays.values())).shape[0])
