"""Per-model templates: instances of a stored model forked from a process that already holds it.

A zygote-forked worker builds its model, attaches the stored weights and warms up on its own.
Each of those steps leaves private pages (Python objects, allocator state, torch/oneDNN
caches): ~20 MiB per resnet-50 worker. A template does those steps once, single-threaded,
then serves forks. Its instances share those pages copy-on-write and only time their own
warm-up, on their own cores.

There is one template per (tenant, package, stored tensors and their files, environment
variables): a template loads its model with the function's `envVars` set, as an instance
would. A store file published again (deleted or truncated under the template, then
re-published by a start: a new inode) is a new key, so no instance is forked from a template
that maps the old file. Functions with secrets have no template: each of their workers
mounts its own.

A template is started beside the model's second instance (a single instance would only pay
for it). That instance does not wait for it and forks from the zygote. Instances asked for
while it starts wait for it, so a burst of scale-out shares it; later ones fork from it at
once. It holds the model's store tensors like an instance and is closed with the model's
last instance: a cold function keeps no template.

Gateway side, never imports torch: `TemplateCache` (used by `InstanceBooter`) starts
templates through the `ZygoteLauncher` and launches instances from them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from infless.clock import perf_s
from infless.weights.stored import StoredTensor
from infless.workers import protocol as p
from infless.workers.forkclient import ForkServerClient, ZygoteError
from infless.workers.launcher import LaunchedWorker
from infless.workers.status import TemplateView

if TYPE_CHECKING:
    from infless.weights.store import TensorStore
    from infless.workers.zygote import ZygoteLauncher

log = logging.getLogger(__name__)

TEMPLATE_WARMUP_BATCH_SIZES = [1]  # the template's own warm-up: every operator runs once
TEMPLATE_FROM_INSTANCES = 2  # a model with one instance gains nothing from a template


class TemplateError(RuntimeError):
    """A template could not be started; the instance falls back to a plain zygote fork."""


@dataclass(frozen=True, slots=True)
class TemplateKey:
    tenant: str
    package_dir: str
    tensors_digest: str  # a new publication of different tensors (or env) gets a new template
    env: tuple[tuple[str, str], ...] = ()  # the environment the model is loaded with

    @staticmethod
    def of(
        tenant: str,
        package_dir: str,
        stored: list[StoredTensor],
        env: dict[str, str] | None = None,
        files: Sequence[tuple[int, int]] = (),
    ) -> TemplateKey:
        """`files`: each stored tensor's file identity (inode, size), in `stored`'s order."""
        digest = hashlib.blake2b(digest_size=8)
        for tensor in stored:
            digest.update(f"{tensor.name}\0{tensor.path}\0".encode())
        for inode, size_bytes in files:
            digest.update(f"file\0{inode}\0{size_bytes}\0".encode())
        variables = tuple(sorted((env or {}).items()))
        for name, value in variables:
            digest.update(f"env\0{name}\0{value}\0".encode())
        return TemplateKey(tenant, package_dir, digest.hexdigest(), variables)

    @property
    def template_id(self) -> str:
        name = Path(self.package_dir).name or "model"
        return f"template-{self.tenant}-{name}-{self.tensors_digest}"


@dataclass(slots=True)
class Template:
    key: TemplateKey
    pid: int
    client: ForkServerClient
    ready: p.Ready
    start_ms: float

    def describe(self, instances: list[str]) -> TemplateView:
        """This template, with the instances forked from it that still run."""
        return TemplateView(
            template_id=self.key.template_id,
            pid=self.pid,
            tenant=self.key.tenant,
            package=self.key.package_dir,
            alive=self.client.alive,
            start_ms=round(self.start_ms, 1),
            build_ms=round(self.ready.start.build_ms, 1),
            attach_ms=round(self.ready.start.attach_ms, 1),
            warmup_ms=round(self.ready.start.warmup_ms, 1),
            instances=instances,
        )


async def _recv_exact(sock: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    data = bytearray()
    while len(data) < size:
        chunk = await loop.sock_recv(sock, size - len(data))
        if not chunk:
            raise TemplateError("the template exited while loading its model")
        data += chunk
    return bytes(data)


async def _load_over(sock: socket.socket, request: p.LoadModel) -> p.Ready:
    """Send `LoadModel` on the template's load socket; its `Ready`, or why it failed."""
    loop = asyncio.get_running_loop()
    await loop.sock_sendall(sock, p.encode_frame(request))
    header = await _recv_exact(sock, p.FRAME_HEADER.size)
    reply = p.decode_from_worker(await _recv_exact(sock, p.frame_length(header)))
    if isinstance(reply, p.LoadFailed):
        raise TemplateError(f"the template could not load its model: {reply.error}")
    if not isinstance(reply, p.Ready):
        raise TemplateError(f"the template answered {type(reply).__name__} to LoadModel")
    return reply


