"""RTP packets (RFC 3550 §5.1), RFC 4733 telephone-events and the payload types we take.

Pure: bytes in, a frozen ``RtpPacket`` (or a ``Rejected`` with its reason) out. Nothing here
raises on bad input: a datagram is untrusted network data, and every way it can be malformed is
a ``RejectReason`` that the shell counts and logs.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from pipeline.contracts import Encoding
from pipeline.contracts.g711 import alaw_decode, alaw_encode, mulaw_decode, mulaw_encode

__all__ = [
    "COMFORT_NOISE_PAYLOAD_TYPE",
    "RTP_HEADER_BYTES",
    "RTP_VERSION",
    "Codec",
    "RejectReason",
    "Rejected",
    "RtpPacket",
    "TelephoneEvent",
    "parse_rtp",
    "parse_telephone_event",
]

RTP_VERSION = 2
RTP_HEADER_BYTES = 12
COMFORT_NOISE_PAYLOAD_TYPE = 13
"""RFC 3389 comfort noise: a static payload type (RFC 3551 table 4)."""
_EXTENSION_HEADER_BYTES = 4
_TELEPHONE_EVENT_BYTES = 4
_MAX_DTMF_EVENT = 15
"""Events 0–15 are the DTMF digits 0–9, *, #, A–D (RFC 4733 §3.2)."""
DTMF_DIGITS = "0123456789*#ABCD"


class RejectReason(enum.StrEnum):
    """Why the gateway refused a datagram or a media-stream message (metric label ``reason``)."""

    SHORT_HEADER = "short_header"
    BAD_VERSION = "bad_version"
    BAD_PADDING = "bad_padding"
    BAD_EXTENSION = "bad_extension"
    BAD_CSRC = "bad_csrc"
    UNKNOWN_PAYLOAD_TYPE = "unknown_payload_type"
    BAD_PAYLOAD = "bad_payload"
    UNEXPECTED_SOURCE = "unexpected_source"
    UNEXPECTED_SSRC = "unexpected_ssrc"
    UNKNOWN_PORT = "unknown_port"
    BAD_TELEPHONE_EVENT = "bad_telephone_event"
    OVERSIZED_FRAME = "oversized_frame"
    NOT_JSON = "not_json"
    BAD_MESSAGE = "bad_message"
    BAD_BASE64 = "bad_base64"
    MEDIA_BEFORE_START = "media_before_start"
    UNAUTHORIZED = "unauthorized"
    CALL_LIMIT = "call_limit"
    BAD_SIP = "bad_sip"
    BAD_SDP = "bad_sdp"
    NO_COMMON_CODEC = "no_common_codec"
    UNSUPPORTED_BODY = "unsupported_body"
    UNSUPPORTED_EXTENSION = "unsupported_extension"
    NO_DIALOG = "no_dialog"
    SIPREC_NO_METADATA = "siprec_no_metadata"
    SIPREC_BAD_METADATA = "siprec_bad_metadata"
    SIPREC_UNLABELLED_STREAM = "siprec_unlabelled_stream"
    SIPREC_UNKNOWN_LABEL = "siprec_unknown_label"
    SIPREC_AGENT_UNRESOLVED = "siprec_agent_unresolved"


@dataclass(frozen=True, slots=True)
class Rejected:
    """A refused input: the reason (a stable code) and a short detail for the log."""

    reason: RejectReason
    detail: str


@dataclass(frozen=True, slots=True)
class RtpPacket:
    """One parsed RTP packet. ``payload`` excludes header, CSRCs, extension and padding."""

    payload_type: int
    sequence_number: int
    """16 bits; wraps from 65535 to 0."""
    timestamp: int
    """32 bits, in samples of the payload's clock rate."""
    ssrc: int
    marker: bool
    payload: bytes
    csrc_count: int = 0
    extension_profile: int | None = None


def parse_rtp(datagram: bytes) -> RtpPacket | Rejected:
    """The RTP packet in ``datagram``, or why it is not one.

    Checks, in order: the fixed 12-byte header; version 2; the CSRC list, the header extension
    (its 4-byte header and declared length) and the padding count each lie within the datagram,
    with the padding count at least 1 and leaving the headers whole.
    """
    size = len(datagram)
    if size < RTP_HEADER_BYTES:
        return Rejected(RejectReason.SHORT_HEADER, f"{size} bytes, a header needs 12")
    first, second = datagram[0], datagram[1]
    version = first >> 6
    if version != RTP_VERSION:
        return Rejected(RejectReason.BAD_VERSION, f"version {version}")
    has_padding = bool(first & 0x20)
    has_extension = bool(first & 0x10)
    csrc_count = first & 0x0F
    offset = RTP_HEADER_BYTES + 4 * csrc_count
    if offset > size:
        return Rejected(RejectReason.BAD_CSRC, f"{csrc_count} CSRCs past a {size}-byte packet")
    extension_profile: int | None = None
    if has_extension:
        if offset + _EXTENSION_HEADER_BYTES > size:
            return Rejected(RejectReason.BAD_EXTENSION, "extension header past the packet")
        extension_profile = int.from_bytes(datagram[offset : offset + 2], "big")
        words = int.from_bytes(datagram[offset + 2 : offset + 4], "big")
        offset += _EXTENSION_HEADER_BYTES + 4 * words
        if offset > size:
            return Rejected(
                RejectReason.BAD_EXTENSION, f"extension of {words} words past a {size}-byte packet"
            )
    end = size
    if has_padding:
        padding = datagram[-1]
        if padding == 0 or offset + padding > size:
            return Rejected(RejectReason.BAD_PADDING, f"padding count {padding} in {size} bytes")
        end = size - padding
    return RtpPacket(
        payload_type=second & 0x7F,
        sequence_number=int.from_bytes(datagram[2:4], "big"),
        timestamp=int.from_bytes(datagram[4:8], "big"),
        ssrc=int.from_bytes(datagram[8:12], "big"),
        marker=bool(second & 0x80),
        payload=bytes(datagram[offset:end]),
        csrc_count=csrc_count,
        extension_profile=extension_profile,
    )


