"""``streamscribe ingress``: the telephony ingress gateway (docs/ingress.md).

RTP from Asterisk ExternalMedia (ports allocated over the control API), Twilio Media Streams and
FreeSWITCH audio_fork WebSocket streams in; records on audio.chunks out. Runs until SIGTERM /
SIGINT, which ends every open call with end-of-stream.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import signal
import sys
from typing import Any

from pipeline.cli.options import add_env_option, add_log_level_option, settings_from_args
from pipeline.settings import Settings, validate_settings

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ingress",
        help="telephony ingress gateway: SIP/SIPREC, RTP and WebSocket media into audio.chunks",
        description="Receive live call media (SIP and SIPREC calls on ingress.sip_port, "
        "RTP on ports allocated with POST /v1/calls, "
        "Twilio Media Streams on /ws/twilio, FreeSWITCH audio_fork / jambonz on /ws/fork) and "
        "publish it to audio.chunks. Settings: STREAMSCRIBE_INGRESS_* (docs/ingress.md).",
    )
    add_env_option(
        parser,
        "--port",
        env="STREAMSCRIBE_INGRESS_PORT",
        help="port of the control API, WebSocket streams and /metrics",
        type=int,
        metavar="PORT",
    )
    add_env_option(
        parser,
        "--bind",
        env="STREAMSCRIBE_INGRESS_BIND",
        help="address the HTTP server binds",
        metavar="ADDRESS",
    )
    add_env_option(
        parser,
        "--record-ms",
        env="STREAMSCRIBE_INGRESS_RECORD_MS",
        help="audio per published record, milliseconds",
        type=int,
        metavar="MS",
    )
    add_log_level_option(parser)
    parser.set_defaults(handler=_run)


def _ingress_settings(args: argparse.Namespace) -> Settings:
    settings = settings_from_args(args)
    overrides = {"port": args.port, "bind": args.bind, "record_ms": args.record_ms}
    given = {name: value for name, value in overrides.items() if value is not None}
    return validate_settings(
        dataclasses.replace(settings, ingress=dataclasses.replace(settings.ingress, **given))
    )


def _run(args: argparse.Namespace) -> int:
    settings = _ingress_settings(args)
    # Imported here: aiohttp and confluent-kafka load only for the command that runs them.
    from pipeline.ingress.server import validate_agent_rule, validate_ingress_settings

    validate_ingress_settings(settings.ingress)
    validate_agent_rule(settings.ingress)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    asyncio.run(_serve(settings))
    return 0


async def _serve(settings: Settings) -> None:
    import socket

    from pipeline.ingress.events import TransportEventSink
    from pipeline.ingress.metrics import IngressMetrics
    from pipeline.ingress.server import IngressGateway, TimedTransport
    from pipeline.producer.kafka import KafkaTransport, producer_config
    from pipeline.producer.publisher import FLUSH_MARGIN_S, AudioPublisher
    from pipeline.runtime.health import KafkaProbe
    from pipeline.topics import TopicRole, topic_name

    metrics = IngressMetrics()
    kafka = KafkaTransport(producer_config(settings.kafka, settings.publisher))
    transport = TimedTransport(
        kafka, metrics.publish_latency.observe, metrics.arrival_to_ack.observe
    )
    # Events share the producer (its reports are served with the audio's) but not the timing.
    events = TransportEventSink(
        kafka,
        topic_name(TopicRole.EVENTS, settings.kafka.topic_prefix),
        metrics.publish_failures.inc,
    )
    publisher = AudioPublisher(
        transport,
        topic=topic_name(TopicRole.AUDIO_CHUNKS, settings.kafka.topic_prefix),
        chunk_ms=settings.ingress.record_ms,
        tenant=settings.publisher.tenant,
        flush_timeout_s=settings.publisher.delivery_timeout_ms / 1000 + FLUSH_MARGIN_S,
    )
    probe = KafkaProbe(settings.kafka, settings.metrics.probe_timeout_ms / 1000)

    def readiness() -> tuple[bool, str]:
        check = probe.check()
        return check.ok, check.detail

    gateway = IngressGateway(
        settings.ingress,
        publisher,
        metrics=metrics,
        readiness=readiness,
        on_media=transport.mark_arrival,
        default_tenant=settings.publisher.tenant,
        events=events,
        source=f"ingress-{socket.gethostname()}",
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await gateway.start()
    print(
        f"streamscribe ingress: serving http://{settings.ingress.bind}:{gateway.port}",
        file=sys.stderr,
        flush=True,
    )
    if gateway.sip_port:
        print(
            f"streamscribe ingress: SIP on {settings.ingress.sip_bind}:{gateway.sip_port} "
            "(UDP, TCP)",
            file=sys.stderr,
            flush=True,
        )
    try:
        await stop.wait()
    finally:
        await gateway.stop()
        publisher.close()
