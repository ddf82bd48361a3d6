"""Streaming 8 kHz → 16 kHz resampling with a windowed-sinc FIR and explicit state.

Upsampling by 2: insert a zero after every input sample and low-pass at the old Nyquist (4 kHz)
with a Kaiser-windowed sinc. The filter's history is the only state, so a stream cut into chunks
of any size gives exactly the samples of the whole signal resampled at once (bit for bit), and the
state can be snapshotted and restored.

Timing. The filter delays the signal by :data:`DELAY_SAMPLES` output samples (1 ms): output
sample ``n`` is the 16 kHz signal at ``n - DELAY_SAMPLES``, the first ``DELAY_SAMPLES`` being the
filter filling up. So after ``N`` input samples ``2 N`` have been returned and the signal's last
``DELAY_SAMPLES`` are still held back; ``flush`` returns them at the end of the stream. A whole
stream of ``N`` samples thus comes out as ``2 N + DELAY_SAMPLES`` (``to_16k``): the full
convolution of the zero-stuffed signal with the filter, up to where the delayed signal ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["DELAY_SAMPLES", "TARGET_SAMPLE_RATE_HZ", "Upsampler2x", "UpsamplerState", "to_16k"]

TARGET_SAMPLE_RATE_HZ = 16000
_TAPS_PER_PHASE = 16
DELAY_SAMPLES = _TAPS_PER_PHASE
"""Delay of the signal through an :class:`Upsampler2x`, in 16 kHz samples (1 ms); the length of
what ``flush`` returns."""
_KAISER_BETA = 8.0


def _design_phases() -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """The two polyphase branches of a 2x interpolation low-pass (cutoff at input Nyquist)."""
    # Centred on an integer tap, so the delay is exactly DELAY_SAMPLES output samples and the
    # even phase passes the original samples through unchanged.
    length = 2 * _TAPS_PER_PHASE
    n = np.arange(length) - _TAPS_PER_PHASE
    taps = np.sinc(n / 2.0) * np.kaiser(length + 1, _KAISER_BETA)[:length]
    taps *= 2.0 / taps.sum()
    return taps[0::2].astype(np.float32), taps[1::2].astype(np.float32)


_EVEN, _ODD = _design_phases()
_NO_HISTORY = np.zeros(_TAPS_PER_PHASE - 1, dtype=np.float32)


@dataclass(frozen=True, slots=True)
class UpsamplerState:
    """The last ``_TAPS_PER_PHASE - 1`` input samples (float32), oldest first, of an upsampler in
    the middle of a stream (it holds a tail back); empty for one as new (nothing processed since
    it was made or last flushed), which holds nothing back."""

    history: tuple[float, ...]


class Upsampler2x:
    """8 kHz → 16 kHz for one stream; feed chunks in order with ``process``, then ``flush``."""

    def __init__(self, state: UpsamplerState | None = None) -> None:
        # Replaced, never written in place: the fresh history can be shared.
        history = () if state is None else state.history
        self._history = np.asarray(history, np.float32) if history else _NO_HISTORY
        self._holds_tail = bool(history)

    def process(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Twice as many output samples as input samples (delayed by ``DELAY_SAMPLES``)."""
        if samples.size == 0:
            return np.zeros(0, dtype=np.float32)
        self._holds_tail = True
        return self._filter(samples.astype(np.float32, copy=False))

    def flush(self) -> npt.NDArray[np.float32]:
        """At the end of the stream, the ``DELAY_SAMPLES`` output samples still held back: what
        ``process`` would return if the stream went on with silence. Empty when nothing was
        processed since the upsampler was made or last flushed (so flushing twice adds nothing).

        Afterwards the upsampler is as new (no history): the next ``process`` starts a new
        stream, with its own delay.
        """
        if not self._holds_tail:
            return np.zeros(0, dtype=np.float32)
        tail = self._filter(np.zeros(DELAY_SAMPLES // 2, dtype=np.float32))
        self._history = _NO_HISTORY
        self._holds_tail = False
        return tail

    def _filter(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        padded = np.concatenate([self._history, samples])
        self._history = padded[-(_TAPS_PER_PHASE - 1) :].copy()
        even = np.convolve(padded, _EVEN, mode="valid")
        odd = np.convolve(padded, _ODD, mode="valid")
        out = np.empty(2 * samples.size, dtype=np.float32)
        out[0::2] = even
        out[1::2] = odd
        return out

    def snapshot(self) -> UpsamplerState:
        if not self._holds_tail:
            return UpsamplerState(())
        return UpsamplerState(tuple(float(x) for x in self._history))


def to_16k(samples: npt.NDArray[np.float32], sample_rate_hz: int) -> npt.NDArray[np.float32]:
    """A whole signal at 8 or 16 kHz as 16 kHz float32 (for files; streams use Upsampler2x).

    8 kHz comes out as an ``Upsampler2x`` stream would, tail included: ``2 N + DELAY_SAMPLES``
    samples for ``N`` (none for none).
    """
    if sample_rate_hz == TARGET_SAMPLE_RATE_HZ:
        return samples.astype(np.float32, copy=False)
    if sample_rate_hz == TARGET_SAMPLE_RATE_HZ // 2:
        upsampler = Upsampler2x()
        return np.concatenate([upsampler.process(samples), upsampler.flush()])
    raise ValueError(f"unsupported sample rate {sample_rate_hz} Hz (8000 or 16000)")
