"""Time as an injected dependency: the pure core never reads the wall clock itself."""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "WallClock"]


class Clock(Protocol):
    """Milliseconds since the Unix epoch."""

    def now_ms(self) -> int: ...


class WallClock:
    """The real wall clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told (tests, replays with fixed emit times)."""

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = start_ms

    def now_ms(self) -> int:
        return self._now_ms

    def advance(self, delta_ms: int) -> None:
        self._now_ms += delta_ms
