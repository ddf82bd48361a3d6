"""The per-call lifecycle: duplicates, call end, idle timeout, retention, revisions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.clock import ManualClock
from pipeline.contracts.messages import Event, EventType, Final, utterance_id
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
    assert call.state.utterance_ids() == ["call-1:agent:0", "call-1:customer:0"]
    assert call.published[0].utterances == 2


@given(st.lists(st.tuples(st.sampled_from(["agent", "customer"]), st.integers(0, 40))))
def test_utterances_are_recorded_as_a_set_per_channel(finals: list[tuple[str, int]]) -> None:
    """Whatever the order, gaps and repeats: a final is new exactly when its id was not seen,
    and the state lists every id seen once."""
    analytics = CallAnalytics(
        DEFAULT_RULES,
        ManualClock(0),
        idle_timeout_ms=IDLE_MS,
        retention_ms=RETENTION_MS,
        end_grace_ms=GRACE_MS,
    )
    state: CallState | None = None
    seen: set[str] = set()
    for channel, index in finals:
        step = analytics.on_final(state, final(channel, index, "hello", 1000 * index))
        assert step.is_new is (utterance_id(CALL, channel, index) not in seen)
        seen.add(utterance_id(CALL, channel, index))
        state = step.state
    if state is not None:
        ids = state.utterance_ids()
        assert (sorted(ids), len(ids)) == (sorted(seen), len(seen))
        assert sum(state.channel_finals.values()) == len(seen)
        assert CallState.from_json(state.to_json()) == state


def test_the_state_record_does_not_grow_with_the_call(analytics: CallAnalytics) -> None:
    """Review finding: the state listed every utterance id and was rewritten to the changelog
    on every record; past the producer's 1 MB limit (7,000 finals with 128-character call
    ids) its write failed and the app stopped, then crash-looped on restart."""
    call_id = "x" * 128
    state: CallState | None = None
    sizes = []
    for n in range(4000):
        item = final(("agent", "customer")[n % 2], n // 2, "hello", 1000 * n, call_id=call_id)
        state = analytics.on_final(state, item).state
        if n in (1, 3999):
            sizes.append(len(state.to_json()))
    assert sizes[1] == sizes[0] + 2 * len("1999") - 2 * len("0")
    assert sizes[1] < 1000
    assert state is not None
    assert len(state.utterance_ids()) == 4000


def test_a_state_of_the_first_format_is_read(analytics: CallAnalytics) -> None:
    """An upgrade finds ``qa_call_state/1`` records (every utterance id listed) in the
    changelog: they read as the same call."""
    call = Call(analytics)
    call.feed(WHOLE_CALL)
    call.final(final("agent", 2, "and one more", 7000))  # index 1 of the agent never came
    assert call.state is not None
    data = orjson.loads(call.state.to_json())
    del data["utterance_indexes"], data["blank_finals"]
    old = {
        **data,
        "schema": "qa_call_state/1",
        "utterance_ids": ["call-1:agent:0", "call-1:customer:0", "call-1:agent:2"],
        "channel_finals": {"agent": 2, "customer": 1},
    }
    assert CallState.from_json(orjson.dumps(old)) == call.state
    assert call.state.utterance_indexes == {"agent": ((0, 0), (2, 2)), "customer": ((0, 0),)}


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


def test_a_call_is_never_expired_before_its_summary_is_published(clock: ManualClock) -> None:
    """Review finding: with ``retention_ms`` < ``end_grace_ms`` an ended call still waiting for
    a missing final was deleted before its summary was ever published."""
    analytics = CallAnalytics(
        DEFAULT_RULES, clock, idle_timeout_ms=IDLE_MS, retention_ms=2000, end_grace_ms=GRACE_MS
    )
    call = Call(analytics)
    call.feed([AGENT, session(ENDED, "agent", audio_ms=9000, finals=2)])  # final 1 lost
    assert call.state is not None
    assert call.state.ended
    clock.advance(GRACE_MS)
    assert analytics.tick_due(call.state)
    call.tick()
    assert [s.revision for s in call.published] == [1]
    assert analytics.tick_due(call.state)  # now published: past its retention
    call.tick()
    assert call.state is None


def _published_without_the_customer(clock: ManualClock, analytics: CallAnalytics) -> Call:
    """A call ended without its finals counts, published (revision 1) with the agent's final
    only: the customer's may still come, late."""
    call = Call(analytics)
    call.feed([*WHOLE_CALL[:2], AGENT, session(ENDED, "agent"), session(ENDED, "customer")])
    clock.advance(GRACE_MS)
    call.tick()
    return call


def test_a_late_final_just_before_the_expiry_is_published_first(
    clock: ManualClock, analytics: CallAnalytics
) -> None:
    call = _published_without_the_customer(clock, analytics)
    assert [s.revision for s in call.published] == [1]
    clock.advance(RETENTION_MS - GRACE_MS - 1)
    call.final(CUSTOMER)  # late, and the call has no finals counts: it waits for quiet
    clock.advance(1)
    assert call.state is not None
    assert not analytics.needs_publication(call.state)
    assert not analytics.tick_due(call.state)
    call.tick()
    assert call.state is not None, "not expired with its change unpublished"
    clock.advance(GRACE_MS)
    call.tick()
    assert [s.revision for s in call.published] == [1, 2]
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


def test_a_view_of_unpublished_changes_carries_the_next_revision(
    clock: ManualClock, analytics: CallAnalytics
) -> None:
    # Review finding: a late final waiting for its grace showed under the number and time of
    # the revision published before it, which never held it.
    call = _published_without_the_customer(clock, analytics)
    assert call.state is not None
    first = analytics.view(call.state, list(call.stored.values()))
    assert first == call.published[0]
    call.final(CUSTOMER)  # late: published once the call has been quiet for the grace
    pending = analytics.view(call.state, list(call.stored.values()))
    assert (pending.revision, pending.published_ms) == (2, None)
    assert pending.utterances == first.utterances + 1
    clock.advance(GRACE_MS)
    call.tick()
    assert analytics.view(call.state, list(call.stored.values())) == call.published[1]


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


@pytest.mark.parametrize(
    "value",
    [
        b"{}",
        b"[]",
        b"not json",
        b'{"schema": "qa_call_state/1"}',
        b'{"schema": "qa_call_state/2"}',
        b'{"schema": "qa_call_state/9"}',
    ],
)
def test_unreadable_state_is_a_contract_error(value: bytes) -> None:
    with pytest.raises(ContractError):
        CallState.from_json(value)


@pytest.mark.parametrize(
    "indexes", [[1], [[2, 1]], [[0, 1], [2, 3]], [[3, 4], [0, 1]], [[-1, 0]], "x"]
)
def test_state_with_broken_index_ranges_is_a_contract_error(
    analytics: CallAnalytics, indexes: object
) -> None:
    state = analytics.on_final(None, AGENT).state
    data = orjson.loads(state.to_json())
    data["utterance_indexes"] = {"agent": indexes}
    with pytest.raises(ContractError):
        CallState.from_json(orjson.dumps(data))


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
