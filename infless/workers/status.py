"""What the starters say about their workers: typed, frozen views, and the `StarterStatus`
port that returns them.

Status is not starting. The start protocol (`starting.InstanceStarter`) only starts,
retires and releases; this read-only port says where an instance's worker came from and
how it is confined (`describe`), what a starter knows of a function's package
(`describe_function`), which workers it keeps warm without an instance (`kept`) and the
template processes it forks from (`templates`). The same layers implement both ports.

Each view is a msgspec struct whose JSON keys are the camelCase of its fields. A field a
layer does not fill stays `UNSET` and is left out of the JSON. Only the gateway renders
views. Gateway side: never imports torch, and reads nothing: the starters fill these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import msgspec
from msgspec import UNSET, UnsetType

if TYPE_CHECKING:
    from pathlib import Path

# Plain data inside a view (Any, not object: the OpenAPI schema of Any is "anything")
History = list[dict[str, Any]]  # a worker's starts, transformations and idle spells
Facts = dict[str, Any]  # a confinement's own description (cores, a limit and its use)


class GpuWorkerView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The device a GPU instance computes on, and how its worker got there."""

    index: int
    uuid: str
    name: str
    share_pct: int
    sharing: str  # "mps" or "time-sliced"
    started_from: str  # "standby", "reused" or "fresh"
    weights: str  # "tier", or why they are a private copy
    graph_batch_sizes: list[int]
    memory_bytes: int


class WorkerView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """An instance's worker as its starters see it; each layer fills its own fields."""

    confinement: Facts | UnsetType | None = UNSET  # its cores' cgroup (None: none)
    memory_limit: Facts | UnsetType | None = UNSET
    pids_limit: Facts | UnsetType | None = UNSET
    template: str | UnsetType | None = UNSET  # the template it was forked from
    gpu: GpuWorkerView | UnsetType = UNSET  # the GPU layer's
    node: str | UnsetType = UNSET  # a cluster node's
    endpoint: str | UnsetType | None = UNSET


class StructureView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Whether a package's model structure is known, and whether it can be transformed."""

    described: bool
    transformable: bool | None
    reason: str | UnsetType | None = UNSET
    operations: int | UnsetType = UNSET
    graph_nodes: int | UnsetType = UNSET


class PackageView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What the starters know of a function's package (transformation: its structure)."""

    structure: StructureView | UnsetType = UNSET


class IdleWorkerView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A worker kept idle after its instance went, to be transformed into another."""

    worker_id: str = msgspec.field(name="id")
    function: str  # the function it served last
    state: str = "idle"
    pid: int | None
    idle_s: float
    history: History
    server: str = ""  # filled by the server set


class StandbyWorkerView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A CUDA worker kept on standby on a device, its context made, no model yet."""

    worker_id: str = msgspec.field(name="id")
    function: str = ""
    state: str = "standby"
    pid: int | None
    device: str  # the device's uuid
    gpu_index: int
    share_pct: int
    mps: bool
    device_name: str
    init_ms: float
    reused_by: str | None  # whose instance it served (None: fresh)
    standby_s: float
    server: str = ""  # filled by the server set


KeptWorkerView = IdleWorkerView | StandbyWorkerView


class TemplateView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A per-model template process instances are forked from."""

    template_id: str = msgspec.field(name="id")
    pid: int
    tenant: str
    package: str
    alive: bool
    start_ms: float
    build_ms: float
    attach_ms: float
    warmup_ms: float
    instances: list[str]  # the instances forked from it that still run


class StarterStatus(Protocol):
    """The read-only status port of a starter (see the module docstring)."""

    def describe(self, instance_id: str) -> WorkerView:
        """Where the instance's worker came from and how it is confined."""
        ...

    def describe_function(self, package_dir: Path) -> PackageView:
        """What this starter knows of a function's package."""
        ...

    def kept(self) -> list[KeptWorkerView]:
        """The workers it keeps warm without an instance (idle, standby)."""
        ...

    def templates(self) -> list[TemplateView]: ...
