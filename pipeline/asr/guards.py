"""Hallucination guards: decide whether a hypothesis is text or a model's invention.

Applied to every hypothesis before it becomes a partial or a final (after VAD gating, which
keeps most non-speech away from the model). Whisper's own fallback rules, without the
temperature fallback: a streaming system cannot afford to re-decode, so it drops instead.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pipeline.asr.recognizer import Recognition

__all__ = ["Guard", "GuardConfig", "check_hypothesis"]


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
    stays far below it (at most 0.2 on the fixtures, 0.5 for a lone "Sure.")."""

    no_speech_threshold: float = 0.6
    logprob_threshold: float = -1.0
    compression_ratio_threshold: float = 2.4
    certain_no_speech_threshold: float = 0.9


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
    if recognition.avg_logprob < config.logprob_threshold:
        return Guard.LOW_LOGPROB
    return None
