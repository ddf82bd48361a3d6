from __future__ import annotations

from pipeline.asr.guards import GuardConfig, check_hypothesis, squashed_repeat_start
from pipeline.asr.recognizer import Recognition, RecognizedWord


def timed(*words: tuple[str, int, int]) -> tuple[RecognizedWord, ...]:
    return tuple(RecognizedWord(text, (), start, end) for text, start, end in words)


def test_clear_real_speech_at_a_log_prob_just_under_minus_one_is_kept() -> None:
    # timit_ldc93s1_8k on the real set: -1.04 with no-speech 0.10, suppressed before.
    heard = Recognition((), "She had her dark suit in greasy wash water.", -1.04, 0.10, 0.91)
    assert check_hypothesis(heard, GuardConfig()) is None
    garbage = Recognition((), "Mm.", -1.6, 0.10, 0.5)
    assert check_hypothesis(garbage, GuardConfig()) is not None


def test_a_loop_squeezed_into_the_end_of_the_audio_is_found() -> None:
    # acc_loop_8k before the fix: the copies after the first are timed at zero duration.
    words = timed(
        (" Yes,", 0, 460),
        (" that", 780, 860),
        (" is", 860, 1060),
        (" correct.", 1060, 1180),
        (" Yes,", 1180, 1180),
        (" that", 1180, 1180),
        (" is", 1180, 1180),
        (" correct.", 1180, 1220),
        (" Yes,", 1480, 1480),
        (" that", 1480, 1480),
    )
    assert squashed_repeat_start(words, 60) == 4


def test_a_sentence_said_twice_is_kept() -> None:
    words = timed(
        (" Thank", 0, 300),
        (" you.", 300, 600),
        (" Thank", 900, 1200),
        (" you.", 1200, 1500),
    )
    assert squashed_repeat_start(words, 60) is None


def test_a_squeezed_tail_that_repeats_nothing_is_kept() -> None:
    words = timed((" Please", 0, 300), (" hold", 300, 600), (" on.", 600, 600), (" Now", 600, 600))
    assert squashed_repeat_start(words, 60) is None


def test_a_partial_tail_copy_after_a_real_repeat_is_cut_alone() -> None:
    # Said twice, then the decoder starts a third copy at the end of the audio.
    words = timed(
        (" not", 0, 200),
        (" only", 200, 500),
        (" not", 700, 900),
        (" only", 900, 1200),
        (" not", 1200, 1200),
        (" only", 1200, 1200),
    )
    assert squashed_repeat_start(words, 60) == 4


def test_untimed_words_or_a_disabled_trim_find_nothing() -> None:
    untimed = (RecognizedWord(" you"), RecognizedWord(" you"), RecognizedWord(" you"))
    assert squashed_repeat_start(untimed, 60) is None
    words = timed((" you", 0, 0), (" you", 0, 0), (" you", 0, 0))
    assert squashed_repeat_start(words, 0) is None
    assert squashed_repeat_start(words, 60) == 1
