"""`infless package`: make a function package from the command line.

    infless package --arch mypkg.net:build [--arch-kwargs '{"hidden": 64}'] \
        [--weights model.pt|model.safetensors] --input image:float32:3x224x224 \
        [--output logits] [--handler mypkg.handler:Handler] [--file labels.txt] -o ./my-fn/
    infless package --program model.pt|model.pt2 --input ... -o ./my-fn/

The working directory is importable (as with `python -m`), so `--arch` finds the modules of
the project it runs in. CLI layer only: argument handling and printing; the work is
`infless.packaging.package`. Torch is imported inside `run`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

_MIB = 1024 * 1024


def configure(parser: argparse.ArgumentParser, name: str) -> None:
    del name
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--arch", help="the model's builder or class, as module:callable")
    model.add_argument("--program", type=Path, help="a TorchScript .pt or torch.export .pt2 file")
    parser.add_argument(
        "--arch-kwargs", default="{}", help="the builder's keyword arguments, as a JSON object"
    )
    parser.add_argument(
        "--weights", type=Path, help="a state dict: .safetensors, or a torch.save'd .pt"
    )
    parser.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="NAME:DTYPE:SHAPE",
        help="an input, batch dimension left out (-1: any length), e.g. ids:int64:-1; repeat "
        "for each input, in the forward's order",
    )
    parser.add_argument(
        "--output",
        action="append",
        metavar="NAME[:DTYPE:SHAPE]",
        help="name the outputs (or give their signature); default: inferred",
    )
    parser.add_argument("--handler", help="a request handler class, as module:Class")
    parser.add_argument(
        "--file", action="append", type=Path, default=[], help="a file or directory to include"
    )
    parser.add_argument("--postprocess", help="a built-in output step (softmax, sigmoid)")
    parser.add_argument("--name", help="the package's name (default: the output directory's)")
    parser.add_argument("--description", default="")
    parser.add_argument(
        "--example-request",
        help="a request body to run through the handler when verifying (@FILE reads a file)",
    )
    parser.add_argument("--content-type", default="text/plain", help="of --example-request")
    parser.add_argument("--no-verify", action="store_true", help="skip the worker-like check")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="no progress (none either off a terminal)"
    )
    parser.add_argument("-o", "--out", type=Path, required=True, help="the package directory")


def _body(text: str | None) -> bytes | None:
    if text is None:
        return None
    if text.startswith("@"):
        return Path(text[1:]).read_bytes()
    return text.encode()


def run(args: argparse.Namespace) -> int:
    from infless.packaging.package import PACKAGE_STEPS, package
    from infless.packaging.signature import SignatureError, parse_spec
    from infless.packaging.verify import PackagingError
    from infless.progress import progress_for

    sys.path.insert(0, str(Path.cwd()))  # the project's modules, as `python -m` would
    try:
        kwargs = json.loads(args.arch_kwargs)
        if not isinstance(kwargs, dict):
            raise ValueError("not an object")
    except ValueError as exc:
        print(f"error: --arch-kwargs must be a JSON object: {exc}", file=sys.stderr)
        return 2
    name = args.name or args.out.resolve().name
    steps = PACKAGE_STEPS if not args.no_verify else PACKAGE_STEPS[:-1]
    try:
        inputs = [parse_spec(text) for text in args.input]
        outputs = [o if ":" not in o else parse_spec(o) for o in args.output or []] or None
        with progress_for(args.quiet or args.json) as progress:
            progress.begin(f"packaging {name}", total=len(steps))

            def step(text: str) -> None:
                progress.update(steps.index(text), note=text)

            info = package(
                args.arch or args.program,
                name=name,
                out=args.out,
                handler=args.handler,
                arch_kwargs=kwargs,
                weights=args.weights,
                inputs=inputs,
                outputs=outputs,
                files=args.file,
                postprocess=args.postprocess,
                description=args.description,
                example_request=_body(args.example_request),
                example_content_type=args.content_type,
                verify=not args.no_verify,
                on_step=step,
            )
    except (PackagingError, SignatureError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    manifest = info.manifest
    if args.json:
        print(
            json.dumps(
                {
                    "path": str(info.path),
                    "digest": info.digest,
                    "name": manifest.name,
                    "format": manifest.format,
                    "inputs": [s.describe() for s in manifest.input_specs],
                    "outputs": [s.describe() for s in manifest.output_specs],
                    "source": info.source_files,
                    "requirements": manifest.requirements,
                    "unresolved_imports": info.unresolved_imports,
                    "verified_batch_sizes": info.verified.batch_sizes if info.verified else None,
                }
            )
        )
        return 0
    size = sum(f.stat().st_size for f in info.path.rglob("*") if f.is_file())
    print(f"packaged {manifest.name} -> {info.path} ({size / _MIB:.1f} MiB, {info.digest})")
    print(f"  inputs:  {'; '.join(s.describe() for s in manifest.input_specs)}")
    print(f"  outputs: {'; '.join(s.describe() for s in manifest.output_specs)}")
    if info.source_files:
        print(f"  source:  {', '.join(info.source_files)}")
    if manifest.requirements:
        print(f"  requires: {', '.join(manifest.requirements)}")
    if info.unresolved_imports:
        print(f"  warning: imports not found here: {', '.join(info.unresolved_imports)}")
    if info.verified is not None:
        sizes = " and ".join(map(str, info.verified.batch_sizes))
        print(f"  verified: loads as a worker would; forward on batches of {sizes}")
        if info.verified.answer is not None:
            print(f"  example answer: {info.verified.answer[:200]}")
    return 0
