"""Reading JSON contract records field by field, for every consumer of the output topics.

The QA app, the live monitor and the replay gate read what the ASR workers (and the QA app)
write, and none of them may stop on a record it cannot use. The checks they share live here: a
value must be a JSON object of the expected ``schema``; each field is read with its type
(``bool`` never passes for a number: JSON ``true`` is no count or time); times and counts are
non-negative; identifiers are non-empty. Any failure raises ``RecordRejectedError`` with a stable
``RecordRejectReason``, which consumers count and log before skipping the record.

``parse_final`` reads ``final/1`` (every consumer reads finals the same way); each consumer
reads ``event/1`` into its own view, from the same field readers.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import orjson

from pipeline.contracts.messages import (
    FINAL_SCHEMA,
    EndpointReason,
    EntityType,
    Final,
    Redaction,
    Word,
    utterance_id,
)
from pipeline.errors import ContractError

__all__ = [
    "RecordRejectReason",
    "RecordRejectedError",
    "a_list",
    "an_object",
    "field",
    "load_record",
    "non_empty",
    "non_negative",
    "number",
    "optional",
    "optional_non_negative",
    "optional_number",
    "parse_final",
]


class RecordRejectReason(enum.StrEnum):
    """Why an input record was skipped (a label of the consumers' rejection metrics)."""

    NOT_JSON = "not_json"
    """Empty, not UTF-8 JSON, or JSON that is not an object."""
    UNKNOWN_SCHEMA = "unknown_schema"
    """``schema`` missing or not a version this consumer reads."""
    MISSING_FIELD = "missing_field"
    INVALID_FIELD = "invalid_field"
    """A field of the wrong type or out of range, or fields that contradict each other."""
    PROCESSING_ERROR = "processing_error"
    """A valid-looking record whose processing raised an unexpected error (a bug: see the log)."""


class RecordRejectedError(ContractError):
    """A record a consumer cannot use; ``reason`` is a ``RecordRejectReason``."""

    def __init__(self, reason: RecordRejectReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


def load_record(value: bytes | None, schema: str) -> dict[str, Any]:
    """The record value as a JSON object whose ``schema`` field is ``schema``."""
    if not value:
        raise RecordRejectedError(RecordRejectReason.NOT_JSON, "empty record value")
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as error:
        raise RecordRejectedError(RecordRejectReason.NOT_JSON, str(error)) from None
    if not isinstance(data, dict):
        raise RecordRejectedError(RecordRejectReason.NOT_JSON, "JSON value is not an object")
    if data.get("schema") != schema:
        raise RecordRejectedError(
            RecordRejectReason.UNKNOWN_SCHEMA, f"schema {data.get('schema')!r}, want {schema!r}"
        )
    return data


def field(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """``data[name]``, which must be present and an instance of ``kind`` (a bool only when
    ``kind`` names ``bool``)."""
    if name not in data:
        raise RecordRejectedError(RecordRejectReason.MISSING_FIELD, f"no field {name!r}")
    value = data[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise RecordRejectedError(
            RecordRejectReason.INVALID_FIELD, f"{name!r} = {value!r} is not {_names(kinds)}"
        )
    return value


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join(kind.__name__ for kind in kinds)


def optional(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """``field`` when present and not null, else ``None``."""
    if data.get(name) is None:
        return None
    return field(data, name, kind)


def non_negative(data: Mapping[str, Any], name: str) -> int:
    """An integer field ≥ 0 (a time in ms, a count, an index)."""
    value: int = field(data, name, int)
    if value < 0:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, f"{name!r} is negative")
    return value


def optional_non_negative(data: Mapping[str, Any], name: str) -> int | None:
    return None if data.get(name) is None else non_negative(data, name)


def non_empty(data: Mapping[str, Any], name: str) -> str:
    """A non-empty string field (an identifier)."""
    value: str = field(data, name, str)
    if not value:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, f"{name!r} is empty")
    return value


def number(data: Mapping[str, Any], name: str) -> float:
    return float(field(data, name, (int, float)))


def optional_number(data: Mapping[str, Any], name: str) -> float | None:
    return None if data.get(name) is None else number(data, name)


def a_list(data: Mapping[str, Any], name: str) -> list[Any]:
    value: list[Any] = field(data, name, list)
    return value


def an_object(value: Any, where: str) -> Mapping[str, Any]:
    """``value`` (an element of a list, say) as an object; ``where`` names it in the error."""
    if not isinstance(value, dict):
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, f"{where} is not an object")
    return value


def _parse_word(data: Any) -> Word:
    item = an_object(data, "a word")
    start_ms = non_negative(item, "start_ms")
    end_ms = non_negative(item, "end_ms")
    probability = number(item, "probability")
    if end_ms < start_ms or not 0.0 <= probability <= 1.0:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, f"bad word timing {data!r}")
    return Word(field(item, "word", str), start_ms, end_ms, probability)


def _parse_redaction(data: Any) -> Redaction:
    item = an_object(data, "a redaction")
    start_ms = non_negative(item, "start_ms")
    end_ms = non_negative(item, "end_ms")
    entity = field(item, "entity", str)
    if end_ms < start_ms or entity not in _ENTITIES:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, f"bad redaction {data!r}")
    return Redaction(EntityType(entity), start_ms, end_ms)


_ENTITIES = frozenset(entity.value for entity in EntityType)


def parse_final(value: bytes | None) -> Final:
    """A ``final/1`` record value as a ``Final``.

    Checks what consumers rely on: types, ``end_ms >= start_ms``, word spans, the endpoint
    reason, the optional ``redactions`` (entity and span), and that ``utterance_id`` is
    ``{call_id}:{channel}:{utterance_index}`` (duplicates are recognized by it). Unknown extra
    fields are ignored.

    Raises:
        RecordRejectedError: the value is not a usable ``final/1`` record.
    """
    data = load_record(value, FINAL_SCHEMA)
    call_id = non_empty(data, "call_id")
    channel = non_empty(data, "channel")
    index = non_negative(data, "utterance_index")
    given_id = field(data, "utterance_id", str)
    if given_id != utterance_id(call_id, channel, index):
        raise RecordRejectedError(
            RecordRejectReason.INVALID_FIELD,
            f"utterance_id {given_id!r} does not match call, channel and index",
        )
    start_ms = non_negative(data, "start_ms")
    end_ms = non_negative(data, "end_ms")
    if end_ms < start_ms:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, "end_ms before start_ms")
    words = a_list(data, "words")
    reason = field(data, "endpoint_reason", str)
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
        text=field(data, "text", str),
        words=tuple(_parse_word(word) for word in words),
        start_ms=start_ms,
        end_ms=end_ms,
        endpoint_reason=endpoint_reason,
        model_id=field(data, "model_id", str),
        emit_ms=field(data, "emit_ms", int),
        latency_ms=optional(data, "latency_ms", int),
        capture_ms=optional(data, "capture_ms", int),
        tenant=optional(data, "tenant", str) or "default",
        redactions=tuple(
            _parse_redaction(item) for item in (optional(data, "redactions", list) or ())
        ),
    )
