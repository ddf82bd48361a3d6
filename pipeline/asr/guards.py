"""Hallucination guards: decide whether a hypothesis is text or a model's invention.

Applied to every hypothesis before it becomes a partial or a final (after VAD gating, which
keeps most non-speech away from the model). Whisper's own fallback rules, without the
temperature fallback: a streaming system cannot afford to re-decode, so it drops instead.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.asr.recognizer import Recognition, RecognizedWord

__all__ = ["Guard", "GuardConfig", "check_hypothesis", "squashed_repeat_start"]


class Guard(enum.StrEnum):
    """Which guard suppressed a hypothesis (a metric label and event detail)."""

    NO_SPEECH = "no_speech"
    LOW_LOGPROB = "log_prob"
    COMPRESSION_RATIO = "compression_ratio"


@dataclass(frozen=True, slots=True)
class GuardConfig:
    """Thresholds (Whisper's defaults). ``no_speech`` needs both its conditions, as in Whisper,
    unless the model is all but certain there is no speech (``certain_no_speech_threshold``):
    tiny.en writes a fluent "you" on silence or a short noise (avg log-prob about -0.7, no-speech
    probability 0.98-0.99) that Whisper's rule lets through. Real speech, short words included,
    stays far below it (at most 0.2 on the fixtures, 0.5 for a lone "Sure.").

    ``low_logprob_threshold`` is the log-prob guard on its own (whatever the no-speech
    probability): Whisper re-decodes below -1.0 and never drops; a streaming decode cannot
    re-decode, and at -1.0 the guard dropped clear real speech (TIMIT at -1.04, no-speech 0.10;
    decision 0036), while every non-speech fixture decoded without the VAD is caught by the
    no-speech or compression guard (no-speech >= 0.68 at log-prob < -1, or ratio 2.75). At
    -1.5 it is a last stop for text the model itself calls garbage.

    ``max_repeat_word_ms``: see :func:`squashed_repeat_start` (0 switches the trim off).
    """

    no_speech_threshold: float = 0.6
    logprob_threshold: float = -1.0
    compression_ratio_threshold: float = 2.4
    certain_no_speech_threshold: float = 0.9
    low_logprob_threshold: float = -1.5
    max_repeat_word_ms: int = 60


def check_hypothesis(recognition: Recognition, config: GuardConfig) -> Guard | None:
    """The guard that rejects ``recognition``, or ``None`` when it may be published.

    An empty hypothesis is never "suppressed": there is nothing to publish anyway.
    """
    if not recognition.text.strip():
        return None
    if recognition.compression_ratio > config.compression_ratio_threshold:
        return Guard.COMPRESSION_RATIO
    # The model's own confidence, not the hotword-boosted one: on audio the model takes for
    # no speech, a boosted name is what the bias wrote, not what was heard (a tenant's name on
    # hold music: -3.4 by the model, -0.5 with the bonus). On speech (no-speech probability
    # low) the boosted text is judged as decoded: a rare name the model alone would not write
    # is the point of a hotword, not a reason to drop the final.
    model_logprob = (
        recognition.avg_logprob
        if recognition.model_avg_logprob is None
        else recognition.model_avg_logprob
    )
    if recognition.no_speech_prob > config.certain_no_speech_threshold or (
        recognition.no_speech_prob > config.no_speech_threshold
        and model_logprob < config.logprob_threshold
    ):
        return Guard.NO_SPEECH
    if recognition.avg_logprob < config.low_logprob_threshold:
        return Guard.LOW_LOGPROB
    return None


_WORD_CHARS = re.compile(r"[^\w']+")


def _spoken(word: RecognizedWord) -> str:
    return _WORD_CHARS.sub("", word.text.lower())


def _mean_duration_ms(words: Sequence[RecognizedWord]) -> float:
    return sum((w.end_ms or 0) - (w.start_ms or 0) for w in words) / len(words)


def squashed_repeat_start(words: Sequence[RecognizedWord], max_word_ms: int) -> int | None:
    """Where a decoding loop begins in a timed hypothesis, or ``None`` when it has none.

    A loop is a tail that repeats the block of words just before it (one word or more, the
    last copy possibly cut short, compared without case and punctuation) and that the audio
    does not hold: Whisper writes the sentence again and again after the speech ended, and the
    word alignment squeezes every copy into the end of the audio, mostly at zero duration. So
    the tail counts as a loop only when its words last ``max_word_ms`` or less on average (real
    words last 200-400 ms; a caller who says a sentence twice gets both copies timed alike,
    the ``repeats`` fixtures). The result is the index of the tail's first word (the earliest
    such tail, of at least two words or one whole block): the words before it are the text.
    Needs word timings (finals); ``max_word_ms`` 0 never finds a loop.
    """
    if max_word_ms <= 0 or len(words) < 2 or any(w.start_ms is None for w in words):
        return None
    spoken = [_spoken(word) for word in words]
    count = len(words)
    best: int | None = None
    for block in range(1, count // 2 + 1):
        start = count  # the periodic tail with this block length is spoken[start:]
        while start - block > 0 and spoken[start - 1] == spoken[start - 1 - block]:
            start -= 1
        # The tail repeats spoken[start - block:start]; any suffix of it does too.
        for first in range(max(start, block), count):
            tail = words[first:]
            if len(tail) < min(2, block) or not spoken[first]:
                continue
            if _mean_duration_ms(tail) <= max_word_ms:
                if best is None or first < best:
                    best = first
                break
    return best
