"""The SIP shell of the gateway: UDP and TCP sockets around the pure ``SipUas``.

Each datagram (or each message the TCP framer cuts) is handled to its end in one callback:
the source is checked against ``ingress.allowed_networks`` (outside it: dropped, counted
``unexpected_source``, never answered), the UAS core turns it into an ``Outcome``, and the
outcome is carried out: messages sent, a new call opened on the gateway (its RTP ports bound
the way ``POST /v1/calls`` binds them, then the 200 OK), an open call updated (re-INVITE) or
ended (BYE, CANCEL), a refusal counted by reason. A bug in one message's handling is logged
and that message dropped; the sockets and every other call go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
from typing import TYPE_CHECKING, Any

from pipeline.errors import ConfigError
from pipeline.ingress.calls import ChannelSpec, SourcePolicy
from pipeline.ingress.rtp import Rejected, RejectReason
from pipeline.ingress.sip import SipStreamFramer
from pipeline.ingress.siprec import AgentRule
from pipeline.ingress.uas import CallPlan, ChannelPlan, Outcome, Peer, SipUas, UasConfig
from pipeline.settings import IngressSettings, env_variable

if TYPE_CHECKING:
    from pipeline.ingress.server import IngressGateway, _LiveCall

__all__ = ["SIP_TRANSPORTS", "SipServer"]

logger = logging.getLogger(__name__)

SIP_TRANSPORTS = ("sip", "siprec")
"""The ``transport`` of calls that came by SIP (plain, and SIPREC recordings)."""
_NO_DTMF = -1
"""A telephone-event payload type no packet has (the offer had none)."""
_BIND_TRIES = 20


class SipServer:
    """SIP over UDP and TCP on one port, for one gateway."""

    def __init__(
        self,
        gateway: IngressGateway,
        settings: IngressSettings,
        policy: SourcePolicy,
        agent_rule: AgentRule,
    ) -> None:
        self._gateway = gateway
        self._settings = settings
        self._policy = policy
        self._uas: SipUas | None = None
        self._agent_rule = agent_rule
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self._connections: dict[int, asyncio.StreamWriter] = {}
        self._connection_ids = itertools.count(1)
        self._pending: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def uas(self) -> SipUas:
        assert self._uas is not None, "start() first"
        return self._uas

    async def start(self) -> None:
        """Bind UDP, then TCP on the same port (with port 0: a free one for both)."""
        loop = asyncio.get_running_loop()
        bind = self._settings.sip_bind
        for _ in range(_BIND_TRIES):
            try:
                udp, _ = await loop.create_datagram_endpoint(
                    lambda: _SipDatagrams(self), local_addr=(bind, self._settings.sip_port)
                )
            except OSError as error:
                raise ConfigError(
                    f"SIP cannot bind udp {bind}:{self._settings.sip_port} ({error.strerror}); "
                    f"set {env_variable(IngressSettings, 'sip_port')} or "
                    f"{env_variable(IngressSettings, 'sip_enabled')}=false"
                ) from None
            port = int(udp.get_extra_info("sockname")[1])
            try:
                self._tcp = await asyncio.start_server(self._serve_connection, bind, port)
            except OSError as error:
                udp.close()
                if self._settings.sip_port:
                    raise ConfigError(
                        f"SIP cannot bind tcp {bind}:{port} ({error.strerror})"
                    ) from None
                continue  # the free UDP port is taken on TCP: another free one
            self._udp, self.port = udp, port
            break
        else:
            raise ConfigError("no port is free for SIP on both UDP and TCP")
        self._uas = SipUas(UasConfig(self.port, self._gateway._default_tenant, self._agent_rule))
        logger.debug("SIP on %s:%d (UDP and TCP)", bind, self.port)  # the command prints it

    async def stop(self) -> None:
        for task in list(self._pending):
            task.cancel()
        if self._tcp is not None:
            self._tcp.close()
        for writer in list(self._connections.values()):
            writer.close()
        if self._tcp is not None:
            with contextlib.suppress(Exception):
                await self._tcp.wait_closed()
        if self._udp is not None:
            self._udp.close()

    def tick(self, now_ms: int) -> None:
        if self._uas is not None:
            self._carry_out(self._uas.tick(now_ms))

    def hang_up(self, call_id: str) -> None:
        if self._uas is not None:
            self._carry_out(self._uas.hang_up(call_id))

    # -- messages in ------------------------------------------------------------------------

    def message(self, data: bytes, peer: Peer) -> None:
        """One SIP message from ``peer`` (see the module docstring)."""
        if not self._policy.allows(peer.address[0]):
            self._gateway._reject(
                Rejected(RejectReason.UNEXPECTED_SOURCE, f"{peer.address[0]} is not allowed"),
                f"sip/{peer.transport}",
            )
            return
        try:
            self._carry_out(self.uas.receive(data, peer, self._gateway._clock.now_ms()))
        except Exception:  # a bug must not stop the socket: logged, the message is dropped
            logger.exception("SIP message from %s dropped", peer.address)

    def _carry_out(self, outcome: Outcome) -> None:
        for send in outcome.sends:
            self._send(send.data, send.peer)
        if outcome.rejected is not None:
            self._gateway._reject(outcome.rejected, "sip")
        if outcome.start is not None:
            task = asyncio.get_running_loop().create_task(self._start_call_safely(outcome.start))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
        if outcome.update is not None:
            self._update_call(outcome.update)
        for call_id, why in outcome.ended:
            self._gateway._end_call(call_id, why)

    def _send(self, data: bytes, peer: Peer) -> None:
        if peer.transport == "udp":
            if self._udp is not None:
                self._udp.sendto(data, peer.address)
            return
        writer = self._connections.get(peer.connection)
        if writer is None or writer.is_closing():
            logger.info("SIP connection to %s is gone; a message was not sent", peer.address)
            return
        writer.write(data)

    # -- calls ------------------------------------------------------------------------------

    async def _start_call_safely(self, plan: CallPlan) -> None:
        """``_start_call``; a bug in it still answers the INVITE (500) and frees the call."""
        try:
            await self._start_call(plan)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("SIP call %s could not be started", plan.call_id)
            self._gateway._end_call(plan.call_id, "failed to start")
            rejected = Rejected(RejectReason.BAD_MESSAGE, "internal error")
            self._carry_out(
                self.uas.refuse(plan.call_id, 500, rejected, self._gateway._clock.now_ms())
            )

    async def _start_call(self, plan: CallPlan) -> None:
        gateway = self._gateway
        first = plan.channels[0].chosen
        kind = "siprec" if plan.recording_session_id is not None else "sip"
        specs = [_spec(channel) for channel in plan.channels]
        now_ms = gateway._clock.now_ms()
        if gateway._stopping:
            self._carry_out(
                self.uas.refuse(
                    plan.call_id, 503, Rejected(RejectReason.CALL_LIMIT, "shutting down"), now_ms
                )
            )
            return
        if len(specs) > gateway._registry.free_ports:
            rejected = Rejected(RejectReason.CALL_LIMIT, "no free RTP port")
            self._carry_out(self.uas.refuse(plan.call_id, 503, rejected, now_ms))
            return
        opened = gateway._open(
            plan.call_id,
            plan.tenant,
            tuple(c.label for c in plan.channels),
            first.codec.encoding,
            first.sample_rate_hz,
            kind,
            _detail(plan),
        )
        if isinstance(opened, Rejected):
            status = 503 if opened.reason is RejectReason.CALL_LIMIT else 400
            self._carry_out(self.uas.refuse(plan.call_id, status, opened, now_ms))
            return
        try:
            ports = await gateway._bind_ports(opened, specs)
        except OSError as error:
            gateway._end_call(plan.call_id, "no port could be bound")
            rejected = Rejected(RejectReason.CALL_LIMIT, f"no RTP port: {error}")
            self._carry_out(self.uas.refuse(plan.call_id, 503, rejected, gateway._clock.now_ms()))
            return
        opened.call.held = plan.on_hold
        host = self._media_host(plan)
        self._carry_out(self.uas.accept(plan.call_id, ports, host, gateway._clock.now_ms()))

    def _update_call(self, plan: CallPlan) -> None:
        live: _LiveCall | None = self._gateway._live.get(plan.call_id)
        if live is None:
            return
        for channel in plan.channels:
            entry = live.receivers.get(channel.label)
            if entry is not None:
                entry[0].renegotiate(_spec(channel))
        live.call.held = plan.on_hold
        live.call.last_media_ms = self._gateway._clock.now_ms()  # the idle timeout restarts

    def _media_host(self, plan: CallPlan) -> str:
        """Where the offerer sends RTP: ``ingress.advertised_host``, else the RTP bind address
        when it is one, else the local address that routes to the offer's media host."""
        settings = self._settings
        if settings.advertised_host:
            return settings.advertised_host
        if settings.rtp_bind not in ("0.0.0.0", "::", ""):
            return settings.rtp_bind
        remote = plan.channels[0].source_host or "127.0.0.1"
        family = socket.AF_INET6 if ":" in remote else socket.AF_INET
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as probe:
                probe.connect((remote, 9))  # no packet is sent: this only picks the route
                return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.1"

    # -- TCP --------------------------------------------------------------------------------

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        address = writer.get_extra_info("peername")
        peer = Peer("tcp", (str(address[0]), int(address[1])), next(self._connection_ids))
        if not self._policy.allows(peer.address[0]):
            self._gateway._reject(
                Rejected(RejectReason.UNEXPECTED_SOURCE, f"{peer.address[0]} is not allowed"),
                "sip/tcp",
            )
            writer.close()
            return
        self._connections[peer.connection] = writer
        framer = SipStreamFramer()
        try:
            while not reader.at_eof():
                data = await reader.read(65_536)
                if not data:
                    break
                for message in framer.feed(data):
                    self.message(message, peer)
                if framer.failed is not None:
                    self._gateway._reject(Rejected(RejectReason.BAD_SIP, framer.failed), "sip/tcp")
                    break
        except ConnectionError:
            pass
        finally:
            self._connections.pop(peer.connection, None)
            writer.close()


