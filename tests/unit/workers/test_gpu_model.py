"""A model on a device (the fake one): staging buffers reused, graphs chosen by measured times,
batches padded to a captured size and sliced back, capture failures served eagerly."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import torch
from torch import nn

from infless.handlers import Request
from infless.models.package import PackageManifest, TensorSignature
from infless.workers import protocol as p
from infless.workers.gpu_load import choose_paths, warm_up_on_device
from infless.workers.gpu_model import DeviceModel, HostBuffers, graph_size_for
from infless.workers.gpu_runtime import Compute, DeviceGraph, FakeGraph, FakeRuntime
from infless.workers.handling import Arrays
from tests.support.torch_threads import one_torch_thread

__all__ = ["one_torch_thread"]

MANIFEST = PackageManifest(
    name="rows",
    architecture="test",
    inputs=[TensorSignature("x", "float32", [3])],
    outputs=[TensorSignature("y", "float32", [2])],
)


class RowWise(nn.Module):
    """y = x @ w + 1 per row: rows never interact."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.arange(6, dtype=torch.float32).reshape(3, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + 1.0


def assert_answers(answer: npt.NDArray[np.generic], x: npt.NDArray[np.generic]) -> None:
    """`answer` is RowWise's on rows `x`."""
    weight = np.arange(6, dtype=np.float32).reshape(3, 2)
    found = np.asarray(answer, dtype=np.float32)
    np.testing.assert_allclose(found, np.asarray(x, dtype=np.float32) @ weight + 1.0, rtol=1e-6)


def rows(n: int, seed: int = 0) -> Arrays:
    return {"x": np.random.default_rng(seed).standard_normal((n, 3)).astype(np.float32)}


class TimedRuntime(FakeRuntime):
    """The fake device, keeping a graph only where replay measured faster (as CUDA does)."""

    def keeps_graph(self, eager_ms: float, replay_ms: float) -> bool:
        return replay_ms < eager_ms


