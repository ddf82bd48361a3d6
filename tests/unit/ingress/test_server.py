"""The gateway's shell without a broker: the control API's answers, refused WebSocket streams,
and a delivery refused for one call while the others go on (a fake transport behind the
``Transport`` protocol; the integration tests run the real one)."""

from __future__ import annotations

import asyncio
import json
import random
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from pipeline.contracts.messages import Event, EventType
from pipeline.ingress.server import IngressGateway
from pipeline.producer.publisher import AudioPublisher
from pipeline.settings import IngressSettings
from tests.unit.ingress.ws_client import close_code_after
from tests.unit.producer.fakes import FakeTransport

TOKEN = "unit-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def run(
    scenario: Callable[[IngressGateway, aiohttp.ClientSession, str], Awaitable[None]],
    transport: FakeTransport | None = None,
    events: list[Event] | None = None,
    **ingress: Any,
) -> FakeTransport:
    """Run ``scenario`` against a started gateway; return what it published."""
    fake = transport or FakeTransport()
    port_min = random.randrange(45000, 55000, 10)
    settings = IngressSettings(
        **{
            "bind": "127.0.0.1",
            "port": 0,
            "rtp_bind": "127.0.0.1",
            "rtp_port_min": port_min,
            "rtp_port_max": port_min + 9,
            "sip_bind": "127.0.0.1",
            "sip_port": 0,
            "auth_token": TOKEN,
            **ingress,
        }
    )

    async def main() -> None:
        gateway = IngressGateway(
            settings,
            AudioPublisher(fake, topic="audio.chunks"),
            events=_ListSink(events) if events is not None else None,
        )
        await gateway.start()
        try:
            async with aiohttp.ClientSession() as session:
                await scenario(gateway, session, f"http://127.0.0.1:{gateway.port}")
        finally:
            await gateway.stop()

    asyncio.run(main())
    return fake


class _ListSink:
    def __init__(self, events: list[Event]) -> None:
        self.events = events

    def publish(self, event: Event) -> None:
        self.events.append(event)


async def post(session: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, str]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with session.post(url + "/v1/calls", data=data, headers=AUTH) as response:
        return response.status, await response.text()


def test_the_control_api_answers_each_mistake_with_its_status() -> None:
    async def scenario(gateway: IngressGateway, session: aiohttp.ClientSession, url: str) -> None:
        assert (await post(session, url, b"{not json"))[0] == 400
        assert (await post(session, url, {"call_id": "c", "codec": "G729"}))[0] == 400
        assert (await post(session, url, {"call_id": "c", "channels": ["a b"]}))[0] == 400
        assert (await post(session, url, {"call_id": "x" * 200}))[0] == 400
        assert (await post(session, url, {"call_id": "c", "sample_rate_hz": 16000}))[0] == 400
        assert (await post(session, url, {"call_id": "c", "channels": ["agent"]}))[0] == 201
        assert (await post(session, url, {"call_id": "c"}))[0] == 409
        assert (await post(session, url, {"call_id": "d"}))[0] == 503  # max_calls = 1
        async with session.delete(url + "/v1/calls/nope", headers=AUTH) as response:
            assert response.status == 404
        async with session.delete(url + "/v1/calls/c", headers=AUTH) as response:
            assert response.status == 200
        async with session.get(url + "/v1/calls") as response:
            assert response.status == 401
        ports = [f"channel{index}" for index in range(11)]
        assert (await post(session, url, {"call_id": "e", "channels": ports}))[0] == 503

    fake = run(scenario, max_calls=1)
    assert [(c.call_id, c.channel, c.end_of_stream) for c in fake.chunks()] == [
        ("c", "agent", True)
    ]


