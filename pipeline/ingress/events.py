"""The gateway's records on ``asr.events`` (``event/1``): a call's start and its key presses.

Pure builders (``call_started``, ``dtmf_received``) and a thin sink that sends them through a
producer ``Transport``, keyed by call id (one call's events stay in order on one partition).

- ``ingress_call_started``: once per call the gateway opens: the transport (``rtp``, ``sip``,
  ``siprec``, ``twilio``, ``fork``), tenant, and each channel's codec; for SIPREC, each
  channel's stream label and participant (id, AOR, name, whether the agent rule chose it) and
  the recording session id: where a reader sees how the gateway mapped streams to parties.
- ``dtmf_received``: one per key press: channel, ``position_ms`` on the channel's timeline,
  ``duration_ms``; the digit only when ``ingress.dtmf_digits_in_events`` allows it (a digit is
  often a card number or a PIN: by default the event says a key was pressed, never which).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline.contracts.messages import Event, EventType, to_json
from pipeline.producer.publisher import Transport

__all__ = ["DtmfNotice", "EventSink", "TransportEventSink", "call_started", "dtmf_received"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DtmfNotice:
    """A digit was pressed on a channel (kept out of the audio).

    ``offset_ms`` is where on the channel's timeline it starts (the audio published so far)."""

    call_id: str
    channel: str
    digit: str
    offset_ms: int
    duration_ms: int


class EventSink(Protocol):
    def publish(self, event: Event) -> None:
        """Queue one event (never blocks the event loop for long; never raises)."""
        ...


def call_started(source: str, emit_ms: int, call_id: str, detail: dict[str, Any]) -> Event:
    return Event(EventType.INGRESS_CALL_STARTED, emit_ms, source, call_id, None, detail)


def dtmf_received(source: str, emit_ms: int, notice: DtmfNotice, *, reveal_digit: bool) -> Event:
    detail: dict[str, Any] = {
        "position_ms": notice.offset_ms,
        "duration_ms": notice.duration_ms,
        "digit_redacted": not reveal_digit,
    }
    if reveal_digit:
        detail["digit"] = notice.digit
    return Event(EventType.DTMF_RECEIVED, emit_ms, source, notice.call_id, notice.channel, detail)


class TransportEventSink:
    """Sends events to ``topic`` through ``transport`` (its delivery reports are served by
    whoever polls that transport: the gateway's publisher). A failed delivery is counted
    with ``on_failure`` and logged: an event lost never stops a call's audio."""

    def __init__(self, transport: Transport, topic: str, on_failure: Any = None) -> None:
        self._transport = transport
        self._topic = topic
        self._on_failure = on_failure

    def publish(self, event: Event) -> None:
        key = (event.call_id or event.source).encode()

        def report(error: str | None, partition: int) -> None:
            if error is not None:
                logger.error("event %s of %s not delivered: %s", event.type, event.call_id, error)
                if self._on_failure is not None:
                    self._on_failure()

        try:
            self._transport.send(self._topic, key, to_json(event), (), report)
        except Exception as error:  # a full queue or a closed producer: counted, not raised
            report(str(error), -1)
