"""What the data plane measures to keep deadlines.

- `ExecModel`: one instance's batch service time per batch size, as the gateway sees it
  (dispatch to result). The mean is the warm-up's shape over batch sizes, times the host's
  level now, times each served size's own residual. The level is an EWMA of every served
  batch against that shape, so sizes not served lately follow a host that slowed down or
  sped up. The tail is the mean times a tail ratio: the `tail_quantile` of service/mean
  over recent batches. It answers the admission and dispatch questions: how long a batch of
  k takes at the tail, and the smallest batch that sustains a rate.
- `FunctionLatency`: per function, three things. The time its requests spend outside queue
  and batch (reading, decoding, encoding, writing: a tail quantile over recent requests).
  The latency of recent answers, per second (the autoscaler's p99 feedback). And the budget
  a new request gets: the SLO less that overhead, scaled by a factor. The factor shrinks
  while the p99 of the requests that arrived since its last change runs above `target` ×
  SLO and grows below `relax` × SLO, up to
  `BUDGET_CEILING`. So what no model foresaw (cores taken by other processes, a loaded
  client) is corrected by what was measured. The overhead lasts as long as answers keep
  coming: with none for a second (every request refused), it halves every second, so a
  burst of slow answers cannot lock a function out.
- `LoopLag`: how late the event loop runs timers (a request waits that long before the
  gateway even reads it).

Plain bookkeeping: no I/O, no clock (times are arguments), never imports torch.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Mapping

TAIL_WINDOW = 256  # recent batches (or requests) a tail quantile is taken over
FIRST_TAIL_RATIO = 2.0  # the tail ratio assumed until TAIL_EVERY batches were served
TAIL_EVERY = 16  # samples between recomputations of a tail quantile
MEAN_WEIGHT = 0.1  # EWMA weight of a served batch in the host's level (after its first few)
RESIDUAL_WEIGHT = 0.02  # ... and in its own size's residual: slow, so the level moves first


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of `values` (nearest rank); 0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class ExecModel:
    def __init__(
        self, measured_ms: Mapping[int, float], max_batch: int, tail_quantile: float = 0.95
    ) -> None:
        if not measured_ms:
            raise ValueError("an ExecModel needs at least one measured batch size")
        self.max_batch = max_batch
        self._q = tail_quantile
        # the warm-up's times: the shape of the cost over batch sizes
        self._shape = {b: max(ms, 1e-3) for b, ms in measured_ms.items()}
        self._sizes = sorted(self._shape)
        # the host now against the warm-up (every served batch moves it: the sizes not
        # served follow too — a slower host is slower at every batch size)
        self.level = 1.0
        self._residual: dict[int, float] = {}  # per served size: what the level does not say
        self._served = 0
        self._ratios: deque[float] = deque(maxlen=TAIL_WINDOW)
        # warm-up timings were taken alone on the instance's cores; serving shares them
        self.tail_ratio = FIRST_TAIL_RATIO
        self._tails = self._tail_table()

    def _tail_table(self) -> list[float]:
        """tail_ms for every batch size up to the largest (read on every request)."""
        return [0.0, *(self.mean_ms(b) * self.tail_ratio for b in range(1, self.max_batch + 1))]

    def _shape_ms(self, batch_size: int) -> float:
        """The warm-up time of `batch_size`, interpolated between measured sizes (and never
        below a smaller size's): linear beyond the largest."""
        sizes, shape = self._sizes, self._shape
        if batch_size in shape:
            value = shape[batch_size]
        else:
            right = bisect.bisect_left(sizes, batch_size)
            if right == 0:
                value = shape[sizes[0]]
            elif right == len(sizes):
                last = sizes[-1]
                value = shape[last] * batch_size / last
            else:
                b0, b1 = sizes[right - 1], sizes[right]
                value = shape[b0] + (batch_size - b0) / (b1 - b0) * (shape[b1] - shape[b0])
        below = bisect.bisect_right(sizes, batch_size) - 1
        return max(value, shape[sizes[below]]) if below >= 0 else value

    def mean_ms(self, batch_size: int) -> float:
        """The mean service time of a batch of `batch_size` on this host now: the warm-up's
        shape times the host's level, times what that size's own batches showed."""
        return self._shape_ms(batch_size) * self.level * self._residual.get(batch_size, 1.0)

    def tail_ms(self, batch_size: int) -> float:
        if 0 < batch_size <= self.max_batch:
            return self._tails[batch_size]
        return self.mean_ms(batch_size) * self.tail_ratio

    def observe(self, batch_size: int, service_ms: float) -> None:
        """A served batch: its ratio to the expected mean feeds the tail; its time moves the
        host's level (every size: a running mean at first — warm-up timings are taken alone,
        serving is what counts — then an EWMA) and, slowly, this size's residual."""
        service_ms = max(service_ms, 1e-3)  # a clock too coarse to see it: a microsecond
        self._ratios.append(service_ms / self.mean_ms(batch_size))
        self._served += 1
        shape_ms = self._shape_ms(batch_size)
        self.level += max(MEAN_WEIGHT, 1.0 / self._served) * (
            service_ms / (shape_ms * self._residual.get(batch_size, 1.0)) - self.level
        )
        residual = self._residual.get(batch_size, 1.0)
        observed = service_ms / (shape_ms * self.level)
        self._residual[batch_size] = residual + RESIDUAL_WEIGHT * (observed - residual)
        if self._served % TAIL_EVERY == 0:
            self.tail_ratio = max(1.0, quantile(list(self._ratios), self._q))
        self._tails = self._tail_table()

    def capacity_rps(self, slo_ms: float) -> float:
        """The most requests a second this instance serves now: the best batch size whose
        service time at its tail fits the SLO (INFless's feasibility: the SLO for one
        request, half of it for a batch), at its mean; 0 when none fits."""
        best = 0.0
        for b in range(1, self.max_batch + 1):
            if self.tail_ms(b) <= (slo_ms if b == 1 else slo_ms / 2.0):
                best = max(best, b * 1000.0 / max(self.mean_ms(b), 1e-3))
        return best

    @property
    def tail_measured(self) -> bool:
        """Whether `tail_ratio` was measured here (else it is `FIRST_TAIL_RATIO`, assumed)."""
        return self._served >= TAIL_EVERY

    def smallest_sustaining(self, rate_rps: float, utilization: float) -> int:
        """The smallest batch whose mean service time keeps the worker busy at most
        `utilization` of the time at `rate_rps` (the largest batch when none does)."""
        if rate_rps <= 0:
            return 1
        tails, ratio = self._tails, self.tail_ratio
        for b in range(1, self.max_batch + 1):
            if rate_rps * tails[b] / ratio / 1000.0 / b <= utilization:
                return b
        return self.max_batch

    def by_batch(self) -> dict[int, float]:
        """The mean per batch size served or measured (what /system/instances shows)."""
        return {b: self.mean_ms(b) for b in sorted({*self._sizes, *self._residual})}


def mean_tail_ratio(models: Iterable[ExecModel | None]) -> float | None:
    """The tail ratio (a batch's service time at its tail over its mean) of the instances
    that measured one, averaged; None when none has. What the model-less capacity reads
    (`Serving.tail_ratio`): a batch size whose tail does not fit the SLO is not served here,
    whatever its mean."""
    ratios = [m.tail_ratio for m in models if m is not None and m.tail_measured]
    return sum(ratios) / len(ratios) if ratios else None


def mean_service_ms(models: Iterable[ExecModel | None]) -> dict[int, float]:
    """The mean service time per batch size (`ExecModel.by_batch`) of the instances that
    measured their tail (served `TAIL_EVERY` batches), averaged over them per size; empty
    when none has. What the model-less capacity judges a running variant's batches by."""
    measured = [m.by_batch() for m in models if m is not None and m.tail_measured]
    sizes = sorted({b for table in measured for b in table})
    return {
        b: sum(t[b] for t in measured if b in t) / sum(1 for t in measured if b in t) for b in sizes
    }


# How often the budget is steered, at most: each time from the p99 of the requests that
# arrived after the previous steer (admitted under the budget it set), once there are
# STEER_MIN_ANSWERS of them. Answers to older requests are not its evidence: steering on
# the last two seconds' answers kept cutting the budget for two seconds after a step had
# been met by a second instance (a fixed bf16 arm live: the factor fell to 0.57, refusing
# at a quarter of the capacity then ready).
STEER_EVERY_S = 0.5
STEER_MIN_ANSWERS = 20
BUDGET_FLOOR = 0.3  # the budget never shrinks below this share of the SLO
# ... and grows up to this share while the measured p99 stays well inside it: predictions
# at the tail are conservative, so a request predicted a little late is admitted when the
# answers show room — a refusal only when the function is really full (the p99 rising
# past `target` × SLO shrinks it again within a second)
BUDGET_CEILING = 1.5
OVERHEAD_FRESH_S = 1.0  # an overhead measured longer ago than this starts to fade
OVERHEAD_EVERY = 32  # answers between recomputations of the overhead's tail ...
OVERHEAD_RECOMPUTE_S = 0.5  # ... and at most this often (a sort of up to 8,192: not per batch)
# The overhead's tail is taken over the answers of the last OVERHEAD_WINDOW_S (at least the
# last TAIL_WINDOW of them). A batch's answers are written one after another, so 256 answers
# are a few batches at a high rate: a tail over them jumped between 1 and 13 ms from one
# tenth of a second to the next (text JSON at 3,800 req/s), and each jump refused requests.
OVERHEAD_WINDOW_S = 2.0
OVERHEAD_KEEP = 8192  # answers kept at most (a flood must not grow them)


class FunctionLatency:
    """A function's recent latencies as the gateway sees them (see the module docstring)."""

    def __init__(
        self,
        slo_ms: float,
        tail_quantile: float = 0.95,
        window_s: int = 5,
        target: float = 0.9,
        relax: float = 0.7,
    ) -> None:
        self.slo_ms = slo_ms
        self._q = tail_quantile
        self._overheads: deque[tuple[float, float]] = deque(maxlen=OVERHEAD_KEEP)  # (at, ms)
        self._seen = 0
        self.overhead_ms = 0.0  # tail of the time outside queue and batch (none measured yet)
        self._overhead_at_s = -math.inf  # when it was last measured
        self._window_s = window_s
        self._seconds: deque[tuple[int, list[float]]] = deque(maxlen=window_s + 1)
        self._target, self._relax = target, relax
        self._steered_s = -math.inf
        self._fresh: list[float] = []  # latencies of requests that arrived after the last steer
        self.budget_factor = 1.0
        self.answered = 0

    def budget_ms(self, now_s: float, loop_lag_ms: float) -> float:
        """How long a new request's batch may take to be served (see the module docstring)."""
        return self._budget_ms(now_s, loop_lag_ms, self.budget_factor)

    def slo_budget_ms(self, now_s: float, loop_lag_ms: float) -> float:
        """The budget grown no further than the SLO (the factor at most 1): what a
        model-less query is held to where it can be served in time (the front door's
        spill-over). A grown budget admits work predicted past the SLO; that is worth it
        only when nothing would serve the request in time."""
        return self._budget_ms(now_s, loop_lag_ms, min(1.0, self.budget_factor))

    def _budget_ms(self, now_s: float, loop_lag_ms: float, factor: float) -> float:
        overhead_ms = self.overhead_ms
        stale_s = now_s - self._overhead_at_s - OVERHEAD_FRESH_S
        if stale_s > 0:
            overhead_ms *= 0.5**stale_s
        return max(0.0, factor * self.slo_ms - overhead_ms - loop_lag_ms)

    def answered_in(self, now_s: float, latency_ms: float, overhead_ms: float) -> None:
        self.answered += 1
        overheads = self._overheads
        overheads.append((now_s, overhead_ms))
        self._seen += 1
        if self._seen % OVERHEAD_EVERY == 0 and now_s - self._overhead_at_s >= (
            OVERHEAD_RECOMPUTE_S
        ):
            while len(overheads) > TAIL_WINDOW and overheads[0][0] < now_s - OVERHEAD_WINDOW_S:
                overheads.popleft()
            self.overhead_ms = quantile([v for _, v in overheads], self._q)
            self._overhead_at_s = now_s
        second = math.floor(now_s)
        seconds = self._seconds
        if not seconds or seconds[-1][0] != second:
            seconds.append((second, []))
        bucket = seconds[-1][1]
        if len(bucket) < 8192:  # enough for a p99; a flood must not grow it
            bucket.append(latency_ms)
        fresh = self._fresh
        if now_s - latency_ms / 1000.0 >= self._steered_s and len(fresh) < OVERHEAD_KEEP:
            fresh.append(latency_ms)
        if now_s - self._steered_s >= STEER_EVERY_S and len(fresh) >= STEER_MIN_ANSWERS:
            self._steered_s = now_s
            self._steer(quantile(fresh, 0.99))
            fresh.clear()

    def _steer(self, p99_ms: float) -> None:
        if p99_ms > self._target * self.slo_ms:
            self.budget_factor = max(BUDGET_FLOOR, self.budget_factor * 0.85)
        elif p99_ms < self._relax * self.slo_ms:
            self.budget_factor = min(BUDGET_CEILING, self.budget_factor * 1.1)

    def recent_ms(self, now_s: float, seconds: int) -> list[float]:
        """The latencies of the answers of the last `seconds` whole seconds and this one
        (at most 8192 a second: what a live chart's quantiles are taken over)."""
        oldest = math.floor(now_s) - seconds
        return [v for second, bucket in self._seconds if second >= oldest for v in bucket]

    def p99_ms(self, now_s: float) -> float | None:
        """The p99 of the answers of the last `window_s` whole seconds and this one."""
        oldest = math.floor(now_s) - self._window_s
        values = [v for second, bucket in self._seconds if second >= oldest for v in bucket]
        return quantile(values, 0.99) if len(values) >= 20 else None


class LoopLag:
    """How late the event loop ran a timer, over recent probes (a tail quantile)."""

    def __init__(self, tail_quantile: float = 0.95) -> None:
        self._q = tail_quantile
        self._lags: deque[float] = deque(maxlen=64)
        self.tail_ms = 0.0

    def observe(self, late_ms: float) -> None:
        self._lags.append(max(0.0, late_ms))
        self.tail_ms = quantile(list(self._lags), self._q)
