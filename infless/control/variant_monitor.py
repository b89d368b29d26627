"""`VariantMonitor`: every `modelless.monitor_s`, each registered variant's state
(`modelless.states`) and the application's capacity factors (`modelless.capacity`) from
what its ready instances did in the last window — served, batches, the workers' summed
service time, queued, refused — against its profile. Gateway side: reads the data plane's
counters, writes the catalogue.
"""

from __future__ import annotations

import logging

from infless.clock import Clock
from infless.control.functions import DeployedFunction
from infless.dataplane.instance import InstanceState as LiveState
from infless.modelless.capacity import next_capacity
from infless.modelless.catalog import ModelEntry, ModellessCatalog
from infless.modelless.config import ModellessConfig
from infless.modelless.states import Counters, Tracked, WindowLoad, next_state, window_load

log = logging.getLogger(__name__)


class VariantMonitor:
    """Every `monitor_s`: each registered variant's state from its instances' last window."""

    def __init__(
        self,
        catalog: ModellessCatalog,
        functions: dict[str, DeployedFunction],
        cfg: ModellessConfig,
        clock: Clock,
    ) -> None:
        self._catalog = catalog
        self._functions = functions
        self._cfg = cfg
        self._clock = clock
        self._seen: dict[str, Counters] = {}  # by variant function, at the last tick
        self._last_s: float | None = None

    def tick(self) -> None:
        now = self._clock.now()
        window = self._cfg.monitor_s if self._last_s is None else max(1e-3, now - self._last_s)
        self._last_s = now
        for entry in self._catalog.entries():
            windows: dict[str, WindowLoad] = {}
            for card in entry.catalogue.cards:
                function = self._functions.get(card.function)
                if function is None:
                    continue
                load = windows[card.name] = self._window(entry, card.name, function, window)
                prev = entry.tracked.get(card.name, Tracked())
                tracked = next_state(prev, load, self._cfg.states)
                if tracked.state is not prev.state:
                    log.info("modelless: %s is %s", card.function, tracked.state.value)
                entry.tracked[card.name] = tracked
                entry.states[card.name] = tracked.state
            entry.capacity = next_capacity(entry.capacity, windows, self._cfg)

    def _window(
        self, entry: ModelEntry, variant: str, function: DeployedFunction, window: float
    ) -> WindowLoad:
        ready = [i for i in function.router.instances if i.state is LiveState.READY]
        now = Counters(
            sum(i.served for i in ready), sum(i.batches for i in ready),
            sum(i.exec_ms_total for i in ready), function.router.rejected, len(ready),
        )  # fmt: skip
        before = self._seen.get(function.name, now)
        self._seen[function.name] = now
        profile = next(p for p in entry.profiles if p.name == variant)
        return window_load(
            profile, now, before, len(ready),
            max((i.config.batch_size for i in ready), default=1),
            max((i.config.cpus for i in ready), default=1),
            sum(i.queue_length for i in ready), window,
        )  # fmt: skip
