"""What the live board shows, read from the platform: each function's counters (`readings`)
and the state of servers, instances, kept workers, functions and registered models
(`state`), as plain JSON-ready values.

Read once per interval by the board's producer (`hub`), never per page and never on the
request path. Gateway side: must not import torch, and only reads: it changes nothing in
the pool, the metrics or the catalogue (it reads the control plane's read-only views,
`control.status`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from infless.control.modelless import MODEL_LABEL, VARIANT_LABEL
from infless.dataplane.instance import Instance, InstanceState
from infless.gateway.board.series import Reading

if TYPE_CHECKING:
    from infless.control.functions import DeployedFunction
    from infless.control.status import ServerLoad
    from infless.gateway.context import GatewayContext
    from infless.workers.status import KeptWorkerView

LATENCY_WINDOW_S = 1  # a point's quantiles: the answers of the last whole second and this one


class BoardReader:
    """Reads one gateway's platform for the board (its `GatewayContext`)."""

    def __init__(self, ctx: GatewayContext) -> None:
        self._ctx = ctx

    def readings(self, now_s: float) -> dict[str, Reading]:
        """Every deployed function's counters and gauges now."""
        metrics = self._ctx.metrics
        answered: dict[str, list[int]] = {}  # served, refused, failed
        for (name, code), done in metrics.done.items():
            counts = answered.setdefault(name, [0, 0, 0])
            counts[0 if code < 400 else 1 if code == 429 else 2] += done.count
        readings = {}
        for name, function in self._ctx.deployed.deployed.items():
            router = function.router
            served, refused, failed = answered.get(name, (0, 0, 0))
            queued = sum(i.queue_length for i in router.instances if i.state is not _DEAD)
            readings[name] = Reading(
                offered=metrics.started.get(name, 0),
                served=served,
                refused=refused,
                failed=failed,
                cold_starts=router.cold_starts,
                queue=router.waiting + queued,
                instances=router.ready_count,
                latencies_ms=function.latency.recent_ms(now_s, LATENCY_WINDOW_S),
            )
        return readings

    def state(self) -> dict[str, object]:
        """Servers (with their kept workers and store), instances, functions, models."""
        functions = list(self._ctx.deployed.deployed.values())
        kept = self._ctx.instances.kept()
        return {
            "servers": [_server(load, kept) for load in self._ctx.servers.loads()],
            "instances": [
                _instance(i, function) for function in functions for i in function.router.instances
            ],
            "kept": msgspec.to_builtins(kept),
            "functions": [self._function(f) for f in functions],
            "models": self._models(),
        }

    def _function(self, function: DeployedFunction) -> dict[str, object]:
        spec = function.spec
        return {
            "name": function.name,
            "sloMs": spec.slo_ms,
            "maxBatch": spec.max_batch,
            "tenant": spec.tenant,
            "state": function.state,
            "owner": function.desired.owner.value,
            "wanted": function.desired.count,
            "ready": function.router.ready_count,
            "model": spec.labels.get(MODEL_LABEL),
            "variant": spec.labels.get(VARIANT_LABEL),
            "lastError": function.health.last_error,
        }

    def _models(self) -> list[dict[str, object]]:
        """Registered models (model-less): their variants' states and the current target."""
        models = []
        for entry in self._ctx.modelless.catalog.entries():
            variants = []
            for card in entry.catalogue.cards:
                state = entry.states.get(card.name)
                variants.append(
                    {
                        "name": card.name,
                        "function": card.function,
                        "state": None if state is None else state.value,
                        "served": entry.served.get(card.name, 0),
                        "released": card.name in entry.released,
                    }
                )
            models.append(
                {
                    "model": entry.model,
                    "sloMs": entry.slo_ms,
                    "target": entry.target,
                    "switches": entry.switches,
                    "variants": variants,
                }
            )
        return models


_DEAD = InstanceState.DEAD


def _instance(instance: Instance, function: DeployedFunction) -> dict[str, object]:
    """One block of a server's board: sized by <c, g>, labelled, coloured by state."""
    labels = function.spec.labels
    state = instance.state.value
    if instance.state is _DEAD:
        state = "failed"  # a dead instance lingers only until its replacement starts
    return {
        "id": instance.instance_id,
        "function": instance.function_name,
        "model": labels.get(MODEL_LABEL),
        "variant": labels.get(VARIANT_LABEL),
        "server": instance.server_id,
        "batchSize": instance.config.batch_size,
        "cpus": instance.config.cpus,
        "gpuPct": instance.config.gpu_pct,
        "gpuIndex": instance.gpu_index,
        "cpuIds": list(instance.cpu_ids),
        "state": state,
        "queue": instance.queue_length,
        "inFlight": instance.in_flight,
        "served": instance.served,
        "shareRps": round(instance.share_rps, 1),
        "targetBatch": None if instance.queue is None else instance.queue.target,
        "error": instance.error,
    }


def _server(load: ServerLoad, kept: list[KeptWorkerView]) -> dict[str, object]:
    """A server's capacity, what is free, its GPUs, its store and its kept workers."""
    return {
        "id": load.server_id,
        "cpus": load.capacity_cpus,
        "freeCpus": load.free_cpus,
        "idleCores": load.idle_cores,
        "cores": [[core, busy] for core, busy in load.cores],
        "gpuPct": list(load.gpu_pct),
        "freeGpuPct": list(load.free_gpu_pct),
        "gpus": load.facts.get("gpus", []),
        "store": load.facts.get("store"),
        "describe": dict(load.describe),
        "kept": sum(1 for w in kept if w.server == load.server_id),
    }
