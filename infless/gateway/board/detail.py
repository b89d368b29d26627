"""One function's detail on the live board: how it is admitted, the planner's last decision,
each instance's measured batches against its service-time table, its variants and the
model-less target, and its recent logs.

Built when a page opens a function (and at most once per interval for all pages that have
it open: `pages` caches it by the hub's tick). Its function and planner are the control
plane's views (`control.views`). Gateway side: never imports torch; reads only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from infless.control.modelless import MODEL_LABEL
from infless.dataplane.instance import Instance, InstanceState
from infless.errors import FunctionNotFound

if TYPE_CHECKING:
    from infless.gateway.context import GatewayContext

LOG_LINES = 40  # the recent log lines a detail shows


def _ms_table(table: dict[int, float]) -> dict[str, float]:
    return {str(b): round(ms, 3) for b, ms in sorted(table.items())}


def instance_batches(instance: Instance) -> dict[str, object]:
    """An instance's recent batches (size, service ms) and what it predicts for each size:
    the mean and the tail of its service-time model, and the worker's own forward times."""
    model = instance.model
    mean = {} if model is None else model.by_batch()
    tail = {b: ms * model.tail_ratio for b, ms in mean.items()} if model is not None else {}
    return {
        "id": instance.instance_id,
        "state": instance.state.value,
        "batchSize": instance.config.batch_size,
        "cpus": instance.config.cpus,
        "gpuPct": instance.config.gpu_pct,
        "recent": [[size, round(ms, 3)] for size, ms in instance.recent_batches],
        "meanMsByBatch": _ms_table(mean),
        "tailMsByBatch": _ms_table(tail),
        "execMsByBatch": _ms_table(instance.exec_ms_by_batch),
        "tailRatio": None if model is None else round(model.tail_ratio, 3),
    }


def function_detail(ctx: GatewayContext, name: str) -> dict[str, object]:
    """The detail of the deployed function `name` (FunctionNotFound: 404)."""
    function = ctx.deployed.deployed.get(name)
    if function is None:
        raise FunctionNotFound(f"function {name!r} is not deployed; the board lists those that are")
    status = msgspec.to_builtins(ctx.deployed.function(name))
    model = function.spec.labels.get(MODEL_LABEL)
    variants = None
    if model is not None:
        try:
            variants = msgspec.to_builtins(ctx.modelless.describe(model))
        except FunctionNotFound:  # its model was removed a moment ago
            variants = None
    logs = ctx.logs.entries(name)[-LOG_LINES:]
    return {
        "function": status,
        "admission": msgspec.to_builtins(ctx.frontend.describe(function)),
        "planner": msgspec.to_builtins(ctx.deployed.planner(function)),
        "coldStartPolicy": msgspec.to_builtins(ctx.prewarm.describe(name)),
        "instances": [
            instance_batches(i)
            for i in function.router.instances
            if i.state is not InstanceState.DEAD
        ],
        "model": model,
        "variants": variants,
        "logs": [{"t": round(e.unix_s, 3), "instance": e.instance, "text": e.text} for e in logs],
    }
