"""The committer: checkpoints, low watermarks and everything staged, in one Kafka transaction.

It owns the transactional producer (through ``WorkerClients``) and the outbox. ``commit``
stages the checkpoints (``checkpointing.stage_checkpoints``), produces the outbox and commits
the consumer offsets with it, atomically (decision 0003: a transaction lives only for the
produce + commit round trips). When the transaction fails, the committer settles it (abort, or
a new producer) and ``commit`` returns False: the caller rewinds (``HandOver.rewind``), and
the records are handled again. The exactly-once machinery, each part a decision:

- every transactional call runs on a helper thread with a bound; a stuck one replaces the
  producer (0004, ``transactions.transactional``);
- a commit's retries end a second before ``transaction.timeout.ms`` (its deadline, ``Deadlines``),
  and a fencing error after a transaction open that long is the broker's timeout, not another
  worker: the producer is replaced, the worker goes on (0028);
- a coordinator moving or loading after a broker restart is waited for (0028);
- an abort refused with ``_CONFLICT`` (a timed-out commit goes on in the background) replaces
  the producer rather than retrying it (``_abort_unless_committing``);
- only a requested stop commits; a failed loop aborts the open transaction (0027,
  ``abort_open_transaction``);
- the fault points ``before_commit`` and ``after_send_offsets`` sit inside the transaction (0030).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from pipeline.asr.engine import StreamingEngine
from pipeline.clock import Clock
from pipeline.contracts.messages import Final
from pipeline.errors import InfrastructureError
from pipeline.runtime.metrics import (
    ChunkOutcome,
    Dependency,
    DurationKind,
    RewindCause,
    WorkerMetrics,
)
from pipeline.runtime.transactions import (
    COORDINATOR_MOVING,
    FENCED,
    TRANSACTION_TIMEOUT_S,
    UNREACHABLE,
    StuckCallError,
    bounded,
    commit_budget_s,
    raise_if_fenced,
    retrying,
    transactional,
)
from pipeline.settings import WorkerSettings
from pipeline.worker.checkpointing import committed, stage_checkpoints
from pipeline.worker.clients import WorkerClients
from pipeline.worker.faults import FaultPoint, Faults
from pipeline.worker.staging import Staging
from pipeline.worker.status import WorkerStatus
from pipeline.worker.streams import Streams

__all__ = ["Committer", "Deadlines"]

logger = logging.getLogger(__name__)


class Deadlines:
    """Where the retries of transactional calls and of a recovery's reads stop (monotonic s).

    ``shutdown``: the shutdown bound's end once stopping (None while running): commit retries
    stop there, the next owner replays what is not committed. ``commit``: the open commit's own
    bound, never past the broker's transaction timeout.
    """

    def __init__(self, shutdown_timeout_ms: int) -> None:
        self._shutdown_timeout_s = shutdown_timeout_ms / 1000
        self.shutdown: float | None = None
        self.commit: float | None = None

    def start_shutdown(self) -> float:
        """The shutdown bound's end, set the first time this is called."""
        if self.shutdown is None:
            self.shutdown = time.monotonic() + self._shutdown_timeout_s
        return self.shutdown

    @property
    def stopping(self) -> bool:
        return self.shutdown is not None

    def cut_off(self) -> float | None:
        """The shutdown bound's end while stopping, the open commit's deadline inside a
        commit, the earlier of both; None when neither applies."""
        bounds = [b for b in (self.shutdown, self.commit) if b is not None]
        return min(bounds) if bounds else None

    def call_timeout_s(self) -> float:
        """The timeout of one transactional call: ``TRANSACTION_TIMEOUT_S``, or what is left
        until ``cut_off`` (at least 0.1 s)."""
        cut_off = self.cut_off()
        if cut_off is None:
            return TRANSACTION_TIMEOUT_S
        return max(0.1, min(TRANSACTION_TIMEOUT_S, cut_off - time.monotonic()))


