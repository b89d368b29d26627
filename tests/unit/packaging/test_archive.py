"""Unpacking uploads: good archives land whole; every kind of bad one is refused with an
error naming the member, and nothing is ever written outside the destination."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path, PurePosixPath

import pytest

from infless.errors import InflessError, InvalidPackage, MalformedBody, PayloadTooLarge
from infless.packaging.archive import (
    Limits,
    Unpacked,
    extract_archive,
    member_path,
    package_root,
    write_files,
)
from tests.support.tarballs import WEIGHTS, entry, good_entries, tarball, zeros_member

LIMITS = Limits(max_bytes=1 << 20, max_members=50)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _unpack(tmp_path: Path, body: bytes, limits: Limits = LIMITS) -> Unpacked:
    dest = tmp_path / "repo" / "dest"
    dest.mkdir(parents=True)
    return extract_archive(io.BytesIO(body), dest, limits)


def test_a_package_at_the_root_or_under_one_directory_is_unpacked_whole(tmp_path: Path) -> None:
    for prefix in ("", "./", "pkg/"):
        dest = tmp_path / f"dest{len(prefix)}"
        dest.mkdir()
        body = tarball(entry(prefix or ".", tarfile.DIRTYPE), *good_entries(prefix))
        unpacked = extract_archive(io.BytesIO(body), dest, LIMITS)
        root = dest / package_root(unpacked.files)
        assert (root / "weights.safetensors").read_bytes() == WEIGHTS
        assert (root / "src" / "net.py").read_text() == "X = 1\n"
        assert unpacked.bytes == sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        assert oct((root / "src" / "net.py").stat().st_mode & 0o777) == oct(0o644)
    assert package_root([PurePosixPath("1/manifest.json"), PurePosixPath("1/w")]) == (
        PurePosixPath("1")
    )


@pytest.mark.parametrize(
    ("entries", "error", "words"),
    [
        ([entry("/OUTSIDE/evil", data=b"x")], InvalidPackage, "absolute paths"),
        ([entry("../evil", data=b"x")], InvalidPackage, "'..'"),
        ([entry("pkg/../../evil", data=b"x")], InvalidPackage, "'..'"),
        ([entry("link", tarfile.SYMTYPE, link="/etc/passwd")], InvalidPackage, "a symlink"),
        (
            [entry("ok", data=b"x"), entry("hard", tarfile.LNKTYPE, link="ok")],
            InvalidPackage,
            "a hard link",
        ),
        ([entry("dev", tarfile.CHRTYPE)], InvalidPackage, "a device"),
        ([entry("blk", tarfile.BLKTYPE)], InvalidPackage, "a device"),
        ([entry("pipe", tarfile.FIFOTYPE)], InvalidPackage, "a fifo"),
        ([entry("twice", data=b"1"), entry("twice", data=b"2")], InvalidPackage, "given twice"),
        ([entry("a", data=b"1"), entry("a/b", data=b"2")], InvalidPackage, "'a/b'"),
        ([entry(f"f{i}", data=b"") for i in range(51)], InvalidPackage, "more than 50 members"),
        ([zeros_member("bomb", (1 << 20) + 1)], PayloadTooLarge, "gateway.max_package_bytes"),
        (
            [zeros_member("half1", 600_000), zeros_member("half2", 600_000)],
            PayloadTooLarge,
            "'half2'",
        ),
    ],
)
def test_bad_members_are_refused_by_name_and_nothing_lands_outside(
    tmp_path: Path,
    entries: list[tuple[tarfile.TarInfo, bytes]],
    error: type[InflessError],
    words: str,
) -> None:
    outside = tmp_path / "OUTSIDE"
    outside.mkdir()
    fixed = [
        (info.replace(name=info.name.replace("/OUTSIDE", str(outside))), data)
        for info, data in entries
    ]
    body = tarball(*fixed)
    before = _tree(tmp_path)
    with pytest.raises(error, match=words.replace("(", r"\(")) as raised:
        _unpack(tmp_path, body)
    name = fixed[-1][0].name
    assert repr(name) in raised.value.message or name in raised.value.message
    after = _tree(tmp_path)
    assert {p for p in after - before if not p.startswith("repo")} == set()
    assert not list(outside.iterdir())
    assert not (tmp_path / "evil").exists()
    assert not [p for p in (tmp_path / "repo").rglob("*") if p.is_symlink()]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not an archive at all",
        b"\x1f\x8b\x08\x00garbage after a gzip magic",
        tarball(*good_entries())[:200],  # cut short
    ],
)
def test_bodies_that_are_no_tar_archive_are_malformed(tmp_path: Path, body: bytes) -> None:
    with pytest.raises(MalformedBody, match="not a readable tar archive"):
        _unpack(tmp_path, body)


def test_plain_tar_is_read_too(tmp_path: Path) -> None:
    unpacked = _unpack(tmp_path, tarball(*good_entries(), mode="w"))
    assert PurePosixPath("manifest.json") in unpacked.files


@pytest.mark.parametrize(
    "names",
    [
        ["weights.safetensors"],
        ["a/manifest.json", "b/weights"],
        ["pkg/manifest.json", "loose"],
        ["pkg/sub/manifest.json"],
    ],
)
def test_the_manifest_must_be_at_the_root_or_under_the_single_top_directory(
    names: list[str],
) -> None:
    with pytest.raises(InvalidPackage, match=r"no manifest\.json"):
        package_root([PurePosixPath(n) for n in names])


def test_member_paths_are_normalized_or_refused() -> None:
    assert member_path("./a//b/./c") == PurePosixPath("a/b/c")
    assert member_path("./") is None
    for bad in ("/etc/passwd", "a/../../b", "..", "a\0b"):
        with pytest.raises(InvalidPackage):
            member_path(bad)


def test_named_files_follow_the_same_rules(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    unpacked = write_files([("1/manifest.json", b"{}"), ("1/w", b"abc")], dest, LIMITS)
    assert package_root(unpacked.files) == PurePosixPath("1")
    assert unpacked.bytes == 5
    for files, error in [
        ([("../x", b"")], InvalidPackage),
        ([("/abs", b"")], InvalidPackage),
        ([("", b"")], InvalidPackage),
        ([("big", b"\0" * ((1 << 20) + 1))], PayloadTooLarge),
    ]:
        target = tmp_path / f"dest-{len(list(tmp_path.iterdir()))}"
        target.mkdir()
        with pytest.raises(error):
            write_files(files, target, LIMITS)
        assert not list(target.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir())[0] == "dest"
    assert not (tmp_path / "x").exists()
