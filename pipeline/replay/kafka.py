"""The replay's Kafka shell: read a range of ``audio.chunks``, write shadow topics.

The only module of ``pipeline.replay`` that touches Kafka. ``ChunkSource`` never joins a consumer
group and never commits: partitions are *assigned* by hand under a throwaway group id with
``enable.auto.commit=false``, so the production group (``streamscribe-asr``) and its offsets are
untouched. Ranges are fixed before reading: the start offset of each partition from
``offsets_for_times`` (or the low watermark), its end from ``offsets_for_times`` of the end time,
capped by the high watermark captured at start, so audio that arrives during the replay is
not read.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from pipeline.contracts.messages import Event, EventType, Final, to_json
from pipeline.errors import ConfigError, InfrastructureError
from pipeline.replay.results import PartitionRange
from pipeline.replay.runner import ChunkRecord, StreamSummary
from pipeline.runtime.kafka import new_consumer, new_producer, readable_headers
from pipeline.settings import KafkaSettings
from pipeline.topics import TopicRole, topic_name

__all__ = ["ChunkSource", "ShadowSink", "replay_consumer_config"]

METADATA_TIMEOUT_S = 15.0
STALL_TIMEOUT_S = 60.0
"""Give up on a partition when no record arrives for this long before its end offset."""
BATCH_RECORDS = 1000


def replay_consumer_config(kafka: KafkaSettings) -> dict[str, object]:
    """A group-less reader: assign + seek only, never commits (no group is ever joined)."""
    return {
        **kafka.client,
        "bootstrap.servers": kafka.bootstrap_servers,
        "group.id": f"streamscribe-replay-{uuid.uuid4().hex[:12]}",
        "client.id": "streamscribe-replay",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    }


def _kafka_error(action: str, error: KafkaException) -> InfrastructureError:
    return InfrastructureError(f"{action}: {error.args[0]}")


class ChunkSource:
    """Reads records of ``audio.chunks`` partition by partition, in offset order."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self.topic = topic
        self._consumer = new_consumer(replay_consumer_config(kafka))

    def plan(self, from_ms: int | None, to_ms: int | None) -> list[PartitionRange]:
        """The offsets to read in every partition of the topic (empty ranges left out).

        Raises:
            ConfigError: the topic does not exist.
            InfrastructureError: Kafka does not answer.
        """
        try:
            metadata = self._consumer.list_topics(self.topic, timeout=METADATA_TIMEOUT_S)
        except KafkaException as error:
            raise _kafka_error(f"cannot read metadata of {self.topic}", error) from None
        described = metadata.topics.get(self.topic)
        if described is None or described.error is not None or not described.partitions:
            raise ConfigError(f"topic {self.topic} does not exist (wrong --topic-prefix?)")
        partitions = sorted(described.partitions)
        try:
            watermarks = [
                self._consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=METADATA_TIMEOUT_S
                )
                for p in partitions
            ]
            starts = self._offsets_at(partitions, from_ms)
            ends = self._offsets_at(partitions, to_ms)
        except KafkaException as error:
            raise _kafka_error(f"cannot read offsets of {self.topic}", error) from None
        ranges = []
        for partition, (low, high), start, end in zip(
            partitions, watermarks, starts, ends, strict=True
        ):
            first = low if start is None else (high if start < 0 else max(start, low))
            last = high if end is None or end < 0 else min(end, high)
            if last > first:
                ranges.append(PartitionRange(partition, first, last))
        return ranges

    def _offsets_at(self, partitions: Sequence[int], time_ms: int | None) -> list[int | None]:
        """Per partition, the first offset whose timestamp is ``>= time_ms`` (-1: none)."""
        if time_ms is None:
            return [None] * len(partitions)
        found = self._consumer.offsets_for_times(
            [TopicPartition(self.topic, p, time_ms) for p in partitions],
            timeout=METADATA_TIMEOUT_S,
        )
        by_partition = {tp.partition: tp.offset for tp in found}
        return [by_partition.get(p, -1) for p in partitions]

    def read(self, span: PartitionRange) -> Iterator[ChunkRecord]:
        """The records of ``span`` in offset order (transaction markers and aborted records,
        which ``read_committed`` hides, leave holes in the offsets).

        Raises:
            InfrastructureError: a fetch error, or no progress for ``STALL_TIMEOUT_S``.
        """
        partition = TopicPartition(self.topic, span.partition, span.start_offset)
        self._consumer.assign([partition])
        try:
            position = span.start_offset
            deadline = time.monotonic() + STALL_TIMEOUT_S
            while position < span.end_offset:
                records = self._consumer.consume(num_messages=BATCH_RECORDS, timeout=0.5)
                for record in records:
                    error = record.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise InfrastructureError(f"reading {self.topic}: {error}")
                    offset = record.offset()
                    if offset >= span.end_offset:
                        return
                    headers = readable_headers(record)  # None: a header name not UTF-8
                    yield ChunkRecord(
                        partition=span.partition,
                        offset=offset,
                        timestamp_ms=record.timestamp()[1],
                        key=record.key(),
                        value=record.value(),
                        headers=headers,
                        headers_unreadable=headers is None,
                    )
                moved = self._position(span.partition)
                if moved > position or records:
                    deadline = time.monotonic() + STALL_TIMEOUT_S
                position = max(position, moved)
                if time.monotonic() > deadline:
                    raise InfrastructureError(
                        f"{self.topic}[{span.partition}]: no progress at offset {position} "
                        f"for {STALL_TIMEOUT_S:.0f} s (end {span.end_offset})"
                    )
        finally:
            self._consumer.unassign()

    def _position(self, partition: int) -> int:
        (current,) = self._consumer.position([TopicPartition(self.topic, partition)])
        offset: int = current.offset
        return offset

    def close(self) -> None:
        self._consumer.close()


