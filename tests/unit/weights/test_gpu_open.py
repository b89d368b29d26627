"""The worker side of the GPU tier: a fake device's file opened as tensors, a CUDA handle
opened on the worker's own ordinal."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import torch

from infless.weights import gpu_cuda
from infless.weights.attach import AttachError
from infless.weights.gpu_open import open_shared_weights
from infless.weights.gpu_tier import CudaIpcHandle, FakeIpcHandle, SharedModel
from tests.support.gpu_tier_files import write_fake_shared_model

CPU = torch.device("cpu")


def sample_state() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    return {
        "conv.weight": torch.randn((4, 3, 3, 3), generator=generator),
        "bn.num_batches_tracked": torch.tensor(5, dtype=torch.int64),
        "half": torch.randn((3,), generator=generator).to(torch.bfloat16),
        "mask": torch.tensor([True, False, True]),
        "empty": torch.zeros((0, 2)),
    }


def test_a_fake_copy_opens_as_the_tensors_written(tmp_path: Path) -> None:
    state = sample_state()
    shared = write_fake_shared_model(state, tmp_path / "model.bin")
    opened = open_shared_weights(shared, CPU)
    assert opened.keys() == state.keys()
    for name, tensor in state.items():
        assert opened[name].dtype == tensor.dtype
        assert opened[name].shape == tensor.shape
        assert torch.equal(opened[name], tensor), name


def test_writing_an_opened_tensor_leaves_the_file_alone(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    shared = write_fake_shared_model(sample_state(), path)
    before = path.read_bytes()
    opened = open_shared_weights(shared, CPU)
    opened["conv.weight"].fill_(0.0)  # copy-on-write: this worker's page only
    assert path.read_bytes() == before
    assert not torch.equal(open_shared_weights(shared, CPU)["conv.weight"], opened["conv.weight"])


def test_a_file_that_disagrees_with_its_handle_or_layout_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    shared = write_fake_shared_model(sample_state(), path)
    assert isinstance(shared.ipc, FakeIpcHandle)
    short = msgspec.structs.replace(shared, ipc=FakeIpcHandle(str(path), shared.ipc.size_bytes - 1))
    with pytest.raises(AttachError, match="its handle says"):
        open_shared_weights(short, CPU)
    last = shared.tensors[-2]  # "mask": past the end once moved further out
    moved = msgspec.structs.replace(last, offset_bytes=shared.ipc.size_bytes)
    stretched = msgspec.structs.replace(shared, tensors=[*shared.tensors[:-2], moved])
    with pytest.raises(AttachError, match="'mask' ends at byte"):
        open_shared_weights(stretched, CPU)


def test_a_fake_copy_opens_on_the_cpu_only(tmp_path: Path) -> None:
    shared = write_fake_shared_model(sample_state(), tmp_path / "model.bin")
    with pytest.raises(AttachError, match="opens on the CPU"):
        open_shared_weights(shared, torch.device("cuda", 0))


def cuda_shared(holder_device: int) -> SharedModel:
    handle = CudaIpcHandle(
        device=holder_device,
        handle=b"h",
        storage_size_bytes=1024,
        storage_offset_bytes=0,
        ref_counter_handle=b"r",
        ref_counter_offset=0,
        event_handle=None,
        event_sync_required=False,
    )
    return SharedModel("resnet", holder_device, handle, [])


def test_a_cuda_handle_opens_on_the_workers_own_ordinal(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, int]] = []

    def fake_open(shared: SharedModel, device: int) -> dict[str, torch.Tensor]:
        calls.append((shared.model_key, device))
        return {}

    monkeypatch.setattr(gpu_cuda, "open_shared", fake_open)
    open_shared_weights(cuda_shared(holder_device=3), torch.device("cuda", 0))
    assert calls == [("resnet", 0)]  # the holder's ordinal 3 means nothing in this process


def test_a_cuda_handle_opens_on_a_cuda_device_only() -> None:
    with pytest.raises(AttachError, match="opens on a CUDA device"):
        open_shared_weights(cuda_shared(holder_device=0), CPU)
