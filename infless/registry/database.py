"""The state directory's SQLite file (`registry.sqlite`): opening it safely, and what its
failures mean to the person who has to act on them.

`open_database` does, in order:

- it checks the file before the gateway trusts it (`PRAGMA quick_check`): a damaged file is
  refused, never read as empty;
- it waits up to `STARTUP_BUSY_S` for a write lock another process holds;
- it proves it can write, and creates the tables;
- it then keeps a short busy timeout. The registry is written from the event loop, so a lock
  held elsewhere must fail a management call at once (503, retry) rather than stall every
  request behind it.

Failures at startup raise `StateError`: the gateway prints it and exits 2. At run time,
`recorded` turns a failed read or write into `RegistryUnavailable` (503) or `StateDiskFull`
(507). Their messages name the file, say that nothing changed, and give the fix.

`keep_backup` copies the file to `<file>.bak` when it passes its check (at start and at a
clean stop): the restore point of docs/operations.md.

Must not: run on the request path; read time; retry by itself (the caller retries, told by
Retry-After).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

from infless.errors import RegistryUnavailable, StateDiskFull, StateError

log = logging.getLogger(__name__)

STARTUP_BUSY_S = 5.0  # at startup nothing is served yet: wait this long for a lock
RUNTIME_BUSY_MS = 50  # then the event loop stalls at most this long on a held lock
BACKUP_SUFFIX = ".bak"
RECOVERY_DOC = "docs/operations.md#a-damaged-registry"

_BUSY = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED}
_DAMAGED = {sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB}
_FULL = {sqlite3.SQLITE_FULL}


def _kind(error: sqlite3.Error) -> str:
    """'busy', 'damaged', 'full' or 'other', from SQLite's primary result code."""
    code = getattr(error, "sqlite_errorcode", None)
    primary = -1 if code is None else code & 0xFF
    text = str(error).lower()
    if primary in _BUSY or "locked" in text:
        return "busy"
    if primary in _DAMAGED or "malformed" in text or "not a database" in text:
        return "damaged"
    if primary in _FULL or "disk is full" in text:
        return "full"
    return "other"


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def damaged_message(path: Path, detail: str) -> str:
    backup = backup_path(path)
    return (
        f"{path} is damaged ({detail}); nothing was read from it. Move it aside with its "
        f"-wal and -shm files, put {backup} (copied at the last start or clean stop that "
        f"found the registry sound) in its place, and start again: see {RECOVERY_DOC}"
    )


def _startup_message(path: Path, error: sqlite3.Error) -> str:
    kind = _kind(error)
    if kind == "busy":
        return (
            f"{path} is locked by another process (for more than {STARTUP_BUSY_S:g} s): "
            f"find it with `fuser -v {path}`, end its transaction or stop it, and start again"
        )
    if kind == "damaged":
        return damaged_message(path, str(error))
    if kind == "full":
        return f"{path}: the state directory's disk is full ({error}); free space in {path.parent}"
    return f"{path}: cannot be used as the registry ({error})"


def open_database(
    path: Path, schema: Sequence[str], *, check_same_thread: bool = True
) -> sqlite3.Connection:
    """A checked, writable connection to `path` with `schema` created; else StateError.
    `check_same_thread=False` for a connection its owner serialises across threads."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StateError(f"{path.parent}: cannot create the state directory ({exc})") from exc
    db = sqlite3.connect(
        path, isolation_level=None, timeout=STARTUP_BUSY_S, check_same_thread=check_same_thread
    )
    try:
        verdict = db.execute("PRAGMA quick_check").fetchone()
        if verdict is None or verdict[0] != "ok":
            raise StateError(damaged_message(path, f"quick_check: {verdict}"))
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("BEGIN IMMEDIATE")  # proves that nobody else holds the write lock
        for statement in schema:
            db.execute(statement)
        db.execute("COMMIT")
        db.execute(f"PRAGMA busy_timeout = {RUNTIME_BUSY_MS}")
    except sqlite3.Error as exc:
        db.close()
        raise StateError(_startup_message(path, exc)) from exc
    except BaseException:
        db.close()
        raise
    return db


@contextlib.contextmanager
def recorded(path: Path, failed: str) -> Iterator[None]:
    """Run one registry statement (or transaction); SQLite's failures become errors the
    caller answers with, opening with `failed` ("the deployment of 'x' was not recorded")."""
    try:
        yield
    except sqlite3.Error as exc:
        kind = _kind(exc)
        if kind == "busy":
            raise RegistryUnavailable(
                f"{failed}: {path} is locked by another process (nothing "
                f"changed); retry, or find the process with `fuser -v {path}`",
                retry_after_s=1.0,
            ) from exc
        if kind == "full":
            raise StateDiskFull(
                f"{failed}: the disk of the state directory {path.parent} is "
                "full (nothing changed); free space there and retry"
            ) from exc
        if kind == "damaged":
            raise RegistryUnavailable(f"{failed}: {damaged_message(path, str(exc))}") from exc
        raise RegistryUnavailable(f"{failed}: {path}: {exc}") from exc


def keep_backup(db: sqlite3.Connection, path: Path) -> Path | None:
    """Copy the database to `<path>.bak` through a temp file and a rename when it passes
    its check; None when it does not, or when it cannot (a full disk): the last restore
    point stays."""
    target = backup_path(path)
    temp = target.with_name(target.name + ".tmp")
    try:
        verdict = db.execute("PRAGMA quick_check").fetchone()
        if verdict is None or verdict[0] != "ok":
            log.error("%s fails its check (%s): the last backup is kept", path, verdict)
            return None
        with contextlib.closing(sqlite3.connect(temp)) as copy:
            db.backup(copy)
        temp.replace(target)
    except (sqlite3.Error, OSError) as exc:
        temp.unlink(missing_ok=True)
        log.warning("no backup of %s was made (%s); the last one stays", path, exc)
        return None
    return target
