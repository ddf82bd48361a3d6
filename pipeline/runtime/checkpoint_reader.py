"""Read the latest checkpoints of some partitions of ``asr.checkpoints`` (a worker's restore).

The I/O half of ``pipeline.worker.checkpoint``: that module encodes and decodes the records; this
one reads them back from Kafka when partitions are assigned to a worker, or when it rewinds.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from pipeline.errors import InfrastructureError
from pipeline.runtime.kafka import checkpoint_reader_config, new_consumer
from pipeline.settings import KafkaSettings
from pipeline.worker.checkpoint import PartitionCheckpoint, SessionCheckpoint, decode_checkpoint

__all__ = ["CHECKPOINT_READ_TIMEOUT_S", "CheckpointReadCutError", "Checkpoints", "read_checkpoints"]

logger = logging.getLogger(__name__)

CHECKPOINT_READ_TIMEOUT_S = 30.0
"""The longest a restore waits for the checkpoints of all the partitions it reads."""

WATERMARK_TRY_S = 1.0
"""One try at a partition's watermarks: short, so that a shutdown is seen within it."""
RETRY_PAUSE_S = 0.1
"""Between two tries at the watermarks (a refused connection fails at once)."""

Checkpoints = dict[int, list[SessionCheckpoint | PartitionCheckpoint]]
"""Partition → the latest checkpoint of every key still in it (tombstoned keys left out)."""


class CheckpointReadCutError(InfrastructureError):
    """The read was given up because the worker is stopping: nothing was read."""


def read_checkpoints(
    kafka: KafkaSettings,
    topic: str,
    partitions: Sequence[int],
    *,
    worker_id: str,
    progressed: Callable[[], None] = lambda: None,
    timeout_s: float = CHECKPOINT_READ_TIMEOUT_S,
    stopping: Callable[[], bool] = lambda: False,
) -> Checkpoints:
    """The latest checkpoint of every key in these partitions of ``topic``.

    One reader for all of them (a takeover after a crash restores every partition of the dead
    worker at once: a reader per partition cost a client start and a first fetch each). Reads
    ``read_committed`` up to the partitions' *high watermarks* (asked of a ``read_uncommitted``
    client: a ``read_committed`` one is told the last stable offset), so every record of a
    transaction that is resolved, or still resolving, is waited for: a transaction committed
    but whose markers are not written yet is read once they are, and a dead worker's open one
    holds the read until it is aborted (``transaction.timeout.ms``). Malformed
    records are logged and skipped. ``progressed`` is called whenever a Kafka call returns (the
    worker's liveness). Raises InfrastructureError when the watermarks cannot be read, or the
    end is not reached within ``timeout_s``; CheckpointReadCutError, within about a second, once
    ``stopping()`` (asked as the read goes) is true: partitions restored for a worker that is
    leaving would only be handed over again, and the read must not hold up its shutdown bound.
    """
    if not partitions:
        return {}
    reader = new_consumer(checkpoint_reader_config(kafka, worker_id))
    ends_reader = new_consumer(checkpoint_reader_config(kafka, worker_id, committed=False))
    latest: dict[int, dict[bytes, SessionCheckpoint | PartitionCheckpoint]] = {}
    timeout_at = time.monotonic() + timeout_s

    def time_left_s() -> float:
        """Until the read's timeout; CheckpointReadCutError once the worker is stopping."""
        if stopping():
            raise CheckpointReadCutError(
                f"checkpoint read of partition(s) {sorted(partitions)} cut short by shutdown"
            )
        return timeout_at - time.monotonic()

    try:
        ends: dict[int, int] = {}
        starts = []
        for partition in partitions:
            low, high = _watermarks(ends_reader, TopicPartition(topic, partition), time_left_s)
            progressed()
            if high > low:
                ends[partition] = high
                starts.append(TopicPartition(topic, partition, low))
        if not starts:
            return {}
        reader.assign(starts)
        while ends and time_left_s() > 0:
            for record in reader.consume(num_messages=1000, timeout=0.2):
                key, value = record.key(), record.value()
                if record.error() is not None or key is None:
                    continue
                found = latest.setdefault(record.partition(), {})
                if value is None:
                    found.pop(key, None)
                    continue
                try:
                    found[key] = decode_checkpoint(key, value)
                except ValueError as error:
                    logger.warning("skipping malformed checkpoint: %s", error)
            positions = reader.position([TopicPartition(topic, p) for p in ends])
            progressed()
            for position in positions:
                if position.offset >= ends[position.partition]:
                    del ends[position.partition]
        if ends:
            raise InfrastructureError(
                f"could not read checkpoints of partition(s) {sorted(ends)} within "
                f"{timeout_s:.0f} s"
            )
    finally:
        ends_reader.close()
        reader.close()
    return {partition: list(found.values()) for partition, found in latest.items()}


def _watermarks(reader: Any, tp: TopicPartition, time_left_s: Callable[[], float]) -> Any:
    """``(low, high)`` of one partition, in tries of at most ``WATERMARK_TRY_S``, repeated after
    any error that is not fatal while ``time_left_s()`` is positive (it raises once the worker
    stops). A fresh reader without metadata yet answers ``_ALL_BROKERS_DOWN`` or ``_TRANSPORT``
    while it connects (a broker restarting, a slow TLS handshake), not only ``_TIMED_OUT``."""
    while True:
        try:
            return reader.get_watermark_offsets(
                tp, timeout=max(0.01, min(WATERMARK_TRY_S, time_left_s()))
            )
        except KafkaException as error:
            if error.args[0].fatal() or time_left_s() <= 0:
                raise InfrastructureError(
                    f"cannot read the checkpoints of partition {tp.partition}: {error}"
                ) from None
            time.sleep(min(RETRY_PAUSE_S, max(0.0, time_left_s())))  # an error at once: no spin
