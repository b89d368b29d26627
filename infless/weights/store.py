"""The shared tensor store, gateway side (Tetris §3.3–3.4 and §4; TrIMS's host-memory tier).

Owns one directory per tenant under `root` (tmpfs, e.g. `/dev/shm/infless-store-<uid>`), one
file per distinct tensor named by its content key (`package_index.tensor_key`); first-time
sharing (`publish` copies what the tenant's directory lacks from the package's safetensors
and maps the rest); which instances hold which tensors; applying reclaim decisions; the
placement hook θ_ij (`shared_bytes_for`, `similarity`); adopting what a previous gateway left
(`adoption` reads the root; `store_layout` names its files).

Must not: import torch or numpy; read time except through the injected clock; run on the
event loop when it may read a package (`publish`, `index_package`, `shared_bytes_for` on a
cache miss): call those through `asyncio.to_thread`.

Thread safety: every public method is thread-safe. Heavy I/O runs outside the internal mutex,
under a per-tensor lock: an open-file-description `fcntl` record lock on one byte of
`<tenant>/.lock` (so other processes publishing into the same root are excluded too) plus an
in-process stripe lock (threads of one process share the description). Files appear by
atomic rename of a complete temp file, so a reader never sees a partial tensor and concurrent
publishers of the same model write each tensor once. Holders and reclaiming are known only
to the store object that owns the root: one gateway per root.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from infless.clock import Clock
from infless.weights.adoption import AdoptReport, survey
from infless.weights.filelock import KeyLocks, copy_range
from infless.weights.package_index import KEY_PATTERN, FileIdentity, IndexCache, PackageIndex
from infless.weights.reclaimer import TensorEntry, reclaim_decision
from infless.weights.store_layout import LOCK_FILE, TEMP_PREFIX, TENANT_PATTERN
from infless.weights.stored import StoredTensor

DEFAULT_KEEPALIVE_S = 600.0


class StoreError(Exception):
    """A store operation cannot proceed; the message names the tensor or tenant and the fix."""


@dataclass(frozen=True, slots=True)
class PublishOutcome:
    tensors: list[StoredTensor]
    copied_bytes: int  # written into the store by this call
    mapped_bytes: int  # already present (shared) when this call looked
    copied_files: int


class TensorStore:
    """Content-addressed tensor files per tenant, their holders, and reclaiming.

    `capacity_bytes` (None: unbounded) and `keepalive_s` feed `reclaim_decision`.
    `tenant_gid` maps a tenant to a group id (or None): its directory becomes group-readable
    (0o750, files 0o440) and that group's, for workers running as the tenant (`tenancy`);
    the root is then 0o711 (searchable, not listable); else 0o700 and files 0o400.
    Tensors are shared within a tenant, never across: that would tell one what another has.
    """

    def __init__(
        self,
        root: Path,
        clock: Clock,
        capacity_bytes: int | None = None,
        keepalive_s: float = DEFAULT_KEEPALIVE_S,
        *,
        tenant_gid: Mapping[str, int] | Callable[[str], int | None] | None = None,
    ) -> None:
        if keepalive_s < 0:
            raise ValueError(f"keepalive_s must be >= 0 seconds, got {keepalive_s}")
        self.root = root
        self.capacity_bytes = capacity_bytes
        self.keepalive_s = keepalive_s
        self._clock = clock
        self._tenant_gid = tenant_gid
        self._mutex = threading.Lock()
        self._locks = KeyLocks()
        self._entries: dict[tuple[str, str], TensorEntry] = {}
        self._holds: dict[str, tuple[str, frozenset[str]]] = {}
        self._indexes = IndexCache()

    # -- directories and locks ------------------------------------------------------------

    def tenant_dir(self, tenant: str) -> Path:
        if not TENANT_PATTERN.match(tenant):
            raise StoreError(
                f"tenant {tenant!r} is not a valid store name: use letters, digits, '.', '_' "
                "or '-' (at most 64, starting with a letter or digit)"
            )
        return self.root / tenant

    def _ensure_tenant(self, tenant: str) -> Path:
        directory = self.tenant_dir(tenant)
        if self._locks.has_tenant(tenant):
            return directory
        with self._mutex:
            if not self.root.exists():  # never change the mode of a directory we did not make
                self.root.mkdir(parents=True)
                self.root.chmod(0o711 if self._tenant_gid else 0o700)
            directory.mkdir(exist_ok=True)
            gid = self._gid(tenant)
            if gid is not None:
                os.chown(directory, -1, gid)
            directory.chmod(0o700 if gid is None else 0o750)
            self._locks.open_tenant(tenant, directory / LOCK_FILE)
        return directory

    def _gid(self, tenant: str) -> int | None:
        if self._tenant_gid is None:
            return None
        if callable(self._tenant_gid):
            return self._tenant_gid(tenant)
        return self._tenant_gid.get(tenant)

    def _file_mode(self, tenant: str) -> tuple[int, int | None]:
        gid = self._gid(tenant)
        return (0o400 if gid is None else 0o440), gid

    # -- packages ------------------------------------------------------------------------

    def index_package(self, package_dir: Path) -> PackageIndex:
        """The package's tensors and keys, cached by the weights file's identity."""
        return self._indexes.read(package_dir)

    def known_index(self, package_dir: Path) -> PackageIndex | None:
        """The package's index if it was read before and is current; never reads it (an
        event loop may call this)."""
        return self._indexes.known(package_dir)

    def publish(
        self, package_dir: Path, tenant: str, *, holder: str | None = None
    ) -> list[StoredTensor]:
        """The package's tensors as store files of `tenant`, copying the ones missing.

        With `holder`, the instance holds every tensor as it is published, atomically with
        respect to the reclaimer (prefer this to a separate `acquire`).
        """
        return self.publish_with_stats(package_dir, tenant, holder=holder).tensors

    def publish_with_stats(
        self, package_dir: Path, tenant: str, *, holder: str | None = None
    ) -> PublishOutcome:
        directory = self._ensure_tenant(tenant)
        if holder is not None:
            with self._mutex:
                self._add_holds(holder, tenant, ())
        index = self.index_package(package_dir)
        sizes = index.unique_sizes()
        offsets = {t.key: t.offset_bytes for t in reversed(index.tensors)}
        order = list(sizes)
        random.shuffle(order)  # Tetris §4: concurrent loaders meet fewer held locks
        copied_bytes = mapped_bytes = copied_files = 0
        with contextlib.ExitStack() as stack:
            source_fd: int | None = None
            for key in order:
                with self._locks.hold(tenant, key):
                    if self._present(directory / key, sizes[key]):
                        mapped_bytes += sizes[key]
                    else:
                        if source_fd is None:
                            source_fd = self._open_source(index)
                            stack.callback(os.close, source_fd)
                        self._write(source_fd, offsets[key], sizes[key], tenant, key)
                        copied_bytes += sizes[key]
                        copied_files += 1
                    with self._mutex:
                        self._touch(tenant, key, sizes[key])
                        if holder is not None:
                            self._add_holds(holder, tenant, {key})
        tensors = [
            StoredTensor(t.name, str(directory / t.key), t.dtype, list(t.shape))
            for t in index.tensors
        ]
        return PublishOutcome(tensors, copied_bytes, mapped_bytes, copied_files)

    @staticmethod
    def _present(path: Path, size_bytes: int) -> bool:
        try:
            return path.stat().st_size == size_bytes  # a wrong size is rewritten
        except FileNotFoundError:
            return False

    @staticmethod
    def _open_source(index: PackageIndex) -> int:
        fd = os.open(index.weights_path, os.O_RDONLY | os.O_CLOEXEC)
        if FileIdentity.of(os.fstat(fd)) != index.identity:
            os.close(fd)
            raise StoreError(
                f"{index.weights_path} changed while it was being published; publish again"
            )
        return fd

    def _write(self, source_fd: int, offset: int, size_bytes: int, tenant: str, key: str) -> None:
        directory = self.tenant_dir(tenant)
        temp = directory / f"{TEMP_PREFIX}{key}-{os.getpid()}-{threading.get_ident()}"
        mode, gid = self._file_mode(tenant)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            fd = os.open(temp, flags, 0o600)
            try:
                try:
                    copy_range(source_fd, fd, offset, size_bytes)
                except EOFError as exc:
                    raise StoreError(f"tensor {key} of tenant {tenant!r}: {exc}") from exc
                if gid is not None:
                    os.fchown(fd, -1, gid)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
            temp.rename(directory / key)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise

    # -- holders -------------------------------------------------------------------------

    def _touch(self, tenant: str, key: str, size_bytes: int) -> None:
        self._entries[(tenant, key)] = TensorEntry(tenant, key, size_bytes, self._clock.now())

    def _add_holds(self, instance_id: str, tenant: str, keys: Iterable[str]) -> None:
        held_tenant, held = self._holds.get(instance_id, (tenant, frozenset()))
        if held_tenant != tenant:
            raise StoreError(
                f"instance {instance_id!r} already holds tensors of tenant {held_tenant!r}; "
                f"an instance maps one tenant's store, not also {tenant!r}"
            )
        self._holds[instance_id] = (tenant, held | frozenset(keys))

    def _key_of(self, tenant: str, path: str) -> str:
        file = Path(path)
        if file.parent != self.tenant_dir(tenant) or not KEY_PATTERN.match(file.name):
            raise StoreError(f"{path} is not a tensor of tenant {tenant!r}'s store")
        return file.name

    def acquire(self, instance_id: str, tenant: str, tensors: Sequence[StoredTensor]) -> None:
        """Record that `instance_id` maps these tensors (they stay until it is released)."""
        keys = {self._key_of(tenant, t.path) for t in tensors}
        now = self._clock.now()
        with self._mutex:
            missing = sorted(k for k in keys if (tenant, k) not in self._entries)
            if missing:
                raise StoreError(
                    f"{len(missing)} tensors of tenant {tenant!r} are no longer stored "
                    f"(first: {missing[0]}); publish the package again"
                )
            self._add_holds(instance_id, tenant, keys)
            for key in keys:
                entry = self._entries[(tenant, key)]
                self._entries[(tenant, key)] = replace(entry, last_used_s=now)

    def release(self, instance_id: str) -> None:
        """The instance no longer maps its tensors; their keep-alive window starts now."""
        with self._mutex:
            self._drop_holds(instance_id, self._clock.now())

    def _drop_holds(self, instance_id: str, now: float) -> None:
        tenant, keys = self._holds.pop(instance_id, ("", frozenset()))
        for key in keys:
            entry = self._entries.get((tenant, key))
            if entry is not None:
                self._entries[(tenant, key)] = replace(entry, last_used_s=now)

    def holders(self, tenant: str, key: str) -> frozenset[str]:
        with self._mutex:
            holds = self._holds.items()
            return frozenset(i for i, (t, keys) in holds if t == tenant and key in keys)

    def held_by(self, instance_id: str) -> frozenset[tuple[str, str]]:
        with self._mutex:
            tenant, keys = self._holds.get(instance_id, ("", frozenset()))
            return frozenset((tenant, k) for k in keys)

    def live_set(self) -> set[tuple[str, str]]:
        with self._mutex:
            return {(t, k) for t, keys in self._holds.values() for k in keys}

    def entries(self) -> list[TensorEntry]:
        with self._mutex:
            return list(self._entries.values())

    def resident_bytes(self, tenant: str | None = None) -> int:
        with self._mutex:
            return sum(
                e.size_bytes for e in self._entries.values() if tenant is None or e.tenant == tenant
            )

    def shared_bytes_for(self, package_dir: Path, tenant: str) -> int:
        """Tetris θ_ij numerator: bytes of the package's tensors already in this store."""
        return self._stored_bytes(self.index_package(package_dir), tenant)

    def similarity(self, package_dir: Path, tenant: str, *, known_only: bool = False) -> float:
        """Tetris θ_ij = Mem(T_i ∩ T_store) / Mem(T_i), in [0, 1]; `known_only`: 0 for a
        package whose index was never read (never reads one: an event loop may call it)."""
        index = self.known_index(package_dir) if known_only else self.index_package(package_dir)
        if index is None:
            return 0.0
        total = index.unique_bytes
        return 1.0 if total == 0 else self._stored_bytes(index, tenant) / total

    def _stored_bytes(self, index: PackageIndex, tenant: str) -> int:
        sizes = index.unique_sizes()
        with self._mutex:
            return sum(size for key, size in sizes.items() if (tenant, key) in self._entries)

    # -- reclaiming and restart ----------------------------------------------------------

    def reclaim(self, running: Iterable[str], now: float) -> list[TensorEntry]:
        """Drop holds of instances not in `running`, then free what `reclaim_decision` says.

        A tensor whose lock is busy (being published) or that was used after the decision
        is skipped until the next pass.
        """
        alive = set(running)
        with self._mutex:
            for instance_id in [i for i in self._holds if i not in alive]:
                self._drop_holds(instance_id, now)
            live = {(t, k) for t, keys in self._holds.values() for k in keys}
            decision = reclaim_decision(
                self._entries.values(), live, now, self.keepalive_s, self.capacity_bytes
            )
        freed: list[TensorEntry] = []
        for entry in decision:
            with self._locks.hold(entry.tenant, entry.key, blocking=False) as locked:
                if not locked:
                    continue
                with self._mutex:
                    if self._entries.get(entry.ref) != entry or any(
                        t == entry.tenant and entry.key in keys for t, keys in self._holds.values()
                    ):
                        continue
                    del self._entries[entry.ref]
                (self.tenant_dir(entry.tenant) / entry.key).unlink(missing_ok=True)
                freed.append(entry)
        return freed

    def adopt_or_clean(self) -> AdoptReport:
        """After a gateway restart: adopt stored tensors as unreferenced, remove stale temps.

        Only tenant directories a store made (holding its lock file) are touched.
        Adopted tensors are last used "now": they serve as a cache for the keep-alive window
        (or until capacity pressure), then the reclaimer frees them. A temp file is stale
        when nobody holds its tensor's lock (its writer died).
        """
        found = survey(self.root)
        for tenant in found.tenants:
            self._ensure_tenant(tenant)
        removed = 0
        for temp in found.temps:
            with self._locks.hold(temp.tenant, temp.key, blocking=False) as locked:
                if locked:
                    temp.path.unlink(missing_ok=True)
                    removed += 1
        now = self._clock.now()
        adopted: list[TensorEntry] = []
        with self._mutex:
            for left in found.tensors:
                if (left.tenant, left.key) not in self._entries:
                    entry = TensorEntry(left.tenant, left.key, left.size_bytes, now)
                    self._entries[entry.ref] = entry
                    adopted.append(entry)
        return AdoptReport(
            adopted_files=len(adopted),
            adopted_bytes=sum(e.size_bytes for e in adopted),
            removed_temp_files=removed,
            ignored=found.ignored,
        )

    def close(self) -> None:
        """Close the lock files; the stored tensors stay (a later store may adopt them)."""
        self._locks.close()
