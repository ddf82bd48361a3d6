from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.asr.agreement import LocalAgreement, normalize_word
from pipeline.asr.recognizer import RecognizedWord
from pipeline.errors import ConfigError, StreamscribeError


def hyp(text: str) -> list[RecognizedWord]:
    return [RecognizedWord(f" {token}") for token in text.split()]


def texts(words: tuple[RecognizedWord, ...]) -> list[str]:
    return [word.text.strip() for word in words]


def test_first_hypothesis_is_all_tentative() -> None:
    agreement: LocalAgreement[RecognizedWord] = LocalAgreement()
    assert agreement.update(hyp("hello world")) == ()
    assert agreement.committed == ()
    assert texts(agreement.tentative) == ["hello", "world"]


def test_commits_the_common_prefix_of_the_last_two_hypotheses() -> None:
    agreement: LocalAgreement[RecognizedWord] = LocalAgreement()
    agreement.update(hyp("I want to"))
    newly = agreement.update(hyp("I want two tickets"))
    assert texts(newly) == ["I", "want"]
    assert texts(agreement.committed) == ["I", "want"]
    assert texts(agreement.tentative) == ["two", "tickets"]
    newly = agreement.update(hyp("I want two tickets please"))
    assert texts(newly) == ["two", "tickets"]
    assert texts(agreement.tentative) == ["please"]


def test_comparison_ignores_case_and_punctuation_but_keeps_the_newest_surface_form() -> None:
    agreement: LocalAgreement[RecognizedWord] = LocalAgreement()
    agreement.update(hyp("hello world"))
    agreement.update(hyp("Hello, world."))
    assert texts(agreement.committed) == ["Hello,", "world."]


def test_committed_words_survive_a_disagreeing_hypothesis() -> None:
    agreement: LocalAgreement[RecognizedWord] = LocalAgreement()
    agreement.update(hyp("the cat sat"))
    agreement.update(hyp("the cat sat down"))
    agreement.update(hyp("a dog stood up"))
    assert texts(agreement.committed) == ["the", "cat", "sat"]
    # Aligned by word count: the newest hypothesis's first three words are ignored.
    assert texts(agreement.tentative) == ["up"]


def test_hypothesis_shorter_than_committed_leaves_nothing_tentative() -> None:
    agreement: LocalAgreement[RecognizedWord] = LocalAgreement()
    agreement.update(hyp("one two three"))
    agreement.update(hyp("one two three"))
    agreement.update(hyp("one"))
    assert texts(agreement.committed) == ["one", "two", "three"]
    assert agreement.tentative == ()


def test_finalize_extends_committed_and_resets() -> None:
    agreement: LocalAgreement[RecognizedWord] = LocalAgreement()
    agreement.update(hyp("good morning"))
    agreement.update(hyp("good morning every"))
    final = agreement.finalize(hyp("Good morning everyone"))
    assert texts(final) == ["good", "morning", "everyone"]
    assert agreement.committed == ()
    assert agreement.tentative == ()
    assert agreement.hypothesis == ()


def test_finalize_without_argument_uses_the_newest_hypothesis() -> None:
    agreement: LocalAgreement[RecognizedWord] = LocalAgreement()
    agreement.update(hyp("yes"))
    agreement.update(hyp("yes please"))
    assert texts(agreement.finalize()) == ["yes", "please"]
    assert agreement.finalize() == ()


def test_agreement_count_one_commits_immediately_and_three_waits() -> None:
    eager: LocalAgreement[RecognizedWord] = LocalAgreement(agreement_count=1)
    assert texts(eager.update(hyp("a b"))) == ["a", "b"]
    patient: LocalAgreement[RecognizedWord] = LocalAgreement(agreement_count=3)
    patient.update(hyp("a b c"))
    assert patient.update(hyp("a b d")) == ()
    assert texts(patient.update(hyp("a x d"))) == ["a"]


def test_agreement_count_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        LocalAgreement(agreement_count=0)
    assert issubclass(ConfigError, StreamscribeError)


def test_word_timing_is_carried_from_the_newest_hypothesis() -> None:
    agreement: LocalAgreement[RecognizedWord] = LocalAgreement()
    agreement.update([RecognizedWord(" hi", (1,), 0, 300, 0.5)])
    agreement.update([RecognizedWord(" hi", (1,), 20, 280, 0.9)])
    assert agreement.committed == (RecognizedWord(" hi", (1,), 20, 280, 0.9),)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (" Hello,", "hello"),
        ("HELLO!", "hello"),
        ("don't", "dont"),
        ("Straße", "strasse"),
        ("—", ""),
    ],
)
def test_normalize_word(text: str, key: str) -> None:
    assert normalize_word(text) == key


# Property tests: a tiny vocabulary with casing/punctuation variants makes agreement frequent.
_surface = st.sampled_from(["yes", "Yes,", "no", "No.", "maybe", "MAYBE", "ok"])
_hypothesis = st.lists(_surface, max_size=8).map(lambda ws: [RecognizedWord(w) for w in ws])
_hypotheses = st.lists(_hypothesis, min_size=1, max_size=12)


@settings(deadline=None, max_examples=200)
@given(hypotheses=_hypotheses, agreement_count=st.integers(min_value=1, max_value=3))
def test_committed_never_retracts_and_only_commits_agreed_words(
    hypotheses: list[list[RecognizedWord]], agreement_count: int
) -> None:
    agreement: LocalAgreement[RecognizedWord] = LocalAgreement(agreement_count)
    for step, hypothesis in enumerate(hypotheses):
        before = agreement.committed
        newly = agreement.update(hypothesis)
        after = agreement.committed
        assert after[: len(before)] == before
        assert after == before + newly
        window = hypotheses[max(0, step + 1 - agreement_count) : step + 1]
        for index in range(len(before), len(after)):
            keys = {normalize_word(h[index].text) for h in window}
            assert len(keys) == 1
            assert after[index] is hypothesis[index]
        assert agreement.tentative == tuple(hypothesis[len(after) :])


@settings(deadline=None, max_examples=200)
@given(hypotheses=_hypotheses, last=_hypothesis)
def test_finalize_extends_committed(
    hypotheses: list[list[RecognizedWord]], last: list[RecognizedWord]
) -> None:
    agreement: LocalAgreement[RecognizedWord] = LocalAgreement()
    for hypothesis in hypotheses:
        agreement.update(hypothesis)
    committed = agreement.committed
    final = agreement.finalize(last)
    assert final[: len(committed)] == committed
    assert final == committed + tuple(last[len(committed) :])
