"""The cgroups the gateway puts each worker process in, before its model loads.

They hold its cores (cpuset and quota, else affinity: `cluster.cgroups`), its memory limit
(`cluster.memory`) and, for a tenant's sandboxed worker, its task limit (`cluster.pids`).

`Confinements.confine(order, pid)` makes one group of each kind per worker process, named
`<instance>-<pid>`: a replacement never meets its predecessor's groups. A function's
`limits.memory` is strict: no memory controller means the start fails, never a worker
without its limit. The sandbox's defaults (`[isolation] memory_bytes`, `pids_max`) apply
where the controllers exist; what they cannot enforce is reported by the isolation status,
not here. A per-model template gets the sandbox's limits too (`confine_template`).

`stop` ends a retired worker with whatever its package left behind. `release` lets an
instance's groups go. The worker moves out (a GPU worker returns to its standby pool),
whatever else is still in its pids group (processes its package left behind) is killed, and
the groups are removed. `death_cause` says when the kernel killed a worker for its memory
limit. Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from infless.cluster.memory import MemoryLimit, MemoryLimiter, format_mib
from infless.cluster.pids import PidsLimit, PidsLimiter
from infless.workers.handle import WorkerHandle, WorkerStartFailed

if TYPE_CHECKING:
    from infless.cluster.cgroups import Confinement, CpuConfiner
    from infless.workers.starting import BootOrder

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """What a sandboxed worker gets when its function asks for nothing (None: no limit)."""

    memory_bytes: int | None
    pids_max: int


class Confinements:
    def __init__(
        self,
        confiner: CpuConfiner | None,
        memory: MemoryLimiter | None,
        pids: PidsLimiter | None = None,
        sandbox: Callable[[], SandboxLimits | None] = lambda: None,
    ) -> None:
        self.confiner = confiner
        self.memory = memory
        self.pids = pids
        self.sandbox = sandbox  # the sandbox's limits while workers are sandboxed
        self._cpu: dict[str, Confinement] = {}
        self._memory: dict[str, MemoryLimit] = {}
        self._pids: dict[str, PidsLimit] = {}

    def confine(self, order: BootOrder, pid: int) -> None:
        name = f"{order.instance_id}-{pid}"
        if self.confiner is not None:
            try:
                cpu = self.confiner.confine(name, pid, order.cpu_ids, cores=order.config.cpus)
            except OSError as exc:  # best effort: the worker sets its affinity itself
                log.warning("could not confine %s: %s", order.instance_id, exc)
            else:
                self._cpu[order.instance_id] = cpu
        self._limit(order.instance_id, name, pid, order.runtime.memory_limit_bytes)

    def _limit(self, key: str, name: str, pid: int, limit_bytes: int | None) -> None:
        strict = limit_bytes is not None
        sandbox = self.sandbox()
        if limit_bytes is None and sandbox is not None:
            limit_bytes = sandbox.memory_bytes
            if self.memory is None or self.memory.unavailable is not None:
                limit_bytes = None  # reported by the isolation status
        if limit_bytes is not None:
            if self.memory is None:  # never run a limited function unlimited
                raise WorkerStartFailed("limits.memory: memory limits are off (workers.cgroups)")
            try:
                self._memory[key] = self.memory.limit(name, pid, limit_bytes)
            except OSError as exc:
                if strict:
                    raise WorkerStartFailed(
                        f"limits.memory: could not limit {key} to {format_mib(limit_bytes)}: {exc}"
                    ) from exc
                log.warning("could not limit the memory of %s: %s", key, exc)
        if sandbox is not None and self.pids is not None and self.pids.unavailable is None:
            try:
                self._pids[key] = self.pids.limit(name, pid, sandbox.pids_max)
            except OSError as exc:
                raise WorkerStartFailed(
                    f"isolation.pids_max: could not limit {key} to {sandbox.pids_max} tasks: {exc}"
                ) from exc

    def confine_template(self, template_id: str, pid: int) -> None:
        """A template loads its package's code: the sandbox's limits, as for a worker."""
        if self.sandbox() is not None:
            self._limit(template_id, f"{template_id}-{pid}", pid, None)

    async def stop(self, instance_id: str, handle: WorkerHandle, timeout_s: float) -> None:
        """Stop a retired worker: the processes its package left in its pids group go first
        (they hold the worker's socket: the gateway would wait for its EOF forever), then
        the worker is asked to exit; after `timeout_s` everything in the group is killed."""
        pids, limit = self.pids, self._pids.get(instance_id)
        if pids is None or limit is None:
            await handle.stop(timeout_s)
            return
        await asyncio.to_thread(pids.kill_strays, limit, handle.pid)
        stopping = asyncio.ensure_future(handle.stop(timeout_s))
        done, _ = await asyncio.wait({stopping}, timeout=timeout_s)
        if not done:  # new strays, or a worker that does not exit: the whole group goes
            await asyncio.to_thread(pids.kill_strays, limit)
        await stopping

    def death_cause(self, instance_id: str) -> str | None:
        """ "killed: out of memory (limit …)" when the kernel killed the worker for its limit."""
        limit = self._memory.get(instance_id)
        if limit is None or self.memory is None or self.memory.oom_kills(limit) == 0:
            return None
        return f"killed: out of memory (limit {format_mib(limit.limit_bytes)})"

    async def release(self, instance_id: str) -> None:
        """Remove the instance's groups (off the event loop: removing one waits for exiting
        tasks); its pids group first, killing the strays, before they can leave with the
        worker's other groups."""
        pids = self._pids.pop(instance_id, None)
        if pids is not None and self.pids is not None:
            await asyncio.to_thread(self.pids.release, pids)
        memory = self._memory.pop(instance_id, None)
        if memory is not None and self.memory is not None:  # before the CPU group (v2: shared)
            try:
                await asyncio.to_thread(self.memory.release, memory)
            except OSError as exc:
                log.warning("could not remove the memory cgroup of %s: %s", instance_id, exc)
        await self.release_cpu(instance_id)

    async def release_cpu(self, instance_id: str) -> None:
        cpu = self._cpu.pop(instance_id, None)
        if cpu is not None and self.confiner is not None:
            try:
                await asyncio.to_thread(self.confiner.release, cpu)
            except OSError as exc:
                log.warning("could not remove the cgroup of %s: %s", instance_id, exc)

    def describe(self, instance_id: str) -> dict[str, object]:
        cpu = self._cpu.get(instance_id)
        memory = self._memory.get(instance_id)
        pids = self._pids.get(instance_id)
        return {
            "confinement": None if cpu is None else cpu.describe(),
            "memoryLimit": None if memory is None else memory.describe(),
            "pidsLimit": None if pids is None else pids.describe(),
        }

    def close(self) -> None:
        """At shutdown: kill what is left in the workers' pids groups (a package's strays,
        outside the gateway's process tree), remove the groups and their parents."""
        pids = self.pids
        if pids is not None:
            for limit in self._pids.values():
                with contextlib.suppress(OSError):
                    pids.release(limit)
            self._pids.clear()
        if self.memory is not None:
            self.memory.remove_parent()
        if self.pids is not None:
            with contextlib.suppress(OSError):
                self.pids.remove_parent()
