"""Per-call state of the QA app and the pure rules that move it (no Kafka, clock injected).

A call's ``CallState`` is small, and does not grow with the call's length: which utterances it
has, as ranges of utterance indexes per channel (the finals themselves are stored apart, keyed
by utterance id ``{call}:{channel}:{index}``; a worker numbers a channel's finals 0, 1, 2, ...,
so a channel takes one range), the channels seen in session events and finals, lifecycle times
and what was last published. It is rewritten to the table's changelog on every record, and a
record over the producer's 1 MB limit would stop the app. ``CallAnalytics`` applies one input at
a time and says what to do:

- ``on_final``: a new utterance is recorded (``is_new``); a repeated utterance id changes nothing
  but the activity time (duplicates count once, the first wins).
- ``on_event``: ``session_started`` / ``session_ended`` record channels; the ASR worker's
  ``session_ended`` carries ``detail.duration_ms`` (the channel's audio length, which sets the
  call's duration) and ``detail.utterances`` (how many finals it published for the channel).
- a call **ends** when every channel it has (from session events or finals) has a
  ``session_ended`` event (``sessions_ended``), or when no record arrived for ``idle_timeout_ms``
  of wall time (``on_tick``, ``idle_timeout``). An ended call stays ended.
- **publication**: finals and events arrive on different topics, so a ``session_ended`` can be
  read before the channel's last finals. An ended call is published once it is *complete* (every
  channel's ``detail.utterances`` count of finals is reached) or else (no counts, or finals
  still missing) once it has been quiet for ``end_grace_ms``. ``publish`` recomputes the
  summary; when its content differs from what was last published the revision goes up by one
  (first publication: revision 1). Late finals therefore yield revision 2, 3, …; a late
  duplicate yields nothing.
- ``on_tick`` also expires ended calls ``retention_ms`` after they ended (returns ``None``: the
  shell deletes the call and its finals), but never one with a change not yet published: its
  publication comes first, whatever ``retention_ms`` and ``end_grace_ms`` are.

Time (``last_activity_ms``, ``ended_ms``, ``published_ms``) is the injected ``Clock``'s wall
time, which is what timeouts measure; audio time stays inside the finals.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson

from pipeline.clock import Clock
from pipeline.contracts.messages import (
    Event,
    EventType,
    Final,
    utterance_id,
    utterance_id_parts,
)
from pipeline.errors import ContractError
from pipeline.qa.rules import QaRules
from pipeline.qa.summary import (
    CallMeta,
    CallStatus,
    CallSummary,
    EndReason,
    content_digest,
    has_speech,
    summarize,
)

__all__ = ["CallAnalytics", "CallState", "FinalStep"]

STATE_SCHEMA = "qa_call_state/2"
#: The first state format (a tuple of every utterance id), still read: an upgrade finds it in
#: the changelog.
STATE_SCHEMA_V1 = "qa_call_state/1"

IndexRanges = tuple[tuple[int, int], ...]
"""Sorted, disjoint, non-adjacent inclusive ranges ``(first, last)`` of utterance indexes."""


def _first(index_range: tuple[int, int]) -> int:
    return index_range[0]


def _with_index(ranges: IndexRanges, index: int) -> IndexRanges:
    """``ranges`` with ``index`` added, its neighbours merged with it."""
    position = bisect.bisect_right(ranges, index, key=_first)  # ranges[:position] start <= index
    low, high, start, stop = index, index, position, position
    if position and ranges[position - 1][1] >= index - 1:
        if ranges[position - 1][1] >= index:
            return ranges
        low, start = ranges[position - 1][0], position - 1
    if position < len(ranges) and ranges[position][0] == index + 1:
        high, stop = ranges[position][1], position + 1
    return (*ranges[:start], (low, high), *ranges[stop:])


def _holds(ranges: IndexRanges, index: int) -> bool:
    position = bisect.bisect_right(ranges, index, key=_first)
    return position > 0 and ranges[position - 1][1] >= index


def _read_ranges(value: Any) -> IndexRanges:
    """JSON ``[[first, last], ...]`` back as ``IndexRanges``; ValueError if it is not that."""
    ranges = tuple((int(first), int(last)) for first, last in value)
    if any(first > last or first < 0 for first, last in ranges) or any(
        earlier[1] + 1 >= later[0] for earlier, later in itertools.pairwise(ranges)
    ):
        raise ValueError(f"not sorted, disjoint index ranges: {value!r}")
    return ranges


def _from_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A ``qa_call_state/1`` document (every utterance id listed) in the fields of /2. Its
    blank finals are not known (they were not counted): the list view counts them as spoken
    until the call leaves the tables."""
    indexes: dict[str, IndexRanges] = {}
    for uid in data.pop("utterance_ids"):
        _, channel, index = utterance_id_parts(str(uid))
        indexes[channel] = _with_index(indexes.get(channel, ()), int(index))
    data.pop("channel_finals", None)
    return {**data, "utterance_indexes": indexes, "schema": STATE_SCHEMA}


