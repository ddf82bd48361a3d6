"""Replay bookkeeping: recorded audio chunks through the engine, exactly as the worker feeds it.

``ReplayRunner`` is the pure core of ``streamscribe replay`` (no Kafka, no wall clock). The shell
reads ``audio.chunks`` one partition at a time, in offset order, and hands every record to
``feed``; ``end_partition`` closes what is still open; ``result`` returns the finals, sorted.

Feeding goes through the worker's own intake, ``pipeline.worker.intake.admit`` (one function for
both), so a replay's finals are the finals the live worker would have published for the same
records and settings:

1. ``admit`` validates the record (``decode_chunk`` with the worker's ``max_chunk_bytes``) and
   asks the ``Admission`` (per-session sequence numbers, ended calls, call length and session
   limits). An invalid record is counted per ``RejectReason`` (the worker dead-letters it);
   duplicates are dropped and counted, rejected chunks counted per reason, gaps counted.
2. ``feed_chunk``: ``engine.accept`` with ``position=offset`` and the chunk's flush /
   end-of-stream flags.

Time. The engine's clock is a ``StreamClock``: the audio time of the newest record fed in the
current partition (its capture time plus its duration; the Kafka record timestamp when the chunk
has no capture time). ``emit_ms`` of a final is that clock when the final was decoded, so replaying
the same records with the same settings gives byte-identical finals, and ``latency_ms`` measures
how much audio time passed between the endpoint decision and the final (step cadence only: a
replay does not measure compute time). The engine steps whenever the clock moved by
``step_interval_ms`` (or ``max_records_per_step`` records were fed), and at a partition's end.
A session is closed when ``idle_timeout_ms`` passed between the send time (Kafka record
timestamp) of its last admitted chunk and the newest record of the partition, as the worker
closes it after that long without audio by its fetch clock (wall time while it fetches, not
while paused or stalled: ``pipeline.worker.loop.FetchClock``), which follows send times while it
keeps up with the partition. (Not by stream time: a call whose capture times run ahead of the
others, published faster than real time or from a skewed clock, would close every other call of
the partition.) Sessions still open at the end of the range are closed (``ended_by`` =
``range_end``) so their last utterances get finals.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pipeline.asr.engine import EngineOutput, SessionEnded, StepReport, Suppressed
from pipeline.asr.session import SessionKey
from pipeline.contracts.messages import Final
from pipeline.redaction.outputs import SettlingSession, redact_outputs
from pipeline.redaction.stage import Redactor
from pipeline.settings import WorkerSettings
from pipeline.worker.admission import Admission, AdmissionLimits
from pipeline.worker.intake import (
    ChunkRecord,
    ChunkSink,
    Duplicate,
    Rejected,
    Skipped,
    admit,
    feed_chunk,
)

__all__ = [
    "ChunkRecord",
    "EndedBy",
    "ReplayEngine",
    "ReplayOptions",
    "ReplayResult",
    "ReplayRunner",
    "StreamClock",
    "StreamSummary",
]

MAX_CLOSING_STEPS = 1000
"""Steps allowed to drain a partition's closed sessions (one or two suffice; more is a bug)."""


class ReplayEngine(ChunkSink, Protocol):
    """What the runner needs of ``pipeline.asr.engine.StreamingEngine`` (a fake in unit tests):
    ``accept`` (``ChunkSink``) and the rest."""

    @property
    def model_id(self) -> str: ...

    @property
    def sessions(self) -> Mapping[SessionKey, SettlingSession]: ...

    def step(self, max_jobs: int | None = None) -> StepReport: ...

    def close(self, key: SessionKey) -> None: ...


class StreamClock:
    """The replay's clock: the audio time (epoch ms) of the newest record fed; never goes back
    within a partition (``reset`` starts the next one)."""

    def __init__(self) -> None:
        self._now_ms = 0

    def now_ms(self) -> int:
        return self._now_ms

    def observe(self, time_ms: int) -> None:
        self._now_ms = max(self._now_ms, time_ms)

    def reset(self) -> None:
        self._now_ms = 0


