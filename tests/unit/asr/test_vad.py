from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.asr.endpoint import (
    EndpointConfig,
    EndpointDecision,
    EndpointDetector,
    EndpointReason,
)
from pipeline.asr.vad import (
    EnergyVad,
    EnergyVadState,
    GatedSpan,
    SpeechGate,
    SpeechGateConfig,
    Vad,
)
from pipeline.errors import ConfigError

FRAME = 512  # samples; 32 ms at 16 kHz
PAD = SpeechGateConfig().speech_pad_samples  # 960 samples: 60 ms


def run_gate(probs: list[float], config: SpeechGateConfig | None = None) -> list[GatedSpan]:
    gate = SpeechGate(config)
    spans = [span for prob in probs for span in gate.push(prob)]
    return merge(spans + list(gate.flush()))


def merge(spans: list[GatedSpan]) -> list[GatedSpan]:
    merged: list[GatedSpan] = []
    for span in spans:
        if merged and merged[-1].is_speech == span.is_speech:
            merged[-1] = GatedSpan(merged[-1].start_samples, span.end_samples, span.is_speech)
        else:
            merged.append(span)
    return merged


def speech(spans: list[GatedSpan]) -> list[tuple[int, int]]:
    return [(s.start_samples, s.end_samples) for s in spans if s.is_speech]


def test_silence_only_settles_as_silence() -> None:
    assert run_gate([0.0] * 20) == [GatedSpan(0, 20 * FRAME, False)]


def test_speech_is_padded_on_both_sides() -> None:
    probs = [0.0] * 10 + [0.9] * 20 + [0.0] * 10
    assert speech(run_gate(probs)) == [(10 * FRAME - PAD, 30 * FRAME + PAD)]


def test_a_start_pad_widens_only_the_start() -> None:
    config = SpeechGateConfig(start_pad_ms=250)
    probs = [0.0] * 20 + [0.9] * 20 + [0.0] * 10
    assert speech(run_gate(probs, config)) == [(20 * FRAME - 4000, 40 * FRAME + PAD)]


def test_a_start_pad_never_reaches_into_earlier_speech() -> None:
    # 160 ms between two runs: the second's 250 ms pre-roll stops where the first's pad ends.
    gate = SpeechGate(SpeechGateConfig(start_pad_ms=250))
    probs = [0.9] * 20 + [0.0] * 5 + [0.9] * 20 + [0.0] * 10
    spans = [span for prob in probs for span in gate.push(prob)] + list(gate.flush())
    starts = [span.start_samples for span in spans if span.is_speech]
    assert 20 * FRAME + PAD in starts
    assert speech(merge(spans)) == [(0, 45 * FRAME + PAD)]


def test_start_pad_stops_at_the_stream_start() -> None:
    assert speech(run_gate([0.9] * 20 + [0.0] * 10)) == [(0, 20 * FRAME + PAD)]


def test_blip_shorter_than_min_speech_is_silence() -> None:
    # 250 ms min speech = 7.8 frames; 7 frames is too short, 8 is enough.
    assert speech(run_gate([0.0] * 5 + [0.9] * 7 + [0.0] * 10)) == []
    assert speech(run_gate([0.0] * 5 + [0.9] * 8 + [0.0] * 10)) != []


def test_hysteresis_between_the_thresholds() -> None:
    # 0.4 lies between neg_threshold (0.35) and threshold (0.5): it starts nothing ...
    assert speech(run_gate([0.4] * 30)) == []
    # ... and ends nothing.
    assert speech(run_gate([0.9] * 10 + [0.4] * 30 + [0.0] * 10)) == [(0, 40 * FRAME + PAD)]


def test_a_dip_shorter_than_min_silence_does_not_end_speech() -> None:
    # 100 ms min silence = 3.1 frames: a 3-frame dip is bridged, a 4-frame dip splits.
    bridged = [0.9] * 10 + [0.0] * 3 + [0.9] * 10 + [0.0] * 10
    assert speech(run_gate(bridged)) == [(0, 23 * FRAME + PAD)]
    split = [0.9] * 10 + [0.0] * 4 + [0.9] * 10 + [0.0] * 10
    first, second = speech(run_gate(split))
    assert first == (0, 10 * FRAME + PAD)
    # The second start pad would reach back into the first speech's pad; it stops there.
    assert second == (14 * FRAME - PAD, 24 * FRAME + PAD)


