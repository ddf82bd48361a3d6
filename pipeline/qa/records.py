"""Reading the QA app's input: ``final/1`` and ``event/1`` records, checked field by field.

The QA app consumes what the ASR workers write, and must never crash on a record it cannot use:
``parse_final`` (shared with every consumer of finals, ``pipeline.contracts.reading``) and
``parse_event`` turn record values into the contract dataclasses of ``pipeline.contracts`` or
raise ``RecordRejectedError`` with a stable ``RecordRejectReason``. Event types the QA app does
not know (a newer worker) are not errors: ``parse_event`` returns ``None`` for them, so new
types can be added to the contract without breaking this consumer.

Between the app's two stages, records travel in a one-byte envelope (``encode_input`` /
``decode_input``) that says what the payload is: a final, an event, or a timer tick.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pipeline.contracts.messages import EVENT_SCHEMA, Event, EventType
from pipeline.contracts.reading import (
    RecordRejectedError,
    RecordRejectReason,
    field,
    load_record,
    non_empty,
    optional,
    parse_final,
)

__all__ = [
    "InputKind",
    "QaInput",
    "RecordRejectReason",
    "RecordRejectedError",
    "decode_input",
    "encode_input",
    "parse_event",
    "parse_final",
]


#: Events the QA app acts on; every other known type is read and ignored.
CALL_EVENT_TYPES = frozenset({EventType.SESSION_STARTED, EventType.SESSION_ENDED})


def parse_event(value: bytes | None) -> Event | None:
    """An ``event/1`` record value as an ``Event``, or ``None`` for types this app ignores.

    Session events (``session_started`` / ``session_ended``) must name their call and channel;
    other known types and types newer than this app are returned as ``None`` (read, unused).

    Raises:
        RecordRejectedError: the value is not a usable ``event/1`` record.
    """
    data = load_record(value, EVENT_SCHEMA)
    kind = field(data, "type", str)
    try:
        event_type = EventType(kind)
    except ValueError:
        return None
    if event_type not in CALL_EVENT_TYPES:
        return None
    detail = optional(data, "detail", dict) or {}
    return Event(
        type=event_type,
        emit_ms=field(data, "emit_ms", int),
        source=field(data, "source", str),
        call_id=non_empty(data, "call_id"),
        channel=non_empty(data, "channel"),
        detail=detail,
    )


class InputKind(enum.StrEnum):
    """What an envelope on the app's internal input topic carries."""

    FINAL = "F"
    EVENT = "E"
    TICK = "T"
    """A timer's request to re-check a call (idle timeout, retention); no payload."""


@dataclass(frozen=True, slots=True)
class QaInput:
    """One record of the internal input topic: its kind and the original record value."""

    kind: InputKind
    payload: bytes


def encode_input(kind: InputKind, payload: bytes = b"") -> bytes:
    """The envelope: one ASCII kind byte, then the original value byte for byte."""
    return kind.value.encode() + payload


def decode_input(value: bytes | None) -> QaInput:
    """Inverse of ``encode_input``.

    Raises:
        RecordRejectedError: empty value or unknown kind byte.
    """
    if not value:
        raise RecordRejectedError(RecordRejectReason.NOT_JSON, "empty envelope")
    try:
        kind = InputKind(chr(value[0]))
    except ValueError:
        raise RecordRejectedError(
            RecordRejectReason.UNKNOWN_SCHEMA, f"unknown envelope kind {value[:1]!r}"
        ) from None
    return QaInput(kind, bytes(value[1:]))
