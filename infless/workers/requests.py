"""What a process worker is asked to do: the `LoadModel` and `TransformModel` requests a
start sends it, built from the instance's `BootOrder`.

`WorkerRequests` knows the start settings (warm-up rounds, niceness, private weights) and
the tenants' sandboxes. A sandboxed worker works from `/`, so its package is named by its
absolute path. The process starter (`boot`) and the GPU starter send what it builds.
Gateway side: never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from infless.weights.gpu_tier import SharedModel
from infless.weights.stored import StoredTensor
from infless.workers import protocol as p
from infless.workers.starting import BootOrder

if TYPE_CHECKING:
    from infless.tenancy.sandboxes import TenantSandboxes
    from infless.transform.records import PlanStep


@dataclass(frozen=True, slots=True)
class StartSettings:
    start_timeout_s: float
    warmup_rounds: int
    private_weights: bool  # no store: clone the weights into private memory (bench baseline)
    nice: int = 0  # workers' niceness: the gateway's event loop goes first on shared cores


class WorkerRequests:
    """Builds the requests of one starter's workers (see the module docstring)."""

    def __init__(self, settings: StartSettings, sandboxes: TenantSandboxes | None) -> None:
        self.settings = settings
        self._sandboxes = sandboxes

    def load(
        self,
        order: BootOrder,
        stored: list[StoredTensor] | None,
        secrets: dict[str, bytes] | None,
        *,
        gpu: p.GpuPlacement | None = None,
        gpu_weights: SharedModel | None = None,
    ) -> p.LoadModel:
        """The worker's `LoadModel`, in its tenant's sandbox when isolation is active."""
        settings = self.settings
        return p.LoadModel(
            package_dir=self.package(order),
            cpus=order.config.cpus,
            cpu_ids=list(order.cpu_ids),
            gpu_pct=order.config.gpu_pct,
            warmup_batch_sizes=list(order.warmup_batch_sizes),
            warmup_rounds=settings.warmup_rounds,
            store_tensors=stored,
            private_weights=stored is None and settings.private_weights,
            nice=settings.nice,
            env=dict(order.runtime.env),
            secrets=secrets,
            gpu=gpu,
            gpu_weights=gpu_weights,
            sandbox=self.sandbox_of(order, gpu=gpu is not None),
        )

    def transform(
        self,
        order: BootOrder,
        stored: list[StoredTensor],
        steps: list[PlanStep],
        structure_json: str,
    ) -> p.TransformModel:
        """The `TransformModel` that turns a kept worker's model into `order`'s."""
        return p.TransformModel(
            package_dir=self.package(order),
            structure=structure_json,
            steps=steps,
            store_tensors=stored,
            cpus=order.config.cpus,
            cpu_ids=list(order.cpu_ids),
            warmup_batch_sizes=list(order.warmup_batch_sizes),
            warmup_rounds=self.settings.warmup_rounds,
        )

    def sandbox_of(self, order: BootOrder, *, gpu: bool = False) -> p.Sandbox | None:
        """The sandbox of `order`'s worker (None: isolation is not active)."""
        if self._sandboxes is None:
            return None
        return self._sandboxes.sandbox_for(order.tenant, order.package_dir, gpu=gpu)

    def package(self, order: BootOrder) -> str:
        """The package's path as the worker names it (absolute in a sandbox)."""
        if self._sandboxes is not None and self._sandboxes.active:
            return str(order.package_dir.absolute())
        return str(order.package_dir)
