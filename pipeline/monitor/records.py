"""Reading what the monitor shows: ``partial/1``, ``final/1``, ``event/1`` and ``qa_call/1`` values.

Each ``parse_*`` turns one record value into frozen contract data or raises
``RecordRejectedError`` (``pipeline.contracts.reading``, whose field readers these use) with a
stable reason; the monitor counts and skips such records, it never stops on one. Finals are read
by the shared ``parse_final``; partials, events and QA summaries are read here. Event types the
monitor does not use, or does not know, are returned as ``None``.

``parse_qa_call`` is the inverse of ``pipeline.qa.summary.to_json``: it rebuilds the QA app's own
``CallSummary`` dataclasses, so the monitor shows exactly what the QA app computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.contracts.messages import PARTIAL_SCHEMA, EventType, Final
from pipeline.contracts.reading import (
    RecordRejectedError,
    RecordRejectReason,
    a_list,
    an_object,
    field,
    load_record,
    non_empty,
    non_negative,
    number,
    optional,
    optional_non_negative,
    optional_number,
    parse_final,
)
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


def parse_partial(value: bytes | None) -> PartialUpdate:
    """A ``partial/1`` record value. Raises ``RecordRejectedError`` when it is not one."""
    data = load_record(value, PARTIAL_SCHEMA)
    start_ms, end_ms = non_negative(data, "start_ms"), non_negative(data, "end_ms")
    if end_ms < start_ms:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, "end_ms before start_ms")
    return PartialUpdate(
        call_id=non_empty(data, "call_id"),
        channel=non_empty(data, "channel"),
        tenant=optional(data, "tenant", str) or "default",
        utterance_index=non_negative(data, "utterance_index"),
        revision=non_negative(data, "revision"),
        committed_text=field(data, "committed_text", str),
        tentative_text=field(data, "tentative_text", str),
        start_ms=start_ms,
        end_ms=end_ms,
        emit_ms=field(data, "emit_ms", int),
    )


def parse_event(value: bytes | None) -> MonitorEvent | None:
    """An ``event/1`` record value, or ``None`` for a type the monitor does not use.

    Session events must name their call and channel. Raises ``RecordRejectedError``.
    """
    data = load_record(value, EVENT_SCHEMA)
    kind = field(data, "type", str)
    try:
        event_type = EventType(kind)
    except ValueError:
        return None
    if event_type not in MONITORED_EVENT_TYPES:
        return None
    detail = optional(data, "detail", dict) or {}
    session = event_type is not EventType.CHUNK_REJECTED
    return MonitorEvent(
        type=event_type,
        emit_ms=field(data, "emit_ms", int),
        source=field(data, "source", str),
        call_id=non_empty(data, "call_id") if session else optional(data, "call_id", str),
        channel=non_empty(data, "channel") if session else optional(data, "channel", str),
        tenant=optional(detail, "tenant", str) or None,
        audio_ms=optional_non_negative(detail, "duration_ms"),
        utterances=optional_non_negative(detail, "utterances"),
    )


def _interval(data: Any, where: str) -> Interval:
    item = an_object(data, where)
    return Interval(
        non_negative(item, "start_ms"),
        non_negative(item, "end_ms"),
        non_negative(item, "duration_ms"),
    )


def _channel_stats(data: Any) -> ChannelStats:
    item = an_object(data, "channels[]")
    return ChannelStats(
        channel=non_empty(item, "channel"),
        utterances=non_negative(item, "utterances"),
        words=non_negative(item, "words"),
        talk_ms=non_negative(item, "talk_ms"),
        words_per_minute=optional_number(item, "words_per_minute"),
        first_speech_ms=optional_non_negative(item, "first_speech_ms"),
        last_speech_ms=optional_non_negative(item, "last_speech_ms"),
    )


def _turn(data: Any) -> Turn:
    item = an_object(data, "turns[]")
    ids = tuple(str(uid) for uid in a_list(item, "utterance_ids"))
    return Turn(
        non_empty(item, "speaker"),
        non_negative(item, "start_ms"),
        non_negative(item, "end_ms"),
        ids,
    )


def _monologue(data: Any) -> Monologue | None:
    if data is None:
        return None
    item = an_object(data, "longest_monologue")
    return Monologue(
        speaker=non_empty(item, "speaker"),
        start_ms=non_negative(item, "start_ms"),
        end_ms=non_negative(item, "end_ms"),
        duration_ms=non_negative(item, "duration_ms"),
        utterances=non_negative(item, "utterances"),
    )


def _keyword(data: Any) -> KeywordCount:
    item = an_object(data, "keywords[]")
    by_channel = an_object(item.get("by_channel"), "keywords[].by_channel")
    counts = {str(channel): non_negative(by_channel, channel) for channel in by_channel}
    return KeywordCount(non_empty(item, "keyword"), non_negative(item, "total"), counts)


def _evidence(data: Any) -> Evidence:
    item = an_object(data, "evidence[]")
    return Evidence(
        utterance_id=field(item, "utterance_id", str),
        channel=field(item, "channel", str),
        start_ms=non_negative(item, "start_ms"),
        end_ms=non_negative(item, "end_ms"),
        matched_text=field(item, "matched_text", str),
        phrase=field(item, "phrase", str),
        score=number(item, "score"),
    )


def _rule_result(data: Any) -> RuleResult:
    item = an_object(data, "compliance[]")
    try:
        kind = RuleKind(field(item, "kind", str))
        outcome = Outcome(field(item, "outcome", str))
    except ValueError as error:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, str(error)) from None
    return RuleResult(
        rule_id=non_empty(item, "rule_id"),
        kind=kind,
        outcome=outcome,
        detail=field(item, "detail", str),
        evidence=tuple(_evidence(evidence) for evidence in a_list(item, "evidence")),
        description=field(item, "description", str),
    )


def _transcript_line(data: Any) -> TranscriptLine:
    item = an_object(data, "transcript[]")
    return TranscriptLine(
        utterance_id=field(item, "utterance_id", str),
        speaker=non_empty(item, "speaker"),
        start_ms=non_negative(item, "start_ms"),
        end_ms=non_negative(item, "end_ms"),
        text=field(item, "text", str),
    )


def parse_qa_call(value: bytes | None) -> CallSummary:
    """A ``qa_call/1`` record value as the QA app's ``CallSummary``.

    Raises ``RecordRejectedError`` when it is not one (a tombstone, ``None``, is rejected too:
    the caller decides what a deleted summary means).
    """
    data = load_record(value, QA_CALL_SCHEMA)
    try:
        status = CallStatus(field(data, "status", str))
        reason = data.get("end_reason")
        end_reason = None if reason is None else EndReason(field(data, "end_reason", str))
    except ValueError as error:
        raise RecordRejectedError(RecordRejectReason.INVALID_FIELD, str(error)) from None
    ratio = data.get("silence_ratio")
    return CallSummary(
        call_id=non_empty(data, "call_id"),
        tenant=non_empty(data, "tenant"),
        status=status,
        end_reason=end_reason,
        revision=non_negative(data, "revision"),
        published_ms=optional(data, "published_ms", int),
        duration_ms=non_negative(data, "duration_ms"),
        speech_ms=non_negative(data, "speech_ms"),
        silence_ms=non_negative(data, "silence_ms"),
        silence_ratio=None if ratio is None else number(data, "silence_ratio"),
        overlap_ms=non_negative(data, "overlap_ms"),
        overlaps=tuple(_interval(item, "overlaps[]") for item in a_list(data, "overlaps")),
        longest_gap_ms=non_negative(data, "longest_gap_ms"),
        channels=tuple(_channel_stats(item) for item in a_list(data, "channels")),
        turns=tuple(_turn(item) for item in a_list(data, "turns")),
        longest_monologue=_monologue(data.get("longest_monologue")),
        keywords=tuple(_keyword(item) for item in a_list(data, "keywords")),
        compliance=tuple(_rule_result(item) for item in a_list(data, "compliance")),
        compliance_passed=optional(data, "compliance_passed", bool),
        transcript=tuple(_transcript_line(item) for item in a_list(data, "transcript")),
        utterances=non_negative(data, "utterances"),
        model_ids=tuple(str(model) for model in a_list(data, "model_ids")),
    )
