"""The per-call lifecycle: duplicates, call end, idle timeout, retention, revisions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import orjson
import pytest

from pipeline.clock import ManualClock
from pipeline.contracts.messages import Event, EventType, Final
from pipeline.errors import ContractError
from pipeline.qa.rules import DEFAULT_RULES
from pipeline.qa.state import CallAnalytics, CallState
from pipeline.qa.summary import CallStatus, CallSummary, EndReason, to_json
from tests.conftest import validate
from tests.qa_builders import CALL, final, session

STARTED, ENDED = EventType.SESSION_STARTED, EventType.SESSION_ENDED
IDLE_MS = 60_000
RETENTION_MS = 3_600_000
GRACE_MS = 5_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_700_000_000_000)


@pytest.fixture
def analytics(clock: ManualClock) -> CallAnalytics:
    return CallAnalytics(
        DEFAULT_RULES,
        clock,
        idle_timeout_ms=IDLE_MS,
        retention_ms=RETENTION_MS,
        end_grace_ms=GRACE_MS,
    )


class Call:
    """Feeds one call's records through ``CallAnalytics`` like the app's shell does."""

    def __init__(self, analytics: CallAnalytics) -> None:
        self.analytics = analytics
        self.state: CallState | None = None
        self.stored: dict[str, Final] = {}
        self.published: list[CallSummary] = []
        self.duplicates = 0

    def _publish(self) -> None:
        assert self.state is not None
        if self.analytics.needs_publication(self.state):
            self.state, summary = self.analytics.publish(self.state, self.stored.values())
            if summary is not None:
                self.published.append(summary)

    def final(self, item: Final) -> None:
        step = self.analytics.on_final(self.state, item)
        if step.is_new:
            self.stored[item.utterance_id] = item
        else:
            self.duplicates += 1
        self.state = step.state
        self._publish()

    def event(self, item: Event) -> None:
        self.state = self.analytics.on_event(self.state, item)
        self._publish()

    def tick(self) -> None:
        assert self.state is not None
        self.state = self.analytics.on_tick(self.state)
        if self.state is not None:
            self._publish()

    def feed(self, records: Sequence[Final | Event]) -> None:
        for record in records:
            if isinstance(record, Final):
                self.final(record)
            else:
                self.event(record)


AGENT = final("agent", 0, "hello this call may be recorded", 500)
CUSTOMER = final("customer", 0, "I need help with my bill", 4000)
WHOLE_CALL: list[Final | Event] = [
    session(STARTED, "agent"),
    session(STARTED, "customer"),
    AGENT,
    CUSTOMER,
    session(ENDED, "agent", audio_ms=9000, finals=1),
    session(ENDED, "customer", audio_ms=9500, finals=1),
]


def test_a_call_ends_when_every_channel_has_ended(analytics: CallAnalytics) -> None:
    call = Call(analytics)
    call.feed(WHOLE_CALL[:-1])
    assert call.state is not None
    assert not call.state.ended
    assert call.published == []
    call.feed(WHOLE_CALL[-1:])
    assert call.state.end_reason is EndReason.SESSIONS_ENDED
    (summary,) = call.published
    assert (summary.revision, summary.status, summary.duration_ms) == (1, CallStatus.ENDED, 9500)
    assert summary.utterances == 2


def test_a_channel_heard_only_in_finals_must_end_too(analytics: CallAnalytics) -> None:
    call = Call(analytics)
    call.feed([session(STARTED, "agent"), AGENT, CUSTOMER, session(ENDED, "agent")])
    assert call.state is not None
    assert not call.state.ended
    call.event(session(ENDED, "customer"))
    assert call.state.ended


def test_an_ended_call_waits_for_its_announced_finals(analytics: CallAnalytics) -> None:
    """session_ended read before the last final (another topic): publish once it arrived."""
    call = Call(analytics)
    call.feed(
        [
            *WHOLE_CALL[:2],
            AGENT,
            session(ENDED, "agent", finals=1),
            session(ENDED, "customer", finals=1),
        ]
    )
    assert call.state is not None
    assert call.state.ended
    assert not call.state.complete
    assert call.published == []
    call.final(CUSTOMER)
    assert [(s.revision, s.utterances) for s in call.published] == [(1, 2)]


def test_without_finals_counts_an_ended_call_waits_for_quiet(
    clock: ManualClock, analytics: CallAnalytics
) -> None:
    call = Call(analytics)
    call.feed([*WHOLE_CALL[:2], AGENT, session(ENDED, "agent"), session(ENDED, "customer")])
    assert call.state is not None
    assert analytics.publication_wait_ms(call.state) == GRACE_MS
    clock.advance(GRACE_MS - 1000)
    call.final(CUSTOMER)  # a straggler: restarts the quiet period
    assert call.published == []
    clock.advance(GRACE_MS - 1)
    assert analytics.publication_wait_ms(call.state) == 1
    assert not analytics.tick_due(call.state)
    clock.advance(1)
    assert analytics.tick_due(call.state)
    call.tick()
    assert [(s.revision, s.utterances) for s in call.published] == [(1, 2)]
    assert analytics.publication_wait_ms(call.state) is None


def test_duplicate_finals_are_recognized_and_count_once(analytics: CallAnalytics) -> None:
    call = Call(analytics)
    call.feed([AGENT, AGENT, CUSTOMER, replace(AGENT, text="changed"), *WHOLE_CALL])
    assert call.duplicates == 4
    assert call.state is not None
    assert call.state.utterance_ids == ("call-1:agent:0", "call-1:customer:0")
    assert call.published[0].utterances == 2


def test_a_late_final_publishes_the_next_revision(analytics: CallAnalytics) -> None:
    call = Call(analytics)
    call.feed(WHOLE_CALL)
    late = final("customer", 1, "thank you", 7000)
    call.final(late)
    assert [s.revision for s in call.published] == [1, 2]
    assert call.published[1].utterances == 3
    call.final(late)
    call.event(session(ENDED, "customer", audio_ms=9500, finals=1))
    assert [s.revision for s in call.published] == [1, 2], "duplicates change nothing"


def test_an_idle_call_ends_after_the_timeout(clock: ManualClock, analytics: CallAnalytics) -> None:
    call = Call(analytics)
    call.feed(WHOLE_CALL[:4])
    clock.advance(IDLE_MS - 1)
    assert call.state is not None
    assert not analytics.tick_due(call.state)
    call.tick()
    assert call.state is not None
    assert not call.state.ended
    clock.advance(1)
    assert analytics.tick_due(call.state)
    assert not analytics.tick_due(call.state, idle_checks=False)
    call.tick()
    assert call.state is not None
    assert call.state.end_reason is EndReason.IDLE_TIMEOUT
    assert [(s.revision, s.end_reason) for s in call.published] == [(1, EndReason.IDLE_TIMEOUT)]


def test_any_record_postpones_the_idle_timeout(
    clock: ManualClock, analytics: CallAnalytics
) -> None:
    call = Call(analytics)
    call.feed(WHOLE_CALL[:3])
    clock.advance(IDLE_MS - 1)
    call.final(AGENT)  # even a duplicate is a sign of life
    clock.advance(IDLE_MS - 1)
    call.tick()
    assert call.state is not None
    assert not call.state.ended


def test_an_ended_call_expires_after_the_retention(
    clock: ManualClock, analytics: CallAnalytics
) -> None:
    call = Call(analytics)
    call.feed(WHOLE_CALL)
    clock.advance(RETENTION_MS - 1)
    call.tick()
    assert call.state is not None
    clock.advance(1)
    call.tick()
    assert call.state is None


def test_the_live_view_and_the_published_summary(
    clock: ManualClock, analytics: CallAnalytics
) -> None:
    call = Call(analytics)
    call.feed(WHOLE_CALL[:4])
    assert call.state is not None
    live = analytics.view(call.state, list(call.stored.values()))
    assert (live.status, live.revision, live.published_ms) == (CallStatus.LIVE, 0, None)
    call.feed(WHOLE_CALL[4:])
    view = analytics.view(call.state, list(call.stored.values()))
    assert view == call.published[0]
    assert view.published_ms == clock.now_ms()


def test_unrelated_events_leave_the_state_alone(analytics: CallAnalytics) -> None:
    call = Call(analytics)
    call.feed(WHOLE_CALL[:2])
    before = call.state
    call.event(Event(EventType.SEQUENCE_GAP, 1, "worker-1", CALL, "agent"))
    assert call.state == before


def test_a_session_event_needs_call_and_channel(analytics: CallAnalytics) -> None:
    with pytest.raises(ContractError):
        analytics.on_event(None, Event(EventType.SESSION_ENDED, 1, "worker-1", CALL, None))


def test_state_json_round_trips(analytics: CallAnalytics) -> None:
    call = Call(analytics)
    call.feed(WHOLE_CALL)
    assert call.state is not None
    assert CallState.from_json(call.state.to_json()) == call.state


@pytest.mark.parametrize("value", [b"{}", b"[]", b"not json", b'{"schema": "qa_call_state/1"}'])
def test_unreadable_state_is_a_contract_error(value: bytes) -> None:
    with pytest.raises(ContractError):
        CallState.from_json(value)


def test_published_summaries_match_the_schema(analytics: CallAnalytics) -> None:
    call = Call(analytics)
    call.feed(WHOLE_CALL)
    call.final(final("agent", 1, "that's not my problem", 6000))
    for summary in call.published:
        validate("qa_call", orjson.loads(to_json(summary)))


def test_the_tenant_comes_from_session_events_or_finals(analytics: CallAnalytics) -> None:
    started = Event(STARTED, 1, "worker-1", CALL, "agent", {"tenant": "acme"})
    state = analytics.on_event(None, started)
    assert state.tenant == "acme"
    assert analytics.view(state, []).tenant == "acme"
    assert analytics.on_final(None, replace(AGENT, tenant="globex")).state.tenant == "globex"
