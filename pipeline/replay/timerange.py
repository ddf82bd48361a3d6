"""What to replay: a time range of record timestamps and/or a set of call ids (pure parsing).

Times (``--from`` / ``--to``) are Kafka record timestamps, in any of these forms:

- epoch milliseconds: ``1717236000000`` (12 digits or more; ``1717236000``, epoch seconds,
  is refused);
- ISO 8601: ``2024-06-01T10:00:00Z``, ``2024-06-01 10:00:00+02:00``, ``2024-06-01``,
  ``20240601`` (without an offset the time is UTC);
- relative to now: ``now``, ``-15m``, ``-2h``, ``-1d``, ``-90s``, ``-500ms`` (on the command line
  with ``=``: ``--from=-2h``, or argparse takes ``-2h`` for an option).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from pipeline.errors import ConfigError

__all__ = ["ReplayRange", "parse_calls", "parse_time", "replay_range"]

_RELATIVE = re.compile(r"^-(\d+)(ms|s|m|h|d)$")
_EPOCH_MS_MIN_DIGITS = 13
"""Epoch milliseconds from 1973-03-03 on; shorter digit strings are read as ISO 8601."""
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True, slots=True)
class ReplayRange:
    """Records with ``from_ms <= timestamp < to_ms`` (None: from the oldest / to the newest
    record at start) of the calls in ``calls`` (empty: every call)."""

    from_ms: int | None
    to_ms: int | None
    calls: tuple[str, ...]


def parse_time(text: str, now_ms: int, flag: str = "--from") -> int:
    """Epoch milliseconds of ``text`` (see the module docstring for the accepted forms).

    Raises:
        ConfigError: the text is none of them.
    """
    value = text.strip()
    digits = value.isascii() and value.isdigit()
    if digits and len(value) >= _EPOCH_MS_MIN_DIGITS:
        return int(value)
    # Fewer digits are a basic ISO 8601 date (20240601) or epoch seconds by mistake, never a
    # moment of 1970's first days: read as milliseconds they would replay the whole retention.
    if value == "now":
        return now_ms
    relative = _RELATIVE.match(value)
    if relative:
        return now_ms - int(relative.group(1)) * _UNIT_MS[relative.group(2)]
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        if digits and len(value) == 10:
            raise ConfigError(
                f"{flag} {text!r}: epoch milliseconds have 13 digits (epoch seconds? add 000)"
            ) from None
        raise ConfigError(
            f"{flag} {text!r}: use epoch ms, ISO 8601 (2024-06-01T10:00:00Z), now, or -15m / -2h"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def parse_calls(text: str | None) -> tuple[str, ...]:
    """``ID,ID,…`` → sorted distinct call ids (empty text: no filter)."""
    if not text:
        return ()
    return tuple(sorted({call.strip() for call in text.split(",") if call.strip()}))


def replay_range(
    from_text: str | None, to_text: str | None, calls_text: str | None, now_ms: int
) -> ReplayRange:
    """The range the flags describe.

    Raises:
        ConfigError: neither a start time nor call ids, or an empty time range.
    """
    calls = parse_calls(calls_text)
    from_ms = parse_time(from_text, now_ms, "--from") if from_text else None
    to_ms = parse_time(to_text, now_ms, "--to") if to_text else None
    if from_ms is None and not calls:
        raise ConfigError("say what to replay: --from TIME (and --to TIME) and/or --calls ID,…")
    if from_ms is not None and to_ms is not None and to_ms <= from_ms:
        raise ConfigError(f"--to ({to_ms}) must be after --from ({from_ms})")
    return ReplayRange(from_ms, to_ms, calls)
