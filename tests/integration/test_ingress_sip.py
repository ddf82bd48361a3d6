"""SIP and SIPREC into the gateway on the real broker: Debian's baresip places a call that a
real worker transcribes; SIPREC, re-INVITE, CANCEL-free teardown and every bad-input reason
are driven with protocol messages built as RFC 3261 and RFC 7866 show them.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

from pipeline.contracts import Encoding
from pipeline.contracts.g711 import alaw_encode, mulaw_decode, mulaw_encode
from pipeline.ingress.sdp import SessionDescription, parse_sdp
from pipeline.ingress.sip import SipRequest, SipResponse, parse_sip
from pipeline.settings import KafkaSettings
from tests.conftest import FIXTURES
from tests.integration.test_ingress import RunningGateway, consume_call, rtp_packet
from tests.unit.ingress.sip_messages import (
    invite,
    metadata,
    request,
    sdp_offer,
    siprec_invite,
    two_stream_sdp,
)

pytestmark = pytest.mark.integration

AGENT_RULE = "domain:agents.example.com"
SPOKEN = ("tel_utt01_account", "tel_utt03_delivery", "tel_utt08_cancel")
WER_TOLERANCE = 0.01
"""The issue's target: the call's finals within 1 WER point of `transcribe` on the file."""


def tone(frequency_hz: float, packets: int) -> np.ndarray:
    samples = np.arange(160 * packets)
    return (8000 * np.sin(2 * np.pi * frequency_hz * samples / 8000)).astype(np.int16)


class SipClient:
    """A UAC's socket: sends our messages from its own port, reads the answers."""

    def __init__(self, port: int, transport: str = "udp") -> None:
        self.transport = transport
        self.target = ("127.0.0.1", port)
        kind = socket.SOCK_DGRAM if transport == "udp" else socket.SOCK_STREAM
        self.sock = socket.socket(socket.AF_INET, kind)
        self.sock.bind(("127.0.0.1", 0))
        if transport == "tcp":
            self.sock.connect(self.target)
        self.sent_by = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self._buffer = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        if self.transport == "udp":
            self.sock.sendto(data, self.target)
        else:
            self.sock.sendall(data)

    def response(self, timeout_s: float = 5.0) -> SipResponse | None:
        """The next final response (provisional ones are skipped); None on timeout."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
            try:
                data = self._read()
            except (TimeoutError, ConnectionError):
                return None  # nothing came (or the connection was refused)
            message = parse_sip(data)
            if isinstance(message, SipResponse) and message.status >= 200:
                return message
        return None

    def _read(self) -> bytes:
        if self.transport == "udp":
            return self.sock.recv(65_536)
        while True:
            head, separator, rest = self._buffer.partition(b"\r\n\r\n")
            if separator:
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                if len(rest) >= length:
                    self._buffer = rest[length:]
                    return head + separator + rest[:length]
            chunk = self.sock.recv(65_536)
            if not chunk:
                raise TimeoutError("connection closed")
            self._buffer += chunk


def answered_ports(response: SipResponse) -> dict[str | None, int]:
    """label → port of each stream the answer takes."""
    answer = parse_sdp(response.body.decode())
    assert isinstance(answer, SessionDescription)
    return {media.label: media.port for media in answer.media if media.port}


def events_of(topics: KafkaSettings, call_id: str, until: Any) -> list[dict[str, Any]]:
    from tests.integration.worker_harness import read_topic

    records = read_topic(
        topics.bootstrap_servers,
        f"{topics.topic_prefix}asr.events",
        lambda records: until([r for r in records if r.get("call_id") == call_id]),
        60,
    )
    return [r for r in records if r.get("call_id") == call_id]


def test_a_siprec_recording_maps_streams_by_metadata_and_bad_sip_never_touches_it(
    topics: KafkaSettings,
) -> None:
    """An SRC's INVITE lists the agent's stream first; the metadata says which participant
    sends which label. Both streams carry distinct tones; the customer keys a digit. While the
    recording flows, other peers send every kind of bad SIP: each gets its answer and its
    reason; the recording arrives whole, each stream on its participant's channel."""
    call_id = "siprec-1@sbc.example.com"
    agent_audio = mulaw_encode(tone(440, 50)).tobytes()
    customer_audio = mulaw_encode(tone(1000, 50)).tobytes()
    with RunningGateway(topics, events=True, siprec_agent_rule=AGENT_RULE) as gateway:
        src = SipClient(gateway.sip_port)
        try:
            offer = two_stream_sdp(30000, 30002, swap=True)
            src.send(siprec_invite(offer, metadata(), call_id=call_id, sent_by=src.sent_by))
            ok = src.response()
            assert ok is not None
            assert ok.status == 200, ok.body
            ports = answered_ports(ok)
            src.send(
                request(
                    "ACK",
                    call_id=call_id,
                    branch="z9hG4bKack1",
                    to_tag=ok.tag("to"),
                    sent_by=src.sent_by,
                )
            )
            # Each from a peer of its own: an INVITE's error is retransmitted until its ACK.
            refusals: list[tuple[Callable[[str], bytes], int | None]] = [
                (lambda _: b"\x00\x01 not SIP", None),
                (lambda by: request("OPTIONS", sent_by=by, cseq_method="INVITE"), 400),
                (lambda by: invite(sdp_offer([(1, "98", None)]), call_id="c2", sent_by=by), 488),
                (lambda by: siprec_invite(offer, None, call_id="c3", sent_by=by), 400),
                (
                    lambda by: request(
                        "INVITE", body=b"x", content_type="text/plain", call_id="c4", sent_by=by
                    ),
                    415,
                ),
                (
                    lambda by: siprec_invite(
                        sdp_offer([(1, "0", None), (2, "0", "1")]),
                        metadata(),
                        call_id="c5",
                        sent_by=by,
                    ),
                    488,
                ),
            ]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rtp:
                for index in range(50):
                    if index < len(refusals):
                        build, status = refusals[index]
                        bad = SipClient(gateway.sip_port)
                        try:
                            bad.send(build(bad.sent_by))
                            answer = bad.response(timeout_s=0.5 if status is None else 5)
                        finally:
                            bad.close()
                        assert (answer.status if answer else None) == status, index
                    packet = slice(160 * index, 160 * (index + 1))
                    rtp.sendto(
                        rtp_packet(index, 160 * index, agent_audio[packet], ssrc=1),
                        ("127.0.0.1", ports["1"]),
                    )
                    rtp.sendto(
                        rtp_packet(index, 160 * index, customer_audio[packet], ssrc=2),
                        ("127.0.0.1", ports["2"]),
                    )
                # The customer keys 5 after the audio (RFC 4733: three end packets).
                for repeat in range(3):
                    event = bytes([5, 0x80 | 10]) + (800).to_bytes(2, "big")
                    rtp.sendto(
                        rtp_packet(50 + repeat, 8000, event, ssrc=2, pt=101),
                        ("127.0.0.1", ports["2"]),
                    )
            gateway.wait_for("ingress_rtp_packets_total", 103)
            src.send(
                request(
                    "BYE",
                    call_id=call_id,
                    branch="z9hG4bKbye1",
                    cseq=2,
                    to_tag=ok.tag("to"),
                    sent_by=src.sent_by,
                )
            )
            bye = src.response()
            assert bye is not None
            assert bye.status == 200
        finally:
            src.close()
        for reason, count in (
            ("bad_sip", 2),
            ("no_common_codec", 1),
            ("siprec_no_metadata", 1),
            ("unsupported_body", 1),
            ("siprec_unlabelled_stream", 1),
        ):
            assert gateway.metric("ingress_rejected_total", reason=reason) == count, reason
        assert gateway.metric("ingress_calls_total", transport="siprec") == 1
    chunks = consume_call(topics, call_id, 2)
    assert chunks["agent"][0].encoding is Encoding.MULAW
    for channel, sent in (("agent", agent_audio), ("customer", customer_audio)):
        _assert_on_the_call_timeline(b"".join(bytes(c.payload) for c in chunks[channel]), sent)
    events = events_of(
        topics,
        call_id,
        lambda mine: {e["type"] for e in mine} >= {"ingress_call_started", "dtmf_received"},
    )
    (started,) = [e for e in events if e["type"] == "ingress_call_started"]
    streams = started["detail"]["streams"]
    assert started["detail"]["transport"] == "siprec"
    assert started["detail"]["recording_session_id"] == "hVpd7YQgRW2nD22h7q60JQ=="
    assert streams["agent"]["aor"] == "sip:agent7@agents.example.com"
    assert streams["agent"]["stream_label"] == "1"
    assert streams["agent"]["agent"] is True
    assert streams["customer"]["aor"] == "sip:+15551234567@pstn.example.net"
    (dtmf,) = [e for e in events if e["type"] == "dtmf_received"]
    assert dtmf["channel"] == "customer"
    # At 1 s of its leg, on the call's timeline: after the leg's leading silence, if any.
    assert 1000 <= dtmf["detail"].pop("position_ms") <= 1040
    assert dtmf["detail"] == {"duration_ms": 100, "digit_redacted": True}


