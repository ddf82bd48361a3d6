"""librdkafka's own log lines, through Python logging with repeats suppressed.

Left alone, librdkafka writes each of its log lines to stderr itself: while a broker is
unreachable that is one ``FAIL … Connection refused`` line per reconnect attempt, hundreds before
a command's own one-line error, and raw in the worker's log (not in its format, not filtered by
its level). Every confluent-kafka client is instead built with ``LOGGER`` as its ``logger``
(``pipeline.runtime.kafka.with_client_logs``), and a ``RepeatFilter`` on that logger lets through:

- every DEBUG line;
- of the others, the first of each level, client, facility and message (durations such as
  ``after 0ms`` ignored), then at most one per ``REPEAT_INTERVAL_MS``: the next one shown ends
  with ``(N more like it suppressed)``, and ``report_suppressed`` logs the count not yet shown
  (the command line calls it before a command's own error line, which stays the last).

Whether a line shows is then up to the logging configuration, as for any logger: the worker,
monitor and QA app log at their ``--log-level`` (INFO by default); the other commands configure
no logging, so Python's last-resort handler prints WARNING and above, bare, to stderr. A client
built with librdkafka's ``debug`` property gets no ``logger``: it writes every line to stderr
itself, as before.

Caveat (confluent-kafka): with a ``logger``, a client's lines wait in its queue until the
application serves it (``poll``, ``consume``, ``flush`` or ``close`` of a consumer or producer,
``poll`` of an ``AdminClient``), and are stamped when served. Code that gives up on a client
after a failed call serves it once (``close`` or ``poll(0)``) first, so that the line saying
why is not lost.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass

from pipeline.clock import Clock

__all__ = [
    "LOGGER",
    "REPEAT_INTERVAL_MS",
    "LogThrottle",
    "RepeatFilter",
    "report_suppressed",
]

REPEAT_INTERVAL_MS = 60_000
"""A repeated librdkafka line is shown at most once per minute per client (a CLI command that
fails on an unreachable broker within its 10-30 s timeouts shows each line once)."""
MAX_KEYS = 256
"""Distinct lines remembered; the least recently shown are forgotten first."""

LOGGER = logging.getLogger("pipeline.librdkafka")
"""The logger every confluent-kafka client logs through (``%s [%s] %s``: facility, client
instance name such as ``rdkafka#consumer-1``, librdkafka's text)."""

_VOLATILE = re.compile(r"\b\d+(?=ms\b| identical error\(s\) suppressed)")
"""Numbers that differ between otherwise identical lines: ``(after 0ms in state CONNECT)``,
``(after 1ms …)``, ``3 identical error(s) suppressed``. Hosts and ports are kept: the same
failure on two brokers is two lines."""


_ALWAYS_SHOWN = "streamscribe_always_shown"
"""A record with this attribute set passes ``RepeatFilter`` (``report_suppressed``'s own)."""


@dataclass(slots=True)
class _Window:
    shown_ms: int
    suppressed: int = 0


class LogThrottle:
    """Which lines of a repetitive stream to show: the first of each key, then at most one per
    ``interval_ms``, counting the others.

    Pure: the time comes from ``clock`` (its milliseconds need only be monotonic). Not
    thread-safe (``RepeatFilter`` locks around it). At most ``max_keys`` keys are remembered:
    past that the least recently shown is forgotten, its suppressed count kept for
    ``take_suppressed``.
    """

    def __init__(
        self, clock: Clock, interval_ms: int = REPEAT_INTERVAL_MS, max_keys: int = MAX_KEYS
    ) -> None:
        if interval_ms <= 0 or max_keys <= 0:
            raise ValueError("interval_ms and max_keys must be positive")
        self._clock = clock
        self._interval_ms = interval_ms
        self._max_keys = max_keys
        self._windows: OrderedDict[Hashable, _Window] = OrderedDict()
        self._forgotten = 0

    def admit(self, key: Hashable) -> int | None:
        """``None``: suppress this line of ``key`` (counted). Otherwise show it: the number of
        lines of ``key`` suppressed since the last one shown and not yet taken (0 for a first)."""
        now_ms = self._clock.now_ms()
        window = self._windows.get(key)
        if window is not None and now_ms - window.shown_ms < self._interval_ms:
            window.suppressed += 1
            return None
        suppressed = 0 if window is None else window.suppressed
        self._windows[key] = _Window(now_ms)
        self._windows.move_to_end(key)
        while len(self._windows) > self._max_keys:
            _, oldest = self._windows.popitem(last=False)
            self._forgotten += oldest.suppressed
        return suppressed

    def take_suppressed(self) -> int:
        """Lines suppressed and not yet counted by a shown line or an earlier call (which then
        count from 0 again; the keys stay remembered)."""
        total = self._forgotten + sum(window.suppressed for window in self._windows.values())
        self._forgotten = 0
        for window in self._windows.values():
            window.suppressed = 0
        return total


class RepeatFilter(logging.Filter):
    """A logger filter that suppresses repeats of records above DEBUG (``LogThrottle`` keyed
    by level and message); DEBUG records always pass. Thread-safe: clients are served from
    several threads (the worker's loop, its bounded transactional calls)."""

    def __init__(self, throttle: LogThrottle) -> None:
        super().__init__()
        self._throttle = throttle
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG or getattr(record, _ALWAYS_SHOWN, False):
            return True
        message = record.getMessage()
        with self._lock:
            suppressed = self._throttle.admit((record.levelno, _VOLATILE.sub("N", message)))
        if suppressed is None:
            return False
        if suppressed:
            record.msg = f"{message} ({suppressed} more like it suppressed)"
            record.args = ()
        return True

    def take_suppressed(self) -> int:
        with self._lock:
            return self._throttle.take_suppressed()


class _MonotonicClock:
    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


LOGGER.addFilter(RepeatFilter(LogThrottle(_MonotonicClock())))


def report_suppressed() -> None:
    """Log, as one WARNING, how many librdkafka lines were suppressed and not yet reported by a
    later line of theirs; nothing when none were."""
    suppressed = sum(
        held.take_suppressed() for held in LOGGER.filters if isinstance(held, RepeatFilter)
    )
    if suppressed:
        LOGGER.warning(
            "%d repeated librdkafka line(s) suppressed (each is shown at most once per %d s)",
            suppressed,
            REPEAT_INTERVAL_MS // 1000,
            extra={_ALWAYS_SHOWN: True},
        )
