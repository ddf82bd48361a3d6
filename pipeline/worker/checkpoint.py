"""Checkpoint records on ``asr.checkpoints``: the small progress that makes replays exact.

Heavy state (utterance audio, decoder caches) is never written: after a crash or a rebalance the
new owner replays the partition from its committed *low watermark*. Checkpoints say how to replay:

- per session (key ``["call", "channel"]`` as JSON): a quiescent ``SessionSnapshot`` with the
  admission state at that point (replay resumes from there, skipping records up to its
  ``last_position``), ``finals_through`` (utterances already finalized: not emitted again),
  ``finals_published`` / ``finals_suppressed`` (how many of them were published as finals, and
  how many a guard suppressed: the counts ``session_ended`` reports) and whether the session
  ended;
- per partition (key ``["", "__partition__"]``): ``handled_through``, the newest offset whose side
  effects (dead letters, events) were committed; a replay does not repeat them.

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
                "ended": self.ended,
            }
        )


@dataclass(frozen=True, slots=True)
class PartitionCheckpoint:
    """Side effects up to ``handled_through`` (inclusive) are committed."""

    handled_through: int

    def encode(self) -> bytes:
        return orjson.dumps({"schema": CHECKPOINT_SCHEMA, "handled_through": self.handled_through})


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
        return PartitionCheckpoint(int(data["handled_through"]))
    snapshot = data["snapshot"]
    admission = data["admission"]
    published, suppressed = data.get("finals_published"), data.get("finals_suppressed")
    return SessionCheckpoint(
        key=SessionKey(call_id, channel),
        snapshot=SessionSnapshot.from_dict(snapshot) if snapshot else None,
        admission=AdmissionState.from_dict(admission) if admission else None,
        finals_through=int(data["finals_through"]),
        ended=bool(data["ended"]),
        finals_published=None if published is None else int(published),
        finals_suppressed=None if suppressed is None else int(suppressed),
    )
