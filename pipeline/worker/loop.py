"""The ASR worker's run loop: Kafka in, engine in the middle, Kafka out, exactly once.

One loop, read top to bottom (``AsrWorker._iteration``)::

    poll     a batch of audio.chunks records          (the consumer; rebalances run in here)
    admit    each record: intake.admit, dead letters   (Streams.receive)
    step     the engine: VAD, endpoints, decodes       (StreamingEngine.step)
    route    partials out, finals and events staged    (Router.route)
    commit   when due: checkpoints + offsets + finals  (Committer.commit, one transaction)
    pace     pause / resume the fetch                  (Pacing.backpressure)

Around it: ``run`` starts (transactions, consumer, subscribe) and ends the loop; only a
requested stop commits (``HandOver.leave``), a failure commits nothing (``HandOver.abandon``,
decision 0027).

The parts, each owning its state: ``Streams`` (each stream's bookkeeping: engine session,
admission, partition book, progress), ``Committer`` (the transactional producer, the outbox,
the exactly-once machinery), ``HandOver`` (assign / revoke / lost / rewind), ``Router`` and
``Pacing``; the Kafka clients are ``WorkerClients``. Exactly-once finals: finals, checkpoints,
dead letters and consumer offsets are committed in one Kafka transaction; the committed offset
of a partition is its *low watermark*, so a worker that takes over after a crash or a
rebalance replays from there and rebuilds sessions exactly (``pipeline.worker.checkpoint``).

Catching up. After partitions are assigned the loop first reads their backlog (the audio since
the low watermark: after a crash, everything said during the failover) with VAD-only steps, while
the newly assigned partitions are more than a poll batch behind their high watermarks (at most
``CATCH_UP_MAX_S``); the first step after that decodes partials before the backlog's finals, so
live text resumes first (decision 0005).
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
from typing import Any

import torch
from confluent_kafka import KafkaError, Message

from pipeline.asr.engine import StepReport, StreamingEngine
from pipeline.clock import Clock, WallClock
from pipeline.contracts.messages import EventType
from pipeline.errors import InfrastructureError
from pipeline.hotwords.model import Scope
from pipeline.redaction import Redactor, RedactorConfig
from pipeline.runtime.kafka import log_client_error, readable_headers
from pipeline.runtime.metrics import Dependency, DurationKind, EarlyFinalOutcome, WorkerMetrics
from pipeline.settings import Settings
from pipeline.topics import TopicRole, topic_name
from pipeline.worker.admission import AdmissionLimits
from pipeline.worker.clients import WorkerClients
from pipeline.worker.committer import Committer, Deadlines
from pipeline.worker.faults import Faults
from pipeline.worker.flow import FetchClock, catching_up
from pipeline.worker.handover import HandOver
from pipeline.worker.intake import Admitted, ChunkRecord
from pipeline.worker.outbox import Outbox
from pipeline.worker.pacing import Pacing
from pipeline.worker.routing import Router
from pipeline.worker.staging import Staging
from pipeline.worker.status import WorkerStatus
from pipeline.worker.streams import Streams

__all__ = ["AsrWorker", "WorkerStatus", "default_worker_id"]

logger = logging.getLogger(__name__)

LOOP_STALL_S = 360.0
"""No progress for this long means the loop is stuck (a hung native call, a wedged GPU):
``/healthz`` then fails and the pod is restarted. Progress is an iteration finished, or a Kafka
call of a commit, of its recovery or of a checkpoint read returned (``WorkerStatus.progressed``):
a commit and its recovery may chain retries for far longer (``RETRY_DEADLINE_S`` each for the
commit, the abort, a new producer's ``init_transactions`` and the committed offsets, then the
checkpoint reads) and are not a stall while their calls return. So the limit only has to exceed
the longest single wait (a transactional try of ``TRANSACTION_TIMEOUT_S`` + ``STUCK_GRACE_S``, a
checkpoint lookup of ``checkpoint_reader.CHECKPOINT_READ_TIMEOUT_S``, a poll, a recognizer
step); it is also past ``max.poll.interval.ms`` (300 s), after which the group has taken the
partitions anyway."""
FETCH_CLOCK_MAX_TICK_MS = 5000
"""The most one loop iteration advances the fetch clock (``flow.FetchClock``): a stall of the
loop (commit retries, a checkpoint read) is not a publisher going silent."""
CATCH_UP_MAX_S = 30.0
"""Longest catch-up (VAD-only steps) after an assignment; then decoding resumes regardless."""
CATCH_UP_FIRST_FETCH_S = 1.0
"""How long empty polls right after an assignment still count as catching up (the first fetch
from newly assigned partitions takes a moment)."""
ABANDON_ABORT_S = 2.0
"""How long a failed worker tries to abort its open transaction before it exits."""


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


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
        self._worker = worker = settings.worker
        self._engine = engine
        self._metrics = metrics = metrics or WorkerMetrics()
        self._clock = clock = clock or WallClock()
        self._model_facts = model_facts or {"model_id": engine.model_id}
        self.worker_id = worker.worker_id or default_worker_id()
        self._topics = {
            role: topic_name(role.value, settings.kafka.topic_prefix) for role in TopicRole
        }
        self.status = status = WorkerStatus()
        self._stop = threading.Event()
        self._notices: queue.SimpleQueue[tuple[EventType, dict[str, Any]]] = queue.SimpleQueue()
        # Idle time is measured on this clock: it runs only while the worker fetches, so a
        # paused or stalled worker does not take its callers' silence for hang-ups.
        self._fetch_clock = FetchClock(FETCH_CLOCK_MAX_TICK_MS)
        self._audio_ms_since_step = 0.0
        self._gpu = torch.cuda.is_available()
        self._last_gpu_sample_ms = 0
        self._faults = faults = Faults.of(worker.faults)
        if faults:
            logger.warning("fault points armed (tests only): %s", worker.faults)
            engine.wrap_recognizer(faults.around)
        self._clients = clients = WorkerClients(
            settings, self.worker_id, self._topics[TopicRole.AUDIO_CHUNKS]
        )
        self._deadlines = deadlines = Deadlines(worker.shutdown_timeout_ms)
        # Staged for the next commit; its chunk counts are counted in the metrics only when that
        # commit succeeds (a rewind handles the records again, and they must count once).
        self._staging = staging = Staging(Outbox(), self._topics, self.worker_id, clock)
        self._streams = streams = Streams(
            engine,
            AdmissionLimits.of(worker),
            max_chunk_bytes=worker.max_chunk_bytes,
            max_pending_jobs=worker.max_pending_jobs,
            redactor=Redactor(RedactorConfig.from_settings(settings.redaction)),
        )
        self._committer = committer = Committer(
            worker,
            clients=clients,
            streams=streams,
            engine=engine,
            staging=staging,
            deadlines=deadlines,
            status=status,
            metrics=metrics,
            faults=faults,
            clock=clock,
            stop=self._stop,
        )
        self._handover = HandOver(
            settings,
            worker_id=self.worker_id,
            topics=self._topics,
            clients=clients,
            streams=streams,
            engine=engine,
            staging=staging,
            committer=committer,
            deadlines=deadlines,
            fetch_clock=self._fetch_clock,
            status=status,
            metrics=metrics,
            faults=faults,
            clock=clock,
        )
        self._router = Router(
            self._topics[TopicRole.PARTIALS],
            clients=clients,
            streams=streams,
            staging=staging,
            metrics=metrics,
        )
        self._pacing = Pacing(
            worker.max_pending_jobs,
            engine=engine,
            thinning=streams.thinning,
            clients=clients,
            staging=staging,
            status=status,
            metrics=metrics,
        )

    # -- lifecycle -------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the loop to finish (thread-safe; what SIGTERM calls). The shutdown bound
        (``shutdown_timeout_ms``) runs from here: a commit in flight shortens its retries."""
        self._deadlines.start_shutdown()
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

    def stalled(self) -> str | None:
        """Why the loop looks stuck (no progress for ``LOOP_STALL_S``), or None; thread-safe,
        for ``/healthz``. Before the loop runs (loading) it is not stuck."""
        if not self.status.running:
            return None
        since_s = time.monotonic() - self.status.last_progress_s
        if since_s <= LOOP_STALL_S:
            return None
        return f"the worker loop made no progress for {since_s:.0f} s"

    def run(self) -> None:
        """Run until stopped. Raises InfrastructureError on a fatal Kafka error."""
        self._clients.connect_producers()
        self._committer.start()
        self._clients.connect_consumer(self._on_consumer_error)
        self._handover.check_checkpoint_partitions()
        self.status.model_loaded = True
        self.status.progressed()
        self.status.running = True
        self._staging.event(EventType.MODEL_LOADED, detail=dict(self._model_facts))
        self._staging.event(EventType.WORKER_STARTED, detail={"worker_id": self.worker_id})
        self._clients.consumer.subscribe(
            [self._topics[TopicRole.AUDIO_CHUNKS]],
            on_assign=self._handover.on_assign,
            on_revoke=self._handover.on_revoke,
            on_lost=self._handover.on_lost,
        )
        try:
            while not self._stop.is_set():
                self._iteration()
        except BaseException:
            # Only a requested stop commits: after a failure the engine's state may be part-way
            # through a step, and committing it could release records whose finals never
            # reached the outbox. The next owner replays from the last commit instead.
            self._handover.abandon(ABANDON_ABORT_S)
            self.status.running = False
            raise
        self._shutdown()

    # -- one turn of the loop --------------------------------------------------------------

    def _iteration(self) -> None:
        self._handover.rewound = {}
        records = self._clients.consumer.consume(
            num_messages=self._worker.poll_batch, timeout=self._worker.poll_timeout_ms / 1000
        )
        if records:
            self.status.brokers_down = False  # records come from a broker
        self._tick_fetch_clock()
        if self._handover.rewind_pending:
            # Partitions were lost during the poll and the others' staged output was dropped:
            # their sessions rewind to the last commit, and these records come again.
            self._handover.rewind_pending = False
            self._handover.rewind()
            self.status.progressed()
            return
        if self._handover.rewound:  # inside consume: its batch holds records from before
            records = self._handover.drop_stale(records)
        for record in records:
            self._handle(record)
        started = time.perf_counter()
        # Paused, the backlog cannot be read: decode, so that the finals drain and fetching resumes.
        reading_backlog = not self.status.paused and self._catching_up()
        if reading_backlog:
            report = self._engine.segment()  # the backlog's decodes wait
        else:
            caught_up = bool(self._handover.catch_up_partitions)
            self._handover.catch_up_partitions = frozenset()
            report = self._engine.step(
                max_jobs=self._worker.max_step_jobs,
                partials=self._pacing.partials_this_step(),
                partials_first=caught_up,
            )
        self._observe_step(report, started)
        self._router.route_step(report.outputs, self._engine.sessions)
        if not reading_backlog:  # a restored session's chunks may still lie ahead in the backlog
            self._close_idle_sessions()
        self._drain_notices()
        if self._committer.due(self._clock.now_ms()):
            self._commit()
        if not reading_backlog:
            # Reading a backlog queues finals without decoding them, by design: pausing for them
            # would stop the reading that ends the catch-up (it is bounded by CATCH_UP_MAX_S).
            self._pacing.backpressure()
        self._clients.serve()
        self._metrics.set_active_sessions(len(self._engine.sessions))
        self.status.progressed()

    def _handle(self, record: Message) -> None:
        """One consumed record: a client error is logged (a fatal one stops the worker), the
        rest goes to the streams' intake."""
        error = record.error()
        if error is not None:
            if error.fatal():
                # The consumer cannot go on (fenced as a static member, say): stop, committing
                # nothing; the partitions' next owner replays.
                raise InfrastructureError(f"fatal Kafka consumer error: {error}")
            if error.code() != KafkaError._PARTITION_EOF:
                logger.warning("consume error: %s", error)
            return
        headers = readable_headers(record)
        chunk_record = ChunkRecord(
            record.partition(),
            record.offset(),
            0,  # the intake reads no timestamp (idle time is the fetch clock's)
            record.key(),
            record.value(),
            headers,
            headers_unreadable=headers is None,
        )
        outcome = self._streams.receive(chunk_record, self._staging, self._fetch_clock.now_ms)
        if isinstance(outcome, Admitted):
            self._audio_ms_since_step += outcome.chunk.duration_ms

    def _commit(self) -> None:
        """Commit; a failed transaction rewinds every owned partition to the last commit."""
        if not self._committer.commit():
            self._handover.rewind()

    def _shutdown(self) -> None:
        """Stop fetching, commit what is done, hand open work to the next owner, leave."""
        try:
            self._handover.leave(self._deadlines.start_shutdown())  # running unless it failed
        finally:
            self._staging.event(EventType.WORKER_STOPPED, detail={"worker_id": self.worker_id})
            self._handover.publish_leaving_events()
            self.status.running = False

    def _tick_fetch_clock(self) -> None:
        fetching = not self.status.paused and not self.status.brokers_down
        self._fetch_clock.tick(self._clock.now_ms(), fetching=fetching)

    def _close_idle_sessions(self) -> None:
        self._streams.close_idle(
            self._fetch_clock.now_ms,
            self._worker.idle_timeout_ms,
            self._worker.quiet_idle_timeout_ms,
        )

    def _catching_up(self) -> bool:
        """Still reading an assignment's backlog (``flow.catching_up``)."""
        partitions = self._streams.book.partitions
        lags = [
            self._clients.fetch_lag(partition, progress.next_offset)
            for partition in self._handover.catch_up_partitions
            if (progress := partitions.get(partition)) is not None  # not revoked
        ]
        return catching_up(
            since_assigned_s=time.monotonic() - self._handover.assigned_at_s,
            lags=lags,
            poll_batch=self._worker.poll_batch,
            max_s=CATCH_UP_MAX_S,
            first_fetch_s=CATCH_UP_FIRST_FETCH_S,
        )

    def _observe_step(self, report: StepReport, started: float) -> None:
        """The step's metrics: VAD time, decode batch, early finals, loops cut, and now and then
        the GPU."""
        if report.vad_s is not None:
            self._metrics.observe_duration(DurationKind.VAD, report.vad_s)
        if report.windows:
            self._metrics.observe_step(
                report.windows,
                time.perf_counter() - started,
                self._audio_ms_since_step / 1000,
            )
            self._audio_ms_since_step = 0.0
        if report.early_finals_decoded:
            self._metrics.count_early_finals(EarlyFinalOutcome.DECODED, report.early_finals_decoded)
        if report.early_finals_used:
            self._metrics.count_early_finals(EarlyFinalOutcome.USED, report.early_finals_used)
        if report.loops_trimmed:
            self._metrics.count_loops_trimmed(report.loops_trimmed)
        if self._gpu:
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
            self._staging.event(kind, detail=detail)

    def _on_consumer_error(self, error: KafkaError) -> None:
        """The consumer's client errors (on the loop's thread, inside ``consume``): logged,
        and "all brokers down" stops the fetch clock until records come or a commit passes."""
        log_client_error(f"streamscribe-worker-{self.worker_id}", error)
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            self.status.brokers_down = True
