"""The combined-operator latency predictor (INFless §3.3): graph + operator profiles -> t_exec.

A model's latency at <b, c, g> is its graph's chain/branch combination of operator times, plus
the per-call overheads no operator profile holds (nn.Module calls of container modules, shape
lookups, the cost of switching between different operators), times (1 + offset). Operators are
profiled with their weights out of L2 but in the last-level cache ("warm") and, at small
batches, out of the LLC too ("cold"); a model whose streamed weights exceed what a working
set keeps of the LLC on this host (measured by `calibration.effective_llc_bytes`: the LLC is
shared with other processes and tenants) is predicted from the cold profiles, since its own
operators and its neighbours evict its weights between forwards, and so are table lookups
(embeddings) in any model: the rows a batch's ids pick are rarely the ones earlier batches
left in a cache (measured: 128 random rows of a 10 MB table, 9-10 us in a loop on the same
or 16 rotating id sets, 140 us after the LLC was swept, 90-110 us inside dssm, timed node
by node).
Operator times come from the profiled batch sizes by linear interpolation (beyond the
largest: the last slope, never negative). An operator's curve keeps what was measured, even
where a larger batch runs faster (oneDNN switches kernels with the batch: many convolutions
here run faster at 16 than at 8 on one thread); over threads an operator takes the best of
the profiled counts up to `cpus`. Monotonicity over the batch is enforced on the model's
total instead: the prediction at b is the largest total at b or any profiled batch below it.
The total is piecewise linear between profiled batches, so that is the running maximum of
the whole curve. Thus the prediction never falls as the batch grows and never rises as
threads are added, while an operator that is faster at a larger batch lowers the model's
curve there unless the rest of the model outweighs it (a running maximum per operator would
carry every such dip, and every noise spike, up to all larger batches).

Machine speed (`speed`): with `profile_speed` set, every profile row is rescaled on loading
from the speed index measured next to it to that common speed (normally the profiles'
typical speed), and a prediction is scaled by `speed_now / profile_speed` at each thread
count when the speed now is known (`speed_now`, or the `speed` argument). That corrects the
drift of this machine's speed between profiling and predicting, nothing else: the index is
a fixed reference kernel, not fitted to any model.

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

DEFAULT_OFFSET_PCT = 10.0  # INFless §3.3: "increase the prediction offset by 10%"
COLD_FRACTION = 0.75  # without a measured effective LLC: weights above this share are evicted


class LatencyPredictor(Protocol):
    def predict_latency_ms(
        self, model_key: str, batch_size: int, cpus: int, gpu_pct: int = 0
    ) -> float: ...


class MissingProfile(LookupError):
    """An operator of a model has no profile for the asked configuration."""


def _unscaled(_cpus: int) -> float:
    return 1.0


@dataclass(frozen=True, slots=True)
class BatchCurve:
    """Time over batch size at one thread count, as profiled (not necessarily monotone)."""

    batches: tuple[int, ...]
    times_ms: tuple[float, ...]

    @staticmethod
    def of(points: Iterable[tuple[int, float]]) -> BatchCurve:
        ordered = sorted(dict(points).items())
        if not ordered:
            raise ValueError("a batch curve needs at least one point")
        return BatchCurve(tuple(b for b, _ in ordered), tuple(t for _, t in ordered))

    def at(self, batch_size: int) -> float:
        b, t = self.batches, self.times_ms
        if batch_size <= b[0]:
            return t[0]
        if batch_size >= b[-1]:
            if len(b) == 1:
                return t[0] * batch_size / b[0]
            slope = max(0.0, (t[-1] - t[-2]) / (b[-1] - b[-2]))
            return t[-1] + slope * (batch_size - b[-1])
        i = bisect.bisect_right(b, batch_size)
        frac = (batch_size - b[i - 1]) / (b[i] - b[i - 1])
        return t[i - 1] + frac * (t[i] - t[i - 1])


@dataclass(frozen=True, slots=True)
class OpTable:
    """One operator's profiles at one GPU share: a batch curve per profiled thread count.

    At `cpus` threads the operator takes, at each profiled batch size, the best of the
    curves profiled at up to `cpus` threads, and interpolates linearly between those
    points, so its time stays piecewise linear with kinks at profiled batch sizes only (what
    the model's running maximum relies on); beyond the largest, it takes the best of the
    curves' extrapolations, which never decrease.
    """

    curves: tuple[tuple[int, BatchCurve], ...]  # (cpus, curve), cpus ascending
    grid: tuple[int, ...] = ()  # every profiled batch size of any curve, ascending

    @staticmethod
    def of(rows: Iterable[ProfileRow]) -> OpTable:
        by_cpus: dict[int, list[tuple[int, float]]] = {}
        for row in rows:
            by_cpus.setdefault(row.cpus, []).append((row.batch, row.time_ms))
        if not by_cpus:
            raise ValueError("an operator table needs at least one profile row")
        curves = tuple((c, BatchCurve.of(p)) for c, p in sorted(by_cpus.items()))
        return OpTable(curves, tuple(sorted({b for _, c in curves for b in c.batches})))

    def at(self, batch_size: int, cpus: int, factor: Callable[[int], float] = _unscaled) -> float:
        """The time at <batch_size, cpus>; `factor(c)` scales the curve profiled at c threads."""
        # more threads never slower: the best of every profiled count up to `cpus`
        usable = [(c, curve) for c, curve in self.curves if c <= cpus] or [self.curves[0]]
        if len(usable) == 1:
            c, curve = usable[0]
            return curve.at(batch_size) * factor(c)

        def best(batch: int) -> float:
            return min(curve.at(batch) * factor(c) for c, curve in usable)

        grid = self.grid
        if batch_size <= grid[0]:
            return best(grid[0])
        if batch_size >= grid[-1]:  # each curve extrapolates non-decreasing: so does the best
            return best(batch_size)
        i = bisect.bisect_right(grid, batch_size)
        low, high = best(grid[i - 1]), best(grid[i])
        return low + (batch_size - grid[i - 1]) / (grid[i] - grid[i - 1]) * (high - low)


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
        """Weights above this are evicted between two forwards: the effective LLC, measured,
        else `COLD_FRACTION` of the LLC's nominal size."""
        return self.llc_effective_bytes or COLD_FRACTION * self.llc_bytes


@dataclass(frozen=True, slots=True)
class _Model:
    graph: OperatorGraph
    structure: Block
    node_keys: Mapping[str, str]  # compute node -> op key
    overhead_ms: float
    cold_nodes: frozenset[str]  # nodes predicted from the DRAM-weight profiles
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
        # weights larger than the cache keeps: every node from the DRAM-weight profiles
        cold = graph.weight_bytes > self.calibration.cold_above_bytes
        cold_nodes = frozenset(
            n.name for n in graph.nodes if n.name in keys and (cold or n.signature.is_lookup)
        )
        grid = sorted({b for k in set(keys.values()) for b in self._tables[(k, 0)].grid})
        kinds = {n.name: n.signature.kind for n in graph.nodes}
        self._models[model_key] = _Model(
            graph,
            decompose(graph),
            keys,
            overhead_us / 1000.0,
            cold_nodes,
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
        # the running maximum over the batch (see the module docstring)
        below = [b for b in model.grid if b < batch_size]
        factor = self._factor(speed)
        return max(
            self._total_ms(model_key, model, b, cpus, gpu_pct, factor) for b in (*below, batch_size)
        )

    def _total_ms(
        self,
        model_key: str,
        model: _Model,
        batch_size: int,
        cpus: int,
        gpu_pct: int,
        factor: Callable[[int], float],
    ) -> float:
        """The model's combined operator times plus overheads at exactly `batch_size`."""

        def op_cost(name: str) -> float:
            key = model.node_keys.get(name)
            if key is None:
                return 0.0
            tables = self._cold_tables if name in model.cold_nodes else self._tables
            table = tables.get((key, gpu_pct))
            if table is None:
                raise MissingProfile(
                    f"model {model_key!r}: operator {name} ({key}) has no profile at "
                    f"gpu_pct={gpu_pct}"
                )
            time_ms = table.at(batch_size, cpus, factor)
            return time_ms * self.kind_factors.get(model.kinds[name], 1.0)

        overhead_ms = model.overhead_ms * factor(1)  # per-call overheads: the calling thread
        return block_cost(model.structure, op_cost, self.branch_mode) + overhead_ms

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
        totals: dict[str, float] = {"overhead": model.overhead_ms * factor(1)}
        for node in model.graph.nodes:
            key = model.node_keys.get(node.name)
            if key is not None:
                tables = self._cold_tables if node.name in model.cold_nodes else self._tables
                t = tables[(key, gpu_pct)].at(batch_size, cpus, factor)
                totals[node.signature.kind] = totals.get(node.signature.kind, 0.0) + t
        return totals

    def table_ms(
        self, model_key: str, batches: Sequence[int], cpus: Sequence[int], gpu_pct: int = 0
    ) -> dict[tuple[int, int], float]:
        return {
            (b, c): self.predict_latency_ms(model_key, b, c, gpu_pct) for b in batches for c in cpus
        }
