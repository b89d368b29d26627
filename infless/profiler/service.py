"""The profiler's imperative shell: find a function's model, cache its graph, fill the DB, and
hand back a ready predictor.

`model_source(NAME)` accepts a zoo model name or a function package directory. Graphs are
cached as JSON under `<state>/graphs/`, keyed by a hash of the architecture, its arguments,
the input signature and the torch version. `build_predictor` profiles missing operators on
demand (unless told not to), then loads every needed profile into a pure
`CombinedOperatorPredictor`, its tables rescaled to the profiles' typical machine speed
(`speed`); `measure_speed_now` times the reference kernel for predictions that should hold
for this moment's speed.

Imports torch lazily (inside functions), so reading cached graphs stays cheap.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from infless.models.package import PackageManifest, load_manifest
from infless.profiler.database import ProfileDatabase
from infless.profiler.graph import GRAPH_FORMAT, OperatorGraph
from infless.profiler.prediction import DEFAULT_STATE_DIR, predictor_from
from infless.profiler.predictor import CombinedOperatorPredictor
from infless.profiler.speed import SpeedIndex
from infless.profiler.structure import BranchMode

if TYPE_CHECKING:
    from torch import nn

    from infless.profiler.operators import Measurement, ProfilePlan
    from infless.profiler.profiling import ProfileProgress

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelSource:
    """Where a function's model comes from: a zoo entry or a package directory."""

    key: str
    manifest: PackageManifest
    package_dir: Path | None = None

    def source_hash(self, torch_version: str) -> str:
        payload = json.dumps(
            {
                "format": GRAPH_FORMAT,
                "architecture": self.manifest.architecture,
                "kwargs": self.manifest.arch_kwargs,
                "inputs": [[s.name, s.dtype, s.shape] for s in self.manifest.inputs],
                "torch": torch_version,
            },
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def build(self) -> nn.Module:
        """The model on CPU with builder-initialised weights: enough for shapes (tracing)."""
        from infless.models.loader import build_module

        return build_module(self.manifest, device="cpu")

    def build_served(self) -> nn.Module:
        """The model with the weights and kernels a worker serves (for measuring latency).

        Builder-initialised weights are no good for timing: their activations shrink layer
        after layer into subnormal floats, which slow some CPU kernels down several times.
        """
        if self.package_dir is not None:
            from infless.models.loader import load_model

            return load_model(self.package_dir)[1]
        from infless.models.build import build_seeded_module
        from infless.models.kernels import prefer_onednn
        from infless.models.zoo import zoo_entry

        module = build_seeded_module(zoo_entry(self.key)).eval()
        prefer_onednn(module)
        return module


def model_source(name: str) -> ModelSource:
    """A zoo model name (`resnet-50`) or a function package directory."""
    from infless.errors import UnknownModel
    from infless.models.package import is_zoo_name
    from infless.models.zoo import ZOO, zoo_entry

    path = Path(name).expanduser()
    if (path / "manifest.json").is_file():
        manifest = load_manifest(path)
        return ModelSource(manifest.name, manifest, path)
    if is_zoo_name(name) and name in ZOO:
        return ModelSource(name, zoo_entry(name).manifest())
    raise UnknownModel(
        f"{name!r} is neither a zoo model ({', '.join(sorted(ZOO))}) nor a function package "
        f"directory (no {path / 'manifest.json'})"
    )


def graph_for(source: ModelSource, state_dir: Path | None = DEFAULT_STATE_DIR) -> OperatorGraph:
    """The operator graph of `source`, from the cache when it is there and current."""
    import torch

    from infless.profiler.extract import extract_graph

    digest = source.source_hash(torch.__version__)
    cache = None if state_dir is None else state_dir / "graphs" / f"{source.key}-{digest}.json"
    if cache is not None and cache.is_file():
        try:
            return OperatorGraph.from_json(cache.read_text())
        except (ValueError, KeyError) as exc:
            log.warning("ignoring unreadable graph cache %s: %s", cache, exc)
    graph = extract_graph(
        source.build(), source.manifest.input_specs, model_key=source.key, source_hash=digest
    )
    if cache is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(graph.to_json())
        tmp.replace(cache)
    return graph


def ensure_profiles(
    db: ProfileDatabase,
    graphs: Iterable[OperatorGraph],
    plan: ProfilePlan,
    progress: ProfileProgress | None = None,
    *,
    remeasure: bool = False,
    speed_index: bool = True,
) -> ProfileProgress:
    """Profile whatever `plan` asks for and `db` lacks for the graphs' operators.

    With `speed_index`, every row stores the reference kernel's time paired with its
    measurement (the machine speed index).
    """
    from infless.profiler.profiling import distinct_signatures, profile_signatures
    from infless.profiler.reference import reference_kernel

    signatures = distinct_signatures(graphs)
    return profile_signatures(
        db,
        list(signatures.values()),
        plan,
        progress,
        remeasure=remeasure,
        reference=reference_kernel() if speed_index else None,
    )


def measure_speed_now(db: ProfileDatabase, threads: Sequence[int]) -> SpeedIndex:
    """The machine speed index at this moment, comparable with `db`'s (else ValueError)."""
    from infless.profiler.profiling import check_reference_kernel
    from infless.profiler.reference import measure_speed

    check_reference_kernel(db)
    return measure_speed(threads)


def build_predictor(
    db: ProfileDatabase,
    graphs: Iterable[OperatorGraph],
    *,
    plan: ProfilePlan | None = None,
    offset_pct: float | None = None,
    branch_mode: BranchMode = "sum",
    statistic: Literal["typical", "min"] = "typical",
    log_line: Callable[[str], None] | None = None,
    speed: Literal["typical", "as-measured"] = "typical",
    speed_now: SpeedIndex | None = None,
    speed_index: bool = True,
) -> CombinedOperatorPredictor:
    """A predictor with `graphs` registered (`prediction.predictor_from`); with `plan`, the
    operators `db` lacks are profiled first (that imports torch)."""
    graphs = list(graphs)
    if plan is not None:
        from infless.profiler.profiling import ProfileProgress

        progress = ProfileProgress(log=log_line or (lambda _l: None))
        ensure_profiles(db, graphs, plan, progress, speed_index=speed_index)
    return predictor_from(
        db,
        graphs,
        offset_pct=offset_pct,
        branch_mode=branch_mode,
        statistic=statistic,
        speed=speed,
        speed_now=speed_now,
    )


def measure_model_ms(
    model: nn.Module,
    source: ModelSource,
    batch_size: int,
    threads: Sequence[int],
    *,
    budget_s: float = 0.5,
    min_reps: int = 3,
    reference: Callable[[], object] | None = None,
) -> dict[int, Measurement]:
    """Measured batch latency of the whole model's forward at each thread count (one block each).

    Each call takes the next of several input sets, as a served model gets new requests:
    they fill the bytes operators' inputs are profiled with (`profiling.rotation_bytes`),
    and their values differ (one input in a loop lets the branch predictor learn
    data-dependent branches, see `targets.build_operator`).
    With `reference` (`reference.reference_kernel()`), each repetition is paired with a call
    of the speed index's kernel (`Measurement.ref_ms`).
    """
    from infless.profiler.extract import example_inputs
    from infless.profiler.operators import measure_threads
    from infless.profiler.profiling import rotation_bytes
    from infless.profiler.targets import copies_to_fill

    vocab = [getattr(m, "num_embeddings", 0) for m in model.modules()]
    int_high = min([v for v in vocab if isinstance(v, int) and v > 0], default=2)
    specs = source.manifest.input_specs
    first = example_inputs(specs, batch_size, int_high=int_high)
    copies = copies_to_fill(rotation_bytes()[0], sum(t.numel() * t.element_size() for t in first))
    input_sets = itertools.cycle(
        [
            first,
            *(
                example_inputs(specs, batch_size, int_high=int_high, variant=v)
                for v in range(1, copies)
            ),
        ]
    )
    return measure_threads(
        lambda: model(*next(input_sets)),
        threads,
        budget_s=budget_s,
        min_reps=min_reps,
        max_reps=15,
        reference=reference,
    )
