"""Reading what the monitor shows: ``partial/1``, ``final/1``, ``event/1`` and ``qa_call/1`` values.

Each ``parse_*`` turns one record value into frozen contract data or raises
``RecordRejectedError`` (``pipeline.qa.records``) with a stable reason; the monitor counts and
skips such records, it never stops on one. Finals are read by the QA app's ``parse_final`` (same
checks); partials, events and QA summaries are read here. Event types the monitor does not use,
or does not know, are returned as ``None``.

``parse_qa_call`` is the inverse of ``pipeline.qa.summary.to_json``: it rebuilds the QA app's own
``CallSummary`` dataclasses, so the monitor shows exactly what the QA app computed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.contracts.messages import PARTIAL_SCHEMA, EventType, Final
from pipeline.qa.records import RecordRejectedError, RecordRejectReason, parse_final
from pipeline.qa.rules import Evidence, Outcome, RuleKind, RuleResult
from pipeline.qa.summary import (
    QA_CALL_SCHEMA,
    CallStatus,
    CallSummary,
    ChannelStats,
    EndReason,
    Interval,
    KeywordCount,
    Monologue,
    TranscriptLine,
    Turn,
)

__all__ = [
    "MONITORED_EVENT_TYPES",
    "MonitorEvent",
    "MonitorRecord",
    "PartialUpdate",
    "parse_event",
    "parse_final",
    "parse_partial",
    "parse_qa_call",
]

EVENT_SCHEMA = "event/1"

MONITORED_EVENT_TYPES = frozenset(
    {EventType.SESSION_STARTED, EventType.SESSION_ENDED, EventType.CHUNK_REJECTED}
)
"""Event types the monitor reads: session lifecycle (live / ended) and dead letters (DLQ rate)."""


@dataclass(frozen=True, slots=True)
class PartialUpdate:
    """One ``partial/1`` record: the newest view of an open utterance of a channel."""

    call_id: str
    channel: str
    tenant: str
    utterance_index: int
    revision: int
    committed_text: str
    tentative_text: str
    start_ms: int
    end_ms: int
    emit_ms: int


@dataclass(frozen=True, slots=True)
class MonitorEvent:
    """The fields of an ``event/1`` record the monitor uses.

    ``tenant``, ``audio_ms`` and ``utterances`` come from ``detail`` (session events carry them;
    ``None`` when absent). ``call_id``/``channel`` may be ``None`` only for ``chunk_rejected``.
    """

    type: EventType
    emit_ms: int
    source: str
    call_id: str | None
    channel: str | None
    tenant: str | None = None
    audio_ms: int | None = None
    utterances: int | None = None


MonitorRecord = PartialUpdate | Final | MonitorEvent | CallSummary
"""Everything the store applies."""


def _load(value: bytes | None, schema: str) -> dict[str, Any]:
    if not value:
        raise RecordRejectedError(RecordRejectReason.NOT_JSON, "empty record value")
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as error:
        raise RecordRejectedError(RecordRejectReason.NOT_JSON, str(error)) from None
    if not isinstance(data, dict):
        raise RecordRejectedError(RecordRejectReason.NOT_JSON, "the value is not a JSON object")
    if data.get("schema") != schema:
        raise RecordRejectedError(
            RecordRejectReason.UNKNOWN_SCHEMA, f"schema {data.get('schema')!r}, want {schema!r}"
        )
    return data


def _field(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in data:
        raise RecordRejectedError(RecordRejectReason.MISSING_FIELD, f"no {name!r}")
    value = data[name]
    # bool is an int in Python; no field of these contracts accepts a bool where it wants a number.
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _kinds(kind)):
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, f"{name!r} = {value!r}")
    return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _optional(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    if data.get(name) is None:
        return None
    return _field(data, name, kind)


def _ms(data: Mapping[str, Any], name: str) -> int:
    value: int = _field(data, name, int)
    if value < 0:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, f"{name!r} < 0")
    return value


def _optional_ms(data: Mapping[str, Any], name: str) -> int | None:
    return None if data.get(name) is None else _ms(data, name)


def _text(data: Mapping[str, Any], name: str) -> str:
    value: str = _field(data, name, str)
    if not value:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, f"{name!r} is empty")
    return value


def _number(data: Mapping[str, Any], name: str) -> float:
    return float(_field(data, name, (int, float)))


def _list(data: Mapping[str, Any], name: str) -> list[Any]:
    value: list[Any] = _field(data, name, list)
    return value


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, f"{where} is not an object")
    return value


def parse_partial(value: bytes | None) -> PartialUpdate:
    """A ``partial/1`` record value. Raises ``RecordRejectedError`` when it is not one."""
    data = _load(value, PARTIAL_SCHEMA)
    start_ms, end_ms = _ms(data, "start_ms"), _ms(data, "end_ms")
    if end_ms < start_ms:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, "end_ms before start_ms")
    return PartialUpdate(
        call_id=_text(data, "call_id"),
        channel=_text(data, "channel"),
        tenant=_optional(data, "tenant", str) or "default",
        utterance_index=_ms(data, "utterance_index"),
        revision=_ms(data, "revision"),
        committed_text=_field(data, "committed_text", str),
        tentative_text=_field(data, "tentative_text", str),
        start_ms=start_ms,
        end_ms=end_ms,
        emit_ms=_field(data, "emit_ms", int),
    )


def parse_event(value: bytes | None) -> MonitorEvent | None:
    """An ``event/1`` record value, or ``None`` for a type the monitor does not use.

    Session events must name their call and channel. Raises ``RecordRejectedError``.
    """
    data = _load(value, EVENT_SCHEMA)
    kind = _field(data, "type", str)
    try:
        event_type = EventType(kind)
    except ValueError:
        return None
    if event_type not in MONITORED_EVENT_TYPES:
        return None
    detail = _optional(data, "detail", dict) or {}
    session = event_type is not EventType.CHUNK_REJECTED
    return MonitorEvent(
        type=event_type,
        emit_ms=_field(data, "emit_ms", int),
        source=_field(data, "source", str),
        call_id=_text(data, "call_id") if session else _optional(data, "call_id", str),
        channel=_text(data, "channel") if session else _optional(data, "channel", str),
        tenant=_optional(detail, "tenant", str) or None,
        audio_ms=_optional_ms(detail, "duration_ms"),
        utterances=_optional_ms(detail, "utterances"),
    )


def _interval(data: Any, where: str) -> Interval:
    item = _object(data, where)
    return Interval(_ms(item, "start_ms"), _ms(item, "end_ms"), _ms(item, "duration_ms"))


def _channel_stats(data: Any) -> ChannelStats:
    item = _object(data, "channels[]")
    return ChannelStats(
        channel=_text(item, "channel"),
        utterances=_ms(item, "utterances"),
        words=_ms(item, "words"),
        talk_ms=_ms(item, "talk_ms"),
        words_per_minute=_number(item, "words_per_minute"),
        first_speech_ms=_optional_ms(item, "first_speech_ms"),
        last_speech_ms=_optional_ms(item, "last_speech_ms"),
    )


def _turn(data: Any) -> Turn:
    item = _object(data, "turns[]")
    ids = tuple(str(uid) for uid in _list(item, "utterance_ids"))
    return Turn(_text(item, "speaker"), _ms(item, "start_ms"), _ms(item, "end_ms"), ids)


def _monologue(data: Any) -> Monologue | None:
    if data is None:
        return None
    item = _object(data, "longest_monologue")
    return Monologue(
        speaker=_text(item, "speaker"),
        start_ms=_ms(item, "start_ms"),
        end_ms=_ms(item, "end_ms"),
        duration_ms=_ms(item, "duration_ms"),
        utterances=_ms(item, "utterances"),
    )


def _keyword(data: Any) -> KeywordCount:
    item = _object(data, "keywords[]")
    by_channel = _object(item.get("by_channel"), "keywords[].by_channel")
    counts = {str(channel): _ms(by_channel, channel) for channel in by_channel}
    return KeywordCount(_text(item, "keyword"), _ms(item, "total"), counts)


def _evidence(data: Any) -> Evidence:
    item = _object(data, "evidence[]")
    return Evidence(
        utterance_id=_field(item, "utterance_id", str),
        channel=_field(item, "channel", str),
        start_ms=_ms(item, "start_ms"),
        end_ms=_ms(item, "end_ms"),
        matched_text=_field(item, "matched_text", str),
        phrase=_field(item, "phrase", str),
        score=_number(item, "score"),
    )


def _rule_result(data: Any) -> RuleResult:
    item = _object(data, "compliance[]")
    try:
        kind = RuleKind(_field(item, "kind", str))
        outcome = Outcome(_field(item, "outcome", str))
    except ValueError as error:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, str(error)) from None
    return RuleResult(
        rule_id=_text(item, "rule_id"),
        kind=kind,
        outcome=outcome,
        detail=_field(item, "detail", str),
        evidence=tuple(_evidence(evidence) for evidence in _list(item, "evidence")),
        description=_field(item, "description", str),
    )


def _transcript_line(data: Any) -> TranscriptLine:
    item = _object(data, "transcript[]")
    return TranscriptLine(
        utterance_id=_field(item, "utterance_id", str),
        speaker=_text(item, "speaker"),
        start_ms=_ms(item, "start_ms"),
        end_ms=_ms(item, "end_ms"),
        text=_field(item, "text", str),
    )


def parse_qa_call(value: bytes | None) -> CallSummary:
    """A ``qa_call/1`` record value as the QA app's ``CallSummary``.

    Raises ``RecordRejectedError`` when it is not one (a tombstone, ``None``, is rejected too:
    the caller decides what a deleted summary means).
    """
    data = _load(value, QA_CALL_SCHEMA)
    try:
        status = CallStatus(_field(data, "status", str))
        reason = data.get("end_reason")
        end_reason = None if reason is None else EndReason(_field(data, "end_reason", str))
    except ValueError as error:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, str(error)) from None
    ratio = data.get("silence_ratio")
    return CallSummary(
        call_id=_text(data, "call_id"),
        tenant=_text(data, "tenant"),
        status=status,
        end_reason=end_reason,
        revision=_ms(data, "revision"),
        published_ms=_optional(data, "published_ms", int),
        duration_ms=_ms(data, "duration_ms"),
        speech_ms=_ms(data, "speech_ms"),
        silence_ms=_ms(data, "silence_ms"),
        silence_ratio=None if ratio is None else _number(data, "silence_ratio"),
        overlap_ms=_ms(data, "overlap_ms"),
        overlaps=tuple(_interval(item, "overlaps[]") for item in _list(data, "overlaps")),
        longest_gap_ms=_ms(data, "longest_gap_ms"),
        channels=tuple(_channel_stats(item) for item in _list(data, "channels")),
        turns=tuple(_turn(item) for item in _list(data, "turns")),
        longest_monologue=_monologue(data.get("longest_monologue")),
        keywords=tuple(_keyword(item) for item in _list(data, "keywords")),
        compliance=tuple(_rule_result(item) for item in _list(data, "compliance")),
        compliance_passed=_optional(data, "compliance_passed", bool),
        transcript=tuple(_transcript_line(item) for item in _list(data, "transcript")),
        utterances=_ms(data, "utterances"),
        model_ids=tuple(str(model) for model in _list(data, "model_ids")),
    )
