"""SIP and SIPREC messages for tests, built as RFC 3261 §24 and RFC 7866 §12 show them.

The SIPREC INVITE follows RFC 7866's example of a recording session: a Session Recording
Client (an SBC) sends ``Require: siprec``, a Contact with ``+sip.src`` and a
``multipart/mixed`` body with the SDP (one ``a=label`` per stream, ``a=sendonly``) and the
``application/rs-metadata+xml`` snapshot (RFC 7865: session, participants with their AORs,
streams with their labels, and which participant sends which stream).
"""

from __future__ import annotations

BOUNDARY = "foobar"


def sdp_offer(
    streams: list[tuple[int, str, str | None]],
    *,
    host: str = "127.0.0.1",
    direction: str = "sendrecv",
) -> str:
    """``streams``: (port, formats as in the m-line, label or None); PCMU/PCMA/telephone-event
    and L16 rtpmaps for the dynamic types 96/97/98/101."""
    lines = [
        "v=0",
        f"o=- 1 1 IN IP4 {host}",
        "s=-",
        f"c=IN IP4 {host}",
        "t=0 0",
    ]
    for port, formats, label in streams:
        lines.append(f"m=audio {port} RTP/AVP {formats}")
        lines += [
            "a=rtpmap:0 PCMU/8000",
            "a=rtpmap:8 PCMA/8000",
            "a=rtpmap:96 L16/16000",
            "a=rtpmap:97 L16/8000/2",
            "a=rtpmap:98 opus/48000/2",
            "a=rtpmap:101 telephone-event/8000",
            "a=fmtp:101 0-16",
        ]
        if label is not None:
            lines.append(f"a=label:{label}")
        lines.append(f"a={direction}")
    return "\r\n".join(lines) + "\r\n"


def request(
    method: str,
    *,
    call_id: str = "call-1@example.com",
    branch: str = "z9hG4bK776asdhds",
    cseq: int = 1,
    from_tag: str = "1928301774",
    to_tag: str = "",
    body: bytes = b"",
    content_type: str = "",
    extra: tuple[str, ...] = (),
    cseq_method: str | None = None,
    sent_by: str = "127.0.0.1:5070",
) -> bytes:
    """A request as a UAC at ``sent_by`` sends it to us (sip:transcribe@127.0.0.1)."""
    to = "<sip:transcribe@127.0.0.1>" + (f";tag={to_tag}" if to_tag else "")
    lines = [
        f"{method} sip:transcribe@127.0.0.1 SIP/2.0",
        f"Via: SIP/2.0/UDP {sent_by};branch={branch};rport",
        "Max-Forwards: 70",
        f"To: {to}",
        f'From: "Alice" <sip:alice@atlanta.example.com>;tag={from_tag}',
        f"Call-ID: {call_id}",
        f"CSeq: {cseq} {cseq_method or method}",
        f"Contact: <sip:alice@{sent_by}>",
        *extra,
    ]
    if body:
        lines.append(f"Content-Type: {content_type}")
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def invite(sdp: str, **kwargs: object) -> bytes:
    return request("INVITE", body=sdp.encode(), content_type="application/sdp", **kwargs)  # type: ignore[arg-type]


def metadata(
    *,
    agent_label: str = "1",
    customer_label: str = "2",
    agent_aor: str = "sip:agent7@agents.example.com",
    customer_aor: str = "sip:+15551234567@pstn.example.net",
    draft_form: bool = False,
) -> str:
    """RFC 7865 metadata: two participants, each sending one stream. ``draft_form`` puts
    ``<send>`` inside ``<participant>`` (the draft-era form some recorders still send)."""
    customer_send = "<send>cXVlc3Rpb24=</send>" if draft_form else ""
    agent_send = "<send>YW5zd2Vy</send>" if draft_form else ""
    assocs = (
        ""
        if draft_form
        else """
  <participantstreamassoc participant_id="Y3VzdG9tZXI=">
    <send>cXVlc3Rpb24=</send>
    <recv>YW5zd2Vy</recv>
  </participantstreamassoc>
  <participantstreamassoc participant_id="YWdlbnQ=">
    <send>YW5zd2Vy</send>
    <recv>cXVlc3Rpb24=</recv>
  </participantstreamassoc>"""
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<recording xmlns='urn:ietf:params:xml:ns:recording:1'>
  <datamode>complete</datamode>
  <group group_id="7+OTCyoxTmqmqyA/1weDAg==">
    <associate-time>2010-12-16T23:41:07Z</associate-time>
  </group>
  <session session_id="hVpd7YQgRW2nD22h7q60JQ==">
    <sipSessionID>ab30317f1a784dc48ff824d0d3715d86;remote=47755a9de7794ba387653f2099600ef2</sipSessionID>
    <group-ref>7+OTCyoxTmqmqyA/1weDAg==</group-ref>
  </session>
  <participant participant_id="Y3VzdG9tZXI=">
    <nameID aor="{customer_aor}">
      <name xml:lang="en">Caller</name>
    </nameID>{customer_send}
  </participant>
  <participant participant_id="YWdlbnQ=">
    <nameID aor="{agent_aor}">
      <name xml:lang="en">Agent Seven</name>
    </nameID>{agent_send}
  </participant>
  <stream stream_id="cXVlc3Rpb24=" session_id="hVpd7YQgRW2nD22h7q60JQ==">
    <label>{customer_label}</label>
  </stream>
  <stream stream_id="YW5zd2Vy" session_id="hVpd7YQgRW2nD22h7q60JQ==">
    <label>{agent_label}</label>
  </stream>
  <sessionrecordingassoc session_id="hVpd7YQgRW2nD22h7q60JQ==">
    <associate-time>2010-12-16T23:41:07Z</associate-time>
  </sessionrecordingassoc>{assocs}
</recording>
"""


def multipart(*parts: tuple[str, str]) -> bytes:
    """A ``multipart/mixed`` body of (content type, content) parts, boundary ``foobar``."""
    out = ""
    for content_type, content in parts:
        disposition = (
            "Content-Disposition: recording-session\r\n"
            if content_type == "application/rs-metadata+xml"
            else ""
        )
        out += f"--{BOUNDARY}\r\nContent-Type: {content_type}\r\n{disposition}\r\n{content}\r\n"
    return (out + f"--{BOUNDARY}--\r\n").encode()


def siprec_invite(sdp: str, xml: str | None, **kwargs: object) -> bytes:
    """The SRC's INVITE: SDP and (unless ``xml`` is None) the metadata."""
    parts = [("application/sdp", sdp)]
    if xml is not None:
        parts.append(("application/rs-metadata+xml", xml))
    return request(
        "INVITE",
        body=multipart(*parts),
        content_type=f"multipart/mixed;boundary={BOUNDARY}",
        extra=("Require: siprec", "Accept: application/sdp, application/rs-metadata"),
        **kwargs,  # type: ignore[arg-type]
    )


def two_stream_sdp(agent_port: int, customer_port: int, *, swap: bool = False) -> str:
    """The SRC's offer: the caller's stream labelled 2, the agent's labelled 1; ``swap`` lists
    the agent's ``m=`` line first (packet order and m-line order must not matter)."""
    streams = [(customer_port, "0 101", "2"), (agent_port, "0 101", "1")]
    if swap:
        streams.reverse()
    return sdp_offer(streams, direction="sendonly")
