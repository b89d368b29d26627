"""One instance: a worker, its batch queue, and the serving loop moving batches between them.

The runner takes a batch from the queue whenever the worker is free, packs the samples into
one tensor per input (raw bytes), awaits the worker's result and resolves each request's
future with its row. A function with a handler queues raw requests instead: its batch goes
to the worker as the bodies, and each request gets the handler's answer. When the worker
dies, the batch in flight and everything still queued are handed back to be retried
elsewhere: the instance posts `InstanceLost` and the control loop reroutes them. Every
RETUNE_EVERY_BATCHES batches it posts `RetuneDue` with its measured service times; the loop
decides new batch settings and hands them back (`retune`). The instance never calls the
control plane. The worker is reached only through its `WorkerHandle` (a process, or
in-process for tests). Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import enum
import math
from collections import deque
from collections.abc import Sequence

import numpy as np

from infless.clock import Clock
from infless.dataplane import admission
from infless.dataplane.events import InstanceLost, InstanceSink, RetuneDue
from infless.dataplane.latency import ExecModel
from infless.dataplane.policy import BatchSettings, rescaled_exec_ms
from infless.dataplane.queue import BatchQueue, QueueClosed
from infless.dataplane.request import Array, Outcome, Pending
from infless.errors import InferenceFailed
from infless.types import InstanceConfig, TensorSpec
from infless.workers import protocol as p
from infless.workers.handle import BatchError, WorkerDied, WorkerHandle

RECENT_BATCHES = 64  # served batches an instance remembers (size, service time)
RETUNE_EVERY_BATCHES = 32  # served batches between re-derivations of timeout and queue bound


class InstanceState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    DEAD = "dead"


def _tensors(pending: Pending) -> dict[str, Array]:
    inputs = pending.inputs
    assert not isinstance(inputs, p.RawRequest), "a batch is all raw requests or all tensors"
    return inputs


def pack_batch(specs: Sequence[TensorSpec], batch: Sequence[Pending]) -> dict[str, p.TensorData]:
    """Stack each input of the batch's samples into one tensor; variable dims are zero-padded."""
    packed: dict[str, p.TensorData] = {}
    for spec in specs:
        rows = [_tensors(pending)[spec.name] for pending in batch]
        if any(d < 0 for d in spec.shape) and len({r.shape for r in rows}) > 1:
            target = tuple(max(r.shape[i] for r in rows) for i in range(len(spec.shape)))
            stacked = np.zeros((len(rows), *target), dtype=spec.dtype)
            for i, row in enumerate(rows):
                region: tuple[int | slice, ...] = (i, *(slice(0, n) for n in row.shape))
                stacked[region] = row
        else:
            stacked = np.stack(rows)
        packed[spec.name] = p.TensorData(spec.dtype, list(stacked.shape), stacked.tobytes())
    return packed


def raw_requests(batch: Sequence[Pending]) -> list[p.RawRequest]:
    requests = []
    for pending in batch:
        raw = pending.inputs
        assert isinstance(raw, p.RawRequest), "a batch is all raw requests or all tensors"
        requests.append(raw)
    return requests


def _answer_outputs(answer: p.Answer) -> dict[str, Array]:
    return {} if answer.outputs is None else unpack_outputs(answer.outputs)


def unpack_outputs(outputs: dict[str, p.TensorData]) -> dict[str, Array]:
    return {
        name: np.frombuffer(t.data, dtype=t.dtype).reshape(t.shape) for name, t in outputs.items()
    }


