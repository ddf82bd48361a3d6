"""SDP (RFC 4566) offers read and answered (RFC 3264) for a receive-only media sink.

Pure. ``parse_sdp`` reads what the offer/answer needs: each ``m=`` line's media, port,
formats, ``a=rtpmap``, direction, ``a=label`` (RFC 4574, what SIPREC names streams by) and the
connection address. ``choose_codec`` picks, in the offerer's order of preference, the first
format we decode (PCMU, PCMA, L16 mono at 8 or 16 kHz) and the telephone-event format at its
rate. ``build_answer`` answers every offered ``m=`` line in order (§6): the streams we take
with our port, that one codec (and telephone-event) and the direction that mirrors the offer's
for a sink that never sends; every other with port 0 (refused).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from pipeline.ingress.rtp import Codec, Rejected, RejectReason

__all__ = [
    "ChosenCodec",
    "Direction",
    "MediaAnswer",
    "MediaDescription",
    "SessionDescription",
    "build_answer",
    "choose_codec",
    "parse_sdp",
]

_STATIC_FORMATS = {0: ("PCMU", 8000, 1), 8: ("PCMA", 8000, 1), 10: ("L16", 44100, 2)}
_TAKEN_RATES_HZ = {Codec.PCMU: (8000,), Codec.PCMA: (8000,), Codec.L16: (8000, 16000)}


class Direction(enum.StrEnum):
    SENDRECV = "sendrecv"
    SENDONLY = "sendonly"
    RECVONLY = "recvonly"
    INACTIVE = "inactive"

    def answered_by_a_sink(self) -> Direction:
        """Our direction for an offer's: we receive what the offerer sends, and send nothing."""
        if self in (Direction.SENDRECV, Direction.SENDONLY):
            return Direction.RECVONLY
        return Direction.INACTIVE


@dataclass(frozen=True, slots=True)
class MediaDescription:
    media: str
    port: int
    proto: str
    formats: tuple[int, ...]
    rtpmap: dict[int, tuple[str, int, int]] = field(default_factory=dict)
    """payload type → (encoding name, clock rate Hz, channels)."""
    direction: Direction = Direction.SENDRECV
    label: str | None = None
    connection: str | None = None
    """This stream's connection address (its own ``c=`` or the session's)."""

    def format_of(self, payload_type: int) -> tuple[str, int, int] | None:
        return self.rtpmap.get(payload_type) or _STATIC_FORMATS.get(payload_type)


@dataclass(frozen=True, slots=True)
class SessionDescription:
    media: tuple[MediaDescription, ...]
    origin_address: str = ""


@dataclass(slots=True)
class _Stream:
    """One ``m=`` section while it is read."""

    media: str
    port: int
    proto: str
    formats: tuple[int, ...]
    rtpmap: dict[int, tuple[str, int, int]] = field(default_factory=dict)
    direction: Direction | None = None
    label: str | None = None
    connection: str | None = None


def parse_sdp(text: str) -> SessionDescription | Rejected:
    """The offer in ``text``; ``bad_sdp`` when it has no ``v=0``, an ``m=`` line that does not
    parse, or no stream at all."""
    lines = [line.strip() for line in text.replace("\r\n", "\n").split("\n") if line.strip()]
    if not lines or lines[0] != "v=0":
        return Rejected(RejectReason.BAD_SDP, "no v=0 line")
    session_connection: str | None = None
    session_direction = Direction.SENDRECV
    origin = ""
    streams: list[_Stream] = []
    for line in lines[1:]:
        kind, equals, value = line.partition("=")
        if not equals or len(kind) != 1:
            return Rejected(RejectReason.BAD_SDP, f"line {line[:60]!r}")
        current = streams[-1] if streams else None
        if kind == "o":
            parts = value.split()
            origin = parts[5] if len(parts) >= 6 else ""
        elif kind == "m":
            media = _parse_media_line(value)
            if media is None:
                return Rejected(RejectReason.BAD_SDP, f"m-line {value[:60]!r}")
            streams.append(media)
        elif kind == "c":
            address = _connection_address(value)
            if current is None:
                session_connection = address
            else:
                current.connection = address
        elif kind == "a":
            name, _, attribute = value.partition(":")
            if name in _DIRECTIONS:
                if current is None:
                    session_direction = Direction(name)
                else:
                    current.direction = Direction(name)
            elif current is not None and name == "rtpmap":
                _add_rtpmap(current, attribute)
            elif current is not None and name == "label":
                current.label = attribute.strip()
    if not streams:
        return Rejected(RejectReason.BAD_SDP, "no m= line")
    return SessionDescription(
        tuple(
            MediaDescription(
                media=stream.media,
                port=stream.port,
                proto=stream.proto,
                formats=stream.formats,
                rtpmap=stream.rtpmap,
                direction=stream.direction or session_direction,
                label=stream.label,
                connection=stream.connection or session_connection,
            )
            for stream in streams
        ),
        origin,
    )


