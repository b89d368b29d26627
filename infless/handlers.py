"""The handler interface of function packages: turn a request into tensors and back.

A package may name a handler class (`manifest.handler = "module:Class"`, the module in the
package's `src/`). Its worker then runs, for every request of a batch:

    tensors = handler.preprocess(Request(body, content_type))   # one sample, no batch dim
    ... the batch's samples are stacked (variable dimensions zero-padded) and run at once ...
    answer = handler.postprocess(outputs)                         # that sample's outputs

`preprocess` returns the model's inputs by name as numpy arrays (the signature's dtypes);
`postprocess` returns a `Response` (bytes and a content type) or anything JSON can encode
(sent as `application/json`). Raising `HandlerError` answers that request with its status
(400 by default) and message; any other exception answers it 500. One request failing never
fails its batch. Handlers need no torch: they see numpy arrays only.

    class Handler:
        def __init__(self, package_dir: pathlib.Path) -> None: ...  # load a tokenizer, labels
        def preprocess(self, request: Request) -> dict[str, np.ndarray]: ...
        def postprocess(self, outputs: dict[str, np.ndarray]) -> Response | object: ...

Over the Open Inference Protocol a handler function takes `BYTES` inputs (one request body
per row) and answers with the model's output tensors (no postprocess).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt

Arrays = dict[str, npt.NDArray[np.generic]]


@dataclass(frozen=True, slots=True)
class Request:
    body: bytes
    content_type: str = "application/octet-stream"

    def text(self) -> str:
        """The body as text (UTF-8), or HandlerError 400."""
        try:
            return self.body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise HandlerError(f"the body is not UTF-8 text: {exc}") from None


@dataclass(frozen=True, slots=True)
class Response:
    body: bytes
    content_type: str = "application/octet-stream"


class HandlerError(Exception):
    """A request the handler cannot serve: answered with `status` and the message."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class Handler(Protocol):
    def __init__(self, package_dir: Path) -> None: ...

    def preprocess(self, request: Request) -> Arrays: ...

    def postprocess(self, outputs: Arrays) -> Response | object: ...