def test_flush_ends_open_speech_at_the_stream_end() -> None:
    gate = SpeechGate()
    for prob in [0.9] * 10 + [0.0] * 2:
        gate.push(prob)
    assert gate.in_speech
    assert gate.settled_samples == 10 * FRAME
    assert gate.flush() == (
        GatedSpan(10 * FRAME, 10 * FRAME + PAD, True),
        GatedSpan(10 * FRAME + PAD, 12 * FRAME, False),
    )
    assert gate.settled_samples == gate.position_samples
    assert not gate.in_speech


def test_end_speech_confirms_a_begun_silence_and_leaves_ongoing_speech() -> None:
    gate = SpeechGate()
    for prob in [0.9] * 10:
        gate.push(prob)
    assert gate.end_speech() == ()  # speech going on: nothing to end
    assert gate.in_speech
    for prob in [0.0] * 3:  # 96 ms of silence: not yet min_silence_ms (100 ms)
        gate.push(prob)
    # The speech keeps its end pad; the 36 ms after it stay unsettled (a new start's pad).
    assert gate.end_speech() == (GatedSpan(10 * FRAME, 10 * FRAME + PAD, True),)
    assert not gate.in_speech
    assert gate.settled_samples == 10 * FRAME + PAD
    assert gate.end_speech() == ()
    assert [span.is_speech for span in gate.push(0.0)] == [False]


def test_flush_treats_an_unconfirmed_start_as_a_blip() -> None:
    gate = SpeechGate()
    gate.push(0.9)
    assert not gate.in_speech
    assert gate.flush() == (GatedSpan(0, FRAME, False),)


def test_snapshot_resumes_identically() -> None:
    probs = [0.0, 0.9, 0.9, 0.6, 0.2, 0.9] * 6
    original = SpeechGate()
    for prob in probs[:17]:
        original.push(prob)
    resumed = SpeechGate.from_snapshot(original.config, original.snapshot())
    rest = probs[17:]
    assert [original.push(p) for p in rest] == [resumed.push(p) for p in rest]
    assert original.flush() == resumed.flush()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"threshold": 0.0},
        {"threshold": 1.5},
        {"threshold": 0.5, "neg_threshold": 0.6},
        {"min_speech_ms": -1},
        {"speech_pad_ms": 200, "min_silence_ms": 100},
        {"frame_samples": 0},
    ],
)
def test_invalid_config_is_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        SpeechGateConfig(**kwargs)  # type: ignore[arg-type]


def test_neg_threshold_defaults_like_silero() -> None:
    assert SpeechGateConfig(threshold=0.5).effective_neg_threshold == pytest.approx(0.35)
    assert SpeechGateConfig(threshold=0.1).effective_neg_threshold == pytest.approx(0.01)


_probs = st.lists(st.sampled_from([0.0, 0.2, 0.4, 0.6, 0.9]), max_size=120)
_gate_configs = st.builds(
    SpeechGateConfig,
    min_speech_ms=st.sampled_from([0, 30, 250]),
    min_silence_ms=st.sampled_from([60, 100, 500]),
    speech_pad_ms=st.sampled_from([0, 30, 60]),
    start_pad_ms=st.sampled_from([None, 0, 250]),
)


@settings(deadline=None, max_examples=200)
@given(probs=_probs, config=_gate_configs)
def test_settled_spans_tile_the_stream_and_lag_is_bounded(
    probs: list[float], config: SpeechGateConfig
) -> None:
    gate = SpeechGate(config)
    spans: list[GatedSpan] = []
    for prob in probs:
        spans.extend(gate.push(prob))
        assert gate.settled_samples <= gate.position_samples
        assert gate.pending_samples <= config.max_pending_samples
    spans.extend(gate.flush())
    assert gate.settled_samples == gate.position_samples == len(probs) * config.frame_samples
    position = 0
    for span in spans:
        assert span.start_samples == position
        assert span.duration_samples > 0
        position = span.end_samples
    assert position == gate.position_samples


