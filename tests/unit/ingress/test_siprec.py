"""SIPREC metadata: labelled streams mapped to participants by the metadata's links only."""

from __future__ import annotations

import pytest

from pipeline.ingress.rtp import Rejected, RejectReason
from pipeline.ingress.sdp import SessionDescription, parse_sdp
from pipeline.ingress.siprec import (
    AgentRule,
    RecordingMetadata,
    map_streams,
    parse_metadata,
    split_multipart,
)
from tests.unit.ingress.sip_messages import (
    BOUNDARY,
    metadata,
    multipart,
    sdp_offer,
    two_stream_sdp,
)

RULE = AgentRule.parse("domain:agents.example.com")


def parsed_metadata(xml: str) -> RecordingMetadata:
    result = parse_metadata(xml.encode())
    assert isinstance(result, RecordingMetadata), result
    return result


def media_of(text: str) -> SessionDescription:
    result = parse_sdp(text)
    assert isinstance(result, SessionDescription)
    return result


def test_the_multipart_body_splits_into_sdp_and_metadata() -> None:
    body = multipart(("application/sdp", "v=0\r\n"), ("application/rs-metadata+xml", "<x/>"))
    parts = split_multipart(f'multipart/mixed; boundary="{BOUNDARY}"', body)
    assert not isinstance(parts, Rejected)
    assert [(p.content_type, p.body) for p in parts] == [
        ("application/sdp", b"v=0\r\n"),
        ("application/rs-metadata+xml", b"<x/>"),
    ]
    assert isinstance(split_multipart("multipart/mixed", body), Rejected)


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("draft_form", [False, True])
def test_streams_map_to_participants_by_label_whatever_the_order(
    swap: bool, draft_form: bool
) -> None:
    offer = media_of(two_stream_sdp(30000, 30002, swap=swap))
    result = map_streams(
        offer.media, [0, 1], parsed_metadata(metadata(draft_form=draft_form)), RULE
    )
    assert not isinstance(result, Rejected), result
    by_label = {a.label: a for a in result}
    assert by_label["1"].channel == "agent"
    assert by_label["1"].participant.aor == "sip:agent7@agents.example.com"
    assert by_label["1"].is_agent
    assert by_label["2"].channel == "customer"
    assert by_label["2"].participant.name == "Caller"
    # The m-line of label 1 is wherever the offer put it.
    assert by_label["1"].media_index == (0 if swap else 1)


def test_swapped_labels_in_the_metadata_swap_the_channels_not_the_packets() -> None:
    """The recorder says the agent sends the stream labelled 2: the agent's channel is then
    that m-line's, as the metadata says (the mapping never guesses from order)."""
    offer = media_of(two_stream_sdp(30000, 30002))
    swapped = parsed_metadata(metadata(agent_label="2", customer_label="1"))
    result = map_streams(offer.media, [0, 1], swapped, RULE)
    assert not isinstance(result, Rejected)
    assert {a.label: a.channel for a in result} == {"2": "agent", "1": "customer"}


def test_missing_unknown_and_unresolved_labels_are_refused_by_reason() -> None:
    meta = parsed_metadata(metadata())
    unlabelled = media_of(sdp_offer([(30000, "0", None), (30002, "0", "1")]))
    twice = media_of(sdp_offer([(30000, "0", "1"), (30002, "0", "1")]))
    unknown = media_of(sdp_offer([(30000, "0", "1"), (30002, "0", "9")]))
    cases = [
        (unlabelled, meta, RULE, RejectReason.SIPREC_UNLABELLED_STREAM),
        (twice, meta, RULE, RejectReason.SIPREC_UNLABELLED_STREAM),
        (unknown, meta, RULE, RejectReason.SIPREC_UNKNOWN_LABEL),
        (
            media_of(two_stream_sdp(1, 2)),
            meta,
            AgentRule.parse("domain:elsewhere.example"),
            RejectReason.SIPREC_AGENT_UNRESOLVED,
        ),
        (
            media_of(two_stream_sdp(1, 2)),
            meta,
            AgentRule.parse("aor:sip:*"),  # both match
            RejectReason.SIPREC_AGENT_UNRESOLVED,
        ),
    ]
    for offer, meta_case, rule, reason in cases:
        result = map_streams(offer.media, [0, 1], meta_case, rule)
        assert isinstance(result, Rejected)
        assert result.reason is reason, result


def test_bad_metadata_is_refused_and_entities_are_never_expanded() -> None:
    bomb = b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaa">]><recording>&a;</recording>'
    for body in (b"not xml", b"<other/>", bomb, b"<recording><participant/></recording>"):
        result = parse_metadata(body)
        assert isinstance(result, Rejected), body
        assert result.reason is RejectReason.SIPREC_BAD_METADATA


def test_the_agent_rule_takes_aor_domain_and_name_alternatives() -> None:
    meta = parsed_metadata(metadata())
    agent, customer = meta.participants["YWdlbnQ="], meta.participants["Y3VzdG9tZXI="]
    for text in ("aor:sip:agent*@*", "domain:example.com", "name:agent *", "aor:x, name:AGENT*"):
        rule = AgentRule.parse(text)
        assert rule.is_agent(agent), text
    assert not AgentRule.parse("domain:agents.example.com").is_agent(customer)
    assert not AgentRule.parse("").enabled
    with pytest.raises(ValueError, match="KIND:PATTERN"):
        AgentRule.parse("role:agent")
