"""snap_word_edges: only the utterance's outer edges move, and every word stays a word."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipeline.asr.word_edges import snap_word_edges
from pipeline.contracts.messages import Word


def _words(*spans: tuple[int, int]) -> tuple[Word, ...]:
    return tuple(Word(f"w{n}", start, end, 0.9) for n, (start, end) in enumerate(spans))


def test_the_first_start_and_the_last_end_move_onto_the_speech_span() -> None:
    words = _words((1000, 1300), (1350, 1600), (1650, 1800))
    snapped = snap_word_edges(words, speech_start_ms=1060, speech_end_ms=1950)
    assert [(w.start_ms, w.end_ms) for w in snapped] == [(1060, 1300), (1350, 1600), (1650, 1950)]
    assert [w.word for w in snapped] == ["w0", "w1", "w2"]


def test_a_last_word_whisper_stretched_is_shortened() -> None:
    words = _words((1000, 1300), (1350, 2200))
    assert snap_word_edges(words, 900, 1900)[-1].end_ms == 1900


def test_a_start_later_than_the_vad_onset_is_kept() -> None:
    words = _words((1100, 1300), (1350, 1600))
    assert snap_word_edges(words, 1060, 1600)[0].start_ms == 1100


def test_a_speech_end_before_the_last_word_starts_leaves_it_alone() -> None:
    words = _words((1000, 1300), (1350, 1600))
    assert snap_word_edges(words, 1000, 1340)[-1] == words[-1]


def test_a_single_word_gets_both_edges() -> None:
    (word,) = snap_word_edges(_words((1000, 1200)), 1040, 1500)
    assert (word.start_ms, word.end_ms) == (1040, 1500)


def test_an_edge_the_vad_did_not_hear_is_left_alone() -> None:
    words = _words((1000, 1300), (1350, 1600))
    assert snap_word_edges(words, None, 1500) == (words[0], Word("w1", 1350, 1500, 0.9))
    assert snap_word_edges(words, 1060, None) == (Word("w0", 1060, 1300, 0.9), words[1])
    assert snap_word_edges(words, None, None) == words


def test_no_words_stay_no_words() -> None:
    assert snap_word_edges((), 0, 1000) == ()


@given(
    st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 800)), min_size=1, max_size=8),
    st.integers(0, 6000),
    st.integers(0, 6000),
)
def test_every_word_keeps_start_before_end(
    raw: list[tuple[int, int]], speech_start_ms: int, speech_end_ms: int
) -> None:
    words = _words(*((start, start + length) for start, length in raw))
    snapped = snap_word_edges(words, speech_start_ms, speech_end_ms)
    assert len(snapped) == len(words)
    assert all(w.start_ms <= w.end_ms for w in snapped)
    assert snapped[1:-1] == words[1:-1]
