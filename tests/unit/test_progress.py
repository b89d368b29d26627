"""Progress of the CLI's long commands: a live bar on a terminal (its step, share done and
note, lines scrolling above it), plain lines when stderr is not a terminal, nothing with
--quiet."""

from __future__ import annotations

import io

from infless.progress import Bar, Lines, Quiet, progress_for


class Terminal(io.StringIO):
    """A stream that says it is a terminal (as stderr is in a shell)."""

    def isatty(self) -> bool:
        return True


def _work(stream: io.StringIO, quiet: bool) -> str:
    with progress_for(quiet, stream) as progress:
        progress.begin("uploading fn", total=100)
        progress.update(50, note="5.0 MiB of 10.0 MiB")
        progress.say("fn: already on the gateway")
    return stream.getvalue()


def test_a_terminal_gets_a_live_bar_and_the_lines() -> None:
    stream = Terminal()
    assert isinstance(progress_for(False, stream).reporter, Bar)
    shown = _work(stream, quiet=False)
    assert "uploading fn" in shown
    assert "50%" in shown
    assert "5.0 MiB of 10.0 MiB" in shown
    assert "fn: already on the gateway" in shown
    assert shown.endswith("\x1b[2K")  # the bar is cleared when the command ends


def test_a_script_gets_plain_lines_and_no_bar() -> None:
    stream = io.StringIO()
    assert isinstance(progress_for(False, stream).reporter, Lines)
    assert _work(stream, quiet=False) == "fn: already on the gateway\n"


def test_quiet_says_nothing_even_on_a_terminal() -> None:
    stream = Terminal()
    assert isinstance(progress_for(True, stream).reporter, Quiet)
    assert _work(stream, quiet=True) == ""


def test_a_total_learnt_on_the_way_and_a_new_phase() -> None:
    stream = Terminal()
    with progress_for(False, stream) as progress:
        progress.begin("registering tc")  # the total is not known yet
        progress.update(2, 6, note="int8: writing and profiling")
        progress.begin("next phase")
        progress.update(1, 1)
    shown = stream.getvalue()
    assert "33%" in shown
    assert "int8: writing and profiling" in shown
    assert "next phase" in shown
