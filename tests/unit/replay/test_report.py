"""The markdown and JSON reports of a comparison."""

from __future__ import annotations

import orjson

from pipeline.replay.compare import compare_runs
from pipeline.replay.report import comparison_json, comparison_markdown, verdict_line
from tests.unit.replay.builders import final, run

BASE = run(
    final("c1", 0, "Hello, how can I help?", 0, 2000, channel="agent", latency_ms=300),
    final("c1", 0, "My bill is wrong.", 2500, 4000, channel="customer", latency_ms=500),
    label="base.jsonl",
)
WORSE = run(
    final("c1", 0, "Hello, how can", 0, 1200, channel="agent", reason="max_length"),
    final("c1", 1, "I yelp?", 1200, 2000, channel="agent", latency_ms=900),
    final("c1", 0, "My bill is wrong.", 2500, 4000, channel="customer"),
    final("c1", 1, "Thanks | bye.", 5000, 5500, channel="customer"),
    label="worse.jsonl",
)
REFS = {"c1:agent": "Hello, how can I help?", "c1:customer": "My bill is wrong."}


def test_the_markdown_report_has_verdict_tables_and_side_by_side_changes() -> None:
    comparison = compare_runs(BASE, WORSE, REFS, max_increase_pct=0.5)
    report = comparison_markdown(comparison)
    assert report.startswith("# Replay comparison\n")
    assert "**PASS" not in report
    assert "**FAIL: candidate WER" in report
    assert "| `base.jsonl` | `worse.jsonl` |" in report
    assert "| c1 | agent | c1:agent | 5 | 0.00 % | 20.00 % | 20.00 % | 1 / 0 / 0 |" in report
    assert "| split | 1 |" in report
    assert "| only_in_candidate | 1 |" in report
    # Side by side; a pipe in a transcript cannot break the table.
    assert (
        "| c1 | agent | 00:00.00–00:02.00 | split, text_changed | #0 00:00.00–00:02.00 "
        "(silence) Hello, how can I help? | #0 00:00.00–00:01.20 (max_length) Hello, how "
        "can<br>#1 00:01.20–00:02.00 (silence) I yelp? |"
    ) in report
    assert "Thanks \\| bye." in report
    assert "| baseline | 2 | 300 ms | 500 ms | 500 ms | 500 ms |" in report
    assert "| candidate | 1 | 900 ms | 900 ms | 900 ms | 900 ms |" in report


def test_examples_are_limited() -> None:
    report = comparison_markdown(compare_runs(BASE, WORSE, None), max_examples=1)
    assert "… and 1 more (see the JSON report)." in report
    assert "No references: the candidate is compared with the baseline's text." in report
    same = comparison_markdown(compare_runs(BASE, BASE, None))
    assert "None: both runs agree." in same


def test_the_json_report_is_serializable_and_complete() -> None:
    comparison = compare_runs(BASE, WORSE, REFS, max_increase_pct=0.5)
    data = orjson.loads(orjson.dumps(comparison_json(comparison)))
    assert data["schema"] == "compare/1"
    assert data["gate"]["metric"] == "wer"
    assert data["gate"]["passed"] is False
    assert data["gate"]["increase"] > 0.5
    assert data["endpoint_changes"]["split"] == 1
    assert data["baseline"]["latency_ms"] == {
        "count": 2,
        "p50": 300,
        "p95": 500,
        "p99": 500,
        "max": 500,
    }
    (call,) = data["calls"]
    assert call["call_id"] == "c1"
    customer = call["channels"][1]
    assert customer["reference_id"] == "c1:customer"
    assert customer["baseline"]["wer"] == 0.0
    assert customer["candidate"]["insertions"] == 2
    assert customer["changes"][0]["kinds"] == ["only_in_candidate", "text_changed"]
    assert customer["changes"][0]["candidate"][0]["text"] == "Thanks | bye."


def test_verdict_lines() -> None:
    assert verdict_line(compare_runs(BASE, BASE, REFS, max_increase_pct=0)).startswith(
        "PASS: candidate WER 0.00 % vs baseline 0.00 % (+0.00 points), limit +0 points"
    )
    assert verdict_line(compare_runs(BASE, WORSE, None)).startswith("NOT GATED: candidate")
    assert "no references" in verdict_line(compare_runs(BASE, WORSE, None, max_increase_pct=1))


def test_references_that_matched_no_stream_are_listed() -> None:
    # A fixed benchmark shrinks quietly as its calls age out of the topic's retention.
    refs = {**REFS, "c9:agent": "gone", "c7": "also gone"}
    comparison = compare_runs(BASE, WORSE, refs)
    assert comparison.unmatched_references == ("c7", "c9:agent")
    report = comparison_markdown(comparison)
    assert "**2 reference(s) matched no stream** of either run" in report
    assert "`c7`, `c9:agent`" in report
    assert comparison_json(comparison)["unmatched_references"] == ["c7", "c9:agent"]
    assert "matched no stream" not in comparison_markdown(compare_runs(BASE, WORSE, REFS))
