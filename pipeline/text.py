"""Transcript text shared by every module that splits or shows it.

``replace_non_word`` decides what counts as a word character, for every place that splits
transcripts into words. Python's ``re`` ``\\w`` matches letters, digits and ``_`` but not
combining marks (Unicode category M), so a pattern like ``[^\\w]`` cuts the vowel signs and
viramas out of Devanagari, Bengali or Thai words (``हिन्दी`` would become ``ह न द``), and
drops a decomposed accent. Here a word character is ``\\w`` or a combining mark.

``format_span_ms`` writes an audio offset as ``mm:ss.cc``, for every place that shows the span
of an utterance (``tail``, ``transcribe``, the replay report).
"""

from __future__ import annotations

import functools
import re
import unicodedata

__all__ = ["format_span_ms", "replace_non_word"]


def format_span_ms(ms: int) -> str:
    """``ms`` (an offset from the start of the call) as ``mm:ss.cc``, hundredths truncated;
    minutes keep counting past 59 (an hour is ``60:00.00``)."""
    return f"{ms // 60000:02d}:{ms // 1000 % 60:02d}.{ms % 1000 // 10:02d}"


def replace_non_word(text: str, replacement: str, keep: str = "") -> str:
    """``text`` with each character that is neither a word character nor one of ``keep``
    replaced by ``replacement``."""
    if text.isascii():  # the common case: one regex pass
        return _non_word(keep).sub(replacement, text)
    return "".join(
        char
        if char.isalnum() or char == "_" or char in keep or unicodedata.category(char)[0] == "M"
        else replacement
        for char in text
    )


@functools.lru_cache(maxsize=8)
def _non_word(keep: str) -> re.Pattern[str]:
    return re.compile(f"[^\\w{re.escape(keep)}]")
