"""Memory of simulated instances (Tetris §3.3, §5): what one instance holds, and what a
server holds with the tensor store's sharing counted and without it.

An instance of a model holds its runtime (the worker process's private memory, forked
from the zygote: `runtime_bytes`), its activations (`activation_bytes_per_sample` × b) and
the model's weights. With the store, the weights of one model exist once per server however
many of its instances run there (Tetris's M_ts = M_tensor + I × M_others); without it,
every instance holds its own copy (M_baseline = I × (M_tensor + M_others)). The
figures themselves (`ModelMemory`) live in `infless.scaling.memory`, where the planner
reads them too. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from infless.scaling.memory import MIB, RUNTIME_BYTES, ModelMemory

__all__ = ["MIB", "RUNTIME_BYTES", "ModelMemory", "reduction", "server_bytes"]


def server_bytes(
    instances: Iterable[tuple[str, int]], models: Mapping[str, ModelMemory]
) -> tuple[int, int]:
    """(with the store, without it) for one server's instances, each (model_key, batch size);
    models without a memory profile count nothing."""
    shared = unshared = 0
    seen: set[str] = set()
    for model_key, batch_size in instances:
        memory = models.get(model_key)
        if memory is None:
            continue
        private = memory.private_bytes(batch_size)
        unshared += private + memory.weight_bytes
        shared += private
        if model_key not in seen:
            seen.add(model_key)
            shared += memory.weight_bytes
    return shared, unshared


def reduction(memory: ModelMemory, instances: int, batch_size: int = 1) -> float:
    """Tetris Figure 9(a): the share of memory the store saves for `instances` instances of
    one model on one server."""
    shared, unshared = server_bytes([("m", batch_size)] * instances, {"m": memory})
    return 1.0 - shared / unshared if unshared else 0.0
