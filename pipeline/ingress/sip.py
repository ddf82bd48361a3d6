"""SIP messages (RFC 3261 §7, §20) as far as a user agent server needs them.

Pure: bytes in, a frozen ``SipRequest`` / ``SipResponse`` (or a ``Rejected``) out; responses
built from the request they answer (§8.2.6). Nothing here raises on bad input: a message is
untrusted network data.

What is taken: the request and status lines, headers folded over continuation lines (§7.3.1),
compact header names (§7.3.3), comma-separated header values split where the grammar allows
(Via, and the headers a UAS reads as lists), a body of exactly ``Content-Length`` bytes.
``SipStreamFramer`` cuts messages out of a TCP byte stream by ``Content-Length`` (§18.3).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from pipeline.ingress.rtp import Rejected, RejectReason

__all__ = [
    "MAX_MESSAGE_BYTES",
    "SipRequest",
    "SipResponse",
    "SipStreamFramer",
    "Via",
    "build_response",
    "parse_header_params",
    "parse_sip",
]

MAX_MESSAGE_BYTES = 65_536
"""Largest message taken (a SIPREC INVITE with metadata is a few kilobytes)."""
SIP_VERSION = "SIP/2.0"
_COMPACT = {
    "i": "call-id",
    "m": "contact",
    "e": "content-encoding",
    "l": "content-length",
    "c": "content-type",
    "f": "from",
    "s": "subject",
    "k": "supported",
    "t": "to",
    "v": "via",
}
_LIST_HEADERS = frozenset({"via", "require", "supported", "allow", "proxy-require"})
"""Headers whose comma-separated values are separate entries (§7.3.1); others stay whole
(a display name or URI may hold a comma)."""
_REQUIRED = ("via", "from", "to", "call-id", "cseq")
_METHOD = re.compile(r"[A-Za-z]+")
_TOKEN_COMMA = re.compile(r",(?=(?:[^\"]*\"[^\"]*\")*[^\"]*$)")
"""A comma outside double quotes."""


def _canonical(name: str) -> str:
    lowered = name.strip().lower()
    return _COMPACT.get(lowered, lowered)


@dataclass(frozen=True, slots=True)
class Via:
    """The parts of a Via entry the UAS uses: transport, sent-by and parameters."""

    transport: str
    host: str
    port: int | None
    params: dict[str, str] = field(default_factory=dict)

    @property
    def branch(self) -> str:
        return self.params.get("branch", "")

    @classmethod
    def parse(cls, text: str) -> Via | None:
        """``SIP/2.0/UDP host:port;branch=z9hG4bK…;rport`` → a ``Via``, or None."""
        head, _, rest = text.strip().partition(";")
        protocol, _, sent_by = head.strip().partition(" ")
        parts = protocol.split("/")
        if len(parts) != 3 or parts[0].strip().upper() != "SIP" or not sent_by.strip():
            return None
        host, port = _host_port(sent_by.strip())
        if host is None:
            return None
        return cls(parts[2].strip().upper(), host, port, parse_header_params(";" + rest))


def _host_port(text: str) -> tuple[str | None, int | None]:
    if text.startswith("["):  # an IPv6 reference
        end = text.find("]")
        if end < 0:
            return None, None
        host, rest = text[1:end], text[end + 1 :]
        port_text = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port_text = text.partition(":")
    if not host:
        return None, None
    if not port_text:
        return host, None
    return (
        (host, int(port_text)) if port_text.isdigit() and int(port_text) < 65536 else (None, None)
    )


def parse_header_params(text: str) -> dict[str, str]:
    """``;a=1;b;c="x"`` → ``{"a": "1", "b": "", "c": "x"}`` (names lowercased)."""
    params: dict[str, str] = {}
    for part in text.split(";")[1:]:
        name, _, value = part.partition("=")
        if name.strip():
            params[name.strip().lower()] = value.strip().strip('"')
    return params


@dataclass(frozen=True, slots=True)
class _Message:
    headers: tuple[tuple[str, str], ...]
    """(canonical lowercase name, value) in order; list headers one entry per value."""
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case, compact form taken)."""
        wanted = _canonical(name)
        return next((value for key, value in self.headers if key == wanted), None)

    def header_values(self, name: str) -> list[str]:
        wanted = _canonical(name)
        return [value for key, value in self.headers if key == wanted]

    @property
    def call_id(self) -> str:
        return self.header("call-id") or ""

    @property
    def cseq(self) -> tuple[int, str]:
        """(number, method) of the CSeq header; (-1, "") when it does not parse."""
        number, _, method = (self.header("cseq") or "").strip().partition(" ")
        return (int(number), method.strip().upper()) if number.isdigit() else (-1, "")

    @property
    def via(self) -> Via | None:
        """The topmost Via (the one this hop's transaction is identified by)."""
        first = self.header("via")
        return None if first is None else Via.parse(first)

    def tag(self, name: str) -> str:
        """The ``tag`` parameter of the From or To header ("" when absent)."""
        value = self.header(name) or ""
        # The parameters follow the URI: after ``>`` when it is bracketed.
        tail = value[value.rfind(">") + 1 :] if ">" in value else value
        return parse_header_params(tail[tail.find(";") :] if ";" in tail else "").get("tag", "")

    @property
    def content_type(self) -> str:
        """The media type of the body, lowercased, without parameters."""
        return (self.header("content-type") or "").split(";")[0].strip().lower()

    def option_tags(self, name: str) -> set[str]:
        """The option tags of Require / Supported (lowercased)."""
        return {v.strip().lower() for v in self.header_values(name) if v.strip()}


