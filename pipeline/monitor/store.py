"""The monitor's memory: recent calls built from partials, finals, events and QA summaries.

Pure and single-threaded: no Kafka, no HTTP, time only from the injected ``Clock`` (for the age
limit and the live page's linger) and from the records themselves. The server applies records on
its event loop and reads views from the same thread.

Contracts:

- **Bounded.** At most ``max_calls`` calls are held; past it the least recently updated *ended*
  call is evicted first (a live call only when every call is live). A call whose newest record is
  older than ``max_age_ms`` leaves at the next ``expire``. Each call keeps at most
  ``max_utterances_per_call`` finals (the oldest go first; ``dropped_utterances`` counts them),
  and the dead-letter tally keeps ``dead_letter_window_ms`` of timestamps.
- **Idempotent.** A final already held (same ``utterance_id``), a partial older than the one
  shown (by utterance index, then revision), a partial of an utterance already final, a partial
  emitted before its channel's ``session_ended`` and a QA summary of a lower revision change
  nothing; records may repeat after a failover or a replay.
- **Order-tolerant.** Finals and events come from different topics: a call may end before its
  last finals arrive, and they are still added.
- **Live and ended.** A call has ended when every channel it has seen has a ``session_ended``
  event (or its QA summary says it ended); a ``session_started`` reopens it. Ended calls stay on
  the live page for ``ended_linger_ms`` after their end.
- **Open utterances.** A channel shows at most one open utterance: its newest partial, until a
  final of that or a later utterance, a partial of a later one, or the channel's
  ``session_ended`` closes it (the engine publishes no final when a final's text is empty or
  suppressed by a guard, so a partial may never see its final).
- **Changes.** Every call a record touched is reported once by ``drain_changes`` (with the calls
  evicted since), so the server pushes one update per call per flush, whatever the record rate.
"""

from __future__ import annotations

import bisect
import enum
import math
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from pipeline.clock import Clock
from pipeline.contracts.messages import EndpointReason, EventType, Final, Word, utterance_id_parts
from pipeline.monitor.records import MonitorEvent, MonitorRecord, PartialUpdate
from pipeline.qa.matching import normalize_words
from pipeline.qa.summary import CallStatus, CallSummary

__all__ = [
    "MAX_PAGE_SIZE",
    "CallDetail",
    "CallPage",
    "CallQuery",
    "CallRow",
    "ChannelView",
    "Lane",
    "MonitorStore",
    "OpenUtterance",
    "StoreChanges",
    "StoreLimits",
    "UtteranceView",
    "lane_of",
]

MAX_PAGE_SIZE = 200
PREVIEW_CHARS = 160


class Lane(enum.StrEnum):
    """Where a channel's speech is drawn in the two-lane conversation."""

    LEFT = "left"
    RIGHT = "right"
    CENTER = "center"


_LANES = {"agent": Lane.LEFT, "customer": Lane.RIGHT}


def lane_of(channel: str) -> Lane:
    """``agent`` left, ``customer`` right; ``mono`` and any other label centered."""
    return _LANES.get(channel.lower(), Lane.CENTER)


@dataclass(frozen=True, slots=True)
class StoreLimits:
    """Memory bounds and the live page's linger (see the module docstring)."""

    max_calls: int = 1000
    max_age_ms: int = 86_400_000
    ended_linger_ms: int = 60_000
    max_utterances_per_call: int = 5000
    dead_letter_window_ms: int = 60_000

    def __post_init__(self) -> None:
        if self.max_calls < 1 or self.max_utterances_per_call < 1:
            raise ValueError("max_calls and max_utterances_per_call must be at least 1")
        if self.max_age_ms < 1 or self.ended_linger_ms < 0 or self.dead_letter_window_ms < 1:
            raise ValueError("max_age_ms and dead_letter_window_ms > 0, ended_linger_ms >= 0")


