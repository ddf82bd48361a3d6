"""Reading the QA app's input: ``final/1`` and ``event/1`` records, checked field by field.

The QA app consumes what the ASR workers write, and must never crash on a record it cannot use:
``parse_final`` and ``parse_event`` turn record values into the contract dataclasses of
``pipeline.contracts`` or raise ``RecordRejectedError`` with a stable ``RecordRejectReason``.
Event types the QA app does not know (a newer worker) are not errors: ``parse_event`` returns
``None`` for them, so new types can be added to the contract without breaking this consumer.

Between the app's two stages, records travel in a one-byte envelope (``encode_input`` /
``decode_input``) that says what the payload is: a final, an event, or a timer tick.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.contracts.messages import (
    EVENT_SCHEMA,
    FINAL_SCHEMA,
    EndpointReason,
    Event,
    EventType,
    Final,
    Word,
    utterance_id,
)
from pipeline.errors import ContractError

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


class RecordRejectReason(enum.StrEnum):
    """Why an input record was skipped (a label of the rejection metric and event)."""

    NOT_JSON = "not_json"
    """Empty, not UTF-8 JSON, or JSON that is not an object."""
    UNKNOWN_SCHEMA = "unknown_schema"
    """``schema`` missing or not a version this app reads."""
    MISSING_FIELD = "missing_field"
    INVALID_FIELD = "invalid_field"
    """A field of the wrong type or out of range, or fields that contradict each other."""
    PROCESSING_ERROR = "processing_error"
    """A valid-looking record whose processing raised an unexpected error (a bug: see the log)."""


class RecordRejectedError(ContractError):
    """An input record the QA app cannot use; ``reason`` is a ``RecordRejectReason``."""

    def __init__(self, reason: RecordRejectReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


#: Events the QA app acts on; every other known type is read and ignored.
CALL_EVENT_TYPES = frozenset({EventType.SESSION_STARTED, EventType.SESSION_ENDED})


def _load_object(value: bytes | None) -> dict[str, Any]:
    if not value:
        raise RecordRejectedError(RecordRejectReason.NOT_JSON, "empty record value")
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as error:
        raise RecordRejectedError(RecordRejectReason.NOT_JSON, str(error)) from None
    if not isinstance(data, dict):
        raise RecordRejectedError(RecordRejectReason.NOT_JSON, "JSON value is not an object")
    return data


def _require(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in data:
        raise RecordRejectedError(RecordRejectReason.MISSING_FIELD, f"no field {name!r}")
    value = data[name]
    # bool is an int subclass in Python; JSON true is never a valid count or time here.
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, f"{name!r} is a boolean")
    if not isinstance(value, kind):
        raise RecordRejectedError(
            RecordRejectReason.INVALID_FIELD, f"{name!r} has type {type(value).__name__}"
        )
    return value


def _optional(data: Mapping[str, Any], name: str, kind: type) -> Any:
    if data.get(name) is None:
        return None
    return _require(data, name, kind)


def _non_negative(data: Mapping[str, Any], name: str) -> int:
    value: int = _require(data, name, int)
    if value < 0:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, f"{name!r} is negative")
    return value


def _non_empty(data: Mapping[str, Any], name: str) -> str:
    value: str = _require(data, name, str)
    if not value:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, f"{name!r} is empty")
    return value


def _check_schema(data: Mapping[str, Any], expected: str) -> None:
    schema = data.get("schema")
    if schema != expected:
        raise RecordRejectedError(
            RecordRejectReason.UNKNOWN_SCHEMA, f"schema {schema!r}, this app reads {expected!r}"
        )


def _parse_word(data: Any) -> Word:
    if not isinstance(data, dict):
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, "a word is not an object")
    start_ms = _non_negative(data, "start_ms")
    end_ms = _non_negative(data, "end_ms")
    probability = float(_require(data, "probability", (int, float)))
    if end_ms < start_ms or not 0.0 <= probability <= 1.0:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, f"bad word timing {data!r}")
    return Word(_require(data, "word", str), start_ms, end_ms, probability)


def parse_final(value: bytes | None) -> Final:
    """A ``final/1`` record value as a ``Final``.

    Checks what the QA app relies on: types, ``end_ms >= start_ms``, word spans, the endpoint
    reason, and that ``utterance_id`` is ``{call_id}:{channel}:{utterance_index}`` (duplicates
    are recognized by it). Unknown extra fields are ignored.

    Raises:
        RecordRejectedError: the value is not a usable ``final/1`` record.
    """
    data = _load_object(value)
    _check_schema(data, FINAL_SCHEMA)
    call_id = _non_empty(data, "call_id")
    channel = _non_empty(data, "channel")
    index = _non_negative(data, "utterance_index")
    given_id = _require(data, "utterance_id", str)
    if given_id != utterance_id(call_id, channel, index):
        raise RecordRejectedError(
            RecordRejectReason.INVALID_FIELD,
            f"utterance_id {given_id!r} does not match call, channel and index",
        )
    start_ms = _non_negative(data, "start_ms")
    end_ms = _non_negative(data, "end_ms")
    if end_ms < start_ms:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, "end_ms before start_ms")
    words = _require(data, "words", list)
    reason = _require(data, "endpoint_reason", str)
    try:
        endpoint_reason = EndpointReason(reason)
    except ValueError:
        raise RecordRejectedError(
            RecordRejectReason.INVALID_FIELD, f"unknown endpoint_reason {reason!r}"
        ) from None
    return Final(
        call_id=call_id,
        channel=channel,
        utterance_index=index,
        utterance_id=given_id,
        text=_require(data, "text", str),
        words=tuple(_parse_word(word) for word in words),
        start_ms=start_ms,
        end_ms=end_ms,
        endpoint_reason=endpoint_reason,
        model_id=_require(data, "model_id", str),
        emit_ms=_require(data, "emit_ms", int),
        latency_ms=_optional(data, "latency_ms", int),
        capture_ms=_optional(data, "capture_ms", int),
        tenant=_optional(data, "tenant", str) or "default",
    )


def parse_event(value: bytes | None) -> Event | None:
    """An ``event/1`` record value as an ``Event``, or ``None`` for types this app ignores.

    Session events (``session_started`` / ``session_ended``) must name their call and channel;
    other known types and types newer than this app are returned as ``None`` (read, unused).

    Raises:
        RecordRejectedError: the value is not a usable ``event/1`` record.
    """
    data = _load_object(value)
    _check_schema(data, EVENT_SCHEMA)
    kind = _require(data, "type", str)
    try:
        event_type = EventType(kind)
    except ValueError:
        return None
    if event_type not in CALL_EVENT_TYPES:
        return None
    detail = _optional(data, "detail", dict) or {}
    return Event(
        type=event_type,
        emit_ms=_require(data, "emit_ms", int),
        source=_require(data, "source", str),
        call_id=_non_empty(data, "call_id"),
        channel=_non_empty(data, "channel"),
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