@dataclass(frozen=True, slots=True)
class TelephoneEvent:
    """An RFC 4733 §2.3 named event: a DTMF digit while it is pressed (or its end)."""

    event: int
    end: bool
    volume_dbm0: int
    """Power of the tone, 0 to -63 dBm0 (the field holds its magnitude)."""
    duration_samples: int
    """How long the event has lasted so far, from the packet's RTP timestamp (its start)."""

    @property
    def digit(self) -> str:
        return DTMF_DIGITS[self.event]


def parse_telephone_event(payload: bytes) -> TelephoneEvent | Rejected:
    """The first event of a telephone-event payload (4 bytes each; RFC 4733 §2.5.1.3 allows a
    redundant list, whose first is the newest). Only DTMF (events 0–15) is taken."""
    if len(payload) < _TELEPHONE_EVENT_BYTES or len(payload) % _TELEPHONE_EVENT_BYTES:
        return Rejected(RejectReason.BAD_TELEPHONE_EVENT, f"{len(payload)} bytes")
    event = payload[0]
    if event > _MAX_DTMF_EVENT:
        return Rejected(RejectReason.BAD_TELEPHONE_EVENT, f"event {event} is not a DTMF digit")
    return TelephoneEvent(
        event=event,
        end=bool(payload[1] & 0x80),
        volume_dbm0=-(payload[1] & 0x3F),
        duration_samples=int.from_bytes(payload[2:4], "big"),
    )


class Codec(enum.StrEnum):
    """The audio payloads the gateway takes, by their SDP names (RFC 3551)."""

    PCMU = "PCMU"
    PCMA = "PCMA"
    L16 = "L16"

    @classmethod
    def parse(cls, name: str) -> Codec | None:
        """``PCMU``/``ulaw``/``mulaw``, ``PCMA``/``alaw``, ``L16``/``slin``/``slin16`` (any
        case; Asterisk's format names included); None for anything else."""
        return _CODEC_ALIASES.get(name.strip().lower())

    @property
    def encoding(self) -> Encoding:
        """The audio-chunk encoding its payload is published in (L16 is converted)."""
        if self is Codec.PCMU:
            return Encoding.MULAW
        if self is Codec.PCMA:
            return Encoding.ALAW
        return Encoding.PCM_S16LE

    @property
    def bytes_per_sample(self) -> int:
        return 2 if self is Codec.L16 else 1

    @property
    def static_payload_type(self) -> int | None:
        """RFC 3551's static payload type, None for L16 at 8/16 kHz (dynamic, 96–127)."""
        if self is Codec.PCMU:
            return 0
        if self is Codec.PCMA:
            return 8
        return None

    def to_contract_payload(self, payload: bytes) -> bytes | None:
        """The payload in the chunk contract's encoding: G.711 as it is, L16 (network byte
        order, RFC 3551 §4.5.11) swapped to little endian; None when it is not whole samples."""
        if len(payload) % self.bytes_per_sample:
            return None
        if self is not Codec.L16:
            return payload
        swapped = bytearray(len(payload))
        swapped[0::2] = payload[1::2]
        swapped[1::2] = payload[0::2]
        return bytes(swapped)

    def to_encoding(self, payload: bytes, encoding: Encoding) -> bytes | None:
        """The payload in ``encoding``, which may be another codec's: a call keeps the
        encoding it was opened with when a re-INVITE changes the codec at the same rate (G.711
        laws are converted through linear PCM; L16 to G.711 is G.711's own quantisation)."""
        contract = self.to_contract_payload(payload)
        if contract is None or encoding is self.encoding:
            return contract
        if self is Codec.PCMU:
            pcm = mulaw_decode(np.frombuffer(contract, dtype=np.uint8))
        elif self is Codec.PCMA:
            pcm = alaw_decode(np.frombuffer(contract, dtype=np.uint8))
        else:
            pcm = np.frombuffer(contract, dtype="<i2")
        if encoding is Encoding.MULAW:
            return mulaw_encode(pcm).tobytes()
        if encoding is Encoding.ALAW:
            return alaw_encode(pcm).tobytes()
        return pcm.astype("<i2").tobytes()


_CODEC_ALIASES = {
    "pcmu": Codec.PCMU,
    "ulaw": Codec.PCMU,
    "mulaw": Codec.PCMU,
    "pcma": Codec.PCMA,
    "alaw": Codec.PCMA,
    "l16": Codec.L16,
    "slin": Codec.L16,
    "slin16": Codec.L16,
}
