"""Live hotword lists in a worker: Redis → :class:`HotwordCatalog`, kept current in the background.

``HotwordRegistry`` implements the engine's ``BiasSource``. Its thread, in a loop:

1. connect and SUBSCRIBE to the change channel, *then* load every list (so a change made during
   the load is not missed: its notice waits in the subscription);
2. apply each notice by re-reading the list it names (idempotent, so order and duplicates are
   harmless); a notice is applied within ``poll_interval_s`` of its arrival;
3. every ``resync_interval_s``: compare the version counter with the last one applied and
   reload everything when they differ or the counter is not an integer (notices are
   fire-and-forget), and drop call lists whose TTL has run out.

Bad data is not an outage: a key, field or counter that a hand edit broke is left out with a
warning (see :class:`~pipeline.hotwords.store.HotwordStore`) and every other list loads; a
message on the change channel that is not UTF-8 makes the thread resubscribe and reload.

Redis unreachable (at start or later): the lists last loaded stay in use, ``on_dependency(False,
detail)`` is called once, and the thread reconnects with exponential backoff (with jitter, so a
fleet of workers does not reconnect in step); on success it reloads everything and calls
``on_dependency(True, …)``. A list never loaded stays absent until Redis answers. Nothing
raises into the caller: callbacks run on the registry's thread and their errors are logged.

Thread safety: ``bias_for`` reads an immutable snapshot (see :mod:`pipeline.hotwords.catalog`),
so the engine thread never waits on Redis or on a trie being built.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from pipeline.clock import Clock, WallClock
from pipeline.errors import ConfigError, InfrastructureError
from pipeline.hotwords.catalog import HotwordBias, HotwordCatalog
from pipeline.hotwords.model import ChangeNotice, Hotword, HotwordKeys, ListRef
from pipeline.hotwords.store import HotwordStore, connect
from pipeline.hotwords.trie import BiasWeights, PhraseTokenizer
from pipeline.settings import HotwordSettings, Settings

__all__ = [
    "Backoff",
    "CatalogSnapshotRead",
    "DependencyListener",
    "HotwordRegistry",
    "RegistryConfig",
    "UpdateListener",
    "read_catalog",
]

logger = logging.getLogger(__name__)

DRAIN_MAX_NOTICES = 10_000
"""The most queued notices served before a resync (a bound, should they never stop coming)."""

DependencyListener = Callable[[bool, str], None]
"""``(up, detail)``: Redis became reachable (True) or unreachable (False), on changes only."""

UpdateListener = Callable[[ListRef, int], None]
"""``(list, version)``: a list's entries changed in this worker (from a notice or a reload)."""


