"""The ASR worker's run loop: Kafka in, engine in the middle, Kafka out, exactly once.

One loop, read top to bottom::

    start:   load model → begin transaction → subscribe (cooperative-sticky)
    loop:    poll a batch → admit / dead-letter each record → engine.step()
             → partials out (plain producer) · finals, events, dead letters (transaction)
             → idle sessions closed → commit when due (checkpoints + low watermarks + finals)
             → pause / resume partitions (backpressure)
    stop:    SIGTERM → stop fetching → commit → leave the group → exit within the bound

The decisions are pure and live in ``pipeline.worker``: ``admission`` (which chunks a session
takes), ``book`` (the partitions owned, each session's partition, calls ended recently),
``outbox`` (what the next commit publishes and counts), ``intake`` (an admitted chunk into the
engine, as replay does it), ``flow`` (thinning, backpressure, catch-up). This module applies
them to Kafka, the engine and the metrics.

Exactly-once finals. Finals, checkpoints, dead letters and consumer offsets are committed in one
Kafka transaction. The committed offset of a partition is its *low watermark* (the first record a
replay still needs), so a worker that takes over after a crash or a rebalance replays from there
and rebuilds sessions exactly (``pipeline.worker.checkpoint``): utterances whose finals were
committed are not emitted again, dead letters and events of records already handled are not
repeated. Partials go through a separate idempotent producer and may repeat after a failover.

Rebalance hooks (``_on_assign``/``_on_revoke``/``_on_lost``) run inside ``consume``, on the loop's
thread: revoke commits first and then forgets the partitions' sessions; assign reads the
partitions' checkpoints and restores them.

Catching up. After partitions are assigned the loop first reads their backlog (the audio since
the low watermark: after a crash, everything said during the failover) with VAD-only steps, while
the newly assigned partitions are more than a poll batch behind their high watermarks (at most
``CATCH_UP_MAX_S``); the first step after that decodes partials before the backlog's finals, so
live text resumes first (the finals are late already and follow in the next step).
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from pipeline.asr.engine import SessionEnded, StreamingEngine, Suppressed
from pipeline.asr.session import SessionKey, SessionSnapshot, SessionStats
from pipeline.clock import Clock, WallClock
from pipeline.contracts.audio_chunk import RejectReason, decode_chunk
from pipeline.contracts.messages import (
    DeadLetterInfo,
    Event,
    EventType,
    Final,
    Partial,
    to_dict,
    to_json,
)
from pipeline.errors import ChunkRejectedError, ConfigError, InfrastructureError
from pipeline.hotwords.model import Scope
from pipeline.runtime.checkpoint_reader import CheckpointReadCutError, Checkpoints, read_checkpoints
from pipeline.runtime.kafka import (
    DEAD_LETTER_MAX_VALUE_BYTES,
    consumer_config,
    log_client_error,
    new_consumer,
    new_producer,
    partials_producer_config,
    readable_headers,
    transactional_producer_config,
)
from pipeline.runtime.metrics import (
    ChunkOutcome,
    Dependency,
    DurationKind,
    EarlyFinalOutcome,
    RewindCause,
    WorkerMetrics,
)
from pipeline.runtime.recovery import RestorePoint, recover
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
from pipeline.settings import Settings
from pipeline.topics import TopicRole, checkpoint_partitions_problem, topic_name
from pipeline.worker.admission import Admission, AdmissionLimits, AdmissionState, Verdict
from pipeline.worker.book import PartitionBook
from pipeline.worker.checkpoint import (
    PARTITION_KEY,
    PartitionCheckpoint,
    SessionCheckpoint,
    encode_key,
)
from pipeline.worker.dead_letter import fit_dead_letter
from pipeline.worker.faults import FaultPoint, Faults
from pipeline.worker.flow import PartialThinning, catching_up, paused_after
from pipeline.worker.intake import feed_chunk
from pipeline.worker.outbox import Outbox
from pipeline.worker.progress import PartitionProgress

__all__ = ["AsrWorker", "WorkerStatus", "default_worker_id"]

logger = logging.getLogger(__name__)

LOOP_STALL_S = 360.0
"""No progress for this long means the loop is stuck (a hung native call, a wedged GPU):
``/healthz`` then fails and the pod is restarted. Progress is an iteration finished, or a Kafka
call of a commit, of its recovery or of a checkpoint read returned (``AsrWorker._progressed``):
a commit and its recovery may chain retries for far longer (``RETRY_DEADLINE_S`` each for the
commit, the abort, a new producer's ``init_transactions`` and the committed offsets, then the
checkpoint reads) and are not a stall while their calls return. So the limit only has to exceed
the longest single wait (a transactional try of ``TRANSACTION_TIMEOUT_S`` + ``STUCK_GRACE_S``, a
checkpoint lookup of ``checkpoint_reader.CHECKPOINT_READ_TIMEOUT_S``, a poll, a recognizer
step); it is also past ``max.poll.interval.ms`` (300 s), after which the group has taken the
partitions anyway."""
FETCH_CLOCK_MAX_TICK_MS = 5000
"""The most one loop iteration advances the fetch clock (see ``AsrWorker._tick_fetch_clock``):
a stall of the loop (commit retries, a checkpoint read) is not a publisher going silent."""
CATCH_UP_MAX_S = 30.0
"""Longest catch-up (VAD-only steps) after an assignment; then decoding resumes regardless."""
CATCH_UP_FIRST_FETCH_S = 1.0
"""How long empty polls right after an assignment still count as catching up (the first fetch
from newly assigned partitions takes a moment)."""

ABANDON_ABORT_S = 2.0
"""How long a failed worker tries to abort its open transaction before it exits."""

CHECKPOINT_METADATA_TIMEOUT_S = 10.0
"""Reading the partition counts of audio.chunks and asr.checkpoints (start, raised counts)."""


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(slots=True)
class WorkerStatus:
    """What readiness, liveness, tests and the transport benchmark (``commits``) read; written
    by the loop's thread only."""

    model_loaded: bool = False
    assigned: frozenset[int] = frozenset()
    paused: bool = False
    thinning: bool = False
    running: bool = False
    last_progress_s: float = 0.0  # monotonic time of the loop's last progress (LOOP_STALL_S)
    commits: int = 0
    dead_letters: int = 0


