"""A planner's `StartInstance` for tests that apply or filter plans by hand."""

from __future__ import annotations

from infless.scaling.view import StartInstance
from infless.types import InstanceConfig


def start_instance(
    b: int,
    c: int,
    *,
    function: str = "f",
    server_id: str = "s1",
    exec_ms: float = 10.0,
    r_low_rps: float = 50.0,
    r_up_rps: float = 400.0,
) -> StartInstance:
    """A start of `function` at ⟨b, c⟩ on `server_id` (CPU only), with its bounds."""
    return StartInstance(
        function=function,
        config=InstanceConfig(b, c),
        server_id=server_id,
        gpu_index=None,
        exec_ms=exec_ms,
        r_low_rps=r_low_rps,
        r_up_rps=r_up_rps,
        batch_timeout_ms=max(0.0, 50.0 - exec_ms),
        efficiency=1.0,
    )
