"""No full garbage collections while load is driven.

An open-loop client must send each request at its scheduled time and read each answer when
it comes. A full (generation-2) collection walks every tracked object, and the client holds
every request's record: in a 60-s step at 3,800 req/s (nearly a quarter of a million by its
end) such collections paused it 72 and 108 ms mid-step, 262 ms at the end. Meanwhile
nothing is sent or read: the answers in flight are timed late, and the requests due are
sent in one burst when the pause ends — the server is charged for the client's pause
twice.

`young_collections_only` freezes what exists (`gc.freeze`) and raises the oldest
generation's threshold out of reach for the run: young collections (2–4 ms in that step)
still reclaim the short-lived cycles a request makes; what survives them waits for the end
of the run.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

NEVER = 1 << 30  # young collections between full ones: none within a run


@contextlib.contextmanager
def young_collections_only() -> Iterator[None]:
    """Within: no automatic full collection, and the heap from before not walked again.
    After: the thresholds as they were, and the heap unfrozen unless it was frozen before."""
    frozen_before = gc.get_freeze_count()
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, NEVER)
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)
        if not frozen_before:  # whoever froze it before keeps it frozen
            gc.unfreeze()
