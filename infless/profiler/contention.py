"""Deciding whether a timed repetition ran while another process held a core it needed.

On this 2-core machine a two-thread measurement needs both cores. When another process runs
on the second one, the intra-op worker thread waits for it, and the calling thread waits for
the worker at the end of every parallel region. It waits spinning, so its CPU clock counts
the wait: the thread clock does not protect a multi-thread measurement from contention the
way it protects a one-thread one.

The kernel reports the wait directly: the time each of our threads spent runnable but not
running (the second field of /proc/<pid>/task/<tid>/schedstat, in ns). `operators` reads it
around every repetition. A repetition during which our threads waited more than a small
share of its wall time for a core is contaminated. It is measured again (a bounded number
of times) instead of kept.

The rule is about the scheduler's own account of waiting, not about any model's times:
nothing here is fitted to measured latencies.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_WAIT_SHARE = 0.02  # waiting for a core longer than 2% of the repetition: contaminated
MIN_WAIT_MS = 0.05  # below this, a wake-up latency, not a neighbour holding the core
MAX_REDOS_PER_REP = 3  # then the repetition is kept, and counted as kept contended


def run_delay_ns(schedstat_lines: list[str]) -> int:
    """Total run-queue wait (ns) in the text of per-thread schedstat files (bad lines: 0).

    Each line is "<ns on cpu> <ns waiting on a run queue> <timeslices>".
    """
    total = 0
    for line in schedstat_lines:
        fields = line.split()
        if len(fields) >= 2 and fields[1].isdigit():
            total += int(fields[1])
    return total


def contended(
    waited_ms: float,
    wall_ms: float,
    *,
    max_share: float = MAX_WAIT_SHARE,
    min_wait_ms: float = MIN_WAIT_MS,
) -> bool:
    """Whether a repetition lasting `wall_ms`, during which our threads waited `waited_ms`
    in all for a core, ran under contention."""
    return waited_ms > max(min_wait_ms, max_share * wall_ms)


@dataclass(slots=True)
class RepetitionGuard:
    """Whether to redo a contaminated repetition, and how many were redone or kept anyway.

    A repetition is redone at most `max_redos` times; after that (a neighbour that never
    leaves) it is kept and counted in `kept`, so a busy machine slows a measurement down by a
    bounded factor instead of stalling it.
    """

    max_redos: int = MAX_REDOS_PER_REP
    redone: int = 0  # repetitions discarded and measured again
    kept: int = 0  # repetitions kept although contaminated (retries exhausted)
    _attempt: int = 0

    def accept(self, is_contended: bool) -> bool:
        """Record one attempt of the current repetition; True: keep it and move on."""
        if not is_contended:
            self._attempt = 0
            return True
        if self._attempt < self.max_redos:
            self._attempt += 1
            self.redone += 1
            return False
        self._attempt = 0
        self.kept += 1
        return True
