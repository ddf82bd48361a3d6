"""Whisper's log-mel spectrogram in torch, matching faster-whisper's feature extractor.

Audio is mono float PCM at 16 kHz in [-1, 1]. One mel frame covers a 25 ms Hann window
(``N_FFT`` = 400 samples) every 10 ms (``HOP_LENGTH_SAMPLES`` = 160); two mel frames make one
encoder position (20 ms). A clip of ``n_samples`` yields ``n_samples // 160`` frames.

Recipe (the reference's, step for step): append 160 zero samples, centred STFT with reflect
padding, drop the last STFT frame, power spectrum, slaney mel filterbank, ``log10`` clamped
at 1e-10, floor at (clip maximum − 8), then ``(x + 4) / 4``. The floor uses the maximum of
the whole clip, so a window's features depend on the whole window: compute them per window.

To fill a fixed encoder window (30 s = 3000 frames), pad the *mel frames* with zeros
(:func:`pad_or_trim_frames`), never the audio: that is what faster-whisper does, and padding
the audio instead changes the floor and the frames near the end of the clip.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import numpy.typing as npt
import torch
from torch.nn import functional

__all__ = [
    "FRAMES_PER_SECOND",
    "HOP_LENGTH_SAMPLES",
    "N_FFT",
    "N_FRAMES_PER_WINDOW",
    "SAMPLE_RATE_HZ",
    "log_mel_spectrogram",
    "mel_filterbank",
    "pad_or_trim_frames",
]

SAMPLE_RATE_HZ = 16_000
N_FFT = 400
HOP_LENGTH_SAMPLES = 160
FRAMES_PER_SECOND = SAMPLE_RATE_HZ // HOP_LENGTH_SAMPLES
N_FRAMES_PER_WINDOW = 30 * FRAMES_PER_SECOND

# Slaney mel scale (librosa's default, htk=False): linear below 1 kHz, logarithmic above.
_F_SP_HZ = 200.0 / 3.0
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP_HZ
_LOG_STEP = np.log(6.4) / 27.0


def _hz_to_mel(freq_hz: float) -> float:
    if freq_hz < _MIN_LOG_HZ:
        return freq_hz / _F_SP_HZ
    return float(_MIN_LOG_MEL + np.log(freq_hz / _MIN_LOG_HZ) / _LOG_STEP)


def _mel_to_hz(mels: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    freqs = _F_SP_HZ * mels
    log_region = mels >= _MIN_LOG_MEL
    freqs[log_region] = _MIN_LOG_HZ * np.exp(_LOG_STEP * (mels[log_region] - _MIN_LOG_MEL))
    return freqs


@lru_cache(maxsize=8)
def _mel_filterbank_np(n_mels: int, n_fft: int, sample_rate_hz: int) -> npt.NDArray[np.float32]:
    fft_freqs_hz = np.fft.rfftfreq(n_fft, d=1.0 / sample_rate_hz)
    mel_points = np.linspace(0.0, _hz_to_mel(sample_rate_hz / 2.0), n_mels + 2)
    band_edges_hz = _mel_to_hz(mel_points)
    band_widths_hz = np.diff(band_edges_hz)
    ramps = band_edges_hz[:, None] - fft_freqs_hz[None, :]
    rising = -ramps[:-2] / band_widths_hz[:-1, None]
    falling = ramps[2:] / band_widths_hz[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    # Slaney normalisation: each triangle has unit area in Hz, so bands carry equal energy.
    weights *= (2.0 / (band_edges_hz[2:] - band_edges_hz[:-2]))[:, None]
    return weights.astype(np.float32)


def mel_filterbank(
    n_mels: int = 80, *, n_fft: int = N_FFT, sample_rate_hz: int = SAMPLE_RATE_HZ
) -> torch.Tensor:
    """Slaney-normalised triangular mel filters, shape ``(n_mels, n_fft // 2 + 1)``, float32.

    Equal to ``librosa.filters.mel(sr=sample_rate_hz, n_fft=n_fft, n_mels=n_mels)`` (fmin 0,
    fmax Nyquist, slaney scale and norm), which is what Whisper's filter file holds.
    """
    return torch.from_numpy(_mel_filterbank_np(n_mels, n_fft, sample_rate_hz).copy())


@lru_cache(maxsize=8)
def _cached_filters(n_mels: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    window = torch.hann_window(N_FFT, periodic=True, dtype=torch.float32, device=device)
    return window, mel_filterbank(n_mels).to(device)


def log_mel_spectrogram(
    audio: torch.Tensor | npt.NDArray[np.floating],
    n_mels: int = 80,
    *,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Log-mel features of one mono 16 kHz clip: shape ``(n_mels, n_samples // 160)``, float32.

    ``audio`` is 1-D (``n_samples``), float in [-1, 1]; it is not modified. The result is
    on ``device`` (default: the tensor's device, CPU for numpy input). Clips shorter than one
    hop (160 samples) give zero frames.
    """
    samples = torch.as_tensor(audio, dtype=torch.float32)
    if samples.ndim != 1:
        raise ValueError(f"audio must be 1-D (n_samples,), got shape {tuple(samples.shape)}")
    if device is not None:
        samples = samples.to(device)
    n_frames = samples.shape[0] // HOP_LENGTH_SAMPLES
    if n_frames == 0:
        return torch.zeros((n_mels, 0), dtype=torch.float32, device=samples.device)
    window, filters = _cached_filters(n_mels, samples.device)
    padded = functional.pad(samples, (0, HOP_LENGTH_SAMPLES))
    stft = torch.stft(
        padded,
        N_FFT,
        HOP_LENGTH_SAMPLES,
        window=window,
        center=True,
        pad_mode="reflect",
        return_complex=True,
    )
    power = stft[:, :-1].abs() ** 2
    log_spec = torch.clamp(filters @ power, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    log_spec = (log_spec + 4.0) / 4.0
    return log_spec[:, :n_frames]


def pad_or_trim_frames(mel: torch.Tensor, n_frames: int = N_FRAMES_PER_WINDOW) -> torch.Tensor:
    """Cut or zero-pad the last (time) axis of ``mel`` to ``n_frames`` frames (a new tensor
    when padding, a view when trimming)."""
    length = mel.shape[-1]
    if length > n_frames:
        return mel[..., :n_frames]
    if length < n_frames:
        return functional.pad(mel, (0, n_frames - length))
    return mel
