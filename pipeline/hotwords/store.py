"""Hotword lists in Redis: the thin I/O shell used by the CLI (writes) and workers (reads).

Every change is one Lua script, so it is atomic: it edits the list's hash, refreshes a call
list's TTL, enforces :data:`~pipeline.hotwords.model.MAX_ENTRIES_PER_LIST`, increments the
version counter and publishes a :class:`~pipeline.hotwords.model.ChangeNotice` carrying the new
version, all or nothing. Readers therefore never see a change without its notice, and the
version counter tells a reader that missed notices (while disconnected) that it must reload.

Redis errors surface as :class:`~pipeline.errors.InfrastructureError`; invalid input as
:class:`~pipeline.errors.ConfigError`, raised before anything is sent (except a list that would
grow past the limit: the script finds that out, atomically, and changes nothing).

Reads never fail on what is stored: lists are read as bytes and parsed field by field
(:func:`~pipeline.hotwords.model.read_hash`), so a key of the wrong type, a field that is not
UTF-8 or not valid, or a version counter that is not an integer (all only possible by hand
edits) is left out and reported to ``on_problem`` (default: a logged warning), and the other
lists load as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.backoff import NoBackoff
from redis.client import NEVER_DECODE
from redis.retry import Retry

from pipeline.clock import Clock, WallClock
from pipeline.errors import ConfigError, InfrastructureError
from pipeline.hotwords.catalog import HotwordList
from pipeline.hotwords.model import (
    DEFAULT_BOOST,
    MAX_ENTRIES_PER_LIST,
    ChangeAction,
    HotwordKeys,
    ListRef,
    normalize_phrase,
    parse_boost,
    parse_version,
    quote_stored,
    read_hash,
)
from pipeline.settings import mask_url_passwords

__all__ = ["ChangeResult", "HotwordStore", "ProblemListener", "connect"]

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 2.0

ProblemListener = Callable[[str], None]
"""Told one line per piece of stored data that a read left out (a bad key, field or counter)."""

# Replies of these reads stay bytes, whatever the client decodes: text is decoded field by field.
_RAW: dict[str, Any] = {NEVER_DECODE: True}

# KEYS: list key, version key. ARGV: channel, max entries, ttl s (0 = none), tenant, call id
# ("" = tenant list), then phrase, boost pairs. Returns {new version, entries} or {-1, entries}
# when the list would exceed max entries (nothing changed then).
_ADD = """
local fresh = 0
for i = 6, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then fresh = fresh + 1 end
end
local size = redis.call('HLEN', KEYS[1])
if size + fresh > tonumber(ARGV[2]) then return {-1, size} end
for i = 6, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3])) end
local version = redis.call('INCR', KEYS[2])
local call = cjson.null
if ARGV[5] ~= '' then call = ARGV[5] end
redis.call('PUBLISH', ARGV[1], cjson.encode({schema = 'hotwords_change/1', tenant = ARGV[4],
  call_id = call, action = 'add', version = version}))
return {version, redis.call('HLEN', KEYS[1])}
"""

# KEYS: list key, version key. ARGV: channel, action ("remove" / "clear"), tenant, call id,
# TTL in s (0: none; a call list's expiry restarts on every change), then the phrases to remove
# (none for clear). Returns {new version or 0 if unchanged, removed}.
_REMOVE = """
local removed = 0
if ARGV[2] == 'clear' then
  removed = redis.call('HLEN', KEYS[1])
  redis.call('DEL', KEYS[1])
else
  for i = 6, #ARGV do removed = removed + redis.call('HDEL', KEYS[1], ARGV[i]) end
end
if removed == 0 then return {0, 0} end
if tonumber(ARGV[5]) > 0 and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('EXPIRE', KEYS[1], tonumber(ARGV[5]))
end
local version = redis.call('INCR', KEYS[2])
local call = cjson.null
if ARGV[4] ~= '' then call = ARGV[4] end
redis.call('PUBLISH', ARGV[1], cjson.encode({schema = 'hotwords_change/1', tenant = ARGV[3],
  call_id = call, action = ARGV[2], version = version}))
