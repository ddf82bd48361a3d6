"""Word-level fuzzy phrase matching, tolerant of ASR errors (pure, no dependencies).

Text is compared as normalized words (``normalize_words``: case folded, punctuation dropped,
apostrophes removed, so ``That's`` → ``thats``). A phrase matches a stretch of transcript when a
word-level edit-distance alignment of the phrase against that stretch is cheap enough:

- two words are *similar* when their character-level normalized Levenshtein similarity
  (``1 - distance / longer length``) is at least ``word_similarity``; aligning similar words costs
  ``1 - similarity`` (0 for identical words), aligning dissimilar words costs 1 (a substitution);
- a phrase word missing from the transcript costs 1, an extra transcript word inside the stretch
  costs 1;
- the match *score* is ``1 - cost / phrase length`` and a match needs ``score >= min_score``.

With the default ``min_score`` of 0.8 a five-word phrase survives one substituted, missing or
inserted word, and a three-word phrase must be exact up to similar spellings. The alignment is
semi-global: the whole phrase against any stretch of the transcript (Sellers' algorithm), so a
phrase is found inside a longer utterance; cost is O(phrase words × transcript words).

A match never adds or drops a negation: the stretch must hold as many negation words
(``NEGATIONS``: ``not``, ``never``, ``don't``…) as the phrase, or it is no match, whatever its
score ("this call may not be recorded" is not the disclosure "this call may be recorded", and
"that's my problem" is not the forbidden "that's not my problem").

A match never spans a pause longer than ``MAX_WORD_GAP_MS`` (``pause_runs``): a channel's words
are one stream across its utterances, so that a phrase split over two finals (an endpoint in a
short pause, or the other side saying "okay" between) is still found, but words said minutes
apart are not one phrase.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.text import replace_non_word

__all__ = [
    "MAX_WORD_GAP_MS",
    "NEGATIONS",
    "MatchOptions",
    "PhraseMatch",
    "Token",
    "find_phrase",
    "levenshtein",
    "normalize_words",
    "pause_runs",
    "word_similarity",
]

_APOSTROPHES = re.compile("['\u2019\u2018`]")

MAX_WORD_GAP_MS = 2000
"""The longest pause, from one word's end to the next word's start, that one match may span.
Longer than an utterance's endpoint silence (800 ms by default: a phrase split over two finals
of one speaker has at least that pause in it), far shorter than a change of topic."""


NEGATIONS = frozenset(
    {
        "not", "no", "never", "nor", "neither", "nobody", "nothing", "none", "nowhere", "cannot",
        "cant", "dont", "doesnt", "didnt", "wont", "wouldnt", "shouldnt", "couldnt", "mustnt",
        "isnt", "arent", "wasnt", "werent", "havent", "hasnt", "hadnt", "aint",
    }
)  # fmt: skip
"""Words (normalized: apostrophes dropped) that turn a phrase's meaning around; one more or
one fewer in a stretch than in the phrase makes it no match."""


def _negations(words: Sequence[str]) -> int:
    return sum(word in NEGATIONS for word in words)


@dataclass(frozen=True, slots=True)
class MatchOptions:
    """Tolerances of ``find_phrase`` (see the module docstring for their meaning)."""

    min_score: float = 0.8
    word_similarity: float = 0.75


@dataclass(frozen=True, slots=True)
class Token:
    """One normalized transcript word with where it came from.

    ``word_index`` is the position of the source word in its utterance; a source word that
    normalizes to several tokens (``check-in``) gives several tokens with the same index.
    """

    norm: str
    text: str
    utterance_id: str
    channel: str
    word_index: int
    start_ms: int
    end_ms: int


@dataclass(frozen=True, slots=True)
class PhraseMatch:
    """Where a phrase was found: ``tokens[first:last + 1]`` of the searched sequence."""

    first: int
    last: int
    score: float


def normalize_words(text: str) -> list[str]:
    """Case-folded words with punctuation removed and apostrophes dropped inside words; text in
    composed form first (``cafe`` + a combining accent is the word ``café``); combining marks
    stay in their word (``pipeline.text``: Devanagari vowel signs do not split a word)."""
    composed = unicodedata.normalize("NFC", text).casefold()
    return replace_non_word(_APOSTROPHES.sub("", composed).replace("_", " "), " ").split()


def levenshtein(a: str, b: str) -> int:
    """Character edit distance (insertions, deletions, substitutions cost 1)."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, 1):
        current = [i]
        for j, char_b in enumerate(b, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char_a != char_b))
            )
        previous = current
    return previous[-1]


