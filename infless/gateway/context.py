"""GatewayContext: what the HTTP routes read and call, and nothing more.

The composition root (`app`) builds it; routes take it instead of the whole platform, so
the gateway depends on the control plane's services and never on how they are wired.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from infless.clock import Clock, RealClock
from infless.config import Config
from infless.control.autoscaler import Autoscaler
from infless.control.functions import FunctionFrontDoor
from infless.control.modelless import ModellessService
from infless.control.pool import WorkerPool
from infless.control.prewarm import PrewarmManager
from infless.control.readiness import Readiness
from infless.control.service import FunctionService
from infless.gateway.logs import LogBuffer
from infless.gateway.metrics import GatewayMetrics
from infless.gateway.resources import GpuSamples, SharingView
from infless.packaging.store import PackageStore
from infless.registry.secrets import SecretStore


@dataclass(frozen=True, slots=True)
class GatewayContext:
    config: Config
    frontend: FunctionFrontDoor  # the request path: /function and /v2/.../infer
    pool: WorkerPool  # read-only here: functions and instances for the status routes
    functions: FunctionService  # deploy, update, scale, remove
    prewarm: PrewarmManager  # the cold-start windows shown per function
    metrics: GatewayMetrics
    logs: LogBuffer
    secrets: SecretStore  # /system/secrets
    packages: PackageStore  # uploaded function packages, by digest
    modelless: ModellessService  # registered models, their variants and applications
    autoscaler: Autoscaler | None = None  # its last decision per function (None: policy none)
    gpus: GpuSamples | None = None  # the GPU monitor's samples for /metrics (None: no GPU)
    gpu_sharing: Callable[[], Iterable[SharingView]] = tuple  # each GPU's MPS or time-slicing
    clock: Clock = field(default_factory=RealClock)  # the live board's interval
    readiness: Readiness | None = None  # /readyz, /v2/health/ready (None: ready once serving)
    isolation: Callable[[], dict[str, object]] = dict  # what keeps tenants apart (/system/info)