return {version, removed}
"""


def connect(url: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> redis.Redis:
    """A Redis client (connection pool) with bounded connect/read timeouts, text replies.

    redis-py's own retries are off (its default sleeps up to 10 s between three tries): a
    command fails fast with ``InfrastructureError`` and the caller's policy decides (the
    registry reconnects with its own backoff; the CLI reports and exits).
    """
    try:
        return redis.Redis.from_url(
            url,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            decode_responses=True,
            health_check_interval=max(1, int(timeout_s * 5)),
            retry=Retry(NoBackoff(), 0),
        )
    except ValueError as error:
        masked = mask_url_passwords(url)
        # redis-py's message may quote part of a password it misread as a port: not shown then.
        why = (
            str(error)
            if masked == url
            else "cannot parse it (a '/', '?', '#' or '@' in the password must be percent-encoded)"
        )
        raise ConfigError(f"bad Redis URL {masked!r}: {why}") from None


@dataclass(frozen=True, slots=True)
class ChangeResult:
    """What one change did: the version after it (None when nothing changed), how many
    entries it added/updated or removed, and the list's size afterwards."""

    version: int | None
    affected: int
    size: int


class HotwordStore:
    """Reads and writes hotword lists; one instance per process, thread-safe (redis-py pool).

    ``client`` is one of :func:`connect`'s (reads work with any ``decode_responses``).
    ``on_problem`` is told, one line each, what reads leave out (default: logged warnings).
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: HotwordKeys | None = None,
        *,
        call_ttl_s: int = 86400,
        clock: Clock | None = None,
        on_problem: ProblemListener | None = None,
    ) -> None:
        if call_ttl_s < 0:
            raise ConfigError(f"call_ttl_s must be >= 0, got {call_ttl_s}")
        self._client = client
        self._keys = keys or HotwordKeys()
        self._call_ttl_s = call_ttl_s
        self._clock = clock or WallClock()
        self._on_problem = on_problem or _log_problem
        self._add = client.register_script(_ADD)
        self._remove = client.register_script(_REMOVE)

    @property
    def keys(self) -> HotwordKeys:
        return self._keys

    @property
    def client(self) -> redis.Redis:
        return self._client

    # -- writes ------------------------------------------------------------------------------

    def add(
        self, ref: ListRef, phrases: Sequence[str], boost: float = DEFAULT_BOOST
    ) -> ChangeResult:
        """Add phrases (or update their boost); all or nothing.

        Raises ConfigError for an invalid phrase, boost, tenant or call id, or when the list
        would hold more than ``MAX_ENTRIES_PER_LIST`` entries.
        """
        ref.validated()
        entries = _dedupe(normalize_phrase(p) for p in phrases)
        if not entries:
            raise ConfigError("no hotword phrase given")
        boost = parse_boost(boost)
        if len(entries) > MAX_ENTRIES_PER_LIST:
            raise ConfigError(
                f"{len(entries)} phrases given, a list holds at most {MAX_ENTRIES_PER_LIST}"
            )
        ttl_s = self._call_ttl_s if ref.call_id is not None else 0
        args: list[Any] = [
            self._keys.channel,
            MAX_ENTRIES_PER_LIST,
            ttl_s,
            ref.tenant,
            ref.call_id or "",
        ]
        for phrase in entries:
            args.extend((phrase, repr(boost)))
        version, size = self._run(self._add, ref, args)
        if version < 0:
            raise ConfigError(
                f"{ref.describe()}: list has {size} entries; adding {len(entries)} new would "
                f"exceed {MAX_ENTRIES_PER_LIST}"
            )
        return ChangeResult(version, len(entries), size)

    def remove(self, ref: ListRef, phrases: Sequence[str]) -> ChangeResult:
        """Remove phrases; ones not in the list are ignored (``affected`` counts the rest)."""
        ref.validated()
        entries = _dedupe(normalize_phrase(p) for p in phrases)
        if not entries:
            raise ConfigError("no hotword phrase given")
        return self._delete(ref, ChangeAction.REMOVE, entries)

    def clear(self, ref: ListRef) -> ChangeResult:
        """Delete the whole list (``affected`` = entries it had)."""
        ref.validated()
        return self._delete(ref, ChangeAction.CLEAR, [])

    def _delete(self, ref: ListRef, action: ChangeAction, phrases: list[str]) -> ChangeResult:
        ttl_s = self._call_ttl_s if ref.call_id is not None else 0
        args = [self._keys.channel, action.value, ref.tenant, ref.call_id or "", ttl_s, *phrases]
        version, removed = self._run(self._remove, ref, args)
        size = self._call(lambda: int(cast(Any, self._client.hlen(self._keys.key(ref)))))
        return ChangeResult(version or None, removed, size)

    def _run(self, script: Any, ref: ListRef, args: list[Any]) -> tuple[int, int]:
        keys = [self._keys.key(ref), self._keys.version]
        try:
            result = self._call(lambda: script(keys=keys, args=args))
        except InfrastructureError as error:
            raise _explained(error, ref, keys) from error.__cause__
        return int(result[0]), int(result[1])

    # -- reads -------------------------------------------------------------------------------

    def version(self) -> int | None:
        """The version counter (0 before the first change), or None when it holds something
        other than an integer (reported to ``on_problem``): unknown, so compare it with nothing.
        """
        key = self._keys.version
        try:
            raw = self._call(lambda: self._client.execute_command("GET", key, **_RAW))
        except InfrastructureError as error:
            if not isinstance(error.__cause__, redis.ResponseError):
                raise
            # Redis answered (e.g. WRONGTYPE: the key was overwritten by hand): it is up.
            self._on_problem(f"version counter {key!r} cannot be read ({error}): unknown")
            return None
        version = parse_version(raw)
        if version is None:
            shown = quote_stored(raw)
            self._on_problem(f"version counter {key!r} is not an integer ({shown}): unknown")
        return version

    def read(self, ref: ListRef) -> HotwordList:
        """One list as it is now (empty entries when it does not exist or cannot be read)."""
        return self._read_lists([ref])[0]

    def read_all(self) -> tuple[int | None, list[HotwordList]]:
        """The version counter (see :meth:`version`), then every tenant and call list that has
        entries (SCAN, then one pipeline).

        The version is read first: a change that lands during the scan bumps it past the
        returned value, so a reader comparing versions later reloads again.
        """
        version = self.version()
        refs = [
            ref
            for pattern in (self._keys.tenant_pattern, self._keys.call_pattern)
            for ref in self._scan(pattern)
        ]
        return version, [item for item in self._read_lists(refs) if item.entries]

    def _read_lists(self, refs: Sequence[ListRef]) -> list[HotwordList]:
        """The lists ``refs`` name, in order, read as bytes in one pipeline (no MULTI: EXEC's
        reply would be decoded whole). A key that cannot be read as a hash is an empty list."""
        if not refs:
            return []
        with self._client.pipeline(transaction=False) as pipe:
            for ref in refs:
                key = self._keys.key(ref)
                pipe.execute_command("HGETALL", key, **_RAW)
                pipe.pttl(key)
            replies = self._call(lambda: pipe.execute(raise_on_error=False))
        lists = []
        for index, ref in enumerate(refs):
            raw, ttl_ms = replies[2 * index], replies[2 * index + 1]
            where = f"{ref.describe()} (key {self._keys.key(ref)!r})"
            if isinstance(raw, redis.ResponseError) or not isinstance(raw, dict):
                self._on_problem(f"{where} is not a hotword list, skipped: {raw}")
                raw = {}
            reading = read_hash(raw)
            for line in reading.skipped:
                self._on_problem(f"{where}: skipped {line}")
            ttl_ms = ttl_ms if isinstance(ttl_ms, int) else -1
            expires_at_ms = self._clock.now_ms() + ttl_ms if ttl_ms > 0 else None
            lists.append(HotwordList(ref, reading.entries, expires_at_ms))
        return lists

    def _scan(self, pattern: str) -> Iterator[ListRef]:
        raw_keys = self._call(
            lambda: list(self._client.scan_iter(match=pattern, count=500, **_RAW))
        )
        for raw_key in raw_keys:
            try:
                key = raw_key.decode("utf-8") if isinstance(raw_key, bytes) else raw_key
            except UnicodeDecodeError:
                continue  # not one of ours: list keys are ASCII
            ref = self._keys.parse_key(key)
            if ref is not None:
                yield ref

    def _call(self, action: Any) -> Any:
        try:
            return action()
        except redis.RedisError as error:
            raise InfrastructureError(f"Redis: {_one_line(error)}") from error
        except ValueError as error:  # incl. UnicodeDecodeError: a reply this code cannot parse
            raise InfrastructureError(f"Redis: unexpected reply: {_one_line(error)}") from error


def _log_problem(line: str) -> None:
    logger.warning("hotwords: %s", line)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def _explained(error: InfrastructureError, ref: ListRef, keys: list[str]) -> InfrastructureError:
    """A script's Redis error, in terms of the key a hand edit broke when that is the cause."""
    cause = error.__cause__
    if not isinstance(cause, redis.ResponseError):
        return error
    text = str(cause)
    if "WRONGTYPE" in text:
        return InfrastructureError(
            f"{ref.describe()}: Redis key {keys[0]!r} is not a hotword list (a hash); "
            f"inspect it, then delete it with redis-cli DEL to start the list afresh"
        )
    if "not an integer" in text:
        return InfrastructureError(
            f"the hotword version counter {keys[1]!r} is not an integer; reset it with "
            f"redis-cli SET {keys[1]} <a number above its last value>"
        )
    return error


def _dedupe(phrases: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(phrases))
