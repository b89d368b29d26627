"""Generate a registered model's variants and profile each:
`python -m infless.modelless.generate`.

    python -m infless.modelless.generate --package state/models/textcnn-69 --model textcnn-69 \\
        --out state/variants/textcnn-69 --generate 256 [--variants fp32,bf16,int8] \\
        [--validation FILE] [--metric cosine] [--max-batch 32] [--cpus 1,2] [--state-dir state]
        [--gpu-shares 10,20,30,40,50,100] [--mps-pipe-dir DIR] [--gpu-uuid GPU-…]

For every variant (`profiles.TRANSFORMS`; fp32 is always made, first: it is the
reference) the generator writes a function package `OUT/<variant>/` (`variant_packages`).
It then profiles the variant in a fresh process of its own (`--profile-one`,
`profile_child`), so that what it costs to load is honest. The child measures `load_ms`,
`peak_memory_bytes`, the first output on the validation set (`validation`; `--validation
FILE` or `--generate N` samples) and the forward's latency at each batch size (powers of
two up to `--max-batch`) and core count (`--cpus`). The variant's accuracy (`--metric`,
`accuracy`) compares its outputs with the labels or with fp32's.

A variant whose transform does not fit the model is "not-applicable". One whose child
fails in any way (an exception, a crash, the `--timeout-s`) is "failed", with a short
message. Neither stops the others, and the package of a variant that is not ready is
removed. If fp32 fails, every variant fails with its error.

With `--state-dir` holding operator profiles of the model (`infless profile`), the points
get the operator predictor's figures (`predictions`). Where the profile child finds CUDA
and `--gpu-shares` are given, each variant that runs on a GPU is also measured there, one
process per share (`gpu_points`): under the MPS daemon of `--mps-pipe-dir`, else at 100 %
only. Without a GPU, or without shares, nothing changes.

The last stdout line is the `GenerationResult` as JSON. The lines before it are progress
(`{"progress": {"done", "total", "step"}}`, as each variant begins); what it says for
people goes to stderr. `generate()` does the same as a function. Worker side: the
children import torch; this process does only when it reads operator profiles.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from infless.clock import perf_s
from infless.errors import InflessError
from infless.modelless.accuracy import METRICS, choose_metric, score
from infless.modelless.gpu_points import GpuPlan, gpu_points
from infless.modelless.predictions import with_predictions
from infless.modelless.profile_child import ChildReport, batch_sizes, child_main
from infless.modelless.profiles import (
    TRANSFORMS,
    GenerationProgress,
    GenerationResult,
    ProgressLine,
    VariantProfile,
)
from infless.modelless.validation import (
    DEFAULT_SEED,
    Array,
    Validation,
    checked_validation,
)
from infless.modelless.variant_packages import remove, write_variant
from infless.models.package import NO_TRANSFORM, PackageManifest, load_manifest

DEFAULT_TIMEOUT_S = 600.0
DEFAULT_BUDGET_S = 0.3
Log = Callable[[str], None]
Progress = Callable[[int, int, str], None]  # variants done, variants in all, the step now


def default_cpus() -> list[int]:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return sorted({1, min(2, cores)})


def generate(
    package_dir: Path,
    model: str,
    out_dir: Path,
    *,
    validation: Path | None = None,
    generate_samples: int | None = None,
    seed: int = DEFAULT_SEED,
    metric: str | None = None,
    variants: Sequence[str] = TRANSFORMS,
    max_batch: int = 32,
    cpus: Sequence[int] | None = None,
    state_dir: Path | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    gpu: GpuPlan | None = None,
    log: Log | None = None,
    on_progress: Progress | None = None,
) -> GenerationResult:
    """Write and profile `model`'s variants of the fp32 package `package_dir` into
    `out_dir/<variant>/` (see the module docstring); each child runs with `timeout_s`;
    `gpu`: the shares to measure variants at where the children find a GPU; `on_progress`
    hears (variants done, variants in all, the step now) as each variant begins and at
    the end."""
    say = log or _stderr
    advance = on_progress or (lambda _done, _total, _step: None)
    package_dir = package_dir.resolve()
    manifest = load_manifest(package_dir)
    if manifest.transform not in NO_TRANSFORM:
        raise ValueError(
            f"{package_dir}: the source package must be the fp32 model, not a "
            f"{manifest.transform!r} variant"
        )
    names = _variant_names(variants)
    if out_dir.resolve().is_relative_to(package_dir):
        raise ValueError(f"--out {out_dir}: variants go outside the source package")
    source = checked_validation(validation, generate_samples, seed, manifest)
    if max_batch < 1:
        raise ValueError("--max-batch must be at least 1")
    cores = sorted(set(cpus or default_cpus()))
    if cores[0] < 1:
        raise ValueError(f"--cpus {cores}: core counts start at 1")
    labels = source.labels()
    run = _Run(
        package_dir=package_dir,
        manifest=manifest,
        out_dir=out_dir.resolve(),
        model=model,
        validation=source,
        labels=labels,
        metric=choose_metric(metric, labels, manifest),
        cpus=cores,
        max_batch=max_batch,
        budget_s=budget_s,
        timeout_s=timeout_s,
        gpu=gpu if gpu is not None and gpu.shares_pct else None,
        log=say,
    )
    run.out_dir.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(run.scratch, ignore_errors=True)
    run.scratch.mkdir()
    started = perf_s()
    profiles: list[VariantProfile] = []
    reference: Array | None = None
    try:
        for index, name in enumerate(names):
            advance(index, len(names), f"{name}: writing and profiling")
            fp32 = profiles[0] if profiles else None
            if fp32 is not None and fp32.status != "ready":
                remove(run.out_dir / name)
                profile = msgspec.structs.replace(
                    run.base(name), error=f"fp32 failed: {fp32.error or fp32.status}"
                )
            else:
                say(f"{name}: writing {run.out_dir / name} and profiling it")
                profile, reference = run.profile(name, reference)
            say(_summary(profile))
            profiles.append(profile)
    finally:
        shutil.rmtree(run.scratch, ignore_errors=True)
    if state_dir is not None and profiles[0].status == "ready":
        advance(len(names), len(names), "the operator predictor's figures")
        profiles = with_predictions(profiles, package_dir, manifest, state_dir, say)
    advance(len(names), len(names), "done")
    say(f"{model}: {len(profiles)} variants in {perf_s() - started:.1f} s")
    return GenerationResult(model=model, metric=run.metric, variants=profiles)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Run:
    """One generation's settings: what every variant is written and profiled with."""

    package_dir: Path
    manifest: PackageManifest
    out_dir: Path
    model: str
    validation: Validation
    labels: Array | None
    metric: str
    cpus: list[int]
    max_batch: int
    budget_s: float
    timeout_s: float
    gpu: GpuPlan | None
    log: Log

    @property
    def scratch(self) -> Path:  # the children's first outputs, removed at the end
        return self.out_dir / ".outputs"

    def base(self, name: str) -> VariantProfile:
        return VariantProfile(
            model=self.model, name=name, transform=name, status="failed", metric=self.metric
        )

    def profile(self, name: str, reference: Array | None) -> tuple[VariantProfile, Array | None]:
        """Write the variant's package and profile it in a child; the first ready variant's
        outputs (fp32's) become the reference."""
        target = self.out_dir / name
        write_variant(self.package_dir, self.manifest, target, self.model, name)
        outputs_file = self.scratch / f"{name}.npy"
        args = ["--package", str(target), "--outputs", str(outputs_file)]
        args += ["--max-batch", str(self.max_batch), "--cpus", ",".join(map(str, self.cpus))]
        args += ["--budget-s", str(self.budget_s), *self.validation.args()]
        report = run_child(args, self.timeout_s)
        profile = msgspec.structs.replace(
            self.base(name),
            status=report.status,
            error=report.error,
            load_ms=report.load_ms,
            peak_memory_bytes=report.peak_memory_bytes,
            latency=report.latency,
        )
        if report.status == "ready":
            found: Array = np.load(outputs_file, allow_pickle=False)
            reference = found if reference is None else reference
            try:
                accuracy = score(self.metric, found, reference, self.labels)
            except ValueError as exc:
                profile = msgspec.structs.replace(profile, status="failed", error=str(exc))
            else:
                profile = msgspec.structs.replace(
                    profile, accuracy=accuracy, package_dir=str(target)
                )
        if profile.status != "ready":
            remove(target)  # only servable variants stay in OUT
        elif report.cuda and self.gpu is not None:
            on_gpu, why = gpu_points(target, name, batch_sizes(self.max_batch), self.gpu, self.log)
            profile = msgspec.structs.replace(
                profile, latency=[*profile.latency, *on_gpu], gpu_error=why
            )
        return profile, reference


