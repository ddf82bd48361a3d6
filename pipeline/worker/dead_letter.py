"""A dead letter that always fits its topic: the refused record, cut to a budget where needed.

A dead letter is the original record (key, value, headers) plus the ``dlq-*`` headers of
``DeadLetterInfo``. It is produced in the worker's transaction: one the producer refuses as too
large fails the whole transaction, whose rewind reads the same record and fails again, forever.
So every part the sender controls is bounded here, and each cut says so in a header:

- the value to ``max_value_bytes`` (``dlq-truncated-from-bytes``: its length before);
- the key to :data:`MAX_KEY_BYTES` (``dlq-key-truncated-from-bytes``);
- the original headers, together, to :data:`MAX_HEADER_BYTES` (names, values and per-header
  overhead), kept in order
  (the one that crosses the budget cut to what is left, those after it dropped;
  ``dlq-headers-truncated-from-bytes``: their size before).

Records far beyond what ``audio.chunks`` accepts are the only ones cut (a producer that
compresses can get past the topic's limit); the ``dlq-*`` headers are never cut. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "DEAD_LETTER_MAX_BYTES",
    "DEAD_LETTER_MAX_VALUE_BYTES",
    "HEADER_OVERHEAD_BYTES",
    "MAX_HEADER_BYTES",
    "MAX_KEY_BYTES",
    "DeadLetterRecord",
    "fit_dead_letter",
]

DEAD_LETTER_MAX_BYTES = 2 * 1024 * 1024
"""``max.message.bytes`` of ``audio.dlq`` (topics.toml), twice that of ``audio.chunks``: any record
the audio topic accepted fits, with its ``dlq-*`` headers, and the transactional producer's
``message.max.bytes`` is the same, so a dead letter is never refused on its way out."""

DEAD_LETTER_MAX_VALUE_BYTES = DEAD_LETTER_MAX_BYTES - 64 * 1024
"""A dead letter's value is cut to this many bytes (headers and record overhead keep the rest):
only a record far beyond what ``audio.chunks`` accepts (uncompressed, say) is ever cut."""

MAX_KEY_BYTES = 1024
"""A dead letter's key is cut to this (call ids are at most 128 bytes; a longer key was refused
as ``bad_key``, and its first kilobyte says what it was)."""

MAX_HEADER_BYTES = 32 * 1024
"""The original headers, together, are cut to this: names, values and each header's
:data:`HEADER_OVERHEAD_BYTES` (so many empty headers count too)."""

HEADER_OVERHEAD_BYTES = 10
"""What a header adds to a record's size beyond its name and value: two varint lengths of up to
5 bytes each, which the producer counts against ``message.max.bytes``."""

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    key: bytes | None
    value: bytes | None
    headers: list[Header]


def fit_dead_letter(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header],
    appended: Sequence[Header],
    max_value_bytes: int,
) -> DeadLetterRecord:
    """The dead letter of a record with ``key``, ``value`` and ``headers``: those cut to their
    budgets, then ``appended`` (the ``dlq-*`` headers, whole) and a header for each cut."""
    notes: list[Header] = []
    if value is not None and len(value) > max_value_bytes:
        notes.append(("dlq-truncated-from-bytes", str(len(value)).encode()))
        value = value[:max_value_bytes]
    if key is not None and len(key) > MAX_KEY_BYTES:
        notes.append(("dlq-key-truncated-from-bytes", str(len(key)).encode()))
        key = key[:MAX_KEY_BYTES]
    kept = list(headers)
    size = sum(_size(name, header_value) for name, header_value in kept)
    if size > MAX_HEADER_BYTES:
        notes.append(("dlq-headers-truncated-from-bytes", str(size).encode()))
        kept = _cut(kept, MAX_HEADER_BYTES)
    return DeadLetterRecord(key, value, [*kept, *appended, *notes])


def _size(name: str, value: bytes | None) -> int:
    return (
        HEADER_OVERHEAD_BYTES + len(name.encode("utf-8", "replace")) + (len(value) if value else 0)
    )


def _cut(headers: list[Header], budget: int) -> list[Header]:
    kept: list[Header] = []
    for name, value in headers:
        room = budget - HEADER_OVERHEAD_BYTES - len(name.encode("utf-8", "replace"))
        if room < 0:
            break
        if value is not None and len(value) > room:
            kept.append((name, value[:room]))
            break
        kept.append((name, value))
        budget = room - (len(value) if value else 0)
    return kept
