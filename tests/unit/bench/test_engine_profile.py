"""The profile's meter: nested stages add up without double counting; purposes split by audio."""

from __future__ import annotations

import time

import numpy as np
import pytest

from bench import engine_profile
from bench.engine_profile import StageMeter
from pipeline.asr.recognizer import RecognitionRequest


@pytest.fixture
def fake_cpu(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    clock = [0.0]
    monkeypatch.setattr(engine_profile, "cpu_s", lambda: clock[0])
    return clock


def test_nested_stages_subtract_their_children(fake_cpu: list[float]) -> None:
    meter = StageMeter()
    with meter.stage("engine_other"):
        fake_cpu[0] += 1.0
        with meter.stage("recognizer_other"):
            fake_cpu[0] += 0.5
            with meter.stage("encoder"):
                fake_cpu[0] += 2.0
        fake_cpu[0] += 0.25
    assert meter.cpu_s == {"engine_other": 1.25, "recognizer_other": 0.5, "encoder": 2.0}
    assert sum(meter.cpu_s.values()) == pytest.approx(3.75)


def test_recognizer_stages_split_by_audio_share(fake_cpu: list[float]) -> None:
    meter = StageMeter()
    audio = np.zeros(16_000, dtype=np.float32)
    requests = [RecognitionRequest(audio, partial=True), RecognitionRequest(np.zeros(48_000))]
    meter.begin_batch(requests, lambda n, partial: (n // 160, n // 160))
    with meter.stage("encoder"):
        fake_cpu[0] += 4.0
    assert meter.by_purpose_s["partial"]["encoder"] == pytest.approx(1.0)
    assert meter.by_purpose_s["final"]["encoder"] == pytest.approx(3.0)
    assert meter.rows == {"partial": 1, "final": 1}


def test_a_final_equal_to_an_earlier_partial_is_counted() -> None:
    meter = StageMeter()
    audio = np.arange(16_000, dtype=np.float32)

    def windows(n: int, partial: bool) -> tuple[int, int]:
        return n // 160, 1000

    meter.begin_batch([RecognitionRequest(audio, partial=True)], windows)
    meter.begin_batch([RecognitionRequest(audio.copy())], windows)
    meter.begin_batch([RecognitionRequest(audio[:8000].copy())], windows)
    assert meter.finals_equal_to_a_partial == 1


def test_cpu_s_is_process_time() -> None:
    assert engine_profile.cpu_s() == pytest.approx(time.process_time(), abs=0.5)