def _variant_names(variants: Sequence[str]) -> list[str]:
    unknown = [v for v in variants if v not in TRANSFORMS]
    if unknown:
        raise ValueError(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(TRANSFORMS)}")
    return ["fp32", *dict.fromkeys(v for v in variants if v != "fp32")]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _progress_line(done: int, total: int, step: str) -> None:
    """Progress for the gateway (`control.modelless` reads it as the generator runs)."""
    line = ProgressLine(progress=GenerationProgress(done=done, total=total, step=step))
    sys.stdout.write(msgspec.json.encode(line).decode() + "\n")
    sys.stdout.flush()


def _summary(profile: VariantProfile) -> str:
    if profile.status != "ready":
        return f"{profile.name}: {profile.status}: {profile.error}"
    first = profile.latency[0] if profile.latency else None
    at = f"b{first.batch_size}/c{first.cpus} {first.measured_ms:.3f} ms" if first else "-"
    peak = (profile.peak_memory_bytes or 0) / 2**20
    shares = sorted({p.gpu_pct for p in profile.latency if p.gpu_pct})
    on_gpu = f", GPU at {'/'.join(map(str, shares))} %" if shares else ""
    return (
        f"{profile.name}: ready, {profile.metric} {profile.accuracy:.4f}, {at}, "
        f"load {profile.load_ms or 0:.0f} ms, peak {peak:.0f} MiB{on_gpu}"
    )


