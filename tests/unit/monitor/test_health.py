"""The health strip from workers' /metrics text (made by the worker's own collectors)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from pipeline.contracts import RejectReason
from pipeline.monitor.health import (
    HealthTracker,
    failed_scrape,
    histogram_quantile,
    parse_worker_metrics,
    parse_worker_urls,
)
from pipeline.runtime.metrics import DurationKind, WorkerMetrics

URL_A = "http://worker-a:9400/metrics"
URL_B = "http://worker-b:9400/metrics"
T0_MS = 1_700_000_000_000


def _worker() -> WorkerMetrics:
    return WorkerMetrics(CollectorRegistry())


def _text(metrics: WorkerMetrics) -> str:
    return generate_latest(metrics.registry).decode()


def test_urls_are_comma_separated_without_blanks_or_repeats() -> None:
    assert parse_worker_urls(f" {URL_A}, ,{URL_B},{URL_A} ") == (URL_A, URL_B)
    assert parse_worker_urls("") == ()


def test_a_workers_exposition_reads_into_lag_dead_letters_and_latency_buckets() -> None:
    metrics = _worker()
    metrics.set_assignment([0, 1])
    metrics.set_partition_lag(0, 120)
    metrics.set_partition_lag(1, 30)
    metrics.count_dead_letter(RejectReason.ODD_BYTE_COUNT)
    metrics.count_dead_letter(RejectReason.MISSING_KEY)
    metrics.observe_duration(DurationKind.CHUNK_TO_PARTIAL, 0.12)
    metrics.observe_duration(DurationKind.ENDPOINT_TO_FINAL, 0.3)
    metrics.observe_duration(DurationKind.STEP, 9.0)  # another kind: not a latency
    scrape = parse_worker_metrics(URL_A, _text(metrics), T0_MS)
    assert (scrape.up, scrape.lag_records, scrape.dlq_total) == (True, 150, 2)
    assert scrape.partial_buckets[-1] == (float("inf"), 1.0)
    assert dict(scrape.partial_buckets)[0.1] == 0.0
    assert dict(scrape.partial_buckets)[0.15] == 1.0
    assert dict(scrape.final_buckets)[0.25] == 0.0
    assert dict(scrape.final_buckets)[0.3] == 1.0


def test_text_that_is_not_prometheus_exposition_raises() -> None:
    with pytest.raises(ValueError, match=r".+"):
        parse_worker_metrics(URL_A, "<html>not metrics</html>\n", T0_MS)


@pytest.mark.parametrize("value", ["NaN", "+Inf"])
def test_a_non_finite_value_is_a_failed_scrape(value: str) -> None:
    # Review finding: a NaN lag was summed into the health strip, and every snapshot after it
    # failed (/api/health 500, the live page's stream closed, the health loop ended).
    text = f'asr_consumer_lag_records{{partition="0"}} {value}\n'
    with pytest.raises(ValueError, match="asr_consumer_lag_records is"):
        parse_worker_metrics(URL_A, text, T0_MS)


def test_histogram_quantile_interpolates_like_prometheus() -> None:
    buckets = ((0.1, 10.0), (0.2, 60.0), (0.5, 100.0), (float("inf"), 100.0))
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.18)
    assert histogram_quantile(0.95, buckets) == pytest.approx(0.2 + 0.3 * 35 / 40)
    assert histogram_quantile(0.05, buckets) == pytest.approx(0.05)
    assert histogram_quantile(0.95, ((0.1, 0.0), (float("inf"), 0.0))) is None
    assert histogram_quantile(0.99, ((0.1, 1.0), (float("inf"), 10.0))) == 0.1  # in +Inf


def test_without_worker_urls_everything_but_dead_letters_is_unknown() -> None:
    snapshot = HealthTracker((), 60_000).snapshot(T0_MS, events_dlq_per_minute=1.5)
    assert not snapshot.metrics_configured
    assert (snapshot.workers_up, snapshot.consumer_lag_records) == (None, None)
    assert (snapshot.p95_partial_ms, snapshot.p95_final_ms) == (None, None)
    assert (snapshot.dlq_per_minute, snapshot.dlq_source) == (1.5, "events")


def test_latency_and_dead_letters_are_increases_over_the_window_summed_over_workers() -> None:
    a, b = _worker(), _worker()
    tracker = HealthTracker((URL_A, URL_B), window_ms=60_000)
    for _ in range(50):
        a.observe_duration(DurationKind.CHUNK_TO_PARTIAL, 5.0)  # before the window: not counted
    tracker.record(parse_worker_metrics(URL_A, _text(a), T0_MS))
    tracker.record(parse_worker_metrics(URL_B, _text(b), T0_MS))
    for _ in range(19):
        a.observe_duration(DurationKind.CHUNK_TO_PARTIAL, 0.12)
    b.observe_duration(DurationKind.CHUNK_TO_PARTIAL, 0.9)
    for _ in range(3):
        b.count_dead_letter(RejectReason.ODD_BYTE_COUNT)
    a.set_assignment([0])
    a.set_partition_lag(0, 7)
    b.set_assignment([1])
    b.set_partition_lag(1, 5)
    tracker.record(parse_worker_metrics(URL_A, _text(a), T0_MS + 30_000))
    tracker.record(parse_worker_metrics(URL_B, _text(b), T0_MS + 30_000))
    snapshot = tracker.snapshot(T0_MS + 30_000, events_dlq_per_minute=0.0)
    assert (snapshot.workers_up, snapshot.workers_configured) == (2, 2)
    assert snapshot.consumer_lag_records == 12
    # 20 observations: 19 in (0.1, 0.15], one in (0.8, 0.9]; the 95th percentile is the 19th.
    assert snapshot.p95_partial_ms == pytest.approx(150.0)
    assert snapshot.p95_final_ms is None  # no final in the window
    assert (snapshot.dlq_per_minute, snapshot.dlq_source) == (pytest.approx(6.0), "metrics")


def test_the_latency_objective_is_the_largest_the_workers_up_export() -> None:
    # Self-review finding: the health strip coloured latency against a fixed 400 ms, so the CPU
    # Compose stack (objective 1500 ms) showed a warning in normal operation.
    cpu, default = _worker(), _worker()
    cpu.set_latency_objective(1.5)
    assert parse_worker_metrics(URL_A, _text(cpu), T0_MS).latency_objective_s == 1.5
    tracker = HealthTracker((URL_A, URL_B), window_ms=60_000)
    tracker.record(parse_worker_metrics(URL_A, _text(cpu), T0_MS))
    tracker.record(parse_worker_metrics(URL_B, _text(default), T0_MS))
    assert tracker.snapshot(T0_MS, 0.0).latency_objective_ms == 1500.0
    tracker.record(failed_scrape(URL_A, T0_MS + 1000, "connection refused"))
    assert tracker.snapshot(T0_MS + 1000, 0.0).latency_objective_ms == 400.0  # only workers up


def test_without_an_exported_objective_the_snapshot_has_none() -> None:
    text = 'asr_consumer_lag_records{partition="0"} 3\n'  # a worker from before the gauge
    tracker = HealthTracker((URL_A,), window_ms=60_000)
    tracker.record(parse_worker_metrics(URL_A, text, T0_MS))
    assert tracker.snapshot(T0_MS, 0.0).latency_objective_ms is None
    assert HealthTracker((), 60_000).snapshot(T0_MS, 0.0).latency_objective_ms is None


def test_old_scrapes_leave_the_window() -> None:
    metrics = _worker()
    tracker = HealthTracker((URL_A,), window_ms=10_000)
    metrics.observe_duration(DurationKind.CHUNK_TO_PARTIAL, 2.0)
    tracker.record(parse_worker_metrics(URL_A, _text(metrics), T0_MS))
    tracker.record(parse_worker_metrics(URL_A, _text(metrics), T0_MS + 10_000))
    metrics.observe_duration(DurationKind.CHUNK_TO_PARTIAL, 0.05)
    tracker.record(parse_worker_metrics(URL_A, _text(metrics), T0_MS + 20_000))
    snapshot = tracker.snapshot(T0_MS + 20_000, 0.0)
    assert snapshot.p95_partial_ms is not None
    assert snapshot.p95_partial_ms <= 50.0  # the 2 s observation is older than the window


def test_a_restarted_worker_counts_what_it_counted_since_the_restart() -> None:
    before, after = _worker(), _worker()
    for _ in range(100):
        before.count_dead_letter(RejectReason.ODD_BYTE_COUNT)
    after.count_dead_letter(RejectReason.ODD_BYTE_COUNT)
    tracker = HealthTracker((URL_A,), window_ms=60_000)
    tracker.record(parse_worker_metrics(URL_A, _text(before), T0_MS))
    tracker.record(parse_worker_metrics(URL_A, _text(after), T0_MS + 60_000))
    assert tracker.snapshot(T0_MS + 60_000, 0.0).dlq_per_minute == pytest.approx(1.0)


def test_a_scrape_error_on_the_health_strip_hides_the_urls_password() -> None:
    # Review finding: /api/health and the page showed a metrics URL's password.
    url = "http://ops:metricspw@w1:9400/metrics"
    tracker = HealthTracker((url,), window_ms=60_000)
    tracker.record(failed_scrape(url, T0_MS, "Cannot connect to host w1:9400"))
    errors = tracker.snapshot(T0_MS, events_dlq_per_minute=0.0).errors
    assert errors == ("http://ops:***@w1:9400/metrics: Cannot connect to host w1:9400",)


def test_an_unreachable_worker_is_down_with_its_error_and_events_fill_in() -> None:
    tracker = HealthTracker((URL_A, URL_B), window_ms=60_000)
    tracker.record(parse_worker_metrics(URL_A, _text(_worker()), T0_MS))
    tracker.record(failed_scrape(URL_B, T0_MS, "connection refused"))
    tracker.record(failed_scrape("http://not-configured/metrics", T0_MS, "ignored"))
    snapshot = tracker.snapshot(T0_MS, events_dlq_per_minute=2.0)
    assert (snapshot.workers_up, snapshot.workers_configured) == (1, 2)
    assert snapshot.errors == (f"{URL_B}: connection refused",)
    assert snapshot.consumer_lag_records == 0
    assert (snapshot.dlq_per_minute, snapshot.dlq_source) == (2.0, "events")
