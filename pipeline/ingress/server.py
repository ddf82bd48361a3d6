"""The gateway's asyncio shell: one aiohttp server, UDP receivers, and the ``AudioPublisher``.

- ``POST /v1/calls`` allocates one RTP receive port per channel of a call (the flow of an
  Asterisk ARI ExternalMedia application); ``DELETE /v1/calls/{call_id}`` ends it; ``GET
  /v1/calls`` lists the open ones.
- ``GET /ws/twilio``: Twilio Media Streams; ``GET /ws/fork``: FreeSWITCH audio_fork / jambonz.
- ``/metrics``, ``/healthz``, ``/readyz`` (no token: they carry no call data).

Every packet and frame is handled to its end inside one event-loop callback (parse, reorder,
publish: librdkafka's ``produce`` only queues), so one call never waits for another, and bad
input of one call is counted and refused there without touching the others. The pure work is in
``pipeline.ingress.calls``, ``jitter``, ``rtp`` and ``media_streams``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from aiohttp import WSCloseCode, WSMessage, WSMsgType, web
from prometheus_client.exposition import choose_encoder

from pipeline.clock import Clock, WallClock
from pipeline.contracts import Encoding
from pipeline.contracts.audio_chunk import LABEL_PATTERN, SUPPORTED_SAMPLE_RATES_HZ
from pipeline.errors import ConfigError, StreamscribeError
from pipeline.ingress.calls import (
    Call,
    CallRegistry,
    ChannelSpec,
    Received,
    RtpReceiver,
    SourcePolicy,
    silence_of,
)
from pipeline.ingress.events import DtmfNotice, EventSink, call_started, dtmf_received
from pipeline.ingress.jitter import JitterConfig, PushStatus
from pipeline.ingress.media_streams import (
    TWILIO_SAMPLE_RATE_HZ,
    TimestampedFeed,
    TwilioMedia,
    TwilioStart,
    TwilioStop,
    parse_fork_metadata,
    parse_twilio,
    twilio_channels,
)
from pipeline.ingress.metrics import IngressMetrics
from pipeline.ingress.rtp import Codec, Rejected, RejectReason, TelephoneEvent
from pipeline.ingress.sip_server import SIP_TRANSPORTS, SipServer
from pipeline.ingress.siprec import AgentRule
from pipeline.producer.publisher import AudioPublisher, CallStream, DeliveryCallback, Transport
from pipeline.settings import IngressSettings, env_variable

__all__ = [
    "DtmfNotice",
    "IngressGateway",
    "TimedTransport",
    "validate_agent_rule",
    "validate_ingress_settings",
]

logger = logging.getLogger(__name__)

TICK_S = 0.02
"""How often waiting packets are expired, idle calls ended and delivery reports served."""
ANY_NETWORK = "0.0.0.0/0,::/0"
DEFERRED_AUTH = web.RequestKey("deferred_auth", bool)
"""Set on a Twilio stream without a header or query token: its ``start`` must carry it."""


def validate_ingress_settings(settings: IngressSettings) -> SourcePolicy:
    """The source policy of ``settings``, once the settings that depend on each other agree.

    Raises:
        ConfigError: no token and authentication not explicitly disabled; an empty or reversed
            port range; a network that does not parse.
    """
    if not settings.auth_token and not settings.auth_disabled:
        raise ConfigError(
            f"the ingress needs a token ({env_variable(IngressSettings, 'auth_token')}) or "
            f"{env_variable(IngressSettings, 'auth_disabled')}=true"
        )
    if settings.rtp_port_min > settings.rtp_port_max:
        raise ConfigError(
            f"ingress.rtp_port_min {settings.rtp_port_min} is above rtp_port_max "
            f"{settings.rtp_port_max}"
        )
    text = ANY_NETWORK if settings.allowed_networks.strip() == "any" else settings.allowed_networks
    try:
        return SourcePolicy.parse(text)
    except ValueError as error:
        raise ConfigError(
            f"ingress.allowed_networks ({env_variable(IngressSettings, 'allowed_networks')}): "
            f"{error}"
        ) from None


def validate_agent_rule(settings: IngressSettings) -> AgentRule:
    """The SIPREC agent rule of ``settings``. Raises ConfigError when it does not parse."""
    try:
        return AgentRule.parse(settings.siprec_agent_rule)
    except ValueError as error:
        raise ConfigError(
            f"ingress.siprec_agent_rule ({env_variable(IngressSettings, 'siprec_agent_rule')}): "
            f"{error}"
        ) from None


class TimedTransport:
    """A ``Transport`` that times each record from ``send`` to its delivery report, and, when
    ``observe_from_arrival`` is given, from the last ``mark_arrival`` before its ``send`` (the
    arrival of the media that completed it: records are cut synchronously in the datagram or
    frame handler that marked it)."""

    def __init__(
        self,
        inner: Transport,
        observe: Callable[[float], None],
        observe_from_arrival: Callable[[float], None] | None = None,
    ) -> None:
        self._inner = inner
        self._observe = observe
        self._observe_from_arrival = observe_from_arrival
        self._arrival_s: float | None = None

    def mark_arrival(self) -> None:
        """Media arrived now (``time.perf_counter``): records sent until the next mark are
        observed from it too."""
        self._arrival_s = time.perf_counter()

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Sequence[tuple[str, bytes]],
        on_delivery: DeliveryCallback,
    ) -> None:
        sent_s = time.perf_counter()
        arrival_s = self._arrival_s if self._observe_from_arrival is not None else None

        def report(error: str | None, partition: int) -> None:
            if error is None:
                acked_s = time.perf_counter()
                self._observe(acked_s - sent_s)
                if arrival_s is not None and self._observe_from_arrival is not None:
                    self._observe_from_arrival(acked_s - arrival_s)
            on_delivery(error, partition)

        self._inner.send(topic, key, value, headers, report)

    def poll(self, timeout_s: float) -> None:
        self._inner.poll(timeout_s)

    def flush(self, timeout_s: float) -> int:
        return self._inner.flush(timeout_s)

    def close(self) -> None:
        self._inner.close()


def _close_code(rejected: Rejected) -> int:
    """The WebSocket close code of a call that could not be opened."""
    if rejected.reason is RejectReason.CALL_LIMIT:
        return int(WSCloseCode.TRY_AGAIN_LATER)
    return int(WSCloseCode.POLICY_VIOLATION)


class _RejectLog:
    """One log line per reason per interval; the lines between are counted, not lost."""

    def __init__(self, interval_ms: int, clock: Clock) -> None:
        self._interval_ms = interval_ms
        self._clock = clock
        self._last_ms: dict[RejectReason, int] = {}
        self._suppressed: dict[RejectReason, int] = {}

    def log(self, rejected: Rejected, where: str) -> None:
        now_ms = self._clock.now_ms()
        last = self._last_ms.get(rejected.reason)
        if last is not None and now_ms - last < self._interval_ms:
            self._suppressed[rejected.reason] = self._suppressed.get(rejected.reason, 0) + 1
            return
        self._last_ms[rejected.reason] = now_ms
        more = self._suppressed.pop(rejected.reason, 0)
        logger.warning(
            "refused %s from %s: %s%s",
            rejected.reason.value,
            where,
            rejected.detail,
            f" ({more} more since the last line)" if more else "",
        )


@dataclass(eq=False)
class _LiveCall:
    """One open call: its core bookkeeping, its publisher stream and its receivers."""

    call: Call
    stream: CallStream
    transport_kind: str
    encoding: Encoding
    sample_rate_hz: int
    receivers: dict[str, tuple[RtpReceiver, asyncio.DatagramTransport, int]] = field(
        default_factory=dict
    )
    samples_out: dict[str, int] = field(default_factory=dict)
    ended: bool = False


class _RtpProtocol(asyncio.DatagramProtocol):
    def __init__(self, gateway: IngressGateway, live: _LiveCall, channel: str) -> None:
        self._gateway = gateway
        self._live = live
        self._channel = channel

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self._gateway._datagram(self._live, self._channel, data, (str(addr[0]), int(addr[1])))

    def error_received(self, exc: Exception) -> None:
        logger.debug("RTP socket of %s/%s: %s", self._live.call.call_id, self._channel, exc)


class IngressGateway:
    """The gateway: start it, serve, stop it (which ends every open call with end-of-stream).

    ``on_dtmf`` receives every digit notice (none are published into audio.chunks; ``events``,
    when given, gets a ``dtmf_received`` event per digit and an ``ingress_call_started`` per
    call, see ``pipeline.ingress.events``);
    ``on_media`` is called as each datagram or WebSocket frame is read, before it is handled
    (``TimedTransport.mark_arrival``: what ``ingress_arrival_to_ack_seconds`` is measured from).
    """

    def __init__(
        self,
        settings: IngressSettings,
        publisher: AudioPublisher,
        *,
        metrics: IngressMetrics | None = None,
        clock: Clock | None = None,
        readiness: Callable[[], tuple[bool, str]] | None = None,
        on_dtmf: Callable[[DtmfNotice], None] | None = None,
        on_media: Callable[[], None] | None = None,
        default_tenant: str = "default",
        events: EventSink | None = None,
        source: str = "ingress",
    ) -> None:
        self._settings = settings
        self._default_tenant = default_tenant
        self._policy = validate_ingress_settings(settings)
        self._agent_rule = validate_agent_rule(settings)
        self._events = events
        self._source = source
        self._sip: SipServer | None = None
        self._publisher = publisher
        self.metrics = metrics or IngressMetrics()
        self._clock: Clock = clock or WallClock()
        self._readiness = readiness
        self._on_dtmf = on_dtmf
        self._on_media = on_media or (lambda: None)
        self._registry = CallRegistry(
            max_calls=settings.max_calls,
            ports=range(settings.rtp_port_min, settings.rtp_port_max + 1),
        )
        self._live: dict[str, _LiveCall] = {}
        self._reject_log = _RejectLog(settings.reject_log_interval_ms, self._clock)
        self._runner: web.AppRunner | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._stopping = False
        self.port = 0

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind the HTTP server (``port`` is then the bound one) and start the ticker."""
        app = web.Application(middlewares=[self._auth_middleware])
        app.router.add_post("/v1/calls", self._allocate)
        app.router.add_get("/v1/calls", self._list_calls)
        app.router.add_delete("/v1/calls/{call_id}", self._delete_call)
        app.router.add_get("/ws/twilio", self._twilio)
        app.router.add_get("/ws/fork", self._fork)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._settings.bind, self._settings.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        if self._settings.sip_enabled:
            self._sip = SipServer(self, self._settings, self._policy, self._agent_rule)
            await self._sip.start()
        self._ticker = asyncio.create_task(self._tick_forever())

    @property
    def sip_port(self) -> int:
        """The bound SIP port (UDP and TCP); 0 when SIP is off."""
        return self._sip.port if self._sip is not None else 0

    async def stop(self) -> None:
        """End every open call (end-of-stream on each channel), wait for the deliveries, close
        the server. The publisher stays open (its owner closes it)."""
        self._stopping = True
        for call_id in list(self._live):
            self._end_call(call_id, "shutdown")
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self._sip is not None:
            await self._sip.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        await asyncio.get_running_loop().run_in_executor(None, self._flush_publisher)

    def _flush_publisher(self) -> None:
        try:
            self._publisher.flush()
        except StreamscribeError as error:
            logger.error("records not delivered at shutdown: %s", error)

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self._tick()
            except Exception:  # a bug must not stop idle timeouts and delivery reports
                logger.exception("ingress tick failed")

    def _tick(self) -> None:
        now_ms = self._clock.now_ms()
        for live in list(self._live.values()):
            for channel, (receiver, _, _) in live.receivers.items():
                self._apply(live, channel, receiver.expire(now_ms), now_ms, "rtp")
        for call_id in self._registry.idle(now_ms, self._settings.idle_timeout_ms):
            self._end_call(call_id, "idle timeout")
        if self._sip is not None:
            self._sip.tick(now_ms)
        self._check_deliveries()

    def _check_deliveries(self) -> None:
        try:
            self._publisher.check()
        except StreamscribeError as error:
            self._publish_failed(error, "delivery failed")

    def _publish_failed(self, error: StreamscribeError, where: str) -> None:
        """Count the records a ``PublishError`` (or a refusal) names, and log it."""
        failures = getattr(error, "failures", ()) or (str(error),)
        self.metrics.publish_failures.inc(len(failures))
        logger.error("%s: %s", where, error)

    # -- calls ----------------------------------------------------------------------------

    def _open(
        self,
        call_id: str,
        tenant: str,
        channels: tuple[str, ...],
        encoding: Encoding,
        sample_rate_hz: int,
        transport_kind: str,
        detail: dict[str, Any] | None = None,
    ) -> _LiveCall | Rejected:
        """Open a call (and publish its ``ingress_call_started`` event, with ``detail``)."""
        if call_id in self._live:
            return Rejected(RejectReason.BAD_MESSAGE, f"call {call_id!r} is already open")
        # The limit first: a refused call must leave no record behind (not even an end).
        opened = self._registry.open(call_id, tenant, self._clock.now_ms())
        if isinstance(opened, Rejected):
            return opened
        try:
            stream = self._publisher.open_call(
                call_id,
                tenant=tenant,
                channels=channels,
                sample_rate_hz=sample_rate_hz,
                encoding=encoding,
                chunk_ms=self._settings.record_ms,
            )
        except ConfigError as error:
            self._registry.close(call_id)
            return Rejected(RejectReason.BAD_MESSAGE, str(error))
        for label in channels:
            opened.add_channel(label, sample_rate_hz)
        live = _LiveCall(opened, stream, transport_kind, encoding, sample_rate_hz)
        live.samples_out = dict.fromkeys(channels, 0)
        self._live[call_id] = live
        self.metrics.calls.labels(transport_kind).inc()
        self.metrics.calls_open.labels(transport_kind).inc()
        logger.info("call %s opened (%s, channels %s)", call_id, transport_kind, channels)
        if self._events is not None:
            self._events.publish(
                call_started(
                    self._source,
                    self._clock.now_ms(),
                    call_id,
                    {
                        "transport": transport_kind,
                        "tenant": tenant,
                        "encoding": encoding.value,
                        "sample_rate_hz": sample_rate_hz,
                        "channels": list(channels),
                        **(detail or {}),
                    },
                )
            )
        return live

    def _end_call(self, call_id: str, why: str) -> None:
        live = self._live.pop(call_id, None)
        if live is None or live.ended:
            return
        live.ended = True
        now_ms = self._clock.now_ms()
        for channel, (receiver, transport, port) in live.receivers.items():
            self._apply(live, channel, receiver.drain(), now_ms, "rtp")
            transport.close()
            self._registry.return_port(port)
        self._registry.close(call_id)
        try:
            live.stream.end()
        except StreamscribeError as error:
            logger.error("call %s: %s", call_id, error)
        self.metrics.calls_open.labels(live.transport_kind).dec()
        if self._sip is not None and live.transport_kind in SIP_TRANSPORTS:
            self._sip.hang_up(call_id)
        logger.info("call %s ended (%s)", call_id, why)

    def _push(
        self,
        live: _LiveCall,
        channel: str,
        audio: bytes,
        arrival_ms: int,
        *,
        lead_in_by_arrival: bool = True,
        started_ms: int | None = None,
    ) -> None:
        """Publish ``audio`` on ``channel``: the leading silence its first media needs (by
        arrival, unless the stream's own timestamps placed it: ``lead_in_by_arrival``), then
        the audio, dated by its arrival (its last sample arrived at ``arrival_ms``)."""
        if live.ended or not audio:
            return
        # A start hold let the channel's first audio out late: it began at its first arrival.
        lead_in = live.call.media(channel, arrival_ms if started_ms is None else started_ms)
        if not lead_in_by_arrival:
            lead_in = 0
        bytes_per_sample = live.encoding.bytes_per_sample
        samples = len(audio) // bytes_per_sample
        start_ms = max(arrival_ms - samples * 1000 // live.sample_rate_hz, 0)
        try:
            if lead_in:
                self.metrics.gap_filled.labels(live.transport_kind).inc(
                    lead_in / live.sample_rate_hz
                )
                silence = silence_of(live.encoding) * lead_in
                lead_ms = lead_in * 1000 // live.sample_rate_hz
                self._count(live.stream.push(channel, silence, max(start_ms - lead_ms, 0)))
                live.samples_out[channel] += lead_in
            self._count(live.stream.push(channel, audio, start_ms))
            live.samples_out[channel] += samples
        except StreamscribeError as error:  # a delivery failure of any call: counted, logged
            self._publish_failed(error, f"call {live.call.call_id} {channel}")

    def _count(self, records: int) -> None:
        if records:
            self.metrics.records.inc(records)

    def _reject(self, rejected: Rejected, where: str) -> None:
        self.metrics.rejected.labels(rejected.reason.value).inc()
        self._reject_log.log(rejected, where)

    # -- RTP ------------------------------------------------------------------------------

    def _datagram(
        self, live: _LiveCall, channel: str, data: bytes, source: tuple[str, int]
    ) -> None:
        if live.ended:
            return
        self._on_media()
        self.metrics.packets.inc()
        arrival_ms = self._clock.now_ms()
        receiver = live.receivers[channel][0]
        try:
            received = receiver.receive(data, source, arrival_ms)
        except Exception:  # a bug must not stop the socket: logged, the packet is dropped
            logger.exception("call %s %s: packet dropped", live.call.call_id, channel)
            return
        self._apply(live, channel, received, arrival_ms, "rtp")
        self.metrics.jitter.observe(receiver.jitter_ms / 1000)

    def _apply(
        self, live: _LiveCall, channel: str, received: Received, now_ms: int, kind: str
    ) -> None:
        if received.rejected is not None:
            self._reject(received.rejected, f"{live.call.call_id}/{channel}")
        if received.status is PushStatus.DUPLICATE:
            self.metrics.packets_duplicate.inc()
        elif received.status is PushStatus.LATE:
            self.metrics.packets_late.inc()
        if received.lost_packets:
            self.metrics.packets_lost.inc(received.lost_packets)
        if received.discontinuity:
            self.metrics.discontinuities.inc()
        if received.filled_samples:
            self.metrics.gap_filled.labels(kind).inc(received.filled_samples / live.sample_rate_hz)
        self._push(live, channel, received.audio, now_ms, started_ms=received.started_ms)
        # The release's audio ends where the channel's published samples end now.
        audio_start = live.samples_out[channel] - len(received.audio) // (
            live.encoding.bytes_per_sample
        )
        for event, at_samples in received.dtmf_placed:
            self._dtmf(live, channel, event, kind, max(audio_start + at_samples, 0))
        if received.dtmf is not None:
            self._dtmf(live, channel, received.dtmf, kind, live.samples_out[channel])

    def _dtmf(
        self, live: _LiveCall, channel: str, event: TelephoneEvent, kind: str, at_samples: int
    ) -> None:
        duration_ms = event.duration_samples * 1000 // live.sample_rate_hz
        self._dtmf_notice(live, channel, event.digit, duration_ms, kind, at_samples)

    def _dtmf_notice(
        self,
        live: _LiveCall,
        channel: str,
        digit: str,
        duration_ms: int,
        kind: str,
        at_samples: int | None = None,
    ) -> None:
        """Count a key press and hand its notice to ``on_dtmf`` (never to audio.chunks).
        ``at_samples``: where it starts on the channel's timeline (default: the audio
        published so far)."""
        self.metrics.dtmf_events.labels(kind).inc()
        if at_samples is None:
            at_samples = live.samples_out[channel]
        offset_ms = at_samples * 1000 // live.sample_rate_hz
        notice = DtmfNotice(live.call.call_id, channel, digit, offset_ms, duration_ms)
        if self._on_dtmf is not None:
            self._on_dtmf(notice)
        if self._events is not None:
            self._events.publish(
                dtmf_received(
                    self._source,
                    self._clock.now_ms(),
                    notice,
                    reveal_digit=self._settings.dtmf_digits_in_events,
                )
            )

    # -- HTTP control API -----------------------------------------------------------------

    @web.middleware
    async def _auth_middleware(
        self, request: web.Request, handler: Callable[[web.Request], Any]
    ) -> web.StreamResponse:
        path = request.path
        guarded = path.startswith("/v1/") or path.startswith("/ws/")
        if guarded and not self._settings.auth_disabled and not self._authorized(request):
            # Twilio cannot set headers or a query: its token comes in the start message.
            if path != "/ws/twilio":
                self._reject(Rejected(RejectReason.UNAUTHORIZED, "no valid token"), path)
                raise web.HTTPUnauthorized(
                    text="a bearer token is required", headers={"WWW-Authenticate": "Bearer"}
                )
            request[DEFERRED_AUTH] = True
        response: web.StreamResponse = await handler(request)
        return response

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        given = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
        return self._token_ok(given or request.query.get("token", ""))

    def _token_ok(self, given: str) -> bool:
        expected = self._settings.auth_token
        return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())

    async def _allocate(self, request: web.Request) -> web.Response:
        """``{"call_id", "channels": [labels], "codec", "sample_rate_hz", "tenant"?,
        "payload_type"?, "dtmf_payload_type"?}`` → 201 with a receive port per channel."""
        if self._stopping:
            raise web.HTTPServiceUnavailable(text="shutting down")
        body = await self._json_body(request)
        spec = self._allocation(body)
        if isinstance(spec, Rejected):
            self._reject(spec, "POST /v1/calls")
            raise web.HTTPBadRequest(text=spec.detail)
        call_id, tenant, specs = spec
        if len(specs) > self._registry.free_ports:
            self._reject(Rejected(RejectReason.CALL_LIMIT, "no free port"), "POST /v1/calls")
            raise web.HTTPServiceUnavailable(text="no free RTP port")
        first = specs[0]
        opened = self._open(
            call_id,
            tenant,
            tuple(s.label for s in specs),
            first.encoding,
            first.sample_rate_hz,
            "rtp",
        )
        if isinstance(opened, Rejected):
            self._reject(opened, "POST /v1/calls")
            if opened.reason is RejectReason.CALL_LIMIT:
                status = 503
            else:
                status = 409 if call_id in self._live else 400
            return web.Response(status=status, text=opened.detail)
        try:
            ports = await self._bind_ports(opened, specs)
        except OSError as error:
            self._end_call(call_id, "no port could be bound")
            raise web.HTTPServiceUnavailable(text=f"no RTP port could be bound: {error}") from None
        host = self._settings.advertised_host or (request.host.rsplit(":", 1)[0] or "127.0.0.1")
        return web.json_response(
            {
                "call_id": call_id,
                "channels": {
                    label: {"host": host, "port": port, "external_host": f"{host}:{port}"}
                    for label, port in ports.items()
                },
            },
            status=201,
        )

    async def _bind_ports(self, live: _LiveCall, specs: list[ChannelSpec]) -> dict[str, int]:
        loop = asyncio.get_running_loop()
        ports: dict[str, int] = {}
        for spec in specs:
            while True:
                port = self._registry.take_port()
                if port is None:
                    raise OSError("the RTP port range is exhausted")
                try:
                    transport, _ = await loop.create_datagram_endpoint(
                        lambda label=spec.label: _RtpProtocol(self, live, label),  # type: ignore[misc]
                        local_addr=(self._settings.rtp_bind, port),
                    )
                except OSError:
                    continue  # taken by another process: that port stays out of the pool
                break
            receiver = RtpReceiver(
                spec, self._policy, self._jitter_config(spec, live.encoding), live.encoding
            )
            live.receivers[spec.label] = (receiver, transport, port)
            ports[spec.label] = port
        return ports

    def _jitter_config(self, spec: ChannelSpec, encoding: Encoding | None = None) -> JitterConfig:
        encoding = encoding or spec.encoding
        return JitterConfig(
            sample_rate_hz=spec.sample_rate_hz,
            bytes_per_sample=encoding.bytes_per_sample,
            silence_sample=silence_of(encoding),
            depth_packets=self._settings.reorder_depth_packets,
            max_wait_ms=self._settings.reorder_wait_ms,
            max_gap_ms=self._settings.max_gap_ms,
            start_hold_ms=self._settings.reorder_start_hold_ms,
        )

    def _allocation(self, body: Any) -> tuple[str, str, list[ChannelSpec]] | Rejected:
        if not isinstance(body, dict):
            return Rejected(RejectReason.NOT_JSON, "the body must be a JSON object")
        call_id = body.get("call_id")
        channels = body.get("channels", ["mono"])
        codec = Codec.parse(str(body.get("codec", "PCMU")))
        rate = body.get("sample_rate_hz", 8000)
        tenant = body.get("tenant", self._default_tenant)
        payload_type = body.get("payload_type")
        dtmf_payload_type = body.get("dtmf_payload_type", 101)
        if not isinstance(call_id, str) or not call_id:
            return Rejected(RejectReason.BAD_MESSAGE, "call_id must be a non-empty string")
        if (
            not isinstance(channels, list)
            or not channels
            or not all(isinstance(c, str) and LABEL_PATTERN.fullmatch(c) for c in channels)
        ):
            return Rejected(RejectReason.BAD_MESSAGE, "channels must be a list of labels")
        if codec is None:
            return Rejected(RejectReason.BAD_MESSAGE, "codec must be PCMU, PCMA or L16")
        if rate not in SUPPORTED_SAMPLE_RATES_HZ or (codec is not Codec.L16 and rate != 8000):
            return Rejected(RejectReason.BAD_MESSAGE, f"sample_rate_hz {rate!r} for {codec}")
        if not isinstance(tenant, str):
            return Rejected(RejectReason.BAD_MESSAGE, "tenant must be a string")
        for name, value in (
            ("payload_type", payload_type),
            ("dtmf_payload_type", dtmf_payload_type),
        ):
            if value is not None and (not isinstance(value, int) or not 0 <= value <= 127):
                return Rejected(RejectReason.BAD_MESSAGE, f"{name} must be 0..127")
        specs = [
            ChannelSpec(label, codec, int(rate), payload_type, int(dtmf_payload_type))
            for label in channels
        ]
        return call_id, tenant, specs

    async def _json_body(self, request: web.Request) -> Any:
        try:
            return orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            self._reject(Rejected(RejectReason.NOT_JSON, "body"), request.path)
            raise web.HTTPBadRequest(text="the body must be JSON") from None

    async def _delete_call(self, request: web.Request) -> web.Response:
        call_id = request.match_info["call_id"]
        live = self._live.get(call_id)
        if live is None:
            raise web.HTTPNotFound(text=f"no open call {call_id!r}")
        self._end_call(call_id, "DELETE")
        return web.json_response({"call_id": call_id, "ended": True})

    async def _list_calls(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "calls": [
                    {
                        "call_id": live.call.call_id,
                        "transport": live.transport_kind,
                        "channels": list(live.call.channels),
                        "ports": {label: port for label, (_, _, port) in live.receivers.items()},
                    }
                    for live in self._live.values()
                ]
            }
        )

    # -- WebSocket media streams ----------------------------------------------------------

    async def _media_stream(
        self, request: web.Request, protocol: str, session: _StreamSession
    ) -> web.WebSocketResponse:
        """Serve one media-stream connection: each frame goes to ``session.handle``; a refusal
        closes the stream with its code; the call ends (end-of-stream) however the stream does."""
        ws = web.WebSocketResponse(max_msg_size=self._settings.max_ws_frame_bytes)
        await ws.prepare(request)
        where = f"ws/{protocol}"
        try:
            async for message in ws:
                self._on_media()
                self.metrics.ws_messages.labels(protocol).inc()
                if message.type is WSMsgType.ERROR:
                    self._ws_error(message.data, where)
                    break
                outcome = session.handle(message)
                if isinstance(outcome, _Refusal):
                    self._reject(outcome.rejected, where)
                    await ws.close(
                        code=outcome.code, message=outcome.rejected.reason.value.encode()
                    )
                    break
                if outcome is _STREAM_DONE:
                    break
        finally:
            if session.live is not None:
                self._end_call(session.live.call.call_id, "stream closed")
        if not ws.closed:
            await ws.close()
        return ws

    async def _twilio(self, request: web.Request) -> web.WebSocketResponse:
        return await self._media_stream(
            request, "twilio", _TwilioSession(self, needs_token=bool(request.get(DEFERRED_AUTH)))
        )

    async def _fork(self, request: web.Request) -> web.WebSocketResponse:
        return await self._media_stream(request, "fork", _ForkSession(self, dict(request.query)))

    def _ws_error(self, error: Any, where: str) -> None:
        code = getattr(error, "code", None)
        reason = (
            RejectReason.OVERSIZED_FRAME
            if code == WSCloseCode.MESSAGE_TOO_BIG
            else RejectReason.BAD_MESSAGE
        )
        self._reject(Rejected(reason, str(error)[:120]), where)

    # -- operations -----------------------------------------------------------------------

    async def _metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(
            body=encoder(self.metrics.registry), headers={"Content-Type": content_type}
        )

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def _readyz(self, request: web.Request) -> web.Response:
        checks: dict[str, dict[str, Any]] = {
            "accepting": {
                "ok": not self._stopping,
                "detail": "shutting down" if self._stopping else "",
            }
        }
        if self._readiness is not None:
            ok, detail = await asyncio.get_running_loop().run_in_executor(None, self._readiness)
            checks["kafka"] = {"ok": ok, "detail": detail}
        ready = all(check["ok"] for check in checks.values())
        return web.json_response(
            {"ready": ready, "checks": checks, "calls_open": len(self._live)},
            status=200 if ready else 503,
        )


