"""Free capacity of many servers, indexed for Algorithm 1's best-server lookups.

Equation 10's efficiency e_ij = N_i / (1 − u_i / S_j), with u_i = β·c_i + g_i the instance's
resource units and S_j = β·C_j + G_j the server's free units, grows as S_j shrinks towards u_i.
So for a given configuration the best server is the fitting server with the *smallest* free
score (best fit). Servers are bucketed by free cores; inside a bucket they are sorted by free
GPU share. A lookup walks the buckets with enough cores in increasing order and stops as soon
as no later bucket can beat the best score found: O(distinct free-core values · log m), not
O(servers). Placing an instance moves one server between buckets (bisect).

Sharing affinity (`ServerView.affinity`): per function, the few servers with a nonzero
affinity for it (clamped to (0, 1]), kept by position. `choices` returns the best fit plus
every fitting one of those, each with its affinity: O(buckets · log m + k) for k such servers,
so the planner can weigh them without scanning the pool.

GPU shares: an instance's share comes from one device (`place` takes the tightest that
fits), so a server fits a share when one of its devices has that much free, never by the
sum; each device's free share is kept within [0, its capacity] (no device is over-committed
even by a view that says so).

Best fits are remembered per (cores, share) until a placement can change them: placing on
server j only lowers j's free score, so a remembered best stays best unless j now fits and
beats it (or was it and no longer fits); giving capacity back forgets them all. Algorithm 1
asks for the same few shapes after every placement, so this keeps a plan of thousands of
instances near O(shapes) per placement (INFless Figure 17: scheduling overhead).

Cores for the GPUs (`gpu_core_reserve`, 0: off): every GPU instance needs cores too, so
CPU-only instances that take a server's last cores strand its free GPU shares. With a
reserve r, a CPU-only instance fits a server that has a free GPU share only if r cores
stay free after it; a server without free GPU share, or a GPU instance, is unaffected.

Mutable, but private to one `plan()` call: built from a `PoolView`, never shared or stored.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from infless.scaling.view import ServerView

_UNKNOWN = -1  # `best_fit`: no best remembered for that shape (positions are >= 0)


def _free_shares(server: ServerView) -> list[int]:
    """Each device's free share, within [0, its capacity]: a view that says more is free
    than the device has (or less than nothing) must not let a device be over-committed."""
    capacity = list(server.gpu_pct)
    return [
        max(0, min(free, capacity[d] if d < len(capacity) else 100))
        for d, free in enumerate(server.free_gpu_pct)
    ]


class CapacityIndex:
    def __init__(
        self, servers: Sequence[ServerView], beta: float, gpu_core_reserve: int = 0
    ) -> None:
        self.beta = beta
        self.gpu_core_reserve = max(0, gpu_core_reserve)
        self.ids = [s.server_id for s in servers]
        self.positions = {server_id: pos for pos, server_id in enumerate(self.ids)}
        self.cpu_capacity = [s.cpus for s in servers]
        self.free_cpus = [max(0, s.free_cpus) for s in servers]
        self.free_gpu = [_free_shares(s) for s in servers]
        self.has_gpus = any(s.gpu_pct for s in servers)
        self.max_cpus = max(self.cpu_capacity, default=0)
        self._buckets: dict[int, list[tuple[int, int]]] = {}
        self._keys: list[int] = []  # the free-core values that have a bucket, ascending
        for pos in range(len(servers)):
            self._bucket_of(pos).append((self._gpu_total(pos), pos))
        for bucket in self._buckets.values():
            bucket.sort()
        self._best: dict[tuple[int, int], int | None] = {}  # (cpus, gpu_pct) → best fit
        self._affine: dict[str, dict[int, float]] = {}  # function → {position: affinity}
        for pos, server in enumerate(servers):
            for function, value in server.affinity.items():
                if value > 0 and math.isfinite(value):  # NaN, 0 and below: no affinity
                    self._affine.setdefault(function, {})[pos] = min(1.0, value)

    def _gpu_total(self, pos: int) -> int:
        return sum(self.free_gpu[pos])

    def _bucket_of(self, pos: int) -> list[tuple[int, int]]:
        free = self.free_cpus[pos]
        bucket = self._buckets.get(free)
        if bucket is None:
            bucket = self._buckets[free] = []
            bisect.insort(self._keys, free)
        return bucket

    def score(self, pos: int) -> float:
        """S_j: the server's free resource units β·C_j + G_j."""
        return self.beta * self.free_cpus[pos] + self._gpu_total(pos)

    def fits(self, pos: int, cpus: int, gpu_pct: int) -> bool:
        if gpu_pct <= 0:
            return self._cpu_room(self.free_cpus[pos], self._gpu_total(pos)) >= cpus
        if self.free_cpus[pos] < cpus:
            return False
        return max(self.free_gpu[pos], default=0) >= gpu_pct

    def _cpu_room(self, free_cpus: int, free_gpu_total: int) -> int:
        """The cores a CPU-only instance may take: all free ones, less the reserve while
        the server has a free GPU share (see the module docstring)."""
        return free_cpus - self.gpu_core_reserve if free_gpu_total > 0 else free_cpus

    def best_fit(self, cpus: int, gpu_pct: int) -> int | None:
        """The fitting server with the smallest free score (ties: lowest position)."""
        key = (cpus, gpu_pct)
        found = self._best.get(key, _UNKNOWN)
        if found == _UNKNOWN:
            found = self._best[key] = self._search(cpus, gpu_pct)
        return found

    def _search(self, cpus: int, gpu_pct: int) -> int | None:
        best: tuple[float, int] | None = None
        start = bisect.bisect_left(self._keys, cpus)
        for free in self._keys[start:]:
            if best is not None and self.beta * free > best[0]:
                break
            bucket = self._buckets[free]
            if not bucket:
                continue
            if gpu_pct <= 0:  # the least GPU first: if it is held back, so is the rest
                gpu_total, pos = bucket[0]
                if self._cpu_room(free, gpu_total) >= cpus:
                    candidate = (self.beta * free + gpu_total, pos)
                    if best is None or candidate < best:
                        best = candidate
                continue
            index = bisect.bisect_left(bucket, (gpu_pct, -1))
            while index < len(bucket):
                gpu_total, pos = bucket[index]
                if max(self.free_gpu[pos]) >= gpu_pct:
                    candidate = (self.beta * free + gpu_total, pos)
                    if best is None or candidate < best:
                        best = candidate
                    break
                index += 1
        return None if best is None else best[1]

    def spread_fit(self, cpus: int, gpu_pct: int) -> int | None:
        """The fitting server with the most free (Kubernetes' default LeastAllocated
        scoring: instances spread over the servers); ties: the highest position."""
        best: tuple[float, int] | None = None
        top_gpu = max((sum(free) for free in self.free_gpu), default=0)
        start = bisect.bisect_left(self._keys, cpus)
        for free in reversed(self._keys[start:]):
            if best is not None and self.beta * free + top_gpu < best[0]:
                break
            for gpu_total, pos in reversed(self._buckets[free]):
                if self.fits(pos, cpus, gpu_pct):
                    candidate = (self.beta * free + gpu_total, pos)
                    if best is None or candidate[0] > best[0]:
                        best = candidate
                    break
        return None if best is None else best[1]

    def has_affinity(self, function: str) -> bool:
        """Whether some server has a nonzero affinity for `function`."""
        return function in self._affine

    def choices(
        self, cpus: int, gpu_pct: int, function: str | None = None
    ) -> list[tuple[int, float]]:
        """The servers worth weighing for (cpus, gpu_pct), each with its affinity.

        The best fit first, then every other fitting server with a nonzero affinity for
        `function`, in position order; empty when nothing fits. `function=None`: the best fit
        alone, with affinity 0 (the plain Algorithm-1 choice).
        """
        best = self.best_fit(cpus, gpu_pct)
        if best is None:
            return []
        affine = self._affine.get(function, {}) if function is not None else {}
        if not affine:
            return [(best, 0.0)]
        found = [(best, affine.get(best, 0.0))]
        found.extend(
            (pos, value)
            for pos, value in affine.items()
            if pos != best and self.fits(pos, cpus, gpu_pct)
        )
        return found

    def _unindex(self, pos: int) -> None:
        bucket = self._buckets[self.free_cpus[pos]]
        index = bisect.bisect_left(bucket, (self._gpu_total(pos), pos))
        del bucket[index]

    def _reindex(self, pos: int) -> None:
        bisect.insort(self._bucket_of(pos), (self._gpu_total(pos), pos))

    def _placed_on(self, pos: int) -> None:
        """Server `pos` has less free now: the remembered best fits it can change."""
        score = self.score(pos)
        free_cpus = self.free_cpus[pos]
        free_gpu = max(self.free_gpu[pos], default=0)
        cpu_room = self._cpu_room(free_cpus, self._gpu_total(pos))
        remembered = self._best
        for key, best in list(remembered.items()):
            cpus, gpu_pct = key
            fits = cpu_room >= cpus if gpu_pct <= 0 else free_cpus >= cpus and free_gpu >= gpu_pct
            if best == pos:
                if not fits:
                    del remembered[key]  # searched again when asked
            elif best is None:
                if fits:  # a reserve released by the server's last GPU share
                    remembered[key] = pos
            elif fits and (score, pos) < (self.score(best), best):
                remembered[key] = pos

    def place(self, pos: int, cpus: int, gpu_pct: int) -> int | None:
        """Take `cpus` cores and `gpu_pct` of one device (best fit); the device index or None."""
        if not self.fits(pos, cpus, gpu_pct):
            raise ValueError(
                f"server {self.ids[pos]!r} cannot fit {cpus} cores + {gpu_pct}% GPU "
                f"(free: {self.free_cpus[pos]} cores, GPU {self.free_gpu[pos]})"
            )
        return self._take(pos, cpus, gpu_pct)

    def retake(self, pos: int, cpus: int) -> None:
        """Take back cores `unplace` gave for a trial (no fit test: they were held before,
        and a reserve for GPU instances may not leave them placeable again)."""
        self._take(pos, cpus, 0)

    def _take(self, pos: int, cpus: int, gpu_pct: int) -> int | None:
        self._unindex(pos)
        self.free_cpus[pos] -= cpus
        device: int | None = None
        if gpu_pct > 0:
            free = self.free_gpu[pos]
            device = min(
                (d for d in range(len(free)) if free[d] >= gpu_pct), key=lambda d: (free[d], d)
            )
            free[device] -= gpu_pct
        self._reindex(pos)
        self._placed_on(pos)
        return device

    def unplace(self, pos: int, cpus: int, gpu_pct: int, device: int | None) -> None:
        """Give back what `place` took (used to try a plan and undo it)."""
        self._unindex(pos)
        self.free_cpus[pos] += cpus
        if device is not None:
            self.free_gpu[pos][device] += gpu_pct
        self._reindex(pos)
        self._best.clear()  # more is free: any remembered best may have been beaten
