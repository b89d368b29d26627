"""A function package's whole model measured on a GPU: the child program and its runner.

    python -m infless.profiler.gpu_profile --package DIR [--batch-sizes 1,2,4,8,16,32]
        [--rounds 20] [--warmup 3] [--dtype fp32|bf16]

The child loads the package's model as a worker does (`workers.model.build_model`: built on
`meta`, the package's weights attached, a variant's transform applied), casts it to
bfloat16 with `--dtype bf16` (a package without a transform of its own), moves it to
`cuda:0` and, per batch size, warms it up and times `--rounds` batches with CUDA events:
the inputs copied in from pinned host memory, the forward, the outputs copied back — what
an instance pays per batch. The median is the point. A batch that runs out of device memory
(or fails) ends the sizes: larger ones are not tried. Its last stdout line is a
`GpuChildReport` as JSON, whatever happens.

One process per share: MPS fixes a client's share (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`)
when its CUDA context is created, so the runner `profile_gpu` starts the child once per
share with `CUDA_VISIBLE_DEVICES=<uuid>` and, under an MPS daemon (`mps_pipe_dir`), its
pipe directory and the share (the variables `cluster.gpus.mps_env` gives a worker). Without
MPS a process has the whole device: only 100 % is measured, and the runner says why. The
points go into the profile database's `gpu_latency` table under the device's name as NVML
reports it (the child's CUDA name where NVML is not there), at c = 1: the host side of a GPU
batch runs on one core (`scaling.gpu_profiles` uses them for every c).

The child imports torch inside `measure`; the runner never imports torch.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from infless.clock import wall_s
from infless.profiler.database import GpuLatencyRow, ProfileDatabase

if TYPE_CHECKING:
    from infless.models.package import PackageManifest

Dtype = Literal["fp32", "bf16"]
DEFAULT_SHARES: tuple[int, ...] = (10, 20, 30, 50, 100)
DEFAULT_BATCH_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
DEFAULT_ROUNDS = 20
DEFAULT_WARMUP = 3
DEFAULT_TIMEOUT_S = 600.0  # per share: a fresh process, torch, CUDA, the model, every batch
HOST_CPUS = 1  # the host-side cores a GPU profile is measured with
TIMING_INPUT_SETS = 3  # timed batches rotate over this many input sets


class GpuProfileFailed(RuntimeError):
    """No share of a GPU profiling run could be measured (the message has each reason)."""


class GpuPoint(msgspec.Struct, frozen=True):
    batch_size: int
    exec_ms: float  # the median of the timed rounds
    min_ms: float = 0.0


class GpuChildReport(msgspec.Struct, frozen=True):
    """What the child prints as its last stdout line."""

    status: Literal["ready", "failed"]
    error: str = ""
    device_name: str = ""  # CUDA's name of the device it ran on
    gpu_pct: int = 100  # the share it ran under (its CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)
    dtype: str = "fp32"
    points: list[GpuPoint] = []
    stopped: str = ""  # why the larger batch sizes were not measured ("": every one was)


# ---------------------------------------------------------------------------------------------
# The child (imports torch)


def measure(
    package_dir: Path, batch_sizes: Sequence[int], rounds: int, warmup: int, dtype: Dtype
) -> GpuChildReport:
    """Load the package onto `cuda:0` and time each batch size (module docstring)."""
    import torch

    if not torch.cuda.is_available():
        return GpuChildReport(
            "failed",
            "CUDA is not available to this process (no GPU visible, or a CPU build "
            "of torch): run it on a GPU machine with a CUDA build of torch",
        )
    import infless.models.loader  # noqa: F401 - imported before any model, as in a worker
    from infless.models.package import NO_TRANSFORM
    from infless.workers import protocol as p
    from infless.workers.model import build_model

    torch.set_num_threads(HOST_CPUS)
    loaded, _ = build_model(p.LoadModel(package_dir=str(package_dir), cpus=HOST_CPUS))
    module, manifest = loaded.module, loaded.manifest
    int_high = _int_high(module)
    if dtype == "bf16" and manifest.transform in NO_TRANSFORM:
        from infless.workers.transforms import apply_transform

        module = apply_transform(module, "bf16", manifest)
    module = module.to(torch.device("cuda", 0))
    points: list[GpuPoint] = []
    stopped = ""
    for batch_size in sorted(set(batch_sizes)):
        try:
            median_ms, min_ms = _time_batch(module, manifest, batch_size, rounds, warmup, int_high)
        except torch.cuda.OutOfMemoryError:
            stopped = f"batch {batch_size}: out of device memory"
        except Exception as exc:  # the sizes measured so far still count
            stopped = f"batch {batch_size}: {_short(exc)}"
        else:
            points.append(GpuPoint(batch_size, median_ms, min_ms))
            continue
        torch.cuda.empty_cache()
        break
    return GpuChildReport(
        "ready" if points else "failed",
        error="" if points else stopped,
        device_name=torch.cuda.get_device_name(0),
        gpu_pct=_share_from_env(),
        dtype=dtype,
        points=points,
        stopped=stopped,
    )


def _time_batch(
    module: Any,
    manifest: PackageManifest,
    batch_size: int,
    rounds: int,
    warmup: int,
    int_high: int,
) -> tuple[float, float]:
    """(median, min) ms of `rounds` batches: copy in (pinned), forward, copy out."""
    import torch

    from infless.profiler.extract import example_inputs

    sets = [
        [
            t.pin_memory()
            for t in example_inputs(manifest.input_specs, batch_size, int_high=int_high, variant=v)
        ]
        for v in range(TIMING_INPUT_SETS)
    ]

    def once(inputs: list[torch.Tensor]) -> None:
        on_device = [t.to("cuda", non_blocking=True) for t in inputs]
        for tensor in _tensors(module(*on_device)):
            tensor.to("cpu")

    times: list[float] = []
    with torch.inference_mode():
        for k in range(max(1, warmup)):
            once(sets[k % len(sets)])
        torch.cuda.synchronize()
        for k in range(max(1, rounds)):
            # torch.cuda.Event's __init__ carries no annotations
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            once(sets[k % len(sets)])
            end.record()
            end.synchronize()
            times.append(float(start.elapsed_time(end)))
    return statistics.median(times), min(times)


def _tensors(value: Any) -> Iterator[Any]:
    """Every tensor of a forward's result (a tensor, a tuple or list, a dict)."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, tuple | list):
        for item in value:
            yield from _tensors(item)


