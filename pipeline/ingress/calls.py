"""Calls and their channels: the gateway's pure bookkeeping.

- ``RtpReceiver``: one RTP channel: where its packets may come from, which payload types it
  takes (audio, telephone-events, comfort noise) and its ``JitterBuffer``. Datagram in, a
  ``Received`` out; nothing raises on bad input.
- ``Call``: one call id, its channels and its timeline. The call's timeline starts at the first
  media of any channel; a channel that starts later gets that much leading silence, so every
  channel counts its samples from the call's first moment (the audio-chunk contract's timeline).
- ``CallRegistry``: the open calls, the limit on them and the pool of UDP ports.

Time comes in as arrival times (epoch ms) from the caller.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pipeline.contracts import Encoding
from pipeline.ingress.jitter import JitterBuffer, JitterConfig, PushStatus, Release
from pipeline.ingress.rtp import (
    COMFORT_NOISE_PAYLOAD_TYPE,
    Codec,
    Rejected,
    RejectReason,
    TelephoneEvent,
    parse_rtp,
    parse_telephone_event,
)

__all__ = [
    "Call",
    "CallRegistry",
    "ChannelSpec",
    "Network",
    "Received",
    "RtpReceiver",
    "SourcePolicy",
    "silence_of",
]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_ENDED_EVENTS_REMEMBERED = 16
"""Telephone events whose end was seen (by start timestamp): their repeated end packets make no
second notice. A few suffice: the repeats follow within milliseconds."""
_SILENCE = {Encoding.MULAW: b"\xff", Encoding.ALAW: b"\xd5", Encoding.PCM_S16LE: b"\x00\x00"}


def silence_of(encoding: Encoding) -> bytes:
    """One sample of digital silence in ``encoding`` (G.711's codes for 0)."""
    return _SILENCE[encoding]


@dataclass(frozen=True, slots=True)
class SourcePolicy:
    """Which source addresses may send RTP: any address inside one of ``networks``."""

    networks: tuple[Network, ...]

    @classmethod
    def parse(cls, text: str) -> SourcePolicy:
        """``"10.0.0.0/8, 127.0.0.1"`` → a policy. Raises ValueError on a malformed network."""
        return cls(
            tuple(
                ipaddress.ip_network(part.strip(), strict=False)
                for part in text.split(",")
                if part.strip()
            )
        )

    def allows(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address.version == net.version and address in net for net in self.networks)


@dataclass(frozen=True, slots=True)
class ChannelSpec:
    """What an allocation promises to send on a channel."""

    label: str
    codec: Codec
    sample_rate_hz: int
    payload_type: int | None = None
    """The audio payload type; None: the codec's static one, or for L16 the first dynamic one
    that arrives (other than the telephone-event type)."""
    dtmf_payload_type: int = 101

    @property
    def encoding(self) -> Encoding:
        return self.codec.encoding


@dataclass(frozen=True, slots=True)
class Received:
    """What one datagram did to its channel."""

    audio: bytes = b""
    rejected: Rejected | None = None
    status: PushStatus = PushStatus.ACCEPTED
    lost_packets: int = 0
    filled_samples: int = 0
    discontinuity: bool = False
    dtmf: TelephoneEvent | None = None
    """A telephone event whose first end packet (RFC 4733 sends three) the reorder buffer
    dropped (late, or a duplicate of another's): placed where the channel's audio is now."""
    started_ms: int | None = None
    """The stream's first arrival, when a start hold let its first audio out later."""
    dtmf_placed: tuple[tuple[TelephoneEvent, int], ...] = ()
    """Each telephone event (once, by its first end packet) that the buffer let out, with
    where it starts: samples from the start of ``audio`` (by its RTP timestamp)."""

    @classmethod
    def of(cls, release: Release, dtmf: TelephoneEvent | None = None) -> Received:
        """``dtmf``: the event of the packet pushed, kept only if the buffer dropped it."""
        placed = tuple((mark, at) for mark, at in release.marks if isinstance(mark, TelephoneEvent))
        return cls(
            release.audio,
            None,
            release.status,
            release.lost_packets,
            release.filled_samples,
            release.discontinuity,
            dtmf if release.status is not PushStatus.ACCEPTED else None,
            release.started_ms,
            placed,
        )


class RtpReceiver:
    """One channel's RTP: source and SSRC checks, payload types, reorder buffer.

    Contracts: the first allowed source (host, port) that sends a valid packet is the channel's
    source; datagrams from any other are refused (``unexpected_source``). A new SSRC from it is
    taken only on probation (RFC 3550 A.1): its packet is held, and the next one with the next
    sequence number switches the channel to it (a ``discontinuity``); a packet of the old SSRC
    meanwhile refuses the held one (``unexpected_ssrc``).
    """

    def __init__(
        self,
        spec: ChannelSpec,
        policy: SourcePolicy,
        jitter: JitterConfig,
        encoding: Encoding | None = None,
    ) -> None:
        self.spec = spec
        self.encoding = encoding or spec.encoding
        """What the channel publishes (a re-INVITE may change the codec, never this)."""
        self._policy = policy
        self._buffer = JitterBuffer(jitter)
        self._source: tuple[str, int] | None = None
        self._ssrc: int | None = None
        self._candidate: tuple[int, int, int, bytes | None, int] | None = None
        self._payload_type = spec.payload_type or spec.codec.static_payload_type
        self._ended_events: deque[int] = deque(maxlen=_ENDED_EVENTS_REMEMBERED)

    @property
    def jitter_ms(self) -> float:
        return self._buffer.jitter_ms

    def receive(self, datagram: bytes, source: tuple[str, int], arrival_ms: int) -> Received:
        if self._source is None:
            if not self._policy.allows(source[0]):
                return _refuse(RejectReason.UNEXPECTED_SOURCE, f"{source[0]} is not allowed")
        elif source != self._source:
            return _refuse(RejectReason.UNEXPECTED_SOURCE, f"{source[0]}:{source[1]}")
        packet = parse_rtp(datagram)
        if isinstance(packet, Rejected):
            return Received(rejected=packet)
        audio: bytes | None = None
        dtmf: TelephoneEvent | None = None
        if packet.payload_type == self.spec.dtmf_payload_type:
            event = parse_telephone_event(packet.payload)
            if isinstance(event, Rejected):
                return Received(rejected=event)
            if event.end and packet.timestamp not in self._ended_events:
                self._ended_events.append(packet.timestamp)
                dtmf = event
        elif packet.payload_type == COMFORT_NOISE_PAYLOAD_TYPE:
            pass  # its span is filled with silence by the next audio packet's timestamp
        elif self._takes_audio(packet.payload_type):
            audio = self.spec.codec.to_encoding(packet.payload, self.encoding)
            if audio is None:
                return _refuse(RejectReason.BAD_PAYLOAD, f"{len(packet.payload)} bytes of L16")
        else:
            return _refuse(RejectReason.UNKNOWN_PAYLOAD_TYPE, f"payload type {packet.payload_type}")
        self._source = source
        if self._ssrc is None:
            self._ssrc = packet.ssrc
        if packet.ssrc != self._ssrc:
            return self._probation(
                packet.ssrc, packet.sequence_number, packet.timestamp, audio, arrival_ms, dtmf
            )
        release = self._buffer.push(
            packet.sequence_number, packet.timestamp, audio, arrival_ms, mark=dtmf
        )
        if self._candidate is not None:
            self._candidate = None
            held = Received.of(release, dtmf)
            return dataclasses.replace(
                held, rejected=Rejected(RejectReason.UNEXPECTED_SSRC, "a second SSRC interleaved")
            )
        return Received.of(release, dtmf)

    def renegotiate(self, spec: ChannelSpec) -> None:
        """A re-INVITE changed what the channel carries: from now on ``spec``'s payload
        types, converted to the channel's encoding, from whichever allowed source sends
        first (a transfer or a new media server). Its packets continue the same timeline
        (a new SSRC or sequence is a discontinuity, as always)."""
        self.spec = spec
        self._payload_type = spec.payload_type or spec.codec.static_payload_type
        self._source = None

    def _takes_audio(self, payload_type: int) -> bool:
        if self._payload_type is None and 96 <= payload_type <= 127:
            self._payload_type = payload_type  # L16's dynamic type: the first one that comes
        return payload_type == self._payload_type

    def _probation(
        self,
        ssrc: int,
        sequence_number: int,
        timestamp: int,
        audio: bytes | None,
        arrival_ms: int,
        dtmf: TelephoneEvent | None,
    ) -> Received:
        held = self._candidate
        self._candidate = (ssrc, sequence_number, timestamp, audio, arrival_ms)
        if held is None or held[0] != ssrc or (held[1] + 1) % 65536 != sequence_number:
            return Received()
        self._candidate = None
        self._ssrc = ssrc
        first = self._buffer.push(held[1], held[2], held[3], held[4], new_source=True)
        second = self._buffer.push(sequence_number, timestamp, audio, arrival_ms, mark=dtmf)
        shift = len(first.audio) // self.encoding.bytes_per_sample
        return Received(
            first.audio + second.audio,
            None,
            second.status,
            first.lost_packets + second.lost_packets,
            first.filled_samples + second.filled_samples,
            True,
            dtmf if second.status is not PushStatus.ACCEPTED else None,
            first.started_ms,
            tuple(
                (mark, at + shift)
                for mark, at in first.marks + second.marks
                if isinstance(mark, TelephoneEvent)
            ),
        )

    def expire(self, now_ms: int) -> Received:
        return Received.of(self._buffer.expire(now_ms))

    def drain(self) -> Received:
        return Received.of(self._buffer.drain())


def _refuse(reason: RejectReason, detail: str) -> Received:
    return Received(rejected=Rejected(reason, detail))


@dataclass(slots=True)
class _ChannelTimeline:
    sample_rate_hz: int
    started: bool = False


@dataclass(slots=True)
class Call:
    """One call: its id, tenant, channels, and the start of its timeline.

    ``lead_in_samples`` is called with a channel's first media: the silence that puts it on the
    call's timeline (0 for the channel that starts the call).
    """

    call_id: str
    tenant: str
    created_ms: int
    last_media_ms: int | None = None
    origin_ms: int | None = None
    held: bool = False
    """On hold (signalled by SIP): no media is expected, so the idle timeout waits."""
    _channels: dict[str, _ChannelTimeline] = field(default_factory=dict)

    @property
    def channels(self) -> tuple[str, ...]:
        return tuple(self._channels)

    def add_channel(self, label: str, sample_rate_hz: int) -> None:
        self._channels[label] = _ChannelTimeline(sample_rate_hz)

    def has_channel(self, label: str) -> bool:
        return label in self._channels

    def media(self, label: str, arrival_ms: int) -> int:
        """Note media on ``label``; return the leading silence (samples) it needs first."""
        self.last_media_ms = arrival_ms
        channel = self._channels[label]
        if channel.started:
            return 0
        channel.started = True
        if self.origin_ms is None:
            self.origin_ms = arrival_ms
            return 0
        return max(arrival_ms - self.origin_ms, 0) * channel.sample_rate_hz // 1000

    def idle_since_ms(self) -> int:
        return self.created_ms if self.last_media_ms is None else self.last_media_ms


class CallRegistry:
    """The open calls (at most ``max_calls``) and the UDP ports they hold (a fixed range)."""

    def __init__(self, *, max_calls: int, ports: Iterable[int]) -> None:
        self._max_calls = max_calls
        self._calls: dict[str, Call] = {}
        self._free_ports = sorted(set(ports), reverse=True)

    def __len__(self) -> int:
        return len(self._calls)

    def __iter__(self) -> Iterator[Call]:
        return iter(list(self._calls.values()))

    def get(self, call_id: str) -> Call | None:
        return self._calls.get(call_id)

    def open(self, call_id: str, tenant: str, now_ms: int) -> Call | Rejected:
        """The open call ``call_id``, opened now when it is new and the limit allows."""
        call = self._calls.get(call_id)
        if call is not None:
            return call
        if len(self._calls) >= self._max_calls:
            return Rejected(RejectReason.CALL_LIMIT, f"{self._max_calls} calls are open")
        call = Call(call_id, tenant, now_ms)
        self._calls[call_id] = call
        return call

    def close(self, call_id: str) -> Call | None:
        return self._calls.pop(call_id, None)

    @property
    def free_ports(self) -> int:
        return len(self._free_ports)

    def take_port(self) -> int | None:
        """A free port of the range (lowest first), or None when all are taken."""
        return self._free_ports.pop() if self._free_ports else None

    def return_port(self, port: int) -> None:
        self._free_ports.append(port)
        self._free_ports.sort(reverse=True)

    def idle(self, now_ms: int, idle_timeout_ms: int) -> list[str]:
        """Calls without media (or, before any, since opening) for ``idle_timeout_ms``."""
        return [
            call.call_id
            for call in self._calls.values()
            if not call.held and now_ms - call.idle_since_ms() >= idle_timeout_ms
        ]
