"""Hand-built monitor records: partials, session events and QA summaries with exact values."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pipeline.contracts.messages import EventType, Final
from pipeline.monitor.records import MonitorEvent, PartialUpdate
from pipeline.qa.rules import DEFAULT_RULES
from pipeline.qa.summary import CallMeta, CallStatus, CallSummary, EndReason, summarize
from tests.qa_builders import final

T0_MS = 1_700_000_000_000
"""Epoch ms at which the hand-built calls start."""


def partial(
    call_id: str,
    channel: str,
    index: int,
    revision: int,
    committed: str,
    tentative: str = "",
    *,
    at_ms: int = T0_MS,
    tenant: str = "acme",
    start_ms: int = 0,
) -> PartialUpdate:
    return PartialUpdate(
        call_id=call_id,
        channel=channel,
        tenant=tenant,
        utterance_index=index,
        revision=revision,
        committed_text=committed,
        tentative_text=tentative,
        start_ms=start_ms,
        end_ms=start_ms + 500 * (revision + 1),
        emit_ms=at_ms,
    )


def event(
    kind: EventType,
    call_id: str | None,
    channel: str | None,
    *,
    at_ms: int = T0_MS,
    tenant: str | None = "acme",
    audio_ms: int | None = None,
) -> MonitorEvent:
    return MonitorEvent(kind, at_ms, "worker-1", call_id, channel, tenant, audio_ms, None)


def said(
    call_id: str, channel: str, index: int, text: str, start_ms: int, *, tenant: str = "acme"
) -> Final:
    """A final (tests.qa_builders.final) of ``call_id`` emitted at ``T0_MS + start_ms``."""
    built = final(channel, index, text, start_ms, call_id=call_id)
    return replace(built, tenant=tenant, emit_ms=T0_MS + start_ms + 1000, latency_ms=250)


def summary_of(
    call_id: str, finals: Sequence[Final], *, revision: int = 1, tenant: str = "acme"
) -> CallSummary:
    """The QA app's summary of ``finals`` with the built-in rules, as published on qa.calls."""
    meta = CallMeta(
        call_id,
        tenant=tenant,
        channels=tuple(sorted({f.channel for f in finals})),
        status=CallStatus.ENDED,
        end_reason=EndReason.SESSIONS_ENDED,
        revision=revision,
        published_ms=T0_MS + 60_000,
    )
    return summarize(meta, finals, DEFAULT_RULES)
