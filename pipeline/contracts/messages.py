"""Output records: partials, finals, events and dead-letter reasons (JSON via orjson).

Every record carries ``schema`` (``"<kind>/<version>"``) and is described by a JSON Schema file in
``schemas/`` that tests validate real output against. Records are keyed by call id. ``to_json``
is deterministic (sorted keys, no wall-clock fields added) so replays can be compared byte for byte
once ``emit_ms`` is excluded or fixed.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

__all__ = [
    "DeadLetterInfo",
    "EndpointReason",
    "EntityType",
    "Event",
    "EventType",
    "Final",
    "Partial",
    "Redaction",
    "Word",
    "to_json",
    "utterance_id",
    "utterance_id_parts",
]

PARTIAL_SCHEMA = "partial/1"
FINAL_SCHEMA = "final/1"
EVENT_SCHEMA = "event/1"
DEAD_LETTER_SCHEMA = "dead_letter/1"


class EndpointReason(enum.StrEnum):
    """Why an utterance ended."""

    SILENCE = "silence"
    MAX_LENGTH = "max_length"
    END_OF_STREAM = "end_of_stream"
    FORCED = "forced"


class EntityType(enum.StrEnum):
    """Kinds of protected values a final's ``redactions`` name (``pipeline.redaction``); the
    text and the words carry ``tag`` in place of the value."""

    CARD_NUMBER = "card_number"
    CVV = "cvv"
    EXPIRY = "expiry"
    SSN = "ssn"
    BANK_ACCOUNT = "bank_account"
    ROUTING_NUMBER = "routing_number"
    PHONE = "phone"
    EMAIL = "email"
    DATE_OF_BIRTH = "date_of_birth"

    @property
    def tag(self) -> str:
        """What replaces the value in the text and the words: ``[CARD_NUMBER]``, …"""
        return f"[{self.value.upper()}]"


class EventType(enum.StrEnum):
    """Kinds of records on ``asr.events``."""

    WORKER_STARTED = "worker_started"
    WORKER_STOPPED = "worker_stopped"
    MODEL_LOADED = "model_loaded"
    PARTITIONS_ASSIGNED = "partitions_assigned"
    PARTITIONS_REVOKED = "partitions_revoked"
    PARTITIONS_LOST = "partitions_lost"
    RESTORE_DISAGREED = "restore_disagreed"
    VAD_CHANGED = "vad_changed"
    SESSION_STARTED = "session_started"
    SESSION_ENDED = "session_ended"
    CHUNK_REJECTED = "chunk_rejected"
    RECORD_REJECTED = "record_rejected"
    SEQUENCE_GAP = "sequence_gap"
    BACKPRESSURE = "backpressure"
    PARTIALS_THINNED = "partials_thinned"
    HALLUCINATION_SUPPRESSED = "hallucination_suppressed"
    HOTWORDS_UPDATED = "hotwords_updated"
    DEPENDENCY_DOWN = "dependency_down"
    DEPENDENCY_UP = "dependency_up"
    INGRESS_CALL_STARTED = "ingress_call_started"
    DTMF_RECEIVED = "dtmf_received"


def utterance_id(call_id: str, channel: str, utterance_index: int) -> str:
    """The deterministic id of an utterance: ``{call}:{channel}:{index}``."""
    return f"{call_id}:{channel}:{utterance_index}"


def utterance_id_parts(uid: str) -> tuple[str, str, str]:
    """``utterance_id`` read back: ``(call id, channel, index as written)``. Call ids may hold
    colons, channel labels do not. A malformed id gives what it has: no colon is all call id,
    one colon is call id and index (channel ``""``)."""
    parts = uid.rsplit(":", 2)
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return parts[0], "", parts[1] if len(parts) == 2 else ""


@dataclass(frozen=True, slots=True)
class Word:
    """A recognized word with its audio span (ms from call start) and mean token probability."""

    word: str
    start_ms: int
    end_ms: int
    probability: float


@dataclass(frozen=True, slots=True)
class Redaction:
    """A protected value taken out of a final: what it was and where it was spoken (ms from
    call start, from the words it replaced), so a recorder can mute the same span. The value
    itself is never kept anywhere."""

    entity: EntityType
    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class Partial:
    """A live, revisable view of an open utterance (may repeat after a failover).

    ``committed_text`` only grows within an utterance; ``tentative_text`` may change freely.
    ``start_ms``/``end_ms`` are the audio span from the call's first sample; ``capture_ms`` is the
    capture time (epoch ms) of the newest audio covered, when producers send it.
    """

    call_id: str
    channel: str
    utterance_index: int
    revision: int
    committed_text: str
    tentative_text: str
    start_ms: int
    end_ms: int
    model_id: str
    emit_ms: int
    capture_ms: int | None = None
    tenant: str = "default"
    schema: str = PARTIAL_SCHEMA


@dataclass(frozen=True, slots=True)
class Final:
    """The one record of a finished utterance (exactly once for ``read_committed`` readers)."""

    call_id: str
    channel: str
    utterance_index: int
    utterance_id: str
    text: str
    words: tuple[Word, ...]
    start_ms: int
    end_ms: int
    endpoint_reason: EndpointReason
    model_id: str
    emit_ms: int
    latency_ms: int | None = None
    capture_ms: int | None = None
    tenant: str = "default"
    redactions: tuple[Redaction, ...] = ()
    """The values taken out under the tenant's redaction policy, in word order; empty (and
    left out of the JSON, so a final without any reads as before) when nothing was."""
    schema: str = FINAL_SCHEMA


@dataclass(frozen=True, slots=True)
class DeadLetterInfo:
    """Why and where a record was dead-lettered; also the ``dlq-*`` headers of the DLQ record."""

    reason: str
    detail: str
    topic: str
    partition: int
    offset: int
    worker_id: str
    schema: str = DEAD_LETTER_SCHEMA

    def headers(self) -> list[tuple[str, bytes]]:
        """The ``dlq-*`` headers appended to the original record's headers."""
        return [
            ("dlq-reason", self.reason.encode()),
            ("dlq-detail", self.detail.encode("utf-8", "replace")),
            ("dlq-topic", self.topic.encode()),
            ("dlq-partition", str(self.partition).encode()),
            ("dlq-offset", str(self.offset).encode()),
            ("dlq-worker", self.worker_id.encode()),
        ]


@dataclass(frozen=True, slots=True)
class Event:
    """A lifecycle or log record on ``asr.events``; ``detail`` is type-specific, JSON-safe."""

    type: EventType
    emit_ms: int
    source: str
    call_id: str | None = None
    channel: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    schema: str = EVENT_SCHEMA


def to_dict(record: Partial | Final | Event | DeadLetterInfo) -> dict[str, Any]:
    """The record as plain JSON-ready data (enums as their string values). A final's empty
    ``redactions`` is left out: ``final/1`` readers that predate the field (and validators
    with ``additionalProperties: false``) see such a final exactly as before."""
    data = asdict(record)
    if isinstance(record, Final) and not record.redactions:
        del data["redactions"]
    return data


def to_json(record: Partial | Final | Event | DeadLetterInfo) -> bytes:
    """The record as compact UTF-8 JSON with sorted keys (deterministic)."""
    return orjson.dumps(to_dict(record), option=orjson.OPT_SORT_KEYS)
