"""The GPU profile runner with fake children: one child per share, its environment, the rows it
stores, what happens without MPS and when children fail (no GPU needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from infless.cli import build_parser
from infless.models.package import MANIFEST_FILE, PackageManifest, TensorSignature, encode_manifest
from infless.profiler import commands
from infless.profiler.database import ProfileDatabase
from infless.profiler.gpu_profile import (
    GpuChildReport,
    GpuPoint,
    GpuProfileFailed,
    child_env,
    profile_gpu,
    shares_to_measure,
)

H100 = "NVIDIA H100 80GB HBM3"


def package(directory: Path) -> Path:
    directory.mkdir()
    manifest = PackageManifest(
        name="tiny", architecture="a:b", inputs=[TensorSignature("x", "float32", [4])], outputs=[]
    )
    (directory / MANIFEST_FILE).write_bytes(encode_manifest(manifest))
    return directory


class FakeChildren:
    """Answers each child as a device would at the share its environment gives it."""

    def __init__(self, failing: frozenset[int] = frozenset(), name: str = H100) -> None:
        self.calls: list[tuple[list[str], dict[str, str]]] = []
        self.failing, self.name = failing, name

    def __call__(
        self, argv: Sequence[str], env: Mapping[str, str], timeout_s: float
    ) -> GpuChildReport:
        self.calls.append((list(argv), dict(env)))
        share = int(env.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "100"))
        if share in self.failing:
            return GpuChildReport("failed", "CUDA error: MPS client failed to connect")
        points = [GpuPoint(b, 2.0 + b * 30.0 / share) for b in (1, 2, 4)]
        return GpuChildReport("ready", device_name=self.name, gpu_pct=share, points=points)


def test_each_share_runs_in_its_own_child_and_its_points_are_stored(tmp_path: Path) -> None:
    children = FakeChildren()
    lines: list[str] = []
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        rows = profile_gpu(
            package(tmp_path / "pkg"),
            [30, 10, 100],
            "GPU-1",
            "/run/mps",
            db,
            device_name=H100,
            log=lines.append,
            run=children,
        )
        assert db.gpu_latency() == sorted(rows, key=lambda r: (r.gpu_pct, r.batch_size))
    assert [env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] for _, env in children.calls] == [
        "10",
        "30",
        "100",
    ]
    for argv, env in children.calls:
        assert argv[1:3] == ["-m", "infless.profiler.gpu_profile"]
        assert env["CUDA_VISIBLE_DEVICES"] == "GPU-1"
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/run/mps"
    assert {(r.device_name, r.model_key, r.cpus) for r in rows} == {(H100, "tiny", 1)}
    assert {(r.batch_size, r.gpu_pct, r.exec_ms) for r in rows if r.gpu_pct == 30} == {
        (1, 30, 3.0),
        (2, 30, 4.0),
        (4, 30, 6.0),
    }
    assert len(lines) == 3


def test_without_mps_only_the_whole_gpu_is_measured_and_the_runner_says_why(
    tmp_path: Path,
) -> None:
    children = FakeChildren(name="the child's own name")
    lines: list[str] = []
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        rows = profile_gpu(
            package(tmp_path / "pkg"),
            [10, 30, 100],
            None,
            None,
            db,
            model_key="k",
            log=lines.append,
            run=children,
        )
    assert {r.gpu_pct for r in rows} == {100}
    assert {r.device_name for r in rows} == {"the child's own name"}
    assert {r.model_key for r in rows} == {"k"}
    assert "only 100 % is measured (10 %, 30 % not)" in lines[0]
    (_, env), *_ = children.calls
    assert not any(key.startswith("CUDA_MPS_") for key in env)


def test_a_failed_share_is_skipped_and_no_share_at_all_is_an_error(tmp_path: Path) -> None:
    lines: list[str] = []
    with ProfileDatabase(tmp_path / "p.sqlite") as db:
        rows = profile_gpu(
            package(tmp_path / "pkg"),
            [10, 30],
            None,
            "/run/mps",
            db,
            device_name=H100,
            log=lines.append,
            run=FakeChildren(failing=frozenset({10})),
        )
        assert {r.gpu_pct for r in rows} == {30}
        assert any("10 % failed: CUDA error" in line for line in lines)
        with pytest.raises(GpuProfileFailed, match="no GPU share could be measured: 30 %: CUDA"):
            profile_gpu(
                tmp_path / "pkg",
                [30],
                None,
                "/run/mps",
                db,
                device_name=H100,
                log=lines.append,
                run=FakeChildren(failing=frozenset({30})),
            )


def test_inherited_mps_settings_never_leak_into_a_child() -> None:
    base = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "5", "CUDA_MPS_PIPE_DIRECTORY": "/old", "A": "1"}
    env = child_env(50, None, None, base)
    assert env["A"] == "1"
    assert not any(key.startswith("CUDA_MPS_") for key in env)
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert child_env(50, "GPU-2", "/new", base)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"


@pytest.mark.parametrize("shares", [[], [0, 30], [30, 101]])
def test_shares_outside_one_to_a_hundred_are_refused(shares: list[int]) -> None:
    with pytest.raises(ValueError, match=r"each in 1\.\.100"):
        shares_to_measure(shares, "/run/mps")


def test_the_command_parses_its_gpu_options_and_needs_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = build_parser("profile").parse_args(
        [
            "profile",
            "--gpu",
            "resnet-50",
            "--shares",
            "30,100",
            "--mps-pipe-dir",
            "/run/mps",
            "--uuid",
            "GPU-1",
            "--dtype",
            "bf16",
            "--rounds",
            "5",
        ]
    )
    assert (args.gpu, args.names, args.shares, args.mps_pipe_dir) == (
        True,
        ["resnet-50"],
        "30,100",
        "/run/mps",
    )
    assert (args.uuid, args.dtype, args.rounds) == ("GPU-1", "bf16", 5)
    args = build_parser("profile").parse_args(["profile", "--gpu"])
    assert commands.run(args) == 2
    assert "--gpu measures NAMES" in capsys.readouterr().err


def test_a_key_names_the_points_of_one_model_only(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser("profile").parse_args(
        ["profile", "--gpu", "resnet-50", "mnist", "--key", "sha256:abc"]
    )
    assert commands.run(args) == 2
    assert "--key sha256:abc: names the points of one model" in capsys.readouterr().err
