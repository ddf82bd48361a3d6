"""The ingress gateway on the real broker, fed by real RTP senders (GStreamer, ffmpeg) and by
Twilio / audio_fork WebSocket clients speaking the protocols as published.

Every test runs the gateway in-process on its own thread and event loop, allocates ports over
its HTTP API like an Asterisk ARI application would, and reads what reached audio.chunks.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import threading
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from confluent_kafka import Consumer

from pipeline.contracts import AudioChunk, Encoding, decode_chunk
from pipeline.contracts.g711 import mulaw_decode, mulaw_encode
from pipeline.ingress.events import TransportEventSink
from pipeline.ingress.metrics import IngressMetrics
from pipeline.ingress.server import DtmfNotice, IngressGateway, TimedTransport
from pipeline.producer.kafka import KafkaTransport, producer_config
from pipeline.producer.publisher import AudioPublisher
from pipeline.settings import IngressSettings, KafkaSettings, PublisherSettings
from pipeline.topics import TopicRole, topic_name
from tests.conftest import FIXTURES
from tests.unit.ingress.ws_client import close_code_after

pytestmark = pytest.mark.integration

TOKEN = "test-token"
CALL_8K = FIXTURES / "calls" / "call02_delivery_8k.flac"
UTTERANCE_8K = FIXTURES / "telephone" / "tel_utt01_account.flac"
PACKET_MS = 20
RECORD_MS = 100
CLEAN_TOLERANCE_MS = 2 * PACKET_MS
"""A clean stream loses nothing: the published audio is the file, give or take the sender's
last, partial packet and its first packet's rounding."""


class RunningGateway:
    """The gateway on a thread of its own (its own event loop and publisher)."""

    def __init__(self, kafka: KafkaSettings, *, events: bool = False, **ingress: Any) -> None:
        port_min = 42000 + (uuid.uuid4().int % 400) * 20
        self.settings = IngressSettings(
            **{
                "bind": "127.0.0.1",
                "port": 0,
                "rtp_bind": "127.0.0.1",
                "rtp_port_min": port_min,
                "rtp_port_max": port_min + 19,
                "sip_bind": "127.0.0.1",
                "sip_port": 0,
                "auth_token": TOKEN,
                "record_ms": RECORD_MS,
                **ingress,
            }
        )
        self.metrics = IngressMetrics()
        self.notices: list[DtmfNotice] = []
        self._kafka = kafka
        self._events = events
        self.sip_port = 0
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.port = 0
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    async def _main(self) -> None:
        kafka = KafkaTransport(producer_config(self._kafka, PublisherSettings()))
        publisher = AudioPublisher(
            TimedTransport(kafka, self.metrics.publish_latency.observe),
            topic=topic_name(TopicRole.AUDIO_CHUNKS, self._kafka.topic_prefix),
            chunk_ms=RECORD_MS,
        )
        events = TransportEventSink(kafka, topic_name(TopicRole.EVENTS, self._kafka.topic_prefix))
        gateway = IngressGateway(
            self.settings,
            publisher,
            metrics=self.metrics,
            on_dtmf=self.notices.append,
            events=events if self._events else None,
            source="ingress-test",
        )
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await gateway.start()
        self.port = gateway.port
        self.sip_port = gateway.sip_port
        self._started.set()
        await self._stop.wait()
        await gateway.stop()
        publisher.close()

    def __enter__(self) -> RunningGateway:
        self._thread.start()
        assert self._started.wait(30), "the gateway did not start"
        return self

    def __exit__(self, *_: object) -> None:
        assert self._loop is not None
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(60)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def allocate(self, call_id: str, channels: list[str], **spec: Any) -> dict[str, int]:
        status, answer = self.request(
            "POST", "/v1/calls", {"call_id": call_id, "channels": channels, **spec}
        )
        assert status == 201, answer
        return {label: info["port"] for label, info in answer["channels"].items()}

    def wait_for(self, name: str, at_least: float, **labels: str) -> None:
        """Until the metric reaches ``at_least`` (the gateway's thread has handled that much)."""
        for _ in range(600):
            if self.metric(name, **labels) >= at_least:
                return
            threading.Event().wait(0.05)
        raise AssertionError(f"{name} stayed at {self.metric(name, **labels)}")

    def metric(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels or None)
        return 0.0 if value is None else value


