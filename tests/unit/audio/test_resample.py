"""Streaming 8 → 16 kHz resampling: chunking-invariant, state that checkpoints, a clean band."""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.audio.resample import (
    DELAY_SAMPLES,
    TARGET_SAMPLE_RATE_HZ,
    Upsampler2x,
    UpsamplerState,
    to_16k,
)

Audio = npt.NDArray[np.float32]


def sine(frequency_hz: float, samples: int, rate_hz: int, amplitude: float = 0.5) -> Audio:
    t = np.arange(samples) / rate_hz
    return (amplitude * np.sin(2 * np.pi * frequency_hz * t)).astype(np.float32)


def noise(samples: int, seed: int = 0) -> Audio:
    return (0.2 * np.random.default_rng(seed).standard_normal(samples)).astype(np.float32)


def level_db(audio: Audio, frequency_hz: float, rate_hz: int) -> float:
    window = np.hanning(len(audio))
    spectrum = np.abs(np.fft.rfft(audio * window))
    bin_index = round(frequency_hz * len(audio) / rate_hz)
    return float(20 * np.log10(spectrum[bin_index - 2 : bin_index + 3].max() + 1e-12))


@settings(deadline=None, max_examples=100)
@given(cuts=st.lists(st.integers(0, 3000), max_size=12))
def test_any_chunking_gives_the_one_shot_result_bit_for_bit(cuts: list[int]) -> None:
    signal = noise(3000, seed=len(cuts))
    whole = Upsampler2x().process(signal)
    upsampler = Upsampler2x()
    edges = [0, *sorted(cuts), len(signal)]
    pieces = [upsampler.process(signal[a:b]) for a, b in itertools.pairwise(edges)]
    assert np.concatenate(pieces).tobytes() == whole.tobytes()


def test_output_is_float32_and_twice_as_long() -> None:
    out = Upsampler2x().process(noise(123).astype(np.float32))
    assert out.dtype == np.float32
    assert len(out) == 246
    empty = Upsampler2x().process(np.zeros(0, dtype=np.float32))
    assert empty.dtype == np.float32
    assert len(empty) == 0


def test_a_440_hz_sine_comes_out_delayed_by_16_samples() -> None:
    narrow = sine(440.0, 8000, 8000)
    wide = Upsampler2x().process(narrow)
    k = np.arange(len(wide))
    ideal = 0.5 * np.sin(2 * np.pi * 440.0 * (k - DELAY_SAMPLES) / TARGET_SAMPLE_RATE_HZ)
    # After the filter has filled (2 * 16 output samples), the error is float32 rounding.
    assert np.abs(wide[2 * DELAY_SAMPLES :] - ideal[2 * DELAY_SAMPLES :]).max() < 1e-4
    # Every other output sample is an input sample, 16 outputs later.
    assert np.allclose(
        wide[DELAY_SAMPLES::2][: len(narrow) - 8], narrow[: len(narrow) - 8], atol=1e-5
    )


@pytest.mark.parametrize("frequency_hz", [300.0, 1000.0, 2000.0])
def test_the_image_above_4_khz_is_suppressed(frequency_hz: float) -> None:
    wide = Upsampler2x().process(sine(frequency_hz, 8192, 8000))[64 : 64 + 8192]
    kept = level_db(wide, frequency_hz, TARGET_SAMPLE_RATE_HZ)
    image = level_db(wide, 8000.0 - frequency_hz, TARGET_SAMPLE_RATE_HZ)
    assert abs(kept - level_db(sine(frequency_hz, 8192, 16000), frequency_hz, 16000)) < 0.1
    assert kept - image > 60.0


def full_convolution(signal: Audio) -> npt.NDArray[np.float64]:
    """``signal`` zero-stuffed and convolved with the filter, in float64, up to where the
    delayed signal ends. The filter is read off the upsampler's impulse response."""
    impulse = np.zeros(DELAY_SAMPLES, dtype=np.float32)
    impulse[0] = 1.0
    taps = Upsampler2x().process(impulse)  # the 2 * DELAY_SAMPLES taps, centred on DELAY_SAMPLES
    stuffed = np.zeros(2 * len(signal), dtype=np.float64)
    stuffed[0::2] = signal
    return np.convolve(stuffed, taps.astype(np.float64))[: 2 * len(signal) + DELAY_SAMPLES]


