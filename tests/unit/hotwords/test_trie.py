"""The token trie and its per-step bonus, with a fake tokenizer (no model) except where
Whisper's own special tokens matter."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.asr.whisper.model import bundled_model_dir
from pipeline.asr.whisper.tokenizer import load_tokenizer
from pipeline.hotwords.trie import (
    BiasWeights,
    BpeRankPrior,
    PhraseTokenizer,
    TokenTrie,
    TrieBias,
    phrase_sequences,
    phrase_variants,
    uniform_prior,
)
from tests.unit.hotwords.fakes import PieceTokenizer

WEIGHTS = BiasWeights(start_bonus=2.0, continue_bonus=5.0)


@pytest.fixture
def tok() -> PieceTokenizer:
    return PieceTokenizer()


def make_bias(tok: PieceTokenizer, *phrases: str | tuple[str, float]) -> TrieBias:
    weighted = [(p, 1.0) if isinstance(p, str) else p for p in phrases]
    return TrieBias(TokenTrie.from_phrases(weighted, tok), WEIGHTS, uniform_prior)


def ids(tok: PieceTokenizer, *pieces: str) -> list[int]:
    return [tok.id(p) for p in pieces]


def test_variants_add_a_capitalized_form_only_when_different() -> None:
    assert phrase_variants("keycloak") == ("keycloak", "Keycloak")
    assert phrase_variants("Niamh") == ("Niamh",)
    assert phrase_variants("iPhone") == ("iPhone", "IPhone")


def test_phrases_are_tokenized_with_a_leading_space_in_every_variant(tok: PieceTokenizer) -> None:
    trie = TokenTrie.from_phrases([("keycloak", 1.0), ("Niamh", 1.0)], tok)
    assert tok.encoded[:3] == [" keycloak", " Keycloak", " Niamh"]
    assert trie.phrase_count == 3
    assert trie.max_depth == 4  # " ke" "yc" "lo" "ak"


def test_first_tokens_get_the_start_bonus_before_any_phrase(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "Niamh", "Nguyen")
    assert bias([]) == {tok.id(" Ni"): 2.0, tok.id(" Ng"): 2.0}
    assert bias(ids(tok, " He", "llo")) == bias([])


def test_a_single_token_phrase_gets_the_continuation_bonus_at_once(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "Ox", "Niamh")
    assert bias([])[tok.id(" Ox")] == 5.0
    assert bias([])[tok.id(" Ni")] == 2.0


def test_a_phrase_in_progress_gets_only_its_continuations(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "Niamh", "Nguyen")
    assert bias(ids(tok, " Hi", " Ni")) == {tok.id("am"): 5.0}
    assert bias(ids(tok, " Hi", " Ni", "am")) == {tok.id("h"): 5.0}


def test_completing_a_phrase_returns_to_start_bonuses(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "Niamh", "Nguyen")
    assert bias(ids(tok, " Ni", "am", "h")) == bias([])


def test_abandoning_a_phrase_takes_its_bonus_back_at_the_next_step(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "Niamh")
    assert tok.id("am") in bias(ids(tok, " Ni"))
    off_path = bias(ids(tok, " Ni", "ce"))
    assert off_path == bias([])
    assert tok.id("am") not in off_path
    assert tok.id("h") not in off_path


def test_multi_word_phrases_continue_across_the_space(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "Saoirse Okonkwo")
    assert bias(ids(tok, " Sa", "oi", "rs", "e")) == {tok.id(" Ok"): 5.0}


def test_a_phrase_prefix_of_another_keeps_the_longer_one_going(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "Saoirse", "Saoirse Okonkwo")
    after_first = bias(ids(tok, " Sa", "oi", "rs", "e"))
    assert after_first == {tok.id(" Ok"): 5.0}


def test_shared_prefixes_offer_every_continuation(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "Zyrtec", "Zymase")
    assert bias(ids(tok, " Zy")) == {tok.id("rt"): 5.0, tok.id("ma"): 5.0}


def test_boost_scales_bonuses_and_the_strongest_phrase_wins_a_shared_prefix(
    tok: PieceTokenizer,
) -> None:
    bias = make_bias(tok, ("Zyrtec", 0.5), ("Zymase", 2.0), ("Niamh", 1.5))
    start = bias([])
    assert start[tok.id(" Zy")] == 4.0
    assert start[tok.id(" Ni")] == 3.0
    assert bias(ids(tok, " Zy")) == {tok.id("rt"): 2.5, tok.id("ma"): 10.0}


def test_no_phrase_starts_right_after_a_full_stop(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "Niamh")
    (stop,) = tok.encode(".")
    (question,) = tok.encode("?")
    assert bias([*ids(tok, " Hi"), stop]) == {}
    assert bias([*ids(tok, " Hi"), question]) == {}
    assert bias([*ids(tok, " Hi"), stop, *ids(tok, " Ni")]) == {tok.id("am"): 5.0}
    assert bias(ids(tok, " Hi", ",")) == bias([])


def test_a_phrase_matches_anywhere_in_the_sequence(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "Niamh")
    long_history = ids(tok, *[" wo", "rd"] * 50, " Ni", "am")
    assert bias(long_history) == {tok.id("h"): 5.0}


def test_the_same_token_inside_a_word_does_not_start_a_phrase(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "am")  # one token " am"; "am" without the space is another token
    assert bias(ids(tok, " Ni", "am")) == bias([])


@pytest.mark.parametrize("tokenizer", ["fake", "whisper"])
def test_a_phrase_that_spells_a_special_token_never_boosts_one(tokenizer: str) -> None:
    """A list stored before such phrases were refused: "stop<|endoftext|>" boosted end-of-text
    after " stop" and cut the transcript there."""
    tok: PhraseTokenizer = (
        PieceTokenizer()
        if tokenizer == "fake"
        else load_tokenizer(bundled_model_dir(), multilingual=False)
    )
    phrases = ["stop<|endoftext|>", "<|notimestamps|>", "Niamh"]
    assert [phrase_sequences(p, tok) for p in phrases[:2]] == [[], []]
    trie = TokenTrie.from_phrases([(p, 1.0) for p in phrases], tok)
    held = {token for children in trie.child_maps for token in children}
    assert held
    assert max(held) < tok.eot
    bias = TrieBias(trie, WEIGHTS, uniform_prior)
    stop = tok.encode(" stop")
    assert all(token < tok.eot for token in bias(stop))


def test_empty_phrases_and_lists_are_harmless(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "", "  ")
    assert bias([]) == {}
    assert bias(ids(tok, " an", "y")) == {}


def greedy(
    logits: Callable[[Sequence[int]], dict[int, float]],
    bias: Callable[[Sequence[int]], Mapping[int, float]] | None,
    steps: int,
) -> list[int]:
    """A toy greedy decoder: the same loop shape as the real one (bias added, then argmax)."""
    out: list[int] = []
    for _ in range(steps):
        scores = dict(logits(out))
        for token, bonus in (bias(out) if bias else {}).items():
            if token in scores:
                scores[token] += bonus
        out.append(max(scores, key=lambda t: scores[t]))
    return out


def test_the_rank_prior_trusts_rare_first_tokens_more() -> None:
    prior = BpeRankPrior()
    assert prior(0) == prior(255) == 0.0
    assert prior(50256) == pytest.approx(1.0, abs=1e-5)
    assert prior(99_999) == 1.0
    values = [prior(t) for t in (317, 399, 775, 6762, 47040)]
    assert values == sorted(values)
    assert BpeRankPrior(exponent=1.0)(775) < prior(775)


def test_the_prior_scales_first_tokens_only(tok: PieceTokenizer) -> None:
    trie = TokenTrie.from_phrases([("Niamh", 1.0), ("Ox", 1.0)], tok)
    halved = TrieBias(trie, WEIGHTS, lambda token: 0.5)
    assert halved([]) == {tok.id(" Ni"): 1.0, tok.id(" Ox"): 2.5}
    assert halved(ids(tok, " Ni")) == {tok.id("am"): 5.0}


def test_greedy_decoding_follows_a_phrase_the_model_finds_nearly_as_likely(
    tok: PieceTokenizer,
) -> None:
    bias = make_bias(tok, "Niamh")
    ni, am, h, ne, ve, stop = ids(tok, " Ni", "am", "h", " Ne", "ve", " .")
    table = {
        (): {ne: 10.0, ni: 9.0, stop: 0.0},
        (ne,): {ve: 12.0, stop: 1.0},
        (ni,): {am: 8.0, ve: 9.0, stop: 1.0},
        (ni, am): {h: 7.0, ve: 8.0, stop: 1.0},
    }

    def model(seq: Sequence[int]) -> dict[int, float]:
        return table.get(tuple(seq), {stop: 1.0, ve: 0.0})

    assert greedy(model, None, 2) == [ne, ve]
    assert greedy(model, bias, 3) == [ni, am, h]


def test_greedy_decoding_ignores_a_phrase_the_model_finds_unlikely(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "Niamh")
    ni, yes, stop = ids(tok, " Ni", " Ye", " .")

    def model(seq: Sequence[int]) -> dict[int, float]:
        return {yes: 15.0, ni: 5.0, stop: 0.0} if not seq else {stop: 1.0}

    assert greedy(model, bias, 1) == [yes]


def test_an_abandoned_phrase_is_not_forced_to_completion(tok: PieceTokenizer) -> None:
    bias = make_bias(tok, "Niamh")
    ni, am, ce, stop = ids(tok, " Ni", "am", "ce", " .")

    def model(seq: Sequence[int]) -> dict[int, float]:
        if not seq:
            return {ni: 10.0, stop: 0.0}
        if tuple(seq) == (ni,):
            return {ce: 14.0, am: 5.0}  # the model is sure: "Nice", not "Niam…"
        return {stop: 1.0, am: 0.0}

    out = greedy(model, bias, 3)
    assert out[:2] == [ni, ce]
    assert am not in out


@given(st.lists(st.sampled_from([" Ni", "am", "h", " Ng", "uy", "en", " He", "llo"]), max_size=30))
def test_bonuses_only_ever_go_to_phrase_tokens_and_calls_are_pure(pieces: list[str]) -> None:
    tok = PieceTokenizer()
    bias = make_bias(tok, "Niamh", "Nguyen")
    sequence = [tok.id(p) for p in pieces]
    allowed = {tok.id(p) for p in (" Ni", "am", "h", " Ng", "uy", "en")}
    first = dict(bias(sequence))
    assert set(first) <= allowed
    assert all(value > 0 for value in first.values())
    assert dict(bias(list(sequence))) == first
