"""Decoding machinery on a randomly initialised, very small Whisper.

The tiny model shares the real tiny.en tokenizer; its transcripts are meaningless, which is
fine for batching, masking, guards and hooks. Real-weight behaviour is covered by
tests/integration/test_whisper_parity.py.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import torch

from pipeline.asr.whisper.alignment import align_words
from pipeline.asr.whisper.decoding import (
    DecodingOptions,
    DecodingPrefix,
    StopReason,
    compression_ratio,
    decode,
    encode_windows,
)
from pipeline.asr.whisper.model import WhisperConfig, WhisperModel
from pipeline.asr.whisper_recognizer import WhisperRecognizer, WhisperSettings
from pipeline.errors import ConfigError
from tests.unit.asr.tiny_whisper import mel, tiny_whisper

NO_GUARDS = DecodingOptions(max_words_per_second=None, repetition_guard=False)


@pytest.fixture(scope="module")
def model() -> WhisperModel:
    return tiny_whisper()


class ForceTokens:
    """Bias that forces ``cycle[len(generated) % len(cycle)]`` and records what it saw."""

    def __init__(self, cycle: Sequence[int], prefix_length: int = 0) -> None:
        self.cycle = list(cycle)
        self.prefix_length = prefix_length
        self.seen: list[list[int]] = []

    def __call__(self, text_tokens: Sequence[int]) -> Mapping[int, float]:
        self.seen.append(list(text_tokens))
        generated = len(text_tokens) - self.prefix_length
        return {self.cycle[generated % len(self.cycle)]: 1e4}


@pytest.mark.parametrize(
    "kwargs",
    [
        {"task": "summarise"},
        {"max_new_tokens": 0},
        {"max_words_per_second": 0.0},
        {"words_slack": -1},
        {"repetition_max_period_tokens": 0},
        {"repetition_min_repeats": 1},
        {"repetition_min_span_tokens": 1},
        {"max_prompt_tokens": -1},
        {"suppress_tokens": (-1,)},
    ],
)
def test_invalid_options_raise_config_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        DecodingOptions(**kwargs)


def test_options_are_frozen() -> None:
    options = DecodingOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_new_tokens = 3  # type: ignore[misc]


def test_compression_ratio() -> None:
    assert compression_ratio("") == 0.0
    assert compression_ratio("hello world") < 1.5
    assert compression_ratio("again and " * 40) > 2.4


def test_batch_matches_single_decodes(model: WhisperModel) -> None:
    tok = model.tokenizer
    windows = [mel(300, 1), mel(801, 2), mel(64, 3)]
    prefixes = [
        DecodingPrefix(text_tokens=tuple(tok.encode(" hello there"))),
        None,
        DecodingPrefix(prompt_tokens=tuple(tok.encode(" earlier words, then more"))),
    ]
    options = dataclasses.replace(NO_GUARDS, max_new_tokens=6)
    batched = decode(model, windows, options, prefixes)
    for window, prefix, together in zip(windows, prefixes, batched, strict=True):
        (alone,) = decode(model, [window], options, [prefix])
        assert together.tokens == alone.tokens
        assert together.token_logprobs == pytest.approx(alone.token_logprobs, abs=1e-4)
        assert together.no_speech_prob == pytest.approx(alone.no_speech_prob, abs=1e-5)


def test_equal_length_tensor_batch_matches_window_list(model: WhisperModel) -> None:
    windows = [mel(160, 14), mel(160, 15)]
    options = dataclasses.replace(NO_GUARDS, max_new_tokens=3)
    assert decode(model, torch.stack(windows), options) == decode(model, windows, options)


def test_encoded_windows_can_be_decoded_directly(model: WhisperModel) -> None:
    windows = [mel(200, 4), mel(120, 5)]
    options = dataclasses.replace(NO_GUARDS, max_new_tokens=4)
    encoded = encode_windows(model, windows, content_frames=[150, 100])
    assert encoded.frame_lengths == (200, 120)
    assert encoded.content_frames == (150, 100)
    assert encoded.features.shape == (2, 100, 32)
    assert decode(model, encoded, options) == decode(model, windows, options)


def test_bias_sees_text_so_far_and_steers_decoding(model: WhisperModel) -> None:
    tok = model.tokenizer
    prefix = tuple(tok.encode(" ok then"))
    word = tok.encode(" yes")[0]
    bias = ForceTokens([word], prefix_length=len(prefix))
    options = dataclasses.replace(NO_GUARDS, max_new_tokens=4)
    (result,) = decode(model, [mel(100, 6)], options, [DecodingPrefix(prefix)], biases=[bias])
    assert result.tokens == (word,) * 4
    assert result.prefix_tokens == prefix
    assert result.stop_reason is StopReason.MAX_TOKENS
    assert bias.seen == [list(prefix) + [word] * k for k in range(4)]
    assert result.text == tok.decode(result.all_tokens).strip()
    assert result.compression_ratio == compression_ratio(result.text)


def test_a_bias_leaves_the_model_s_own_confidence_beside_the_decoded_one(
    model: WhisperModel,
) -> None:
    # Review finding: log-probs came from the biased logits only, so a hotword made text on
    # hold music look confident to the no-speech guard.
    word = model.tokenizer.encode(" yes")[0]
    options = dataclasses.replace(NO_GUARDS, max_new_tokens=4)
    (forced,) = decode(model, [mel(100, 6)], options, biases=[ForceTokens([word])])
    assert forced.tokens == (word,) * 4
    assert forced.avg_logprob > -1e-3  # as decoded: the 1e4 bonus made each token certain
    # The model's own log-probs of tokens it would not choose (a random model: about
    # -log(vocabulary) each).
    assert forced.model_avg_logprob < -2.0
    (plain,) = decode(model, [mel(100, 6)], options)
    assert plain.model_avg_logprob == plain.avg_logprob  # no bias: one and the same
    assert forced.no_speech_prob == plain.no_speech_prob


def test_suppressed_and_special_tokens_are_never_emitted(model: WhisperModel) -> None:
    tok = model.tokenizer
    forbidden = [tok.sot_prev, tok.timestamp_begin + 3, 7]
    bias = ForceTokens(forbidden)
    options = dataclasses.replace(NO_GUARDS, max_new_tokens=6)
    (result,) = decode(model, [mel(100, 7)], options, biases=[bias])
    assert all(0 <= t < tok.eot for t in result.tokens)
    assert not set(forbidden) & set(result.tokens)


def test_first_step_cannot_end_without_a_prefix(model: WhisperModel) -> None:
    tok = model.tokenizer
    end = ForceTokens([tok.eot])
    (fresh,) = decode(model, [mel(100, 8)], NO_GUARDS, biases=[end])
    assert len(fresh.tokens) == 1  # blank suppression forbids end-of-text at the first step
    assert fresh.stop_reason is StopReason.END_OF_TEXT

    prefix = DecodingPrefix(tuple(tok.encode(" all said")))
    (committed,) = decode(model, [mel(100, 8)], NO_GUARDS, [prefix], biases=[end])
    assert committed.tokens == ()
    assert committed.stop_reason is StopReason.END_OF_TEXT
    assert committed.text == "all said"
    assert -1e-3 < committed.avg_logprob <= 0.0
    # The model's own log-prob of that end-of-text, not the ~0 of the forcing bias.
    assert -math.inf < committed.model_avg_logprob < -1.0


def test_repeated_token_is_cut_back_to_one(model: WhisperModel) -> None:
    word = model.tokenizer.encode(" the")[0]
    options = DecodingOptions(max_words_per_second=None)
    (result,) = decode(model, [mel(100, 9)], options, biases=[ForceTokens([word])])
    assert result.stop_reason is StopReason.REPETITION
    assert result.tokens == (word,)
    assert len(result.token_logprobs) == 1


def test_repeated_sentence_is_cut_back_to_one(model: WhisperModel) -> None:
    sentence = model.tokenizer.encode(" can I set up automatic payments from my account?")
    options = DecodingOptions(max_words_per_second=None)
    (result,) = decode(model, [mel(400, 10)], options, biases=[ForceTokens(sentence)])
    assert result.stop_reason is StopReason.REPETITION
    assert list(result.tokens) == sentence


def test_a_partials_window_may_be_shorter_than_a_finals(model: WhisperModel) -> None:
    settings = WhisperSettings(margin_ms=2000, min_window_ms=10000, partial_min_window_ms=5000)
    recognizer = WhisperRecognizer(settings, model=model)
    two_s = 32000  # samples at 16 kHz
    assert recognizer._window_frames(two_s) == (200, 1000)
    assert recognizer._window_frames(two_s, partial=True) == (200, 500)
    # Past the minimum, both follow the audio (+ margin, rounded up to a second).
    assert recognizer._window_frames(4 * two_s, partial=True) == (800, 1000)
    assert recognizer._window_frames(6 * two_s, partial=True) == (1200, 1400)


@pytest.mark.parametrize(
    ("said", "copies"),
    [(" please hold on a moment while I check that for you.", 2), (" can you hear me now?", 3)],
)
def test_a_sentence_said_again_is_not_taken_for_a_loop(
    model: WhisperModel, said: str, copies: int
) -> None:
    # A caller repeating a sentence, then going on: the defaults keep every copy.
    tok = model.tokenizer
    spoken = tok.encode(said) * copies + tok.encode(" Hello?")
    options = DecodingOptions(max_words_per_second=None)
    (result,) = decode(model, [mel(400, 12)], options, biases=[ForceTokens([*spoken, tok.eot])])
    assert result.stop_reason is StopReason.END_OF_TEXT
    assert list(result.tokens) == spoken


def test_words_per_second_cap_counts_prefix_words(model: WhisperModel) -> None:
    tok = model.tokenizer
    words = [tok.encode(w)[0] for w in (" alpha", " bravo", " delta", " echo", " golf")]
    options = DecodingOptions(max_words_per_second=2.0, words_slack=1, repetition_guard=False)
    forced = ForceTokens(words)
    (result,) = decode(model, [mel(150, 11)], options, content_frames=[100], biases=[forced])
    assert result.stop_reason is StopReason.WORDS_PER_SECOND
    assert list(result.tokens) == words[:3]  # 2 words/s x 1 s + 1

    prefix = tuple(tok.encode(" one two"))
    forced = ForceTokens(words, prefix_length=len(prefix))
    (result,) = decode(
        model,
        [mel(150, 11)],
        options,
        [DecodingPrefix(prefix)],
        content_frames=[100],
        biases=[forced],
    )
    assert list(result.tokens) == words[:1]


def test_invalid_inputs_raise_value_error(model: WhisperModel) -> None:
    tok = model.tokenizer
    with pytest.raises(ValueError, match="text tokens"):
        decode(model, [mel(100, 0)], prefixes=[DecodingPrefix((tok.sot,))])
    with pytest.raises(ValueError, match="no room"):
        decode(model, [mel(100, 0)], prefixes=[DecodingPrefix((11,) * 448)])
    with pytest.raises(ValueError, match="mel bins"):
        decode(model, [torch.zeros(64, 100)])
    with pytest.raises(ValueError, match="n_mels, n_frames"):
        decode(model, [torch.zeros(80)])
    with pytest.raises(ValueError, match="batch, n_mels, n_frames"):
        decode(model, torch.zeros(0, 80, 100))
    with pytest.raises(ValueError, match="window length"):
        decode(model, [torch.zeros(80, 3001)])
    with pytest.raises(ValueError, match="empty"):
        decode(model, [])
    with pytest.raises(ValueError, match="content_frames"):
        decode(model, [mel(100, 0)], content_frames=[101])
    with pytest.raises(ValueError, match="one entry per window"):
        decode(model, [mel(100, 0)], prefixes=[None, None])


def test_align_words_covers_the_text_in_order(model: WhisperModel) -> None:
    tok = model.tokenizer
    tokens = tok.encode(" Could I move my appointment to Thursday, please?")
    encoded = encode_windows(model, [mel(500, 12)], content_frames=[400])
    (words,) = align_words(model, encoded, [tokens])
    assert "".join(w.word for w in words) == tok.decode(tokens)
    assert [t for w in words for t in w.tokens] == tokens
    starts = [w.start_ms for w in words]
    assert starts == sorted(starts)
    for word in words:
        assert 0 <= word.start_ms <= word.end_ms <= 4000
        assert word.start_ms % 20 == 0
        assert 0.0 <= word.probability <= 1.0
    assert align_words(model, encoded, [[]]) == [[]]


def test_align_words_needs_alignment_heads(
    model: WhisperModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded = encode_windows(model, [mel(100, 13)])
    monkeypatch.setattr(model, "config", WhisperConfig())
    with pytest.raises(ValueError, match="alignment_heads"):
        align_words(model, encoded, [[11]])


def test_public_api_is_exported() -> None:
    import pipeline.asr.whisper as whisper_package

    assert sorted(whisper_package.__all__) == whisper_package.__all__
    for name in whisper_package.__all__:
        assert hasattr(whisper_package, name), name
