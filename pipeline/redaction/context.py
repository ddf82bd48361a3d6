"""Context: the words near a number that say what it is.

``card number is 4111…``, ``the code on the back is 737``, ``my social is …``: each entity type
that is only recognizable in context has keywords. ``nearest_contexts`` reports, for the words
around a span, which entity types' keywords occur and how far before the span the nearest one
is (keywords after the span count when none is before, farther than any before). The nearest
wins: in ``security code is 737 and the expiry is 03 27`` the 737 is a code and the 03 27 an
expiry.

``CUES`` are the keywords that name a value (``phone number``, ``social security``): what
follows a cue is that value however the recognizer wrote it (``cued``); ``cue_before`` finds
the nearest one.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.contracts.messages import EntityType

__all__ = [
    "CONTEXT_WORDS_AFTER",
    "CONTEXT_WORDS_BEFORE",
    "CUES",
    "KEYWORDS",
    "cue_before",
    "keywords_within",
    "nearest_contexts",
]

CONTEXT_WORDS_BEFORE = 8
CONTEXT_WORDS_AFTER = 3

KEYWORDS: dict[EntityType, tuple[str, ...]] = {
    EntityType.CARD_NUMBER: (
        "card",
        "cards",
        "visa",
        "mastercard",
        "amex",
        "american express",
        "discover",
        "credit",
        "debit",
        "long number",
    ),
    EntityType.CVV: (
        "cvv",
        "cvc",
        "csc",
        "cvv2",
        "cid",
        "security code",
        "verification",
        "code",
        "three digits",
        "three digit",
        "four digit code",
        "on the back",
        "pin",
    ),
    EntityType.EXPIRY: (
        "expiry",
        "expiration",
        "expires",
        "expire",
        "expired",
        "exp",
        "valid thru",
        "valid through",
        "valid until",
        "good thru",
        "good through",
        "end date",
    ),
    EntityType.SSN: ("social", "ssn", "s s n", "social security", "taxpayer", "tax id"),
    EntityType.ROUTING_NUMBER: ("routing", "aba", "transit number", "sort code"),
    EntityType.BANK_ACCOUNT: (
        "account",
        "accounts",
        "acct",
        "iban",
        "checking",
        "savings",
        "bank",
    ),
    EntityType.PHONE: (
        "phone",
        "telephone",
        "call",
        "reach",
        "mobile",
        "cell",
        "cellphone",
        "text",
        "fax",
        "contact",
        "dial",
        "landline",
        "extension",
    ),
    EntityType.DATE_OF_BIRTH: ("birth", "born", "birthday", "dob", "d o b"),
}
CUES: dict[EntityType, tuple[str, ...]] = {
    EntityType.CARD_NUMBER: (
        "card number",
        "card no",
        "credit card",
        "debit card",
        "long number",
        "visa",
        "mastercard",
        "amex",
        "american express",
    ),
    EntityType.CVV: (
        "security code",
        "verification code",
        "cvv",
        "cvc",
        "csc",
        "cvv2",
        "three digits",
        "on the back",
    ),
    # Every keyword of these types names the value.
    EntityType.EXPIRY: KEYWORDS[EntityType.EXPIRY],
    EntityType.SSN: KEYWORDS[EntityType.SSN],
    EntityType.ROUTING_NUMBER: KEYWORDS[EntityType.ROUTING_NUMBER],
    EntityType.BANK_ACCOUNT: (
        "account number",
        "bank account",
        "checking account",
        "savings account",
        "iban",
    ),
    EntityType.PHONE: (
        "phone",
        "telephone",
        "mobile number",
        "cell number",
        "cellphone",
        "landline",
        "fax number",
        "callback number",
        "contact number",
    ),
}
"""The keywords that name a value, so that what follows them is that value however the
recognizer wrote it (``detectors``, the cued values): weaker keywords such as ``call``, ``code``
or ``account`` only help a number that has the shape of the value (``KEYWORDS``)."""

_NOT_A_SECURITY_CODE = frozenset(
    {"zip", "area", "postal", "post", "promo", "discount", "confirmation", "tracking", "coupon"}
)
"""``code`` after these is no card security code (``zip code``, ``area code``)."""

_PHRASES: list[tuple[EntityType, tuple[str, ...]]] = [
    (entity, tuple(keyword.split()))
    for entity, keywords in KEYWORDS.items()
    for keyword in keywords
]


_CUE_PHRASES: list[tuple[EntityType, tuple[str, ...]]] = sorted(
    ((entity, tuple(cue.split())) for entity, cues in CUES.items() for cue in cues),
    key=lambda item: -len(item[1]),
)
"""Longest first: ``social security`` is found before ``social``."""
_LONGEST_CUE_WORDS = len(_CUE_PHRASES[0][1])


def _matches_at(lowered: Sequence[str], index: int, phrase: tuple[str, ...]) -> bool:
    if index + len(phrase) > len(lowered):
        return False
    if any(lowered[index + k] != part for k, part in enumerate(phrase)):
        return False
    return not (phrase == ("code",) and index > 0 and lowered[index - 1] in _NOT_A_SECURITY_CODE)


def nearest_contexts(
    lowered: Sequence[str],
    first: int,
    last: int,
    before: int = CONTEXT_WORDS_BEFORE,
    after: int = CONTEXT_WORDS_AFTER,
    positions: Sequence[int] | None = None,
) -> list[EntityType]:
    """Entity types whose keywords occur within ``before`` words before ``first`` or ``after``
    words after ``last`` (``lowered``: bare words), nearest first.

    Distances are in spoken words: ``positions`` (``numbers.spoken_positions``; by default each
    word its own) maps each of Whisper's words to the spoken word it is part of, so that the
    pieces of a hyphenated mishearing (``near``, ``-rof``, ``-envate,``) or of digits glued one
    by one (``1``, ``-1``, ``-2``, ``-0``) do not push the keyword out of reach."""
    at = positions if positions is not None else range(len(lowered))
    distances: dict[EntityType, int] = {}
    for index in range(first - 1, -1, -1):
        if at[first] - at[index] > before:
            break
        for entity, phrase in _PHRASES:
            if _matches_at(lowered, index, phrase):
                distance = at[first] - at[index + len(phrase) - 1]
                distances[entity] = min(distances.get(entity, distance), distance)
    for index in range(last + 1, len(lowered)):
        if at[index] - at[last] > after:
            break
        for entity, phrase in _PHRASES:
            if entity not in distances and _matches_at(lowered, index, phrase):
                distances[entity] = before + at[index] - at[last]
    return sorted(distances, key=lambda entity: (distances[entity], list(KEYWORDS).index(entity)))


def keywords_within(lowered: Sequence[str], first: int, last: int) -> set[EntityType]:
    """The entity types whose keywords start among the words ``first..last``."""
    return {
        entity
        for index in range(max(0, first), min(last + 1, len(lowered)))
        for entity, phrase in _PHRASES
        if _matches_at(lowered, index, phrase)
    }


def cue_before(
    lowered: Sequence[str], positions: Sequence[int], first: int, reach: int
) -> tuple[EntityType, int] | None:
    """The nearest cue (``CUES``) that ends at most ``reach`` spoken words before word
    ``first`` (``first == len(lowered)``: the end of the words), with no keyword of another
    entity type between them: its entity type and the index of its last word. None when there
    is none."""
    at = (*positions, positions[-1] + 1 if positions else 0)
    for index in range(first - 1, -1, -1):
        if at[first] - at[index] > reach + _LONGEST_CUE_WORDS:
            break
        for entity, phrase in _CUE_PHRASES:
            end = index + len(phrase) - 1
            if end >= first or at[first] - at[end] > reach:
                continue
            if _matches_at(lowered, index, phrase):
                if keywords_within(lowered, end + 1, first - 1) - {entity}:
                    return None  # another value's keyword stands nearer
                return entity, end
    return None
