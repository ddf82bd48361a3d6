"""A scripted recognizer behind the ``Recognizer`` protocol, for engine unit tests.

:class:`FakeRecognizer` answers every request with ``script(request)``; the default script,
:func:`audio_words`, names one word per 250 ms of audio after a hash of that audio's bytes, so
the same audio always gives the same text, different audio gives different text, and a longer
window of the same utterance repeats the words of the shorter one (as a real model mostly does).
Every call is recorded, so tests can check batching and what audio each request carried.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from pipeline.asr.engine import StepReport, StreamingEngine
from pipeline.asr.recognizer import Recognition, RecognitionRequest, RecognizedWord

__all__ = ["FakeRecognizer", "Script", "TalliedEngine", "audio_words", "recognition"]

SAMPLES_PER_MS = 16
WORD_MS = 250

Script = Callable[[RecognitionRequest], Recognition]


def recognition(
    words: Sequence[str],
    *,
    timings_ms: Sequence[tuple[int, int]] | None = None,
    avg_logprob: float = -0.2,
    no_speech_prob: float = 0.01,
    compression_ratio: float = 1.2,
) -> Recognition:
    """A hypothesis of ``words`` (Whisper's surface form: each word with a leading space)."""
    recognized = tuple(
        RecognizedWord(
            " " + word,
            start_ms=None if timings_ms is None else timings_ms[i][0],
            end_ms=None if timings_ms is None else timings_ms[i][1],
            probability=None if timings_ms is None else 0.9,
        )
        for i, word in enumerate(words)
    )
    return Recognition(
        words=recognized,
        text="".join(word.text for word in recognized),
        avg_logprob=avg_logprob,
        no_speech_prob=no_speech_prob,
        compression_ratio=compression_ratio,
    )


def audio_words(request: RecognitionRequest) -> Recognition:
    """One word per whole 250 ms of audio (at least one), named after the audio it covers.

    Word timings (for finals) are the word's 250 ms slot, the last one ending with the audio.
    Like Whisper, a request's ``committed`` words come back first, unchanged.
    """
    word_samples = WORD_MS * SAMPLES_PER_MS
    count = max(1, len(request.audio) // word_samples)
    names, timings = [], []
    for i in range(count):
        end = len(request.audio) if i == count - 1 else (i + 1) * word_samples
        piece = request.audio[i * word_samples : end]
        names.append("w" + hashlib.sha1(piece.tobytes()).hexdigest()[:6])
        timings.append((i * WORD_MS, end // SAMPLES_PER_MS))
    result = recognition(names, timings_ms=timings if request.with_word_timings else None)
    if not request.committed:
        return result
    words = request.committed + result.words[len(request.committed) :]
    return replace(result, words=words, text="".join(word.text for word in words))


class FakeRecognizer:
    """A ``Recognizer`` that answers from a script and records every batch it was given.

    ``calls`` holds each ``recognize`` call's requests as given (their audio are the engine's
    views: read them, never write them).
    """

    def __init__(self, script: Script = audio_words, model_id: str = "fake-asr") -> None:
        self.script = script
        self._model_id = model_id
        self.calls: list[tuple[RecognitionRequest, ...]] = []

    @property
    def model_id(self) -> str:
        return self._model_id

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Recognition]:
        self.calls.append(tuple(requests))
        return [self.script(request) for request in requests]

    @property
    def batch_sizes(self) -> list[int]:
        return [len(call) for call in self.calls]

    @property
    def requests(self) -> list[RecognitionRequest]:
        return [request for call in self.calls for request in call]


class TalliedEngine(StreamingEngine):
    """The engine, unchanged, keeping every ``StepReport`` (tests count across steps)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reports: list[StepReport] = []

    def step(
        self, max_jobs: int | None = None, *, partials: bool = True, partials_first: bool = False
    ) -> StepReport:
        report = super().step(max_jobs, partials=partials, partials_first=partials_first)
        self.reports.append(report)
        return report

    def segment(self) -> StepReport:
        report = super().segment()
        self.reports.append(report)
        return report

    def total(self, count: str) -> int:
        """The sum of one of ``StepReport``'s counts over every step so far."""
        return sum(getattr(report, count) for report in self.reports)
