"""Per-call state of the QA app and the pure rules that move it (no Kafka, clock injected).

A call's ``CallState`` is small: the ids of its finals (the finals themselves are stored apart,
keyed by utterance id), the channels seen in session events and finals, lifecycle times and what
was last published. ``CallAnalytics`` applies one input at a time and says what to do:

- ``on_final``: a new utterance id is recorded (``is_new``); a repeated one changes nothing but
  the activity time (duplicates count once).
- ``on_event``: ``session_started`` / ``session_ended`` record channels; the ASR worker's
  ``session_ended`` carries ``detail.duration_ms`` (the channel's audio length, which sets the
  call's duration) and ``detail.utterances`` (how many finals it published for the channel).
- a call **ends** when every channel it has (from session events or finals) has a
  ``session_ended`` event (``sessions_ended``), or when no record arrived for ``idle_timeout_ms``
  of wall time (``on_tick``, ``idle_timeout``). An ended call stays ended.
- **publication**: finals and events arrive on different topics, so a ``session_ended`` can be
  read before the channel's last finals. An ended call is published once it is *complete* (every
  channel's ``detail.utterances`` count of finals is reached) or, without counts, once it has
  been quiet for ``end_grace_ms``. ``publish`` recomputes the summary; when its content differs
  from what was last published the revision goes up by one (first publication: revision 1).
  Late finals therefore yield revision 2, 3, …; a late duplicate yields nothing.
- ``on_tick`` also expires ended calls ``retention_ms`` after they ended (returns ``None``: the
  shell deletes the call and its finals).

Time (``last_activity_ms``, ``ended_ms``, ``published_ms``) is the injected ``Clock``'s wall
time, which is what timeouts measure; audio time stays inside the finals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson

from pipeline.clock import Clock
from pipeline.contracts.messages import Event, EventType, Final
from pipeline.errors import ContractError
from pipeline.qa.rules import QaRules
from pipeline.qa.summary import (
    CallMeta,
    CallStatus,
    CallSummary,
    EndReason,
    content_digest,
    summarize,
)

__all__ = ["CallAnalytics", "CallState", "FinalStep"]

STATE_SCHEMA = "qa_call_state/1"


@dataclass(frozen=True, slots=True)
class CallState:
    """What the QA app keeps per call between records (stored as JSON in its table).

    ``dirty`` is true when the state changed since the last publication, or was never published.
    """

    call_id: str
    tenant: str = "default"
    utterance_ids: tuple[str, ...] = ()
    channels_started: tuple[str, ...] = ()
    channels_ended: tuple[str, ...] = ()
    channel_finals: Mapping[str, int] = field(default_factory=dict)
    """Distinct finals recorded per channel."""
    expected_finals: Mapping[str, int] = field(default_factory=dict)
    """Finals per channel announced by ``session_ended`` (``detail.utterances``), when given."""
    channel_audio_ms: Mapping[str, int] = field(default_factory=dict)
    first_seen_ms: int = 0
    last_activity_ms: int = 0
    ended_ms: int | None = None
    end_reason: EndReason | None = None
    revision: int = 0
    published_ms: int | None = None
    published_digest: str = ""
    dirty: bool = False
    schema: str = STATE_SCHEMA

    @property
    def ended(self) -> bool:
        return self.ended_ms is not None

    @property
    def channels(self) -> tuple[str, ...]:
        """Every channel known for the call, sorted."""
        return tuple(sorted({*self.channels_started, *self.channels_ended, *self.channel_finals}))

    @property
    def complete(self) -> bool:
        """Every channel announced its finals count, and that many finals are recorded."""
        return all(
            channel in self.expected_finals
            and self.channel_finals.get(channel, 0) >= self.expected_finals[channel]
            for channel in self.channels
        )

    def meta(self) -> CallMeta:
        return CallMeta(
            call_id=self.call_id,
            tenant=self.tenant,
            channels=self.channels,
            channel_audio_ms=dict(self.channel_audio_ms),
            status=CallStatus.ENDED if self.ended else CallStatus.LIVE,
            end_reason=self.end_reason,
            revision=self.revision,
            published_ms=self.published_ms,
        )

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self), option=orjson.OPT_SORT_KEYS)

    @classmethod
    def from_json(cls, value: bytes) -> CallState:
        """Inverse of ``to_json``.

        Raises:
            ContractError: not a ``qa_call_state/1`` document.
        """
        try:
            data: Any = orjson.loads(value)
            schema = data.get("schema") if isinstance(data, dict) else None
            if schema != STATE_SCHEMA:
                raise ContractError(f"call state has schema {schema!r}")
            reason = data.get("end_reason")
            return cls(
                **{
                    **data,
                    "utterance_ids": tuple(data["utterance_ids"]),
                    "channels_started": tuple(data["channels_started"]),
                    "channels_ended": tuple(data["channels_ended"]),
                    "end_reason": EndReason(reason) if reason else None,
                }
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise ContractError(f"unreadable call state: {error}") from None


@dataclass(frozen=True, slots=True)
class FinalStep:
    """The state after a final, and whether the final is new (store it) or a duplicate."""

    state: CallState
    is_new: bool


def _count(detail: Mapping[str, Any], name: str) -> int | None:
    value = detail.get(name)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _with(names: tuple[str, ...], name: str) -> tuple[str, ...]:
    return names if name in names else tuple(sorted((*names, name)))


class CallAnalytics:
    """The QA app's per-call logic: pure apart from reading the injected clock."""

    def __init__(
        self,
        rules: QaRules,
        clock: Clock,
        *,
        idle_timeout_ms: int,
        retention_ms: int,
        end_grace_ms: int,
    ) -> None:
        self.rules = rules
        self._clock = clock
        self.idle_timeout_ms = idle_timeout_ms
        self.retention_ms = retention_ms
        self.end_grace_ms = end_grace_ms

    def _start(self, call_id: str, tenant: str = "default") -> CallState:
        now_ms = self._clock.now_ms()
        return CallState(call_id, tenant, first_seen_ms=now_ms, last_activity_ms=now_ms)

    def _changed(self, before: CallState, after: CallState) -> CallState:
        """``after`` touched by activity; dirty (and perhaps ended) when it differs from before."""
        touched = replace(after, last_activity_ms=self._clock.now_ms())
        if after == before:
            return touched
        return self._end_if_complete(replace(touched, dirty=True))

    def _end_if_complete(self, state: CallState) -> CallState:
        if state.ended or not state.channels_ended:
            return state
        if set(state.channels_ended) >= set(state.channels):
            return replace(
                state, ended_ms=self._clock.now_ms(), end_reason=EndReason.SESSIONS_ENDED
            )
        return state

    def on_final(self, state: CallState | None, final: Final) -> FinalStep:
        """Record ``final`` (a call's first record creates its state)."""
        before = state or self._start(final.call_id, final.tenant)
        if final.utterance_id in before.utterance_ids:
            return FinalStep(replace(before, last_activity_ms=self._clock.now_ms()), False)
        after = replace(
            before,
            tenant=final.tenant,
            utterance_ids=(*before.utterance_ids, final.utterance_id),
            channel_finals={
                **before.channel_finals,
                final.channel: before.channel_finals.get(final.channel, 0) + 1,
            },
        )
        return FinalStep(self._changed(before, after), True)

    def on_event(self, state: CallState | None, event: Event) -> CallState:
        """Record a session event; other event types leave the state as it is."""
        if event.call_id is None or event.channel is None:
            raise ContractError("a session event needs a call id and a channel")
        before = state or self._start(event.call_id)
        after = before
        tenant = event.detail.get("tenant")
        if isinstance(tenant, str) and tenant:
            after = replace(after, tenant=tenant)
        if event.type is EventType.SESSION_STARTED:
            after = replace(after, channels_started=_with(before.channels_started, event.channel))
        elif event.type is EventType.SESSION_ENDED:
            after = replace(after, channels_ended=_with(before.channels_ended, event.channel))
            audio_ms = _count(event.detail, "duration_ms")
            if audio_ms is not None:
                after = replace(
                    after, channel_audio_ms={**before.channel_audio_ms, event.channel: audio_ms}
                )
            finals = _count(event.detail, "utterances")
            if finals is not None:
                after = replace(
                    after, expected_finals={**before.expected_finals, event.channel: finals}
                )
        return self._changed(before, after)

    def on_tick(self, state: CallState) -> CallState | None:
        """Close an idle call, or expire (``None``) an ended call past its retention."""
        now_ms = self._clock.now_ms()
        if state.ended_ms is not None:
            return None if now_ms - state.ended_ms >= self.retention_ms else state
        if now_ms - state.last_activity_ms >= self.idle_timeout_ms:
            return replace(state, ended_ms=now_ms, end_reason=EndReason.IDLE_TIMEOUT, dirty=True)
        return state

    def tick_due(self, state: CallState, *, idle_checks: bool = True) -> bool:
        """Whether a tick would expire, publish or (with ``idle_checks``) idle-close ``state``."""
        now_ms = self._clock.now_ms()
        if state.ended_ms is not None:
            return now_ms - state.ended_ms >= self.retention_ms or self.needs_publication(state)
        return idle_checks and now_ms - state.last_activity_ms >= self.idle_timeout_ms

    def publication_wait_ms(self, state: CallState) -> int | None:
        """How long an ended, changed call must stay quiet before ``publish``; None if not due.

        0 means publish now: the call is complete, or quiet for ``end_grace_ms`` already.
        """
        if not (state.ended and state.dirty):
            return None
        if state.complete:
            return 0
        quiet_ms = self._clock.now_ms() - state.last_activity_ms
        return max(0, self.end_grace_ms - quiet_ms)

    def needs_publication(self, state: CallState) -> bool:
        """Ended, changed since the last publication, and complete or quiet: ``publish`` now."""
        return self.publication_wait_ms(state) == 0

    def publish(
        self, state: CallState, finals: Iterable[Final]
    ) -> tuple[CallState, CallSummary | None]:
        """The next revision of the summary, or ``None`` when the content did not change."""
        now_ms = self._clock.now_ms()
        candidate = replace(state, revision=state.revision + 1, published_ms=now_ms)
        summary = summarize(candidate.meta(), finals, self.rules)
        digest = content_digest(summary)
        if digest == state.published_digest:
            return replace(state, dirty=False), None
        published = replace(candidate, published_digest=digest, dirty=False)
        return published, summary

    def view(self, state: CallState, finals: Sequence[Final]) -> CallSummary:
        """The summary as of now: live, or the last published revision of an ended call."""
        return summarize(state.meta(), finals, self.rules)
