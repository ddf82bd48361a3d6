"""A record of ``audio.chunks`` in: admitted, a duplicate, rejected or skipped. Shared with replay.

Pure. The worker and ``streamscribe replay`` read the same records and must take the same
decision for each, so the decision lives here once: ``admit`` validates a record
(``decode_chunk``), asks the ``Admission`` (sequence numbers, ended calls, limits), and says
what happened. What the caller does with the outcome is its own: the worker dead-letters a
``Rejected`` record (unless ``quiet``) and feeds an ``Admitted`` chunk to its engine
(``feed_chunk``); replay counts both.

Records an earlier owner already handled. A worker that takes a partition over replays it from
the committed offset (``pipeline.worker.checkpoint``); ``History`` says what its checkpoints
told about those records, and ``admit`` then repeats nothing (decision
``docs/decisions/0008-replay-repeats-nothing.md``):

- a record at or below the partition's ``handled_through`` is *replayed*: its outcome is
  ``quiet`` (no dead letter, no event, no count, published by the earlier owner already);
- a record covered by its session's restored snapshot (``skip_through``) is ``Skipped``;
- a replayed record of a call that is neither checkpointed nor remembered is ``Skipped``: the
  earlier owner refused that call (an admitted session is checkpointed at the commit that moves
  past its first record), and this worker must not transcribe it unannounced;
- the session limit is waived for calls an earlier owner admitted.

Replay reads a range from its start with no earlier owner (``FIRST_READ``): nothing is quiet,
nothing is skipped.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from pipeline.asr.session import SessionKey
from pipeline.contracts.audio_chunk import AudioChunk, RejectReason, decode_chunk
from pipeline.errors import ChunkRejectedError
from pipeline.worker.admission import Admission, Verdict

__all__ = [
    "FIRST_READ",
    "Admitted",
    "ChunkRecord",
    "ChunkSink",
    "Duplicate",
    "History",
    "Intake",
    "Rejected",
    "SkipReason",
    "Skipped",
    "admit",
    "feed_chunk",
]

UNREADABLE_HEADERS_DETAIL = "a header name is not UTF-8 text: the record's headers cannot be read"


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """One record of ``audio.chunks`` as read from Kafka (the value is not copied);
    ``headers_unreadable``: the client could not read its headers (a name not UTF-8,
    ``pipeline.runtime.kafka.readable_headers``)."""

    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] | None = None
    headers_unreadable: bool = False


@dataclass(frozen=True, slots=True)
class Admitted:
    """The chunk goes into its session; ``gap``: sequence numbers ``[first, end)`` skipped
    before it; ``new_session``: the first chunk of the session (``session_started``)."""

    key: SessionKey
    chunk: AudioChunk
    new_session: bool
    gap: tuple[int, int] | None
    quiet: bool


@dataclass(frozen=True, slots=True)
class Duplicate:
    """A sequence number the session has had (a producer retry): dropped, counted."""

    key: SessionKey
    chunk: AudioChunk
    quiet: bool


@dataclass(frozen=True, slots=True)
class Rejected:
    """The record is refused (the worker dead-letters it); ``key`` is None when the record
    could not be read far enough to name its session (then ``chunk`` is None too)."""

    reason: RejectReason
    detail: str
    key: SessionKey | None
    chunk: AudioChunk | None
    quiet: bool


class SkipReason(enum.StrEnum):
    """Why a record is passed over without a decision or any output."""

    SNAPSHOT = "snapshot"
    """Covered by the session's restored snapshot."""
    REFUSED_BEFORE = "refused_before"
    """Replayed, of a call an earlier owner refused."""


@dataclass(frozen=True, slots=True)
class Skipped:
    """Passed over: no output, no count, no state changed."""

    reason: SkipReason
    key: SessionKey


Intake = Admitted | Duplicate | Rejected | Skipped


class History(Protocol):
    """What the checkpoints of earlier owners say about a partition's records."""

    def handled_through(self, partition: int) -> int:
        """The partition's records up to this offset were handled already (-1: none)."""
        ...

    def skip_through(self, partition: int, key: SessionKey) -> int | None:
        """The session's records up to this offset are in its restored snapshot (-1: none);
        None when the session is not known (neither restored nor admitted)."""
        ...


class _FirstRead:
    def handled_through(self, partition: int) -> int:
        return -1

    def skip_through(self, partition: int, key: SessionKey) -> int | None:
        return None


FIRST_READ: History = _FirstRead()
"""No earlier owner: every record is new (replay)."""


def admit(
    record: ChunkRecord,
    admission: Admission,
    *,
    max_chunk_bytes: int,
    history: History = FIRST_READ,
) -> Intake:
    """Decide one record (in offset order within its partition). Advances ``admission`` only
    for an ``Admitted`` chunk; see the module docstring for ``history``."""
    replaying = record.offset <= history.handled_through(record.partition)
    if record.headers_unreadable:  # before anything else is read
        reason, detail = RejectReason.UNREADABLE_HEADERS, UNREADABLE_HEADERS_DETAIL
        return Rejected(reason, detail, None, None, replaying)
    try:
        chunk = decode_chunk(
            record.key, record.value, record.headers, max_payload_bytes=max_chunk_bytes
        )
    except ChunkRejectedError as rejected:
        return Rejected(RejectReason(rejected.reason), rejected.detail, None, None, replaying)
    key = SessionKey(chunk.call_id, chunk.channel)
    skip_through = history.skip_through(record.partition, key)
    known = skip_through is not None
    if skip_through is not None and record.offset <= skip_through:
        return Skipped(SkipReason.SNAPSHOT, key)
    if replaying and not known and admission.state(key) is None:
        return Skipped(SkipReason.REFUSED_BEFORE, key)
    decision = admission.decide(
        key,
        chunk.seq,
        chunk.duration_ms,
        chunk.end_of_stream,
        replaying=replaying and known,
    )
    if decision.verdict is Verdict.DUPLICATE:
        return Duplicate(key, chunk, replaying)
    if decision.verdict is Verdict.REJECT:
        assert decision.reason is not None
        return Rejected(decision.reason, decision.detail, key, chunk, replaying)
    return Admitted(key, chunk, decision.new_session, decision.gap, replaying)


class ChunkSink(Protocol):
    """What takes audio chunks: ``pipeline.asr.engine.StreamingEngine.accept``."""

    def accept(
        self,
        key: SessionKey,
        samples: npt.NDArray[np.float32],
        sample_rate_hz: int,
        *,
        tenant: str = "default",
        capture_ms: int | None = None,
        position: int | None = None,
        flush: bool = False,
        end_of_stream: bool = False,
    ) -> None: ...


def feed_chunk(engine: ChunkSink, key: SessionKey, chunk: AudioChunk, position: int) -> None:
    """Give an admitted ``chunk`` of session ``key`` to ``engine``; ``position`` is its record's
    offset (what a snapshot reports as covered)."""
    engine.accept(
        key,
        chunk.samples_float32(),
        chunk.sample_rate_hz,
        tenant=chunk.tenant,
        capture_ms=chunk.capture_ms,
        position=position,
        flush=chunk.flush,
        end_of_stream=chunk.end_of_stream,
    )
