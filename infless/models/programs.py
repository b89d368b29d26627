"""Loading the parts of a function package that are code: its source and its program files.

`add_source_path` puts a package's `src/` on sys.path. `load_program` loads a TorchScript
file or a `torch.export` program. `torchscript_deprecated` quiets TorchScript's deprecation
warnings around its load and save calls.

Workers (`workers.model`), packaging and the build-side tools all load packages this way,
so the module sits below all of them. It imports torch lazily, inside the functions that
need it; it never builds, writes or validates a package.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infless.models.package import SOURCE_DIR

if TYPE_CHECKING:
    from infless.models.package import PackageManifest


def add_source_path(package_dir: Path) -> None:
    """The package's own source (`src/`) is importable, ahead of anything installed."""
    source = package_dir / SOURCE_DIR
    if source.is_dir() and str(source) not in sys.path:
        sys.path.insert(0, str(source))


def load_program(package_dir: Path, manifest: PackageManifest, device: str = "cpu") -> Any:
    """A TorchScript file or a `torch.export` program on `device`, ready to call.

    The program comes back in eval mode.
    """
    import torch

    path = str(package_dir / manifest.program_file)
    if manifest.format == "torchscript":
        with torchscript_deprecated():
            script = torch.jit.load(path, map_location=device)  # type: ignore[no-untyped-call]
        return script.eval()
    program = torch.export.load(path)
    if device != "cpu":  # constants and device arguments in the graph move too, not just weights
        from torch.export.passes import move_to_device_pass

        program = move_to_device_pass(program, device)
    return program.module()


@contextlib.contextmanager
def torchscript_deprecated() -> Iterator[None]:
    """TorchScript's load and save calls, without their deprecation warnings.

    TorchScript is deprecated since torch 2.13 (in favour of torch.export) but still
    served: its warnings are not the caller's business.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", r".*torch\.jit\..* is deprecated", DeprecationWarning)
        yield
