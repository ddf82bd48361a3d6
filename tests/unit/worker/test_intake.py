"""The hand-over of an admitted chunk to the engine, shared by the worker and replay."""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.asr.session import SessionKey
from pipeline.contracts.audio_chunk import AudioChunk, Encoding
from pipeline.worker.intake import feed_chunk


class _Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def accept(self, key: SessionKey, samples: Any, sample_rate_hz: int, **fields: Any) -> None:
        self.calls.append((key, samples, sample_rate_hz, fields))


def test_every_field_of_the_chunk_reaches_the_engine() -> None:
    pcm = np.array([0, 16384, -16384, 32767], dtype="<i2")
    chunk = AudioChunk(
        "call:1",
        "agent",
        7,
        8000,
        Encoding.PCM_S16LE,
        memoryview(pcm.tobytes()),
        capture_ms=1_700_000_000_123,
        end_of_stream=True,
        flush=True,
        tenant="acme",
    )
    sink = _Sink()
    key = SessionKey("call:1", "agent")
    feed_chunk(sink, key, chunk, position=42)
    [(got_key, samples, rate, fields)] = sink.calls
    assert got_key == key
    assert rate == 8000
    np.testing.assert_allclose(samples, pcm / 32768.0)
    assert fields == {
        "tenant": "acme",
        "capture_ms": 1_700_000_000_123,
        "position": 42,
        "flush": True,
        "end_of_stream": True,
    }