@settings(deadline=None, max_examples=200)
@given(probs=_probs, config=_gate_configs)
def test_confident_runs_are_speech_and_speech_is_never_shorter_than_min_speech(
    probs: list[float], config: SpeechGateConfig
) -> None:
    spans = run_gate(probs, config)
    for start, end in speech(spans):
        assert end - start >= config.min_speech_samples
    speech_samples = {i for start, end in speech(spans) for i in range(start, end)}
    frames = config.frame_samples
    run_start = None
    for index, prob in enumerate([*probs, 0.0]):
        if prob >= config.threshold:
            run_start = index if run_start is None else run_start
            continue
        if run_start is not None and (index - run_start) * frames >= config.min_speech_samples:
            assert all(i in speech_samples for i in range(run_start * frames, index * frames))
        run_start = None


def gate_then_endpoint(probs: list[float]) -> list[EndpointDecision]:
    gate = SpeechGate()
    detector = EndpointDetector(EndpointConfig(speech_pad_ms=gate.config.speech_pad_ms))
    decisions: list[EndpointDecision] = []
    for prob in probs:
        for span in gate.push(prob):
            decisions.extend(detector.push(span.is_speech, span.duration_samples))
    for span in gate.flush():
        decisions.extend(detector.push(span.is_speech, span.duration_samples))
    last = detector.end_of_stream()
    return decisions + ([last] if last is not None else [])


@pytest.mark.parametrize(("pause_frames", "utterances"), [(10, 1), (24, 1), (25, 2), (40, 2)])
def test_through_the_gate_a_real_800_ms_pause_splits(pause_frames: int, utterances: int) -> None:
    # 25 frames of 32 ms are exactly 800 ms.
    probs = [0.9] * 30 + [0.05] * pause_frames + [0.9] * 30 + [0.05] * 5
    assert len(gate_then_endpoint(probs)) == utterances


def test_through_the_gate_the_silence_final_comes_after_800_ms_of_real_silence() -> None:
    gate = SpeechGate()
    detector = EndpointDetector(EndpointConfig(speech_pad_ms=gate.config.speech_pad_ms))
    silent_frames = 0
    for prob in [0.9] * 30 + [0.05] * 40:
        silent_frames += prob < 0.5
        decisions = [
            decision
            for span in gate.push(prob)
            for decision in detector.push(span.is_speech, span.duration_samples)
        ]
        if decisions:
            break
    assert silent_frames == 25
    assert decisions[0].end_samples == 30 * FRAME + PAD


def test_gate_spans_drive_the_endpoint_detector() -> None:
    # 2 s speech, 300 ms pause, 1 s speech, 1.2 s silence, 1 s speech, silence.
    def frames(duration_ms: int) -> int:
        return round(duration_ms / 32)

    probs = (
        [0.95] * frames(2000)
        + [0.05] * frames(300)
        + [0.95] * frames(1000)
        + [0.05] * frames(1200)
        + [0.95] * frames(1000)
        + [0.05] * frames(500)
    )
    decisions = gate_then_endpoint(probs)
    assert [d.reason for d in decisions] == [EndpointReason.SILENCE, EndpointReason.END_OF_STREAM]
    assert decisions[0].start_samples == 0
    assert decisions[1].start_samples == (frames(2000) + frames(300) + frames(1000)) * FRAME + (
        frames(1200) * FRAME - PAD
    )


def test_energy_vad_scores_loudness_per_stream() -> None:
    vad: Vad[EnergyVadState] = EnergyVad()
    states = [vad.new_state() for _ in range(3)]
    rng = np.random.default_rng(7)
    frames = np.zeros((3, FRAME), dtype=np.float32)
    frames[1] = 0.3 * rng.standard_normal(FRAME)
    frames[2] = 0.01 * rng.standard_normal(FRAME)
    probs = vad.speech_probs(frames, states)
    assert probs.dtype == np.float32
    assert probs.shape == (3,)
    assert probs[0] == 0.0
    assert probs[1] == 1.0
    assert 0.0 < probs[2] < 0.5
    assert [state.frames_processed for state in states] == [1, 1, 1]


def test_energy_vad_rejects_bad_batches() -> None:
    vad = EnergyVad()
    state = vad.new_state()
    with pytest.raises(ValueError, match="shape"):
        vad.speech_probs(np.zeros((1, 256), dtype=np.float32), [state])
    with pytest.raises(ValueError, match="states"):
        vad.speech_probs(np.zeros((2, FRAME), dtype=np.float32), [state])
    with pytest.raises(ValueError, match="twice"):
        vad.speech_probs(np.zeros((2, FRAME), dtype=np.float32), [state, state])
