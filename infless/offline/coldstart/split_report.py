"""Presenting the held-out splits (`splits.SplitResult`): the per-split table, the γ sweep per
split, and their JSON.

Owns: formatting only. Must not compute metrics or choose splits (that is `splits.py`) nor
parse arguments (that is `commands.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from rich.table import Table

from infless.offline.coldstart.splits import TUNING_SPLIT, SplitResult, Spread

TARGET = "target: cold starts <= -20 % at waste <= 0 % against HHP"


def _spread(s: Spread) -> str:
    if round(s.low, 1) == round(s.high, 1):
        return f"{s.mean:+.1f}"
    return f"{s.mean:+.1f} [{s.low:+.1f}, {s.high:+.1f}]"


def split_table(results: Sequence[SplitResult], hhp_label: str) -> Table:
    """One row per split: LSTH's headline γ against HHP, mean [min, max] over the seeds."""
    seeds = len(results[0].runs) if results else 0
    gamma = results[0].headline_gamma if results else 0.0
    table = Table(
        title=(
            f"LSTH (γ={gamma:g}) vs HHP ({hhp_label}) per split, {seeds} arrival seed(s): "
            f"mean \\[min, max]; {TARGET}"
        ),
        title_justify="left",
    )
    table.add_column("split")
    table.add_column("held out")
    for heading in (
        "functions",
        "minutes",
        "invocations",
        "HHP cold",
        "LSTH cold",
        "cold starts\nvs HHP %",
        "waste\nvs HHP %",
        "Q3 fn cold %\nHHP / LSTH",
    ):
        table.add_column(heading, justify="right")
    for r in results:
        table.add_row(
            r.name,
            r.role,
            str(r.functions),
            str(r.minutes_counted),
            f"{r.mean('hhp', 'invocations'):,.0f}",
            f"{r.mean('hhp', 'cold_starts'):,.0f}",
            f"{r.mean('lsth', 'cold_starts'):,.0f}",
            _spread(r.cold_delta_pct()),
            _spread(r.waste_delta_pct()),
            f"{r.mean('hhp', 'q3_function_cold_start_pct'):.2f} / "
            f"{r.mean('lsth', 'q3_function_cold_start_pct'):.2f}",
            style="bold" if r.name == TUNING_SPLIT else None,
        )
    return table


def gamma_table(results: Sequence[SplitResult]) -> Table:
    """Every γ of the sweep on every split: cold starts / waste relative to HHP (means)."""
    table = Table(
        title="LSTH's γ sweep per split: cold starts / wasted memory-time vs HHP (mean)",
        title_justify="left",
    )
    table.add_column("split")
    gammas = results[0].gammas if results else ()
    for g in gammas:
        table.add_column(f"γ={g:g}", justify="right")
    for r in results:
        table.add_row(
            r.name,
            *(
                f"{r.cold_delta_pct(g).mean:+.1f} / {r.waste_delta_pct(g).mean:+.1f}"
                for g in gammas
            ),
            style="bold" if r.name == TUNING_SPLIT else None,
        )
    return table


def splits_json(results: Sequence[SplitResult]) -> list[dict[str, Any]]:
    """Per split: its size, the headline deltas with their spread, each γ's mean deltas and
    the seed-by-seed HHP and LSTH (headline γ) metrics."""
    out = []
    for r in results:
        out.append(
            {
                "split": r.name,
                "role": r.role,
                "functions": r.functions,
                "minutes_counted": r.minutes_counted,
                "gamma": r.headline_gamma,
                "cold_delta_pct": asdict(r.cold_delta_pct()),
                "waste_delta_pct": asdict(r.waste_delta_pct()),
                "by_gamma": {
                    f"{g:g}": {
                        "cold_delta_pct": r.cold_delta_pct(g).mean,
                        "waste_delta_pct": r.waste_delta_pct(g).mean,
                    }
                    for g in r.gammas
                },
                "runs": [
                    {
                        "seed": run.seed,
                        "hhp": asdict(run.hhp),
                        "lsth": asdict(run.lsth[r.headline_gamma]),
                    }
                    for run in r.runs
                ],
            }
        )
    return out
