"""Digit runs: the numbers a transcript holds, whatever way Whisper wrote them.

A caller reads a card number in groups, and Whisper writes what it heard in one of several
ways: numerals (``4111 1111``), numerals glued by the punctuation it guessed (``4,111,111``,
``078-05-1120``, its words then being ``078``, ``-05``, ``-1120``), or number words
(``four one one one``, ``double five``, ``oh seven``, ``twenty seven``, ``four hundred``).
``digit_runs`` reads a word sequence into **runs**: maximal stretches of consecutive words that
spell digits, each word with the digits it contributes. Words that are numbers of another kind
end a run and never join one: money (``$25``), times (``3:30``, the ``pm`` after a number is an
ordinary word), percentages, decimals (``2.5``), ordinals (``12th``) and words mixing letters
and digits (``4B``).

Pure and deterministic; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DIGIT_WORDS",
    "GLUE",
    "DigitRun",
    "bare",
    "digit_runs",
    "luhn_valid",
    "spoken_positions",
]

DIGIT_WORDS: dict[str, str] = {
    "zero": "0",
    "oh": "0",
    "o": "0",
    "nought": "0",
    "naught": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
}
TEENS: dict[str, int] = {
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
}
TENS: dict[str, int] = {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
REPEATS = {"double": 2, "triple": 3}
JOINERS = frozenset({"dash", "hyphen", "slash"})
"""Spoken separators that stay inside a run (``oh three slash twenty seven``)."""

GLUE = (",", ".", "-", "/", "@")
"""A word Whisper starts with one of these (``,111``, ``-05``, ``.com``, ``-rof``) is the tail of
the word before it: it wrote no space between them."""

_EDGE_PUNCTUATION = "\"'()[]{}<>“”‘’«»!?;:,.…"
_NUMERAL = re.compile(r"[,.\-/]?\d[\d,.\-/]*")
_DECIMAL = re.compile(r"\d+\.\d+")
_GROUP_SPLIT = re.compile(r"[,.\-/]+")


def bare(word: str) -> str:
    """``word`` lowercased, without the punctuation around it (``"Number,"`` → ``number``)."""
    return word.strip().strip(_EDGE_PUNCTUATION).lower()


def spoken_positions(words: Sequence[str]) -> tuple[int, ...]:
    """For each of ``words`` (as Whisper wrote them), the index of the spoken word it is part
    of: a word starting with ``GLUE`` belongs to the one before (``1 -1 -2 -0.`` is one)."""
    positions: list[int] = []
    spoken = -1
    for index, word in enumerate(words):
        if index == 0 or not word.startswith(GLUE):
            spoken += 1
        positions.append(spoken)
    return tuple(positions)


def luhn_valid(digits: str) -> bool:
    """The Luhn (mod 10) check every payment card number passes."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if position % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


@dataclass(frozen=True, slots=True)
class DigitRun:
    """Consecutive words ``first..last`` (indices into the word list, inclusive) spelling digits.

    ``pieces[i]`` is what word ``first + i`` contributes (``""`` for ``double``, a joiner such
    as ``dash``, or the later words of a compound like ``twenty seven``, whose digits all go to
    its first word); ``groups`` are the digit counts of the groups as written (``078-05-1120``
    is ``(3, 2, 4)``; number words read one by one are one group each); ``slash`` says a ``/``
    or a spoken ``slash`` separated two groups (a date).
    """

    first: int
    last: int
    pieces: tuple[str, ...]
    groups: tuple[int, ...]
    slash: bool

    @property
    def digits(self) -> str:
        return "".join(self.pieces)

    def sub(self, first: int, last: int) -> DigitRun:
        """The words ``first..last`` of this run (absolute indices) as a run of their own."""
        pieces = self.pieces[first - self.first : last - self.first + 1]
        return DigitRun(first, last, pieces, tuple(len(p) for p in pieces if p), self.slash)


def _numeral(word: str) -> tuple[str, tuple[int, ...], bool] | None:
    """Digits, groups and slash of a numeral word (``-05``, ``4,111``, ``03/27.``), or None when
    the word is no digit group (money, a time, a decimal, an ordinal, letters and digits)."""
    core = word.strip().rstrip(".,;:!?…\"')]}").lstrip("\"'([{")
    if not _NUMERAL.fullmatch(core):
        return None
    inner = core.lstrip(",.-/")
    if _DECIMAL.fullmatch(inner) and "," not in inner:
        return None  # 2.5, 25.30: a measure or a price, never a group of a longer number
    groups = tuple(len(group) for group in _GROUP_SPLIT.split(inner) if group)
    return re.sub(r"\D", "", inner), groups, "/" in inner


