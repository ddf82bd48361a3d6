"""The pure core of ``streamscribe simulate``: when calls start, what audio they send, which
records are made bad and how.

Time is simulated, in steps of one chunk: ``LoadSchedule`` yields a ``Tick`` per step with the
calls that start, the slice of audio every active call sends, the bad records to inject and the
calls that end. The shell (``pipeline.cli.simulate``) plays the ticks against a publisher, paced
in real time or as fast as possible. Everything random comes from RNGs seeded by
``LoadSpec.seed``: one for arrivals and file choice, one for bad records, so a bad rate never
changes which calls run.

Concurrency and arrivals: at most ``max_calls`` calls are active. Without an arrival rate the
load is a closed loop (``max_calls`` calls from the start, a new one whenever one ends); with a
rate, calls arrive by a Poisson process (or at fixed intervals) and wait for a free slot. At
``duration_ms`` every active call ends (its end-of-stream is sent) and arrivals stop.

Bad records come *in addition to* the good ones (the good calls stay whole), one decision per
good chunk and channel, each of a reason ``decode_chunk`` rejects (``make_bad_record``).
"""

from __future__ import annotations

import enum
import math
import random
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pipeline.contracts import AudioChunk, Encoding, Header, RejectReason, encode_chunk
from pipeline.contracts.audio_chunk import DEFAULT_MAX_PAYLOAD_BYTES, MAX_CALL_ID_BYTES
from pipeline.errors import ConfigError
from pipeline.producer.chunking import chunk_samples

__all__ = [
    "INJECTABLE_REASONS",
    "ActiveSlice",
    "Arrival",
    "BadInjection",
    "BadRecord",
    "CallStart",
    "LoadSchedule",
    "LoadSpec",
    "SourceShape",
    "Tick",
    "make_bad_record",
]

INJECTABLE_REASONS = (
    RejectReason.MISSING_KEY,
    RejectReason.BAD_KEY,
    RejectReason.MISSING_HEADER,
    RejectReason.UNKNOWN_VERSION,
    RejectReason.BAD_HEADER_VALUE,
    RejectReason.BAD_SEQUENCE,
    RejectReason.UNSUPPORTED_SAMPLE_RATE,
    RejectReason.UNSUPPORTED_ENCODING,
    RejectReason.ODD_BYTE_COUNT,
    RejectReason.OVERSIZE_PAYLOAD,
    RejectReason.EMPTY_PAYLOAD,
)
"""Every reason ``decode_chunk`` itself decides (the worker-only ones need worker state)."""


class Arrival(enum.StrEnum):
    POISSON = "poisson"
    FIXED = "fixed"


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """What load to generate (validated on construction: ``ConfigError``)."""

    max_calls: int
    duration_ms: int
    chunk_ms: int = 20
    arrival_rate_per_s: float | None = None
    arrival: Arrival = Arrival.POISSON
    bad_rate: float = 0.0
    encoding: Encoding = Encoding.PCM_S16LE
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_calls < 1:
            raise ConfigError(f"--calls must be at least 1, got {self.max_calls}")
        if self.duration_ms <= 0:
            raise ConfigError(f"--duration-s must be positive, got {self.duration_ms / 1000}")
        if self.chunk_ms <= 0:
            raise ConfigError(f"--chunk-ms must be positive, got {self.chunk_ms}")
        if self.arrival_rate_per_s is not None and not 0 < self.arrival_rate_per_s < math.inf:
            raise ConfigError(
                f"--arrival-rate must be a positive number, got {self.arrival_rate_per_s}"
            )
        if not 0.0 <= self.bad_rate <= 1.0:
            raise ConfigError(f"--bad-rate must be within [0, 1], got {self.bad_rate}")

    @property
    def reasons(self) -> tuple[RejectReason, ...]:
        """The bad-record reasons possible with this encoding (G.711 has no odd byte count)."""
        if self.encoding.bytes_per_sample == 1:
            return tuple(r for r in INJECTABLE_REASONS if r is not RejectReason.ODD_BYTE_COUNT)
        return INJECTABLE_REASONS