@dataclass(frozen=True, slots=True)
class ChannelView:
    """What a live card shows for one channel.

    ``committed_text``/``tentative_text`` are the open utterance's partial while one is open
    (``final`` false), else the last final's text (``final`` true, no tentative text).
    ``audio_ms`` is the audio covered so far (ms from the channel's first sample).
    """

    channel: str
    lane: Lane
    ended: bool
    committed_text: str
    tentative_text: str
    final: bool
    utterance_index: int | None
    audio_ms: int


@dataclass(frozen=True, slots=True)
class CallRow:
    """One call in a list (live page, recent calls, stream updates).

    ``started_ms``/``last_record_ms``/``ended_ms`` are epoch ms of records (emit or publication
    times); ``audio_ms`` is the longest channel's audio (``session_ended`` durations once known).
    ``compliance_passed`` and ``qa_revision`` come from the QA summary, ``None`` without one.
    """

    call_id: str
    tenant: str
    status: CallStatus
    started_ms: int
    last_record_ms: int
    ended_ms: int | None
    audio_ms: int
    channels: tuple[ChannelView, ...]
    utterances: int
    preview: str
    qa_revision: int | None
    compliance_passed: bool | None


@dataclass(frozen=True, slots=True)
class UtteranceView:
    """One final in the conversation. ``endpoint_reason`` is ``None`` for a line taken from the
    QA summary's transcript (when the finals themselves are no longer held)."""

    utterance_id: str
    channel: str
    lane: Lane
    utterance_index: int
    start_ms: int
    end_ms: int
    text: str
    words: tuple[Word, ...]
    endpoint_reason: EndpointReason | None
    latency_ms: int | None


@dataclass(frozen=True, slots=True)
class OpenUtterance:
    """The newest partial of an utterance not final yet (shown only while the call is live)."""

    channel: str
    lane: Lane
    utterance_index: int
    revision: int
    start_ms: int
    end_ms: int
    committed_text: str
    tentative_text: str


@dataclass(frozen=True, slots=True)
class CallDetail:
    """Everything the call page shows; ``utterances`` ordered by start time, then channel."""

    call: CallRow
    utterances: tuple[UtteranceView, ...]
    open_utterances: tuple[OpenUtterance, ...]
    qa: CallSummary | None
    dropped_utterances: int


@dataclass(frozen=True, slots=True)
class CallQuery:
    """A recent-calls search; every given criterion must hold.

    ``call_id``: substring, case-insensitive. ``tenant``: exact. ``from_ms``/``to_ms``: epoch ms;
    the call's span (first record to end, or to its newest record while live) must overlap them.
    ``text``: the words, normalized as the QA app does, appear in this order in one utterance
    (finals, the QA transcript, or an open partial). ``page`` counts from 1; newest calls first.
    """

    call_id: str = ""
    tenant: str = ""
    from_ms: int | None = None
    to_ms: int | None = None
    text: str = ""
    status: CallStatus | None = None
    page: int = 1
    page_size: int = 25

    def __post_init__(self) -> None:
        if self.page < 1 or not 1 <= self.page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page >= 1 and page_size in 1..{MAX_PAGE_SIZE}")


@dataclass(frozen=True, slots=True)
class CallPage:
    calls: tuple[CallRow, ...]
    total: int
    page: int
    page_size: int
    pages: int


@dataclass(frozen=True, slots=True)
class StoreChanges:
    """Calls touched since the last drain (still held), and calls evicted since then."""

    changed: tuple[str, ...]
    evicted: tuple[str, ...]


@dataclass(slots=True)
class _Channel:
    ended: bool = False
    ended_at_ms: int = 0
    """Emit time of the channel's newest ``session_ended``."""
    audio_ms: int = 0
    partial: PartialUpdate | None = None
    last_final_index: int = -1
    last_final_text: str = ""


