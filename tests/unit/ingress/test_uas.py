"""The UAS core: transactions, retransmissions, offer/answer, CANCEL, BYE, re-INVITE, SIPREC
and every refusal, driven message by message with the time passed in."""

from __future__ import annotations

import itertools

import pytest

from pipeline.ingress.rtp import Codec, RejectReason
from pipeline.ingress.sdp import Direction, SessionDescription, parse_sdp
from pipeline.ingress.sip import SipResponse, parse_sip
from pipeline.ingress.siprec import AgentRule
from pipeline.ingress.uas import T1_MS, T2_MS, Outcome, Peer, SipUas, UasConfig
from tests.unit.ingress.sip_messages import (
    invite,
    metadata,
    request,
    sdp_offer,
    siprec_invite,
    two_stream_sdp,
)

PEER = Peer("udp", ("127.0.0.1", 5070))
TCP_PEER = Peer("tcp", ("127.0.0.1", 50123), connection=3)
CALL = "call-1@example.com"


def uas(rule: str = "domain:agents.example.com") -> SipUas:
    return SipUas(UasConfig(5060, "acme", AgentRule.parse(rule)))


def responses(outcome: Outcome) -> list[SipResponse]:
    out = []
    for send in outcome.sends:
        message = parse_sip(send.data)
        assert isinstance(message, SipResponse), send.data[:80]
        out.append(message)
    return out


def statuses(outcome: Outcome) -> list[int]:
    return [r.status for r in responses(outcome)]


def answer_of(outcome: Outcome) -> SessionDescription:
    (ok,) = responses(outcome)
    assert ok.status == 200
    assert ok.content_type == "application/sdp"
    answer = parse_sdp(ok.body.decode())
    assert isinstance(answer, SessionDescription)
    return answer


def established(core: SipUas, peer: Peer = PEER) -> SipResponse:
    """A plain call set up: INVITE, ports bound (mono → 40000), 200 OK, ACK. Its 200 OK."""
    started = core.receive(invite(sdp_offer([(30000, "0 101", None)])), peer, 0)
    assert started.start is not None
    accepted = core.accept(CALL, {"mono": 40000}, "127.0.0.1", 10)
    (ok,) = responses(accepted)
    core.receive(request("ACK", branch="z9hG4bKack", to_tag=ok.tag("to")), peer, 20)
    return ok


def test_an_invite_gets_100_then_a_200_with_our_port_and_codec() -> None:
    core = uas()
    started = core.receive(invite(sdp_offer([(30000, "8 0 101", None)])), PEER, 0)
    assert statuses(started) == [100]
    plan = started.start
    assert plan is not None
    assert plan.call_id == CALL
    assert plan.tenant == "acme"
    (channel,) = plan.channels
    assert (channel.label, channel.chosen.codec, channel.chosen.dtmf_payload_type) == (
        "mono",
        Codec.PCMA,
        101,
    )
    accepted = core.accept(CALL, {"mono": 40000}, "10.1.2.3", 5)
    answer = answer_of(accepted)
    assert answer.media[0].port == 40000
    assert answer.media[0].formats == (8, 101)
    assert answer.media[0].direction is Direction.RECVONLY
    (ok,) = responses(accepted)
    assert ok.tag("to")
    assert "sip:streamscribe@10.1.2.3:5060" in (ok.header("contact") or "")


def test_a_retransmitted_invite_is_answered_again_and_opens_nothing() -> None:
    core = uas()
    data = invite(sdp_offer([(30000, "0", None)]))
    first = core.receive(data, PEER, 0)
    again = core.receive(data, PEER, 100)
    assert again.start is None
    assert again.sends == first.sends  # the 100 Trying again
    ok = core.accept(CALL, {"mono": 40000}, "127.0.0.1", 150)
    after = core.receive(data, PEER, 200)
    assert after.start is None
    assert after.sends == ok.sends


