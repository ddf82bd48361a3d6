"""Hotword lists as data: entries, list references, limits, validation, Redis names, notices.

Pure: no Redis here. The layout in Redis (``docs/hotwords.md``), under a key prefix ``P``
(default ``ss:hotwords``)::

    P:tenant:{tenant}             hash  phrase → boost           the tenant's list
    P:call:{tenant}:{call_id}     hash  phrase → boost (+ TTL)   one call's list, merged over it
    P:version                     string counter                 +1 on every change, any list
    P:changes                     pub/sub channel                one JSON ChangeNotice per change

A phrase is stored as normalized by :func:`normalize_phrase` (case kept). A boost multiplies
the decoder's bonuses: 1.0 is the default, 0.0 keeps a phrase listed without biasing (a call
list can mute a tenant phrase that way), :data:`MAX_BOOST` is the most accepted.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import orjson

from pipeline.errors import ConfigError

__all__ = [
    "CHANGE_SCHEMA",
    "DEFAULT_BOOST",
    "DEFAULT_KEY_PREFIX",
    "MAX_BOOST",
    "MAX_CALL_ID_CHARS",
    "MAX_ENTRIES_PER_LIST",
    "MAX_PHRASE_CHARS",
    "MAX_PHRASE_WORDS",
    "MAX_TENANT_CHARS",
    "MIN_BOOST",
    "ChangeAction",
    "ChangeNotice",
    "HashReading",
    "Hotword",
    "HotwordKeys",
    "ListRef",
    "Scope",
    "entries_from_hash",
    "merge_entries",
    "normalize_phrase",
    "parse_boost",
    "parse_version",
    "quote_stored",
    "read_hash",
    "validate_call_id",
    "validate_tenant",
]

DEFAULT_KEY_PREFIX = "ss:hotwords"
CHANGE_SCHEMA = "hotwords_change/1"
MAX_TENANT_CHARS = 64
MAX_CALL_ID_CHARS = 128
MAX_PHRASE_CHARS = 64
MAX_PHRASE_WORDS = 8
MAX_ENTRIES_PER_LIST = 1000
MIN_BOOST = 0.0
MAX_BOOST = 2.0
DEFAULT_BOOST = 1.0

# The audio contract's label charset (ss-tenant, ss-channel): safe in keys and log lines.
_ID_CHARS = re.compile(r"[A-Za-z0-9._-]+")
_WHITESPACE = re.compile(r"\s+")
_COUNTER = re.compile(r"-?[0-9]{1,19}")
# How Whisper's special tokens are spelled (``<|endoftext|>``): never in a phrase.
_SPECIAL_MARK, _SPECIAL_END = "<|", "|>"


class Scope(enum.StrEnum):
    """Where a list applies (the values of ``asr_hotword_updates_total{scope}``)."""

    TENANT = "tenant"
    CALL = "call"


class ChangeAction(enum.StrEnum):
    """What a change did to its list."""

    ADD = "add"
    REMOVE = "remove"
    CLEAR = "clear"


def _validate_id(value: str, what: str, max_chars: int) -> str:
    if not value or len(value) > max_chars or not _ID_CHARS.fullmatch(value):
        raise ConfigError(f"{what} {value!r} must be 1..{max_chars} characters of [A-Za-z0-9._-]")
    return value


def validate_tenant(tenant: str) -> str:
    """``tenant`` unchanged, or ConfigError: 1..64 characters of ``[A-Za-z0-9._-]``."""
    return _validate_id(tenant, "tenant", MAX_TENANT_CHARS)


def validate_call_id(call_id: str) -> str:
    """``call_id`` unchanged, or ConfigError: 1..128 characters of ``[A-Za-z0-9._-]``.

    Calls whose id uses other characters (the audio contract allows any UTF-8) cannot have a
    call list; their tenant's list still applies.
    """
    return _validate_id(call_id, "call id", MAX_CALL_ID_CHARS)


def normalize_phrase(phrase: str) -> str:
    """The stored form of ``phrase``: whitespace runs collapsed to one space, ends stripped.

    Raises ConfigError when it is empty, has no letter or digit, has control characters, has
    ``<|`` or ``|>`` (Whisper's tokenizer reads ``<|endoftext|>`` and its kind in text as
    special tokens, which a hotword would then boost: ``stop<|endoftext|>`` cut transcripts
    after "stop"), is longer than :data:`MAX_PHRASE_CHARS` characters or has more than
    :data:`MAX_PHRASE_WORDS` words.
    """
    text = _WHITESPACE.sub(" ", phrase).strip()
    if not text:
        raise ConfigError("empty hotword phrase")
    if any(not ch.isprintable() for ch in text):
        raise ConfigError(f"hotword phrase {text!r} has control characters")
    if _SPECIAL_MARK in text or _SPECIAL_END in text:
        raise ConfigError(
            f"hotword phrase {text!r} has {_SPECIAL_MARK!r} or {_SPECIAL_END!r}: the model's "
            f"special tokens are spelled so"
        )
    if not any(ch.isalnum() for ch in text):
        raise ConfigError(f"hotword phrase {text!r} has no letter or digit")
    if len(text) > MAX_PHRASE_CHARS:
        raise ConfigError(
            f"hotword phrase {text[:20]!r}… is {len(text)} characters, at most {MAX_PHRASE_CHARS}"
        )
    words = len(text.split(" "))
    if words > MAX_PHRASE_WORDS:
        raise ConfigError(f"hotword phrase {text!r} has {words} words, at most {MAX_PHRASE_WORDS}")
    return text


def parse_boost(value: str | float) -> float:
    """A boost from text or a number, or ConfigError unless finite and in [0.0, 2.0]."""
    try:
        boost = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"boost must be a number, got {value!r}") from None
    if not math.isfinite(boost) or not MIN_BOOST <= boost <= MAX_BOOST:
        raise ConfigError(f"boost must be between {MIN_BOOST} and {MAX_BOOST}, got {value!r}")
    return boost


@dataclass(frozen=True, slots=True)
class Hotword:
    """One entry of a list: a normalized phrase and its boost."""

    phrase: str
    boost: float = DEFAULT_BOOST


@dataclass(frozen=True, slots=True)
class ListRef:
    """Names one list: a tenant's (``call_id`` None) or one call's of that tenant."""

    tenant: str
    call_id: str | None = None

    @property
    def scope(self) -> Scope:
        return Scope.TENANT if self.call_id is None else Scope.CALL

    @property
    def sort_key(self) -> tuple[str, str]:
        """Orders lists by tenant, the tenant's own list first, then its calls."""
        return (self.tenant, "" if self.call_id is None else ":" + self.call_id)

    def validated(self) -> ListRef:
        """Self, or ConfigError when the tenant or call id breaks its charset."""
        validate_tenant(self.tenant)
        if self.call_id is not None:
            validate_call_id(self.call_id)
        return self

    def describe(self) -> str:
        if self.call_id is None:
            return f"tenant {self.tenant}"
        return f"tenant {self.tenant} call {self.call_id}"


