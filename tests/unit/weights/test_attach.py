from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from infless.weights.attach import AttachError, attach, attach_state_dict_to, map_tensor
from infless.weights.store import TensorStore
from infless.weights.stored import StoredTensor
from tests.support.clock import FakeClock
from tests.unit.weights.packages import write_package


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TensorStore]:
    tensor_store = TensorStore(tmp_path / "store", FakeClock())
    yield tensor_store
    tensor_store.close()


def linear_state() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "weight": rng.standard_normal((2, 4)).astype(np.float32),
        "bias": rng.standard_normal(2).astype(np.float32),
    }


def test_attach_maps_values_dtypes_and_shapes(tmp_path: Path, store: TensorStore) -> None:
    arrays: dict[str, np.ndarray] = {
        "f": np.arange(6, dtype=np.float32).reshape(2, 3),
        "i": np.array([1, -2, 3], dtype=np.int64),
        "b": np.array([True, False]),
        "scalar": np.array(2.5, dtype=np.float64),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "h": np.array([1.5, -2.0], dtype=np.float16),
    }
    state = attach(store.publish(write_package(tmp_path / "m", arrays), "t"))
    for name, array in arrays.items():
        assert state[name].dtype == getattr(torch, str(array.dtype))
        assert tuple(state[name].shape) == array.shape
        np.testing.assert_array_equal(state[name].numpy(), array)


def test_bfloat16_round_trips(tmp_path: Path, store: TensorStore) -> None:
    values = torch.tensor([1.0, -3.5, 0.25], dtype=torch.bfloat16)
    raw = values.view(torch.int16).numpy()
    tensors = store.publish(write_package(tmp_path / "m", {"h": raw}, {"h": "BF16"}), "t")
    assert torch.equal(attach(tensors)["h"], values)


def test_writes_through_a_mapped_tensor_stay_private(tmp_path: Path, store: TensorStore) -> None:
    tensors = store.publish(write_package(tmp_path / "m", linear_state()), "t")
    weight = next(t for t in tensors if t.name == "weight")
    before = Path(weight.path).read_bytes()
    mine, theirs = attach(tensors), attach(tensors)
    mine["weight"].fill_(42.0)
    mine["weight"].add_(1.0)
    assert torch.all(mine["weight"] == 43.0)
    assert Path(weight.path).read_bytes() == before
    np.testing.assert_array_equal(theirs["weight"].numpy(), linear_state()["weight"])
    np.testing.assert_array_equal(attach(tensors)["weight"].numpy(), linear_state()["weight"])


def _open_for_writing_as_nobody(path: str) -> bool:
    """Whether an unprivileged user (another tenant's worker) may open `path` for writing."""
    pid = os.fork()
    if pid == 0:  # child: drop to nobody, try, report through the exit code
        code = 2
        try:
            os.setgid(65534)
            os.setuid(65534)
            os.close(os.open(path, os.O_RDWR))
            code = 1
        except PermissionError:
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    exit_code = os.waitstatus_to_exitcode(status)
    assert exit_code in (0, 1), f"the check itself failed (exit {exit_code})"
    return exit_code == 1


def test_store_files_cannot_be_opened_for_writing(tmp_path: Path, store: TensorStore) -> None:
    tensors = store.publish(write_package(tmp_path / "m", linear_state()), "t")
    if os.geteuid() != 0:
        with pytest.raises(PermissionError):
            os.open(tensors[0].path, os.O_RDWR)
    else:  # root ignores file modes: check as the unprivileged user a worker would run as
        assert not _open_for_writing_as_nobody(tensors[0].path)


def test_mapped_tensors_share_the_files_pages(tmp_path: Path, store: TensorStore) -> None:
    big = {"w": np.ones((256, 1024), dtype=np.float32)}  # 1 MiB
    tensors = store.publish(write_package(tmp_path / "m", big), "t")
    tensor = attach(tensors)["w"]
    address = tensor.data_ptr()
    maps = Path("/proc/self/maps").read_text().splitlines()
    region = next(line for line in maps if int(line.split("-")[0], 16) == address)
    assert region.split()[1] == "rw-p"  # private copy-on-write map ...
    assert region.endswith(tensors[0].path)  # ... of the store file itself: zero-copy


def test_size_mismatch_is_reported(tmp_path: Path, store: TensorStore) -> None:
    tensors = store.publish(write_package(tmp_path / "m", linear_state()), "t")
    wrong = StoredTensor("weight", tensors[0].path, "float32", [1000])
    with pytest.raises(AttachError, match=r"'weight'.*needs 4000"):
        map_tensor(wrong)
    with pytest.raises(AttachError, match="cannot map"):
        attach([StoredTensor("gone", str(tmp_path / "nope"), "float32", [1])])
    with pytest.raises(AttachError, match="not a torch dtype"):
        map_tensor(StoredTensor("x", tensors[0].path, "complex_thing", [1]))


def test_attach_state_dict_to_a_meta_module(tmp_path: Path, store: TensorStore) -> None:
    tensors = store.publish(write_package(tmp_path / "m", linear_state()), "t")
    with torch.device("meta"):
        module = torch.nn.Linear(4, 2)
    attach_state_dict_to(module, tensors)
    assert not module.weight.is_meta
    with torch.inference_mode():
        out = module(torch.ones(1, 4))
    state = linear_state()
    expected = state["weight"].sum(axis=1) + state["bias"]
    np.testing.assert_allclose(out.numpy()[0], expected, rtol=1e-5)
    assert module.weight.data_ptr() == module.weight.untyped_storage().data_ptr()


def test_attach_state_dict_to_reports_missing_tensors(tmp_path: Path, store: TensorStore) -> None:
    state = linear_state()
    tensors = store.publish(write_package(tmp_path / "m", {"weight": state["weight"]}), "t")
    with torch.device("meta"):
        module = torch.nn.Linear(4, 2)
    with pytest.raises(AttachError, match=r"still on the meta device.*'bias'"):
        attach_state_dict_to(module, tensors, strict=False)
