"""In-process workers for tests: a `WorkerHandle` that runs a Python callable, not a process.

It also holds the `InstanceStarter` that hands these workers out. Unit tests use them to drive
the real pool, router, queues and instances without processes. A batch takes
`latency_ms(b, c)` on the injected clock; with a fake clock, time moves only when the test
advances it. A batch can be held (`gate`), and a worker can be made to die mid-batch (`die`).

A test double: it lives under tests/, and nothing in `infless/` imports it. Never imports torch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from infless.clock import Clock
from infless.handlers import Handler
from infless.types import TensorSpec, WorkerRuntime
from infless.workers import protocol as p
from infless.workers.handle import BatchError, WorkerDied
from infless.workers.handling import serve_requests
from infless.workers.starting import Booted, BootOrder, RuntimeSupport, StarterDefaults
from infless.workers.status import TemplateView, WorkerView

Arrays = dict[str, np.ndarray]
Forward = Callable[[Arrays], Arrays]
LatencyMs = Callable[[int, int], float]  # (batch size, cores) -> milliseconds


def doubling(inputs: Arrays) -> Arrays:
    """A stand-in model: every output is its input times two (`y` from `x`)."""
    return {"y": inputs["x"] * 2}


def constant_ms(value_ms: float) -> LatencyMs:
    return lambda batch_size, cpus: value_ms


@dataclass(frozen=True, slots=True)
class InProcessModel:
    forward: Forward = doubling
    latency_ms: LatencyMs = field(default=constant_ms(5.0))
    handler: Handler | None = None  # for requests: preprocess, this forward, postprocess
    input_specs: tuple[TensorSpec, ...] = (TensorSpec("x", "float32", (2,)),)


def _arrays(inputs: dict[str, p.TensorData]) -> Arrays:
    return {n: np.frombuffer(t.data, dtype=t.dtype).reshape(t.shape) for n, t in inputs.items()}


class InProcessWorkerHandle:
    """A worker that runs `model.forward` in the gateway's own process."""

    def __init__(
        self,
        model: InProcessModel | None = None,
        clock: Clock | None = None,
        cpus: int = 1,
        on_death: Callable[[], None] | None = None,
    ) -> None:
        self.pid = 0
        self._model = model or InProcessModel()
        self._clock = clock
        self._cpus = cpus
        self._on_death = on_death
        self._alive = True
        self._interrupt: asyncio.Future[None] | None = None
        self.gate = asyncio.Event()  # cleared: batches wait until it is set again
        self.gate.set()
        self.batch_sizes: list[int] = []

    @property
    def alive(self) -> bool:
        return self._alive

    def _exec_ms(self, batch_size: int) -> float:
        return self._model.latency_ms(batch_size, self._cpus)

    async def load(self, request: p.LoadModel, timeout_s: float) -> p.Ready:
        self._cpus = request.cpus
        exec_ms = {b: self._exec_ms(b) for b in request.warmup_batch_sizes}
        return p.Ready(pid=self.pid, exec_ms=exec_ms, start=p.StartBreakdown())

    async def _take(self, size: int) -> float:
        """Account for a batch of `size`: it takes its latency on the clock, or dies."""
        if not self._alive:
            raise WorkerDied("in-process worker is dead")
        self.batch_sizes.append(size)
        exec_ms = self._exec_ms(size)
        interrupt: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._interrupt = interrupt
        work = asyncio.ensure_future(self._work(exec_ms))
        await asyncio.wait([work, interrupt], return_when=asyncio.FIRST_COMPLETED)
        work.cancel()
        if not self._alive:
            raise WorkerDied("in-process worker died mid-batch")
        return exec_ms

    async def run_requests(self, requests: list[p.RawRequest]) -> p.RequestsResult:
        model = self._model
        if model.handler is None:
            raise BatchError("this in-process model has no handler")
        exec_ms = await self._take(len(requests))
        answers = serve_requests(model.handler, requests, model.forward, model.input_specs)
        return p.RequestsResult(len(self.batch_sizes), answers, exec_ms)

    async def run_batch(self, inputs: dict[str, p.TensorData]) -> p.BatchResult:
        arrays = _arrays(inputs)
        exec_ms = await self._take(next(iter(arrays.values())).shape[0])
        outputs = {
            name: p.TensorData(str(a.dtype), list(a.shape), np.ascontiguousarray(a).tobytes())
            for name, a in self._model.forward(arrays).items()
        }
        return p.BatchResult(batch_id=len(self.batch_sizes), outputs=outputs, exec_ms=exec_ms)

    async def _work(self, exec_ms: float) -> None:
        if self._clock is not None:
            await self._clock.sleep_until(self._clock.now() + exec_ms / 1000.0)
        await self.gate.wait()

    def die(self) -> None:
        """The worker is gone: a batch in flight fails with `WorkerDied`, `on_death` runs."""
        if not self._alive:
            return
        self._alive = False
        if self._interrupt is not None and not self._interrupt.done():
            self._interrupt.set_result(None)
        if self._on_death is not None:
            self._on_death()

    async def ping(self, timeout_s: float) -> p.Pong:
        return p.Pong(nonce=0)

    def rebind_death(self, on_death: Callable[[], None]) -> None:
        self._on_death = on_death

    async def stop(self, timeout_s: float) -> None:
        self._alive = False


class InProcessStarter(StarterDefaults):
    """Starts in-process workers; `model_for` picks each instance's model from its order.

    Runtimes (environment, secrets, memory limits) are accepted as `support` says and not
    applied: `orders` keeps every boot order for tests to read them."""

    def __init__(
        self,
        clock: Clock,
        model_for: Callable[[BootOrder], InProcessModel] = lambda order: InProcessModel(),
        start_s: float = 0.0,
        support: RuntimeSupport | None = None,
    ) -> None:
        self._clock = clock
        self._model_for = model_for
        self._start_s = start_s  # how long a start takes on the clock
        self._support = support or RuntimeSupport()
        self.handles: dict[str, InProcessWorkerHandle] = {}
        self.orders: list[BootOrder] = []
        self.death_causes: dict[str, str] = {}  # set by tests: what `death_cause` answers
        self.boots = 0

    async def start(self) -> None:
        return None

    async def boot(self, order: BootOrder) -> Booted:
        self.boots += 1
        self.orders.append(order)
        if self._start_s > 0:
            await self._clock.sleep_until(self._clock.now() + self._start_s)
        handle = InProcessWorkerHandle(
            self._model_for(order), self._clock, order.config.cpus, order.on_death
        )
        request = p.LoadModel(
            package_dir=str(order.package_dir),
            cpus=order.config.cpus,
            warmup_batch_sizes=list(order.warmup_batch_sizes),
        )
        ready = await handle.load(request, timeout_s=0.0)
        self.handles[order.instance_id] = handle
        return Booted(handle, ready, ready.start)

    async def release(self, instance_id: str) -> None:
        self.handles.pop(instance_id, None)

    async def close(self) -> None:
        return None

    def holder_ids(self) -> list[str]:
        return []

    def describe(self, instance_id: str) -> WorkerView:
        return WorkerView(confinement=None, memory_limit=None, template=None)

    def templates(self) -> list[TemplateView]:
        return []

    async def runtime_support(self, runtime: WorkerRuntime) -> RuntimeSupport:
        support = self._support
        return RuntimeSupport(
            support.memory_limit if runtime.memory_limit_bytes is not None else None,
            support.secrets if runtime.secrets else None,
        )

    def death_cause(self, instance_id: str) -> str | None:
        return self.death_causes.get(instance_id)