@dataclass(frozen=True, slots=True)
class HotwordKeys:
    """Redis names of the hotword data under one key prefix (one per environment)."""

    prefix: str = DEFAULT_KEY_PREFIX

    @property
    def version(self) -> str:
        return f"{self.prefix}:version"

    @property
    def channel(self) -> str:
        return f"{self.prefix}:changes"

    @property
    def tenant_pattern(self) -> str:
        """SCAN pattern of every tenant list."""
        return f"{self.prefix}:tenant:*"

    @property
    def call_pattern(self) -> str:
        """SCAN pattern of every call list."""
        return f"{self.prefix}:call:*"

    def key(self, ref: ListRef) -> str:
        if ref.call_id is None:
            return f"{self.prefix}:tenant:{ref.tenant}"
        return f"{self.prefix}:call:{ref.tenant}:{ref.call_id}"

    def parse_key(self, key: str) -> ListRef | None:
        """The list a key names, or None for a key that is not a valid list key."""
        tenant_head = f"{self.prefix}:tenant:"
        call_head = f"{self.prefix}:call:"
        if key.startswith(tenant_head):
            ref = ListRef(key[len(tenant_head) :])
        elif key.startswith(call_head):
            tenant, sep, call_id = key[len(call_head) :].partition(":")
            if not sep:
                return None
            ref = ListRef(tenant, call_id)
        else:
            return None
        try:
            return ref.validated()
        except ConfigError:
            return None


