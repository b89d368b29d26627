"""`VariantMonitor`: every `modelless.monitor_s`, each registered variant's state
(`modelless.states`) and its model's capacity factors (`modelless.capacity`).

Both come from what the variant's ready instances did in the last window (served,
batches, the workers' summed service time, queued, refused, their service time's tail
ratio and mean service time per batch size), set against its profile.
The monitor reads those counters through the scaling port (`ScalingTarget.snapshot`: each
function's `Serving` and refusals), never the pool, the routers or the instances. So the
server and the simulator run this same object. It is part of the control shell: it
writes the catalogue through `ModellessCatalog.observe` only. Reads no clock: the
snapshot carries `now`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from infless.control.port import FunctionState, ScalingTarget
from infless.modelless.capacity import next_capacity
from infless.modelless.catalog import ModelEntry, ModellessCatalog
from infless.modelless.config import ModellessConfig
from infless.modelless.states import Counters, Tracked, WindowLoad, next_state, window_load

log = logging.getLogger(__name__)


class VariantMonitor:
    """Every `monitor_s`: each registered variant's state from its instances' last window."""

    def __init__(
        self, target: ScalingTarget, catalog: ModellessCatalog, cfg: ModellessConfig
    ) -> None:
        self._target = target
        self._catalog = catalog
        self._cfg = cfg
        self._seen: dict[str, Counters] = {}  # by variant function, at the last tick
        self._last_s: float | None = None

    def tick(self) -> None:
        if not self._catalog:
            return  # nothing registered: no snapshot to take
        snapshot = self._target.snapshot()
        now = snapshot.now_s
        window = self._cfg.monitor_s if self._last_s is None else max(1e-3, now - self._last_s)
        self._last_s = now
        functions = {f.name: f for f in snapshot.functions}
        for entry in self._catalog.entries():
            self._update(entry, functions, window)

    def _update(
        self, entry: ModelEntry, functions: Mapping[str, FunctionState], window: float
    ) -> None:
        windows: dict[str, WindowLoad] = {}
        tracked: dict[str, Tracked] = {}
        for card in entry.catalogue.cards:
            function = functions.get(card.function)
            if function is None:
                continue
            load = windows[card.name] = self._window(entry, card.name, function, window)
            prev = entry.tracked.get(card.name, Tracked())
            tracked[card.name] = next_state(prev, load, self._cfg.states)
            if tracked[card.name].state is not prev.state:
                log.info("modelless: %s is %s", card.function, tracked[card.name].state.value)
        capacity = next_capacity(entry.capacity, windows, self._cfg)
        self._catalog.observe(entry.model, tracked, capacity)

    def _window(
        self, entry: ModelEntry, variant: str, function: FunctionState, window: float
    ) -> WindowLoad:
        serving = function.serving
        now = Counters(
            served=serving.served,
            batches=serving.batches,
            exec_ms=serving.exec_ms,
            refused=function.refused,
            ready=serving.ready,
        )
        before = self._seen.get(function.name, now)
        self._seen[function.name] = now
        profile = next(p for p in entry.profiles if p.name == variant)
        return window_load(
            profile,
            now,
            before,
            replicas=serving.ready,
            batch_size=serving.max_batch,
            cpus=serving.max_cpus,
            queued=serving.queued,
            window_s=window,
            p99_ms=function.p99_ms,
            tail_ratio=serving.tail_ratio,
            service_ms_by_batch=serving.service_ms_by_batch,
        )
