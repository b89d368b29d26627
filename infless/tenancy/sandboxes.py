"""Gateway side of the tenants' sandboxes: what each worker of a tenant is told to enter, and
what each sandboxed worker can see.

`TenantSandboxes` is made with the `[isolation]` section, the tenants' ids (the registry)
and the directories no worker may see (the state directory, the model repository, the
store's root, `isolation.hide_paths`).

`examine` runs once at start-up. The probe (`workers.sandbox.probe_sandbox`, a throwaway
worker that enters a sandbox) and the cgroup facts become the `IsolationStatus`
(`tenancy.status`), logged and shown in `/system/info`.

While the status is active, `sandbox_for(tenant, package_dir)` is the
`workers.protocol.Sandbox` of a worker of that tenant: its uid and gid, the hidden
directories, and what it keeps. It keeps its store directory and every package of its
tenant deployed so far (`deployed`): a worker kept idle may later be transformed into a
sibling function's model, and a GPU worker may load the next one.

- CPU workers get a scratch on /tmp, /var/tmp and /dev/shm, and an empty network namespace.
- GPU workers keep the host's /dev/shm and network: CUDA IPC and MPS use them, and their
  device was opened before the sandbox.

`record`/`sees` remember, per worker pid, which packages its mount view holds, so that a
worker is never handed a package it cannot see.

Gateway side: never imports torch.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from infless.cluster.memory import MemoryLimiter
from infless.cluster.pids import PidsLimiter
from infless.errors import ConfigError
from infless.registry.tenants import TenantIdentity
from infless.tenancy.config import IsolationConfig
from infless.tenancy.status import Facts, IsolationStatus, assess, tenant_refusal
from infless.workers import protocol as p
from infless.workers.confinement import SandboxLimits
from infless.workers.sandbox import DEFAULT_SCRATCH, probe_sandbox

log = logging.getLogger(__name__)

GPU_SCRATCH = ("/tmp", "/var/tmp")  # noqa: S108 - replaced by the sandbox's own tmpfs
GPU_SHARED = ("/dev/shm",)  # noqa: S108 - the host's, left as it is


def _absolute(path: Path | str) -> str:
    """An absolute path, symbolic links kept (a worker opens the path it is given)."""
    return str(Path(path).absolute())


class TenantSandboxes:
    def __init__(
        self,
        cfg: IsolationConfig,
        identities: Callable[[str], TenantIdentity],
        hidden: Sequence[Path],
        store_root: Path | None,
    ) -> None:
        self.cfg = cfg
        self._identities = identities
        extra = [Path(h) for h in cfg.hide_paths]
        self.hidden = [_absolute(h) for h in [*hidden, *extra]]
        self._store_root = None if store_root is None else _absolute(store_root)
        self.status: IsolationStatus | None = None  # set by `examine`
        self._pids_unavailable: str | None = "workers.cgroups is off"
        self._memory_unavailable: str | None = "workers.cgroups is off"
        self._packages: dict[str, dict[str, None]] = {}  # tenant -> its packages, in order
        self._views: dict[int, frozenset[str]] = {}  # sandboxed worker pid -> its packages

    @property
    def active(self) -> bool:
        return self.status is not None and self.status.active

    def limiters(self, pids: PidsLimiter | None, memory: MemoryLimiter | None) -> None:
        """The cgroup limiters this machine's workers get (None: cgroups are off)."""
        off = "workers.cgroups is off"
        self._pids_unavailable = off if pids is None else pids.unavailable
        self._memory_unavailable = off if memory is None else memory.unavailable

    def limits(self) -> SandboxLimits | None:
        """What every sandboxed worker gets unless its function asks for more (None:
        workers are not sandboxed)."""
        if not self.active:
            return None
        return SandboxLimits(self.cfg.memory_bytes or None, self.cfg.pids_max)

    def gid(self, tenant: str) -> int | None:
        """The group owning `tenant`'s store directory (None: not sandboxed)."""
        return self._identities(tenant).gid if self.active else None

    async def start(self, remote_nodes: bool = False) -> IsolationStatus:
        """Examine this host, say what is (not) enforced, and refuse to go on when
        `isolation.enabled = "on"` and something is not."""
        status = await self.examine(remote_nodes)
        if status.complete:
            log.info(
                "isolation: every tenant's workers are confined (%s)", ", ".join(status.enforced)
            )
        else:
            log.warning(
                "isolation %s: NOT enforced: %s",
                "active" if status.active else "off",
                "; ".join(status.missing),
            )
        if self.cfg.enabled == "on" and not status.complete:
            raise ConfigError(
                'isolation.enabled = "on" but this host cannot enforce it: '
                + "; ".join(status.missing)
                + ' (set isolation.enabled = "auto" to run with what it can)'
            )
        return status

    async def examine(self, remote_nodes: bool = False) -> IsolationStatus:
        """Probe this host once and keep the status (module docstring)."""
        pids_unavailable, memory_unavailable = self._pids_unavailable, self._memory_unavailable
        facts = Facts(
            os.geteuid(),
            pids_unavailable=pids_unavailable,
            memory_unavailable=memory_unavailable,
            host_network=self.cfg.host_network,
            remote_nodes=remote_nodes,
        )
        if self.cfg.enabled != "off" and facts.euid == 0:
            ids = self.cfg.uids
            hidden = Path(self.hidden[0]) if self.hidden else Path("/nonexistent")
            report = await probe_sandbox(ids.last, ids.last, hidden)
            facts = dataclasses.replace(
                facts,
                probe_error=report.error,
                probe_runtime_readable=report.runtime_readable,
                probe_hidden=report.hidden,
                probe_read_only=report.read_only,
            )
        self.status = assess(self.cfg.enabled, facts)
        return self.status

    def refusal(self, tenant: str, others: Collection[str]) -> str | None:
        """Why a function of `tenant` may not join the `others` tenants' (None: it may)."""
        status = self.status or assess(self.cfg.enabled, Facts(euid=os.geteuid()))
        return tenant_refusal(status, self.cfg.allow_shared_tenants, others, tenant)

    def deployed(self, package_dir: Path, tenant: str) -> None:
        """A function of `tenant` runs `package_dir`: its workers started from now on see it."""
        self._packages.setdefault(tenant, {})[_absolute(package_dir)] = None

    def sandbox_for(
        self,
        tenant: str,
        package_dir: Path | str,
        *,
        gpu: bool = False,
        keep: Sequence[Path] = (),
    ) -> p.Sandbox | None:
        """The sandbox of a worker of `tenant` serving `package_dir` (None: not active)."""
        if not self.active:
            return None
        identity = self._identities(tenant)
        packages = dict.fromkeys([_absolute(package_dir), *self._packages.get(tenant, {})])
        kept = [*packages, *(_absolute(k) for k in keep)]
        if self._store_root is not None:
            kept.append(str(Path(self._store_root) / tenant))
        return p.Sandbox(
            uid=identity.uid,
            gid=identity.gid,
            hide=list(self.hidden),
            keep=kept,
            scratch=list(GPU_SCRATCH if gpu else DEFAULT_SCRATCH),
            scratch_bytes=self.cfg.scratch_bytes,
            shared=list(GPU_SHARED) if gpu else [],
            host_network=self.cfg.host_network or gpu,
        )

    # -- what each sandboxed worker sees ------------------------------------------------
    def record(self, pid: int, sandbox: p.Sandbox) -> None:
        """`pid` entered (or already was in) `sandbox`: it sees the packages it keeps."""
        self._views = {k: v for k, v in self._views.items() if _alive(k)}
        self._views[pid] = frozenset(sandbox.keep)

    def sees(self, pid: int, package_dir: Path | str) -> bool:
        """Whether the worker `pid` can load `package_dir` (a worker in no sandbox can)."""
        view = self._views.get(pid)
        return view is None or _absolute(package_dir) in view

    def sandboxed(self, pid: int) -> bool:
        return pid in self._views

    def forget(self, pid: int) -> None:
        self._views.pop(pid, None)

    def describe(self) -> dict[str, object]:
        """The `/system/info` view: the status and the limits each worker gets."""
        status = self.status.describe() if self.status is not None else {"mode": self.cfg.enabled}
        return status | {
            "uidRange": self.cfg.uid_range,
            "allowSharedTenants": self.cfg.allow_shared_tenants,
            "pidsMax": self.cfg.pids_max,
            "memoryBytes": self.cfg.memory_bytes or None,
            "scratchBytes": self.cfg.scratch_bytes,
            "hostNetwork": self.cfg.host_network,
        }


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