@dataclass(frozen=True, slots=True)
class ChangeNotice:
    """The pub/sub message of one change: which list, what happened, the version after it.

    Wire form (JSON): ``{"schema": "hotwords_change/1", "tenant": "acme", "call_id": null,
    "action": "add", "version": 42}``. The receiver re-reads the named list, so a notice
    received twice, or late, does no harm.
    """

    ref: ListRef
    action: ChangeAction
    version: int

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "schema": CHANGE_SCHEMA,
                "tenant": self.ref.tenant,
                "call_id": self.ref.call_id,
                "action": self.action.value,
                "version": self.version,
            }
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> ChangeNotice:
        """Parse a notice; raises ConfigError for anything that is not a valid one."""
        try:
            raw = orjson.loads(data)
            if not isinstance(raw, dict) or raw.get("schema") != CHANGE_SCHEMA:
                raise ValueError("not a hotwords_change/1 object")
            call_id = raw.get("call_id")
            ref = ListRef(str(raw["tenant"]), None if call_id is None else str(call_id))
            version = raw["version"]
            if not isinstance(version, int):
                raise ValueError("version must be an integer")
            return cls(ref.validated(), ChangeAction(raw["action"]), version)
        except (orjson.JSONDecodeError, KeyError, ValueError, ConfigError) as error:
            raise ConfigError(f"bad hotword change notice {data!r}: {error}") from None


@dataclass(frozen=True, slots=True)
class HashReading:
    """A list read from its Redis hash: the usable entries, sorted by phrase, and one line per
    field left out (why, for the operator who wrote it by hand)."""

    entries: tuple[Hotword, ...]
    skipped: tuple[str, ...] = ()


def read_hash(raw: Mapping[bytes, bytes] | Mapping[str, str]) -> HashReading:
    """Parse a list's hash, fields and values as Redis returned them (bytes, or text).

    Lists written by ``streamscribe hotwords`` are always valid; this guards against hand edits
    (``redis-cli HSET``) so that a bad field can never break a worker. A field is left out, and
    named in ``skipped``, when it or its boost is not UTF-8, its boost is not valid, or its
    phrase is not valid *or not already in stored form* (``" Acme  Corp"`` next to ``"Acme
    Corp"`` would be a second entry that ``remove "Acme Corp"`` cannot reach). Since every kept
    phrase is its own stored form and hash fields are unique, no phrase is kept twice. At most
    :data:`MAX_ENTRIES_PER_LIST` are kept: the first in phrase order, the rest skipped.
    """
    entries: list[Hotword] = []
    skipped: list[str] = []
    for raw_phrase, raw_boost in raw.items():
        try:
            phrase = _text(raw_phrase, "phrase")
            boost = parse_boost(_text(raw_boost, "boost"))
            stored = normalize_phrase(phrase)
            if stored != phrase:
                raise ConfigError(f"not in stored form {stored!r}")
        except ConfigError as error:
            skipped.append(f"field {quote_stored(raw_phrase)}: {error}")
            continue
        entries.append(Hotword(phrase, boost))
    entries.sort(key=lambda e: e.phrase)
    if len(entries) > MAX_ENTRIES_PER_LIST:
        over = len(entries) - MAX_ENTRIES_PER_LIST
        skipped.append(
            f"{over} field(s) from {entries[MAX_ENTRIES_PER_LIST].phrase!r} on: a list holds at "
            f"most {MAX_ENTRIES_PER_LIST} entries"
        )
        del entries[MAX_ENTRIES_PER_LIST:]
    return HashReading(tuple(entries), tuple(skipped))


def entries_from_hash(raw: Mapping[bytes, bytes] | Mapping[str, str]) -> tuple[Hotword, ...]:
    """The entries of :func:`read_hash` (the fields left out are dropped silently)."""
    return read_hash(raw).entries


def parse_version(raw: bytes | str | None) -> int | None:
    """The version counter from its Redis value: 0 when absent, None when it is not an integer
    (written by hand: the version is then unknown, and readers must reload on every check)."""
    if raw is None:
        return 0
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw
    # Only what Redis INCR itself accepts (int() would also take " 7", "1_0" or "٧").
    return int(text) if _COUNTER.fullmatch(text) else None


def _text(value: bytes | str, what: str) -> str:
    if isinstance(value, str):
        return value
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} is not UTF-8") from None


def quote_stored(value: bytes | str) -> str:
    """A stored value as a short one-line quotation: text as text, bytes that are not UTF-8 as
    bytes (``b'caf\\xe9'``), cut after 40 characters."""
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            return repr(value[:40]) + ("…" if len(value) > 40 else "")
    return repr(value[:40]) + ("…" if len(value) > 40 else "")


def merge_entries(tenant: Iterable[Hotword], call: Iterable[Hotword]) -> tuple[Hotword, ...]:
    """A call's effective list: the tenant's entries, then the call's (same phrase: call wins).

    Sorted by phrase, so equal lists compare (and hash) equal whatever their origin.
    """
    merged = {entry.phrase: entry for entry in tenant}
    merged.update((entry.phrase, entry) for entry in call)
    return tuple(sorted(merged.values(), key=lambda e: e.phrase))
