"""The engine with int8 Whisper weights (``STREAMSCRIBE_QUANTIZATION=int8``) on its real
parts: the same fixtures as ``test_engine_real``, the same streaming, the quantized model.

What int8 must keep: word error rates within the bounds set for the float32 engine
(``test_engine_real``), the determinism contract (a file decodes alike alone or in any batch)
and an honest model id. Measured (CPU, 2 threads): utterances 8 errors in 134 words, 6.0 %
(float32: 5, 3.7 %; "found your order in our system" heard as "found your ordinary power
system"); telephone 1 in 66, 1.5 % (float32 the same); noisy 6 in 44, 13.6 % (the same).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from pipeline.asr.engine import StreamingEngine
from pipeline.asr.factory import LoadedEngine, build_engine
from pipeline.clock import ManualClock
from pipeline.evaluation import WordErrors, word_errors
from pipeline.settings import AsrSettings
from tests.integration.test_engine_real import (
    EMIT_MS,
    WER_BOUNDS,
    Corpus,
    by_id,
    finals_of,
    load,
    records,
    stream,
    timing_view,
)

pytestmark = pytest.mark.integration

KINDS = ("utterance", "telephone", "telephone_codec", "noisy")


@pytest.fixture(scope="module")
def loaded() -> Iterator[LoadedEngine]:
    # On the CPU: a CUDA device runs float16 and ignores the setting.
    settings = replace(AsrSettings(device="cpu", threads=2, partials=False), quantization="int8")
    engine = build_engine(settings, ManualClock(EMIT_MS))
    yield engine
    assert not engine.engine.sessions


@pytest.fixture(scope="module")
def corpus(loaded: LoadedEngine) -> Corpus:
    calls = [load(r, call_id=r["id"]) for r in records(*KINDS)]
    return Corpus(*stream(loaded.engine, calls))


def test_the_loaded_model_says_it_is_int8(loaded: LoadedEngine, corpus: Corpus) -> None:
    assert loaded.model_id == "whisper-tiny.en-int8"
    assert loaded.dtype == "int8"
    finals = corpus.finals(records("utterance")[0]["id"])
    assert finals
    assert {f.model_id for f in finals} == {"whisper-tiny.en-int8"}


@pytest.mark.parametrize(("kinds", "limit"), WER_BOUNDS)
def test_int8_word_error_rates_stay_within_the_float32_bounds(
    corpus: Corpus, kinds: tuple[str, ...], limit: float
) -> None:
    errors = WordErrors()
    for record in records(*kinds):
        errors += word_errors(record["text"], corpus.text(record["id"]))
    detail = {r["id"]: corpus.text(r["id"]) for r in records(*kinds)}
    assert errors.reference_words > 0
    assert errors.wer <= limit, f"WER {errors.wer:.3f} ({errors}): {detail}"


def test_a_file_decodes_alike_alone_and_in_the_corpus_batches(
    corpus: Corpus, loaded: LoadedEngine
) -> None:
    """int8 layers quantize their inputs per call; the model must still give a window the same
    result whatever it is batched with (the determinism replay and takeovers rely on)."""
    engine: StreamingEngine = loaded.engine
    for fixture in ("utt02_billing", "tel_utt01_account"):
        outputs, _ = stream(engine, [load(by_id(fixture), "again")], chunk_ms=160)
        again = finals_of(outputs, "again")
        assert again
        assert [timing_view(f) for f in again] == [
            timing_view(f) for f in corpus.finals(fixture)
        ], fixture