@dataclass(frozen=True, slots=True)
class SourceShape:
    """What scheduling needs to know of an audio file: its rate, length and channels."""

    sample_rate_hz: int
    num_samples: int
    channels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CallStart:
    call_index: int
    source_index: int
    arrival_ms: int
    """When the call arrived; it starts at the tick's time, later when it waited for a slot."""


@dataclass(frozen=True, slots=True)
class ActiveSlice:
    """Samples ``[start_sample, end_sample)`` of every channel of a call, sent this tick."""

    call_index: int
    start_sample: int
    end_sample: int


@dataclass(frozen=True, slots=True)
class BadInjection:
    """One bad record for ``channel`` of a call, built from this tick's slice of its audio."""

    call_index: int
    channel: str
    reason: RejectReason


@dataclass(frozen=True, slots=True)
class Tick:
    """One step of simulated time, applied in field order: start, send, inject, end."""

    at_ms: int
    starts: tuple[CallStart, ...] = ()
    slices: tuple[ActiveSlice, ...] = ()
    bad: tuple[BadInjection, ...] = ()
    completed: tuple[int, ...] = ()
    """Calls whose audio ran out this tick."""
    truncated: tuple[int, ...] = ()
    """Calls still running when the duration ran out (the last tick only)."""


@dataclass(slots=True)
class _Active:
    call_index: int
    source: SourceShape
    chunk_samples: int
    offset: int = 0


class LoadSchedule:
    """The ticks of one simulated run (iterate once). ``calls_not_started`` counts the arrivals
    still waiting for a slot when the run ended (valid after iteration).

    Raises:
        ConfigError: no sources, an empty one, or a chunk length that is not whole samples.
    """

    def __init__(self, spec: LoadSpec, sources: Sequence[SourceShape]) -> None:
        if not sources:
            raise ConfigError("no audio to simulate calls with")
        for source in sources:
            chunk_samples(spec.chunk_ms, source.sample_rate_hz)
            if source.num_samples <= 0 or not source.channels:
                raise ConfigError("every audio source needs samples and channels")
        self.spec = spec
        self.sources = tuple(sources)
        self.calls_not_started = 0

    def __iter__(self) -> Iterator[Tick]:
        spec = self.spec
        call_rng = random.Random(f"{spec.seed}:calls")
        bad_rng = random.Random(f"{spec.seed}:bad")
        arrivals = deque(_arrival_times(spec, call_rng))
        active: list[_Active] = []
        next_index = 0
        at_ms = 0
        while at_ms < spec.duration_ms:
            starts = []
            while len(active) < spec.max_calls and (
                spec.arrival_rate_per_s is None or (arrivals and arrivals[0] <= at_ms)
            ):
                arrival_ms = arrivals.popleft() if spec.arrival_rate_per_s is not None else at_ms
                source_index = call_rng.randrange(len(self.sources))
                source = self.sources[source_index]
                starts.append(CallStart(next_index, source_index, arrival_ms))
                active.append(
                    _Active(
                        next_index,
                        source,
                        chunk_samples(spec.chunk_ms, source.sample_rate_hz),
                    )
                )
                next_index += 1
            slices = []
            bad = []
            completed = []
            for call in active:
                end = min(call.offset + call.chunk_samples, call.source.num_samples)
                slices.append(ActiveSlice(call.call_index, call.offset, end))
                call.offset = end
                for channel in call.source.channels:
                    if bad_rng.random() < spec.bad_rate:
                        reason = bad_rng.choice(spec.reasons)
                        bad.append(BadInjection(call.call_index, channel, reason))
                if call.offset >= call.source.num_samples:
                    completed.append(call.call_index)
            active = [call for call in active if call.offset < call.source.num_samples]
            last = at_ms + spec.chunk_ms >= spec.duration_ms
            yield Tick(
                at_ms,
                tuple(starts),
                tuple(slices),
                tuple(bad),
                tuple(completed),
                tuple(call.call_index for call in active) if last else (),
            )
            at_ms += spec.chunk_ms
        self.calls_not_started = len(arrivals)


