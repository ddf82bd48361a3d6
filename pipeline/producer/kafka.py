"""The producer's confluent-kafka shell: ``KafkaTransport`` and its librdkafka configuration."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from pipeline.errors import PublishError
from pipeline.runtime.kafka import new_producer
from pipeline.settings import KafkaSettings, PublisherSettings

__all__ = ["KafkaTransport", "producer_config"]

QUEUE_FULL_WAIT_S = 0.05


def producer_config(kafka: KafkaSettings, publisher: PublisherSettings) -> dict[str, Any]:
    """librdkafka config of an audio producer: the pass-through settings, then ours on top."""
    return {
        **kafka.client,
        "bootstrap.servers": kafka.bootstrap_servers,
        # Idempotence with acks=all: a retried batch is written once and in order, so a
        # channel's sequence numbers reach the topic contiguous even across broker failovers.
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": publisher.linger_ms,
        "delivery.timeout.ms": publisher.delivery_timeout_ms,
        # The Java client's partitioner: a call id lands on the partition a Java (or any
        # murmur2) producer would choose, so mixed producers keep a call on one worker.
        "partitioner": "murmur2_random",
    }


class KafkaTransport:
    """``Transport`` over a confluent-kafka ``Producer``.

    Delivery callbacks run on the caller's thread inside ``send`` (which serves the reports
    that are ready), ``poll`` and ``flush``.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        """Raises ConfigError when librdkafka refuses a property of ``config``."""
        self._producer = new_producer(config)

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Sequence[tuple[str, bytes]],
        on_delivery: Callable[[str | None, int], None],
    ) -> None:
        def report(error: KafkaError | None, message: Message) -> None:
            on_delivery(None if error is None else error.str(), message.partition())

        while True:
            try:
                self._producer.produce(
                    topic, value=value, key=key, headers=list(headers), on_delivery=report
                )
                break
            except BufferError:
                # librdkafka's local queue is full: serving delivery reports makes room (and
                # bounds the wait: undeliverable records fail after the delivery timeout).
                self._producer.poll(QUEUE_FULL_WAIT_S)
            except KafkaException as error:
                raise PublishError(
                    f"Kafka refused a record for {topic}: {error.args[0].str()}"
                ) from None
        self._producer.poll(0)

    def poll(self, timeout_s: float) -> None:
        self._producer.poll(timeout_s)

    def flush(self, timeout_s: float) -> int:
        remaining: int = self._producer.flush(timeout_s)
        return remaining

    def close(self) -> None:
        """Drop what is still queued (after a failed ``flush``) so closing never blocks."""
        self._producer.purge()
        self._producer.flush(0)
