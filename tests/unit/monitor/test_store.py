"""The monitor's store, filled by hand: live and ended calls, idempotence, bounds, search."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.clock import ManualClock
from pipeline.contracts.messages import EndpointReason, EventType
from pipeline.monitor.store import (
    CallQuery,
    Lane,
    MonitorStore,
    StoreLimits,
    lane_of,
)
from pipeline.qa.summary import CallStatus
from tests.unit.monitor.builders import T0_MS, event, partial, said, summary_of

STARTED, ENDED = EventType.SESSION_STARTED, EventType.SESSION_ENDED


def _store(clock: ManualClock | None = None, **limits: int) -> MonitorStore:
    return MonitorStore(StoreLimits(**limits), clock or ManualClock(T0_MS))


def _start(store: MonitorStore, call_id: str, *channels: str, at_ms: int = T0_MS) -> None:
    for channel in channels:
        store.apply(event(STARTED, call_id, channel, at_ms=at_ms))


def test_lanes_put_the_agent_left_the_customer_right_and_the_rest_in_the_middle() -> None:
    assert lane_of("agent") is Lane.LEFT
    assert lane_of("Customer") is Lane.RIGHT
    assert lane_of("mono") is Lane.CENTER
    assert lane_of("supervisor") is Lane.CENTER


def test_a_started_call_is_live_with_its_tenant_and_channels() -> None:
    store = _store()
    _start(store, "c1", "agent", "customer")
    (row,) = store.live_calls()
    assert (row.call_id, row.tenant, row.status, row.started_ms) == (
        "c1",
        "acme",
        CallStatus.LIVE,
        T0_MS,
    )
    assert [(c.channel, c.lane, c.ended) for c in row.channels] == [
        ("agent", Lane.LEFT, False),
        ("customer", Lane.RIGHT, False),
    ]


def test_the_newest_partial_of_a_channel_is_shown_and_older_ones_are_ignored() -> None:
    store = _store()
    store.apply(partial("c1", "agent", 0, 0, "", "hello"))
    store.apply(partial("c1", "agent", 0, 2, "hello this", "call"))
    store.apply(partial("c1", "agent", 0, 1, "hello", "this"))  # late, superseded
    store.apply(partial("c1", "agent", 0, 2, "hello this", "call"))  # repeated after failover
    (channel,) = store.live_calls()[0].channels
    assert (channel.committed_text, channel.tentative_text, channel.final) == (
        "hello this",
        "call",
        False,
    )
    assert channel.utterance_index == 0


def test_a_final_replaces_the_partial_and_late_partials_of_it_are_ignored() -> None:
    store = _store()
    store.apply(partial("c1", "agent", 0, 3, "hello this call", "may"))
    store.apply(said("c1", "agent", 0, "hello this call may be recorded", 0))
    store.apply(partial("c1", "agent", 0, 4, "hello this call may", "be"))
    (channel,) = store.live_calls()[0].channels
    assert (channel.committed_text, channel.tentative_text, channel.final) == (
        "hello this call may be recorded",
        "",
        True,
    )
    store.apply(partial("c1", "agent", 1, 0, "", "how can"))
    (channel,) = store.live_calls()[0].channels
    assert (channel.tentative_text, channel.final, channel.utterance_index) == ("how can", False, 1)


def test_a_session_end_closes_an_utterance_that_never_got_its_final() -> None:
    # The engine publishes no final when the final's text is empty or suppressed by a guard:
    # the utterance's last partial must not stay open on the card, the page or in the search.
    store = _store()
    _start(store, "c1", "agent", "customer")
    store.apply(said("c1", "agent", 2, "thanks for calling", 5000))
    store.apply(partial("c1", "agent", 3, 2, "thank you for", "watching", at_ms=T0_MS + 9800))
    store.apply(partial("c1", "customer", 0, 0, "", "bye", at_ms=T0_MS + 9900))
    store.apply(event(ENDED, "c1", "agent", at_ms=T0_MS + 10_000, audio_ms=10_000))
    agent, customer = store.live_calls()[0].channels
    assert (agent.committed_text, agent.tentative_text, agent.final) == (
        "thanks for calling",
        "",
        True,
    )
    assert agent.utterance_index == 2
    assert (customer.tentative_text, customer.final) == ("bye", False)  # still in its session
    detail = store.detail("c1")
    assert detail is not None
    assert [u.channel for u in detail.open_utterances] == ["customer"]
    assert store.search(CallQuery(text="thank you for watching")).total == 0
    # A partial of the ended session read after its end (another topic) does not reopen it.
    store.apply(partial("c1", "agent", 3, 3, "thank you for", "watching", at_ms=T0_MS + 9900))
    assert store.live_calls()[0].channels[0].final
    # A new session's partials show again.
    _start(store, "c1", "agent", at_ms=T0_MS + 20_000)
    store.apply(partial("c1", "agent", 4, 0, "", "hello again", at_ms=T0_MS + 20_500))
    assert store.live_calls()[0].channels[0].tentative_text == "hello again"


def test_an_utterance_without_a_final_closes_when_a_later_one_of_its_channel_arrives() -> None:
    store = _store()
    store.apply(partial("c1", "agent", 0, 5, "thank you for", "watching"))
    store.apply(said("c1", "agent", 1, "how can I help", 4000))  # utterance 0 had no final
    (channel,) = store.live_calls()[0].channels
    assert (channel.committed_text, channel.final, channel.utterance_index) == (
        "how can I help",
        True,
        1,
    )
    store.apply(partial("c1", "agent", 0, 6, "thank you for watching"))  # late: ignored
    assert store.live_calls()[0].channels[0].final
    store.apply(partial("c1", "agent", 2, 9, "x", "y"))
    store.apply(partial("c1", "agent", 3, 0, "", "next one"))  # utterance 2 had no final
    assert store.live_calls()[0].channels[0].tentative_text == "next one"
    assert store.search(CallQuery(text="x y")).total == 0


def test_a_call_ends_when_every_channel_ended_and_lingers_on_the_live_page() -> None:
    clock = ManualClock(T0_MS)
    store = _store(clock, ended_linger_ms=60_000)
    _start(store, "c1", "agent", "customer")
    store.apply(event(ENDED, "c1", "agent", at_ms=T0_MS + 30_000, audio_ms=30_000))
    assert store.live_calls()[0].status is CallStatus.LIVE
    store.apply(event(ENDED, "c1", "customer", at_ms=T0_MS + 31_000, audio_ms=31_500))
    (row,) = store.live_calls()
    assert (row.status, row.ended_ms, row.audio_ms) == (CallStatus.ENDED, T0_MS + 31_000, 31_500)
    assert all(channel.ended for channel in row.channels)
    clock.advance(31_000 + 60_000)
    assert store.live_calls() == ()  # still a recent call, no longer on the live page
    assert store.row("c1") is not None


def test_a_new_session_reopens_an_ended_call() -> None:
    store = _store()
    _start(store, "c1", "mono")
    store.apply(event(ENDED, "c1", "mono"))
    _start(store, "c1", "mono", at_ms=T0_MS + 5000)
    assert store.live_calls()[0].status is CallStatus.LIVE


def test_finals_are_held_once_and_ordered_by_time_in_the_conversation() -> None:
    store = _store()
    later = said("c1", "customer", 0, "I want a refund", 4000)
    first = said("c1", "agent", 0, "hello how can I help", 500)
    second = said("c1", "agent", 1, "I can do that", 9000)
    for final in (later, second, first, later):
        store.apply(final)
    detail = store.detail("c1")
    assert detail is not None
    assert [u.utterance_id for u in detail.utterances] == [
        first.utterance_id,
        later.utterance_id,
        second.utterance_id,
    ]
    assert [u.lane for u in detail.utterances] == [Lane.LEFT, Lane.RIGHT, Lane.LEFT]
    shown = detail.utterances[0]
    assert (shown.words, shown.endpoint_reason, shown.latency_ms) == (
        first.words,
        EndpointReason.SILENCE,
        250,
    )
    assert detail.call.utterances == 3
    assert detail.call.preview == "hello how can I help"


def test_finals_after_the_end_are_still_added() -> None:
    store = _store()
    _start(store, "c1", "agent")
    store.apply(event(ENDED, "c1", "agent", audio_ms=20_000))
    store.apply(said("c1", "agent", 3, "goodbye", 18_000))
    detail = store.detail("c1")
    assert detail is not None
    assert [u.text for u in detail.utterances] == ["goodbye"]
    assert detail.call.status is CallStatus.ENDED


def test_open_utterances_show_only_while_the_call_is_live() -> None:
    store = _store()
    _start(store, "c1", "agent", "customer")
    store.apply(partial("c1", "customer", 0, 1, "my bill", "is high", start_ms=2000))
    detail = store.detail("c1")
    assert detail is not None
    (open_utterance,) = detail.open_utterances
    assert (open_utterance.channel, open_utterance.lane, open_utterance.committed_text) == (
        "customer",
        Lane.RIGHT,
        "my bill",
    )
    store.apply(event(ENDED, "c1", "agent"))
    store.apply(event(ENDED, "c1", "customer"))
    detail = store.detail("c1")
    assert detail is not None
    assert detail.open_utterances == ()


def test_the_newest_qa_revision_wins_and_an_ended_summary_ends_the_call() -> None:
    store = _store()
    finals = [said("c1", "agent", 0, "this call may be recorded", 500)]
    for final in finals:
        store.apply(final)
    second = summary_of("c1", finals, revision=2)
    store.apply(second)
    store.apply(summary_of("c1", finals, revision=1))
    detail = store.detail("c1")
    assert detail is not None
    assert detail.qa == second
    assert (detail.call.qa_revision, detail.call.compliance_passed) == (2, True)
    assert detail.call.status is CallStatus.ENDED


def test_a_call_known_only_from_its_summary_shows_the_qa_transcript() -> None:
    store = _store()
    finals = [
        said("c1", "agent", 0, "this call may be recorded", 500),
        said("c1", "customer", 0, "okay", 4000),
    ]
    store.apply(summary_of("c1", finals))
    detail = store.detail("c1")
    assert detail is not None
    assert [(u.channel, u.text, u.endpoint_reason) for u in detail.utterances] == [
        ("agent", "this call may be recorded", None),
        ("customer", "okay", None),
    ]
    assert detail.call.utterances == 2
    assert detail.call.preview == "this call may be recorded"


def test_past_max_calls_the_least_recently_updated_ended_call_goes_first() -> None:
    store = _store(max_calls=3)
    _start(store, "live-old", "mono", at_ms=T0_MS)
    _start(store, "ended-1", "mono", at_ms=T0_MS + 1)
    store.apply(event(ENDED, "ended-1", "mono", at_ms=T0_MS + 2))
    _start(store, "live-2", "mono", at_ms=T0_MS + 3)
    store.drain_changes()
    _start(store, "new", "mono", at_ms=T0_MS + 4)
    assert len(store) == 3
    assert "ended-1" not in store
    assert "live-old" in store
    _start(store, "newer", "mono", at_ms=T0_MS + 5)
    assert "live-old" not in store  # every call is live: the least recently updated goes
    changes = store.drain_changes()
    assert changes.evicted == ("ended-1", "live-old")
    assert changes.changed == ("new", "newer")


def test_a_late_record_of_an_evicted_ended_call_never_pushes_out_a_live_call() -> None:
    # Review finding: it came back ended and the oldest live call was evicted for it, its
    # finals lost and its start time wrong when it came back on its next partial.
    store = _store(max_calls=2)
    _start(store, "a", "mono", at_ms=T0_MS)
    store.apply(event(ENDED, "a", "mono", at_ms=T0_MS + 1))
    _start(store, "b", "mono", at_ms=T0_MS + 2)
    _start(store, "c", "mono", at_ms=T0_MS + 3)
    assert "a" not in store
    store.apply(said("a", "mono", 0, "a late final", 500))
    assert ("b" in store, "c" in store, "a" in store) == (True, True, False)


def test_a_refill_keeps_the_most_recent_ended_calls_whatever_the_reading_order() -> None:
    # Review finding: eviction followed arrival, and a restart re-reads the window partition by
    # partition, so older calls of the last partition read outlived newer ones of the first.
    store = _store(max_calls=4)
    by_partition = [range(0, 12, 3), range(1, 12, 3), range(2, 12, 3)]
    for calls in by_partition:
        for n in calls:
            _start(store, f"c{n:02d}", "mono", at_ms=T0_MS + 1000 * n)
            store.apply(event(ENDED, f"c{n:02d}", "mono", at_ms=T0_MS + 1000 * n + 500))
    assert sorted(row.call_id for row in store.search(CallQuery()).calls) == [
        "c08",
        "c09",
        "c10",
        "c11",
    ]


def test_calls_older_than_max_age_are_expired() -> None:
    clock = ManualClock(T0_MS)
    store = _store(clock, max_age_ms=10_000)
    _start(store, "old", "mono", at_ms=T0_MS)
    _start(store, "fresh", "mono", at_ms=T0_MS + 8000)
    clock.advance(12_000)
    assert store.expire() == 1
    assert "old" not in store
    assert "fresh" in store


def test_each_call_keeps_at_most_its_newest_utterances() -> None:
    store = _store(max_utterances_per_call=2)
    for index in range(4):
        store.apply(said("c1", "agent", index, f"word{index}", index * 1000))
    detail = store.detail("c1")
    assert detail is not None
    assert [u.text for u in detail.utterances] == ["word2", "word3"]
    assert (detail.dropped_utterances, detail.call.utterances) == (2, 4)
    assert detail.call.preview == "word2"


def test_changes_are_reported_once_per_call() -> None:
    store = _store()
    for revision in range(5):
        store.apply(partial("c1", "agent", 0, revision, "x" * revision))
    store.apply(partial("c2", "agent", 0, 0, "y"))
    assert store.drain_changes().changed == ("c1", "c2")
    assert store.drain_changes().changed == ()
    store.apply(partial("c1", "agent", 0, 1, "stale"))  # ignored: no change
    assert store.drain_changes().changed == ()


def test_dead_letters_are_counted_per_minute_over_the_window() -> None:
    clock = ManualClock(T0_MS)
    store = _store(clock, dead_letter_window_ms=30_000)
    for offset_ms in (0, 10_000, 20_000):
        store.apply(event(EventType.CHUNK_REJECTED, None, None, at_ms=T0_MS + offset_ms))
    clock.advance(25_000)
    assert store.dead_letters_per_minute() == pytest.approx(6.0)
    clock.advance(20_000)  # the first two left the window
    assert store.dead_letters_per_minute() == pytest.approx(2.0)
    assert len(store) == 0  # dead letters create no call


def _search_store() -> MonitorStore:
    store = _store()
    calls = [
        ("acme-1", "acme", 0, "this call may be recorded for quality"),
        ("acme-2", "acme", 60_000, "I want a refund please"),
        ("globex-1", "globex", 120_000, "my internet is down"),
    ]
    for call_id, tenant, at_ms, text in calls:
        store.apply(event(STARTED, call_id, "agent", at_ms=T0_MS + at_ms, tenant=tenant))
        store.apply(
            replace(
                said(call_id, "agent", 0, text, 500, tenant=tenant), emit_ms=T0_MS + at_ms + 5000
            )
        )
        store.apply(event(ENDED, call_id, "agent", at_ms=T0_MS + at_ms + 30_000, tenant=tenant))
    store.apply(event(STARTED, "globex-2", "agent", at_ms=T0_MS + 200_000, tenant="globex"))
    store.apply(
        partial(
            "globex-2",
            "agent",
            0,
            1,
            "I need a refund",
            "now",
            tenant="globex",
            at_ms=T0_MS + 201_000,
        )
    )
    return store


def _ids(store: MonitorStore, **query: object) -> list[str]:
    return [row.call_id for row in store.search(CallQuery(**query)).calls]  # type: ignore[arg-type]


def test_search_lists_newest_first_and_filters_by_id_tenant_and_status() -> None:
    store = _search_store()
    assert _ids(store) == ["globex-2", "globex-1", "acme-2", "acme-1"]
    assert _ids(store, call_id="ACME") == ["acme-2", "acme-1"]
    assert _ids(store, tenant="globex") == ["globex-2", "globex-1"]
    assert _ids(store, status=CallStatus.LIVE) == ["globex-2"]


def test_search_by_time_range_keeps_calls_that_overlap_it() -> None:
    store = _search_store()
    # acme-1 runs T0..T0+30 s, acme-2 T0+60..90 s, globex-1 T0+120..150 s.
    assert _ids(store, from_ms=T0_MS + 70_000, to_ms=T0_MS + 125_000) == ["globex-1", "acme-2"]
    assert _ids(store, to_ms=T0_MS + 10_000) == ["acme-1"]


def test_search_by_text_matches_words_in_order_ignoring_case_and_punctuation() -> None:
    store = _search_store()
    assert _ids(store, text="Call may be RECORDED.") == ["acme-1"]
    assert _ids(store, text="refund") == ["globex-2", "acme-2"]  # a live partial counts
    assert _ids(store, text="recorded call") == []
    assert _ids(store, text="record") == []  # whole words only


def test_search_pages_through_the_matches() -> None:
    store = _search_store()
    first = store.search(CallQuery(page_size=3))
    second = store.search(CallQuery(page_size=3, page=2))
    # Review finding: a page past the end answered itself, empty ("showing 2451–2450",
    # "page 99 of 1"), and a page beyond 64 bits failed with a 500: it is now the last page.
    beyond = store.search(CallQuery(page_size=3, page=5))
    huge = store.search(CallQuery(page_size=3, page=2**64))
    assert (first.total, first.pages, len(first.calls)) == (4, 2, 3)
    assert [row.call_id for row in second.calls] == ["acme-1"]
    assert beyond == huge == second
    with pytest.raises(ValueError, match="page"):
        CallQuery(page=0)
    with pytest.raises(ValueError, match="page"):
        CallQuery(page_size=1000)


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="max_calls"):
        StoreLimits(max_calls=0)
    with pytest.raises(ValueError, match="max_age_ms"):
        StoreLimits(max_age_ms=0)


def test_an_ended_call_evicted_before_its_finals_arrive_comes_back_ended() -> None:
    # At start-up asr.events (small) is read far ahead of asr.finals: three calls end, the
    # oldest is evicted, then its finals arrive. It must not come back as a live call.
    clock = ManualClock(T0_MS + 3_600_000)
    store = MonitorStore(StoreLimits(max_calls=2), clock)
    for n, call_id in enumerate(["c1", "c2", "c3"]):
        for channel in ("agent", "customer"):
            store.apply(event(EventType.SESSION_STARTED, call_id, channel, at_ms=T0_MS + n))
            store.apply(event(EventType.SESSION_ENDED, call_id, channel, at_ms=T0_MS + n + 9))
    assert "c1" not in {row.call_id for row in store.search(CallQuery()).calls}
    store.apply(said("c1", "agent", 0, "hello this call may be recorded", 1000))
    assert "c1" not in {row.call_id for row in store.live_calls()}
    [row] = [row for row in store.search(CallQuery()).calls if row.call_id == "c1"]
    assert row.status is CallStatus.ENDED


def test_dead_letters_read_out_of_time_order_are_counted_by_their_own_time() -> None:
    # Partitions are read interleaved: after a restart a recent dead letter can come before
    # old ones. Only those within the window count.
    clock = ManualClock(T0_MS + 3_600_000)
    store = _store(clock, dead_letter_window_ms=60_000)
    store.apply(event(EventType.CHUNK_REJECTED, None, None, at_ms=T0_MS + 3_590_000))
    for minute in range(50):
        store.apply(event(EventType.CHUNK_REJECTED, None, None, at_ms=T0_MS + minute * 60_000))
    store.apply(event(EventType.CHUNK_REJECTED, None, None, at_ms=T0_MS + 3_560_000))
    assert store.dead_letters_per_minute() == pytest.approx(2.0)
