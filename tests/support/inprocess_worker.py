"""An in-process WorkerHandle for unit tests: runs a Python function instead of a model.

Batches can be held (to build queues) and the worker can be made to die mid-batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np

from infless.workers import protocol as p
from infless.workers.handle import WorkerDied

Model = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def doubling_model(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"y": inputs["x"] * 2}


class InProcessWorkerHandle:
    def __init__(self, model: Model = doubling_model, exec_ms: float = 5.0) -> None:
        self.pid = 0
        self._model = model
        self._exec_ms = exec_ms
        self._alive = True
        self.gate = asyncio.Event()
        self.gate.set()
        self.batch_sizes: list[int] = []
        self._running: asyncio.Future[None] | None = None
        self.on_death: Callable[[], None] | None = None

    @property
    def alive(self) -> bool:
        return self._alive

    async def load(self, request: p.LoadModel, timeout_s: float) -> p.Ready:
        exec_ms = dict.fromkeys(request.warmup_batch_sizes, self._exec_ms)
        return p.Ready(pid=0, exec_ms=exec_ms, start=p.StartBreakdown())

    async def run_batch(self, inputs: dict[str, p.TensorData]) -> p.BatchResult:
        if not self._alive:
            raise WorkerDied("in-process worker is dead")
        arrays = {
            name: np.frombuffer(t.data, dtype=t.dtype).reshape(t.shape)
            for name, t in inputs.items()
        }
        self.batch_sizes.append(next(iter(arrays.values())).shape[0])
        running: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._running = running
        gate: asyncio.Future[bool] = asyncio.ensure_future(self.gate.wait())
        waiters: list[asyncio.Future[object]] = [gate, running]  # type: ignore[list-item]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        gate.cancel()
        if not self._alive:
            raise WorkerDied("in-process worker died mid-batch")
        outputs = {
            name: p.TensorData(str(a.dtype), list(a.shape), a.tobytes())
            for name, a in self._model(arrays).items()
        }
        return p.BatchResult(batch_id=len(self.batch_sizes), outputs=outputs, exec_ms=self._exec_ms)

    def die(self) -> None:
        self._alive = False
        if self._running is not None and not self._running.done():
            self._running.set_result(None)

    async def ping(self, timeout_s: float) -> p.Pong:
        return p.Pong(nonce=0)

    async def stop(self, timeout_s: float) -> None:
        self._alive = False
