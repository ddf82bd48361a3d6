"""Snapshots of lists and their biases: isolation, merging, caching, expiry."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from pipeline.hotwords.catalog import HotwordCatalog, HotwordList
from pipeline.hotwords.model import Hotword, ListRef
from pipeline.hotwords.trie import uniform_prior
from tests.unit.hotwords.fakes import PieceTokenizer


def hl(
    tenant: str, call: str | None, *phrases: str | tuple[str, float], expires: int | None = None
) -> HotwordList:
    entries = tuple(
        sorted(
            (Hotword(p) if isinstance(p, str) else Hotword(*p) for p in phrases),
            key=lambda e: e.phrase,
        )
    )
    return HotwordList(ListRef(tenant, call), entries, expires)


@pytest.fixture
def tok() -> PieceTokenizer:
    return PieceTokenizer()


@pytest.fixture
def catalog(tok: PieceTokenizer) -> HotwordCatalog:
    return HotwordCatalog(tok, prior=uniform_prior)


def started(bias: object, tok: PieceTokenizer) -> set[str]:
    """The phrase first tokens a bias favours at the start of a hypothesis."""
    assert callable(bias)
    names = {v: k for k, v in tok.vocab.items()}
    return {names[t] for t in bias([])}


def test_unknown_tenants_and_calls_have_no_bias(catalog: HotwordCatalog) -> None:
    assert catalog.bias_for("acme", "c1") is None
    assert catalog.entries_for("acme", "c1") == ()


def test_tenants_never_see_each_other(catalog: HotwordCatalog, tok: PieceTokenizer) -> None:
    catalog.put(hl("acme", None, "Niamh"))
    catalog.put(hl("globex", None, "Zyrtec"))
    assert started(catalog.bias_for("acme", "c1"), tok) == {" Ni"}
    assert started(catalog.bias_for("globex", "c1"), tok) == {" Zy"}
    assert catalog.bias_for("initech", "c1") is None


def test_a_call_list_is_merged_over_its_tenant_list(
    catalog: HotwordCatalog, tok: PieceTokenizer
) -> None:
    catalog.put(hl("acme", None, "Niamh", "Zyrtec"))
    catalog.put(hl("acme", "c1", ("Zyrtec", 0.0), "Ozempic"))
    assert started(catalog.bias_for("acme", "c1"), tok) == {" Ni", " Oz"}
    assert started(catalog.bias_for("acme", "c2"), tok) == {" Ni", " Zy"}
    assert [e.phrase for e in catalog.entries_for("acme", "c1")] == ["Niamh", "Ozempic", "Zyrtec"]


def test_a_call_list_of_another_tenant_does_not_apply(catalog: HotwordCatalog) -> None:
    catalog.put(hl("globex", "c1", "Ozempic"))
    assert catalog.bias_for("acme", "c1") is None


def test_a_call_that_mutes_everything_gets_no_bias(catalog: HotwordCatalog) -> None:
    catalog.put(hl("acme", None, "Niamh"))
    catalog.put(hl("acme", "c1", ("Niamh", 0.0)))
    assert catalog.bias_for("acme", "c1") is None
    assert catalog.bias_for("acme", "c2") is not None


def test_a_tenant_change_rebuilds_its_calls(catalog: HotwordCatalog, tok: PieceTokenizer) -> None:
    catalog.put(hl("acme", None, "Niamh"))
    catalog.put(hl("acme", "c1", "Ozempic"))
    catalog.put(hl("acme", None, "Nguyen"))
    assert started(catalog.bias_for("acme", "c1"), tok) == {" Ng", " Oz"}
    catalog.remove(ListRef("acme"))
    assert started(catalog.bias_for("acme", "c1"), tok) == {" Oz"}
    assert catalog.bias_for("acme", "c2") is None


def test_updates_report_what_changed_and_no_op_updates_change_nothing(
    catalog: HotwordCatalog,
) -> None:
    assert catalog.put(hl("acme", None, "Niamh"))
    generation = catalog.snapshot.generation
    assert not catalog.put(hl("acme", None, "Niamh"))
    assert catalog.snapshot.generation == generation
    assert not catalog.remove(ListRef("nobody"))


def test_replace_all_drops_lists_that_are_gone(catalog: HotwordCatalog) -> None:
    catalog.put(hl("acme", None, "Niamh"))
    catalog.put(hl("globex", None, "Zyrtec"))
    changed = catalog.replace_all([hl("acme", None, "Niamh"), hl("initech", None, "Ozempic")])
    assert changed == [ListRef("globex"), ListRef("initech")]
    assert catalog.bias_for("globex", "c") is None
    assert catalog.bias_for("acme", "c") is not None


def test_tries_are_reused_for_equal_content(catalog: HotwordCatalog, tok: PieceTokenizer) -> None:
    catalog.put(hl("acme", None, "Niamh"))
    first = catalog.bias_for("acme", "c1")
    catalog.replace_all([hl("acme", None, "Niamh")])
    catalog.put(hl("globex", None, "Niamh"))
    assert catalog.bias_for("acme", "c1") is first
    assert catalog.bias_for("globex", "c1") is first
    assert tok.encoded.count(" Niamh") == 1


def test_old_snapshots_stay_as_they_were(catalog: HotwordCatalog) -> None:
    catalog.put(hl("acme", None, "Niamh"))
    before = catalog.snapshot
    catalog.put(hl("acme", None, "Zyrtec"))
    assert [e.phrase for e in before.lists[ListRef("acme")].entries] == ["Niamh"]
    with pytest.raises(TypeError):
        before.lists[ListRef("x")] = hl("x", None, "y")  # type: ignore[index]


def test_expired_call_lists_are_dropped(catalog: HotwordCatalog) -> None:
    catalog.put(hl("acme", None, "Niamh"))
    catalog.put(hl("acme", "c1", "Ozempic", expires=1_000))
    catalog.put(hl("acme", "c2", "Ozempic", expires=5_000))
    assert catalog.expire(999) == []
    assert catalog.expire(1_000) == [ListRef("acme", "c1")]
    assert [e.phrase for e in catalog.entries_for("acme", "c1")] == ["Niamh"]
    assert catalog.bias_for("acme", "c2") is not catalog.bias_for("acme", "c1")


MIN_READS_WHILE_WRITING = 50


def test_readers_always_see_a_whole_snapshot(catalog: HotwordCatalog, tok: PieceTokenizer) -> None:
    seen: set[frozenset[str]] = set()
    errors: list[BaseException] = []
    reads = 0
    first_read = threading.Event()
    stop = threading.Event()
    # Tokenize both lists before reading starts: the fake tokenizer's vocabulary is not
    # thread-safe (the real one is immutable).
    catalog.put(hl("acme", None, "Zyrtec", "Zymase"))
    catalog.put(hl("acme", None, "Niamh", "Nguyen"))

    def read() -> None:
        nonlocal reads
        try:
            while not stop.is_set():
                # The tenant list is replaced, never removed: a call always has a bias.
                bias = catalog.bias_for("acme", "c1")
                assert bias is not None
                seen.add(frozenset(started(bias, tok)))
                reads += 1
                first_read.set()
        except BaseException as error:  # reported by the main thread
            errors.append(error)
            first_read.set()

    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so reads land inside the writes
    reader = threading.Thread(target=read)
    reader.start()
    try:
        assert first_read.wait(10)
        # Write until the reader has read often while the lists change (at least 200 rounds).
        reads_before = reads
        rounds = 0
        deadline = time.monotonic() + 30
        while rounds < 200 or reads - reads_before < MIN_READS_WHILE_WRITING:
            assert time.monotonic() < deadline, f"{reads - reads_before} reads while writing"
            catalog.put(hl("acme", None, "Niamh", "Nguyen"))
            catalog.put(hl("acme", None, "Zyrtec", "Zymase"))
            rounds += 1
    finally:
        stop.set()
        reader.join()
        sys.setswitchinterval(old_interval)
    assert errors == []
    assert seen
    assert seen <= {frozenset({" Ni", " Ng"}), frozenset({" Zy"})}


def test_changes_are_reported_in_a_stable_order(catalog: HotwordCatalog) -> None:
    changed = catalog.replace_all(
        [hl("globex", None, "Xfinity"), hl("acme", "c2", "Zyrtec"), hl("acme", None, "Niamh")]
    )
    assert changed == [ListRef("acme"), ListRef("acme", "c2"), ListRef("globex")]
