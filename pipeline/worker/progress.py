"""Per-partition offset bookkeeping: which records are still needed, what to commit.

Pure. For each owned partition the worker records every record it consumed; for each session the
offsets of the records it admitted since its last checkpointed snapshot (those a replay needs).
The partition's *low watermark* — the offset committed to the consumer group — is the smallest
offset still needed by any of its sessions, or the next offset to consume when none needs one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from pipeline.asr.session import SessionKey, SessionSnapshot
from pipeline.worker.admission import AdmissionState

__all__ = ["FLOW_GAP_MAX_MS", "PartitionProgress", "SessionProgress"]

FLOW_GAP_MAX_MS = 2000
"""The most one gap between a partition's records advances its flow clock."""


@dataclass(slots=True)
class SessionProgress:
    """What one session needs kept and what its last checkpoint said."""

    needed_offsets: deque[int] = field(default_factory=deque)
    snapshot: SessionSnapshot | None = None
    snapshot_admission: AdmissionState | None = None
    skip_through: int = -1
    finals_through: int = -1
    # Where utterance ``finals_through`` ends (ms of the call): a replay skips by position.
    finals_end_ms: int | None = None
    checkpointed_finals_through: int = -1
    # Finals published, and finals suppressed by a guard, for the session by every owner so far
    # (checkpointed with the finals); None when restored from a checkpoint written before the
    # counts existed.
    finals_published: int | None = 0
    finals_suppressed: int | None = 0
    last_snapshot_ms: int = 0
    last_activity_ms: int = 0  # on the worker's fetch clock (``flow.FetchClock``)
    # And on its partition's flow clock (``PartitionProgress.flowing_ms``): what the idle
    # timeout is measured on while the partition delivers records.
    last_flowing_ms: int = 0
    last_offset: int = -1  # the newest record admitted for the session
    # Whether a checkpoint of the session was written (or it was restored from one): a new
    # session is checkpointed at the first commit, with or without a snapshot, so that a
    # takeover knows which calls were admitted.
    announced: bool = False
    ended: bool = False
    dirty: bool = False


@dataclass(slots=True)
class PartitionProgress:
    """One owned partition: its sessions' progress and the consumed/handled offsets."""

    partition: int
    next_offset: int = -1
    handled_through: int = -1
    checkpointed_handled_through: int = -1
    # The committed offset its last committed partition checkpoint records (restored, or
    # written), and the one the commit in progress stages (None: not known, or none yet).
    checkpointed_offset: int | None = None
    staged_offset: int | None = None
    sessions: dict[SessionKey, SessionProgress] = field(default_factory=dict)
    # The partition's flow clock: fetch-clock ms during which it delivered records, a gap
    # between two deliveries counting ``FLOW_GAP_MAX_MS`` at most (``delivered``).
    flowing_ms: int = 0
    last_delivery_ms: int | None = None  # fetch clock at its last record

    def delivered(self, fetch_ms: int) -> None:
        """A record of the partition came at ``fetch_ms`` (the worker's fetch clock).

        A session is idle when its partition flows on without it. A partition that delivers
        nothing at all (its publishers cut off from Kafka, a broker restarting, a takeover's
        fetch not started yet) stops this clock, so such an outage closes no call: its audio
        is on the way. Every channel is sent through silence (the contract), so a live
        partition delivers records far more often than ``FLOW_GAP_MAX_MS``.
        """
        if self.last_delivery_ms is not None:
            self.flowing_ms += min(max(0, fetch_ms - self.last_delivery_ms), FLOW_GAP_MAX_MS)
        self.last_delivery_ms = fetch_ms

    def consumed(self, offset: int) -> None:
        self.next_offset = max(self.next_offset, offset + 1)

    def session(self, key: SessionKey) -> SessionProgress:
        progress = self.sessions.get(key)
        if progress is None:
            progress = self.sessions[key] = SessionProgress()
        return progress

    def low_watermark(self) -> int | None:
        """The offset to commit, or None before anything was consumed."""
        needed = [p.needed_offsets[0] for p in self.sessions.values() if p.needed_offsets]
        if self.next_offset < 0:
            return min(needed) if needed else None
        return min([*needed, self.next_offset])

    def snapshot_taken(self, key: SessionKey, snapshot: SessionSnapshot) -> None:
        """A quiescent snapshot now covers every record up to ``snapshot.last_position``."""
        progress = self.session(key)
        progress.snapshot = snapshot
        last = snapshot.last_position if snapshot.last_position is not None else -1
        while progress.needed_offsets and progress.needed_offsets[0] <= last:
            progress.needed_offsets.popleft()