class ShadowSink:
    """Writes a replay's finals and ``session_ended`` events to ``PREFIX`` + their topic names.

    Idempotent producer (``acks=all``): a retry never duplicates a record; records of a call
    keep their order. The shadow topics must exist (``streamscribe --topic-prefix PREFIX topics
    apply``) and must not be the source environment's.
    """

    def __init__(self, kafka: KafkaSettings, prefix: str) -> None:
        if prefix == kafka.topic_prefix:
            raise ConfigError(
                f"--shadow-prefix {prefix!r} is the source topics' prefix: a replay must not "
                f"write into the topics it replays"
            )
        self.finals_topic = topic_name(TopicRole.FINALS, prefix)
        self.events_topic = topic_name(TopicRole.EVENTS, prefix)
        config: dict[str, Any] = {
            **kafka.client,
            "bootstrap.servers": kafka.bootstrap_servers,
            "client.id": "streamscribe-replay-shadow",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
        }
        self._producer = new_producer(config)
        self._failures: list[str] = []
        self._check_topics()

    def _check_topics(self) -> None:
        try:
            metadata = self._producer.list_topics(timeout=METADATA_TIMEOUT_S)
        except KafkaException as error:
            self._producer.poll(0)  # its librdkafka lines (why) show before the error
            raise _kafka_error("cannot read topic metadata", error) from None
        missing = [t for t in (self.finals_topic, self.events_topic) if t not in metadata.topics]
        if missing:
            raise ConfigError(
                f"shadow topic(s) {', '.join(missing)} do not exist: create them with "
                f"`streamscribe --topic-prefix PREFIX topics apply`"
            )

    def publish(self, finals: Sequence[Final], streams: Sequence[StreamSummary]) -> None:
        """Produce every final, then one ``session_ended`` event per stream; wait for delivery.

        Raises:
            InfrastructureError: a record was not delivered.
        """
        for final in finals:
            self._produce(self.finals_topic, final.call_id, to_json(final))
        for stream in streams:
            event = Event(
                type=EventType.SESSION_ENDED,
                emit_ms=stream.last_audio_ms,
                source="replay",
                call_id=stream.call_id,
                channel=stream.channel,
                detail={
                    "tenant": stream.tenant,
                    "duration_ms": stream.audio_ms,
                    "speech_ms": stream.speech_ms,
                    "utterances": stream.finals,
                    "suppressed": stream.suppressed,
                },
            )
            self._produce(self.events_topic, stream.call_id, to_json(event))
        remaining = self._producer.flush(METADATA_TIMEOUT_S * 4)
        if remaining or self._failures:
            detail = self._failures[0] if self._failures else f"{remaining} unconfirmed"
            raise InfrastructureError(f"shadow records not delivered: {detail}")

    def _produce(self, topic: str, key: str, value: bytes) -> None:
        def report(error: KafkaError | None, _: object) -> None:
            if error is not None:
                self._failures.append(f"{topic}: {error.str()}")

        while True:
            try:
                self._producer.produce(topic, key=key.encode(), value=value, on_delivery=report)
                break
            except BufferError:
                self._producer.poll(0.05)
        self._producer.poll(0)
