"""The soak's analysis: slopes, window medians, metric scraping, flatness verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.soak import (
    MIB,
    Sample,
    _simulate_summary,
    analyze,
    rerender,
    scrape,
    slope_per_s,
    targets,
    window_median,
)

EXPOSITION = """\
# HELP asr_consumer_lag_records Records between a partition's high watermark and the fetch position.
# TYPE asr_consumer_lag_records gauge
asr_consumer_lag_records{partition="0"} 3.0
asr_consumer_lag_records{partition="5"} 4.0
# HELP asr_active_sessions Open sessions.
# TYPE asr_active_sessions gauge
asr_active_sessions 8.0
# HELP asr_paused_partitions Paused partitions.
# TYPE asr_paused_partitions gauge
asr_paused_partitions 1.0
"""


def sample(t_s: float, rss_mib: float, lag: float | None = 0.0) -> Sample:
    return Sample(
        t_s=t_s,
        rss_bytes=int(rss_mib * MIB),
        worker_cores=1.0,
        lag_records=lag,
        committed_lag_records=None,
        paused_partitions=0.0,
        active_sessions=8.0,
        partial_p95_s=0.5,
        final_p95_s=0.7,
        final_delivered_p95_s=0.9,
        partials=10,
        finals=2,
    )


def test_slope_is_units_per_second_and_needs_three_points() -> None:
    assert slope_per_s([0, 10, 20], [5, 6, 7]) == pytest.approx(0.1)
    assert slope_per_s([0, 10], [5, 6]) is None
    assert slope_per_s([3, 3, 3], [1, 2, 3]) is None


def test_window_median_takes_the_half_open_window() -> None:
    assert window_median([0, 1, 2, 3], [10, 20, 30, 40], 1, 3) == 25
    assert window_median([0, 1], [10, 20], 5, 6) is None


def test_scrape_sums_lag_over_partitions() -> None:
    assert scrape(EXPOSITION) == {
        "lag_records": 7.0,
        "paused_partitions": 1.0,
        "active_sessions": 8.0,
    }


def test_flat_memory_and_steady_lag_meet_the_targets() -> None:
    samples = [sample(10.0 * i, 1000 + (i % 2) * 0.5, lag=float(i % 3)) for i in range(180)]
    results = analyze(samples, warmup_s=300, extra={})
    assert results["rss_growth_mib"] == pytest.approx(0.0, abs=0.5)
    assert abs(results["rss_slope_mib_per_hour"]) < 1
    assert results["post_warmup_minutes"] == pytest.approx(24.83, abs=0.01)
    assert all(target.met for target in targets(results))


def test_a_leak_fails_and_a_short_run_does_not_judge_the_slope() -> None:
    leaking = [sample(10.0 * i, 1000 + i, lag=30.0 * i) for i in range(180)]
    verdicts = {t.name: t.met for t in targets(analyze(leaking, warmup_s=300, extra={}))}
    assert not any(verdicts.values())
    short = [sample(5.0 * i, 1000.0) for i in range(36)]
    slope = [t for t in targets(analyze(short, warmup_s=60, extra={})) if "slope" in t.name]
    assert slope[0].met is None  # RSS slope: run too short to extrapolate per hour


def test_simulate_summary_is_the_last_json_block(tmp_path: Path) -> None:
    log = tmp_path / "simulate.log"
    log.write_text('simulate: 1.0/2.0 s | calls active 1\n{\n  "calls_started": 3\n}\n')
    assert _simulate_summary(log) == {"calls_started": 3}
    log.write_text("simulate: crashed\n")
    assert _simulate_summary(log) is None


def test_report_only_rebuilds_markdown_and_figure_from_the_samples(tmp_path: Path) -> None:
    samples = [sample(5.0 * i, 1000.0 + (i > 10)) for i in range(40)]
    results = analyze(samples, warmup_s=60, extra={}, load_s=180)
    results.update(
        chunk_to_partial_s={"n": 3, "p50": 0.3, "p95": 0.5, "p99": 0.6},
        endpoint_to_final_s={"n": 2, "p50": 0.7, "p95": 0.9, "p99": 1.0},
        drain_s=0.0,
    )
    report = {
        "config": {"minutes": 3.0, "warmup_minutes": 1.0, "calls": 4, "torch_threads": 1},
        "results": results,
        "targets": [],
        "notes": ["shared machine"],
    }
    (tmp_path / "soak.json").write_text(json.dumps(report))
    numbers = rerender(tmp_path)
    assert numbers["rss_growth_mib"] == pytest.approx(0.0)
    assert (tmp_path / "soak.png").stat().st_size > 0
    text = (tmp_path / "soak.md").read_text()
    assert "RSS growth after warm-up" in text
    assert "0.50" in text
    stored = json.loads((tmp_path / "soak.json").read_text())
    assert max(s["t_s"] for s in stored["results"]["samples"]) <= 180
