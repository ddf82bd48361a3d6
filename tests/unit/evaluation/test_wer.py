"""Word error rate: normalization and word-level Levenshtein counts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.evaluation import WordErrors, normalize_words, word_error_rate, word_errors


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Hi, I am calling.", ["hi", "i", "am", "calling"]),
        ("A two-year warranty!", ["a", "two", "year", "warranty"]),
        ("That’s not my problem", ["that's", "not", "my", "problem"]),
        ("'quoted' words", ["quoted", "words"]),
        ("  ", []),
        ("X-Finity Internet Bill", ["x", "finity", "internet", "bill"]),
        ("It costs 3.5, not 35.", ["it", "costs", "3.5", "not", "35"]),
        ("1,000 or 1000", ["1000", "or", "1000"]),
        ("1,000,000 people", ["1000000", "people"]),
        ("press 1,2,3", ["press", "1", "2", "3"]),  # not one word "123"
        ("9,99 or 999", ["9", "99", "or", "999"]),
        ("minus\u22125", ["minus", "5"]),  # the minus sign splits like a hyphen
        ("STRASSE Straße", ["strasse", "strasse"]),
        ("मैं हिन्दी बोलता हूँ।", ["मैं", "हिन्दी", "बोलता", "हूँ"]),
    ],
)
def test_normalization(text: str, words: list[str]) -> None:
    assert normalize_words(text) == words


def test_case_and_punctuation_do_not_count() -> None:
    assert word_error_rate("Is Ozempic covered?", "is ozempic covered") == 0.0


def test_edit_kinds_are_counted() -> None:
    assert word_errors("a b c d", "a x c d e") == WordErrors(1, 0, 1, 4)
    assert word_errors("a b c", "b c") == WordErrors(0, 1, 0, 3)
    assert word_errors("my name is Niamh", "my name is Neve") == WordErrors(1, 0, 0, 4)
    assert word_error_rate("a b", "") == 1.0


def test_empty_reference() -> None:
    assert word_error_rate("", "") == 0.0
    assert word_error_rate("", "you") == float("inf")


def test_counts_add_up_over_a_corpus() -> None:
    total = word_errors("a b", "a c") + word_errors("c d e", "c d e f")
    assert total == WordErrors(1, 0, 1, 5)
    assert total.wer == pytest.approx(0.4)


words = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=8)


@given(words, words)
def test_distance_is_symmetric_and_bounded(ref: list[str], hyp: list[str]) -> None:
    forward = word_errors(" ".join(ref), " ".join(hyp))
    backward = word_errors(" ".join(hyp), " ".join(ref))
    assert forward.errors == backward.errors
    assert abs(len(ref) - len(hyp)) <= forward.errors <= max(len(ref), len(hyp))
    assert len(hyp) == len(ref) - forward.deletions + forward.insertions
    assert word_errors(" ".join(ref), " ".join(ref)).errors == 0
