"""The overflow variant of a model-less application (INFaaS's fixed choice, kept warm).

The variant kept warm beside vertical scaling's target is the one a fixed deployment
would pick: the cheapest per request that meets the application's goals, at the speed
this host runs the variants. A query the target cannot admit in time goes there
(`catalog.choose`), and its cores are not the other options' to take
(`vertical.AppLoad.overflow`). Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from infless.modelless.capacity import Capacity, per_core_here
from infless.modelless.cards import VariantCard
from infless.modelless.profiles import Goals
from infless.modelless.selection import meets

OVERFLOW_MARGIN = 1.25  # the overflow variant moves only to one this much cheaper per request


def overflow_card(
    cards: Sequence[VariantCard],
    goals: Goals,
    capacity: Capacity | None = None,
    current: str | None = None,
) -> VariantCard | None:
    """The variant kept warm beside the target: the cheapest per request that meets `goals`
    here (what one would deploy as a fixed variant: the most requests per core), at the
    speed this host runs the variants (`capacity.per_core_here`: the host factor for all,
    the batches' measured tail, and the service times a running variant's instances
    measured; as profiled where nothing was measured). A variant whose larger batches fit
    half the SLO only just loses them on a slower host: live, fp32's batch 2 to 8
    (20.8–23.5 ms profiled, 25 ms allowed) fell out at a factor of 0.75, leaving it 52 rps
    a core against bf16's 208, and the standby fp32 instance held one of two cores through
    a peak bf16 needed both for. Each variant's own factor is not used: the target
    refusing under a peak measures low (`capacity.delivered`), and by it a slower standby
    kept its core through the peak (R11, session 17). `current`, the overflow variant now,
    stays unless another is cheaper by `OVERFLOW_MARGIN` (a noisy factor must not move the
    standby back and forth)."""
    here = capacity if capacity is not None else Capacity()

    def cost(card: VariantCard) -> float:
        return 1.0 / max(per_core_here(card, here), 1e-9)

    eligible = [c for c in cards if meets(c, goals)]
    best = min(eligible, key=lambda c: (cost(c), -c.accuracy, c.name), default=None)
    kept = next((c for c in eligible if c.name == current), None)
    if best is not None and kept is not None and cost(kept) <= cost(best) * OVERFLOW_MARGIN:
        return kept
    return best