async def start_template(
    zygote: ZygoteLauncher,
    key: TemplateKey,
    stored: list[StoredTensor],
    timeout_s: float,
    sandbox: p.Sandbox | None = None,
    on_fork: Callable[[str, int], None] | None = None,
) -> Template:
    """Fork a template from the zygote (`on_fork`: put it in its cgroups before it loads),
    have it load the model (in its tenant's `sandbox`), wait until it serves forks."""
    started = perf_s()
    control_ours, control_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    load_ours, load_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    load_ours.setblocking(False)
    pid = 0
    try:
        with control_theirs, load_theirs:  # the zygote passes its own copies to the child
            pid = await zygote.fork_template(
                key.template_id, control_theirs.fileno(), load_theirs.fileno()
            )
        if on_fork is not None:
            on_fork(key.template_id, pid)
        request = p.LoadModel(
            package_dir=key.package_dir,
            cpus=1,
            warmup_batch_sizes=TEMPLATE_WARMUP_BATCH_SIZES,
            warmup_rounds=1,
            store_tensors=stored,
            env=dict(key.env),
            sandbox=sandbox,
        )
        client = ForkServerClient(control_ours, key.template_id, records=zygote.records)
        async with asyncio.timeout(timeout_s):
            ready = await _load_over(load_ours, request)
            forks = await client.handshake(timeout_s)
        if forks.threads != 1:
            await client.close()
            raise TemplateError(f"the template runs {forks.threads} threads; forking it is unsafe")
    except BaseException as exc:
        control_ours.close()
        if pid and not isinstance(exc, TemplateError | ZygoteError):
            with contextlib.suppress(ProcessLookupError):  # stuck or cancelled: ours, by pid
                os.kill(pid, signal.SIGKILL)
        raise
    finally:
        load_ours.close()
    return Template(key, pid, client, ready, (perf_s() - started) * 1000.0)


@dataclass(slots=True)
class _Slot:
    """One key's state: the instances of that model, and its template's start (or result)."""

    users: set[str] = field(default_factory=set)
    start: asyncio.Task[Template] | None = None
    sandbox: p.Sandbox | None = None  # what the template (and every fork of it) runs in

    def template(self) -> Template | None:
        """The running template, if its start finished well and it is still alive."""
        if self.start is None or not self.start.done() or self.start.cancelled():
            return None
        if self.start.exception() is not None:
            return None
        template = self.start.result()
        return template if template.client.alive else None


