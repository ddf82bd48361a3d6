"""Hotword biasing inside greedy decoding: a token trie of the phrases and its per-step bonus.

Each phrase is tokenized with the model's tokenizer the way it would appear mid-sentence (with a
leading space), once as written and once with its first letter capitalized (a sentence start, or
a list entered in lower case). The token sequences form a trie; one that holds a special token
(end-of-text and the like, spelled ``<|endoftext|>`` in a phrase) is left out.

At every decoding step the recognizer calls the bias with the item's text tokens so far.
:class:`TrieBias` finds the trie nodes reached by a suffix of those tokens that starts where a
phrase starts (a phrase in progress) and returns, token id → bonus:

- while a phrase is in progress: ``continue_bonus × boost`` for every token that continues it,
  and nothing else (a start bonus for another phrase would invite abandoning this one midway);
- otherwise: ``start_bonus × boost × prior(token)`` for the first token of every phrase, except
  that a token that is a whole phrase by itself (``" Nguyen"``) gets ``continue_bonus × boost ×
  prior(token)``: it completes its phrase at once and cannot lead into a wrong phrase's
  sub-words.

No phrase is started right after a sentence-final ``.``/``?``/``!``: there the decoder weighs
end-of-text against another sentence, and a start bonus made it go on (and repeat itself) rather
than stop. A hotword that opens a second sentence in the same window still gets its
continuations once the model picks its first token.

The start prior. The first token is the risky choice: it is taken before there is any evidence
that the phrase is really being said, and it cannot be taken back. Many phrases begin with a
token that ordinary speech uses all the time (``" We"`` of Wegovy, ``" M"`` of Mounjaro, ``" A"``
of Aarav); a full bonus there turns "Monday" into "Mandy" or "Could I" into "We've I". A frequent
token is also one the model already produces on its own when it hears it, so it needs little
help. :class:`BpeRankPrior` therefore scales the start bonus by how rare the token is, read from
its id: byte-level BPE vocabularies (GPT-2's, Whisper's) number tokens in merge order, most
frequent first. ``" We"`` (id 775) gets 0.46 of the bonus, ``" N"`` (399) 0.29, ``" Ok"`` (6762)
0.79, ``" Sao"`` (47040) 0.99. Measured on the fixtures (``bench/hotwords.py``): without the
prior no fixed start bonus reaches both the recall target and an unchanged WER.

Abandonment. Whisper's decoding here is greedy: there is no beam in which a partial phrase could
be rescored and its bonus subtracted later. Abandonment is therefore implicit and immediate: the
bias keeps no state, so as soon as the model picks a token that leaves the trie path, no suffix
of the sequence matches a phrase any more and every continuation bonus disappears from the next
step on. What a bonus cannot do is undo a token already chosen; it only ever tilts the next
choice, so text is never rewritten after decoding. Hence the asymmetry: small, prior-scaled
bonuses where a wrong choice would stick (the first token), large ones once the model has
followed a phrase (its rare sub-word tokens).

Cost per step: at most ``max_depth`` dictionary walks, each usually stopping at its first
lookup; when no phrase is in progress the precomputed start bonuses are returned as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

__all__ = [
    "BiasWeights",
    "BpeRankPrior",
    "PhraseTokenizer",
    "TokenTrie",
    "TrieBias",
    "phrase_sequences",
    "phrase_variants",
    "step_bonus",
    "uniform_prior",
]

_ROOT = 0
_SENTENCE_END_MARKS = (".", "?", "!", "...", '."', '?"', '!"')
_NO_BONUS: Mapping[int, float] = MappingProxyType({})


class PhraseTokenizer(Protocol):
    """What the trie needs of a tokenizer (``WhisperTokenizer`` is the real one)."""

    @property
    def eot(self) -> int:
        """The end-of-text id: Whisper numbers its special (and timestamp) tokens from it on."""
        ...

    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class BiasWeights:
    """Logit bonuses (added to raw logits) before a phrase's ``boost`` multiplies them.

    ``start_bonus`` (× the token's prior) goes to the first token of every phrase while no phrase
    is in progress; ``continue_bonus`` to the next token of a phrase in progress. Chosen on the
    hotword fixtures with Whisper ``tiny.en``; ``bench/hotwords.py`` reports neighbouring values.
    """

    start_bonus: float = 5.0
    continue_bonus: float = 7.0


@dataclass(frozen=True, slots=True)
class BpeRankPrior:
    """Rarity in [0, 1] of a byte-level BPE token, from its id (= merge rank).

    ``((ln max(id, 256) − ln 256) / (ln text_vocab_size − ln 256)) ** exponent``: 0 for the 256
    single-byte tokens, rising with the log of the rank to 1 for the last merges. The default
    vocabulary size is GPT-2's / Whisper English's (50257 text tokens).
    """

    text_vocab_size: int = 50257
    exponent: float = 0.5

    def __call__(self, token: int) -> float:
        low, high = math.log(256), math.log(self.text_vocab_size)
        rank = min(max(token, 256), self.text_vocab_size)
        return float(((math.log(rank) - low) / (high - low)) ** self.exponent)


def uniform_prior(token: int) -> float:
    """Every first token is equally trusted (tokenizers without merge-ordered ids, tests)."""
    return 1.0


def phrase_variants(phrase: str) -> tuple[str, ...]:
    """The surface forms biased for ``phrase``: as written, then with a capital first letter."""
    capitalized = phrase[:1].upper() + phrase[1:]
    return (phrase,) if capitalized == phrase else (phrase, capitalized)


def phrase_sequences(phrase: str, tokenizer: PhraseTokenizer) -> list[list[int]]:
    """The token sequences a trie holds for ``phrase``: each variant, with a leading space.

    A variant whose tokens include a special token (the tokenizer reads ``<|endoftext|>`` in
    text as one) is left out: a bonus on end-of-text or a task token would cut or derail the
    transcript. ``normalize_phrase`` refuses such phrases; this also covers lists stored before.
    """
    variants = phrase_variants(phrase.strip())
    sequences = [tokenizer.encode(" " + variant) for variant in variants if variant]
    return [tokens for tokens in sequences if all(token < tokenizer.eot for token in tokens)]


class TokenTrie:
    """Token sequences of weighted phrases; immutable once built.

    A node is an index; ``children[node]`` maps a token to the next node. Every node keeps the
    largest boost of the phrases that pass through it, so where phrases share a prefix the
    strongest one decides the bonus of that prefix. A node where sequences end also keeps the
    boost of each of them (:meth:`end_boosts`), so that one can be taken out again
    (:class:`~pipeline.hotwords.layered.LayeredBias`).
    """

    __slots__ = ("_boosts", "_children", "_ends", "_max_depth", "_phrases", "sentence_ends")

    def __init__(
        self,
        phrases: Iterable[tuple[Sequence[int], float]],
        sentence_ends: Iterable[int] = (),
    ) -> None:
        """``sentence_ends``: tokens that end a sentence (``.``, ``?``, ``!``); no phrase is
        started right after one (see :class:`TrieBias`)."""
        self.sentence_ends = frozenset(sentence_ends)
        children: list[dict[int, int]] = [{}]
        boosts: list[float] = [0.0]
        ends: dict[int, tuple[float, ...]] = {}
        max_depth = 0
        count = 0
        for tokens, boost in phrases:
            if not tokens:
                continue
            count += 1
            max_depth = max(max_depth, len(tokens))
            node = _ROOT
            for token in tokens:
                child = children[node].get(token)
                if child is None:
                    child = len(children)
                    children[node][token] = child
                    children.append({})
                    boosts.append(boost)
                else:
                    boosts[child] = max(boosts[child], boost)
                node = child
            ends[node] = (*ends.get(node, ()), boost)
        self._children = tuple(children)
        self._ends = ends
        self._boosts = tuple(boosts)
        self._max_depth = max_depth
        self._phrases = count

    @classmethod
    def from_phrases(
        cls, phrases: Iterable[tuple[str, float]], tokenizer: PhraseTokenizer
    ) -> TokenTrie:
        """Tokenize each ``(phrase, boost)`` (every variant, with a leading space) into a trie."""
        sequences: list[tuple[Sequence[int], float]] = [
            (tokens, boost)
            for phrase, boost in phrases
            for tokens in phrase_sequences(phrase, tokenizer)
        ]
        marks = (tokenizer.encode(mark) for mark in _SENTENCE_END_MARKS)
        return cls(sequences, (ids[0] for ids in marks if len(ids) == 1))

    @property
    def max_depth(self) -> int:
        """Tokens in the longest phrase."""
        return self._max_depth

    @property
    def phrase_count(self) -> int:
        """Token sequences inserted (phrases × variants)."""
        return self._phrases

    @property
    def node_count(self) -> int:
        return len(self._children)

    def child(self, node: int, token: int) -> int | None:
        """The node after ``token`` from ``node``, or None when no phrase continues so."""
        return self._children[node].get(token)

    def children(self, node: int) -> Mapping[int, int]:
        return self._children[node]

    @property
    def child_maps(self) -> Sequence[Mapping[int, int]]:
        """``children`` of every node, by node (for walks that cannot afford a call per step)."""
        return self._children

    def boost(self, node: int) -> float:
        """The largest boost of the phrases through ``node``."""
        return self._boosts[node]

    def end_boost(self, node: int) -> float | None:
        """The largest boost of the phrases that end at ``node``, or None when none does."""
        boosts = self._ends.get(node)
        return max(boosts) if boosts else None

    def end_boosts(self, node: int) -> tuple[float, ...]:
        """The boost of every sequence that ends at ``node`` (one per sequence inserted)."""
        return self._ends.get(node, ())

    def walk(self, tokens: Sequence[int]) -> int | None:
        """The node reached from the root by ``tokens``, or None when they leave the trie."""
        node: int | None = _ROOT
        for token in tokens:
            assert node is not None
            node = self._children[node].get(token)
            if node is None:
                return None
        return node


class TrieBias:
    """The per-step bonus of a :class:`TokenTrie` (implements the recognizer's ``TokenBias``).

    Stateless between calls and safe to share between threads and requests: everything it
    returns is computed from the ``text_tokens`` argument and immutable tables.
    """

    __slots__ = ("_continuations", "_starts", "_trie")

    def __init__(
        self,
        trie: TokenTrie,
        weights: BiasWeights | None = None,
        prior: Callable[[int], float] | None = None,
    ) -> None:
        """``prior``: token → [0, 1], scales first-token bonuses (default :class:`BpeRankPrior`,
        right for Whisper's tokenizers)."""
        weights = weights or BiasWeights()
        prior = prior or BpeRankPrior()
        self._trie = trie
        root = trie.children(_ROOT)
        # A root token that is a whole phrase by itself completes it at once: it is bonused like
        # a continuation, since it cannot lead the decoder into a wrong phrase's sub-words.
        self._starts: Mapping[int, float] = MappingProxyType(
            {
                token: prior(token)
                * max(
                    weights.start_bonus * trie.boost(node),
                    weights.continue_bonus * (trie.end_boost(node) or 0.0),
                )
                for token, node in root.items()
            }
        )
        # Continuation bonuses per inner node, precomputed so a step is a few dict lookups.
        self._continuations: tuple[Mapping[int, float], ...] = tuple(
            {
                token: weights.continue_bonus * trie.boost(child)
                for token, child in trie.children(node).items()
            }
            for node in range(trie.node_count)
        )

    @property
    def trie(self) -> TokenTrie:
        return self._trie

    @property
    def starts(self) -> Mapping[int, float]:
        """The bonuses while no phrase is in progress: first token → bonus."""
        return self._starts

    def continuations(self, node: int) -> Mapping[int, float]:
        """The bonuses while the phrase(s) through ``node`` are in progress: next token → bonus
        (empty at a node where every phrase through it has ended)."""
        return self._continuations[node]

    def active_nodes(self, text_tokens: Sequence[int]) -> list[int]:
        """Non-root nodes reached by a suffix of ``text_tokens`` (phrases in progress)."""
        trie = self._trie
        count = len(text_tokens)
        nodes: list[int] = []
        for start in range(max(0, count - trie.max_depth), count):
            node: int | None = trie.child(_ROOT, text_tokens[start])
            position = start + 1
            while node is not None and position < count:
                node = trie.child(node, text_tokens[position])
                position += 1
            if node is not None:
                nodes.append(node)
        return nodes

    def __call__(self, text_tokens: Sequence[int]) -> Mapping[int, float]:
        in_progress = [self._continuations[n] for n in self.active_nodes(text_tokens)]
        return step_bonus(in_progress, text_tokens, self._starts, self._trie.sentence_ends)


def step_bonus(
    in_progress: Sequence[Mapping[int, float]],
    text_tokens: Sequence[int],
    starts: Mapping[int, float],
    sentence_ends: frozenset[int],
) -> Mapping[int, float]:
    """One step's bonus from the continuation bonuses of the phrases in progress (one mapping
    per trie node reached; empty ones, phrases that have ended, are ignored)."""
    nodes = [bonuses for bonuses in in_progress if bonuses]
    if not nodes:
        # After a full stop the decoder weighs end-of-text against a new sentence; a start
        # bonus there would start a phrase instead of ending (the measured failure: a window
        # that repeats its sentence after "… account." to reach a phrase's first token).
        if text_tokens and text_tokens[-1] in sentence_ends:
            return _NO_BONUS
        return starts
    if len(nodes) == 1:
        return nodes[0]
    # While a phrase is in progress only its continuations are favoured: a start bonus for
    # another phrase would compete with it and invite the decoder to abandon it midway.
    bonus: dict[int, float] = {}
    for bonuses in nodes:
        for token, value in bonuses.items():
            if value > bonus.get(token, 0.0):
                bonus[token] = value
    return bonus