class Instance:
    """A serving unit of one function with its own <b, c, g>, run by exactly one worker."""

    def __init__(
        self,
        instance_id: str,
        function_name: str,
        config: InstanceConfig,
        cpu_ids: tuple[int, ...],
        clock: Clock,
        input_specs: Sequence[TensorSpec],
        events: InstanceSink,
        worker_id: str = "",
        tail_quantile: float = 0.95,
        server_id: str = "local",
        gpu_index: int | None = None,
    ) -> None:
        self.instance_id = instance_id  # the desired state's entry it serves
        self.server_id = server_id  # the server its worker runs on
        self.gpu_index = gpu_index  # the server's GPU holding its share (None: CPU only)
        self.worker_id = worker_id or instance_id  # this worker's own (a replacement's differs)
        self.function_name = function_name
        self.config = config
        self.cpu_ids = cpu_ids
        self.state = InstanceState.STARTING
        self.handle: WorkerHandle | None = None
        self.queue: BatchQueue | None = None
        self.share_rps = 0.0
        self.served = 0
        self.failed = 0
        self.batches = 0
        self.exec_ms_total = 0.0  # the worker's forward time, summed over served batches
        self.exec_ms_by_batch: dict[int, float] = {}
        # its last served batches (size, service ms): what the live board plots
        self.recent_batches: deque[tuple[int, float]] = deque(maxlen=RECENT_BATCHES)
        self.start_breakdown = p.StartBreakdown()
        self.history: list[dict[str, object]] = []  # its worker's starts and transformations
        self.gpu: p.GpuReport | None = None  # a GPU instance's device, graphs and memory
        self.gpu_uuid: str | None = None  # the device holding its GPU share
        self.started_at_s = clock.now()
        self.ready_at_s: float | None = None
        self.last_active_s = self.started_at_s  # when it last finished a batch
        self.error: str | None = None
        self.worker_lost = False  # its worker went while it served (mark_dead)
        self._clock = clock
        self._tail_quantile = tail_quantile
        self._input_specs = tuple(input_specs)
        self._events = events
        self._runner: asyncio.Task[None] | None = None
        self._in_flight: list[Pending] = []
        self._dispatched_s = 0.0
        self.model: ExecModel | None = None  # service times at their tail, once ready
        # while starting: when it should be ready (the pool, from the function's measured
        # starts) and the service times of an instance like it (the router): what admission
        # may count on (`dataplane.starting`); None: unknown, nothing is counted
        self.expected_ready_s: float | None = None
        self.expected_model: ExecModel | None = None

    @property
    def pid(self) -> int:
        return self.handle.pid if self.handle is not None else 0

    @property
    def accepting(self) -> bool:
        queue = self.queue
        return self.state is InstanceState.READY and queue is not None and queue.has_room

    @property
    def busy(self) -> bool:
        return bool(self._in_flight) or self.queue_length > 0

    @property
    def idle(self) -> bool:
        """Ready with nothing running or queued: a request here is served as soon as it can
        be (admission never refuses it: refusing would also stop the measurements)."""
        return self.state is InstanceState.READY and not self.busy

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def queue_length(self) -> int:
        return 0 if self.queue is None else len(self.queue)

    def become_ready(
        self,
        handle: WorkerHandle,
        settings: BatchSettings,
        ready: p.Ready,
        *,
        start: p.StartBreakdown | None = None,
        history: Sequence[dict[str, object]] = (),
        gpu_uuid: str | None = None,
    ) -> None:
        """Start serving. `exec_ms_by_batch` starts from the warm-up timings and then follows
        the served batches (EWMA); every RETUNE_EVERY_BATCHES batches the instance posts
        them (`RetuneDue`) and the control loop may `retune` its batch timeout and queue
        bound (b stays: the instance was started for it).
        `start`: where the start's time went (the worker's breakdown, spawn included);
        `history`: how its worker came to serve it; `gpu_uuid`: the device of a GPU
        instance."""
        self.handle = handle
        self.exec_ms_by_batch = dict(ready.exec_ms)
        self.start_breakdown = start or ready.start
        self.history = list(history)
        self.gpu = ready.gpu
        self.gpu_uuid = gpu_uuid
        self.config = InstanceConfig(settings.batch_size, self.config.cpus, self.config.gpu_pct)
        self.share_rps = settings.batch_size * 1000.0 / max(settings.exec_ms, 0.1)
        measured = self.exec_ms_by_batch or {settings.batch_size: max(settings.exec_ms, 0.1)}
        self.model = ExecModel(measured, settings.batch_size, self._tail_quantile)
        self.queue = BatchQueue(self._clock, settings, self.model)
        self.state = InstanceState.READY
        self.ready_at_s = self.last_active_s = self._clock.now()
        self._runner = asyncio.create_task(self._run(), name=f"runner-{self.instance_id}")

    async def _run(self) -> None:
        queue, handle = self.queue, self.handle
        assert queue is not None
        assert handle is not None
        specs = self._input_specs
        while True:
            try:
                batch = await queue.next_batch()
            except QueueClosed:
                return
            dispatched_s = self._dispatched_s = self._clock.now()
            self._in_flight = batch
            try:
                if isinstance(batch[0].inputs, p.RawRequest):  # a function with a handler
                    result: p.BatchResult | p.RequestsResult = await handle.run_requests(
                        raw_requests(batch)
                    )
                else:
                    result = await handle.run_batch(pack_batch(specs, batch))
            except WorkerDied:
                self.mark_dead("worker exited mid-batch")
                return
            except BatchError as exc:
                self._in_flight = []
                self.failed += len(batch)
                error = InferenceFailed(f"model {self.function_name!r} failed on a batch: {exc}")
                for pending in batch:
                    pending.fail(error)
                continue
            self._in_flight = []
            self._resolve(batch, result, dispatched_s)

    def _resolve(
        self, batch: list[Pending], result: p.BatchResult | p.RequestsResult, dispatched_s: float
    ) -> None:
        size = len(batch)
        service_ms = (self._clock.now() - dispatched_s) * 1000.0
        if self.model is not None:
            self.model.observe(size, service_ms)
        self.recent_batches.append((size, service_ms))
        self.last_active_s = dispatched_s
        self.batches += 1
        self.served += size
        self.exec_ms_total += result.exec_ms
        exec_ms = self.exec_ms_by_batch = rescaled_exec_ms(
            self.exec_ms_by_batch, size, result.exec_ms
        )
        if self.batches % RETUNE_EVERY_BATCHES == 0:
            self._events.post(RetuneDue(self, dict(exec_ms)))
        if isinstance(result, p.RequestsResult):
            rows = [_answer_outputs(answer) for answer in result.answers]
            answers: list[p.Answer | None] = list(result.answers)
        else:
            outputs = unpack_outputs(result.outputs)
            rows = [{name: array[row] for name, array in outputs.items()} for row in range(size)]
            answers = [None] * size
        for pending, row_outputs, answer in zip(batch, rows, answers, strict=True):
            pending.resolve(
                Outcome(
                    outputs=row_outputs,
                    instance_id=self.instance_id,
                    batch_size=size,
                    queue_ms=(dispatched_s - pending.arrival_s) * 1000.0,
                    exec_ms=result.exec_ms,
                    cold_start_ms=pending.cold_start_ms,
                    service_ms=service_ms,
                    answer=answer,
                )
            )

    def finish_by_s(self, now_s: float) -> float:
        """When a request admitted now would have its batch served (`admission.finish_by_s`:
        the batch in flight at its tail, the full batches ahead at their mean, its own at
        its tail); infinite before the instance is ready."""
        model, queue = self.model, self.queue
        if model is None or queue is None:
            return math.inf
        in_flight = len(self._in_flight)
        return admission.finish_by_s(now_s, model, len(queue), in_flight, self._dispatched_s)

    def set_share(self, share_rps: float) -> None:
        """The dispatcher's weight for this instance (the planner's r_up)."""
        self.share_rps = share_rps

    def retune(self, settings: BatchSettings) -> None:
        """Batch with the control loop's new timeout and queue bound (while it serves)."""
        if self.state is InstanceState.READY and self.queue is not None:
            self.queue.update(settings)

    def start_failed(self, reason: str | None = None) -> None:
        """Its start failed or was cancelled: it never served, nothing is orphaned."""
        self.state = InstanceState.DEAD
        self.error = reason

    def mark_dead(self, reason: str) -> None:
        """The worker is gone: stop accepting and hand every unfinished request back."""
        if self.state is InstanceState.DEAD:
            return
        self.state = InstanceState.DEAD
        self.error = reason
        self.worker_lost = True
        orphans, self._in_flight = self._in_flight, []
        if self.queue is not None:
            orphans.extend(self.queue.take_all())
            self.queue.close()
        if self._runner is not None and self._runner is not asyncio.current_task():
            self._runner.cancel()
        self._events.post(InstanceLost(self, orphans))

    def stop_accepting(self) -> None:
        """Take no more requests (what is queued is still served): the start of a drain."""
        if self.state is InstanceState.READY:
            self.state = InstanceState.DRAINING
        if self.queue is not None:
            self.queue.close()

    async def drain(self, timeout_s: float, *, stop_worker: bool = True) -> None:
        """Stop accepting, finish what is queued, then stop the worker (unless its starter
        may keep it: `stop_worker` False leaves it running, its handle to the caller)."""
        self.stop_accepting()
        if self._runner is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._runner), timeout_s)
            except TimeoutError:
                self._runner.cancel()
        if self.handle is not None and stop_worker:
            await self.handle.stop(timeout_s)
        if self.state is not InstanceState.DEAD:
            self.state = InstanceState.DEAD
