"""Entering a tenant's sandbox in a worker, and the probe that tells the gateway it can.

`enter_sandbox(sandbox, secrets)` runs in the worker after it received `LoadModel` and before
any code of the package is imported. The worker is root until then, in the cgroups the
gateway put it in. In order, it enters:

1. a mount namespace of its own, with every mount a slave of the host's; and, unless
   `host_network`, an empty network namespace (no route to the gateway's HTTP port, to other
   tenants' services or out);
2. the function's secrets, on a tmpfs owned by the tenant (`workers.isolation`);
3. the mount view (`workers.mountview`): the gateway's state hidden, the tenant's packages
   and store directory bound back read-only, a size-limited scratch, everything else
   read-only;
4. the tenant's uid and gid, with no capabilities and no_new_privs (`workers.privileges`).

A worker that already entered a sandbox (forked from its model's template, or a GPU worker
loading its next model) only checks that it is the same tenant's; it cannot mount secrets any
more. Any failure raises `SandboxError`: the worker answers `LoadFailed` and never runs the
package unconfined.

`python -m infless.workers.sandbox UID GID` enters a sandbox in a throwaway process and
prints what it managed as one JSON line. The gateway runs it once at start-up
(`probe_sandbox`) to learn what this host can enforce. Both sides: ctypes and os only.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import msgspec

from infless.workers.isolation import IsolationError, mount_secrets
from infless.workers.mountview import (
    MountError,
    apply_view,
    plan_view,
    runtime_dirs,
    searchable,
    traversal_block,
)
from infless.workers.privileges import PrivilegeError, drop_privileges
from infless.workers.protocol import Sandbox

CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_REC, MS_SLAVE = 16384, 1 << 19
DEFAULT_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")  # noqa: S108 - replaced, not used

_entered: Sandbox | None = None  # set once in a worker; its forks inherit it


class SandboxError(RuntimeError):
    """The worker could not be confined as its tenant: it must not load its package."""


def entered() -> Sandbox | None:
    """The sandbox this process is in (None: none)."""
    return _entered


def _namespaces(host_network: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_char_p,
        ctypes.c_ulong,
        ctypes.c_char_p,
    ]
    flags = CLONE_NEWNS | (0 if host_network else CLONE_NEWNET)
    if libc.unshare(flags) != 0:
        code = ctypes.get_errno()
        raise SandboxError(
            f"sandbox: unshare of the mount/network namespaces failed: "
            f"{os.strerror(code)} (errno {code})"
        )
    if libc.mount(None, b"/", None, MS_REC | MS_SLAVE, None) != 0:
        code = ctypes.get_errno()
        raise SandboxError(f"sandbox: making / a slave mount failed: {os.strerror(code)}")


def enter_sandbox(sandbox: Sandbox, secrets: Mapping[str, bytes] | None = None) -> None:
    """Confine this worker as `sandbox` says (module docstring); SandboxError if it cannot."""
    global _entered  # noqa: PLW0603 - once per process, before any package code
    if _entered is not None:
        if (_entered.uid, _entered.gid) != (sandbox.uid, sandbox.gid):
            raise SandboxError(
                f"sandbox: this worker runs as uid {_entered.uid} already; it cannot serve "
                f"uid {sandbox.uid} (another tenant's workers start fresh)"
            )
        if secrets:
            raise SandboxError("sandbox: a confined worker cannot mount secrets; start a fresh one")
        return
    if os.geteuid() != 0:
        raise SandboxError(f"sandbox: entering one needs root; this runs as uid {os.geteuid()}")
    uid, gid = sandbox.uid, sandbox.gid
    try:
        _namespaces(sandbox.host_network)
        if secrets:
            mount_secrets(secrets, owner=(uid, gid), unshare=False)
        plan = plan_view(
            [Path(p) for p in sandbox.hide],
            [Path(p) for p in sandbox.keep],
            [Path(p) for p in sandbox.scratch],
            runtime_dirs(lambda path: searchable(path, uid, gid)),
            lambda path: traversal_block(path, uid, gid),
        )
        apply_view(plan, sandbox.scratch_bytes, shared=[Path(p) for p in sandbox.shared])
        drop_privileges(uid, gid, dumpable=not secrets)
    except (IsolationError, MountError, PrivilegeError, OSError) as exc:
        raise SandboxError(str(exc)) from exc
    _entered = sandbox


# -- the probe ------------------------------------------------------------------------------


class ProbeReport(msgspec.Struct, frozen=True):
    """What a throwaway sandbox managed: the error that stopped it ("" if none), and
    whether the runtime and the hidden directory looked right from inside."""

    error: str = ""
    uid: int = -1
    runtime_readable: bool = False
    hidden: bool = False
    read_only: bool = False
    scratch_writable: bool = False


def _probe(uid: int, gid: int, hidden: str) -> ProbeReport:
    sandbox = Sandbox(
        uid,
        gid,
        hide=[hidden] if hidden else [],
        scratch=list(DEFAULT_SCRATCH),
        scratch_bytes=1 << 20,
    )
    try:
        enter_sandbox(sandbox)
    except SandboxError as exc:
        return ProbeReport(error=str(exc))
    readable = _runtime_readable()
    try:
        Path("/probe-write").touch()
        read_only = False
    except OSError:
        read_only = True
    try:
        Path("/tmp/probe-write").write_bytes(b"x")  # noqa: S108 - the sandbox's scratch
        scratch = True
    except OSError:
        scratch = False
    return ProbeReport(
        uid=os.getuid(),
        runtime_readable=readable,
        hidden=_gone(hidden),
        read_only=read_only,
        scratch_writable=scratch,
    )


def _runtime_readable() -> bool:
    """Whether what a worker imports later is readable here: the standard library, infless
    and the installed packages (an import that was not made before the sandbox)."""
    try:
        importlib.import_module("infless.handlers")
        importlib.import_module("wave")  # a standard module nothing imported yet
    except (ImportError, OSError):
        return False
    torch = importlib.util.find_spec("torch")
    places = [] if torch is None or torch.origin is None else [Path(torch.origin).parent]
    return all(os.access(d, os.R_OK | os.X_OK) for d in places)


def _gone(hidden: str) -> bool:
    """Whether `hidden` shows nothing: absent, not searchable, or veiled (an empty directory
    where a kept directory above it is bound back)."""
    if not hidden:
        return False
    try:
        return not any(Path(hidden).iterdir())
    except OSError:
        return True


async def probe_sandbox(
    uid: int, gid: int, hidden: Path, python: str = "", timeout_s: float = 30.0
) -> ProbeReport:
    """Run the probe in a child process (`python -m infless.workers.sandbox`)."""
    try:
        process = await asyncio.create_subprocess_exec(
            python or sys.executable,
            "-m",
            "infless.workers.sandbox",
            str(uid),
            str(gid),
            str(hidden),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as exc:
        return ProbeReport(error=f"sandbox: the probe could not start: {exc}")
    try:
        async with asyncio.timeout(timeout_s):
            output, _ = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        return ProbeReport(error=f"sandbox: the probe did not finish in {timeout_s:.0f} s")
    lines = output.decode(errors="replace").strip().splitlines()
    try:
        return msgspec.json.decode(lines[-1], type=ProbeReport)
    except (IndexError, msgspec.DecodeError):
        tail = lines[-1] if lines else f"exit code {process.returncode}"
        return ProbeReport(error=f"sandbox: the probe failed: {tail}")


def main(argv: list[str]) -> int:
    uid, gid, hidden = int(argv[0]), int(argv[1]), argv[2] if len(argv) > 2 else ""
    report = _probe(uid, gid, hidden)
    print(json.dumps(msgspec.to_builtins(report)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