class TemplateCache:
    """The templates, by key, with the instances of each model.

    `launch` is asked for every instance of a stored model. It answers None (fork that
    instance from the zygote, as without templates) while the model has no template
    starting or running; the model's second instance starts one in the background and does
    not wait for it. Instances asked for while it starts wait for it; all are forked from
    it. A template that failed to start or died is started again by the next instance,
    which, again, does not wait. `release` closes a model's template with its last
    instance. Every template holds its tensors in the store under its template id
    (`holder_ids`, for the reclaimer).
    """

    def __init__(
        self, zygote: ZygoteLauncher, store: TensorStore, start_timeout_s: float = 180.0
    ) -> None:
        self._zygote = zygote
        self._store = store
        self._start_timeout_s = start_timeout_s
        self._slots: dict[TemplateKey, _Slot] = {}
        self._by_instance: dict[str, TemplateKey] = {}
        self._forked: set[str] = set()  # instances forked from their model's template
        self.on_fork: Callable[[str, int], None] | None = None  # a template's pid, to confine
        self.on_stop: Callable[[str], None] | None = None  # its cgroups may go

    async def launch(
        self,
        instance_id: str,
        tenant: str,
        package_dir: str,
        stored: list[StoredTensor],
        env: dict[str, str] | None = None,
        capture_output: bool = False,
        sandbox: p.Sandbox | None = None,
    ) -> LaunchedWorker | None:
        """Fork `instance_id` from its model's template; None: fork it elsewhere (OSError: a
        stored file is gone). A new template is started in `sandbox` (its tenant's)."""
        key = TemplateKey.of(tenant, package_dir, stored, env, _identities(stored))
        slot = self._slots.setdefault(key, _Slot())
        slot.users.add(instance_id)
        self._by_instance[instance_id] = key
        if slot.start is None or (slot.start.done() and slot.template() is None):
            if len(slot.users) >= TEMPLATE_FROM_INSTANCES:
                if slot.start is not None:
                    _close_dead(slot.start)
                    self._stopped(key)
                slot.sandbox = sandbox
                self._start(key, slot, stored)
            return None
        assert slot.start is not None
        started = perf_s()
        try:
            template = await asyncio.shield(slot.start)
        except (TemplateError, ZygoteError, OSError):
            return None  # logged by the start's callback
        if not template.client.alive:
            return None
        launched = await template.client.launch(instance_id, capture_output)
        self._forked.add(instance_id)
        spawn_ms = (perf_s() - started) * 1000.0  # with any wait for the template
        return LaunchedWorker(launched.pid, launched.sock, spawn_ms, None, launched.output)

    def _start(self, key: TemplateKey, slot: _Slot, stored: list[StoredTensor]) -> None:
        self._store.acquire(key.template_id, key.tenant, stored)
        start = start_template(
            self._zygote, key, stored, self._start_timeout_s, slot.sandbox, self.on_fork
        )
        slot.start = asyncio.get_running_loop().create_task(start, name=key.template_id)
        slot.start.add_done_callback(_log_start)

    def has_template(self, tenant: str, package_dir: str) -> bool:
        """Whether a template of the model runs now (an instance would fork from it)."""
        return any(
            key.tenant == tenant and key.package_dir == package_dir and slot.template()
            for key, slot in self._slots.items()
        )

    async def wait_started(self, instance_id: str) -> Template | None:
        """The template of `instance_id`'s model once its start ends (None: it failed)."""
        key = self._by_instance.get(instance_id)
        slot = None if key is None else self._slots.get(key)
        if slot is None or slot.start is None:
            return None
        with contextlib.suppress(Exception):
            await asyncio.shield(slot.start)
        return slot.template()

    def sandbox_of(self, instance_id: str) -> p.Sandbox | None:
        """The sandbox `instance_id` runs in when it was forked from its model's template."""
        key = self._by_instance.get(instance_id)
        slot = None if key is None or instance_id not in self._forked else self._slots.get(key)
        return None if slot is None else slot.sandbox

    def _stopped(self, key: TemplateKey) -> None:
        if self.on_stop is not None:
            self.on_stop(key.template_id)

    def release(self, instance_id: str) -> None:
        """`instance_id` is gone; a model left without instances loses its template."""
        self._forked.discard(instance_id)
        key = self._by_instance.pop(instance_id, None)
        slot = None if key is None else self._slots.get(key)
        if key is None or slot is None:
            return
        slot.users.discard(instance_id)
        if not slot.users:
            del self._slots[key]
            self._stop(key, slot)

    def _stop(self, key: TemplateKey, slot: _Slot) -> None:
        self._store.release(key.template_id)
        self._stopped(key)
        if slot.start is None:
            return
        if not slot.start.done():
            slot.start.cancel()  # start_template kills a template it did not finish starting
        elif (template := slot.template()) is not None:
            closing = asyncio.get_running_loop().create_task(template.client.close())
            closing.add_done_callback(_log_close_error)

    def holder_ids(self) -> list[str]:
        """The store holders the templates are (for the reclaimer's live set)."""
        return [key.template_id for key, slot in self._slots.items() if slot.start is not None]

    def template_of(self, instance_id: str) -> str | None:
        key = self._by_instance.get(instance_id)
        return key.template_id if key is not None and instance_id in self._forked else None

    def describe(self) -> list[TemplateView]:
        described = []
        for slot in self._slots.values():
            template = slot.template()
            if template is not None:
                forked = sorted(i for i in slot.users if i in self._forked)
                described.append(template.describe(forked))
        return described

    async def close(self) -> None:
        slots, self._slots = list(self._slots.items()), {}
        self._by_instance.clear()
        self._forked.clear()
        for key, slot in slots:
            self._store.release(key.template_id)
            self._stopped(key)
            if slot.start is None:
                continue
            slot.start.cancel()
            with contextlib.suppress(BaseException):
                await slot.start
            if (template := slot.template()) is not None:
                await template.client.close()


def _identities(stored: list[StoredTensor]) -> list[tuple[int, int]]:
    """Each stored file's (inode, size): microseconds each, on tmpfs."""
    identities = []
    for tensor in stored:
        info = Path(tensor.path).stat()
        identities.append((info.st_ino, info.st_size))
    return identities


def _close_dead(start: asyncio.Task[Template]) -> None:
    """Close the control socket of a template that started and has since died."""
    if not start.cancelled() and start.exception() is None:
        closing = asyncio.get_running_loop().create_task(start.result().client.close())
        closing.add_done_callback(_log_close_error)


def _log_start(task: asyncio.Task[Template]) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        log.warning("template %s did not start: %s", task.get_name(), error)
    else:
        log.info("template %s started in %.0f ms", task.get_name(), task.result().start_ms)


def _log_close_error(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("closing a template failed: %s", task.exception())