def test_the_200_is_retransmitted_until_the_ack_over_udp_only() -> None:
    core = uas()
    core.receive(invite(sdp_offer([(30000, "0", None)])), PEER, 0)
    ok = core.accept(CALL, {"mono": 40000}, "127.0.0.1", 0)
    sent_at = [t for t in range(0, 8000, 10) if core.tick(t).sends]
    # T1, then doubling: 500, 1500, 3500, 7500 ms after the first.
    assert sent_at == [T1_MS, 3 * T1_MS, 7 * T1_MS, 15 * T1_MS]
    (response,) = responses(ok)
    core.receive(request("ACK", branch="z9hG4bKack", to_tag=response.tag("to")), PEER, 8000)
    assert not any(core.tick(t).sends for t in range(8000, 40000, 100))
    tcp = uas()
    tcp.receive(invite(sdp_offer([(30000, "0", None)])), TCP_PEER, 0)
    tcp.accept(CALL, {"mono": 40000}, "127.0.0.1", 0)
    assert not any(tcp.tick(t).sends for t in range(0, 10000, 100))


def test_retransmissions_are_at_most_t2_apart_and_no_ack_ends_the_call() -> None:
    core = uas()
    core.receive(invite(sdp_offer([(30000, "0", None)])), PEER, 0)
    core.accept(CALL, {"mono": 40000}, "127.0.0.1", 0)
    sent_at = []
    ended = []
    for t in range(0, 40_000, 10):
        outcome = core.tick(t)
        if outcome.sends:
            sent_at.append(t)
        ended += outcome.ended
    gaps = [b - a for a, b in itertools.pairwise(sent_at)]
    assert max(gaps) == T2_MS
    assert ended == [(CALL, "no ACK for the 200 OK")]
    assert core.dialogs == 0


def test_cancel_before_the_answer_gets_487_and_ends_the_call() -> None:
    core = uas()
    core.receive(invite(sdp_offer([(30000, "0", None)])), PEER, 0)
    cancel = core.receive(request("CANCEL"), PEER, 50)
    assert sorted(statuses(cancel)) == [200, 487]
    assert cancel.ended == ((CALL, "CANCEL"),)
    # The ports were bound meanwhile: the call only ends, nothing is answered.
    late = core.accept(CALL, {"mono": 40000}, "127.0.0.1", 60)
    assert late.sends == ()
    assert late.ended == ((CALL, "cancelled"),)
    # The 487 is retransmitted until its ACK, which comes on the INVITE's branch.
    assert core.tick(60 + T1_MS).sends
    core.receive(request("ACK"), PEER, 600)
    assert not any(core.tick(t).sends for t in range(700, 10_000, 100))


def test_cancel_after_the_answer_changes_nothing_and_unknown_cancel_is_481() -> None:
    core = uas()
    established(core)
    late = core.receive(request("CANCEL"), PEER, 100)
    assert statuses(late) == [200]
    assert late.ended == ()
    unknown = core.receive(request("CANCEL", branch="z9hG4bKnothing"), PEER, 100)
    assert statuses(unknown) == [481]
    assert unknown.rejected is not None
    assert unknown.rejected.reason is RejectReason.NO_DIALOG


def test_bye_ends_the_call_and_its_retransmission_is_answered_the_same() -> None:
    core = uas()
    ok = established(core)
    bye = request("BYE", branch="z9hG4bKbye", cseq=2, to_tag=ok.tag("to"))
    first = core.receive(bye, PEER, 1000)
    assert statuses(first) == [200]
    assert first.ended == ((CALL, "BYE"),)
    again = core.receive(bye, PEER, 1500)
    assert again.sends == first.sends
    assert again.ended == ()
    stranger = core.receive(request("BYE", branch="z9hG4bKx", call_id="nope"), PEER, 1600)
    assert statuses(stranger) == [481]


