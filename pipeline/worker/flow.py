"""Flow decisions of the worker loop: partial thinning, fetch backpressure, catch-up, idle time.

Pure: each decision takes counts the loop read (jobs due in the engine, records behind in
Kafka) and returns what to do; the loop applies it (metrics, events, pausing the consumer).

The levers under load, in order: partials are thinned first (a step without partials decodes
finals only, sooner); if finals still pile up, fetching pauses. After an assignment, the loop
reads the backlog with VAD-only steps while it is catching up. Sessions are timed out on a
``FetchClock`` (decision ``docs/decisions/0007-idle-sessions-fetch-clock.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipeline.asr.session import SessionKey

__all__ = ["FetchClock", "PartialThinning", "ThinningStep", "catching_up", "paused_after"]


@dataclass(frozen=True, slots=True)
class ThinningStep:
    """One step's thinning decision."""

    partials: bool  # whether this step may decode partials
    newly_thinned: int  # due partials skipped for the first time (each is counted once)
    thinning: bool  # whether thinning is on (more than half the pending-job budget due)
    changed: bool  # thinning switched on or off at this step
    pending_jobs: int  # due partials + queued finals


class PartialThinning:
    """Sheds every other step's partials while more than half of ``max_pending_jobs`` is due.

    Thinned, never starved: due partials stay due and get the next step. A due partial is counted
    as thinned once, however many steps it waits.
    """

    def __init__(self, max_pending_jobs: int) -> None:
        self._max_pending_jobs = max_pending_jobs
        self._thinned: set[SessionKey] = set()  # due partials already counted thinned
        self._skipped_last = False  # whether the last step was one without partials
        self.thinning = False

    def step(self, due_partials: Iterable[SessionKey], pending_finals: int) -> ThinningStep:
        """Decide for the step about to run (call once per step)."""
        due = set(due_partials)
        pending = len(due) + pending_finals
        thin = pending > self._max_pending_jobs // 2
        self._thinned &= due
        skip = thin and not self._skipped_last
        self._skipped_last = skip
        newly_thinned = 0
        if skip:
            newly_thinned = len(due - self._thinned)
            self._thinned |= due
        changed = thin != self.thinning
        self.thinning = thin
        return ThinningStep(not skip, newly_thinned, thin, changed, pending)


def paused_after(paused: bool, pending_finals: int, max_pending_jobs: int) -> bool:
    """Whether fetching is paused after this step: it pauses while more finals wait than
    ``max_pending_jobs`` and resumes at half (hysteresis).

    Finals, not partials: partials can be shed (``PartialThinning``) and many speaking callers
    always have one due, so counting them would pause a busy worker for good.
    """
    if not paused:
        return pending_finals > max_pending_jobs
    return pending_finals > max_pending_jobs // 2


def catching_up(
    *,
    since_assigned_s: float,
    lags: Sequence[int | None],
    poll_batch: int,
    max_s: float,
    first_fetch_s: float,
) -> bool:
    """Whether the loop is still reading an assignment's backlog (VAD-only steps).

    ``lags``: records behind, per newly assigned partition still owned (None while unknown: not
    fetched yet). Catching up while they are more than a poll batch behind together, or while a
    lag is unknown within ``first_fetch_s`` of the assignment; never after ``max_s``.
    """
    if not lags or since_assigned_s >= max_s:
        return False
    if any(lag is None for lag in lags) and since_assigned_s < first_fetch_s:
        return True
    return sum(lag or 0 for lag in lags) > poll_batch


class FetchClock:
    """The time the worker spent fetching (ms), what idle sessions are timed on: it stands
    still while fetching is paused or every broker is unreachable (a broker outage is no
    caller's silence: counted, it closed every session of a long one, and their audio after
    it was refused), and advances at most ``max_tick_ms`` per loop iteration (a stall of the
    loop, commit retries or a checkpoint read, is not a publisher going silent)."""

    def __init__(self, max_tick_ms: int) -> None:
        self._max_tick_ms = max_tick_ms
        self._last_wall_ms: int | None = None
        self.now_ms = 0

    def tick(self, wall_ms: int, *, fetching: bool) -> None:
        """One loop iteration at wall time ``wall_ms``; ``fetching``: neither paused nor cut
        off from every broker since the last tick."""
        if self._last_wall_ms is not None and fetching:
            self.now_ms += min(max(0, wall_ms - self._last_wall_ms), self._max_tick_ms)
        self._last_wall_ms = wall_ms
