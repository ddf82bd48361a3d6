"""The SIP user agent server's core (RFC 3261 §8.2, §12, §13.3, §17.2): messages in, actions out.

Pure and deterministic: no sockets, no clock of its own. The shell hands each message in with
its ``Peer`` and the time (``receive``), says when the media ports of a new call are ready
(``accept``) or why the call cannot be had (``refuse``), calls ``tick`` every few tens of
milliseconds for the retransmission timers, and carries out each ``Outcome``: the messages to
send, the call to open, update or end, and the refusal to count.

Contracts:

- **Transactions by branch** (§17.2.3): a request whose top Via's branch, sent-by and method
  (ACK counts as INVITE) match a transaction already seen is a retransmission: it is answered
  with that transaction's last response and does nothing else. Transactions are forgotten
  64·T1 (32 s) after their final response.
- **Reliable 2xx** (§13.3.1.4): over UDP, the 200 OK to an INVITE is sent again at T1, 2·T1, …
  (at most T2 apart) until its ACK arrives; after 64·T1 without one the call ends. A non-2xx
  final response to an INVITE is retransmitted the same way until its ACK (§17.2.1).
- **One dialog per Call-ID**: we are the only UAS and never fork, so the Call-ID names the
  dialog and is the call id published on audio.chunks. A second INVITE without a To tag for a
  Call-ID already in use is a merged request (482, §8.2.2.2).
- **A media sink.** The answer takes what we decode (PCMU, PCMA, L16 mono, and the offer's
  telephone-event) and never sends media (``recvonly``). A plain INVITE's first audio stream we
  take is channel ``mono``; a SIPREC INVITE's streams are mapped by ``pipeline.ingress.siprec``.
- **CANCEL** of an INVITE not yet answered: 200 to the CANCEL, 487 to the INVITE, and the
  call ends (``accept`` afterwards only ends it). **BYE**: 200, the call ends. **re-INVITE**:
  the same channels continue with the new codec, source and direction (hold), answered at once.
- Every refusal carries the ``Rejected`` reason the shell counts.
"""

from __future__ import annotations

import secrets
from collections import deque
from dataclasses import dataclass, field

from pipeline.ingress.rtp import Rejected, RejectReason
from pipeline.ingress.sdp import (
    ChosenCodec,
    Direction,
    MediaAnswer,
    SessionDescription,
    build_answer,
    choose_codec,
    parse_sdp,
)
from pipeline.ingress.sip import (
    SipRequest,
    SipResponse,
    build_response,
    parse_sip,
    try_headers,
)
from pipeline.ingress.siprec import (
    METADATA_CONTENT_TYPE,
    AgentRule,
    Participant,
    map_streams,
    parse_metadata,
    split_multipart,
)

__all__ = ["CallPlan", "ChannelPlan", "Outcome", "Peer", "Send", "SipUas", "UasConfig"]

T1_MS = 500
T2_MS = 4000
TRANSACTION_LIFETIME_MS = 64 * T1_MS
MAX_TRANSACTIONS = 20_000
"""Transactions remembered at once (each for 32 s): past it, new requests are dropped (a flood
must not grow memory; a call needs a handful of transactions)."""
MONO_CHANNEL = "mono"
ALLOW = "INVITE, ACK, CANCEL, BYE, OPTIONS"
ACCEPT = "application/sdp, multipart/mixed"
SIPREC = "siprec"


@dataclass(frozen=True, slots=True)
class Peer:
    """Where a message came from and where its answers go: UDP answers go to the source
    address (symmetric response routing, RFC 3581), TCP answers down the same connection."""

    transport: str
    """``udp`` or ``tcp``."""
    address: tuple[str, int]
    connection: int = 0
    """The TCP connection's id in the shell (0 for UDP)."""

    @property
    def reliable(self) -> bool:
        return self.transport != "udp"


@dataclass(frozen=True, slots=True)
class Send:
    data: bytes
    peer: Peer


@dataclass(frozen=True, slots=True)
class ChannelPlan:
    """One channel of a SIP call: the ``m=`` line it is, its codec, and (SIPREC) who speaks."""

    label: str
    media_index: int
    chosen: ChosenCodec
    source_host: str | None
    """The offer's connection address for this stream (where its RTP should come from)."""
    direction: Direction
    stream_label: str | None = None
    participant: Participant | None = None
    is_agent: bool | None = None