def test_a_call_over_tcp_survives_a_reinvite_that_changes_its_codec(
    topics: KafkaSettings,
) -> None:
    """PCMU for 25 packets, then a re-INVITE to PCMA (a new SSRC, a new sequence): the same
    channel goes on, still published as μ-law, on one timeline. A retransmitted INVITE opens
    no second call."""
    call_id = "tcp-reinvite@pbx.example.com"
    audio = tone(300, 50)
    with RunningGateway(topics) as gateway:
        uac = SipClient(gateway.sip_port, "tcp")
        try:
            first = invite(
                sdp_offer([(30000, "0 101", None)]), call_id=call_id, sent_by=uac.sent_by
            )
            uac.send(first)
            uac.send(first)  # a retransmission (a UAC over UDP would; harmless over TCP)
            ok = uac.response()
            assert ok is not None
            assert ok.status == 200
            assert uac.response(timeout_s=0.5) in (None, ok)
            port = answered_ports(ok)[None]
            tag = ok.tag("to")
            uac.send(
                request("ACK", call_id=call_id, branch="z9hG4bKa", to_tag=tag, sent_by=uac.sent_by)
            )
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rtp:
                for index in range(25):
                    payload = mulaw_encode(audio[160 * index : 160 * (index + 1)]).tobytes()
                    rtp.sendto(rtp_packet(index, 160 * index, payload), ("127.0.0.1", port))
                    time.sleep(0.02)
                gateway.wait_for("ingress_rtp_packets_total", 25)
                uac.send(
                    invite(
                        sdp_offer([(30000, "8", None)]),
                        call_id=call_id,
                        branch="z9hG4bKre",
                        cseq=2,
                        to_tag=tag,
                        sent_by=uac.sent_by,
                    )
                )
                again = uac.response()
                assert again is not None
                assert again.status == 200
                assert answered_ports(again)[None] == port
                uac.send(
                    request(
                        "ACK",
                        call_id=call_id,
                        branch="z9hG4bKa2",
                        cseq=2,
                        to_tag=tag,
                        sent_by=uac.sent_by,
                    )
                )
                for index in range(25, 50):
                    payload = alaw_encode(audio[160 * index : 160 * (index + 1)]).tobytes()
                    packet = rtp_packet(index + 7000, 90_000 + 160 * index, payload, ssrc=77, pt=8)
                    rtp.sendto(packet, ("127.0.0.1", port))
                    time.sleep(0.02)
            gateway.wait_for("ingress_rtp_packets_total", 50)
            uac.send(
                request(
                    "BYE",
                    call_id=call_id,
                    branch="z9hG4bKb",
                    cseq=3,
                    to_tag=tag,
                    sent_by=uac.sent_by,
                )
            )
            bye = uac.response()
            assert bye is not None
            assert bye.status == 200
        finally:
            uac.close()
        assert gateway.metric("ingress_calls_total", transport="sip") == 1
        assert gateway.metric("ingress_rtp_discontinuities_total") >= 1
    (chunks,) = consume_call(topics, call_id, 1).values()
    published = mulaw_decode(np.frombuffer(b"".join(bytes(c.payload) for c in chunks), np.uint8))
    first_half = mulaw_decode(mulaw_encode(audio[: 160 * 25]))
    assert np.array_equal(published[: 160 * 25], first_half)
    # After the switch: the A-law audio, re-quantised to μ-law, after the silence between the
    # two streams (the arrival gap: about one packet here).
    tail = published[160 * 25 :]
    second = audio[160 * 25 :].astype(np.float64)
    lag = int(np.argmax(np.correlate(tail.astype(np.float64), second[:800], "valid")))
    assert lag <= 3 * 160, lag
    error = tail[lag : lag + len(second)].astype(np.float64) - second[: len(tail) - lag]
    assert np.sqrt(np.mean(error**2)) < 0.05 * np.sqrt(np.mean(second**2))


