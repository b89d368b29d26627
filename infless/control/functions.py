"""DeployedFunction: one function deployed on this gateway, and who writes which part of it.

- The pool (`control.pool`) writes `spec` (on redeploy), `desired` (through the owners'
  transitions in `control.desired`) and `health` (starts and their failures).
- The data plane writes `router` (its instances and queues), `activity` and `latency`
  (the front door, on every request).
- Nothing else writes anything here; everybody may read.

`InstanceMinter` makes the new entries of a function's desired state (ids, uniform shape,
server). `boot_order` says what a starter needs to start one of its instances.
`FunctionFrontDoor` is the data plane's front door over these functions.
Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from infless.control import desired as d
from infless.control.desired import DesiredState
from infless.control.failed import FailedDeployment
from infless.dataplane.activity import FunctionActivity
from infless.dataplane.calls import Call
from infless.dataplane.frontdoor import FrontDoor
from infless.dataplane.latency import FunctionLatency
from infless.dataplane.policy import powers_of_two_up_to
from infless.dataplane.router import FunctionRouter
from infless.dataplane.starting import START_WINDOW, predicted_start_s
from infless.models.package import NO_TRANSFORM, PackageManifest
from infless.scaling.view import StartInstance
from infless.types import FunctionSpec, InstanceConfig, TensorSpec
from infless.workers.starting import BootOrder

if TYPE_CHECKING:
    from infless.control.servers import Placement

SCALE_ZERO_LABEL = "com.openfaas.scale.zero"


@dataclass(slots=True)
class StartHealth:
    """How the function's instance starts went (the pool's bookkeeping)."""

    last_start_s: float = 0.0  # how long the last instance took to become ready
    failures: int = 0  # consecutive failed starts (0 after a success)
    last_error: str | None = None
    retry_at_s: float = 0.0  # no new start before this (backoff after failures)
    recent_starts_s: deque[float] = field(default_factory=lambda: deque(maxlen=START_WINDOW))

    def started(self, took_s: float) -> None:
        self.failures = 0
        self.last_start_s = took_s
        self.recent_starts_s.append(took_s)

    def expected_ready_s(self, started_at_s: float) -> float | None:
        """When an instance that began starting at `started_at_s` should be ready, from the
        recent starts measured (`dataplane.starting`); None while none was measured."""
        took_s = predicted_start_s(list(self.recent_starts_s))
        return None if took_s is None else started_at_s + took_s

    def failed(self, error: str, now_s: float) -> float:
        """A start failed: the backoff before the next one (0.5 s doubling, 30 s at most)."""
        self.last_error = error
        self.failures += 1
        delay_s = min(30.0, 0.5 * 2.0**self.failures)
        self.retry_at_s = now_s + delay_s
        return delay_s


@dataclass(eq=False)
class DeployedFunction:
    spec: FunctionSpec
    package_dir: Path
    manifest: PackageManifest
    router: FunctionRouter
    desired: DesiredState
    latency: FunctionLatency
    activity: FunctionActivity = field(default_factory=FunctionActivity)
    health: StartHealth = field(default_factory=StartHealth)
    boots: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # by worker id

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def input_specs(self) -> tuple[TensorSpec, ...]:
        return self.manifest.input_specs

    @property
    def uniform_config(self) -> InstanceConfig:
        """A uniform instance: the function's cores, batch sizes timed up to its maximum."""
        return InstanceConfig(batch_size=self.spec.max_batch, cpus=self.spec.cpus_per_instance)

    @property
    def state(self) -> str:
        """ "ready" (an instance serves), "failed" (the last start failed: see
        `health.last_error`), "starting", or "idle" (no instance wanted: scaled to zero)."""
        if self.router.ready_count > 0:
            return "ready"
        if self.health.failures > 0:
            return "failed"
        return "starting" if self.desired.count > 0 or self.boots else "idle"

    def boot_order(
        self,
        worker_id: str,
        instance_id: str,
        config: InstanceConfig,
        cpu_ids: tuple[int, ...],
        on_death: Callable[[], None],
        gpu_index: int | None = None,
    ) -> BootOrder:
        """What a starter needs to start one of this function's instances."""
        return BootOrder(
            instance_id=worker_id,
            tenant=self.spec.tenant,
            package_dir=self.package_dir,
            config=config,
            cpu_ids=cpu_ids,
            warmup_batch_sizes=tuple(powers_of_two_up_to(config.batch_size)),
            shared_weights=self.manifest.format == "module",
            plain_module=self.manifest.transform in NO_TRANSFORM,
            on_death=on_death,
            function=self.name,
            instance=instance_id,
            runtime=self.spec.runtime,
            gpu_index=gpu_index if config.gpu_pct > 0 else None,
        )

    @property
    def scale_to_zero(self) -> bool | None:
        """The function's `com.openfaas.scale.zero` label; None when it has none."""
        label = self.spec.labels.get(SCALE_ZERO_LABEL)
        return None if label is None else label.strip().lower() == "true"


class InstanceMinter:
    """New desired entries of one function (`desired.InstanceMint`): fresh ids, its uniform
    shape, and where each goes (`place(cpus)`, the pool's choice: a server and, where the
    server has GPUs, a device and share)."""

    def __init__(self, function: DeployedFunction, place: Callable[[int], Placement]) -> None:
        self._function = function
        self._place = place

    def _id(self) -> str:
        return f"{self._function.name}-{secrets.token_hex(3)}"

    def uniform(self) -> d.WantedInstance:
        config = self._function.uniform_config
        where = self._place(config.cpus)
        return d.WantedInstance(
            instance_id=self._id(),
            config=replace(config, gpu_pct=where.gpu_pct),
            fixed_batch=False,
            server_id=where.server_id,
            gpu_index=where.gpu_index,
        )

    def planned(self, start: StartInstance) -> d.WantedInstance:
        return d.planned_instance(self._id(), start)

    def moved(self, entry: d.WantedInstance) -> d.WantedInstance:
        """The same shape on another server (its GPU share there, if it has GPUs)."""
        where = self._place(entry.config.cpus)
        on_gpu = entry.config.gpu_pct > 0 and where.gpu_index is not None
        config = replace(entry.config, gpu_pct=entry.config.gpu_pct if on_gpu else 0)
        return replace(
            entry,
            instance_id=self._id(),
            config=config,
            server_id=where.server_id,
            gpu_index=where.gpu_index if on_gpu else None,
        )


# the data plane's front door and its calls, over this gateway's deployed functions
FunctionFrontDoor = FrontDoor[DeployedFunction, FailedDeployment]
FunctionCall = Call[DeployedFunction]


def same_serving(old: FunctionSpec, new: FunctionSpec) -> bool:
    """Whether a redeploy changes nothing its running instances serve with."""
    return (
        old.image == new.image
        and old.slo_ms == new.slo_ms
        and old.max_batch == new.max_batch
        and old.cpus_per_instance == new.cpus_per_instance
        and old.gpu_pct == new.gpu_pct
        and old.tenant == new.tenant
        and old.runtime == new.runtime  # environment, secrets, memory limit
    )
