"""Each figure's code path (`python -m infless.sim.figures`) on a small configuration: the
PNGs and tables are written, and the numbers behave as the figures claim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infless.sim import mixes
from infless.sim.figures import __main__ as figures
from infless.sim.figures import dts, tetris, throughput
from infless.sim.figures.table import Rows, markdown
from infless.sim.latency import load_zoo
from infless.sim.memory import MIB, ModelMemory


def test_every_figure_writes_its_png_and_ends_with_one_json_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert figures.main([*figures.FIGURES, "--small", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    found = json.loads(printed[-1])["figures"]
    assert set(found) == set(figures.FIGURES)
    for name in figures.FIGURES:
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
        assert found[name], name
    assert sum(line.startswith("| policy |") for line in printed) == 1  # table 4's header


def test_fig17_infless_leaves_fewer_fragments_than_uniform_batch() -> None:
    rows = figures.build("fig17", small=True)
    largest = max(int(r["target"]) for r in rows.rows)
    fragment = {
        str(r["policy"]): float(r["cpu_fragment"]) for r in rows.rows if r["target"] == largest
    }
    assert fragment["infless"] < fragment["batch"]
    assert fragment["batch+rs"] < fragment["batch"]  # the scheduler alone helps BATCH too
    assert all(float(r["total_s"]) > 0 for r in rows.rows)


def test_max_rps_is_sustained_and_twice_it_is_not() -> None:
    cfg = throughput.local_cluster(duration_s=5.0)
    rate = throughput.max_rps("qa", cfg, "infless")
    assert rate > 0
    assert throughput.sustains("qa", rate, cfg, "infless")
    assert not throughput.sustains("qa", 2.0 * rate, cfg, "infless")


def test_fig11_runs_both_applications_and_the_scale_figures_keep_to_qa() -> None:
    """OSVT's models are measured (Fig. 11 runs them beside the Q&A robot); the scale mix
    keeps to the Q&A models, whose instances 2,000 servers hold 10,000 of."""
    rows = figures.build("fig11", small=True)
    assert {str(r["app"]) for r in rows.rows} == {"qa", "osvt"}
    assert all(float(r["max_rps"]) > 0 for r in rows.rows)
    measured = load_zoo().models
    assert {"ssd", "mobilenet", "resnet-50"} <= set(measured)
    assert sorted(mixes.scale_models(measured)) == ["dssm-2365", "lstm-2365", "textcnn-69"]


def test_sharing_saves_more_with_more_instances_up_to_the_tensors_share() -> None:
    rows = tetris.fig9(
        {
            "m": ModelMemory(
                weight_bytes=300 * MIB, activation_bytes_per_sample=0, runtime_bytes=100 * MIB
            )
        }
    )
    saved = rows.values("reduction", model="m")
    assert saved == sorted(saved)
    assert saved[0] > 0
    assert saved[-1] < 300 / 400  # never more than the tensors' share of an instance


def test_markdown_lists_every_row_under_its_columns() -> None:
    rows = Rows("t", "title", ("a", "b"), ({"a": "x", "b": 0.123456}, {"a": "y", "b": 2}))
    assert markdown(rows).splitlines() == ["| a | b |", "|---|---|", "| x | 0.1235 |", "| y | 2 |"]
    assert rows.values("b", a="y") == [2.0]


def test_dts_holds_less_memory_per_request_than_infless() -> None:
    rows = figures.build("dts", small=True)
    assert {r["feedback"] for r in rows.rows} == {"on", "off"}
    for feedback in ("on", "off"):
        memory = {
            str(r["approach"]): float(r["mib_per_100_rps"])
            for r in rows.rows
            if r["feedback"] == feedback
        }
        assert set(memory) == {a.name for a in dts.APPROACHES}
        assert memory["dts"] < memory["infless"]
        assert memory["dts alpha=0"] == min(memory.values())  # memory alone: the least of it
        served = rows.values("served_rps", feedback=feedback)
        assert min(served) > 0.9 * max(served)  # the same load served: per request compares
