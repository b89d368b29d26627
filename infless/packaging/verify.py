"""Checking a package the way a worker will load it, in a fresh process.

`verify_package` runs `python -P -m infless.packaging.verify` in an empty directory without
PYTHONPATH, so the package must stand on its own: its `src/` and what is installed. The
child does what a worker does — puts `src/` on sys.path, imports the handler, builds the
architecture on `meta` and attaches the weights (or loads the program) — and then runs the
example batch, and its first row alone (a program that only takes one batch size fails
here, not in production), checking the outputs against the signature and, when given,
against the outputs the model gave in the packaging process. With an example request the
handler runs too: preprocess, the forward, postprocess. Every failure names its step:
"importing the architecture", "attaching the weights", "the forward on the example", ...
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Arrays = dict[str, npt.NDArray[Any]]
EXAMPLES_FILE = "examples.npz"
EXPECTED_FILE = "expected.npz"
REQUEST_FILE = "request.bin"
RTOL, ATOL = 1e-4, 1e-5


class PackagingError(ValueError):
    """A package that would not serve: the message names the step and the problem."""


@dataclass(frozen=True)
class Verified:
    batch_sizes: list[int]
    answer: str | None  # the handler's answer to the example request, as text


def verify_package(
    package_dir: Path,
    examples: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray] | None = None,
    example_request: tuple[bytes, str] | None = None,
    timeout_s: float = 300.0,
) -> Verified:
    """Load `package_dir` in a fresh process and run `examples` through it (see the module
    docstring); raises PackagingError naming what failed."""
    with tempfile.TemporaryDirectory(prefix="infless-verify-") as scratch:
        work = Path(scratch)
        np.savez(work / EXAMPLES_FILE, **examples)  # type: ignore[arg-type]
        if expected is not None:
            np.savez(work / EXPECTED_FILE, **expected)  # type: ignore[arg-type]
        command = [sys.executable, "-P", "-m", "infless.packaging.verify", str(package_dir)]
        if example_request is not None:
            (work / REQUEST_FILE).write_bytes(example_request[0])
            command.append(example_request[1])
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        try:
            done = subprocess.run(
                command,
                check=False,
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise PackagingError(
                f"verifying the package took over {timeout_s:g} s (the load or the forward "
                "never finished)"
            ) from None
    lines = done.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1]) if lines else {}
    except json.JSONDecodeError:
        report = {}
    if done.returncode != 0 or not report.get("ok"):
        message = report.get("error") or _tail(done.stderr) or f"exit code {done.returncode}"
        raise PackagingError(f"the package does not load and run as a worker would: {message}")
    return Verified(list(report["batch_sizes"]), report.get("answer"))


def _tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


# -- the child ---------------------------------------------------------------------------


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
    from infless.workers.handling import load_handler
    from infless.workers.model import LoadedModel, add_source_path, load_program

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


def _run(package_dir: Path, work: Path, content_type: str | None) -> dict[str, object]:
    import torch

    torch.set_num_threads(1)
    model = _load(package_dir)
    with np.load(work / EXAMPLES_FILE) as archive:
        examples = {name: archive[name] for name in archive.files}
    expected = None
    if (work / EXPECTED_FILE).exists():
        with np.load(work / EXPECTED_FILE) as archive:
            expected = {name: archive[name] for name in archive.files}
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
    if content_type is not None:
        answer = _serve_request(model, (work / REQUEST_FILE).read_bytes(), content_type)
    return {"ok": True, "batch_sizes": sizes, "answer": answer}


def _serve_request(model: Any, body: bytes, content_type: str) -> str:
    from infless.workers import protocol as p

    if model.handler is None:
        raise _Step("the example request", "the package has no handler to take it")
    (answer,) = _step(
        "the example request", lambda: model.serve([p.RawRequest(body, content_type)])
    )
    text: str = answer.body.decode("utf-8", "replace")
    if answer.status != 200:
        raise _Step("the example request", f"the handler answered {answer.status}: {text}")
    return text


def main(argv: list[str]) -> int:
    package_dir = Path(argv[0])
    content_type = argv[1] if len(argv) > 1 else None
    try:
        report = _run(package_dir, Path.cwd(), content_type)
    except _Step as exc:
        report = {"ok": False, "error": str(exc)}
    sys.stdout.flush()
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