@dataclass(frozen=True, slots=True)
class SipRequest(_Message):
    method: str = ""
    uri: str = ""

    def transaction_key(self) -> tuple[str, str, str]:
        """The server transaction this request belongs to (§17.2.3): the top Via's branch and
        sent-by, and the method (an ACK belongs to its INVITE's). Without an RFC 3261 branch,
        Call-ID, CSeq number and From tag stand in for it."""
        via = self.via
        method = "INVITE" if self.method == "ACK" else self.method
        if via is not None and via.branch.startswith("z9hG4bK"):
            return via.branch, f"{via.host}:{via.port}", method
        number, _ = self.cseq
        return f"{self.call_id}/{number}/{self.tag('from')}", "", method


@dataclass(frozen=True, slots=True)
class SipResponse(_Message):
    status: int = 0
    reason: str = ""


def parse_sip(data: bytes) -> SipRequest | SipResponse | Rejected:
    """The SIP message in ``data`` (one datagram, or one message cut by the framer).

    A request needs a request line ``METHOD URI SIP/2.0`` and the headers every request has
    (Via, From, To, Call-ID, CSeq, §8.1.1), with a CSeq whose method is the request's.
    """
    if len(data) > MAX_MESSAGE_BYTES:
        return Rejected(RejectReason.BAD_SIP, f"{len(data)} bytes")
    head, separator, body = data.partition(b"\r\n\r\n")
    if not separator:
        head, separator, body = data.partition(b"\n\n")
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return Rejected(RejectReason.BAD_SIP, "headers are not UTF-8")
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[0].strip():  # §7.5: CRLFs before a message are ignored
        lines.pop(0)
    if not lines:
        return Rejected(RejectReason.BAD_SIP, "empty message")
    headers = _parse_headers(lines[1:])
    if isinstance(headers, Rejected):
        return headers
    length_text = next((v for k, v in headers if k == "content-length"), None)
    if length_text is not None:
        if not length_text.strip().isdigit():
            return Rejected(RejectReason.BAD_SIP, f"Content-Length {length_text!r}")
        length = int(length_text)
        if length > len(body):
            return Rejected(RejectReason.BAD_SIP, f"body of {len(body)} < Content-Length {length}")
        body = body[:length]
    start = lines[0].strip().split(" ", 2)
    if start[0] == SIP_VERSION:
        if len(start) < 2 or not start[1].isdigit() or len(start[1]) != 3:
            return Rejected(RejectReason.BAD_SIP, f"status line {lines[0][:60]!r}")
        return SipResponse(headers, body, int(start[1]), start[2] if len(start) > 2 else "")
    if len(start) != 3 or start[2] != SIP_VERSION or not _METHOD.fullmatch(start[0]):
        return Rejected(RejectReason.BAD_SIP, f"request line {lines[0][:60]!r}")
    request = SipRequest(headers, body, start[0].upper(), start[1])
    missing = [name for name in _REQUIRED if request.header(name) is None]
    if missing:
        return Rejected(RejectReason.BAD_SIP, f"no {', '.join(missing)} header")
    number, method = request.cseq
    if number < 0 or method != request.method:
        return Rejected(RejectReason.BAD_SIP, f"CSeq {request.header('cseq')!r}")
    if request.via is None:
        return Rejected(RejectReason.BAD_SIP, f"Via {request.header('via')!r}")
    return request


