"""A GPU worker's device and standby: the CUDA environment from a placement, the refusal when
CUDA was initialised too early, the fake device's graphs, a session's placement checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from infless.workers import protocol as p
from infless.workers.gpu_runtime import (
    FAKE_DEVICE_NAME,
    CudaRuntime,
    DeviceAlreadyInitialised,
    FakeGraph,
    FakeRuntime,
    apply_env,
    cuda_env,
    runtime_for,
)
from infless.workers.gpu_session import (
    GpuSession,
    PlacementMismatch,
    forget_package,
    placement_of,
)

UUID = "GPU-5d3c2a10-0000-4a6e-9b1e-123456789abc"
MPS = p.GpuPlacement("cuda", UUID, index=1, gpu_pct=30, mps_pipe_dir="/run/infless/mps/1")
TIME_SLICED = p.GpuPlacement("cuda", UUID, index=1, gpu_pct=30)
FAKE = p.GpuPlacement("fake", "fake-0", index=0, gpu_pct=50)


def test_under_mps_the_worker_is_a_client_at_its_share() -> None:
    assert cuda_env(MPS) == {
        "CUDA_VISIBLE_DEVICES": UUID,
        "CUDA_MPS_PIPE_DIRECTORY": "/run/infless/mps/1",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
    }


def test_time_sliced_the_worker_sees_its_device_only() -> None:
    assert cuda_env(TIME_SLICED) == {"CUDA_VISIBLE_DEVICES": UUID}


def test_applying_a_time_sliced_env_drops_inherited_mps_variables() -> None:
    environ = {
        "PATH": "/bin",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100",
    }
    apply_env(cuda_env(TIME_SLICED), environ)
    assert environ == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": UUID}
    apply_env(cuda_env(MPS), environ)
    assert environ["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"


def test_the_fake_device_sets_no_cuda_environment() -> None:
    runtime = runtime_for(FAKE)
    assert isinstance(runtime, FakeRuntime)
    assert runtime.env(FAKE) == {}
    assert isinstance(runtime_for(MPS), CudaRuntime)


def test_only_a_first_message_with_a_placement_makes_a_gpu_worker() -> None:
    assert placement_of(p.Standby(FAKE)) == FAKE
    assert placement_of(p.LoadModel("pkg", cpus=1, gpu=MPS)) == MPS
    assert placement_of(p.LoadModel("pkg", cpus=1)) is None  # a CPU worker: no CUDA at all
    assert placement_of(p.Ping(1)) is None
    assert placement_of(None) is None


def test_a_worker_that_initialised_cuda_already_refuses_to_stand_by() -> None:
    environ = {"CUDA_VISIBLE_DEVICES": "0"}
    session = GpuSession(MPS, CudaRuntime(is_initialised=lambda: True), environ)
    with pytest.raises(DeviceAlreadyInitialised, match="CUDA_VISIBLE_DEVICES and the MPS"):
        session.standby()
    assert environ == {"CUDA_VISIBLE_DEVICES": "0"}  # nothing applied: it would not take


def test_a_fake_standby_answers_with_the_fake_device() -> None:
    session = GpuSession(FAKE, environ={})
    ready = session.standby()
    assert ready.device_name == FAKE_DEVICE_NAME
    assert ready.init_ms >= 0.0
    assert ready.memory_bytes == 0
    with pytest.raises(RuntimeError, match="stands by already"):
        session.standby()


def test_a_load_for_another_placement_is_refused() -> None:
    session = GpuSession(FAKE, environ={})
    session.standby()
    other = p.GpuPlacement("fake", "fake-1", index=1, gpu_pct=50)
    with pytest.raises(PlacementMismatch, match=r"LoadModel\.gpu"):
        session.enter(p.LoadModel("pkg", cpus=1, gpu=other))
    with pytest.raises(PlacementMismatch):
        session.enter(p.LoadModel("pkg", cpus=1))  # a CPU load on a GPU worker


def test_a_fresh_load_stands_by_first() -> None:
    environ: dict[str, str] = {}
    runtime = CudaRuntime(is_initialised=lambda: True)
    session = GpuSession(MPS, runtime, environ)
    with pytest.raises(DeviceAlreadyInitialised):  # the standby steps ran, and refused
        session.enter(p.LoadModel("pkg", cpus=1, gpu=MPS))


def test_unload_restores_the_standby_environment() -> None:
    environ = {"PATH": "/bin"}
    session = GpuSession(FAKE, environ=environ)
    session.standby()
    environ["FUNCTION_SETTING"] = "from the last function"
    ready = session.unload()
    assert environ == {"PATH": "/bin"}
    assert ready.init_ms == 0.0


def test_forgetting_a_package_drops_its_source_and_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "infless_test_forgotten.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(source))
    import infless_test_forgotten  # type: ignore[import-not-found]

    assert infless_test_forgotten.VALUE == 1
    forget_package(tmp_path)
    assert str(source) not in sys.path
    assert "infless_test_forgotten" not in sys.modules


def test_a_fake_graph_replays_into_its_static_outputs() -> None:
    graph = FakeGraph()
    static = torch.ones((2, 3))
    outputs = graph.capture(lambda inputs: {"twice": inputs[0] * 2}, [static])
    assert graph.static_inputs[0] is static
    static.copy_(torch.full((2, 3), 5.0))
    graph.replay()
    assert graph.replays == 1
    assert torch.equal(outputs["twice"], torch.full((2, 3), 10.0))  # rewritten in place


def test_the_fake_device_counts_the_weights_it_was_given() -> None:
    runtime = FakeRuntime()
    module = torch.nn.Linear(4, 2)
    assert runtime.to_device(module) is module
    assert runtime.allocated_bytes() == (4 * 2 + 2) * 4
    runtime.release()
    assert runtime.allocated_bytes() == 0
