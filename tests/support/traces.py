"""Trace files for the cold-start evaluation's command tests: per-minute invocation counts
written in the Azure sample's schema."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_trace(path: Path, counts: np.ndarray) -> None:
    """One row per function (IDs f0, f1, ...), one column per minute."""
    header = ",".join(["HashFunction", "HashApp", "HashOwner"])
    header += "," + ",".join(f"minute_{m + 1}" for m in range(counts.shape[1]))
    rows = [f"f{i},f{i},f{i}," + ",".join(map(str, row)) for i, row in enumerate(counts)]
    path.write_text("\n".join([header, *rows]) + "\n")
