"""Readiness: whether the gateway can take traffic, as Kubernetes' readiness probe and
Triton's `/v2/health/ready` (tritonclient's `is_server_ready`) mean it.

The gateway is not ready until it has restored the functions it starts with (the
registry's and the config's `[[functions]]`). Then it waits until each of them has settled
once:
- it serves (an instance is ready);
- it is scaled to zero (its next request starts one);
- or it failed (its package could not be deployed, or its instance could not start).
A failed function is reported with its reason. It does not keep the others out of
service, since an unready gateway gets no traffic at all. So right after
`is_server_ready`, `is_model_ready` is true for every startup function that did not fail.

Once every function settled, the gateway stays ready: a function deployed later, or a
worker being replaced, is that function's own readiness, not the server's. Liveness is
separate (`/healthz`, `/v2/health/live`: the process answers). The report becomes a
`ReadinessView` for the gateway to render. Bookkeeping only: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from infless.control.failed import FailedDeployment
from infless.control.functions import DeployedFunction
from infless.control.views import ReadinessView

SETTLED_STATES = frozenset({"ready", "idle", "failed"})


@dataclass(frozen=True, slots=True)
class ReadinessReport:
    ready: bool
    starting: tuple[str, ...] = ()  # the startup functions not settled yet
    failed: dict[str, str] = field(default_factory=dict)  # function -> why

    def view(self) -> ReadinessView:
        return ReadinessView(ready=self.ready, starting=list(self.starting), failed=self.failed)


class Readiness:
    """The startup functions and which of them settled (see the module docstring)."""

    def __init__(
        self,
        functions: Mapping[str, DeployedFunction],
        failed: Mapping[str, FailedDeployment],
    ) -> None:
        self._functions = functions
        self._failed = failed
        self._waiting: set[str] | None = None  # None: the functions are not restored yet

    def started(self, names: Iterable[str]) -> None:
        """The gateway restored its functions: these must settle before it is ready."""
        self._waiting = set(names)

    def report(self) -> ReadinessReport:
        if self._waiting is None:
            return ReadinessReport(False, ("(the gateway is restoring its functions)",))
        failed = {name: f.error for name, f in self._failed.items()}
        for name, function in self._functions.items():
            if function.state == "failed":
                failed[name] = function.health.last_error or "its instance failed to start"
        for name in list(self._waiting):
            waited = self._functions.get(name)
            if waited is None or waited.state in SETTLED_STATES:  # (or removed since)
                self._waiting.discard(name)
        return ReadinessReport(not self._waiting, tuple(sorted(self._waiting)), failed)
