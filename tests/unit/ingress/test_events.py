"""The gateway's events: the digit of a key press only when the setting allows it."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from pipeline.contracts.messages import EventType, to_json
from pipeline.ingress.events import DtmfNotice, TransportEventSink, call_started, dtmf_received
from tests.unit.producer.fakes import FakeTransport

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[3] / "schemas" / "event.schema.json").read_text()
)
NOTICE = DtmfNotice("call-1", "customer", "7", offset_ms=1234, duration_ms=80)


def test_a_key_press_names_no_digit_unless_allowed() -> None:
    hidden = dtmf_received("ingress-a", 1, NOTICE, reveal_digit=False)
    assert hidden.type is EventType.DTMF_RECEIVED
    assert (hidden.call_id, hidden.channel) == ("call-1", "customer")
    assert hidden.detail == {"position_ms": 1234, "duration_ms": 80, "digit_redacted": True}
    assert b"7" not in to_json(hidden).replace(b"1234", b"")
    shown = dtmf_received("ingress-a", 1, NOTICE, reveal_digit=True)
    assert shown.detail["digit"] == "7"
    assert shown.detail["digit_redacted"] is False


def test_events_are_event_records_keyed_by_call() -> None:
    fake = FakeTransport()
    sink = TransportEventSink(fake, "asr.events")
    sink.publish(call_started("ingress-a", 5, "call-1", {"transport": "sip"}))
    sink.publish(dtmf_received("ingress-a", 6, NOTICE, reveal_digit=False))
    assert [record.key for record in fake.records] == [b"call-1", b"call-1"]
    for record in fake.records:
        jsonschema.validate(json.loads(record.value), SCHEMA)
