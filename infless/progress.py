"""Progress of the CLI's long commands (`infless register`, `package`, `deploy`'s upload,
`profile`) on a terminal, and quiet in scripts.

`progress_for(quiet)` picks one of three: on a terminal (stderr is a TTY) a live bar with
the step, elapsed time and a note (rich, on stderr; lines the command says scroll above
it); not on a terminal (a pipe, a script, CI) no bar, and the lines a command says go to
stderr as plain text; with `--quiet`, nothing at all. A command marks its phases with
`begin` and its advance with `update`; it decides nothing here. Torch-free; imports only
rich.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Protocol, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)


class Reporter(Protocol):
    """What a long command reports as it works."""

    def begin(self, label: str, total: float | None = None) -> None:
        """A new phase (`total`: its units of work, None: not known)."""

    def update(self, done: float, total: float | None = None, note: str = "") -> None:
        """How far the phase is (and its total, when it is learnt on the way)."""

    def say(self, line: str) -> None:
        """A line the user keeps (it scrolls above a bar)."""

    def close(self) -> None: ...


class Quiet:
    """`--quiet`: says nothing."""

    def begin(self, label: str, total: float | None = None) -> None:
        return None

    def update(self, done: float, total: float | None = None, note: str = "") -> None:
        return None

    def say(self, line: str) -> None:
        return None

    def close(self) -> None:
        return None


class Lines(Quiet):
    """Not a terminal: no bar, the command's lines as plain text."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def say(self, line: str) -> None:
        print(line, file=self._stream, flush=True)


class Bar:
    """A terminal: one live bar per phase, redrawn in place."""

    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=24),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[note]}", markup=False),
            console=console,
            transient=True,  # the bar goes when the command ends; its lines stay
            redirect_stdout=False,  # what the command prints stays on stdout
            redirect_stderr=False,
        )
        self._task: TaskID | None = None
        self._started = False

    def begin(self, label: str, total: float | None = None) -> None:
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(label, total=total, note="")
        if not self._started:
            self._progress.start()
            self._started = True

    def update(self, done: float, total: float | None = None, note: str = "") -> None:
        if self._task is None:
            return
        if total is not None:
            self._progress.update(self._task, total=total)
        # drawn now (callers update at most every few hundred ms: per MiB, operator, poll)
        self._progress.update(self._task, completed=done, note=note, refresh=True)

    def say(self, line: str) -> None:
        self._progress.console.print(line, markup=False, highlight=False)

    def close(self) -> None:
        if self._started:
            self._progress.stop()
            self._started = False


class Reporting:
    """A reporter as a context manager: closed (the bar cleared) however the command ends."""

    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter

    def __enter__(self) -> Reporter:
        return self.reporter

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.reporter.close()


def progress_for(quiet: bool, stream: TextIO | None = None) -> Reporting:
    """The reporter for a command: a bar on a terminal, lines elsewhere, nothing if quiet."""
    stream = sys.stderr if stream is None else stream
    if quiet:
        return Reporting(Quiet())
    if not stream.isatty():
        return Reporting(Lines(stream))
    return Reporting(Bar(Console(file=stream)))


def mib(size_bytes: float) -> str:
    return f"{size_bytes / 2**20:.1f} MiB"
