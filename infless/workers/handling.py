"""Serving a batch of requests through a package's handler (see `infless.handlers`).

Each request is preprocessed on its own: a `HandlerError`, or any exception, answers that
request alone. The samples that made it are collated into one batch per input. Variable
dimensions are zero-padded (a padded position is 0, so an attention mask marks it out). The
batch runs with one forward and is split back into rows. Each row is postprocessed on its
own; a request that asked for the model's outputs (the Open Inference Protocol) gets them
as tensors instead. Numpy only: the worker passes its torch forward in, tests a Python
function.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from infless.handlers import Handler, HandlerError, Request, Response
from infless.types import TensorSpec
from infless.workers import protocol as p

Arrays = dict[str, npt.NDArray[np.generic]]
Forward = Callable[[Arrays], Arrays]
JSON = "application/json"


def load_handler(spec: str, package_dir: Path) -> Handler:
    """`module:Class` (importable: the package's `src/` is on sys.path) -> an instance."""
    import importlib

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"handler {spec!r}: expected 'module:Class'")
    handler_class = getattr(importlib.import_module(module_name), attribute, None)
    if handler_class is None:
        raise ValueError(f"handler {spec!r}: {module_name} has no {attribute!r}")
    handler: Handler = handler_class(package_dir)
    return handler


def collate(samples: Sequence[Arrays], specs: Sequence[TensorSpec]) -> Arrays:
    """One array per input: the samples stacked, each dimension padded to the longest."""
    batch: Arrays = {}
    for spec in specs:
        rows = [np.asarray(sample[spec.name], dtype=spec.dtype) for sample in samples]
        if len({r.shape for r in rows}) > 1:
            target = tuple(max(r.shape[i] for r in rows) for i in range(rows[0].ndim))
            stacked = np.zeros((len(rows), *target), dtype=spec.dtype)
            for i, row in enumerate(rows):
                region: tuple[int | slice, ...] = (i, *(slice(0, n) for n in row.shape))
                stacked[region] = row
            batch[spec.name] = stacked
        else:
            batch[spec.name] = np.stack(rows)
    return batch


def _check(sample: Arrays, specs: Sequence[TensorSpec]) -> Arrays:
    missing = [s.name for s in specs if s.name not in sample]
    if missing:
        raise HandlerError(f"preprocess returned no {', '.join(map(repr, missing))}", 500)
    for spec in specs:
        shape = np.shape(sample[spec.name])
        fits = len(shape) == len(spec.shape) and all(
            e < 0 or a == e for a, e in zip(shape, spec.shape, strict=True)
        )
        if not fits:
            raise HandlerError(
                f"preprocess returned {spec.name!r} of shape {list(shape)}, the model takes "
                f"{spec.describe()}",
                500,
            )
    return sample


def _encode(answer: Response | object) -> tuple[bytes, str]:
    if isinstance(answer, Response):
        return answer.body, answer.content_type
    if isinstance(answer, bytes):
        return answer, "application/octet-stream"
    return json.dumps(answer, default=_jsonable).encode(), JSON


def _jsonable(value: object) -> object:
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _failure(exc: BaseException) -> p.Answer:
    status = exc.status if isinstance(exc, HandlerError) else 500
    message = str(exc) if isinstance(exc, HandlerError) else f"{type(exc).__name__}: {exc}"
    if not isinstance(exc, HandlerError):
        traceback.print_exc()  # the function's logs get the whole story
    return p.Answer(status, json.dumps({"error": message, "code": "handler_error"}).encode(), JSON)


def _tensors(row: Mapping[str, npt.NDArray[np.generic]]) -> dict[str, p.TensorData]:
    return {
        name: p.TensorData(str(a.dtype), list(a.shape), np.ascontiguousarray(a).tobytes())
        for name, a in row.items()
    }


def serve_requests(
    handler: Handler,
    requests: Sequence[p.RawRequest],
    forward: Forward,
    input_specs: Sequence[TensorSpec],
) -> list[p.Answer]:
    """Every request's answer, in order (see the module docstring)."""
    answers: list[p.Answer | None] = [None] * len(requests)
    samples: list[Arrays] = []
    kept: list[int] = []
    for index, raw in enumerate(requests):
        try:
            sample = handler.preprocess(Request(raw.body, raw.content_type))
            samples.append(_check(dict(sample), input_specs))
            kept.append(index)
        except Exception as exc:  # one request's failure is its own
            answers[index] = _failure(exc)
    if samples:
        outputs = forward(collate(samples, input_specs))
        for row, index in enumerate(kept):
            values = {name: array[row] for name, array in outputs.items()}
            if not requests[index].postprocess:
                answers[index] = p.Answer(200, b"", "", _tensors(values))
                continue
            try:
                body, content_type = _encode(handler.postprocess(values))
            except Exception as exc:
                answers[index] = _failure(exc)
            else:
                answers[index] = p.Answer(200, body, content_type)
    return [a if a is not None else _failure(RuntimeError("no answer")) for a in answers]
