"""Variants on the GPU: their GPU points price g > 0, cards and CPU prices ignore them, and the
generator measures the variants that run on a GPU, one child per share (fake children here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec
import numpy as np
import pytest
from msgspec.structs import replace

from infless.modelless import generate as g
from infless.modelless import gpu_points as gp
from infless.modelless.capacity import Capacity
from infless.modelless.cards import card_for
from infless.modelless.catalog import ModelEntry, ModellessCatalog
from infless.modelless.gpu_points import GpuPlan, gpu_points
from infless.modelless.latency import CatalogPredictor
from infless.modelless.profile_child import ChildReport
from infless.modelless.profiles import LatencyPoint, VariantProfile
from infless.models.package import (
    MANIFEST_FILE,
    WEIGHTS_FILE,
    PackageManifest,
    TensorSignature,
    encode_manifest,
)
from infless.profiler.gpu_profile import GpuChildReport, GpuPoint
from infless.scaling.config import ScalingConfig
from infless.scaling.demand import Demand
from infless.scaling.planner import plan
from infless.scaling.view import FunctionView, PoolView, ServerView
from tests.unit.modelless.support import three_variants

GPU_MS = {(1, 30): 2.0, (8, 30): 6.0, (1, 100): 1.0, (8, 100): 2.0}


def on_gpu(profile: VariantProfile, figures: Mapping[tuple[int, int], float]) -> VariantProfile:
    points = [LatencyPoint(b, 1, ms, gpu_pct=share) for (b, share), ms in figures.items()]
    return replace(profile, latency=[*profile.latency, *points])


def catalog_of(*profiles: VariantProfile, capacity: Capacity | None = None) -> ModellessCatalog:
    """A catalogue of model `m` with `profiles` (packages `/r/<variant>`), measured at
    `capacity` (None: as profiled)."""
    catalog = ModellessCatalog()
    entry = ModelEntry(
        model="m",
        slo_ms=50.0,
        profiles=tuple(replace(p, package_dir=f"/r/{p.name}") for p in profiles),
        capacity=capacity or Capacity(),
    )
    catalog.publish(entry)
    return catalog


def test_gpu_points_price_shares_and_leave_cpu_prices_and_cards_alone() -> None:
    fp32, bf16, _ = three_variants()
    gpu_bf16 = on_gpu(bf16, GPU_MS)  # b = 1 at 1 ms on the GPU, 3 ms on a core: ...
    assert gpu_bf16.exec_ms(8, 1) == bf16.exec_ms(8, 1)  # ... the cores' price stays
    assert gpu_bf16.latency_ms(1, 1) == bf16.latency_ms(1, 1)
    assert card_for(gpu_bf16, 50.0) == card_for(bf16, 50.0)
    assert gpu_bf16.exec_ms(8, 1, 30) == 6.0
    assert gpu_bf16.exec_ms(4, 4, 30) == pytest.approx(2.0 + 4.0 * 3.0 / 7.0)  # any c
    assert gpu_bf16.exec_ms(8, 1, 50) == pytest.approx(
        6.0 + (2.0 - 6.0) * (1 / 30 - 1 / 50) / (1 / 30 - 1 / 100)
    )
    with pytest.raises(LookupError, match="measured down to 30 %"):
        gpu_bf16.exec_ms(1, 1, 10)
    assert fp32.exec_ms(1, 1) == 4.0


def test_the_catalog_predictor_prices_gpu_shares_without_the_cores_capacity_factor() -> None:
    fp32, bf16, int8 = three_variants()
    int8 = replace(int8, gpu_error="int8 dynamic quantisation has CPU kernels only")
    # the host's cores serve at half the profiled speed
    catalog = catalog_of(fp32, on_gpu(bf16, GPU_MS), int8, capacity=Capacity(host=0.5))
    predictor = CatalogPredictor(catalog)
    assert predictor.predict_latency_ms("/r/bf16", 8, 1, 100) == 2.0
    assert predictor.predict_latency_ms("/r/bf16", 8, 1) == 2 * bf16.exec_ms(8, 1)
    with pytest.raises(LookupError, match="'int8' of m has no GPU latency points: int8 dyn"):
        predictor.predict_latency_ms("/r/int8", 1, 1, 30)
    with pytest.raises(LookupError, match="profiled where no GPU was visible"):
        predictor.predict_latency_ms("/r/fp32", 1, 1, 30)


def test_the_planner_chooses_a_variants_gpu_share_and_reports_those_without_points() -> None:
    fp32, bf16, int8 = three_variants()
    int8 = replace(int8, gpu_error="int8 dynamic quantisation has CPU kernels only")
    catalog = catalog_of(fp32, on_gpu(bf16, GPU_MS), int8)
    server = ServerView("g", 4, 4, (100,), (100,))
    cfg = ScalingConfig(cpu_options=(1, 2), gpu_options_pct=(30, 100))
    # SLO 10 ms: b = 8 fits half of it only on the whole GPU (2 ms; 30 %: 6 ms, a core: 13.5)
    functions = tuple(FunctionView(f"m--{v}", f"/r/{v}", 10.0, 8) for v in ("bf16", "int8"))
    result = plan(
        PoolView((server,), functions), Demand({"m--bf16": 1500.0}), CatalogPredictor(catalog), cfg
    )
    first = result.starts[0]
    assert (first.function, first.config.batch_size, first.config.gpu_pct) == ("m--bf16", 8, 100)
    int8_decision = result.decision("m--int8")
    assert int8_decision is not None
    assert len(int8_decision.unpriced) == 1
    assert "no GPU latency points: int8 dynamic quantisation" in int8_decision.unpriced[0]


class FakeGpuChildren:
    """Records each GPU child's environment; answers with points at its share."""

    def __init__(self, failing: frozenset[int] = frozenset()) -> None:
        self.envs: list[dict[str, str]] = []
        self.failing = failing

    def __call__(
        self, argv: Sequence[str], env: Mapping[str, str], timeout_s: float
    ) -> GpuChildReport:
        assert argv[1:3] == ["-m", "infless.profiler.gpu_profile"]
        self.envs.append(dict(env))
        share = int(env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"))
        if share in self.failing:
            return GpuChildReport("failed", "CUDA error: out of memory")
        sizes = [int(b) for b in argv[argv.index("--batch-sizes") + 1].split(",")]
        points = [GpuPoint(b, 1.0 + b * 10.0 / share) for b in sizes]
        return GpuChildReport("ready", device_name="Fake GPU", gpu_pct=share, points=points)


def test_each_share_is_measured_in_a_child_of_its_own_under_mps() -> None:
    children = FakeGpuChildren(failing=frozenset({10}))
    lines: list[str] = []
    plan_ = GpuPlan((10, 30, 100), uuid="GPU-1", mps_pipe_dir="/run/mps")
    points, why = gpu_points(Path("/v/bf16"), "bf16", [1, 2, 4], plan_, lines.append, children)
    assert why == ""
    assert {(p.gpu_pct, p.batch_size) for p in points} == {
        (g_, b) for g_ in (30, 100) for b in (1, 2, 4)
    }
    assert all(p.cpus == 1 for p in points)
    assert [e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] for e in children.envs] == ["10", "30", "100"]
    assert {e["CUDA_VISIBLE_DEVICES"] for e in children.envs} == {"GPU-1"}
    assert {e["CUDA_MPS_PIPE_DIRECTORY"] for e in children.envs} == {"/run/mps"}
    assert any("10 % failed: CUDA error: out of memory" in line for line in lines)


