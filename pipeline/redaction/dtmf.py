"""Keyed digits (DTMF) under a redaction policy: an event may say that digits were keyed, never
which.

A caller keys a card number on the phone pad rather than saying it; the ingress gateway sees
each key as an RFC 4733 telephone-event and keeps it out of the audio. Whatever the ingress
publishes about a key press (an event, a log line, a metric) goes through ``dtmf_notice``
first: under a redacting policy the digit is withheld and only ``keyed`` (and when, how long)
is left. Under ``off`` the digit is kept. Counting key presses per call is fine; a digit, or a
label of a metric that holds one, is not.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.redaction.policy import Policy

__all__ = ["DtmfReport", "dtmf_notice"]


@dataclass(frozen=True, slots=True)
class DtmfReport:
    """What may be published about one key press: ``digit`` is None under a redacting policy
    (``redacted`` True). ``offset_ms`` is where it starts on the channel's timeline."""

    call_id: str
    channel: str
    offset_ms: int
    duration_ms: int
    redacted: bool
    digit: str | None = None

    def detail(self) -> dict[str, object]:
        """The JSON-ready detail of an event about the key press (``digit`` only when kept)."""
        detail: dict[str, object] = {
            "keyed": True,
            "offset_ms": self.offset_ms,
            "duration_ms": self.duration_ms,
            "redacted": self.redacted,
        }
        if self.digit is not None:
            detail["digit"] = self.digit
        return detail


def dtmf_notice(
    policy: Policy, call_id: str, channel: str, digit: str, offset_ms: int, duration_ms: int
) -> DtmfReport:
    """What may be said about a key press of ``digit`` under ``policy``."""
    if policy.redacting:
        return DtmfReport(call_id, channel, offset_ms, duration_ms, redacted=True)
    return DtmfReport(call_id, channel, offset_ms, duration_ms, redacted=False, digit=digit)
