"""The gateway's metric catalogue is what it exposes, and records are timed from the arrival of
the media that completed them (``ingress_arrival_to_ack_seconds``, what bench/ingress.py reads)."""

from __future__ import annotations

import asyncio
import json
import random
import socket

import aiohttp

from pipeline.ingress.metrics import INGRESS_CATALOGUE, IngressMetrics
from pipeline.ingress.server import IngressGateway, TimedTransport
from pipeline.producer.publisher import AudioPublisher
from pipeline.runtime.metrics import MetricType
from pipeline.settings import IngressSettings
from tests.unit.producer.fakes import FakeTransport


def test_the_catalogue_is_exactly_what_the_registry_exposes() -> None:
    metrics = IngressMetrics()
    metrics.calls_open.labels("rtp").set(1)  # a gauge's series exist once set
    exposed = {family.name: family for family in metrics.registry.collect()}
    declared = {spec.name.removesuffix("_total"): spec for spec in INGRESS_CATALOGUE}
    assert set(exposed) == set(declared)
    for name, spec in declared.items():
        assert exposed[name].type == spec.type.value, name
        labels = {key for sample in exposed[name].samples for key in sample.labels} - {"le"}
        assert labels == set(spec.label_names), name
        if spec.type is MetricType.HISTOGRAM:
            assert {f"{name}_bucket", f"{name}_sum", f"{name}_count"} == set(spec.series_names)


def test_a_record_is_timed_from_the_last_arrival_mark_before_its_send() -> None:
    fake = FakeTransport(fail=lambda index: "broker down" if index == 2 else None)
    sent: list[float] = []
    from_arrival: list[float] = []
    timed = TimedTransport(fake, sent.append, from_arrival.append)
    timed.send("t", None, b"before any mark", [], lambda error, partition: None)
    timed.mark_arrival()
    timed.send("t", None, b"after the mark", [], lambda error, partition: None)
    timed.send("t", None, b"refused by the broker", [], lambda error, partition: None)
    timed.flush(1)
    assert len(sent) == 2  # the failed delivery is not a latency
    assert len(from_arrival) == 1  # nothing arrived before the first record
    assert from_arrival[0] >= sent[1] >= 0


def test_the_gateway_marks_every_datagram_before_handling_it() -> None:
    marks: list[int] = []
    fake = FakeTransport()
    port_min = random.randrange(45000, 55000, 10)
    settings = IngressSettings(
        bind="127.0.0.1",
        port=0,
        rtp_bind="127.0.0.1",
        rtp_port_min=port_min,
        rtp_port_max=port_min + 9,
        auth_token="t",
    )

    async def main() -> None:
        publisher = AudioPublisher(fake, topic="audio.chunks")
        gateway = IngressGateway(settings, publisher, on_media=lambda: marks.append(1))
        await gateway.start()
        try:
            async with aiohttp.ClientSession() as session:
                url = f"http://127.0.0.1:{gateway.port}/v1/calls"
                body = json.dumps({"call_id": "c"}).encode()
                async with session.post(url, data=body, headers={"Authorization": "Bearer t"}) as r:
                    port = (await r.json())["channels"]["mono"]["port"]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
                for index in range(3):
                    header = bytes([0x80, 0]) + index.to_bytes(2, "big")
                    header += (160 * index).to_bytes(4, "big") + b"\x00\x00\x00\x01"
                    sender.sendto(header + b"\xff" * 160, ("127.0.0.1", port))
                sender.sendto(b"\x00", ("127.0.0.1", port))  # malformed: marked all the same
            for _ in range(200):
                if len(marks) == 4:
                    break
                await asyncio.sleep(0.01)
        finally:
            await gateway.stop()

    asyncio.run(main())
    assert len(marks) == 4
