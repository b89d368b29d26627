"""The `[isolation]` config section: whether and how tenants' workers are confined.
Pure data plus `check_isolation`; imports nothing of infless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import msgspec

MIN_TENANT_ID = 1000  # below: system accounts on every distribution
MAX_TENANT_ID = 2**32 - 2  # (uid_t)-1 means "no change" to the kernel


@dataclass(frozen=True, slots=True)
class UidRange:
    first: int
    last: int

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and self.first <= uid <= self.last

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


def parse_uid_range(text: str) -> UidRange:
    """ "200000-299999" -> UidRange(200000, 299999); ValueError naming the key otherwise."""
    first, sep, last = text.partition("-")
    try:
        bounds = UidRange(int(first), int(last))
    except ValueError:
        bounds = None
    if not sep or bounds is None:
        raise ValueError(f'isolation.uid_range = {text!r}: write FIRST-LAST, e.g. "200000-299999"')
    if not MIN_TENANT_ID <= bounds.first <= bounds.last <= MAX_TENANT_ID:
        raise ValueError(
            f"isolation.uid_range = {text!r}: need {MIN_TENANT_ID} <= FIRST <= LAST <= "
            f"{MAX_TENANT_ID} (ids below {MIN_TENANT_ID} belong to system accounts)"
        )
    return bounds


class IsolationConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # auto = confine every worker as far as this host allows, and say what it cannot;
    # on = refuse to start unless every part can be enforced; off = workers run as the
    # gateway's user (a second tenant is then refused unless allow_shared_tenants).
    enabled: Literal["auto", "on", "off"] = "auto"
    # Each tenant gets the next free uid of this range (and the gid of the same number),
    # recorded in the registry: stable across restarts.
    uid_range: str = "200000-299999"
    # Deploy functions of more than one tenant even where workers cannot be separated.
    allow_shared_tenants: bool = False
    pids_max: int = 256  # tasks (processes and threads) per worker and per template
    # Memory limit of each worker whose function sets no limits.memory (0: none).
    memory_bytes: int = 4 << 30
    # The one writable place of a worker: a tmpfs on /tmp, /var/tmp and /dev/shm.
    scratch_bytes: int = 64 << 20
    host_network: bool = False  # CPU workers get an empty network namespace unless true
    hide_paths: list[str] = []  # more directories (or files) workers must not see

    @property
    def uids(self) -> UidRange:
        return parse_uid_range(self.uid_range)


def check_isolation(cfg: IsolationConfig) -> list[str]:
    """Every problem with the section, one sentence each."""
    problems = []
    try:
        parse_uid_range(cfg.uid_range)
    except ValueError as exc:
        problems.append(str(exc))
    if cfg.pids_max < 16:
        problems.append(f"isolation.pids_max = {cfg.pids_max}: must be >= 16 (threads count)")
    if cfg.memory_bytes < 0:
        problems.append(f"isolation.memory_bytes = {cfg.memory_bytes}: must be >= 0 (0: none)")
    if cfg.scratch_bytes < 1 << 20:
        problems.append(f"isolation.scratch_bytes = {cfg.scratch_bytes}: must be >= 1 MiB")
    for path in cfg.hide_paths:
        if not path.startswith("/"):
            problems.append(f"isolation.hide_paths: {path!r} must be an absolute path")
    return problems