class FailingGraph(FakeGraph):
    def capture(
        self, compute: Compute, static_inputs: Sequence[torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        raise RuntimeError("operation not permitted when stream is capturing")


class UncapturableRuntime(FakeRuntime):
    def new_graph(self) -> DeviceGraph:
        return FailingGraph()


def device_model(
    runtime: FakeRuntime | None = None, manifest: PackageManifest = MANIFEST
) -> DeviceModel:
    return DeviceModel(manifest, RowWise().eval(), None, runtime or FakeRuntime(), False)


def scripted(times_ms: list[float]) -> Callable[[Callable[[], object], int], float]:
    """A timer answering the given times in order (each run still runs once)."""
    answers: Iterator[float] = iter(times_ms)

    def timer(run: Callable[[], object], rounds: int) -> float:
        run()
        return next(answers)

    return timer


def test_staging_buffers_are_reused_per_shape_and_bounded() -> None:
    buffers = HostBuffers(FakeRuntime(), capacity=2)
    first = buffers.get("in", "x", (4, 3), torch.float32)
    assert buffers.get("in", "x", (4, 3), torch.float32) is first
    assert buffers.get("in", "x", (2, 3), torch.float32) is not first
    assert buffers.get("out", "x", (4, 3), torch.float32) is not first  # outputs apart
    assert len(buffers) == 2  # the least recently used went
    assert buffers.get("in", "x", (4, 3), torch.float32) is not first


def test_eager_batches_reuse_their_staging_buffers() -> None:
    model = device_model()
    model.forward_eager(rows(4, seed=1))
    staged = len(model._staging)
    answer = model.forward_eager(rows(4, seed=2))["y"]
    assert len(model._staging) == staged  # the same shape: no new buffer
    assert_answers(answer, rows(4, seed=2)["x"])


def test_a_batch_uses_the_smallest_captured_size_that_holds_it() -> None:
    assert graph_size_for(3, [1, 4, 8]) == 4
    assert graph_size_for(4, [1, 4, 8]) == 4
    assert graph_size_for(1, [1, 4, 8]) == 1
    assert graph_size_for(9, [1, 4, 8]) is None
    assert graph_size_for(2, []) is None


def test_graphs_are_kept_where_replay_measured_faster() -> None:
    chosen = choose_paths(
        {1: 2.0, 4: 3.0, 8: 4.0}, {1: 0.5, 4: 3.5}, keeps_graph=lambda e, r: r < e
    )
    assert chosen.graph_batch_sizes == [1]
    assert chosen.exec_ms == {1: 0.5, 4: 3.0, 8: 4.0}  # the faster path's time; 8: no graph


def test_the_warm_up_keeps_the_graphs_its_timings_favour() -> None:
    model = device_model(TimedRuntime())
    # per size, eager then replay: 1 is faster replayed, 2 eagerly, 4 replayed
    timer = scripted([2.0, 0.5, 1.0, 1.5, 3.0, 0.7])
    chosen = warm_up_on_device(model, [1, 2, 4], rounds=3, graphs=True, timer=timer)
    assert chosen.graph_batch_sizes == model.graph_batch_sizes == [1, 4]
    assert chosen.exec_ms == {1: 0.5, 2: 1.0, 4: 0.7}


def test_a_batch_of_three_is_padded_to_the_graph_of_four_and_sliced_back() -> None:
    model = device_model()
    chosen = warm_up_on_device(model, [4], rounds=1, graphs=True)
    assert chosen.graph_batch_sizes == [4]  # the fake device keeps every graph
    graph = model._graphs[4].graph
    assert isinstance(graph, FakeGraph)
    replays = graph.replays
    batch = rows(3, seed=5)
    answer = model.forward(batch)["y"]
    assert graph.replays == replays + 1  # served by the graph
    assert answer.shape == (3, 2)
    assert_answers(answer, batch["x"])
    static = graph.static_inputs[0]
    assert torch.equal(static[3:], torch.zeros((1, 3)))  # the padded row is zeros
    larger = rows(5, seed=6)  # no graph holds 5 rows: eager
    assert_answers(model.forward(larger)["y"], larger["x"])
    assert graph.replays == replays + 1


class RowSums(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1, keepdim=True).repeat(1, 2)


def test_inputs_with_a_variable_dimension_get_no_graph() -> None:
    variable = [TensorSignature("x", "float32", [-1])]
    manifest = PackageManifest("var", "test", variable, MANIFEST.outputs)
    model = DeviceModel(manifest, RowSums(), None, FakeRuntime(), False)
    chosen = warm_up_on_device(model, [1, 2], rounds=1, graphs=True)
    assert chosen.graph_batch_sizes == []
    assert set(chosen.exec_ms) == {1, 2}


def test_graphs_are_not_captured_when_the_placement_says_no() -> None:
    model = device_model()
    chosen = warm_up_on_device(model, [1, 4], rounds=1, graphs=False)
    assert chosen.graph_batch_sizes == []
    assert set(chosen.exec_ms) == {1, 4}


def test_a_capture_that_fails_leaves_that_size_eager(capsys: pytest.CaptureFixture[str]) -> None:
    model = device_model(UncapturableRuntime())
    chosen = warm_up_on_device(model, [2], rounds=1, graphs=True)
    assert chosen.graph_batch_sizes == []
    assert "CUDA graph capture failed for 'rows' at batch 2" in capsys.readouterr().err
    batch = rows(2, seed=3)
    assert_answers(model.forward(batch)["y"], batch["x"])


def test_outputs_belong_to_the_caller_not_the_staging_buffers() -> None:
    model = device_model()
    warm_up_on_device(model, [2], rounds=1, graphs=True)
    first = model.forward(rows(2, seed=1))["y"]
    kept = first.copy()
    model.forward(rows(2, seed=2))  # the same graph and buffers again
    np.testing.assert_array_equal(first, kept)


class Doubling:
    """A handler: text -> three floats; answers the first output value."""

    def __init__(self, package_dir: Path) -> None:
        self.package_dir = package_dir

    def preprocess(self, request: Request) -> Arrays:
        return {"x": np.full(3, float(request.text()), dtype=np.float32)}

    def postprocess(self, outputs: Arrays) -> object:
        return float(outputs["y"][0])


def test_requests_go_through_the_device_forward() -> None:
    model = DeviceModel(MANIFEST, RowWise().eval(), Doubling(Path()), FakeRuntime(), False)
    warm_up_on_device(model, [4], rounds=1, graphs=True)
    graph = model._graphs[4].graph
    assert isinstance(graph, FakeGraph)
    answers = model.serve([p.RawRequest(b"1", "text/plain"), p.RawRequest(b"2", "text/plain")])
    assert [a.body for a in answers] == [b"7.0", b"13.0"]  # y[0] = (0 + 2 + 4) * v + 1
    assert graph.replays > 0
