"""The least a handler can do (bench.overhead's handler case): the body is the input
tensor's raw bytes, the answer the output tensor's. Packaged with the model by
`infless.package`, so it runs in the worker, around the batched forward."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from infless.handlers import Arrays, HandlerError, Request, Response


class RawHandler:
    def __init__(self, package_dir: Path) -> None:
        manifest = json.loads((package_dir / "manifest.json").read_text())
        (spec,) = manifest["inputs"]
        self.name, self.dtype = spec["name"], np.dtype(spec["dtype"])
        self.shape = tuple(8 if d < 0 else d for d in spec["shape"])
        self.output = manifest["outputs"][0]["name"]

    def preprocess(self, request: Request) -> Arrays:
        try:
            return {self.name: np.frombuffer(request.body, self.dtype).reshape(self.shape)}
        except ValueError as exc:
            raise HandlerError(f"expected {self.shape} {self.dtype} bytes: {exc}") from None

    def postprocess(self, outputs: Arrays) -> Response:
        return Response(np.ascontiguousarray(outputs[self.output]).tobytes())
