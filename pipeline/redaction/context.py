"""Context: the words near a number that say what it is.

``card number is 4111…``, ``the code on the back is 737``, ``my social is …``: each entity type
that is only recognizable in context has keywords. ``nearest_contexts`` reports, for the words
around a span, which entity types' keywords occur and how far before the span the nearest one
is (keywords after the span count when none is before, farther than any before). The nearest
wins: in ``security code is 737 and the expiry is 03 27`` the 737 is a code and the 03 27 an
expiry.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.contracts.messages import EntityType

__all__ = ["CONTEXT_WORDS_AFTER", "CONTEXT_WORDS_BEFORE", "KEYWORDS", "nearest_contexts"]

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
_NOT_A_SECURITY_CODE = frozenset(
    {"zip", "area", "postal", "post", "promo", "discount", "confirmation", "tracking", "coupon"}
)
"""``code`` after these is no card security code (``zip code``, ``area code``)."""

_PHRASES: list[tuple[EntityType, tuple[str, ...]]] = [
    (entity, tuple(keyword.split()))
    for entity, keywords in KEYWORDS.items()
    for keyword in keywords
]


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
) -> list[EntityType]:
    """Entity types whose keywords occur within ``before`` words before ``first`` or ``after``
    words after ``last`` (``lowered``: bare words), nearest first."""
    distances: dict[EntityType, int] = {}
    start = max(0, first - before)
    for index in range(start, first):
        for entity, phrase in _PHRASES:
            if _matches_at(lowered, index, phrase):
                distance = first - index - len(phrase) + 1
                distances[entity] = min(distances.get(entity, distance), distance)
    for index in range(last + 1, min(len(lowered), last + 1 + after)):
        for entity, phrase in _PHRASES:
            if entity not in distances and _matches_at(lowered, index, phrase):
                distances[entity] = before + index - last
    return sorted(distances, key=lambda entity: (distances[entity], list(KEYWORDS).index(entity)))
