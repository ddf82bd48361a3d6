"""Streaming RNNoise denoiser: chunking-invariant, fixed latency, aligned output, clean filters.

These run the real RNNoise library (a local shared object, no model download). pyrnnoise is in the
dev extra that CI installs, so a missing one fails these tests rather than skipping them. Real
speech and noise: tests/integration/.
"""

from __future__ import annotations

import gc
import importlib.machinery
import importlib.util
import itertools
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.audio import denoise
from pipeline.audio.denoise import (
    BLOCK_SAMPLES,
    CHAIN_DELAY_SAMPLES,
    DENOISE_LATENCY_SAMPLES,
    Decimator3x,
    StreamDenoiser,
    Upsampler3x,
    rnnoise_library_path,
)
from pipeline.errors import ModelLoadError

Audio = npt.NDArray[np.float32]


@pytest.fixture
def rnnoise() -> None:
    """The library ships in the PyPI package pyrnnoise: optional for users (the ``denoise``
    extra), but in the ``dev`` extra, so a test environment without it is broken."""
    if importlib.util.find_spec("pyrnnoise") is None:
        pytest.fail(
            "pyrnnoise (librnnoise.so) is not installed: `make setup` installs the dev extra"
        )


requires_rnnoise = pytest.mark.usefixtures("rnnoise")

RATE_HZ = 16_000
RATE_48K_HZ = 48_000
UP_DELAY_48K = 48  # Upsampler3x: 1 ms
DOWN_DELAY_48K = 48  # Decimator3x: 1 ms


def sine(frequency_hz: float, samples: int, rate_hz: int, delay: float = 0.0) -> Audio:
    t = (np.arange(samples) - delay) / rate_hz
    return (0.5 * np.sin(2 * np.pi * frequency_hz * t)).astype(np.float32)


def noisy_tone(samples: int, seed: int = 0) -> Audio:
    """A voiced-like tone in noise: RNNoise does real work on it (not its silence shortcut)."""
    rng = np.random.default_rng(seed)
    tone = sine(220.0, samples, RATE_HZ) + 0.5 * sine(440.0, samples, RATE_HZ)
    return (0.5 * tone + 0.05 * rng.standard_normal(samples)).astype(np.float32)


def level_db(audio: Audio, frequency_hz: float, rate_hz: int) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(len(audio))))
    bin_index = round(frequency_hz * len(audio) / rate_hz)
    return float(20 * np.log10(spectrum[bin_index - 2 : bin_index + 3].max() + 1e-12))


def denoise_whole(audio: Audio) -> Audio:
    with StreamDenoiser() as denoiser:
        return np.concatenate([denoiser.process(audio), denoiser.flush()])


def denoise_pieces(audio: Audio, cuts: list[int]) -> Audio:
    edges = [0, *sorted(cuts), len(audio)]
    with StreamDenoiser() as denoiser:
        pieces = [denoiser.process(audio[a:b]) for a, b in itertools.pairwise(edges)]
        return np.concatenate([*pieces, denoiser.flush()])


# -- the stream ----------------------------------------------------------------------------------


def test_the_documented_constants() -> None:
    assert BLOCK_SAMPLES == 160
    assert CHAIN_DELAY_SAMPLES == (UP_DELAY_48K + 960 + DOWN_DELAY_48K) // 3 == 352
    assert DENOISE_LATENCY_SAMPLES == CHAIN_DELAY_SAMPLES + BLOCK_SAMPLES - 1


@requires_rnnoise
@settings(deadline=None, max_examples=30)
@given(cuts=st.lists(st.integers(0, 8000), max_size=10))
def test_any_chunking_gives_the_one_shot_result_bit_for_bit(cuts: list[int]) -> None:
    signal = noisy_tone(8000, seed=len(cuts))
    assert denoise_pieces(signal, cuts).tobytes() == denoise_whole(signal).tobytes()


@requires_rnnoise
def test_the_same_input_gives_the_same_output() -> None:
    signal = noisy_tone(RATE_HZ, seed=3)
    assert denoise_whole(signal).tobytes() == denoise_whole(signal).tobytes()


