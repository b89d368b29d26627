"""The variant monitor: each variant's state and the capacity factors from what its
instances did in the last window, read through the scaling port and recorded in the
catalogue through its writer (a new entry; a reader's old one stays as it was)."""

from __future__ import annotations

from dataclasses import replace

from infless.control.desired import Owner
from infless.control.port import FunctionState, Serving, Snapshot
from infless.control.variant_monitor import VariantMonitor
from infless.modelless.catalog import ModelEntry, ModellessCatalog
from infless.modelless.config import ModellessConfig
from infless.modelless.states import VariantState
from infless.scaling.view import FunctionView, ScalingPlan
from tests.unit.modelless.support import three_variants


class FakeTarget:
    """A scaling port whose snapshot the test sets: each variant's running totals."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.serving: dict[str, Serving] = {}
        self.refused: dict[str, int] = {}
        self.p99_ms: dict[str, float] = {}

    def snapshot(self) -> Snapshot:
        functions = tuple(
            FunctionState(
                view=FunctionView(name=name, model_key=name, slo_ms=50.0, max_batch=8),
                owner=Owner.AUTOSCALER,
                arrivals=serving.served,
                scale_to_zero=None,
                refused=self.refused.get(name, 0),
                serving=serving,
                p99_ms=self.p99_ms.get(name),
            )
            for name, serving in self.serving.items()
        )
        return Snapshot(servers=(), functions=functions, now_s=self.now_s)

    def apply(self, plan: ScalingPlan) -> None:
        raise AssertionError("the monitor only reads")


def serving(served: int, batches: int, exec_ms: float, ready: int = 1) -> Serving:
    return Serving(
        served=served, batches=batches, exec_ms=exec_ms, ready=ready, max_batch=8, max_cpus=1
    )


def test_a_window_sets_each_variants_state_through_the_catalogues_writer() -> None:
    catalog = ModellessCatalog()
    catalog.publish(ModelEntry(model="m", slo_ms=50.0, profiles=tuple(three_variants())))
    target = FakeTarget()
    monitor = VariantMonitor(target, catalog, ModellessConfig(monitor_s=1.0))
    # fp32 (past its warm-in) serves batches of 8 at its profiled 18 ms; int8 refuses;
    # bf16 has no instance
    target.serving = {
        "m--fp32": serving(800, 100, 1800.0),
        "m--int8": serving(0, 0, 0.0),
        "m--bf16": serving(0, 0, 0.0, ready=0),
    }
    monitor.tick()
    before = catalog.get("m")
    target.now_s = 1.0
    target.serving["m--fp32"] = serving(880, 110, 1980.0)
    target.serving["m--int8"] = serving(8, 1, 6.0)
    target.refused["m--int8"] = 5
    monitor.tick()
    after = catalog.get("m")
    assert before is not None
    assert after is not None
    assert dict(after.states) == {
        "fp32": VariantState.ACTIVE,
        "int8": VariantState.OVERLOADED,
        "bf16": VariantState.INACTIVE,
    }
    assert after.tracked["fp32"].latency_ms == 18.0
    assert after.capacity.own["fp32"] == 1.0  # served at its profiled speed
    assert after.capacity.batch_tail is None  # no instance measured its batches' tail
    # the entry a reader held before the window is as it was
    assert before.states["fp32"] is VariantState.ACTIVE  # idle then, not degraded
    assert "fp32" not in before.capacity.own
    assert after.traffic is before.traffic


def test_what_the_instances_measured_of_their_batches_reaches_the_capacity() -> None:
    catalog = ModellessCatalog()
    catalog.publish(ModelEntry(model="m", slo_ms=50.0, profiles=tuple(three_variants())))
    target = FakeTarget()
    monitor = VariantMonitor(target, catalog, ModellessConfig(monitor_s=1.0))
    target.serving = {"m--fp32": serving(800, 100, 1800.0)}
    monitor.tick()
    target.now_s = 1.0
    target.serving["m--fp32"] = replace(
        serving(880, 110, 1980.0), tail_ratio=1.3, service_ms_by_batch={1: 5.0, 8: 19.0}
    )
    monitor.tick()
    entry = catalog.get("m")
    assert entry is not None
    assert entry.capacity.batch_tail == 1.3
    assert dict(entry.capacity.service["fp32"].ms_by_batch) == {1: 5.0, 8: 19.0}


def test_nothing_registered_takes_no_snapshot() -> None:
    class Unreachable(FakeTarget):
        def snapshot(self) -> Snapshot:
            raise AssertionError("no model is registered: nothing to read")

    VariantMonitor(Unreachable(), ModellessCatalog(), ModellessConfig()).tick()


def one_window_of_fp32_one_at_a_time(
    served_before: int, served: int, exec_ms: float, p99_ms: float
) -> ModelEntry:
    """fp32 on one batch-1 instance, having served `served_before` queries, then `served`
    more in one 1-s window taking `exec_ms` in all, answered with a p99 of `p99_ms`: the
    entry after that window."""
    catalog = ModellessCatalog()
    catalog.publish(ModelEntry(model="m", slo_ms=50.0, profiles=tuple(three_variants())))
    target = FakeTarget()
    monitor = VariantMonitor(target, catalog, ModellessConfig(monitor_s=1.0))
    before = Serving(
        served=served_before,
        batches=served_before,
        exec_ms=4.0 * served_before,  # at fp32's profiled 4 ms
        ready=1,
        max_batch=1,
        max_cpus=1,
    )
    target.serving = {"m--fp32": before}
    monitor.tick()
    target.now_s = 1.0
    target.serving["m--fp32"] = replace(
        before,
        served=served_before + served,
        batches=served_before + served,
        exec_ms=before.exec_ms + exec_ms,
    )
    target.p99_ms["m--fp32"] = p99_ms
    monitor.tick()
    entry = catalog.get("m")
    assert entry is not None
    return entry


def test_the_answered_p99_of_a_one_at_a_time_variant_measures_the_host_tail() -> None:
    # past its warm-in: 40 queries at the profiled 4 ms; the router saw a p99 of 10 ms
    entry = one_window_of_fp32_one_at_a_time(100, 40, 160.0, 10.0)
    assert entry.capacity.tail_ratio == 2.5


def test_a_fresh_variants_first_batches_do_not_measure_its_capacity() -> None:
    """Its first window after its instance started from none: slow (a fresh worker's
    first calls pay one-time costs), and its factor does not move — the application
    would leave the variant on that one window. The tail it showed counts (unmeasured,
    a slower variant would be let in as profiled)."""
    # 40 queries at ten times the profiled 4 ms, a p99 of 60 ms
    entry = one_window_of_fp32_one_at_a_time(0, 40, 1600.0, 60.0)
    assert "fp32" not in entry.capacity.own
    assert entry.capacity.tail_ratio is not None
