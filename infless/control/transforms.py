"""`TransformingStarter`: warm-instance transformation (Optimus) as a layer of this machine's
starter chain (`workers.starting`), around the process starter.

It keeps idle workers: instances their function no longer wanted, kept alive by the
`[transform]` rule (`transform.idle`) when the pool retires them. When the pool boots an
instance, it decides between transforming one of them (same tenant only) and the inner
starter's normal start (`Transformer.normal_path`: template, zygote or fresh). It decides
by the predicted costs of `transform.choice` and the cached plans of `transform.planner`.

Structures come from `control.structures`, the meta-operator costs from the profile
database. It remembers what every start measured (`record`) to predict the next, and keeps
each worker's history (`transform_history`, shown by `/system/instances`). An idle worker
that expires or dies gives its store holds back through the inner starter's `release`.
Gateway side: never imports torch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import msgspec

from infless.clock import Clock, perf_s
from infless.control.structures import StructureCache
from infless.control.transform_history import Decision, start_event, start_ms
from infless.transform.choice import Candidate, StartCosts, choose
from infless.transform.config import TransformConfig
from infless.transform.costs import MetaOpCosts
from infless.transform.idle import IdleEntry, donors_for, may_keep
from infless.transform.planner import PlanCache, TransformPlan, build_cost_ms, plan_transformation
from infless.transform.records import PlanStep, StartPath
from infless.weights.store import TensorStore
from infless.workers.handle import WorkerHandle
from infless.workers.protocol import StartBreakdown
from infless.workers.starting import (
    Booted,
    BootOrder,
    LayeredStarter,
    Retiring,
    Starter,
)
from infless.workers.status import (
    History,
    IdleWorkerView,
    KeptWorkerView,
    PackageView,
    StructureView,
)

if TYPE_CHECKING:
    from infless.control.functions import DeployedFunction

log = logging.getLogger(__name__)


class Transformer(Starter, Protocol):
    """What the transforming layer needs of the starter inside it (`ProcessStarter`)."""

    def normal_path(self, order: BootOrder) -> StartPath: ...

    def transformable(self, order: BootOrder) -> bool: ...

    def parked(self, instance_id: str) -> None: ...

    def may_load(self, handle: WorkerHandle, order: BootOrder) -> bool:
        """Whether that kept worker can load `order`'s package (its tenant's sandbox)."""
        ...

    async def stop_kept(self, worker_id: str, handle: WorkerHandle, timeout_s: float) -> None:
        """Stop a kept worker, with whatever its package left behind (`workers.confinement`)."""
        ...

    async def transform(
        self,
        order: BootOrder,
        donor_id: str,
        handle: WorkerHandle,
        steps: list[PlanStep],
        structure_json: str,
    ) -> Booted: ...


@dataclass(slots=True)
class IdleWorker:
    entry: IdleEntry
    handle: WorkerHandle
    package_dir: Path
    instance_id: str
    history: History
    expiry: asyncio.Task[None] | None = None


class TransformingStarter(LayeredStarter):
    def __init__(
        self,
        inner: Transformer,
        cfg: TransformConfig,
        clock: Clock,
        structures: StructureCache,
        costs: MetaOpCosts,
        store: TensorStore,
    ) -> None:
        super().__init__(inner)
        self.transformer = inner
        self.cfg = cfg
        self.clock = clock
        self.structures = structures
        self.costs = costs
        self.store = store
        self.idle: dict[str, IdleWorker] = {}
        self.packages: dict[str, dict[str, Path]] = {}  # tenant -> deployed packages
        self.plans = PlanCache()
        self.start_costs = StartCosts()
        self._stopping: set[asyncio.Task[None]] = set()

    def deployed(self, package_dir: Path, tenant: str, plain_module: bool) -> None:
        """A function of `tenant` was deployed. Structures are described (a subprocess that
        imports torch) only where a transformation may happen: once the tenant has an idle
        worker, its functions' packages are described."""
        self.inner.deployed(package_dir, tenant, plain_module)
        if not self.cfg.enabled or not plain_module:
            return
        self.packages.setdefault(tenant, {})[str(package_dir)] = package_dir
        if any(w.entry.tenant == tenant for w in self.idle.values()):
            self.structures.prepare([package_dir])

    # -- idle workers ----------------------------------------------------------------------
    def may_park(self, order: BootOrder) -> bool:
        """Whether a retired worker of `order`'s function is kept idle (the `[transform]`
        rule): a plain module with stored weights, no secrets, no memory limit, room left."""
        return (
            self.cfg.enabled
            and self.cfg.idle_keep_s > 0
            and order.config.gpu_pct == 0
            and self.transformer.transformable(order)
            and may_keep(
                [w.entry for w in self.idle.values()],
                order.function,
                per_function=self.cfg.idle_per_function,
                max_idle=self.cfg.max_idle,
            )
        )

    async def retire(self, retiring: Retiring) -> bool:
        """Keep the worker idle (True) when the rule allows, its history with it (see
        `park`), else have the inner starter stop it."""
        order, handle = retiring.order, retiring.handle
        if not (retiring.keep and handle.alive and self.may_park(order)):
            return await self.inner.retire(retiring)
        entry = IdleEntry(order.instance_id, order.function, order.tenant, self.clock.now())
        history: History = [
            *retiring.history,
            {"event": "idle", "function": order.function, "instance": order.instance},
        ]
        self.park(IdleWorker(entry, handle, order.package_dir, order.instance, history))
        return True

    def park(self, worker: IdleWorker) -> None:
        """Keep `worker` idle for `idle_keep_s`; then stop it and release its holds (also
        when it dies idle)."""
        worker_id = worker.entry.worker_id
        self.idle[worker_id] = worker
        self.transformer.parked(worker_id)
        tenant_packages = self.packages.get(worker.entry.tenant, {})
        self.structures.prepare([worker.package_dir, *tenant_packages.values()])
        worker.handle.rebind_death(lambda: self._died(worker_id))
        until_s = worker.entry.parked_s + self.cfg.idle_keep_s
        worker.expiry = asyncio.create_task(
            self._expire(worker_id, until_s), name=f"idle-{worker_id}"
        )

    async def _expire(self, worker_id: str, until_s: float) -> None:
        await self.clock.sleep_until(until_s)
        worker = self.idle.pop(worker_id, None)
        if worker is not None:
            log.info("idle worker %s kept %.0f s untaken: stopped", worker_id, self.cfg.idle_keep_s)
            await self.transformer.stop_kept(worker_id, worker.handle, 5.0)
            await self.inner.release(worker_id)

    def _died(self, worker_id: str) -> None:
        """An idle worker died: forget it, free its holds."""
        if self.take(worker_id) is not None:
            task = asyncio.ensure_future(self.inner.release(worker_id))
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    def take(self, worker_id: str) -> IdleWorker | None:
        worker = self.idle.pop(worker_id, None)
        if worker is not None and worker.expiry is not None:
            worker.expiry.cancel()
        return worker

    def holder_ids(self) -> list[str]:
        """Store holders besides the instances: the inner starter's and the idle workers."""
        return [*self.inner.holder_ids(), *self.idle]

    # -- deciding how a start goes ---------------------------------------------------------
    async def boot(self, order: BootOrder) -> Booted:
        """Start `order`'s worker the cheapest way: transform an idle worker, else the
        inner starter's normal start; the worker's history with it."""
        decision = self.decide(order)
        if decision is not None and decision.chosen.donor:
            done = await self.transform(order, decision)
            if done is not None:
                return done
            decision = self.decide(order)  # the donor is gone or failed: decide again
        booted = await self.inner.boot(order)
        if decision is not None:
            self.record(decision.chosen.path, decision.model_key, booted.start)
        return replace(booted, history=[*booted.history, start_event(decision, booted.start)])

    def decide(self, order: BootOrder) -> Decision | None:
        """The cheapest way to start `order`'s instance (None: transformation is off here,
        or the destination's structure is not known yet: a normal start)."""
        if not self.cfg.enabled or not self.transformer.transformable(order):
            return None
        dest = self.structures.get(order.package_dir)
        if dest is None:
            if any(w.entry.tenant == order.tenant for w in self.idle.values()):
                self.structures.prepare([order.package_dir])
            return None
        started = perf_s()
        path = self.transformer.normal_path(order)
        normal = Candidate(
            path, self.start_costs.predict(path, dest.model_key, build_cost_ms(dest, self.costs))
        )
        plans: dict[str, TransformPlan] = {}
        candidates = []
        sees = {i: self.transformer.may_load(w.handle, order) for i, w in self.idle.items()}
        for entry in donors_for([w.entry for w in self.idle.values()], order.tenant, sees):
            worker = self.idle[entry.worker_id]
            plan = self._plan(worker.package_dir, order.package_dir)
            if plan is not None and plan.feasible:
                plans[entry.worker_id] = plan
                predicted = self.start_costs.predict_transform(plan.predicted_ms)
                candidates.append(
                    Candidate(StartPath.TRANSFORM, predicted, entry.worker_id, entry.function)
                )
        chosen = choose(normal, candidates)
        plan = plans.get(chosen.donor or "")
        return Decision(
            chosen,
            (normal, *candidates),
            dest.model_key,
            plan,
            dest.to_json() if plan is not None else "",
            (perf_s() - started) * 1000.0,
        )

    def _plan(self, source_dir: Path, dest_dir: Path) -> TransformPlan | None:
        key = (str(source_dir), str(dest_dir))
        cached = self.plans.get(key)
        if cached is not None:
            return cached
        source, dest = self.structures.get(source_dir), self.structures.get(dest_dir)
        if source is None or dest is None:
            return None
        src_index, dst_index = self.store.known_index(source_dir), self.store.known_index(dest_dir)
        same = None
        if src_index is not None and dst_index is not None:
            src_keys = {t.name: t.key for t in src_index.tensors}
            dst_keys = {t.name: t.key for t in dst_index.tensors}

            def same(s: str, d: str) -> bool:
                return s in src_keys and src_keys[s] == dst_keys.get(d)

        plan = plan_transformation(source, dest, self.costs, same)
        if same is not None:  # a plan without sharing facts is not cached: it may improve
            self.plans.put(key, plan)
        return plan

    async def transform(self, order: BootOrder, decision: Decision) -> Booted | None:
        """Run the decided transformation: the booted instance with its worker's history;
        None when the worker is gone or it failed (the caller starts normally)."""
        worker = None if decision.chosen.donor is None else self.take(decision.chosen.donor)
        if worker is None or decision.plan is None or not worker.handle.alive:
            return None
        try:
            booted = await self.transformer.transform(
                order,
                worker.entry.worker_id,
                worker.handle,
                list(decision.plan.steps),
                decision.structure_json,
            )
        except Exception as exc:
            log.warning(
                "transforming %s into %s failed (%s); starting it normally",
                worker.entry.worker_id,
                order.instance_id,
                exc,
            )
            return None
        self.record(StartPath.TRANSFORM, decision.plan.dest_key, booted.start)
        self.start_costs.record_transform(decision.plan.predicted_ms, booted.start.transform_ms)
        event = start_event(decision, booted.start)
        event["fromInstance"] = worker.instance_id
        return replace(booted, history=[*worker.history, event])

    def record(self, path: StartPath, model_key: str, start: StartBreakdown) -> None:
        """What a start took, warm-up excluded: the next prediction learns from it."""
        self.start_costs.record(path, model_key, start_ms(start))

    def affinities(self, functions: Iterable[DeployedFunction]) -> dict[str, float]:
        """This server's affinity for each function (`ServerView.affinity`)."""
        return {f.name: self.affinity(f.package_dir, f.spec.tenant) for f in functions}

    def affinity(self, package_dir: Path, tenant: str) -> float:
        """How close this server is to a function (Optimus §5, Tetris θ), in [0, 1]: the
        share of its tensors already stored, or, when an idle worker of the tenant could be
        transformed into it, how much cheaper that is than building it."""
        closeness = self.store.similarity(package_dir, tenant, known_only=True)
        dest = self.structures.get(package_dir) if self.idle else None
        if dest is None:
            return closeness
        build_ms = build_cost_ms(dest, self.costs)
        for worker in self.idle.values():
            plan = self.plans.get((str(worker.package_dir), str(package_dir)))
            if worker.entry.tenant == tenant and plan is not None and plan.feasible:
                closeness = max(closeness, 1.0 - min(1.0, plan.predicted_ms / build_ms))
        return closeness

    def describe_function(self, package_dir: Path) -> PackageView:
        """Whether the package's structure is known yet, and whether it can be transformed."""
        described = self.inner.describe_function(package_dir)
        structure = self.structures.get(package_dir)
        if structure is None:
            view = StructureView(described=False, transformable=None)
        else:
            view = StructureView(
                described=True,
                transformable=structure.transformable,
                reason=structure.reason or None,
                operations=len(structure.ops),
                graph_nodes=len(structure.nodes),
            )
        return msgspec.structs.replace(described, structure=view)

    def kept(self) -> list[KeptWorkerView]:
        now = self.clock.now()
        idle: list[KeptWorkerView] = [
            IdleWorkerView(
                worker_id=w.instance_id,
                function=w.entry.function,
                pid=w.handle.pid,
                idle_s=round(now - w.entry.parked_s, 3),
                history=w.history,
            )
            for w in self.idle.values()
        ]
        return idle + self.inner.kept()

    async def close(self) -> None:
        """Stop the idle workers, then the inner starter."""
        for worker_id in list(self.idle):
            worker = self.take(worker_id)
            if worker is not None:
                with contextlib.suppress(Exception):
                    await worker.handle.stop(5.0)
        await asyncio.gather(*self._stopping, return_exceptions=True)
        await self.structures.close()
        await self.inner.close()
