"""Driving GPU workers in tests: batches, their answers, the CPU path's answers to compare."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import torch

from infless.models.loader import load_model
from infless.workers import protocol as p
from infless.workers.handle import ProcessWorkerHandle
from infless.workers.zygote import ZygoteLauncher

Answers = dict[int, npt.NDArray[np.float32]]  # probabilities by the batch's row count
Batches = dict[int, dict[str, p.TensorData]]


@pytest.fixture
async def workers(zygote: ZygoteLauncher) -> AsyncIterator[list[ProcessWorkerHandle]]:
    """Handles of the workers a test forks (`fork`); each is stopped and must exit cleanly.
    Import it into a test module (it needs that module's `zygote` fixture)."""
    handles: list[ProcessWorkerHandle] = []
    yield handles
    for handle in handles:
        await handle.stop(10.0)
        assert await zygote.wait_exit(handle.pid) == 0


async def fork(
    zygote: ZygoteLauncher, handles: list[ProcessWorkerHandle], name: str
) -> ProcessWorkerHandle:
    """A worker forked from the zygote, its handle added to `handles` (stopped by the test)."""
    handle = ProcessWorkerHandle(await zygote.launch(name))
    handles.append(handle)
    return handle


def image_batch(rows: int, shape: tuple[int, ...], seed: int) -> dict[str, p.TensorData]:
    images = np.random.default_rng(seed).random((rows, *shape), dtype=np.float32)
    return {"image": p.TensorData("float32", list(images.shape), images.tobytes())}


def probabilities(result: p.BatchResult) -> npt.NDArray[np.float32]:
    out = result.outputs["probabilities"]
    return np.frombuffer(out.data, dtype=np.float32).reshape(out.shape)


async def answers(handle: ProcessWorkerHandle, batches: Batches) -> Answers:
    return {n: probabilities(await handle.run_batch(batch)) for n, batch in batches.items()}


def cpu_answers(package: Path, batches: Batches) -> Answers:
    """The package's probabilities on the CPU, in this process (softmax outputs)."""
    manifest, model = load_model(package)
    results = {}
    with torch.inference_mode():
        for rows, batch in batches.items():
            inputs = [
                torch.from_numpy(np.frombuffer(t.data, t.dtype).reshape(t.shape).copy())
                for t in (batch[spec.name] for spec in manifest.inputs)
            ]
            results[rows] = model(*inputs).softmax(dim=-1).numpy()
    return results


def assert_same_answers(found: Answers, wanted: Answers, atol: float) -> None:
    assert found.keys() == wanted.keys()
    for rows, answer in found.items():
        assert answer.shape == wanted[rows].shape
        np.testing.assert_allclose(answer, wanted[rows], rtol=0, atol=atol, err_msg=f"{rows} rows")
