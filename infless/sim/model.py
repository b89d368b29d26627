"""The simulated world: servers with capacity and instances with batch queues.

A `SimServer` hands out cores and GPU shares. It records any overrun instead of failing, so
a test can assert there was none.

A `SimInstance` is what the data plane's pure decisions read of an instance, as the
gateway's `dataplane.instance.Instance` is:

- ready, idle, and accepting (its queue below the bound `policy.queue_capacity` gives);
- its `ExecModel`: service times at their tail, fed by every batch it serves;
- `finish_by_s`: `dataplane.admission`'s rule over its queue and the batch in flight.

So `admission.candidates` and `release.release_at_s` decide for it exactly as for a real
instance. In the fluid mode (`sim.fluid`) its queue is a `backlog` of requests (a real
number) instead.

Simulation only: mutable, no I/O, no clock (time is passed in).
"""

from __future__ import annotations

import enum
import math
from collections import Counter, deque

from infless.dataplane import admission
from infless.dataplane.latency import ExecModel
from infless.dataplane.policy import BatchSettings
from infless.types import InstanceConfig


class SimState(enum.Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    STOPPED = "stopped"


class SimServer:
    def __init__(self, server_id: str, cpus: int, gpus: int) -> None:
        self.server_id = server_id
        self.cpus = cpus
        self.free_cpus = cpus
        self.gpu_pct = [100] * gpus
        self.free_gpu_pct = [100] * gpus
        self.overruns = 0
        # cores held by draining instances (`lend`): a start may share them while they
        # finish (the gateway's allocator hands a stopping instance's cores to the start of
        # the same pass: a model-less switch, an upsize), which is no overrun
        self.lent_cpus = 0
        self.instances = 0  # live or draining instances holding capacity here
        self.models: Counter[str] = Counter()  # those instances per model (the store's tensors)

    def allocate(self, cpus: int, gpu_pct: int, device: int | None, model_key: str) -> None:
        self.instances += 1
        self.models[model_key] += 1
        self.free_cpus -= cpus
        if self.free_cpus + self.lent_cpus < 0:
            self.overruns += 1
        if gpu_pct > 0:
            if device is None or not 0 <= device < len(self.free_gpu_pct):
                self.overruns += 1
                return
            self.free_gpu_pct[device] -= gpu_pct
            if self.free_gpu_pct[device] < 0:
                self.overruns += 1

    def lend(self, cpus: int) -> None:
        """An instance here stops: its cores are lent until it has drained (`release`)."""
        self.lent_cpus += cpus

    def release(self, cpus: int, gpu_pct: int, device: int | None, model_key: str) -> None:
        """A drained instance is gone (its cores were lent since it stopped)."""
        self.lent_cpus -= cpus
        self.instances -= 1
        self.models[model_key] -= 1
        if self.models[model_key] <= 0:
            del self.models[model_key]
        self.free_cpus += cpus
        if gpu_pct > 0 and device is not None and 0 <= device < len(self.free_gpu_pct):
            self.free_gpu_pct[device] += gpu_pct


class SimInstance:
    """One simulated instance (see the module docstring); `settings` and `model` are set when
    it becomes ready, as a real instance's are from its warm-up."""

    def __init__(
        self,
        instance_id: str,
        function: str,
        model_key: str,
        server: SimServer,
        config: InstanceConfig,
        device: int | None,
        planned_exec_ms: float,
        started_s: float,
    ) -> None:
        self.instance_id = instance_id
        self.function = function
        self.model_key = model_key
        self.server = server
        self.config = config
        self.device = device
        self.planned_exec_ms = planned_exec_ms
        self.started_s = started_s
        self.state = SimState.STARTING
        self.settings: BatchSettings | None = None
        self.model: ExecModel | None = None
        self.queue: deque[tuple[float, float]] = deque()  # (arrival_s, deadline_s)
        self.backlog = 0.0  # "fluid": requests queued
        self.in_flight = 0  # the batch running (its size), 0 when the worker is free
        self.dispatched_s = 0.0
        self.timer_s: float | None = None
        self.last_arrival_s = math.nan
        self.interarrival_s = math.inf  # EWMA of arrival gaps (`release.next_target`)
        self.arrivals = 0
        self.target = 1  # the smallest sustaining batch ("slo" dispatch)
        self.share_rps = 0.0
        self.last_active_s = started_s
        self.offered = 0.0  # "fluid": requests admitted in the current step
        self.served = 0.0  # requests answered ("fluid": counts may be fractional)
        self.batches = 0.0
        self.exec_ms_total = 0.0  # the worker's time, summed over served batches
        self.stopped_s: float | None = None  # when it was drained and its capacity freed

    def become_ready(self, settings: BatchSettings, model: ExecModel, now_s: float) -> None:
        self.settings = settings
        self.model = model
        self.state = SimState.READY
        self.last_active_s = now_s

    @property
    def busy(self) -> bool:
        return self.in_flight > 0

    @property
    def queued(self) -> int:
        return len(self.queue) or math.ceil(self.backlog - 1e-9)

    @property
    def accepting(self) -> bool:
        settings = self.settings
        return (
            self.state is SimState.READY
            and settings is not None
            and len(self.queue) < settings.capacity
        )

    @property
    def idle(self) -> bool:
        """Ready with nothing running or queued (admission never refuses it)."""
        return self.state is SimState.READY and not self.in_flight and not self.queued

    def finish_by_s(self, now_s: float) -> float:
        model = self.model
        if model is None:
            return math.inf
        return admission.finish_by_s(now_s, model, self.queued, self.in_flight, self.dispatched_s)
