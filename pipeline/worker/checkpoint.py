"""Checkpoint records on ``asr.checkpoints``: the small progress that makes replays exact.

Heavy state (utterance audio, decoder caches) is never written: after a crash or a rebalance the
new owner replays the partition from its committed *low watermark*. Checkpoints say how to replay:

- per session (key ``["call", "channel"]`` as JSON): a quiescent ``SessionSnapshot`` with the
  admission state at that point (replay resumes from there, skipping records up to its
  ``last_position``), ``finals_through`` and ``finals_end_ms`` (utterances already finalized,
  and where the last of them ends: a replay skips by that position, not emitted again), the
  VAD that segmented the audio (``vad_id``),
  ``finals_published`` / ``finals_suppressed`` (how many of them were published as finals, and
  how many a guard suppressed: the counts ``session_ended`` reports) and whether the session
  ended;
- per partition (key ``["", "__partition__"]``): ``handled_through``, the newest offset whose side
  effects (dead letters, events) were committed (a replay does not repeat them), and the
  consumer offset committed with it.

A checkpoint for audio partition *p* goes to checkpoint partition *p* (the topics have the same
partition count), written in the same transaction as the finals and offsets it agrees with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from pipeline.asr.session import SessionKey, SessionSnapshot
from pipeline.worker.admission import AdmissionState

__all__ = [
    "PARTITION_KEY",
    "PartitionCheckpoint",
    "SessionCheckpoint",
    "decode_checkpoint",
    "encode_key",
]

CHECKPOINT_SCHEMA = "checkpoint/1"
PARTITION_KEY = SessionKey("", "__partition__")


def encode_key(key: SessionKey) -> bytes:
    """The record key of a session's checkpoint (unambiguous for any call id)."""
    return orjson.dumps([key.call_id, key.channel])


@dataclass(frozen=True, slots=True)
class SessionCheckpoint:
    """Progress of one session; ``snapshot`` None means replay it from its first record."""

    key: SessionKey
    snapshot: SessionSnapshot | None
    admission: AdmissionState | None
    finals_through: int
    ended: bool
    # Absent (None) in checkpoints written before they were introduced.
    finals_published: int | None = None
    finals_suppressed: int | None = None
    # Where the audio of utterance ``finals_through`` ends (ms of the call): a replay skips the
    # utterances that end there or before, by position (None: by index, as before it existed).
    finals_end_ms: int | None = None
    # The VAD that segmented the audio so far (model and device), which a replay on another
    # may segment a little differently (``pipeline.asr.vad``); None before it was recorded.
    vad_id: str | None = None

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "schema": CHECKPOINT_SCHEMA,
                "call_id": self.key.call_id,
                "channel": self.key.channel,
                "snapshot": self.snapshot.to_dict() if self.snapshot else None,
                "admission": self.admission.to_dict() if self.admission else None,
                "finals_through": self.finals_through,
                "finals_published": self.finals_published,
                "finals_suppressed": self.finals_suppressed,
                "finals_end_ms": self.finals_end_ms,
                "vad_id": self.vad_id,
                "ended": self.ended,
            }
        )


@dataclass(frozen=True, slots=True)
class PartitionCheckpoint:
    """Side effects up to ``handled_through`` (inclusive) are committed; ``committed_offset``
    is the consumer offset committed in the same transaction (None: none yet, or written before
    it was recorded). A restore whose group offset differs from it has read the checkpoints of
    another transaction than the offsets' (``pipeline.runtime.recovery``)."""

    handled_through: int
    committed_offset: int | None = None

    def encode(self) -> bytes:
        return orjson.dumps(
            {
                "schema": CHECKPOINT_SCHEMA,
                "handled_through": self.handled_through,
                "committed_offset": self.committed_offset,
            }
        )


def decode_checkpoint(key: bytes, value: bytes) -> SessionCheckpoint | PartitionCheckpoint:
    """Parse a checkpoint record. Raises ValueError (incl. orjson's) on a malformed one: a
    missing field or a value of the wrong shape anywhere in it, the snapshot included."""
    try:
        return _decode(key, value)
    except (KeyError, TypeError, IndexError, AttributeError) as error:
        raise ValueError(f"malformed checkpoint: {error!r}") from None


def _decode(key: bytes, value: bytes) -> SessionCheckpoint | PartitionCheckpoint:
    call_id, channel = orjson.loads(key)
    data: dict[str, Any] = orjson.loads(value)
    if data.get("schema") != CHECKPOINT_SCHEMA:
        raise ValueError(f"unknown checkpoint schema {data.get('schema')!r}")
    if SessionKey(call_id, channel) == PARTITION_KEY:
        offset = data.get("committed_offset")
        return PartitionCheckpoint(
            int(data["handled_through"]), None if offset is None else int(offset)
        )
    snapshot = data["snapshot"]
    admission = data["admission"]
    published, suppressed = data.get("finals_published"), data.get("finals_suppressed")
    end_ms, vad_id = data.get("finals_end_ms"), data.get("vad_id")
    return SessionCheckpoint(
        key=SessionKey(call_id, channel),
        snapshot=SessionSnapshot.from_dict(snapshot) if snapshot else None,
        admission=AdmissionState.from_dict(admission) if admission else None,
        finals_through=int(data["finals_through"]),
        ended=bool(data["ended"]),
        finals_published=None if published is None else int(published),
        finals_suppressed=None if suppressed is None else int(suppressed),
        finals_end_ms=None if end_ms is None else int(end_ms),
        vad_id=None if vad_id is None else str(vad_id),
    )
