"""The control plane's status views: typed, frozen records of what the status routes show.

Each view is a msgspec struct. Its JSON keys are the camelCase of its fields, in field
order, and they are the keys clients have always read (faas-cli, the live board, the
tests). A field left `UNSET` is not in the JSON: a failed function has no `owner`, a
function's detail adds its cold-start windows. Only the gateway renders views
(`msgspec.json.encode`), and the OpenAPI schemas are generated from these same structs.

`control.status` builds them from the pool's records. What the starters say about their
workers (templates, kept workers, an instance's confinement) is `workers.status`.
Pure types: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from infless.coldstart.views import ColdStartView
from infless.dataplane.views import AdmissionView
from infless.workers.status import (  # (plain data another owner keeps)
    Facts,
    GpuWorkerView,
    History,
    PackageView,
    StructureView,
)


class TensorView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    name: str
    dtype: str
    shape: list[int]


class SignatureView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    inputs: list[TensorView]
    outputs: list[TensorView]


class PlannerView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The autoscaler's last decision for a function it owns."""

    demand_rps: float
    regime: str
    unmet_rps: float
    unpriced: list[str]  # configurations no predictor could price


class FunctionStatusView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One function, as faas-cli decodes it (faas-provider's `FunctionStatus`) plus
    infless's own fields. Counters, `owner` and the detail's fields are UNSET for a
    function that failed to deploy, and the detail's fields outside `/system/function`."""

    name: str
    image: str
    namespace: str
    env_process: str
    env_vars: dict[str, str]
    labels: dict[str, str]
    annotations: dict[str, str]
    secrets: list[str]
    limits: dict[str, str] | None
    created_at: str | None
    latency_target_ms: float
    max_batch: int
    cpus_per_instance: int
    min_instances: int
    max_instances: int
    tenant: str
    invocation_count: float
    replicas: int
    available_replicas: int
    cold_starts: int | UnsetType = UNSET
    rejected: int | UnsetType = UNSET
    retries: int | UnsetType = UNSET
    state: str
    last_error: str | None
    owner: str | UnsetType = UNSET
    signature: SignatureView
    # the detail (`/system/function/NAME`) only
    cold_start_policy: ColdStartView | UnsetType | None = UNSET
    admission: AdmissionView | UnsetType = UNSET
    structure: StructureView | UnsetType = UNSET  # what the starters know of its package
    planner: PlannerView | UnsetType = UNSET


class StartView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What an instance's start took, step by step."""

    spawn_ms: float
    build_ms: float
    attach_ms: float
    warmup_ms: float
    transform_ms: float


class InstanceStatusView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One live instance: its configuration, what it served, how it started, and where its
    worker came from and how it is confined (the starters' `WorkerView`, inlined)."""

    instance_id: str = msgspec.field(name="id")
    function: str
    server: str
    batch_size: int
    cpus: int
    cpu_ids: list[int]
    gpu_pct: int
    gpu_device: str | None
    pid: int | None
    state: str
    served: int
    failed: int
    batches: int
    queue_length: int
    in_flight: int
    share_rps: float
    batch_timeout_ms: float | None
    exec_ms_by_batch: dict[str, float]
    service_ms_by_batch: dict[str, float] | None
    tail_ratio: float | None
    target_batch: int | None
    start: StartView
    history: History
    error: str | None
    # its worker, as the starters describe it (`workers.status.WorkerView`)
    confinement: Facts | UnsetType | None = UNSET
    memory_limit: Facts | UnsetType | None = UNSET
    pids_limit: Facts | UnsetType | None = UNSET
    template: str | UnsetType | None = UNSET
    gpu: GpuWorkerView | UnsetType = UNSET
    node: str | UnsetType = UNSET
    endpoint: str | UnsetType | None = UNSET


class ServerStatusView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One server: its capacity, what is free, how many instances run on it, what it is
    (a cluster node's facts) and what it reports live (its GPUs, its tensor store)."""

    server_id: str = msgspec.field(name="id")
    cpus: int
    free_cpus: int
    gpu_pct: list[int]
    free_gpu_pct: list[int]
    instances: int
    # what it is (`Server.describe`: a cluster node's)
    node: str | UnsetType = UNSET
    host: str | UnsetType = UNSET
    backend: str | UnsetType = UNSET
    head: bool | UnsetType = UNSET
    # what it reports (`Server.status`: its GPUs and tensor store)
    gpus: list[Facts] | UnsetType = UNSET
    gpu_tier: Facts | UnsetType = UNSET
    standby_failures: list[Any] | UnsetType = UNSET
    store: Facts | UnsetType = UNSET


class ReadinessView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Whether the gateway takes traffic; when not, who it waits for (and the error)."""

    ready: bool
    starting: list[str]
    failed: dict[str, str]  # function -> why
    error: str | UnsetType = UNSET
    code: str | UnsetType = UNSET


# Every view a status route answers with, for the OpenAPI schemas (`gateway.openapi_views`).
__all__ = [
    "FunctionStatusView",
    "InstanceStatusView",
    "PackageView",
    "PlannerView",
    "ReadinessView",
    "ServerStatusView",
    "SignatureView",
    "StartView",
    "TensorView",
]
