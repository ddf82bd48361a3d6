from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.asr.endpoint import (
    EndpointConfig,
    EndpointDecision,
    EndpointDetector,
    EndpointReason,
)
from pipeline.contracts import messages
from pipeline.errors import ConfigError

RATE_HZ = 16_000
FRAME_SAMPLES = 512


def ms(duration_ms: int) -> int:
    return duration_ms * RATE_HZ // 1000


def feed_frames(
    detector: EndpointDetector, is_speech: bool, duration_samples: int
) -> list[EndpointDecision]:
    """Push ``duration_samples`` as VAD frames (the last one may be short)."""
    decisions: list[EndpointDecision] = []
    while duration_samples > 0:
        frame = min(FRAME_SAMPLES, duration_samples)
        decisions.extend(detector.push(is_speech, frame))
        duration_samples -= frame
    return decisions


def test_reason_is_the_wire_enum() -> None:
    assert EndpointReason is messages.EndpointReason
    assert [reason.value for reason in EndpointReason] == [
        "silence",
        "max_length",
        "end_of_stream",
        "forced",
    ]


def test_defaults_follow_the_design() -> None:
    config = EndpointConfig()
    assert config.trailing_silence_samples == ms(800)
    assert config.max_utterance_samples == ms(20_000)


def test_a_300_ms_pause_does_not_split_and_800_ms_does() -> None:
    detector = EndpointDetector()
    assert feed_frames(detector, True, ms(1000)) == []
    assert feed_frames(detector, False, ms(300)) == []
    assert feed_frames(detector, True, ms(1000)) == []
    decisions = feed_frames(detector, False, ms(800))
    assert decisions == [
        EndpointDecision(
            EndpointReason.SILENCE,
            start_samples=0,
            end_samples=ms(2300),
            decided_at_samples=ms(3100),
            discarded=False,
            start_is_onset=False,  # the stream's first sample: no pad before it
            end_is_offset=True,
        )
    ]
    assert detector.utterance_start_samples is None


def test_silence_fires_at_exactly_the_trailing_silence() -> None:
    detector = EndpointDetector()
    detector.push(True, ms(500))
    assert detector.push(False, ms(800) - 1) == ()
    assert detector.trailing_silence_samples == ms(800) - 1
    (decision,) = detector.push(False, 1)
    assert decision.decided_at_samples == ms(1300)


def test_padded_input_counts_real_silence() -> None:
    # Runs padded by 60 ms on each side: a real 800 ms pause arrives as 680 ms of non-speech.
    detector = EndpointDetector(EndpointConfig(speech_pad_ms=60))
    detector.push(True, ms(1000))
    assert detector.push(False, ms(679)) == ()
    (decision,) = detector.push(False, ms(1))
    assert decision.end_samples == ms(1000)
    assert decision.decided_at_samples == ms(1680)


def test_a_start_pad_counts_toward_the_real_silence() -> None:
    # End pad 60 ms, start pad 250 ms: a real 800 ms pause arrives as 490 ms of non-speech.
    detector = EndpointDetector(EndpointConfig(speech_pad_ms=60, start_pad_ms=250))
    detector.push(True, ms(1000))
    assert detector.push(False, ms(489)) == ()
    (decision,) = detector.push(False, ms(1))
    assert decision.decided_at_samples == ms(1490)


def test_a_long_utterance_ends_at_a_shorter_pause() -> None:
    config = EndpointConfig(long_utterance_ms=10_000, long_silence_ms=200)
    detector = EndpointDetector(config)
    # Before 10 s of speech a 300 ms pause stays inside the utterance ...
    detector.push(True, ms(6000))
    assert detector.push(False, ms(300)) == ()
    detector.push(True, ms(4000))
    # ... after it, 200 ms end it, at its last speech sample, by the silence rule.
    assert detector.push(False, ms(199)) == ()
    (decision,) = detector.push(False, ms(1))
    assert (decision.reason, decision.start_samples, decision.end_samples) == (
        EndpointReason.SILENCE,
        0,
        ms(10_300),
    )
    assert decision.end_is_offset


