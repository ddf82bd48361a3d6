"""The per-stream reorder (jitter) buffer: RTP packets in any order → contiguous audio out.

Pure and deterministic: time enters only as the arrival times the caller passes in. One buffer
serves one channel of one call, across SSRC changes and sequence resets (a hold, a re-INVITE, a
transfer): those are ``discontinuity``s that continue the same timeline.

Contracts:

- Output is the channel's audio in order, already in the chunk contract's encoding; every sample
  of the RTP timeline between two audio packets is there: what is missing (a lost packet, silence
  suppression, a comfort-noise or telephone-event packet) comes out as digital silence of that
  many samples (``filled_samples``), at most ``max_gap_ms`` per gap.
- Bounded: at most ``depth_packets`` packets wait. A missing packet is given up (``lost``) once
  ``depth_packets`` later ones wait or the oldest waiting one arrived ``max_wait_ms`` ago
  (``expire`` with the current time releases those without a new packet).
- A packet already received (waiting or released) is a ``DUPLICATE``; one older than the audio
  already released is ``LATE``: both are dropped and counted, never output.
- **Start hold** (``start_hold_ms`` > 0): the first packets of a stream wait up to that long
  (or until ``depth_packets`` wait) before the stream starts, at the earliest of them: a
  stream's first packets overtaken by the second are reordered, not dropped as late.
- A jump of the sequence number (more than ``max_dropout_packets`` ahead or
  ``max_misorder_packets`` behind, RFC 3550 A.1) or of the timestamp (more than ``max_gap_ms``)
  and every new source is a ``discontinuity``: the waiting packets are released, the silence
  between the streams is the arrival time between them (at most ``max_gap_ms``), and the new
  stream's numbering starts from its first packet.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

__all__ = ["JitterBuffer", "JitterConfig", "PushStatus", "Release"]

_SEQ_MODULO = 1 << 16
_TS_MODULO = 1 << 32
_EPOCH = 1 << 20
"""Extended sequence numbers start here (and jump by it at a discontinuity), so that one arriving
just behind the first packet still has a positive number."""
_SEEN_MEMORY = 512


def _signed(delta: int, modulo: int) -> int:
    """``delta`` mod ``modulo`` as the nearest signed distance (serial-number arithmetic)."""
    delta %= modulo
    return delta - modulo if delta >= modulo // 2 else delta


@dataclass(frozen=True, slots=True)
class JitterConfig:
    """The buffer's bounds. ``sample_rate_hz`` is the RTP clock (8000 or 16000 here)."""

    sample_rate_hz: int
    bytes_per_sample: int
    silence_sample: bytes
    """One sample of digital silence in the output encoding (``b"\\xff"`` for μ-law)."""
    depth_packets: int = 8
    max_wait_ms: int = 60
    max_gap_ms: int = 10_000
    max_dropout_packets: int = 3000
    max_misorder_packets: int = 100
    start_hold_ms: int = 0

    @property
    def max_gap_samples(self) -> int:
        return self.max_gap_ms * self.sample_rate_hz // 1000


