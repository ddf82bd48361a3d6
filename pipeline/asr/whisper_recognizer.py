"""Whisper behind the ``Recognizer`` protocol: batching, windows, prefixes, word timings.

Each request's window is its audio plus a silent margin (``margin_ms``, default 2 s: a window cut
tight to the audio often never emits end-of-text), rounded up to ``window_step_ms`` and at least
``min_window_ms`` (10 s: shorter windows made tiny.en loop on 4 of 36 fixture clips, 12.9 % WER
against 7.9 % with 10 s, measured in tests/integration/test_whisper_parity.py; a 10 s window
costs ~50 ms of encoder on 2 CPU threads against ~210 ms for Whisper's 30 s). A partial's
window may be given a smaller minimum (``partial_min_window_ms``, default the same 10 s): its
text is revised and then replaced by the final's. On 2 CPU cores 5 s partial windows gained
nothing measurable (``bench.engine_concurrency --partial-min-window-ms``: P95 chunk → view at 16
channels 1.55 s against 1.59 s in one run, 1.09 s against 0.94 s at 8), while finals at 5 s reach
12.3 % WER against 4.1 % (``bench.engine_wer``, "window ≥ 5 s"). All windows of
one call are encoded in one batch (the encoder masks each window's padding; with int8 weights,
one window per encoder pass) and decoded greedily in one batch; finals
(``with_word_timings``) get cross-attention word timings.

On the CPU the weights may run as int8 (``quantization``, ``pipeline.asr.whisper.quantize``):
faster, at a measured WER cost (``bench.engine_rtf``, ``bench.engine_wer``); the model id then
ends in ``-int8``, so finals, metrics and replay reports say which model produced them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from pipeline.asr.recognizer import Recognition, RecognitionRequest, RecognizedWord
from pipeline.asr.whisper.alignment import align_words
from pipeline.asr.whisper.decoding import (
    DecodingOptions,
    DecodingPrefix,
    EncodedWindows,
    decode,
    encode_windows,
)
from pipeline.asr.whisper.mel import log_mel_spectrogram
from pipeline.asr.whisper.model import WhisperModel, bundled_model_dir, load_whisper
from pipeline.asr.whisper.quantize import Quantization, is_quantized, quantize_int8

__all__ = ["WhisperRecognizer", "WhisperSettings"]

SAMPLES_PER_FRAME = 160
MAX_WINDOW_FRAMES = 3000
MAX_PROMPT_TOKENS = 64


@dataclass(frozen=True, slots=True)
class WhisperSettings:
    """How Whisper windows are cut and decoded."""

    model_dir: Path | None = None
    device: str = "cpu"
    margin_ms: int = 2000
    min_window_ms: int = 10000
    partial_min_window_ms: int = 10000
    window_step_ms: int = 1000
    max_words_per_second: float = 6.0
    quantization: Quantization = Quantization.NONE  # applied on the CPU only


class WhisperRecognizer:
    """Batched Whisper recognition; one instance shared by every session of a process.

    Not thread-safe: the engine calls it from one thread. ``torch.inference_mode`` throughout.
    """

    def __init__(self, settings: WhisperSettings | None = None, model: WhisperModel | None = None):
        """Load the model of ``settings`` (quantized per ``settings.quantization`` on the CPU),
        or use ``model`` as it is (shared, never changed here)."""
        self._settings = settings or WhisperSettings()
        on_cuda = self._settings.device.startswith("cuda")
        if model is None:
            dtype = torch.float16 if on_cuda else torch.float32
            model = load_whisper(
                self._settings.model_dir, device=self._settings.device, dtype=dtype
            )
            if self._settings.quantization is Quantization.INT8 and not on_cuda:
                quantize_int8(model)
        self._model = model
        self._options = DecodingOptions(
            max_words_per_second=self._settings.max_words_per_second,
            max_prompt_tokens=MAX_PROMPT_TOKENS,
        )
        model_dir = self._settings.model_dir or bundled_model_dir()
        name = "tiny.en" if self._settings.model_dir is None else Path(model_dir).name
        self._model_id = f"whisper-{name}" + ("-int8" if is_quantized(model) else "")

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def model(self) -> WhisperModel:
        return self._model

    def _window_frames(self, n_samples: int, partial: bool = False) -> tuple[int, int]:
        """(content frames, window frames) of a request of ``n_samples`` audio samples; a
        partial's window may be shorter (``partial_min_window_ms``)."""
        content = max(1, n_samples // SAMPLES_PER_FRAME)
        step = self._settings.window_step_ms // 10
        margin = self._settings.margin_ms // 10
        shortest_ms = self._settings.min_window_ms
        if partial:
            shortest_ms = min(shortest_ms, self._settings.partial_min_window_ms)
        window = max(-(-(content + margin) // step) * step, shortest_ms // 10)
        return min(content, MAX_WINDOW_FRAMES), min(window, MAX_WINDOW_FRAMES)

    def recognize(self, requests: Sequence[RecognitionRequest]) -> list[Recognition]:
        if not requests:
            return []
        tokenizer = self._model.tokenizer
        device = self._model.device
        with torch.inference_mode():
            mels, contents = [], []
            for request in requests:
                content, window = self._window_frames(len(request.audio), request.partial)
                padded = np.zeros(window * SAMPLES_PER_FRAME, dtype=np.float32)
                audio = request.audio[: window * SAMPLES_PER_FRAME]
                padded[: len(audio)] = audio
                mel = log_mel_spectrogram(padded, self._model.dims.n_mels, device=device)
                mels.append(mel[:, :window].to(self._model.dtype))
                contents.append(content)
            encoded = encode_windows(self._model, mels, contents)
            prefixes = [
                DecodingPrefix(
                    text_tokens=tuple(t for word in r.committed for t in word.tokens),
                    prompt_tokens=tuple(tokenizer.encode(" " + r.prompt.strip()))
                    if r.prompt.strip()
                    else (),
                )
                for r in requests
            ]
            results = decode(
                self._model,
                encoded,
                self._options,
                prefixes,
                biases=[r.bias for r in requests],
            )
            timed_rows = [i for i, r in enumerate(requests) if r.with_word_timings]
            timings = {}
            if timed_rows:
                aligned = align_words(
                    self._model,
                    _select(encoded, timed_rows),
                    [results[i].all_tokens for i in timed_rows],
                    self._options,
                )
                timings = dict(zip(timed_rows, aligned, strict=True))
        recognitions = []
        for row, (request, result) in enumerate(zip(requests, results, strict=True)):
            if row in timings:
                words = tuple(
                    RecognizedWord(w.word, w.tokens, w.start_ms, w.end_ms, w.probability)
                    for w in timings[row]
                )
            else:
                texts, token_groups = tokenizer.split_to_word_tokens(list(result.tokens))
                words = request.committed + tuple(
                    RecognizedWord(text, tuple(tokens))
                    for text, tokens in zip(texts, token_groups, strict=True)
                )
            recognitions.append(
                Recognition(
                    words=words,
                    text=result.text,
                    avg_logprob=result.avg_logprob,
                    no_speech_prob=result.no_speech_prob,
                    compression_ratio=result.compression_ratio,
                    model_avg_logprob=result.model_avg_logprob,
                )
            )
        return recognitions


def _select(encoded: EncodedWindows, rows: list[int]) -> EncodedWindows:
    """The rows of an encoded batch (word alignment runs on the finals only)."""
    index = torch.tensor(rows, device=encoded.features.device)
    return EncodedWindows(
        encoded.features.index_select(0, index),
        None if encoded.valid is None else encoded.valid.index_select(0, index),
        tuple(encoded.frame_lengths[i] for i in rows),
        tuple(encoded.content_frames[i] for i in rows),
    )
