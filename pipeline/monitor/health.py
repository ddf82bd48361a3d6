"""The health strip: worker count, consumer lag, P95 latencies and the dead-letter rate.

Pure: ``parse_worker_metrics`` reads one worker's ``/metrics`` text (Prometheus exposition, via
``prometheus_client.parser``) into a ``WorkerScrape``; ``HealthTracker`` keeps each worker's
scrapes over a window and computes a ``HealthSnapshot`` the way the alert rules do (histogram
buckets and counters as increases over the window, summed over workers; gauges summed as read).
Time comes from the scrapes' ``at_ms`` and the ``now_ms`` given to ``snapshot``.

Without worker URLs the worker count, lag and latencies are *unknown* (``None`` with
``metrics_configured`` false) and the dead-letter rate comes from the ``chunk_rejected`` events
the store counted (``dlq_source = "events"``). A worker that restarted (a counter went down)
contributes its counts since the restart.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from pipeline.runtime.metrics import (
    CONSUMER_LAG,
    DLQ_TOTAL,
    DURATION_SECONDS,
    LATENCY_OBJECTIVE,
    DurationKind,
)
from pipeline.settings import mask_url_passwords

__all__ = [
    "HealthSnapshot",
    "HealthTracker",
    "WorkerScrape",
    "failed_scrape",
    "histogram_quantile",
    "parse_worker_metrics",
    "parse_worker_urls",
]

Buckets = tuple[tuple[float, float], ...]
"""Cumulative histogram buckets ``(upper bound in seconds, count)``, sorted, ``+Inf`` last."""

LATENCY_QUANTILE = 0.95
_BUCKET_SERIES = f"{DURATION_SECONDS.name}_bucket"


def parse_worker_urls(text: str) -> tuple[str, ...]:
    """The comma-separated ``/metrics`` URLs of a setting, blanks dropped, order kept."""
    return tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))


@dataclass(frozen=True, slots=True)
class WorkerScrape:
    """One read of one worker's ``/metrics`` at ``at_ms`` (epoch ms).

    Counters and histogram buckets are cumulative since the worker started; ``lag_records`` is
    the sum of its per-partition lag gauges; ``latency_objective_s`` is its
    ``asr_latency_objective_seconds`` (``None`` from a worker that does not export it). ``up``
    false means the read failed (``error``).
    """

    url: str
    at_ms: int
    up: bool
    error: str = ""
    lag_records: float = 0.0
    dlq_total: float = 0.0
    partial_buckets: Buckets = ()
    final_buckets: Buckets = ()
    latency_objective_s: float | None = None


def failed_scrape(url: str, at_ms: int, error: str) -> WorkerScrape:
    return WorkerScrape(url, at_ms, up=False, error=error)


_READ_SERIES = frozenset(
    {CONSUMER_LAG.name, DLQ_TOTAL.name, _BUCKET_SERIES, LATENCY_OBJECTIVE.name}
)


def parse_worker_metrics(url: str, text: str, at_ms: int) -> WorkerScrape:
    """Read a worker's exposition text. Raises ``ValueError`` when it is not Prometheus text."""
    lag = dlq = 0.0
    objective_s: float | None = None
    buckets: dict[str, dict[float, float]] = {
        DurationKind.CHUNK_TO_PARTIAL.value: {},
        DurationKind.ENDPOINT_TO_FINAL.value: {},
    }
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in _READ_SERIES and not math.isfinite(sample.value):
                # A NaN summed into the health strip failed every snapshot after it.
                raise ValueError(f"{sample.name} is {sample.value}")
            if sample.name == CONSUMER_LAG.name:
                lag += sample.value
            elif sample.name == DLQ_TOTAL.name:
                dlq += sample.value
            elif sample.name == LATENCY_OBJECTIVE.name:
                objective_s = sample.value
            elif sample.name == _BUCKET_SERIES and sample.labels.get("kind") in buckets:
                bound = float(sample.labels["le"])
                series = buckets[sample.labels["kind"]]
                series[bound] = series.get(bound, 0.0) + sample.value
    return WorkerScrape(
        url=url,
        at_ms=at_ms,
        up=True,
        lag_records=lag,
        dlq_total=dlq,
        partial_buckets=_sorted(buckets[DurationKind.CHUNK_TO_PARTIAL.value]),
        final_buckets=_sorted(buckets[DurationKind.ENDPOINT_TO_FINAL.value]),
        latency_objective_s=objective_s,
    )


def _sorted(series: Mapping[float, float]) -> Buckets:
    return tuple(sorted(series.items()))


def histogram_quantile(quantile: float, buckets: Buckets) -> float | None:
    """Prometheus' ``histogram_quantile`` on cumulative buckets; ``None`` without observations.

    Linear interpolation within the bucket holding the rank (the first bucket from 0); a rank in
    the ``+Inf`` bucket answers the highest finite bound.
    """
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = quantile * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound


@dataclass(frozen=True, slots=True)
class HealthSnapshot:
    """What the health strip shows; ``None`` = unknown (no metrics) or no data in the window.

    ``p95_partial_ms`` is capture → partial (``chunk_to_partial``), ``p95_final_ms`` is
    endpoint → final (``endpoint_to_final``), both over ``window_ms`` across all workers.
    ``latency_objective_ms`` is the largest objective the workers up export (as the alert rules
    take it; ``None``: none exports one, and the page falls back to the default 400 ms).
    ``errors`` name the workers whose last read failed, with why.
    """

    at_ms: int
    window_ms: int
    metrics_configured: bool
    workers_configured: int
    workers_up: int | None
    consumer_lag_records: int | None
    p95_partial_ms: float | None
    p95_final_ms: float | None
    latency_objective_ms: float | None
    dlq_per_minute: float | None
    dlq_source: str
    errors: tuple[str, ...]


class HealthTracker:
    """Each worker's recent scrapes, and the snapshot computed from them."""

    def __init__(self, urls: Sequence[str], window_ms: int) -> None:
        if window_ms < 1:
            raise ValueError("window_ms must be positive")
        self.urls = tuple(urls)
        self._window_ms = window_ms
        self._latest: dict[str, WorkerScrape] = {}
        self._history: dict[str, deque[WorkerScrape]] = {url: deque() for url in self.urls}

    def record(self, scrape: WorkerScrape) -> None:
        """Add a scrape of a configured URL (others are ignored)."""
        if scrape.url not in self._history:
            return
        self._latest[scrape.url] = scrape
        if not scrape.up:
            return
        history = self._history[scrape.url]
        history.append(scrape)
        # Keep one scrape at or before the window's start as the baseline of the increase.
        while len(history) > 2 and history[1].at_ms <= scrape.at_ms - self._window_ms:
            history.popleft()

    def snapshot(self, now_ms: int, events_dlq_per_minute: float) -> HealthSnapshot:
        up = [s for s in (self._latest.get(url) for url in self.urls) if s is not None and s.up]
        errors = tuple(
            mask_url_passwords(f"{scrape.url}: {scrape.error}")
            for scrape in (self._latest.get(url) for url in self.urls)
            if scrape is not None and not scrape.up
        )
        increases = [
            _increase(history[0], history[-1])
            for url, history in self._history.items()
            if len(history) >= 2 and self._latest.get(url) is history[-1]
        ]
        dlq_per_minute: float | None = None
        if increases:
            elapsed_ms = max(increase.elapsed_ms for increase in increases)
            dlq = sum(increase.dlq for increase in increases)
            dlq_per_minute = dlq * 60_000 / elapsed_ms if elapsed_ms > 0 else None
        source = "metrics"
        if dlq_per_minute is None:
            dlq_per_minute, source = events_dlq_per_minute, "events"
        configured = bool(self.urls)
        return HealthSnapshot(
            at_ms=now_ms,
            window_ms=self._window_ms,
            metrics_configured=configured,
            workers_configured=len(self.urls),
            workers_up=len(up) if configured else None,
            consumer_lag_records=round(sum(s.lag_records for s in up)) if up else None,
            p95_partial_ms=_p95_ms(increase.partial for increase in increases),
            p95_final_ms=_p95_ms(increase.final for increase in increases),
            latency_objective_ms=_objective_ms(up),
            dlq_per_minute=dlq_per_minute,
            dlq_source=source,
            errors=errors,
        )


@dataclass(frozen=True, slots=True)
class _Increase:
    elapsed_ms: int
    dlq: float
    partial: Buckets
    final: Buckets


def _increase(first: WorkerScrape, last: WorkerScrape) -> _Increase:
    return _Increase(
        elapsed_ms=last.at_ms - first.at_ms,
        dlq=_counter_increase(first.dlq_total, last.dlq_total),
        partial=_bucket_increase(first.partial_buckets, last.partial_buckets),
        final=_bucket_increase(first.final_buckets, last.final_buckets),
    )


def _counter_increase(first: float, last: float) -> float:
    return last if last < first else last - first


def _bucket_increase(first: Buckets, last: Buckets) -> Buckets:
    before = dict(first)
    if any(count < before.get(bound, 0.0) for bound, count in last):
        return last  # the worker restarted: everything it counted is new
    return tuple((bound, count - before.get(bound, 0.0)) for bound, count in last)


def _objective_ms(up: Sequence[WorkerScrape]) -> float | None:
    objectives = [s.latency_objective_s for s in up if s.latency_objective_s is not None]
    return round(max(objectives) * 1000, 1) if objectives else None


def _p95_ms(increases: Iterable[Buckets]) -> float | None:
    total: dict[float, float] = {}
    for buckets in increases:
        for bound, count in buckets:
            total[bound] = total.get(bound, 0.0) + count
    seconds = histogram_quantile(LATENCY_QUANTILE, _sorted(total))
    return None if seconds is None else round(seconds * 1000, 1)
