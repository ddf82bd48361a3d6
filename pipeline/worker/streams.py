"""Each stream's bookkeeping in one place: engine session, admission, partition book, progress.

Pure. A stream is one (call, channel) of an owned partition. Its state lives in five parts that
must move together: the engine's session (audio, VAD, hypotheses), the ``Admission`` state
(sequence numbers, ended), the ``PartitionBook`` (which partition it came from, ended streams
remembered), its ``SessionProgress`` (offsets still needed, what its last checkpoint said) and
the finals the ``Redactor`` holds for it (a number that may go on in the next final).
``Streams`` changes them together, so that forgetting a partition is one call (``forget``).

It also takes each consumed record (``receive``: the shared intake, ``intake.admit``, then the
worker's side of the outcome) and the engine's outputs that change a stream (``finalized``,
``ended``). Checkpointing and restoring streams is ``pipeline.worker.checkpointing``.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.asr.engine import StreamingEngine
from pipeline.asr.session import SessionKey
from pipeline.contracts.messages import EventType
from pipeline.redaction.stage import Redactor
from pipeline.worker.admission import Admission, AdmissionLimits
from pipeline.worker.book import PartitionBook
from pipeline.worker.flow import PartialThinning
from pipeline.worker.intake import (
    Admitted,
    ChunkRecord,
    Duplicate,
    Intake,
    Rejected,
    Skipped,
    admit,
    feed_chunk,
)
from pipeline.worker.progress import PartitionProgress
from pipeline.worker.staging import Staging

__all__ = ["Streams"]


class Streams:
    """The streams of the partitions a worker owns (owned by the loop's thread).

    ``admission`` and ``book`` are read by the checkpointing and the tests; change them only
    through this class, which keeps them in step with the engine.
    """

    def __init__(
        self,
        engine: StreamingEngine,
        limits: AdmissionLimits,
        *,
        max_chunk_bytes: int,
        max_pending_jobs: int,
        redactor: Redactor | None = None,
    ) -> None:
        self._engine = engine
        # The redaction stage, with the finals it holds per stream (``pipeline.redaction``):
        # a held final is stream state like an open utterance, forgotten with its stream.
        self.redactor = redactor or Redactor()
        self._max_chunk_bytes = max_chunk_bytes
        self.admission = Admission(limits)
        self.book = PartitionBook()
        # Which due partials were counted thinned: its keys are pruned at every step (only due
        # ones stay), so it needs no forgetting.
        self.thinning = PartialThinning(max_pending_jobs)

    # -- partitions ------------------------------------------------------------------------

    def partitions(self) -> list[int]:
        """The partitions owned, in the order they were taken."""
        return list(self.book.partitions)

    def add(self, progress: PartitionProgress) -> None:
        """Own a partition (its progress restored from its checkpoints)."""
        self.book.add(progress)

    def forget(self, partitions: Iterable[int]) -> None:
        """Drop every stream of these partitions, from the engine, the admission and the book
        (no output: the partitions' next owner, or a rewind, replays them)."""
        forgotten = self.book.forget(partitions)
        for key in forgotten.sessions:
            self._engine.drop(key)
            self.admission.forget(key)
            self.redactor.drop(key.call_id, key.channel)
        for key in forgotten.ended:
            self.admission.forget(key)

    # -- records in ------------------------------------------------------------------------

    def receive(self, record: ChunkRecord, staging: Staging, fetch_clock_ms: int) -> Intake | None:
        """Take one consumed record: ``intake.admit`` decides (with what earlier owners handled,
        the book), then its outcome is staged (dead letter, events, counts) and an admitted
        chunk goes into its stream and the engine. None: its partition is not owned (revoked
        while the batch was in flight)."""
        progress = self.book.partitions.get(record.partition)
        if progress is None:
            return None
        offset = record.offset
        progress.consumed(offset)
        progress.delivered(fetch_clock_ms)
        outcome = admit(
            record, self.admission, max_chunk_bytes=self._max_chunk_bytes, history=self.book
        )
        if isinstance(outcome, Skipped):
            return outcome
        if isinstance(outcome, Duplicate):
            if not outcome.quiet:
                staging.outbox.count_duplicate()
            return outcome
        if isinstance(outcome, Rejected):
            if outcome.key is not None:
                self.book.refused_late(outcome.key, offset)
            if not outcome.quiet:
                headers = record.headers or []
                staging.dead_letter(record, outcome.reason, outcome.detail, outcome.key, headers)
            return outcome
        self._admitted(progress, outcome, offset, staging, fetch_clock_ms)
        return outcome

    def _admitted(
        self,
        progress: PartitionProgress,
        admitted: Admitted,
        offset: int,
        staging: Staging,
        fetch_clock_ms: int,
    ) -> None:
        key, chunk = admitted.key, admitted.chunk
        if not admitted.quiet:
            staging.outbox.count_admitted()
            if admitted.new_session:
                staging.event(EventType.SESSION_STARTED, key, {"tenant": chunk.tenant})
            if admitted.gap is not None:
                first, end = admitted.gap
                staging.event(
                    EventType.SEQUENCE_GAP, key, {"missing_from": first, "missing_to": end - 1}
                )
        # Bookkeeping only for admitted chunks: rejected and duplicate ones leave nothing behind.
        session = progress.session(key)
        self.book.own(key, progress.partition)
        session.needed_offsets.append(offset)
        session.last_activity_ms = fetch_clock_ms
        session.last_flowing_ms = progress.flowing_ms
        session.last_offset = offset
        session.dirty = True
        feed_chunk(self._engine, key, chunk, offset)

    # -- outputs that change a stream -------------------------------------------------------

    def finalized(
        self, key: SessionKey, utterance_index: int, end_ms: int | None, *, published: bool
    ) -> None:
        """Utterance ``utterance_index``, whose audio ends at ``end_ms``, got its final
        (``published``) or was suppressed by a guard, in the transaction being staged."""
        progress = self.book.session(key)
        if progress is None:
            return
        if published and progress.finals_published is not None:
            progress.finals_published += 1
        if not published and progress.finals_suppressed is not None:
            progress.finals_suppressed += 1
        if utterance_index >= progress.finals_through:
            progress.finals_through = utterance_index
            progress.finals_end_ms = end_ms
        progress.dirty = True

    def ended(self, key: SessionKey, utterances: int, suppressed: int) -> tuple[int, int]:
        """The engine ended the stream: it is checkpointed as ended at the next commit. Returns
        its (utterances, suppressed) counted across owners (the engine's own counts, given,
        cannot tell replayed utterances that were published from those that were suppressed)."""
        self.admission.end(key)
        progress = self.book.session(key)
        if progress is None:
            return utterances, suppressed
        progress.ended = True
        progress.needed_offsets.clear()
        progress.dirty = True
        if progress.finals_published is not None:
            utterances = progress.finals_published
        if progress.finals_suppressed is not None:
            suppressed = progress.finals_suppressed
        return utterances, suppressed

    def close_idle(
        self, fetch_clock_ms: int, idle_timeout_ms: int, quiet_idle_timeout_ms: int
    ) -> None:
        """End streams whose caller vanished without end-of-stream, restored ones included:
        no chunk of theirs while their partition delivered records for ``idle_timeout_ms``
        (its flow clock), or none for ``quiet_idle_timeout_ms`` of fetching while it delivered
        nothing at all (a lone call gone; an outage looks the same, hence the longer wait).

        Measured on the fetch clock alone, a publisher cut off from Kafka for longer than the
        idle timeout (a broker restart on a loaded machine, a takeover's first fetch) closed
        every call it was sending, and their audio, delivered late, was refused as after
        their end (found by bench/chaos.py)."""
        for progress in self.book.partitions.values():
            for key, session in progress.sessions.items():
                if (
                    not session.ended
                    and (
                        progress.flowing_ms - session.last_flowing_ms > idle_timeout_ms
                        or fetch_clock_ms - session.last_activity_ms > quiet_idle_timeout_ms
                    )
                    and self._engine.knows(key)  # a cold resume is only expected until a chunk
                ):
                    self._engine.close(key)
                    # Closed now: a chunk that comes before its final is out is refused as
                    # after an end-of-stream (dead-lettered), not fed to a stream that is over.
                    self.admission.end(key)
                    session.last_activity_ms = fetch_clock_ms
                    session.last_flowing_ms = progress.flowing_ms