class AsrWorker:
    """A member of the ASR consumer group. ``run`` blocks until ``stop`` (or SIGTERM)."""

    def __init__(
        self,
        settings: Settings,
        engine: StreamingEngine,
        *,
        metrics: WorkerMetrics | None = None,
        clock: Clock | None = None,
        model_facts: dict[str, str] | None = None,
    ) -> None:
        self._settings = settings
        self._worker = settings.worker
        self._engine = engine
        self._metrics = metrics or WorkerMetrics()
        self._clock = clock or WallClock()
        self._model_facts = model_facts or {"model_id": engine.model_id}
        self.worker_id = settings.worker.worker_id or default_worker_id()
        prefix = settings.kafka.topic_prefix
        self._topics = {role: topic_name(role.value, prefix) for role in TopicRole}
        self._admission = Admission(AdmissionLimits.of(self._worker))
        self._book = PartitionBook()
        # Idle time is measured on this clock (ms): it runs only while the worker fetches, so a
        # paused or stalled worker does not take its callers' silence for hang-ups.
        self._fetch_clock_ms = 0
        self._fetch_tick_ms: int | None = None
        self._stop = threading.Event()
        self._last_commit_ms = 0
        self._commit_needed = False
        self.status = WorkerStatus()
        # Staged for the next commit; its chunk counts are counted in the metrics only when that
        # commit succeeds (a rewind handles the records again, and they must count once).
        self._outbox = Outbox()
        self._notices: queue.SimpleQueue[tuple[EventType, dict[str, Any]]] = queue.SimpleQueue()
        self._closing = False
        # The shutdown bound's end (monotonic s) once stopping, None while running: commit
        # retries stop there (the next owner replays what is not committed).
        self._shutdown_deadline: float | None = None
        self._thinning = PartialThinning(self._worker.max_pending_jobs)
        self._audio_ms_since_step = 0.0
        self._early_finals_seen = (0, 0)  # the engine's (decoded, used) counters, last read
        # Partitions of the last assignment while their backlog is read (empty: not catching up).
        self._catch_up_partitions: frozenset[int] = frozenset()
        self._assigned_at = 0.0  # monotonic time of that assignment
        # Partitions of asr.checkpoints when last read (None: not read): audio partition N
        # keeps its checkpoints in partition N (``_check_checkpoint_partitions``).
        self._checkpoint_partitions: int | None = None
        self._gpu = torch.cuda.is_available()
        self._last_gpu_sample_ms = 0
        self._consumer: Any = None
        self._tx: Any = None
        self._partials: Any = None
        # When the open transaction began (monotonic s), None between transactions: what a
        # crash must abort, and whether the broker may have timed it out (``_raise_if_fenced``).
        self._transaction_began_s: float | None = None
        # The open commit's own bound (monotonic s): its calls are retried until then, never
        # past the broker's transaction timeout (``_commit``).
        self._commit_deadline: float | None = None
        # Partitions were lost: the others rewind before the next records are handled.
        self._rewind_pending = False
        # Partitions rewound (→ the offset they resume from) inside the current ``consume``:
        # its batch may hold their records from before the seek (``_drop_stale``).
        self._rewound: dict[int, int] = {}
        # Every broker unreachable, as the consumer last said (``_on_consumer_error``).
        self._brokers_down = False
        self._faults = Faults.of(self._worker.faults)
        if self._faults:
            logger.warning("fault points armed (tests only): %s", self._worker.faults)
            engine.wrap_recognizer(self._faults.around)

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish (thread-safe; what SIGTERM calls). The shutdown bound
        (``shutdown_timeout_ms``) runs from here: a commit in flight shortens its retries."""
        self._start_shutdown_clock()
        self._stop.set()

    def notify_dependency(self, dependency: Dependency, up: bool, detail: str = "") -> None:
        """Another thread saw a dependency (Redis) go down or come back (thread-safe).

        The loop turns it into a ``dependency_down/up`` event and the dependency metric.
        """
        self._metrics.set_dependency_up(dependency, up)
        kind = EventType.DEPENDENCY_UP if up else EventType.DEPENDENCY_DOWN
        self._notices.put((kind, {"dependency": dependency.value, "detail": detail}))

    def notify_hotwords(self, scope: Scope, tenant: str, call_id: str | None, version: int) -> None:
        """A hotword list changed in this worker (thread-safe): metric + event."""
        self._metrics.count_hotword_update(scope)
        self._notices.put(
            (
                EventType.HOTWORDS_UPDATED,
                {"scope": scope.value, "tenant": tenant, "call_id": call_id, "version": version},
            )
        )

    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self.stop())

    def run(self) -> None:
        """Run until stopped. Raises InfrastructureError on a fatal Kafka error."""
        kafka = self._settings.kafka
        self._tx = self._transactional_producer()
        self._partials = new_producer(partials_producer_config(kafka, self.worker_id))
        try:
            # A broker that has just restarted answers that its transaction coordinator is
            # still loading (found by bench/chaos.py: the worker exited); that is waited for.
            producer = self._tx
            retrying(
                lambda: producer.init_transactions(TRANSACTION_TIMEOUT_S),
                cut_off=self._cut_off,
                progress=self._progressed,
                also=lambda error: error.code() in COORDINATOR_MOVING,
            )
        except KafkaException as error:
            self._tx.poll(0)  # its librdkafka lines (why: a refused connection) show first
            raise InfrastructureError(f"cannot start Kafka transactions: {error}") from None
        config = consumer_config(kafka, self._worker, self.worker_id)
        self._consumer = new_consumer({**config, "error_cb": self._on_consumer_error})
        self._check_checkpoint_partitions()
        self.status.model_loaded = True
        self._progressed()
        self.status.running = True
        self._event(EventType.MODEL_LOADED, detail=dict(self._model_facts))
        self._event(EventType.WORKER_STARTED, detail={"worker_id": self.worker_id})
        self._consumer.subscribe(
            [self._topics[TopicRole.AUDIO_CHUNKS]],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        try:
            while not self._stop.is_set():
                self._iteration()
        except BaseException:
            # Only a requested stop commits: after a failure the engine's state may be part-way
            # through a step, and committing it could release records whose finals never
            # reached the outbox. The next owner replays from the last commit instead.
            self._abandon()
            raise
        self._shutdown()

    def _iteration(self) -> None:
        self._rewound = {}
        records = self._consumer.consume(
            num_messages=self._worker.poll_batch, timeout=self._worker.poll_timeout_ms / 1000
        )
        if records:
            self._brokers_down = False  # records come from a broker
        self._tick_fetch_clock()
        if self._rewind_pending:
            # Partitions were lost during the poll and the others' staged output was dropped:
            # their sessions rewind to the last commit, and these records come again.
            self._rewind_pending = False
            self._rewind()
            self._progressed()
            return
        if self._rewound:
            records = self._drop_stale(records)
        for record in records:
            self._handle(record)
        started = time.perf_counter()
        # Paused, the backlog cannot be read: decode, so that the finals drain and fetching resumes.
        reading_backlog = not self.status.paused and self._catching_up()
        if reading_backlog:
            outputs = self._engine.step(max_jobs=0)  # VAD only: the backlog's decodes wait
        else:
            caught_up = bool(self._catch_up_partitions)
            self._catch_up_partitions = frozenset()
            outputs = self._engine.step(
                max_jobs=self._worker.max_step_jobs,
                partials=self._partials_this_step(),
                partials_first=caught_up,
            )
        if self._engine.last_vad_s is not None:
            self._metrics.observe_duration(DurationKind.VAD, self._engine.last_vad_s)
        if self._engine.last_step_jobs:
            self._metrics.observe_step(
                self._engine.last_step_jobs,
                time.perf_counter() - started,
                self._audio_ms_since_step / 1000,
            )
            self._audio_ms_since_step = 0.0
        self._count_early_finals()
        self._sample_gpu()
        for output in outputs:
            self._route(output)
        if not reading_backlog:  # a restored session's chunks may still lie ahead in the backlog
            self._close_idle_sessions()
        self._drain_notices()
        now_ms = self._clock.now_ms()
        if self._commit_needed or now_ms - self._last_commit_ms >= self._worker.commit_interval_ms:
            self._commit()
        if not reading_backlog:
            # Reading a backlog queues finals without decoding them, by design: pausing for them
            # would stop the reading that ends the catch-up (it is bounded by CATCH_UP_MAX_S).
            self._backpressure()
        self._partials.poll(0)
        # Serves the transactional producer's queue (its librdkafka log lines and errors) between
        # commits too: a worker with nothing to commit (a standby, idle partitions) never opens a
        # transaction, and the queue would grow unread. No transactional call is in flight here.
        self._tx.poll(0)
        self._metrics.set_active_sessions(len(self._engine.sessions))
        self._progressed()

    def _drop_stale(self, records: list[Message]) -> list[Message]:
        """The batch without the records of partitions rewound inside ``consume`` (a revoke's
        commit failed there), which are sought back to where they resume.

        The client had fetched some of their records before the seek, and the batch it
        returns holds them: handled, they were admitted past a sequence gap, and the same
        audio delivered again from the rewound position was refused as out of order (found by
        bench/chaos.py). Seeking again to the same offsets brings back any record of theirs
        that came after the seek and is dropped here with the stale ones.
        """
        for partition, offset in self._rewound.items():
            if partition in self._book.partitions:  # else revoked since: its next owner restores it
                self._seek(partition, offset)
        return [r for r in records if r.error() is not None or r.partition() not in self._rewound]

    def _on_consumer_error(self, error: KafkaError) -> None:
        """The consumer's client errors (on the loop's thread, inside ``consume``): logged,
        and "all brokers down" stops the fetch clock until records come or a commit passes."""
        log_client_error(f"streamscribe-worker-{self.worker_id}", error)
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self._brokers_down = True

    def _progressed(self) -> None:
        """The loop is not stuck: an iteration finished, or a Kafka call returned."""
        self.status.last_progress_s = time.monotonic()

    def stalled(self) -> str | None:
        """Why the loop looks stuck (no progress for ``LOOP_STALL_S``), or None; thread-safe,
        for ``/healthz``. Before the loop runs (loading) it is not stuck."""
        if not self.status.running:
            return None
        since_s = time.monotonic() - self.status.last_progress_s
        if since_s <= LOOP_STALL_S:
            return None
        return f"the worker loop made no progress for {since_s:.0f} s"

    def _catching_up(self) -> bool:
        """Still reading an assignment's backlog (``flow.catching_up``)."""
        lags = [
            self._fetch_lag(partition, progress)
            for partition in self._catch_up_partitions
            if (progress := self._book.partitions.get(partition)) is not None  # not revoked
        ]
        return catching_up(
            since_assigned_s=time.monotonic() - self._assigned_at,
            lags=lags,
            poll_batch=self._worker.poll_batch,
            max_s=CATCH_UP_MAX_S,
            first_fetch_s=CATCH_UP_FIRST_FETCH_S,
        )

    def _count_early_finals(self) -> None:
        counts = (self._engine.early_finals_decoded, self._engine.early_finals_used)
        if counts != self._early_finals_seen:
            (decoded, used), (seen_decoded, seen_used) = counts, self._early_finals_seen
            self._metrics.count_early_finals(EarlyFinalOutcome.DECODED, decoded - seen_decoded)
            self._metrics.count_early_finals(EarlyFinalOutcome.USED, used - seen_used)
            self._early_finals_seen = counts

    def _start_shutdown_clock(self) -> float:
        """The shutdown bound's end (monotonic s), set the first time this is called."""
        if self._shutdown_deadline is None:
            self._shutdown_deadline = time.monotonic() + self._worker.shutdown_timeout_ms / 1000
        return self._shutdown_deadline

    def _cut_off(self) -> float | None:
        """When the retries of a transactional call stop (monotonic s): the shutdown bound's
        end while stopping, the open commit's deadline inside a commit, the earlier of both;
        None when neither applies."""
        bounds = [b for b in (self._shutdown_deadline, self._commit_deadline) if b is not None]
        return min(bounds) if bounds else None

    def _call_timeout_s(self) -> float:
        """The timeout of one transactional call: ``TRANSACTION_TIMEOUT_S``, or what is left
        until ``_cut_off`` (at least 0.1 s)."""
        cut_off = self._cut_off()
        if cut_off is None:
            return TRANSACTION_TIMEOUT_S
        return max(0.1, min(TRANSACTION_TIMEOUT_S, cut_off - time.monotonic()))

    def _shutdown(self) -> None:
        """Stop fetching, commit what is done, hand open work to the next owner, leave."""
        deadline = self._start_shutdown_clock()  # already running unless the loop failed
        try:
            if self._consumer is not None and self.status.assigned:
                self._consumer.pause(self._assignment())
            if time.monotonic() < deadline:
                self._commit()
            else:
                logger.warning("no time left for a last commit (the next owner replays)")
                self._drop_partition_output()
        except (KafkaException, InfrastructureError) as error:
            logger.warning("final commit failed (the next owner replays): %s", error)
        finally:
            remaining = max(0.5, deadline - time.monotonic())
            if self._partials is not None:
                self._partials.flush(min(remaining, 5.0))
            self._closing = True
            if self._consumer is not None:
                try:
                    self._consumer.close()  # the revoke stages partitions_revoked
                except (KafkaException, KafkaError) as error:
                    logger.warning("consumer close: %s", error)
            self._event(EventType.WORKER_STOPPED, detail={"worker_id": self.worker_id})
            self._publish_leaving_events()
            self.status.running = False

    def _abandon(self) -> None:
        """The loop failed: commit nothing, abort the open transaction, leave the group.

        What was staged is dropped. The partitions' next owner (another worker, or this one
        restarted) replays from the last commit, whose finals, checkpoints and offsets were
        committed together. Leaving now rather than at the session timeout hands the
        partitions over sooner; the leave's revoke commits nothing (``_closing``).
        """
        logger.error("the worker loop failed: nothing more is committed, the next owner replays")
        self._closing = True
        self._outbox.discard()
        self._abort_open_transaction(ABANDON_ABORT_S)
        try:
            if self._partials is not None:
                self._partials.flush(1.0)
            if self._consumer is not None:
                self._consumer.close()
        except (KafkaException, KafkaError, RuntimeError) as error:
            logger.warning("leaving after the failure: %s", error)
        self.status.running = False

    def _abort_open_transaction(self, bound_s: float) -> None:
        """Abort the open transaction, if any, within about ``bound_s``: the partitions' next
        owner then reads their checkpoints at once instead of waiting for the broker to time
        the transaction out. Failing that, the broker's timeout aborts it."""
        producer = self._tx
        if self._transaction_began_s is None or producer is None:
            return
        try:
            bounded(lambda: producer.abort_transaction(bound_s), bound_s)
            self._transaction_began_s = None
        except (KafkaException, StuckCallError) as error:
            logger.warning("the open transaction was not aborted (the broker will): %s", error)

    def _publish_leaving_events(self) -> None:
        """Publish what the leave itself staged (partitions_revoked, worker_stopped).

        The partitions are gone by now, so this transaction carries events only, no offsets.
        """
        if self._tx is None or not self._outbox:
            return
        try:
            self._commit()
        except (KafkaException, InfrastructureError) as error:
            logger.warning("the leaving events were not published: %s", error)

    # -- input -----------------------------------------------------------------------------

    def _handle(self, record: Message) -> None:
        error = record.error()
        if error is not None:
            if error.fatal():
                # The consumer cannot go on (fenced as a static member, say): stop, committing
                # nothing; the partitions' next owner replays.
                raise InfrastructureError(f"fatal Kafka consumer error: {error}")
            if error.code() != KafkaError._PARTITION_EOF:
                logger.warning("consume error: %s", error)
            return
        partition = record.partition()
        offset = record.offset()
        progress = self._book.partitions.get(partition)
        if progress is None:
            return  # revoked while this batch was in flight
        progress.consumed(offset)
        progress.delivered(self._fetch_clock_ms)
        replaying = offset <= progress.handled_through
        headers = readable_headers(record)
        if headers is None:
            if not replaying:
                detail = "a header name is not UTF-8 text: the record's headers cannot be read"
                self._dead_letter(record, RejectReason.UNREADABLE_HEADERS, detail, None, [])
            return
        try:
            chunk = decode_chunk(
                record.key(),
                record.value(),
                headers,
                max_payload_bytes=self._worker.max_chunk_bytes,
            )
        except ChunkRejectedError as rejected:
            if not replaying:
                self._dead_letter(record, rejected.reason, rejected.detail, None, headers)
            return
        key = SessionKey(chunk.call_id, chunk.channel)
        known = progress.sessions.get(key)
        if known is not None and offset <= known.skip_through:
            return  # covered by the session's restored snapshot
        if replaying and known is None and self._admission.state(key) is None:
            # Handled by an earlier owner, yet neither checkpointed nor remembered: that owner
            # refused the call (an admitted session is checkpointed at the commit that moves
            # past its first record). Refused again, quietly (its dead letter is out), whatever
            # this worker's own load: admitted here, it would be transcribed unannounced.
            return
        duration_ms = chunk.duration_ms
        # The session limit is waived only for calls an earlier owner admitted: every admitted
        # session is checkpointed at the commit that moves past its first record.
        decision = self._admission.decide(
            key,
            chunk.seq,
            duration_ms,
            chunk.end_of_stream,
            replaying=replaying and known is not None,
        )
        if decision.verdict is Verdict.DUPLICATE:
            if not replaying:
                self._outbox.count_duplicate()
            return
        if decision.verdict is Verdict.REJECT:
            self._book.refused_late(key, offset)
            if not replaying:
                assert decision.reason is not None
                self._dead_letter(record, decision.reason, decision.detail, key, headers)
            return
        if not replaying:
            self._outbox.count_admitted()
            if decision.new_session:
                self._event(EventType.SESSION_STARTED, key, {"tenant": chunk.tenant})
            if decision.gap is not None:
                first, end = decision.gap
                self._event(
                    EventType.SEQUENCE_GAP, key, {"missing_from": first, "missing_to": end - 1}
                )
        # Bookkeeping only for admitted chunks: rejected and duplicate ones leave nothing behind.
        session = known if known is not None else progress.session(key)
        self._book.own(key, partition)
        self._audio_ms_since_step += duration_ms
        session.needed_offsets.append(offset)
        session.last_activity_ms = self._fetch_clock_ms
        session.last_flowing_ms = progress.flowing_ms
        session.last_offset = offset
        session.dirty = True
        feed_chunk(self._engine, key, chunk, offset)

    def _dead_letter(
        self,
        record: Message,
        reason: str,
        detail: str,
        key: SessionKey | None,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> None:
        """Stage the record on ``audio.dlq`` with its ``headers`` (as read, once: see
        ``readable_headers``), cut to fit (``fit_dead_letter``), and a ``chunk_rejected``
        event."""
        info = DeadLetterInfo(
            reason=str(reason),
            detail=detail,
            topic=record.topic(),
            partition=record.partition(),
            offset=record.offset(),
            worker_id=self.worker_id,
        )
        # Far beyond anything audio.chunks accepts, parts are kept cut rather than a record the
        # transaction cannot carry (its commit would fail, rewind and fail again forever).
        letter = fit_dead_letter(
            record.key(), record.value(), headers, info.headers(), DEAD_LETTER_MAX_VALUE_BYTES
        )
        self._outbox.stage(
            self._topics[TopicRole.DLQ], key=letter.key, value=letter.value, headers=letter.headers
        )
        self._outbox.count_dead_letter(RejectReason(reason))
        self._event(
            EventType.CHUNK_REJECTED,
            key,
            to_dict(info),
            call_id=None if key else _text_key(record.key()),
        )
        self._commit_needed = True

    # -- output ----------------------------------------------------------------------------

    def _route(self, output: Partial | Final | Suppressed | SessionEnded) -> None:
        if isinstance(output, Partial):
            self._produce_partial(output)
        elif isinstance(output, Final):
            self._produce_final(output)
        elif isinstance(output, Suppressed):
            self._metrics.count_suppressed_hallucination(output.guard)
            if output.final:
                progress = self._book.session(output.key)
                if progress is not None and progress.finals_suppressed is not None:
                    progress.finals_suppressed += 1
                self._finalized(output.key, output.utterance_index, output.end_ms)
                self._event(
                    EventType.HALLUCINATION_SUPPRESSED,
                    output.key,
                    {"utterance_index": output.utterance_index, "guard": output.guard.value},
                )
        else:
            self._session_ended(output)

    def _produce_partial(self, partial: Partial) -> None:
        try:
            self._partials.produce(
                self._topics[TopicRole.PARTIALS],
                key=partial.call_id.encode(),
                value=to_json(partial),
            )
        except BufferError:
            self._metrics.count_thinned_partials()
            return
        if partial.capture_ms is not None:
            latency_s = max(0, partial.emit_ms - partial.capture_ms) / 1000
            self._metrics.observe_duration(DurationKind.CHUNK_TO_PARTIAL, latency_s)

    def _produce_final(self, final: Final) -> None:
        key = SessionKey(final.call_id, final.channel)
        self._outbox.stage_final(self._topics[TopicRole.FINALS], final, to_json(final))
        progress = self._book.session(key)
        if progress is not None and progress.finals_published is not None:
            progress.finals_published += 1
        self._finalized(key, final.utterance_index, final.end_ms)

    def _finalized(self, key: SessionKey, utterance_index: int, end_ms: int | None) -> None:
        """Utterance ``utterance_index``, whose audio ends at ``end_ms``, got its final (or was
        suppressed) in this transaction."""
        progress = self._book.session(key)
        if progress is not None:
            if utterance_index >= progress.finals_through:
                progress.finals_through = utterance_index
                progress.finals_end_ms = end_ms
            progress.dirty = True
        self._commit_needed = True

    def _session_ended(self, ended: SessionEnded) -> None:
        self._admission.end(ended.key)
        progress = self._book.session(ended.key)
        utterances, suppressed = ended.utterances, ended.suppressed
        if progress is not None:
            progress.ended = True
            progress.needed_offsets.clear()
            progress.dirty = True
            # Counted across owners: after a failover the engine cannot tell replayed
            # utterances that were published from those that were suppressed.
            if progress.finals_published is not None:
                utterances = progress.finals_published
            if progress.finals_suppressed is not None:
                suppressed = progress.finals_suppressed
        self._event(
            EventType.SESSION_ENDED,
            ended.key,
            {
                "tenant": ended.tenant,
                "duration_ms": ended.audio_ms,
                "speech_ms": ended.speech_ms,
                "utterances": utterances,
                "suppressed": suppressed,
            },
        )
        self._commit_needed = True

    def _event(
        self,
        kind: EventType,
        key: SessionKey | None = None,
        detail: dict[str, Any] | None = None,
        *,
        call_id: str | None = None,
    ) -> None:
        event = Event(
            type=kind,
            emit_ms=self._clock.now_ms(),
            source=self.worker_id,
            call_id=key.call_id if key else call_id,
            channel=key.channel if key else None,
            detail=detail or {},
        )
        record_key = (event.call_id or self.worker_id).encode()
        self._outbox.stage(self._topics[TopicRole.EVENTS], key=record_key, value=to_json(event))

    def _sample_gpu(self) -> None:
        if not self._gpu:
            return
        now_ms = self._clock.now_ms()
        if now_ms - self._last_gpu_sample_ms >= self._settings.metrics.gpu_sample_interval_ms:
            self._last_gpu_sample_ms = now_ms
            self._metrics.sample_gpu()

    def _drain_notices(self) -> None:
        while True:
            try:
                kind, detail = self._notices.get_nowait()
            except queue.Empty:
                return
            self._event(kind, detail=detail)

    # -- sessions --------------------------------------------------------------------------

    def _tick_fetch_clock(self) -> None:
        """Advance the fetch clock by the time since the last poll: not while paused, not while
        every broker is unreachable (a broker outage is no caller's silence: counted, it
        closed every session of a long one, and their audio after it was refused), and by at
        most ``FETCH_CLOCK_MAX_TICK_MS`` per iteration."""
        now_ms = self._clock.now_ms()
        if self._fetch_tick_ms is not None and not self.status.paused and not self._brokers_down:
            self._fetch_clock_ms += min(
                max(0, now_ms - self._fetch_tick_ms), FETCH_CLOCK_MAX_TICK_MS
            )
        self._fetch_tick_ms = now_ms

    def _close_idle_sessions(self) -> None:
        """End sessions whose caller vanished without end-of-stream, restored ones included:
        no chunk of theirs while their partition delivered records for ``idle_timeout_ms``
        (its flow clock), or none for ``quiet_idle_timeout_ms`` of fetching while it delivered
        nothing at all (a lone call gone; an outage looks the same, hence the longer wait).

        Measured on the fetch clock alone, a publisher cut off from Kafka for longer than the
        idle timeout (a broker restart on a loaded machine, a takeover's first fetch) closed
        every call it was sending, and their audio, delivered late, was refused as after
        their end (found by bench/chaos.py)."""
        now_ms = self._fetch_clock_ms
        timeout_ms = self._worker.idle_timeout_ms
        quiet_timeout_ms = self._worker.quiet_idle_timeout_ms
        for progress in self._book.partitions.values():
            for key, session in progress.sessions.items():
                if (
                    not session.ended
                    and (
                        progress.flowing_ms - session.last_flowing_ms > timeout_ms
                        or now_ms - session.last_activity_ms > quiet_timeout_ms
                    )
                    and self._engine.knows(key)  # a cold resume is only expected until a chunk
                ):
                    self._engine.close(key)
                    # Closed now: a chunk that comes before its final is out is refused as
                    # after an end-of-stream (dead-lettered), not fed to a stream that is over.
                    self._admission.end(key)
                    session.last_activity_ms = now_ms
                    session.last_flowing_ms = progress.flowing_ms

    # -- commits ---------------------------------------------------------------------------

    def _commit(self) -> None:
        """Checkpoints + low watermarks + everything produced since the last commit, atomically."""
        started = time.perf_counter()
        offsets = []
        now_ms = self._clock.now_ms()
        for partition, progress in self._book.partitions.items():
            self._write_checkpoints(partition, progress, now_ms)
            self._record_lag(partition, progress)
            watermark = progress.low_watermark()
            self._write_partition_checkpoint(partition, progress, watermark)
            if watermark is not None:
                offsets.append(
                    TopicPartition(self._topics[TopicRole.AUDIO_CHUNKS], partition, watermark)
                )
        self._expire_ended(now_ms)
        self._last_commit_ms = now_ms
        self._commit_needed = False
        if not offsets and not self._outbox.records:
            self._count_committed()
            return
        # Everything of this commit is produced now, so a transaction lives only for the
        # produce + commit round trips, never for a long recognizer step.
        producer = self._tx
        # Retries end before the broker would abort the transaction as timed out (which
        # fences this producer): past that the commit is given up, aborted and rewound.
        self._commit_deadline = time.monotonic() + commit_budget_s(
            self._worker.transaction_timeout_ms
        )
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
                metadata = self._consumer.consumer_group_metadata()
                transactional(
                    lambda timeout_s: producer.send_offsets_to_transaction(
                        offsets, metadata, timeout_s
                    ),
                    timeout_s=self._call_timeout_s,
                    cut_off=self._cut_off,
                    progress=self._progressed,
                )
                self._faults.hit(FaultPoint.AFTER_SEND_OFFSETS)
            transactional(
                producer.commit_transaction,
                timeout_s=self._call_timeout_s,
                cut_off=self._cut_off,
                progress=self._progressed,
            )
            self._transaction_began_s = None
        except (KafkaException, StuckCallError) as error:
            self._commit_deadline = None
            self._outbox.discard()  # the rewind handles the records again
            if self._stop.is_set():
                # Shutting down: no rewind; the partitions' next owner replays the work, and
                # reads their checkpoints at once if the transaction is aborted here.
                self._abort_open_transaction(self._call_timeout_s())
                raise InfrastructureError(f"the last commit failed: {error}") from None
            self._transaction_failed(error)
            return
        finally:
            self._commit_deadline = None
        self._brokers_down = False  # the transaction coordinator answered
        self.status.commits += 1
        finals = self._count_committed()
        # The loop's own view of Kafka (the /readyz probe's is only taken when probed).
        self._metrics.set_dependency_up(Dependency.KAFKA, True)
        committed_ms = self._clock.now_ms()
        for final in finals:
            if final.capture_ms is not None:
                self._metrics.observe_duration(
                    DurationKind.ENDPOINT_TO_FINAL, max(0, committed_ms - final.capture_ms) / 1000
                )
        for progress in self._book.partitions.values():
            progress.checkpointed_handled_through = progress.handled_through
            progress.checkpointed_offset = progress.staged_offset
        self._metrics.observe_duration(DurationKind.COMMIT, time.perf_counter() - started)

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
            self.status.dead_letters += count
        return finals

    def _record_lag(self, partition: int, progress: PartitionProgress) -> None:
        lag = self._fetch_lag(partition, progress)
        if lag is not None:
            self._metrics.set_partition_lag(partition, lag)

    def _fetch_lag(self, partition: int, progress: PartitionProgress) -> int | None:
        """Records not yet consumed in a partition (from the consumer's cached high watermark);
        None while unknown (nothing consumed from it yet, or no watermark fetched)."""
        if progress.next_offset < 0:
            return None
        topic_partition = TopicPartition(self._topics[TopicRole.AUDIO_CHUNKS], partition)
        try:
            _, high = self._consumer.get_watermark_offsets(topic_partition, cached=True)
        except KafkaException:
            return None
        return max(0, high - progress.next_offset) if high >= 0 else None

    def _write_checkpoints(self, partition: int, progress: PartitionProgress, now_ms: int) -> None:
        """Checkpoint every session whose progress changed; advance ``handled_through``.

        An ended session gets a final "ended" checkpoint and is forgotten. Otherwise, when the
        session is quiescent and its last snapshot is older than the checkpoint interval (or a
        final moved), a new snapshot replaces the old one and releases the records it covers;
        when it is not quiescent, only ``finals_through`` is updated (replay then starts from the
        older snapshot and skips the utterances already finalized).
        """
        topic = self._topics[TopicRole.CHECKPOINTS]
        interval_ms = self._worker.checkpoint_interval_ms
        for key, session in list(progress.sessions.items()):
            if not session.dirty:
                continue
            if session.ended:
                checkpoint = SessionCheckpoint(
                    key,
                    None,
                    _copy_admission(self._admission, key),
                    session.finals_through,
                    True,
                    session.finals_published,
                    session.finals_suppressed,
                    session.finals_end_ms,
                    self._engine.vad_id,
                )
                self._outbox.stage(
                    topic, key=encode_key(key), value=checkpoint.encode(), partition=partition
                )
                self._book.end(key, partition, now_ms)
                continue
            finals_moved = session.finals_through != session.checkpointed_finals_through
            snapshot = None
            if finals_moved or now_ms - session.last_snapshot_ms >= interval_ms:
                snapshot = self._engine.snapshot(key)
            if snapshot is not None:
                progress.snapshot_taken(key, snapshot)
                session.snapshot_admission = _copy_admission(self._admission, key)
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
                self._engine.vad_id,
            )
            self._outbox.stage(
                topic, key=encode_key(key), value=checkpoint.encode(), partition=partition
            )
            session.announced = True
            session.checkpointed_finals_through = session.finals_through
            session.dirty = snapshot is None
        if progress.next_offset >= 0:  # nothing fetched yet: the restored value stands
            # Never lowered: a new owner's replay starts below what the last owner handled, and
            # the rest of that replay must still count as handled (no dead letter or event twice).
            progress.handled_through = max(progress.handled_through, progress.next_offset - 1)

    def _write_partition_checkpoint(
        self, partition: int, progress: PartitionProgress, watermark: int | None
    ) -> None:
        """Stage the partition's ``handled_through`` and the offset this commit commits, when
        either changed: a restore compares that offset with the group's committed offset to
        know that it read the checkpoints of the same transaction (``_recover``)."""
        progress.staged_offset = (
            watermark if watermark is not None else progress.checkpointed_offset
        )
        if (
            progress.handled_through == progress.checkpointed_handled_through
            and progress.staged_offset == progress.checkpointed_offset
        ):
            return
        self._outbox.stage(
            self._topics[TopicRole.CHECKPOINTS],
            key=encode_key(PARTITION_KEY),
            value=PartitionCheckpoint(progress.handled_through, progress.staged_offset).encode(),
            partition=partition,
        )

    def _expire_ended(self, now_ms: int) -> None:
        """Forget sessions ended ``ended_retention_ms`` ago and delete their checkpoints
        (tombstones, in this commit): memory and ``asr.checkpoints`` hold the live calls and
        the recently ended ones, not every call a partition ever carried."""
        topic = self._topics[TopicRole.CHECKPOINTS]
        for key, partition in self._book.expire_ended(now_ms, self._worker.ended_retention_ms):
            self._admission.forget(key)
            if partition in self._book.partitions:
                self._outbox.stage(topic, key=encode_key(key), value=None, partition=partition)

    def _transaction_failed(self, error: KafkaException | StuckCallError) -> None:
        """Abort (or replace a stuck or broken producer) and rewind: drop in-RAM state and
        replay from the committed offsets and checkpoints. Being fenced is raised (another
        worker with this worker's id owns its transactions now), unless the transaction was
        open long enough for the broker to have aborted it as timed out, which fences the
        producer too (a broker outage longer than the commit's budget): then a new producer."""
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
                producer = self._tx
                self._commit_deadline = time.monotonic() + commit_budget_s(
                    self._worker.transaction_timeout_ms
                )
                try:
                    transactional(
                        lambda timeout_s: _abort_unless_committing(producer, timeout_s),
                        timeout_s=self._call_timeout_s,
                        cut_off=self._cut_off,
                        progress=self._progressed,
                    )
                    cause = RewindCause.FAILED
                except KafkaException as abort_error:
                    # A broker restarted mid-transaction can leave the producer in a state it
                    # cannot leave (INVALID_TXN_STATE, fatal): a new producer can.
                    self._raise_if_fenced(abort_error.args[0])
                    error, cause = abort_error, RewindCause.FATAL
                except StuckCallError as stuck:
                    error = stuck
                finally:
                    self._commit_deadline = None
        self._transaction_began_s = None  # aborted, or its producer is replaced
        if cause is not RewindCause.FAILED:
            logger.error("%s; replacing the transactional producer and rewinding", error)
            self._replace_producer()
        self._metrics.count_transaction_rewind(cause)
        self._rewind()

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

    def _transactional_producer(self) -> Any:
        """Finals, events, checkpoints and dead letters go through it (stable transactional id)."""
        kafka = self._settings.kafka
        return new_producer(transactional_producer_config(kafka, self._worker, self.worker_id))

    def _replace_producer(self) -> None:
        """A new transactional producer with the same transactional id.

        Its ``init_transactions`` fences the stuck one and completes that one's open transaction
        (committed if its commit had reached the coordinator, else aborted), so the committed
        offsets and checkpoints that ``_rewind`` reads afterwards are consistent. The stuck
        producer is never touched again: the thread blocked inside it keeps it alive, and frees
        it if the call ever returns.
        """
        self._tx = producer = self._transactional_producer()
        try:
            transactional(
                producer.init_transactions,
                timeout_s=self._call_timeout_s,
                cut_off=self._cut_off,
                progress=self._progressed,
                also=lambda error: error.code() in COORDINATOR_MOVING,
            )
        except (KafkaException, StuckCallError) as error:
            raise InfrastructureError(f"cannot restart Kafka transactions: {error}") from None

    def _rewind(self) -> None:
        """Forget every owned session, rebuild from checkpoints, seek to the committed offsets
        (``recovery.recover``: the offsets first, then the checkpoints they agree with)."""
        partitions = list(self._book.partitions)
        self._forget(partitions)
        point = self._restore_unless_stopping(self._consumer, partitions)
        if point is None:
            return
        for partition in partitions:
            self._rewound[partition] = point.offsets[partition]
            self._seek(partition, point.offsets[partition])

    def _seek(self, partition: int, offset: int) -> None:
        """Seek an owned audio partition to ``offset``; a partition being revoked right now
        cannot be (logged): its next owner replays it anyway."""
        topic = self._topics[TopicRole.AUDIO_CHUNKS]
        try:
            self._consumer.seek(TopicPartition(topic, partition, offset))
        except KafkaException as seek_error:
            logger.warning("cannot rewind partition %d: %s", partition, seek_error)

    def _read_committed_offsets(self, partitions: Sequence[int]) -> dict[int, int | None]:
        """The group's committed offsets of ``partitions``, stable: the consumer is
        ``read_committed``, so librdkafka asks for stable offsets and the coordinator answers
        once no transaction holds pending offsets for them (KIP-447). None: no offset."""
        topic = self._topics[TopicRole.AUDIO_CHUNKS]
        committed: list[TopicPartition] = []

        def read() -> None:
            committed[:] = self._consumer.committed(
                [TopicPartition(topic, p) for p in partitions], self._call_timeout_s()
            )

        try:
            # Like every call of the recovery, bounded by a shutdown that begins meanwhile.
            # Every error that is not fatal is tried again: a try that times out (a frozen
            # owner's pending offsets hold it until its transaction resolves), and a group
            # coordinator moving or loading after a broker restart (NOT_COORDINATOR,
            # COORDINATOR_LOAD_IN_PROGRESS: found by bench/chaos.py, the workers exited).
            retrying(
                read,
                cut_off=self._cut_off,
                progress=self._progressed,
                also=lambda error: not error.fatal(),
            )
        except KafkaException as error:
            raise InfrastructureError(f"cannot read the committed offsets: {error}") from None
        return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in committed}

    # -- backpressure ----------------------------------------------------------------------

    def _partials_this_step(self) -> bool:
        """Whether this step may decode partials (``flow.PartialThinning``): the first lever
        under load. If finals still pile up, ``_backpressure`` pauses the partitions."""
        step = self._thinning.step(self._engine.due_partials(), self._engine.pending_finals())
        if step.newly_thinned:
            self._metrics.count_thinned_partials(step.newly_thinned)
        self.status.thinning = step.thinning
        if step.changed:
            self._event(
                EventType.PARTIALS_THINNED,
                detail={"thinning": step.thinning, "pending_jobs": step.pending_jobs},
            )
        return step.partials

    def _backpressure(self) -> None:
        """Pause fetching while finals pile up, resume once they drain (``flow.paused_after``)."""
        pending = self._engine.pending_finals()
        paused = paused_after(self.status.paused, pending, self._worker.max_pending_jobs)
        if paused == self.status.paused:
            return
        if paused:
            self._consumer.pause(self._assignment())
        else:
            self._consumer.resume(self._assignment())
        self.status.paused = paused
        self._count_paused_partitions()
        self._event(EventType.BACKPRESSURE, detail={"paused": paused, "pending_jobs": pending})

    def _count_paused_partitions(self) -> None:
        self._metrics.set_paused_partitions(len(self.status.assigned) if self.status.paused else 0)

    def _assignment(self) -> list[TopicPartition]:
        topic = self._topics[TopicRole.AUDIO_CHUNKS]
        return [TopicPartition(topic, p) for p in sorted(self.status.assigned)]

    # -- rebalances ------------------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = [tp.partition for tp in partitions]
        known = self._checkpoint_partitions
        if numbers and (known is None or max(numbers) >= known):
            # audio.chunks raised while running (asr.checkpoints must have been too), or
            # asr.checkpoints not there yet when the worker started (the topics Job racing it).
            self._check_checkpoint_partitions(audio_partitions=max(numbers) + 1)
        topic = self._topics[TopicRole.AUDIO_CHUNKS]
        point = self._restore_unless_stopping(consumer, numbers)
        if point is None:
            # Assigned but not owned: paused, and handed to the next owner with the leave.
            consumer.incremental_assign(partitions)
            consumer.pause(partitions)
            return
        # Exactly the offsets the checkpoints agree with: left to itself, the client would
        # fetch the committed offsets again, after the checkpoints were read.
        consumer.incremental_assign([TopicPartition(topic, p, point.offsets[p]) for p in numbers])
        for p in numbers:
            if p in self._rewound:  # rewound, revoked and assigned again in one consume
                self._rewound[p] = point.offsets[p]
        if numbers:
            self._assigned_at = time.monotonic()
            self._catch_up_partitions = frozenset(numbers)
        self.status.assigned = self.status.assigned | frozenset(numbers)
        self._metrics.set_assignment(self.status.assigned)
        self._event(EventType.PARTITIONS_ASSIGNED, detail={"partitions": sorted(numbers)})
        if partitions:
            # librdkafka keeps a partition's pause through a revoke and a later re-assignment:
            # one revoked while paused would come back paused for good unless resumed here.
            if self.status.paused:
                consumer.pause(partitions)
            else:
                consumer.resume(partitions)
        self._count_paused_partitions()

    def _check_checkpoint_partitions(self, audio_partitions: int | None = None) -> None:
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
            metadata = self._consumer.list_topics(timeout=CHECKPOINT_METADATA_TIMEOUT_S)
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

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = [tp.partition for tp in partitions]
        if not self._closing:
            # Hand the partitions over with everything done so far committed. (If the group has
            # already moved on, the commit fails and everything rewinds: still exactly once.)
            self._commit()
        self._forget(numbers)
        # Only what was announced as assigned: partitions whose checkpoint read a shutdown cut
        # were never owned here, and their revoke at the leave is no news.
        owned = sorted(n for n in numbers if n in self.status.assigned)
        if owned or not numbers:
            self._event(EventType.PARTITIONS_REVOKED, detail={"partitions": owned})
        self.status.assigned = self.status.assigned - frozenset(numbers)
        self._metrics.set_assignment(self.status.assigned)
        self._count_paused_partitions()

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        numbers = [tp.partition for tp in partitions]
        logger.warning("partitions lost: %s", numbers)
        # Nothing of theirs may be committed now: another worker owns them. What was staged for
        # the other partitions is dropped too and replayed (their offsets were not committed).
        # The worker's own events (backpressure, hotwords, dependencies) are no partition's:
        # they stay, or they would never be published.
        self._drop_partition_output()
        self._forget(numbers)
        # The partitions kept had their staged finals and checkpoints dropped with the rest,
        # while their sessions went on: they rewind to their last commit before the next
        # record is handled (``_iteration``), or those finals would never be published.
        self._rewind_pending = bool(self._book.partitions)
        self.status.assigned = self.status.assigned - frozenset(numbers)
        self._metrics.set_assignment(self.status.assigned)
        self._count_paused_partitions()
        self._event(EventType.PARTITIONS_LOST, detail={"partitions": sorted(numbers)})

    def _drop_partition_output(self) -> None:
        """Drop everything staged since the last commit except the worker's own events: the
        finals, dead letters, checkpoints and session events of records whose offsets will not
        be committed here (their next owner, or a rewind, handles them again)."""
        worker_key = self.worker_id.encode()
        events = self._topics[TopicRole.EVENTS]
        self._outbox.discard(keep=lambda r: r.topic == events and r.key == worker_key)

    def _forget(self, partitions: Iterable[int]) -> None:
        """Drop the sessions of partitions this worker no longer owns (no output)."""
        forgotten = self._book.forget(partitions)
        for key in forgotten.sessions:
            self._engine.drop(key)
            self._admission.forget(key)
        for key in forgotten.ended:
            self._admission.forget(key)

    def _restore_unless_stopping(
        self, consumer: Consumer, partitions: Sequence[int]
    ) -> RestorePoint | None:
        """``_restore``; None when a shutdown cut its checkpoint read. Then nothing of these
        partitions is owned: the leave commits none of their offsets, ``_handle`` drops any
        record of theirs still fetched (not in the book), and they stay paused until the leave
        hands them to the next owner, which restores them."""
        try:
            return self._restore(partitions)
        except CheckpointReadCutError as cut:
            logger.warning("%s; leaving them to the next owner", cut)
            topic = self._topics[TopicRole.AUDIO_CHUNKS]
            consumer.pause([TopicPartition(topic, p) for p in partitions])
            return None

    def _restore(self, partitions: Iterable[int]) -> RestorePoint:
        """Read where the partitions resume (``recovery.recover``) and rebuild their sessions'
        starting state; returns the offsets to resume from."""
        numbers = list(partitions)
        point = recover(
            numbers,
            read_offsets=self._read_committed_offsets,
            read_checkpoints=self._read_checkpoints,
            between=lambda: self._faults.hit(FaultPoint.RESTORE_AFTER_OFFSETS),
        )
        if point.disagreed:
            self._metrics.count_restore_disagreements(len(point.disagreed))
            self._event(
                EventType.RESTORE_DISAGREED,
                detail={
                    "partitions": list(point.disagreed),
                    "offsets": {str(p): point.offsets[p] for p in point.disagreed},
                },
            )
        self._report_vad_changes(point)
        for partition in numbers:
            progress = PartitionProgress(partition)
            self._book.add(progress)
            for record in point.checkpoints.get(partition, ()):
                if isinstance(record, PartitionCheckpoint):
                    progress.handled_through = record.handled_through
                    progress.checkpointed_handled_through = record.handled_through
                    progress.checkpointed_offset = record.committed_offset
                    continue
                self._restore_session(progress, record)
        self._faults.hit(FaultPoint.RESTORE_BEFORE_ASSIGN)
        return point

    def _report_vad_changes(self, point: RestorePoint) -> None:
        """Sessions segmented so far by another VAD (another device, weights or version, as
        in a rolling upgrade) replay their audio on this one, which may segment it a little
        differently: a metric and an event. Their finals stay exactly once (skipped by
        position), but a replayed utterance may be cut differently."""
        ours = self._engine.vad_id
        others = Counter(
            record.vad_id
            for records in point.checkpoints.values()
            for record in records
            if isinstance(record, SessionCheckpoint)
            and not record.ended
            and record.vad_id not in (None, ours)
        )
        if not others:
            return
        self._metrics.count_vad_changes(sum(others.values()))
        self._event(
            EventType.VAD_CHANGED,
            detail={"vad_id": ours, "previous": dict(sorted(others.items()))},
        )
        logger.warning("resuming sessions segmented by another VAD (%s): %s", ours, dict(others))

    def _restore_session(self, progress: PartitionProgress, checkpoint: SessionCheckpoint) -> None:
        key = checkpoint.key
        if checkpoint.ended:
            if checkpoint.admission is not None:
                self._admission.restore(key, checkpoint.admission)
            # Kept for ended_retention_ms from now (the checkpoint's own age is not read), and
            # until the replay has passed its records (``_handle`` tracks the newest).
            self._book.remember_ended(key, progress.partition, self._clock.now_ms(), -1)
            return
        session = progress.session(key)
        session.announced = True
        session.finals_through = checkpoint.finals_through
        session.finals_end_ms = checkpoint.finals_end_ms
        session.checkpointed_finals_through = checkpoint.finals_through
        session.finals_published = checkpoint.finals_published
        session.finals_suppressed = checkpoint.finals_suppressed
        # Idle from now on: a caller gone before the takeover still gets its session closed.
        session.last_activity_ms = self._fetch_clock_ms
        session.last_flowing_ms = progress.flowing_ms
        self._book.own(key, progress.partition)
        snapshot, admission = checkpoint.snapshot, checkpoint.admission
        if snapshot is None or admission is None:
            # Replayed from the call's first record (the committed offset holds it).
            self._engine.expect(
                key, checkpoint.finals_through, finals_end_ms=checkpoint.finals_end_ms
            )
            return
        if not self._restore_snapshot(key, snapshot, checkpoint):
            # The engine state is lost, not the bookkeeping: the records the snapshot covered
            # are released, so the session starts afresh where it ended, numbering and audio
            # position continued, and the records up to it are skipped as after a restore.
            self._engine.expect(
                key,
                checkpoint.finals_through,
                finals_end_ms=checkpoint.finals_end_ms,
                next_index=snapshot.next_index,
                start_samples=snapshot.total_samples,
                tenant=snapshot.tenant,
                stats=SessionStats(*snapshot.stats),
            )
        self._admission.restore(key, _clone(admission))
        session.snapshot = snapshot
        session.snapshot_admission = admission
        session.skip_through = snapshot.last_position if snapshot.last_position is not None else -1

    def _restore_snapshot(
        self, key: SessionKey, snapshot: SessionSnapshot, checkpoint: SessionCheckpoint
    ) -> bool:
        """``engine.restore``; False when the engine cannot use the snapshot (a record that
        decoded but does not restore): logged, as a bad record in the compacted topic must not
        stop every worker that takes the partition. Only the VAD, gate and endpoint state at the
        snapshot is lost then (a few frames of accuracy); its utterances were finalized."""
        try:
            self._engine.restore(
                key,
                snapshot,
                checkpoint.finals_through,
                finals_end_ms=checkpoint.finals_end_ms,
            )
        except (ValueError, TypeError, RuntimeError, ConfigError) as error:
            logger.error("checkpoint of %s is unusable, resuming it cold: %r", key, error)
            self._engine.drop(key)
            return False
        return True

    def _read_checkpoints(self, partitions: Sequence[int]) -> Checkpoints:
        """The latest checkpoints of these partitions (``read_checkpoints``)."""
        return read_checkpoints(
            self._settings.kafka,
            self._topics[TopicRole.CHECKPOINTS],
            partitions,
            worker_id=self.worker_id,
            progressed=self._progressed,
            stopping=lambda: self._shutdown_deadline is not None,
        )


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


def _text_key(key: bytes | None) -> str | None:
    if not key:
        return None
    return key.decode("utf-8", "replace")[:128]


def _copy_admission(admission: Admission, key: SessionKey) -> AdmissionState | None:
    state = admission.state(key)
    return None if state is None else _clone(state)


def _clone(state: AdmissionState) -> AdmissionState:
    """A deep copy (a checkpoint must not change with the live state)."""
    return AdmissionState.from_dict(state.to_dict())
