"""Which source a package carries: local modules followed through their imports; third-party
imports become requirements; the platform and the standard library are left alone."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from infless.packaging.source import imported_names, plan_sources, relative_path


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    package = tmp_path / "proj" / "mymodel"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "net.py").write_text(
        "import json\nimport numpy as np\nfrom . import layers\nfrom .sub.util import f\n"
        "from infless.handlers import Request\n"
        "def lazy():\n    import yaml\n    import not_installed_anywhere\n"
    )
    (package / "layers.py").write_text("X = 1\n")
    (package / "sub" / "util.py").write_text("from ..layers import X\ndef f(): return X\n")
    (package / "unused.py").write_text("import torch\n")
    sys.path.insert(0, str(tmp_path / "proj"))
    yield tmp_path / "proj"
    sys.path.remove(str(tmp_path / "proj"))
    for name in [m for m in sys.modules if m.split(".")[0] == "mymodel"]:
        del sys.modules[name]


def test_local_modules_are_followed_and_third_party_ones_required(project: Path) -> None:
    plan = plan_sources(["mymodel.net"])
    assert sorted(plan.files) == [
        "mymodel/__init__.py",
        "mymodel/layers.py",
        "mymodel/net.py",
        "mymodel/sub/__init__.py",
        "mymodel/sub/util.py",
    ]
    assert plan.files["mymodel/net.py"] == (project / "mymodel" / "net.py").resolve()
    names = {r.split("==")[0].lower() for r in plan.requirements}
    assert names == {"numpy", "pyyaml"}  # lazy imports count; infless and json do not
    assert plan.unresolved == ["not_installed_anywhere"]


def test_relative_imports_resolve_against_their_package() -> None:
    source = "from . import a\nfrom ..b import c\nfrom .d import *\nimport e.f\n"
    assert imported_names(source, "p.q.m", is_package=False) == {
        "p.q", "p.q.a", "p.b", "p.b.c", "p.q.d", "e.f",
    }  # fmt: skip
    assert "p.q.m.x" in imported_names("from .x import y\n", "p.q.m", is_package=True)


def test_relative_paths_follow_the_import_path() -> None:
    assert relative_path("a.b", Path("/x/a/b.py"), is_package=False) == Path("a/b.py")
    assert relative_path("a", Path("/x/a/__init__.py"), is_package=True) == Path("a/__init__.py")
    so = Path("/x/a/fast.cpython-311-x86_64-linux-gnu.so")
    assert relative_path("a.fast", so, is_package=False) == Path(
        "a/fast.cpython-311-x86_64-linux-gnu.so"
    )
