"""G.711 μ-law and A-law companding (ITU-T G.711), vectorised with 256-entry lookup tables.

Decoding maps each 8-bit code to a 16-bit linear PCM sample by table lookup; encoding uses the
segment search of the standard. Both are exact inverses on the code space:
``encode(decode(codes)) == codes`` for every code except μ-law's negative zero (0x7F), which
decodes to 0 and re-encodes as positive zero (0xFF).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["alaw_decode", "alaw_encode", "mulaw_decode", "mulaw_encode"]

_MULAW_BIAS = 0x84
_MULAW_CLIP_14BIT = 8159


def _build_mulaw_table() -> npt.NDArray[np.int16]:
    codes = ~np.arange(256, dtype=np.int32) & 0xFF
    sign = codes & 0x80
    exponent = (codes >> 4) & 0x07
    mantissa = codes & 0x0F
    magnitude = (((mantissa << 3) + _MULAW_BIAS) << exponent) - _MULAW_BIAS
    return np.where(sign != 0, -magnitude, magnitude).astype(np.int16)


def _build_alaw_table() -> npt.NDArray[np.int16]:
    codes = np.arange(256, dtype=np.int32) ^ 0x55
    sign = codes & 0x80
    exponent = (codes >> 4) & 0x07
    mantissa = codes & 0x0F
    magnitude = np.where(
        exponent == 0,
        (mantissa << 4) + 8,
        ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0),
    )
    return np.where(sign != 0, magnitude, -magnitude).astype(np.int16)


_MULAW_TO_PCM = _build_mulaw_table()
_ALAW_TO_PCM = _build_alaw_table()


def mulaw_decode(codes: npt.NDArray[np.uint8]) -> npt.NDArray[np.int16]:
    """Decode μ-law bytes to int16 PCM (one sample per byte)."""
    return _MULAW_TO_PCM[codes]


def alaw_decode(codes: npt.NDArray[np.uint8]) -> npt.NDArray[np.int16]:
    """Decode A-law bytes to int16 PCM (one sample per byte)."""
    return _ALAW_TO_PCM[codes]


_MULAW_SEGMENT_ENDS = np.asarray([(0x40 << k) - 1 for k in range(8)], dtype=np.int32)
_ALAW_SEGMENT_ENDS = np.asarray([(0x20 << k) - 1 for k in range(8)], dtype=np.int32)


def mulaw_encode(pcm: npt.NDArray[np.int16]) -> npt.NDArray[np.uint8]:
    """Encode int16 PCM to μ-law bytes (the 14-bit reference encoder of G.711)."""
    value = pcm.astype(np.int32) >> 2
    mask = np.where(value < 0, 0x7F, 0xFF)
    magnitude = np.minimum(np.abs(value), _MULAW_CLIP_14BIT) + (_MULAW_BIAS >> 2)
    segment = np.searchsorted(_MULAW_SEGMENT_ENDS, magnitude, side="left")
    code = (np.minimum(segment, 7) << 4) | ((magnitude >> (segment + 1)) & 0x0F)
    code = np.where(segment >= 8, 0x7F, code)
    return (code ^ mask).astype(np.uint8)


def alaw_encode(pcm: npt.NDArray[np.int16]) -> npt.NDArray[np.uint8]:
    """Encode int16 PCM to A-law bytes (the 13-bit reference encoder of G.711)."""
    value = pcm.astype(np.int32) >> 3
    mask = np.where(value >= 0, 0xD5, 0x55)
    magnitude = np.where(value >= 0, value, -value - 1)
    segment = np.searchsorted(_ALAW_SEGMENT_ENDS, magnitude, side="left")
    shift = np.where(segment < 2, 1, segment)
    code = (np.minimum(segment, 7) << 4) | ((magnitude >> shift) & 0x0F)
    code = np.where(segment >= 8, 0x7F, code)
    return (code ^ mask).astype(np.uint8)
