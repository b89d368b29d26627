"""FunctionService: deploy, update, scale and remove functions, registry and pool together.

It is the one place where a deployment becomes durable (SQLite) and live (the pool).

Before that, a deployment must pass two checks. Its secrets must exist, and this server
must be able to give its workers what it asks for (a memory limit, private secret files):
else a 400 that says why. A function of a second tenant needs tenants kept apart
(`tenancy`): else a 409.

On start it restores what the registry holds, then deploys the config's functions that are
missing. A function whose image or package is missing or broken, or whose tenant may not
join the others, is recorded as failed with its reason (`control.failed`); the others
serve. Deploying it again, or removing it, clears that.

A manual scale is a person's write of the desired state (`control.desired.scaled`): the
function is manual from then on, and the autoscaler leaves it alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial

from infless.clock import Clock
from infless.config import FunctionConfig
from infless.control import desired
from infless.control.failed import FailedDeployment, FailedDeployments
from infless.control.pool import WorkerPool
from infless.errors import (
    FunctionExists,
    FunctionNotFound,
    InflessError,
    InvalidDeployment,
    TenantsNotIsolated,
)
from infless.models.resolver import PackageResolver
from infless.registry.deployment import parse_deployment
from infless.registry.secrets import SecretStore
from infless.registry.store import FunctionRegistry
from infless.types import FunctionSpec

log = logging.getLogger(__name__)


def rfc3339(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FunctionService:
    def __init__(
        self,
        clock: Clock,
        registry: FunctionRegistry,
        pool: WorkerPool,
        resolver: PackageResolver,
        secrets: SecretStore | None = None,
        failed: FailedDeployments | None = None,
        tenancy: Callable[[str, Collection[str]], str | None] | None = None,
    ) -> None:
        self._clock = clock
        self._registry = registry
        self._pool = pool
        self._resolver = resolver
        self._secrets = secrets
        self.failed = failed if failed is not None else {}  # what could not be deployed
        self._tenancy = tenancy  # why a tenant may not join the others (None: it may)

    async def create(self, body: object) -> FunctionSpec:
        spec = parse_deployment(body, rfc3339(self._clock.wall()))
        if spec.name in self._pool.functions or self._registry.get(spec.name) is not None:
            raise FunctionExists(
                f"function {spec.name!r} already exists; update it with PUT /system/functions"
            )
        await self._check_runtime(spec)
        await self._activate(spec)
        return spec

    async def update(self, body: object) -> FunctionSpec:
        spec = parse_deployment(body, rfc3339(self._clock.wall()))
        old = self._registry.get(spec.name)
        failed = self.failed.get(spec.name)
        if old is None and failed is not None:
            old = failed.spec  # deployed again with a fix
        if old is None:
            raise FunctionNotFound(f"function {spec.name!r} does not exist; create it with POST")
        await self._check_runtime(spec)
        spec = replace(spec, created_at=old.created_at or spec.created_at)
        package_dir, manifest = await self._resolver.resolve(spec.image)
        self._registry.put(spec)
        self.failed.pop(spec.name, None)
        await self._pool.redeploy(spec, package_dir, manifest)
        return spec

    async def put(self, spec: FunctionSpec) -> None:
        """Deploy a spec the platform made itself (a model-less variant's function), or
        redeploy it when it exists."""
        self._check_tenant(spec)
        package_dir, manifest = await self._resolver.resolve(spec.image)
        self._registry.put(spec)
        self.failed.pop(spec.name, None)
        await self._pool.redeploy(spec, package_dir, manifest)

    async def _check_runtime(self, spec: FunctionSpec) -> None:
        """Refuse what the workers could not get: unknown secrets, unenforceable limits,
        a tenant beside others where tenants cannot be kept apart."""
        self._check_tenant(spec)
        for name in spec.secrets:
            if self._secrets is None or not self._secrets.exists(name):
                raise InvalidDeployment(
                    f"secrets: secret {name!r} does not exist; create it first "
                    f"(infless secret create {name} --from-literal ..., or POST /system/secrets)"
                )
        support = await self._pool.servers.runtime_support(spec.runtime)
        if support.memory_limit is not None:
            raise InvalidDeployment(
                f"limits.memory = {spec.limits.get('memory')!r}: this server cannot enforce a "
                f"memory limit ({support.memory_limit}); deploy without one or enable the "
                "cgroup memory controller"
            )
        if support.secrets is not None:
            raise InvalidDeployment(
                f"secrets = {list(spec.secrets)}: this server cannot mount secrets privately "
                f"for the function's workers ({support.secrets}); refusing rather than "
                "exposing them"
            )

    def _check_tenant(self, spec: FunctionSpec) -> None:
        if self._tenancy is None:
            return
        others = {f.spec.tenant for f in self._pool.functions.values() if f.name != spec.name}
        refusal = self._tenancy(spec.tenant, others)
        if refusal is not None:
            raise TenantsNotIsolated(refusal)

    async def _activate(self, spec: FunctionSpec) -> None:
        package_dir, manifest = await self._resolver.resolve(spec.image)
        self._registry.put(spec)
        self.failed.pop(spec.name, None)
        self._pool.deploy(spec, package_dir, manifest)

    async def remove(self, name: str) -> None:
        known = self._registry.delete(name)
        known = self.failed.pop(name, None) is not None or known
        try:
            await self._pool.remove(name)
        except FunctionNotFound:
            if not known:
                raise

    def scale(self, name: str, instances: int) -> FunctionSpec:
        if instances < 0:
            raise InvalidDeployment(f"replicas = {instances}: must be >= 0")
        function = self._pool.get(name)
        spec = function.spec
        if instances > spec.max_instances:
            raise InvalidDeployment(
                f"replicas = {instances} exceeds com.openfaas.scale.max = {spec.max_instances} "
                f"for {name!r}; redeploy with a higher max"
            )
        spec = replace(spec, instances=instances)
        self._registry.put(spec)  # recorded first: a scale the registry refuses changes nothing
        self._pool.change(name, partial(desired.scaled, count=instances))
        return spec

    async def restore(self, defaults: list[FunctionConfig]) -> list[str]:
        """Bring back every registered function, then deploy config functions not yet known;
        those whose package cannot be had, or whose tenant may not join the others, are
        recorded as failed (one broken package must not keep the others down). Returns the
        names of all of them, failed or not."""
        names = []
        for spec in self._registry.all():
            names.append(spec.name)
            try:  # a tenant refused stays registered: served once tenants may share
                self._check_tenant(spec)
                package_dir, manifest = await self._resolver.resolve(spec.image)
            except Exception as exc:
                self._failed_to_deploy(spec, exc)
                continue
            self._pool.deploy(spec, package_dir, manifest)
        for fn in defaults:
            if fn.name in self._pool.functions or fn.name in self.failed:
                continue
            spec = FunctionSpec(
                name=fn.name,
                image=fn.image,
                slo_ms=fn.slo_ms,
                max_batch=fn.max_batch,
                min_instances=min(1, fn.instances),
                max_instances=max(5, fn.instances),
                instances=fn.instances,
                cpus_per_instance=fn.cpus,
                created_at=rfc3339(self._clock.wall()),
                tenant=fn.tenant,
                gpu_pct=fn.gpu_pct,
            )
            names.append(spec.name)
            try:
                self._check_tenant(spec)
                await self._activate(spec)
            except Exception as exc:
                self._failed_to_deploy(spec, exc)
        return names

    def _failed_to_deploy(self, spec: FunctionSpec, exc: Exception) -> None:
        if isinstance(exc, InflessError):
            error = exc.message
            log.error("function %s failed to deploy: %s", spec.name, error)
        else:  # not a known refusal: the traceback goes to the log
            error = f"{type(exc).__name__}: {exc}"
            log.exception("function %s failed to deploy (image %s)", spec.name, spec.image)
        self.failed[spec.name] = FailedDeployment(spec, error)
