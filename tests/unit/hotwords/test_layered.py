"""A call's bias laid over its tenant's: it biases exactly as the merged list's trie would,
while costing memory (and build time) in proportion to the call list only."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.hotwords.catalog import HotwordCatalog, HotwordList
from pipeline.hotwords.layered import LayeredBias
from pipeline.hotwords.model import Hotword, ListRef, merge_entries
from pipeline.hotwords.trie import BiasWeights, TokenTrie, TrieBias, phrase_sequences
from tests.unit.hotwords.fakes import PieceTokenizer

# Phrases that share first tokens, whole prefixes and case variants, so that layers meet, masks
# cut through shared paths and one token sequence can come from two phrases ("niamh", "Niamh").
VOCABULARY = (
    "Niamh",
    "niamh",
    "Nia",
    "Niamh Nguyen",
    "Nguyen",
    "Ngozi Okafor",
    "Zyrtec",
    "Zyrtec D",
    "zymase",
    "Ozempic",
    "Oz",
    "Okonkwo",
)
BOOSTS = (0.0, 0.5, 1.0, 1.5, 2.0)
WEIGHTS = BiasWeights(start_bonus=5.0, continue_bonus=7.0)


def prior(token: int) -> float:
    """Unequal per token (as the real prior is), so a wrong token's bonus shows."""
    return 1.0 / (1 + token % 3)


def make_tokenizer() -> PieceTokenizer:
    """Ids fixed up front, so both sides of a comparison see the same vocabulary."""
    tok = PieceTokenizer()
    for phrase in VOCABULARY:
        phrase_sequences(phrase, tok)
    tok.encode(".")
    return tok


def entries(chosen: dict[str, float]) -> tuple[Hotword, ...]:
    return tuple(sorted((Hotword(p, b) for p, b in chosen.items()), key=lambda e: e.phrase))


def merged_reference(
    tenant: tuple[Hotword, ...], call: tuple[Hotword, ...], tok: PieceTokenizer
) -> TrieBias | None:
    """What a call decoded with before layering: one trie of the merged list."""
    boosted = [(e.phrase, e.boost) for e in merge_entries(tenant, call) if e.boost > 0]
    if not boosted:
        return None
    return TrieBias(TokenTrie.from_phrases(boosted, tok), WEIGHTS, prior)


def probes(tok: PieceTokenizer, extra: Sequence[Sequence[int]]) -> list[list[int]]:
    """Texts that walk every path: each phrase's prefixes, alone, after another phrase, after a
    full stop, and after an unrelated token; plus the given random texts."""
    full_stop = tok.encode(".")
    sequences = [seq for phrase in VOCABULARY for seq in phrase_sequences(phrase, tok)]
    texts: list[list[int]] = [[], full_stop]
    for seq in sequences:
        for cut in range(1, len(seq) + 1):
            for lead in ([], full_stop, [tok.id("xx")], sequences[0], seq):
                texts.append([*lead, *seq[:cut]])
    texts.extend(list(text) for text in extra)
    return texts


chosen_lists = st.dictionaries(st.sampled_from(VOCABULARY), st.sampled_from(BOOSTS), max_size=8)


@settings(max_examples=300, deadline=None)
@given(
    tenant=chosen_lists,
    call=chosen_lists,
    texts=st.lists(st.lists(st.integers(0, 30), max_size=8), max_size=5),
)
def test_a_call_bias_equals_the_merged_lists_trie_at_every_step(
    tenant: dict[str, float], call: dict[str, float], texts: list[list[int]]
) -> None:
    tok = make_tokenizer()
    catalog = HotwordCatalog(tok, WEIGHTS, prior=prior)
    tenant_entries, call_entries = entries(tenant), entries(call)
    if tenant_entries:
        catalog.put(HotwordList(ListRef("acme"), tenant_entries))
    if call_entries:
        catalog.put(HotwordList(ListRef("acme", "c1"), call_entries))
    layered = catalog.bias_for("acme", "c1")
    reference = merged_reference(tenant_entries, call_entries, tok)
    assert (layered is None) == (reference is None)
    if layered is None or reference is None:
        return
    for text in probes(tok, texts):
        assert dict(layered(text)) == dict(reference(text)), text