def test_fork_streams_that_break_the_protocol_are_closed_with_their_code() -> None:
    async def scenario(gateway: IngressGateway, session: aiohttp.ClientSession, url: str) -> None:
        fork = url + f"/ws/fork?token={TOKEN}"
        assert await close_code_after(session, fork, [b"\x00\x01"]) == 1002  # audio before metadata
        assert await close_code_after(session, fork, ['{"sampleRate": 8000}']) == 1007  # no call id
        odd = ['{"callId": "f1", "mixType": "stereo"}', b"\x00\x01"]  # half a stereo frame
        assert await close_code_after(session, fork, odd) == 1003
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:  # no token
            await session.ws_connect(url + "/ws/fork")
        assert refused.value.status == 401

    fake = run(scenario)
    assert [(c.call_id, c.end_of_stream) for c in fake.chunks()] == [("f1", True), ("f1", True)]


def test_a_record_refused_for_one_call_is_counted_and_the_other_call_goes_on() -> None:
    async def scenario(gateway: IngressGateway, session: aiohttp.ClientSession, url: str) -> None:
        ports = {}
        for call_id in ("first", "second"):
            status, text = await post(session, url, {"call_id": call_id})
            assert status == 201
            ports[call_id] = json.loads(text)["channels"]["mono"]["port"]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            for index in range(10):  # 200 ms each: two records per call
                for port in ports.values():
                    header = bytes([0x80, 0]) + index.to_bytes(2, "big")
                    header += (160 * index).to_bytes(4, "big") + b"\x00\x00\x00\x01"
                    sender.sendto(header + bytes([index + 1]) * 160, ("127.0.0.1", port))
        while gateway.metrics.registry.get_sample_value("ingress_rtp_packets_total") < 20:
            await asyncio.sleep(0.01)
        refused = gateway.metrics.registry.get_sample_value("ingress_publish_failures_total")
        assert refused == 1

    # The first record sent (the first call's first 100 ms) is refused by the transport.
    fake = run(scenario, FakeTransport(refuse=lambda index: index == 0))
    by_call: dict[str, list[int]] = {}
    for chunk in fake.chunks():
        by_call.setdefault(chunk.call_id, []).append(chunk.seq)
    assert by_call["second"] == [0, 1, 2]  # two records of audio and the end-of-stream
    assert by_call["first"] == [1, 2]  # seq 0 was refused: the worker sees a gap


@pytest.mark.parametrize("reveal", [False, True])
def test_a_key_press_on_rtp_is_an_event_naming_its_digit_only_if_allowed(reveal: bool) -> None:
    async def scenario(gateway: IngressGateway, session: aiohttp.ClientSession, url: str) -> None:
        status, text = await post(session, url, {"call_id": "keys", "channels": ["customer"]})
        assert status == 201
        port = json.loads(text)["channels"]["customer"]["port"]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            for index in range(5):  # 100 ms of audio, then three end packets of digit 9
                header = bytes([0x80, 0]) + index.to_bytes(2, "big")
                header += (160 * index).to_bytes(4, "big") + b"\x00\x00\x00\x01"
                sender.sendto(header + b"\x10" * 160, ("127.0.0.1", port))
            for repeat in range(3):
                header = bytes([0x80, 101]) + (5 + repeat).to_bytes(2, "big")
                header += (800).to_bytes(4, "big") + b"\x00\x00\x00\x01"
                sender.sendto(header + bytes([9, 0x80 | 10, 0x01, 0x40]), ("127.0.0.1", port))
        while gateway.metrics.registry.get_sample_value("ingress_rtp_packets_total") < 8:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the start hold lets the first audio out

    events: list[Event] = []
    run(scenario, events=events, dtmf_digits_in_events=reveal)
    started, dtmf = events
    assert started.type is EventType.INGRESS_CALL_STARTED
    assert started.detail["transport"] == "rtp"
    assert dtmf.type is EventType.DTMF_RECEIVED
    assert (dtmf.call_id, dtmf.channel) == ("keys", "customer")
    assert dtmf.detail["position_ms"] == 100
    assert dtmf.detail["duration_ms"] == 40  # 320 samples at 8 kHz
    assert dtmf.detail["digit_redacted"] is not reveal
    assert ("digit" in dtmf.detail) is reveal
    if reveal:
        assert dtmf.detail["digit"] == "9"
