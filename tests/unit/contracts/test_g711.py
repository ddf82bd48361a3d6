"""G.711 codecs against the reference implementation (CPython's audioop, bit-exact)."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from pipeline.contracts.g711 import alaw_decode, alaw_encode, mulaw_decode, mulaw_encode

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

ALL_PCM = np.arange(-32768, 32768, dtype=np.int16)
ALL_CODES = np.arange(256, dtype=np.uint8)


def test_mulaw_matches_reference_on_every_sample() -> None:
    assert mulaw_encode(ALL_PCM).tobytes() == audioop.lin2ulaw(ALL_PCM.tobytes(), 2)
    assert mulaw_decode(ALL_CODES).tobytes() == audioop.ulaw2lin(ALL_CODES.tobytes(), 2)


def test_alaw_matches_reference_on_every_sample() -> None:
    assert alaw_encode(ALL_PCM).tobytes() == audioop.lin2alaw(ALL_PCM.tobytes(), 2)
    assert alaw_decode(ALL_CODES).tobytes() == audioop.alaw2lin(ALL_CODES.tobytes(), 2)


def test_codes_round_trip_except_mulaw_negative_zero() -> None:
    assert np.array_equal(alaw_encode(alaw_decode(ALL_CODES)), ALL_CODES)
    mulaw_again = mulaw_encode(mulaw_decode(ALL_CODES))
    differs = np.nonzero(mulaw_again != ALL_CODES)[0].tolist()
    assert differs == [0x7F]


@given(arrays(np.int16, st.integers(1, 400)))
def test_companding_error_is_bounded(pcm: np.ndarray) -> None:
    for encode, decode in ((mulaw_encode, mulaw_decode), (alaw_encode, alaw_decode)):
        restored = decode(encode(pcm)).astype(np.int32)
        error = np.abs(restored - pcm.astype(np.int32))
        # Quantisation step grows with magnitude: at most 1/16 of it plus the smallest step.
        assert np.all(error <= np.abs(pcm.astype(np.int32)) // 16 + 64)
