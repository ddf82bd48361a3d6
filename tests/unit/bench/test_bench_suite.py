"""The benchmark suite's own logic (no broker, no model): statistics, targets, results files,
the README builder, histogram quantiles, failover bookkeeping and the no-op engine parts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.common import Target, chunk_to_view_ms, percentiles, write_results
from bench.e2e import (
    _LiveCall,
    _stable_key,
    compare_finals,
    gauge_sum,
    histogram_quantiles,
    recovery_after_kill,
    view_updates,
)
from bench.infra import ReceivedRecord
from bench.run import build_readme, numbers_of
from bench.transport import CountingEngine, NoopRecognizer, NoopVad
from pipeline.asr.engine import SessionEnded
from pipeline.asr.recognizer import RecognitionRequest
from pipeline.asr.session import SessionKey
from pipeline.audio.files import CallAudio


def test_e2e_counts_every_chunk_of_speech_until_a_received_record_shows_it() -> None:
    # One utterance from 1.0 s to 2.0 s of a call whose first sample was captured at 10 000 ms;
    # its only partial (received at 11 700) shows up to 1.5 s, its final (received at 13 000)
    # all of it: the 25 chunks up to 1.5 s wait for the partial, the 25 after for the final.
    audio = CallAudio("c", 16000, {"agent": np.zeros(16000 * 3, dtype=np.float32)})
    call = _LiveCall("c", "fixture", audio, start_s=0.0, anchor_capture_ms=10_000)
    utterance = {"call_id": "c", "channel": "agent", "utterance_index": 0, "start_ms": 1000}
    partial = ReceivedRecord("partials", 0, 11_700, {**utterance, "end_ms": 1500})
    final = ReceivedRecord("finals", 0, 13_000, {**utterance, "end_ms": 2000})
    stranger = ReceivedRecord("finals", 0, 13_000, {**utterance, "call_id": "x", "end_ms": 2000})
    updates = view_updates([call], [partial], [final, stranger])
    assert [(u.speech_start_capture_ms, u.covered_capture_ms, u.is_final) for u in updates] == [
        (11_000, 11_500, False),
        (11_000, 12_000, True),
    ]
    latencies = chunk_to_view_ms(updates)
    assert len(latencies) == 50
    assert (min(latencies[:25]), max(latencies[:25])) == (200, 11_700 - 11_020)
    assert (min(latencies[25:]), max(latencies[25:])) == (1000, 13_000 - 11_520)


def test_percentiles_interpolate_and_report_empty_as_none() -> None:
    stats = percentiles(range(1, 101))
    assert stats["n"] == 100
    assert stats["p50"] == pytest.approx(50.5)
    assert stats["p95"] == pytest.approx(95.05)
    assert stats["max"] == 100
    empty = percentiles([])
    assert empty == {"n": 0, "p50": None, "p95": None, "p99": None, "mean": None, "max": None}


def test_targets_compare_in_their_direction_and_unmeasured_is_neither() -> None:
    assert Target("latency", 0.9, 1.0, "s").met is True
    assert Target("latency", 1.1, 1.0, "s").met is False
    assert Target("rate", 12_000, 10_000, "/s", higher_is_better=True).met is True
    assert Target("rate", None, 10_000, "/s", higher_is_better=True).met is None
    assert (
        Target("rate", 12_000, 10_000, "/s", higher_is_better=True).to_dict()["comparison"] == ">="
    )


def test_results_files_and_readme_include_every_benchmark(tmp_path: Path) -> None:
    write_results(
        "engine_rtf",
        quick=True,
        config={"repeats": 1},
        results={"value": np.float64(1.5), "array": np.arange(3)},
        markdown="## Recognizer\n\nbody",
        targets=[Target("speed", 2.0, 1.0, "s")],
        notes=["noisy"],
        out=tmp_path,
    )
    report = json.loads((tmp_path / "engine_rtf.json").read_text())
    assert report["results"] == {"value": 1.5, "array": [0, 1, 2]}
    assert report["quick"] is True
    assert "cpu_model" in report["machine"]
    assert "**not met**" in (tmp_path / "engine_rtf.md").read_text()
    # Another author's result with its own shape (machine as text, targets as name → met).
    (tmp_path / "hotwords.json").write_text(
        json.dumps({"machine": "x86_64", "targets": {"recall": True}})
    )
    (tmp_path / "hotwords.md").write_text("# Hotword biasing\n\ntable")
    readme = build_readme(tmp_path)
    assert readme.index("## Recognizer") < readme.index("## Hotword biasing")
    assert "| engine_rtf | speed | ≤ 1 s | 2.000 | **not met** |" in readme
    assert "| hotwords | recall | — | — | met |" in readme
    assert "## Machine" in readme


def test_the_readme_keeps_a_reports_numbers_and_links_its_prose(tmp_path: Path) -> None:
    long_intro = "Latency in s. " + "How to read it. " * 30
    report = "\n\n".join(
        [
            "## Transport",
            long_intro,
            "| a | b |\n| --- | --- |\n| 1 | 2 |",
            "Median: 3 chunks/s.",
            "Settings:",
            "- bare: the settings",
            "Split of a step:",
            "| c |\n| --- |\n| 4 |",
            "- Measured on a shared machine.",
        ]
    )
    kept = numbers_of(report)
    assert kept.split("\n\n") == [
        "## Transport",
        "| a | b |\n| --- | --- |\n| 1 | 2 |",
        "Median: 3 chunks/s.",
        "Split of a step:",
        "| c |\n| --- |\n| 4 |",
    ]
    write_results("transport", quick=True, config={}, results={}, markdown=report, out=tmp_path)
    readme = build_readme(tmp_path)
    assert "How to read it." not in readme
    assert "Method: [bench/transport.py](transport.py)" in readme
    assert "Full report: [results/transport.md](results/transport.md)" in readme


def test_a_cuda_run_sits_right_after_its_cpu_run(tmp_path: Path) -> None:
    for name, title in (
        ("transport", "Transport"),
        ("engine_rtf-cuda", "Recognizer on CUDA"),
        ("engine_rtf", "Recognizer on CPU"),
    ):
        write_results(name, quick=True, config={}, results={}, markdown=f"## {title}", out=tmp_path)
    readme = build_readme(tmp_path)
    order = [
        readme.index(f"## {t}") for t in ("Recognizer on CPU", "Recognizer on CUDA", "Transport")
    ]
    assert order == sorted(order)
    assert "(CUDA)" in readme


def test_each_devices_machine_is_shown(tmp_path: Path) -> None:
    for name in ("engine_rtf", "engine_rtf-cuda"):
        write_results(name, quick=True, config={}, results={}, markdown=f"## {name}", out=tmp_path)
    cuda = json.loads((tmp_path / "engine_rtf-cuda.json").read_text())
    cuda["machine"].update(cpu_model="GPU host CPU", logical_cores=16, gpu="NVIDIA H200")
    (tmp_path / "engine_rtf-cuda.json").write_text(json.dumps(cuda))
    readme = build_readme(tmp_path)
    machine = readme[readme.index("## Machine") :]
    assert "|  | CPU runs | CUDA runs |" in machine
    assert "GPU host CPU" in machine
    assert "NVIDIA H200" in machine
    assert "none (CPU only)" in machine  # the CPU runs' machine, beside it
    # Review finding: the one machine table showed the first benchmark's commit and load for
    # all; each benchmark's row now has its own.
    cuda["machine"].update(git_commit="abc1234", load_average_1m_5m=[2.5, 2.0])
    (tmp_path / "engine_rtf-cuda.json").write_text(json.dumps(cuda))
    row = next(line for line in build_readme(tmp_path).splitlines() if "(CUDA) |" in line)
    assert row.endswith("| abc1234 | [2.5, 2.0] |")


EXPOSITION = """\
# HELP asr_duration_seconds Latencies
# TYPE asr_duration_seconds histogram
asr_duration_seconds_bucket{kind="chunk_to_partial",le="0.5"} 50.0
asr_duration_seconds_bucket{kind="chunk_to_partial",le="1.0"} 90.0
asr_duration_seconds_bucket{kind="chunk_to_partial",le="2.0"} 100.0
asr_duration_seconds_bucket{kind="chunk_to_partial",le="+Inf"} 100.0
asr_duration_seconds_count{kind="chunk_to_partial"} 100.0
asr_duration_seconds_sum{kind="chunk_to_partial"} 60.0
"""


def test_histogram_quantiles_interpolate_within_buckets_like_prometheus() -> None:
    quantiles = histogram_quantiles(EXPOSITION)["chunk_to_partial"]
    assert quantiles["count"] == 100
    assert quantiles["p50_s"] == pytest.approx(0.5)
    assert quantiles["p95_s"] == pytest.approx(1.5)
    assert histogram_quantiles(None) == {}


def test_gauge_sum_adds_partitions_and_says_none_when_not_exported() -> None:
    lag = """\
