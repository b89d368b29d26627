"""A model-less query at the front door: it goes to the variant selection picks, or, when
that variant cannot admit it in time, to another running variant that can — on real
routers with in-process workers and a fake clock."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from infless.cluster.cpus import CpuAllocator
from infless.control.functions import FunctionCall, FunctionFrontDoor
from infless.control.pool import WorkerPool
from infless.control.servers import LOCAL_SERVER, Server
from infless.dataplane.config import BatchingConfig
from infless.dataplane.instance import InstanceState
from infless.dataplane.request import Array, Pending
from infless.errors import Overloaded
from infless.gateway.invoke import Answer, Invoker, Started
from infless.modelless.catalog import ModelEntry, ModellessCatalog
from infless.modelless.states import VariantState
from infless.types import FunctionSpec
from infless.workers.starting import BootOrder
from tests.support.clock import FakeClock
from tests.support.frontend import Recorder
from tests.support.inprocess import InProcessModel, InProcessStarter, constant_ms
from tests.unit.control.test_control_plane import MANIFEST
from tests.unit.modelless.support import profile

SLO_MS = 50.0
EXEC_MS = {"fp32": 20.0, "int8": 2.0}  # a batch of up to 4, whatever its size


async def serving(
    overflow_running: bool, exec_ms: dict[str, float] = EXEC_MS
) -> tuple[FunctionFrontDoor, FakeClock, WorkerPool, ModelEntry]:
    """fp32 (the target) and int8 serving, one instance each, at `exec_ms` a batch (the
    profiles say 20 and 2 ms)."""

    def model_for(order: BootOrder) -> InProcessModel:
        return InProcessModel(latency_ms=constant_ms(exec_ms[order.package_dir.name]))

    clock = FakeClock()
    starter = InProcessStarter(clock, model_for)
    server = Server(LOCAL_SERVER, starter, CpuAllocator((0, 1)), 2)
    pool = WorkerPool(clock, [server], BatchingConfig(), autoscaled=False)
    for variant in ("fp32", "int8"):
        spec = FunctionSpec(
            name=f"m--{variant}",
            image="m",
            slo_ms=SLO_MS,
            max_batch=4,
            min_instances=1,
            max_instances=1,
            instances=1,
        )
        pool.deploy(spec, Path(f"/nonexistent/{variant}"), MANIFEST)
    for _ in range(20):
        await clock.advance(0.01)
    catalog = ModellessCatalog()
    states = {"fp32": VariantState.ACTIVE}
    if overflow_running:
        states["int8"] = VariantState.ACTIVE
    entry = ModelEntry(
        model="m",
        slo_ms=SLO_MS,
        profiles=(profile("fp32", 1.0, 20.0, 0.0), profile("int8", 0.96, 2.0, 0.0)),
        states=states,
        target="fp32",
    )
    catalog.publish(entry)
    frontend = FunctionFrontDoor(
        functions=pool.functions,
        clock=clock,
        observer=Recorder(),
        timeout_s=5.0,
        max_body_bytes=1 << 20,
        catalog=catalog,
    )
    return frontend, clock, pool, entry


async def burst(frontend: FunctionFrontDoor, clock: FakeClock, count: int) -> tuple[list[str], int]:
    """`count` queries for the model at one instant, each admitted as the gateway's fast
    path does (bind, room test, admit): the variant each went to, and the refusals."""
    variants: list[str] = []
    refused = 0
    admitted: list[tuple[FunctionCall, Pending]] = []
    for k in range(count):
        call = frontend.open("m")
        frontend.bind(call, None)
        sample: dict[str, Array] = {"x": np.array([k, k], dtype=np.float32)}
        try:
            frontend.check_room(call)
            admitted.append((call, frontend.admit(call, sample)))
        except Overloaded:
            refused += 1
            frontend.close(call, 429)
            continue
        assert call.variant is not None
        variants.append(call.variant)
    while not all(pending.future.done() for _, pending in admitted):
        await clock.advance(0.005)
    for call, pending in admitted:
        frontend.answered(call, pending)
        frontend.close(call, 200)
    return variants, refused


async def test_queries_beyond_the_targets_room_spill_to_the_running_overflow_variant() -> None:
    frontend, clock, pool, entry = await serving(overflow_running=True)
    ready = [i for f in pool.functions.values() for i in f.router.instances]
    assert all(i.state is InstanceState.READY for i in ready)
    variants, refused = await burst(frontend, clock, 60)
    assert refused == 0
    assert variants[0] == "fp32"  # the target first, while it has room
    assert 0 < variants.count("fp32") < 20  # 20-ms batches of 4 within a 50-ms budget
    assert variants.count("int8") == 60 - variants.count("fp32")
    assert entry.spilled == variants.count("int8")
    assert entry.served == {"fp32": variants.count("fp32"), "int8": variants.count("int8")}
    await pool.stop()


async def test_without_a_running_overflow_variant_the_target_refuses_what_it_has_no_room_for() -> (
    None
):
    frontend, clock, pool, entry = await serving(overflow_running=False)
    variants, refused = await burst(frontend, clock, 60)
    assert set(variants) == {"fp32"}
    assert refused == 60 - len(variants) > 0
    assert entry.spilled == 0
    await pool.stop()


async def test_a_target_too_slow_here_even_when_idle_leaves_the_query_to_the_overflow() -> None:
    # the host runs fp32 at 60 ms a batch (its profile: 20): idle, it would still answer
    # after the 50-ms SLO; int8 answers in time
    frontend, clock, pool, entry = await serving(True, {"fp32": 60.0, "int8": 2.0})
    variants, refused = await burst(frontend, clock, 1)
    assert (variants, refused) == (["int8"], 0)
    assert entry.spilled == 1
    await pool.stop()


async def test_a_query_stays_on_the_target_only_within_the_spill_share_of_the_slo() -> None:
    """With `[modelless] spill_share` 0.5, a query stays on fp32 only while fp32 would
    answer it within 25 ms: idle, its predicted tail (20 ms at twice that before any batch
    was measured) is past it, so the burst starts on int8, and goes back to fp32 only when
    int8 too is past 25 ms; nothing is refused."""
    first = {}
    for share in (1.0, 0.5):
        frontend, clock, pool, _ = await serving(overflow_running=True)
        frontend.spill_share = share
        variants, refused = await burst(frontend, clock, 60)
        assert refused == 0
        first[share] = variants[0]
        if share < 1.0:
            assert variants.index("fp32") > 20
        await pool.stop()
    assert first == {1.0: "fp32", 0.5: "int8"}


async def test_a_query_with_another_variant_to_go_to_is_held_to_the_slo() -> None:
    """Held (admitted within the SLO, not a budget grown past it) only where another
    running variant could have taken it; alone, a variant admits as any function does."""
    for overflow_running in (True, False):
        frontend, _, pool, _ = await serving(overflow_running)
        call = frontend.open("m")
        frontend.bind(call, None)
        assert call.variant == "fp32"
        assert call.slo_held is overflow_running
        frontend.close(call, 499)
        await pool.stop()


async def test_every_answer_to_a_model_less_query_names_its_variant_a_refusal_too() -> None:
    """Through the invoke route's `Invoker`: the 429s of a burst the target alone cannot
    admit name the variant that refused them, as its 200s name the one that served them."""
    frontend, clock, pool, _ = await serving(overflow_running=False)
    invoker = Invoker(frontend)
    headers = {"Content-Type": "application/json"}
    started = [invoker.start("m", headers, b'{"inputs": [1, 2]}') for _ in range(60)]
    refused = [a for a in started if isinstance(a, Answer)]
    assert refused
    assert {a.status for a in refused} == {429}
    assert {a.headers["X-Infless-Variant"] for a in refused} == {"fp32"}
    admitted = [s for s in started if isinstance(s, Started)]
    while not all(s.pending.future.done() for s in admitted):
        await clock.advance(0.005)
    served = [invoker.finish(s) for s in admitted]
    assert {(a.status, a.headers["X-Infless-Variant"]) for a in served} == {(200, "fp32")}
    await pool.stop()
