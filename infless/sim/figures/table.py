"""A figure's rows, and how they are shown: a Markdown table, one JSON line, a PNG.

Owns formatting and the one file write (`write_png`, matplotlib imported inside it with the
Agg backend). Must not compute figures (the figure modules do) nor parse arguments.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure as PlotFigure

Cell = str | int | float


@dataclass(frozen=True, slots=True)
class Rows:
    """A figure's numbers: one dict per row, the columns in order, and how to plot them."""

    name: str  # e.g. "fig17": the PNG's file name and the JSON line's key
    title: str
    columns: tuple[str, ...]
    rows: tuple[dict[str, Cell], ...]
    plot: Callable[[Rows, PlotFigure], None] | None = field(default=None, compare=False)

    def values(self, column: str, **match: Cell) -> list[float]:
        """`column` of the rows whose other cells equal `match`."""
        return [
            float(row[column])
            for row in self.rows
            if all(row.get(k) == v for k, v in match.items())
        ]


def markdown(rows: Rows) -> str:
    """The rows as a Markdown table (floats to 4 significant digits)."""
    lines = [
        "| " + " | ".join(rows.columns) + " |",
        "|" + "|".join("---" for _ in rows.columns) + "|",
    ]
    for row in rows.rows:
        lines.append("| " + " | ".join(_cell(row.get(c, "")) for c in rows.columns) + " |")
    return "\n".join(lines)


def json_line(rows: Rows) -> str:
    return json.dumps({rows.name: [dict(row) for row in rows.rows]}, sort_keys=True)


def write_png(rows: Rows, path: Path, size_in: tuple[float, float] = (11.0, 4.2)) -> None:
    """Draw `rows` with its plot function into `path` (nothing when it has none)."""
    if rows.plot is None:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=size_in)
    rows.plot(rows, figure)
    figure.suptitle(rows.title)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _cell(value: Cell) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def bars(
    figure: PlotFigure,
    position: int,
    labels: Sequence[str],
    values: Sequence[float],
    ylabel: str,
    columns: int = 2,
) -> None:
    """One bar panel at `position` of `figure`'s one row of `columns` panels."""
    ax = figure.add_subplot(1, columns, position)
    ax.bar(list(labels), list(values), color="tab:blue")
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", labelrotation=30)
    ax.grid(axis="y", alpha=0.3)