@pytest.fixture
def gateway(topics: KafkaSettings) -> Iterator[RunningGateway]:
    with RunningGateway(topics) as running:
        yield running


def consume_call(kafka: KafkaSettings, call_id: str, channels: int) -> dict[str, list[AudioChunk]]:
    """Every record of ``call_id`` until each of its ``channels`` has its end-of-stream."""
    consumer = Consumer(
        {
            "bootstrap.servers": kafka.bootstrap_servers,
            "group.id": f"test-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic_name(TopicRole.AUDIO_CHUNKS, kafka.topic_prefix)])
    by_channel: dict[str, list[AudioChunk]] = defaultdict(list)
    partitions: set[int] = set()
    try:
        for _ in range(240):
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                assert message.error() is None, message.error()
                chunk = decode_chunk(message.key(), message.value(), message.headers())
                if chunk.call_id == call_id:
                    by_channel[chunk.channel].append(chunk)
                    partitions.add(message.partition())
            ended = [c for c in by_channel.values() if any(x.end_of_stream for x in c)]
            if len(ended) == channels:
                break
    finally:
        consumer.close()
    assert len(partitions) == 1, partitions
    assert len(by_channel) == channels, sorted(by_channel)
    for chunks in by_channel.values():
        chunks.sort(key=lambda c: c.seq)
        assert [c.seq for c in chunks] == list(range(len(chunks))), "contiguous from 0"
        assert [c.end_of_stream for c in chunks] == [False] * (len(chunks) - 1) + [True]
        full = chunks[:-1]
        assert all(len(c.payload) == len(full[0].payload) for c in full), "fixed-size records"
    return dict(by_channel)


def pcm_of(chunks: list[AudioChunk]) -> np.ndarray:
    data = b"".join(bytes(c.payload) for c in chunks)
    encoding = chunks[0].encoding
    if encoding is Encoding.MULAW:
        return mulaw_decode(np.frombuffer(data, dtype=np.uint8)).astype(np.float64)
    return np.frombuffer(data, dtype="<i2").astype(np.float64)


def duration_ms(chunks: list[AudioChunk]) -> float:
    return 1000 * len(pcm_of(chunks)) / chunks[0].sample_rate_hz


def file_ms(path: Path) -> float:
    info = soundfile.info(str(path))
    return 1000 * info.frames / info.samplerate


def best_lag_samples(published: np.ndarray, reference: np.ndarray, window: int) -> int:
    """Where ``reference`` sits in ``published`` (samples), by cross-correlation over ±window."""
    length = min(len(published), len(reference)) - window
    best, best_score = 0, -np.inf
    ref = reference[window:length]
    for lag in range(-window, window + 1):
        segment = published[window + lag : length + lag]
        score = float(np.dot(segment, ref))
        if score > best_score:
            best, best_score = lag, score
    return best


def channel_text(finals: dict[str, str], call_id: str, channel: str) -> str:
    """The finals (utterance id → text) of one channel, joined in utterance order."""
    prefix = f"{call_id}:{channel}:"
    picked = sorted(
        (int(k.removeprefix(prefix)), v) for k, v in finals.items() if k.startswith(prefix)
    )
    return " ".join(text for _, text in picked)


def gst_send(path: Path, ports: dict[int, int], netsim: str = "") -> None:
    """GStreamer sends ``path`` in real time as PCMU RTP, file channel i → ``ports[i]``."""
    branches = []
    for index, port in ports.items():
        branches.append(
            f"d.src_{index} ! queue ! audioconvert ! audioresample ! "
            "audio/x-raw,rate=8000,channels=1 ! mulawenc ! "
            f"rtppcmupay min-ptime=20000000 max-ptime=20000000 ! {netsim + ' ! ' if netsim else ''}"
            f"udpsink host=127.0.0.1 port={port}"
        )
    pipeline = (
        f"filesrc location={path} ! decodebin ! audioconvert ! deinterleave name=d "
        + " ".join(branches)
    )
    subprocess.run(
        ["gst-launch-1.0", "-q", *pipeline.split()], check=True, timeout=120, capture_output=True
    )


def rtp_packet(
    seq: int, timestamp: int, payload: bytes, *, ssrc: int = 0x1234, pt: int = 0
) -> bytes:
    return (
        bytes([0x80, pt])
        + seq.to_bytes(2, "big")
        + timestamp.to_bytes(4, "big")
        + ssrc.to_bytes(4, "big")
        + payload
    )


def test_a_stereo_call_over_rtp_keeps_both_channels_on_one_timeline(
    gateway: RunningGateway, topics: KafkaSettings, tmp_path: Path
) -> None:
    clip = tmp_path / "call_8s.flac"
    subprocess.run(["sox", str(CALL_8K), str(clip), "trim", "0", "8"], check=True)
    ports = gateway.allocate("call-stereo", ["agent", "customer"], codec="PCMU")
    gst_send(clip, {0: ports["agent"], 1: ports["customer"]})
    status, _ = gateway.request("DELETE", "/v1/calls/call-stereo")
    assert status == 200
    chunks = consume_call(topics, "call-stereo", 2)
    reference, _ = soundfile.read(str(clip), dtype="int16")
    for index, channel in enumerate(("agent", "customer")):
        assert chunks[channel][0].encoding is Encoding.MULAW
        assert chunks[channel][0].sample_rate_hz == 8000
        assert len(chunks[channel][0].payload) == 8 * RECORD_MS  # 100 ms of G.711
        assert abs(duration_ms(chunks[channel]) - file_ms(clip)) <= CLEAN_TOLERANCE_MS
        published = pcm_of(chunks[channel])
        reference_pcm = mulaw_decode(mulaw_encode(reference[:, index])).astype(np.float64)
        lag = best_lag_samples(published, reference_pcm, window=800)
        # Both legs started together: each channel's audio sits where the call's timeline says,
        # within one packet (the second leg's first packet may arrive up to a packet later).
        assert abs(lag) <= 8 * PACKET_MS, (channel, lag)
    assert gateway.metric("ingress_rtp_packets_total") >= 2 * 8000 / PACKET_MS - 2
    assert gateway.metric("ingress_rtp_packets_lost_total") == 0


def test_loss_duplication_and_reordering_keep_the_timeline(
    gateway: RunningGateway, topics: KafkaSettings
) -> None:
    ports = gateway.allocate("call-netsim", ["mono"], codec="PCMU")
    netsim = (
        "netsim drop-probability=0.03 duplicate-probability=0.03 delay-probability=0.2 "
        "min-delay=5 max-delay=40"
    )
    gst_send(UTTERANCE_8K, {0: ports["mono"]}, netsim=netsim)
    gateway.request("DELETE", "/v1/calls/call-netsim")
    chunks = consume_call(topics, "call-netsim", 1)["mono"]
    reference, _ = soundfile.read(str(UTTERANCE_8K), dtype="int16")
    published = pcm_of(chunks)
    # Lost packets are silence of their length, so the rest of the audio stays in place: only
    # a lost final packet (or the last ones) can shorten the stream.
    assert abs(duration_ms(chunks) - file_ms(UTTERANCE_8K)) <= 5 * PACKET_MS
    reference_pcm = mulaw_decode(mulaw_encode(reference)).astype(np.float64)
    # The first packet to arrive starts the stream: when netsim drops or delays the first
    # packets, the channel starts that many packets into the file (which is right on the
    # call's timeline: it starts at the first audio that came). After that, loss and
    # reordering never move the audio: both halves of the call sit at the same lag.
    half = len(reference_pcm) // 2
    first_half = best_lag_samples(published[: half + 800], reference_pcm[: half + 800], 800)
    second_half = best_lag_samples(published[half - 800 :], reference_pcm[half - 800 :], 800)
    assert first_half == second_half
    assert first_half in (0, -160, -320, -480), first_half
    lost = gateway.metric("ingress_rtp_packets_lost_total")
    assert lost <= 0.15 * file_ms(UTTERANCE_8K) / PACKET_MS
    filled_s = gateway.metric("ingress_gap_filled_seconds_total", transport="rtp")
    assert filled_s >= lost * PACKET_MS / 1000 - 1e-9  # each lost packet, as silence


def test_l16_from_ffmpeg_arrives_big_endian_and_is_published_little_endian(
    gateway: RunningGateway, topics: KafkaSettings
) -> None:
    source = FIXTURES / "utterances" / "utt05_password.flac"
    ports = gateway.allocate("call-l16", ["mono"], codec="L16", sample_rate_hz=16000)
    subprocess.run(
        [
            "ffmpeg",
            "-nostdin",
            "-loglevel",
            "error",
            "-re",
            "-i",
            str(source),
            "-ac",
            "1",
            "-ar",
            "16000",
            "-acodec",
            "pcm_s16be",
            "-f",
            "rtp",
            f"rtp://127.0.0.1:{ports['mono']}",
        ],
        check=True,
        timeout=60,
    )
    gateway.request("DELETE", "/v1/calls/call-l16")
    chunks = consume_call(topics, "call-l16", 1)["mono"]
    assert chunks[0].encoding is Encoding.PCM_S16LE
    assert chunks[0].sample_rate_hz == 16000
    reference, rate = soundfile.read(str(source), dtype="int16")
    assert rate == 16000
    published = pcm_of(chunks).astype(np.int16)
    # Nothing lost on loopback: the published samples are the file's, exactly.
    assert np.array_equal(published[: len(reference)], reference[: len(published)])
    assert abs(len(published) - len(reference)) <= 16 * 50


def test_bad_datagrams_are_refused_by_reason_and_the_call_goes_on(
    gateway: RunningGateway, topics: KafkaSettings
) -> None:
    import socket

    ports = gateway.allocate("call-bad", ["mono"], codec="PCMU")
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    intruder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        _send_bad_and_good(gateway, sender, intruder, ports["mono"])
    finally:
        sender.close()
        intruder.close()
    chunks = consume_call(topics, "call-bad", 1)["mono"]
    assert b"".join(bytes(c.payload) for c in chunks) == TONE
    for reason in GARBAGE_REASONS:
        assert gateway.metric("ingress_rejected_total", reason=reason) == 1, reason
    assert gateway.metric("ingress_rejected_total", reason="unexpected_source") == 50
    assert gateway.metric("ingress_rtp_packets_duplicate_total") == 1


TONE = mulaw_encode((8000 * np.sin(np.arange(160 * 50) * 0.3)).astype(np.int16)).tobytes()
GARBAGE = (
    b"\x80\x00\x01",  # short header
    bytes([0x40, 0]) + bytes(30),  # version 1
    bytes([0x8F, 0]) + bytes(20),  # 15 CSRCs past the packet
    bytes([0x90, 0]) + bytes(10) + b"\x00\x01\x00\x09",  # extension past the packet
    bytes([0xA0, 0]) + bytes(10) + b"\xff",  # padding past the packet
    rtp_packet(1, 0, bytes(160), pt=77),  # unknown payload type
)
GARBAGE_REASONS = (
    "short_header",
    "bad_version",
    "bad_csrc",
    "bad_extension",
    "bad_padding",
    "unknown_payload_type",
)
"""The rejection reasons of ``GARBAGE``, one each, in order."""


def _send_bad_and_good(gateway: RunningGateway, sender: Any, intruder: Any, port: int) -> None:
    """Garbage first (none of it takes the channel), then 1 s of audio in 50 packets, each
    followed by a packet of another source; then a duplicate; then the call is ended."""
    target = ("127.0.0.1", port)
    for datagram in GARBAGE:
        sender.sendto(datagram, target)
    for index in range(50):
        sender.sendto(
            rtp_packet(100 + index, 160 * index, TONE[160 * index : 160 * index + 160]), target
        )
        intruder.sendto(rtp_packet(index, 0, bytes(160)), target)  # another source
    sender.sendto(rtp_packet(100, 0, TONE[:160]), target)  # a duplicate
    # DELETE ends the call at once: first let the gateway read every datagram sent.
    gateway.wait_for("ingress_rtp_packets_total", len(GARBAGE) + 2 * 50 + 1)
    status, _ = gateway.request("DELETE", "/v1/calls/call-bad")
    assert status == 200


def twilio_messages(call_sid: str, agent: bytes, customer: bytes, token: str) -> list[str]:
    """A Twilio Media Streams session as its documentation describes it: ``connected``,
    ``start`` (both tracks), ``media`` every 20 ms per track, a ``dtmf``, ``stop``. The
    outbound track skips 200 ms (messages 10–19 never sent): the timestamps say so."""
    stream_sid = "MZ" + uuid.uuid4().hex
    messages: list[dict[str, Any]] = [
        {"event": "connected", "protocol": "Call", "version": "1.0.0"},
        {
            "event": "start",
            "sequenceNumber": "1",
            "start": {
                "accountSid": "AC" + "0" * 32,
                "streamSid": stream_sid,
                "callSid": call_sid,
                "tracks": ["inbound", "outbound"],
                "customParameters": {"token": token},
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            },
            "streamSid": stream_sid,
        },
    ]
    number = 2
    for index in range(len(customer) // 160):
        for track, audio in (("inbound", customer), ("outbound", agent)):
            if track == "outbound" and 10 <= index < 20:
                continue
            messages.append(
                {
                    "event": "media",
                    "sequenceNumber": str(number),
                    "media": {
                        "track": track,
                        "chunk": str(index + 1),
                        "timestamp": str(index * 20),
                        "payload": base64.b64encode(
                            audio[160 * index : 160 * (index + 1)]
                        ).decode(),
                    },
                    "streamSid": stream_sid,
                }
            )
            number += 1
        if index == 30:
            messages.append(
                {
                    "event": "dtmf",
                    "streamSid": stream_sid,
                    "dtmf": {"track": "inbound_track", "digit": "5"},
                }
            )
    messages.append({"event": "stop", "stop": {"accountSid": "AC", "callSid": call_sid}})
    return [json.dumps(message) for message in messages]


async def _twilio_session(url: str, messages: list[str]) -> int | None:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        for text in messages:
            await ws.send_str(text)
        await ws.close()
        return ws.close_code


async def _refused(url: str, frames: list[str | bytes]) -> int:
    """Send ``frames`` on a stream of its own; the close code the gateway answered with."""
    import aiohttp

    async with aiohttp.ClientSession() as session:
        return await close_code_after(session, url, frames)


def test_twilio_media_streams_become_two_aligned_channels_and_bad_streams_are_closed(
    gateway: RunningGateway, topics: KafkaSettings
) -> None:
    reference, _ = soundfile.read(str(UTTERANCE_8K), dtype="int16")
    audio = mulaw_encode(reference[: 160 * 100]).tobytes()  # 2 s
    url = f"ws://127.0.0.1:{gateway.port}/ws/twilio"
    start = twilio_messages("CAbad", audio, audio, TOKEN)[1]
    media = twilio_messages("CAbad", audio, audio, TOKEN)[2]

    async def scenario() -> tuple[int | None, list[int | None]]:
        bad = asyncio.gather(
            _refused(url, ["not json"]),
            _refused(url, [media]),
            _refused(url, [start.replace(TOKEN, "wrong")]),
            _refused(
                url,
                [start.replace("CAbad", "CAbad64"), media.replace('"payload": "', '"payload": "*')],
            ),
            _refused(url, [start.replace("CAbad", "CAbig"), "x" * 70_000]),
        )
        good = _twilio_session(url, twilio_messages("CAgood", audio, audio, TOKEN))
        codes, code = await asyncio.gather(bad, good)
        return code, list(codes)

    good_code, bad_codes = asyncio.run(scenario())
    assert good_code == 1000
    assert bad_codes == [1007, 1002, 1008, 1007, 1009]
    for reason in (
        "not_json",
        "media_before_start",
        "unauthorized",
        "bad_base64",
        "oversized_frame",
    ):
        assert gateway.metric("ingress_rejected_total", reason=reason) == 1, reason
    chunks = consume_call(topics, "CAgood", 2)
    assert chunks["customer"][0].encoding is Encoding.MULAW
    customer = b"".join(bytes(c.payload) for c in chunks["customer"])
    agent = b"".join(bytes(c.payload) for c in chunks["agent"])
    assert customer == audio
    # The 200 ms the outbound track skipped are silence of that length: the timelines agree.
    assert len(agent) == len(audio)
    assert agent[: 160 * 10] == audio[: 160 * 10]
    assert agent[160 * 10 : 160 * 20] == b"\xff" * 1600
    assert agent[160 * 20 :] == audio[160 * 20 :]
    assert gateway.metric("ingress_dtmf_events_total", transport="twilio") == 1
    # The key press is a notice beside the audio (at 620 ms of the caller's channel), not audio.
    assert [(n.call_id, n.channel, n.digit, n.offset_ms) for n in gateway.notices] == [
        ("CAgood", "customer", "5", 620)
    ]
    # A bad stream opened its call (CAbad64, CAbig) and ended it: end-of-stream, no audio.
    for call_id in ("CAbad64", "CAbig"):
        ended = consume_call(topics, call_id, 2)
        assert all(bytes(c[-1].payload) == b"" for c in ended.values())


def test_audio_fork_stereo_l16_is_split_into_agent_and_customer(
    gateway: RunningGateway, topics: KafkaSettings
) -> None:
    import aiohttp

    frames, rate = soundfile.read(str(CALL_8K), dtype="int16", frames=8000 * 3)
    url = f"ws://127.0.0.1:{gateway.port}/ws/fork?token={TOKEN}"

    async def fork() -> None:
        async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
            await ws.send_str(
                json.dumps({"callId": "fork-1", "sampleRate": rate, "mixType": "stereo"})
            )
            for start in range(0, len(frames), 320):  # 40 ms frames, interleaved L16 LE
                await ws.send_bytes(frames[start : start + 320].astype("<i2").tobytes())
            await ws.close()

    asyncio.run(fork())
    chunks = consume_call(topics, "fork-1", 2)
    for index, channel in enumerate(("agent", "customer")):
        assert chunks[channel][0].encoding is Encoding.PCM_S16LE
        published = pcm_of(chunks[channel]).astype(np.int16)
        assert np.array_equal(published, frames[:, index])


def test_the_control_api_needs_the_token(gateway: RunningGateway) -> None:
    request = urllib.request.Request(gateway.url + "/v1/calls", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 401
    refused.value.close()
    status, _ = gateway.request("POST", "/v1/calls", {"call_id": "x", "codec": "G729"})
    assert status == 400
    with urllib.request.urlopen(gateway.url + "/healthz", timeout=10) as response:
        assert response.status == 200
    with urllib.request.urlopen(gateway.url + "/readyz", timeout=10) as response:
        assert json.loads(response.read())["ready"] is True
    with urllib.request.urlopen(gateway.url + "/metrics", timeout=10) as response:
        assert b"ingress_rejected_total" in response.read()


def test_sigterm_ends_every_open_call_with_end_of_stream(topics: KafkaSettings) -> None:
    """The command itself: a call open on RTP when SIGTERM comes ends on both channels."""
    import os
    import signal
    import socket

    environment = {
        **os.environ,
        "STREAMSCRIBE_KAFKA_BOOTSTRAP": topics.bootstrap_servers,
        "STREAMSCRIBE_TOPIC_PREFIX": topics.topic_prefix,
        "STREAMSCRIBE_INGRESS_AUTH_TOKEN": TOKEN,
        "STREAMSCRIBE_INGRESS_PORT": "0",
        "STREAMSCRIBE_INGRESS_BIND": "127.0.0.1",
        "STREAMSCRIBE_INGRESS_RTP_PORT_MIN": "43900",
        "STREAMSCRIBE_INGRESS_RTP_PORT_MAX": "43999",
        "STREAMSCRIBE_INGRESS_SIP_BIND": "127.0.0.1",
        "STREAMSCRIBE_INGRESS_SIP_PORT": "0",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "ingress"],
        env=environment,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert "serving http://" in line, line
        port = int(line.rsplit(":", 1)[1])
        body = json.dumps({"call_id": "call-term", "channels": ["agent", "customer"]}).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/calls",
            data=body,
            method="POST",
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            ports = json.loads(response.read())["channels"]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            for index in range(10):
                sender.sendto(
                    rtp_packet(index, 160 * index, TONE[:160]),
                    ("127.0.0.1", ports["agent"]["port"]),
                )
        for _ in range(600):  # until the gateway has read them all
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                if b"ingress_rtp_packets_total 10.0" in answer.read():
                    break
            threading.Event().wait(0.05)
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()
    chunks = consume_call(topics, "call-term", 2)
    assert chunks["customer"][-1].end_of_stream
    assert b"".join(bytes(c.payload) for c in chunks["agent"]) == TONE[:160] * 10
    assert [bytes(c.payload) for c in chunks["customer"]] == [b""]


def test_a_leg_that_joins_late_is_put_on_the_call_timeline_with_leading_silence(
    gateway: RunningGateway, topics: KafkaSettings
) -> None:
    """Both legs carry the same speech, sent by one paced loop; the customer leg starts at
    packet 50 (1 s in). On the published timelines the two must coincide."""
    import socket
    import time

    speech, _ = soundfile.read(str(UTTERANCE_8K), dtype="int16")
    audio = mulaw_encode(speech[: 160 * 150]).tobytes()  # 3 s
    ports = gateway.allocate("call-late", ["agent", "customer"], codec="PCMU")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
        started = time.monotonic()
        for index in range(150):
            # Absolute deadlines: the RTP clock and the wall clock stay together.
            delay = started + index * PACKET_MS / 1000 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            packet = audio[160 * index : 160 * (index + 1)]
            sender.sendto(rtp_packet(index, 160 * index, packet), ("127.0.0.1", ports["agent"]))
            if index >= 50:
                customer = rtp_packet(index - 50, 160 * (index - 50), packet, ssrc=0x99)
                sender.sendto(customer, ("127.0.0.1", ports["customer"]))
    gateway.wait_for("ingress_rtp_packets_total", 150 + 100)
    gateway.request("DELETE", "/v1/calls/call-late")
    chunks = consume_call(topics, "call-late", 2)
    agent, customer = pcm_of(chunks["agent"]), pcm_of(chunks["customer"])
    assert len(agent) == len(audio)
    lead_in = len(customer) - 100 * 160
    assert abs(lead_in - 50 * 160) <= 160, lead_in  # 1 s, within one packet (20 ms)
    lag = best_lag_samples(customer, agent, window=400)
    assert abs(lag) <= 160, lag
    assert gateway.metric("ingress_gap_filled_seconds_total", transport="rtp") >= 0.98


def test_an_idle_call_ends_with_end_of_stream(topics: KafkaSettings) -> None:
    import socket

    with RunningGateway(topics, idle_timeout_ms=300) as gateway:
        ports = gateway.allocate("call-idle", ["mono"], codec="PCMA")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            for index in range(5):
                packet = rtp_packet(index, 160 * index, b"\x55" * 160, pt=8)
                sender.sendto(packet, ("127.0.0.1", ports["mono"]))
        chunks = consume_call(topics, "call-idle", 1)["mono"]  # nobody said the call ended
        assert chunks[0].encoding is Encoding.ALAW
        assert b"".join(bytes(c.payload) for c in chunks) == b"\x55" * 800
        assert gateway.request("GET", "/v1/calls") == (200, {"calls": []})
        assert gateway.metric("ingress_calls_open", transport="rtp") == 0


def test_a_call_through_the_gateway_is_transcribed_as_the_file_is(
    topics: KafkaSettings, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GStreamer → RTP → gateway → audio.chunks → a real ASR worker: the finals of each channel
    against the fixture's reference text and against the engine fed the file itself (what
    `streamscribe transcribe` does). G.711 is lossy, so the two may differ by a few words."""
    from pipeline.evaluation.wer import word_error_rate
    from tests.integration.worker_harness import (
        WorkerProcess,
        embedded_finals,
        load_calls,
        read_topic,
        sessions_ended,
        wait_for_owners,
        worker_env,
    )

    monkeypatch.setenv("STREAMSCRIBE_REDIS_URL", redis_url)
    calls = load_calls(["calls/call02_delivery_8k.flac"], prefix=topics.topic_prefix)
    call_id = calls[0].call_id
    events_topic = f"{topics.topic_prefix}asr.events"
    group = f"{topics.topic_prefix}asr"
    worker = WorkerProcess("w-ingress", worker_env(topics, group), tmp_path / "w.log").start()
    try:
        wait_for_owners(topics.bootstrap_servers, events_topic, ("w-ingress",), 12, 180)
        with RunningGateway(topics) as gateway:
            ports = gateway.allocate(call_id, ["agent", "customer"], codec="PCMU")
            gst_send(CALL_8K, {0: ports["agent"], 1: ports["customer"]})
            gateway.request("DELETE", f"/v1/calls/{call_id}")
        events = read_topic(topics.bootstrap_servers, events_topic, sessions_ended(2), 240)
        assert sum(e["type"] == "session_ended" for e in events) == 2, worker.log()
    finally:
        worker.stop_quietly()
    finals = read_topic(
        topics.bootstrap_servers, f"{topics.topic_prefix}asr.finals", lambda r: False, 5
    )
    ids = [final["utterance_id"] for final in finals]
    assert len(ids) == len(set(ids)), "no final twice"
    embedded = embedded_finals(calls)
    manifest = json.loads((FIXTURES / "manifest.json").read_text())
    entry = next(f for f in manifest["files"] if f["id"] == "call02_delivery_8k")
    for channel_map in entry["channel_map"]:
        channel = channel_map["label"]

        through_gateway = channel_text(
            {f["utterance_id"]: f["text"] for f in finals}, call_id, channel
        )
        from_file = channel_text(embedded, call_id, channel)
        # The issue's target, against the reference text: no worse than the file itself by
        # more than 1 WER point. (Measured: agent 0 % both ways; customer 13 % through the
        # gateway against 26 % from the file, whose engine run loses one sentence.)
        gateway_wer = word_error_rate(channel_map["text"], through_gateway)
        file_wer = word_error_rate(channel_map["text"], from_file)
        assert gateway_wer <= file_wer + 0.01, (channel, through_gateway, from_file)


def test_a_flood_of_bad_datagrams_on_one_call_leaves_another_call_whole(
    gateway: RunningGateway, topics: KafkaSettings
) -> None:
    """While GStreamer streams one call, another call's port is sent 20,000 malformed
    datagrams as fast as a thread can: the streamed call still arrives whole, in place and
    with nothing lost, and the flooded call ends with no audio."""
    import socket

    flooded = gateway.allocate("call-flooded", ["mono"], codec="PCMU")["mono"]
    clean = gateway.allocate("call-clean", ["mono"], codec="PCMU")["mono"]
    stop = threading.Event()

    def flood() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            sent = 0
            while not stop.is_set() and sent < 20_000:
                sender.sendto(GARBAGE[sent % len(GARBAGE)], ("127.0.0.1", flooded))
                sent += 1

    flooder = threading.Thread(target=flood)
    flooder.start()
    try:
        gst_send(UTTERANCE_8K, {0: clean})
    finally:
        stop.set()
        flooder.join()
    gateway.request("DELETE", "/v1/calls/call-clean")
    gateway.request("DELETE", "/v1/calls/call-flooded")
    chunks = consume_call(topics, "call-clean", 1)["mono"]
    reference, _ = soundfile.read(str(UTTERANCE_8K), dtype="int16")
    assert abs(duration_ms(chunks) - file_ms(UTTERANCE_8K)) <= CLEAN_TOLERANCE_MS
    reference_pcm = mulaw_decode(mulaw_encode(reference)).astype(np.float64)
    assert best_lag_samples(pcm_of(chunks), reference_pcm, window=800) == 0
    assert gateway.metric("ingress_rtp_packets_lost_total") == 0
    refused = sum(
        gateway.metric("ingress_rejected_total", reason=reason) for reason in GARBAGE_REASONS
    )
    assert refused > 0
    flooded_chunks = consume_call(topics, "call-flooded", 1)["mono"]
    assert [bytes(c.payload) for c in flooded_chunks] == [b""]
