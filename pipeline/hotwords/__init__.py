"""Hotwords: per-tenant and per-call phrase lists in Redis that bias decoding, changed live.

Flow: ``streamscribe hotwords`` (or :class:`HotwordStore`) writes a list and publishes a change
notice → each worker's :class:`HotwordRegistry` re-reads it and swaps in a new snapshot of
:class:`HotwordCatalog` → the engine asks ``registry.bias_for(tenant, call_id)`` before each
decode and passes the bias (a :class:`TrieBias`, or a :class:`LayeredBias` for a call list laid
over its tenant's) to the recognizer, which calls it at every decoding step. Text is never
rewritten after decoding. Layout in Redis and tuning: ``docs/hotwords.md``.
"""

from pipeline.hotwords.catalog import CatalogSnapshot, HotwordBias, HotwordCatalog, HotwordList
from pipeline.hotwords.layered import LayeredBias
from pipeline.hotwords.model import (
    DEFAULT_BOOST,
    MAX_BOOST,
    MAX_ENTRIES_PER_LIST,
    MAX_PHRASE_CHARS,
    MAX_PHRASE_WORDS,
    MIN_BOOST,
    ChangeAction,
    ChangeNotice,
    Hotword,
    HotwordKeys,
    ListRef,
    Scope,
    merge_entries,
    normalize_phrase,
    parse_boost,
    validate_call_id,
    validate_tenant,
)
from pipeline.hotwords.registry import Backoff, HotwordRegistry, RegistryConfig
from pipeline.hotwords.store import ChangeResult, HotwordStore, connect
from pipeline.hotwords.trie import (
    BiasWeights,
    BpeRankPrior,
    PhraseTokenizer,
    TokenTrie,
    TrieBias,
    uniform_prior,
)

__all__ = [
    "DEFAULT_BOOST",
    "MAX_BOOST",
    "MAX_ENTRIES_PER_LIST",
    "MAX_PHRASE_CHARS",
    "MAX_PHRASE_WORDS",
    "MIN_BOOST",
    "Backoff",
    "BiasWeights",
    "BpeRankPrior",
    "CatalogSnapshot",
    "ChangeAction",
    "ChangeNotice",
    "ChangeResult",
    "Hotword",
    "HotwordBias",
    "HotwordCatalog",
    "HotwordKeys",
    "HotwordList",
    "HotwordRegistry",
    "HotwordStore",
    "LayeredBias",
    "ListRef",
    "PhraseTokenizer",
    "RegistryConfig",
    "Scope",
    "TokenTrie",
    "TrieBias",
    "connect",
    "merge_entries",
    "normalize_phrase",
    "parse_boost",
    "uniform_prior",
    "validate_call_id",
    "validate_tenant",
]
