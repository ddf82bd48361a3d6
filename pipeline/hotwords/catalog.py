"""The lists a worker knows and their ready-built biases, as immutable snapshots.

Pure (no Redis, no clock): :class:`HotwordRegistry` feeds it what it reads from Redis.

Concurrency contract: one writer at a time (writes take a lock), any number of readers. A write
builds a complete new :class:`CatalogSnapshot` and swaps one reference, so a reader (the engine
thread calling :meth:`HotwordCatalog.bias_for`) sees either the old or the new state, never a
mix, and never waits: a read is two dictionary lookups.

Biases are built by the writer, never on the reader's thread. Each list gets a trie of its own
entries only; a call's bias is its own trie laid over its tenant's
(:class:`~pipeline.hotwords.layered.LayeredBias`), never a copy of the tenant's, so a call list
costs memory in proportion to itself. A change to a tenant's list rebuilds the tenant's trie and
re-layers each of its calls (cheap: no trie is built for them); every other bias is carried
over. Tries are kept by content (an entry tuple), so reloading unchanged lists, or lists with
identical entries, builds nothing; after every change, the tries of contents that no list has
any more are dropped (old snapshots that readers still hold keep theirs alive until released).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pipeline.hotwords.layered import LayeredBias, layered_bias
from pipeline.hotwords.model import Hotword, ListRef, merge_entries
from pipeline.hotwords.trie import (
    BiasWeights,
    BpeRankPrior,
    PhraseTokenizer,
    TokenTrie,
    TrieBias,
    phrase_sequences,
)

__all__ = ["CatalogSnapshot", "HotwordBias", "HotwordCatalog", "HotwordList"]

HotwordBias = TrieBias | LayeredBias
"""What :meth:`HotwordCatalog.bias_for` returns: the recognizer's ``TokenBias``."""


@dataclass(frozen=True, slots=True)
class HotwordList:
    """One list as last read: its entries (sorted by phrase) and, for a call list with a TTL,
    when Redis will drop it (epoch ms, from the injected clock of whoever read it)."""

    ref: ListRef
    entries: tuple[Hotword, ...]
    expires_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    """Every known list and the bias of every tenant and call that has one.

    ``biases[ListRef(t)]`` is tenant ``t``'s bias; ``biases[ListRef(t, c)]`` the bias of call
    ``c``'s merged list (only for calls with a list of their own); None where the list boosts
    nothing (every boost 0.0). ``generation`` counts applied changes.
    """

    generation: int = 0
    lists: Mapping[ListRef, HotwordList] = field(default_factory=lambda: MappingProxyType({}))
    biases: Mapping[ListRef, HotwordBias | None] = field(
        default_factory=lambda: MappingProxyType({})
    )


