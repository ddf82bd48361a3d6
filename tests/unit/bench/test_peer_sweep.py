"""The sweep's bookkeeping: channel plans, scoring, sustained channels, the pooled WER."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import FixtureClip, TextUpdate, refresh_staleness_ms
from bench.peer import PeerSettings, PeerSystem
from bench.peer_sweep import (
    fast_partials_channels,
    is_sustained,
    plan_channels,
    rerender,
    run_peer_level,
    score,
    summarize,
    sustained_channels,
    wall_ms,
)
from pipeline.asr.vad import EnergyVad


def clip(i: int, rate: int = 16_000) -> FixtureClip:
    return FixtureClip(
        f"call{i:02d}_x:agent", "call", rate, np.zeros(rate * 3, dtype=np.float32), f"word{i}"
    )


def level(channels: int, p95: float, sustained: bool, errors: int = 0) -> dict[str, Any]:
    return {
        "channels": channels,
        "chunk_to_partial_s": {"p95": p95},
        "sustained": sustained,
        "drained": True,
        "word_errors": {
            "substitutions": errors,
            "deletions": 0,
            "insertions": 0,
            "reference_words": 100,
        },
    }


def test_plan_cycles_clips_cuts_audio_and_staggers_within_two_seconds() -> None:
    clips = [clip(i) for i in range(3)]
    planned = plan_channels(5, 2.0, seed=7, t0=100.0, clips=clips)
    assert [c.stream_id for c in planned] == [
        "c5-0-call00_x",
        "c5-1-call01_x",
        "c5-2-call02_x",
        "c5-3-call00_x",
        "c5-4-call01_x",
    ]
    assert all(len(c.samples) == 32_000 for c in planned)
    assert all(100.0 <= c.start_s <= 102.0 for c in planned)
    again = plan_channels(5, 2.0, seed=7, t0=100.0, clips=clips)
    assert [c.start_s for c in planned] == [c.start_s for c in again]
    assert planned[0].chunks == 100
    assert planned[0].due_s(0) == planned[0].start_s + 0.02


def test_score_matches_each_channel_to_its_clip() -> None:
    clips = [clip(i) for i in range(2)]
    texts = {"c3-0-call00_x": "word0", "c3-1-call01_x": "wrong", "c3-2-call00_x": "word0"}
    errors = score({"channels": 3, "texts": texts}, clips)
    assert (errors.substitutions, errors.reference_words) == (1, 3)


def test_sustained_is_the_largest_n_within_the_limit() -> None:
    levels = [level(1, 0.4, True), level(4, 1.2, True), level(8, 2.0, False)]
    assert sustained_channels(levels) == (4, False)
    assert sustained_channels(levels[:2]) == (4, True)  # only a lower bound
    assert sustained_channels([level(1, 3.0, False)]) == (0, False)


def test_summary_ratio_and_wer_pooled_over_the_common_counts() -> None:
    ours = [level(1, 0.3, True), level(4, 0.5, True, errors=2), level(16, 1.0, True)]
    peer = [level(1, 0.6, True, errors=1), level(4, 6.0, False, errors=1)]
    summary = summarize({"streamscribe": ours, "peer": peer})
    assert summary["channel_ratio"] == 16
    pooled = summary["wer_pooled"]
    assert pooled["channels"] == [1, 4]
    assert pooled["streamscribe"] == 2 / 200
    assert pooled["peer"] == 2 / 200
    assert pooled["difference_points"] == 0


def run_entry(channels: int, p95: float, sustained: bool) -> dict[str, Any]:
    stats = {"n": 10, "p50": p95 / 2, "p95": p95, "p99": p95, "mean": p95 / 2, "max": p95}
    return {
        **level(channels, p95, sustained, errors=1),
        "chunk_to_partial_s": stats,
        "partial_refresh_s": stats,
        "hop_s": 0.5,
        "endpoint_to_final_s": stats,
        "wer": 0.01,
        "process_cpu_percent_of_machine": 40.0,
        "machine_cpu_percent": 90.0,
    }


def test_report_only_rebuilds_summary_markdown_and_figure(tmp_path: Path) -> None:
    runs = {
        "streamscribe": [
            run_entry(1, 0.3, True),
            run_entry(4, 0.6, True),
            run_entry(8, 2.0, False),
        ],
        "peer": [run_entry(1, 1.2, True), run_entry(4, 3.6, False)],
    }
    report = {
        "config": {"systems": {"streamscribe": {"hop_ms": 500}, "peer": {"hop_ms": 1000}}},
        "results": {"systems": {name: {"runs": levels} for name, levels in runs.items()}},
        "targets": [],
        "notes": ["shared machine"],
    }
    (tmp_path / "peer_sweep.json").write_text(json.dumps(report))
    numbers = rerender(tmp_path)
    assert numbers["sustained_channels"] == {"streamscribe": 4, "peer": 1}
    assert numbers["channel_ratio"] == 4
    assert numbers["channel_ratio_bounds"] == [4 / 3, 7]
    text = (tmp_path / "peer_sweep.md").read_text()
    assert "between 1.33× and 7.00×" in text
    assert (tmp_path / "peer_sweep.png").stat().st_size > 0


def test_refresh_staleness_is_the_age_of_the_replaced_partial() -> None:
    updates = [
        TextUpdate("a", 0, emit_ms=1_300, covered_capture_ms=1_000),  # first: its latency
        TextUpdate("b", 0, emit_ms=1_350, covered_capture_ms=1_200),
        TextUpdate("a", 0, emit_ms=3_100, covered_capture_ms=3_000),  # replaces a@1000
        TextUpdate("a", 1, emit_ms=5_200, covered_capture_ms=5_000),  # next utterance: latency
    ]
    assert sorted(refresh_staleness_ms(updates)) == sorted([300, 150, 2_100, 200])


def sustain_case(p95: float, refresh_p95: float, hop_s: float, drained: bool = True) -> bool:
    return is_sustained(
        {
            "chunk_to_partial_s": {"p95": p95},
            "partial_refresh_s": {"p95": refresh_p95},
            "hop_s": hop_s,
            "drained": drained,
        }
    )


def test_sustained_needs_fresh_partials_as_well_as_fast_ones() -> None:
    assert sustain_case(0.4, 1.9, hop_s=0.5)
    assert not sustain_case(0.4, 2.1, hop_s=0.5)  # fast partials, but rare ones
    assert sustain_case(1.2, 2.4, hop_s=1.0)
    assert not sustain_case(1.6, 1.6, hop_s=1.0)
    assert not sustain_case(0.4, 0.6, hop_s=0.5, drained=False)


def test_fast_partials_channels_ignores_refresh() -> None:
    levels = [level(1, 0.4, True), level(8, 0.5, False), level(16, 1.7, False)]
    assert fast_partials_channels(levels) == 8
    assert fast_partials_channels([{**level(4, 0.4, True), "drained": False}]) == 0


def test_peer_start_up_is_not_charged_to_the_first_chunks() -> None:
    def slow_vads(n: int) -> list[EnergyVad]:
        time.sleep(0.5 * n)  # what loading a model per stream costs
        return [EnergyVad() for _ in range(n)]

    peer = PeerSystem(lambda audio, prompt: [], slow_vads, PeerSettings(), wall_ms)
    # Seed 3 starts a channel 0.17 s after the clock: 1 s of start-up would make it late.
    level = run_peer_level(peer, channels=2, seed=3, audio_s=0.3)
    assert level["drained"]
    assert level["feeder_lateness_ms"]["max"] < 250
