"""What the worker stages for its next commit, by kind: events, dead letters, finals, checkpoints.

Pure. Everything here goes into the ``Outbox``, which the committer publishes in one Kafka
transaction with the consumer offsets (``pipeline.worker.committer``). The topics, the worker's
id and its clock are bound once, so the parts of the worker stage by what a record *is*.

``commit_soon`` is raised by what should not wait for the commit interval: a final, a dead
letter, an ended session (their readers wait on them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.asr.session import SessionKey
from pipeline.clock import Clock
from pipeline.contracts.audio_chunk import RejectReason
from pipeline.contracts.messages import DeadLetterInfo, Event, EventType, Final, to_dict, to_json
from pipeline.topics import TopicRole
from pipeline.worker.checkpoint import (
    PARTITION_KEY,
    PartitionCheckpoint,
    SessionCheckpoint,
    encode_key,
)
from pipeline.worker.dead_letter import DEAD_LETTER_MAX_VALUE_BYTES, fit_dead_letter
from pipeline.worker.intake import ChunkRecord
from pipeline.worker.outbox import Outbox

__all__ = ["Staging"]


class Staging:
    """Stages records into ``outbox`` by kind (owned by the loop's thread)."""

    def __init__(
        self, outbox: Outbox, topics: Mapping[TopicRole, str], worker_id: str, clock: Clock
    ) -> None:
        self.outbox = outbox
        self._topics = topics
        self._worker_id = worker_id
        self._clock = clock
        self.commit_soon = False

    def event(
        self,
        kind: EventType,
        key: SessionKey | None = None,
        detail: dict[str, Any] | None = None,
        *,
        call_id: str | None = None,
    ) -> None:
        """An event of session ``key`` (or of call ``call_id``, or of the worker itself)."""
        event = Event(
            type=kind,
            emit_ms=self._clock.now_ms(),
            source=self._worker_id,
            call_id=key.call_id if key else call_id,
            channel=key.channel if key else None,
            detail=detail or {},
        )
        record_key = (event.call_id or self._worker_id).encode()
        self.outbox.stage(self._topics[TopicRole.EVENTS], key=record_key, value=to_json(event))

    def dead_letter(
        self,
        record: ChunkRecord,
        reason: RejectReason,
        detail: str,
        key: SessionKey | None,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> None:
        """The record on ``audio.dlq`` with its ``headers`` (as read, once: see
        ``pipeline.runtime.kafka.readable_headers``), cut to fit (``fit_dead_letter``), and a
        ``chunk_rejected`` event."""
        info = DeadLetterInfo(
            reason=str(reason),
            detail=detail,
            topic=self._topics[TopicRole.AUDIO_CHUNKS],
            partition=record.partition,
            offset=record.offset,
            worker_id=self._worker_id,
        )
        # Far beyond anything audio.chunks accepts, parts are kept cut rather than a record the
        # transaction cannot carry (its commit would fail, rewind and fail again forever).
        letter = fit_dead_letter(
            record.key, record.value, headers, info.headers(), DEAD_LETTER_MAX_VALUE_BYTES
        )
        self.outbox.stage(
            self._topics[TopicRole.DLQ], key=letter.key, value=letter.value, headers=letter.headers
        )
        self.outbox.count_dead_letter(RejectReason(reason))
        self.event(
            EventType.CHUNK_REJECTED,
            key,
            to_dict(info),
            call_id=None if key else _text_key(record.key),
        )
        self.commit_soon = True

    def final(self, final: Final) -> None:
        self.outbox.stage_final(self._topics[TopicRole.FINALS], final, to_json(final))
        self.commit_soon = True

    def checkpoint(self, partition: int, checkpoint: SessionCheckpoint) -> None:
        """A session's checkpoint, in the checkpoints partition of its audio partition."""
        self.outbox.stage(
            self._topics[TopicRole.CHECKPOINTS],
            key=encode_key(checkpoint.key),
            value=checkpoint.encode(),
            partition=partition,
        )

    def partition_checkpoint(self, partition: int, checkpoint: PartitionCheckpoint) -> None:
        self.outbox.stage(
            self._topics[TopicRole.CHECKPOINTS],
            key=encode_key(PARTITION_KEY),
            value=checkpoint.encode(),
            partition=partition,
        )

    def tombstone(self, partition: int, key: SessionKey) -> None:
        """Delete a session's checkpoint (compaction drops it)."""
        self.outbox.stage(
            self._topics[TopicRole.CHECKPOINTS],
            key=encode_key(key),
            value=None,
            partition=partition,
        )

    def drop_partition_output(self) -> None:
        """Drop everything staged since the last commit except the worker's own events: the
        finals, dead letters, checkpoints and session events of records whose offsets will not
        be committed here (their next owner, or a rewind, handles them again)."""
        worker_key = self._worker_id.encode()
        events = self._topics[TopicRole.EVENTS]
        self.outbox.discard(keep=lambda r: r.topic == events and r.key == worker_key)


def _text_key(key: bytes | None) -> str | None:
    if not key:
        return None
    return key.decode("utf-8", "replace")[:128]
