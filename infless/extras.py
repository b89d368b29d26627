"""Optional extras: which heavy libraries are installed, and the error when one is missing.

Owns the one message a command prints when it needs an extra that is not installed; it
names the pip command that fixes it. matplotlib comes with `infless[plots]`, tokenizers with
`infless[examples]`. Imports nothing heavy itself: it only asks whether a module exists.
Must not be imported by `loadgen`, which checks its own plots with the same words.
"""

from __future__ import annotations

import importlib.util

PLOTS = "plots"  # matplotlib: PNG plots of evaluations, figures and load reports
EXAMPLES = "examples"  # tokenizers: examples/minilm's handler


class MissingExtra(RuntimeError):
    """A command needs a library that comes with an extra that is not installed."""


def has_module(module: str) -> bool:
    """Whether `module` can be imported here, without importing it."""
    return importlib.util.find_spec(module) is not None


def missing_extra_message(module: str, extra: str, needed_for: str) -> str:
    return (
        f"{needed_for} needs {module}, which is not installed; "
        f"install it with: pip install 'infless[{extra}]'"
    )


def require_extra(module: str, extra: str, needed_for: str) -> None:
    """Raise `MissingExtra` naming the pip command when `module` is not installed."""
    if not has_module(module):
        raise MissingExtra(missing_extra_message(module, extra, needed_for))
