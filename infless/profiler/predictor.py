"""The combined-operator latency predictor (INFless §3.3): graph + operator profiles -> t_exec.

A model's latency at <b, c, g> is its graph's chain/branch combination of operator times,
plus the per-call overheads no operator profile holds (nn.Module calls of container
modules, shape lookups, the cost of switching between different operators), times
(1 + offset).

Caches. Operators are profiled with their weights out of L2 but in the last-level cache
("warm") and, at small batches, out of the LLC too ("cold"). Between two uses of a weight,
a forward streams the model's other weights and its activations through the LLC.

- How much of it a working set keeps on this host is measured
  (`calibration.effective_llc_bytes`): the LLC is shared with other processes and tenants.
- Streaming slows down gradually from about half that size to all of it (measured:
  77-80 GB/s up to 12 MB, 69 at 16 MB, 47 at 24 MB of a 32 MB LLC).
- So a model's footprint at batch b (streamed weights plus the activations its operators
  read) decides the share of its weights found evicted: none up to half the effective size,
  all from the effective size on, linearly between. Each operator takes its warm time plus
  that share of its cold extra. Measured: MobileNet-v1's 17 MB and the LSTM's 19.6 MB of
  weights, under the 21 MB effective size of that profile, ran 9-27 % slower at b1-b2 than
  their warm operators add up to, near their cold sums. The 4-5 MB of DSSM and TextCNN ran
  at their warm sums.
- Table lookups (embeddings) take their cold time in any model: the rows a batch's ids
  pick are rarely the ones earlier batches left in a cache. Measured: 128 random rows of a
  10 MB table took 9-10 us in a loop on the same or 16 rotating id sets, 140 us after the
  LLC was swept, and 90-110 us inside dssm, timed node by node.

Batch sizes and threads. Operator times come from the profiled batch sizes by linear
interpolation (beyond the largest: the last slope, never negative).

- An operator's curve keeps what was measured, even where a larger batch runs faster:
  oneDNN switches kernels with the batch, and many convolutions here run faster at 16 than
  at 8 on one thread.
- Over threads, an operator takes the best of the profiled counts up to `cpus`.
- Monotonicity over the batch is enforced on the model's total instead: the prediction at b
  is the largest total at b or any profiled batch below it. The total is exact at profiled
  batches and linear between them (beyond the largest, it keeps the largest's evicted
  share, so it grows linearly), so that is the running maximum of the whole curve.
- Thus the prediction never falls as the batch grows and never rises as threads are added.
  An operator that is faster at a larger batch still lowers the model's curve there, unless
  the rest of the model outweighs it. (A running maximum per operator would carry every
  such dip, and every noise spike, up to all larger batches.)

Machine speed (`speed`). With `profile_speed` set, every profile row is rescaled on loading,
from the speed index measured next to it to that common speed (normally the profiles'
typical speed). A prediction is scaled by `speed_now / profile_speed` at each thread count
when the speed now is known (`speed_now`, or the `speed` argument). That corrects the drift
of this machine's speed between profiling and predicting, nothing else: the index is a
fixed reference kernel, not fitted to any model.

Pure: no I/O, no clock, no torch. Profiles are loaded beforehand by the shell
(`infless.profiler.service`) and handed in.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from infless.profiler.database import ProfileRow
from infless.profiler.graph import OperatorGraph
from infless.profiler.speed import SpeedIndex, normalise, speed_factor
from infless.profiler.structure import Block, BranchMode, block_cost, decompose
from infless.profiler.tables import OpTable

DEFAULT_OFFSET_PCT = 10.0  # INFless §3.3: "increase the prediction offset by 10%"
COLD_FRACTION = 0.75  # without a measured effective LLC: its assumed share of the nominal one


class LatencyPredictor(Protocol):
    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float: ...


class MissingProfile(LookupError):
    """An operator of a model has no profile for the asked configuration."""


@dataclass(frozen=True, slots=True)
class Calibration:
    """Per-call overheads in microseconds, measured by `calibration.calibrate`."""

    module_call_us: float = 0.0
    python_op_us: float = 0.0
    op_switch_us: float = 0.0
    llc_bytes: float = float(32 << 20)
    llc_effective_bytes: float = 0.0  # what a working set keeps of the LLC here (0: unknown)

    @staticmethod
    def of(values: Mapping[str, float]) -> Calibration:
        return Calibration(
            values.get("module_call_us", 0.0),
            values.get("python_op_us", 0.0),
            values.get("op_switch_us", 0.0),
            values.get("llc_bytes", float(32 << 20)),
            values.get("llc_effective_bytes", 0.0),
        )

    @property
    def cold_above_bytes(self) -> float:
        """A footprint above this finds all its weights evicted between two forwards: the
        effective LLC, measured, else `COLD_FRACTION` of the LLC's nominal size."""
        return self.llc_effective_bytes or COLD_FRACTION * self.llc_bytes

    def evicted_share(self, footprint_bytes: float) -> float:
        """The share of a model's weights evicted between two forwards, for the bytes it
        streams per forward: 0 up to half of `cold_above_bytes`, 1 from it on, linear between."""
        full = self.cold_above_bytes
        return min(1.0, max(0.0, 2.0 * footprint_bytes / full - 1.0)) if full > 0 else 1.0


