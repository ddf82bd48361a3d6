"""A decoded audio chunk into the engine: the one mapping the worker and replay share.

Pure. Both read ``audio.chunks`` records, validate them (``decode_chunk``), admit them
(``Admission``) and hand the admitted ones to an engine; replay must do it exactly as the worker
does, so the hand-over lives here once.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from pipeline.asr.session import SessionKey
from pipeline.contracts.audio_chunk import AudioChunk

__all__ = ["ChunkSink", "feed_chunk"]


class ChunkSink(Protocol):
    """What takes audio chunks: ``pipeline.asr.engine.StreamingEngine.accept``."""

    def accept(
        self,
        key: SessionKey,
        samples: npt.NDArray[np.float32],
        sample_rate_hz: int,
        *,
        tenant: str = "default",
        capture_ms: int | None = None,
        position: int | None = None,
        flush: bool = False,
        end_of_stream: bool = False,
    ) -> None: ...


def feed_chunk(engine: ChunkSink, key: SessionKey, chunk: AudioChunk, position: int) -> None:
    """Give an admitted ``chunk`` of session ``key`` to ``engine``; ``position`` is its record's
    offset (what a snapshot reports as covered)."""
    engine.accept(
        key,
        chunk.samples_float32(),
        chunk.sample_rate_hz,
        tenant=chunk.tenant,
        capture_ms=chunk.capture_ms,
        position=position,
        flush=chunk.flush,
        end_of_stream=chunk.end_of_stream,
    )