@functools.lru_cache(maxsize=1 << 16)
def word_similarity(a: str, b: str) -> float:
    """``1 - levenshtein(a, b) / max(len(a), len(b))``; 1.0 for two empty words.

    Cached: a phrase is matched against every word of a channel, and a call's words repeat
    (a 3,000-utterance call took 9 s to summarize without the cache)."""
    longest = max(len(a), len(b))
    if longest == 0:
        return 1.0
    return 1.0 - levenshtein(a, b) / longest


def _substitution_cost(phrase_word: str, word: str, options: MatchOptions) -> float:
    if phrase_word == word:
        return 0.0
    similarity = word_similarity(phrase_word, word)
    return 1.0 - similarity if similarity >= options.word_similarity else 1.0


def pause_runs(tokens: Sequence[Token], max_gap_ms: int = MAX_WORD_GAP_MS) -> list[range]:
    """``tokens`` (in time order) cut into runs of indexes wherever a word starts more than
    ``max_gap_ms`` after every earlier word of its run ended; no run for no tokens."""
    runs: list[range] = []
    begin = 0
    reached_ms = 0
    for index, token in enumerate(tokens):
        if index > begin and token.start_ms - reached_ms > max_gap_ms:
            runs.append(range(begin, index))
            begin = index
        reached_ms = token.end_ms if index == begin else max(reached_ms, token.end_ms)
    if tokens:
        runs.append(range(begin, len(tokens)))
    return runs


def _best_match_from(
    phrase: Sequence[str], words: Sequence[str], begin: int, stop: int, options: MatchOptions
) -> PhraseMatch | None:
    """The first acceptable match in ``words[begin:stop]``, at its locally best end.

    Column ``j`` of the dynamic programme holds, for each phrase prefix, the cheapest alignment
    ending just before ``words[j]`` and the index where that alignment starts. Scanning
    left to right, the first end whose full-phrase cost is acceptable is taken, moved right while
    the cost keeps falling (``recorder`` → ``recorded`` a word later), and returned.
    """
    size = len(phrase)
    budget = (1.0 - options.min_score) * size + 1e-9
    cost = [float(i) for i in range(size + 1)]
    start = [begin] * (size + 1)
    found: PhraseMatch | None = None
    found_cost = 0.0
    for j in range(begin, stop):
        new_cost = [0.0]
        new_start = [j + 1]
        word = words[j]
        for i in range(1, size + 1):
            # The cheapest of substitution, insertion and deletion (in that order on a full
            # tie); on equal cost the later start: the tighter stretch of transcript. Spelled
            # out rather than min() over tuples: this is the QA app's hottest loop.
            phrase_word = phrase[i - 1]
            substitution = (
                0.0 if phrase_word == word else _substitution_cost(phrase_word, word, options)
            )
            best_cost, best_start = cost[i - 1] + substitution, start[i - 1]
            other_cost, other_start = new_cost[i - 1] + 1.0, new_start[i - 1]
            if other_cost < best_cost or (other_cost == best_cost and other_start > best_start):
                best_cost, best_start = other_cost, other_start
            other_cost, other_start = cost[i] + 1.0, start[i]
            if other_cost < best_cost or (other_cost == best_cost and other_start > best_start):
                best_cost, best_start = other_cost, other_start
            new_cost.append(best_cost)
            new_start.append(best_start)
        cost, start = new_cost, new_start
        if found is not None:
            if cost[size] < found_cost:
                found, found_cost = PhraseMatch(start[size], j, 0.0), cost[size]
                continue
            break
        if cost[size] <= budget:
            found, found_cost = PhraseMatch(start[size], j, 0.0), cost[size]
    if found is None:
        return None
    return PhraseMatch(found.first, found.last, round(1.0 - found_cost / size, 4))


def find_phrase(
    phrase: str,
    tokens: Sequence[Token],
    options: MatchOptions | None = None,
    *,
    max_gap_ms: int = MAX_WORD_GAP_MS,
) -> list[PhraseMatch]:
    """Every non-overlapping match of ``phrase`` in ``tokens`` (in time order), left to right;
    none spans a pause longer than ``max_gap_ms`` (``pause_runs``), none holds more or fewer
    negation words than the phrase (``NEGATIONS``).

    An empty phrase (nothing left after normalization) matches nothing.
    """
    chosen = options or MatchOptions()
    phrase_words = normalize_words(phrase)
    if not phrase_words:
        return []
    words = [token.norm for token in tokens]
    phrase_negations = _negations(phrase_words)
    matches: list[PhraseMatch] = []
    for run in pause_runs(tokens, max_gap_ms):
        begin = run.start
        while begin < run.stop:
            match = _best_match_from(phrase_words, words, begin, run.stop, chosen)
            if match is None:
                break
            if _negations(words[match.first : match.last + 1]) != phrase_negations:
                begin = match.first + 1  # the meaning turned around: look further on
                continue
            matches.append(match)
            begin = match.last + 1
    return matches