@requires_rnnoise
@pytest.mark.parametrize(
    "total_samples", [0, 1, 159, 160, 351, DENOISE_LATENCY_SAMPLES, 512, 1000, RATE_HZ + 37]
)
def test_output_lags_by_the_fixed_latency_and_flush_returns_the_rest(total_samples: int) -> None:
    with StreamDenoiser() as denoiser:
        out = denoiser.process(noisy_tone(total_samples))
        assert out.dtype == np.float32
        assert len(out) == max(0, total_samples - DENOISE_LATENCY_SAMPLES)
        assert denoiser.pending_samples == min(total_samples, DENOISE_LATENCY_SAMPLES)
        rest = denoiser.flush()
        assert rest.dtype == np.float32
        assert len(rest) == min(total_samples, DENOISE_LATENCY_SAMPLES)
        assert denoiser.pending_samples == 0


@requires_rnnoise
@settings(deadline=None, max_examples=20)
@given(sizes=st.lists(st.integers(0, 700), min_size=1, max_size=25))
def test_every_call_returns_exactly_what_the_latency_allows(sizes: list[int]) -> None:
    signal = noisy_tone(sum(sizes), seed=1)
    received = emitted = 0
    with StreamDenoiser() as denoiser:
        for size in sizes:
            emitted += len(denoiser.process(signal[received : received + size]))
            received += size
            assert emitted == max(0, received - DENOISE_LATENCY_SAMPLES)
        assert emitted + len(denoiser.flush()) == received


@requires_rnnoise
def test_empty_chunks_return_empty_float32() -> None:
    with StreamDenoiser() as denoiser:
        out = denoiser.process(np.zeros(0, dtype=np.float32))
        assert out.dtype == np.float32
        assert len(out) == 0
        assert len(denoiser.flush()) == 0


@requires_rnnoise
def test_silence_stays_silence() -> None:
    out = denoise_whole(np.zeros(2 * RATE_HZ, dtype=np.float32))
    assert len(out) == 2 * RATE_HZ
    assert float(np.abs(out).max()) < 1e-7


@requires_rnnoise
def test_float64_input_is_accepted_and_output_is_float32_within_full_scale() -> None:
    loud = 0.999 * np.sign(np.sin(2 * np.pi * 300.0 * np.arange(RATE_HZ) / RATE_HZ))
    out = denoise_whole(loud)
    assert out.dtype == np.float32
    assert float(np.abs(out).max()) <= 1.0


@requires_rnnoise
def test_stereo_input_is_refused() -> None:
    with StreamDenoiser() as denoiser, pytest.raises(ValueError, match="mono"):
        denoiser.process(np.zeros((2, 160), dtype=np.float32))


@requires_rnnoise
def test_a_flushed_stream_refuses_more_audio() -> None:
    with StreamDenoiser() as denoiser:
        denoiser.process(noisy_tone(1000))
        denoiser.flush()
        with pytest.raises(ValueError, match="flushed"):
            denoiser.process(noisy_tone(10))
        with pytest.raises(ValueError, match="flushed"):
            denoiser.flush()


# -- the C state ---------------------------------------------------------------------------------


@requires_rnnoise
def test_close_is_idempotent_and_a_closed_denoiser_refuses_audio() -> None:
    denoiser = StreamDenoiser()
    denoiser.close()
    denoiser.close()
    assert denoiser.closed
    with pytest.raises(ValueError, match="closed"):
        denoiser.process(noisy_tone(10))


@requires_rnnoise
def test_the_context_manager_frees_the_state() -> None:
    with StreamDenoiser() as denoiser:
        assert not denoiser.closed
    assert denoiser.closed


@requires_rnnoise
def test_an_unclosed_denoiser_frees_its_state_when_collected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    freed: list[int] = []
    original = denoise._destroy

    def recording_destroy(lib: object, state: int) -> None:
        freed.append(state)
        original(lib, state)  # type: ignore[arg-type]

    monkeypatch.setattr(denoise, "_destroy", recording_destroy)
    denoiser = StreamDenoiser()
    denoiser.process(noisy_tone(500))
    del denoiser
    gc.collect()
    assert len(freed) == 1

    closed = StreamDenoiser()
    closed.close()
    del closed
    gc.collect()
    assert len(freed) == 2  # freed once by close(), never again by the collector


