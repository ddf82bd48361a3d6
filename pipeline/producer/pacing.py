"""Real-time pacing: audio leaves no faster than it was spoken (``publish``, ``simulate``)."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Pacer"]


class Pacer:
    """Holds a sending loop to the audio's own pace.

    ``wait_until(offset_ms)`` returns once ``offset_ms`` of real time have passed since the
    first call (which returns at once). A loop that falls behind is not made to sleep; it simply
    catches up, so pacing never adds to a backlog.
    """

    def __init__(
        self,
        monotonic_s: Callable[[], float] = time.monotonic,
        sleep_s: Callable[[float], None] = time.sleep,
    ) -> None:
        self._monotonic_s = monotonic_s
        self._sleep_s = sleep_s
        self._start_s: float | None = None

    def wait_until(self, offset_ms: float) -> None:
        now_s = self._monotonic_s()
        if self._start_s is None:
            self._start_s = now_s - offset_ms / 1000.0
        delay_s = self._start_s + offset_ms / 1000.0 - now_s
        if delay_s > 0:
            self._sleep_s(delay_s)

    def elapsed_ms(self) -> float:
        """Real time since the pace started (0 before the first ``wait_until``): how much audio
        has been spoken by now, so a loop that fell behind knows what is due."""
        if self._start_s is None:
            return 0.0
        return 1000.0 * (self._monotonic_s() - self._start_s)
