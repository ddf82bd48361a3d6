"""SDP offers read and answered for a receive-only sink (RFC 4566, RFC 3264)."""

from __future__ import annotations

from pipeline.ingress.rtp import Codec, Rejected, RejectReason
from pipeline.ingress.sdp import (
    ChosenCodec,
    Direction,
    MediaAnswer,
    SessionDescription,
    build_answer,
    choose_codec,
    parse_sdp,
)
from tests.unit.ingress.sip_messages import sdp_offer


def offer(text: str) -> SessionDescription:
    parsed = parse_sdp(text)
    assert isinstance(parsed, SessionDescription), parsed
    return parsed


def test_the_first_format_we_decode_wins_in_the_offerers_order() -> None:
    media = offer(sdp_offer([(30000, "98 8 0 101", "7")])).media[0]
    assert media.label == "7"
    assert media.connection == "127.0.0.1"
    assert choose_codec(media) == ChosenCodec(Codec.PCMA, 8, 8000, 101)
    wideband = offer(sdp_offer([(30000, "96 0", None)])).media[0]
    assert choose_codec(wideband) == ChosenCodec(Codec.L16, 96, 16000, None)
    # telephone-event/8000 does not go with 16 kHz audio; at 8 kHz only, PCMU is taken.
    assert choose_codec(wideband, (8000,)) == ChosenCodec(Codec.PCMU, 0, 8000, None)


def test_formats_we_do_not_decode_give_no_codec() -> None:
    assert choose_codec(offer(sdp_offer([(30000, "98 97", None)])).media[0]) is None
    assert choose_codec(offer(sdp_offer([(0, "0", None)])).media[0]) is None  # refused stream


def test_malformed_sdp_is_bad_sdp() -> None:
    for text in (
        "",
        "v=1\r\n",
        "v=0\r\nm=audio x RTP/AVP 0\r\n",
        "v=0\r\ns=-\r\n",
        "v=0\r\nbad\r\n",
    ):
        result = parse_sdp(text)
        assert isinstance(result, Rejected), text
        assert result.reason is RejectReason.BAD_SDP


def test_the_answer_mirrors_every_m_line_and_receives_only() -> None:
    text = sdp_offer([(30000, "0 101", "1"), (30002, "98", "2")], direction="sendonly")
    parsed = offer(text)
    assert parsed.media[0].direction is Direction.SENDONLY
    chosen = choose_codec(parsed.media[0])
    assert chosen is not None
    answer = build_answer(
        parsed, [MediaAnswer(40000, chosen), None], host="10.0.0.5", session_id=7, version=1
    )
    lines = answer.split("\r\n")
    assert "c=IN IP4 10.0.0.5" in lines
    assert "m=audio 40000 RTP/AVP 0 101" in lines
    assert "a=rtpmap:0 PCMU/8000" in lines
    assert "a=rtpmap:101 telephone-event/8000" in lines
    assert "a=label:1" in lines
    assert "a=recvonly" in lines
    assert "m=audio 0 RTP/AVP 98" in lines  # refused, in its place
    assert offer(answer).media[1].port == 0


def test_hold_directions_are_answered_inactive() -> None:
    assert Direction.INACTIVE.answered_by_a_sink() is Direction.INACTIVE
    assert Direction.RECVONLY.answered_by_a_sink() is Direction.INACTIVE
    assert Direction.SENDRECV.answered_by_a_sink() is Direction.RECVONLY
