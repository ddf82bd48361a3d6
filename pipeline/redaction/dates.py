"""Dates said after a keyword: a date of birth (``born on March 3rd, 1980``, ``my date of birth
is oh one fifteen nineteen eighty``) and a card's expiry said with a month name (``it expires
March twenty twenty seven``; an expiry in digits is a digit run, see ``detectors``).

After the keyword and a few lead-in words (``is``, ``on``, ``the``), the date is the longest
stretch of date words: month names, ordinals, numerals and number words, ``of`` and ``the``.
It counts as a date when it holds a month name or at least four digits' worth of numbers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pipeline.contracts.messages import EntityType
from pipeline.redaction.numbers import DIGIT_WORDS, TEENS, TENS
from pipeline.redaction.spans import Span

__all__ = ["find_dates"]

MONTHS = frozenset(
    {
        *("january", "february", "march", "april", "may", "june", "july", "august"),
        *("september", "october", "november", "december"),
        *("jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec"),
    }
)
ORDINAL_WORDS = frozenset(
    {
        *("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"),
        *("ninth", "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth"),
        *("sixteenth", "seventeenth", "eighteenth", "nineteenth", "twentieth", "thirtieth"),
    }
)
NUMBER_WORDS = (
    frozenset(DIGIT_WORDS)
    | frozenset(TEENS)
    | frozenset(TENS)
    | {
        "hundred",
        "thousand",
        "double",
    }
)
_NUMERAL = re.compile(r"\d+(?:st|nd|rd|th)?|\d{1,4}(?:[/.-]\d{1,4}){1,2}")
_JOINING = frozenset({"of", "the", "slash", "dash"})
_LEAD_IN = frozenset({"is", "was", "on", "in", "the", "my", "it's", "its", "it", "s", "date", "of"})
BIRTH_KEYWORDS = frozenset({"birth", "born", "birthday", "dob"})
EXPIRY_KEYWORDS = frozenset({"expiry", "expiration", "expires", "expire", "exp", "thru"})
MAX_LEAD_IN_WORDS = 4


def _date_word(word: str) -> bool:
    if word in MONTHS or word in ORDINAL_WORDS or word in NUMBER_WORDS:
        return True
    if "-" in word and all(part in NUMBER_WORDS | ORDINAL_WORDS for part in word.split("-")):
        return True  # twenty-first, twenty-seven
    return bool(_NUMERAL.fullmatch(word))


def _digits_worth(words: Sequence[str]) -> int:
    count = 0
    for word in words:
        if word in DIGIT_WORDS:
            count += 1
        elif word in TEENS or word in TENS or word in ORDINAL_WORDS:
            count += 2
        else:
            count += sum(char.isdigit() for char in word)
    return count


def _date_after(lowered: Sequence[str], keyword: int) -> tuple[int, int] | None:
    start = keyword + 1
    skipped = 0
    while start < len(lowered) and lowered[start] in _LEAD_IN and skipped < MAX_LEAD_IN_WORDS:
        start += 1
        skipped += 1
    end = start
    while end < len(lowered) and (_date_word(lowered[end]) or lowered[end] in _JOINING):
        end += 1
    while end > start and lowered[end - 1] in _JOINING:
        end -= 1
    stretch = lowered[start:end]
    if not stretch:
        return None
    if any(word in MONTHS for word in stretch) or _digits_worth(stretch) >= 4:
        return start, end - 1
    return None


def find_dates(lowered: Sequence[str]) -> list[Span]:
    """Spans of dates of birth, and of expiry dates said with a month name (``lowered``:
    bare words)."""
    spans: list[Span] = []
    for index, word in enumerate(lowered):
        if word in BIRTH_KEYWORDS:
            entity = EntityType.DATE_OF_BIRTH
        elif word in EXPIRY_KEYWORDS:
            entity = EntityType.EXPIRY
        else:
            continue
        found = _date_after(lowered, index)
        if found is None:
            continue
        first, last = found
        if entity is EntityType.EXPIRY and not any(w in MONTHS for w in lowered[first : last + 1]):
            continue  # a numeric expiry is a digit run: the detectors judge its shape
        spans.append(Span(first, last, entity))
    return spans
