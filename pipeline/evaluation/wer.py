"""Word error rate: normalization, then a word-level Levenshtein alignment.

Normalization (applied to reference and hypothesis alike): Unicode NFKC, case folded, hyphens
and slashes become spaces (``two-year`` = ``two year``), apostrophes inside a word are kept
(``that's``), a decimal point between digits is kept (``3.5`` ≠ ``35``) and a thousands comma
dropped (``1,000`` = ``1000``), any other comma between digits splits them (``1,2,3`` = ``1 2 3``,
not ``123``), every other punctuation character is dropped (combining marks are part of their
word: ``pipeline.text``), whitespace splits words. Numbers are not spelled
out: ``3`` ≠ ``three`` counts as an error, which the fixtures avoid by spelling numbers as words.

``WER = (substitutions + deletions + insertions) / reference words``. Counts add up, so a corpus
WER is the sum of per-utterance :class:`WordErrors`, not a mean of rates.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.text import replace_non_word

__all__ = ["WordErrors", "normalize_words", "word_error_rate", "word_errors"]

_SPLITTERS = re.compile(r"[-/\u2010-\u2015\u2212]")
_APOSTROPHES = re.compile(r"[\u2018\u2019\u02bc]")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d)")  # what is left after the thousands commas
_DECIMAL_POINT = re.compile(r"(?<=\d)\.(?=\d)")
_KEPT_POINT = "\ue000"  # a private-use stand-in for a decimal point while punctuation goes
_EDGE_APOSTROPHES = re.compile(r"(?<!\w)'|'(?!\w)")


def normalize_words(text: str) -> list[str]:
    """The words of ``text`` after normalization (see the module docstring)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _APOSTROPHES.sub("'", text)
    text = _SPLITTERS.sub(" ", text)
    text = _THOUSANDS.sub("", text)
    text = _DIGIT_COMMA.sub(" ", text)
    text = _DECIMAL_POINT.sub(_KEPT_POINT, text)
    text = " ".join(replace_non_word(word, "", keep="'" + _KEPT_POINT) for word in text.split())
    text = _EDGE_APOSTROPHES.sub("", text).replace(_KEPT_POINT, ".")
    return text.split()


@dataclass(frozen=True, slots=True)
class WordErrors:
    """Edit counts of one alignment (or a sum of alignments) and the reference length."""

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    reference_words: int = 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """Errors per reference word; 0.0 for an empty reference without errors, else inf."""
        if self.reference_words == 0:
            return 0.0 if self.errors == 0 else float("inf")
        return self.errors / self.reference_words

    def __add__(self, other: WordErrors) -> WordErrors:
        return WordErrors(
            self.substitutions + other.substitutions,
            self.deletions + other.deletions,
            self.insertions + other.insertions,
            self.reference_words + other.reference_words,
        )


def _align(reference: Sequence[str], hypothesis: Sequence[str]) -> WordErrors:
    # Row-by-row Levenshtein keeping (cost, subs, dels, ins) per cell; ties prefer
    # substitution, then deletion, then insertion, so the split is deterministic.
    previous = [(j, 0, 0, j) for j in range(len(hypothesis) + 1)]
    for i, ref_word in enumerate(reference, start=1):
        current = [(i, 0, i, 0)]
        for j, hyp_word in enumerate(hypothesis, start=1):
            cost, subs, dels, ins = previous[j - 1]
            if ref_word == hyp_word:
                best = (cost, subs, dels, ins)
            else:
                best = (cost + 1, subs + 1, dels, ins)
            cost, subs, dels, ins = previous[j]
            if cost + 1 < best[0]:
                best = (cost + 1, subs, dels + 1, ins)
            cost, subs, dels, ins = current[j - 1]
            if cost + 1 < best[0]:
                best = (cost + 1, subs, dels, ins + 1)
            current.append(best)
        previous = current
    _, subs, dels, ins = previous[-1]
    return WordErrors(subs, dels, ins, len(reference))


def word_errors(reference: str, hypothesis: str) -> WordErrors:
    """Normalize both texts and count the word edits turning ``reference`` into ``hypothesis``."""
    return _align(normalize_words(reference), normalize_words(hypothesis))


def word_error_rate(reference: str, hypothesis: str) -> float:
    """WER of one hypothesis against its reference (see :class:`WordErrors.wer`)."""
    return word_errors(reference, hypothesis).wer
