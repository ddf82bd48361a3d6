"""Each stream's bookkeeping in one place: what ``Streams`` takes in and forgets together."""

from __future__ import annotations

from pipeline.asr.engine import EngineConfig, StreamingEngine
from pipeline.asr.session import SessionKey
from pipeline.clock import ManualClock
from pipeline.topics import TopicRole
from pipeline.worker.admission import AdmissionLimits
from pipeline.worker.intake import Admitted, ChunkRecord, Duplicate
from pipeline.worker.outbox import Outbox
from pipeline.worker.progress import PartitionProgress
from pipeline.worker.staging import Staging
from pipeline.worker.streams import Streams
from tests.unit.worker.test_worker_loop import _chunk, _Hears, _Silence


def _streams() -> tuple[Streams, StreamingEngine, Staging]:
    clock = ManualClock(1_000_000)
    engine = StreamingEngine(_Hears(), _Silence(), EngineConfig(), clock)
    streams = Streams(engine, AdmissionLimits(), max_chunk_bytes=65536, max_pending_jobs=8)
    topics = {role: role.value for role in TopicRole}
    return streams, engine, Staging(Outbox(), topics, "w-1", clock)


def _record(call_id: str, seq: int, offset: int, partition: int) -> ChunkRecord:
    message = _chunk(call_id, seq, offset)
    return ChunkRecord(partition, offset, 0, message.key(), message.value(), message.headers())


def test_forgetting_a_partition_drops_its_streams_everywhere_and_keeps_the_others() -> None:
    streams, engine, staging = _streams()
    for partition in (0, 1):
        streams.add(PartitionProgress(partition))
    assert isinstance(streams.receive(_record("a", 0, 0, 0), staging, 0), Admitted)
    assert isinstance(streams.receive(_record("b", 0, 0, 1), staging, 0), Admitted)
    a, b = SessionKey("a", "mono"), SessionKey("b", "mono")
    assert set(engine.sessions) == {a, b}

    streams.forget([0])

    assert set(engine.sessions) == {b}
    assert streams.admission.state(a) is None
    assert streams.admission.state(b) is not None
    assert streams.book.session(a) is None
    assert streams.partitions() == [1]
    # Taken again from scratch (a rewind or a new owner): a new stream, not a duplicate.
    streams.add(PartitionProgress(0))
    assert isinstance(streams.receive(_record("a", 0, 0, 0), staging, 0), Admitted)
    assert isinstance(streams.receive(_record("a", 0, 1, 0), staging, 0), Duplicate)


def test_a_record_of_a_partition_not_owned_is_not_taken() -> None:
    streams, engine, staging = _streams()
    assert streams.receive(_record("a", 0, 0, 3), staging, 0) is None
    assert not engine.sessions
    assert not staging.outbox.records
