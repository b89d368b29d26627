"""The Grafana dashboard (`docs/grafana/infless.json`) against a real gateway's `/metrics`:
every series a panel queries is one the gateway exports, with the labels the query selects
and groups by, and the JSON has what Grafana's import needs. The gateway runs on a fake GPU
(so the GPU panels are checked too), serves a CPU and a GPU function, and answers one bad
request (so the failure counter exists)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from infless.gateway.resources import PlatformCollector
from tests.support.gateway import REPO_ROOT, GatewayProcess, fake_gpu_sections, start_gateway

pytestmark = pytest.mark.timeout(300)

DASHBOARD = REPO_ROOT / "docs" / "grafana" / "infless.json"
FUNCTIONS = [
    {"name": "digits-gpu", "image": "mnist", "slo_ms": 1000, "max_batch": 4, "gpu_pct": 30},
    {"name": "digits-cpu", "image": "mnist", "slo_ms": 1000, "max_batch": 4, "gpu_pct": 0},
]
BODY = {"inputs": np.zeros((1, 28, 28)).tolist()}
# Exported where NVML lists the GPU's processes (the fake NVML lists none): checked to be a
# family the collector declares, with these labels (its own test covers the samples).
REAL_GPU_ONLY = {"infless_instance_gpu_memory_bytes": {"function_name", "instance", "gpu_uuid"}}
SERIES = re.compile(r"\b((?:infless|gateway)_[a-z0-9_]+)\b")
SELECTOR = re.compile(r"\b((?:infless|gateway)_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
LABEL_VALUES = re.compile(r"label_values\(\s*([a-z0-9_]+)\s*,\s*([a-z0-9_]+)\s*\)")


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: its panels' and its variables'."""
    found = [t["expr"] for p in _panels(dashboard["panels"]) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found.append(variable["definition"])
    return found


def exported(gw: GatewayProcess) -> dict[str, set[str]]:
    """Every sample name `/metrics` exports, with its label names."""
    status, _, body = gw.request("GET", "/metrics")
    assert status == 200
    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def problems(expressions: list[str], series: dict[str, set[str]]) -> list[str]:
    """What the expressions ask that the scrape does not have, one sentence each."""
    found = []
    for expr in expressions:
        used = set(SERIES.findall(expr))
        for name in sorted(used - set(series)):
            found.append(f"{name} (in {expr!r}) is not exported")
        for name, matchers in SELECTOR.findall(expr):
            for label in MATCHER.findall(matchers):
                if name in series and label not in series[name]:
                    found.append(f"{name} has no label {label!r} (in {expr!r})")
        known = set().union(*(series.get(n, set()) for n in used)) | {"le"}
        for grouping in GROUPING.findall(expr):
            for label in (x.strip() for x in grouping.split(",") if x.strip()):
                if label not in known:
                    found.append(f"no series of {expr!r} has the label {label!r}")
        for name, label in LABEL_VALUES.findall(expr):
            if label not in series.get(name, set()):
                found.append(f"{name} has no label {label!r} for the variable")
    return found


def test_the_dashboard_is_importable_grafana_json() -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["title"] == "infless"
    assert dashboard["uid"]
    assert "id" not in dashboard  # an id would clash with the importing Grafana's own
    panels = list(_panels(dashboard["panels"]))
    assert len({p["id"] for p in panels}) == len(panels)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert target["expr"].strip()


def test_the_check_finds_a_series_or_label_the_gateway_does_not_export() -> None:
    series = {"infless_instances": {"function_name", "state"}}
    assert problems(['sum by (state) (infless_instances{function_name=~"a"})'], series) == []
    assert problems(["rate(infless_made_up_total[1m])"], series) == [
        "infless_made_up_total (in 'rate(infless_made_up_total[1m])') is not exported"
    ]
    assert len(problems(['infless_instances{server="x"}'], series)) == 1
    assert len(problems(["sum by (server) (infless_instances)"], series)) == 1


def test_every_series_the_dashboard_queries_is_exported(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    with start_gateway(tmp_path, FUNCTIONS, fake_gpu_sections()) as gw:
        for function in ("digits-gpu", "digits-cpu"):
            status, _, body = gw.request("POST", f"/function/{function}", BODY, timeout_s=60)
            assert status == 200, body
        assert gw.request("POST", "/function/digits-cpu", {"inputs": [1, 2]})[0] == 422
        series = exported(gw)
    declared = {family.name for family in PlatformCollector(list, dict).describe()}
    for name, labels in REAL_GPU_ONLY.items():
        assert name not in series  # else it needs no exception
        assert name in declared
        series[name] = labels
    assert problems(queries(dashboard), series) == []