def run_child(args: Sequence[str], timeout_s: float) -> ChildReport:
    """Profile one variant in a fresh interpreter; whatever goes wrong there is a "failed"
    report, never an exception here."""
    command = [sys.executable, "-m", "infless.modelless.generate", "--profile-one", *args]
    try:
        done = subprocess.run(
            command,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=_child_env(),
        )
    except subprocess.TimeoutExpired:
        return ChildReport("failed", f"timed out after {timeout_s:g} s (killed)")
    lines = done.stdout.strip().splitlines()
    if lines:
        try:
            return msgspec.json.decode(lines[-1], type=ChildReport)
        except msgspec.DecodeError:
            pass
    why = _last_line(done.stderr) or "no report"
    return ChildReport("failed", f"the profiling process exited {done.returncode}: {why}")


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:500] if lines else ""


def _child_env() -> dict[str, str]:
    """This environment, with this infless importable (ahead of anything on PYTHONPATH)."""
    import infless

    env = dict(os.environ)
    root = str(Path(infless.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


# ---------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m infless.modelless.generate",
        description="Generate a registered model's variants and profile each (INFaaS).",
    )
    parser.add_argument("--package", type=Path, required=True, help="the fp32 function package")
    parser.add_argument("--model", help="the registered model's name")
    parser.add_argument("--out", type=Path, help="where the variant packages go: OUT/<variant>/")
    parser.add_argument("--validation", type=Path, help=".npz, .safetensors or .txt")
    parser.add_argument("--generate", type=int, help="N seeded random samples of the signature")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help=argparse.SUPPRESS)
    parser.add_argument("--metric", choices=METRICS)
    parser.add_argument("--variants", default=",".join(TRANSFORMS), help="comma-separated")
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--cpus", help="comma-separated core counts (default: 1 and up to 2)")
    parser.add_argument("--state-dir", type=Path, help="operator profiles for predictions")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S, help="per point")
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S, help="per variant")
    parser.add_argument("--gpu-shares", help="GPU shares in percent to measure variants at")
    parser.add_argument("--mps-pipe-dir", help="the GPU's MPS daemon (without: 100 %% only)")
    parser.add_argument("--gpu-uuid", help="the GPU (default: the first NVML reports)")
    parser.add_argument("--profile-one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--outputs", type=Path, help=argparse.SUPPRESS)
    return parser


def _gpu_plan(args: argparse.Namespace) -> GpuPlan | None:
    """The GPU step's settings (None: no shares given, the generation stays on CPUs)."""
    shares = tuple(_ints(args.gpu_shares)) if args.gpu_shares else ()
    if not shares:
        return None
    uuid = args.gpu_uuid
    if uuid is None:
        from infless.cluster.gpus import discover_gpus

        devices = discover_gpus().devices
        uuid = devices[0].uuid if devices else None
    return GpuPlan(shares, uuid, args.mps_pipe_dir, timeout_s=args.timeout_s)


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if (args.validation is None) == (args.generate is None):
        parser.error("give exactly one of --validation FILE and --generate N")
    cpus = _ints(args.cpus) if args.cpus else default_cpus()
    if args.profile_one:
        return child_main(args, cpus)
    if not args.model or args.out is None:
        parser.error("--model and --out are required")
    try:
        result = generate(
            args.package,
            args.model,
            args.out,
            validation=args.validation,
            generate_samples=args.generate,
            seed=args.seed,
            metric=args.metric,
            variants=[v.strip() for v in args.variants.split(",") if v.strip()],
            max_batch=args.max_batch,
            cpus=cpus,
            state_dir=args.state_dir,
            budget_s=args.budget_s,
            timeout_s=args.timeout_s,
            gpu=_gpu_plan(args),
            on_progress=_progress_line,
        )
    except (ValueError, OSError, InflessError) as exc:
        _stderr(f"error: {exc}")
        return 2
    sys.stdout.write(msgspec.json.encode(result).decode() + "\n")
    return 0 if result.variants and result.variants[0].status == "ready" else 1


if __name__ == "__main__":
    sys.exit(main())
