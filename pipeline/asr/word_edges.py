"""Utterance-edge word timings from the VAD: where Whisper's own timings are weakest.

Whisper's word timings come from cross-attention alignment (``whisper.alignment``). Inside an
utterance they are good; at its edges they are not: the last word's end, measured with tiny.en
against the fixtures' energy-based references, is off by −270…+130 ms. The voice-activity
detector sees the same edges within about ±60 ms once its own offsets are taken off:

* the speech gate widens speech by ``speech_pad_ms`` on each side (to keep weak onsets);
* silero's speech probability stays above the gate's exit threshold for about two 32 ms frames
  after the energy of a word has died away: the **end lag**. ``VAD_END_LAG_MS`` is its median
  over the 25 single-word and single-sentence fixtures (final end − reference speech end:
  median 126 ms, less the 60 ms pad). The call fixtures, not used to choose it, then give
  per-channel talk times within 170 ms of their references (440 ms with Whisper's edges).

``snap_word_edges`` moves only the first word's start and the last word's end onto that span,
and only in ways that keep every word's start ≤ end; the words between are untouched.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from pipeline.contracts.messages import Word

__all__ = ["VAD_END_LAG_MS", "snap_word_edges"]

VAD_END_LAG_MS = 66


def snap_word_edges(
    words: Sequence[Word], speech_start_ms: int | None, speech_end_ms: int | None
) -> tuple[Word, ...]:
    """``words`` with the first start no earlier than ``speech_start_ms`` and the last end
    at ``speech_end_ms`` (the VAD's speech span, pads and end lag removed).

    ``None`` leaves that edge as Whisper put it: the utterance edge there is not one the VAD
    heard (a max-length cut, a forced final in speech, the end of the stream in speech, the
    first samples of the stream). An edge moves only where the result stays a word: the first
    start never passes the first word's end, and the last end is moved only when
    ``speech_end_ms`` lies after the last word's start. Empty input gives an empty tuple.
    """
    if not words:
        return ()
    snapped = list(words)
    first = snapped[0]
    if speech_start_ms is not None and speech_start_ms > first.start_ms:
        snapped[0] = dataclasses.replace(first, start_ms=min(speech_start_ms, first.end_ms))
    last = snapped[-1]
    if speech_end_ms is not None and speech_end_ms > last.start_ms:
        snapped[-1] = dataclasses.replace(last, end_ms=speech_end_ms)
    return tuple(snapped)
