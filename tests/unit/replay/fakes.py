"""A fake engine for the replay runner's unit tests, and helpers that build chunk records."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from pipeline.asr.engine import EngineOutput, SessionEnded, StepReport
from pipeline.asr.session import SessionKey
from pipeline.clock import Clock
from pipeline.contracts import AudioChunk, Encoding, EndpointReason, Final, encode_chunk
from pipeline.contracts.messages import utterance_id
from pipeline.replay.runner import ChunkRecord

RATE_HZ = 16000
CHUNK_MS = 20


@dataclass(frozen=True, slots=True)
class Accepted:
    key: SessionKey
    samples: int
    capture_ms: int | None
    position: int | None
    flush: bool
    end_of_stream: bool


@dataclass(slots=True)
class _FakeSession:
    tenant: str
    samples: int = 0
    utterance_start: int = 0
    utterance_index: int = 0
    end_pending: bool = False
    flush_pending: bool = False
    utterances: int = 0


@dataclass
class FakeEngine:
    """An utterance per flush and one at the end of a stream; its text names its sample span.

    Like the real engine: ``accept`` creates the session, ``close`` marks it for ending, ``step``
    emits finals (``emit_ms`` from the clock) and a ``SessionEnded`` for ended sessions.
    """

    clock: Clock
    accepted: list[Accepted] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    closed: list[SessionKey] = field(default_factory=list)
    _sessions: dict[SessionKey, _FakeSession] = field(default_factory=dict)

    @property
    def model_id(self) -> str:
        return "fake-model"

    @property
    def sessions(self) -> dict[SessionKey, _FakeSession]:
        return self._sessions

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
    ) -> None:
        assert samples.dtype == np.float32
        session = self._sessions.setdefault(key, _FakeSession(tenant))
        session.samples += len(samples) * (16000 // sample_rate_hz)
        session.flush_pending |= flush
        session.end_pending |= end_of_stream
        self.accepted.append(
            Accepted(key, len(samples), capture_ms, position, flush, end_of_stream)
        )

    def close(self, key: SessionKey) -> None:
        self.closed.append(key)
        if key in self._sessions:
            self._sessions[key].end_pending = True

    def step(self, max_jobs: int | None = None) -> StepReport:
        self.steps.append(self.clock.now_ms())
        outputs: list[EngineOutput] = []
        for key, session in list(self._sessions.items()):
            if session.flush_pending or session.end_pending:
                outputs.append(self._final(key, session, session.end_pending))
                session.flush_pending = False
            if session.end_pending:
                outputs.append(
                    SessionEnded(
                        key, session.tenant, session.samples // 16, 0, session.utterances, 0
                    )
                )
                del self._sessions[key]
        return StepReport(tuple(outputs))

    def _final(self, key: SessionKey, session: _FakeSession, end: bool) -> Final:
        start, stop = session.utterance_start, session.samples
        index = session.utterance_index
        session.utterance_index += 1
        session.utterance_start = stop
        session.utterances += 1
        return Final(
            call_id=key.call_id,
            channel=key.channel,
            utterance_index=index,
            utterance_id=utterance_id(key.call_id, key.channel, index),
            text=f"samples {start} to {stop}",
            words=(),
            start_ms=start // 16,
            end_ms=stop // 16,
            endpoint_reason=EndpointReason.END_OF_STREAM if end else EndpointReason.FORCED,
            model_id=self.model_id,
            emit_ms=self.clock.now_ms(),
        )


def chunk_record(
    call_id: str,
    seq: int,
    offset: int,
    *,
    channel: str = "mono",
    partition: int = 0,
    capture_ms: int | None = None,
    timestamp_ms: int | None = None,
    end_of_stream: bool = False,
    flush: bool = False,
    samples: int = RATE_HZ * CHUNK_MS // 1000,
) -> ChunkRecord:
    """A valid ``audio.chunks`` record of ``samples`` silent samples. Sent (``timestamp_ms``)
    at its capture time unless told, as a live producer sends; at 1 s without either."""
    chunk = AudioChunk(
        call_id=call_id,
        channel=channel,
        seq=seq,
        sample_rate_hz=RATE_HZ,
        encoding=Encoding.PCM_S16LE,
        payload=memoryview(bytes(2 * samples)),
        capture_ms=capture_ms,
        end_of_stream=end_of_stream,
        flush=flush,
    )
    key, value, headers = encode_chunk(chunk)
    if timestamp_ms is None:
        timestamp_ms = capture_ms if capture_ms is not None else 1_000
    return ChunkRecord(partition, offset, timestamp_ms, key, value, headers)


def call_records(
    call_id: str,
    chunks: int,
    *,
    first_offset: int = 0,
    start_ms: int = 1_000_000,
    end: bool = True,
    channel: str = "mono",
) -> list[ChunkRecord]:
    """One channel's chunks with contiguous capture times, the last flagged end-of-stream."""
    return [
        chunk_record(
            call_id,
            seq,
            first_offset + seq,
            channel=channel,
            capture_ms=start_ms + seq * CHUNK_MS,
            end_of_stream=end and seq == chunks - 1,
        )
        for seq in range(chunks)
    ]
