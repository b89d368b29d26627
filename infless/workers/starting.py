"""Starting instances: the `InstanceStarter` port, what it is given and what it returns.

The pool asks a starter to take one instance from nothing to a worker with its model loaded
and its batch sizes timed (`boot`), to take back a worker whose instance is no longer wanted
(`retire`: keep it warm for a later start, or stop it) and to let go of what an instance held
once it is gone (`release`). Starters form a chain behind this one protocol: a layer handles
the starts it knows how to make better and hands the rest to the layer inside it
(`LayeredStarter`) — on this machine the GPU starter (CUDA workers from a warm standby pool,
weights from the GPU tier) around the transforming starter (Optimus: an idle worker turned
into another model) around the process starter (forked from a template or the zygote). The
pool calls only this protocol; whoever keeps idle or standby workers owns them.
A starter raises on any failure; the pool decides what a failure means.

What a starter says about its workers is a separate, read-only port
(`status.StarterStatus`); a `Starter` is a layer that implements both.
Gateway side: never imports torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from infless.types import InstanceConfig, WorkerRuntime
from infless.workers import protocol as p
from infless.workers.handle import WorkerHandle
from infless.workers.status import (
    History,
    KeptWorkerView,
    PackageView,
    StarterStatus,
    TemplateView,
    WorkerView,
)

if TYPE_CHECKING:
    from pathlib import Path


@dataclass(frozen=True, slots=True)
class BootOrder:
    """Everything a starter needs to know about the instance it starts."""

    instance_id: str
    tenant: str
    package_dir: Path
    config: InstanceConfig
    cpu_ids: tuple[int, ...]
    warmup_batch_sizes: tuple[int, ...]
    # the weights go through the shared tensor store (a TorchScript or torch.export program
    # carries its own: it is loaded whole)
    shared_weights: bool = True
    # a plain module (no variant transform applied after loading): a worker built from
    # another plain module's may be transformed into it
    plain_module: bool = True
    on_death: Callable[[], None] = field(default=lambda: None, compare=False)
    function: str = ""  # the function whose logs the worker's output joins
    instance: str = ""  # the instance it serves (`instance_id` is the worker's: `<id>-r<n>`)
    runtime: WorkerRuntime = field(default_factory=WorkerRuntime)
    gpu_index: int | None = None  # the device holding `config.gpu_pct` (None: CPU only)


@dataclass(frozen=True, slots=True)
class RuntimeSupport:
    """Why a starter cannot give workers what a runtime asks for; None where it can."""

    memory_limit: str | None = None
    secrets: str | None = None


@dataclass(frozen=True, slots=True)
class Booted:
    handle: WorkerHandle
    ready: p.Ready
    start: p.StartBreakdown  # the worker's breakdown, with the spawn time filled in
    history: History = field(default_factory=list)  # how its worker came to serve it
    gpu_uuid: str | None = None  # the device a GPU instance computes on


@dataclass(frozen=True, slots=True)
class Retiring:
    """A worker whose instance is no longer wanted, its queue drained (`retire`)."""

    order: BootOrder  # the order it was (last) booted with
    handle: WorkerHandle
    history: History
    keep: bool  # False: stop it whatever the starter could keep (the pool is stopping)
    timeout_s: float  # how long a stop may take before SIGKILL


class InstanceStarter(Protocol):
    async def start(self) -> None: ...

    async def boot(self, order: BootOrder) -> Booted: ...

    async def retire(self, retiring: Retiring) -> bool:
        """Keep the worker warm for a later start (True: its store holds stay with it, the
        starter releases them when it lets the worker go) or stop it (False)."""
        ...

    async def release(self, instance_id: str) -> None: ...

    async def close(self) -> None: ...

    def deployed(self, package_dir: Path, tenant: str, plain_module: bool) -> None:
        """A function of this package was deployed (a starter may prepare for it)."""
        ...

    def holder_ids(self) -> list[str]: ...

    async def runtime_support(self, runtime: WorkerRuntime) -> RuntimeSupport: ...

    def death_cause(self, instance_id: str) -> str | None: ...


class Starter(InstanceStarter, StarterStatus, Protocol):
    """A layer of the chain: it starts instances, and it says what it keeps and how."""


class StarterDefaults:
    """What a starter that keeps no warm workers and prepares nothing answers."""

    async def retire(self, retiring: Retiring) -> bool:
        await retiring.handle.stop(retiring.timeout_s)
        return False

    def deployed(self, package_dir: Path, tenant: str, plain_module: bool) -> None:
        return None

    def describe_function(self, package_dir: Path) -> PackageView:
        return PackageView()

    def kept(self) -> list[KeptWorkerView]:
        return []


class LayeredStarter:
    """A layer of the chain: everything it does not handle goes to `inner`. Subclasses
    override the calls they take part in and call the inner starter for the rest."""

    def __init__(self, inner: Starter) -> None:
        self.inner = inner

    async def start(self) -> None:
        await self.inner.start()

    async def boot(self, order: BootOrder) -> Booted:
        return await self.inner.boot(order)

    async def retire(self, retiring: Retiring) -> bool:
        return await self.inner.retire(retiring)

    async def release(self, instance_id: str) -> None:
        await self.inner.release(instance_id)

    async def close(self) -> None:
        await self.inner.close()

    def deployed(self, package_dir: Path, tenant: str, plain_module: bool) -> None:
        self.inner.deployed(package_dir, tenant, plain_module)

    def holder_ids(self) -> list[str]:
        return self.inner.holder_ids()

    def describe(self, instance_id: str) -> WorkerView:
        return self.inner.describe(instance_id)

    def describe_function(self, package_dir: Path) -> PackageView:
        return self.inner.describe_function(package_dir)

    def kept(self) -> list[KeptWorkerView]:
        return self.inner.kept()

    def templates(self) -> list[TemplateView]:
        return self.inner.templates()

    async def runtime_support(self, runtime: WorkerRuntime) -> RuntimeSupport:
        return await self.inner.runtime_support(runtime)

    def death_cause(self, instance_id: str) -> str | None:
        return self.inner.death_cause(instance_id)
