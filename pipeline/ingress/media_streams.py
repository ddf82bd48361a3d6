"""WebSocket media-stream protocols, parsed: Twilio Media Streams and FreeSWITCH audio_fork.

Pure: a frame's text (or bytes) in, a frozen message (or a ``Rejected``) out; nothing raises on
bad input. Built from the public descriptions of the protocols:

- Twilio Media Streams (also Telnyx, SignalWire, Plivo): JSON text frames. ``connected``, then
  ``start`` (``start.callSid``, ``start.tracks``, ``start.mediaFormat`` = ``audio/x-mulaw`` at
  8000 Hz, ``start.customParameters``), then ``media`` (``media.track`` ``inbound`` or
  ``outbound``, ``media.timestamp`` ms since the stream started, ``media.payload`` base64 μ-law),
  ``dtmf``, ``mark``, and ``stop``.
- FreeSWITCH ``mod_audio_fork`` / jambonz ``listen``: one JSON text frame of metadata, then binary
  frames of 16-bit little-endian PCM, mono or two channels interleaved.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from pipeline.contracts.audio_chunk import MONO_CHANNEL, STEREO_CHANNELS
from pipeline.ingress.rtp import Rejected, RejectReason

__all__ = [
    "TWILIO_SAMPLE_RATE_HZ",
    "ForkStart",
    "TimestampedFeed",
    "TwilioMedia",
    "TwilioStart",
    "TwilioStop",
    "TwilioUnused",
    "parse_fork_metadata",
    "parse_twilio",
    "twilio_channels",
]

TWILIO_ENCODING = "audio/x-mulaw"
TWILIO_SAMPLE_RATE_HZ = 8000
TWILIO_TRACK_CHANNELS = {"inbound": "customer", "outbound": "agent"}
"""Twilio's ``inbound`` track is the caller's audio, ``outbound`` what the platform plays to the
caller (the agent side of a contact-centre call)."""


@dataclass(frozen=True, slots=True)
class TwilioStart:
    call_sid: str
    stream_sid: str
    tracks: tuple[str, ...]
    custom_parameters: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TwilioMedia:
    track: str
    timestamp_ms: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class TwilioStop:
    call_sid: str


@dataclass(frozen=True, slots=True)
class TwilioUnused:
    """``connected``, ``mark``, ``dtmf`` (``digit`` and ``track`` kept for the notice) or an
    unknown event."""

    event: str
    digit: str = ""
    track: str = ""


TwilioMessage = TwilioStart | TwilioMedia | TwilioStop | TwilioUnused


def _json_object(text: str | bytes) -> dict[str, Any] | Rejected:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        return Rejected(RejectReason.NOT_JSON, str(error)[:80])
    if not isinstance(value, dict):
        return Rejected(RejectReason.NOT_JSON, "not a JSON object")
    return value


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_twilio(text: str | bytes) -> TwilioMessage | Rejected:
    """One Twilio Media Streams message. A ``start`` must name the call, at least one known
    track and μ-law at 8000 Hz mono; a ``media`` a known track, a whole-number timestamp and
    base64 that decodes."""
    message = _json_object(text)
    if isinstance(message, Rejected):
        return message
    event = message.get("event")
    if event == "start":
        return _twilio_start(message.get("start"))
    if event == "media":
        return _twilio_media(message.get("media"))
    if event == "stop":
        stop = message.get("stop")
        return (
            TwilioStop(str(stop.get("callSid", ""))) if isinstance(stop, dict) else TwilioStop("")
        )
    if event == "dtmf":
        dtmf = message.get("dtmf")
        digit = dtmf.get("digit") if isinstance(dtmf, dict) else None
        track = dtmf.get("track") if isinstance(dtmf, dict) else None
        return TwilioUnused(
            "dtmf", digit if isinstance(digit, str) else "", track if isinstance(track, str) else ""
        )
    if isinstance(event, str):
        return TwilioUnused(event)
    return Rejected(RejectReason.BAD_MESSAGE, "no event")


def _twilio_start(start: Any) -> TwilioStart | Rejected:
    if not isinstance(start, dict):
        return Rejected(RejectReason.BAD_MESSAGE, "start without a start object")
    call_sid = _text(start.get("callSid"))
    stream_sid = _text(start.get("streamSid")) or ""
    tracks = start.get("tracks", ["inbound"])
    if call_sid is None:
        return Rejected(RejectReason.BAD_MESSAGE, "start without callSid")
    if (
        not isinstance(tracks, list)
        or not tracks
        or any(track not in TWILIO_TRACK_CHANNELS for track in tracks)
        or len(set(tracks)) != len(tracks)
    ):
        return Rejected(RejectReason.BAD_MESSAGE, f"tracks {tracks!r}")
    media_format = start.get("mediaFormat", {})
    if not isinstance(media_format, dict) or (
        media_format.get("encoding", TWILIO_ENCODING) != TWILIO_ENCODING
        or media_format.get("sampleRate", TWILIO_SAMPLE_RATE_HZ) != TWILIO_SAMPLE_RATE_HZ
        or media_format.get("channels", 1) != 1
    ):
        return Rejected(RejectReason.BAD_MESSAGE, f"mediaFormat {media_format!r}")
    custom = start.get("customParameters", {})
    parameters = (
        {str(k): str(v) for k, v in custom.items() if isinstance(v, str)}
        if isinstance(custom, dict)
        else {}
    )
    return TwilioStart(call_sid, stream_sid, tuple(tracks), parameters)


def _twilio_media(media: Any) -> TwilioMedia | Rejected:
    if not isinstance(media, dict):
        return Rejected(RejectReason.BAD_MESSAGE, "media without a media object")
    track = media.get("track", "inbound")
    if track not in TWILIO_TRACK_CHANNELS:
        return Rejected(RejectReason.BAD_MESSAGE, f"track {track!r}")
    try:
        timestamp_ms = int(media.get("timestamp", 0))
    except (TypeError, ValueError):
        return Rejected(RejectReason.BAD_MESSAGE, "timestamp is not a number")
    if timestamp_ms < 0:
        return Rejected(RejectReason.BAD_MESSAGE, "negative timestamp")
    payload = media.get("payload")
    if not isinstance(payload, str):
        return Rejected(RejectReason.BAD_MESSAGE, "media without a payload")
    try:
        audio = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return Rejected(RejectReason.BAD_BASE64, f"{len(payload)} characters")
    return TwilioMedia(track, timestamp_ms, audio)


def twilio_channels(tracks: tuple[str, ...]) -> dict[str, str]:
    """Track → channel label: both tracks are ``customer``/``agent``; a single track is ``mono``."""
    if len(tracks) == 1:
        return {tracks[0]: MONO_CHANNEL}
    return {track: TWILIO_TRACK_CHANNELS[track] for track in tracks}


@dataclass(frozen=True, slots=True)
class ForkStart:
    """audio_fork / jambonz metadata: the call, its rate and how many interleaved channels."""

    call_id: str
    sample_rate_hz: int
    channels: tuple[str, ...]
    tenant: str | None = None


_CALL_ID_KEYS = ("call_id", "callId", "callSid", "call_sid", "uuid")


def parse_fork_metadata(
    text: str | bytes, query: Mapping[str, str], supported_rates_hz: tuple[int, ...]
) -> ForkStart | Rejected:
    """The first text frame of an audio_fork / jambonz ``listen`` stream, with the connection
    URL's query as fallback: the call id (``call_id``, ``callId``, ``callSid`` or ``uuid``), the
    rate (``sampleRate`` / ``sample_rate``) and the channels (``mixType`` ``stereo`` or
    ``channels`` 2 → ``agent``, ``customer`` interleaved in that order; else ``mono``)."""
    metadata = _json_object(text)
    if isinstance(metadata, Rejected):
        return metadata
    merged: dict[str, Any] = {**query, **metadata}
    call_id = next(
        (str(merged[key]) for key in _CALL_ID_KEYS if _text(str(merged.get(key, "")))), None
    )
    if call_id is None:
        return Rejected(RejectReason.BAD_MESSAGE, "metadata names no call id")
    rate = merged.get("sampleRate", merged.get("sample_rate", 8000))
    try:
        sample_rate_hz = int(rate)
    except (TypeError, ValueError):
        return Rejected(RejectReason.BAD_MESSAGE, f"sample rate {rate!r}")
    if sample_rate_hz not in supported_rates_hz:
        return Rejected(RejectReason.BAD_MESSAGE, f"sample rate {sample_rate_hz}")
    stereo = (
        str(merged.get("mixType", "")).lower() == "stereo"
        or str(merged.get("channels", "1")) == "2"
    )
    tenant = merged.get("tenant")
    return ForkStart(
        call_id,
        sample_rate_hz,
        STEREO_CHANNELS if stereo else (MONO_CHANNEL,),
        tenant if isinstance(tenant, str) and tenant else None,
    )


class TimestampedFeed:
    """One channel of a media stream whose messages carry their start time (ms since the
    stream began): a message that starts after the audio so far gets silence before it (a
    stream that skipped audio keeps its timeline); one that overlaps is appended as it is."""

    def __init__(self, sample_rate_hz: int, silence_sample: bytes) -> None:
        self._samples_per_ms = sample_rate_hz // 1000
        self._silence_sample = silence_sample
        self._samples_out = 0
        self.filled_samples = 0

    def push(self, timestamp_ms: int, audio: bytes, max_gap_ms: int) -> bytes:
        gap = min(
            timestamp_ms * self._samples_per_ms - self._samples_out,
            max_gap_ms * self._samples_per_ms,
        )
        samples = len(audio) // len(self._silence_sample)
        if gap <= 0:
            self._samples_out += samples
            return audio
        self._samples_out += gap + samples
        self.filled_samples += gap
        return self._silence_sample * gap + audio
