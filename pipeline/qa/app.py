"""The QA analytics app on faust-streaming: a thin shell around ``CallAnalytics``.

Topology (every name gets the environment prefix; ``{app}`` is ``prefix + qa.app_id``, which is
also the consumer group)::

    asr.finals ─forward_finals─┐  parse; malformed → event on asr.events, skipped
    asr.events ─forward_events─┤  session events only, keyed by call id
    timer (idle / retention) ──┴─► {app}-input ──process──► qa.calls (key = call id)
                                   (internal)    tables (changelogs {app}-<table>-changelog):
                                                   calls:  call id → call state
                                                   finals: utterance id → final/1 record

Why the internal input topic: asr.finals and asr.events have different partition counts, so a
call's finals and events are not co-partitioned; re-keying both into one topic gives every call
one partition, one owner and one order for all its input, and tables that follow that partition.
A restart (or rebalance) rebuilds the tables from their compacted changelogs.

Reading: every consumer of this app reads ``read_committed`` (finals are written in Kafka
transactions, and aborted ones must never count). faust-streaming only switches isolation with
``processing_guarantee="exactly_once"``, whose per-partition transactional producers are not
reliable in faust-streaming; the app keeps at-least-once processing and sets the isolation level
on its consumer instead (``ReadCommittedConsumerThread``). At-least-once is safe here because
every input is idempotent (finals are recognized by utterance id, session events are sets) and a
summary is written to qa.calls *before* the state that records its publication, so a crash can at
worst repeat the same revision of a summary, never lose one. An input offset is committed only
once the broker has acknowledged the changelog writes and re-keyed input records of the records
it covers, and never after any of them failed (``DurableFlushProducer``): otherwise a crash
right after a commit lost table state, or a forwarded record. A summary the broker does not
acknowledge is an infrastructure failure, not bad input: the record that produced it is
processed again, with a backoff, until its summary is delivered (the worker's input waits
meanwhile), never skipped.

Topics: asr.finals, asr.events and qa.calls must exist (``streamscribe topics apply``); the app
creates its internal topics itself (brokers may have ``auto.create.topics.enable=false``).

faust and aiokafka internals that had to be worked around live in ``pipeline.qa.faust_compat``
(with the versions they were tested on, checked at start); the web views in ``pipeline.qa.web``.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import faust
from aiokafka.partitioner import DefaultPartitioner

from pipeline.clock import Clock, WallClock
from pipeline.contracts.messages import Event, EventType, Final, to_json, utterance_id_parts
from pipeline.errors import ConfigError, PublishError
from pipeline.qa.connection import CREDENTIAL_KEYS, broker_urls, faust_credentials
from pipeline.qa.faust_compat import FaustApp, check_versions, sender_answers
from pipeline.qa.metrics import QaMetrics, RecordKind
from pipeline.qa.records import (
    InputKind,
    RecordRejectedError,
    RecordRejectReason,
    decode_input,
    encode_input,
    parse_event,
    parse_final,
)
from pipeline.qa.rules import QaRules
from pipeline.qa.state import CallAnalytics, CallState
from pipeline.qa.summary import fit_record
from pipeline.qa.summary import to_json as summary_json
from pipeline.qa.web import register_views
from pipeline.runtime.admin import ApplyReport
from pipeline.runtime.health import Readiness, ReadinessCheck
from pipeline.settings import Settings
from pipeline.topics import ObservedTopic, TopicRole, TopicSpec, topic_name

__all__ = ["REJECTION_EVENT_TYPE", "QaApp", "TopicAdminApi", "faust_credentials"]

logger = logging.getLogger(__name__)

#: The event type of "an input record was skipped" (a malformed or unknown-schema JSON record;
#: ``chunk_rejected`` is for audio chunks and carries a ``dead_letter/1`` detail).
REJECTION_EVENT_TYPE = EventType.RECORD_REJECTED
REJECTION_DETAIL_SCHEMA = "record_rejected/1"

INPUT_RETENTION_MS = 7 * 24 * 3_600_000
SESSION_TIMEOUT_S = 10.0
#: The wait before an input record whose summary was not delivered is processed again; it
#: doubles on each failure in a row, up to ``PUBLISH_RETRY_MAX_S``.
PUBLISH_RETRY_FIRST_S = 0.5
PUBLISH_RETRY_MAX_S = 30.0
#: How long after it was due a tick may stay unprocessed before the sweep sends another. A tick
#: goes round the input topic in well under a second; one that has not come back after a minute
#: was lost (its delivery failed after it was queued, or another worker took it during a
#: rebalance) or waits behind a backlog, where another tick costs one record that changes
#: nothing. A minute bounds how late an idle end, a publication after the end grace or an expiry
#: can be, at most one extra tick per call per minute.
TICK_PENDING_MAX_MS = 60_000
_TABLE_TYPES: Mapping[str, Any] = {"key_type": str, "value_type": bytes}
_RAW: Mapping[str, Any] = {**_TABLE_TYPES, "key_serializer": "raw", "value_serializer": "raw"}
#: The workers' topics, read by the forwarders: keys stay bytes (the forwarder takes the call id
#: from the value). Read as text, a key that is not UTF-8 raised KeyDecodeError in the agent,
#: which crashed and was restarted, once every 5 s past the first two: one such record each.
_SOURCE: Mapping[str, Any] = {**_RAW, "key_type": bytes}


class TopicAdminApi(Protocol):
    """What ``QaApp.prepare_topics`` needs of ``pipeline.runtime.admin.TopicAdmin``."""

    def observe(self, names: Sequence[str]) -> dict[str, ObservedTopic]: ...

    def apply(self, declared: Sequence[TopicSpec]) -> ApplyReport: ...


class QaApp:
    """The faust app of ``streamscribe qa``, its topics, tables, agents, timer and web views.

    Construct, then ``run()`` (blocks until SIGTERM/SIGINT). ``clock`` and ``metrics`` are
    injectable for tests; the web server listens on ``qa.web_bind:qa.web_port``.
    """

    def __init__(
        self,
        settings: Settings,
        rules: QaRules,
        *,
        clock: Clock | None = None,
        metrics: QaMetrics | None = None,
    ) -> None:
        check_versions()
        kafka, qa = settings.kafka, settings.qa
        prefix = kafka.topic_prefix
        self.app_id = f"{prefix}{qa.app_id}"
        self._partitions = qa.partitions
        self.clock = clock or WallClock()
        self.metrics = metrics or QaMetrics()
        self.analytics = CallAnalytics(
            rules,
            self.clock,
            idle_timeout_ms=qa.idle_timeout_ms,
            retention_ms=qa.retention_ms,
            end_grace_ms=qa.end_grace_ms,
        )
        unused = sorted(set(kafka.client) - CREDENTIAL_KEYS)
        if unused:
            logger.info("kafka.client keys not used by the QA app: %s", ", ".join(unused))
        self.app = FaustApp(
            self.app_id,
            broker=broker_urls(kafka),
            broker_credentials=faust_credentials(kafka.client),
            store="memory://",
            processing_guarantee="at_least_once",
            topic_partitions=qa.partitions,
            topic_replication_factor=kafka.replication_factor,
            topic_allow_declare=True,
            topic_disable_leader=True,
            table_standby_replicas=0,
            # A crashed worker's partitions move after this long (faust's default is 60 s).
            broker_session_timeout=SESSION_TIMEOUT_S,
            consumer_auto_offset_reset="earliest",
            key_serializer="raw",
            value_serializer="raw",
            web_enabled=True,
            # faust's own /table/... and /router/... views would serve the raw tables (every
            # final's text) and the cluster's layout: only the documented views are served.
            web_tables_enabled=False,
            web_router_enabled=False,
            web_bind=qa.web_bind,
            web_port=qa.web_port,
            datadir=str(Path(tempfile.gettempdir()) / "streamscribe-qa" / self.app_id),
        )
        self.finals_topic = self.app.topic(topic_name(TopicRole.FINALS, prefix), **_SOURCE)
        self.events_topic = self.app.topic(topic_name(TopicRole.EVENTS, prefix), **_SOURCE)
        self.calls_topic = self.app.topic(topic_name(TopicRole.QA_CALLS, prefix), **_RAW)
        self.input_topic = self.app.topic(
            f"{self.app_id}-input", internal=True, partitions=qa.partitions, **_RAW
        )
        # What the producer sends to it at most (faust's producer_max_request_size), less the
        # record's own overhead (about 100 bytes measured; a kilobyte kept).
        self._max_input_bytes = int(self.app.conf.producer_max_request_size) - 1024
        # Tables serialize with the app's (raw) serializers; they take no serializer arguments.
        self.calls = self.app.Table(
            "calls", partitions=qa.partitions, help="call id → call state", **_TABLE_TYPES
        )
        self.finals = self.app.Table(
            "finals", partitions=qa.partitions, help="utterance id → final/1 record", **_TABLE_TYPES
        )
        # Wall-clock time at which this process first saw its tables recovered: idle timeouts
        # wait one timeout after it, so a call's backlog is read before the call can time out.
        self._ready_since_ms: int | None = None
        # Call id → wall-clock time its tick is due; see TICK_PENDING_MAX_MS.
        self._ticks_pending: dict[str, int] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
        self._wire()

    @property
    def external_topics(self) -> tuple[str, ...]:
        """The topics this app needs to exist before it starts (``streamscribe topics apply``)."""
        return (
            self.finals_topic.get_topic_name(),
            self.events_topic.get_topic_name(),
            self.calls_topic.get_topic_name(),
        )

    def internal_topic_specs(self) -> list[TopicSpec]:
        """The app's own topics: the input topic and the tables' compacted changelogs."""
        partitions = self._partitions
        return [
            TopicSpec(
                self.input_topic.get_topic_name(),
                partitions,
                {"cleanup.policy": "delete", "retention.ms": str(INPUT_RETENTION_MS)},
                "QA app input: finals and session events re-keyed by call id, timer ticks",
            ),
            *(
                TopicSpec(
                    table.changelog_topic.get_topic_name(),
                    partitions,
                    {"cleanup.policy": "compact"},
                    f"changelog of the QA app's {table.name} table",
                )
                for table in (self.calls, self.finals)
            ),
        ]

    def prepare_topics(self, admin: TopicAdminApi) -> None:
        """Check the external topics and create the internal ones (idempotent).

        The internal topics are created here, and visible in the cluster's metadata before faust
        subscribes: faust would create them too, but can subscribe before a new topic is visible
        and then ignores it until its next metadata refresh (minutes).

        Raises:
            ConfigError: an external topic is missing, or the internal topics exist with another
                partition count than ``qa.partitions`` (tables are partitioned like their input:
                changing the count would strand state).
        """
        internal = self.internal_topic_specs()
        observed = admin.observe([*self.external_topics, *(spec.name for spec in internal)])
        missing = [name for name in self.external_topics if name not in observed]
        if missing:
            raise ConfigError(
                f"topic(s) {', '.join(missing)} missing: run `streamscribe topics apply` first"
            )
        for spec in internal:
            have = observed.get(spec.name)
            if have is not None and have.partitions != spec.partitions:
                raise ConfigError(
                    f"{spec.name} has {have.partitions} partitions but qa.partitions "
                    f"(STREAMSCRIBE_QA_PARTITIONS) is {spec.partitions}; use the existing count "
                    f"or a new qa.app_id"
                )
        admin.apply(internal)

    def run(self, loglevel: str = "info") -> int:
        """Run the worker until it is stopped; returns its exit status."""
        # faust creates its data folder (unused by the memory store) but not the folder's parent.
        Path(self.app.conf.datadir).parent.mkdir(parents=True, exist_ok=True)
        worker = faust.Worker(self.app, loglevel=loglevel, quiet=True)
        try:
            worker.execute_from_commandline()
        except SystemExit as stop:
            return stop.code if isinstance(stop.code, int) else 1
        return 0

    # -- input ---------------------------------------------------------------------------------

    async def _reject(
        self,
        topic: str,
        partition: int,
        offset: int,
        reason: RecordRejectReason,
        detail: str,
        call_id: str | None = None,
    ) -> None:
        """Count, log and report a skipped record on asr.events (never raises on bad input)."""
        self.metrics.count_rejected(reason)
        logger.warning(
            "skipped record %s[%d]@%d: %s: %s", topic, partition, offset, reason.value, detail
        )
        event = Event(
            type=REJECTION_EVENT_TYPE,
            emit_ms=self.clock.now_ms(),
            source=self.app_id,
            call_id=call_id,
            detail={
                "schema": REJECTION_DETAIL_SCHEMA,
                "reason": reason.value,
                "detail": detail[:1000],
                "topic": topic,
                "partition": partition,
                "offset": offset,
            },
        )
        await self.events_topic.send(
            key=None if call_id is None else call_id.encode(), value=to_json(event)
        )

    async def _forward(self, kind: RecordKind, event: faust.types.EventT[Any]) -> None:
        """Check one record of asr.finals / asr.events and re-key it into the input topic."""
        message = event.message
        value: bytes | None = event.value
        try:
            if kind is RecordKind.FINAL:
                call_id = parse_final(value).call_id
                envelope = InputKind.FINAL
            else:
                parsed = parse_event(value)
                if parsed is None or parsed.call_id is None:
                    return
                call_id = parsed.call_id
                envelope = InputKind.EVENT
        except RecordRejectedError as error:
            await self._reject(
                message.topic, message.partition, message.offset, error.reason, error.detail
            )
            return
        payload = encode_input(envelope, value or b"")
        if len(payload) + len(call_id.encode()) > self._max_input_bytes:
            # aiokafka refuses it (MessageSizeTooLargeError): the forwarder crashed, and the
            # record, acknowledged by then, was lost without a word.
            await self._reject(
                message.topic,
                message.partition,
                message.offset,
                RecordRejectReason.INVALID_FIELD,
                f"record of {len(payload)} bytes, over the {self._max_input_bytes} the input "
                "topic takes",
                call_id,
            )
            return
        self.metrics.count_record(kind)
        await self.input_topic.send(key=call_id, value=payload)

    async def _handle_input(
        self, topic: str, partition: int, offset: int, call_id: str | None, value: bytes | None
    ) -> None:
        """Process one record of the input topic; returns once it is processed or skipped.

        A record that cannot be used (no call id, bad payload, or a bug while processing it) is
        skipped and reported (``_reject``): the app keeps going. A summary that could not be
        delivered is not the record's fault: the record is processed again after a backoff
        (``PUBLISH_RETRY_FIRST_S`` doubling up to ``PUBLISH_RETRY_MAX_S``) until its summary is
        delivered or the app stops (``asyncio.CancelledError`` propagates); meanwhile the input
        waits, and its lag grows. Processing a record again is safe: every input is idempotent
        and the call state is written only after the delivery.
        """
        retry_s = PUBLISH_RETRY_FIRST_S
        while True:
            try:
                if call_id is None:
                    raise RecordRejectedError(
                        RecordRejectReason.INVALID_FIELD, "input without a call id key"
                    )
                await self._process(call_id, value)
                return
            except PublishError as error:
                self.metrics.count_publish_failure()
                logger.warning(
                    "%s; processing %s[%d]@%d again in %.1f s",
                    error,
                    topic,
                    partition,
                    offset,
                    retry_s,
                )
                await self._sleep(retry_s)
                retry_s = min(2 * retry_s, PUBLISH_RETRY_MAX_S)
            except RecordRejectedError as error:
                await self._reject(topic, partition, offset, error.reason, error.detail, call_id)
                return
            except Exception as error:
                # The app must keep going on any one bad record; the traceback is logged.
                logger.exception("processing call %s failed", call_id)
                await self._reject(
                    topic,
                    partition,
                    offset,
                    RecordRejectReason.PROCESSING_ERROR,
                    repr(error),
                    call_id,
                )
                return

    async def _publish(self, call_id: str, record: bytes) -> None:
        """Send a summary to qa.calls and wait for the broker's acknowledgement.

        Raises:
            PublishError: the send or its delivery failed (broker unreachable past the
                producer's timeout, not authorized, ...).
        """
        try:
            with sender_answers():
                delivery = await self.calls_topic.send(key=call_id, value=record)
            await delivery
        except Exception as error:  # not CancelledError: stopping is not a failure to publish
            raise PublishError(f"summary of call {call_id} not delivered: {error!r}") from error

    def _load_finals(self, state: CallState) -> list[Final]:
        finals = []
        for uid in state.utterance_ids():
            raw = self.finals.get(uid)
            if raw is not None:
                finals.append(parse_final(raw))
        return finals

    async def _process(self, call_id: str, value: bytes | None) -> None:
        """Apply one input to its call: update the tables, publish when the analytics say so."""
        envelope = decode_input(value)
        raw_state = self.calls.get(call_id)
        before = CallState.from_json(raw_state) if raw_state is not None else None
        after: CallState | None
        if envelope.kind is InputKind.FINAL:
            final = parse_final(envelope.payload)
            step = self.analytics.on_final(before, final)
            if step.is_new or final.utterance_id not in self.finals:
                # Also for a repeat: the two tables' changelogs are not written atomically, so
                # a crash can keep the call state's record of this final but lose the final;
                # its replay (input offsets are committed after both) puts it back.
                self.finals[final.utterance_id] = envelope.payload
            if not step.is_new:
                self.metrics.count_duplicate()
            after = step.state
        elif envelope.kind is InputKind.EVENT:
            event = parse_event(envelope.payload)
            if event is None:
                return
            after = self.analytics.on_event(before, event)
        else:
            self._ticks_pending.pop(call_id, None)
            if before is None:
                return
            after = self.analytics.on_tick(before)
            if after is None:
                for uid in before.utterance_ids():
                    self.finals.pop(uid, None)
                del self.calls[call_id]
                logger.info("call %s expired from the QA tables", call_id)
                return
        wait_ms = self.analytics.publication_wait_ms(after)
        if wait_ms is not None and not after.complete:
            wait_ms = max(wait_ms, self._startup_grace_ms())
        if wait_ms == 0:
            after, summary = self.analytics.publish(after, self._load_finals(after))
            if summary is not None:
                # Delivered before the state that records it: a crash repeats, never loses it.
                await self._publish(call_id, fit_record(summary))
                self.metrics.count_published(summary.revision)
                logger.info("published call %s revision %d", call_id, summary.revision)
        elif wait_ms is not None:
            self._tick_later(call_id, wait_ms)
        self.calls[call_id] = after.to_json()
        # Counted once the state records the end: a record processed again (its summary not
        # delivered) must not count the call's end twice.
        if after.end_reason is not None and (before is None or not before.ended):
            self.metrics.count_ended(after.end_reason)

    def _startup_grace_ms(self) -> int:
        """How much longer an incomplete ended call must wait because this process only just
        became ready: the end grace counts from readiness too. After a restart both input topics
        have a backlog, and the forwarder of asr.events can run ahead of the one of asr.finals:
        a call's end could be read, and its grace run out, before its finals were."""
        grace_ms = self.analytics.end_grace_ms
        if self._ready_since_ms is None:
            return grace_ms
        return max(0, grace_ms - (self.clock.now_ms() - self._ready_since_ms))

    # -- views ---------------------------------------------------------------------------------

    def partition_of(self, call_id: str) -> int:
        """The input (and table) partition of a call: the producer's default key partitioner."""
        every = list(range(self._partitions))
        partition: int = DefaultPartitioner()(call_id.encode(), every, every)
        return partition

    def owns(self, partition: int) -> bool:
        """Whether this worker holds the tables of ``partition`` now."""
        tp = faust.types.TP(self.input_topic.get_topic_name(), partition)
        return tp in self.app.consumer.assignment()

    def owner_url(self, partition: int) -> str | None:
        """The web URL of the worker that holds ``partition`` (from the last assignment)."""
        changelog = self.calls.changelog_topic.get_topic_name()
        for host, topics in self.app.router.table_metadata(self.calls.name).items():
            if partition in topics.get(changelog, ()):
                return str(host)
        return None

    def call_json(self, call_id: str) -> bytes | None:
        """The call's summary as ``qa_call/1`` JSON (live or last published), None if unknown."""
        raw = self.calls.get(call_id)
        if raw is None:
            return None
        state = CallState.from_json(raw)
        return summary_json(self.analytics.view(state, self._load_finals(state)))

    def recent_calls(self, since_ms: int, limit: int) -> list[dict[str, Any]]:
        """Calls of this worker with activity at or after ``since_ms``, most recent first."""
        states = [CallState.from_json(raw) for raw in list(self.calls.values())]
        recent = sorted(
            (state for state in states if state.last_activity_ms >= since_ms),
            key=lambda state: (-state.last_activity_ms, state.call_id),
        )
        return [
            {
                "call_id": state.call_id,
                "tenant": state.tenant,
                "status": state.meta().status.value,
                "end_reason": state.end_reason.value if state.end_reason else None,
                "revision": state.revision,
                "channels": list(state.channels),
                "utterances": state.spoken_finals,
                "first_seen_ms": state.first_seen_ms,
                "last_activity_ms": state.last_activity_ms,
                "ended_ms": state.ended_ms,
                "published_ms": state.published_ms,
            }
            for state in recent[:limit]
        ]

    def readiness(self) -> Readiness:
        # TableManagerT does not declare ``recovery``; the TableManager faust creates has it.
        recovery = self.app.tables.recovery  # type: ignore[attr-defined]
        return Readiness.of(
            ReadinessCheck(
                "tables_recovered",
                recovery.completed.is_set() and not self.app.in_recovery,
                "changelogs read" if recovery.completed.is_set() else "recovering tables",
            ),
            not_rebalancing=not self.app.rebalancing,
        )

    # -- timer ---------------------------------------------------------------------------------

    def _tick_later(self, call_id: str, delay_ms: int) -> None:
        """Send a tick for ``call_id`` after ``delay_ms`` (end grace); the sweep is the backstop.

        The delayed tick lives only in this process: after a crash or rebalance the sweep finds
        the ended, unpublished call in the table and ticks it, as it does when the tick has not
        been processed ``TICK_PENDING_MAX_MS`` after it was due.
        """
        if call_id in self._ticks_pending:
            return
        self._ticks_pending[call_id] = self.clock.now_ms() + delay_ms

        async def tick() -> None:
            await self._sleep(delay_ms / 1000)
            try:
                with sender_answers():
                    await self.input_topic.send(key=call_id, value=encode_input(InputKind.TICK))
            except Exception:
                # Not sent: let the next sweep try again.
                self._ticks_pending.pop(call_id, None)
                logger.exception("could not send a tick for call %s", call_id)

        task = asyncio.ensure_future(tick())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _sweep(self) -> None:
        """Update the call gauges; tick calls that are idle, due for publication or expired.

        Idle checks start one idle timeout after this process first became ready, so that a
        call's backlog after a restart is read before the call can time out. A rebalance does
        not restart that wait: the partitions it brings were read by their previous owner until
        then, so their backlog is short next to the idle timeout.
        """
        if not self.readiness().ready:
            return
        now_ms = self.clock.now_ms()
        if self._ready_since_ms is None:
            self._ready_since_ms = now_ms
        for call_id, due_ms in list(self._ticks_pending.items()):
            if now_ms - due_ms >= TICK_PENDING_MAX_MS:
                del self._ticks_pending[call_id]  # lost or late: ticked again below if still due
        idle_checks = now_ms - self._ready_since_ms >= self.analytics.idle_timeout_ms
        input_topic = self.input_topic.get_topic_name()
        self.drop_unowned(
            {tp.partition for tp in self.app.consumer.assignment() if tp.topic == input_topic}
        )
        states = [CallState.from_json(raw) for raw in list(self.calls.values())]
        self.metrics.set_calls(sum(1 for s in states if not s.ended), len(states))
        for state in states:
            if state.call_id in self._ticks_pending:
                continue
            if self.analytics.tick_due(state, idle_checks=idle_checks):
                self._tick_later(state.call_id, 0)

    def drop_unowned(self, owned: set[int]) -> int:
        """Forget, in this process only, the calls (and their finals) of input partitions it no
        longer holds; returns how many calls. faust's memory store forgets only the keys it
        restored from a changelog, not those this worker wrote, so after a rebalance they would
        stay: ticked and counted here, listed by ``/calls``, published again if they timed out.
        Deleted from the local store, never through the table: a tombstone in the changelog
        would erase the new owner's state."""
        if not owned:
            return 0  # nothing assigned (yet): not a sign that another worker holds it all
        calls, finals = _local_store(self.calls), _local_store(self.finals)
        dropped = 0
        for call_id in [key for key in list(calls) if self.partition_of(key) not in owned]:
            calls.pop(call_id, None)
            self._ticks_pending.pop(call_id, None)
            dropped += 1
        for uid in [
            key
            for key in list(finals)
            if self.partition_of(utterance_id_parts(key)[0]) not in owned
        ]:
            finals.pop(uid, None)
        if dropped:
            logger.info("forgot %d call(s) of partitions now held by another worker", dropped)
        return dropped

    # -- wiring --------------------------------------------------------------------------------

    def _wire(self) -> None:
        app = self.app
        shell = self

        @app.agent(self.finals_topic, name="forward_finals")
        async def forward_finals(stream: faust.StreamT[bytes]) -> None:
            async for event in stream.events():
                await shell._forward(RecordKind.FINAL, event)

        @app.agent(self.events_topic, name="forward_events")
        async def forward_events(stream: faust.StreamT[bytes]) -> None:
            async for event in stream.events():
                await shell._forward(RecordKind.EVENT, event)

        @app.agent(self.input_topic, name="process")
        async def process(stream: faust.StreamT[bytes]) -> None:
            async for event in stream.events():
                message = event.message
                await shell._handle_input(
                    message.topic,
                    message.partition,
                    message.offset,
                    event.key if isinstance(event.key, str) else None,
                    event.value,
                )

        interval_s = min(10.0, max(0.1, self.analytics.idle_timeout_ms / 10_000))

        @app.timer(interval=interval_s, name="sweep")  # type: ignore[untyped-decorator]
        async def sweep() -> None:
            await shell._sweep()

        self._views = register_views(app, self)
        # Referenced so linters see the decorated definitions as used.
        self._agents = (forward_finals, forward_events, process, sweep)


def _local_store(table: Any) -> MutableMapping[str, bytes]:
    """A table's storage (a plain mapping in unit tests): deletes there write no changelog."""
    store: MutableMapping[str, bytes] = getattr(table, "data", table)
    return store
