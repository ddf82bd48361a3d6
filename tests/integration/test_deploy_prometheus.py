"""deploy/prometheus: promtool validates the config and rules and runs the rule unit tests."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.promql import KNOWN_SERIES, metric_names

pytestmark = pytest.mark.integration

PROMETHEUS = REPO / "deploy" / "prometheus"
RULE_FILES = sorted((PROMETHEUS / "rules").glob("*.yml"))
RULE_TESTS = sorted((PROMETHEUS / "tests").glob("*.yml"))


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: `make setup` installs the Debian package prometheus")
    return subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, check=False, timeout=120
    )


def _alerts() -> dict[str, dict[str, Any]]:
    rules = {}
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                rules[rule["alert"]] = rule
    return rules


def test_rule_files_exist() -> None:
    assert RULE_FILES
    assert RULE_TESTS


def test_promtool_checks_the_scrape_config_and_its_rules() -> None:
    result = _promtool("check", "config", PROMETHEUS / "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout


def test_promtool_checks_the_rules() -> None:
    result = _promtool("check", "rules", *RULE_FILES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rule_unit_tests_pass() -> None:
    result = _promtool("test", "rules", *RULE_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_a_broken_expectation_fails_promtool(tmp_path: Path) -> None:
    """The unit tests would notice a rule that stopped firing (they are not vacuous)."""
    suite = yaml.safe_load(RULE_TESTS[0].read_text())
    suite["rule_files"] = [str((RULE_TESTS[0].parent / f).resolve()) for f in suite["rule_files"]]
    for case in suite["tests"]:
        for check in case["alert_rule_test"]:
            check["exp_alerts"] = [] if check["exp_alerts"] else [{"exp_labels": {}}]
    broken = tmp_path / "broken.yml"
    broken.write_text(yaml.safe_dump(suite))
    assert _promtool("test", "rules", broken).returncode != 0


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    alerts = set(_alerts())
    assert alerts - firing == set(), "alerts without a firing test"
    assert alerts - quiet == set(), "alerts without a test where they must stay quiet"


def test_alerts_name_only_catalogued_metrics_and_carry_severity_and_runbook() -> None:
    operations = (REPO / "docs" / "operations.md").read_text()
    anchors = {_anchor(title) for title in re.findall(r"^#+ (.+)$", operations, re.MULTILINE)}
    for name, rule in _alerts().items():
        unknown = metric_names(rule["expr"]) - KNOWN_SERIES
        assert not unknown, f"{name} uses metrics missing from the catalogue: {unknown}"
        assert rule["labels"]["severity"] in ("page", "warning", "info"), name
        runbook = rule["annotations"]["runbook"]
        assert runbook.startswith("docs/operations.md#"), name
        assert runbook.split("#", 1)[1] in anchors, f"{name}: no section {runbook}"
        assert f"`{name}`" in operations, f"{name} missing from the alerts table"


def _anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def test_dashboard_expressions_are_valid_promql(tmp_path: Path) -> None:
    """promtool parses every dashboard query (as recording rules, Grafana variables filled in)."""
    dashboard = json.loads((REPO / "deploy/grafana/dashboards/streamscribe.json").read_text())
    exprs = [
        target["expr"].replace("$__rate_interval", "5m").replace("$instance", ".*")
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]
    rules = [{"record": f"dashboard:query_{i}", "expr": expr} for i, expr in enumerate(exprs)]
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = _promtool("check", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(exprs)} rules found" in result.stdout
