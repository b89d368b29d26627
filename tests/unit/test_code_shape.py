"""The code stays readable rather than packed: the formatter lays it out, and wide records
are built by keyword.

Two rules from the team's habits, checked on the source tree: `# fmt: skip` is the rare
exception (a table the formatter would wreck), not a way to fit a line budget; and no
constructor is called with more than six positional arguments, so a reader never counts
commas to know which value is which. The checks themselves are tested on planted code.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHECKED = ("infless", "loadgen", "bench")
MAX_FMT_SKIPS = 8  # a tenth of the 83 counted when issue 34 was filed
MAX_POSITIONAL = 6


def _sources() -> list[Path]:
    return sorted(path for package in CHECKED for path in (REPO / package).rglob("*.py"))


def fmt_skips(source: str) -> int:
    """How many lines of `source` ask the formatter to leave them alone."""
    return sum(1 for line in source.splitlines() if "# fmt: skip" in line)


def wide_positional_calls(source: str) -> list[tuple[int, str, int]]:
    """(line, callee, count) for each call of a Capitalized name — a class, by the naming
    rules ruff enforces — with more than `MAX_POSITIONAL` positional arguments."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func
        if isinstance(callee, ast.Name):
            name = callee.id
        elif isinstance(callee, ast.Attribute):
            name = callee.attr
        else:
            continue
        positional = sum(1 for arg in node.args if not isinstance(arg, ast.Starred))
        if name[:1].isupper() and positional > MAX_POSITIONAL:
            found.append((node.lineno, name, positional))
    return found


def test_the_checks_find_planted_code() -> None:
    planted = "x = Record(1, 2, 3, 4, 5, 6, 7)\ny = f(1, 2, 3, 4, 5, 6, 7)\nz = (1,)  # fmt: skip\n"
    assert wide_positional_calls(planted) == [(1, "Record", 7)]
    assert fmt_skips(planted) == 1
    assert wide_positional_calls("x = Record(1, 2, 3, 4, 5, 6, g=7)\n") == []


def test_few_formatter_escapes() -> None:
    counts = {p: fmt_skips(p.read_text()) for p in _sources()}
    total = sum(counts.values())
    worst = sorted(((n, str(p.relative_to(REPO))) for p, n in counts.items() if n), reverse=True)
    assert total <= MAX_FMT_SKIPS, worst[:10]


def test_wide_records_are_built_by_keyword() -> None:
    offenders = [
        f"{path.relative_to(REPO)}:{line} {name}({count} positional)"
        for path in _sources()
        for line, name, count in wide_positional_calls(path.read_text())
    ]
    assert offenders == []
