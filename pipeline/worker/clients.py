"""The worker's three Kafka clients, made in one place: the thin I/O shell around them.

- the **consumer** of ``audio.chunks`` (``read_committed``, cooperative-sticky), shared by the
  loop (poll, pause, resume), the committer (its group metadata) and the hand-over (committed
  offsets, seeks, assignments);
- the **transactional producer** of finals, events, checkpoints and dead letters, which only
  the committer uses (``pipeline.worker.committer``);
- the idempotent **partials producer** (partials may repeat after a failover).

``run`` connects them; unit tests set fakes on the attributes instead (and on
``new_transactional``, the producer a replacement gets).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from pipeline.runtime.kafka import (
    consumer_config,
    new_consumer,
    new_producer,
    partials_producer_config,
    transactional_producer_config,
)
from pipeline.settings import Settings

__all__ = ["WorkerClients"]


class WorkerClients:
    """The clients of one worker (owned by the loop's thread); None until connected."""

    def __init__(self, settings: Settings, worker_id: str, audio_topic: str) -> None:
        self._settings = settings
        self._worker_id = worker_id
        self.audio_topic = audio_topic
        self.consumer: Any = None
        self.transactional: Any = None
        self.partials: Any = None

    def new_transactional(self) -> Any:
        """A transactional producer with the worker's stable transactional id."""
        kafka, worker = self._settings.kafka, self._settings.worker
        return new_producer(transactional_producer_config(kafka, worker, self._worker_id))

    def connect_producers(self) -> None:
        self.transactional = self.new_transactional()
        self.partials = new_producer(
            partials_producer_config(self._settings.kafka, self._worker_id)
        )

    def connect_consumer(self, on_error: Callable[[KafkaError], None]) -> None:
        config = consumer_config(self._settings.kafka, self._settings.worker, self._worker_id)
        self.consumer = new_consumer({**config, "error_cb": on_error})

    def partitions(self, numbers: Iterable[int]) -> list[TopicPartition]:
        """These partitions of ``audio.chunks``, for the consumer's calls."""
        return [TopicPartition(self.audio_topic, p) for p in numbers]

    def fetch_lag(self, partition: int, next_offset: int) -> int | None:
        """Records of ``partition`` not yet consumed (from the consumer's cached high
        watermark); None while unknown (nothing consumed from it yet, or no watermark)."""
        if next_offset < 0:
            return None
        topic_partition = TopicPartition(self.audio_topic, partition)
        try:
            _, high = self.consumer.get_watermark_offsets(topic_partition, cached=True)
        except KafkaException:
            return None
        return max(0, high - next_offset) if high >= 0 else None

    def serve(self) -> None:
        """Serve both producers' queues (delivery reports, their librdkafka log lines and
        errors). Between commits too: a worker with nothing to commit (a standby, idle
        partitions) never opens a transaction, and the queue would grow unread. No
        transactional call is in flight when the loop calls this."""
        self.partials.poll(0)
        self.transactional.poll(0)
