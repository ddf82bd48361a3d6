"""The monitor's Kafka reader: a thread with two consumers that feeds parsed records to a sink.

- ``asr.partials``: ``read_uncommitted`` (they are not written in transactions; live views
  should not wait for anyone's);
- ``asr.events``, ``asr.finals`` and ``qa.calls``: ``read_committed`` (each record once, never an
  aborted one: events and finals are written in the workers' transactions, and the
  ``chunk_rejected`` events of an aborted one are written again when its chunks are replayed).

Both consumers take their partitions by hand (``assign``) under a throwaway group id with
``enable.auto.commit=false``: the monitor joins no group, commits nothing and takes no partition
from anyone — to the pipeline it is just another reader. Finals, events and QA summaries are
read from ``history_ms`` ago (the recent-call window refills after a restart); partials from
their end (only live views matter). Partitions added while the monitor runs are not read until
it restarts.

The sink is called on the reader thread with each non-empty batch of parsed records, in order
per partition; it may block (backpressure: the reader waits). Records that break their contract
are counted by reason and skipped. ``caught_up`` turns true once every assigned partition was
read to its end once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from pipeline.contracts.reading import RecordRejectedError, RecordRejectReason
from pipeline.errors import ConfigError, InfrastructureError
from pipeline.monitor.records import (
    MonitorRecord,
    parse_event,
    parse_final,
    parse_partial,
    parse_qa_call,
)
from pipeline.runtime.kafka import new_consumer
from pipeline.settings import Settings
from pipeline.topics import TopicRole, topic_name

__all__ = ["KafkaReader", "reader_config"]

logger = logging.getLogger(__name__)

METADATA_TIMEOUT_S = 15.0
BATCH_RECORDS = 500
POLL_TIMEOUT_S = 0.05

Parser = Callable[[bytes | None], MonitorRecord | None]

_PARSERS: dict[TopicRole, Parser] = {
    TopicRole.PARTIALS: parse_partial,
    TopicRole.EVENTS: parse_event,
    TopicRole.FINALS: parse_final,
    TopicRole.QA_CALLS: parse_qa_call,
}
_LIVE_ROLES = (TopicRole.PARTIALS,)
_COMMITTED_ROLES = (TopicRole.EVENTS, TopicRole.FINALS, TopicRole.QA_CALLS)


def reader_config(settings: Settings, read_committed: bool) -> dict[str, object]:
    """librdkafka settings of one monitor consumer: no group membership, no commits."""
    kafka = settings.kafka
    role = "committed" if read_committed else "live"
    return {
        **kafka.client,
        "bootstrap.servers": kafka.bootstrap_servers,
        "group.id": f"streamscribe-monitor-{uuid.uuid4().hex[:12]}",
        "client.id": f"streamscribe-monitor-{role}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "latest",
        "enable.partition.eof": True,
        "isolation.level": "read_committed" if read_committed else "read_uncommitted",
        "fetch.wait.max.ms": 100,
    }


class KafkaReader:
    """Reads the four topics into ``sink`` on its own thread (``open``, ``start``, ``stop``)."""

    def __init__(
        self,
        settings: Settings,
        sink: Callable[[list[MonitorRecord]], None],
        *,
        history_ms: int,
        now_ms: Callable[[], int],
    ) -> None:
        self._settings = settings
        self._sink = sink
        self._history_ms = history_ms
        self._now_ms = now_ms
        prefix = settings.kafka.topic_prefix
        self._roles = {topic_name(role, prefix): role for role in _PARSERS}
        self._consumers: list[Consumer] = []
        self._pending_eof: set[tuple[str, int]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.records = 0
        self.rejected_total = 0
        self.rejected: Counter[str] = Counter()
        """Skipped records by reason (written by the reader thread; read ``rejected_total``
        from other threads)."""
        self.error: BaseException | None = None

    @property
    def caught_up(self) -> bool:
        return bool(self._consumers) and not self._pending_eof

    def open(self) -> None:
        """Create the consumers and assign every partition at its start offset.

        Raises:
            ConfigError: a topic does not exist (``topics apply`` not run, or a wrong prefix).
            InfrastructureError: the brokers do not answer.
        """
        live = new_consumer(reader_config(self._settings, read_committed=False))
        committed = new_consumer(reader_config(self._settings, read_committed=True))
        self._consumers = [committed, live]
        try:
            self._assign(live, _LIVE_ROLES)
            self._assign(committed, _COMMITTED_ROLES)
        except BaseException:
            self.close()
            raise

    def _assign(self, consumer: Consumer, roles: Sequence[TopicRole]) -> None:
        prefix = self._settings.kafka.topic_prefix
        try:
            metadata = consumer.list_topics(timeout=METADATA_TIMEOUT_S)
        except KafkaException as error:
            raise InfrastructureError(f"cannot read topic metadata: {error.args[0]}") from None
        since_ms = self._now_ms() - self._history_ms
        assignment: list[TopicPartition] = []
        for role in roles:
            topic = topic_name(role, prefix)
            described = metadata.topics.get(topic)
            if described is None or described.error is not None or not described.partitions:
                raise ConfigError(
                    f"topic {topic} does not exist (run `streamscribe topics apply`, or check "
                    "--topic-prefix)"
                )
            partitions = sorted(described.partitions)
            if role is TopicRole.PARTIALS:
                assignment += [TopicPartition(topic, p, OFFSET_END) for p in partitions]
                continue
            wanted = [TopicPartition(topic, p, since_ms) for p in partitions]
            try:
                found = consumer.offsets_for_times(wanted, timeout=METADATA_TIMEOUT_S)
            except KafkaException as error:
                raise InfrastructureError(
                    f"cannot look up offsets of {topic}: {error.args[0]}"
                ) from None
            # -1 = no record at or after the time: start at the end.
            assignment += [
                TopicPartition(topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_END)
                for tp in found
            ]
        self._pending_eof.update((tp.topic, tp.partition) for tp in assignment)
        consumer.assign(assignment)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="monitor-kafka", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.close()

    def close(self) -> None:
        for consumer in self._consumers:
            with contextlib.suppress(RuntimeError):  # already closed
                consumer.close()
        self._consumers = []

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                idle = True
                for consumer in self._consumers:
                    batch = self._read(consumer)
                    if batch:
                        idle = False
                        self._sink(batch)
                if idle:
                    time.sleep(0.01)
        except BaseException as error:
            if not self._stop.is_set():
                logger.exception("the Kafka reader stopped")
                self.error = error

    def _read(self, consumer: Consumer) -> list[MonitorRecord]:
        batch: list[MonitorRecord] = []
        for message in consumer.consume(num_messages=BATCH_RECORDS, timeout=POLL_TIMEOUT_S):
            fault = message.error()
            if fault is not None:
                if fault.code() == KafkaError._PARTITION_EOF:
                    self._pending_eof.discard((message.topic(), message.partition()))
                else:
                    logger.warning("kafka: %s", fault)
                continue
            if message.value() is None:
                continue  # a tombstone of the compacted qa.calls
            record = self._parse(message)
            if record is not None:
                batch.append(record)
        return batch

    def _parse(self, message: Any) -> MonitorRecord | None:
        role = self._roles.get(message.topic())
        if role is None:
            return None
        self.records += 1
        try:
            return _PARSERS[role](message.value())
        except RecordRejectedError as error:
            if not self.rejected[error.reason.value]:
                logger.warning(
                    "skipping a malformed record on %s (%s); further ones are only counted",
                    message.topic(),
                    error,
                )
            self.rejected[error.reason.value] += 1
            self.rejected_total += 1
            return None
        # A parser bug must not stop the monitor's only reader: count it, log it, read on.
        except Exception:
            if not self.rejected[RecordRejectReason.PROCESSING_ERROR.value]:
                logger.exception("a record of %s could not be read", message.topic())
            self.rejected[RecordRejectReason.PROCESSING_ERROR.value] += 1
            self.rejected_total += 1
            return None