def test_the_long_utterance_pause_is_real_silence_and_at_least_a_sample() -> None:
    padded = EndpointConfig(speech_pad_ms=60, start_pad_ms=60, long_utterance_ms=10_000)
    assert padded.long_silence_rule_samples == ms(200 - 120)
    wide = EndpointConfig(speech_pad_ms=60, start_pad_ms=250, long_utterance_ms=10_000)
    assert wide.long_silence_rule_samples == 1
    assert wide.silence_rule_for(ms(9_999)) == wide.silence_rule_samples
    assert wide.silence_rule_for(ms(10_000)) == 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"long_utterance_ms": 20_000},
        {"long_utterance_ms": 0},
        {"long_silence_ms": 0},
        {"speech_pad_ms": 300, "start_pad_ms": 500},
    ],
)
def test_invalid_long_utterance_and_start_pad_rules_are_rejected(kwargs: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        EndpointConfig(**kwargs)


def test_one_long_silence_run_decides_at_the_rule_not_at_the_run_end() -> None:
    detector = EndpointDetector()
    detector.push(True, ms(500))
    (decision,) = detector.push(False, ms(5000))
    assert decision.decided_at_samples == ms(1300)
    assert detector.position_samples == ms(5500)


def test_max_length_cuts_continuous_speech() -> None:
    detector = EndpointDetector()
    decisions = feed_frames(detector, True, ms(45_000))
    assert [(d.reason, d.start_samples, d.end_samples) for d in decisions] == [
        (EndpointReason.MAX_LENGTH, 0, ms(20_000)),
        (EndpointReason.MAX_LENGTH, ms(20_000), ms(40_000)),
    ]
    assert detector.utterance_start_samples == ms(40_000)
    last = detector.end_of_stream()
    assert last is not None
    assert (last.reason, last.start_samples, last.end_samples) == (
        EndpointReason.END_OF_STREAM,
        ms(40_000),
        ms(45_000),
    )


def test_one_run_longer_than_max_gives_several_decisions() -> None:
    detector = EndpointDetector(EndpointConfig(max_utterance_ms=1000))
    decisions = detector.push(True, ms(3500))
    assert [d.end_samples for d in decisions] == [ms(1000), ms(2000), ms(3000)]


def test_a_short_pause_past_max_length_ends_the_utterance_before_new_speech() -> None:
    detector = EndpointDetector(EndpointConfig(max_utterance_ms=2000))
    detector.push(True, ms(1900))
    assert detector.push(False, ms(500)) == ()
    (decision,) = detector.push(True, ms(100))
    assert (decision.reason, decision.start_samples, decision.end_samples) == (
        EndpointReason.MAX_LENGTH,
        0,
        ms(1900),
    )
    assert decision.decided_at_samples == ms(2400)
    assert detector.utterance_start_samples == ms(2400)


def test_blips_close_as_discarded() -> None:
    detector = EndpointDetector()
    detector.push(True, ms(100))
    (decision,) = detector.push(False, ms(800))
    assert decision.discarded
    assert decision.duration_samples == ms(100)


def test_end_of_stream_and_force_close_only_an_open_utterance() -> None:
    detector = EndpointDetector()
    assert detector.end_of_stream() is None
    assert detector.force() is None
    detector.push(True, ms(400))
    detector.push(False, ms(100))
    forced = detector.force()
    assert forced == EndpointDecision(
        EndpointReason.FORCED,
        0,
        ms(400),
        decided_at_samples=ms(500),
        discarded=False,
        start_is_onset=False,
        end_is_offset=True,  # forced after 100 ms of silence
    )
    assert detector.force() is None
    detector.push(True, ms(300))
    eos = detector.end_of_stream()
    assert eos is not None
    assert (eos.reason, eos.start_samples, eos.end_samples) == (
        EndpointReason.END_OF_STREAM,
        ms(500),
        ms(800),
    )


def test_edges_say_whether_the_labeller_drew_them() -> None:
    """Only edges with labelled silence beside them are onsets/offsets (word-time snapping)."""
    detector = EndpointDetector(EndpointConfig(max_utterance_ms=2_000))
    feed_frames(detector, False, ms(500))
    cut = feed_frames(detector, True, ms(2_500))  # speech past the maximum: cut in speech
    assert [(d.reason, d.start_is_onset, d.end_is_offset) for d in cut] == [
        (EndpointReason.MAX_LENGTH, True, False)
    ]
    (after_cut,) = feed_frames(detector, False, ms(800))
    assert (after_cut.start_is_onset, after_cut.end_is_offset) == (False, True)

    feed_frames(detector, True, ms(600))
    forced = detector.force()  # in speech: its end is no offset
    assert forced is not None
    assert (forced.start_is_onset, forced.end_is_offset) == (True, False)
    feed_frames(detector, True, ms(600))  # the same speech goes on: no onset
    eos = detector.end_of_stream()  # and ends with the stream, still in speech
    assert eos is not None
    assert (eos.start_is_onset, eos.end_is_offset) == (False, False)


def test_end_of_stream_after_silence_ends_at_an_offset() -> None:
    detector = EndpointDetector()
    feed_frames(detector, False, ms(100))
    feed_frames(detector, True, ms(600))
    feed_frames(detector, False, ms(200))
    eos = detector.end_of_stream()
    assert eos is not None
    assert (eos.start_is_onset, eos.end_is_offset) == (True, True)


def test_snapshot_resumes_identically() -> None:
    config = EndpointConfig(trailing_silence_ms=500)
    original = EndpointDetector(config)
    original.push(True, ms(700))
    original.push(False, ms(200))
    resumed = EndpointDetector.from_snapshot(config, original.snapshot())
    for detector in (original, resumed):
        detector.push(True, ms(100))
    assert original.push(False, ms(600)) == resumed.push(False, ms(600))


def test_negative_duration_is_a_caller_bug() -> None:
    with pytest.raises(ValueError, match="negative"):
        EndpointDetector().push(True, -1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"sample_rate_hz": 0},
        {"trailing_silence_ms": 0},
        {"min_utterance_ms": -1},
        {"max_utterance_ms": 100, "min_utterance_ms": 100},
        {"max_utterance_ms": 29_001},  # longer than Whisper's window: its end would be lost
        {"speech_pad_ms": -1},
        {"speech_pad_ms": 400},
    ],
)
def test_invalid_config_is_rejected(kwargs: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        EndpointConfig(**kwargs)


def test_ms_round_up_at_8_khz() -> None:
    config = EndpointConfig(sample_rate_hz=8000, trailing_silence_ms=801)
    assert config.trailing_silence_samples == 6408


# Property tests over random runs of speech and silence (in samples).
_runs = st.lists(
    st.tuples(st.booleans(), st.integers(min_value=0, max_value=ms(1500))),
    max_size=40,
)
_configs = st.builds(
    EndpointConfig,
    trailing_silence_ms=st.sampled_from([100, 300, 800]),
    max_utterance_ms=st.sampled_from([1000, 3000, 20_000]),
    min_utterance_ms=st.sampled_from([0, 200]),
    speech_pad_ms=st.sampled_from([0, 30]),
    long_utterance_ms=st.sampled_from([None, 500]),
)


def run_all(config: EndpointConfig, runs: list[tuple[bool, int]]) -> list[EndpointDecision]:
    detector = EndpointDetector(config)
    decisions = [d for is_speech, n in runs for d in detector.push(is_speech, n)]
    last = detector.end_of_stream()
    return decisions + ([last] if last is not None else [])


def speech_samples(runs: list[tuple[bool, int]]) -> list[int]:
    position, samples = 0, list[int]()
    for is_speech, n in runs:
        if is_speech:
            samples.extend(range(position, position + n))
        position += n
    return samples


@settings(deadline=None, max_examples=150)
@given(config=_configs, runs=_runs)
def test_utterances_tile_the_speech_in_order_without_overlap(
    config: EndpointConfig, runs: list[tuple[bool, int]]
) -> None:
    decisions = run_all(config, runs)
    for earlier, later in itertools.pairwise(decisions):
        assert earlier.end_samples <= later.start_samples
    speech = set(speech_samples(runs))
    covered = 0
    cut_ends = {d.end_samples for d in decisions if d.reason is EndpointReason.MAX_LENGTH}
    for decision in decisions:
        assert 0 < decision.duration_samples <= config.max_utterance_samples
        assert decision.start_samples in speech
        assert decision.end_samples - 1 in speech
        assert decision.decided_at_samples >= decision.end_samples
        # A blip is discarded, but never the tail of speech cut at the maximum length.
        continues_cut = decision.start_samples in cut_ends
        assert decision.discarded == (
            decision.duration_samples < config.min_utterance_samples and not continues_cut
        )
        span = range(decision.start_samples, decision.end_samples)
        covered += sum(1 for sample in span if sample in speech)
        # Pauses inside an utterance are shorter than the silence rule.
        inner = sorted(sample for sample in span if sample in speech)
        gaps = [b - a - 1 for a, b in itertools.pairwise(inner)]
        assert all(gap < config.silence_rule_samples for gap in gaps)
    assert covered == len(speech)


@settings(deadline=None, max_examples=150)
@given(config=_configs, runs=_runs, frame_samples=st.sampled_from([1, 160, 512, 100_000]))
def test_decisions_do_not_depend_on_how_the_audio_is_chunked(
    config: EndpointConfig, runs: list[tuple[bool, int]], frame_samples: int
) -> None:
    rechunked = [
        (is_speech, min(frame_samples, n - offset))
        for is_speech, n in runs
        for offset in range(0, n, frame_samples)
    ]
    assert run_all(config, rechunked) == run_all(config, runs)


@settings(deadline=None, max_examples=100)
@given(
    first_ms=st.integers(min_value=200, max_value=3000),
    pause_ms=st.integers(min_value=0, max_value=2000),
    second_ms=st.integers(min_value=200, max_value=3000),
)
def test_a_pause_splits_exactly_when_it_reaches_the_trailing_silence(
    first_ms: int, pause_ms: int, second_ms: int
) -> None:
    decisions = run_all(
        EndpointConfig(), [(True, ms(first_ms)), (False, ms(pause_ms)), (True, ms(second_ms))]
    )
    expected_utterances = 2 if pause_ms >= 800 else 1
    assert len(decisions) == expected_utterances
