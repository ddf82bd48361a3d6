"""Silero VAD on its real weights, with speech synthesized by espeak-ng and resampled by sox."""

from __future__ import annotations

import shutil
import subprocess
import sys
import warnings
import wave
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import torch

from pipeline.asr.endpoint import (
    EndpointConfig,
    EndpointDecision,
    EndpointDetector,
    EndpointReason,
)
from pipeline.asr.vad import SileroVad, SpeechGate, Vad, VadStreamState, silero_jit_path
from pipeline.errors import ModelLoadError

pytestmark = pytest.mark.integration

RATE_HZ = 16_000
FRAME = 512
Audio = npt.NDArray[np.float32]


def synthesize(text: str, directory: Path) -> Audio:
    """``text`` spoken by espeak-ng, as 16 kHz mono float32."""
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        pytest.fail("espeak-ng and sox are needed to synthesize speech (make setup installs them)")
    raw, resampled = directory / f"{len(text)}_raw.wav", directory / f"{len(text)}_16k.wav"
    subprocess.run(["espeak-ng", "-w", str(raw), text], check=True, capture_output=True)
    subprocess.run(
        ["sox", str(raw), "-r", str(RATE_HZ), "-c", "1", "-b", "16", str(resampled)],
        check=True,
        capture_output=True,
    )
    with wave.open(str(resampled)) as reader:
        pcm = np.frombuffer(reader.readframes(reader.getnframes()), dtype=np.int16)
    return (pcm.astype(np.float32) / 32768.0).astype(np.float32)


