"""Digit runs read from the words Whisper writes, and the Luhn check."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.redaction.numbers import digit_runs, luhn_valid


def digits_of(text: str) -> list[str]:
    return [run.digits for run in digit_runs(text.split())]


@pytest.mark.parametrize(
    ("text", "digits"),
    [
        ("4111 1111 1111 1111.", ["4111111111111111"]),
        ("4,111,111,111,111,111", ["4111111111111111"]),
        ("078 -05 -1120", ["078051120"]),
        ("four one one one, one one one one", ["41111111"]),
        ("oh seven eight", ["078"]),
        ("double five triple two", ["55222"]),
        ("twenty seven", ["27"]),
        ("twenty-seven", ["27"]),
        ("nineteen eighty", ["1980"]),
        ("four hundred twelve", ["412"]),
        ("four hundred", ["400"]),
        ("oh three slash twenty seven", ["0327"]),
        ("seven thousand", ["7000"]),
    ],
)
def test_digits_in_any_writing(text: str, digits: list[str]) -> None:
    assert digits_of(text) == digits


@pytest.mark.parametrize(
    "text",
    ["$25 and 3:30 pm", "2.5 kilos", "the 12th", "flat 4B", "50%", "o k", "a dash of salt"],
)
def test_other_numbers_and_letters_are_no_digit_run(text: str) -> None:
    assert digits_of(text) == []


def test_a_run_knows_its_words_and_groups() -> None:
    [run] = digit_runs(["is", "078-05-1120", "thanks"])
    assert (run.first, run.last, run.groups) == (1, 1, (3, 2, 4))
    [run] = digit_runs(["at", "415", "-555", "-2671."])
    assert (run.first, run.last, run.groups) == (1, 3, (3, 3, 4))
    [run] = digit_runs(["03/27"])
    assert run.slash


def test_words_break_runs() -> None:
    assert digits_of("order 12 and 34 items") == ["12", "34"]
    assert digits_of("four one dash one one") == ["4111"]


def _luhn_digit(body: str) -> str:
    for check in "0123456789":
        if luhn_valid(body + check):
            return body + check
    raise AssertionError


@pytest.mark.parametrize(
    "number",
    [
        "4111111111111111",
        "5555555555554444",
        "378282246310005",
        "6011111111111117",
        "4012888888881881",
    ],
)
def test_test_card_numbers_pass_luhn(number: str) -> None:
    assert luhn_valid(number)


@given(st.text(alphabet="0123456789", min_size=12, max_size=18), st.integers(0, 17))
def test_luhn_catches_every_single_digit_error(body: str, position: int) -> None:
    number = _luhn_digit(body)
    position %= len(number)
    for wrong in "0123456789":
        if wrong != number[position]:
            changed = number[:position] + wrong + number[position + 1 :]
            assert not luhn_valid(changed)


@given(st.lists(st.integers(0, 9), min_size=1, max_size=19), st.sampled_from([" ", "-", ","]))
def test_any_grouping_of_numerals_reads_the_same_digits(values: list[int], separator: str) -> None:
    digits = "".join(map(str, values))
    groups = [digits[i : i + 4] for i in range(0, len(digits), 4)]
    if separator == " ":
        text = " ".join(groups)
    else:
        text = groups[0] + " " + " ".join(separator + group for group in groups[1:])
    assert digits_of(text) == [digits]


WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


@given(st.lists(st.integers(0, 9), min_size=1, max_size=19))
def test_digits_read_one_by_one_as_words(values: list[int]) -> None:
    text = " ".join(WORDS[value] for value in values)
    assert digits_of(text) == ["".join(map(str, values))]
