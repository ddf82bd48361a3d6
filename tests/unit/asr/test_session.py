"""One stream's state, driven directly: audio in, VAD probabilities in, final jobs out."""

from __future__ import annotations

import json

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.asr.endpoint import EndpointConfig, EndpointReason
from pipeline.asr.session import FinalJob, Session, SessionKey, SessionSnapshot
from pipeline.asr.vad import SpeechGateConfig
from pipeline.audio.denoise import StreamDenoiser
from pipeline.audio.resample import DELAY_SAMPLES, Upsampler2x, to_16k

Audio = npt.NDArray[np.float32]

FRAME = 512
PAD = 960  # the gate's 60 ms speech pad, in samples
GATE = SpeechGateConfig()
KEY = SessionKey("call-7", "agent")


def make_session(max_utterance_ms: int = 20_000) -> Session:
    endpoint = EndpointConfig(max_utterance_ms=max_utterance_ms, speech_pad_ms=GATE.speech_pad_ms)
    return Session(KEY, "tenant-a", None, GATE, endpoint, FRAME)


def noise(samples: int, seed: int = 0) -> Audio:
    return (0.1 * np.random.default_rng(seed).standard_normal(samples)).astype(np.float32)


def score(session: Session, probs: list[float]) -> None:
    """Give the session's next frames these probabilities (its audio must be buffered)."""
    for prob in probs:
        assert session.frames_ready() > 0
        session.apply_vad(prob)


def feed(session: Session, probs: list[float]) -> None:
    """Buffer one frame of audio per probability, then score them."""
    session.accept(noise(len(probs) * FRAME), 16_000, None, None)
    score(session, probs)


def test_session_key_is_call_and_channel() -> None:
    assert KEY == ("call-7", "agent")
    assert (KEY.call_id, KEY.channel) == ("call-7", "agent")


def test_accept_copies_the_audio_and_counts_it() -> None:
    session = make_session()
    chunk = noise(1000)
    session.accept(chunk, 16_000, None, 41)
    chunk[:] = 0.0
    assert session.total_samples == session.stats.audio_samples == 1000
    assert np.array_equal(session.audio(0, 1000), noise(1000))
    assert session.last_position == 41
    session.accept(np.zeros(0, dtype=np.float32), 16_000, None, None)
    assert session.last_position == 41  # a chunk without a position keeps the last one


def test_telephone_chunks_become_the_one_shot_16_khz_signal() -> None:
    session = make_session()
    narrow = noise(4000)
    for start in range(0, 4000, 333):
        session.accept(narrow[start : start + 333], 8000, None, None)
    assert session.total_samples == 8000
    assert session.audio(0, 8000).tobytes() == to_16k(narrow, 8000)[:8000].tobytes()


def test_the_end_of_a_telephone_stream_keeps_the_resamplers_tail() -> None:
    session = make_session()
    narrow = noise(4000)
    for start in range(0, 4000, 333):
        session.accept(narrow[start : start + 333], 8000, None, None)
    session.drain()
    # Twice the input samples, after the resampler's 1 ms delay: the last input samples too.
    assert session.total_samples == session.stats.audio_samples == 2 * 4000 + DELAY_SAMPLES
    assert session.audio(0, session.total_samples).tobytes() == to_16k(narrow, 8000).tobytes()
    session.drain()
    assert session.total_samples == 2 * 4000 + DELAY_SAMPLES


def test_the_resamplers_tail_is_denoised_before_the_denoiser_is_flushed() -> None:
    endpoint = EndpointConfig(speech_pad_ms=GATE.speech_pad_ms)
    session = Session(KEY, "tenant-a", None, GATE, endpoint, FRAME, denoise=True)
    narrow = noise(4000)
    for start in range(0, 4000, 333):
        session.accept(narrow[start : start + 333], 8000, None, None)
    session.drain()
    with StreamDenoiser() as denoiser:
        wide = to_16k(narrow, 8000)
        expected = np.concatenate([denoiser.process(wide), denoiser.flush()])
    assert session.total_samples == session.stats.audio_samples == 2 * 4000 + DELAY_SAMPLES
    assert session.audio(0, session.total_samples).tobytes() == expected.tobytes()


def test_a_rate_change_ends_the_resampled_audio_and_restarts_the_resampler() -> None:
    session = make_session()
    first, wide, second = noise(800, 1), noise(1600, 2), noise(800, 3)
    session.accept(first, 8000, None, None)
    session.accept(wide, 16_000, None, None)
    session.accept(second, 8000, None, None)
    first_end = 1600 + DELAY_SAMPLES
    assert session.total_samples == first_end + 1600 + 1600
    assert session.audio(0, first_end).tobytes() == to_16k(first, 8000).tobytes()
    assert np.array_equal(session.audio(first_end, first_end + 1600), wide)
    assert (
        session.audio(first_end + 1600, first_end + 3200).tobytes()
        == Upsampler2x().process(second).tobytes()
    )


