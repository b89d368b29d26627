"""What source a package carries: the local modules it needs, and the distributions it requires.

It starts from the modules a package names: the architecture's `module:callable` and the
handler's `module:Class`. Every `import` in their source is followed (`ast`; relative
imports resolved; imports inside functions included). A module is one of:

- the platform's (`infless`) or the standard library's: nothing to do;
- third-party, its file in a site-packages directory: its distribution becomes a requirement
  (`name==version`, checked at deploy);
- local, anything else (the user's project, an editable install): its file is copied into
  the package's `src/` at its import path, with its parent packages' `__init__.py`, and its
  own imports are followed in turn.

An import that cannot be resolved here (an optional dependency behind `try`) is reported,
not fatal: the verification forward decides. Torch-free.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import site
import sys
import sysconfig
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

PLATFORM = frozenset({"infless"})


@dataclass
class SourcePlan:
    files: dict[str, Path] = field(default_factory=dict)  # path under src/ -> the file
    requirements: list[str] = field(default_factory=list)  # "name==version", sorted
    unresolved: list[str] = field(default_factory=list)  # imports not found here


def _site_dirs() -> list[Path]:
    dirs = {*site.getsitepackages(), site.getusersitepackages()}
    for key in ("purelib", "platlib"):
        dirs.add(sysconfig.get_paths()[key])
    return [Path(d).resolve() for d in dirs if d]


def _stdlib_dirs() -> list[Path]:
    paths = sysconfig.get_paths()
    return [Path(paths[key]).resolve() for key in ("stdlib", "platstdlib")]


def _under(path: Path, dirs: Iterable[Path]) -> bool:
    return any(path.is_relative_to(d) for d in dirs)


def _origin(name: str) -> tuple[Path | None, bool] | None:
    """(the module's file or None when it has none, whether it is a package); None when the
    module cannot be found."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None:
        return None
    origin = spec.origin
    is_package = spec.submodule_search_locations is not None
    if origin is None or origin in ("built-in", "frozen") or not Path(origin).exists():
        return None, is_package
    return Path(origin).resolve(), is_package


def relative_path(name: str, origin: Path, is_package: bool) -> Path:
    """Where a module's file goes under `src/`: its import path (`a/b.py`, `a/__init__.py`,
    `a/fast.cpython-311-x86_64-linux-gnu.so`)."""
    parts = name.split(".")
    if is_package:
        return Path(*parts, origin.name)
    suffix = origin.name[len(parts[-1]) :]
    return Path(*parts[:-1], parts[-1] + suffix)


def imported_names(source: str, module: str, is_package: bool) -> set[str]:
    """Every module name an `import` in `source` may refer to (absolute; for `from a import
    b`, both `a` and `a.b`, since `b` may be a submodule)."""
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".") if package else []
                anchor = anchor[: len(anchor) - (node.level - 1)] if node.level > 1 else anchor
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            if not base:
                continue
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return names


def _distributions(top: str) -> list[str]:
    found = importlib.metadata.packages_distributions().get(top, [])
    requirements = []
    for dist in sorted(set(found)):
        try:
            requirements.append(f"{dist}=={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            requirements.append(dist)
    return requirements


def plan_sources(roots: Iterable[str]) -> SourcePlan:
    """The local files to copy and the requirements, following imports from `roots`."""
    plan = SourcePlan()
    site_dirs, stdlib_dirs = _site_dirs(), _stdlib_dirs()
    requirements: set[str] = set()
    seen: set[str] = set()
    queue = deque(roots)
    roots_set = set(roots)
    while queue:
        name = queue.popleft()
        if name in seen:
            continue
        seen.add(name)
        top = name.partition(".")[0]
        if top in PLATFORM or top in sys.stdlib_module_names:
            continue
        found = _origin(name)
        if found is None:
            # `from a import f`: a.f is an attribute, not a module (and a missing `a` is
            # reported on its own)
            if "." not in name or name in roots_set:
                plan.unresolved.append(name)
            continue
        origin, is_package = found
        if origin is not None and _under(origin, site_dirs):  # (a venv's site-packages
            requirements.update(_distributions(top) or [top])  # lie under its platstdlib)
            continue
        if origin is None or _under(origin, stdlib_dirs):
            continue
        plan.files[relative_path(name, origin, is_package).as_posix()] = origin
        parent = name.rpartition(".")[0]
        if parent:
            queue.append(parent)
        if origin.suffix == ".py":
            source = origin.read_text(encoding="utf-8")
            queue.extend(sorted(imported_names(source, name, is_package)))
    plan.requirements = sorted(requirements)
    plan.unresolved = sorted(set(plan.unresolved))
    return plan