def test_a_missing_package_is_a_model_load_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(denoise.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelLoadError, match="pyrnnoise"):
        rnnoise_library_path()


def test_a_package_without_the_library_is_a_model_load_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spec = importlib.machinery.ModuleSpec("pyrnnoise", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path)]
    monkeypatch.setattr(denoise.importlib.util, "find_spec", lambda name: spec)
    with pytest.raises(ModelLoadError, match=r"librnnoise\.so"):
        rnnoise_library_path()


@requires_rnnoise
def test_the_installed_library_is_found() -> None:
    path = rnnoise_library_path()
    assert path.name == "librnnoise.so"
    assert path.is_file()


# -- the resampling filters ----------------------------------------------------------------------


def test_a_1_khz_tone_passes_up_and_down_with_unit_gain_and_the_documented_delay() -> None:
    tone = sine(1000.0, RATE_HZ, RATE_HZ)
    wide = Upsampler3x().process(tone)
    assert wide.dtype == np.float32
    assert len(wide) == 3 * len(tone)
    ideal_wide = sine(1000.0, len(wide), RATE_48K_HZ, delay=UP_DELAY_48K)
    settled = slice(1000, -1000)
    assert np.abs(wide[settled] - ideal_wide[settled]).max() < 1e-3

    back = Decimator3x().process(wide)
    assert len(back) == len(tone)
    delay_16k = (UP_DELAY_48K + DOWN_DELAY_48K) // 3
    ideal_back = sine(1000.0, len(back), RATE_HZ, delay=delay_16k)
    assert np.abs(back[settled] - ideal_back[settled]).max() < 1e-3
    gain_db = level_db(back[settled], 1000.0, RATE_HZ) - level_db(tone[settled], 1000.0, RATE_HZ)
    assert abs(gain_db) < 0.05


def test_the_upsampler_passes_input_samples_through_on_phase_zero() -> None:
    signal = noisy_tone(2000)
    wide = Upsampler3x().process(signal)
    passed = wide[UP_DELAY_48K::3]
    np.testing.assert_allclose(passed, signal[: len(passed)], atol=1e-5)


def test_upsampling_images_and_decimation_aliases_are_suppressed() -> None:
    tone = sine(1000.0, RATE_HZ, RATE_HZ)
    wide = Upsampler3x().process(tone)[1000:-1000]
    passband = level_db(wide, 1000.0, RATE_48K_HZ)
    for image_hz in (15_000.0, 17_000.0):
        assert level_db(wide, image_hz, RATE_48K_HZ) < passband - 60

    high = sine(12_000.0, 3 * RATE_HZ, RATE_48K_HZ)  # would alias to 4 kHz
    reference = sine(4_000.0, 3 * RATE_HZ, RATE_48K_HZ)
    aliased = Decimator3x().process(high)[1000:-1000]
    passed = Decimator3x().process(reference)[1000:-1000]
    assert level_db(aliased, 4000.0, RATE_HZ) < level_db(passed, 4000.0, RATE_HZ) - 60


@settings(deadline=None, max_examples=50)
@given(
    cuts=st.lists(st.integers(0, 3000), max_size=12),
    wide_cuts=st.lists(st.integers(0, 9000), max_size=12),
)
def test_the_filters_are_chunking_invariant_bit_for_bit(
    cuts: list[int], wide_cuts: list[int]
) -> None:
    signal = noisy_tone(3000, seed=len(cuts))
    edges = [0, *sorted(cuts), len(signal)]
    upsampler = Upsampler3x()
    wide = np.concatenate([upsampler.process(signal[a:b]) for a, b in itertools.pairwise(edges)])
    assert wide.tobytes() == Upsampler3x().process(signal).tobytes()
    decimator = Decimator3x()
    wide_edges = [0, *sorted(wide_cuts), len(wide)]
    back = np.concatenate([decimator.process(wide[a:b]) for a, b in itertools.pairwise(wide_edges)])
    assert back.tobytes() == Decimator3x().process(wide).tobytes()