def test_without_mps_only_the_whole_gpu_is_measured_and_it_says_why() -> None:
    children = FakeGpuChildren()
    lines: list[str] = []
    points, _ = gpu_points(Path("/v"), "fp32", [1], GpuPlan((30, 100)), lines.append, children)
    assert {p.gpu_pct for p in points} == {100}
    assert len(children.envs) == 1
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in children.envs[0]
    assert any("only 100 % is measured" in line for line in lines)


def test_variants_that_do_not_run_on_a_gpu_say_why_and_start_no_child() -> None:
    children = FakeGpuChildren()
    for transform in ("int8", "torchscript", "compile"):
        points, why = gpu_points(Path("/v"), transform, [1], GpuPlan((100,)), print, children)
        assert points == []
        assert why
    assert children.envs == []
    _, why = gpu_points(
        Path("/v"), "bf16", [1], GpuPlan((100,)), print, FakeGpuChildren(failing=frozenset({100}))
    )
    assert why == "the GPU profiling failed: 100 %: CUDA error: out of memory"


def _package(directory: Path) -> Path:
    directory.mkdir(parents=True)
    (directory / WEIGHTS_FILE).write_bytes(b"weights")
    manifest = PackageManifest(
        name="mine",
        architecture="mymodel:build",
        inputs=[TensorSignature("x", "float32", [4])],
        outputs=[TensorSignature("y", "float32", [2])],
    )
    (directory / MANIFEST_FILE).write_bytes(encode_manifest(manifest))
    return directory


@pytest.mark.parametrize("cuda", [True, False])
def test_the_generator_adds_gpu_points_where_its_children_find_cuda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cuda: bool
) -> None:
    def cpu_child(args: Sequence[str], timeout_s: float) -> ChildReport:
        np.save(args[args.index("--outputs") + 1], np.ones((4, 2), dtype=np.float32))
        return ChildReport("ready", latency=[LatencyPoint(1, 1, 5.0)], cuda=cuda)

    children = FakeGpuChildren()
    monkeypatch.setattr(g, "run_child", cpu_child)
    monkeypatch.setattr(gp, "run_child", children)
    result = g.generate(
        _package(tmp_path / "pkg"),
        "mine",
        tmp_path / "out",
        generate_samples=4,
        variants=["fp32", "int8"],
        max_batch=2,
        gpu=GpuPlan((100,)),
        log=lambda _: None,
    )
    fp32, int8 = result.variants
    if not cuda:  # no GPU where the variants were profiled: exactly as on a CPU host
        assert fp32.latency == int8.latency == [LatencyPoint(1, 1, 5.0)]
        assert children.envs == []
        return
    assert {(p.batch_size, p.gpu_pct) for p in fp32.latency if p.gpu_pct} == {(1, 100), (2, 100)}
    assert int8.latency == [LatencyPoint(1, 1, 5.0)]
    assert "CPU kernels only" in int8.gpu_error
    decoded = msgspec.json.decode(msgspec.json.encode(result), type=type(result))
    assert decoded == result
