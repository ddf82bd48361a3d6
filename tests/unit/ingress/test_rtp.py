"""RTP and telephone-event parsing: every well-formed packet reads back, every malformed one is
a typed rejection, and no datagram raises."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.contracts import Encoding
from pipeline.ingress.rtp import (
    Codec,
    Rejected,
    RejectReason,
    RtpPacket,
    TelephoneEvent,
    parse_rtp,
    parse_telephone_event,
)


def build(
    *,
    payload_type: int = 0,
    seq: int = 1,
    timestamp: int = 160,
    ssrc: int = 0xDEADBEEF,
    marker: bool = False,
    csrcs: tuple[int, ...] = (),
    extension: bytes | None = None,
    padding: int = 0,
    payload: bytes = b"\xff" * 160,
    version: int = 2,
) -> bytes:
    first = version << 6 | (0x20 if padding else 0) | (0x10 if extension is not None else 0)
    first |= len(csrcs)
    header = bytes([first, (0x80 if marker else 0) | payload_type])
    header += seq.to_bytes(2, "big") + timestamp.to_bytes(4, "big") + ssrc.to_bytes(4, "big")
    header += b"".join(c.to_bytes(4, "big") for c in csrcs)
    if extension is not None:
        header += b"\xbe\xde" + (len(extension) // 4).to_bytes(2, "big") + extension
    tail = (bytes(padding - 1) + bytes([padding])) if padding else b""
    return header + payload + tail


@given(
    payload_type=st.integers(0, 127),
    seq=st.integers(0, 65535),
    timestamp=st.integers(0, 2**32 - 1),
    ssrc=st.integers(0, 2**32 - 1),
    marker=st.booleans(),
    csrcs=st.lists(st.integers(0, 2**32 - 1), max_size=15).map(tuple),
    extension=st.none() | st.binary(max_size=12).map(lambda b: b + bytes(-len(b) % 4)),
    padding=st.integers(0, 255),
    payload=st.binary(max_size=400),
)
def test_a_well_formed_packet_reads_back_field_for_field(
    payload_type: int,
    seq: int,
    timestamp: int,
    ssrc: int,
    marker: bool,
    csrcs: tuple[int, ...],
    extension: bytes | None,
    padding: int,
    payload: bytes,
) -> None:
    packet = parse_rtp(
        build(
            payload_type=payload_type,
            seq=seq,
            timestamp=timestamp,
            ssrc=ssrc,
            marker=marker,
            csrcs=csrcs,
            extension=extension,
            padding=padding,
            payload=payload,
        )
    )
    assert isinstance(packet, RtpPacket)
    assert (packet.payload_type, packet.sequence_number, packet.timestamp) == (
        payload_type,
        seq,
        timestamp,
    )
    assert (packet.ssrc, packet.marker, packet.payload) == (ssrc, marker, payload)
    assert packet.csrc_count == len(csrcs)
    assert packet.extension_profile == (None if extension is None else 0xBEDE)


@given(st.binary(max_size=200))
def test_no_datagram_raises(datagram: bytes) -> None:
    assert isinstance(parse_rtp(datagram), RtpPacket | Rejected)
    assert isinstance(parse_telephone_event(datagram), TelephoneEvent | Rejected)


@pytest.mark.parametrize(
    ("datagram", "reason"),
    [
        (b"", RejectReason.SHORT_HEADER),
        (build()[:11], RejectReason.SHORT_HEADER),
        (build(version=1), RejectReason.BAD_VERSION),
        (build(version=0), RejectReason.BAD_VERSION),
        (build(csrcs=(1, 2, 3), payload=b"")[:20], RejectReason.BAD_CSRC),
        (build(extension=b"", payload=b"")[:14], RejectReason.BAD_EXTENSION),
        (build(extension=bytes(8), payload=b"")[:18], RejectReason.BAD_EXTENSION),
    ],
)
def test_each_malformed_packet_has_its_reason(datagram: bytes, reason: RejectReason) -> None:
    rejected = parse_rtp(datagram)
    assert isinstance(rejected, Rejected)
    assert rejected.reason is reason
    assert rejected.detail


def test_padding_that_is_zero_or_eats_the_header_is_refused() -> None:
    zero = bytearray(build(padding=1, payload=b"ab"))
    zero[-1] = 0
    past = bytearray(build(padding=1, payload=b"ab"))
    past[-1] = 200
    for datagram in (zero, past):
        rejected = parse_rtp(bytes(datagram))
        assert isinstance(rejected, Rejected)
        assert rejected.reason is RejectReason.BAD_PADDING


def test_a_telephone_event_is_a_dtmf_digit_with_its_end_and_duration() -> None:
    event = parse_telephone_event(bytes([11, 0x80 | 10]) + (800).to_bytes(2, "big"))
    assert event == TelephoneEvent(event=11, end=True, volume_dbm0=-10, duration_samples=800)
    assert isinstance(event, TelephoneEvent)
    assert event.digit == "#"
    for payload in (b"\x01\x02\x03", bytes([16, 0, 0, 0])):
        rejected = parse_telephone_event(payload)
        assert isinstance(rejected, Rejected)
        assert rejected.reason is RejectReason.BAD_TELEPHONE_EVENT


def test_codecs_map_to_contract_encodings_and_l16_is_swapped_to_little_endian() -> None:
    assert Codec.parse("ulaw") is Codec.PCMU
    assert Codec.parse("PCMA") is Codec.PCMA
    assert Codec.parse("slin16") is Codec.L16
    assert Codec.parse("G729") is None
    assert Codec.PCMU.encoding is Encoding.MULAW
    assert Codec.PCMA.encoding is Encoding.ALAW
    assert Codec.L16.encoding is Encoding.PCM_S16LE
    assert Codec.L16.to_contract_payload(b"\x01\x02\xff\x7f") == b"\x02\x01\x7f\xff"
    assert Codec.L16.to_contract_payload(b"\x01\x02\x03") is None
    assert Codec.PCMU.to_contract_payload(b"\x01\x02\x03") == b"\x01\x02\x03"
