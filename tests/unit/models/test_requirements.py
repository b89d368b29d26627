"""Requirements at deploy: a missing distribution refuses the package, naming every one;
another installed version is only a warning; stored packages resolve by digest."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from infless.errors import MissingRequirements, UnknownModel
from infless.models.requirements import (
    check_requirements,
    installed_version,
    parse_requirement,
)
from infless.models.resolver import PackageResolver
from infless.packaging.archive import Limits
from infless.packaging.store import PackageStore
from tests.support.tarballs import good_entries, tarball

INSTALLED = {"tokenizers": "0.23.3", "numpy": "2.1.0"}


def test_missing_mismatched_and_unreadable_requirements_are_told_apart() -> None:
    check = check_requirements(
        [
            "tokenizers==0.23.3",
            "numpy>=3",
            "ghost-dist>=1",
            "other_ghost",
            "windows-only; sys_platform == 'win32'",
            "not a requirement !!",
        ],
        INSTALLED.get,
    )
    assert check.missing == ("ghost-dist", "other_ghost")
    assert check.mismatched == ("numpy>=3 (installed 2.1.0)",)
    assert check.invalid == ("not a requirement !!",)
    assert not check.ok
    assert check.problem() == (
        "not installed: ghost-dist, other_ghost; not valid requirements: 'not a requirement !!'"
    )
    assert check_requirements(["tokenizers==0.23.3", "numpy"], INSTALLED.get).ok


def test_installed_distributions_are_found_by_their_metadata() -> None:
    assert installed_version("msgspec") is not None
    assert installed_version("surely-not-installed-xyz") is None
    parsed = parse_requirement("MsgSpec[extra]>=0.1")
    assert parsed is not None
    assert parsed.name == "MsgSpec"
    assert check_requirements(["MsgSpec>=0.1", "aiohttp"]).ok


def _store_with(tmp_path: Path, **changes: object) -> tuple[PackageResolver, str]:
    store = PackageStore(tmp_path)
    body = tarball(*good_entries(**changes))
    stored = store.add_archive(store.new_staging(), io.BytesIO(body), Limits(1 << 20))
    return PackageResolver(tmp_path, packages=store), stored.digest


async def test_a_stored_package_resolves_by_digest(tmp_path: Path) -> None:
    resolver, digest = _store_with(tmp_path)
    package_dir, manifest = await resolver.resolve(digest)
    assert package_dir == tmp_path / "packages" / digest.removeprefix("sha256:")
    assert manifest.name == "tiny"
    with pytest.raises(UnknownModel, match=r"upload the package first \(POST /system/packages"):
        await resolver.resolve("sha256:" + "0" * 64)
    with pytest.raises(UnknownModel, match="not a package digest"):
        await resolver.resolve("sha256:nope")


async def test_deploy_refuses_missing_requirements_and_warns_on_versions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    resolver, digest = _store_with(
        tmp_path / "a", requirements=["ghost-one", "ghost-two>=2", "msgspec"]
    )
    with pytest.raises(MissingRequirements, match="not installed: ghost-one, ghost-two") as raised:
        await resolver.resolve(digest)
    assert raised.value.status == 422
    assert json.loads(json.dumps(raised.value.to_json()))["code"] == "missing_requirements"

    resolver, digest = _store_with(tmp_path / "b", requirements=["msgspec<0.0.1"])
    with caplog.at_level(logging.WARNING, logger="infless.models.resolver"):
        _, manifest = await resolver.resolve(digest)
    assert manifest.requirements == ["msgspec<0.0.1"]
    assert "msgspec<0.0.1 (installed" in caplog.text
