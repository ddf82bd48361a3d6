"""deploy/grafana: the dashboard parses, selects only catalogued metrics and shows all of them."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from pipeline.ingress.metrics import INGRESS_CATALOGUE
from pipeline.qa.metrics import QA_CATALOGUE
from pipeline.runtime.metrics import CATALOGUE
from tests.conftest import REPO
from tests.promql import KNOWN_SERIES, metric_names

GRAFANA = REPO / "deploy" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((GRAFANA / "dashboards" / "streamscribe.json").read_text())
    return loaded


def _targets(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [target for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_metric_names_sees_through_functions_matchers_and_grouping() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, kind) (rate(asr_duration_seconds_bucket{kind=~"a|b",'
        'instance=~"$instance"}[$__rate_interval]))) > 0.4 and on (job) up offset 5m'
        " / ignoring(reason) group_left sum(rate(asr_dlq_total[5m])) * 1e3"
    )
    assert metric_names(expr) == {"asr_duration_seconds_bucket", "up", "asr_dlq_total"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda path: path.name)
def test_dashboards_parse_with_unique_panel_ids_on_the_grid(path: Any) -> None:
    dashboard = json.loads(path.read_text())
    assert dashboard["uid"]
    assert dashboard["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        assert grid["h"] > 0, panel["title"]


def test_every_expression_selects_only_catalogued_metrics() -> None:
    targets = _targets(_dashboard())
    assert targets
    for target in targets:
        names = metric_names(target["expr"])
        assert names, target["expr"]
        assert names <= KNOWN_SERIES, f"unknown metric(s) {names - KNOWN_SERIES}"


def test_every_catalogued_metric_is_on_the_dashboard() -> None:
    shown = set().union(*(metric_names(target["expr"]) for target in _targets(_dashboard())))
    catalogued = (*CATALOGUE, *QA_CATALOGUE, *INGRESS_CATALOGUE)
    missing = [spec.name for spec in catalogued if not set(spec.series_names) & shown]
    assert missing == []


def test_the_dashboard_covers_what_an_operator_needs() -> None:
    exprs = " ".join(target["expr"] for target in _targets(_dashboard()))
    for needed in (
        'histogram_quantile(0.99, sum by (le) (rate(asr_duration_seconds_bucket{job="streamscribe-'
        'worker",instance=~"$instance",kind="chunk_to_partial"}',
        'kind="endpoint_to_final"',
        "asr_consumer_lag_records",
        "sum by (reason) (rate(asr_dlq_total",
        "asr_batch_size_bucket",
        "streamscribe_gpu_utilization_ratio",
    ):
        assert needed in exprs


def test_panels_use_the_datasource_variable_and_refids_are_unique() -> None:
    dashboard = _dashboard()
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_provisioning_points_at_the_dashboards_and_prometheus() -> None:
    providers = yaml.safe_load((GRAFANA / "provisioning/dashboards/streamscribe.yaml").read_text())
    (provider,) = providers["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    sources = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yaml").read_text())
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