class _SipDatagrams(asyncio.DatagramProtocol):
    def __init__(self, server: SipServer) -> None:
        self._server = server

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        if data.strip(b"\r\n") == b"":
            return  # a keep-alive (RFC 5626 §3.5.1): nothing to answer
        self._server.message(data, Peer("udp", (str(addr[0]), int(addr[1]))))

    def error_received(self, exc: Exception) -> None:
        logger.debug("SIP socket: %s", exc)


def _spec(channel: ChannelPlan) -> ChannelSpec:
    chosen = channel.chosen
    dtmf = chosen.dtmf_payload_type if chosen.dtmf_payload_type is not None else _NO_DTMF
    return ChannelSpec(
        channel.label, chosen.codec, chosen.sample_rate_hz, chosen.payload_type, dtmf
    )


def _detail(plan: CallPlan) -> dict[str, Any]:
    """What ``ingress_call_started`` says of a SIP call: codecs, and SIPREC's mapping."""
    channels: dict[str, dict[str, Any]] = {}
    for channel in plan.channels:
        entry: dict[str, Any] = {
            "codec": channel.chosen.codec.value,
            "payload_type": channel.chosen.payload_type,
        }
        if channel.participant is not None:
            entry.update(
                stream_label=channel.stream_label,
                participant_id=channel.participant.participant_id,
                aor=channel.participant.aor,
                name=channel.participant.name,
                agent=bool(channel.is_agent),
            )
        channels[channel.label] = entry
    detail: dict[str, Any] = {"streams": channels}
    if plan.recording_session_id is not None:
        detail["recording_session_id"] = plan.recording_session_id
    return detail
