"""The engine concurrency benchmark's report and harness bookkeeping (no model)."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest

from bench import engine_concurrency
from bench.engine_concurrency import notes, plot
from bench.transport import NoopRecognizer
from pipeline.asr.engine import StepReport, StreamingEngine
from pipeline.asr.factory import engine_config
from pipeline.asr.vad import EnergyVad
from pipeline.settings import AsrSettings
from tests.unit.asr.fakes import FakeRecognizer


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
        "chunk_to_view_ms": stats(400.0),
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


def noop_engine() -> StreamingEngine:
    return StreamingEngine(NoopRecognizer(), EnergyVad(), engine_config(AsrSettings()))


def test_memory_is_read_without_collecting_inside_the_live_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    collections: list[float] = []
    monkeypatch.setattr(
        engine_concurrency, "release_memory", lambda: collections.append(time.monotonic())
    )
    level = engine_concurrency.run_level(noop_engine(), 2, 1.5, seed=3, max_step_jobs=8)
    assert level["memory"]["samples"] >= 2  # read once a second while sessions are open
    assert len(collections) == 2  # the baseline and after the level, never in the loop
    assert collections[1] - collections[0] > 1.5


def test_memory_sampling_can_be_off(monkeypatch: pytest.MonkeyPatch) -> None:
    collections: list[float] = []
    monkeypatch.setattr(
        engine_concurrency, "release_memory", lambda: collections.append(time.monotonic())
    )
    level = engine_concurrency.run_level(
        noop_engine(), 2, 0.5, seed=3, max_step_jobs=8, sample_memory=False
    )
    assert level["memory"] is None
    assert collections == []


class StuckEngine(StreamingEngine):
    """Takes audio, never steps: its sessions never end."""

    def step(self, *args: Any, **kwargs: Any) -> StepReport:
        return StepReport()


def test_a_level_that_cannot_drain_ends_at_its_deadline_and_says_so() -> None:
    engine = StuckEngine(NoopRecognizer(), EnergyVad(), engine_config(AsrSettings()))
    levels: list[dict[str, Any]] = []

    def run() -> None:
        levels.append(
            engine_concurrency.run_level(
                engine, 2, 0.3, seed=3, max_step_jobs=8, sample_memory=False, drain_timeout_s=0.5
            )
        )

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(15)
    assert not worker.is_alive(), "run_level never gave up on the stuck sessions"
    assert levels[0]["drained"] is False
    assert levels[0]["undrained_sessions"] == 2
    assert not engine.sessions  # dropped: the next level starts clean


def test_utterances_without_partials_still_count_in_chunk_to_view() -> None:
    config = dataclasses.replace(engine_config(AsrSettings()), emit_partials=False)
    engine = StreamingEngine(FakeRecognizer(), EnergyVad(), config)
    level = engine_concurrency.run_level(engine, 2, 3.0, seed=3, max_step_jobs=8)
    assert level["finals"] > 0
    assert level["partials"] == 0
    assert level["partial_latency_emitted_only_ms"]["n"] == 0  # the old metric saw nothing
    # Every 20 ms chunk of each final's audio, shown when its final was.
    assert level["chunk_to_view_ms"]["n"] >= 50 * level["finals"]
    assert level["chunk_to_view_ms"]["p50"] >= level["endpoint_to_final_ms"]["p50"]