def test_sip_from_outside_the_allowed_networks_is_never_answered(topics: KafkaSettings) -> None:
    with RunningGateway(topics, allowed_networks="10.0.0.0/8", max_calls=1) as gateway:
        client = SipClient(gateway.sip_port)
        try:
            client.send(request("OPTIONS", sent_by=client.sent_by))
            assert client.response(timeout_s=1.0) is None
        finally:
            client.close()
        tcp = SipClient(gateway.sip_port, "tcp")
        try:
            tcp.send(request("OPTIONS", sent_by=tcp.sent_by))
            assert tcp.response(timeout_s=1.0) is None
        finally:
            tcp.close()
        assert gateway.metric("ingress_rejected_total", reason="unexpected_source") == 2


def test_the_call_limit_answers_503_and_a_shutdown_sends_bye(topics: KafkaSettings) -> None:
    client = SipClient(0)
    try:
        with RunningGateway(topics, max_calls=1) as gateway:
            client.target = ("127.0.0.1", gateway.sip_port)
            offer = sdp_offer([(30000, "0", None)])
            client.send(invite(offer, call_id="one", sent_by=client.sent_by))
            first = client.response()
            assert first is not None
            assert first.status == 200
            client.send(
                request(
                    "ACK",
                    call_id="one",
                    branch="z9hG4bKa1",
                    to_tag=first.tag("to"),
                    sent_by=client.sent_by,
                )
            )
            client.send(invite(offer, call_id="two", branch="z9hG4bK2", sent_by=client.sent_by))
            second = client.response()
            assert second is not None
            assert second.status == 503
            assert second.header("retry-after") == "5"
            client.send(
                request(
                    "ACK",
                    call_id="two",
                    branch="z9hG4bK2",
                    to_tag=second.tag("to"),
                    sent_by=client.sent_by,
                )
            )
            client.send(request("OPTIONS", branch="z9hG4bK3", sent_by=client.sent_by))
            options = client.response()
            assert options is not None
            assert options.status == 200  # keepalives are answered when full, too
            assert gateway.metric("ingress_rejected_total", reason="call_limit") == 1
        # Leaving the block stops the gateway: the open call ends, and its peer hears a BYE.
        client.sock.settimeout(5)
        bye = parse_sip(client.sock.recv(65_536))
        assert isinstance(bye, SipRequest)
        assert bye.method == "BYE"
        assert bye.call_id == "one"
        assert bye.tag("from") == first.tag("to")
    finally:
        client.close()
    (chunks,) = consume_call(topics, "one", 1).values()
    assert chunks[-1].end_of_stream


