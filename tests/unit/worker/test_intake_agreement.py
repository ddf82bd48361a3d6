"""The worker and replay admit records through one intake: they agree on every rejection reason."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry

from pipeline.clock import ManualClock
from pipeline.contracts.audio_chunk import AudioChunk, Encoding, Header, RejectReason, encode_chunk
from pipeline.replay.runner import ChunkRecord, ReplayOptions, ReplayRunner, StreamClock
from pipeline.worker.admission import AdmissionLimits
from tests.unit.replay.fakes import FakeEngine
from tests.unit.worker.test_worker_loop import _Message, _run, _UnreadableHeaders, _worker

MAX_CHUNK_BYTES = 4000
LIMITS = AdmissionLimits(max_call_ms=100, max_open_sessions=3)


def _record(
    call_id: str,
    seq: int,
    *,
    end: bool = False,
    payload: bytes | None = None,
    key: bytes | str | None = "",
    header: tuple[str, bytes | None] | None = None,
) -> tuple[bytes | None, bytes, list[tuple[str, bytes | None]]]:
    """A 20 ms chunk's (key, value, headers), with one header replaced (None: removed)."""
    pcm = np.zeros(320, dtype="<i2").tobytes()
    chunk = AudioChunk(
        call_id, "mono", seq, 16000, Encoding.PCM_S16LE, memoryview(pcm), end_of_stream=end
    )
    record_key, value, headers = encode_chunk(chunk)
    listed: list[tuple[str, bytes | None]] = list(headers)
    if header is not None:
        name, replacement = header
        listed = [(n, v) for n, v in listed if n != name]
        if replacement is not None:
            listed.append((name, replacement))
    return (
        record_key if key == "" else key,  # type: ignore[return-value]
        value if payload is None else payload,
        listed,
    )


RECORDS: list[tuple[Any, ...]] = [
    *(_record("long", seq) for seq in range(6)),  # 120 ms: the sixth is too long
    _record("gappy", 0),
    _record("gappy", 2),
    _record("gappy", 1),  # out of order
    _record("gappy", 0),  # a duplicate
    _record("ended", 0, end=True),
    _record("ended", 1),  # after its end
    _record("third", 0),  # three sessions open now
    _record("fourth", 0),  # too many
    _record("x", 0, key=None),
    _record("x", 0, key=b"\xff\xfe"),
    _record("x", 0, header=(Header.SEQ, None)),
    _record("x", 0, header=(Header.VERSION, b"9")),
    _record("x", 0, header=(Header.CHANNEL, b"no spaces")),
    _record("x", 0, header=(Header.SEQ, b"first")),
    _record("x", 0, header=(Header.SAMPLE_RATE_HZ, b"11025")),
    _record("x", 0, header=(Header.ENCODING, b"flac")),
    _record("x", 0, payload=b"\x00\x00\x00"),
    _record("x", 0, payload=bytes(2 * MAX_CHUNK_BYTES)),
    _record("x", 0, payload=b""),
]


def _through_the_worker() -> tuple[Counter[str], int]:
    registry = CollectorRegistry()
    worker, producer = _worker(
        ManualClock(1_000_000),
        registry=registry,
        max_chunk_bytes=MAX_CHUNK_BYTES,
        max_call_ms=LIMITS.max_call_ms,
        max_open_sessions=LIMITS.max_open_sessions,
    )
    messages = [_Message(*fields, offset) for offset, fields in enumerate(RECORDS)]
    key, value, headers = _record("y", 0)
    messages.append(_UnreadableHeaders(key, value, headers, len(messages)))
    _run(worker, messages)
    reasons = Counter(
        dict(headers)["dlq-reason"].decode()
        for topic, _, _, headers in producer.committed
        if "dlq" in topic
    )
    duplicates = registry.get_sample_value("asr_request_total", {"outcome": "duplicate"})
    return reasons, int(duplicates or 0)


def _through_replay() -> tuple[Counter[str], int]:
    clock = StreamClock()
    runner = ReplayRunner(
        FakeEngine(clock),
        clock,
        ReplayOptions(max_chunk_bytes=MAX_CHUNK_BYTES, limits=LIMITS),
    )
    for offset, (key, value, headers) in enumerate(RECORDS):
        runner.feed(ChunkRecord(0, offset, 0, key, value, headers))
    runner.feed(ChunkRecord(0, len(RECORDS), 0, b"y", b"", None, headers_unreadable=True))
    result = runner.result()
    reasons: Counter[str] = Counter(dict(result.invalid))
    for stream in result.streams:
        reasons.update(dict(stream.rejected))
    return reasons, sum(stream.duplicates for stream in result.streams)


def test_the_worker_and_replay_refuse_the_same_records_for_the_same_reasons() -> None:
    worker_reasons, worker_duplicates = _through_the_worker()
    replay_reasons, replay_duplicates = _through_replay()
    assert set(worker_reasons) == {str(reason) for reason in RejectReason}  # every reason met
    assert worker_reasons == replay_reasons
    assert worker_duplicates == replay_duplicates == 1
