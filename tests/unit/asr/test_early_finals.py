"""Finals decoded ahead, during the trailing silence that will end their utterance.

Same synthetic set-up as ``test_engine``: ``EnergyVad`` scores the 440 Hz tone as speech, frames
are 32 ms, the gate pads speech by 60 ms and 800 ms of real silence closes an utterance. With the
default ``early_final_ms`` (300 ms) the final's decode happens about 300 ms into the silence, and
the step in which the silence rule fires publishes it without calling the recognizer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import pytest

from pipeline.asr.endpoint import EndpointConfig
from pipeline.asr.engine import EngineConfig, EngineOutput, StreamingEngine
from pipeline.asr.recognizer import TokenBias
from pipeline.asr.vad import EnergyVad
from pipeline.clock import ManualClock
from pipeline.contracts.messages import Final
from pipeline.errors import ConfigError
from tests.unit.asr.fakes import FakeRecognizer, TalliedEngine
from tests.unit.asr.test_engine import (
    CHUNK,
    EMIT_MS,
    KEY,
    PAD_MS,
    RATE_HZ,
    budget_engine,
    feed_many,
    final_requests,
    finals,
    run,
    signal,
)


def engine_with(early_final_ms: int | None, biases: object = None) -> StreamingEngine:
    config = EngineConfig(
        min_decode_ms=500,
        endpoint=EndpointConfig(speech_pad_ms=PAD_MS),
        early_final_ms=early_final_ms,
    )
    fake = FakeRecognizer()
    return TalliedEngine(fake, EnergyVad(), config, ManualClock(EMIT_MS), biases=biases)


def recognizer_of(engine: StreamingEngine) -> FakeRecognizer:
    recognizer = engine._recognizer
    assert isinstance(recognizer, FakeRecognizer)
    return recognizer


def comparable(items: Sequence[Final]) -> list[Final]:
    return [dataclasses.replace(f, emit_ms=0, latency_ms=None) for f in items]


@pytest.mark.parametrize("runs", [(10, 40, 30), (10, 40, 15, 40, 30), (5, 60, 20, 30, 40, 50, 28)])
def test_finals_decoded_ahead_equal_finals_decoded_at_the_endpoint(runs: tuple[int, ...]) -> None:
    audio = signal(*runs)
    ahead = finals(run(engine_with(300), audio))
    at_endpoint = finals(run(engine_with(None), audio))
    assert ahead
    assert comparable(ahead) == comparable(at_endpoint)


def test_the_step_that_reaches_the_endpoint_publishes_the_final_without_decoding() -> None:
    engine = engine_with(300)
    fake = recognizer_of(engine)
    audio = signal(10, 40, 30)
    outputs: list[EngineOutput] = []
    calls_before_final = None
    for start in range(0, len(audio), CHUNK):
        engine.accept(KEY, audio[start : start + CHUNK], RATE_HZ)
        calls_before = len(fake.calls)
        step = engine.step().outputs
        if finals(step):
            calls_before_final = calls_before
            assert len(fake.calls) == calls_before  # no recognizer call in the final's step
        outputs.extend(step)
    assert calls_before_final is not None
    assert len(finals(outputs)) == 1
    assert engine.total("early_finals_decoded") == engine.total("early_finals_used") == 1


def test_no_partials_are_decoded_in_trailing_silence_once_the_final_is_decoded_ahead() -> None:
    # 2 s of speech then 2 s of silence, the stream kept open: without early finals the hops in
    # the silence are decoded as partials (of the same speech); with them, one final decode.
    audio = signal(10, 62, 62)
    ahead = engine_with(300)
    run(ahead, audio, end_of_stream=False)
    plain = engine_with(None)
    run(plain, audio, end_of_stream=False)
    assert len(recognizer_of(ahead).requests) < len(recognizer_of(plain).requests)
    assert len(final_requests(recognizer_of(ahead))) == 1
    assert len(final_requests(recognizer_of(plain))) == 1


class Biases:
    """A ``BiasSource`` whose bias object can be swapped (a hotword list update)."""

    def __init__(self) -> None:
        self.current: TokenBias | None = self.make()

    @staticmethod
    def make() -> TokenBias:
        def bias(text_tokens: Sequence[int]) -> Mapping[int, float]:
            return {}

        return bias

    def bias_for(self, tenant: str, call_id: str) -> TokenBias | None:
        return self.current


def test_a_hotword_change_after_the_decode_ahead_decodes_the_final_again() -> None:
    biases = Biases()
    engine = engine_with(300, biases)
    fake = recognizer_of(engine)
    audio = signal(10, 40, 30)
    outputs: list[EngineOutput] = []
    first = biases.current
    for start in range(0, len(audio), CHUNK):
        engine.accept(KEY, audio[start : start + CHUNK], RATE_HZ)
        outputs.extend(engine.step().outputs)
        if (
            engine.total("early_finals_decoded") == 1
            and biases.current is first
            and not finals(outputs)
        ):
            biases.current = Biases.make()  # the list changed after the decode ahead
    changed_to = biases.current
    assert changed_to is not first
    assert len(finals(outputs)) == 1
    timed = [r for r in fake.requests if r.with_word_timings]
    # Decoded ahead once per bias in force; the final used the newest one.
    assert timed[-1].bias is changed_to
    assert engine.total("early_finals_used") == 1
    assert engine.total("early_finals_decoded") == 2


def test_speech_resuming_after_the_decode_ahead_discards_it() -> None:
    engine = engine_with(300)
    got = finals(run(engine, signal(10, 40, 20, 40, 30)))  # a 640 ms pause: one utterance
    assert len(got) == 1
    assert engine.total("early_finals_decoded") == 2  # the first part (wasted) and the whole
    assert engine.total("early_finals_used") == 1


def test_under_a_budget_decodes_ahead_take_the_finals_turn() -> None:
    engine, fake = budget_engine(600)
    feed_many(engine, 6, signal(10, 60, 40))
    assert engine.total("early_finals_used") == 6
    # Decodes ahead (with word timings) never share a batch with partials.
    assert all(len({r.with_word_timings for r in call}) == 1 for call in fake.calls)


@pytest.mark.parametrize("early_final_ms", [0, -1])
def test_early_final_ms_must_be_positive(early_final_ms: int) -> None:
    with pytest.raises(ConfigError, match="early_final_ms"):
        EngineConfig(early_final_ms=early_final_ms)


def test_early_final_ms_beyond_the_endpoint_never_fires() -> None:
    # A tenant with a short endpoint (the replay gate's "worse config" uses 200 ms) keeps the
    # default: the endpoint comes first and every final is decoded there.
    config = EngineConfig(
        min_decode_ms=500,
        endpoint=EndpointConfig(trailing_silence_ms=200, speech_pad_ms=PAD_MS),
        early_final_ms=300,
    )
    engine = TalliedEngine(FakeRecognizer(), EnergyVad(), config, ManualClock(EMIT_MS))
    assert finals(run(engine, signal(10, 40, 30)))
    assert engine.total("early_finals_decoded") == 0


def test_a_final_decoded_ahead_does_not_wait_for_other_sessions_decodes() -> None:
    engine = engine_with(300)
    fake = recognizer_of(engine)
    a, b = KEY, KEY._replace(call_id="call-2")
    short, long = signal(10, 40, 30), signal(10, 120)
    for start in range(0, len(short), CHUNK):
        calls_before = len(fake.calls)
        engine.accept(a, short[start : start + CHUNK], RATE_HZ)
        engine.accept(b, long[start : start + CHUNK], RATE_HZ)
        report = engine.step()
        step = report.outputs
        if finals(step):
            # b's partial was due too; the final went out first, in a step without a decode.
            assert len(fake.calls) == calls_before
            assert report.windows == 0
            assert engine.pending_jobs() >= 1
            return
    raise AssertionError("no final")
