"""Streaming 8 kHz → 16 kHz resampling with a windowed-sinc FIR and explicit state.

Upsampling by 2: insert a zero after every input sample and low-pass at the old Nyquist (4 kHz)
with a Kaiser-windowed sinc. The filter's history is the only state, so a stream cut into chunks
of any size gives exactly the samples of the whole signal resampled at once (bit for bit), and the
state can be snapshotted and restored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["TARGET_SAMPLE_RATE_HZ", "Upsampler2x", "UpsamplerState", "to_16k"]

TARGET_SAMPLE_RATE_HZ = 16000
_TAPS_PER_PHASE = 16
_KAISER_BETA = 8.0


def _design_phases() -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """The two polyphase branches of a 2x interpolation low-pass (cutoff at input Nyquist)."""
    # Centred on an integer tap, so the delay is exactly _TAPS_PER_PHASE output samples and the
    # even phase passes the original samples through unchanged.
    length = 2 * _TAPS_PER_PHASE
    n = np.arange(length) - _TAPS_PER_PHASE
    taps = np.sinc(n / 2.0) * np.kaiser(length + 1, _KAISER_BETA)[:length]
    taps *= 2.0 / taps.sum()
    return taps[0::2].astype(np.float32), taps[1::2].astype(np.float32)


_EVEN, _ODD = _design_phases()


@dataclass(frozen=True, slots=True)
class UpsamplerState:
    """The last ``_TAPS_PER_PHASE - 1`` input samples (float32), oldest first."""

    history: tuple[float, ...]


class Upsampler2x:
    """8 kHz → 16 kHz for one stream; feed chunks in order with ``process``."""

    def __init__(self, state: UpsamplerState | None = None) -> None:
        history = state.history if state else (0.0,) * (_TAPS_PER_PHASE - 1)
        self._history = np.asarray(history, dtype=np.float32)

    def process(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Twice as many output samples as input samples (delay: 16 output samples, 1 ms)."""
        if samples.size == 0:
            return np.zeros(0, dtype=np.float32)
        padded = np.concatenate([self._history, samples.astype(np.float32, copy=False)])
        self._history = padded[-(_TAPS_PER_PHASE - 1) :].copy()
        even = np.convolve(padded, _EVEN, mode="valid")
        odd = np.convolve(padded, _ODD, mode="valid")
        out = np.empty(2 * samples.size, dtype=np.float32)
        out[0::2] = even
        out[1::2] = odd
        return out

    def snapshot(self) -> UpsamplerState:
        return UpsamplerState(tuple(float(x) for x in self._history))


def to_16k(samples: npt.NDArray[np.float32], sample_rate_hz: int) -> npt.NDArray[np.float32]:
    """A whole signal at 8 or 16 kHz as 16 kHz float32 (for files; streams use Upsampler2x)."""
    if sample_rate_hz == TARGET_SAMPLE_RATE_HZ:
        return samples.astype(np.float32, copy=False)
    if sample_rate_hz == TARGET_SAMPLE_RATE_HZ // 2:
        return Upsampler2x().process(samples)
    raise ValueError(f"unsupported sample rate {sample_rate_hz} Hz (8000 or 16000)")