@settings(deadline=None, max_examples=100)
@given(cuts=st.lists(st.integers(0, 3000), max_size=12))
def test_chunks_and_flush_give_the_whole_signal_with_its_tail(cuts: list[int]) -> None:
    signal = noise(3000, seed=len(cuts))
    upsampler = Upsampler2x()
    edges = [0, *sorted(cuts), len(signal)]
    pieces = [upsampler.process(signal[a:b]) for a, b in itertools.pairwise(edges)]
    tail = upsampler.flush()
    assert len(tail) == DELAY_SAMPLES
    streamed = np.concatenate([*pieces, tail])
    # The stream followed by silence, bit for bit; the full convolution up to float32 rounding.
    silence = np.zeros(DELAY_SAMPLES // 2, dtype=np.float32)
    assert streamed.tobytes() == Upsampler2x().process(np.append(signal, silence)).tobytes()
    assert streamed.tobytes() == to_16k(signal, 8000).tobytes()
    assert np.allclose(streamed, full_convolution(signal), rtol=0.0, atol=1e-6)


def test_the_tail_holds_the_last_input_samples() -> None:
    narrow = sine(440.0, 8000, 8000)
    upsampler = Upsampler2x()
    wide = np.concatenate([upsampler.process(narrow), upsampler.flush()])
    # Every other output sample is an input sample, 16 outputs later: all of them, the last 8
    # (1 ms) coming out with the tail.
    assert len(wide[DELAY_SAMPLES::2]) == len(narrow)
    assert np.allclose(wide[DELAY_SAMPLES::2], narrow, atol=1e-5)


def test_after_a_flush_the_upsampler_is_as_new() -> None:
    upsampler = Upsampler2x()
    assert len(upsampler.flush()) == 0  # nothing processed: nothing held back
    upsampler.process(noise(100, seed=5))
    assert len(upsampler.flush()) == DELAY_SAMPLES
    assert len(upsampler.flush()) == 0
    assert upsampler.snapshot() == Upsampler2x().snapshot()
    signal = noise(300, seed=6)
    assert upsampler.process(signal).tobytes() == Upsampler2x().process(signal).tobytes()


def test_a_snapshot_restores_the_stream_bit_for_bit() -> None:
    signal = noise(2000, seed=4)
    whole = to_16k(signal, 8000)
    first = Upsampler2x()
    head = first.process(signal[:777])
    state = first.snapshot()
    assert isinstance(state, UpsamplerState)
    assert len(state.history) == 15
    resumed = Upsampler2x(UpsamplerState(tuple(state.history)))
    rest = [resumed.process(signal[777:]), resumed.flush()]
    assert np.concatenate([head, *rest]).tobytes() == whole.tobytes()


def test_a_snapshot_keeps_whether_a_tail_is_held() -> None:
    # One as new (never fed, or flushed) restores as new: flushing it adds nothing, where a
    # stream that ended in silence (all-zero history) still holds its tail of DELAY_SAMPLES.
    flushed = Upsampler2x()
    flushed.process(noise(100, seed=7))
    flushed.flush()
    for fresh in (Upsampler2x(), flushed):
        assert len(Upsampler2x(fresh.snapshot()).flush()) == 0
    silent = Upsampler2x()
    silent.process(np.zeros(100, dtype=np.float32))
    assert len(Upsampler2x(silent.snapshot()).flush()) == DELAY_SAMPLES


def test_to_16k_passes_16_khz_through_and_upsamples_8_khz() -> None:
    wide = noise(500, seed=1)
    assert to_16k(wide, 16000) is wide
    narrow = noise(500, seed=2)
    upsampler = Upsampler2x()
    streamed = np.concatenate([upsampler.process(narrow), upsampler.flush()])
    assert to_16k(narrow, 8000).tobytes() == streamed.tobytes()
    assert len(to_16k(np.zeros(0, dtype=np.float32), 8000)) == 0
    with pytest.raises(ValueError, match="44100"):
        to_16k(narrow, 44100)
