"""Dropping a worker's privileges for good: a tenant's uid and gid, no capabilities, no way back.

`drop_privileges(uid, gid, dumpable=True)` runs in a worker, as root, after its mount
namespace is built and before any code of its package is imported. In order, it:

1. empties the capability bounding set (`PR_CAPBSET_DROP`; it needs CAP_SETPCAP, so it comes
   before the uid changes) and clears the ambient set;
2. calls `setgroups([])`, `setresgid(gid)` and `setresuid(uid)`. Glibc applies them to every
   thread, and the kernel then clears the permitted and effective sets;
3. calls `capset` to zero them all the same;
4. sets `PR_SET_NO_NEW_PRIVS`: no setuid binary or file capability gives anything back;
5. sets `PR_SET_DUMPABLE` as asked. The uid change made the process non-dumpable, which would
   also hide its /proc entries from its own tenant's tools. With distinct uids, another
   tenant can neither ptrace nor signal it either way. A worker that holds secrets stays
   non-dumpable, so a sibling function of the same tenant cannot read them through ptrace or
   /proc/PID/root.

It then reads /proc/self/status back. It raises `PrivilegeError` unless every capability set
is empty, the uids and gids are the tenant's and no_new_privs is on.

Per-thread attributes (bounding set, no_new_privs) reach the calling thread and the threads
it starts later. A GPU worker's driver threads, started before, keep a bounding set but, like
every thread, no capability.

Both sides import it (the gateway's probe runs it in a child): ctypes and os only, never torch.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
_CAP_LAST_CAP = Path("/proc/sys/kernel/cap_last_cap")
_CAP_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")


class PrivilegeError(RuntimeError):
    """The worker could not become its tenant's unprivileged user: it must not load."""


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [
        ctypes.c_int,
        ctypes.c_ulong,
        ctypes.c_ulong,
        ctypes.c_ulong,
        ctypes.c_ulong,
    ]
    libc.capset.argtypes = [ctypes.POINTER(_CapHeader), ctypes.POINTER(_CapData)]
    return libc


def _prctl(libc: ctypes.CDLL, option: int, arg: int, what: str) -> None:
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        code = ctypes.get_errno()
        raise PrivilegeError(f"privileges: {what} failed: {os.strerror(code)} (errno {code})")


def last_capability() -> int:
    """The highest capability number this kernel knows (40 on Linux 5.9+)."""
    try:
        return int(_CAP_LAST_CAP.read_text())
    except (OSError, ValueError):
        return 40


def _drop_bounding_set(libc: ctypes.CDLL) -> None:
    for capability in range(last_capability() + 1):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            if code != 22:  # EINVAL: a capability this kernel does not have
                raise PrivilegeError(
                    f"privileges: dropping capability {capability} from the bounding set "
                    f"failed: {os.strerror(code)} (errno {code}); the gateway must run as root"
                )


def _clear_capabilities(libc: ctypes.CDLL) -> None:
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # two 32-bit words of each set, all zero
    if libc.capset(ctypes.byref(header), data) != 0:
        code = ctypes.get_errno()
        raise PrivilegeError(f"privileges: capset to zero failed: {os.strerror(code)}")


def status_fields(text: str) -> dict[str, str]:
    """/proc/PID/status as `{field: value}` (the value's whitespace collapsed)."""
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        fields[name] = " ".join(value.split())
    return fields


def check_dropped(status: dict[str, str], uid: int, gid: int) -> list[str]:
    """What /proc/self/status shows is still privileged (empty: nothing). Pure."""
    problems = []
    for field in _CAP_FIELDS:
        value = status.get(field)
        if value is not None and int(value, 16) != 0:
            problems.append(f"{field} = {value} (want 0)")
    for field, want in (("Uid", uid), ("Gid", gid)):
        if status.get(field, "").split() != [str(want)] * 4:
            problems.append(f"{field} = {status.get(field)!r} (want {want} four times)")
    if status.get("Groups", "") not in ("", str(gid)):
        problems.append(f"Groups = {status.get('Groups')!r} (want none)")
    if status.get("NoNewPrivs", "1") != "1":
        problems.append(f"NoNewPrivs = {status.get('NoNewPrivs')} (want 1)")
    return problems


def drop_privileges(uid: int, gid: int, *, dumpable: bool = True) -> None:
    """Become `uid`:`gid` with no capabilities and no_new_privs (module docstring)."""
    if uid <= 0 or gid <= 0:
        raise PrivilegeError(f"privileges: uid {uid} / gid {gid}: a tenant's ids must be > 0")
    if os.geteuid() != 0:
        raise PrivilegeError(
            f"privileges: dropping them needs root; this runs as uid {os.geteuid()}"
        )
    libc = _libc()
    _drop_bounding_set(libc)
    _prctl(libc, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, "clearing the ambient capabilities")
    try:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    except OSError as exc:
        raise PrivilegeError(f"privileges: becoming uid {uid} gid {gid} failed: {exc}") from exc
    _clear_capabilities(libc)
    _prctl(libc, PR_SET_NO_NEW_PRIVS, 1, "PR_SET_NO_NEW_PRIVS")
    _prctl(libc, PR_SET_DUMPABLE, 1 if dumpable else 0, "PR_SET_DUMPABLE")
    status = status_fields(Path("/proc/self/status").read_text())
    problems = check_dropped(status, uid, gid)
    if problems:
        raise PrivilegeError("privileges: still privileged after dropping: " + "; ".join(problems))
