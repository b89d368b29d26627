"""The progress bar: elapsed time, offered and achieved rate (last 2 s), errors.

I/O shell for the terminal only (rich); reads the client's live counters, decides nothing.
`make_progress` returns None when disabled or when stderr is not a terminal.
"""

from __future__ import annotations

import sys
from collections import deque

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from loadgen.drivers import LiveCounters

RATE_WINDOW_S = 2.0


class RichProgress:
    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=20),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[rates]}"),
            console=console,
            transient=False,
        )
        self._task: TaskID | None = None
        self._history: deque[tuple[float, int, int]] = deque()

    def start(self, label: str, total: int, duration_s: float) -> None:
        self._history.clear()
        self._task = self._progress.add_task(label, total=max(total, 1), rates="")
        self._progress.start()

    def update(self, elapsed_s: float, counters: LiveCounters) -> None:
        if self._task is None:
            return
        self._history.append((elapsed_s, counters.sent, counters.ok))
        while len(self._history) > 1 and elapsed_s - self._history[0][0] > RATE_WINDOW_S:
            self._history.popleft()
        t_first, sent_first, ok_first = self._history[0]
        span_s = max(elapsed_s - t_first, 1e-9)
        offered_rps = (counters.sent - sent_first) / span_s if span_s > 0.1 else 0.0
        achieved_rps = (counters.ok - ok_first) / span_s if span_s > 0.1 else 0.0
        rates = (
            f"offered {offered_rps:.1f} ok {achieved_rps:.1f} rps | err {counters.errors} | "
            f"in flight {counters.sent - counters.done}"
        )
        self._progress.update(self._task, completed=counters.sent, rates=rates)

    def stop(self) -> None:
        self._progress.stop()
        if self._task is not None:
            self._progress.remove_task(self._task)
            self._task = None


def make_progress(enabled: bool) -> RichProgress | None:
    if not enabled or not sys.stderr.isatty():
        return None
    return RichProgress(Console(stderr=True))
