"""A package loaded and run the way a worker will, in a child process: packaging's check.

`infless.packaging.verify` runs `python -P -m infless.workers.package_check PACKAGE_DIR
--examples FILE [--expected FILE] [--request FILE --content-type TYPE]` in a scratch
directory. The child does what a worker does: it puts `src/` on sys.path, imports the
handler, builds the architecture on `meta` and attaches the weights (or loads the program).
Then it runs the example batch, and its first row alone (a program that only takes one
batch size fails here, not in production). It checks the outputs against the signature
and, when given, against the outputs the model gave in the packaging process. With an
example request the handler runs too: preprocess, the forward, postprocess.

Every failure names its step: "importing the architecture", "attaching the weights", "the
forward on the example", ... The report is one JSON line on stdout. Worker side (imports
torch); it writes nothing.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from infless.workers import protocol as p

Arrays = dict[str, npt.NDArray[Any]]
RTOL, ATOL = 1e-4, 1e-5


class _Step(Exception):
    def __init__(self, step: str, problem: str) -> None:
        super().__init__(f"{step}: {problem}")


def _step(step: str, action: Callable[[], Any]) -> Any:
    try:
        return action()
    except _Step:
        raise
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        where = ""
        if frames:
            last = frames[-1]
            where = f" (at {Path(last.filename).name}:{last.lineno})"
        raise _Step(step, f"{type(exc).__name__}: {exc}{where}") from exc


def _check_outputs(outputs: Arrays, manifest: Any, rows: int) -> None:
    from infless.workers.model import signature_problem

    for spec in manifest.output_specs:
        if spec.name not in outputs:
            raise _Step("the outputs", f"no output {spec.name!r} (got {sorted(outputs)})")
        array = outputs[spec.name]
        problem = signature_problem(str(array.dtype), array.shape, spec, rows)
        if problem:
            raise _Step("the outputs", f"{spec.name!r} {problem}")


def _compare(outputs: Arrays, expected: Arrays, rows: slice) -> None:
    for name, full in expected.items():
        got, want = outputs[name], full[rows]
        if got.shape != want.shape:
            raise _Step(
                "the outputs", f"{name!r} has shape {list(got.shape)}, not {list(want.shape)}"
            )
        if np.issubdtype(want.dtype, np.floating):
            close = np.allclose(got, want, rtol=RTOL, atol=ATOL)
        else:
            close = bool(np.array_equal(got, want))
        if not close:
            diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
            raise _Step(
                "the outputs",
                f"{name!r} differs from what the model gave when packaged (max |diff| "
                f"{diff:.3g}): the package does not rebuild the same model (arch_kwargs, "
                "weights, or state computed outside the state dict?)",
            )


def _check_tensors(module: Any, state: Mapping[str, Any], arch_kwargs: object) -> None:
    own_state = module.state_dict()
    own, state_names = set(own_state), set(state)
    buffers = {name for name, _ in module.named_buffers()}
    transient = sorted(buffers - own)
    if transient:
        raise _Step(
            "attaching the weights",
            f"non-persistent buffers {transient[:5]} cannot be restored on a meta-built "
            "module: register them with persistent=True, or compute them in forward",
        )
    missing, extra = sorted(own - state_names), sorted(state_names - own)
    if missing or extra:
        parts = [f"missing tensors {missing[:5]}"] * bool(missing)
        parts += [f"extra tensors {extra[:5]}"] * bool(extra)
        raise _Step(
            "attaching the weights",
            f"the weights do not fit the architecture: {'; '.join(parts)}",
        )
    differing = [
        f"{name} is {list(state[name].shape)} in the weights, {list(tensor.shape)} built"
        for name, tensor in own_state.items()
        if tuple(state[name].shape) != tuple(tensor.shape)
    ]
    if differing:
        raise _Step(
            "attaching the weights",
            f"tensor shapes differ: {'; '.join(differing[:3])}"
            + ("; ..." if len(differing) > 3 else "")
            + f" (does arch_kwargs {arch_kwargs} rebuild the model the weights came from?)",
        )


def _load(package_dir: Path) -> Any:
    from infless.models.loader import attach_weights, build_module, load_package_weights
    from infless.models.package import load_manifest
    from infless.models.programs import add_source_path, load_program
    from infless.workers.handling import load_handler
    from infless.workers.model import LoadedModel

    manifest = _step("reading the manifest", lambda: load_manifest(package_dir))
    add_source_path(package_dir)
    handler = None
    if manifest.handler is not None:
        handler = _step(
            f"importing the handler {manifest.handler}",
            lambda: load_handler(manifest.handler, package_dir),
        )
    if manifest.format != "module":
        module = _step(
            f"loading the {manifest.format} program",
            lambda: load_program(package_dir, manifest),
        )
        return LoadedModel(manifest, module, handler)
    module = _step(
        f"importing the architecture {manifest.architecture}",
        lambda: build_module(manifest, device="meta"),
    )
    state = _step("reading the weights", lambda: load_package_weights(package_dir, manifest))
    _check_tensors(module, state, manifest.arch_kwargs)
    module = _step("attaching the weights", lambda: attach_weights(module, state, manifest.name))
    return LoadedModel(manifest, module, handler)


def _load_arrays(path: Path) -> Arrays:
    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}


def _run(arguments: argparse.Namespace) -> dict[str, object]:
    import torch

    torch.set_num_threads(1)
    model = _load(Path(arguments.package_dir))
    examples = _load_arrays(arguments.examples)
    expected = None if arguments.expected is None else _load_arrays(arguments.expected)
    rows = next(iter(examples.values())).shape[0]
    sizes = [rows] if rows == 1 else [rows, 1]
    for size in sizes:
        batch = {name: array[:size] for name, array in examples.items()}
        outputs = _step(
            f"the forward on the example (batch of {size})", functools.partial(model.forward, batch)
        )
        _check_outputs(outputs, model.manifest, size)
        if expected is not None and model.manifest.postprocess is None:
            _compare(outputs, expected, slice(0, size))
    answer = None
    if arguments.request is not None:
        body = arguments.request.read_bytes()
        answer = _serve_request(model, body, arguments.content_type)
    return {"ok": True, "batch_sizes": sizes, "answer": answer}


def _serve_request(model: Any, body: bytes, content_type: str) -> str:
    if model.handler is None:
        raise _Step("the example request", "the package has no handler to take it")
    (answer,) = _step(
        "the example request", lambda: model.serve([p.RawRequest(body, content_type)])
    )
    text: str = answer.body.decode("utf-8", "replace")
    if answer.status != 200:
        raise _Step("the example request", f"the handler answered {answer.status}: {text}")
    return text


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m infless.workers.package_check")
    parser.add_argument("package_dir")
    parser.add_argument("--examples", type=Path, required=True, help="an .npz of inputs")
    parser.add_argument("--expected", type=Path, help="an .npz of the packaged model's outputs")
    parser.add_argument("--request", type=Path, help="an example request's body")
    parser.add_argument("--content-type", help="the example request's content type")
    arguments = parser.parse_args(argv)
    if (arguments.request is None) != (arguments.content_type is None):
        parser.error("--request and --content-type go together")
    return arguments


def main(argv: list[str]) -> int:
    arguments = _arguments(argv)
    try:
        report = _run(arguments)
    except _Step as exc:
        report = {"ok": False, "error": str(exc)}
    sys.stdout.flush()
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
