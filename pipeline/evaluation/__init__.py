"""Measuring recognition quality against reference transcripts (pure, no I/O)."""

from pipeline.evaluation.wer import WordErrors, normalize_words, word_error_rate, word_errors

__all__ = ["WordErrors", "normalize_words", "word_error_rate", "word_errors"]
