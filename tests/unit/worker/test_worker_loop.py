"""The worker loop with fake Kafka clients and a no-op model: what it remembers, what it stages."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry

from pipeline.asr.engine import EngineConfig, StreamingEngine
from pipeline.asr.recognizer import Recognition
from pipeline.clock import ManualClock
from pipeline.contracts.audio_chunk import AudioChunk, Encoding, encode_chunk
from pipeline.runtime.kafka import DEAD_LETTER_MAX_VALUE_BYTES
from pipeline.runtime.metrics import WorkerMetrics
from pipeline.runtime.worker import LOOP_STALL_S, AsrWorker
from pipeline.settings import Settings, WorkerSettings
from pipeline.worker.checkpoint import encode_key
from pipeline.worker.progress import PartitionProgress

RETENTION_MS = 60_000


class _Hears:
    """A recognizer that hears nothing."""

    model_id = "nothing"

    def recognize(self, requests: Any) -> list[Recognition]:
        return [Recognition((), "", 0.0, 0.0, 0.0) for _ in requests]


class _Silence:
    """A VAD that hears no speech; its state is nothing."""

    frame_samples = 512

    def new_state(self) -> object:
        return None

    def speech_probs(self, frames: npt.NDArray[np.float32], states: Any) -> Any:
        return np.zeros(len(states), dtype=np.float32)

    def export_state(self, state: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
        return (), ()

    def import_state(self, data: Any) -> object:
        return None


class _Message:
    def __init__(self, key: bytes, value: bytes, headers: Any, offset: int) -> None:
        self._key, self._value, self._headers, self._offset = key, value, headers, offset

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def headers(self) -> Any:
        return self._headers

    def topic(self) -> str:
        return "audio.chunks"


class _Producer:
    """A transactional producer that keeps what was committed."""

    def __init__(self) -> None:
        self.committed: list[tuple[str, bytes | None, bytes | None, Any]] = []
        self._open: list[tuple[str, bytes | None, bytes | None, Any]] = []

    def begin_transaction(self) -> None:
        self._open = []

    def produce(
        self,
        topic: str,
        key: bytes | None = None,
        value: bytes | None = None,
        headers: Any = None,
        **_: Any,
    ) -> None:
        self._open.append((topic, key, value, headers))

    def send_offsets_to_transaction(self, *_: Any) -> None:
        pass

    def commit_transaction(self, *_: Any) -> None:
        self.committed += self._open


class _Consumer:
    def consumer_group_metadata(self) -> object:
        return object()

    def get_watermark_offsets(self, *_: Any, **__: Any) -> tuple[int, int]:
        return 0, 0


def _worker(clock: ManualClock, **worker: Any) -> tuple[AsrWorker, _Producer]:
    settings = Settings(
        worker=dataclasses.replace(WorkerSettings(), ended_retention_ms=RETENTION_MS, **worker)
    )
    engine = StreamingEngine(_Hears(), _Silence(), EngineConfig(), clock)
    asr = AsrWorker(settings, engine, metrics=WorkerMetrics(CollectorRegistry()), clock=clock)
    producer = _Producer()
    asr._tx, asr._consumer = producer, _Consumer()
    asr._partitions[0] = PartitionProgress(0)
    return asr, producer


def _chunk(call_id: str, seq: int, offset: int, *, end: bool = False) -> _Message:
    chunk = AudioChunk(
        call_id, "mono", seq, 16000, Encoding.PCM_S16LE, memoryview(bytes(640)), end_of_stream=end
    )
    return _Message(*encode_chunk(chunk), offset)


def _run(worker: AsrWorker, messages: list[_Message]) -> None:
    for message in messages:
        worker._handle(message)
    for _ in range(3):
        for output in worker._engine.step():
            worker._route(output)
    worker._commit()


def _checkpoints(producer: _Producer) -> list[tuple[bytes | None, bytes | None]]:
    return [(key, value) for topic, key, value, _ in producer.committed if "checkpoints" in topic]


def test_an_ended_call_is_remembered_for_the_retention_then_forgotten_with_its_checkpoint() -> None:
    clock = ManualClock(1_000_000)
    worker, producer = _worker(clock)
    _run(worker, [_chunk("c1", seq, seq, end=seq == 4) for seq in range(5)])
    assert worker._admission.known_sessions == 1
    assert worker._admission.open_sessions == 0
    ended_key = encode_key(next(iter(worker._ended)))
    assert any(key == ended_key and value for key, value in _checkpoints(producer))

    clock.advance(RETENTION_MS - 1)  # a late chunk within the retention: refused
    _run(worker, [_chunk("c1", 5, 5)])
    assert worker.status.dead_letters == 1
    assert worker._admission.known_sessions == 1

    clock.advance(1)
    _run(worker, [])
    assert worker._admission.known_sessions == 0
    assert not worker._ended
    assert _checkpoints(producer)[-1] == (ended_key, None)  # a tombstone: compaction drops it


def test_refused_chunks_leave_no_bookkeeping_behind() -> None:
    worker, _ = _worker(ManualClock(1_000_000), max_open_sessions=1)
    _run(worker, [_chunk(f"call-{n}", 0, n) for n in range(50)])
    assert worker.status.dead_letters == 49  # too_many_sessions
    assert len(worker._partitions[0].sessions) == 1
    assert worker._admission.known_sessions == 1


def test_a_dead_letter_too_big_for_any_transaction_is_cut_and_says_so() -> None:
    worker, producer = _worker(ManualClock(1_000_000))
    chunk = _chunk("c1", 0, 0)
    huge = b"\x07" * (3 * 1024 * 1024)  # beyond what audio.chunks accepts, even compressed
    _run(worker, [_Message(chunk.key(), huge, chunk.headers(), 0), _chunk("c1", 0, 1)])
    dead = [(value, headers) for topic, _, value, headers in producer.committed if "dlq" in topic]
    assert len(dead) == 1
    value, headers = dead[0]
    assert value == huge[:DEAD_LETTER_MAX_VALUE_BYTES]
    assert dict(headers)["dlq-truncated-from-bytes"] == str(len(huge)).encode()
    assert worker._admission.open_sessions == 1  # the good chunk after it went through


class _Speech(_Silence):
    """A VAD that hears speech everywhere."""

    def speech_probs(self, frames: npt.NDArray[np.float32], states: Any) -> Any:
        return np.ones(len(states), dtype=np.float32)


def test_a_partial_left_waiting_by_thinning_is_counted_once() -> None:
    clock = ManualClock(1_000_000)
    settings = Settings(worker=dataclasses.replace(WorkerSettings(), max_pending_jobs=2))
    engine = StreamingEngine(_Hears(), _Speech(), EngineConfig(), clock)
    registry = CollectorRegistry()
    worker = AsrWorker(settings, engine, metrics=WorkerMetrics(registry), clock=clock)
    worker._partitions[0] = PartitionProgress(0)
    for seq in range(60):  # 1.2 s of "speech" on three calls: a partial due on each
        for n in range(3):
            worker._handle(_chunk(f"call-{n}", seq, 3 * seq + n))
    engine.step(max_jobs=0)  # VAD only
    assert len(engine.due_partials()) == 3
    for _ in range(5):  # five loop iterations while thinning: the same three partials wait
        assert worker._thinning()
    assert registry.get_sample_value("asr_partials_thinned_total") == 3


def test_a_loop_that_stops_iterating_is_reported_stalled(monkeypatch: Any) -> None:
    worker, _ = _worker(ManualClock(1_000_000))
    assert worker.stalled() is None  # not running yet: loading is not a stall
    worker.status.running = True
    worker.status.last_iteration_s = 1000.0
    monkeypatch.setattr("pipeline.runtime.worker.time.monotonic", lambda: 1000.0 + LOOP_STALL_S)
    assert worker.stalled() is None
    monkeypatch.setattr("pipeline.runtime.worker.time.monotonic", lambda: 1001.0 + LOOP_STALL_S)
    assert "no iteration for 361 s" in (worker.stalled() or "")