# HELP asr_consumer_lag_records Records behind
# TYPE asr_consumer_lag_records gauge
asr_consumer_lag_records{partition="0"} 3.0
asr_consumer_lag_records{partition="5"} 4.0
"""
    assert gauge_sum(lag, "asr_consumer_lag_records") == 7.0
    assert gauge_sum(EXPOSITION, "asr_consumer_lag_records") is None
    assert gauge_sum(None, "asr_consumer_lag_records") is None


def test_failover_comparison_by_fixture_ignores_the_run_tag() -> None:
    final = {"call_id": "rec4-01-call02_delivery", "channel": "agent", "utterance_index": 3}
    assert _stable_key(final) == "01-call02_delivery:agent:3"
    baseline = {"a:agent:0": "hello", "a:agent:1": "world"}
    observed = {"a:agent:0": "hello", "a:agent:1": "word", "a:agent:2": "extra"}
    assert compare_finals(baseline, observed) == {
        "lost": [],
        "extra": ["a:agent:2"],
        "text_differs": ["a:agent:1"],
    }
    assert compare_finals(baseline, {"a:agent:0": "hello"})["lost"] == ["a:agent:1"]


def test_recovery_is_judged_on_the_slowest_affected_call() -> None:
    killed_ms = 100_000
    partials = [
        {"call_id": "a", "emit_ms": 99_000},  # before the kill: not a recovery
        {"call_id": "a", "emit_ms": 109_500},
        {"call_id": "a", "emit_ms": 109_000},
        {"call_id": "b", "emit_ms": 112_500},
        {"call_id": "c", "emit_ms": 101_000},  # the survivor's own call
    ]
    recovery = recovery_after_kill(partials, ["a", "b"], killed_ms)
    assert recovery["per_call_s"] == {"a": 9.0, "b": 12.5}
    assert (recovery["fastest_s"], recovery["slowest_s"]) == (9.0, 12.5)
    assert recovery["without_partial"] == []
    # A call that never got a partial after the kill has not recovered: no slowest time.
    stalled = recovery_after_kill(partials, ["a", "b", "d"], killed_ms)
    assert (stalled["fastest_s"], stalled["slowest_s"]) == (9.0, None)
    assert stalled["without_partial"] == ["d"]


def test_noop_engine_counts_chunks_decodes_nothing_and_ends_sessions() -> None:
    assert NoopRecognizer().recognize([RecognitionRequest(np.zeros(16, np.float32))])[0].text == ""
    assert NoopVad().speech_probs(np.zeros((3, 512), np.float32), [None] * 3).tolist() == [0] * 3
    engine = CountingEngine()
    key = SessionKey("call", "mono")
    speech = (0.3 * np.sin(np.arange(320) / 3)).astype(np.float32)
    for index in range(100):
        engine.accept(key, speech, 16_000, capture_ms=index * 20, end_of_stream=index == 99)
    outputs = engine.step().outputs
    assert engine.accepted == 100
    assert [type(o) for o in outputs] == [SessionEnded]
    assert not engine.sessions