@dataclass(slots=True)
class _Call:
    call_id: str
    tenant: str
    started_ms: int
    last_record_ms: int
    ended_ms: int | None = None
    channels: dict[str, _Channel] = field(default_factory=dict)
    finals: dict[str, Final] = field(default_factory=dict)
    dropped_utterances: int = 0
    first_final: Final | None = None
    """The earliest final with text (by start time, then channel): the call's preview."""
    qa: CallSummary | None = None
    search_lines: tuple[str, ...] | None = None
    """Normalized utterance texts, built on the first text search after a change."""


class MonitorStore:
    """Recent calls in memory (see the module docstring for the contracts)."""

    def __init__(self, limits: StoreLimits, clock: Clock) -> None:
        self._limits = limits
        self._clock = clock
        self._calls: OrderedDict[str, _Call] = OrderedDict()
        self._changed: set[str] = set()
        self._evicted: set[str] = set()
        # Calls evicted after they ended → when: a late record of one (its finals read after its
        # events at start-up, say) brings it back as ended, not as a live call. Bounded.
        self._ended_evicted: OrderedDict[str, int] = OrderedDict()
        # Emit times of recent chunk_rejected events, sorted: partitions are read interleaved,
        # so they do not arrive in time order.
        self._dead_letters_ms: list[int] = []

    @property
    def limits(self) -> StoreLimits:
        return self._limits

    def __len__(self) -> int:
        return len(self._calls)

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._calls

    # -- applying records ------------------------------------------------------------------

    def apply(self, record: MonitorRecord) -> None:
        """Apply one record (any order, repeats allowed)."""
        if isinstance(record, PartialUpdate):
            self._apply_partial(record)
        elif isinstance(record, Final):
            self._apply_final(record)
        elif isinstance(record, MonitorEvent):
            self._apply_event(record)
        else:
            self._apply_summary(record)

    def _touch(self, call_id: str, tenant: str | None, at_ms: int) -> _Call | None:
        """The call a record is applied to, added if new; None to drop the record: a late one
        of an evicted ended call, when only live calls could make room for it again."""
        call = self._calls.get(call_id)
        if call is None:
            if (
                call_id in self._ended_evicted
                and len(self._calls) >= self._limits.max_calls
                and all(other.ended_ms is None for other in self._calls.values())
            ):
                return None
            call = _Call(call_id, tenant or "default", started_ms=at_ms, last_record_ms=at_ms)
            call.ended_ms = self._ended_evicted.pop(call_id, None)
            self._calls[call_id] = call
            self._evicted.discard(call_id)
            self._evict_over_limit(keep=call_id)
        else:
            self._calls.move_to_end(call_id)
            call.started_ms = min(call.started_ms, at_ms)
            call.last_record_ms = max(call.last_record_ms, at_ms)
            if tenant and tenant != "default":
                call.tenant = tenant
        self._changed.add(call_id)
        return call

    def _apply_partial(self, partial: PartialUpdate) -> None:
        known = self._calls.get(partial.call_id)
        channel = known.channels.get(partial.channel) if known else None
        if channel is not None:
            if partial.utterance_index <= channel.last_final_index:
                return
            if channel.ended and partial.emit_ms <= channel.ended_at_ms:
                return  # read after its session ended (partials and events are other topics)
            shown = channel.partial
            if shown is not None and (shown.utterance_index, shown.revision) >= (
                partial.utterance_index,
                partial.revision,
            ):
                return
        call = self._touch(partial.call_id, partial.tenant, partial.emit_ms)
        if call is None:
            return
        channel = call.channels.setdefault(partial.channel, _Channel())
        channel.partial = partial
        channel.audio_ms = max(channel.audio_ms, partial.end_ms)
        call.search_lines = None

    def _apply_final(self, final: Final) -> None:
        known = self._calls.get(final.call_id)
        if known is not None and final.utterance_id in known.finals:
            return
        call = self._touch(final.call_id, final.tenant, final.emit_ms)
        if call is None:
            return
        call.finals[final.utterance_id] = final
        while len(call.finals) > self._limits.max_utterances_per_call:
            del call.finals[next(iter(call.finals))]
            call.dropped_utterances += 1
            call.first_final = None
        if call.first_final is None or call.first_final.utterance_id not in call.finals:
            call.first_final = _earliest(call.finals.values())
        elif final.text.strip() and _order(final) < _order(call.first_final):
            call.first_final = final
        channel = call.channels.setdefault(final.channel, _Channel())
        channel.audio_ms = max(channel.audio_ms, final.end_ms)
        if final.utterance_index >= channel.last_final_index:
            channel.last_final_index = final.utterance_index
            channel.last_final_text = final.text
        if channel.partial is not None and channel.partial.utterance_index <= final.utterance_index:
            channel.partial = None
        call.search_lines = None

    def _apply_event(self, event: MonitorEvent) -> None:
        if event.type is EventType.CHUNK_REJECTED:
            self._prune_dead_letters()
            oldest_ms = self._clock.now_ms() - self._limits.dead_letter_window_ms
            if event.emit_ms >= oldest_ms:  # an old one (read late) is not in the window
                bisect.insort(self._dead_letters_ms, event.emit_ms)
            return
        if event.call_id is None or event.channel is None:
            return
        call = self._touch(event.call_id, event.tenant, event.emit_ms)
        if call is None:
            return
        channel = call.channels.setdefault(event.channel, _Channel())
        if event.type is EventType.SESSION_STARTED:
            channel.ended = False
            call.ended_ms = None
            return
        channel.ended = True
        channel.ended_at_ms = max(channel.ended_at_ms, event.emit_ms)
        if channel.partial is not None:
            channel.partial = None  # an utterance the engine closed without a final
            call.search_lines = None
        if event.audio_ms is not None:
            channel.audio_ms = max(channel.audio_ms, event.audio_ms)
        if all(other.ended for other in call.channels.values()):
            call.ended_ms = max(call.ended_ms or 0, event.emit_ms)

    def _apply_summary(self, summary: CallSummary) -> None:
        known = self._calls.get(summary.call_id)
        if known is not None and known.qa is not None and known.qa.revision > summary.revision:
            return
        at_ms = summary.published_ms if summary.published_ms is not None else self._clock.now_ms()
        call = self._touch(summary.call_id, summary.tenant, at_ms)
        if call is None:
            return
        call.qa = summary
        if summary.status is CallStatus.ENDED and call.ended_ms is None:
            call.ended_ms = at_ms
        call.search_lines = None

    # -- limits ----------------------------------------------------------------------------

    def _evict_over_limit(self, keep: str) -> None:
        """Past ``max_calls``: the ended call with the oldest newest record goes first, then the
        live one. By record time, not by arrival: a restart re-reads the window partition by
        partition, and must keep the most recent calls, not the last read."""
        while len(self._calls) > self._limits.max_calls:
            victim = min(
                (call for cid, call in self._calls.items() if cid != keep),
                key=lambda call: (call.ended_ms is None, call.last_record_ms),
            )
            self._evict(victim.call_id)

    def _evict(self, call_id: str) -> None:
        ended_ms = self._calls[call_id].ended_ms
        if ended_ms is not None:
            self._ended_evicted[call_id] = ended_ms
            while len(self._ended_evicted) > max(self._limits.max_calls, 1000):
                self._ended_evicted.popitem(last=False)
        del self._calls[call_id]
        self._changed.discard(call_id)
        self._evicted.add(call_id)

    def _prune_dead_letters(self) -> None:
        oldest_ms = self._clock.now_ms() - self._limits.dead_letter_window_ms
        del self._dead_letters_ms[: bisect.bisect_left(self._dead_letters_ms, oldest_ms)]

    def expire(self) -> int:
        """Evict calls whose newest record is older than ``max_age_ms``; returns how many."""
        oldest_ms = self._clock.now_ms() - self._limits.max_age_ms
        stale = [cid for cid, call in self._calls.items() if call.last_record_ms < oldest_ms]
        for call_id in stale:
            self._evict(call_id)
        self._prune_dead_letters()
        return len(stale)

    def drain_changes(self) -> StoreChanges:
        """Calls changed and evicted since the previous drain (each reported once)."""
        changes = StoreChanges(tuple(sorted(self._changed)), tuple(sorted(self._evicted)))
        self._changed.clear()
        self._evicted.clear()
        return changes

    def dead_letters_per_minute(self) -> float:
        """``chunk_rejected`` events in the last ``dead_letter_window_ms``, per minute."""
        self._prune_dead_letters()
        return len(self._dead_letters_ms) * 60_000 / self._limits.dead_letter_window_ms

    # -- views -----------------------------------------------------------------------------

    def row(self, call_id: str) -> CallRow | None:
        call = self._calls.get(call_id)
        return None if call is None else self._row(call)

    def live_calls(self) -> tuple[CallRow, ...]:
        """Calls in progress and calls ended within ``ended_linger_ms``, newest first."""
        since_ms = self._clock.now_ms() - self._limits.ended_linger_ms
        live = [
            call
            for call in self._calls.values()
            if call.ended_ms is None or call.ended_ms > since_ms
        ]
        return tuple(self._row(call) for call in _newest_first(live))

    def detail(self, call_id: str) -> CallDetail | None:
        call = self._calls.get(call_id)
        if call is None:
            return None
        utterances = [
            UtteranceView(
                utterance_id=final.utterance_id,
                channel=final.channel,
                lane=lane_of(final.channel),
                utterance_index=final.utterance_index,
                start_ms=final.start_ms,
                end_ms=final.end_ms,
                text=final.text,
                words=final.words,
                endpoint_reason=final.endpoint_reason,
                latency_ms=final.latency_ms,
            )
            for final in call.finals.values()
        ]
        if not utterances and call.qa is not None:
            utterances = [
                UtteranceView(
                    utterance_id=line.utterance_id,
                    channel=line.speaker,
                    lane=lane_of(line.speaker),
                    utterance_index=_index_of(line.utterance_id),
                    start_ms=line.start_ms,
                    end_ms=line.end_ms,
                    text=line.text,
                    words=(),
                    endpoint_reason=None,
                    latency_ms=None,
                )
                for line in call.qa.transcript
            ]
        utterances.sort(key=lambda u: (u.start_ms, u.channel, u.utterance_index))
        open_utterances: tuple[OpenUtterance, ...] = ()
        if call.ended_ms is None:
            open_utterances = tuple(
                OpenUtterance(
                    channel=name,
                    lane=lane_of(name),
                    utterance_index=channel.partial.utterance_index,
                    revision=channel.partial.revision,
                    start_ms=channel.partial.start_ms,
                    end_ms=channel.partial.end_ms,
                    committed_text=channel.partial.committed_text,
                    tentative_text=channel.partial.tentative_text,
                )
                for name, channel in sorted(call.channels.items())
                if channel.partial is not None
            )
        return CallDetail(
            self._row(call), tuple(utterances), open_utterances, call.qa, call.dropped_utterances
        )

    def search(self, query: CallQuery) -> CallPage:
        """Calls matching ``query`` (see ``CallQuery``), newest first, one page of them."""
        wanted_id = query.call_id.strip().lower()
        wanted_tenant = query.tenant.strip()
        phrase = " ".join(normalize_words(query.text))
        matches = []
        for call in self._calls.values():
            if wanted_id and wanted_id not in call.call_id.lower():
                continue
            if wanted_tenant and call.tenant != wanted_tenant:
                continue
            if query.status is not None and _status(call) is not query.status:
                continue
            end_ms = call.ended_ms if call.ended_ms is not None else call.last_record_ms
            if query.from_ms is not None and end_ms < query.from_ms:
                continue
            if query.to_ms is not None and call.started_ms > query.to_ms:
                continue
            if phrase and not any(f" {phrase} " in line for line in self._search_lines(call)):
                continue
            matches.append(call)
        total = len(matches)
        pages = max(1, math.ceil(total / query.page_size))
        # A page past the end (a stale link, calls evicted while paging) is the last page.
        page = min(query.page, pages)
        first = (page - 1) * query.page_size
        chosen = _newest_first(matches)[first : first + query.page_size]
        return CallPage(
            tuple(self._row(call) for call in chosen), total, page, query.page_size, pages
        )

    def _search_lines(self, call: _Call) -> tuple[str, ...]:
        if call.search_lines is None:
            texts = [final.text for final in call.finals.values()]
            if call.qa is not None:
                texts += [line.text for line in call.qa.transcript]
            texts += [
                f"{channel.partial.committed_text} {channel.partial.tentative_text}"
                for channel in call.channels.values()
                if channel.partial is not None
            ]
            call.search_lines = tuple(f" {' '.join(normalize_words(text))} " for text in texts)
        return call.search_lines

    def _row(self, call: _Call) -> CallRow:
        channels = tuple(
            _channel_view(name, channel) for name, channel in sorted(call.channels.items())
        )
        first_text = call.first_final.text if call.first_final is not None else ""
        if not first_text and call.qa is not None and call.qa.transcript:
            first_text = call.qa.transcript[0].text
        if call.finals:
            utterances = len(call.finals) + call.dropped_utterances
        else:
            utterances = call.qa.utterances if call.qa is not None else 0
        audio_ms = max([0, *(channel.audio_ms for channel in call.channels.values())])
        if call.qa is not None:
            audio_ms = max(audio_ms, call.qa.duration_ms)
        return CallRow(
            call_id=call.call_id,
            tenant=call.tenant,
            status=_status(call),
            started_ms=call.started_ms,
            last_record_ms=call.last_record_ms,
            ended_ms=call.ended_ms,
            audio_ms=audio_ms,
            channels=channels,
            utterances=utterances,
            preview=_preview(first_text.strip()),
            qa_revision=call.qa.revision if call.qa is not None else None,
            compliance_passed=call.qa.compliance_passed if call.qa is not None else None,
        )


