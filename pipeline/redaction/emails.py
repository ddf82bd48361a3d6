"""E-mail addresses, written (``john.smith@example.com``) or spelled out (``john dot smith at
example dot com``), and as Whisper sometimes writes them: ``john.smith.example.com`` (the
``at`` lost) after ``my email is``.

The words are read into one string where spoken separators become their characters (``dot``
→ ``.``, ``at`` → ``@``, ``underscore`` → ``_``, ``dash``/``hyphen`` → ``-``); an address is
a local part of labels joined by separators, ``@``, and a domain ending in a known top-level
domain. Spaces alone never join labels, so ``my email is john`` stays out of the local part;
but after an e-mail keyword the words up to the address are taken too (``my email is john
smith at example dot com`` loses ``john smith``: the spoken local part has no separator).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pipeline.contracts.messages import EntityType
from pipeline.redaction.numbers import bare
from pipeline.redaction.spans import Span

__all__ = ["find_emails"]

SPOKEN = {
    "dot": ".",
    "period": ".",
    "point": ".",
    "at": "@",
    "@": "@",
    "underscore": "_",
    "dash": "-",
    "hyphen": "-",
}
TOP_LEVEL_DOMAINS = (
    "com|net|org|edu|gov|mil|int|info|biz|io|co|us|uk|ca|de|fr|es|it|nl|ie|au|nz|in|me|ai|"
    "app|dev|email|mail|online|xyz"
)
_LABEL = r"[a-z0-9]+"
_ADDRESS = re.compile(
    rf"(?<![a-z0-9._@-]){_LABEL}(?: ?[._-] ?{_LABEL})* ?@ ?[a-z0-9-]+(?: ?\. ?[a-z0-9-]+)*"
    rf" ?\. ?(?:{TOP_LEVEL_DOMAINS})(?![a-z0-9])"
)
_DOTTED = re.compile(
    rf"(?<![a-z0-9._@-]){_LABEL}(?:[._-]{_LABEL})*\.(?:{TOP_LEVEL_DOMAINS})(?![a-z0-9])"
)
"""An address whose ``@`` the recognizer lost (``john.smith.example.com``), taken only after
an e-mail keyword: a dotted name that ends in a known top-level domain."""
EMAIL_KEYWORDS = frozenset({"email", "e-mail", "mail", "emails", "e-mails"})
_LEAD_IN = frozenset(
    {"is", "it's", "its", "was", "my", "the", "address", "email", "e-mail", "mail", "it", "'s"}
)
MAX_SPOKEN_NAME_WORDS = 3


def _token(word: str) -> str:
    """The word as a piece of an address: lowercased, sentence punctuation dropped, a leading
    ``.`` kept (it glues the word to the one before: Whisper's ``john`` ``.smith``)."""
    text = word.strip().lower().rstrip(",;:!?\"')]}…").lstrip("\"'([{")
    glued = text.startswith(".")
    text = text.rstrip(".")
    spoken = SPOKEN.get(text)
    if spoken is not None:
        return spoken
    return ("." if glued and not text.startswith(".") else "") + text


def find_emails(words: Sequence[str]) -> list[Span]:
    """Spans of the e-mail addresses in ``words``, in order."""
    tokens = [_token(word) for word in words]
    starts: list[int] = []
    text = ""
    for token in tokens:
        if text and not token.startswith("."):
            text += " "
        starts.append(len(text))
        text += token
    lowered = [bare(word) for word in words]
    spans: list[Span] = []
    for pattern, needs_keyword in ((_ADDRESS, False), (_DOTTED, True)):
        for match in pattern.finditer(text):
            first = _word_at(starts, match.start())
            last = _word_at(starts, match.end() - 1)
            keyword = _keyword_before(lowered, first)
            if needs_keyword and keyword is None:
                continue
            if keyword is not None:
                first = _lead_in_end(lowered, keyword, first)
            spans.append(Span(first, last, EntityType.EMAIL))
    return spans


def _word_at(starts: Sequence[int], offset: int) -> int:
    index = 0
    while index + 1 < len(starts) and starts[index + 1] <= offset:
        index += 1
    return index


def _keyword_before(lowered: Sequence[str], first: int) -> int | None:
    """The index of an e-mail keyword at most six words before ``first``."""
    for index in range(first - 1, max(-1, first - 7), -1):
        if lowered[index] in EMAIL_KEYWORDS:
            return index
    return None


def _lead_in_end(lowered: Sequence[str], keyword: int, first: int) -> int:
    """Where the address starts when a keyword precedes it: after the lead-in words (``is``,
    ``address``) and at most ``MAX_SPOKEN_NAME_WORDS`` words before the matched local part."""
    start = keyword + 1
    while start < first and lowered[start] in _LEAD_IN:
        start += 1
    return max(start, first - MAX_SPOKEN_NAME_WORDS)
