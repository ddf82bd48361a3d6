"""Twilio Media Streams and audio_fork messages, parsed from frames written as the published
protocol descriptions show them; every bad frame is a typed rejection."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.ingress.media_streams import (
    ForkStart,
    TimestampedFeed,
    TwilioMedia,
    TwilioStart,
    TwilioStop,
    TwilioUnused,
    parse_fork_metadata,
    parse_twilio,
    twilio_channels,
)
from pipeline.ingress.rtp import Rejected, RejectReason

START = {
    "event": "start",
    "sequenceNumber": "1",
    "start": {
        "accountSid": "AC123",
        "streamSid": "MZ123",
        "callSid": "CA123",
        "tracks": ["inbound", "outbound"],
        "customParameters": {"tenant": "acme"},
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
    },
    "streamSid": "MZ123",
}


def media(payload: str, track: str = "inbound", timestamp: str = "40") -> str:
    return json.dumps(
        {
            "event": "media",
            "media": {"track": track, "chunk": "3", "timestamp": timestamp, "payload": payload},
        }
    )


def test_a_start_names_the_call_tracks_and_custom_parameters() -> None:
    start = parse_twilio(json.dumps(START))
    assert start == TwilioStart("CA123", "MZ123", ("inbound", "outbound"), {"tenant": "acme"})
    assert twilio_channels(("inbound", "outbound")) == {"inbound": "customer", "outbound": "agent"}
    assert twilio_channels(("inbound",)) == {"inbound": "mono"}


def test_media_stop_and_other_events_parse() -> None:
    payload = base64.b64encode(b"\xff\x7f").decode()
    assert parse_twilio(media(payload)) == TwilioMedia("inbound", 40, b"\xff\x7f")
    assert parse_twilio('{"event": "stop", "stop": {"callSid": "CA1"}}') == TwilioStop("CA1")
    dtmf = '{"event": "dtmf", "dtmf": {"track": "inbound_track", "digit": "7"}}'
    assert parse_twilio(dtmf) == TwilioUnused("dtmf", "7", "inbound_track")
    assert parse_twilio('{"event": "connected"}') == TwilioUnused("connected")


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        ("not json", RejectReason.NOT_JSON),
        ("[1, 2]", RejectReason.NOT_JSON),
        ('{"no": "event"}', RejectReason.BAD_MESSAGE),
        (media("!!!not base64"), RejectReason.BAD_BASE64),
        (media("AAAA", track="sideways"), RejectReason.BAD_MESSAGE),
        (media("AAAA", timestamp="soon"), RejectReason.BAD_MESSAGE),
        (
            json.dumps({**START, "start": {**START["start"], "callSid": ""}}),
            RejectReason.BAD_MESSAGE,
        ),
        (
            json.dumps({**START, "start": {**START["start"], "tracks": ["inbound", "inbound"]}}),
            RejectReason.BAD_MESSAGE,
        ),
        (
            json.dumps(
                {**START, "start": {**START["start"], "mediaFormat": {"encoding": "audio/L16"}}}
            ),
            RejectReason.BAD_MESSAGE,
        ),
    ],
)
def test_bad_twilio_frames_are_refused_by_reason(frame: str, reason: RejectReason) -> None:
    rejected = parse_twilio(frame)
    assert isinstance(rejected, Rejected)
    assert rejected.reason is reason


@given(st.text(max_size=200) | st.binary(max_size=200))
def test_no_frame_raises(frame: str | bytes) -> None:
    parse_twilio(frame)
    parse_fork_metadata(frame, {}, (8000, 16000))


def test_fork_metadata_names_the_call_rate_and_channels() -> None:
    rates = (8000, 16000)
    stereo = parse_fork_metadata(
        '{"callSid": "j-1", "sampleRate": 16000, "mixType": "stereo"}', {}, rates
    )
    assert stereo == ForkStart("j-1", 16000, ("agent", "customer"))
    mono = parse_fork_metadata("{}", {"call_id": "fs-2", "tenant": "acme"}, rates)
    assert mono == ForkStart("fs-2", 8000, ("mono",), "acme")
    for text, query in (("{}", {}), ('{"uuid": "x", "sampleRate": 44100}', {}), ("{", {})):
        assert isinstance(parse_fork_metadata(text, query, rates), Rejected)


def test_a_timestamped_feed_fills_what_the_stream_skipped() -> None:
    feed = TimestampedFeed(8000, b"\xff")
    assert feed.push(0, b"a" * 160, 10_000) == b"a" * 160
    assert feed.push(60, b"b" * 160, 10_000) == b"\xff" * 320 + b"b" * 160
    assert feed.push(70, b"c" * 160, 10_000) == b"c" * 160  # overlap: appended as it is
    assert feed.filled_samples == 320
    assert feed.push(100_000, b"d", 1_000) == b"\xff" * 8000 + b"d"  # at most max_gap_ms
