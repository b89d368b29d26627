"""What the cold-start manager shows of a function: a typed, frozen status view.

The prewarm manager (`control.prewarm`) fills it; only the gateway renders it to JSON (the
`coldStartPolicy` of `/system/function/NAME`). Pure types: no I/O, no clock.
"""

from __future__ import annotations

import msgspec


class ColdStartView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A scale-to-zero function's cold-start windows (seconds) and what the manager did."""

    policy: str  # the cold-start policy's name: lsth, hhp or fixed
    prewarm_s: float  # start an instance this long after the last request ...
    keepalive_s: float  # ... and keep it this long
    releases: int  # instances let go when the keep-alive window ended
    prewarms: int  # instances started again before a predicted request
