"""Putting tags where the values were: in a final's text and words, in a partial's text.

A redacted stretch of words becomes one word, the entity's tag (``[CARD_NUMBER]``) followed by
the sentence punctuation the last word ended in, spanning the audio of the words it replaces;
the text loses the same characters. The number of words, digits or groups the value had is not
kept either. A final the detectors find nothing in comes back as the same object.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from pipeline.contracts.messages import Final, Partial, Redaction, Word
from pipeline.redaction.detectors import MIN_MASKED_DIGITS, find_entities
from pipeline.redaction.numbers import GLUE, digit_runs
from pipeline.redaction.phones import PhoneJudge
from pipeline.redaction.policy import Policy
from pipeline.redaction.spans import Span

__all__ = ["DIGITS_TAG", "mask_partial", "mask_text", "redact_finals", "spans_in_policy"]

DIGITS_TAG = "[DIGITS]"
"""What a partial shows for a digit run of ``MIN_MASKED_DIGITS`` or more that no detector
claimed (the partial cannot know yet what it will turn out to be)."""

_TRAILING_PUNCTUATION = re.compile(r"[.,!?;:…]+$")


def spans_in_policy(
    words: Sequence[str], policy: Policy, phones: PhoneJudge, *, min_cued_digits: int | None = None
) -> list[Span]:
    """The spans of ``words`` that ``policy`` redacts (``min_cued_digits``: see
    ``detectors.find_entities``; its default when None)."""
    if not policy.redacting:
        return []
    found = (
        find_entities(words, phones)
        if min_cued_digits is None
        else find_entities(words, phones, min_cued_digits=min_cued_digits)
    )
    return [span for span in found if span.entity in policy]


def _tagged(entity_tag: str, last_word: str) -> str:
    trailing = _TRAILING_PUNCTUATION.search(last_word)
    return entity_tag + (trailing.group(0) if trailing else "")


def _word_offsets(text: str, words: Sequence[Word]) -> list[tuple[int, int]] | None:
    """Where each word is in ``text`` (found in order), or None when one is not there."""
    offsets = []
    cursor = 0
    for word in words:
        at = text.find(word.word, cursor)
        if at < 0:
            return None
        offsets.append((at, at + len(word.word)))
        cursor = at + len(word.word)
    return offsets


def _joined(words: Sequence[str]) -> str:
    """Words as Whisper joins them: a word that starts with glue punctuation (``,111``,
    ``-05``, ``.com``) follows the one before without a space."""
    text = ""
    for word in words:
        if text and not word.startswith(GLUE):
            text += " "
        text += word
    return text


def _redact_one(final: Final, spans: Sequence[Span]) -> Final:
    """``final`` with each of ``spans`` (indices into its own words) replaced by its tag."""
    if not spans:
        return final
    words = list(final.words)
    offsets = _word_offsets(final.text, final.words)
    text = final.text
    new_words: list[Word] = []
    redactions: list[Redaction] = []
    pieces: list[str] = []
    cursor = 0  # in text
    index = 0
    for span in spans:
        new_words.extend(words[index : span.first])
        covered = words[span.first : span.last + 1]
        tag = _tagged(span.entity.tag, covered[-1].word)
        start_ms, end_ms = covered[0].start_ms, max(w.end_ms for w in covered)
        new_words.append(Word(tag, start_ms, end_ms, min(w.probability for w in covered)))
        redactions.append(Redaction(span.entity, start_ms, end_ms))
        if offsets is not None:
            pieces.append(text[cursor : offsets[span.first][0]])
            pieces.append(tag)
            cursor = offsets[span.last][1]
        index = span.last + 1
    new_words.extend(words[index:])
    if offsets is not None:
        pieces.append(text[cursor:])
        new_text = "".join(pieces)
    else:  # the words are not in the text as written: rebuild it from them
        new_text = _joined([w.word for w in new_words])
    return dataclasses.replace(
        final,
        text=new_text,
        words=tuple(new_words),
        redactions=(*final.redactions, *redactions),
    )


def redact_finals(finals: Sequence[Final], policy: Policy, phones: PhoneJudge) -> list[Final]:
    """``finals`` (consecutive finals of one channel) redacted together, as one word sequence:
    a number whose digits two finals share is found whole. A value that crosses from one final
    into the next is tagged in each, each redaction spanning that final's part of the audio."""
    words = [word.word for final in finals for word in final.words]
    spans = spans_in_policy(words, policy, phones)
    if not spans:
        return list(finals)
    redacted = []
    offset = 0
    for final in finals:
        count = len(final.words)
        end = offset + count - 1
        own = [
            Span(max(span.first, offset) - offset, min(span.last, end) - offset, span.entity)
            for span in spans
            if span.last >= offset and span.first <= end
        ]
        redacted.append(_redact_one(final, own))
        offset += count
    return redacted


def _masked_words(words: Sequence[str], policy: Policy, phones: PhoneJudge) -> list[str]:
    """``words`` with each redacted value (a cued one of any length: what its cue announces
    is masked from its first digit), and each other digit run of at least ``MIN_MASKED_DIGITS``
    digits, replaced: its first word by the tag, the rest by ``""``."""
    tagged = [
        (span.first, span.last, span.entity.tag)
        for span in spans_in_policy(words, policy, phones, min_cued_digits=1)
    ]
    taken = {index for first, last, _ in tagged for index in range(first, last + 1)}
    for run in digit_runs(words):
        if len(run.digits) >= MIN_MASKED_DIGITS and taken.isdisjoint(
            range(run.first, run.last + 1)
        ):
            tagged.append((run.first, run.last, DIGITS_TAG))
    masked = list(words)
    for first, last, tag in tagged:
        masked[first] = _tagged(tag, words[last])
        for index in range(first + 1, last + 1):
            masked[index] = ""
    return masked


def mask_text(text: str, policy: Policy, phones: PhoneJudge) -> str:
    """Free text (a partial's, a suppressed hypothesis's) with every redacted value and every
    digit run of ``MIN_MASKED_DIGITS`` or more digits replaced by a tag; ``text`` itself when
    ``policy`` redacts nothing or nothing is found."""
    if not policy.redacting or not text:
        return text
    words = text.split()
    masked = _masked_words(words, policy, phones)
    if masked == words:
        return text
    return _joined([word for word in masked if word])


def mask_partial(partial: Partial, policy: Policy, phones: PhoneJudge) -> Partial:
    """``partial`` with its committed and tentative text masked as one (a number that runs
    from the committed words into the tentative ones is masked whole, its tag in the committed
    text); the same object when nothing is masked.

    ``committed_text`` still only grows, except where it ends in a digit run that reaches
    ``MIN_MASKED_DIGITS`` digits in a later revision: the digits it showed become the tag."""
    if not policy.redacting:
        return partial
    committed = partial.committed_text.split()
    tentative = partial.tentative_text.split()
    words = committed + tentative
    masked = _masked_words(words, policy, phones)
    if masked == words:
        return partial
    return dataclasses.replace(
        partial,
        committed_text=_joined([w for w in masked[: len(committed)] if w]),
        tentative_text=_joined([w for w in masked[len(committed) :] if w]),
    )
