"""Cued values: a value announced by its cue is protected however the recognizer wrote it.

A caller says "my phone number is 415 555 2671" on a narrowband line, and Whisper writes
``My phone number in 4-1 time, time time time, 2-6-7-1``: two digit runs, neither of the
shape of a phone number, with misheard digits between them. Read one by one, the runs are
nothing; a compliance officer reads the cue ("phone number") and protects what follows it.
``cued_values`` does the same: a digit run that starts at most ``CUE_REACH_WORDS`` spoken words
after a cue (``context.CUES``: the words that name a value, not the weaker keywords), with no
other value's keyword between them, begins a value of the cue's entity type; the runs after it
join it while

- at most ``MAX_GAP_WORDS`` spoken words stand between two of them (the misheard digits, which
  belong to the value: they are redacted with it), and both sides of a gap longer than
  ``SHORT_GAP_WORDS`` have at least ``MIN_JOINED_DIGITS`` digits,
- no keyword of another entity type, and no sentence end, stands between them,
- the value is not whole yet (``whole``: a Luhn-valid card number, nine SSN digits, a valid
  phone number…), so that an ordinary number after a complete value stays,
- and the run is nothing else of its own (a card number read straight after a phone number).

The caller (``detectors.find_entities``) redacts a cued value of at least ``MIN_CUED_DIGITS``
digits as one span, from its first run to its last, whatever its length or grouping. The
hold (``detectors.unfinished_run``) uses the same values to tell that the next final may go on
with the number.

Pure: the same words give the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeline.contracts.messages import EntityType
from pipeline.redaction.context import CONTEXT_WORDS_BEFORE, cue_before, keywords_within
from pipeline.redaction.numbers import DigitRun

__all__ = [
    "CUE_REACH_WORDS",
    "MAX_GAP_WORDS",
    "MIN_CUED_DIGITS",
    "MIN_JOINED_DIGITS",
    "SHORT_GAP_WORDS",
    "CuedValue",
    "cued_values",
    "ends_sentence",
]

CUE_REACH_WORDS = CONTEXT_WORDS_BEFORE
"""A cued value starts at most this many spoken words after its cue (``my social security
number is uh it's near-rof-ine, 1120``)."""
MAX_GAP_WORDS = 4
"""Spoken words between two runs of one value: misheard digits (``time, time time time,``)."""
MIN_JOINED_DIGITS = 2
"""Across a gap of more than ``SHORT_GAP_WORDS``, a value and the next run join only if both
have this many digits: a count, its unit and more words (``my phone broke seven times, the
screen 45 days ago``) are no misheard number."""
SHORT_GAP_WORDS = 2
"""A digit or two heard as other words (``4 fix -2, 3 -7``): joins whatever the digits."""
MIN_CUED_DIGITS = 3
"""A cued value of fewer digits is no value (``my phone is 2 years old``); partials mask even
those (they cannot know what follows)."""

_SENTENCE_END = (".", "?", "!", "…")


@dataclass(frozen=True, slots=True)
class CuedValue:
    """Digit runs (in order) that spell one value of ``entity``, announced by its cue."""

    entity: EntityType
    runs: tuple[DigitRun, ...]

    @property
    def first(self) -> int:
        return self.runs[0].first

    @property
    def last(self) -> int:
        return self.runs[-1].last

    @property
    def digits(self) -> str:
        return "".join(run.digits for run in self.runs)


def ends_sentence(word: str) -> bool:
    """Whether Whisper ended a sentence with ``word`` (``1120.``, ``time?``)."""
    return word.rstrip("\"')]}").endswith(_SENTENCE_END)


def cued_values(
    words: Sequence[str],
    lowered: Sequence[str],
    positions: Sequence[int],
    runs: Sequence[DigitRun],
    claimed: Sequence[frozenset[EntityType]],
    whole: Callable[[EntityType, str], bool],
) -> list[CuedValue]:
    """The cued values among ``runs`` (``words`` as Whisper wrote them, ``lowered`` bare,
    ``positions`` from ``numbers.spoken_positions``), in order; ``claimed[i]``: the entity
    types run ``i`` is on its own (``detectors``), ``whole(entity, digits)``: whether the digits
    are a complete value of that type. Values of any number of digits are returned."""
    values: list[CuedValue] = []
    current: CuedValue | None = None
    for run, own in zip(runs, claimed, strict=True):
        if current is not None and _continues(current, run, own, words, lowered, positions, whole):
            current = CuedValue(current.entity, (*current.runs, run))
            continue
        if current is not None:
            values.append(current)
            current = None
        cue = cue_before(lowered, positions, run.first, CUE_REACH_WORDS)
        if cue is not None and own <= {cue[0]}:
            current = CuedValue(cue[0], (run,))
    if current is not None:
        values.append(current)
    return values


def _continues(
    value: CuedValue,
    run: DigitRun,
    own: frozenset[EntityType],
    words: Sequence[str],
    lowered: Sequence[str],
    positions: Sequence[int],
    whole: Callable[[EntityType, str], bool],
) -> bool:
    previous = value.last
    gap_words = positions[run.first] - positions[previous] - 1
    return (
        own <= {value.entity}
        and not whole(value.entity, value.digits)
        and gap_words <= MAX_GAP_WORDS
        and (
            gap_words <= SHORT_GAP_WORDS
            or min(len(value.digits), len(run.digits)) >= MIN_JOINED_DIGITS
        )
        and not any(ends_sentence(word) for word in words[previous : run.first])
        and not keywords_within(lowered, previous + 1, run.first - 1) - {value.entity}
    )