def _order(final: Final) -> tuple[int, str, int]:
    return (final.start_ms, final.channel, final.utterance_index)


def _earliest(finals: Iterable[Final]) -> Final | None:
    return min((final for final in finals if final.text.strip()), key=_order, default=None)


def _status(call: _Call) -> CallStatus:
    return CallStatus.LIVE if call.ended_ms is None else CallStatus.ENDED


def _newest_first(calls: list[_Call]) -> list[_Call]:
    return sorted(calls, key=lambda call: (-call.started_ms, call.call_id))


def _channel_view(name: str, channel: _Channel) -> ChannelView:
    partial = channel.partial
    index: int | None
    if partial is not None:
        committed, tentative, final = partial.committed_text, partial.tentative_text, False
        index = partial.utterance_index
    else:
        committed, tentative, final = channel.last_final_text, "", True
        index = channel.last_final_index if channel.last_final_index >= 0 else None
    return ChannelView(
        channel=name,
        lane=lane_of(name),
        ended=channel.ended,
        committed_text=committed,
        tentative_text=tentative,
        final=final,
        utterance_index=index,
        audio_ms=channel.audio_ms,
    )


def _preview(text: str) -> str:
    if len(text) <= PREVIEW_CHARS:
        return text
    return text[: PREVIEW_CHARS - 1].rstrip() + "…"


def _index_of(uid: str) -> int:
    index = utterance_id_parts(uid)[2]
    return int(index) if index.isascii() and index.isdigit() else 0
