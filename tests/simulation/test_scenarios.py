"""`python -m infless.sim`: a policy comparison that ends with one line of JSON."""

from __future__ import annotations

import json

import pytest

from infless.sim.engine import SimConfig
from infless.sim.scenarios import compare, format_table, main, vision_mix


def test_compare_runs_every_policy_on_the_same_load() -> None:
    results = compare(vision_mix(15.0), SimConfig(servers=4, duration_s=15.0), ["infless", "batch"])
    assert set(results) == {"infless", "batch"}
    assert results["infless"].requests == results["batch"].requests  # same seeded arrivals
    assert "infless" in format_table(results)


def test_main_prints_a_table_and_ends_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--mix", "qa", "--duration-s", "10", "--policies", "infless", "openfaas+"])
    assert code == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    figures = json.loads(last)
    assert set(figures["violation_rate"]) == {"infless", "openfaas+"}