def test_options_are_answered_with_what_we_allow() -> None:
    (response,) = responses(uas().receive(request("OPTIONS"), PEER, 0))
    assert response.status == 200
    assert "INVITE" in (response.header("allow") or "")
    assert response.header("accept") == "application/sdp, multipart/mixed"
    assert response.header("supported") == "siprec"


def test_a_reinvite_to_hold_and_a_codec_change_continue_the_same_channel() -> None:
    core = uas()
    ok = established(core)
    tag = ok.tag("to")
    hold = core.receive(
        invite(
            sdp_offer([(30000, "0 101", None)], direction="inactive"),
            branch="z9hG4bKh",
            cseq=2,
            to_tag=tag,
        ),
        PEER,
        1000,
    )
    assert hold.update is not None
    assert hold.update.on_hold
    assert hold.start is None
    answer = answer_of(hold)
    assert answer.media[0].port == 40000
    assert answer.media[0].direction is Direction.INACTIVE
    resume = core.receive(
        invite(sdp_offer([(30000, "8", None)]), branch="z9hG4bKr", cseq=3, to_tag=tag),
        PEER,
        2000,
    )
    assert resume.update is not None
    assert not resume.update.on_hold
    assert resume.update.channels[0].label == "mono"
    assert resume.update.channels[0].chosen.codec is Codec.PCMA
    assert answer_of(resume).media[0].port == 40000


def test_a_reinvite_we_cannot_take_leaves_the_call_as_it_was() -> None:
    core = uas()
    ok = established(core)
    refused = core.receive(
        invite(sdp_offer([(30000, "96", None)]), branch="z9hG4bKw", cseq=2, to_tag=ok.tag("to")),
        PEER,
        1000,
    )
    assert statuses(refused) == [488]  # 16 kHz L16 on an 8 kHz call
    assert refused.update is None
    assert refused.ended == ()
    stray = core.receive(
        invite(sdp_offer([(30000, "0", None)]), branch="z9hG4bKs", to_tag="not-ours"), PEER, 0
    )
    assert statuses(stray) == [481]


@pytest.mark.parametrize(
    ("data", "status", "reason"),
    [
        (request("OPTIONS").replace(b"CSeq: 1 OPTIONS", b"CSeq: 1 INVITE"), 400, "bad_sip"),
        (invite(sdp_offer([(30000, "98 97", None)])), 488, "no_common_codec"),
        (invite("v=0\r\nm=audio x\r\n"), 400, "bad_sdp"),
        (request("INVITE"), 488, "bad_sdp"),
        (request("INVITE", body=b"hi", content_type="text/plain"), 415, "unsupported_body"),
        (
            invite(sdp_offer([(30000, "0", None)]), extra=("Require: 100rel, timer",)),
            420,
            "unsupported_extension",
        ),
        (siprec_invite(two_stream_sdp(30000, 30002), None), 400, "siprec_no_metadata"),
        (siprec_invite(two_stream_sdp(30000, 30002), "<nope"), 400, "siprec_bad_metadata"),
        (
            siprec_invite(sdp_offer([(30000, "0", None), (30002, "0", "1")]), metadata()),
            488,
            "siprec_unlabelled_stream",
        ),
        (
            siprec_invite(sdp_offer([(30000, "0", "5"), (30002, "0", "1")]), metadata()),
            488,
            "siprec_unknown_label",
        ),
        (
            siprec_invite(two_stream_sdp(30000, 30002), metadata(agent_aor="sip:x@other.net")),
            488,
            "siprec_agent_unresolved",
        ),
    ],
)
def test_every_bad_input_gets_its_status_and_reason(data: bytes, status: int, reason: str) -> None:
    core = uas()
    outcome = core.receive(data, PEER, 0)
    assert statuses(outcome) == [status]
    assert outcome.rejected is not None
    assert outcome.rejected.reason.value == reason
    assert outcome.start is None
    assert core.dialogs == 0
    if status == 415:
        assert responses(outcome)[0].header("accept") == "application/sdp, multipart/mixed"