def _word_value(words: Sequence[str], index: int) -> tuple[str, int] | None:
    """The digits the number words from ``index`` spell, and how many words they take, or None
    when ``words[index]`` starts no number."""
    word = words[index]
    parts = word.split("-")
    if len(parts) == 2 and parts[0] in TENS and parts[1] in DIGIT_WORDS:
        word = parts[0]  # "twenty-seven" reads as "twenty seven"
        tens = TENS[word] + int(DIGIT_WORDS[parts[1]])
        return _scaled(words, index, tens, 1)
    if word in REPEATS:
        if index + 1 < len(words) and words[index + 1] in DIGIT_WORDS:
            return DIGIT_WORDS[words[index + 1]] * REPEATS[word], 2
        return None
    if word in TENS:
        if (
            index + 1 < len(words)
            and words[index + 1] in DIGIT_WORDS
            and DIGIT_WORDS[words[index + 1]] != "0"
        ):
            return _scaled(words, index, TENS[word] + int(DIGIT_WORDS[words[index + 1]]), 2)
        return _scaled(words, index, TENS[word], 1)
    if word in TEENS:
        return _scaled(words, index, TEENS[word], 1)
    if word in DIGIT_WORDS:
        if word == "o" and not _digit_word_next_to(words, index):
            return None  # "o" alone is a letter; read as zero only among digits
        return _scaled(words, index, int(DIGIT_WORDS[word]), 1, digit=DIGIT_WORDS[word])
    return None


def _digit_word_next_to(words: Sequence[str], index: int) -> bool:
    neighbours = [words[i] for i in (index - 1, index + 1) if 0 <= i < len(words)]
    return any(n in DIGIT_WORDS and n != "o" for n in neighbours)


def _scaled(
    words: Sequence[str], index: int, value: int, taken: int, digit: str | None = None
) -> tuple[str, int]:
    """``value`` (read from ``taken`` words at ``index``) followed by ``hundred`` or
    ``thousand``: the whole cardinal (``four hundred twelve`` → ``412``); else ``value`` as
    written (a single digit word keeps its leading zero: ``oh`` → ``0``)."""
    following = index + taken
    if following < len(words) and words[following] in ("hundred", "thousand") and value > 0:
        scale = 100 if words[following] == "hundred" else 1000
        total, used = value * scale, taken + 1
        rest = following + 1
        if rest < len(words) and words[rest] == "and":
            rest += 1
        tail = _word_value(words, rest) if rest < len(words) else None
        if tail is not None and int(tail[0]) < scale and len(tail[0]) <= len(str(scale)) - 1:
            total += int(tail[0])
            used = rest - index + tail[1]
        return str(total), used
    return (digit if digit is not None else str(value)), taken


def digit_runs(words: Sequence[str]) -> list[DigitRun]:
    """Every maximal run of words that spell digits, in order (``words`` as Whisper wrote them,
    punctuation and case included)."""
    lowered = [bare(word) for word in words]
    runs: list[DigitRun] = []
    pieces: list[str] = []
    groups: list[int] = []
    slash = False
    first = 0
    index = 0

    trailing_joiners = 0

    def close(last: int) -> None:
        nonlocal pieces, groups, slash, trailing_joiners
        if trailing_joiners:  # a trailing joiner is no part of the number
            pieces = pieces[:-trailing_joiners]
            last -= trailing_joiners
        if any(pieces):
            runs.append(DigitRun(first, last, tuple(pieces), tuple(groups), slash))
        pieces, groups, slash, trailing_joiners = [], [], False, 0

    while index < len(words):
        numeral = _numeral(words[index])
        spelled = None if numeral is not None else _word_value(lowered, index)
        if numeral is not None:
            if not pieces:
                first = index
            digits, written_groups, has_slash = numeral
            pieces.append(digits)
            groups.extend(written_groups)
            slash = slash or has_slash
            trailing_joiners = 0
            index += 1
            continue
        if spelled is not None:
            if not pieces:
                first = index
            digits, taken = spelled
            pieces.append(digits)
            pieces.extend([""] * (taken - 1))
            groups.append(len(digits))
            trailing_joiners = 0
            index += taken
            continue
        if pieces and lowered[index] in JOINERS:
            slash = slash or lowered[index] == "slash"
            pieces.append("")
            trailing_joiners += 1
            index += 1
            continue
        close(index - 1)
        index += 1
    close(len(words) - 1)
    return runs
