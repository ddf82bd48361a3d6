"""Values announced by their cue ("social security number", "phone number", …), as tiny.en
wrote them from the 8 kHz en-gb-x-rp voice of tests/integration/test_redaction_transcribe.py:
its words exactly as the engine gave them (Whisper glues digits and misheard syllables with
dashes into separate words, and hears digits as other words)."""

from __future__ import annotations

import pytest

from pipeline.contracts.messages import EntityType
from pipeline.redaction import PhoneJudge, find_entities, unfinished_run
from pipeline.redaction.numbers import spoken_positions

PHONES = PhoneJudge("US")
E = EntityType

SSN_TEXT = "My social security number in near -rof -envate, near -rof -ine, 1 -1 -2 -0."
"""What tiny.en wrote for "My social security number is 0 7 8, 0 5, 1 1 2 0." at 8 kHz."""
PHONE_TEXT = "My phone number in 4 -1 time, time time time, 2 -6 -7 -1"
"""… and for "My phone number is 4 1 5, 5 5 5, 2 6 7 1."."""


def found(text: str, min_cued_digits: int | None = None) -> list[tuple[str, EntityType]]:
    """The values in ``text`` (Whisper's words joined by single spaces), as text."""
    words = text.split()
    spans = (
        find_entities(words, PHONES)
        if min_cued_digits is None
        else find_entities(words, PHONES, min_cued_digits=min_cued_digits)
    )
    return [(" ".join(words[s.first : s.last + 1]), s.entity) for s in spans]


def test_glued_words_are_pieces_of_one_spoken_word() -> None:
    assert spoken_positions(["in", "near", "-rof", "-envate,", "1", "-1", ",539", ".com"]) == (
        0, 1, 1, 1, 2, 2, 2, 2,
    )  # fmt: skip


def test_the_last_four_of_an_ssn_behind_a_misheard_stretch_are_found() -> None:
    # The cue is 11 of Whisper's words before the digits but 4 spoken words: in reach.
    assert found(SSN_TEXT) == [("1 -1 -2 -0.", E.SSN)]


def test_a_phone_number_with_misheard_digits_inside_is_one_value() -> None:
    # Neither "4 -1" nor "2 -6 -7 -1" has the shape of a phone number; after "phone number"
    # both are its digits, and the misheard words between them go with them.
    assert found(PHONE_TEXT) == [(" ".join(PHONE_TEXT.split()[4:]), E.PHONE)]


def test_two_cued_values_held_together_stay_apart() -> None:
    assert found(f"{SSN_TEXT} {PHONE_TEXT}") == [
        ("1 -1 -2 -0.", E.SSN),
        (" ".join(PHONE_TEXT.split()[4:]), E.PHONE),
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My SSN is 0 7 8, 0 5 uh 1 1 2 0.", [("0 7 8, 0 5 uh 1 1 2 0.", E.SSN)]),
        ("my card number is 4539 time 1488", [("4539 time 1488", E.CARD_NUMBER)]),
        ("the security code is seven three", []),  # two digits: no value yet
        ("My phone is 2 years old.", []),
        ("My phone broke 3 times.", []),
        (  # a whole phone number takes no more digits
            "My phone number is 415 555 2671 and I ordered 2 items.",
            [("415 555 2671", E.PHONE)],
        ),
        (  # a sentence end closes the value
            "My phone number is 415 55. I ordered 2 items.",
            [("415 55.", E.PHONE)],
        ),
        (  # another value's keyword closes it
            "My social is 1120 and my phone number is 415 555 2671",
            [("1120", E.SSN), ("415 555 2671", E.PHONE)],
        ),
        (  # a digit heard as another word, right after the first
            "My social security number is 4 fix -2, 3 -7, 6 -8 -8 -8.",
            [("4 fix -2, 3 -7, 6 -8 -8 -8.", E.SSN)],
        ),
        (  # "-0 -7, 9 -1 -8 -8" looks like an expiry date, but the cue says what it is
            "My card number in 4 -3 -5 -1, 1 -8 -9 -5, near near -0 -7, 9 -1 -8 -8.",
            [("4 -3 -5 -1, 1 -8 -9 -5, near near -0 -7, 9 -1 -8 -8.", E.CARD_NUMBER)],
        ),
        ("My phone broke seven times, the screen 45 days ago.", []),  # counts, not digits
        ("I have called three times this week.", []),  # "call" is no cue
        ("I ordered two items last week, ordered 12.", []),
    ],
)
def test_cued_values(text: str, expected: list[tuple[str, EntityType]]) -> None:
    assert found(text) == expected


def test_partials_mask_any_digit_a_cue_announces() -> None:
    assert found("My phone number in 4 1 time,") == []
    assert found("My phone number in 4 1 time,", min_cued_digits=1) == [("4 1", E.PHONE)]


@pytest.mark.parametrize(
    ("text", "unfinished"),
    [
        (SSN_TEXT, True),
        (PHONE_TEXT, True),
        ("My phone number in 4 -1 time,", True),  # the rest may follow
        ("My social security number is.", True),  # the value comes next
        ("What is your phone number?", True),
        ("My phone number is 415 555 2671.", False),  # whole
        ("My social security number is 078 05 1120.", False),  # whole
        ("My phone number is 415 55. I ordered them.", False),
        ("I have called three times this week.", False),
        ("It arrived at 3 pm and cost 25 dollars.", False),
    ],
)
def test_what_a_cue_leaves_unfinished(text: str, unfinished: bool) -> None:
    assert unfinished_run(text.split(), PHONES) is unfinished
