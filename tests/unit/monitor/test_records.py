"""Reading the monitor's input: partials, events, finals and QA summaries, good and bad."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from pipeline.contracts.messages import EventType, Partial, to_json
from pipeline.contracts.reading import RecordRejectedError, RecordRejectReason
from pipeline.monitor.records import (
    MonitorEvent,
    PartialUpdate,
    parse_event,
    parse_final,
    parse_partial,
    parse_qa_call,
)
from pipeline.qa.summary import to_json as summary_json
from tests.conftest import validate
from tests.unit.monitor.builders import said, summary_of

PARTIAL = Partial(
    call_id="c1",
    channel="agent",
    utterance_index=2,
    revision=3,
    committed_text="this call may",
    tentative_text="be recorded",
    start_ms=1200,
    end_ms=3400,
    model_id="whisper-tiny.en",
    emit_ms=1_700_000_000_123,
    capture_ms=1_700_000_000_000,
    tenant="acme",
)


def _event(**fields: Any) -> bytes:
    record = {
        "schema": "event/1",
        "type": "session_ended",
        "emit_ms": 5,
        "source": "worker-1",
        "call_id": "c1",
        "channel": "customer",
        "detail": {"tenant": "acme", "duration_ms": 31_000, "utterances": 4},
    }
    record.update(fields)
    return orjson.dumps(record)


def test_a_partial_record_reads_as_a_partial_update() -> None:
    value = to_json(PARTIAL)
    validate("partial", orjson.loads(value))
    assert parse_partial(value) == PartialUpdate(
        "c1", "agent", "acme", 2, 3, "this call may", "be recorded", 1200, 3400, 1_700_000_000_123
    )


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, RecordRejectReason.NOT_JSON),
        (b"{not json", RecordRejectReason.NOT_JSON),
        (b"[1, 2]", RecordRejectReason.NOT_JSON),
        (b'{"schema": "partial/2"}', RecordRejectReason.UNKNOWN_SCHEMA),
        (orjson.dumps({**orjson.loads(to_json(PARTIAL)), "revision": None}), "invalid_field"),
        (orjson.dumps({**orjson.loads(to_json(PARTIAL)), "revision": True}), "invalid_field"),
        (orjson.dumps({**orjson.loads(to_json(PARTIAL)), "end_ms": 5}), "invalid_field"),
        (orjson.dumps({**orjson.loads(to_json(PARTIAL)), "call_id": ""}), "invalid_field"),
    ],
)
def test_a_malformed_partial_is_rejected_with_a_reason(value: bytes | None, reason: str) -> None:
    with pytest.raises(RecordRejectedError) as caught:
        parse_partial(value)
    assert caught.value.reason == reason


def test_a_partial_without_tenant_counts_as_the_default_tenant() -> None:
    record = orjson.loads(to_json(PARTIAL))
    del record["tenant"]
    assert parse_partial(orjson.dumps(record)).tenant == "default"


def test_session_events_carry_tenant_audio_length_and_finals_count() -> None:
    assert parse_event(_event()) == MonitorEvent(
        EventType.SESSION_ENDED, 5, "worker-1", "c1", "customer", "acme", 31_000, 4
    )
    started = parse_event(_event(type="session_started", detail={"tenant": "acme"}))
    assert started is not None
    assert (started.type, started.audio_ms, started.utterances) == (
        EventType.SESSION_STARTED,
        None,
        None,
    )


def test_a_dead_letter_event_needs_no_call() -> None:
    rejected = parse_event(_event(type="chunk_rejected", call_id=None, channel=None, detail={}))
    assert rejected is not None
    assert (rejected.type, rejected.call_id) == (EventType.CHUNK_REJECTED, None)


def test_events_the_monitor_does_not_use_or_know_are_skipped_quietly() -> None:
    assert parse_event(_event(type="model_loaded", call_id=None, channel=None)) is None
    assert parse_event(_event(type="from_a_newer_worker")) is None


def test_a_session_event_without_its_call_is_rejected() -> None:
    with pytest.raises(RecordRejectedError) as caught:
        parse_event(_event(call_id=None))
    assert caught.value.reason is RecordRejectReason.INVALID_FIELD


def test_finals_are_read_with_the_qa_apps_checks() -> None:
    final = said("c1", "agent", 0, "hello there", 500)
    assert parse_final(to_json(final)) == final


def test_a_qa_summary_reads_back_into_the_qa_apps_own_dataclasses() -> None:
    finals = [
        said("c1", "agent", 0, "thanks for calling this call may be recorded", 500),
        said("c1", "customer", 0, "I want a refund", 4000),
        said("c1", "agent", 1, "that's not my problem", 8000),
    ]
    summary = summary_of("c1", finals)
    assert summary.channels[1].words_per_minute is None  # the customer: under 5 s of talk
    value = summary_json(summary)
    validate("qa_call", orjson.loads(value))
    assert parse_qa_call(value) == summary
    assert summary.compliance_passed is False  # the forbidden phrase: evidence must round-trip
    assert parse_qa_call(value).compliance[1].evidence


@pytest.mark.parametrize(
    "change",
    [
        {"schema": "qa_call/2"},
        {"status": "paused"},
        {"compliance": [{"rule_id": "x"}]},
        {"overlaps": [{"start_ms": -1, "end_ms": 0, "duration_ms": 0}]},
        {"compliance_passed": "yes"},
    ],
)
def test_a_malformed_qa_summary_is_rejected(change: dict[str, Any]) -> None:
    summary = summary_of("c1", [said("c1", "agent", 0, "hello", 500)])
    record = {**orjson.loads(summary_json(summary)), **change}
    with pytest.raises(RecordRejectedError):
        parse_qa_call(orjson.dumps(record))
