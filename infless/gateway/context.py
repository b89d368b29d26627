"""GatewayContext: what the HTTP routes read and call, and nothing more.

The composition root (`app`) builds it. Routes take it instead of the whole platform, so
the gateway depends on the control plane's services and never on how they are wired.
Status is read through narrow read-only views (`control.status`), never the pool; changes
go through `FunctionService`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from infless.clock import Clock, RealClock
from infless.config import Config
from infless.control.functions import FunctionFrontDoor
from infless.control.modelless import ModellessService
from infless.control.prewarm import PrewarmManager
from infless.control.readiness import Readiness
from infless.control.service import FunctionService
from infless.control.status import FunctionsView, InstancesView, ServersView
from infless.gateway.logs import LogBuffer
from infless.gateway.metrics import GatewayMetrics
from infless.gateway.resources import GpuSamples, SharingView
from infless.packaging.store import PackageStore
from infless.registry.secrets import SecretStore


@dataclass(frozen=True, slots=True)
class GatewayContext:
    """The services and read-only views the routes use (see the module docstring)."""

    config: Config
    frontend: FunctionFrontDoor  # the request path: /function and /v2/.../infer
    functions: FunctionService  # deploy, update, scale, remove
    deployed: FunctionsView  # read-only: the functions and their status views
    instances: InstancesView  # read-only: instances, kept workers, templates
    servers: ServersView  # read-only: the servers and their load
    prewarm: PrewarmManager  # the cold-start windows shown per function
    metrics: GatewayMetrics
    logs: LogBuffer
    secrets: SecretStore  # /system/secrets
    packages: PackageStore  # uploaded function packages, by digest
    modelless: ModellessService  # registered models, their variants and applications
    gpus: GpuSamples | None = None  # the GPU monitor's samples for /metrics (None: no GPU)
    gpu_sharing: Callable[[], Iterable[SharingView]] = tuple  # each GPU's MPS or time-slicing
    clock: Clock = field(default_factory=RealClock)  # the live board's interval
    readiness: Readiness | None = None  # /readyz, /v2/health/ready (None: ready once serving)
    isolation: Callable[[], dict[str, object]] = dict  # what keeps tenants apart (/system/info)