def test_capture_time_of_a_sample_comes_from_the_newest_mark_before_it() -> None:
    session = make_session()
    session.accept(noise(1600), 16_000, None, None)
    assert session.capture_ms_at(100) is None  # no mark yet
    session.accept(noise(1600), 16_000, 5_000, None)
    session.accept(noise(1600), 16_000, 5_250, None)  # 150 ms late: the mark resets the clock
    assert session.capture_ms_at(1600) == 5_000
    assert session.capture_ms_at(1600 + 800) == 5_050
    assert session.capture_ms_at(3200 + 160) == 5_260


def test_vad_frames_are_consecutive_views_of_the_buffer() -> None:
    session = make_session()
    audio = noise(3 * FRAME + 100)
    session.accept(audio, 16_000, None, None)
    assert session.frames_ready() == 3
    for index in range(3):
        assert np.array_equal(session.next_vad_frame(), audio[index * FRAME : (index + 1) * FRAME])
        session.apply_vad(0.0)
    assert session.frames_ready() == 0
    assert session.vad_position_samples == 3 * FRAME


def test_speech_opens_an_utterance_and_silence_queues_its_final() -> None:
    session = make_session()
    feed(session, [0.0] * 10 + [1.0] * 7)
    assert session.utterance is None  # 7 frames: not yet 250 ms of speech
    feed(session, [1.0] * 30)
    assert session.utterance is not None
    assert session.utterance.index == 0
    assert session.utterance.start_samples == 10 * FRAME - PAD
    feed(session, [0.0] * 24)
    assert not session.final_jobs
    feed(session, [0.0])
    assert list(session.final_jobs) == [
        # Decided at the VAD position of the frame that completed 800 ms of silence.
        FinalJob(
            0,
            10 * FRAME - PAD,
            47 * FRAME + PAD,
            72 * FRAME,
            EndpointReason.SILENCE,
            start_is_onset=True,
            end_is_offset=True,
        )
    ]
    assert session.utterance is None
    assert session.next_index == 1


def test_end_of_stream_pads_the_last_frame_without_counting_it_as_audio() -> None:
    session = make_session()
    session.accept(noise(2 * FRAME + 100), 16_000, None, None)
    assert session.pad_to_frame()
    assert session.total_samples == 3 * FRAME
    assert session.stats.audio_samples == 2 * FRAME + 100
    assert np.array_equal(session.audio(2 * FRAME + 100, 3 * FRAME), np.zeros(FRAME - 100))
    assert not session.pad_to_frame()


def test_close_stream_queues_the_open_utterance() -> None:
    session = make_session()
    feed(session, [0.0] * 5 + [1.0] * 20)
    session.close_stream(EndpointReason.END_OF_STREAM)
    [job] = session.final_jobs
    assert job.reason is EndpointReason.END_OF_STREAM
    assert (job.start_samples, job.end_samples) == (5 * FRAME - PAD, 25 * FRAME)
    # Speech ran up to the end of the stream: the VAD never heard it end.
    assert (job.start_is_onset, job.end_is_offset) == (True, False)
    assert session.utterance is None


def test_a_forced_close_keeps_the_gate_in_speech() -> None:
    session = make_session()
    feed(session, [0.0] * 5 + [1.0] * 20)
    session.close_stream(EndpointReason.FORCED)
    [job] = session.final_jobs
    assert job.reason is EndpointReason.FORCED
    feed(session, [1.0] * 20 + [0.0] * 30)
    assert [
        (j.start_samples, j.reason, j.start_is_onset, j.end_is_offset) for j in session.final_jobs
    ] == [
        (5 * FRAME - PAD, EndpointReason.FORCED, True, False),
        (25 * FRAME, EndpointReason.SILENCE, False, True),  # began in speech, at the force
    ]


def test_utterances_finalized_before_a_failover_are_not_queued_again() -> None:
    session = make_session()
    session.finals_through = 1
    for _ in range(3):
        feed(session, [1.0] * 20 + [0.0] * 30)
    assert [job.utterance_index for job in session.final_jobs] == [2]
    assert session.next_index == 3


