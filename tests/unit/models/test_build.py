"""Building zoo packages: content, idempotence, rebuilds, concurrent builders, ensure_package."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from infless.errors import UnknownModel
from infless.models.build import build_package, build_zoo_package, ensure_package
from infless.models.package import MANIFEST_FILE, WEIGHTS_FILE, encode_manifest, load_manifest
from infless.models.validate import package_is_current
from infless.models.zoo import ZOO

REPO_ROOT = Path(__file__).resolve().parents[3]


def _stamp(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_ino, info.st_mtime_ns


def test_build_writes_manifest_and_weights(tmp_path: Path) -> None:
    result = build_zoo_package("mnist", tmp_path)
    assert result.built
    assert result.path == tmp_path / "mnist"
    assert 17_000 < result.parameters < 20_000
    manifest = load_manifest(result.path)
    weights = result.path / WEIGHTS_FILE
    assert manifest.weights_bytes == weights.stat().st_size == result.weights_bytes
    assert manifest.weights_sha256 == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert msgspec.structs.replace(manifest, weights_sha256="", weights_bytes=0) == (
        ZOO["mnist"].manifest()
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [".mnist.lock", "mnist"]
    assert result.path.stat().st_mode & 0o777 == 0o755


def test_second_build_is_cached_and_writes_nothing(tmp_path: Path) -> None:
    package_dir = build_package("mnist", tmp_path)
    stamps = [_stamp(package_dir / f) for f in (MANIFEST_FILE, WEIGHTS_FILE)]
    again = build_zoo_package("mnist", tmp_path)
    assert not again.built
    assert again.path == package_dir
    assert [_stamp(package_dir / f) for f in (MANIFEST_FILE, WEIGHTS_FILE)] == stamps


def test_force_rebuilds_with_identical_content(tmp_path: Path) -> None:
    package_dir = build_package("mnist", tmp_path)
    before = load_manifest(package_dir)
    inode = _stamp(package_dir / WEIGHTS_FILE)[0]
    assert build_zoo_package("mnist", tmp_path, force=True).built
    assert _stamp(package_dir / WEIGHTS_FILE)[0] != inode
    assert load_manifest(package_dir) == before  # same seed, same bytes, same hash
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".mnist.") and p.is_dir()]


def test_weights_files_are_byte_identical_across_builds(tmp_path: Path) -> None:
    digests = {
        load_manifest(build_package("mnist", tmp_path / str(i))).weights_sha256 for i in range(4)
    }
    assert len(digests) == 1


def test_truncated_weights_are_rebuilt(tmp_path: Path) -> None:
    package_dir = build_package("mnist", tmp_path)
    with (package_dir / WEIGHTS_FILE).open("r+b") as weights:
        weights.truncate(100)
    assert not package_is_current(package_dir, ZOO["mnist"])
    assert build_zoo_package("mnist", tmp_path).built
    assert package_is_current(package_dir, ZOO["mnist"])


def test_a_stale_manifest_is_rebuilt(tmp_path: Path) -> None:
    package_dir = build_package("mnist", tmp_path)
    manifest = load_manifest(package_dir)
    stale = msgspec.structs.replace(manifest, arch_kwargs={"num_classes": 10, "hidden": 32})
    (package_dir / MANIFEST_FILE).write_bytes(encode_manifest(stale))
    assert build_zoo_package("mnist", tmp_path).built
    after = load_manifest(package_dir)
    print(
        "DBG",
        [
            (f, getattr(after, f), getattr(manifest, f))
            for f in manifest.__struct_fields__
            if getattr(after, f) != getattr(manifest, f)
        ],
    )
    assert after == manifest


def test_weights_from_an_older_seeding_scheme_are_rebuilt(tmp_path: Path) -> None:
    package_dir = build_package("mnist", tmp_path)
    manifest = load_manifest(package_dir)
    assert manifest.provenance == ZOO["mnist"].provenance
    older = msgspec.structs.replace(manifest, provenance="infless-zoo/weights-v0 seed=1011")
    (package_dir / MANIFEST_FILE).write_bytes(encode_manifest(older))
    assert not package_is_current(package_dir, ZOO["mnist"])
    assert build_zoo_package("mnist", tmp_path).built


def test_leftovers_of_a_dead_builder_are_removed(tmp_path: Path) -> None:
    leftover = tmp_path / ".mnist.tmp-dead"
    leftover.mkdir()
    (leftover / WEIGHTS_FILE).write_bytes(b"partial")
    build_package("mnist", tmp_path)
    assert not leftover.exists()


def test_unknown_zoo_model(tmp_path: Path) -> None:
    with pytest.raises(UnknownModel, match="unknown zoo model"):
        build_package("mnist-2", tmp_path)
    assert not tmp_path.joinpath("mnist-2").exists()


_BUILDER = """
import json, sys
from pathlib import Path
from infless.models.build import build_zoo_package
print("ready", flush=True)
sys.stdin.readline()
result = build_zoo_package(sys.argv[1], Path(sys.argv[2]))
print(json.dumps({"built": result.built, "path": str(result.path)}), flush=True)
"""


def test_concurrent_builders_produce_one_valid_package(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-c", _BUILDER, "resnet-20-cifar", str(tmp_path)]
    builders = [
        subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO_ROOT,
            env=env,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for builder in builders:  # both imported and waiting: release them together
            assert builder.stdout is not None
            assert builder.stdout.readline().strip() == "ready"
        for builder in builders:
            assert builder.stdin is not None
            builder.stdin.write("go\n")
            builder.stdin.flush()
        reports = []
        for builder in builders:
            stdout, _ = builder.communicate(timeout=60)
            assert builder.returncode == 0
            reports.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for builder in builders:
            if builder.poll() is None:
                builder.kill()
                builder.wait()
    assert sorted(r["built"] for r in reports) == [False, True]
    package_dir = tmp_path / "resnet-20-cifar"
    assert {r["path"] for r in reports} == {str(package_dir)}
    assert package_is_current(package_dir, ZOO["resnet-20-cifar"])
    manifest = load_manifest(package_dir)
    digest = hashlib.sha256((package_dir / WEIGHTS_FILE).read_bytes()).hexdigest()
    assert manifest.weights_sha256 == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".resnet-20-cifar.lock",
        "resnet-20-cifar",
    ]


def test_ensure_package_builds_zoo_models_on_demand(tmp_path: Path) -> None:
    package_dir = ensure_package("mnist", tmp_path)
    assert package_is_current(package_dir, ZOO["mnist"])
    stamp = _stamp(package_dir / WEIGHTS_FILE)
    assert ensure_package("mnist", tmp_path) == package_dir
    assert _stamp(package_dir / WEIGHTS_FILE) == stamp


def test_ensure_package_on_a_built_package_does_not_import_torch(tmp_path: Path) -> None:
    """The gateway calls it: torch must never load there."""
    build_package("mnist", tmp_path)
    check = (
        "import sys; from pathlib import Path; from infless.models.build import ensure_package; "
        f"ensure_package('mnist', Path({str(tmp_path)!r})); "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    subprocess.run([sys.executable, "-c", check], cwd=REPO_ROOT, env=env, check=True)


def test_ensure_package_accepts_package_paths_and_repository_names(tmp_path: Path) -> None:
    built = build_package("mnist", tmp_path / "elsewhere")
    assert ensure_package(str(built), tmp_path / "repository") == built
    user = tmp_path / "repository" / "my-digits"
    user.parent.mkdir()
    built.rename(user)
    assert ensure_package("my-digits", tmp_path / "repository") == user


def test_ensure_package_rejects_unknown_images(tmp_path: Path) -> None:
    with pytest.raises(UnknownModel, match="neither a zoo model"):
        ensure_package("no-such-model", tmp_path)
    with pytest.raises(UnknownModel, match="missing"):
        ensure_package(str(tmp_path / "nowhere"), tmp_path)


def test_ensure_package_rejects_weights_of_the_wrong_size(tmp_path: Path) -> None:
    package_dir = build_package("mnist", tmp_path / "src")
    with (package_dir / WEIGHTS_FILE).open("ab") as weights:
        weights.write(b"extra")
    with pytest.raises(UnknownModel, match="rebuild"):
        ensure_package(str(package_dir), tmp_path)
