"""The servers a pool runs instances on (`ServerSet`), and where a new uniform instance goes.

`Server` is one machine as the pool sees it: its starter, its core allocator and its
capacity. The starter is this machine's chain of processes, or a node agent's over Ray
(`infless.nodes`).

The planner places the autoscaler's instances itself (Algorithm 1 over every server's
`ServerView`). `choose_server` places the others: a person's count, a woken function, an
instance moved off a server that left. It prefers, in order:
1. a server with room for the instance;
2. the one running the fewest of the function's instances (they spread, so a node that
   leaves takes few of them);
3. the one that holds most of its tensors already (Tetris: cheaper to start there);
4. the one with the most free cores.

Read-only for status: the starters' views (`workers.status`) are gathered here per server.
Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import msgspec

from infless.cluster.cpus import CpuAllocator
from infless.control.snapshot import server_view
from infless.scaling.view import ServerView
from infless.types import WorkerRuntime
from infless.workers.starting import RuntimeSupport, Starter
from infless.workers.status import KeptWorkerView, PackageView, TemplateView, WorkerView

if TYPE_CHECKING:
    from pathlib import Path

    from infless.control.functions import DeployedFunction
    from infless.dataplane.instance import Instance

Affinity = Callable[[Iterable["DeployedFunction"]], Mapping[str, float]]

LOCAL_SERVER = "local"


@dataclass
class Server:
    server_id: str
    starter: Starter  # starts instances, and says what it keeps (its status port)
    allocator: CpuAllocator
    capacity_cpus: int
    gpu_pct: tuple[int, ...] = ()  # each GPU's schedulable share (100 each)
    describe: Mapping[str, object] = field(default_factory=dict)  # host, node id, ...
    affinity: Affinity | None = None  # per function: what the server holds of it already
    default_gpu_pct: int = 0  # the share of an unplanned instance here (0: no GPU)
    status: Callable[[], Mapping[str, object]] | None = None  # live facts (its GPUs)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a new unplanned entry goes: its server and, with a GPU share, its device."""

    server_id: str
    gpu_index: int | None = None
    gpu_pct: int = 0


def choose_device(free_gpu_pct: Sequence[int]) -> int | None:
    """The device with the most free share (ties: the lowest index); None without GPUs."""
    if not free_gpu_pct:
        return None
    return max(range(len(free_gpu_pct)), key=lambda i: (free_gpu_pct[i], -i))


def choose_server(
    servers: Sequence[ServerView], function: str, cpus: int, running: Mapping[str, int]
) -> str | None:
    """The server for one more instance of `function` with `cpus` cores (`running`: its
    instances per server); None when there is no server."""
    if not servers:
        return None
    best = max(
        servers,
        key=lambda s: (
            s.free_cpus >= cpus,
            -running.get(s.server_id, 0),
            s.affinity.get(function, 0.0),
            s.free_cpus,
            s.server_id,
        ),
    )
    return best.server_id


class ServerSet(dict[str, Server]):
    """The pool's servers by id, and what is asked of all of them together."""

    def __init__(self, servers: Iterable[Server] = ()) -> None:
        super().__init__((server.server_id, server) for server in servers)

    async def start(self) -> None:
        await asyncio.gather(*(server.starter.start() for server in self.values()))

    async def close(self) -> None:
        for server in self.values():
            await server.starter.close()

    def views(self, functions: Iterable[DeployedFunction]) -> tuple[ServerView, ...]:
        """Each server's capacity, what is free on it, and its affinity per function."""
        functions = list(functions)
        return tuple(
            server_view(
                functions,
                server.server_id,
                server.capacity_cpus,
                server.gpu_pct,
                sum(1 for load in server.allocator.load().values() if load == 0),
                None if server.affinity is None else server.affinity(functions),
            )
            for server in self.values()
        )

    def placer(
        self, function: DeployedFunction, functions: Iterable[DeployedFunction]
    ) -> Callable[[int], Placement]:
        """Where each new unplanned entry of `function` with `cpus` cores goes
        (`choose_server`) and, on a server with GPUs, its GPU share (the function's, else
        the server's default; 0 means CPU only) on the device with the most free share. An
        entry placed by the same placer counts as placed already. Server "" when there is
        none: it waits."""
        running: dict[str, int] = defaultdict(int)
        for wanted in function.desired.instances:
            running[wanted.server_id] += 1
        views: dict[str, ServerView] | None = None  # read once, at the first placement

        def place(cpus: int) -> Placement:
            nonlocal views
            if views is None:
                views = {v.server_id: v for v in self.views(functions)}
            chosen = choose_server(list(views.values()), function.name, cpus, running)
            if chosen is None:
                return Placement("")
            running[chosen] += 1
            view = views[chosen]
            server = self[chosen]
            wanted_pct = function.spec.gpu_pct
            gpu_pct = server.default_gpu_pct if wanted_pct is None else wanted_pct
            device = choose_device(view.free_gpu_pct) if gpu_pct > 0 else None
            free_gpu = list(view.free_gpu_pct)
            if device is None:
                gpu_pct = 0
            else:
                free_gpu[device] -= gpu_pct
            views[chosen] = replace(
                view, free_cpus=view.free_cpus - cpus, free_gpu_pct=tuple(free_gpu)
            )
            return Placement(chosen, device, gpu_pct)

        return place

    def describe_worker(self, instance: Instance) -> WorkerView:
        """Where the instance's worker came from and how it is confined (its server's)."""
        server = self.get(instance.server_id)
        return WorkerView() if server is None else server.starter.describe(instance.worker_id)

    def templates(self) -> list[TemplateView]:
        return [t for s in self.values() for t in s.starter.templates()]

    def starter_holders(self) -> list[str]:
        """Store holders the starters keep besides the instances (templates, kept workers)."""
        return [h for s in self.values() for h in s.starter.holder_ids()]

    def kept(self) -> list[KeptWorkerView]:
        """Every worker a starter keeps warm without an instance (idle, standby), with its
        server."""
        return [
            msgspec.structs.replace(worker, server=server.server_id)
            for server in self.values()
            for worker in server.starter.kept()
        ]

    def describe_function(self, package_dir: Path) -> PackageView:
        """What the starters know of a function's package: the first server's that knows
        something (the local server comes first)."""
        for server in self.values():
            described = server.starter.describe_function(package_dir)
            if described != PackageView():
                return described
        return PackageView()

    async def runtime_support(self, runtime: WorkerRuntime) -> RuntimeSupport:
        """What of `runtime` some server cannot give (a function's instances may go to any)."""
        answers = await asyncio.gather(*(s.starter.runtime_support(runtime) for s in self.values()))
        memory = next((a.memory_limit for a in answers if a.memory_limit), None)
        secrets = next((a.secrets for a in answers if a.secrets), None)
        return RuntimeSupport(memory, secrets)
