"""`infless models build|list`: build zoo function packages into a repository, list the zoo.

CLI layer: the only place that reads `INFLESS_MODEL_REPOSITORY` (default `state/models`,
relative to the working directory). Torch is imported inside `run` only, so `infless --help`
stays instant. Must not hold logic beyond argument handling and printing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

REPOSITORY_ENV = "INFLESS_MODEL_REPOSITORY"
DEFAULT_REPOSITORY = Path("state/models")
_MIB = 1024 * 1024


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    del name  # one module, one command
    verbs = parser.add_subparsers(dest="models_verb", metavar="VERB")
    build = verbs.add_parser("build", help="build zoo packages (all when no names are given)")
    build.add_argument("names", nargs="*", metavar="NAME", help="zoo model names")
    build.add_argument("--force", action="store_true", help="rebuild even if current")
    listing = verbs.add_parser("list", help="list zoo models, their signatures and build state")
    listing.add_argument("--json", action="store_true", help="print one JSON document")
    for verb in (build, listing):
        verb.add_argument(
            "--repository",
            type=Path,
            default=None,
            help=f"model repository directory (default: ${REPOSITORY_ENV} or {DEFAULT_REPOSITORY})",
        )


def resolve_repository(flag: Path | None) -> Path:
    if flag is not None:
        return flag
    from_env = os.environ.get(REPOSITORY_ENV)
    return Path(from_env) if from_env else DEFAULT_REPOSITORY


def run(args: argparse.Namespace) -> int:
    from infless.errors import UnknownModel

    verb = getattr(args, "models_verb", None)
    if verb is None:
        print("usage: infless models {build,list} ... (see infless models --help)", file=sys.stderr)
        return 2
    repository = resolve_repository(args.repository)
    try:
        if verb == "build":
            return _build(list(args.names), repository, force=bool(args.force))
        return _list(repository, as_json=bool(args.json))
    except UnknownModel as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2


def _build(names: list[str], repository: Path, *, force: bool) -> int:
    import torch

    from infless.models.build import build_zoo_package
    from infless.models.zoo import ZOO, zoo_entry

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    for name in names:
        zoo_entry(name)  # fail before building anything
    print(f"repository: {repository}")
    for name in names or list(ZOO):
        result = build_zoo_package(name, repository, force=force)
        state = "built" if result.built else "cached"
        print(
            f"{name:18s} {result.parameters / 1e6:9.3f} M params "
            f"{result.weights_bytes / _MIB:9.2f} MiB {result.elapsed_s:7.2f} s  {state}"
        )
    return 0


@dataclass(frozen=True, slots=True)
class _ListedModel:
    name: str
    architecture: str
    inputs: list[str]
    outputs: list[str]
    postprocess: str | None
    parameters: int
    weights_bytes: int  # fp32 state-dict bytes (parameters and buffers)
    table_size_mib: float | None
    table_gflops: float | None
    built: bool
    description: str


def _list(repository: Path, *, as_json: bool) -> int:
    from infless.models.build import build_meta_module, parameter_count, state_nbytes
    from infless.models.validate import package_is_current
    from infless.models.zoo import ZOO

    rows: list[_ListedModel] = []
    for name, entry in ZOO.items():
        module = build_meta_module(entry)
        rows.append(
            _ListedModel(
                name=name,
                architecture=entry.builder,
                inputs=[s.to_spec().describe() for s in entry.inputs],
                outputs=[s.to_spec().describe() for s in entry.outputs],
                postprocess=entry.postprocess,
                parameters=parameter_count(module),
                weights_bytes=state_nbytes(module),
                table_size_mib=entry.table_size_mib,
                table_gflops=entry.table_gflops,
                built=package_is_current(repository / name, entry),
                description=entry.description,
            )
        )
    if as_json:
        document = {"repository": str(repository), "models": [asdict(row) for row in rows]}
        print(json.dumps(document, indent=2))
        return 0
    print(f"repository: {repository}")
    print(f"{'name':18s} {'params':>9s} {'MiB':>8s} {'table':>7s}  built  signature")
    for row in rows:
        table = "      -" if row.table_size_mib is None else f"{row.table_size_mib:7.2f}"
        signature = f"({', '.join(row.inputs)}) -> ({', '.join(row.outputs)})"
        print(
            f"{row.name:18s} {row.parameters / 1e6:8.3f}M {row.weights_bytes / _MIB:8.2f} "
            f"{table}  {'yes' if row.built else 'no':5s}  {signature}"
        )
    return 0
