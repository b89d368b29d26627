"""Tenants' user and group ids: the configured range, and the next free id in it. Pure.

A tenant's uid and gid are the same number, taken from `[isolation] uid_range` in order,
skipping ids other tenants hold and ids the host already uses (an account in /etc/passwd
or a group in /etc/group: the caller says which are taken).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from infless.tenancy.config import UidRange


class RangeExhausted(ValueError):
    """Every id of the range is taken."""


def next_free_id(
    ids: UidRange, held: Collection[int], host_taken: Callable[[int], bool] = lambda _id: False
) -> int:
    """The lowest id of `ids` no tenant holds and the host does not use."""
    for candidate in range(ids.first, ids.last + 1):
        if candidate not in held and not host_taken(candidate):
            return candidate
    raise RangeExhausted(
        f'isolation.uid_range = "{ids}": all {ids.last - ids.first + 1} ids are taken; '
        "widen the range"
    )