def test_garbage_that_names_no_route_is_counted_and_not_answered() -> None:
    outcome = uas().receive(b"\x16\x03\x01 not sip at all", PEER, 0)
    assert outcome.sends == ()
    assert outcome.rejected is not None
    assert outcome.rejected.reason is RejectReason.BAD_SIP


def test_siprec_is_refused_with_420_when_no_agent_rule_is_configured() -> None:
    outcome = uas(rule="").receive(siprec_invite(two_stream_sdp(1, 2), metadata()), PEER, 0)
    assert statuses(outcome) == [420]
    assert responses(outcome)[0].header("unsupported") == "siprec"


@pytest.mark.parametrize("swap", [False, True])
def test_a_siprec_invite_maps_streams_to_agent_and_customer_by_metadata(swap: bool) -> None:
    core = uas()
    started = core.receive(
        siprec_invite(two_stream_sdp(30000, 30002, swap=swap), metadata()), PEER, 0
    )
    plan = started.start
    assert plan is not None
    assert plan.recording_session_id == "hVpd7YQgRW2nD22h7q60JQ=="
    by_label = {c.label: c for c in plan.channels}
    assert set(by_label) == {"agent", "customer"}
    assert by_label["agent"].stream_label == "1"
    assert by_label["agent"].participant is not None
    assert by_label["agent"].participant.aor == "sip:agent7@agents.example.com"
    assert by_label["customer"].stream_label == "2"
    ports = {"agent": 40000, "customer": 40002}
    answer = answer_of(core.accept(CALL, ports, "127.0.0.1", 5))
    for media in answer.media:
        expected = ports["agent" if media.label == "1" else "customer"]
        assert media.port == expected
        assert media.direction is Direction.RECVONLY


def test_a_second_invite_for_a_call_id_in_use_is_a_merged_request() -> None:
    core = uas()
    established(core)
    merged = core.receive(invite(sdp_offer([(1, "0", None)]), branch="z9hG4bKnew"), PEER, 100)
    assert statuses(merged) == [482]


def test_refuse_answers_the_pending_invite_and_hang_up_sends_a_bye() -> None:
    from pipeline.ingress.rtp import Rejected

    core = uas()
    core.receive(invite(sdp_offer([(30000, "0", None)])), PEER, 0)
    refused = core.refuse(CALL, 503, Rejected(RejectReason.CALL_LIMIT, "full"), 10)
    (response,) = responses(refused)
    assert response.status == 503
    assert response.header("retry-after") == "5"
    assert core.dialogs == 0
    assert core.receive(invite(sdp_offer([(30000, "0", None)])), PEER, 20).sends == refused.sends
    core = uas()
    established(core)
    (bye,) = core.hang_up(CALL).sends
    assert bye.data.startswith(b"BYE sip:alice@127.0.0.1:5070 SIP/2.0\r\n")
    assert bye.peer == PEER
    assert core.hang_up(CALL).sends == ()


def test_transactions_are_forgotten_after_their_lifetime_and_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pipeline.ingress.uas as uas_module

    core = uas()
    first = core.receive(request("OPTIONS"), PEER, 0)
    assert core.receive(request("OPTIONS"), PEER, 31_000).sends == first.sends  # remembered
    core.tick(32_000)
    again = core.receive(request("OPTIONS"), PEER, 32_001)
    assert again.sends != first.sends  # a new transaction (a new To tag)
    monkeypatch.setattr(uas_module, "MAX_TRANSACTIONS", 3)
    full = uas()
    for index in range(3):
        assert full.receive(request("OPTIONS", branch=f"z9hG4bK{index}"), PEER, 0).sends
    dropped = full.receive(request("OPTIONS", branch="z9hG4bKmore"), PEER, 0)
    assert dropped.sends == ()
    assert dropped.rejected is not None
    assert dropped.rejected.reason is RejectReason.CALL_LIMIT
