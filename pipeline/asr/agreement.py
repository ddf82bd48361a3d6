"""LocalAgreement-n: split a re-decoded utterance into committed and tentative words.

The streaming policy re-decodes the whole open utterance every hop, so each hypothesis covers the
utterance from its first word. A word is *committed* once the last ``agreement_count`` hypotheses
(two by default: LocalAgreement-2) agree on it and on every word before it; the rest of the newest
hypothesis is *tentative*. Committed words are what a partial may show as settled text: they never
change again within the utterance.

Contracts, for one utterance (between :meth:`LocalAgreement.reset` / :meth:`finalize` calls):

* **Monotone.** ``committed`` after an update starts with ``committed`` before it, element for
  element: committed words are never retracted, reordered or re-spelled, even when a later
  hypothesis disagrees with them.
* **Agreement.** A word at position ``i`` is committed only when every one of the last
  ``agreement_count`` hypotheses has a word at ``i`` and all of them are equal, after
  normalisation (:func:`normalize_word`), at every position ``len(committed) <= j <= i``.
  The committed object is the newest hypothesis's word, so surface form and timing come from the
  decode that saw the most audio.
* **Alignment by word count.** Position ``i`` of a hypothesis is aligned with position ``i`` of
  the committed prefix; the words of a hypothesis below ``len(committed)`` are ignored. A
  recognizer that keeps the committed words as its decoding prefix makes this exact.
* **Tentative** is the newest hypothesis minus its first ``len(committed)`` words (empty when the
  newest hypothesis is not longer than the committed prefix).
* **Finalize** returns ``committed + last[len(committed):]``: it extends the committed words and
  never drops one.

The class is pure (no I/O, no clock) and not thread-safe; one instance belongs to one session.
"""

from __future__ import annotations

import unicodedata
from collections import deque
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from pipeline.errors import ConfigError

__all__ = ["LocalAgreement", "WordLike", "normalize_word"]


class WordLike(Protocol):
    """Anything with a surface ``text``; the agreement reads nothing else."""

    @property
    def text(self) -> str: ...


W = TypeVar("W", bound=WordLike)


def normalize_word(text: str) -> str:
    """The comparison key of a word: NFKC, case-folded, without punctuation or whitespace.

    ``" Hello,"``, ``"hello"`` and ``"HELLO!"`` share one key, so two decodes that differ only in
    casing or punctuation still agree. A word made only of punctuation has the empty key.
    """
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(
        ch for ch in folded if not ch.isspace() and not unicodedata.category(ch).startswith("P")
    )


class LocalAgreement(Generic[W]):
    """Committed-versus-tentative bookkeeping for one open utterance (see the module docstring)."""

    __slots__ = ("_agreement_count", "_committed", "_recent")

    def __init__(self, agreement_count: int = 2) -> None:
        """``agreement_count`` consecutive hypotheses must agree before a word is committed.

        2 is LocalAgreement-2; 1 commits every hypothesis as it comes.
        """
        if agreement_count < 1:
            raise ConfigError(f"agreement_count must be at least 1, got {agreement_count}")
        self._agreement_count = agreement_count
        self._committed: list[W] = []
        # Each recent hypothesis is kept with its normalised keys, computed once.
        self._recent: deque[tuple[tuple[W, ...], tuple[str, ...]]] = deque(maxlen=agreement_count)

    @property
    def agreement_count(self) -> int:
        return self._agreement_count

    @property
    def committed(self) -> tuple[W, ...]:
        """Words settled for good in this utterance, in order."""
        return tuple(self._committed)

    @property
    def tentative(self) -> tuple[W, ...]:
        """The newest hypothesis beyond the committed prefix; may change with the next one."""
        if not self._recent:
            return ()
        newest, _ = self._recent[-1]
        return newest[len(self._committed) :]

    @property
    def hypothesis(self) -> tuple[W, ...]:
        """The newest hypothesis as given (empty before the first update)."""
        return self._recent[-1][0] if self._recent else ()

    def update(self, hypothesis: Sequence[W]) -> tuple[W, ...]:
        """Take the newest hypothesis of the whole open utterance; return the words it committed.

        The returned words are exactly what ``committed`` grew by (possibly nothing).
        """
        words = tuple(hypothesis)
        self._recent.append((words, tuple(normalize_word(word.text) for word in words)))
        if len(self._recent) < self._agreement_count:
            return ()
        newest, newest_keys = self._recent[-1]
        start = len(self._committed)
        end = start
        shortest = min(len(keys) for _, keys in self._recent)
        while end < shortest and all(keys[end] == newest_keys[end] for _, keys in self._recent):
            end += 1
        newly_committed = newest[start:end]
        self._committed.extend(newly_committed)
        return newly_committed

    def finalize(self, last_hypothesis: Sequence[W] | None = None) -> tuple[W, ...]:
        """Close the utterance: return ``committed + last[len(committed):]`` and reset.

        ``last_hypothesis`` is the decode of the complete utterance; ``None`` reuses the newest
        hypothesis already given. The committed words are always kept as they are, even where the
        last hypothesis disagrees with them, so a final never contradicts a committed partial.
        """
        last = tuple(last_hypothesis) if last_hypothesis is not None else self.hypothesis
        final = (*self._committed, *last[len(self._committed) :])
        self.reset()
        return final

    def reset(self) -> None:
        """Forget the utterance: no committed words, no hypotheses."""
        self._committed.clear()
        self._recent.clear()
