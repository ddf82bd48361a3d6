"""What a commit checkpoints of each stream, and what a restore rebuilds from those checkpoints.

Pure. At each commit ``stage_checkpoints`` stages, per owned partition, the checkpoints of the
streams whose progress changed and the partition's own checkpoint, and returns the partition's
*low watermark* (the offset the commit commits: the first record a replay still needs). After a
takeover or a rewind, ``restore_partition`` rebuilds a partition's streams from the checkpoints
a restore read (``pipeline.runtime.recovery``): the engine's sessions, their admission state,
their progress. The record formats are ``pipeline.worker.checkpoint``'s.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence

from pipeline.asr.engine import ResumePoint, StreamingEngine
from pipeline.asr.session import SessionKey
from pipeline.worker.admission import AdmissionState
from pipeline.worker.checkpoint import PartitionCheckpoint, SessionCheckpoint
from pipeline.worker.progress import PartitionProgress
from pipeline.worker.staging import Staging
from pipeline.worker.streams import Streams

__all__ = [
    "committed",
    "restore_partition",
    "stage_checkpoints",
    "vads_of",
]

logger = logging.getLogger(__name__)


# -- commit ----------------------------------------------------------------------------------


def stage_checkpoints(
    streams: Streams,
    engine: StreamingEngine,
    staging: Staging,
    *,
    now_ms: int,
    checkpoint_interval_ms: int,
    ended_retention_ms: int,
) -> dict[int, int | None]:
    """Stage what the next commit checkpoints; returns each owned partition's low watermark
    (None: nothing consumed or restored yet, no offset to commit)."""
    watermarks: dict[int, int | None] = {}
    for partition, progress in streams.book.partitions.items():
        _stage_sessions(streams, engine, staging, progress, now_ms, checkpoint_interval_ms)
        watermark = progress.low_watermark()
        _stage_partition(staging, progress, watermark)
        watermarks[partition] = watermark
    _expire_ended(streams, staging, now_ms, ended_retention_ms)
    return watermarks


def committed(streams: Streams) -> None:
    """The commit of what ``stage_checkpoints`` staged succeeded."""
    for progress in streams.book.partitions.values():
        progress.checkpointed_handled_through = progress.handled_through
        progress.checkpointed_offset = progress.staged_offset


def _stage_sessions(
    streams: Streams,
    engine: StreamingEngine,
    staging: Staging,
    progress: PartitionProgress,
    now_ms: int,
    interval_ms: int,
) -> None:
    """Checkpoint every session whose progress changed; advance ``handled_through``.

    An ended session gets a final "ended" checkpoint and is forgotten. Otherwise, when the
    session is quiescent and its last snapshot is older than the checkpoint interval (or a
    final moved), a new snapshot replaces the old one and releases the records it covers;
    when it is not quiescent, or the redaction stage holds a final of it, only
    ``finals_through`` is updated (replay then starts from the
    older snapshot and skips the utterances already finalized).
    """
    partition = progress.partition
    for key, session in list(progress.sessions.items()):
        if not session.dirty:
            continue
        if session.ended:
            checkpoint = SessionCheckpoint(
                key,
                None,
                _copy_admission(streams, key),
                session.finals_through,
                True,
                session.finals_published,
                session.finals_suppressed,
                session.finals_end_ms,
                engine.vad_id,
            )
            staging.checkpoint(partition, checkpoint)
            streams.book.end(key, partition, now_ms)
            continue
        finals_moved = session.finals_through != session.checkpointed_finals_through
        snapshot = None
        # A final the redaction stage holds is not published yet: the snapshot must stay
        # before its audio, so that a new owner decodes it again (decision 0040).
        held = bool(streams.redactor.held(key.call_id, key.channel))
        if not held and (finals_moved or now_ms - session.last_snapshot_ms >= interval_ms):
            snapshot = engine.snapshot(key)
        if snapshot is not None:
            progress.snapshot_taken(key, snapshot)
            session.snapshot_admission = _copy_admission(streams, key)
            session.last_snapshot_ms = now_ms
        elif not finals_moved and session.announced:
            continue  # nothing new to say; try again at the next commit
        checkpoint = SessionCheckpoint(
            key,
            session.snapshot,
            session.snapshot_admission,
            session.finals_through,
            False,
            session.finals_published,
            session.finals_suppressed,
            session.finals_end_ms,
            engine.vad_id,
        )
        staging.checkpoint(partition, checkpoint)
        session.announced = True
        session.checkpointed_finals_through = session.finals_through
        session.dirty = snapshot is None
    if progress.next_offset >= 0:  # nothing fetched yet: the restored value stands
        # Never lowered: a new owner's replay starts below what the last owner handled, and
        # the rest of that replay must still count as handled (no dead letter or event twice).
        progress.handled_through = max(progress.handled_through, progress.next_offset - 1)


def _stage_partition(staging: Staging, progress: PartitionProgress, watermark: int | None) -> None:
    """Stage the partition's ``handled_through`` and the offset this commit commits, when
    either changed: a restore compares that offset with the group's committed offset to know
    that it read the checkpoints of the same transaction (``pipeline.runtime.recovery``)."""
    progress.staged_offset = watermark if watermark is not None else progress.checkpointed_offset
    if (
        progress.handled_through == progress.checkpointed_handled_through
        and progress.staged_offset == progress.checkpointed_offset
    ):
        return
    staging.partition_checkpoint(
        progress.partition, PartitionCheckpoint(progress.handled_through, progress.staged_offset)
    )


def _expire_ended(streams: Streams, staging: Staging, now_ms: int, retention_ms: int) -> None:
    """Forget sessions ended ``retention_ms`` ago and delete their checkpoints (tombstones, in
    this commit): memory and ``asr.checkpoints`` hold the live calls and the recently ended
    ones, not every call a partition ever carried."""
    for key, partition in streams.book.expire_ended(now_ms, retention_ms):
        streams.admission.forget(key)
        if partition in streams.book.partitions:
            staging.tombstone(partition, key)


# -- restore ---------------------------------------------------------------------------------


def vads_of(checkpoints: Iterable[Sequence[object]], ours: str) -> Counter[str]:
    """How many live sessions of these checkpoints another VAD than ``ours`` segmented (another
    device, weights or version, as in a rolling upgrade), per VAD."""
    return Counter(
        record.vad_id
        for records in checkpoints
        for record in records
        if isinstance(record, SessionCheckpoint)
        and not record.ended
        and record.vad_id not in (None, ours)
    )


def restore_partition(
    streams: Streams,
    engine: StreamingEngine,
    partition: int,
    records: Iterable[SessionCheckpoint | PartitionCheckpoint],
    *,
    now_ms: int,
    fetch_clock_ms: int,
) -> None:
    """Own ``partition`` and rebuild its streams from its checkpoints."""
    progress = PartitionProgress(partition)
    streams.add(progress)
    for record in records:
        if isinstance(record, PartitionCheckpoint):
            progress.handled_through = record.handled_through
            progress.checkpointed_handled_through = record.handled_through
            progress.checkpointed_offset = record.committed_offset
            continue
        _restore_session(streams, engine, progress, record, now_ms, fetch_clock_ms)


def _restore_session(
    streams: Streams,
    engine: StreamingEngine,
    progress: PartitionProgress,
    checkpoint: SessionCheckpoint,
    now_ms: int,
    fetch_clock_ms: int,
) -> None:
    key = checkpoint.key
    if checkpoint.ended:
        if checkpoint.admission is not None:
            streams.admission.restore(key, checkpoint.admission)
        # Kept for ended_retention_ms from now (the checkpoint's own age is not read), and
        # until the replay has passed its records (``Streams.receive`` tracks the newest).
        streams.book.remember_ended(key, progress.partition, now_ms, -1)
        return
    session = progress.session(key)
    session.announced = True
    session.finals_through = checkpoint.finals_through
    session.finals_end_ms = checkpoint.finals_end_ms
    session.checkpointed_finals_through = checkpoint.finals_through
    session.finals_published = checkpoint.finals_published
    session.finals_suppressed = checkpoint.finals_suppressed
    # Idle from now on: a caller gone before the takeover still gets its session closed.
    session.last_activity_ms = fetch_clock_ms
    session.last_flowing_ms = progress.flowing_ms
    streams.book.own(key, progress.partition)
    snapshot, admission = checkpoint.snapshot, checkpoint.admission
    if snapshot is None or admission is None:
        # Replayed from the call's first record (the committed offset holds it).
        engine.resume(key, ResumePoint(checkpoint.finals_through, checkpoint.finals_end_ms))
        return
    # Warm, or cold if the engine cannot use the snapshot: then only its state is lost, not
    # the bookkeeping, and the records up to the snapshot are skipped as after a warm resume.
    engine.resume(key, ResumePoint(checkpoint.finals_through, checkpoint.finals_end_ms, snapshot))
    streams.admission.restore(key, _clone(admission))
    session.snapshot = snapshot
    session.snapshot_admission = admission
    session.skip_through = snapshot.last_position if snapshot.last_position is not None else -1


def _copy_admission(streams: Streams, key: SessionKey) -> AdmissionState | None:
    state = streams.admission.state(key)
    return None if state is None else _clone(state)


def _clone(state: AdmissionState) -> AdmissionState:
    """A deep copy (a checkpoint must not change with the live state)."""
    return AdmissionState.from_dict(state.to_dict())
