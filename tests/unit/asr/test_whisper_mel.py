from __future__ import annotations

import numpy as np
import pytest
import torch

from pipeline.asr.whisper.mel import (
    HOP_LENGTH_SAMPLES,
    N_FRAMES_PER_WINDOW,
    SAMPLE_RATE_HZ,
    log_mel_spectrogram,
    mel_filterbank,
    pad_or_trim_frames,
)


def _tone(freq_hz: float, seconds: float, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * SAMPLE_RATE_HZ)) / SAMPLE_RATE_HZ
    return (amplitude * np.sin(2 * np.pi * freq_hz * t)).astype(np.float32)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_filterbank_shape_and_ordering(n_mels: int) -> None:
    filters = mel_filterbank(n_mels).numpy()
    assert filters.shape == (n_mels, 201)
    assert filters.dtype == np.float32
    assert (filters >= 0).all()
    peaks = filters.argmax(axis=1)
    assert (np.diff(peaks) >= 0).all()
    # Slaney normalisation: every triangle has unit area in Hz (40 Hz per FFT bin); only the
    # wide high bands are sampled finely enough by the FFT bins for the check.
    areas = filters.sum(axis=1) * (SAMPLE_RATE_HZ / 400)
    np.testing.assert_allclose(areas[-n_mels // 4 :], 1.0, atol=0.05)


def test_filterbank_matches_faster_whisper() -> None:
    from faster_whisper import feature_extractor

    reference = feature_extractor.FeatureExtractor.get_mel_filters(16000, 400, n_mels=80)
    np.testing.assert_allclose(mel_filterbank(80).numpy(), reference, rtol=1e-6, atol=1e-9)


def test_frame_count_and_dtype() -> None:
    for n_samples in (160, 16_000, 16_000 * 3 + 77):
        mel = log_mel_spectrogram(np.zeros(n_samples, np.float32) + 0.01)
        assert mel.shape == (80, n_samples // HOP_LENGTH_SAMPLES)
        assert mel.dtype == torch.float32
    assert log_mel_spectrogram(np.zeros(100, np.float32)).shape == (80, 0)


def test_rejects_multichannel_audio() -> None:
    with pytest.raises(ValueError, match="1-D"):
        log_mel_spectrogram(np.zeros((2, 1600), np.float32))


def test_dynamic_range_is_clamped_to_8_decades() -> None:
    audio = _tone(440.0, 2.0) + np.random.default_rng(0).normal(0, 1e-4, 32_000).astype(np.float32)
    mel = log_mel_spectrogram(audio)
    assert float(mel.max() - mel.min()) <= 2.0 + 1e-6


def test_tone_peaks_in_the_matching_band() -> None:
    mel = log_mel_spectrogram(_tone(1000.0, 1.0))
    filters = mel_filterbank(80).numpy()
    expected_band = int(filters[:, 1000 // 40].argmax())
    assert abs(int(mel.mean(dim=1).argmax()) - expected_band) <= 1


def test_numpy_and_torch_inputs_agree_and_are_not_modified() -> None:
    audio = _tone(300.0, 0.5)
    before = audio.copy()
    from_numpy = log_mel_spectrogram(audio)
    from_torch = log_mel_spectrogram(torch.from_numpy(audio))
    torch.testing.assert_close(from_numpy, from_torch)
    np.testing.assert_array_equal(audio, before)


def test_matches_faster_whisper_features() -> None:
    from faster_whisper import feature_extractor

    audio = _tone(220.0, 3.0) + _tone(1800.0, 3.0, 0.05)
    audio += np.random.default_rng(1).normal(0, 0.01, audio.shape).astype(np.float32)
    reference = feature_extractor.FeatureExtractor()(audio)[:, :-1]
    np.testing.assert_allclose(log_mel_spectrogram(audio).numpy(), reference, atol=1e-4)


def test_pad_or_trim_frames() -> None:
    mel = torch.ones(80, 120)
    padded = pad_or_trim_frames(mel)
    assert padded.shape == (80, N_FRAMES_PER_WINDOW)
    assert float(padded[:, 120:].abs().sum()) == 0.0
    assert pad_or_trim_frames(mel, 50).shape == (80, 50)
    assert pad_or_trim_frames(mel, 120) is mel