def _int_high(module: Any) -> int:
    """Token ids are drawn below the smallest `nn.Embedding`'s size, as the profiler's."""
    vocab = [getattr(m, "num_embeddings", 0) for m in module.modules()]
    return min([v for v in vocab if isinstance(v, int) and v > 0], default=2)


def _share_from_env() -> int:
    try:
        return int(os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"))
    except ValueError:
        return 100


def _short(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:500]


# ---------------------------------------------------------------------------------------------
# The runner (never imports torch)

ChildRunner = Callable[[Sequence[str], Mapping[str, str], float], GpuChildReport]
Log = Callable[[str], None]


def shares_to_measure(shares: Sequence[int], mps_pipe_dir: str | None) -> tuple[list[int], str]:
    """The shares a run measures, and why not all of those asked for ("" when it does)."""
    wanted = sorted(set(shares))
    if not wanted or any(not 0 < g <= 100 for g in wanted):
        raise ValueError(f"shares {list(shares)}: give one or more, each in 1..100 (percent)")
    if mps_pipe_dir is not None:
        return wanted, ""
    skipped = [g for g in wanted if g != 100]
    if not skipped:
        return [100], ""
    return [100], (
        f"no MPS daemon given (--mps-pipe-dir): without MPS a process has the whole GPU, so "
        f"only 100 % is measured ({', '.join(f'{g} %' for g in skipped)} not)"
    )


def child_command(
    package_dir: Path, batch_sizes: Sequence[int], rounds: int, dtype: Dtype
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "infless.profiler.gpu_profile",
        "--package",
        str(package_dir),
        "--batch-sizes",
        ",".join(map(str, batch_sizes)),
        "--rounds",
        str(rounds),
        "--dtype",
        dtype,
    ]


def child_env(
    share: int, uuid: str | None, mps_pipe_dir: str | None, base: Mapping[str, str]
) -> dict[str, str]:
    """`base` with this infless importable, the device (`uuid`) alone visible and, under MPS,
    the daemon's pipe directory and the share; inherited MPS settings are dropped."""
    import infless

    env = {k: v for k, v in base.items() if not k.startswith("CUDA_MPS_")}
    root = str(Path(infless.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    if uuid:
        env["CUDA_VISIBLE_DEVICES"] = uuid
    if mps_pipe_dir is not None:
        env["CUDA_MPS_PIPE_DIRECTORY"] = mps_pipe_dir
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(share)
    return env


def run_child(argv: Sequence[str], env: Mapping[str, str], timeout_s: float) -> GpuChildReport:
    """Run one child; whatever goes wrong there is a "failed" report, never an exception."""
    try:
        done = subprocess.run(
            list(argv),
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(env),
        )
    except subprocess.TimeoutExpired:
        return GpuChildReport("failed", f"timed out after {timeout_s:g} s (killed)")
    lines = done.stdout.strip().splitlines()
    if lines:
        try:
            return msgspec.json.decode(lines[-1], type=GpuChildReport)
        except msgspec.DecodeError:
            pass
    errors = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    why = errors[-1][:500] if errors else "no report"
    return GpuChildReport("failed", f"the GPU profiling process exited {done.returncode}: {why}")


def profile_gpu(
    package_dir: Path,
    shares: Sequence[int],
    uuid: str | None,
    mps_pipe_dir: str | None,
    db: ProfileDatabase,
    *,
    model_key: str | None = None,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    rounds: int = DEFAULT_ROUNDS,
    dtype: Dtype = "fp32",
    device_name: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    log: Log | None = None,
    run: ChildRunner = run_child,
) -> list[GpuLatencyRow]:
    """Measure the package on GPU `uuid` (None: the first visible) at each share, one child
    process per share, store the points in `db` and return them.

    `model_key` is what the planner looks it up by (default: the manifest's name, a zoo
    model's name); `device_name` the NVML name the rows are stored under (default: NVML's
    name of `uuid`, else the child's). A share whose child fails is logged and skipped;
    RuntimeError when no share could be measured, with each child's reason.
    """
    from infless.models.package import load_manifest

    say = log or _stderr
    key = model_key or load_manifest(package_dir).name
    measured, note = shares_to_measure(shares, mps_pipe_dir)
    if note:
        say(note)
    name = device_name or _nvml_name(uuid)
    command = child_command(package_dir, batch_sizes, rounds, dtype)
    rows: list[GpuLatencyRow] = []
    failures: list[str] = []
    for share in measured:
        report = run(command, child_env(share, uuid, mps_pipe_dir, os.environ), timeout_s)
        if report.status != "ready":
            failures.append(f"{share} %: {report.error}")
            say(f"{key}: {share} % failed: {report.error}")
            continue
        device, measured_at = name or report.device_name, wall_s()
        found = [
            GpuLatencyRow(
                device_name=device,
                model_key=key,
                batch_size=p.batch_size,
                gpu_pct=share,
                cpus=HOST_CPUS,
                exec_ms=p.exec_ms,
                measured_at=measured_at,
            )
            for p in report.points
        ]
        db.add_gpu_latency(found)
        rows.extend(found)
        sizes = ", ".join(f"b{p.batch_size} {p.exec_ms:.2f} ms" for p in report.points)
        say(f"{key} on {device} at {share} % ({dtype}): {sizes}")
        if report.stopped:
            say(f"{key} at {share} %: stopped at {report.stopped}")
    if not rows:
        raise GpuProfileFailed(f"{key}: no GPU share could be measured: {'; '.join(failures)}")
    return rows


def _nvml_name(uuid: str | None) -> str | None:
    """NVML's name of the device `uuid` (None: no uuid, no NVML, or no such device)."""
    if uuid is None:
        return None
    from infless.cluster.gpus import discover_gpus

    return next((d.name for d in discover_gpus().devices if d.uuid == uuid), None)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    import traceback

    parser = argparse.ArgumentParser(
        prog="python -m infless.profiler.gpu_profile",
        description="Time a function package's model on cuda:0 (one share: this process's).",
    )
    parser.add_argument("--package", type=Path, required=True, help="a function package dir")
    parser.add_argument("--batch-sizes", default=",".join(map(str, DEFAULT_BATCH_SIZES)))
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="timed per batch")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, help="untimed per batch")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32")
    args = parser.parse_args(argv)
    try:
        report = measure(
            args.package, _ints(args.batch_sizes), args.rounds, args.warmup, args.dtype
        )
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        report = GpuChildReport("failed", _short(exc))
    sys.stdout.write(msgspec.json.encode(report).decode() + "\n")
    return 0 if report.status == "ready" else 1


if __name__ == "__main__":
    sys.exit(main())
