"""Hotword lists in Redis: the thin I/O shell used by the CLI (writes) and workers (reads).

Every change is one Lua script, so it is atomic: it edits the list's hash, refreshes a call
list's TTL, enforces :data:`~pipeline.hotwords.model.MAX_ENTRIES_PER_LIST`, increments the
version counter and publishes a :class:`~pipeline.hotwords.model.ChangeNotice` carrying the new
version, all or nothing. Readers therefore never see a change without its notice, and the
version counter tells a reader that missed notices (while disconnected) that it must reload.

Redis errors surface as :class:`~pipeline.errors.InfrastructureError`; invalid input as
:class:`~pipeline.errors.ConfigError`, raised before anything is sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis
from redis.backoff import NoBackoff
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
    entries_from_hash,
    normalize_phrase,
    parse_boost,
)

__all__ = ["ChangeResult", "HotwordStore", "connect"]

DEFAULT_TIMEOUT_S = 2.0

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
        raise ConfigError(f"bad Redis URL {url!r}: {error}") from None


@dataclass(frozen=True, slots=True)
class ChangeResult:
    """What one change did: the version after it (None when nothing changed), how many
    entries it added/updated or removed, and the list's size afterwards."""

    version: int | None
    affected: int
    size: int


class HotwordStore:
    """Reads and writes hotword lists; one instance per process, thread-safe (redis-py pool).

    ``client`` must return text (``decode_responses=True``), as :func:`connect`'s clients do.
    """

    def __init__(
        self,
        client: redis.Redis,
        keys: HotwordKeys | None = None,
        *,
        call_ttl_s: int = 86400,
        clock: Clock | None = None,
    ) -> None:
        if call_ttl_s < 0:
            raise ConfigError(f"call_ttl_s must be >= 0, got {call_ttl_s}")
        self._client = client
        self._keys = keys or HotwordKeys()
        self._call_ttl_s = call_ttl_s
        self._clock = clock or WallClock()
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
        result = self._call(lambda: script(keys=keys, args=args))
        return int(result[0]), int(result[1])

    # -- reads -------------------------------------------------------------------------------

    def version(self) -> int:
        """The version counter (0 before the first change)."""
        version: int = self._call(lambda: int(cast(Any, self._client.get(self._keys.version)) or 0))
        return version

    def read(self, ref: ListRef) -> HotwordList:
        """One list as it is now (empty entries when it does not exist)."""
        key = self._keys.key(ref)
        with self._client.pipeline(transaction=True) as pipe:
            pipe.hgetall(key)
            pipe.pttl(key)
            raw, ttl_ms = self._call(pipe.execute)
        return self._list(ref, raw, ttl_ms)

    def read_all(self) -> tuple[int, list[HotwordList]]:
        """The version counter, then every tenant and call list (SCAN, then one pipeline).

        The version is read first: a change that lands during the scan bumps it past the
        returned value, so a reader comparing versions later reloads again.
        """
        version = self.version()
        refs = [
            ref
            for pattern in (self._keys.tenant_pattern, self._keys.call_pattern)
            for ref in self._scan(pattern)
        ]
        if not refs:
            return version, []
        with self._client.pipeline(transaction=False) as pipe:
            for ref in refs:
                key = self._keys.key(ref)
                pipe.hgetall(key)
                pipe.pttl(key)
            replies = self._call(pipe.execute)
        lists = [self._list(ref, replies[2 * i], replies[2 * i + 1]) for i, ref in enumerate(refs)]
        return version, [item for item in lists if item.entries]

    def _scan(self, pattern: str) -> Iterator[ListRef]:
        keys = self._call(lambda: list(self._client.scan_iter(match=pattern, count=500)))
        for key in keys:
            ref = self._keys.parse_key(key)
            if ref is not None:
                yield ref

    def _list(self, ref: ListRef, raw: dict[str, str], ttl_ms: int) -> HotwordList:
        expires_at_ms = self._clock.now_ms() + ttl_ms if ttl_ms > 0 else None
        return HotwordList(ref, entries_from_hash(raw), expires_at_ms)

    def _call(self, action: Any) -> Any:
        try:
            return action()
        except redis.RedisError as error:
            raise InfrastructureError(f"Redis: {error}") from error


def _dedupe(phrases: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(phrases))