@dataclass(frozen=True, slots=True)
class _Refusal:
    rejected: Rejected
    code: int


_STREAM_DONE = object()
"""What ``_StreamSession.handle`` returns when the stream has ended on its own terms."""


def _refusal(reason: RejectReason, detail: str, code: int) -> _Refusal:
    return _Refusal(Rejected(reason, detail), int(code))


class _StreamSession:
    """One WebSocket media stream's protocol state: ``handle`` takes each frame and returns
    None (go on), ``_STREAM_DONE`` or a ``_Refusal`` (close with its code)."""

    def __init__(self, gateway: IngressGateway) -> None:
        self.gateway = gateway
        self.live: _LiveCall | None = None

    def handle(self, message: WSMessage) -> _Refusal | object | None:
        raise NotImplementedError


class _TwilioSession(_StreamSession):
    def __init__(self, gateway: IngressGateway, *, needs_token: bool) -> None:
        super().__init__(gateway)
        self._needs_token = needs_token
        self._channels: dict[str, str] = {}
        self._feeds: dict[str, TimestampedFeed] = {}

    def handle(self, message: WSMessage) -> _Refusal | object | None:
        if message.type is not WSMsgType.TEXT:
            return _refusal(RejectReason.BAD_MESSAGE, "binary frame", WSCloseCode.UNSUPPORTED_DATA)
        parsed = parse_twilio(message.data)
        if isinstance(parsed, Rejected):
            return _Refusal(parsed, int(WSCloseCode.INVALID_TEXT))
        if isinstance(parsed, TwilioStart):
            return self._start(parsed)
        if isinstance(parsed, TwilioMedia):
            return self._media(parsed)
        if isinstance(parsed, TwilioStop):
            return _STREAM_DONE
        if parsed.event == "dtmf" and self.live is not None and parsed.digit:
            track = parsed.track.removesuffix("_track")
            label = self._channels.get(track, next(iter(self._channels.values())))
            self.gateway._dtmf_notice(self.live, label, parsed.digit, 0, "twilio")
        return None

    def _start(self, start: TwilioStart) -> _Refusal | None:
        gateway = self.gateway
        if self.live is not None:
            return _refusal(RejectReason.BAD_MESSAGE, "a second start", WSCloseCode.PROTOCOL_ERROR)
        if self._needs_token and not gateway._token_ok(start.custom_parameters.get("token", "")):
            return _refusal(
                RejectReason.UNAUTHORIZED, "no valid token", WSCloseCode.POLICY_VIOLATION
            )
        self._channels = twilio_channels(start.tracks)
        opened = gateway._open(
            start.custom_parameters.get("call_id", start.call_sid),
            start.custom_parameters.get("tenant", gateway._default_tenant),
            tuple(self._channels.values()),
            Encoding.MULAW,
            TWILIO_SAMPLE_RATE_HZ,
            "twilio",
        )
        if isinstance(opened, Rejected):
            return _Refusal(opened, _close_code(opened))
        self.live = opened
        self._feeds = {
            label: TimestampedFeed(TWILIO_SAMPLE_RATE_HZ, silence_of(Encoding.MULAW))
            for label in self._channels.values()
        }
        return None

    def _media(self, media: TwilioMedia) -> _Refusal | None:
        gateway = self.gateway
        if self.live is None:
            return _refusal(
                RejectReason.MEDIA_BEFORE_START, "media before start", WSCloseCode.PROTOCOL_ERROR
            )
        label = self._channels.get(media.track)
        if label is None:
            gateway._reject(Rejected(RejectReason.BAD_MESSAGE, "track not started"), "ws/twilio")
            return None
        feed = self._feeds[label]
        before = feed.filled_samples
        audio = feed.push(media.timestamp_ms, media.payload, gateway._settings.max_gap_ms)
        if feed.filled_samples > before:
            gateway.metrics.gap_filled.labels("twilio").inc(
                (feed.filled_samples - before) / TWILIO_SAMPLE_RATE_HZ
            )
        # The stream's timestamps place each track on the call's timeline: no lead-in by arrival.
        gateway._push(self.live, label, audio, gateway._clock.now_ms(), lead_in_by_arrival=False)
        return None