@dataclass(frozen=True, slots=True)
class CallPlan:
    call_id: str
    tenant: str
    channels: tuple[ChannelPlan, ...]
    recording_session_id: str | None = None
    """The SIPREC metadata's session id; None for a plain call."""

    @property
    def on_hold(self) -> bool:
        """No channel is sent to us (the offer said sendonly-to-nobody or inactive)."""
        return all(c.direction is Direction.INACTIVE for c in self.channels) or all(
            c.source_host in ("0.0.0.0", "::") for c in self.channels
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    sends: tuple[Send, ...] = ()
    start: CallPlan | None = None
    """A new call to open; then ``accept`` (ports bound) or ``refuse``."""
    update: CallPlan | None = None
    """An open call whose media changed (re-INVITE): same channels, new codec/source/hold."""
    ended: tuple[tuple[str, str], ...] = ()
    """(call id, why) of each call that ended."""
    rejected: Rejected | None = None

    def __add__(self, other: Outcome) -> Outcome:
        return Outcome(
            self.sends + other.sends,
            self.start or other.start,
            self.update or other.update,
            self.ended + other.ended,
            self.rejected or other.rejected,
        )


@dataclass(frozen=True, slots=True)
class UasConfig:
    sip_port: int
    """Our SIP port (in Contact and Via; the host is each call's, given to ``accept``)."""
    default_tenant: str
    agent_rule: AgentRule = field(default_factory=lambda: AgentRule(()))
    user_agent: str = "streamscribe-ingress"


@dataclass(slots=True)
class _Transaction:
    key: tuple[str, str, str]
    method: str
    request: SipRequest
    peer: Peer
    response: bytes | None = None
    status: int = 0
    finished_ms: int | None = None
    retransmit_ms: int | None = None
    """When the unacknowledged final response goes out again (INVITE over UDP)."""
    interval_ms: int = T1_MS


@dataclass(slots=True)
class _Dialog:
    call_id: str
    local_tag: str
    remote_tag: str
    invite: SipRequest
    peer: Peer
    plan: CallPlan | None = None
    offer: SessionDescription | None = None
    confirmed: bool = False
    answered: bool = False
    cancelled: bool = False
    invite_key: tuple[str, str, str] = ("", "", "")
    sdp_version: int = 0
    session_id: int = field(default_factory=lambda: secrets.randbelow(1 << 31))
    local_cseq: int = 0
    ports: dict[str, int] = field(default_factory=dict)
    host: str = ""


@dataclass(frozen=True, slots=True)
class _Refused:
    """A request the core refuses: the status, its phrase and the reason counted."""

    status: int
    phrase: str
    rejected: Rejected


def _sip_error(
    request: SipRequest,
    status: int,
    reason_phrase: str,
    rejected: Rejected,
    peer: Peer,
    *,
    extra: tuple[tuple[str, str], ...] = (),
) -> tuple[bytes, Rejected]:
    headers = (("Warning", f'399 streamscribe "{rejected.detail[:120]}"'), *extra)
    return build_response(
        request, status, reason_phrase, to_tag=_tag(), source=peer.address, headers=headers
    ), rejected


def _tag() -> str:
    return secrets.token_hex(6)


class SipUas:
    """One UAS for every SIP transport of the gateway (see the module docstring)."""

    def __init__(self, config: UasConfig) -> None:
        self._config = config
        self._transactions: dict[tuple[str, str, str], _Transaction] = {}
        self._retransmitting: dict[tuple[str, str, str], _Transaction] = {}
        self._expiries: deque[tuple[int, _Transaction]] = deque()
        """(when to forget it, transaction), in the order their final responses went out."""
        self._dialogs: dict[str, _Dialog] = {}

    @property
    def dialogs(self) -> int:
        return len(self._dialogs)

    # -- messages in ------------------------------------------------------------------------

    def receive(self, data: bytes, peer: Peer, now_ms: int) -> Outcome:
        """Handle one message. A message that does not parse is answered 400 when its headers
        say where to (an ACK never is), and is counted ``bad_sip`` either way."""
        message = parse_sip(data)
        if isinstance(message, Rejected):
            request = try_headers(data)
            if request is None:
                return Outcome(rejected=message)
            response, rejected = _sip_error(request, 400, "Bad Request", message, peer)
            return Outcome((Send(response, peer),), rejected=rejected)
        if isinstance(message, SipResponse):
            return Outcome()  # answers to our BYEs: nothing to do with them
        key = message.transaction_key()
        if message.method == "ACK":
            return self._ack(message, key)
        known = self._transactions.get(key)
        if known is not None:  # a retransmission: the same answer again
            if known.response is None:
                return Outcome()
            return Outcome((Send(known.response, peer),))
        if len(self._transactions) >= MAX_TRANSACTIONS:
            return Outcome(rejected=Rejected(RejectReason.CALL_LIMIT, "too many transactions"))
        transaction = _Transaction(key, message.method, message, peer)
        self._transactions[key] = transaction
        if message.method == "INVITE":
            return self._invite(message, key, transaction, now_ms)
        if message.method == "CANCEL":
            outcome = self._cancel(message, key, now_ms)
        elif message.method == "BYE":
            outcome = self._bye(message, peer)
        elif message.method == "OPTIONS":
            outcome = self._respond(
                message,
                peer,
                200,
                "OK",
                headers=(("Allow", ALLOW), ("Accept", ACCEPT), ("Supported", self._supported())),
            )
        else:
            outcome = self._respond(message, peer, 405, "Method Not Allowed", (("Allow", ALLOW),))
        self._finish(transaction, outcome, now_ms)
        return outcome

    def _supported(self) -> str:
        return SIPREC if self._config.agent_rule.enabled else ""

    def _respond(
        self,
        request: SipRequest,
        peer: Peer,
        status: int,
        reason_phrase: str,
        headers: tuple[tuple[str, str], ...] = (),
        *,
        to_tag: str = "",
    ) -> Outcome:
        response = build_response(
            request,
            status,
            reason_phrase,
            to_tag=to_tag or (_tag() if status > 100 else ""),
            source=peer.address,
            headers=(("Server", self._config.user_agent), *headers),
        )
        return Outcome((Send(response, peer),))

    def _finish(self, transaction: _Transaction, outcome: Outcome, now_ms: int) -> None:
        """Remember a non-INVITE transaction's final answer for its retransmissions."""
        if outcome.sends:
            transaction.response = outcome.sends[-1].data
        transaction.finished_ms = now_ms
        self._expiries.append((now_ms + TRANSACTION_LIFETIME_MS, transaction))

    def _stop_retransmitting(self, transaction: _Transaction) -> None:
        transaction.retransmit_ms = None
        self._retransmitting.pop(transaction.key, None)

    def _ack(self, ack: SipRequest, key: tuple[str, str, str]) -> Outcome:
        transaction = self._transactions.get(key)
        if transaction is not None and transaction.status >= 300:
            self._stop_retransmitting(transaction)  # a non-2xx's ACK: its transaction (§17.2.1)
            return Outcome()
        dialog = self._dialogs.get(ack.call_id)
        if dialog is None or ack.tag("to") != dialog.local_tag:
            return Outcome()  # an ACK of nothing we know is dropped, never answered
        number, _ = ack.cseq
        invite = self._transactions.get(dialog.invite_key)
        if invite is not None and invite.request.cseq[0] == number:
            self._stop_retransmitting(invite)
        dialog.confirmed = True
        return Outcome()

    # -- INVITE ---------------------------------------------------------------------------

    def _invite(
        self,
        invite: SipRequest,
        key: tuple[str, str, str],
        transaction: _Transaction,
        now_ms: int,
    ) -> Outcome:
        if invite.tag("to"):
            return self._reinvite(invite, key, transaction, now_ms)
        peer = transaction.peer
        unsupported = invite.option_tags("require") - ({SIPREC} if self._supported() else set())
        if unsupported:
            return self._final(
                transaction,
                now_ms,
                *_sip_error(
                    invite,
                    420,
                    "Bad Extension",
                    Rejected(RejectReason.UNSUPPORTED_EXTENSION, ", ".join(sorted(unsupported))),
                    peer,
                    extra=(("Unsupported", ", ".join(sorted(unsupported))),),
                ),
            )
        if invite.call_id in self._dialogs:
            rejected = Rejected(RejectReason.BAD_SIP, f"Call-ID {invite.call_id!r} is in use")
            return self._final(
                transaction, now_ms, *_sip_error(invite, 482, "Loop Detected", rejected, peer)
            )
        plan = self._plan(invite, None)
        if isinstance(plan, _Refused):
            extra = (("Accept", ACCEPT),) if plan.status == 415 else ()
            return self._final(
                transaction,
                now_ms,
                *_sip_error(invite, plan.status, plan.phrase, plan.rejected, peer, extra=extra),
            )
        call_plan, offer = plan
        dialog = _Dialog(invite.call_id, _tag(), invite.tag("from"), invite, peer, call_plan, offer)
        dialog.invite_key = key
        self._dialogs[invite.call_id] = dialog
        trying = build_response(invite, 100, "Trying", source=peer.address)
        transaction.response = trying
        transaction.status = 100
        return Outcome((Send(trying, peer),), start=call_plan)

    def _plan(
        self, invite: SipRequest, dialog: _Dialog | None
    ) -> tuple[CallPlan, SessionDescription] | _Refused:
        """The channels an INVITE (or re-INVITE of ``dialog``) asks for, or the refusal."""
        content_type = invite.content_type
        metadata_part: bytes | None = None
        sdp_part: bytes | None = None
        if content_type == "application/sdp":
            sdp_part = invite.body
        elif content_type == "multipart/mixed":
            parts = split_multipart(invite.header("content-type") or "", invite.body)
            if isinstance(parts, Rejected):
                return _Refused(400, "Bad Request", parts)
            for part in parts:
                if part.content_type == "application/sdp" and sdp_part is None:
                    sdp_part = part.body
                elif part.content_type == METADATA_CONTENT_TYPE and metadata_part is None:
                    metadata_part = part.body
        elif not invite.body:
            return _Refused(
                488,
                "Not Acceptable Here",
                Rejected(RejectReason.BAD_SDP, "no SDP offer (an offer in the INVITE is required)"),
            )
        else:
            return _Refused(
                415,
                "Unsupported Media Type",
                Rejected(RejectReason.UNSUPPORTED_BODY, f"body of type {content_type!r}"),
            )
        if sdp_part is None:
            return _Refused(
                415,
                "Unsupported Media Type",
                Rejected(RejectReason.UNSUPPORTED_BODY, "a multipart body without application/sdp"),
            )
        offer = parse_sdp(sdp_part.decode("utf-8", "replace"))
        if isinstance(offer, Rejected):
            return _Refused(400, "Bad Request", offer)
        recording = SIPREC in invite.option_tags("require") or metadata_part is not None
        if dialog is not None and dialog.plan is not None:
            recording = dialog.plan.recording_session_id is not None
        rates = (dialog.plan.channels[0].chosen.sample_rate_hz,) if dialog and dialog.plan else ()
        if rates == () and not recording:
            chosen_all = [choose_codec(m) for m in offer.media]
        else:
            first = next((c for c in map(choose_codec, offer.media) if c is not None), None)
            rate = rates or ((first.sample_rate_hz,) if first is not None else ())
            chosen_all = [choose_codec(m, rate) for m in offer.media]
        taken = [i for i, chosen in enumerate(chosen_all) if chosen is not None]
        if not taken:
            return _Refused(
                488,
                "Not Acceptable Here",
                Rejected(
                    RejectReason.NO_COMMON_CODEC, "no PCMU, PCMA or mono L16 at 8/16 kHz offered"
                ),
            )
        tenant = invite.header("x-streamscribe-tenant") or self._config.default_tenant
        if dialog is not None and dialog.plan is not None:
            tenant = dialog.plan.tenant
        if not recording:
            index = taken[0]
            if dialog is not None and dialog.plan is not None:
                index = next((i for i in taken if i == dialog.plan.channels[0].media_index), index)
            media = offer.media[index]
            chosen = chosen_all[index]
            assert chosen is not None
            channel = ChannelPlan(MONO_CHANNEL, index, chosen, media.connection, media.direction)
            return CallPlan(invite.call_id, tenant, (channel,)), offer
        return self._recording_plan(invite, dialog, offer, chosen_all, taken, metadata_part, tenant)

    def _recording_plan(
        self,
        invite: SipRequest,
        dialog: _Dialog | None,
        offer: SessionDescription,
        chosen_all: list[ChosenCodec | None],
        taken: list[int],
        metadata_part: bytes | None,
        tenant: str,
    ) -> tuple[CallPlan, SessionDescription] | _Refused:
        previous = dialog.plan if dialog is not None else None
        if metadata_part is None:
            if previous is None:
                return _Refused(
                    400,
                    "Bad Request",
                    Rejected(
                        RejectReason.SIPREC_NO_METADATA,
                        f"a SIPREC INVITE without {METADATA_CONTENT_TYPE}",
                    ),
                )
            # A re-INVITE without new metadata keeps the mapping: by label, as before.
            by_label = {c.stream_label: c for c in previous.channels}
            channels = []
            for index in taken:
                media = offer.media[index]
                known = by_label.get(media.label)
                chosen = chosen_all[index]
                if known is not None and chosen is not None:
                    channels.append(
                        ChannelPlan(
                            known.label,
                            index,
                            chosen,
                            media.connection,
                            media.direction,
                            media.label,
                            known.participant,
                            known.is_agent,
                        )
                    )
            if not channels:
                return _Refused(
                    488,
                    "Not Acceptable Here",
                    Rejected(
                        RejectReason.SIPREC_UNKNOWN_LABEL, "no stream of the recording is offered"
                    ),
                )
            return CallPlan(
                invite.call_id, tenant, tuple(channels), previous.recording_session_id
            ), offer
        metadata = parse_metadata(metadata_part)
        if isinstance(metadata, Rejected):
            return _Refused(400, "Bad Request", metadata)
        assignments = map_streams(offer.media, taken, metadata, self._config.agent_rule)
        if isinstance(assignments, Rejected):
            return _Refused(488, "Not Acceptable Here", assignments)
        channels = []
        for assignment in assignments:
            media = offer.media[assignment.media_index]
            chosen = chosen_all[assignment.media_index]
            assert chosen is not None
            channels.append(
                ChannelPlan(
                    assignment.channel,
                    assignment.media_index,
                    chosen,
                    media.connection,
                    media.direction,
                    assignment.label,
                    assignment.participant,
                    assignment.is_agent,
                )
            )
        if previous is not None and {c.label for c in channels} != {
            c.label for c in previous.channels
        }:
            return _Refused(
                488,
                "Not Acceptable Here",
                Rejected(
                    RejectReason.SIPREC_UNKNOWN_LABEL,
                    "a re-INVITE changes the recording's channels",
                ),
            )
        return CallPlan(invite.call_id, tenant, tuple(channels), metadata.session_id), offer

    def _final(
        self, transaction: _Transaction, now_ms: int, response: bytes, rejected: Rejected | None
    ) -> Outcome:
        """Send a final response to an INVITE (retransmitted until ACK over UDP)."""
        transaction.response = response
        transaction.status = int(response.split(b" ", 2)[1])
        transaction.finished_ms = now_ms
        self._expiries.append((now_ms + TRANSACTION_LIFETIME_MS, transaction))
        if not transaction.peer.reliable:
            transaction.retransmit_ms = now_ms + T1_MS
            transaction.interval_ms = T1_MS
            self._retransmitting[transaction.key] = transaction
        return Outcome((Send(response, transaction.peer),), rejected=rejected)

    def accept(self, call_id: str, ports: dict[str, int], host: str, now_ms: int) -> Outcome:
        """The shell opened ``call_id`` and bound ``ports`` (channel → port) on ``host``: the
        200 OK with the answer. A call cancelled meanwhile only ends."""
        dialog = self._dialogs.get(call_id)
        if dialog is None or dialog.cancelled:
            return Outcome(ended=((call_id, "cancelled"),))
        transaction = self._transactions.get(dialog.invite_key)
        if transaction is None:
            self._dialogs.pop(call_id, None)
            return Outcome(ended=((call_id, "transaction gone"),))
        dialog.ports, dialog.host, dialog.answered = dict(ports), host, True
        return self._final(transaction, now_ms, self._ok_with_answer(dialog, dialog.invite), None)

    def _ok_with_answer(self, dialog: _Dialog, invite: SipRequest) -> bytes:
        assert dialog.plan is not None
        assert dialog.offer is not None
        by_index = {c.media_index: c for c in dialog.plan.channels}
        answers: list[MediaAnswer | None] = []
        for index in range(len(dialog.offer.media)):
            channel = by_index.get(index)
            port = dialog.ports.get(channel.label) if channel is not None else None
            answers.append(
                None if channel is None or port is None else MediaAnswer(port, channel.chosen)
            )
        dialog.sdp_version += 1
        body = build_answer(
            dialog.offer,
            answers,
            host=dialog.host,
            session_id=dialog.session_id,
            version=dialog.sdp_version,
        ).encode()
        transport = "" if dialog.peer.transport == "udp" else f";transport={dialog.peer.transport}"
        contact = f"<sip:streamscribe@{_uri_host(dialog.host)}:{self._config.sip_port}{transport}>"
        headers = [
            ("Contact", contact),
            ("Allow", ALLOW),
            ("Server", self._config.user_agent),
        ]
        if self._supported():
            headers.append(("Supported", SIPREC))
        return build_response(
            invite,
            200,
            "OK",
            to_tag=dialog.local_tag,
            source=dialog.peer.address,
            headers=tuple(headers),
            body=body,
            content_type="application/sdp",
        )

    def refuse(self, call_id: str, status: int, rejected: Rejected, now_ms: int) -> Outcome:
        """The shell could not open ``call_id`` (call limit, no port): a final error."""
        dialog = self._dialogs.pop(call_id, None)
        if dialog is None or dialog.cancelled:
            return Outcome(rejected=rejected)
        transaction = self._transactions.get(dialog.invite_key)
        if transaction is None:
            return Outcome(rejected=rejected)
        phrase = {503: "Service Unavailable", 400: "Bad Request"}.get(
            status, "Server Internal Error"
        )
        extra = (("Retry-After", "5"),) if status == 503 else ()
        response, _ = _sip_error(dialog.invite, status, phrase, rejected, dialog.peer, extra=extra)
        return self._final(transaction, now_ms, response, rejected)

    def _reinvite(
        self, invite: SipRequest, key: tuple[str, str, str], transaction: _Transaction, now_ms: int
    ) -> Outcome:
        dialog = self._dialogs.get(invite.call_id)
        peer = transaction.peer
        if (
            dialog is None
            or invite.tag("to") != dialog.local_tag
            or invite.tag("from") != dialog.remote_tag
        ):
            return self._final(
                transaction,
                now_ms,
                *_sip_error(
                    invite,
                    481,
                    "Call/Transaction Does Not Exist",
                    Rejected(RejectReason.NO_DIALOG, f"re-INVITE of {invite.call_id!r}"),
                    peer,
                ),
            )
        plan = self._plan(invite, dialog)
        if isinstance(plan, _Refused):
            # The call goes on with what it had: a refused re-INVITE changes nothing (§14.2).
            return self._final(
                transaction,
                now_ms,
                *_sip_error(invite, plan.status, plan.phrase, plan.rejected, peer),
            )
        call_plan, offer = plan
        dialog.plan, dialog.offer, dialog.invite_key = call_plan, offer, key
        dialog.peer = peer
        outcome = self._final(transaction, now_ms, self._ok_with_answer(dialog, invite), None)
        return outcome + Outcome(update=call_plan)

    # -- CANCEL, BYE ----------------------------------------------------------------------

    def _cancel(self, cancel: SipRequest, key: tuple[str, str, str], now_ms: int) -> Outcome:
        peer = self._transactions[key].peer
        invite_key = (key[0], key[1], "INVITE")
        invite = self._transactions.get(invite_key)
        if invite is None:
            response, rejected = _sip_error(
                cancel,
                481,
                "Call/Transaction Does Not Exist",
                Rejected(RejectReason.NO_DIALOG, "CANCEL of no INVITE"),
                peer,
            )
            return Outcome((Send(response, peer),), rejected=rejected)
        ok = self._respond(cancel, peer, 200, "OK")
        if invite.status >= 200:
            return ok  # too late: the INVITE was answered (§9.2)
        dialog = self._dialogs.pop(cancel.call_id, None)
        to_tag = dialog.local_tag if dialog is not None else _tag()
        if dialog is not None:
            dialog.cancelled = True
        terminated = build_response(
            invite.request, 487, "Request Terminated", to_tag=to_tag, source=invite.peer.address
        )
        outcome = ok + self._final(invite, now_ms, terminated, None)
        return outcome + Outcome(ended=((cancel.call_id, "CANCEL"),))

    def _bye(self, bye: SipRequest, peer: Peer) -> Outcome:
        dialog = self._dialogs.get(bye.call_id)
        if dialog is None or bye.tag("to") != dialog.local_tag:
            response, rejected = _sip_error(
                bye,
                481,
                "Call/Transaction Does Not Exist",
                Rejected(RejectReason.NO_DIALOG, f"BYE of {bye.call_id!r}"),
                peer,
            )
            return Outcome((Send(response, peer),), rejected=rejected)
        del self._dialogs[bye.call_id]
        invite = self._transactions.get(dialog.invite_key)
        if invite is not None:
            self._stop_retransmitting(invite)
        return self._respond(bye, peer, 200, "OK", to_tag=dialog.local_tag) + Outcome(
            ended=((bye.call_id, "BYE"),)
        )

    def hang_up(self, call_id: str) -> Outcome:
        """The gateway ended ``call_id`` (idle timeout, shutdown): a BYE to the peer, sent once
        (best effort: a lost BYE leaves the peer to its own timers) and the dialog forgotten."""
        dialog = self._dialogs.pop(call_id, None)
        if dialog is None or not dialog.answered:
            return Outcome()
        invite = dialog.invite
        contact = invite.header("contact") or ""
        target = contact[contact.find("<") + 1 : contact.find(">")] if "<" in contact else contact
        target = target.split(";")[0].strip() or invite.uri
        host = _uri_host(dialog.host)
        transport = dialog.peer.transport.upper()
        routes = invite.header_values("record-route")
        lines = [
            f"BYE {target} SIP/2.0",
            f"Via: SIP/2.0/{transport} {host}:{self._config.sip_port};branch=z9hG4bK{_tag()};rport",
            "Max-Forwards: 70",
            f"From: {invite.header('to')};tag={dialog.local_tag}",
            f"To: {invite.header('from')}",
            f"Call-ID: {call_id}",
            f"CSeq: {dialog.local_cseq + 1} BYE",
            *(f"Route: {route}" for route in routes),
            f"User-Agent: {self._config.user_agent}",
            "Content-Length: 0",
        ]
        return Outcome((Send(("\r\n".join(lines) + "\r\n\r\n").encode(), dialog.peer),))

    # -- timers ---------------------------------------------------------------------------

    def tick(self, now_ms: int) -> Outcome:
        """Retransmit unacknowledged final responses, end calls whose 200 OK was never ACKed,
        forget transactions past their lifetime. Costs what is due, not what is remembered."""
        outcome = Outcome()
        for transaction in list(self._retransmitting.values()):
            assert transaction.finished_ms is not None
            assert transaction.retransmit_ms is not None
            assert transaction.response is not None
            if now_ms - transaction.finished_ms >= TRANSACTION_LIFETIME_MS:
                self._stop_retransmitting(transaction)
                dialog = self._dialogs.get(transaction.request.call_id)
                if transaction.status < 300 and dialog is not None and not dialog.confirmed:
                    del self._dialogs[dialog.call_id]
                    outcome += Outcome(ended=((dialog.call_id, "no ACK for the 200 OK"),))
            elif now_ms >= transaction.retransmit_ms:
                outcome += Outcome((Send(transaction.response, transaction.peer),))
                transaction.interval_ms = min(2 * transaction.interval_ms, T2_MS)
                transaction.retransmit_ms = now_ms + transaction.interval_ms
        while self._expiries and self._expiries[0][0] <= now_ms:
            _, transaction = self._expiries.popleft()
            if self._transactions.get(transaction.key) is not transaction:
                continue
            if transaction.key in self._retransmitting:  # still waiting for its ACK: later
                self._expiries.append((now_ms + T2_MS, transaction))
                continue
            del self._transactions[transaction.key]
        return outcome


def _uri_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
