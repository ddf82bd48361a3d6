"""Fuzzy phrase matching: tolerant of one ASR error, strict about unrelated text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.qa.matching import (
    MAX_WORD_GAP_MS,
    MatchOptions,
    Token,
    find_phrase,
    levenshtein,
    normalize_words,
    pause_runs,
    word_similarity,
)

PHRASE = "this call may be recorded"


def tokens(text: str) -> list[Token]:
    return [
        Token(norm, word, "u:agent:0", "agent", n, n * 500, n * 500 + 400)
        for n, word in enumerate(text.split())
        for norm in normalize_words(word)
    ]


def matched(text: str, phrase: str = PHRASE) -> list[str]:
    found = tokens(text)
    return [
        " ".join(token.text for token in found[m.first : m.last + 1])
        for m in find_phrase(phrase, found)
    ]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("That's NOT my problem!", ["thats", "not", "my", "problem"]),
        ("check-in at 9:30", ["check", "in", "at", "9", "30"]),
        ("  ", []),
        ("Don\u2019t", ["dont"]),
        ("Straße, bitte", ["strasse", "bitte"]),
        ("मुझे हिन्दी में बात करनी है", ["मुझे", "हिन्दी", "में", "बात", "करनी", "है"]),
    ],
)
def test_normalize_words(text: str, words: list[str]) -> None:
    assert normalize_words(text) == words


def test_levenshtein_and_similarity() -> None:
    assert levenshtein("recorded", "recorder") == 1
    assert levenshtein("", "abc") == 3
    assert levenshtein("kitten", "sitting") == 3
    assert word_similarity("recorded", "recorder") == pytest.approx(0.875)
    assert word_similarity("", "") == 1.0


def test_the_exact_phrase_is_found_inside_a_longer_utterance() -> None:
    text = "Brightline Energy, this is Emma. This call may be recorded for quality purposes."
    assert matched(text) == ["This call may be recorded"]


def test_one_substituted_word_is_tolerated() -> None:
    found = find_phrase(PHRASE, tokens("so this cool may be recorded okay"))
    assert len(found) == 1
    assert found[0].score == pytest.approx(0.8)


def test_one_inserted_or_missing_word_is_tolerated() -> None:
    assert matched("this call may also be recorded") == ["this call may also be recorded"]
    assert matched("yes this call be recorded today") == ["this call be recorded"]


@pytest.mark.parametrize(
    ("text", "phrase"),
    [
        ("this call may not be recorded", PHRASE),  # an inserted word, score 0.8, meaning flipped
        ("this call will never be recorded", PHRASE),
        ("well that's my problem now", "that's not my problem"),  # the negation dropped
        ("sorry i can't help you with that", "i can help you with that"),
    ],
)
def test_a_stretch_that_adds_or_drops_a_negation_is_no_match(text: str, phrase: str) -> None:
    # Review finding: "this call may not be recorded" passed the recording disclosure.
    assert matched(text, phrase) == []


def test_a_negated_phrase_matches_its_negated_speech() -> None:
    assert matched("no that's not my problem sir", "that's not my problem") == [
        "that's not my problem"
    ]
    # The negated stretch is skipped, the plain one after it still found.
    assert matched("this call may not be recorded this call may be recorded") == [
        "this call may be recorded"
    ]


def test_a_misspelled_word_costs_only_its_character_distance() -> None:
    found = find_phrase(PHRASE, tokens("this call may be recorder"))
    assert found[0].score == pytest.approx(1 - 0.125 / 5)


def test_the_best_end_is_taken_over_the_first_acceptable_one() -> None:
    # "this call may be" already scores 0.8; the match runs on to include "recorded".
    assert matched("this call may be recorded") == ["this call may be recorded"]


@pytest.mark.parametrize(
    "text",
    [
        "the weather is nice today",
        "this call is being transferred",
        "this cool may bee recorder",
        "may be this call recorded",
        "",
    ],
)
def test_unrelated_or_too_different_text_is_rejected(text: str) -> None:
    assert matched(text) == []


def test_a_short_phrase_must_be_exact_up_to_spelling() -> None:
    assert matched("not my department", "not my department") == ["not my department"]
    assert matched("not your department", "not my department") == []


def test_every_occurrence_is_found_once() -> None:
    text = "that's not my problem really that is not my problem"
    assert matched(text, "that's not my problem") == ["that's not my problem"]
    assert matched(text, "not my problem") == ["not my problem", "not my problem"]


def test_a_phrase_without_words_matches_nothing() -> None:
    assert find_phrase("?!", tokens("anything at all")) == []


def test_stricter_options_reject_a_substitution() -> None:
    found = find_phrase(PHRASE, tokens("this cool may be recorded"), MatchOptions(min_score=0.9))
    assert found == []


words = st.sampled_from(["hello", "account", "billing", "thanks", "order", "today", "yes"])


@given(st.lists(words, max_size=12), st.lists(words, max_size=12))
def test_a_verbatim_phrase_is_always_found_with_a_perfect_score(
    before: list[str], after: list[str]
) -> None:
    found = find_phrase(PHRASE, tokens(" ".join([*before, PHRASE, *after])))
    assert [match.score for match in found] == [1.0]
    assert found[0].first == len(before)
    assert found[0].last == len(before) + 4


def test_decomposed_accents_make_one_word() -> None:
    assert (
        normalize_words("Cafe\u0301 au lait")
        == normalize_words("Café au lait")
        == [
            "café",
            "au",
            "lait",
        ]
    )


def timed(*words: tuple[str, int, int]) -> list[Token]:
    return [
        Token(norm, word, "u:agent:0", "agent", n, start_ms, end_ms)
        for n, (word, start_ms, end_ms) in enumerate(words)
        for norm in normalize_words(word)
    ]


def test_a_match_never_spans_a_long_pause() -> None:
    """One channel's words are one stream across utterances, but words said minutes apart are
    no phrase: "this call" at 5 s and "may be recorded" at 300 s did match."""
    head = [("this", 5000, 5300), ("call", 5300, 5600)]
    for gap_ms, expected in ((MAX_WORD_GAP_MS, 1), (MAX_WORD_GAP_MS + 1, 0), (295_000, 0)):
        start_ms = 5600 + gap_ms
        tail = [("may", start_ms, start_ms + 200), ("be", start_ms + 200, start_ms + 400)]
        tail.append(("recorded", start_ms + 400, start_ms + 900))
        assert len(find_phrase(PHRASE, timed(*head, *tail))) == expected, gap_ms


def test_pause_runs_cut_after_the_latest_word_end() -> None:
    found = timed(
        ("a", 0, 5000),  # a long word: "b" starts inside it
        ("b", 1000, 1200),
        ("c", 6500, 6800),  # 1500 ms after "a" ended, though 5300 ms after "b"
        ("d", 9000, 9100),
    )
    assert pause_runs(found) == [range(0, 3), range(3, 4)]
    assert pause_runs([]) == []
    assert pause_runs(found, max_gap_ms=0) == [range(0, 2), range(2, 3), range(3, 4)]