class PushStatus(enum.StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    LATE = "late"


@dataclass(frozen=True, slots=True)
class Release:
    """What one call on the buffer let out: contiguous audio and how it was made."""

    audio: bytes
    status: PushStatus = PushStatus.ACCEPTED
    lost_packets: int = 0
    filled_samples: int = 0
    discontinuity: bool = False
    started_ms: int | None = None
    """Set when this release starts the stream after a start hold: the first packet's arrival
    (where the channel begins on the call's timeline, not when the hold let it out)."""
    marks: tuple[tuple[object, int], ...] = ()
    """The marks (``push(mark=…)``) of the packets released, each with where its timestamp
    falls, in samples from the start of ``audio`` (at or past its end for a packet after the
    last audio: the silence up to it is not out yet)."""


@dataclass(frozen=True, slots=True)
class _Waiting:
    timestamp: int
    audio: bytes | None
    arrival_ms: int
    mark: object | None = None


class JitterBuffer:
    """One channel's reorder buffer (see the module docstring for its contracts)."""

    def __init__(self, config: JitterConfig) -> None:
        self._config = config
        self._started = False
        self._next_ext = 0
        self._next_ts = 0
        self._waiting: dict[int, _Waiting] = {}
        self._seen: deque[int] = deque(maxlen=_SEEN_MEMORY)
        self._seen_set: set[int] = set()
        self._last_arrival_ms = 0
        self._last_duration_ms = 0
        self._last_transit_ms: float | None = None
        self._held: list[tuple[int, int, bytes | None, int, object | None]] = []
        """The first packets while the start hold lasts: (sequence, timestamp, audio, arrival,
        mark)."""
        self.jitter_ms = 0.0
        """RFC 3550 §6.4.1 interarrival jitter estimate of the current stream, milliseconds."""

    @property
    def waiting_packets(self) -> int:
        return len(self._waiting) + len(self._held)

    def push(
        self,
        sequence_number: int,
        timestamp: int,
        audio: bytes | None,
        arrival_ms: int,
        *,
        new_source: bool = False,
        mark: object | None = None,
    ) -> Release:
        """Take one packet (``audio`` None: a packet that holds a place in the sequence but no
        audio, such as a telephone event or comfort noise) and release what is now due.
        ``mark`` comes back in the ``Release.marks`` of the release that lets the packet out
        (a telephone event placed on the channel's timeline), never for a packet dropped."""
        config = self._config
        if not self._started:
            if config.start_hold_ms > 0:
                return self._hold(sequence_number, timestamp, audio, arrival_ms, mark)
            self._start(sequence_number, timestamp, _EPOCH)
            return self._accept(self._next_ext, timestamp, audio, arrival_ms, False, mark)
        ahead = _signed(sequence_number - self._next_ext, _SEQ_MODULO)
        ts_ahead = _signed(timestamp - self._next_ts, _TS_MODULO)
        if (
            new_source
            or ahead > config.max_dropout_packets
            or ahead < -config.max_misorder_packets
            or abs(ts_ahead) > config.max_gap_samples
        ):
            return self._discontinuity(sequence_number, timestamp, audio, arrival_ms, mark)
        ext = self._next_ext + ahead
        if ext in self._waiting or ext in self._seen_set:
            return Release(b"", PushStatus.DUPLICATE)
        if ahead < 0:
            return Release(b"", PushStatus.LATE)
        return self._accept(ext, timestamp, audio, arrival_ms, False, mark)

    def expire(self, now_ms: int) -> Release:
        """Release what waited too long by ``now_ms`` (giving up the packets missing before it)."""
        if self._held and now_ms - self._held[0][3] >= self._config.start_hold_ms:
            return self._start_held()
        return self._release(now_ms, force=False)

    def drain(self) -> Release:
        """Release everything that waits (the stream ended): missing packets are lost."""
        started = self._start_held() if self._held else Release(b"")
        drained = self._release(self._last_arrival_ms, force=True)
        return self._joined(started, drained)

    def _hold(
        self,
        sequence_number: int,
        timestamp: int,
        audio: bytes | None,
        arrival_ms: int,
        mark: object | None,
    ) -> Release:
        if any(held[0] == sequence_number for held in self._held):
            return Release(b"", PushStatus.DUPLICATE)
        self._held.append((sequence_number, timestamp, audio, arrival_ms, mark))
        first_ms = self._held[0][3]
        if (
            len(self._held) >= self._config.depth_packets
            or arrival_ms - first_ms >= self._config.start_hold_ms
        ):
            return self._start_held()
        return Release(b"")

    def _start_held(self) -> Release:
        """Start the stream at the earliest held packet (by sequence, relative to the first to
        arrive), then take the others in their arrival order."""
        held, self._held = self._held, []
        first = held[0][0]
        earliest = min(held, key=lambda packet: _signed(packet[0] - first, _SEQ_MODULO))
        self._start(earliest[0], earliest[1], _EPOCH)
        out = self._accept(
            self._next_ext, earliest[1], earliest[2], earliest[3], False, earliest[4]
        )
        for packet in held:
            if packet is not earliest:
                out = self._joined(out, self.push(*packet[:4], mark=packet[4]))
        return self._joined(Release(b"", started_ms=held[0][3]), out)

    def _start(self, sequence_number: int, timestamp: int, base: int) -> None:
        self._started = True
        self._next_ext = base - base % _SEQ_MODULO + sequence_number
        self._next_ts = timestamp
        self._seen.clear()
        self._seen_set.clear()
        self._last_transit_ms = None

    def _discontinuity(
        self,
        sequence_number: int,
        timestamp: int,
        audio: bytes | None,
        arrival_ms: int,
        mark: object | None,
    ) -> Release:
        flushed = self._release(arrival_ms, force=True)
        gap_ms = arrival_ms - self._last_arrival_ms - self._last_duration_ms
        gap_samples = min(max(gap_ms, 0), self._config.max_gap_ms) * (
            self._config.sample_rate_hz // 1000
        )
        self._start(sequence_number, timestamp, self._next_ext + _EPOCH)
        after = self._accept(self._next_ext, timestamp, audio, arrival_ms, True, mark)
        silence = Release(
            self._config.silence_sample * gap_samples,
            filled_samples=gap_samples,
            discontinuity=True,
        )
        return self._joined(self._joined(flushed, silence), after)

    def _accept(
        self,
        ext: int,
        timestamp: int,
        audio: bytes | None,
        arrival_ms: int,
        discontinuity: bool,
        mark: object | None = None,
    ) -> Release:
        self._waiting[ext] = _Waiting(timestamp, audio, arrival_ms, mark)
        if audio is not None:  # an event's packets repeat its start time: no transit to measure
            self._update_jitter(timestamp, arrival_ms)
        self._last_arrival_ms = max(self._last_arrival_ms, arrival_ms)
        if audio is not None:
            samples = len(audio) // self._config.bytes_per_sample
            self._last_duration_ms = samples * 1000 // self._config.sample_rate_hz
        released = self._release(arrival_ms, force=False)
        if not discontinuity:
            return released
        return self._joined(released, Release(b"", discontinuity=True))

    def _update_jitter(self, timestamp: int, arrival_ms: int) -> None:
        transit_ms = arrival_ms - timestamp * 1000 / self._config.sample_rate_hz
        if self._last_transit_ms is not None:
            difference = abs(transit_ms - self._last_transit_ms)
            if difference < self._config.max_gap_ms:  # a 32-bit timestamp wrap is no jitter
                self.jitter_ms += (difference - self.jitter_ms) / 16
        self._last_transit_ms = transit_ms

    def _release(self, now_ms: int, *, force: bool) -> Release:
        config = self._config
        out = bytearray()
        lost = 0
        filled = 0
        marks: list[tuple[object, int]] = []
        while self._waiting:
            entry = self._waiting.pop(self._next_ext, None)
            if entry is None:
                oldest_ms = min(waiting.arrival_ms for waiting in self._waiting.values())
                if (
                    not force
                    and len(self._waiting) < config.depth_packets
                    and now_ms - oldest_ms < config.max_wait_ms
                ):
                    break
                following = min(self._waiting)
                lost += following - self._next_ext
                self._next_ext = following
                continue
            self._remember(self._next_ext)
            self._next_ext += 1
            if entry.mark is not None:
                ahead = _signed(entry.timestamp - self._next_ts, _TS_MODULO)
                marks.append((entry.mark, len(out) // config.bytes_per_sample + ahead))
            if entry.audio is None:
                continue
            audio = entry.audio
            gap = _signed(entry.timestamp - self._next_ts, _TS_MODULO)
            if gap > 0:
                fill = min(gap, config.max_gap_samples)
                out += config.silence_sample * fill
                filled += fill
            elif gap < 0:  # overlaps audio already out: keep only what is new
                audio = audio[-gap * config.bytes_per_sample :]
            out += audio
            samples = len(entry.audio) // config.bytes_per_sample
            self._next_ts = (entry.timestamp + samples) % _TS_MODULO
        return Release(bytes(out), PushStatus.ACCEPTED, lost, filled, marks=tuple(marks))

    def _joined(self, first: Release, second: Release) -> Release:
        """Two releases of one call as one (the audio in order, the counts added, the second's
        marks moved past the first's audio)."""
        status = first.status if first.status is not PushStatus.ACCEPTED else second.status
        shift = len(first.audio) // self._config.bytes_per_sample
        return Release(
            first.audio + second.audio,
            status,
            first.lost_packets + second.lost_packets,
            first.filled_samples + second.filled_samples,
            first.discontinuity or second.discontinuity,
            first.started_ms if first.started_ms is not None else second.started_ms,
            first.marks + tuple((mark, at + shift) for mark, at in second.marks),
        )

    def _remember(self, ext: int) -> None:
        if len(self._seen) == self._seen.maxlen:
            self._seen_set.discard(self._seen[0])
        self._seen.append(ext)
        self._seen_set.add(ext)
