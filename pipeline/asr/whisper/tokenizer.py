"""Whisper's byte-level BPE tokenizer over a model directory's ``tokenizer.json``.

A thin wrapper around HF ``tokenizers``: it names Whisper's special tokens, builds the
start-of-transcript sequence, decodes text tokens and splits a token sequence into words
the way Whisper does for space-delimited languages (a new word starts at a token that
begins with a space, at punctuation, and at special tokens).

Timestamp tokens (``<|0.00|>`` …) are not in ``tokenizer.json``; they are the ids from
:attr:`WhisperTokenizer.timestamp_begin` up to the model's vocabulary size and are never
turned into text here.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import numpy as np
import numpy.typing as npt
import tokenizers

from pipeline.errors import ModelLoadError

__all__ = ["WhisperTokenizer", "load_tokenizer"]

# Token text of byte-level BPE marks a leading space with this character.
_BPE_SPACE = "\u0120"
_TASKS = ("transcribe", "translate")


class WhisperTokenizer:
    """Special-token ids, encoding/decoding and word splitting for one Whisper model.

    ``multilingual`` models put ``<|lang|>`` and ``<|task|>`` after ``<|startoftranscript|>``;
    English-only models (``*.en``) use ``<|startoftranscript|>`` alone.
    """

    def __init__(self, tokenizer: tokenizers.Tokenizer, *, multilingual: bool) -> None:
        self._tokenizer = tokenizer
        self.multilingual = multilingual
        self.eot = self._required("<|endoftext|>")
        self.sot = self._required("<|startoftranscript|>")
        self.sot_prev = self._required("<|startofprev|>")
        self.sot_lm = self._required("<|startoflm|>")
        self.transcribe = self._required("<|transcribe|>")
        self.translate = self._required("<|translate|>")
        self.no_timestamps = self._required("<|notimestamps|>")
        no_speech = tokenizer.token_to_id("<|nospeech|>")
        if no_speech is None:
            no_speech = self._required("<|nocaptions|>")
        self.no_speech: int = no_speech
        self.timestamp_begin = self.no_timestamps + 1

    def _required(self, token: str) -> int:
        token_id = self._tokenizer.token_to_id(token)
        if token_id is None:
            raise ModelLoadError(f"tokenizer has no special token {token}")
        return int(token_id)

    def language_token(self, language: str) -> int:
        """Id of ``<|language|>`` (e.g. ``"en"``); raises ``ValueError`` if unknown."""
        token_id = self._tokenizer.token_to_id(f"<|{language}|>")
        if token_id is None:
            raise ValueError(f"unknown language code {language!r}")
        return int(token_id)

    def sot_sequence(self, language: str | None = "en", task: str = "transcribe") -> list[int]:
        """``<|startoftranscript|>`` plus, for multilingual models, language and task tokens."""
        if not self.multilingual:
            return [self.sot]
        if task not in _TASKS:
            raise ValueError(f"task must be one of {_TASKS}, got {task!r}")
        sequence = [self.sot]
        if language is not None:
            sequence.append(self.language_token(language))
        sequence.append(self.transcribe if task == "transcribe" else self.translate)
        return sequence

    def encode(self, text: str) -> list[int]:
        """Text tokens of ``text`` (no special tokens added). Mind the leading space."""
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of the text tokens in ``tokens``; special and timestamp tokens are dropped."""
        return str(self._tokenizer.decode([int(t) for t in tokens if t < self.eot]))

    def decode_with_timestamps(self, tokens: Sequence[int]) -> str:
        """Text with timestamp tokens rendered as ``<|1.08|>`` (20 ms per timestamp step)."""
        parts: list[str] = []
        pending: list[int] = []
        for token in tokens:
            if token >= self.timestamp_begin:
                parts.append(str(self._tokenizer.decode(pending)))
                pending = []
                parts.append(f"<|{(token - self.timestamp_begin) * 0.02:.2f}|>")
            else:
                pending.append(int(token))
        parts.append(str(self._tokenizer.decode(pending)))
        return "".join(parts)

    @cached_property
    def word_start_table(self) -> npt.NDArray[np.bool_]:
        """``table[id]`` is true when token ``id`` begins with a space (starts a new word).

        Indexed up to ``timestamp_begin``; used by the decoder's words-per-second guard.
        """
        table = np.zeros(self.timestamp_begin, dtype=np.bool_)
        for token_id in range(self.eot):
            piece = self._tokenizer.id_to_token(token_id)
            table[token_id] = piece is not None and piece.startswith(_BPE_SPACE)
        return table

    def split_on_unicode(self, tokens: Sequence[int]) -> tuple[list[str], list[list[int]]]:
        """Group tokens so that every group decodes to whole characters.

        A multi-byte character may span tokens; such tokens stay in one group.
        """
        decoded_full = self.decode_with_timestamps(tokens)
        replacement = "\ufffd"
        words: list[str] = []
        word_tokens: list[list[int]] = []
        current: list[int] = []
        offset = 0
        for token in tokens:
            current.append(int(token))
            decoded = self.decode_with_timestamps(current)
            bad = decoded.find(replacement)
            if bad < 0 or (
                offset + bad < len(decoded_full) and decoded_full[offset + bad] == replacement
            ):
                words.append(decoded)
                word_tokens.append(current)
                current = []
                offset += len(decoded)
        return words, word_tokens

    def split_to_word_tokens(self, tokens: Sequence[int]) -> tuple[list[str], list[list[int]]]:
        """Split ``tokens`` into words (with their leading space) and each word's tokens.

        A word starts at a special token, at a token beginning with a space, or at a token
        that is punctuation by itself; any other token continues the previous word.
        """
        subwords, subword_tokens = self.split_on_unicode(tokens)
        words: list[str] = []
        word_tokens: list[list[int]] = []
        for subword, group in zip(subwords, subword_tokens, strict=True):
            special = group[0] >= self.eot
            with_space = subword.startswith(" ")
            punctuation = subword.strip() in string.punctuation
            if special or with_space or punctuation or not words:
                words.append(subword)
                word_tokens.append(list(group))
            else:
                words[-1] += subword
                word_tokens[-1].extend(group)
        return words, word_tokens


def load_tokenizer(model_dir: Path, *, multilingual: bool) -> WhisperTokenizer:
    """Load ``model_dir/tokenizer.json``; raises :class:`ModelLoadError` if it is unusable."""
    path = model_dir / "tokenizer.json"
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust binding raises a bare Exception
        raise ModelLoadError(f"cannot load tokenizer {path}: {exc}") from exc
    return WhisperTokenizer(tokenizer, multilingual=multilingual)
