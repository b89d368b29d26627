"""Variant profiles for the model-less unit tests: figures in the shape the generator writes."""

from __future__ import annotations

from infless.modelless.profiles import LatencyPoint, VariantProfile


def profile(
    name: str,
    accuracy: float,
    ms_b1: float,
    per_row_ms: float,
    *,
    model: str = "m",
    load_ms: float = 500.0,
    status: str = "ready",
) -> VariantProfile:
    """A variant whose t_exec(b, c) = ms_b1 + per_row_ms * (b - 1), halved per row at 2 cores."""
    points = [
        LatencyPoint(b, c, (ms_b1 + per_row_ms * (b - 1)) / (1.0 if c == 1 else 1.6))
        for b in (1, 2, 4, 8, 16)
        for c in (1, 2)
    ]
    return VariantProfile(
        model=model,
        name=name,
        transform=name,
        status=status,  # type: ignore[arg-type]
        accuracy=accuracy,
        metric="top1-agreement",
        latency=points,
        load_ms=load_ms,
        peak_memory_bytes=100 << 20,
    )


def three_variants(model: str = "m") -> list[VariantProfile]:
    """fp32: exact and slow; bf16: close and a bit faster; int8: least exact, fastest."""
    return [
        profile("fp32", 1.0, 4.0, 2.0, model=model, load_ms=300.0),
        profile("bf16", 0.995, 3.0, 1.5, model=model, load_ms=400.0),
        profile("int8", 0.97, 2.0, 0.5, model=model, load_ms=600.0),
    ]
