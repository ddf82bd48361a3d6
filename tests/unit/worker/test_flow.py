"""Flow decisions: partial thinning, fetch backpressure, catch-up after an assignment, idle time."""

from __future__ import annotations

from pipeline.asr.session import SessionKey
from pipeline.worker.flow import FetchClock, PartialThinning, catching_up, paused_after

A, B, C = (SessionKey(f"call:{n}", "agent") for n in "abc")


def test_no_thinning_while_at_most_half_the_budget_is_due() -> None:
    thinning = PartialThinning(max_pending_jobs=4)
    steps = [thinning.step([A], pending_finals=1) for _ in range(3)]
    assert all(s.partials and not s.thinning and not s.changed for s in steps)
    assert [s.pending_jobs for s in steps] == [2, 2, 2]


def test_thinning_sheds_every_other_step_and_counts_each_due_partial_once() -> None:
    thinning = PartialThinning(max_pending_jobs=4)
    steps = [thinning.step([A, B, C], pending_finals=0) for _ in range(5)]
    assert [s.partials for s in steps] == [False, True, False, True, False]
    assert [s.newly_thinned for s in steps] == [3, 0, 0, 0, 0]  # the same three stay due
    assert [s.changed for s in steps] == [True, False, False, False, False]


def test_a_partial_that_becomes_due_again_is_counted_again() -> None:
    thinning = PartialThinning(max_pending_jobs=2)
    assert thinning.step([A, B], 0).newly_thinned == 2
    assert thinning.step([A], 1).partials  # B's partial ran; A still due
    assert thinning.step([A, B], 0).newly_thinned == 1  # B is due anew, A was counted


def test_thinning_switches_off_when_the_load_falls() -> None:
    thinning = PartialThinning(max_pending_jobs=2)
    thinning.step([A, B], 0)
    step = thinning.step([], 0)
    assert step.partials
    assert not step.thinning
    assert step.changed
    assert not thinning.thinning


def test_fetching_pauses_above_the_budget_and_resumes_at_half() -> None:
    assert not paused_after(False, pending_finals=8, max_pending_jobs=8)
    assert paused_after(False, pending_finals=9, max_pending_jobs=8)
    assert paused_after(True, pending_finals=5, max_pending_jobs=8)  # not yet down to half
    assert not paused_after(True, pending_finals=4, max_pending_jobs=8)


def _catching_up(since_s: float, lags: list[int | None]) -> bool:
    return catching_up(
        since_assigned_s=since_s, lags=lags, poll_batch=10, max_s=30.0, first_fetch_s=1.0
    )


def test_catching_up_while_the_backlog_is_more_than_a_poll_batch() -> None:
    assert _catching_up(5.0, [6, 5])
    assert not _catching_up(5.0, [6, 4])
    assert not _catching_up(30.0, [1000])  # never past the limit
    assert not _catching_up(5.0, [])  # nothing newly assigned (or all revoked)


def test_an_unfetched_partition_counts_as_behind_only_just_after_the_assignment() -> None:
    assert _catching_up(0.5, [None, 0])
    assert not _catching_up(1.5, [None, 0])
    assert _catching_up(1.5, [None, 11])


def test_the_fetch_clock_runs_only_while_fetching_and_at_most_a_tick_at_a_time() -> None:
    clock = FetchClock(max_tick_ms=5000)
    clock.tick(1_000, fetching=True)  # the first tick only sets the start
    clock.tick(1_500, fetching=True)
    assert clock.now_ms == 500
    clock.tick(9_500, fetching=False)  # paused, or every broker down: no caller's silence
    assert clock.now_ms == 500
    clock.tick(29_500, fetching=True)  # a stalled loop counts one tick's worth at most
    assert clock.now_ms == 5_500
    clock.tick(29_000, fetching=True)  # wall time stepping back never runs it backwards
    assert clock.now_ms == 5_500