@dataclass(frozen=True, slots=True)
class RegistryConfig:
    """Timing of the registry's thread (seconds)."""

    poll_interval_s: float = 0.2
    resync_interval_s: float = 30.0
    reconnect_initial_s: float = 0.1
    reconnect_max_s: float = 10.0
    redis_timeout_s: float = 2.0

    def __post_init__(self) -> None:
        for name in ("poll_interval_s", "resync_interval_s", "reconnect_initial_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"hotwords {name} must be > 0, got {getattr(self, name)}")
        if self.reconnect_max_s < self.reconnect_initial_s:
            raise ConfigError("hotwords reconnect_max_s must be >= reconnect_initial_s")

    @classmethod
    def from_settings(cls, section: HotwordSettings) -> RegistryConfig:
        """The timing that ``settings.hotwords`` describes (``ConfigError`` when unusable)."""
        return cls(
            resync_interval_s=section.resync_interval_ms / 1000,
            reconnect_initial_s=section.reconnect_initial_ms / 1000,
            reconnect_max_s=section.reconnect_max_ms / 1000,
        )


class Backoff:
    """Exponential backoff with "equal jitter": the n-th delay is uniform in [d/2, d] with
    ``d = min(max_s, initial_s × 2^n)``. ``reset`` after a success."""

    def __init__(self, initial_s: float, max_s: float, rng: random.Random | None = None) -> None:
        self._initial_s = initial_s
        self._max_s = max_s
        self._rng = rng or random.Random()
        self._failures = 0

    def next_delay_s(self) -> float:
        ceiling = min(self._max_s, self._initial_s * 2.0 ** min(self._failures, 60))
        self._failures += 1
        return ceiling / 2 + self._rng.uniform(0.0, ceiling / 2)

    def reset(self) -> None:
        self._failures = 0


class HotwordRegistry:
    """Hotword lists from Redis, kept live; the engine's ``BiasSource``.

    ``start`` launches the background thread (returns at once); ``wait_loaded`` waits for the
    first complete load; ``stop`` ends the thread. Construct one per worker process.
    """

    def __init__(
        self,
        store: HotwordStore,
        catalog: HotwordCatalog,
        config: RegistryConfig | None = None,
        *,
        on_dependency: DependencyListener | None = None,
        on_update: UpdateListener | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._config = config or RegistryConfig()
        self._on_dependency = on_dependency
        self._on_update = on_update
        self._clock = clock or WallClock()
        self._backoff = Backoff(self._config.reconnect_initial_s, self._config.reconnect_max_s, rng)
        self._stop = threading.Event()
        self._loaded = threading.Event()
        self._thread: threading.Thread | None = None
        self._up: bool | None = None
        self._version = -1
        self._owns_client = False

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        tokenizer: PhraseTokenizer,
        *,
        on_dependency: DependencyListener | None = None,
        on_update: UpdateListener | None = None,
        clock: Clock | None = None,
    ) -> HotwordRegistry:
        """A registry on ``settings.redis.url`` with ``settings.hotwords`` (not started)."""
        config = RegistryConfig.from_settings(settings.hotwords)
        registry = cls(
            _store(settings, config.redis_timeout_s, clock),
            _catalog(settings, tokenizer),
            config,
            on_dependency=on_dependency,
            on_update=on_update,
            clock=clock,
        )
        registry._owns_client = True
        return registry

    # -- the BiasSource side (engine thread) -------------------------------------------------

    def bias_for(self, tenant: str, call_id: str) -> HotwordBias | None:
        """The bias for a call of ``tenant`` (its merged list, else the tenant's), or None."""
        return self._catalog.bias_for(tenant, call_id)

    def entries_for(self, tenant: str, call_id: str | None = None) -> tuple[Hotword, ...]:
        """The effective list in use for a tenant or one of its calls."""
        return self._catalog.entries_for(tenant, call_id)

    @property
    def catalog(self) -> HotwordCatalog:
        return self._catalog

    @property
    def redis_up(self) -> bool | None:
        """Whether Redis answered last time (None before the first attempt)."""
        return self._up

    @property
    def version(self) -> int:
        """The version counter of the newest change applied (-1 before the first load, and
        while the counter in Redis is not an integer)."""
        return self._version

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the background thread (idempotent)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="hotwords-registry", daemon=True)
        self._thread.start()

    def wait_loaded(self, timeout_s: float | None = None) -> bool:
        """Block until the first complete load (True) or ``timeout_s`` passes (False)."""
        return self._loaded.wait(timeout_s)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the thread (and close the Redis client when ``from_settings`` made it); the lists
        stay readable."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)
        if self._owns_client:
            self._store.client.close()

    def __enter__(self) -> HotwordRegistry:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            pubsub = None
            try:
                pubsub = self._store.client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(self._store.keys.channel)
                self._reload()
                self._backoff.reset()
                self._listen(pubsub)
            except (redis.RedisError, InfrastructureError, OSError) as error:
                self._set_up(False, str(error))
                self._stop.wait(self._backoff.next_delay_s())
            except UnicodeDecodeError as error:
                # Someone published bytes that are not text on our channel: redis-py cannot read
                # past them on this connection, so resubscribe (and reload: notices may be lost).
                logger.warning("hotwords: undecodable message on the change channel (%s)", error)
                self._stop.wait(self._backoff.next_delay_s())
            except Exception:  # a bug must not silently end live updates: log, back off, retry
                logger.exception("hotword registry loop failed")
                self._stop.wait(self._backoff.next_delay_s())
            finally:
                if pubsub is not None:
                    _close_quietly(pubsub)

    def _listen(self, pubsub: Any) -> None:
        next_resync = time.monotonic() + self._config.resync_interval_s
        while not self._stop.is_set():
            message = pubsub.get_message(timeout=self._config.poll_interval_s)
            if message is not None and message.get("type") == "message":
                self._on_notice(message.get("data"))
            if time.monotonic() >= next_resync:
                self._drain(pubsub)
                version = self._store.version()
                if version is None or version != self._version:
                    self._reload()
                for ref in self._catalog.expire(self._clock.now_ms()):
                    self._notify_update(ref)
                next_resync = time.monotonic() + self._config.resync_interval_s

    def _drain(self, pubsub: Any) -> None:
        """Serve the notices already queued (at most ``DRAIN_MAX_NOTICES``) before a resync
        compares versions: Redis's version counts them, so while they wait the lists look
        stale and everything would be reloaded for nothing (seconds with many call lists)."""
        for _ in range(DRAIN_MAX_NOTICES):
            message = pubsub.get_message(timeout=0)
            if message is None:
                return
            if message.get("type") == "message":
                self._on_notice(message.get("data"))

    def _reload(self) -> None:
        version, lists = self._store.read_all()
        changed = self._catalog.replace_all(lists)
        self._version = -1 if version is None else version
        shown = "unknown" if version is None else version
        self._set_up(True, f"{len(lists)} hotword list(s) loaded at version {shown}")
        self._loaded.set()
        for ref in changed:
            self._notify_update(ref)

    def _on_notice(self, data: Any) -> None:
        try:
            notice = ChangeNotice.from_json(data)
        except ConfigError as error:
            # Not ours or malformed: what changed is unknown, so reload everything.
            logger.warning("%s; reloading every hotword list", error)
            self._reload()
            return
        changed = self._catalog.put(self._store.read(notice.ref))
        self._version = max(self._version, notice.version)
        if changed:
            self._notify_update(notice.ref)

    def _notify_update(self, ref: ListRef) -> None:
        if self._on_update is None:
            return
        try:
            self._on_update(ref, self._version)
        except Exception:
            logger.exception("hotword on_update callback failed")

    def _set_up(self, up: bool, detail: str) -> None:
        if self._up is up:
            return
        self._up = up
        if up:
            logger.info("hotwords: Redis reachable (%s)", detail)
        else:
            logger.warning("hotwords: Redis unreachable, keeping the last lists: %s", detail)
        if self._on_dependency is None:
            return
        try:
            self._on_dependency(up, detail)
        except Exception:
            logger.exception("hotword on_dependency callback failed")