def test_a_partial_is_due_after_min_decode_and_then_every_hop() -> None:
    session = make_session()
    hop, minimum = 8000, 8000
    feed(session, [1.0] * 12)
    assert session.utterance is not None
    assert not session.due_partial(hop, minimum)  # 12 frames: under 500 ms
    feed(session, [1.0] * 4)
    assert session.due_partial(hop, minimum)
    session.utterance.decoded_to_samples = session.vad_position_samples
    feed(session, [1.0] * 15)
    assert not session.due_partial(hop, minimum)
    feed(session, [1.0])
    assert session.due_partial(hop, minimum)
    session.finals_through = 0  # finalized before a failover: no partials either
    assert not session.due_partial(hop, minimum)


def test_trim_keeps_memory_bounded_in_silence() -> None:
    session = make_session()
    for _ in range(200):
        feed(session, [0.0] * 5)
        session.trim(PAD)
    assert len(session.buffer) <= GATE.max_pending_samples + PAD + FRAME
    assert session.buffer_start_samples + len(session.buffer) == session.total_samples


def test_trim_keeps_the_open_utterance_and_queued_finals() -> None:
    session = make_session()
    feed(session, [0.0] * 100 + [1.0] * 40 + [0.0] * 30 + [1.0] * 200)
    session.trim(PAD)
    [job] = session.final_jobs
    assert (
        len(session.audio(job.start_samples, job.end_samples))
        == job.end_samples - job.start_samples
    )
    session.final_jobs.clear()
    session.trim(PAD)
    assert session.utterance is not None
    start = session.utterance.start_samples
    assert session.buffer_start_samples == start
    assert len(session.audio(start, session.total_samples)) == session.total_samples - start


def test_quiescent_only_between_utterances() -> None:
    session = make_session()
    assert session.quiescent
    feed(session, [0.0] * 5 + [1.0])
    assert not session.quiescent  # a speech start not yet confirmed
    feed(session, [1.0] * 20)
    assert not session.quiescent
    feed(session, [0.0] * 30)
    assert not session.quiescent  # its final is still queued
    session.final_jobs.clear()
    assert session.quiescent
    session.flush_pending = True
    assert not session.quiescent


@settings(deadline=None, max_examples=50)
@given(
    probs=st.lists(st.sampled_from([0.0, 0.2, 0.4, 0.6, 1.0]), min_size=1, max_size=80),
    telephone=st.booleans(),
    extra=st.integers(0, FRAME - 1),
    capture=st.booleans(),
)
def test_a_snapshot_survives_json_bit_for_bit(
    probs: list[float], telephone: bool, extra: int, capture: bool
) -> None:
    session = make_session()
    rate = 8000 if telephone else 16_000
    per_frame = FRAME * rate // 16_000
    session.accept(
        noise(len(probs) * per_frame + extra // 2, 5), rate, 1234 if capture else None, 9
    )
    score(session, probs)
    session.stats.utterances = 3
    vad_state = ((0.1, -2.5e-30, 1 / 3), ())
    snapshot = session.snapshot(vad_state)
    restored = SessionSnapshot.from_dict(json.loads(json.dumps(snapshot.to_dict())))
    assert restored == snapshot
    assert restored.vad_state == vad_state
    assert restored.tail == tuple(
        session.audio(session.gate.settled_samples, session.total_samples).tolist()
    )
    assert restored.stats == (session.stats.audio_samples, session.stats.speech_samples, 3, 0)


def test_restore_resumes_position_resampler_and_index() -> None:
    session = make_session()
    narrow = noise(30 * 256, 8)
    session.accept(narrow[: 20 * 256], 8000, 100, 1)
    feed_silence = [0.0] * session.frames_ready()
    score(session, feed_silence)
    session.next_index = 4
    snapshot = session.snapshot(((), ()))
    restored = make_session()
    restored.restore(snapshot)
    assert restored.next_index == 4
    assert restored.tenant == "tenant-a"
    assert restored.total_samples == session.total_samples
    assert restored.gate.snapshot() == session.gate.snapshot()
    session.accept(narrow[20 * 256 :], 8000, None, None)
    restored.accept(narrow[20 * 256 :], 8000, None, None)
    session.drain()
    restored.drain()
    assert restored.total_samples == session.total_samples
    end = session.total_samples
    start = restored.buffer_start_samples
    assert np.array_equal(restored.audio(start, end), session.audio(start, end))


@pytest.mark.parametrize("reason", [EndpointReason.END_OF_STREAM, EndpointReason.FORCED])
def test_closing_a_silent_stream_queues_nothing(reason: EndpointReason) -> None:
    session = make_session()
    feed(session, [0.0] * 10)
    session.close_stream(reason)
    assert not session.final_jobs
    assert session.next_index == 0
