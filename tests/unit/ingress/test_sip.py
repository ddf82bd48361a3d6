"""SIP message parsing, responses and TCP framing."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.ingress.rtp import Rejected, RejectReason
from pipeline.ingress.sip import (
    SipRequest,
    SipResponse,
    SipStreamFramer,
    Via,
    build_response,
    parse_sip,
    try_headers,
)
from tests.unit.ingress.sip_messages import invite, request, sdp_offer


def parsed(data: bytes) -> SipRequest:
    message = parse_sip(data)
    assert isinstance(message, SipRequest), message
    return message


def test_a_request_is_read_with_its_headers_and_exactly_its_body() -> None:
    sdp = sdp_offer([(30000, "0 101", None)])
    message = parsed(invite(sdp) + b"trailing garbage past Content-Length")
    assert message.method == "INVITE"
    assert message.uri == "sip:transcribe@127.0.0.1"
    assert message.call_id == "call-1@example.com"
    assert message.cseq == (1, "INVITE")
    assert message.tag("from") == "1928301774"
    assert message.tag("to") == ""
    assert message.content_type == "application/sdp"
    assert message.body == sdp.encode()
    via = message.via
    assert via == Via("UDP", "127.0.0.1", 5070, {"branch": "z9hG4bK776asdhds", "rport": ""})


def test_compact_forms_folding_and_multiple_vias() -> None:
    data = (
        b"OPTIONS sip:x@127.0.0.1 SIP/2.0\r\n"
        b"v: SIP/2.0/TCP 10.0.0.1:5060;branch=z9hG4bKa, SIP/2.0/UDP 10.0.0.2;branch=z9hG4bKb\r\n"
        b"f: <sip:a@b>;tag=1\r\nt: <sip:x@127.0.0.1>\r\ni: abc\r\n"
        b"CSeq: 7\r\n  OPTIONS\r\nl: 0\r\n\r\n"
    )
    message = parsed(data)
    assert message.header_values("via")[1] == "SIP/2.0/UDP 10.0.0.2;branch=z9hG4bKb"
    assert message.via is not None
    assert message.via.transport == "TCP"
    assert message.cseq == (7, "OPTIONS")
    assert message.call_id == "abc"


def test_responses_parse_and_are_not_requests() -> None:
    message = parse_sip(b"SIP/2.0 200 OK\r\nCall-ID: x\r\nContent-Length: 0\r\n\r\n")
    assert isinstance(message, SipResponse)
    assert (message.status, message.reason) == (200, "OK")


def test_every_malformed_message_is_a_bad_sip_rejection() -> None:
    good = request("OPTIONS")
    cases = [
        b"",
        b"\x00\xff\xfe",
        b"HELLO\r\n\r\n",
        good.replace(b"SIP/2.0\r\n", b"SIP/3.0\r\n", 1),
        good.replace(b"Call-ID: call-1@example.com\r\n", b""),
        good.replace(b"CSeq: 1 OPTIONS", b"CSeq: one OPTIONS"),
        good.replace(b"CSeq: 1 OPTIONS", b"CSeq: 1 INVITE"),
        good.replace(b"Via: SIP/2.0/UDP", b"Via: HTTP/1.1/UDP"),
        good.replace(b"Content-Length: 0", b"Content-Length: 99"),
        good.replace(b"Max-Forwards: 70", b"no colon here"),
        b"INVITE sip:x SIP/2.0\r\n" + b"X: " + b"a" * 70_000 + b"\r\n\r\n",
    ]
    for data in cases:
        result = parse_sip(data)
        assert isinstance(result, Rejected), data[:80]
        assert result.reason is RejectReason.BAD_SIP


@given(st.binary(max_size=600))
def test_no_bytes_make_the_parser_raise(data: bytes) -> None:
    parse_sip(data)
    try_headers(data)
    list(SipStreamFramer().feed(data))


def test_a_message_that_does_not_parse_can_still_be_answered_if_its_headers_route_it() -> None:
    broken = request("OPTIONS").replace(b"CSeq: 1 OPTIONS", b"CSeq: 1 INVITE")
    headers = try_headers(broken)
    assert headers is not None
    assert headers.call_id == "call-1@example.com"
    assert try_headers(b"garbage\r\n\r\n") is None
    assert try_headers(request("ACK").replace(b"CSeq: 1 ACK", b"CSeq: x")) is None


def test_a_response_copies_the_dialog_headers_and_stamps_the_via() -> None:
    message = parsed(request("OPTIONS"))
    data = build_response(
        message,
        200,
        "OK",
        to_tag="abc",
        source=("192.0.2.9", 40123),
        headers=(("Allow", "INVITE"),),
    )
    response = parse_sip(data)
    assert isinstance(response, SipResponse)
    assert response.status == 200
    assert response.tag("to") == "abc"
    assert response.tag("from") == "1928301774"
    assert response.cseq == (1, "OPTIONS")
    via = response.via
    assert via is not None
    assert via.params["rport"] == "40123"
    assert via.params["received"] == "192.0.2.9"
    assert via.branch == "z9hG4bK776asdhds"


def test_transaction_keys_follow_the_branch_and_an_ack_joins_its_invite() -> None:
    first = parsed(request("INVITE"))
    again = parsed(request("INVITE"))
    ack = parsed(request("ACK"))
    other = parsed(request("INVITE", branch="z9hG4bKother"))
    assert first.transaction_key() == again.transaction_key() == ack.transaction_key()
    assert other.transaction_key() != first.transaction_key()
    legacy = parsed(request("INVITE", branch="oldstyle"))
    assert legacy.transaction_key()[0] == "call-1@example.com/1/1928301774"


def test_the_tcp_framer_cuts_messages_by_content_length_across_reads() -> None:
    one = invite(sdp_offer([(30000, "0", None)]))
    two = request("BYE", cseq=2)
    stream = b"\r\n\r\n" + one + two
    framer = SipStreamFramer()
    got: list[bytes] = []
    for start in range(0, len(stream), 7):
        got += framer.feed(stream[start : start + 7])
    assert got == [one, two]
    assert framer.failed is None
    broken = SipStreamFramer()
    assert list(broken.feed(b"OPTIONS sip:x SIP/2.0\r\nVia: x\r\n\r\n")) == []
    assert broken.failed is not None
