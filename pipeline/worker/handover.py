"""The hand-over of partitions: assign (restore), revoke, lost, rewind after a failure, leave.

The consumer calls the rebalance hooks (``on_assign``/``on_revoke``/``on_lost``) inside
``consume``, on the loop's thread:

- **assign** reads where the partitions resume (``pipeline.runtime.recovery.recover``: the
  stable committed offsets first, then the checkpoints of the same transaction, decision 0026),
  rebuilds their streams (``checkpointing.restore_partition``) and assigns exactly those
  offsets; the loop then catches up on their backlog (decision 0005);
- **revoke** commits everything done so far, then forgets the partitions' streams;
- **lost** commits nothing (another worker owns them now): everything staged is dropped, and
  the partitions kept rewind before the next record is handled (decision 0027);
- **rewind** forgets every owned stream, restores them from the last commit and seeks there
  (after a failed transaction, or lost partitions).

- **leave** (a requested stop) commits what is done and leaves the group; **abandon** (a failed
  loop) commits nothing, aborts the open transaction and leaves (decision 0027).

A restore cut by a shutdown owns nothing: the partitions stay paused until the leave hands them
to the next owner.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from pipeline.asr.engine import StreamingEngine
from pipeline.clock import Clock
from pipeline.contracts.messages import EventType
from pipeline.errors import InfrastructureError
from pipeline.runtime.checkpoint_reader import CheckpointReadCutError, Checkpoints, read_checkpoints
from pipeline.runtime.metrics import WorkerMetrics
from pipeline.runtime.recovery import RestorePoint, recover
from pipeline.runtime.transactions import retrying
from pipeline.settings import Settings
from pipeline.topics import TopicRole, checkpoint_partitions_problem
from pipeline.worker.checkpointing import restore_partition, vads_of
from pipeline.worker.clients import WorkerClients
from pipeline.worker.committer import Committer, Deadlines
from pipeline.worker.faults import FaultPoint, Faults
from pipeline.worker.flow import FetchClock
from pipeline.worker.staging import Staging
from pipeline.worker.status import WorkerStatus
from pipeline.worker.streams import Streams

__all__ = ["CHECKPOINT_METADATA_TIMEOUT_S", "HandOver"]

logger = logging.getLogger(__name__)

CHECKPOINT_METADATA_TIMEOUT_S = 10.0
"""Reading the partition counts of audio.chunks and asr.checkpoints (start, raised counts)."""


class HandOver:
    """Takes and gives partitions (owned by the loop's thread)."""

    def __init__(
        self,
        settings: Settings,
        *,
        worker_id: str,
        topics: dict[TopicRole, str],
        clients: WorkerClients,
        streams: Streams,
        engine: StreamingEngine,
        staging: Staging,
        committer: Committer,
        deadlines: Deadlines,
        fetch_clock: FetchClock,
        status: WorkerStatus,
        metrics: WorkerMetrics,
        faults: Faults,
        clock: Clock,
    ) -> None:
        self._settings = settings
        self._worker_id = worker_id
        self._topics = topics
        self._clients = clients
        self._streams = streams
        self._engine = engine
        self._staging = staging
        self._committer = committer
        self._deadlines = deadlines
        self._fetch_clock = fetch_clock
        self._status = status
        self._metrics = metrics
        self._faults = faults
        self._clock = clock
        # Leaving (or failed): a revoke commits nothing.
        self.closing = False
        # Partitions of the last assignment while their backlog is read (empty: not catching
        # up), and when they were assigned (monotonic s): the loop's catch-up reads both.
        self.catch_up_partitions: frozenset[int] = frozenset()
        self.assigned_at_s = 0.0
        # Partitions were lost: the others rewind before the next records are handled.
        self.rewind_pending = False
        # Partitions rewound (→ the offset they resume from) inside the current ``consume``:
        # its batch may hold their records from before the seek (``drop_stale``). The loop
        # empties it before each ``consume``.
        self.rewound: dict[int, int] = {}
        # Partitions of asr.checkpoints when last read (None: not read): audio partition N
        # keeps its checkpoints in partition N (``check_checkpoint_partitions``).
        self._checkpoint_partitions: int | None = None

    # -- the rebalance hooks -----------------------------------------------------------------

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = [tp.partition for tp in partitions]
        known = self._checkpoint_partitions
        if numbers and (known is None or max(numbers) >= known):
            # audio.chunks raised while running (asr.checkpoints must have been too), or
            # asr.checkpoints not there yet when the worker started (the topics Job racing it).
            self.check_checkpoint_partitions(audio_partitions=max(numbers) + 1)
        point = self._restore_unless_stopping(consumer, numbers)
        if point is None:
            # Assigned but not owned: paused, and handed to the next owner with the leave.
            consumer.incremental_assign(partitions)
            consumer.pause(partitions)
            return
        # Exactly the offsets the checkpoints agree with: left to itself, the client would
        # fetch the committed offsets again, after the checkpoints were read.
        topic = self._clients.audio_topic
        consumer.incremental_assign([TopicPartition(topic, p, point.offsets[p]) for p in numbers])
        for p in numbers:
            if p in self.rewound:  # rewound, revoked and assigned again in one consume
                self.rewound[p] = point.offsets[p]
        if numbers:
            self.assigned_at_s = time.monotonic()
            self.catch_up_partitions = frozenset(numbers)
        self._status.assigned = self._status.assigned | frozenset(numbers)
        self._metrics.set_assignment(self._status.assigned)
        self._staging.event(EventType.PARTITIONS_ASSIGNED, detail={"partitions": sorted(numbers)})
        if partitions:
            # librdkafka keeps a partition's pause through a revoke and a later re-assignment:
            # one revoked while paused would come back paused for good unless resumed here.
            if self._status.paused:
                consumer.pause(partitions)
            else:
                consumer.resume(partitions)
        self._count_paused_partitions()

    def on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = [tp.partition for tp in partitions]
        # Hand the partitions over with everything done so far committed. (If the group has
        # already moved on, the commit fails and everything rewinds: still exactly once.)
        if not self.closing:
            self._commit()
        self._streams.forget(numbers)
        # Only what was announced as assigned: partitions whose checkpoint read a shutdown cut
        # were never owned here, and their revoke at the leave is no news.
        owned = sorted(n for n in numbers if n in self._status.assigned)
        if owned or not numbers:
            self._staging.event(EventType.PARTITIONS_REVOKED, detail={"partitions": owned})
        self._status.assigned = self._status.assigned - frozenset(numbers)
        self._metrics.set_assignment(self._status.assigned)
        self._count_paused_partitions()

    def on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = [tp.partition for tp in partitions]
        logger.warning("partitions lost: %s", numbers)
        # Nothing of theirs may be committed now: another worker owns them. What was staged for
        # the other partitions is dropped too and replayed (their offsets were not committed).
        # The worker's own events (backpressure, hotwords, dependencies) are no partition's:
        # they stay, or they would never be published.
        self._staging.drop_partition_output()
        self._streams.forget(numbers)
        # The partitions kept had their staged finals and checkpoints dropped with the rest,
        # while their sessions went on: they rewind to their last commit before the next
        # record is handled (the loop's iteration), or those finals would never be published.
        self.rewind_pending = bool(self._streams.book.partitions)
        self._status.assigned = self._status.assigned - frozenset(numbers)
        self._metrics.set_assignment(self._status.assigned)
        self._count_paused_partitions()
        self._staging.event(EventType.PARTITIONS_LOST, detail={"partitions": sorted(numbers)})

    # -- leaving the group -------------------------------------------------------------------

    def leave(self, deadline_s: float) -> None:
        """A requested stop: stop fetching, commit what is done (if ``deadline_s``, monotonic,
        leaves time), then leave the group (the revoke commits nothing more)."""
        consumer = self._clients.consumer
        try:
            if consumer is not None and self._status.assigned:
                consumer.pause(self._clients.partitions(sorted(self._status.assigned)))
            if time.monotonic() < deadline_s:
                self._commit()
            else:
                logger.warning("no time left for a last commit (the next owner replays)")
                self._staging.drop_partition_output()
        except (KafkaException, InfrastructureError) as error:
            logger.warning("final commit failed (the next owner replays): %s", error)
        finally:
            remaining = max(0.5, deadline_s - time.monotonic())
            if self._clients.partials is not None:
                self._clients.partials.flush(min(remaining, 5.0))
            self.closing = True
            if consumer is not None:
                try:
                    consumer.close()  # the revoke stages partitions_revoked
                except (KafkaException, KafkaError) as error:
                    logger.warning("consumer close: %s", error)

    def publish_leaving_events(self) -> None:
        """Publish what the leave itself staged (partitions_revoked, worker_stopped).

        The partitions are gone by now, so this transaction carries events only, no offsets.
        """
        if self._clients.transactional is None or not self._staging.outbox:
            return
        try:
            self._commit()
        except (KafkaException, InfrastructureError) as error:
            logger.warning("the leaving events were not published: %s", error)

    def abandon(self, abort_bound_s: float) -> None:
        """The loop failed: commit nothing, abort the open transaction, leave the group.

        What was staged is dropped. The partitions' next owner (another worker, or this one
        restarted) replays from the last commit, whose finals, checkpoints and offsets were
        committed together. Leaving now rather than at the session timeout hands the
        partitions over sooner; the leave's revoke commits nothing (``closing``).
        """
        logger.error("the worker loop failed: nothing more is committed, the next owner replays")
        self.closing = True
        self._staging.outbox.discard()
        self._committer.abort_open_transaction(abort_bound_s)
        try:
            if self._clients.partials is not None:
                self._clients.partials.flush(1.0)
            if self._clients.consumer is not None:
                self._clients.consumer.close()
        except (KafkaException, KafkaError, RuntimeError) as error:
            logger.warning("leaving after the failure: %s", error)

    def _commit(self) -> None:
        if not self._committer.commit():
            self.rewind()

    def _count_paused_partitions(self) -> None:
        status = self._status
        self._metrics.set_paused_partitions(len(status.assigned) if status.paused else 0)

    # -- rewind and restore ------------------------------------------------------------------

    def rewind(self) -> None:
        """Forget every owned stream, rebuild from checkpoints, seek to the committed offsets
        (``recovery.recover``: the offsets first, then the checkpoints they agree with)."""
        consumer = self._clients.consumer
        partitions = self._streams.partitions()
        self._streams.forget(partitions)
        point = self._restore_unless_stopping(consumer, partitions)
        if point is None:
            return
        for partition in partitions:
            self.rewound[partition] = point.offsets[partition]
            self._seek(partition, point.offsets[partition])

    def drop_stale(self, records: list[Message]) -> list[Message]:
        """The batch without the records of partitions rewound inside ``consume`` (a revoke's
        commit failed there), which are sought back to where they resume.

        The client had fetched some of their records before the seek, and the batch it
        returns holds them: handled, they were admitted past a sequence gap, and the same
        audio delivered again from the rewound position was refused as out of order (found by
        bench/chaos.py). Seeking again to the same offsets brings back any record of theirs
        that came after the seek and is dropped here with the stale ones.
        """
        for partition, offset in self.rewound.items():
            if partition in self._streams.book.partitions:  # else revoked: its next owner restores
                self._seek(partition, offset)
        return [r for r in records if r.error() is not None or r.partition() not in self.rewound]

    def _seek(self, partition: int, offset: int) -> None:
        """Seek an owned audio partition to ``offset``; a partition being revoked right now
        cannot be (logged): its next owner replays it anyway."""
        topic = self._clients.audio_topic
        try:
            self._clients.consumer.seek(TopicPartition(topic, partition, offset))
        except KafkaException as seek_error:
            logger.warning("cannot rewind partition %d: %s", partition, seek_error)

    def _restore_unless_stopping(
        self, consumer: Consumer, partitions: Sequence[int]
    ) -> RestorePoint | None:
        """``restore``; None when a shutdown cut its checkpoint read. Then nothing of these
        partitions is owned: the leave commits none of their offsets, the intake drops any
        record of theirs still fetched (not in the book), and they stay paused until the leave
        hands them to the next owner, which restores them."""
        try:
            return self.restore(partitions)
        except CheckpointReadCutError as cut:
            logger.warning("%s; leaving them to the next owner", cut)
            consumer.pause(self._clients.partitions(partitions))
            return None

    def restore(self, partitions: Sequence[int]) -> RestorePoint:
        """Read where the partitions resume (``recovery.recover``) and rebuild their streams'
        starting state; returns the offsets to resume from."""
        numbers = list(partitions)
        point = recover(
            numbers,
            read_offsets=self.read_committed_offsets,
            read_checkpoints=self.read_checkpoints,
            between=lambda: self._faults.hit(FaultPoint.RESTORE_AFTER_OFFSETS),
        )
        if point.disagreed:
            self._metrics.count_restore_disagreements(len(point.disagreed))
            self._staging.event(
                EventType.RESTORE_DISAGREED,
                detail={
                    "partitions": list(point.disagreed),
                    "offsets": {str(p): point.offsets[p] for p in point.disagreed},
                },
            )
        self._report_vad_changes(point)
        for partition in numbers:
            restore_partition(
                self._streams,
                self._engine,
                partition,
                point.checkpoints.get(partition, ()),
                now_ms=self._clock.now_ms(),
                fetch_clock_ms=self._fetch_clock.now_ms,
            )
        self._faults.hit(FaultPoint.RESTORE_BEFORE_ASSIGN)
        return point

    def _report_vad_changes(self, point: RestorePoint) -> None:
        """Sessions segmented so far by another VAD replay their audio on this one, which may
        segment it a little differently: a metric and an event. Their finals stay exactly once
        (skipped by position, decision 0029), but a replayed utterance may be cut differently."""
        ours = self._engine.vad_id
        others = vads_of(point.checkpoints.values(), ours)
        if not others:
            return
        self._metrics.count_vad_changes(sum(others.values()))
        self._staging.event(
            EventType.VAD_CHANGED,
            detail={"vad_id": ours, "previous": dict(sorted(others.items()))},
        )
        logger.warning("resuming sessions segmented by another VAD (%s): %s", ours, dict(others))

    def read_committed_offsets(self, partitions: Sequence[int]) -> dict[int, int | None]:
        """The group's committed offsets of ``partitions``, stable: the consumer is
        ``read_committed``, so librdkafka asks for stable offsets and the coordinator answers
        once no transaction holds pending offsets for them (KIP-447). None: no offset."""
        consumer, deadlines = self._clients.consumer, self._deadlines
        committed: list[TopicPartition] = []

        def read() -> None:
            committed[:] = consumer.committed(
                self._clients.partitions(partitions), deadlines.call_timeout_s()
            )

        try:
            # Like every call of the recovery, bounded by a shutdown that begins meanwhile.
            # Every error that is not fatal is tried again: a try that times out (a frozen
            # owner's pending offsets hold it until its transaction resolves), and a group
            # coordinator moving or loading after a broker restart (NOT_COORDINATOR,
            # COORDINATOR_LOAD_IN_PROGRESS: found by bench/chaos.py, the workers exited).
            retrying(
                read,
                cut_off=deadlines.cut_off,
                progress=self._status.progressed,
                also=lambda error: not error.fatal(),
            )
        except KafkaException as error:
            raise InfrastructureError(f"cannot read the committed offsets: {error}") from None
        return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in committed}

    def read_checkpoints(self, partitions: Sequence[int]) -> Checkpoints:
        """The latest checkpoints of these partitions (``read_checkpoints``)."""
        return read_checkpoints(
            self._settings.kafka,
            self._topics[TopicRole.CHECKPOINTS],
            partitions,
            worker_id=self._worker_id,
            progressed=self._status.progressed,
            stopping=lambda: self._deadlines.stopping,
        )

    def check_checkpoint_partitions(self, audio_partitions: int | None = None) -> None:
        """Refuse to run on a cluster where ``asr.checkpoints`` has fewer partitions than
        ``audio.chunks`` (``topics.checkpoint_partitions_problem``): the checkpoints of the
        partitions beyond it could not be written, and a takeover would find none. A topic
        not there yet is not checked (the consumer waits for it).

        Raises:
            InfrastructureError: the counts do not pair, or the metadata cannot be read.
        """
        names = {
            role: self._topics[role] for role in (TopicRole.AUDIO_CHUNKS, TopicRole.CHECKPOINTS)
        }
        try:
            metadata = self._clients.consumer.list_topics(timeout=CHECKPOINT_METADATA_TIMEOUT_S)
        except KafkaException as error:
            raise InfrastructureError(f"cannot read the topics' metadata: {error}") from None
        counts = {
            role: len(metadata.topics[name].partitions)
            for role, name in names.items()
            if name in metadata.topics and metadata.topics[name].error is None
        }
        if TopicRole.CHECKPOINTS not in counts:
            return
        self._checkpoint_partitions = counts[TopicRole.CHECKPOINTS]
        audio = max(counts.get(TopicRole.AUDIO_CHUNKS, 0), audio_partitions or 0)
        problem = checkpoint_partitions_problem(audio, self._checkpoint_partitions)
        if problem is not None:
            raise InfrastructureError(f"{problem} (streamscribe topics apply)")