@dataclass(frozen=True, slots=True)
class _Model:
    graph: OperatorGraph
    structure: Block
    node_keys: Mapping[str, str]  # compute node -> op key
    overhead_ms: float
    lookup_nodes: frozenset[str]  # table lookups: from their cold profiles at any footprint
    weight_bytes: int  # streamed per forward, besides the activations
    activation_bytes_per_sample: int
    grid: tuple[int, ...]  # every batch size some operator was profiled at, ascending
    kinds: Mapping[str, str]  # node -> operator kind


@dataclass
class CombinedOperatorPredictor:
    """`LatencyPredictor` from combined operator profiles.

    `branch_mode` "sum" fits eager PyTorch on a CPU (branches run one after another); "max"
    is the paper's rule for executors that overlap branches. `kind_factors` optionally scales
    operator kinds (1.0 when absent). `profile_speed` is the machine speed the profile tables
    are rescaled to as they are added (None: taken as measured); `speed_now` the speed
    predictions are for when no `speed` is passed (None: `profile_speed`).
    """

    offset_pct: float = DEFAULT_OFFSET_PCT
    branch_mode: BranchMode = "sum"
    calibration: Calibration = field(default_factory=Calibration)
    kind_factors: Mapping[str, float] = field(default_factory=dict)
    profile_speed: SpeedIndex | None = None
    speed_now: SpeedIndex | None = None
    _tables: dict[tuple[str, int], OpTable] = field(default_factory=dict, repr=False)
    _cold_tables: dict[tuple[str, int], OpTable] = field(default_factory=dict, repr=False)
    _models: dict[str, _Model] = field(default_factory=dict, repr=False)

    def add_profiles(self, rows: Iterable[ProfileRow]) -> None:
        grouped: dict[tuple[str, int], list[ProfileRow]] = {}
        for row in normalise(rows, self.profile_speed):
            grouped.setdefault((row.op_key, row.gpu_pct), []).append(row)
        for key, group in grouped.items():
            self._tables[key] = OpTable.of(group)
            self._cold_tables[key] = OpTable.of(
                replace(r, time_ms=r.cold_or_warm_ms) for r in group
            )

    def register(self, model_key: str, graph: OperatorGraph) -> None:
        """Make `model_key` predictable; its compute operators need profiles at gpu_pct 0."""
        keys = {n.name: n.signature.key for n in graph.nodes if n.cost_class == "compute"}
        missing = sorted({k for k in keys.values() if (k, 0) not in self._tables})
        if missing:
            raise MissingProfile(
                f"model {model_key!r}: {len(missing)} operators have no profile (e.g. "
                f"{missing[0]}); run `infless profile {model_key}` first"
            )
        python_ops = sum(1 for n in graph.nodes if n.cost_class != "compute")
        overhead_us = (
            graph.module_calls * self.calibration.module_call_us
            + python_ops * self.calibration.python_op_us
            + len(keys) * self.calibration.op_switch_us
        )
        lookups = frozenset(n.name for n in graph.nodes if n.name in keys and n.signature.is_lookup)
        grid = sorted({b for k in set(keys.values()) for b in self._tables[(k, 0)].grid})
        kinds = {n.name: n.signature.kind for n in graph.nodes}
        self._models[model_key] = _Model(
            graph,
            decompose(graph),
            keys,
            overhead_us / 1000.0,
            lookups,
            graph.weight_bytes,
            graph.activation_bytes_per_sample(),
            tuple(grid),
            kinds,
        )

    def unregister(self, model_key: str) -> None:
        self._models.pop(model_key, None)

    def models(self) -> list[str]:
        return sorted(self._models)

    def _factor(self, speed: SpeedIndex | None) -> Callable[[int], float]:
        now = speed if speed is not None else self.speed_now
        return lambda cpus: speed_factor(now, self.profile_speed, cpus)

    def predict_raw_ms(
        self,
        model_key: str,
        batch_size: int,
        cpus: int,
        gpu_pct: int = 0,
        *,
        speed: SpeedIndex | None = None,
    ) -> float:
        """The prediction without the safety offset, at machine speed `speed` (or `speed_now`)."""
        if batch_size < 1 or cpus < 1 or not 0 <= gpu_pct <= 100:
            raise ValueError(
                f"cannot predict {model_key!r} at batch_size={batch_size}, cpus={cpus}, "
                f"gpu_pct={gpu_pct}: batch and cpus must be >= 1, gpu_pct in [0, 100]"
            )
        try:
            model = self._models[model_key]
        except KeyError:
            raise MissingProfile(
                f"model {model_key!r} is not registered with the predictor; known: "
                f"{', '.join(self.models()) or 'none'}"
            ) from None
        factor = self._factor(speed)
        grid = model.grid

        def exact(batch: int) -> float:  # beyond the largest profiled batch: the largest's share
            share = self._evicted_share(model, min(batch, grid[-1]))
            return self._total_ms(model_key, model, batch, cpus, gpu_pct, factor, share)

        # the running maximum over the batch (see the module docstring): exact totals at the
        # profiled batches below, and at `batch_size` linear between its neighbours
        below = {b: exact(b) for b in grid if b < batch_size}
        if batch_size <= grid[0] or batch_size >= grid[-1] or batch_size in grid:
            at_batch = exact(batch_size)
        else:
            i = bisect.bisect_right(grid, batch_size)
            low, high = below[grid[i - 1]], exact(grid[i])
            at_batch = low + (batch_size - grid[i - 1]) / (grid[i] - grid[i - 1]) * (high - low)
        return max([at_batch, *below.values()])

    def _total_ms(
        self,
        model_key: str,
        model: _Model,
        batch_size: int,
        cpus: int,
        gpu_pct: int,
        factor: Callable[[int], float],
        evicted: float,
    ) -> float:
        """The model's combined operator times plus overheads at exactly `batch_size`, with
        the `evicted` share of its weights out of the LLC."""

        def op_cost(name: str) -> float:
            key = model.node_keys.get(name)
            if key is None:
                return 0.0
            if (key, gpu_pct) not in self._tables:
                raise MissingProfile(
                    f"model {model_key!r}: operator {name} ({key}) has no profile at "
                    f"gpu_pct={gpu_pct}"
                )
            time_ms = self._node_ms(model, name, key, batch_size, cpus, gpu_pct, factor, evicted)
            return time_ms * self.kind_factors.get(model.kinds[name], 1.0)

        overhead_ms = model.overhead_ms * factor(1)  # per-call overheads: the calling thread
        return block_cost(model.structure, op_cost, self.branch_mode) + overhead_ms

    def _evicted_share(self, model: _Model, batch_size: int) -> float:
        footprint = model.weight_bytes + model.activation_bytes_per_sample * batch_size
        return self.calibration.evicted_share(footprint)

    def _node_ms(
        self,
        model: _Model,
        name: str,
        key: str,
        batch_size: int,
        cpus: int,
        gpu_pct: int,
        factor: Callable[[int], float],
        evicted: float,
    ) -> float:
        """One node's time: its warm time plus the `evicted` share of its cold extra (a
        lookup: its cold time)."""
        if evicted >= 1.0 or name in model.lookup_nodes:
            return self._cold_tables[(key, gpu_pct)].at(batch_size, cpus, factor)
        warm = self._tables[(key, gpu_pct)].at(batch_size, cpus, factor)
        if evicted <= 0.0:
            return warm
        cold = self._cold_tables[(key, gpu_pct)].at(batch_size, cpus, factor)
        return warm + evicted * (cold - warm)

    def predict_latency_ms(
        self,
        model_key: str,
        batch_size: int,
        cpus: int,
        gpu_pct: int = 0,
        *,
        speed: SpeedIndex | None = None,
    ) -> float:
        raw = self.predict_raw_ms(model_key, batch_size, cpus, gpu_pct, speed=speed)
        return raw * (1.0 + self.offset_pct / 100.0)

    def breakdown_ms(
        self,
        model_key: str,
        batch_size: int,
        cpus: int,
        gpu_pct: int = 0,
        *,
        speed: SpeedIndex | None = None,
    ) -> dict[str, float]:
        """Operator time per kind (sum over nodes, no offset) plus "overhead", at exactly
        `batch_size` (without the running maximum over smaller batches)."""
        model = self._models[model_key]
        factor = self._factor(speed)
        evicted = self._evicted_share(model, batch_size)
        totals: dict[str, float] = {"overhead": model.overhead_ms * factor(1)}
        for node in model.graph.nodes:
            key = model.node_keys.get(node.name)
            if key is not None:
                t = self._node_ms(model, node.name, key, batch_size, cpus, gpu_pct, factor, evicted)
                totals[node.signature.kind] = totals.get(node.signature.kind, 0.0) + t
        return totals

    def table_ms(
        self, model_key: str, batches: Sequence[int], cpus: Sequence[int], gpu_pct: int = 0
    ) -> dict[tuple[int, int], float]:
        return {
            (b, c): self.predict_latency_ms(model_key, b, c, gpu_pct) for b in batches for c in cpus
        }