@dataclass(frozen=True, slots=True)
class CallState:
    """What the QA app keeps per call between records (stored as JSON in its table).

    ``dirty`` is true when the state changed since the last publication, or was never published.
    """

    call_id: str
    tenant: str = "default"
    utterance_indexes: Mapping[str, IndexRanges] = field(default_factory=dict)
    """The utterance indexes of the finals recorded, per channel, as ranges."""
    blank_finals: int = 0
    """How many of them carry no speech (no words, blank text): a summary ignores them."""
    channels_started: tuple[str, ...] = ()
    channels_ended: tuple[str, ...] = ()
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
    def channel_finals(self) -> dict[str, int]:
        """Distinct finals recorded per channel."""
        return {
            channel: sum(last - first + 1 for first, last in ranges)
            for channel, ranges in self.utterance_indexes.items()
        }

    @property
    def spoken_finals(self) -> int:
        """Distinct finals that carry speech: the summary's ``utterances``."""
        return sum(self.channel_finals.values()) - self.blank_finals

    def has_utterance(self, channel: str, utterance_index: int) -> bool:
        return _holds(self.utterance_indexes.get(channel, ()), utterance_index)

    def utterance_ids(self) -> list[str]:
        """The ids of the finals recorded (their keys in the finals table), by channel and
        index."""
        return [
            utterance_id(self.call_id, channel, index)
            for channel, ranges in sorted(self.utterance_indexes.items())
            for first, last in ranges
            for index in range(first, last + 1)
        ]

    @property
    def channels(self) -> tuple[str, ...]:
        """Every channel known for the call, sorted."""
        return tuple(
            sorted({*self.channels_started, *self.channels_ended, *self.utterance_indexes})
        )

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
        """Inverse of ``to_json``; also reads the ``qa_call_state/1`` documents of earlier
        versions.

        Raises:
            ContractError: not a ``qa_call_state/2`` (or ``/1``) document.
        """
        try:
            data: Any = orjson.loads(value)
            schema = data.get("schema") if isinstance(data, dict) else None
            if schema == STATE_SCHEMA_V1:
                data = _from_v1(data)
            elif schema != STATE_SCHEMA:
                raise ContractError(f"call state has schema {schema!r}")
            reason = data.get("end_reason")
            return cls(
                **{
                    **data,
                    "utterance_indexes": {
                        str(channel): _read_ranges(ranges)
                        for channel, ranges in data["utterance_indexes"].items()
                    },
                    "channels_started": tuple(data["channels_started"]),
                    "channels_ended": tuple(data["channels_ended"]),
                    "end_reason": EndReason(reason) if reason else None,
                }
            )
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as error:
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
        if before.has_utterance(final.channel, final.utterance_index):
            return FinalStep(replace(before, last_activity_ms=self._clock.now_ms()), False)
        after = replace(
            before,
            tenant=final.tenant,
            utterance_indexes={
                **before.utterance_indexes,
                final.channel: _with_index(
                    before.utterance_indexes.get(final.channel, ()), final.utterance_index
                ),
            },
            blank_finals=before.blank_finals + (not has_speech(final)),
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
        """Close an idle call, or expire (``None``) an ended call past its retention whose last
        change is published."""
        now_ms = self._clock.now_ms()
        if state.ended_ms is not None:
            return None if self._expired(state) else state
        if now_ms - state.last_activity_ms >= self.idle_timeout_ms:
            return replace(state, ended_ms=now_ms, end_reason=EndReason.IDLE_TIMEOUT, dirty=True)
        return state

    def tick_due(self, state: CallState, *, idle_checks: bool = True) -> bool:
        """Whether a tick would expire, publish or (with ``idle_checks``) idle-close ``state``."""
        now_ms = self._clock.now_ms()
        if state.ended_ms is not None:
            return self._expired(state) or self.needs_publication(state)
        return idle_checks and now_ms - state.last_activity_ms >= self.idle_timeout_ms

    def _expired(self, state: CallState) -> bool:
        """Ended ``retention_ms`` ago, and nothing left to publish: a retention shorter than
        the end grace (or a late final just before the expiry) must not drop a call whose
        summary is still to come."""
        if state.ended_ms is None or state.dirty:
            return False
        return self._clock.now_ms() - state.ended_ms >= self.retention_ms

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
        """The summary as of now. Content that differs from the last published revision (a late
        final during the grace) is shown as the next revision, unpublished (``published_ms``
        None): a revision number never labels content that revision did not publish."""
        summary = summarize(state.meta(), finals, self.rules)
        if state.revision and content_digest(summary) != state.published_digest:
            summary = replace(summary, revision=state.revision + 1, published_ms=None)
        return summary
