"""A profiling run: measure the configurations a profile database lacks, operator by operator.

Operators are rebuilt alone from their signatures (`targets.build_operator`) with their
weights cycled through copies, so they come from where a model finds them: out of L2 but in
the last-level cache ("warm"), and at small batches out of the LLC too ("cold"; table
lookups at every batch, see `OpSignature.is_lookup`). Their inputs cycle through copies out
of L2 too, as a model hands each operator a new tensor on every call, and their results
live on for a few calls, as a model's operator writes to a block freed operators earlier.
Each operator's rows are committed together, so an interrupted run resumes where it stopped.
With a reference kernel, every row carries the machine speed index paired with its
measurement (`ProfileRow.ref_ms`).

Imports torch. Owns which configurations get measured and the rows stored; timing is
`operators`'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from infless.clock import perf_s, wall_s
from infless.profiler.calibration import cache_bytes, ensure_calibration
from infless.profiler.database import Config, ProfileDatabase, ProfileRow
from infless.profiler.graph import OperatorGraph, OpSignature
from infless.profiler.operators import Measurement, ProfilePlan, measure_threads
from infless.profiler.speed import REFERENCE_KERNEL, rescale
from infless.profiler.targets import build_operator

MIN_COLD_WEIGHT_BYTES = 64 << 10  # smaller weights cost the same wherever they are
MAX_COLD_BATCH = 4  # beyond, arithmetic dwarfs reading the weights once: cold = warm
# (except for lookups, which read rows, not the whole table: their cold time is measured always)


@dataclass
class ProfileProgress:
    """What a profiling run did; `log` receives one line per operator, `advance` the count
    of operators profiled so far and how many the run profiles (a progress bar's)."""

    log: Callable[[str], None] = lambda _line: None
    advance: Callable[[int, int], None] = lambda _done, _total: None
    operators_done: int = 0
    configs_measured: int = 0
    configs_skipped: int = 0
    reps_redone: int = 0  # multi-thread repetitions discarded as contended and redone
    reps_contended: int = 0  # ... kept although contended (retries ran out)
    failures: list[str] = field(default_factory=list)


def distinct_signatures(graphs: Iterable[OperatorGraph]) -> dict[str, OpSignature]:
    found: dict[str, OpSignature] = {}
    for graph in graphs:
        found.update(graph.signatures())
    return found


def profile_signatures(
    db: ProfileDatabase,
    signatures: Sequence[OpSignature],
    plan: ProfilePlan,
    progress: ProfileProgress | None = None,
    *,
    remeasure: bool = False,
    reference: Callable[[], object] | None = None,
) -> ProfileProgress:
    """Measure every configuration of `plan` not yet in `db` for each signature (resumable).

    With `remeasure`, measured configurations are measured again and each keeps the faster of
    its old and new figures (compared at one machine speed when both carry a speed index): on
    a shared machine, another pass can only remove contention. With `reference` (the speed
    index's kernel, `reference.reference_kernel()`), each row stores its paired time
    (`ProfileRow.ref_ms`).
    """
    progress = progress or ProfileProgress()
    ensure_calibration(db)
    if reference is not None:
        check_reference_kernel(db)
    if plan.gpu_pcts != (0,):
        raise ValueError(
            f"gpu_pcts={plan.gpu_pcts}: GPU operator profiling needs a GPU and an MPS daemon; "
            "this profiler measures CPU (gpu_pct 0) only"
        )
    todo = [
        (s, [c for c in plan.configs() if remeasure or c not in db.measured_configs(s.key)])
        for s in signatures
    ]
    pending = [(s, configs) for s, configs in todo if configs]
    progress.configs_skipped += sum(len(plan.configs()) for _ in signatures) - sum(
        len(c) for _, c in pending
    )
    progress.advance(0, len(pending))
    for index, (signature, configs) in enumerate(pending, 1):
        progress.advance(index - 1, len(pending))
        started = perf_s()
        try:
            rows, redone, kept = _profile_one(signature, configs, plan, reference)
        except Exception as exc:  # an operator that cannot run alone must not stop the run
            progress.failures.append(f"{signature.describe()}: {exc}")
            progress.log(f"[{index}/{len(pending)}] {signature.describe()}: FAILED ({exc})")
            continue
        if remeasure:
            rows = _keep_faster(db.rows_for([signature.key])[signature.key], rows)
        db.add_profiles(signature, rows)
        progress.operators_done += 1
        progress.configs_measured += len(rows)
        progress.reps_redone += redone
        progress.reps_contended += kept
        contention = f" ({redone} contended repetitions redone, {kept} kept)" if redone else ""
        progress.log(
            f"[{index}/{len(pending)}] {signature.describe()}: {len(rows)} configs in "
            f"{perf_s() - started:.1f} s{contention}"
        )
    progress.advance(len(pending), len(pending))
    return progress


def check_reference_kernel(db: ProfileDatabase) -> None:
    """Record the reference kernel in `db`, or refuse one whose indices came from another."""
    stored = db.get_meta("reference_kernel")
    if stored is None:
        db.set_meta("reference_kernel", REFERENCE_KERNEL)
    elif stored != REFERENCE_KERNEL:
        raise ValueError(
            f"{db.path}: its speed indices come from the reference kernel {stored!r}, this "
            f"infless runs {REFERENCE_KERNEL!r}; they do not compare: move the file away and "
            "profile again"
        )


def _keep_faster(old: Sequence[ProfileRow], new: Sequence[ProfileRow]) -> list[ProfileRow]:
    before = {(r.batch, r.cpus, r.gpu_pct): r for r in old}
    merged = []
    for row in new:
        prior = before.get((row.batch, row.cpus, row.gpu_pct))
        if prior is None:
            merged.append(row)
            continue
        if prior.ref_ms > 0 and row.ref_ms > 0:  # compare them at one machine speed
            prior = rescale(prior, row.ref_ms)
        faster = row if row.time_ms <= prior.time_ms else prior
        merged.append(
            replace(
                faster,
                min_ms=min(row.min_ms, prior.min_ms),
                cold_ms=min(row.cold_or_warm_ms, prior.cold_or_warm_ms),
            )
        )
    return merged


def rotation_bytes() -> tuple[int, int]:
    """Bytes to cycle copies through: (out of L2 but in the LLC, out of the LLC too). Weights
    take either; inputs (activations), and a whole model's inputs, the first."""
    l2, llc = cache_bytes(2, 1 << 20), cache_bytes(3, 32 << 20)
    return max(8 * l2, 4 << 20), 2 * llc


def profile_row(
    key: str, batch: int, cpus: int, warm: Measurement, cold: Measurement, measured_at: float
) -> ProfileRow:
    """The stored row of one configuration; the cold figure is rescaled to the warm one's
    machine speed when both carry a paired reference time."""
    cold_ms = cold.fast_ms
    if warm.ref_ms > 0 and cold.ref_ms > 0:
        cold_ms *= warm.ref_ms / cold.ref_ms
    return ProfileRow(
        op_key=key,
        batch=batch,
        cpus=cpus,
        gpu_pct=0,
        time_ms=warm.fast_ms,
        min_ms=warm.min_ms,
        spread=warm.spread,
        reps=warm.reps,
        measured_at=measured_at,
        cold_ms=cold_ms,
        ref_ms=warm.ref_ms,
    )


def _profile_one(
    signature: OpSignature,
    configs: list[Config],
    plan: ProfilePlan,
    reference: Callable[[], object] | None = None,
) -> tuple[list[ProfileRow], int, int]:
    """The rows, and how many repetitions were redone / kept although contended."""
    warm_bytes, cold_bytes = rotation_bytes()
    rows: list[ProfileRow] = []
    redone = kept = 0
    for batch in sorted({b for b, _, _ in configs}):
        threads = sorted({c for b, c, _ in configs if b == batch})
        kwargs: dict[str, Any] = {
            "budget_s": plan.budget_s * len(threads),
            "min_reps": plan.min_reps,
            "max_reps": plan.max_reps,
            "reference": reference,
        }
        warm_op = build_operator(
            signature, batch, rotate_bytes=warm_bytes, rotate_input_bytes=warm_bytes
        )
        warm = measure_threads(warm_op.run, threads, **kwargs)
        cold = warm
        if warm_op.weight_bytes >= MIN_COLD_WEIGHT_BYTES and (
            batch <= MAX_COLD_BATCH or signature.is_lookup
        ):
            del warm_op
            cold_op = build_operator(
                signature, batch, rotate_bytes=cold_bytes, rotate_input_bytes=warm_bytes
            )
            cold = measure_threads(cold_op.run, threads, **kwargs)
            del cold_op  # its copies fill twice the LLC: not kept while the next batch is built
        now = wall_s()
        rows.extend(
            profile_row(signature.key, batch, cpus, m, cold[cpus], now) for cpus, m in warm.items()
        )
        measured = list(warm.values()) + (list(cold.values()) if cold is not warm else [])
        redone += sum(m.redone for m in measured)
        kept += sum(m.contended for m in measured)
    return rows, redone, kept
