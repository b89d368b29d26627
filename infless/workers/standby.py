"""Warm CUDA workers kept ready per GPU and share: the standby pool of the GPU starter.

CUDA cannot be forked once initialised, and a fresh process needs seconds to its first GPU
answer (torch import, CUDA context, libraries). So the pool keeps worker processes that have
done all of that already (`Standby`, then `StandbyReady`) and wait for a model. It keeps up to
`per_placement` of them for every placement it is asked to keep (a device, a share, whether
under MPS).

A start `take`s one, or gets None and starts fresh; the pool refills behind it. A worker
whose instance is retired comes back after `Unload` (`put`). It is kept while its placement
and tenant are short of workers, else stopped. It serves its own tenant only: unloading a
model does not undo everything a package may have done to its process, so a reused worker
never serves another tenant (a fresh one serves anyone). A standby worker that dies is
forgotten and replaced.

`to_launch` is the pure decision; `StandbyPool` is the shell. Gateway side: never imports
torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass

from infless.clock import Clock
from infless.workers import protocol as p
from infless.workers.handle import ProcessWorkerHandle
from infless.workers.status import StandbyWorkerView

log = logging.getLogger(__name__)

Launch = Callable[[str], Awaitable[ProcessWorkerHandle]]  # a new worker process, by id


def to_launch(
    wanted: Iterable[p.GpuPlacement],
    ready: Mapping[p.GpuPlacement, int],
    starting: Mapping[p.GpuPlacement, int],
    per_placement: int,
) -> dict[p.GpuPlacement, int]:
    """How many more workers to start per placement: each wanted placement up to
    `per_placement`, counting those ready and those starting. Pure."""
    launches = {}
    for placement in wanted:
        missing = per_placement - ready.get(placement, 0) - starting.get(placement, 0)
        if missing > 0:
            launches[placement] = missing
    return launches


@dataclass(slots=True)
class StandbyWorker:
    worker_id: str
    handle: ProcessWorkerHandle
    placement: p.GpuPlacement
    ready: p.StandbyReady
    since_s: float
    tenant: str | None = None  # whose instance it served (None: fresh, anyone's)

    def describe(self, now_s: float) -> StandbyWorkerView:
        return StandbyWorkerView(
            worker_id=self.worker_id,
            pid=self.handle.pid,
            device=self.placement.uuid,
            gpu_index=self.placement.index,
            share_pct=self.placement.gpu_pct,
            mps=self.placement.mps_pipe_dir is not None,
            device_name=self.ready.device_name,
            init_ms=round(self.ready.init_ms, 1),
            reused_by=self.tenant,
            standby_s=round(now_s - self.since_s, 3),
        )


class StandbyPool:
    def __init__(
        self,
        launch: Launch,
        clock: Clock,
        *,
        per_placement: int,
        timeout_s: float,
    ) -> None:
        self._launch = launch
        self._clock = clock
        self._per_placement = per_placement
        self._timeout_s = timeout_s
        self._wanted: dict[p.GpuPlacement, None] = {}  # ordered set
        self._ready: dict[p.GpuPlacement, list[StandbyWorker]] = {}
        self._starting: dict[p.GpuPlacement, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._closed = False
        self.launched = 0  # workers started (a measure of refills)
        self.failures: list[str] = []  # the last start failures, newest last

    # -- the decision's inputs -----------------------------------------------------------
    def want(self, placements: Iterable[p.GpuPlacement]) -> None:
        """Keep these placements filled from now on (and fill them now)."""
        for placement in placements:
            self._wanted.setdefault(placement, None)
        self.refill()

    def refill(self) -> None:
        """Start what the wanted placements lack (fresh workers), in the background."""
        if self._closed or self._per_placement <= 0:
            return
        ready = {k: sum(1 for w in v if w.tenant is None) for k, v in self._ready.items()}
        for placement, count in to_launch(
            self._wanted, ready, self._starting, self._per_placement
        ).items():
            for _ in range(count):
                self._starting[placement] = self._starting.get(placement, 0) + 1
                task = asyncio.create_task(self._start_one(placement), name="standby-start")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _start_one(self, placement: p.GpuPlacement) -> None:
        worker_id = f"standby-{placement.index}-{next(self._ids)}"
        try:
            worker = await self.start(worker_id, placement)
        except Exception as exc:  # reported, not retried at once: the next take refills
            log.warning(
                "standby worker for GPU %d at %d%% failed: %s",
                placement.index,
                placement.gpu_pct,
                exc,
            )
            self.failures = [*self.failures[-4:], f"{type(exc).__name__}: {exc}"]
            return
        finally:
            self._starting[placement] -= 1
        if self._closed:
            await worker.handle.stop(5.0)
            return
        self._keep(worker)

    async def start(self, worker_id: str, placement: p.GpuPlacement) -> StandbyWorker:
        """A new warm worker for `placement` now (a start that found none ready uses this
        too): launched, then warmed on its device. Raises when it cannot be."""
        handle = await self._launch(worker_id)
        self.launched += 1
        try:
            ready = await handle.standby(p.Standby(placement), self._timeout_s)
        except BaseException:
            handle.kill()
            await handle.stop(1.0)
            raise
        return StandbyWorker(worker_id, handle, placement, ready, self._clock.now())

    def _keep(self, worker: StandbyWorker) -> None:
        self._ready.setdefault(worker.placement, []).append(worker)
        worker.handle.rebind_death(lambda: self._died(worker))

    def _died(self, worker: StandbyWorker) -> None:
        workers = self._ready.get(worker.placement, [])
        if worker in workers:
            workers.remove(worker)
            log.warning("standby worker %s (pid %d) died", worker.worker_id, worker.handle.pid)
            self.refill()

    # -- taking and giving back ------------------------------------------------------------
    def take(
        self,
        placement: p.GpuPlacement,
        tenant: str,
        usable: Callable[[StandbyWorker], bool] = lambda _worker: True,
    ) -> StandbyWorker | None:
        """A ready worker of `placement` for `tenant`: one that served the tenant before
        (its kernels are warm) and is `usable` (a sandboxed one sees the package), else a
        fresh one (the longest waiting), else None. The placement is wanted from now on and
        refilled behind it."""
        self._wanted.setdefault(placement, None)
        workers = self._ready.get(placement, [])
        for eligible in (tenant, None):
            for worker in list(workers):
                if worker.tenant != eligible or (eligible is not None and not usable(worker)):
                    continue
                workers.remove(worker)
                if worker.handle.alive:
                    self.refill()
                    return worker
        self.refill()
        return None

    async def put(self, worker: StandbyWorker) -> bool:
        """A worker back from `worker.tenant`'s instance (unloaded): kept while that
        placement has fewer than `per_placement` such workers (True), else stopped."""
        mine = [w for w in self._ready.get(worker.placement, []) if w.tenant == worker.tenant]
        if self._closed or not worker.handle.alive or len(mine) >= self._per_placement:
            await worker.handle.stop(5.0)
            return False
        worker.since_s = self._clock.now()
        self._keep(worker)
        return True

    def next_id(self, placement: p.GpuPlacement) -> str:
        return f"standby-{placement.index}-{next(self._ids)}"

    # -- reading and closing ---------------------------------------------------------------
    def describe(self) -> list[StandbyWorkerView]:
        now = self._clock.now()
        return [w.describe(now) for workers in self._ready.values() for w in workers]

    def count(self, placement: p.GpuPlacement) -> int:
        """Ready workers of `placement` (fresh and reused)."""
        return len(self._ready.get(placement, []))

    async def close(self) -> None:
        """Stop every standby worker, and those still starting."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        workers = [w for ws in self._ready.values() for w in ws]
        self._ready.clear()
        for worker in workers:
            with contextlib.suppress(Exception):
                await worker.handle.stop(5.0)
