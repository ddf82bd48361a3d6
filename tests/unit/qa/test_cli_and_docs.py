"""``streamscribe qa --check``, the QA metrics, and docs/qa.md staying in step with the code."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from pipeline.cli import main
from pipeline.qa.metrics import QA_CATALOGUE, QaMetrics, qa_catalogue_markdown
from pipeline.qa.records import RecordRejectReason
from pipeline.qa.summary import EndReason
from pipeline.settings import describe_settings
from tests.conftest import REPO

DOCS = (REPO / "docs" / "qa.md").read_text()


def test_check_prints_the_built_in_rules(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["qa", "--check"]) == 0
    out = capsys.readouterr().out
    assert "rule recording_disclosure: required_phrase (agent, by 30000 ms)" in out
    assert "rule no_dismissive_language: forbidden_phrase (agent)" in out


def test_check_reads_a_rules_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        'keywords = ["refund"]\n[[rules]]\nid = "hi"\nkind = "required_phrase"\n'
        'phrase = "good morning"\n'
    )
    assert main(["qa", "--check", "--rules", str(rules)]) == 0
    out = capsys.readouterr().out
    assert "keywords: refund" in out
    assert "rule hi: required_phrase (any channel): good morning" in out


def test_a_bad_rules_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rules]]\nid = "x"\nkind = "sometimes"\nphrase = "a"\n')
    assert main(["qa", "--check", "--rules", str(rules)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("streamscribe: error: rules file")


def test_a_bad_port_is_a_user_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["qa", "--check", "--web-port", "70000"]) == 2
    assert "STREAMSCRIBE_QA_WEB_PORT" in capsys.readouterr().err


def test_metrics_count_by_closed_labels() -> None:
    registry = CollectorRegistry()
    metrics = QaMetrics(registry)
    metrics.count_rejected(RecordRejectReason.NOT_JSON)
    metrics.count_duplicate()
    metrics.count_ended(EndReason.IDLE_TIMEOUT)
    metrics.count_published(1)
    metrics.count_published(2)
    metrics.set_calls(open_calls=3, tracked_calls=5)
    text = generate_latest(registry).decode()
    assert 'qa_records_rejected_total{reason="not_json"} 1.0' in text
    assert 'qa_records_rejected_total{reason="unknown_schema"} 0.0' in text
    assert "qa_duplicate_finals_total 1.0" in text
    assert 'qa_calls_ended_total{reason="idle_timeout"} 1.0' in text
    assert 'qa_summaries_published_total{publication="first"} 1.0' in text
    assert 'qa_summaries_published_total{publication="revision"} 1.0' in text
    assert "qa_open_calls 3.0" in text
    for spec in QA_CATALOGUE:
        assert spec.name.removesuffix("_total") in text


def test_the_docs_show_the_metric_catalogue() -> None:
    assert qa_catalogue_markdown() in DOCS


def test_the_docs_list_every_qa_setting() -> None:
    for row in describe_settings():
        if row.name.startswith("qa."):
            assert f"`{row.name}` | `{row.env}`" in DOCS
