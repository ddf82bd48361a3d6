"""The engine with the RNNoise stage on: same utterances, all audio out, no snapshots of its own."""

from __future__ import annotations

import dataclasses

from pipeline.asr.engine import ResumePoint, SessionEnded, StreamingEngine
from pipeline.asr.vad import EnergyVad
from pipeline.clock import ManualClock
from tests.unit.asr.fakes import FakeRecognizer
from tests.unit.asr.test_engine import EMIT_MS, KEY, finals, make_engine, run, signal


def _denoising() -> StreamingEngine:
    plain, _ = make_engine()
    config = dataclasses.replace(plain.config, denoise=True)
    return StreamingEngine(FakeRecognizer(), EnergyVad(), config, ManualClock(EMIT_MS))


def test_denoised_stream_keeps_its_length_and_ends_cleanly() -> None:
    # RNNoise removes most of a steady tone (it is not speech): only the stream's bookkeeping
    # is checked here; speech through the denoiser is tested on real fixtures.
    audio = signal(10, 40, 30, 40, 30)
    outputs = run(_denoising(), audio)
    ended = [o for o in outputs if isinstance(o, SessionEnded)]
    assert len(ended) == 1
    assert ended[0].audio_ms == len(audio) * 1000 // 16000
    assert all(f.end_ms <= ended[0].audio_ms for f in finals(outputs))


def test_no_snapshot_while_denoising() -> None:
    engine = _denoising()
    engine.accept(KEY, signal(20), 16000)
    engine.step()
    assert engine.snapshot(KEY) is None


def test_a_snapshot_of_a_plain_owner_is_restored_with_rnnoise_started_cold() -> None:
    # A takeover by a denoising worker (a rollout of STREAMSCRIBE_DENOISE): the records before
    # the snapshot are released, so the session must continue from it, numbering and time.
    plain, _ = make_engine()
    outputs = run(plain, signal(10, 40, 30), end_of_stream=False)
    assert [f.utterance_index for f in finals(outputs)] == [0]
    snapshot = plain.snapshot(KEY)
    assert snapshot is not None
    assert snapshot.next_index == 1
    other = _denoising()
    other.resume(KEY, ResumePoint(0, snapshot=snapshot))
    session = other.sessions[KEY]
    assert (session.next_index, session.total_samples) == (1, snapshot.total_samples)
    more = signal(20)
    ended = [o for o in run(other, more) if isinstance(o, SessionEnded)]
    assert len(ended) == 1
    assert ended[0].audio_ms == (snapshot.total_samples + len(more)) * 1000 // 16000