_WORKER_DEFAULTS = WorkerSettings()


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How records are admitted and when the engine steps (the worker's settings by default).

    ``calls``: only records of these call ids are replayed (None: every call).
    """

    calls: frozenset[str] | None = None
    max_chunk_bytes: int = _WORKER_DEFAULTS.max_chunk_bytes
    limits: AdmissionLimits = field(default_factory=AdmissionLimits)
    idle_timeout_ms: int = _WORKER_DEFAULTS.idle_timeout_ms
    step_interval_ms: int = 100
    max_records_per_step: int = 500


class EndedBy(enum.StrEnum):
    """How a session's replay ended."""

    END_OF_STREAM = "end_of_stream"
    """The call's end-of-stream chunk was in the range."""
    IDLE_TIMEOUT = "idle_timeout"
    """No audio sent for ``idle_timeout_ms`` (record timestamps; the worker closes it the same
    way by its fetch clock)."""
    RANGE_END = "range_end"
    """Still open at the end of the range: closed so its last utterance gets a final."""


@dataclass(frozen=True, slots=True)
class StreamSummary:
    """What a replay did with one (call, channel).

    ``chunks``: admitted chunks; ``missing_chunks``: sequence numbers skipped (gaps);
    ``first_seq > 0`` means the call started before the range. ``rejected``: chunks the worker
    would have dead-lettered, per reason, sorted by reason. ``last_audio_ms``: stream time
    (``StreamClock``) of its last admitted chunk.
    """

    call_id: str
    channel: str
    tenant: str
    partition: int
    first_offset: int
    last_offset: int
    first_seq: int | None
    last_seq: int | None
    chunks: int
    duplicates: int
    missing_chunks: int
    rejected: tuple[tuple[str, int], ...]
    audio_ms: int
    speech_ms: int
    finals: int
    suppressed: int
    last_audio_ms: int
    ended_by: EndedBy | None


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """Everything a replay produced, in a deterministic order.

    ``finals`` sorted by (call, channel, utterance index); ``streams`` by (call, channel);
    ``invalid``: records that failed ``decode_chunk``, per reason, sorted by reason;
    ``skipped``: records of calls outside ``ReplayOptions.calls``.
    """

    finals: tuple[Final, ...]
    streams: tuple[StreamSummary, ...]
    records: int
    skipped: int
    invalid: tuple[tuple[str, int], ...]


@dataclass(slots=True)
class _Stream:
    tenant: str
    partition: int
    first_offset: int
    last_offset: int
    first_seq: int | None = None
    last_seq: int | None = None
    chunks: int = 0
    duplicates: int = 0
    missing_chunks: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    audio_ms: int = 0
    speech_ms: int = 0
    finals: int = 0
    suppressed: int = 0
    last_audio_ms: int = 0
    last_sent_ms: int = 0  # record timestamp of its last admitted chunk
    ended_by: EndedBy | None = None


class ReplayRunner:
    """Feeds recorded chunks to an engine like the worker does and collects its finals.

    Single-threaded. Partitions are replayed one after the other: ``start_partition``,
    ``feed`` (offset order), ``end_partition``. Sessions never span partitions (a call's records
    share a key, hence a partition), so closing them at a partition's end loses nothing.
    """

    def __init__(
        self,
        engine: ReplayEngine,
        clock: StreamClock,
        options: ReplayOptions | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._options = options or ReplayOptions()
        # The worker's redaction stage (its settings), so that the finals are the published ones.
        self._redactor = redactor or Redactor()
        self._admission = Admission(self._options.limits)
        self._streams: dict[SessionKey, _Stream] = {}
        self._finals: list[Final] = []
        self._invalid: Counter[str] = Counter()
        self._records = 0
        self._skipped = 0
        self._partition: int | None = None
        self._sent_ms = 0  # the newest record timestamp of the partition (idle timeouts)
        self._last_step_ms: int | None = None
        self._fed_since_step = 0
        self._calls = (
            None
            if self._options.calls is None
            else frozenset(call.encode("utf-8") for call in self._options.calls)
        )

    # -- input -------------------------------------------------------------------------------

    def start_partition(self, partition: int) -> None:
        """Begin a partition (ending the previous one if it is still open)."""
        if self._partition is not None:
            self.end_partition()
        self._partition = partition
        self._clock.reset()
        self._sent_ms = 0
        self._last_step_ms = None
        self._fed_since_step = 0

    def feed(self, record: ChunkRecord) -> None:
        """Handle one record of the current partition (records in offset order)."""
        if self._partition is None:
            self.start_partition(record.partition)
        self._records += 1
        if record.timestamp_ms > self._sent_ms:
            self._sent_ms = record.timestamp_ms
            # Before this record is admitted, as the worker's idle closes run on every poll:
            # a chunk after its channel's idle timeout finds the channel ended. Every record
            # moves the time, taken or skipped (``calls``), so the choice of calls changes
            # nothing of a call's own result.
            self._close_idle()
        if self._calls is not None and (record.key or b"") not in self._calls:
            self._skipped += 1
            return
        outcome = admit(record, self._admission, max_chunk_bytes=self._options.max_chunk_bytes)
        if isinstance(outcome, Rejected) and outcome.key is None:
            self._invalid[outcome.reason] += 1
            return
        assert not isinstance(outcome, Skipped)  # nothing is skipped on a first read
        assert outcome.key is not None
        assert outcome.chunk is not None
        key = outcome.key
        stream = self._streams.get(key)
        if stream is None:
            stream = _Stream(outcome.chunk.tenant, record.partition, record.offset, record.offset)
            self._streams[key] = stream
        stream.last_offset = record.offset
        if isinstance(outcome, Duplicate):
            stream.duplicates += 1
            return
        if isinstance(outcome, Rejected):
            stream.rejected[str(outcome.reason)] += 1
            return
        chunk = outcome.chunk
        if outcome.gap is not None and stream.first_seq is not None:
            # Gaps within what was replayed: a call that began before the range starts with a
            # sequence number above 0 (``first_seq``), which is no lost audio.
            stream.missing_chunks += outcome.gap[1] - outcome.gap[0]
        if stream.first_seq is None:
            stream.first_seq = chunk.seq
        stream.last_seq = chunk.seq
        stream.chunks += 1
        if chunk.end_of_stream:
            stream.ended_by = EndedBy.END_OF_STREAM
        if chunk.capture_ms is not None:
            self._clock.observe(chunk.capture_ms + round(chunk.duration_ms))
        else:
            self._clock.observe(record.timestamp_ms)
        stream.last_audio_ms = self._clock.now_ms()
        stream.last_sent_ms = record.timestamp_ms
        feed_chunk(self._engine, key, chunk, record.offset)
        self._fed_since_step += 1
        if self._step_due():
            self._step()

    def end_partition(self) -> None:
        """Close every session still open (``range_end``) and step until all have ended."""
        if self._partition is None:
            return
        self._step()
        for key in list(self._engine.sessions):
            stream = self._streams.get(key)
            if stream is not None and stream.ended_by is None:
                stream.ended_by = EndedBy.RANGE_END
            self._engine.close(key)
        for _ in range(MAX_CLOSING_STEPS):
            if not self._engine.sessions:
                break
            self._step()
        else:
            raise RuntimeError(f"sessions did not end after {MAX_CLOSING_STEPS} steps")
        self._partition = None

    # -- output ------------------------------------------------------------------------------

    def result(self) -> ReplayResult:
        """End the open partition and return everything, sorted (see ``ReplayResult``)."""
        self.end_partition()
        finals = sorted(
            self._finals, key=lambda f: (f.call_id, f.channel, f.utterance_index, f.start_ms)
        )
        streams = tuple(_summary(key, stream) for key, stream in sorted(self._streams.items()))
        return ReplayResult(
            finals=tuple(finals),
            streams=streams,
            records=self._records,
            skipped=self._skipped,
            invalid=tuple(sorted(self._invalid.items())),
        )

    # -- internals ---------------------------------------------------------------------------

    def _step_due(self) -> bool:
        now_ms = self._clock.now_ms()
        if self._last_step_ms is None:
            self._last_step_ms = now_ms
        return (
            now_ms - self._last_step_ms >= self._options.step_interval_ms
            or self._fed_since_step >= self._options.max_records_per_step
        )

    def _step(self) -> None:
        for output in redact_outputs(
            self._redactor, self._engine.step().outputs, self._engine.sessions
        ):
            self._route(output)
        self._last_step_ms = self._clock.now_ms()
        self._fed_since_step = 0
        self._close_idle()

    def _route(self, output: EngineOutput) -> None:
        if isinstance(output, Final):
            self._finals.append(output)
            self._stream(output.call_id, output.channel).finals += 1
        elif isinstance(output, Suppressed):
            if output.final:
                self._stream(*output.key).suppressed += 1
        elif isinstance(output, SessionEnded):
            stream = self._stream(*output.key)
            stream.audio_ms += output.audio_ms
            stream.speech_ms += output.speech_ms
            self._admission.end(output.key)

    def _stream(self, call_id: str, channel: str) -> _Stream:
        return self._streams[SessionKey(call_id, channel)]

    def _close_idle(self) -> None:
        for key in list(self._engine.sessions):
            stream = self._streams.get(key)
            if (
                stream is not None
                and stream.ended_by is None
                and self._sent_ms - stream.last_sent_ms > self._options.idle_timeout_ms
            ):
                stream.ended_by = EndedBy.IDLE_TIMEOUT
                self._engine.close(key)
                # Ended now, as in the worker: a later chunk of it is refused (call_already_ended)
                # rather than fed to the closing stream.
                self._admission.end(key)


def _summary(key: SessionKey, stream: _Stream) -> StreamSummary:
    return StreamSummary(
        call_id=key.call_id,
        channel=key.channel,
        tenant=stream.tenant,
        partition=stream.partition,
        first_offset=stream.first_offset,
        last_offset=stream.last_offset,
        first_seq=stream.first_seq,
        last_seq=stream.last_seq,
        chunks=stream.chunks,
        duplicates=stream.duplicates,
        missing_chunks=stream.missing_chunks,
        rejected=tuple(sorted(stream.rejected.items())),
        audio_ms=stream.audio_ms,
        speech_ms=stream.speech_ms,
        finals=stream.finals,
        suppressed=stream.suppressed,
        last_audio_ms=stream.last_audio_ms,
        ended_by=stream.ended_by,
    )