@dataclass(frozen=True, slots=True)
class CatalogSnapshotRead:
    """Every hotword list in Redis at one moment, as a fixed ``BiasSource`` (``catalog``)."""

    catalog: HotwordCatalog
    version: int | None
    lists: int


def read_catalog(settings: Settings, tokenizer: PhraseTokenizer) -> CatalogSnapshotRead:
    """Read every list once, with the settings' Redis, key prefix and bias weights: the lists a
    worker would use now, fixed (a replay decodes with one set, however Redis changes later).
    ``version`` is None when the counter is not an integer; bad keys and fields are left out
    with a logged warning, as a worker leaves them out.

    Raises:
        InfrastructureError: Redis cannot be read.
    """
    store = _store(settings, RegistryConfig().redis_timeout_s, None)
    try:
        version, lists = store.read_all()
    finally:
        store.client.close()
    catalog = _catalog(settings, tokenizer)
    catalog.replace_all(lists)
    return CatalogSnapshotRead(catalog, version, len(lists))


def _store(settings: Settings, timeout_s: float, clock: Clock | None) -> HotwordStore:
    section = settings.hotwords
    return HotwordStore(
        connect(settings.redis.url, timeout_s),
        HotwordKeys(section.key_prefix),
        call_ttl_s=section.call_ttl_s,
        clock=clock,
    )


def _catalog(settings: Settings, tokenizer: PhraseTokenizer) -> HotwordCatalog:
    section = settings.hotwords
    return HotwordCatalog(tokenizer, BiasWeights(section.start_bonus, section.continue_bonus))


def _close_quietly(pubsub: Any) -> None:
    with contextlib.suppress(redis.RedisError, OSError):
        pubsub.close()
