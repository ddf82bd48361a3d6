"""The recognizer seam: what the session engine asks of a speech model.

A ``Recognizer`` turns a batch of utterance windows into hypotheses in one call, so the engine
can batch every due session into one forward pass. Whisper (``pipeline.asr.whisper_recognizer``)
is the real implementation; a streaming transducer could sit beside it without touching the
engine. Unit tests use a scripted fake behind this protocol.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "Recognition",
    "RecognitionRequest",
    "RecognizedWord",
    "Recognizer",
    "TokenBias",
]


@dataclass(frozen=True, slots=True)
class RecognizedWord:
    """A word of a hypothesis: surface text (Whisper keeps its leading space), its token ids,
    and, when timings were asked for, its span in ms from the start of the request's audio and
    its mean token probability."""

    text: str
    tokens: tuple[int, ...] = ()
    start_ms: int | None = None
    end_ms: int | None = None
    probability: float | None = None


class TokenBias(Protocol):
    """Per-step logit bonuses for one request (hotwords): token id → additive bonus."""

    def __call__(self, text_tokens: Sequence[int]) -> Mapping[int, float]: ...


@dataclass(frozen=True, slots=True)
class RecognitionRequest:
    """One window to recognize.

    ``audio`` is 16 kHz mono float32 in [-1, 1), the utterance from its first sample; the
    recognizer reads it and never keeps or mutates it. ``committed`` words are forced as the
    decoding prefix (their tokens are not searched again) and come back first in the result.
    ``prompt`` is text that conditions decoding as Whisper's previous-text prompt; the engine
    never sets it (hotwords bias the search instead), the hotword benchmark compares against it.
    ``partial``: the hypothesis only feeds a live partial (a final decodes the audio again), so
    the recognizer may trade some accuracy for speed (Whisper: a shorter minimum window).
    """

    audio: npt.NDArray[np.float32]
    committed: tuple[RecognizedWord, ...] = ()
    prompt: str = ""
    with_word_timings: bool = False
    partial: bool = False
    bias: TokenBias | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Recognition:
    """A hypothesis for one request: ``words`` = the committed prefix followed by new words.

    ``avg_logprob``, ``no_speech_prob``, ``compression_ratio`` and ``model_avg_logprob`` are the
    inputs of the hallucination guards. ``model_avg_logprob`` is the model's own confidence in
    the text, without hotword bonuses (None: the same as ``avg_logprob``, no bias applied).
    """

    words: tuple[RecognizedWord, ...]
    text: str
    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float
    model_avg_logprob: float | None = None


class Recognizer(Protocol):
    """A batched speech recognizer. ``recognize`` returns one result per request, in order."""

    @property
    def model_id(self) -> str: ...

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Recognition]: ...