_DIRECTIONS = frozenset(d.value for d in Direction)


def _parse_media_line(value: str) -> _Stream | None:
    parts = value.split()
    if len(parts) < 4:
        return None
    port = parts[1].split("/")[0]
    if not port.isdigit() or int(port) > 65535:
        return None
    if parts[2].startswith("RTP/") and not all(p.isdigit() and int(p) < 128 for p in parts[3:]):
        return None
    formats = tuple(int(p) for p in parts[3:] if p.isdigit())
    return _Stream(parts[0], int(port), parts[2], formats)


def _connection_address(value: str) -> str | None:
    parts = value.split()
    return parts[2].split("/")[0] if len(parts) >= 3 else None


def _add_rtpmap(stream: _Stream, attribute: str) -> None:
    payload_type, _, encoding = attribute.strip().partition(" ")
    fields = encoding.strip().split("/")
    if not payload_type.isdigit() or len(fields) < 2 or not fields[1].isdigit():
        return  # an rtpmap we cannot read: that format is simply not one we take
    channels = int(fields[2]) if len(fields) > 2 and fields[2].isdigit() else 1
    stream.rtpmap[int(payload_type)] = (fields[0], int(fields[1]), channels)


@dataclass(frozen=True, slots=True)
class ChosenCodec:
    codec: Codec
    payload_type: int
    sample_rate_hz: int
    dtmf_payload_type: int | None


def choose_codec(media: MediaDescription, rates_hz: tuple[int, ...] = ()) -> ChosenCodec | None:
    """The first offered format we decode (``rates_hz``: only at one of these rates, e.g. the
    rate of the call a re-INVITE continues), and the offer's telephone-event at that rate;
    None when there is none (or the stream is not RTP audio)."""
    if media.media != "audio" or not media.proto.startswith("RTP/") or media.port == 0:
        return None
    for payload_type in media.formats:
        described = media.format_of(payload_type)
        if described is None:
            continue
        name, rate, channels = described
        codec = Codec.parse(name)
        if codec is None or channels != 1 or rate not in _TAKEN_RATES_HZ[codec]:
            continue
        if rates_hz and rate not in rates_hz:
            continue
        dtmf = next(
            (
                pt
                for pt in media.formats
                if (f := media.format_of(pt)) is not None
                and f[0].lower() == "telephone-event"
                and f[1] == rate
            ),
            None,
        )
        return ChosenCodec(codec, payload_type, rate, dtmf)
    return None


@dataclass(frozen=True, slots=True)
class MediaAnswer:
    """Our side of one taken stream: the port RTP comes to and the codec it carries."""

    port: int
    chosen: ChosenCodec


def build_answer(
    offer: SessionDescription,
    answers: list[MediaAnswer | None],
    *,
    host: str,
    session_id: int,
    version: int,
) -> str:
    """The answer SDP: one ``m=`` line per offered one (``answers[i]`` None: refused)."""
    family = "IP6" if ":" in host else "IP4"
    lines = [
        "v=0",
        f"o=streamscribe {session_id} {version} IN {family} {host}",
        "s=streamscribe",
        f"c=IN {family} {host}",
        "t=0 0",
    ]
    for media, answer in zip(offer.media, answers, strict=True):
        if answer is None:
            formats = " ".join(str(f) for f in media.formats) or "0"
            lines.append(f"m={media.media} 0 {media.proto} {formats}")
            continue
        chosen = answer.chosen
        taken = [chosen.payload_type]
        if chosen.dtmf_payload_type is not None:
            taken.append(chosen.dtmf_payload_type)
        lines.append(f"m=audio {answer.port} {media.proto} {' '.join(map(str, taken))}")
        lines.append(f"a=rtpmap:{chosen.payload_type} {chosen.codec.value}/{chosen.sample_rate_hz}")
        if chosen.dtmf_payload_type is not None:
            lines.append(
                f"a=rtpmap:{chosen.dtmf_payload_type} telephone-event/{chosen.sample_rate_hz}"
            )
            lines.append(f"a=fmtp:{chosen.dtmf_payload_type} 0-15")
        if media.label is not None:
            lines.append(f"a=label:{media.label}")
        lines.append(f"a={media.direction.answered_by_a_sink().value}")
    return "\r\n".join(lines) + "\r\n"