def _parse_headers(lines: list[str]) -> tuple[tuple[str, str], ...] | Rejected:
    unfolded: list[str] = []
    for line in lines:
        if line[:1] in (" ", "\t") and unfolded:
            unfolded[-1] += " " + line.strip()
        elif line.strip():
            unfolded.append(line)
    headers: list[tuple[str, str]] = []
    for line in unfolded:
        name, colon, value = line.partition(":")
        if not colon or not name.strip() or " " in name.strip():
            return Rejected(RejectReason.BAD_SIP, f"header line {line[:60]!r}")
        key = _canonical(name)
        if key in _LIST_HEADERS:
            headers.extend((key, part.strip()) for part in _TOKEN_COMMA.split(value))
        else:
            headers.append((key, value.strip()))
    return tuple(headers)


def try_headers(data: bytes) -> SipRequest | None:
    """Whatever request headers can be read from a message that does not parse: enough (Via,
    From, To, Call-ID, CSeq) to send it a 400, or None (§8.2.6 needs them to route one)."""
    head = data.partition(b"\r\n\r\n")[0].decode("utf-8", "replace")
    lines = head.replace("\r\n", "\n").split("\n")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon and name.strip() and " " not in name.strip():
            key = _canonical(name)
            parts = _TOKEN_COMMA.split(value) if key in _LIST_HEADERS else [value]
            headers.extend((key, part.strip()) for part in parts)
    start = lines[0].split(" ", 1)[0].upper() if lines else ""
    request = SipRequest(tuple(headers), b"", start if _METHOD.fullmatch(start) else "", "")
    if request.method == "ACK" or any(request.header(n) is None for n in _REQUIRED):
        return None  # an ACK is never answered (§17.2.1)
    return request if request.via is not None else None


def build_response(
    request: SipRequest,
    status: int,
    reason: str,
    *,
    to_tag: str = "",
    source: tuple[str, int] | None = None,
    headers: tuple[tuple[str, str], ...] = (),
    body: bytes = b"",
    content_type: str = "",
) -> bytes:
    """The response to ``request`` (§8.2.6.2): its Via entries (the top one with ``received``
    and ``rport`` filled from ``source``, RFC 3581), From, Call-ID, CSeq, and its To with
    ``to_tag`` added when it has none; then ``headers`` and the body."""
    lines = [f"{SIP_VERSION} {status} {reason}"]
    for index, value in enumerate(request.header_values("via")):
        if index == 0 and source is not None:
            value = _stamp_via(value, source)
        lines.append(f"Via: {value}")
    to_value = request.header("to") or ""
    if to_tag and not request.tag("to"):
        to_value += f";tag={to_tag}"
    lines += [
        f"From: {request.header('from') or ''}",
        f"To: {to_value}",
        f"Call-ID: {request.call_id}",
        f"CSeq: {request.header('cseq') or ''}",
    ]
    lines += [f"{name}: {value}" for name, value in headers]
    if body:
        lines.append(f"Content-Type: {content_type}")
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _stamp_via(value: str, source: tuple[str, int]) -> str:
    via = Via.parse(value)
    if via is None:
        return value
    parts = list(value.split(";"))
    out = [parts[0]]
    for part in parts[1:]:
        name = part.split("=", 1)[0].strip().lower()
        if name == "rport":
            out.append(f"rport={source[1]}")
        elif name != "received":
            out.append(part)
    if via.host != source[0]:
        out.append(f"received={source[0]}")
    return ";".join(out)


class SipStreamFramer:
    """Cuts whole messages out of a SIP-over-TCP byte stream (§18.3: Content-Length frames
    each; keep-alive CRLFs between messages are skipped). ``feed`` returns the messages now
    complete; ``failed`` is set (and the connection should close) when the stream cannot be
    framed: a header section over ``MAX_MESSAGE_BYTES`` or without a valid Content-Length."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.failed: str | None = None

    def feed(self, data: bytes) -> Iterator[bytes]:
        self._buffer += data
        while self.failed is None:
            while self._buffer[:2] == b"\r\n":
                del self._buffer[:2]
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_MESSAGE_BYTES:
                    self.failed = "header section too long"
                return
            head = bytes(self._buffer[:end]).decode("utf-8", "replace")
            length = _content_length(head)
            if length is None or length > MAX_MESSAGE_BYTES:
                self.failed = "no valid Content-Length on a stream transport"
                return
            total = end + 4 + length
            if len(self._buffer) < total:
                return
            message = bytes(self._buffer[:total])
            del self._buffer[:total]
            yield message


def _content_length(head: str) -> int | None:
    for line in head.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if _canonical(name) == "content-length":
            return int(value.strip()) if value.strip().isdigit() else None
    return None
