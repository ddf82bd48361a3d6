"""The monitor process: the Kafka reader thread, the store, the health poller and the web app.

One asyncio event loop owns the store: the reader thread hands it parsed batches through
``call_soon_threadsafe``, at most ``MAX_BATCHES_IN_FLIGHT`` at a time (the reader waits beyond
that, so a slow loop slows the reader instead of growing memory). Every ``FLUSH_INTERVAL_S`` the
calls changed since the last flush go to the open event streams (one message per call, however
many records touched it); every ``metrics_interval_ms`` the workers' ``/metrics`` are read and
the health strip is pushed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

import aiohttp
from aiohttp import web

from pipeline.clock import Clock, WallClock
from pipeline.errors import ConfigError, InfrastructureError
from pipeline.monitor.health import (
    HealthSnapshot,
    HealthTracker,
    WorkerScrape,
    failed_scrape,
    parse_worker_metrics,
    parse_worker_urls,
)
from pipeline.monitor.kafka import KafkaReader
from pipeline.monitor.records import MonitorRecord
from pipeline.monitor.store import MonitorStore, StoreLimits
from pipeline.monitor.web import (
    MonitorContext,
    MonitorStatus,
    StreamHub,
    create_app,
    push_changes,
    push_health,
)
from pipeline.settings import MonitorSettings, Settings, mask_url_passwords

__all__ = ["MonitorServer", "validate_monitor_settings"]

logger = logging.getLogger(__name__)

MAX_BATCHES_IN_FLIGHT = 8
FLUSH_INTERVAL_S = 0.2
EXPIRE_INTERVAL_S = 5.0
MAX_SCRAPE_TIMEOUT_S = 3.0


def validate_monitor_settings(monitor: MonitorSettings) -> None:
    """Raise ``ConfigError`` naming the setting and its variable for an unusable value."""
    if not 0 < monitor.port < 65536:
        raise ConfigError(
            f"monitor.port (STREAMSCRIBE_MONITOR_PORT) must be 1-65535: {monitor.port}"
        )
    if monitor.max_calls < 1:
        raise ConfigError("monitor.max_calls (STREAMSCRIBE_MONITOR_MAX_CALLS) must be at least 1")
    if monitor.max_age_ms < 1 or monitor.ended_linger_ms < 0:
        raise ConfigError(
            "monitor.max_age_ms must be positive and monitor.ended_linger_ms non-negative "
            "(STREAMSCRIBE_MONITOR_MAX_AGE_MS, STREAMSCRIBE_MONITOR_ENDED_LINGER_MS)"
        )
    if monitor.metrics_interval_ms < 100 or monitor.metrics_window_ms < monitor.metrics_interval_ms:
        raise ConfigError(
            "monitor.metrics_interval_ms must be at least 100 and monitor.metrics_window_ms at "
            "least the interval (STREAMSCRIBE_MONITOR_METRICS_INTERVAL_MS, "
            "STREAMSCRIBE_MONITOR_METRICS_WINDOW_MS)"
        )
    for url in parse_worker_urls(monitor.worker_metrics_urls):
        if not url.startswith(("http://", "https://")):
            raise ConfigError(
                "monitor.worker_metrics_urls (STREAMSCRIBE_MONITOR_WORKER_METRICS_URLS) must be "
                f"http(s) URLs, comma-separated: {mask_url_passwords(repr(url))}"
            )


class MonitorServer:
    """``streamscribe monitor``: ``await serve(stop)`` runs until ``stop`` is set."""

    def __init__(self, settings: Settings, clock: Clock | None = None) -> None:
        validate_monitor_settings(settings.monitor)
        self._settings = settings
        self._clock: Clock = clock or WallClock()
        monitor = settings.monitor
        self._store = MonitorStore(
            StoreLimits(
                max_calls=monitor.max_calls,
                max_age_ms=monitor.max_age_ms,
                ended_linger_ms=monitor.ended_linger_ms,
                dead_letter_window_ms=monitor.metrics_window_ms,
            ),
            self._clock,
        )
        self._tracker = HealthTracker(
            parse_worker_urls(monitor.worker_metrics_urls), monitor.metrics_window_ms
        )
        self._reader = KafkaReader(
            settings, self._deliver, history_ms=monitor.max_age_ms, now_ms=self._clock.now_ms
        )
        self._context = MonitorContext(
            store=self._store,
            hub=StreamHub(),
            clock=self._clock,
            health=self._health,
            status=self._status,
        )
        self._slots = threading.BoundedSemaphore(MAX_BATCHES_IN_FLIGHT)
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        monitor = self._settings.monitor
        host = "127.0.0.1" if monitor.bind in ("0.0.0.0", "::", "") else monitor.bind
        return f"http://{host}:{monitor.port}/"

    def _health(self) -> HealthSnapshot:
        return self._tracker.snapshot(self._clock.now_ms(), self._store.dead_letters_per_minute())

    def _status(self) -> MonitorStatus:
        reader = self._reader
        return MonitorStatus(reader.caught_up, reader.records, reader.rejected_total)

    # -- the reader thread's side ----------------------------------------------------------

    def _deliver(self, batch: list[MonitorRecord]) -> None:
        """Called on the reader thread: hand ``batch`` to the loop, waiting for a free slot."""
        while not self._slots.acquire(timeout=0.5):
            if self._reader.stopping:
                return
        loop = self._loop
        if loop is None or loop.is_closed():
            self._slots.release()
            return
        try:
            loop.call_soon_threadsafe(self._apply, batch)
        except RuntimeError:  # the loop closed meanwhile
            self._slots.release()

    def _apply(self, batch: list[MonitorRecord]) -> None:
        try:
            for record in batch:
                self._store.apply(record)
        finally:
            self._slots.release()

    # -- the loop's side -------------------------------------------------------------------

    async def serve(
        self, stop: asyncio.Event, on_listening: Callable[[str], None] | None = None
    ) -> None:
        """Open the reader, listen, and run until ``stop`` is set or the reader fails.

        Raises:
            ConfigError: a topic is missing, or the port cannot be bound.
            InfrastructureError: Kafka does not answer, or the reader stopped on an error.
        """
        self._loop = asyncio.get_running_loop()
        await self._loop.run_in_executor(None, self._reader.open)
        runner = web.AppRunner(create_app(self._context), handle_signals=False)
        await runner.setup()
        tasks: list[asyncio.Task[None]] = []
        try:
            monitor = self._settings.monitor
            try:
                await web.TCPSite(runner, monitor.bind, monitor.port).start()
            except OSError as error:
                raise ConfigError(
                    f"cannot listen on {monitor.bind}:{monitor.port}: {error.strerror or error}"
                ) from None
            self._reader.start()
            if on_listening is not None:
                on_listening(self.url)
            tasks = [
                asyncio.create_task(self._flush_loop(stop)),
                asyncio.create_task(self._health_loop()),
            ]
            await stop.wait()
            if self._reader.error is not None:
                raise InfrastructureError(f"the Kafka reader stopped: {self._reader.error}")
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._loop.run_in_executor(None, self._reader.stop)
            await runner.cleanup()

    async def _flush_loop(self, stop: asyncio.Event) -> None:
        expire_every = max(1, round(EXPIRE_INTERVAL_S / FLUSH_INTERVAL_S))
        ticks = 0
        while True:
            await asyncio.sleep(FLUSH_INTERVAL_S)
            ticks += 1
            if ticks % expire_every == 0:
                self._store.expire()
            push_changes(self._context)
            if self._reader.error is not None:
                stop.set()

    async def _health_loop(self) -> None:
        monitor = self._settings.monitor
        interval_s = monitor.metrics_interval_ms / 1000
        timeout = aiohttp.ClientTimeout(total=min(interval_s, MAX_SCRAPE_TIMEOUT_S))
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                if self._tracker.urls:
                    scrapes = await asyncio.gather(
                        *(self._scrape(session, url) for url in self._tracker.urls)
                    )
                    for scrape in scrapes:
                        self._tracker.record(scrape)
                try:
                    push_health(self._context)
                except Exception:  # a bug in one update must not end the health strip for good
                    logger.exception("health update failed")
                await asyncio.sleep(interval_s)

    async def _scrape(self, session: aiohttp.ClientSession, url: str) -> WorkerScrape:
        at_ms = self._clock.now_ms()
        try:
            async with session.get(url) as response:
                if response.status != 200:
                    return failed_scrape(url, at_ms, f"HTTP {response.status}")
                text = await response.text(errors="replace")  # bad bytes: a failed parse below
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            return failed_scrape(url, at_ms, str(error) or type(error).__name__)
        try:
            return parse_worker_metrics(url, text, at_ms)
        # Malformed text (a histogram bucket without "le", say) is a failed scrape of that
        # worker, never the end of the health loop.
        except (ValueError, KeyError) as error:
            return failed_scrape(url, at_ms, f"not Prometheus text: {error!r}")
