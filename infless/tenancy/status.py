"""What this host can enforce between tenants, and whether a deployment's tenant is admitted.
Pure: no I/O, no clock.

`assess` turns the facts the gateway gathered at start-up (its uid, the sandbox probe run in
a throwaway worker, whether pids and memory cgroups can be made, whether instances run on
other nodes) into an `IsolationStatus`: which parts are enforced and, one sentence each,
which are not. Workers enter a sandbox when the status is `active` (the uid drop and the
mount view work); tenants may share the gateway when it is `complete` (every part works),
or when the operator allowed shared tenants (`tenant_refusal`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

Mode = Literal["auto", "on", "off"]
PARTS = (
    "uid",
    "capabilities",
    "no_new_privs",
    "mount_namespace",
    "read_only_root",
    "network_namespace",
    "pids_limit",
    "memory_limit",
)


@dataclass(frozen=True, slots=True)
class Facts:
    """What the gateway found at start-up (`probe_error` "" and the probe's checks True:
    a throwaway sandbox worked)."""

    euid: int
    probe_error: str = ""
    probe_runtime_readable: bool = False
    probe_hidden: bool = False
    probe_read_only: bool = False
    pids_unavailable: str | None = None  # why not (None: pids cgroups work)
    memory_unavailable: str | None = None
    host_network: bool = False  # [isolation] host_network: no network namespace asked
    remote_nodes: bool = False  # instances run on Ray nodes, whose workers are not confined


@dataclass(frozen=True, slots=True)
class IsolationStatus:
    mode: Mode
    active: bool  # workers enter a sandbox (their own uid, mount view, no capabilities)
    enforced: tuple[str, ...]
    missing: tuple[str, ...]  # one sentence per part that is not enforced

    @property
    def complete(self) -> bool:
        return self.active and not self.missing

    def describe(self) -> dict[str, object]:
        """The `/system/info` view."""
        return {
            "mode": self.mode,
            "active": self.active,
            "complete": self.complete,
            "enforced": list(self.enforced),
            "missing": list(self.missing),
        }


def _sandbox_problem(facts: Facts) -> str | None:
    if facts.euid != 0:
        return (
            f"the gateway runs as uid {facts.euid}, not root: every worker runs as that uid, "
            "with its capabilities, and sees what the gateway sees"
        )
    if facts.probe_error:
        return f"workers cannot enter a sandbox here: {facts.probe_error}"
    if not facts.probe_runtime_readable:
        return (
            "a sandboxed worker cannot read the Python runtime: make the interpreter, the "
            "virtual environment and infless readable by other users (chmod -R o+rX)"
        )
    if not facts.probe_hidden:
        return "the state directory stayed visible inside a sandbox"
    return None


def assess(mode: Mode, facts: Facts) -> IsolationStatus:
    """Which parts of `PARTS` this host enforces, and why the others are not."""
    if mode == "off":
        return IsolationStatus(
            mode,
            False,
            (),
            ('isolation.enabled = "off": workers run as the gateway\'s user, unconfined',),
        )
    missing: list[str] = []
    problem = _sandbox_problem(facts)
    enforced: list[str] = []
    if problem is None:
        enforced += ["uid", "capabilities", "no_new_privs", "mount_namespace"]
        enforced += [] if not facts.probe_read_only else ["read_only_root"]
        if not facts.probe_read_only:
            missing.append("a sandbox's mounts could not be made read-only")
        if facts.host_network:
            missing.append("isolation.host_network = true: workers share the host's network")
        else:
            enforced.append("network_namespace")
    else:
        missing.append(problem)
    for part, reason in (
        ("pids_limit", facts.pids_unavailable),
        ("memory_limit", facts.memory_unavailable),
    ):
        if reason is None:
            enforced.append(part)
        else:
            missing.append(f"{part.replace('_', ' ')}s cannot be enforced: {reason}")
    if facts.remote_nodes:
        missing.append("workers on Ray nodes are not confined (the node agents run them)")
    return IsolationStatus(
        mode, problem is None and not facts.remote_nodes, tuple(enforced), tuple(missing)
    )


def tenant_refusal(
    status: IsolationStatus, allow_shared: bool, others: Collection[str], tenant: str
) -> str | None:
    """Why a function of `tenant` may not be deployed beside functions of the tenants
    `others` (None: it may). Refused only where tenants cannot be kept apart."""
    strangers = sorted(set(others) - {tenant})
    if status.complete or allow_shared or not strangers:
        return None
    why = "; ".join(status.missing) or "isolation is incomplete"
    serving = ", ".join(map(repr, strangers))
    return (
        f"tenant {tenant!r}: this gateway already serves tenant(s) {serving} "
        f"and cannot keep tenants' workers apart ({why}); deploy it as one of those tenants "
        "(label com.infless.tenant), run it on a gateway of its own, or set "
        "isolation.allow_shared_tenants = true to accept shared workers"
    )
