"""Reading checkpoints back (``runtime.checkpoint_reader``) against a fake reader client."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from pipeline.asr.session import SessionKey
from pipeline.errors import InfrastructureError
from pipeline.runtime import checkpoint_reader
from pipeline.runtime.checkpoint_reader import (
    WATERMARK_TRY_S,
    CheckpointReadCutError,
    read_checkpoints,
)
from pipeline.settings import KafkaSettings
from pipeline.worker.checkpoint import (
    PARTITION_KEY,
    PartitionCheckpoint,
    SessionCheckpoint,
    encode_key,
)

TOPIC = "asr.checkpoints"
A, B = SessionKey("call:a", "agent"), SessionKey("call:b", "agent")


class _Record:
    def __init__(self, partition: int, offset: int, key: bytes | None, value: bytes | None):
        self._partition, self._offset, self._key, self._value = partition, offset, key, value

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self._partition

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value


class _Reader:
    """Serves ``log[partition]`` from the assigned start offsets, a batch per consume."""

    def __init__(self, log: dict[int, list[tuple[bytes | None, bytes | None]]], batch: int = 2):
        self.log, self.batch = log, batch
        self.positions: dict[int, int] = {}
        self.closed = False

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, len(self.log.get(tp.partition, []))

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.positions = {tp.partition: tp.offset for tp in partitions}

    def consume(self, num_messages: int, timeout: float) -> list[_Record]:
        records = []
        for partition, offset in self.positions.items():
            entries = self.log[partition][offset : offset + self.batch]
            records += [_Record(partition, offset + i, *entry) for i, entry in enumerate(entries)]
            self.positions[partition] = offset + len(entries)
        return records

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [
            TopicPartition(TOPIC, tp.partition, self.positions[tp.partition]) for tp in partitions
        ]

    def close(self) -> None:
        self.closed = True


def _session(key: SessionKey, finals_through: int, ended: bool = False) -> bytes:
    return SessionCheckpoint(key, None, None, finals_through, ended, 0, 0).encode()


def _read(monkeypatch: Any, reader: Any, partitions: list[int], **kwargs: Any) -> Any:
    monkeypatch.setattr(checkpoint_reader, "new_consumer", lambda config: reader)
    return read_checkpoints(KafkaSettings(), TOPIC, partitions, worker_id="w1", **kwargs)


def test_the_latest_checkpoint_of_each_key_is_read_and_tombstones_forget_it(
    monkeypatch: Any,
) -> None:
    reader = _Reader(
        {
            0: [
                (encode_key(A), _session(A, 0)),
                (encode_key(B), _session(B, 3)),
                (encode_key(A), _session(A, 2)),
                (encode_key(PARTITION_KEY), PartitionCheckpoint(41).encode()),
                (encode_key(B), None),  # B's checkpoint deleted (ended long ago)
            ],
            1: [],
        }
    )
    calls: list[int] = []
    found = _read(monkeypatch, reader, [0, 1], progressed=lambda: calls.append(1))
    assert set(found) == {0}
    by_type = {type(c).__name__: c for c in found[0]}
    assert by_type["PartitionCheckpoint"].handled_through == 41
    [session] = [c for c in found[0] if isinstance(c, SessionCheckpoint)]
    assert (session.key, session.finals_through) == (A, 2)
    assert calls  # every returning Kafka call counts as progress (liveness)
    assert reader.closed


def test_a_malformed_record_is_skipped(monkeypatch: Any) -> None:
    reader = _Reader({0: [(encode_key(A), b"{not json"), (encode_key(B), _session(B, 1))]})
    found = _read(monkeypatch, reader, [0])
    assert [c.key for c in found[0] if isinstance(c, SessionCheckpoint)] == [B]


def test_nothing_to_read_opens_no_client(monkeypatch: Any) -> None:
    def fail(config: Any) -> None:
        raise AssertionError("no client for no partitions")

    monkeypatch.setattr(checkpoint_reader, "new_consumer", fail)
    assert read_checkpoints(KafkaSettings(), TOPIC, [], worker_id="w1") == {}


class _Stalled(_Reader):
    """The end (the high watermark) is held back: the records of a dead worker's open
    transaction count in it, and a ``read_committed`` client gets none of them until the broker
    aborts it (``test_exactly_once`` shows the real client doing so)."""

    def consume(self, num_messages: int, timeout: float) -> list[_Record]:
        return []


def test_an_end_not_reached_in_time_is_an_infrastructure_error(monkeypatch: Any) -> None:
    reader = _Stalled({0: [(encode_key(A), _session(A, 0))]})
    with pytest.raises(InfrastructureError, match=r"partition\(s\) \[0\] within 0 s"):
        _read(monkeypatch, reader, [0], timeout_s=0.05)
    assert reader.closed


class _NoWatermarks(_Reader):
    def __init__(self, log: Any, code: int = KafkaError._TIMED_OUT, fatal: bool = False) -> None:
        super().__init__(log)
        self.code, self.fatal = code, fatal
        self.timeouts: list[float] = []

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.timeouts.append(timeout)
        raise KafkaException(KafkaError(self.code, fatal=self.fatal))


def test_watermarks_that_time_out_until_the_read_times_out_are_an_infrastructure_error(
    monkeypatch: Any,
) -> None:
    reader = _NoWatermarks({0: []})
    with pytest.raises(InfrastructureError, match="cannot read the checkpoints of partition 0"):
        _read(monkeypatch, reader, [0], timeout_s=0.05)
    assert reader.closed
    assert reader.timeouts
    assert max(reader.timeouts) <= WATERMARK_TRY_S


class _Connecting(_Reader):
    """A fresh reader without metadata: librdkafka answers _ALL_BROKERS_DOWN (after the try's
    timeout) or _TRANSPORT (at once) until it has connected, here on the third try."""

    def __init__(self, log: Any) -> None:
        super().__init__(log)
        self.tries = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.tries += 1
        if self.tries == 1:
            raise KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN))
        if self.tries == 2:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return super().get_watermark_offsets(tp, timeout)


def test_a_reader_still_connecting_is_waited_for(monkeypatch: Any) -> None:
    # Review finding: only _TIMED_OUT was retried, so a takeover during a broker restart gave up
    # after one 1 s try (the worker exited) instead of waiting up to the read's 30 s.
    reader = _Connecting({0: [(encode_key(A), _session(A, 4))]})
    found = _read(monkeypatch, reader, [0])
    assert reader.tries == 3
    assert [c.finals_through for c in found[0] if isinstance(c, SessionCheckpoint)] == [4]


def test_a_fatal_watermark_error_is_not_retried(monkeypatch: Any) -> None:
    reader = _NoWatermarks({0: []}, KafkaError._FATAL, fatal=True)
    with pytest.raises(InfrastructureError, match="cannot read the checkpoints of partition 0"):
        _read(monkeypatch, reader, [0])
    assert len(reader.timeouts) == 1


class _StalledUntilStopped(_Stalled):
    """The end is held back; a SIGTERM arrives during the third fetch."""

    def __init__(self, log: Any) -> None:
        super().__init__(log)
        self.fetches = 0
        self.stopped = False

    def consume(self, num_messages: int, timeout: float) -> list[_Record]:
        self.fetches += 1
        self.stopped = self.stopped or self.fetches == 3
        return []


def test_a_shutdown_during_the_read_cuts_it_at_the_next_fetch(monkeypatch: Any) -> None:
    # A read waits up to 30 s for a dead worker's transaction to be aborted; the shutdown bound
    # (10 s by default) must not wait for it.
    reader = _StalledUntilStopped({0: [(encode_key(A), _session(A, 0))]})
    with pytest.raises(CheckpointReadCutError, match=r"partition\(s\) \[0\] cut short by shutdown"):
        _read(monkeypatch, reader, [0], stopping=lambda: reader.stopped)
    assert reader.fetches == 3
    assert reader.closed


def test_a_shutdown_while_the_watermarks_time_out_cuts_the_read(monkeypatch: Any) -> None:
    reader = _NoWatermarks({0: []})
    with pytest.raises(CheckpointReadCutError):
        _read(monkeypatch, reader, [0], stopping=lambda: len(reader.timeouts) >= 2)
    assert len(reader.timeouts) == 2
    assert reader.closed