def silence(duration_ms: int) -> Audio:
    return np.zeros(duration_ms * RATE_HZ // 1000, dtype=np.float32)


def white_noise(duration_ms: int, rms: float, seed: int) -> Audio:
    rng = np.random.default_rng(seed)
    return (rms * rng.standard_normal(duration_ms * RATE_HZ // 1000)).astype(np.float32)


def frames_of(audio: Audio) -> Audio:
    usable = len(audio) // FRAME * FRAME
    return audio[:usable].reshape(-1, FRAME)


def sequential_probs(vad: SileroVad, audio: Audio) -> Audio:
    """One stream alone: a batch of one per frame."""
    state = vad.new_state()
    return np.array(
        [vad.speech_probs(frame[None, :], [state])[0] for frame in frames_of(audio)],
        dtype=np.float32,
    )


@pytest.fixture(scope="module")
def vad() -> SileroVad:
    return SileroVad()


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> Audio:
    directory = tmp_path_factory.mktemp("speech")
    return synthesize("Hello, I would like to check the balance of my account please.", directory)


@pytest.fixture(scope="module")
def streams(speech: Audio) -> list[Audio]:
    return five_streams(speech)


def five_streams(speech: Audio) -> list[Audio]:
    """Five streams of equal length: speech at two offsets, silence, noise, quieter speech."""
    framed = [
        np.concatenate([silence(1000), speech, silence(1000)]),
        np.concatenate([silence(1500), speech, silence(500)]),
        silence(5500),
        white_noise(5500, rms=0.1, seed=1),
        np.concatenate([silence(300), 0.25 * speech, silence(1700)]),
    ]
    length = min(len(audio) for audio in framed) // FRAME * FRAME
    return [audio[:length] for audio in framed]


def test_speech_scores_high_and_silence_and_noise_low(vad: SileroVad, speech: Audio) -> None:
    lead_frames = 1000 * RATE_HZ // 1000 // FRAME
    speech_frames = len(speech) // FRAME
    probs = sequential_probs(vad, np.concatenate([silence(1000), speech, silence(1000)]))
    in_speech = probs[lead_frames : lead_frames + speech_frames]
    assert in_speech.max() > 0.95
    assert np.mean(in_speech > 0.5) > 0.7
    # Leave a few frames around the edges, where the recurrent state is still settling.
    assert probs[: lead_frames - 2].max() < 0.1
    assert probs[lead_frames + speech_frames + 4 :].max() < 0.1
    assert sequential_probs(vad, silence(2000)).max() < 0.1
    assert sequential_probs(vad, white_noise(2000, rms=0.1, seed=2)).max() < 0.3


@pytest.fixture(scope="module")
def alone(vad: SileroVad, streams: list[Audio]) -> Audio:
    """Each stream's probabilities computed alone: (streams, frames)."""
    return np.stack([sequential_probs(vad, audio) for audio in streams])


# On CPU the batched VAD is bit-for-bit batch-invariant in practice (see SileroVad); the tests
# hold it to 1e-6, well inside the 1e-5 the design asks for.
BATCH_TOLERANCE = 1e-6


def test_batched_results_equal_each_stream_alone(
    vad: SileroVad, streams: list[Audio], alone: Audio
) -> None:
    states = [vad.new_state() for _ in streams]
    framed = np.stack([frames_of(audio) for audio in streams])  # (streams, frames, FRAME)
    batched = np.stack(
        [vad.speech_probs(framed[:, t, :], states) for t in range(framed.shape[1])], axis=1
    )
    np.testing.assert_allclose(batched, alone, rtol=0, atol=BATCH_TOLERANCE)
    assert [state.frames_processed for state in states] == [framed.shape[1]] * len(streams)


def test_streams_may_join_leave_and_reorder_between_calls(
    vad: SileroVad, streams: list[Audio], alone: Audio
) -> None:
    framed = [frames_of(audio) for audio in streams]
    states = [vad.new_state() for _ in streams]
    cursors = [0] * len(streams)
    results: list[list[float]] = [[] for _ in streams]
    rng = np.random.default_rng(3)
    while any(cursor < len(frames) for cursor, frames in zip(cursors, framed, strict=True)):
        due = [i for i, frames in enumerate(framed) if cursors[i] < len(frames)]
        # A random subset in a random order: membership and position change every call.
        chosen = [i for i in rng.permutation(due) if rng.random() < 0.6] or due[:1]
        batch = np.stack([framed[i][cursors[i]] for i in chosen])
        chosen_states: Sequence[VadStreamState] = [states[i] for i in chosen]
        for i, prob in zip(chosen, vad.speech_probs(batch, chosen_states), strict=True):
            results[i].append(float(prob))
            cursors[i] += 1
    np.testing.assert_allclose(np.array(results), alone, rtol=0, atol=BATCH_TOLERANCE)


def test_matches_the_packaged_wrapper(vad: SileroVad, streams: list[Audio], alone: Audio) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.load is deprecated
        wrapper = torch.jit.load(str(silero_jit_path()))
    wrapper.eval()
    audio = streams[0]
    with torch.inference_mode():
        expected = [
            float(wrapper(torch.from_numpy(frame.copy()), RATE_HZ)) for frame in frames_of(audio)
        ]
    # The wrapper runs its recurrence in float32, ours in float64: their rounding differs by
    # ~1e-7 per frame, which the steep part of the sigmoid (speech onsets) turns into ~1e-5.
    np.testing.assert_allclose(alone[0], expected, rtol=0, atol=1e-4)


def test_empty_batch(vad: SileroVad) -> None:
    as_protocol: Vad[VadStreamState] = vad  # mypy checks SileroVad against the protocol
    assert as_protocol.speech_probs(np.zeros((0, FRAME), dtype=np.float32), []).shape == (0,)


def test_a_state_exported_by_another_shape_of_vad_is_refused(vad: SileroVad) -> None:
    # A checkpoint written by another model version: taken as is, it would fail the whole
    # batch at its first frame (torch.stack of unequal states).
    lstm, context = vad.export_state(vad.new_state())
    assert vad.import_state((lstm, context)) is not None
    with pytest.raises(ValueError, match="this VAD has"):
        vad.import_state((lstm + lstm, context))
    with pytest.raises(ValueError, match="this VAD has"):
        vad.import_state((lstm, context[:-1]))


def test_missing_weights_are_a_model_load_error(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError):
        SileroVad(jit_path=tmp_path / "missing.jit")
    (tmp_path / "garbage.jit").write_bytes(b"not a model")
    with pytest.raises(ModelLoadError):
        SileroVad(jit_path=tmp_path / "garbage.jit")


def test_loading_keeps_the_thread_count_and_skips_the_silero_package() -> None:
    script = (
        "import sys, torch\n"
        "torch.set_num_threads(3)\n"
        "from pipeline.asr.vad import SileroVad\n"
        "SileroVad()\n"
        "assert torch.get_num_threads() == 3, torch.get_num_threads()\n"
        "assert 'silero_vad' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-W", "error", "-c", script], check=True)


def endpoint_decisions(vad: SileroVad, audio: Audio) -> list[EndpointDecision]:
    """VAD → speech gate → endpoint detector, frame by frame, as a session would run them."""
    state, gate = vad.new_state(), SpeechGate()
    detector = EndpointDetector(EndpointConfig(speech_pad_ms=gate.config.speech_pad_ms))
    decisions: list[EndpointDecision] = []
    for frame in frames_of(audio):
        prob = float(vad.speech_probs(frame[None, :], [state])[0])
        for span in gate.push(prob):
            decisions.extend(detector.push(span.is_speech, span.duration_samples))
    for span in gate.flush():
        decisions.extend(detector.push(span.is_speech, span.duration_samples))
    last = detector.end_of_stream()
    return decisions + ([last] if last is not None else [])


@pytest.mark.parametrize(("pause_ms", "utterances"), [(300, 1), (1000, 2)])
def test_pause_splits_an_utterance_only_when_long(
    vad: SileroVad, speech: Audio, pause_ms: int, utterances: int
) -> None:
    audio = np.concatenate([silence(500), speech, silence(pause_ms), speech, silence(1500)])
    decisions = endpoint_decisions(vad, audio)
    assert [d.discarded for d in decisions] == [False] * utterances
    assert decisions[-1].reason == EndpointReason.SILENCE
    # Each utterance covers the speech it should, give or take the VAD's edges and the pad.
    tolerance = 200 * RATE_HZ // 1000
    assert abs(decisions[0].start_samples - 500 * RATE_HZ // 1000) < tolerance
    speech_end = (500 + 2 * len(speech) * 1000 // RATE_HZ + pause_ms) * RATE_HZ // 1000
    assert abs(decisions[-1].end_samples - speech_end) < tolerance


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize(
    ("fixture", "utterances"),
    [("pauses/pause_300ms_nosplit.flac", 1), ("pauses/pause_1000ms_split.flac", 2)],
)
def test_project_pause_fixtures(vad: SileroVad, fixture: str, utterances: int) -> None:
    import soundfile

    path = FIXTURES / fixture
    audio, rate_hz = soundfile.read(str(path), dtype="float32")
    assert rate_hz == RATE_HZ
    decisions = endpoint_decisions(vad, audio)
    assert [(d.reason, d.discarded) for d in decisions] == [
        (EndpointReason.SILENCE, False)
    ] * utterances


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu(vad: SileroVad) -> None:
    # A committed clip, not espeak-ng: the GPU machine that runs this has no espeak-ng.
    import soundfile

    speech, rate_hz = soundfile.read(
        str(FIXTURES / "utterances/utt01_account.flac"), dtype="float32"
    )
    assert rate_hz == RATE_HZ
    streams = five_streams(speech)
    cuda_vad = SileroVad(device="cuda")
    framed = np.stack([frames_of(audio) for audio in streams])
    cpu_states = [vad.new_state() for _ in streams]
    cuda_states = [cuda_vad.new_state() for _ in streams]
    for t in range(framed.shape[1]):
        np.testing.assert_allclose(
            cuda_vad.speech_probs(framed[:, t, :], cuda_states),
            vad.speech_probs(framed[:, t, :], cpu_states),
            rtol=0,
            atol=1e-4,
        )