def tenant_of(count: int) -> tuple[Hotword, ...]:
    return entries({f"Tenantword{i} Second{i}": 1.0 for i in range(count)})


def test_call_lists_do_not_copy_the_tenant_trie() -> None:
    tok = PieceTokenizer()
    catalog = HotwordCatalog(tok)
    catalog.put(HotwordList(ListRef("acme"), tenant_of(200)))
    tenant_nodes = catalog.trie_nodes
    for i in range(50):
        catalog.put(HotwordList(ListRef("acme", f"c{i}"), (Hotword(f"Callword{i}"),)))
    call = catalog.bias_for("acme", "c7")
    assert isinstance(call, LayeredBias)
    assert call.base is catalog.bias_for("acme", "no-list")
    # Each one-phrase call list adds its own few nodes, never another copy of the tenant's 1,000+.
    assert catalog.trie_nodes - tenant_nodes <= 50 * 12


def test_a_tenant_edit_builds_the_tenant_trie_once_not_once_per_call() -> None:
    tok = PieceTokenizer()
    catalog = HotwordCatalog(tok)
    tenant = tenant_of(100)
    catalog.put(HotwordList(ListRef("acme"), tenant))
    for i in range(30):
        catalog.put(HotwordList(ListRef("acme", f"c{i}"), (Hotword(f"Callword{i}"),)))
    before = catalog.bias_for("acme", "c3")
    catalog.put(HotwordList(ListRef("acme"), (*tenant, Hotword("Zed"))))
    # Tokenized when the tenant list was first built and when it was rebuilt: twice in all.
    assert tok.encoded.count(" Tenantword0 Second0") == 2
    after = catalog.bias_for("acme", "c3")
    assert after is not before
    assert after is not None
    assert tok.id(" Ze") in after([])


def test_a_call_bias_stays_the_same_object_until_its_lists_change() -> None:
    catalog = HotwordCatalog(PieceTokenizer())
    catalog.put(HotwordList(ListRef("acme"), (Hotword("Niamh"),)))
    catalog.put(HotwordList(ListRef("acme", "c1"), (Hotword("Ozempic"),)))
    bias = catalog.bias_for("acme", "c1")
    assert catalog.bias_for("acme", "c1") is bias
    catalog.put(HotwordList(ListRef("globex"), (Hotword("Zyrtec"),)))
    catalog.put(HotwordList(ListRef("acme", "c2"), (Hotword("Xarelto"),)))
    assert catalog.bias_for("acme", "c1") is bias


def test_a_trie_two_lists_share_lives_until_the_last_of_them_goes() -> None:
    # Tries are counted per list (a notice no longer sweeps every list to find the unused).
    catalog = HotwordCatalog(PieceTokenizer())
    shared = tenant_of(5)
    catalog.put(HotwordList(ListRef("acme", "c1"), shared, 10**15))
    catalog.put(HotwordList(ListRef("acme", "c2"), shared, 10**15))
    nodes = catalog.trie_nodes
    catalog.put(HotwordList(ListRef("acme", "c1"), shared, 2 * 10**15))  # a new expiry only
    assert catalog.trie_nodes == nodes
    catalog.remove(ListRef("acme", "c1"))
    assert catalog.trie_nodes == nodes
    assert catalog.bias_for("acme", "c2") is not None
    catalog.remove(ListRef("acme", "c2"))
    assert catalog.trie_nodes == 0


def test_tries_of_lists_that_are_gone_are_dropped() -> None:
    catalog = HotwordCatalog(PieceTokenizer())
    catalog.put(HotwordList(ListRef("acme"), tenant_of(50)))
    tenant_nodes = catalog.trie_nodes
    for i in range(20):
        catalog.put(HotwordList(ListRef("acme", f"c{i}"), tenant_of(i + 1)[i:]))
    assert catalog.trie_nodes > tenant_nodes
    for i in range(20):
        catalog.remove(ListRef("acme", f"c{i}"))
    assert catalog.trie_nodes == tenant_nodes
    catalog.replace_all([HotwordList(ListRef("globex"), (Hotword("Zyrtec"),))])
    assert catalog.trie_nodes < tenant_nodes
    catalog.expire(0)  # nothing expires; nothing is rebuilt or dropped either
    assert catalog.bias_for("globex", "c") is not None
