"""What one machine runs workers with, built from the config: the tensor store, the
launcher (zygote or fresh processes) and the `ProcessStarter` with its templates, cgroups
and memory limits, and the tenants' sandboxes (task limits too). The gateway builds one for
its own machine (`app`), a node agent one for its node (`nodes.agent`: no sandboxes).
Gateway side: never imports torch.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from infless.clock import Clock
from infless.cluster.cgroups import CpuConfiner
from infless.cluster.memory import MemoryLimiter
from infless.cluster.pids import PidsLimiter
from infless.config import Config
from infless.registry.secrets import SecretStore
from infless.tenancy.sandboxes import TenantSandboxes
from infless.weights.store import TensorStore
from infless.workers.boot import ProcessStarter
from infless.workers.launcher import SubprocessLauncher, WorkerLauncher
from infless.workers.output import Sink
from infless.workers.records import RunRecords
from infless.workers.requests import StartSettings
from infless.workers.templates import TemplateCache
from infless.workers.zygote import ZygoteLauncher


def make_launcher(config: Config, records: RunRecords | None = None) -> WorkerLauncher:
    if config.workers.launcher == "zygote":
        return ZygoteLauncher(records=records)
    return SubprocessLauncher()


def store_root(config: Config) -> Path:
    """The configured store root, else one tmpfs directory per state directory."""
    if config.store.root:
        return Path(config.store.root).absolute()  # workers may work from elsewhere
    digest = hashlib.blake2b(str(config.state_dir.resolve()).encode(), digest_size=6).hexdigest()
    return Path("/dev/shm") / f"infless-store-{digest}"  # noqa: S108 - a dedicated subdir


def make_store(
    config: Config, clock: Clock, sandboxes: TenantSandboxes | None = None
) -> TensorStore | None:
    """The store; with `sandboxes`, each tenant's directory is its group's."""
    if not config.store.enabled:
        return None
    return TensorStore(
        store_root(config),
        clock,
        capacity_bytes=config.store.capacity_bytes or None,
        keepalive_s=config.store.keepalive_s,
        tenant_gid=None if sandboxes is None else sandboxes.gid,
    )


def make_starter(
    config: Config,
    store: TensorStore | None,
    confiner: CpuConfiner | None,
    secrets: SecretStore | None = None,
    output: Sink | None = None,
    *,
    cgroup_parent: str = "infless",
    records: RunRecords | None = None,
    sandboxes: TenantSandboxes | None = None,
) -> ProcessStarter:
    """Real workers: memory limits when cgroups are on (under `cgroup_parent`), secrets
    from `secrets`, each worker's stdout and stderr to `output` (function, instance,
    line); with `records`, a PID file for each process forked (`workers.records`); with
    `sandboxes`, each tenant's workers in their sandbox (task limits when cgroups are on)."""
    launcher = make_launcher(config, records)
    templates = (
        TemplateCache(launcher, store, config.workers.start_timeout_s)
        if store is not None and isinstance(launcher, ZygoteLauncher) and config.workers.templates
        else None
    )
    settings = StartSettings(
        start_timeout_s=config.workers.start_timeout_s,
        warmup_rounds=config.batching.warmup_rounds,
        private_weights=config.store.private_weights,
        nice=config.workers.nice,
    )
    memory = MemoryLimiter(parent=cgroup_parent) if config.workers.cgroups else None
    pids = None
    if sandboxes is not None:
        pids = PidsLimiter(parent=cgroup_parent) if config.workers.cgroups else None
        sandboxes.limiters(pids, memory)
    return ProcessStarter(
        settings,
        launcher,
        store,
        confiner,
        templates,
        memory=memory,
        secrets=None if secrets is None else secrets.read,
        output=output,
        sandboxes=sandboxes,
        pids=pids,
    )
