"""The detectors on transcripts as Whisper writes them: what each finds, and the ordinary
numbers and words they leave alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.contracts.messages import EntityType
from pipeline.redaction import PII, PhoneJudge, find_entities, luhn_valid, unfinished_run

PHONES = PhoneJudge("US")
E = EntityType


def found(text: str) -> list[tuple[str, EntityType]]:
    words = text.split()
    return [(" ".join(words[s.first : s.last + 1]), s.entity) for s in find_entities(words, PHONES)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My card number is 4111 1111 1111 1111.", [("4111 1111 1111 1111.", E.CARD_NUMBER)]),
        ("it's 4539, 148803436467 thanks", [("4539, 148803436467", E.CARD_NUMBER)]),
        (
            "number is 4,111,111,111,111,111,111,111",
            [("4,111,111,111,111,111,111,111", E.CARD_NUMBER)],
        ),
        (
            "card four five three nine one four eight eight oh three four three six four six seven",
            [
                (
                    "four five three nine one four eight eight"
                    " oh three four three six four six seven",
                    E.CARD_NUMBER,
                )
            ],
        ),
        ("Card number is 4539, 14803436467", [("4539, 14803436467", E.CARD_NUMBER)]),
        ("The security code is 737.", [("737.", E.CVV)]),
        ("the code on the back is seven three seven", [("seven three seven", E.CVV)]),
        ("The expiration date is 03 27.", [("03 27.", E.EXPIRY)]),
        ("it expires oh three twenty seven", [("oh three twenty seven", E.EXPIRY)]),
        ("it expires March 2027", [("March 2027", E.EXPIRY)]),
        (
            "The Q already code is 737 and the X-I-R-8 is 0-3-27.",
            [("737", E.CVV), ("0-3-27.", E.CVV)],  # "code" is nearer than the payment words
        ),
        ("My social security number is 078-05-1120", [("078-05-1120", E.SSN)]),
        (
            "my social is oh seven eight oh five one one two oh",
            [("oh seven eight oh five one one two oh", E.SSN)],
        ),
        ("it is 078 -05 -1120 okay", [("078 -05 -1120", E.SSN)]),
        ("the routing number is 021000021", [("021000021", E.ROUTING_NUMBER)]),
        ("my checking account number is 12345678", [("12345678", E.BANK_ACCOUNT)]),
        ("You can reach me at 455-255-6671", [("455-255-6671", E.PHONE)]),
        ("call me on 415 555 2671 please", [("415 555 2671", E.PHONE)]),
        ("it's 415 555 2671", [("415 555 2671", E.PHONE)]),
        (
            "My email is john dot smith at example dot com.",
            [("john dot smith at example dot com.", E.EMAIL)],
        ),
        ("My email is john.smith.exampl.com", [("john.smith.exampl.com", E.EMAIL)]),
        ("write to mary.jones@gmail.com today", [("mary.jones@gmail.com", E.EMAIL)]),
        ("Email address is jon.mit. At example.com", [("jon.mit. At example.com", E.EMAIL)]),
        ("my email is john smith at gmail dot com", [("john smith at gmail dot com", E.EMAIL)]),
        ("my date of birth is January 15th, 1980.", [("January 15th, 1980.", E.DATE_OF_BIRTH)]),
        (
            "I was born on the third of March nineteen eighty",
            [("third of March nineteen eighty", E.DATE_OF_BIRTH)],
        ),
        ("date of birth 01/15/1980", [("01/15/1980", E.DATE_OF_BIRTH)]),
    ],
)
def test_what_is_found(text: str, expected: list[tuple[str, EntityType]]) -> None:
    assert found(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "I ordered two items last week, ordered 12, and it cost $25.3 pm.",
        "Order 12 arrived on the 3rd, two days late.",
        "I have called three times this week and nobody has fixed the problem.",
        "The meeting is at 3:30 pm on Tuesday.",
        "It was 24.99 plus 5 dollars shipping, so 29.99 in all.",
        "My zip code is 94110.",
        "I have 2 kids and one dog, and we live at 221 Baker Street.",
        "Can I set up automatic payments from my checking account?",
        "My internet has been down for two days and I work from home.",
        "I'll be at home after 6, call me then.",
        "It happened in 2019 and again in 2021.",
        "Room 1204, floor 12.",
        "Press one for billing or two for support.",
        "She said it costs one hundred dollars.",
    ],
)
def test_ordinary_numbers_are_left_alone(text: str) -> None:
    assert found(text) == []


def _card(prefix: str, length: int, body_digits: list[int]) -> str:
    body = prefix + "".join(map(str, body_digits))[: length - 1 - len(prefix)]
    return next(body + c for c in "0123456789" if luhn_valid(body + c))


GROUPINGS = st.sampled_from(["4-4-4-4", "each", "whole", "comma", "dash", "words"])
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def _written(number: str, grouping: str) -> str:
    groups = [number[i : i + 4] for i in range(0, len(number), 4)]
    if grouping == "each":
        return " ".join(number)
    if grouping == "whole":
        return number
    if grouping == "comma":
        return groups[0] + "".join("," + g for g in groups[1:])
    if grouping == "dash":
        return groups[0] + " " + " ".join("-" + g for g in groups[1:])
    if grouping == "words":
        return ", ".join(" ".join(WORDS[int(d)] for d in g) for g in groups)
    return " ".join(groups)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["4", "51", "37", "6011"]),
    st.integers(13, 19),
    st.lists(st.integers(0, 9), min_size=19, max_size=19),
    GROUPINGS,
    st.sampled_from(["", "my card number is", "it's", "the long number", "okay so"]),
)
def test_every_luhn_valid_card_number_is_found_in_any_grouping(
    prefix: str, length: int, body: list[int], grouping: str, lead: str
) -> None:
    number = _card(prefix, length, body)
    text = f"{lead} {_written(number, grouping)} thanks".strip()
    words = text.split()
    spans = find_entities(words, PHONES)
    covered = " ".join(
        " ".join(words[s.first : s.last + 1]) for s in spans if s.entity is E.CARD_NUMBER
    )
    assert [d for d in covered if d.isdigit()] == [
        d for d in _written(number, grouping) if d.isdigit()
    ] or (grouping == "words" and covered)
    assert "thanks" not in covered
    assert not lead or lead.split()[-1] not in covered.split()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 999), st.sampled_from(["items", "times", "dollars", "minutes", "days"]))
def test_small_counts_are_never_redacted(count: int, unit: str) -> None:
    assert found(f"I waited {count} {unit} and paid {count}") == []


@pytest.mark.parametrize(
    ("text", "unfinished"),
    [
        ("My card number is 4111 1111.", True),
        ("My card number is four.", True),
        ("order 12.", False),
        ("I'd like two.", False),
        ("it is 4111 1111 1111 1111.", False),  # a whole card number
        ("my social is 078-05-1120.", False),  # a whole SSN
        ("reach me at 415 555 2671.", False),  # a whole phone number
        ("I was born on March 3rd 1980.", False),  # the year of a date
        ("My card number is 4111 1111. Thanks", False),
    ],
)
def test_what_counts_as_an_unfinished_number(text: str, unfinished: bool) -> None:
    assert unfinished_run(text.split(), PHONES) is unfinished


def test_pii_names_every_entity_type() -> None:
    assert set(PII.entities) == set(EntityType)