class _ForkSession(_StreamSession):
    def __init__(self, gateway: IngressGateway, query: dict[str, str]) -> None:
        super().__init__(gateway)
        self._query = query
        self._channels: tuple[str, ...] = ()

    def handle(self, message: WSMessage) -> _Refusal | object | None:
        if message.type is WSMsgType.TEXT:
            return None if self.live is not None else self._start(message.data)
        if message.type is not WSMsgType.BINARY:
            return None
        if self.live is None:
            return _refusal(
                RejectReason.MEDIA_BEFORE_START, "audio before metadata", WSCloseCode.PROTOCOL_ERROR
            )
        data: bytes = message.data
        if len(data) % (2 * len(self._channels)):
            return _refusal(
                RejectReason.BAD_PAYLOAD, f"{len(data)} bytes", WSCloseCode.UNSUPPORTED_DATA
            )
        now_ms = self.gateway._clock.now_ms()
        if len(self._channels) == 1:
            self.gateway._push(self.live, self._channels[0], data, now_ms)
            return None
        frames = np.frombuffer(data, dtype="<i2").reshape(-1, len(self._channels))
        for index, label in enumerate(self._channels):
            column = np.ascontiguousarray(frames[:, index]).tobytes()
            self.gateway._push(self.live, label, column, now_ms)
        return None

    def _start(self, text: str) -> _Refusal | None:
        gateway = self.gateway
        parsed = parse_fork_metadata(text, self._query, SUPPORTED_SAMPLE_RATES_HZ)
        if isinstance(parsed, Rejected):
            return _Refusal(parsed, int(WSCloseCode.INVALID_TEXT))
        opened = gateway._open(
            parsed.call_id,
            parsed.tenant or gateway._default_tenant,
            parsed.channels,
            Encoding.PCM_S16LE,
            parsed.sample_rate_hz,
            "fork",
        )
        if isinstance(opened, Rejected):
            return _Refusal(opened, _close_code(opened))
        self.live, self._channels = opened, parsed.channels
        return None