def baresip_config(directory: Path, wav: Path) -> Path:
    """A baresip config dir: no audio device (the call's audio is ``wav``, the player a
    bridge to nowhere), loopback only, one account that never registers (``regint=0``)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config").write_text(
        "\n".join(
            [
                "sip_listen 127.0.0.1:0",
                "net_interface 127.0.0.1",
                f"audio_source aufile,{wav}",
                "audio_player aubridge,nowhere",
                "audio_alert aubridge,nowhere",
                "module_path /usr/lib/baresip/modules",
                "module g711.so",
                "module aufile.so",
                "module aubridge.so",
                "module_app account.so",
                "module_app menu.so",
                "",
            ]
        )
    )
    (directory / "accounts").write_text(
        "<sip:streamscribe-test@127.0.0.1;regint=0>;audio_codecs=PCMU\n"
    )
    return directory


def place_baresip_call(gateway: RunningGateway, wav: Path, config: Path) -> None:
    """baresip dials the gateway, plays ``wav`` and hangs up at its end (a BYE); the call is
    over when the gateway has opened one SIP call and closed it again."""
    process = subprocess.Popen(
        ["baresip", "-f", str(config), "-e", f"/dial sip:transcribe@127.0.0.1:{gateway.sip_port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        duration_s = soundfile.info(str(wav)).duration
        deadline = time.monotonic() + duration_s + 30
        while time.monotonic() < deadline:
            opened = gateway.metric("ingress_calls_total", transport="sip")
            if opened == 1 and gateway.metric("ingress_calls_open", transport="sip") == 0:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the baresip call did not end")
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert b"end of file" in output, output[-2000:]


def transcribe_finals(wav: Path) -> list[dict[str, Any]]:
    """What ``streamscribe transcribe`` makes of the file itself."""
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "transcribe", str(wav), "--json", "--no-partials"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        env={**os.environ, "STREAMSCRIBE_TORCH_THREADS": "1"},
    )
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return [line for line in lines if line.get("type") == "final"]


def test_a_baresip_call_is_transcribed_as_transcribe_does_the_file(
    topics: KafkaSettings, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """baresip → SIP + RTP (PCMU) → gateway → audio.chunks → a real worker. Three spoken
    sentences with a second of silence between them; the finals against the fixtures' text,
    and against `streamscribe transcribe` on the same WAV: within 1 WER point of it, none
    lost, none twice."""
    from pipeline.evaluation.wer import word_error_rate
    from tests.integration.worker_harness import (
        WorkerProcess,
        read_topic,
        sessions_ended,
        wait_for_owners,
        worker_env,
    )

    manifest = {f["id"]: f for f in json.loads((FIXTURES / "manifest.json").read_text())["files"]}
    pieces = []
    for name in SPOKEN:
        samples, rate = soundfile.read(str(FIXTURES / manifest[name]["path"]), dtype="int16")
        assert rate == 8000
        pieces += [samples, np.zeros(8000, np.int16)]
    wav = tmp_path / "call.wav"
    soundfile.write(str(wav), np.concatenate(pieces), 8000, subtype="PCM_16")
    reference = " ".join(manifest[name]["text"] for name in SPOKEN)

    monkeypatch.setenv("STREAMSCRIBE_REDIS_URL", redis_url)
    events_topic = f"{topics.topic_prefix}asr.events"
    worker = WorkerProcess(
        "w-sip", worker_env(topics, f"{topics.topic_prefix}asr"), tmp_path / "w.log"
    ).start()
    try:
        wait_for_owners(topics.bootstrap_servers, events_topic, ("w-sip",), 12, 180)
        with RunningGateway(topics, events=True) as gateway:
            place_baresip_call(gateway, wav, baresip_config(tmp_path / "baresip", wav))
            assert gateway.metric("ingress_rtp_packets_lost_total") == 0
        events = read_topic(topics.bootstrap_servers, events_topic, sessions_ended(1), 240)
        assert sum(e["type"] == "session_ended" for e in events) == 1, worker.log()
    finally:
        worker.stop_quietly()
    (started,) = [e for e in events if e["type"] == "ingress_call_started"]
    call_id = started["call_id"]
    assert started["detail"]["transport"] == "sip"
    assert started["detail"]["streams"]["mono"]["codec"] == "PCMU"
    finals = [
        f
        for f in read_topic(
            topics.bootstrap_servers, f"{topics.topic_prefix}asr.finals", lambda r: False, 5
        )
        if f["call_id"] == call_id
    ]
    ids = [f["utterance_id"] for f in finals]
    assert len(ids) == len(set(ids)), "no final twice"
    indexes = sorted(f["utterance_index"] for f in finals)
    assert indexes == list(range(len(indexes))), "no final lost"
    through_sip = " ".join(f["text"] for f in sorted(finals, key=lambda f: f["utterance_index"]))
    file_finals = transcribe_finals(wav)
    from_file = " ".join(f["text"] for f in file_finals)
    sip_wer = word_error_rate(reference, through_sip)
    file_wer = word_error_rate(reference, from_file)
    between = word_error_rate(from_file, through_sip)
    print(f"WER: through SIP {sip_wer:.3f}, transcribe {file_wer:.3f}, between {between:.3f}")
    assert sip_wer <= file_wer + WER_TOLERANCE, (through_sip, from_file)
    assert len(finals) == len(file_finals), (through_sip, from_file)  # one per sentence


def _assert_on_the_call_timeline(received: bytes, sent: bytes) -> None:
    """``received`` is ``sent`` whole, after at most 40 ms of μ-law silence: the leg that is
    placed second on the call's timeline starts by its first packet's arrival (both are sent
    back to back; which socket the gateway reads first, and a millisecond between them, is the
    machine's, so either leg may get a few samples of leading silence)."""
    lead = len(received) - len(sent)
    assert 0 <= lead <= 320, lead  # 40 ms at 8 kHz
    assert received[lead:] == sent
    assert set(received[:lead]) <= {0xFF}
