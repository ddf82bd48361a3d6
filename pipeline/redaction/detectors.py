"""Detectors: which words of a transcript spell a protected value, and of which entity type.

``find_entities`` looks at a word sequence (one final, or a held final and the next one of its
channel together) and returns non-overlapping ``Span``s (word indices, inclusive). It finds
every entity type; the caller keeps those its policy redacts, so a value is classified the same
whatever the policy (an SSN is never taken for a card number because ``ssn`` is off).

Digit runs (``numbers.digit_runs``) are classified by their nearest context (``context``), then
by their shape:

=================  ===============================================================================
``card_number``    anywhere, a Luhn-valid stretch of 13–19 digits (word-aligned, in any
                   grouping; checked first, whatever the context); card context and at least 8
                   digits; or any run of 13 digits or more not otherwise classified (no
                   ordinary number is that long, and recognizers garble long numbers)
``cvv``            security-code context (``cvv``, ``security code``, ``code`` but not ``zip
                   code``/``area code``, ``on the back``) and 3–4 digits
``expiry``         expiry context and 3–6 digits whose first two (or first) are a month; or a
                   ``MM/YY`` written with a slash in card or code context
``ssn``            SSN context (``social``, ``ssn``) and 4 digits (the last four) to 11; or,
                   anywhere, 9 digits written ``ddd-dd-dddd`` that are a valid SSN
``bank_account``   account context (``account``, ``checking``, ``bank``, ``iban``) and 4–20 digits
``routing_number`` routing context (``routing``, ``aba``) and 4 digits or more
``phone``          phone context and a possible phone number (7–15 digits, ``phonenumbers``);
                   or, anywhere, 10–15 digits that are a valid one
``date_of_birth``  birth context (``born``, ``date of birth``) and the date after it (``dates``)
``email``          an address, written or spelled (``emails``)
=================  ===============================================================================

A value announced by its cue (``cued``: ``My phone number in 4-1 time, time time time,
2-6-7-1``) is one span of the cue's entity type, from its first digit to its last, in place of
what its runs are on their own. Context distances count spoken words
(``numbers.spoken_positions``).

Pure: the same words give the same spans.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.contracts.messages import EntityType
from pipeline.redaction.context import cue_before, keywords_within, nearest_contexts
from pipeline.redaction.cued import (
    MAX_GAP_WORDS,
    MIN_CUED_DIGITS,
    CuedValue,
    cued_values,
    ends_sentence,
)
from pipeline.redaction.dates import find_dates
from pipeline.redaction.emails import find_emails
from pipeline.redaction.numbers import DigitRun, bare, digit_runs, luhn_valid, spoken_positions
from pipeline.redaction.phones import PhoneJudge
from pipeline.redaction.spans import Span

__all__ = [
    "MIN_MASKED_DIGITS",
    "find_entities",
    "ssn_valid",
    "unfinished_run",
    "whole_value",
]

MIN_MASKED_DIGITS = 4
"""Partials mask every digit run this long or longer."""
CARD_DIGITS = range(13, 20)
MAX_HELD_RUN_DIGITS = 18
CUE_AT_END_WORDS = 3
"""A final that ends at most this many spoken words after a cue, before any digit, is held:
its value comes in the next final (``My social security number is.``)."""


def ssn_valid(digits: str) -> bool:
    """A social security number the SSA could have issued (no 000/666/9xx area, no 00 group,
    no 0000 serial)."""
    if len(digits) != 9 or not digits.isdigit():
        return False
    area, group, serial = digits[:3], digits[3:5], digits[5:]
    return area not in ("000", "666") and area[0] != "9" and group != "00" and serial != "0000"


def _month_first(digits: str) -> bool:
    """``0327``, ``327``, ``032027``: a month (01–12) then a year of two or four digits."""
    for month_digits in (2, 1):
        month, year = digits[:month_digits], digits[month_digits:]
        if month.isdigit() and 1 <= int(month) <= 12 and len(year) in (2, 4):
            return True
    return False


def _luhn_window(run: DigitRun) -> DigitRun | None:
    """The longest word-aligned stretch of ``run`` of 13–19 digits that passes Luhn."""
    best: DigitRun | None = None
    for start in range(run.first, run.last + 1):
        if not run.pieces[start - run.first]:
            continue
        count = 0
        for end in range(start, run.last + 1):
            count += len(run.pieces[end - run.first])
            if count > CARD_DIGITS[-1]:
                break
            if count in CARD_DIGITS and run.pieces[end - run.first]:
                window = run.sub(start, end)
                if luhn_valid(window.digits) and (best is None or count > len(best.digits)):
                    best = window
    return best


def _by_context(entity: EntityType, run: DigitRun, phones: PhoneJudge) -> EntityType | None:
    """``entity`` when its context applies to a run of this shape, else None."""
    n = len(run.digits)
    if entity is EntityType.CARD_NUMBER:
        return entity if n >= 8 else None
    if entity is EntityType.CVV:
        return entity if 3 <= n <= 4 else None
    if entity is EntityType.EXPIRY:
        return entity if 3 <= n <= 6 and _month_first(run.digits) else None
    if entity is EntityType.SSN:
        return entity if 4 <= n <= 11 else None
    if entity is EntityType.BANK_ACCOUNT:
        return entity if 4 <= n <= 20 else None
    if entity is EntityType.ROUTING_NUMBER:
        return entity if n >= 4 else None
    if entity is EntityType.PHONE:
        return entity if 7 <= n <= 15 and phones.possible(run.digits) else None
    if entity is EntityType.DATE_OF_BIRTH:
        return entity if 4 <= n <= 8 else None
    return None


def _classify(
    lowered: Sequence[str],
    positions: Sequence[int],
    run: DigitRun,
    phones: PhoneJudge,
    *,
    by_shape: bool = True,
) -> list[Span]:
    """What ``run`` is on its own: a Luhn-valid card number, else what its nearest context
    says, else (``by_shape``) what its shape alone says (a date in words about a payment,
    ``ddd-dd-dddd``, a valid phone number, 13 digits or more)."""
    digits = run.digits
    n = len(digits)
    # A Luhn-valid card number is one whatever the words around it say: under ``pci`` a card
    # read after "account" must not pass as a bank account (which pci keeps).
    card = _luhn_window(run) if n >= CARD_DIGITS[0] else None
    if card is not None:
        # The rest of the run is another value only if it is one of its own (a code read
        # straight after the number); digits that are nothing else belong to the card number
        # (a recognizer that heard a digit twice).
        first, last = card.first, card.last
        before = (
            _classify(lowered, positions, run.sub(run.first, first - 1), phones, by_shape=by_shape)
            if first > run.first
            else []
        )
        after = (
            _classify(lowered, positions, run.sub(last + 1, run.last), phones, by_shape=by_shape)
            if last < run.last
            else []
        )
        if not before:
            first = run.first
        if not after:
            last = run.last
        return [*before, Span(first, last, EntityType.CARD_NUMBER), *after]
    contexts = nearest_contexts(lowered, run.first, run.last, positions=positions)
    for entity in contexts:
        found = _by_context(entity, run, phones)
        if found is not None:
            return [Span(run.first, run.last, found)]
    if not by_shape:
        return []
    written_as_date = run.slash or len(run.groups) >= 2
    if written_as_date and n in (3, 4, 6) and _month_first(digits) and _payment(lowered):
        return [Span(run.first, run.last, EntityType.EXPIRY)]
    if n == 9 and run.groups == (3, 2, 4) and ssn_valid(digits):
        return [Span(run.first, run.last, EntityType.SSN)]
    if 10 <= n <= 15 and phones.valid(digits):
        return [Span(run.first, run.last, EntityType.PHONE)]
    if n >= CARD_DIGITS[0]:
        return [Span(run.first, run.last, EntityType.CARD_NUMBER)]
    return []


_PAYMENT_WORDS = frozenset(
    {"card", "visa", "mastercard", "amex", "credit", "debit", "cvv", "cvc", "code", "expiry"}
    | {"expiration", "expires", "payment", "pay"}
)


def _payment(lowered: Sequence[str]) -> bool:
    """Whether the words are about a payment anywhere (a date-shaped number is an expiry)."""
    return not _PAYMENT_WORDS.isdisjoint(lowered)


def whole_value(entity: EntityType, digits: str, phones: PhoneJudge) -> bool:
    """Whether ``digits`` are a complete value of ``entity`` already (a cued value takes no
    more digits, a final ending in it is not held)."""
    n = len(digits)
    if entity is EntityType.CARD_NUMBER:
        return n in CARD_DIGITS and luhn_valid(digits)
    if entity in (EntityType.SSN, EntityType.ROUTING_NUMBER):
        return n == 9
    if entity is EntityType.PHONE:
        return 10 <= n <= 15 and phones.valid(digits)
    if entity is EntityType.CVV:
        return n == 4
    if entity is EntityType.EXPIRY:
        return n in (4, 6) and _month_first(digits)
    return False


def find_entities(
    words: Sequence[str], phones: PhoneJudge, *, min_cued_digits: int = MIN_CUED_DIGITS
) -> list[Span]:
    """Every protected value in ``words`` (as Whisper wrote them), in order, non-overlapping.

    E-mail addresses and dates of birth are found first (their words may hold digits); digit
    runs inside them are not looked at again. Then each digit run on its own (the table in the
    module docstring), and the values announced by a cue (``cued``): a cued value of at least
    ``min_cued_digits`` digits is one span from its first run to its last, in place of what its
    runs were on their own (partials pass 1: they mask what a cue announces at once)."""
    lowered = [bare(word) for word in words]
    positions = spoken_positions(words)
    spans = find_emails(words) + find_dates(lowered)
    taken = {index for span in spans for index in range(span.first, span.last + 1)}
    runs = [
        run
        for run in digit_runs(words)
        if not any(index in taken for index in range(run.first, run.last + 1))
    ]
    own, values = _cued(words, lowered, positions, runs, phones)
    grouped: set[int] = set()
    for value in values:
        if len(value.digits) >= min_cued_digits:
            spans.append(Span(value.first, value.last, value.entity))
            grouped.update(run.first for run in value.runs)
    for run, run_spans in zip(runs, own, strict=True):
        if run.first not in grouped:
            spans.extend(run_spans)
    return _without_overlaps(spans)


def _cued(
    words: Sequence[str],
    lowered: Sequence[str],
    positions: Sequence[int],
    runs: Sequence[DigitRun],
    phones: PhoneJudge,
) -> tuple[list[list[Span]], list[CuedValue]]:
    """What each run is on its own, and the cued values among the runs. A run's shape alone
    (``03 27`` looks like an expiry date among payment words) does not keep it out of a cued
    value: only a Luhn-valid card number or a nearer keyword of another value does."""
    own = [_classify(lowered, positions, run, phones) for run in runs]
    claimed = [
        frozenset(
            span.entity for span in _classify(lowered, positions, run, phones, by_shape=False)
        )
        for run in runs
    ]
    values = cued_values(
        words,
        lowered,
        positions,
        runs,
        claimed,
        lambda entity, digits: whole_value(entity, digits, phones),
    )
    return own, values


def _without_overlaps(spans: list[Span]) -> list[Span]:
    kept: list[Span] = []
    for span in sorted(spans, key=lambda s: (s.first, -s.last)):
        if kept and span.first <= kept[-1].last:
            continue
        kept.append(span)
    return kept


def unfinished_run(words: Sequence[str], phones: PhoneJudge) -> bool:
    """Whether ``words`` end in a number that may go on in the next final:

    - a digit run at the very end of 3 to 18 digits, or fewer after a keyword of a digit
      entity (``my card number is four``), unless the run is a whole value already (a
      Luhn-valid card number, an SSN written ``ddd-dd-dddd``, a valid phone number, the year
      of a date, a cued value that is whole: ``whole_value``);
    - a cued value (``cued``) that is not whole yet, followed by at most ``MAX_GAP_WORDS``
      words with no sentence end and no other value's keyword (``My phone number in 4-1
      time,``: the rest of the misheard number may follow);
    - a cue with no digit after it in the last ``CUE_AT_END_WORDS`` words (``My social
      security number is.``).

    The final's own last punctuation does not count (Whisper ends every final with a full
    stop)."""
    if not words:
        return False
    lowered = [bare(word) for word in words]
    positions = spoken_positions(words)
    runs = digit_runs(words)
    _, values = _cued(words, lowered, positions, runs, phones)
    last_value = values[-1] if values and values[-1].last == runs[-1].last else None
    if last_value is not None and whole_value(last_value.entity, last_value.digits, phones):
        return False  # "my social is 0 7 8 0 5 1 1 2 0": nothing is missing
    ends_in_run = bool(runs) and runs[-1].last == len(words) - 1
    if ends_in_run and _run_unfinished(lowered, positions, runs[-1], phones):
        return True
    if last_value is not None:
        value = last_value
        if (
            positions[-1] - positions[value.last] <= MAX_GAP_WORDS
            and not any(ends_sentence(word) for word in words[value.last : -1])
            and not keywords_within(lowered, value.last + 1, len(words) - 1) - {value.entity}
        ):
            return True
    cue = cue_before(lowered, positions, len(words), CUE_AT_END_WORDS)
    return cue is not None and not any(run.first > cue[1] for run in runs)


def _run_unfinished(
    lowered: Sequence[str], positions: Sequence[int], run: DigitRun, phones: PhoneJudge
) -> bool:
    """The first rule of ``unfinished_run``, for the run that ends the words."""
    n = len(run.digits)
    if n > MAX_HELD_RUN_DIGITS or (n in CARD_DIGITS and luhn_valid(run.digits)):
        return False
    if (n == 9 and run.groups == (3, 2, 4) and ssn_valid(run.digits)) or (
        10 <= n <= 15 and phones.valid(run.digits)
    ):
        return False
    if any(span.last == run.last for span in find_dates(lowered)):
        return False
    if n >= 3:
        return True
    return bool(nearest_contexts(lowered, run.first, run.last, after=0, positions=positions))
