"""A worker's secrets, as files under /var/openfaas/secrets in a mount namespace of its own.

`workers.runtime.enter_runtime` calls `mount_secrets` in the worker after the fork and before
any model code. With a tenant's sandbox, `workers.sandbox` calls it instead, and the files
are owned by the tenant's uid. In order, it:

1. unshares the mount namespace (CLONE_NEWNS);
2. makes every mount a slave of the host's, so nothing mounted here propagates back;
3. mounts a small tmpfs on the secrets directory;
4. writes each secret as a 0400 file;
5. remounts the tmpfs read-only.

Every other process (the gateway, other functions' workers) keeps the host's namespace,
where that directory stays empty. Any failure raises `IsolationError`: the worker then
refuses to load rather than expose a secret another way.

`python -m infless.workers.isolation` tries the same in a throwaway process. The gateway runs
it once (`probe_secrets`) to learn whether this server can mount secrets at all. Both sides:
ctypes and os only, never torch.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import sys
from collections.abc import Mapping
from pathlib import Path

SECRETS_DIR = Path("/var/openfaas/secrets")
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_REC, MS_SLAVE = 32, 16384, 1 << 19
_PAGE = 4096
_HARDENED = MS_NOSUID | MS_NODEV | MS_NOEXEC


class IsolationError(RuntimeError):
    """The worker could not be given its secrets privately; it must not load its model."""


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_char_p,
    ]
    libc.unshare.argtypes = [ctypes.c_int]
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise IsolationError(f"secrets: {what} failed: {os.strerror(code)} (errno {code})")


def _tmpfs_bytes(secrets: Mapping[str, bytes]) -> int:
    pages = sum(max(1, -(-len(value) // _PAGE)) for value in secrets.values())
    return (pages + 16) * _PAGE


def mount_secrets(
    secrets: Mapping[str, bytes],
    target: Path = SECRETS_DIR,
    *,
    owner: tuple[int, int] | None = None,
    unshare: bool = True,
) -> None:
    """Mount `secrets` as files under `target`, visible to this process and its children only.

    The files sit on a tmpfs in a private mount namespace (`unshare` False: the caller made
    it). Each is 0400, owned by `owner`'s uid and gid (the tenant the worker will become).
    The tmpfs ends read-only.
    """
    for name in secrets:
        if not name or "/" in name or name.startswith("."):
            raise IsolationError(f"secrets: {name!r} is not a valid secret file name")
    if os.geteuid() != 0:
        raise IsolationError(f"secrets: mounting them needs root; this runs as uid {os.geteuid()}")
    libc = _libc()
    if unshare:
        _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _check(libc.mount(None, b"/", None, MS_REC | MS_SLAVE, None), "making / a slave mount")
    try:
        target.mkdir(parents=True, exist_ok=True)  # an empty directory on the host
    except OSError as exc:
        raise IsolationError(f"secrets: cannot create {target}: {exc}") from exc
    ids = "" if owner is None else f",uid={owner[0]},gid={owner[1]}"
    options = f"size={_tmpfs_bytes(secrets)},mode=0500{ids}".encode()
    mount_point = bytes(target)
    _check(libc.mount(b"tmpfs", mount_point, b"tmpfs", _HARDENED, options), f"mounting {target}")
    for name, value in secrets.items():
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(target / name, flags, 0o400)
        try:
            if owner is not None:
                os.fchown(fd, *owner)
            view = memoryview(value)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    remount = MS_REMOUNT | MS_RDONLY | _HARDENED
    _check(libc.mount(None, mount_point, None, remount, None), f"remounting {target} read-only")


async def probe_secrets(python: str = "", timeout_s: float = 30.0) -> str | None:
    """Whether a worker could mount secrets here: None if so, else why not (one sentence)."""
    try:
        process = await asyncio.create_subprocess_exec(
            python or sys.executable,
            "-m",
            "infless.workers.isolation",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as exc:
        return f"secrets: the probe could not start: {exc}"
    try:
        async with asyncio.timeout(timeout_s):
            output, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        return f"secrets: the probe did not finish in {timeout_s:.0f} s"
    if process.returncode == 0:
        return None
    lines = output.decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"secrets: the probe exited with {process.returncode}"


def _probe() -> int:
    try:
        mount_secrets({"probe": b"probe"})
        if (SECRETS_DIR / "probe").read_bytes() != b"probe":
            print("secrets: the probe file did not read back", file=sys.stderr)
            return 1
    except (IsolationError, OSError) as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(_probe())
