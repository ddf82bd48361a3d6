"""The engine concurrency benchmark's report and harness bookkeeping (no model)."""

from __future__ import annotations

from typing import Any

from bench.engine_concurrency import notes, plot


def test_cuda_report_gets_no_cpu_only_notes() -> None:
    cpu, cuda = notes("cpu"), notes("cuda")
    assert any("Step budget" in note for note in cpu)
    assert not any("Step budget" in note or "Finals decoded ahead" in note for note in cuda)
    assert any("not repeated on CUDA" in note for note in cuda)


def stats(value: float) -> dict[str, float]:
    return {"n": 3, "p50": value, "p95": value, "p99": value, "mean": value, "max": value}


def level(channels: int) -> dict[str, Any]:
    return {
        "channels": channels,
        "chunk_to_partial_ms": stats(400.0),
        "endpoint_to_final_ms": stats(300.0),
        "memory": {
            "rss_growth_per_session_bytes": stats(2.0**20),
            "buffer_per_session_bytes": stats(2.0**19),
        },
    }


def test_latency_plot_is_titled_by_device() -> None:
    results = {"levels": {"16": level(16), "32": level(32)}}
    latency, _ = plot(results, "cuda")
    assert "CUDA" in latency.axes[0].get_title()
    assert "CPU" not in latency.axes[0].get_title()
