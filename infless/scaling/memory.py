"""What one instance of a model holds in memory, as the planner prices it (Tetris §3.3).

An instance holds its runtime (the worker's private memory, forked from the zygote), its
activations (a per-sample figure × the batch size) and the model's weights. The tensor
store shares the weights between every instance of one model on one server: they count
once per server, however many instances run there (Tetris's M_ts = M_tensor + I × M_others).
Owns the figures only; the simulator sums them per server (`sim.memory`), the DTS policy
prices a placement with them (`scaling.dts`). Pure data: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
RUNTIME_BYTES = 48 * MIB  # the assumed private memory of a worker forked from the zygote


@dataclass(frozen=True, slots=True)
class ModelMemory:
    """One model's memory figures: its weights, activations per sample, and runtime."""

    weight_bytes: int
    activation_bytes_per_sample: int
    runtime_bytes: int = RUNTIME_BYTES

    def private_bytes(self, batch_size: int) -> int:
        """What an instance at batch `batch_size` holds besides the weights."""
        return self.runtime_bytes + batch_size * self.activation_bytes_per_sample

    def instance_bytes(self, batch_size: int, weights_shared: bool) -> int:
        """One instance: its private memory, plus the weights unless the store shares them."""
        weights = 0 if weights_shared else self.weight_bytes
        return self.private_bytes(batch_size) + weights


# What the planner assumes of a model nobody measured: a runtime and nothing else.
UNKNOWN_MODEL = ModelMemory(weight_bytes=0, activation_bytes_per_sample=0)