class HotwordCatalog:
    """Hotword lists → biases for the decoder (implements the engine's ``BiasSource``)."""

    def __init__(
        self,
        tokenizer: PhraseTokenizer,
        weights: BiasWeights | None = None,
        prior: Callable[[int], float] | None = None,
    ) -> None:
        """``prior`` scales first-token bonuses (see :class:`~pipeline.hotwords.trie.TrieBias`;
        default: Whisper's BPE rank prior)."""
        self._tokenizer = tokenizer
        self._prior = prior or BpeRankPrior()
        self._weights = weights or BiasWeights()
        self._tries: dict[tuple[Hotword, ...], TrieBias | None] = {}
        # How many lists hold each entries tuple: a trie is dropped when its last list goes.
        self._users: Counter[tuple[Hotword, ...]] = Counter()
        self._write_lock = threading.Lock()
        self._snapshot = CatalogSnapshot()

    @property
    def snapshot(self) -> CatalogSnapshot:
        return self._snapshot

    @property
    def trie_nodes(self) -> int:
        """Nodes of the tries kept for the current lists (one trie per distinct entry tuple):
        what the lists cost in memory, roughly 1.5 kB per node with Whisper's tokenizer."""
        return sum(bias.trie.node_count for bias in self._tries.values() if bias is not None)

    # -- readers (any thread, lock-free) -----------------------------------------------------

    def bias_for(self, tenant: str, call_id: str) -> HotwordBias | None:
        """The bias of the call's merged list, else its tenant's, else None (no list or nothing
        boosted). The same object until the call's or the tenant's list changes."""
        biases = self._snapshot.biases
        call_ref = ListRef(tenant, call_id)
        if call_ref in biases:
            return biases[call_ref]
        return biases.get(ListRef(tenant))

    def entries_for(self, tenant: str, call_id: str | None = None) -> tuple[Hotword, ...]:
        """The effective list of a tenant, or of one of its calls (tenant merged with call)."""
        lists = self._snapshot.lists
        tenant_list = lists.get(ListRef(tenant))
        tenant_entries = tenant_list.entries if tenant_list else ()
        if call_id is None:
            return tenant_entries
        call_list = lists.get(ListRef(tenant, call_id))
        return merge_entries(tenant_entries, call_list.entries if call_list else ())

    # -- writers (serialized) ----------------------------------------------------------------

    def put(self, hotword_list: HotwordList) -> bool:
        """Set one list (empty entries = the list is gone); True when anything changed."""
        return bool(self.apply([hotword_list], replace_all=False))

    def remove(self, ref: ListRef) -> bool:
        """Forget one list; True when it was known."""
        return self.put(HotwordList(ref, ()))

    def replace_all(self, lists: Iterable[HotwordList]) -> list[ListRef]:
        """Make ``lists`` the complete state (a full reload); returns the lists that changed."""
        return self.apply(lists, replace_all=True)

    def expire(self, now_ms: int) -> list[ListRef]:
        """Drop call lists whose TTL has run out by ``now_ms``; returns them."""
        lists = self._snapshot.lists
        gone = [
            HotwordList(ref, ())
            for ref, item in lists.items()
            if item.expires_at_ms is not None and item.expires_at_ms <= now_ms
        ]
        return self.apply(gone, replace_all=False) if gone else []

    def apply(self, updates: Iterable[HotwordList], *, replace_all: bool) -> list[ListRef]:
        """Apply list updates in one new snapshot; returns the refs whose entries changed.

        Without ``replace_all`` only the updated refs are compared and re-counted (a notice
        costs the copy of the list table, not a pass over every list: every worker holds every
        call list).
        """
        with self._write_lock:
            current = self._snapshot
            lists = {} if replace_all else dict(current.lists)
            touched: set[ListRef] = set()
            for update in updates:
                touched.add(update.ref)
                if update.entries:
                    lists[update.ref] = update
                else:
                    lists.pop(update.ref, None)
            candidates = set(lists) | set(current.lists) if replace_all else touched
            changed = sorted(
                (
                    ref
                    for ref in candidates
                    if _entries(lists.get(ref)) != _entries(current.lists.get(ref))
                ),
                key=lambda ref: ref.sort_key,
            )
            expiry_changed = any(lists.get(ref) != current.lists.get(ref) for ref in candidates)
            if not changed and not expiry_changed:
                return []
            biases = self._rebuild(current.biases, lists, changed)
            self._snapshot = CatalogSnapshot(
                generation=current.generation + 1,
                lists=MappingProxyType(lists),
                biases=MappingProxyType(biases),
            )
            if replace_all:
                self._users = Counter(item.entries for item in lists.values())
                self._tries = {k: b for k, b in self._tries.items() if k in self._users}
            else:
                for ref in touched:
                    self._count_user(current.lists.get(ref), lists.get(ref))
            return changed

    def _count_user(self, old: HotwordList | None, new: HotwordList | None) -> None:
        """One list went from ``old`` to ``new``: move its count, drop a trie left unused."""
        if new is not None:  # first: a list whose expiry alone changed keeps its trie
            self._users[new.entries] += 1
        if old is not None:
            self._users[old.entries] -= 1
            if self._users[old.entries] <= 0:
                del self._users[old.entries]
                self._tries.pop(old.entries, None)

    def _rebuild(
        self,
        old: Mapping[ListRef, HotwordBias | None],
        lists: Mapping[ListRef, HotwordList],
        changed: list[ListRef],
    ) -> dict[ListRef, HotwordBias | None]:
        dirty_tenants = {ref.tenant for ref in changed if ref.call_id is None}
        dirty_calls = {ref for ref in changed if ref.call_id is not None}
        if not dirty_tenants:  # call lists only (a notice): the others' biases stand as they are
            kept = {ref: bias for ref, bias in old.items() if ref in lists}
            for ref in dirty_calls:
                if ref in lists:
                    kept[ref] = self._layer_call(ref, lists)
            return kept
        biases: dict[ListRef, HotwordBias | None] = {}
        # Tenants first: their calls are laid over them.
        for ref in sorted(lists, key=lambda r: r.call_id is not None):
            if ref.tenant not in dirty_tenants and ref not in dirty_calls:
                biases[ref] = old.get(ref)
            elif ref.call_id is None:
                biases[ref] = self._trie(lists[ref].entries)
            else:
                biases[ref] = self._layer_call(ref, lists)
        return biases

    def _layer_call(self, ref: ListRef, lists: Mapping[ListRef, HotwordList]) -> HotwordBias | None:
        tenant_list = lists.get(ListRef(ref.tenant))
        tenant_entries = tenant_list.entries if tenant_list else ()
        return self._call_bias(tenant_entries, lists[ref].entries)

    def _call_bias(
        self, tenant_entries: tuple[Hotword, ...], call_entries: tuple[Hotword, ...]
    ) -> HotwordBias | None:
        """The call's trie laid over its tenant's (kept, so not built again), with the tenant
        phrases the call lowers or mutes taken out: it biases as the trie of
        ``merge_entries(tenant_entries, call_entries)`` would."""
        tenant_boosts = {entry.phrase: entry.boost for entry in tenant_entries}
        lowered = [
            (tokens, tenant_boosts[entry.phrase])
            for entry in call_entries
            if entry.boost < tenant_boosts.get(entry.phrase, 0.0)
            for tokens in phrase_sequences(entry.phrase, self._tokenizer)
        ]
        tenant, call = self._trie(tenant_entries), self._trie(call_entries)
        return layered_bias(tenant, call, lowered, self._weights, self._prior)

    def _trie(self, entries: tuple[Hotword, ...]) -> TrieBias | None:
        if entries in self._tries:
            return self._tries[entries]
        boosted = [(entry.phrase, entry.boost) for entry in entries if entry.boost > 0]
        bias = (
            TrieBias(TokenTrie.from_phrases(boosted, self._tokenizer), self._weights, self._prior)
            if boosted
            else None
        )
        self._tries[entries] = bias
        return bias


def _entries(item: HotwordList | None) -> tuple[Hotword, ...]:
    return item.entries if item is not None else ()
