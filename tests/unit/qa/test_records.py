"""Reading finals and events: round trips, every rejection reason, ignored event types."""

from __future__ import annotations

import orjson
import pytest

from pipeline.contracts.messages import Event, EventType, to_json
from pipeline.qa.records import (
    InputKind,
    RecordRejectedError,
    RecordRejectReason,
    decode_input,
    encode_input,
    parse_event,
    parse_final,
)
from tests.qa_builders import final, session


def test_a_final_round_trips() -> None:
    original = final("agent", 3, "hello there", 1200)
    assert parse_final(to_json(original)) == original


def _final_dict() -> dict[str, object]:
    data: dict[str, object] = orjson.loads(to_json(final("agent", 0, "hello there", 0)))
    return data


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", RecordRejectReason.NOT_JSON),
        (None, RecordRejectReason.NOT_JSON),
        (b"not json", RecordRejectReason.NOT_JSON),
        (b"[1, 2]", RecordRejectReason.NOT_JSON),
        (b'{"schema": "final/2"}', RecordRejectReason.UNKNOWN_SCHEMA),
        (b'{"call_id": "x"}', RecordRejectReason.UNKNOWN_SCHEMA),
    ],
)
def test_unreadable_values_are_rejected(value: bytes | None, reason: RecordRejectReason) -> None:
    with pytest.raises(RecordRejectedError) as caught:
        parse_final(value)
    assert caught.value.reason is reason


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"call_id": None}, RecordRejectReason.INVALID_FIELD),
        ({"call_id": ""}, RecordRejectReason.INVALID_FIELD),
        ({"utterance_index": -1}, RecordRejectReason.INVALID_FIELD),
        ({"utterance_index": True}, RecordRejectReason.INVALID_FIELD),
        ({"start_ms": "0"}, RecordRejectReason.INVALID_FIELD),
        ({"start_ms": 99_999}, RecordRejectReason.INVALID_FIELD),
        ({"utterance_id": "call-1:agent:7"}, RecordRejectReason.INVALID_FIELD),
        ({"endpoint_reason": "bored"}, RecordRejectReason.INVALID_FIELD),
        ({"words": "hello"}, RecordRejectReason.INVALID_FIELD),
        ({"words": [{"word": "x", "start_ms": 5, "end_ms": 1, "probability": 0.5}]}, None),
        ({"words": [{"word": "x", "start_ms": 1, "end_ms": 5, "probability": 1.5}]}, None),
        ({"words": [{"word": "x", "start_ms": 1, "probability": 0.5}]}, None),
        ({"words": ["x"]}, RecordRejectReason.INVALID_FIELD),
    ],
)
def test_bad_fields_are_rejected(
    change: dict[str, object], reason: RecordRejectReason | None
) -> None:
    data = {**_final_dict(), **change}
    with pytest.raises(RecordRejectedError) as caught:
        parse_final(orjson.dumps(data))
    if reason is not None:
        assert caught.value.reason is reason


def test_a_missing_field_is_named() -> None:
    data = _final_dict()
    del data["text"]
    with pytest.raises(RecordRejectedError, match="text") as caught:
        parse_final(orjson.dumps(data))
    assert caught.value.reason is RecordRejectReason.MISSING_FIELD


def test_optional_fields_may_be_absent_and_extra_fields_are_ignored() -> None:
    data = _final_dict()
    for name in ("latency_ms", "capture_ms", "tenant"):
        del data[name]
    data["future_field"] = 1
    parsed = parse_final(orjson.dumps(data))
    assert parsed.tenant == "default"
    assert parsed.latency_ms is None


@pytest.mark.parametrize("kind", [EventType.SESSION_STARTED, EventType.SESSION_ENDED])
def test_session_events_are_read(kind: EventType) -> None:
    event = session(kind, "agent", audio_ms=5000)
    assert parse_event(to_json(event)) == event


def test_other_and_unknown_event_types_are_ignored() -> None:
    worker_event = Event(EventType.WORKER_STARTED, 1, "worker-1")
    assert parse_event(to_json(worker_event)) is None
    newer = orjson.dumps(
        {"schema": "event/1", "type": "from_the_future", "emit_ms": 1, "source": "w"}
    )
    assert parse_event(newer) is None


def test_a_session_event_without_call_or_channel_is_rejected() -> None:
    event = Event(EventType.SESSION_ENDED, 1, "worker-1", "call-1", None)
    with pytest.raises(RecordRejectedError) as caught:
        parse_event(to_json(event))
    assert caught.value.reason is RecordRejectReason.INVALID_FIELD


def test_an_event_of_another_schema_is_rejected() -> None:
    with pytest.raises(RecordRejectedError) as caught:
        parse_event(b'{"schema": "final/1"}')
    assert caught.value.reason is RecordRejectReason.UNKNOWN_SCHEMA


@pytest.mark.parametrize("kind", list(InputKind))
def test_the_envelope_round_trips(kind: InputKind) -> None:
    decoded = decode_input(encode_input(kind, b'{"x": 1}'))
    assert decoded.kind is kind
    assert decoded.payload == b'{"x": 1}'


@pytest.mark.parametrize("value", [b"", None, b"Z{}"])
def test_a_bad_envelope_is_rejected(value: bytes | None) -> None:
    with pytest.raises(RecordRejectedError):
        decode_input(value)