def _arrival_times(spec: LoadSpec, rng: random.Random) -> list[int]:
    """Arrival times (ms) within the run, at tick resolution (rounded up to a tick)."""
    if spec.arrival_rate_per_s is None:
        return []
    times: list[int] = []
    at_s = 0.0
    while True:
        if spec.arrival is Arrival.POISSON:
            at_s += rng.expovariate(spec.arrival_rate_per_s)
        else:  # the n-th arrival at n / rate, computed afresh: summed gaps drift by a tick
            at_s = len(times) / spec.arrival_rate_per_s
        # Rounded to the µs first: 0.3 s must not come out as 300.00000000000006 ms.
        at_ms = math.ceil(round(at_s * 1000, 3) / spec.chunk_ms) * spec.chunk_ms
        if at_ms >= spec.duration_ms:
            return times
        times.append(at_ms)


@dataclass(frozen=True, slots=True)
class BadRecord:
    """A record that breaks the audio-chunk contract in exactly one way (``reason``)."""

    reason: RejectReason
    key: bytes | None
    value: bytes
    headers: list[tuple[str, bytes]]


def make_bad_record(
    reason: RejectReason,
    template: AudioChunk,
    *,
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
) -> BadRecord:
    """A good chunk's record (``encode_chunk(template)``) with one thing broken, such that
    ``decode_chunk`` rejects it with ``reason``. ``template`` must be a valid audio chunk without
    flags, holding at least one sample. ``max_payload_bytes``: the workers' ``max_chunk_bytes``
    (an oversize payload must exceed theirs, else they take it for audio).

    Raises:
        ValueError: ``reason`` is not one of ``INJECTABLE_REASONS`` or impossible for the
            template's encoding (odd byte count of a one-byte encoding).
    """
    key: bytes | None
    key, value, headers = encode_chunk(template)

    def replaced(name: Header, new: bytes) -> list[tuple[str, bytes]]:
        return [(n, new if n == name else v) for n, v in headers]

    if reason is RejectReason.MISSING_KEY:
        key = None
    elif reason is RejectReason.BAD_KEY:
        key = b"k" * (MAX_CALL_ID_BYTES + 1)
    elif reason is RejectReason.MISSING_HEADER:
        headers = [(n, v) for n, v in headers if n != Header.CHANNEL]
    elif reason is RejectReason.UNKNOWN_VERSION:
        headers = replaced(Header.VERSION, b"999")
    elif reason is RejectReason.BAD_HEADER_VALUE:
        headers = [*headers, (Header.END_OF_STREAM, b"yes")]
    elif reason is RejectReason.BAD_SEQUENCE:
        headers = replaced(Header.SEQ, b"-1")
    elif reason is RejectReason.UNSUPPORTED_SAMPLE_RATE:
        headers = replaced(Header.SAMPLE_RATE_HZ, b"44100")
    elif reason is RejectReason.UNSUPPORTED_ENCODING:
        headers = replaced(Header.ENCODING, b"opus")
    elif reason is RejectReason.ODD_BYTE_COUNT:
        if template.encoding.bytes_per_sample == 1:
            raise ValueError(f"{template.encoding.value} cannot have an odd byte count")
        value = value[:-1]
    elif reason is RejectReason.OVERSIZE_PAYLOAD:
        value = bytes(max_payload_bytes + 2)
    elif reason is RejectReason.EMPTY_PAYLOAD:
        value = b""
    else:
        raise ValueError(f"{reason} is decided by the worker, not by the contract")
    return BadRecord(reason, key, value, headers)