class Committer:
    """Commits what the worker staged (owned by the loop's thread)."""

    def __init__(
        self,
        worker: WorkerSettings,
        *,
        clients: WorkerClients,
        streams: Streams,
        engine: StreamingEngine,
        staging: Staging,
        deadlines: Deadlines,
        status: WorkerStatus,
        metrics: WorkerMetrics,
        faults: Faults,
        clock: Clock,
        stop: threading.Event,
    ) -> None:
        self._worker = worker
        self._clients = clients
        self._streams = streams
        self._engine = engine
        self._staging = staging
        self._outbox = staging.outbox
        self._deadlines = deadlines
        self._status = status
        self._metrics = metrics
        self._faults = faults
        self._clock = clock
        self._stop = stop
        self.last_commit_ms = 0
        # When the open transaction began (monotonic s), None between transactions: what a
        # crash must abort, and whether the broker may have timed it out (``_raise_if_fenced``).
        self._transaction_began_s: float | None = None

    def start(self) -> None:
        """Begin using transactions (fences an earlier incarnation of this worker).

        Raises:
            InfrastructureError: the broker did not answer within the retries.
        """
        producer = self._clients.transactional
        try:
            # A broker that has just restarted answers that its transaction coordinator is
            # still loading (found by bench/chaos.py: the worker exited); that is waited for.
            retrying(
                lambda: producer.init_transactions(TRANSACTION_TIMEOUT_S),
                cut_off=self._deadlines.cut_off,
                progress=self._status.progressed,
                also=lambda error: error.code() in COORDINATOR_MOVING,
            )
        except KafkaException as error:
            producer.poll(0)  # its librdkafka lines (why: a refused connection) show first
            raise InfrastructureError(f"cannot start Kafka transactions: {error}") from None

    def due(self, now_ms: int) -> bool:
        """Whether the loop commits now: something staged should not wait, or the commit
        interval passed."""
        return (
            self._staging.commit_soon
            or now_ms - self.last_commit_ms >= self._worker.commit_interval_ms
        )

    def commit(self) -> bool:
        """Checkpoints + low watermarks + everything staged since the last commit, atomically.

        Returns False when the transaction failed and was settled (aborted, or its producer
        replaced): what was staged is dropped, and the caller must rewind.

        Raises:
            InfrastructureError: fenced by another worker with this worker's id, a producer
                that cannot be replaced, or a failed commit while stopping (nothing rewinds
                then: the partitions' next owner replays the work).
        """
        started = time.perf_counter()
        now_ms = self._clock.now_ms()
        watermarks = stage_checkpoints(
            self._streams,
            self._engine,
            self._staging,
            now_ms=now_ms,
            checkpoint_interval_ms=self._worker.checkpoint_interval_ms,
            ended_retention_ms=self._worker.ended_retention_ms,
        )
        self._record_lags()
        topic = self._clients.audio_topic
        offsets = [
            TopicPartition(topic, partition, watermark)
            for partition, watermark in watermarks.items()
            if watermark is not None
        ]
        self.last_commit_ms = now_ms
        self._staging.commit_soon = False
        if not offsets and not self._outbox.records:
            self._count_committed()
            return True
        if not self._transact(offsets):
            return False
        self._status.brokers_down = False  # the transaction coordinator answered
        self._status.commits += 1
        finals = self._count_committed()
        # The loop's own view of Kafka (the /readyz probe's is only taken when probed).
        self._metrics.set_dependency_up(Dependency.KAFKA, True)
        committed_ms = self._clock.now_ms()
        for final in finals:
            if final.capture_ms is not None:
                self._metrics.observe_duration(
                    DurationKind.ENDPOINT_TO_FINAL, max(0, committed_ms - final.capture_ms) / 1000
                )
        committed(self._streams)
        self._metrics.observe_duration(DurationKind.COMMIT, time.perf_counter() - started)
        return True

    def _transact(self, offsets: list[TopicPartition]) -> bool:
        """One transaction: the outbox's records, then the offsets, then the commit."""
        # Everything of this commit is produced now, so a transaction lives only for the
        # produce + commit round trips, never for a long recognizer step.
        producer = self._clients.transactional
        deadlines = self._deadlines
        # Retries end before the broker would abort the transaction as timed out (which
        # fences this producer): past that the commit is given up, aborted and rewound.
        deadlines.commit = time.monotonic() + commit_budget_s(self._worker.transaction_timeout_ms)
        try:
            producer.begin_transaction()
            self._transaction_began_s = time.monotonic()
            for record in self._outbox.records:
                producer.produce(
                    record.topic,
                    key=record.key,
                    value=record.value,
                    headers=record.headers,
                    partition=record.partition,
                )
            self._faults.hit(FaultPoint.BEFORE_COMMIT)
            if offsets:
                metadata = self._clients.consumer.consumer_group_metadata()
                transactional(
                    lambda timeout_s: producer.send_offsets_to_transaction(
                        offsets, metadata, timeout_s
                    ),
                    timeout_s=deadlines.call_timeout_s,
                    cut_off=deadlines.cut_off,
                    progress=self._status.progressed,
                )
                self._faults.hit(FaultPoint.AFTER_SEND_OFFSETS)
            transactional(
                producer.commit_transaction,
                timeout_s=deadlines.call_timeout_s,
                cut_off=deadlines.cut_off,
                progress=self._status.progressed,
            )
            self._transaction_began_s = None
        except (KafkaException, StuckCallError) as error:
            deadlines.commit = None
            self._outbox.discard()  # the rewind handles the records again
            if self._stop.is_set():
                # Shutting down: no rewind; the partitions' next owner replays the work, and
                # reads their checkpoints at once if the transaction is aborted here.
                self.abort_open_transaction(deadlines.call_timeout_s())
                raise InfrastructureError(f"the last commit failed: {error}") from None
            self._transaction_failed(error)
            return False
        finally:
            deadlines.commit = None
        return True

    def _count_committed(self) -> list[Final]:
        """Count the chunk outcomes of the commit that just succeeded; returns its finals."""
        finals, counts = self._outbox.committed()
        if counts.admitted:
            self._metrics.count_chunk(ChunkOutcome.OK, counts.admitted)
        if counts.duplicates:
            self._metrics.count_chunk(ChunkOutcome.DUPLICATE, counts.duplicates)
        for reason, count in counts.dead_letters.items():
            self._metrics.count_chunk(ChunkOutcome.REJECTED, count)
            self._metrics.count_dead_letter(reason, count)
            self._status.dead_letters += count
        return finals

    def _record_lags(self) -> None:
        for partition, progress in self._streams.book.partitions.items():
            lag = self._clients.fetch_lag(partition, progress.next_offset)
            if lag is not None:
                self._metrics.set_partition_lag(partition, lag)

    # -- when a transaction fails ------------------------------------------------------------

    def abort_open_transaction(self, bound_s: float) -> None:
        """Abort the open transaction, if any, within about ``bound_s``: the partitions' next
        owner then reads their checkpoints at once instead of waiting for the broker to time
        the transaction out. Failing that, the broker's timeout aborts it."""
        producer = self._clients.transactional
        if self._transaction_began_s is None or producer is None:
            return
        try:
            bounded(lambda: producer.abort_transaction(bound_s), bound_s)
            self._transaction_began_s = None
        except (KafkaException, StuckCallError) as error:
            logger.warning("the open transaction was not aborted (the broker will): %s", error)

    def _transaction_failed(self, error: KafkaException | StuckCallError) -> None:
        """Abort (or replace a stuck or broken producer); the caller rewinds: drop in-RAM
        state and replay from the committed offsets and checkpoints. Being fenced is raised
        (another worker with this worker's id owns its transactions now), unless the
        transaction was open long enough for the broker to have aborted it as timed out, which
        fences the producer too (a broker outage longer than the commit's budget): then a new
        producer."""
        cause = RewindCause.STUCK
        if isinstance(error, KafkaException):
            kafka_error = error.args[0]
            self._raise_if_fenced(kafka_error)
            if kafka_error.code() in UNREACHABLE:
                self._metrics.set_dependency_up(Dependency.KAFKA, False)
            if kafka_error.fatal() or kafka_error.code() in FENCED:
                cause = RewindCause.FATAL
            else:
                logger.warning("transaction failed, aborting and rewinding: %s", kafka_error)
                error, cause = self._abort_after_failure(error)
        self._transaction_began_s = None  # aborted, or its producer is replaced
        if cause is not RewindCause.FAILED:
            logger.error("%s; replacing the transactional producer and rewinding", error)
            self._replace_producer()
        self._metrics.count_transaction_rewind(cause)

    def _abort_after_failure(
        self, error: KafkaException
    ) -> tuple[KafkaException | StuckCallError, RewindCause]:
        """Abort the failed transaction within a commit's budget: ``FAILED`` when it was
        aborted, else the error and the cause that replace the producer."""
        producer = self._clients.transactional
        deadlines = self._deadlines
        deadlines.commit = time.monotonic() + commit_budget_s(self._worker.transaction_timeout_ms)
        try:
            transactional(
                lambda timeout_s: _abort_unless_committing(producer, timeout_s),
                timeout_s=deadlines.call_timeout_s,
                cut_off=deadlines.cut_off,
                progress=self._status.progressed,
            )
            return error, RewindCause.FAILED
        except KafkaException as abort_error:
            # A broker restarted mid-transaction can leave the producer in a state it
            # cannot leave (INVALID_TXN_STATE, fatal): a new producer can.
            self._raise_if_fenced(abort_error.args[0])
            return abort_error, RewindCause.FATAL
        except StuckCallError as stuck:
            return stuck, RewindCause.STUCK
        finally:
            deadlines.commit = None

    def _raise_if_fenced(self, error: KafkaError) -> None:
        """``raise_if_fenced``, except after a transaction the broker may have timed out (open
        for ``transaction_timeout_ms`` or longer): that fences this producer, not the worker."""
        began = self._transaction_began_s
        if (
            began is not None
            and time.monotonic() - began >= self._worker.transaction_timeout_ms / 1000
        ):
            return
        raise_if_fenced(error)

    def _replace_producer(self) -> None:
        """A new transactional producer with the same transactional id.

        Its ``init_transactions`` fences the stuck one and completes that one's open transaction
        (committed if its commit had reached the coordinator, else aborted), so the committed
        offsets and checkpoints that the rewind reads afterwards are consistent. The stuck
        producer is never touched again: the thread blocked inside it keeps it alive, and frees
        it if the call ever returns.
        """
        self._clients.transactional = producer = self._clients.new_transactional()
        try:
            transactional(
                producer.init_transactions,
                timeout_s=self._deadlines.call_timeout_s,
                cut_off=self._deadlines.cut_off,
                progress=self._status.progressed,
                also=lambda error: error.code() in COORDINATOR_MOVING,
            )
        except (KafkaException, StuckCallError) as error:
            raise InfrastructureError(f"cannot restart Kafka transactions: {error}") from None


def _abort_unless_committing(producer: Any, timeout_s: float) -> None:
    """``abort_transaction``, except that librdkafka's ``_CONFLICT`` (a ``commit_transaction``
    that timed out goes on in the background, and the abort may not interrupt it) is not
    retried: it would only be answered again until the abort's budget ran out (seen in the
    chaos runs: 9 s of it each time). The caller replaces the producer instead, whose
    ``init_transactions`` settles that commit either way."""
    try:
        producer.abort_transaction(timeout_s)
    except KafkaException as error:
        if error.args[0].code() == KafkaError._CONFLICT:
            raise KafkaException(
                KafkaError(KafkaError._CONFLICT, "a commit is still in progress", retriable=False)
            ) from None
        raise
